//! Verifying the programs: each on a thread of its own, its verified instructions and load time
//! kept (and printed with `AET_DEBUG_LOAD_TIMES`), a refusal made a paragraph.

use aya::programs::{RawTracePoint, TracePoint};

use super::{Attach, LoadError, PROGRAMS, features, refusal};

/// Set (to anything): each program's load (verification) time and the kernel's count of the
/// instructions it verified are printed as it loads (docs/performance.md's table), and the time
/// of each phase of the load. Set to `sequential`, the programs load one at a time (each time is
/// then its own, not a share of the CPUs).
pub const LOAD_TIMES_ENV: &str = "AET_DEBUG_LOAD_TIMES";

/// With [`LOAD_TIMES_ENV`] set, the time each phase of a load took, printed as it ends.
pub(super) struct Phases(Option<std::cell::Cell<std::time::Instant>>);

impl Phases {
    pub(super) fn new() -> Self {
        Self(
            std::env::var_os(LOAD_TIMES_ENV)
                .map(|_| std::cell::Cell::new(std::time::Instant::now())),
        )
    }

    pub(super) fn done(&self, what: &str) {
        if let Some(t) = &self.0 {
            let now = std::time::Instant::now();
            eprintln!(
                "aet: load phase: {what} in {:.1} ms",
                (now - t.get()).as_secs_f64() * 1e3
            );
            t.set(now);
        }
    }
}

/// Loads (verifies) every program, each on a thread of its own: the kernel verifies them in
/// parallel, so the start takes about as long as the largest program (`sys_exit`) instead of the
/// sum of all of them.
/// The witnesses are loaded only where they are attached (`witnessed`): each loaded program is
/// an fd of aet's, and the table a command starts with is sized to aet's highest fd.
pub(super) fn load_all(
    ebpf: &mut aya::Ebpf,
    variant: features::Variant,
    witnessed: bool,
) -> Result<Vec<Loaded>, LoadError> {
    let wanted = |a: &Attach| witnessed || !matches!(a, Attach::Witness(..));
    let mut programs: Vec<(&'static str, Attach, &mut aya::programs::Program)> = Vec::new();
    for (name, prog) in ebpf.programs_mut() {
        if let Some(&(name, attach)) = PROGRAMS.iter().find(|(n, a)| *n == name && wanted(a)) {
            programs.push((name, attach, prog));
        }
    }
    programs.sort_by_key(|(name, ..)| PROGRAMS.iter().position(|(n, _)| n == name));
    for &(name, a) in PROGRAMS {
        if wanted(&a) && !programs.iter().any(|(n, ..)| *n == name) {
            return Err(LoadError::MissingProgram(name));
        }
    }
    let report = std::env::var_os(LOAD_TIMES_ENV).is_some();
    // `sequential`: one program at a time, so that each time is its own.
    let sequential = std::env::var_os(LOAD_TIMES_ENV).is_some_and(|v| v == "sequential");
    std::thread::scope(|s| {
        let loads: Vec<_> = programs
            .into_iter()
            .map(|(name, attach, prog)| {
                let h = s.spawn(move || {
                    let fail = |source| refused(name, variant, source);
                    let begun = std::time::Instant::now();
                    match attach {
                        Attach::TracePoint(..) | Attach::Exit(_) => {
                            let p: &mut TracePoint = (&mut *prog).try_into().map_err(fail)?;
                            p.load().map_err(fail)?;
                        }
                        Attach::RawTracePoint(_) | Attach::Witness(..) => {
                            let p: &mut RawTracePoint = (&mut *prog).try_into().map_err(fail)?;
                            p.load().map_err(fail)?;
                        }
                    }
                    let loaded = Loaded {
                        name,
                        verified: prog
                            .info()
                            .ok()
                            .and_then(|i| i.verified_instruction_count()),
                        ms: begun.elapsed().as_secs_f64() * 1e3,
                    };
                    if report {
                        eprintln!(
                            "aet: loaded {name} in {:.1} ms ({} instructions verified)",
                            loaded.ms,
                            loaded.verified.map_or("?".into(), |n| n.to_string())
                        );
                    }
                    Ok(loaded)
                });
                if sequential {
                    while !h.is_finished() {
                        std::thread::yield_now();
                    }
                }
                h
            })
            .collect();
        // The first failure in PROGRAMS order, as a sequential load would report it.
        let mut first = Ok(Vec::with_capacity(loads.len()));
        for l in loads {
            let r = l.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            match (&mut first, r) {
                (Ok(all), Ok(one)) => all.push(one),
                (Ok(_), Err(e)) => first = Err(e),
                (Err(_), _) => {}
            }
        }
        first
    })
}

/// One program as the kernel took it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Loaded {
    pub name: &'static str,
    /// The kernel's count of the instructions its verifier processed (`verified_insns`, 5.16+).
    pub verified: Option<u32>,
    /// How long the load (the verification) took, in ms.
    pub ms: f64,
}

/// The most instructions the verifier processes for one program.
pub const VERIFIER_LIMIT: u32 = 1_000_000;

/// A program's load failure: the verifier's refusal as a paragraph (its full log in a file), any
/// other failure as it is.
fn refused(
    name: &'static str,
    variant: features::Variant,
    source: aya::programs::ProgramError,
) -> LoadError {
    match source {
        aya::programs::ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let log = verifier_log.to_string();
            let uts = nix::sys::utsname::uname().ok();
            let field = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
                uts.as_ref()
                    .map(|u| f(u).to_string_lossy().into_owned())
                    .unwrap_or_default()
            };
            LoadError::Refused(Box::new(refusal::Refusal {
                program: name,
                error: io_error.to_string(),
                release: field(nix::sys::utsname::UtsName::release),
                build: field(nix::sys::utsname::UtsName::version),
                variant: variant.describe(),
                last_lines: refusal::last_lines(&log),
                log: refusal::write_log(name, &log),
            }))
        }
        source => LoadError::Program {
            name,
            action: "load",
            source,
        },
    }
}
