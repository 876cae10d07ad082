//! The sandbox: a deny-by-default bubblewrap view built from a [`spec::SandboxSpec`], verified
//! from inside by aet's stage before the agent's command runs.
//!
//! - [`spec`]: the TOML spec and its checks;
//! - [`build`]: the bwrap arguments and the stage's plan;
//! - [`stage`]: what runs inside first (verify, drop privileges, exec);
//! - [`env`]: the agent's environment (credentials never pass unless named);
//! - [`plan`]: what travels between aet and its stage.

pub mod barrier;
pub mod build;
pub mod decoy;
pub mod env;
pub mod identity;
pub mod repo;
pub mod runtime;
pub mod spec;
pub mod stage;

use std::{
    ffi::OsString,
    io::{self, Seek as _, Write as _},
    os::{
        fd::{AsRawFd as _, OwnedFd, RawFd},
        unix::ffi::OsStrExt as _,
    },
    path::{Path, PathBuf},
};

use aet_ledger::plan::{Identity, Mode, StageReport};
use build::{BuildError, BuildOptions, Built, StageFiles};
use spec::{SandboxSpec, SpecError};

pub use runtime::{RUNTIME_DIR, runtime_dir};

/// Why a sandbox could not be prepared or did not come up as specified.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(
        "the sandbox needs root: bwrap builds the view as root and aet's stage drops every \
         privilege before the command starts"
    )]
    NotRoot,
    #[error("bwrap (bubblewrap) is not installed or not on PATH (`cargo xtask setup` installs it)")]
    NoBwrap,
    #[error("cannot prepare the sandbox: {0}")]
    Io(#[from] io::Error),
    #[error(
        "the sandbox was not set up: bwrap failed before aet's stage could check the view (see \
         bwrap's message above)"
    )]
    NoReport,
    #[error("the stage's report {path} is unreadable: {message}")]
    BadReport { path: PathBuf, message: String },
}

/// What to run in the sandbox, and as whom.
#[derive(Clone, Debug)]
pub struct PrepareOptions {
    pub command: Vec<OsString>,
    pub env_prefix: Option<String>,
    pub mode: Mode,
    pub identity: Option<Identity>,
    pub env_start: env::Start,
    /// The agent's environment when already decided (an agent identity's); else it is made from
    /// `env_start` and the spec.
    pub env: Option<env::Env>,
    /// Writable binds added to the spec's (an agent identity's home).
    pub extra_rw: Vec<PathBuf>,
    /// The barrier the stage builds (`--mode shadow|enforce`).
    pub barrier: Option<aet_ledger::barrier::BarrierPlan>,
    /// The stage hands its view over before the command starts (the run's watched files are
    /// fingerprinted in it) and waits for aet's go.
    pub hold: bool,
}

/// A sandbox ready to start: the bwrap arguments (handed over with `bwrap --args FD`, so the
/// view, including where the masked material is, appears in no process's command line), the
/// agent's environment, and the private directory the stage reports into.
pub struct Prepared {
    pub spec_path: PathBuf,
    pub spec: SandboxSpec,
    pub built: Built,
    pub env: env::Env,
    bwrap: PathBuf,
    args_fd: OwnedFd,
    stage_dir: tempfile::TempDir,
    /// Sanitized copies of task repositories' git directories, for the run's life.
    _repo_copies: Vec<tempfile::TempDir>,
    /// The decoys planted, with their tokens (`aet.decoys`), and the directory their files are
    /// bound from, for the run's life.
    pub decoys: Vec<decoy::Decoy>,
    _decoy_dir: tempfile::TempDir,
    /// The socket the stage hands its view over on (aet's end, taken by the run), and the
    /// stage's end, which bwrap inherits.
    hold: Option<(Option<std::os::unix::net::UnixStream>, OwnedFd)>,
}

/// Finds a program on PATH.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

impl Prepared {
    /// Loads and checks the spec, builds the view, and prepares what bwrap needs.
    pub fn new(spec_path: &Path, opts: PrepareOptions) -> Result<Self, SandboxError> {
        let spec = SandboxSpec::load(spec_path)?;
        Self::with_spec(spec_path, spec, opts)
    }

    /// [`Prepared::new`] for a spec already loaded.
    pub fn with_spec(
        spec_path: &Path,
        mut spec: SandboxSpec,
        opts: PrepareOptions,
    ) -> Result<Self, SandboxError> {
        if !opts.extra_rw.is_empty() {
            spec.rw_binds.extend(opts.extra_rw.iter().cloned());
            spec.check().map_err(|problems| SpecError::Invalid {
                path: spec_path.to_owned(),
                problems,
            })?;
        }
        if !nix::unistd::geteuid().is_root() {
            return Err(SandboxError::NotRoot);
        }
        let bwrap = find_on_path("bwrap").ok_or(SandboxError::NoBwrap)?;
        build::ensure_empty_file()?;
        let stage_dir = tempfile::Builder::new()
            .prefix("stage-")
            .tempdir_in(runtime_dir()?)?;
        let aet = std::env::current_exe()?;
        // Sanitized repositories: a git directory holding only base's history, made now and
        // bound at the repository's .git (the stage checks it from inside like the others).
        let mut copies = Vec::new();
        let mut made = Vec::new();
        for (i, r) in spec.repo.iter().enumerate() {
            if r.history != spec::History::Sanitize {
                continue;
            }
            let fail = |message: String| {
                SandboxError::from(build::BuildError::Repo {
                    entry: format!("repo[{i}] = {:?}", r.path),
                    message,
                })
            };
            let dir = tempfile::Builder::new()
                .prefix("repo-")
                .tempdir_in(runtime_dir()?)?;
            let base = repo::resolve(&r.path, &r.base).map_err(fail)?;
            let gitdir = repo::sanitize(&r.path, &base, dir.path()).map_err(fail)?;
            made.push((i, r.path.clone(), gitdir, base));
            // The copy's parent is private to root; the agent reaches the copy only through
            // its bind.
            copies.push(dir);
        }
        // Decoys: written with this run's tokens into a directory private to root, bound
        // read-only in the view (their sources are reached only through the binds); a git ref's
        // commit into its repository's copy.
        let decoy_dir = tempfile::Builder::new()
            .prefix("decoys-")
            .tempdir_in(runtime_dir()?)?;
        let in_copies: Vec<decoy::RepoCopy<'_>> = made
            .iter()
            .map(|(_, path, gitdir, base)| decoy::RepoCopy { path, gitdir, base })
            .collect();
        let planted = decoy::plant(&spec.decoy, decoy_dir.path(), &in_copies).map_err(
            |(entry, message)| SandboxError::from(build::BuildError::Decoy { entry, message }),
        )?;
        let mut repo_copies = Vec::new();
        for (i, path, gitdir, _) in made {
            if let Some(id) = &opts.identity {
                repo::hand_over(&gitdir, id.uid, id.gid).map_err(|e| {
                    SandboxError::from(build::BuildError::Repo {
                        entry: format!("repo[{i}] = {path:?}"),
                        message: format!("cannot hand the copy over: {e}"),
                    })
                })?;
            }
            let decoys = planted
                .iter()
                .filter_map(|p| p.repo.as_ref())
                .filter(|(p, _)| *p == path)
                .map(|(_, d)| d.clone())
                .collect();
            repo_copies.push(build::RepoCopy {
                path,
                gitdir,
                decoys,
            });
        }
        let decoy_binds = planted
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let dst = p.record.path.as_ref()?;
                Some((
                    format!("decoy[{i}] = {dst:?}"),
                    PathBuf::from(dst),
                    p.source.clone()?,
                ))
            })
            .collect();
        let mut built = build::build(
            &spec,
            &BuildOptions {
                stage: Some(StageFiles::new(aet, stage_dir.path().to_owned())),
                command: opts.command,
                env_prefix: opts.env_prefix,
                mode: opts.mode,
                identity: opts.identity,
                repo_copies,
                decoys: decoy_binds,
            },
        )?;
        let mut env = match opts.env {
            Some(e) => e,
            None => env::EnvPolicy {
                start: opts.env_start,
                pass: spec.pass_env.clone(),
                unset: spec.unsetenv.clone(),
                set: spec.setenv.clone(),
            }
            .apply(std::env::vars_os()),
        };
        for (var, value) in planted.iter().filter_map(|p| p.env.as_ref()) {
            env.vars.retain(|(x, _)| x.as_bytes() != var.as_bytes());
            env.vars.push((var.into(), value.into()));
        }
        let proxy = spec.network.hosts().is_some();
        if proxy {
            // The command's way out: aet's proxy on the sandbox's loopback.
            for (k, v) in aet_proxy::env() {
                env.vars.retain(|(x, _)| x.as_bytes() != k.as_bytes());
                env.vars.push((k.into(), v.into()));
            }
        }
        let args_fd = args_memfd(&built.args)?;
        // The stage hands its view over when the watched files are fingerprinted in it, and
        // when aet's proxy is started in its network namespace.
        let hold = match (opts.hold || proxy, built.plan.is_some()) {
            (true, true) => {
                let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
                Some((Some(ours), OwnedFd::from(theirs)))
            }
            _ => None,
        };
        if let Some(plan) = built.plan.as_mut() {
            plan.barrier = opts.barrier;
            plan.hold = hold.as_ref().map(|(_, t)| t.as_raw_fd());
            std::fs::write(
                stage_dir.path().join(build::PLAN_FILE),
                serde_json::to_vec(plan).expect("a plan serialises"),
            )?;
        }
        Ok(Self {
            spec_path: spec_path.to_owned(),
            spec,
            built,
            env,
            bwrap,
            args_fd,
            stage_dir,
            _repo_copies: copies,
            decoys: planted.into_iter().map(|p| p.record).collect(),
            _decoy_dir: decoy_dir,
            hold,
        })
    }

    /// What the run record keeps of the decoys (`aet.decoys`), when the spec has any.
    pub fn decoy_record(&self) -> Option<decoy::DecoyRecord> {
        (!self.decoys.is_empty()).then(|| decoy::DecoyRecord {
            version: aet_ledger::decoys::DECOY_RECORD_VERSION,
            decoys: self.decoys.clone(),
        })
    }

    /// aet's end of the socket the stage hands its view over on (once).
    pub fn take_hold(&mut self) -> Option<std::os::unix::net::UnixStream> {
        self.hold.as_mut().and_then(|(ours, _)| ours.take())
    }

    /// The bwrap command (`bwrap --args FD -- COMMAND`) with the agent's environment. The fd is
    /// close-on-exec here: the child must clear that flag ([`Prepared::args_fd`]).
    pub fn command(&self) -> std::process::Command {
        let mut c = std::process::Command::new(&self.bwrap);
        c.arg("--args")
            .arg(self.args_fd.as_raw_fd().to_string())
            .arg("--")
            .args(&self.built.command)
            .env_clear()
            .envs(self.env.vars.iter().map(|(k, v)| (k, v)));
        c
    }

    /// The fds bwrap must inherit: its arguments', and the stage's end of the hold socket.
    pub fn inherit_fds(&self) -> Vec<RawFd> {
        let mut v = vec![self.args_fd.as_raw_fd()];
        v.extend(self.hold.as_ref().map(|(_, t)| t.as_raw_fd()));
        v
    }

    /// Reads the stage's report (after bwrap started, or ended).
    pub fn report(&self) -> Result<StageReport, SandboxError> {
        read_report(self.stage_dir.path())
    }

    /// What the run record keeps of the sandbox: the spec, the exact arguments, the variable
    /// names (never values), and the stage's report.
    pub fn record(&self, report: Option<&StageReport>) -> aet_ledger::metadata::SandboxRecord {
        aet_ledger::metadata::SandboxRecord {
            spec: self.spec_path.clone(),
            bwrap_argv: self
                .built
                .argv()
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            env: self.env.names(),
            env_removed: self.env.removed.clone(),
            verified: report.is_some_and(|r| r.ok),
            report: report.cloned(),
            network: aet_ledger::metadata::NetworkRecord {
                mode: match &self.spec.network {
                    spec::Network::Host => "host",
                    spec::Network::None => "none",
                    spec::Network::Hosts(_) => "hosts",
                }
                .into(),
                hosts: self
                    .spec
                    .network
                    .hosts()
                    .map(|h| h.hosts.clone())
                    .unwrap_or_default(),
                upstream_hosts: self
                    .spec
                    .repo
                    .iter()
                    .filter_map(|r| r.upstream.as_deref())
                    .filter_map(aet_ledger::hosts::upstream_host)
                    .collect(),
            },
        }
    }
}

/// Reads the report the stage wrote in its directory; none (or an empty one) means the stage
/// never got to check anything.
pub fn read_report(stage_dir: &Path) -> Result<StageReport, SandboxError> {
    let path = stage_dir.join(build::REPORT_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(SandboxError::NoReport),
        Err(e) => return Err(e.into()),
    };
    if text.trim().is_empty() {
        return Err(SandboxError::NoReport);
    }
    serde_json::from_str(&text).map_err(|e| SandboxError::BadReport {
        path,
        message: e.to_string(),
    })
}

/// Clears close-on-exec on `fd`, in a child between fork and exec.
///
/// # Safety
/// Only async-signal-safe calls: fit for `pre_exec`.
pub unsafe fn inherit_fd(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl is async-signal-safe.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A memfd holding NUL-terminated arguments, positioned at its start.
fn args_memfd(args: &[OsString]) -> io::Result<OwnedFd> {
    let fd =
        nix::sys::memfd::memfd_create(c"aet-bwrap-args", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)?;
    let mut f = std::fs::File::from(fd);
    for a in args {
        f.write_all(a.as_bytes())?;
        f.write_all(b"\0")?;
    }
    f.rewind()?;
    Ok(f.into())
}

/// Writes arguments one a line, escaping what would break the lines (`\n`, `\\`, bytes that are
/// not UTF-8 as `\xNN`); `--null` output is exact instead.
pub fn format_args_lines(args: &[OsString]) -> String {
    let mut out = String::new();
    for a in args {
        for chunk in a.as_bytes().utf8_chunks() {
            for ch in chunk.valid().chars() {
                match ch {
                    '\n' => out.push_str("\\n"),
                    '\\' => out.push_str("\\\\"),
                    c => out.push(c),
                }
            }
            for b in chunk.invalid() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod floors {
    /// The floors of this crate's modules, from the bottom up (what the crate root defines is
    /// below them all).
    const FLOORS: &[&[&str]] = &[
        &["barrier", "decoy", "env", "repo", "runtime"],
        &["spec", "identity"],
        &["build"],
        &["stage"],
    ];

    #[test]
    fn layers_point_one_way() {
        aet_checks::layers::assert_floors(env!("CARGO_MANIFEST_DIR"), FLOORS);
    }
}
