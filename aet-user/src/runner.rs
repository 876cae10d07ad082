//! `aet run` and `aet monitor`: the life of a monitored run.
//!
//! `run`: create the run's cgroup, attach the monitor scoped to it, start the command inside it
//! (the child moves itself into the cgroup before it execs, so the command's first instruction is
//! already watched), wait for it, give the rest of the run `grace` to finish, kill what is left,
//! drain every record, finish the ledger. It never starts the command without a monitor.
//!
//! `monitor`: the same monitor on work something else started, until the target is gone or a
//! signal asks to stop.

use std::{
    ffi::OsString,
    io,
    os::{
        fd::{AsRawFd as _, RawFd},
        unix::process::ExitStatusExt as _,
    },
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use tokio::signal::unix::{SignalKind, signal};

use crate::{
    kernel::{
        cgroup::{self, CgroupError, RunCgroup},
        procfs,
    },
    ledger::{
        record::{Incomplete, MetaMap, ProcessRef, Reasons},
        schema::meta,
    },
    loader::Scope,
    monitor::{MonitorError, MonitorReport},
    session::{Mode, Session, SessionError},
};

/// Errors of `run` and `monitor`.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The run can no longer be recorded (its ledger cannot be written: disk full, file made
    /// immutable; or its daemon is stopped or silent): the run was stopped.
    #[error("the run can no longer be recorded: {0}")]
    Unrecorded(String),
    /// The output directory could not be prepared.
    #[error("cannot use output directory {path}: {source}")]
    OutDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The ledger already exists.
    #[error("{0} already exists; aet never overwrites a ledger (choose another --out)")]
    LedgerExists(PathBuf),
    /// cgroup set-up or teardown failed.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// The monitor failed.
    #[error(transparent)]
    Monitor(#[from] MonitorError),
    /// The monitor (standalone or the daemon) failed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The daemon went away while the run was going on.
    #[error(
        "the aet daemon went away during the run: the run was killed; its ledger {0} is \
         unfinished (readable, and incomplete)"
    )]
    DaemonGone(PathBuf),
    /// Waiting for the command failed.
    #[error("waiting for the command failed: {0}")]
    Wait(#[source] io::Error),
    /// Signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] io::Error),
    /// The monitor target does not exist.
    #[error("monitor target {0} does not exist")]
    NoTarget(String),
    /// The cgroup guard could not be started.
    #[error("cannot start the cgroup guard: {0}")]
    Guard(#[source] io::Error),
    /// The command is empty.
    #[error("no command given")]
    NoCommand,
    /// The target's processes could not be tracked.
    #[error("cannot track the target's processes: {0}")]
    Track(#[source] io::Error),
}

/// Options of `aet run`.
pub struct RunOptions {
    pub out: PathBuf,
    pub command: Vec<OsString>,
    pub grace: Duration,
    pub ringbuf_bytes: u32,
    pub on_overload: crate::monitor::overload::OnOverload,
    pub quiet: bool,
    /// How the command starts: in a sandbox (bwrap starts inside the run's cgroup, so its
    /// set-up is in the ledger too), as an agent identity, or as it is.
    pub launch: crate::launch::Launch,
    /// Metadata written with the ledger's head (e.g. protected files' identities at start).
    pub head: MetaMap,
    /// Where the monitor comes from (the daemon, or programs loaded for this run).
    pub mode: Mode,
    /// The live status on stderr while the command runs.
    pub progress: crate::progress::ProgressMode,
}

/// The variable that gives the command its run's cgroup, relative to the cgroup v2 root (the
/// form `docker run --cgroup-parent` and `podman run --cgroup-parent` take).
pub const CGROUP_ENV: &str = "AET_CGROUP";

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandEnd {
    /// It ran: its shell-style status (128+N for signal N; 127 not found; 126 not executable).
    Exited(i32),
    /// aet's stage found the agent's environment not as specified: the command did not run.
    Refused,
}

/// How a run ended.
#[derive(Debug)]
pub struct RunOutcome {
    pub end: CommandEnd,
    /// Processes killed at teardown.
    pub killed: Vec<ProcessRef>,
    pub report: MonitorReport,
}

/// How often a run checks that it is still being recorded (its ledger written, its daemon
/// answering).
const LEDGER_CHECK: Duration = Duration::from_millis(250);

/// The run directory made, and its ledger's path, absolute: a daemon (whose working directory
/// is not the client's) writes where the client said.
fn prepare_out(out: &Path) -> Result<PathBuf, RunError> {
    std::fs::create_dir_all(out).map_err(|source| RunError::OutDir {
        path: out.to_owned(),
        source,
    })?;
    let out = std::path::absolute(out).map_err(|source| RunError::OutDir {
        path: out.to_owned(),
        source,
    })?;
    let ledger = out.join(crate::ledger::LEDGER_FILE);
    if ledger.symlink_metadata().is_ok() {
        return Err(RunError::LedgerExists(ledger));
    }
    Ok(ledger)
}

fn note(quiet: bool, msg: impl std::fmt::Display) {
    if !quiet {
        eprintln!("aet: {msg}");
    }
}

/// Converts a wait status to a shell-style exit status.
pub fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 255,
    }
}

fn command_text(cmd: &[OsString]) -> Vec<String> {
    cmd.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// Fault injection for tests: `AET_DEBUG_FAIL_AT=POINT` makes aet fail at that point of a run
/// (`signals`, `cgroup`, `wait`, `teardown`, `track`), so that each early error path is shown to
/// finish the ledger. Never set it for a real run.
pub const FAIL_AT_ENV: &str = "AET_DEBUG_FAIL_AT";

fn fault(point: &str) -> io::Result<()> {
    match std::env::var(FAIL_AT_ENV) {
        Ok(p) if p == point => Err(io::Error::other(format!(
            "fault injected at {point} ({FAIL_AT_ENV})"
        ))),
        _ => Ok(()),
    }
}

/// The fds the command starts with: aet's stdin, stdout and stderr (every other is closed in
/// the child, see [`child_fd_hygiene`]), with what they name.
fn inherited_fds() -> Vec<crate::ledger::record::InheritedFd> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    (0..3)
        .filter_map(|fd: i32| {
            let link = format!("/proc/self/fd/{fd}");
            let m = std::fs::metadata(&link).ok()?;
            let t = m.file_type();
            let kind = if t.is_file() {
                "file"
            } else if t.is_dir() {
                "directory"
            } else if t.is_fifo() {
                "pipe"
            } else if t.is_socket() {
                "socket"
            } else if t.is_char_device() {
                "char"
            } else if t.is_block_device() {
                "block"
            } else {
                "other"
            };
            let path = std::fs::read_link(&link)
                .ok()
                .filter(|p| p.is_absolute())
                .map(crate::stage::PPath);
            Some(crate::ledger::record::InheritedFd {
                fd,
                dev: m.dev(),
                ino: m.ino(),
                kind: kind.into(),
                path,
            })
        })
        .collect()
}

/// aet's fds that the command would inherit (above stderr, not close-on-exec), as ranges for
/// `close_range`: a harness's stray fds, which must never leak into the agent. Read in the
/// parent, where reading a directory is allowed; fds aet opens meanwhile are close-on-exec (Rust
/// opens every fd that way), so the list cannot miss one.
fn inherited_fd_ranges() -> Vec<(libc::c_uint, libc::c_uint)> {
    let mut fds: Vec<libc::c_uint> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .filter(|&fd: &libc::c_uint| fd > 2)
                // SAFETY: F_GETFD reads a flag; a closed fd (the directory's own) gives -1.
                .filter(|&fd| unsafe { libc::fcntl(fd as RawFd, libc::F_GETFD) } == 0)
                .collect()
        })
        .unwrap_or_default();
    fds.sort_unstable();
    let mut ranges: Vec<(libc::c_uint, libc::c_uint)> = Vec::new();
    for fd in fds {
        match ranges.last_mut() {
            Some((_, last)) if *last + 1 == fd => *last = fd,
            _ => ranges.push((fd, fd)),
        }
    }
    ranges
}

/// In the command's child, before exec: closes the inherited fds `strays` (see
/// [`inherited_fd_ranges`]; the command starts with stdio only), then gives the child an fd table
/// sized to what is left.
///
/// The table a forked child gets is as large as its parent's highest open fd (one stray fd 251
/// of a harness is enough for 256 slots) and never shrinks, not even at exec. The monitor reaches
/// a file in the kernel's embedded 64-slot array with checked loads, and in a larger table only
/// with helper reads, which costs the command about 300 ns more per recorded syscall.
/// `unshare(CLONE_FILES)` copies the table, sized to the fds still open, but only when it is
/// shared: so it is shared for a moment with a helper process that waits to be killed. The
/// helper is made before the child joins the run's cgroup, so the monitor does not see it.
///
/// Async-signal-safe: only close_range, getpid, clone, prctl, unshare, kill and waitpid.
fn child_fd_hygiene(strays: &[(libc::c_uint, libc::c_uint)]) {
    // SAFETY: plain syscalls on fds of this (forked, single-threaded) process. The helper
    // continues on its own copy of this stack (no CLONE_VM) and only calls pause(2).
    unsafe {
        for &(first, last) in strays {
            libc::syscall(libc::SYS_close_range, first, last, 0);
        }
        // No exit signal: the helper's death raises no SIGCHLD in a process whose handlers are
        // still aet's.
        let parent = libc::getpid();
        let helper = libc::syscall(
            libc::SYS_clone,
            libc::CLONE_FILES as libc::c_long,
            0,
            0,
            0,
            0,
        );
        if helper == 0 {
            // Never outlive this child, even if it is killed before it kills the helper.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::_exit(0);
            }
            loop {
                libc::pause();
            }
        }
        libc::unshare(libc::CLONE_FILES);
        if helper > 0 {
            libc::kill(helper as libc::pid_t, libc::SIGKILL);
            libc::waitpid(helper as libc::pid_t, std::ptr::null_mut(), libc::__WALL);
        }
    }
}

/// Processes of the tracked set (thread ids mapped to their processes) that still exist and are
/// not in `cg`.
fn tracked_outside(monitor: &mut Session, cg: Option<&Path>) -> Vec<u32> {
    let mut pids: Vec<u32> = monitor
        .tracked()
        .into_iter()
        .filter_map(|tid| {
            let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
            status
                .lines()
                .find_map(|l| l.strip_prefix("Tgid:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
        })
        .filter(|&pid| match cg {
            Some(cg) => cgroup::cgroup_of(pid).map(|p| p != cg).unwrap_or(true),
            None => true,
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// `aet run`. Once the monitor is attached, every path out of here finishes the ledger: an error
/// of aet's own stops the run (its processes are killed), is recorded as the reason the record
/// is incomplete, and is returned after the ledger is finished.
pub async fn run(opts: RunOptions) -> Result<RunOutcome, RunError> {
    if opts.command.is_empty() {
        return Err(RunError::NoCommand);
    }
    let ledger = prepare_out(&opts.out)?;
    // Whole seconds: ctimes are compared at that resolution.
    let run_started = std::time::SystemTime::now() - Duration::from_secs(1);
    let name = format!("run-{}-{}", std::process::id(), crate::util::now_ns());
    let cg = RunCgroup::create(&name)?;
    let guard = crate::guard::Guard::start(cg.path()).map_err(RunError::Guard)?;
    let (relative, level) = cgroup::relative(cg.path())?;
    let scope = Scope::Cgroup {
        path: cg.path().to_owned(),
        id: cg.id(),
        level,
    };
    let mut head = opts.head.clone();
    head.set_json(meta::COMMAND, &command_text(&opts.command));
    head.set_json(meta::INHERITED_FDS, &inherited_fds());
    let mut monitor = Session::start(
        &opts.mode,
        &scope,
        &ledger,
        head,
        true,
        opts.ringbuf_bytes,
        opts.on_overload,
    )?;
    note(
        opts.quiet,
        format_args!(
            "monitoring in {} -> {}{}",
            scope.describe(),
            ledger.display(),
            match monitor.daemon_pid() {
                Some(pid) => format!(" (aet daemon {pid})"),
                None => String::new(),
            }
        ),
    );

    let mut reasons = Reasons::new();
    let mut extra = MetaMap::new();
    let driven = drive(&opts, &cg, &relative, &mut monitor).await;
    let (status, killed) = match driven {
        Ok(d) => {
            if let Some(e) = d.kill_error {
                reasons.push(Incomplete::KillFailed { error: e });
            }
            (Ok(d.status), d.killed)
        }
        Err(e) => {
            // aet failed while the command ran: nothing of the run may go on unmonitored.
            eprintln!("aet: error: {e}; stopping the run");
            let _ = cg.kill_all();
            if monitor.failed() && monitor.mode() == "daemon" {
                // The daemon is gone, and the ledger with it: nothing more can be written.
                drop(monitor);
                drop(cg);
                guard.release();
                return Err(RunError::DaemonGone(ledger));
            }
            reasons.push(Incomplete::AetFailed {
                error: e.to_string(),
            });
            (Err(e), Vec::new())
        }
    };
    if monitor.failed() {
        reasons.push(Incomplete::ConsumerStopped);
    }
    let mut end = status
        .as_ref()
        .map_or(CommandEnd::Refused, |s| CommandEnd::Exited(*s));
    let stage = opts.launch.stage_report();
    match &stage {
        None => {}
        Some(Ok(r)) if r.ok => {
            if let Some(sb) = &opts.launch.sandbox {
                note(
                    opts.quiet,
                    format_args!(
                        "sandbox {} verified from inside: {} checks{}",
                        sb.spec_path.display(),
                        r.checks.len(),
                        if r.io_uring.is_some() {
                            "; io_uring closed (seccomp)"
                        } else {
                            ""
                        }
                    ),
                );
            }
            if let Some(p) = &r.privileges {
                note(opts.quiet, format_args!("the command ran as {p}"));
            }
            if let Some(b) = &r.barrier {
                note(
                    opts.quiet,
                    format_args!(
                        "barrier ({}): {} Landlock rules{}, {} file(s) left out, {} entries walked{}",
                        b.mode.name(),
                        b.rules.len(),
                        match &b.enforced {
                            Some(e) => format!(" {e} (ABI {})", b.abi),
                            None => " built, not applied".into(),
                        },
                        b.excluded.len(),
                        b.walked,
                        if b.scoped.is_empty() {
                            String::new()
                        } else {
                            format!("; {} scoped to the run", b.scoped.join(" and "))
                        }
                    ),
                );
                if !b.partial_dirs.is_empty() {
                    let shown: Vec<String> = b
                        .partial_dirs
                        .iter()
                        .take(3)
                        .map(|d| d.0.display().to_string())
                        .collect();
                    note(
                        opts.quiet,
                        format_args!(
                            "barrier: {} director(ies) hold a left-out file below them, so only their \
                             existing entries are granted (nothing new can be made in them): {}{}",
                            b.partial_dirs.len(),
                            shown.join(", "),
                            if b.partial_dirs.len() > 3 {
                                ", ..."
                            } else {
                                ""
                            }
                        ),
                    );
                }
            }
        }
        Some(Ok(r)) => {
            eprintln!(
                "aet: THE AGENT'S ENVIRONMENT WAS NOT AS SPECIFIED; the command was not run:"
            );
            for f in &r.failures {
                eprintln!("aet:   - {f}");
            }
            end = CommandEnd::Refused;
        }
        Some(Err(e)) => {
            eprintln!("aet: error: {e}");
            end = CommandEnd::Refused;
        }
    }
    let report_ok = stage.as_ref().and_then(|r| r.as_ref().ok());
    if let Some(b) = report_ok.and_then(|r| r.barrier.as_ref()) {
        extra.set_json(meta::BARRIER, b);
    }
    if let Some(sb) = &opts.launch.sandbox {
        extra.set_json(meta::SANDBOX, &sb.record(report_ok));
    }
    if let Some(id) = &opts.launch.identity {
        // No process of the agent's uid may outlive the run, anywhere on the machine.
        let (strays, reap_error) = match crate::identity::reap_uid(id.uid) {
            Ok(s) => (s, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        if !strays.is_empty() {
            let list: Vec<String> = strays
                .iter()
                .map(|k| format!("{} ({})", k.pid, k.comm))
                .collect();
            eprintln!(
                "aet: killed {} process(es) of uid {} found outside the run after teardown: {}",
                strays.len(),
                id.uid,
                list.join(", ")
            );
        }
        if let Some(e) = &reap_error {
            eprintln!("aet: error: {e}");
            reasons.push(Incomplete::ReapFailed { error: e.clone() });
        }
        let (files, total) = crate::identity::leftovers(
            id.uid,
            run_started,
            &[id.workspace.clone(), id.home.clone()],
            1000,
        );
        if total > 0 {
            note(
                opts.quiet,
                format_args!(
                    "the agent (uid {}) left {total} file(s) outside its workspace and home, e.g. {}",
                    id.uid,
                    files[0].display()
                ),
            );
        }
        extra.set_json(
            meta::IDENTITY,
            &id.record(report_ok, &strays, reap_error.as_deref(), &files, total),
        );
    }
    if let CommandEnd::Exited(code) = end {
        extra.set(meta::EXIT_STATUS, code);
    }
    extra.set_json(meta::KILLED, &killed);
    let report = monitor.stop(extra, reasons)?;
    drop(cg);
    guard.release();
    report_end(&report, opts.quiet);
    status?;
    Ok(RunOutcome {
        end,
        killed,
        report,
    })
}

/// What driving the command found.
struct Driven {
    /// The command's shell-style status.
    status: i32,
    killed: Vec<ProcessRef>,
    /// The run's processes could not all be killed.
    kill_error: Option<String>,
}

/// Starts the command in the run's cgroup, waits for it (forwarding signals), gives the rest of
/// the run `grace`, and kills what is left.
async fn drive(
    opts: &RunOptions,
    cg: &RunCgroup,
    relative: &Path,
    monitor: &mut Session,
) -> Result<Driven, RunError> {
    let program = &opts.command[0];
    let signals = |kind| {
        fault("signals")?;
        signal(kind)
    };
    let mut sigterm = signals(SignalKind::terminate()).map_err(RunError::Signals)?;
    let mut sigint = signals(SignalKind::interrupt()).map_err(RunError::Signals)?;
    let mut unrecorded: Option<String> = None;
    let mut sighup = signals(SignalKind::hangup()).map_err(RunError::Signals)?;

    fault("cgroup").map_err(|e| {
        RunError::Cgroup(CgroupError::Io {
            path: cg.path().to_owned(),
            source: e,
        })
    })?;
    let procs = cg.procs_file()?;
    let procs_fd = procs.as_raw_fd();
    let (mut std_cmd, keep_fd) = opts.launch.command();
    // The run's cgroup, as `--cgroup-parent` takes it: a container started with it is recorded
    // from its first exec.
    std_cmd.env(CGROUP_ENV, relative);
    let strays = inherited_fd_ranges();
    let mut cmd = tokio::process::Command::from(std_cmd);
    // SAFETY: the closure only calls async-signal-safe syscalls (write, fcntl, and those of
    // child_fd_hygiene).
    unsafe {
        cmd.pre_exec(move || {
            child_fd_hygiene(&strays);
            let r = libc::write(procs_fd, b"0".as_ptr().cast(), 1);
            if r != 1 {
                return Err(io::Error::last_os_error());
            }
            if let Some(fd) = keep_fd {
                crate::sandbox::inherit_fd(fd)?;
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let spawned = cmd.spawn();
    drop(procs);
    let status = match spawned {
        Err(e) => {
            let code = if e.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            eprintln!("aet: cannot run {}: {e}", program.to_string_lossy());
            code
        }
        Ok(mut child) => {
            let child_pid = child.id();
            let forward = |sig| {
                if let Some(pid) = child_pid {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
                }
            };
            let mut interrupts = 0;
            let lost = monitor.lost();
            tokio::pin!(lost);
            let mut reporter = crate::progress::Reporter::new(opts.progress);
            let mut ticks = tokio::time::interval(crate::progress::INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            // A run that can no longer be recorded (its ledger cannot be written, its daemon
            // is stopped or silent) stops at once: nothing the command did after would be.
            let mut health = tokio::time::interval(LEDGER_CHECK);
            health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let status = loop {
                tokio::select! {
                    _ = health.tick(), if unrecorded.is_none() => {
                        if let Some(e) = monitor.unrecorded() {
                            reporter.clear();
                            eprintln!(
                                "aet: error: the run can no longer be recorded ({e}): \
                                 killing it"
                            );
                            cg.kill_all()?;
                            unrecorded = Some(e);
                        }
                    }
                    _ = ticks.tick(), if reporter.active() => {
                        let status = crate::progress::Status::new(
                            started.elapsed(),
                            crate::progress::processes(cg.path()),
                            monitor.progress(),
                        );
                        reporter.show(&status);
                    }
                    () = &mut lost => {
                        let _ = cg.kill_all();
                        return Err(RunError::Session(SessionError::Daemon(
                            crate::daemon::DaemonError::Gone {
                                socket: match &opts.mode {
                                    Mode::Auto(s) | Mode::Daemon(s) => s.clone(),
                                    Mode::Standalone => PathBuf::new(),
                                },
                            },
                        )));
                    }
                    st = child.wait() => {
                        fault("wait").map_err(RunError::Wait)?;
                        break st.map_err(RunError::Wait)?
                    }
                    _ = sigterm.recv() => {
                        reporter.clear();
                        forward(nix::sys::signal::Signal::SIGTERM);
                        note(opts.quiet, "SIGTERM: forwarded to the command");
                    }
                    _ = sighup.recv() => forward(nix::sys::signal::Signal::SIGHUP),
                    _ = sigint.recv() => {
                        interrupts += 1;
                        if interrupts >= 2 {
                            reporter.clear();
                            note(opts.quiet, "second interrupt: killing the run");
                            cg.kill_all()?;
                        }
                    }
                }
            };
            drop(reporter);
            if let Some(e) = unrecorded {
                return Err(RunError::Unrecorded(e));
            }
            let code = exit_code_of(status);
            note(
                opts.quiet,
                format_args!(
                    "command exited with status {code} after {:.3} s",
                    started.elapsed().as_secs_f64()
                ),
            );
            code
        }
    };

    // The rest of the run gets `grace` to finish, then is killed.
    fault("teardown").map_err(|e| {
        RunError::Cgroup(CgroupError::Io {
            path: cg.path().to_owned(),
            source: e,
        })
    })?;
    let deadline = Instant::now() + opts.grace;
    while cg.populated()? && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut killed = Vec::new();
    let mut kill_error = None;
    let mut leftovers = cg.procs()?;
    leftovers.extend(tracked_outside(monitor, Some(cg.path())));
    leftovers.sort_unstable();
    leftovers.dedup();
    if !leftovers.is_empty() {
        for &pid in &leftovers {
            killed.push(ProcessRef {
                pid,
                comm: procfs::comm(pid).unwrap_or_default(),
            });
        }
        for k in &killed {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(k.pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        if let Err(e) = cg.kill_all() {
            kill_error = Some(e.to_string());
        }
        let list: Vec<String> = killed
            .iter()
            .map(|k| format!("{} ({})", k.pid, k.comm))
            .collect();
        note(
            opts.quiet,
            format_args!(
                "killed {} process(es) still running {:.1} s after the command ended: {}",
                killed.len(),
                opts.grace.as_secs_f64(),
                list.join(", ")
            ),
        );
        // Let the killed processes' exits reach the ring buffer.
        for _ in 0..100 {
            if tracked_outside(monitor, None).is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    Ok(Driven {
        status,
        killed,
        kill_error,
    })
}

/// Prints the end-of-run line; an incomplete record is always printed, loudly.
pub fn report_end(report: &MonitorReport, quiet: bool) {
    if let Some(ov) = report
        .overload
        .as_ref()
        .filter(|o| o.freezes > 0 || o.note.is_some())
    {
        note(quiet, format_args!("{}", ov.text()));
    }
    if report.complete() {
        note(
            quiet,
            format_args!(
                "ledger {}: {} events, 0 lost, record complete",
                report.ledger.display(),
                report.rows
            ),
        );
    } else {
        eprintln!(
            "aet: INCOMPLETE RECORD in {}: {} events recorded, {} lost",
            report.ledger.display(),
            report.rows,
            report.lost
        );
        for r in report.incomplete.iter() {
            eprintln!("aet:   - {r}");
        }
        eprintln!("aet: this ledger cannot prove what the run touched.");
    }
}

/// What `aet monitor` watches.
#[derive(Clone, Debug)]
pub enum Target {
    Cgroup(PathBuf),
    Uid(u32),
    Pid(u32),
    /// A running container (Docker or Podman), by id or name: its cgroup.
    Container(String),
}

/// A running container's cgroup, asked of its runtime (`docker inspect`, else `podman inspect`),
/// and the runtime's name.
fn container_cgroup(name: &str) -> Result<(PathBuf, &'static str), RunError> {
    for runtime in ["docker", "podman"] {
        let Ok(out) = std::process::Command::new(runtime)
            .args(["inspect", "--format", "{{.State.Pid}}", name])
            .stderr(std::process::Stdio::null())
            .output()
        else {
            continue;
        };
        let pid: u32 = match String::from_utf8_lossy(&out.stdout).trim().parse() {
            Ok(p) if out.status.success() && p > 0 => p,
            _ => continue,
        };
        return Ok((cgroup::cgroup_of(pid)?, runtime));
    }
    Err(RunError::NoTarget(format!(
        "container {name} (neither `docker inspect` nor `podman inspect` knows it running)"
    )))
}

/// How `aet monitor` scopes in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeKind {
    /// The target's cgroup v2 (for --pid: the cgroup the process is in).
    Cgroup,
    /// The target's real uid (for --pid: the process's uid).
    Uid,
    /// The target process and its descendants, tracked by fork.
    Tree,
}

/// Options of `aet monitor`.
#[derive(Clone, Debug)]
pub struct MonitorOptions {
    pub target: Target,
    pub scope: Option<ScopeKind>,
    pub out: PathBuf,
    pub ringbuf_bytes: u32,
    pub on_overload: crate::monitor::overload::OnOverload,
    pub quiet: bool,
    /// Where the monitor comes from.
    pub mode: Mode,
}

fn resolve_scope(target: &Target, kind: Option<ScopeKind>) -> Result<Scope, RunError> {
    if let Target::Container(name) = target {
        let (path, _) = container_cgroup(name)?;
        return resolve_scope(&Target::Cgroup(path), Some(ScopeKind::Cgroup));
    }
    let cgroup_scope = |path: PathBuf| -> Result<Scope, RunError> {
        let path = if path.is_absolute() {
            path
        } else {
            cgroup::cgroup2_root()?.join(path)
        };
        let id = cgroup::cgroup_id(&path)
            .map_err(|_| RunError::NoTarget(format!("cgroup {}", path.display())))?;
        let (_, level) = cgroup::relative(&path)?;
        Ok(Scope::Cgroup { path, id, level })
    };
    match (target, kind) {
        (Target::Cgroup(p), None | Some(ScopeKind::Cgroup)) => cgroup_scope(p.clone()),
        (Target::Uid(u), None | Some(ScopeKind::Uid)) => Ok(Scope::Uid(*u)),
        (Target::Pid(p), None | Some(ScopeKind::Tree)) => {
            if !procfs::exists(*p) {
                return Err(RunError::NoTarget(format!("pid {p}")));
            }
            Ok(Scope::Pid(*p))
        }
        (Target::Pid(p), Some(ScopeKind::Cgroup)) => {
            cgroup_scope(cgroup::cgroup_of(*p).map_err(|_| RunError::NoTarget(format!("pid {p}")))?)
        }
        (Target::Pid(p), Some(ScopeKind::Uid)) => procfs::real_uid(*p)
            .map(Scope::Uid)
            .ok_or_else(|| RunError::NoTarget(format!("pid {p}"))),
        (Target::Container(c), None) => Err(RunError::NoTarget(format!("container {c}"))),
        (t, Some(k)) => Err(RunError::NoTarget(format!(
            "{t:?} cannot be scoped by {k:?} (use --pid with --scope)"
        ))),
    }
}

/// Is the monitored work gone?
fn target_gone(scope: &Scope, seen: &mut bool, monitor: &mut Session) -> bool {
    let present = match scope {
        Scope::Cgroup { path, .. } => cgroup::populated(path).unwrap_or(false),
        Scope::Uid(uid) => !procfs::processes_of_uid(*uid).is_empty(),
        Scope::Pid(pid) => procfs::exists(*pid),
    };
    // Drop tracked tasks that are gone without an exit seen (exited before the attach).
    let tracked = monitor.tracked();
    let mut live = 0;
    for tid in tracked {
        if procfs::exists(tid) {
            live += 1;
        } else {
            monitor.untrack(tid);
        }
    }
    if present || live > 0 {
        *seen = true;
        return false;
    }
    // A pid target that is gone is gone; a cgroup or uid must have had work first.
    *seen || matches!(scope, Scope::Pid(_))
}

/// `aet monitor`. Once the monitor is attached, every path out of here finishes the ledger.
pub async fn monitor(opts: MonitorOptions) -> Result<MonitorReport, RunError> {
    let scope = resolve_scope(&opts.target, opts.scope)?;
    let ledger = prepare_out(&opts.out)?;
    let mut head = MetaMap::new();
    head.set_json(meta::COMMAND, &Vec::<String>::new());
    let mut sigterm = signal(SignalKind::terminate()).map_err(RunError::Signals)?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(RunError::Signals)?;
    let mut monitor = Session::start(
        &opts.mode,
        &scope,
        &ledger,
        head,
        false,
        opts.ringbuf_bytes,
        opts.on_overload,
    )?;
    if opts.on_overload == crate::monitor::overload::OnOverload::Freeze
        && !matches!(scope, Scope::Cgroup { .. })
    {
        note(
            opts.quiet,
            "this scope is not a cgroup aet can freeze: if the record cannot keep up, events are \
             dropped and counted (--on-overload drop)",
        );
    }
    let mut reasons = Reasons::new();
    if let Target::Container(_) = &opts.target
        && let Scope::Cgroup { path, .. } = &scope
    {
        // The container ran before the monitor attached: what it did then is not recorded.
        let n = cgroup::procs(path).map(|p| p.len()).unwrap_or(0);
        reasons.push(Incomplete::AlreadyRunning {
            processes: n as u64,
        });
    }
    let tracked = match scope {
        Scope::Pid(pid) => track_tree(&mut monitor, pid),
        _ => Ok(()),
    };
    if let Err(e) = &tracked {
        eprintln!("aet: error: {e}; stopping");
        reasons.push(Incomplete::AetFailed {
            error: e.to_string(),
        });
    } else {
        note(
            opts.quiet,
            format_args!(
                "monitoring {} -> {} (until it is gone, or SIGINT/SIGTERM)",
                scope.describe(),
                ledger.display()
            ),
        );
        let mut seen = false;
        let mut reason = "the target is gone";
        loop {
            tokio::select! {
                _ = sigterm.recv() => { reason = "SIGTERM"; break; }
                _ = sigint.recv() => { reason = "SIGINT"; break; }
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    if target_gone(&scope, &mut seen, &mut monitor) {
                        break;
                    }
                    if monitor.failed() {
                        reason = "the monitor stopped recording";
                        break;
                    }
                }
            }
        }
        note(opts.quiet, format_args!("stopping: {reason}"));
    }
    if monitor.failed() {
        reasons.push(Incomplete::ConsumerStopped);
    }
    let report = monitor.stop(MetaMap::new(), reasons)?;
    report_end(&report, opts.quiet);
    tracked?;
    Ok(report)
}

/// Processes the target started before the attach: tracks them and their threads. Twice, for
/// anything forked while the first pass ran.
fn track_tree(monitor: &mut Session, pid: u32) -> Result<(), RunError> {
    fault("track").map_err(RunError::Track)?;
    for _ in 0..2 {
        let tids: Vec<u32> = procfs::descendants(pid)
            .into_iter()
            .flat_map(procfs::threads)
            .collect();
        monitor.track(&tids)?;
    }
    Ok(())
}
