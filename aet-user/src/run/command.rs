//! `aet run`: create the run's cgroup, attach the monitor scoped to it, start the command inside
//! it (the child moves itself into the cgroup before it execs, so the command's first instruction
//! is already watched), wait for it, give the rest of the run `grace` to finish, kill what is
//! left, drain every record, finish the ledger. It never starts the command without a monitor.

use std::{
    ffi::OsString,
    io::{self, Write as _},
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use aet_ledger::{
    metadata::{Incomplete, MetaMap, ProcessRef, Reasons},
    schema::meta,
};
use tokio::signal::unix::{SignalKind, signal};

use super::view::{receive_view, take_view};
use super::{
    CGROUP_ENV, CommandEnd, RunError, exit_code_of, fault,
    fds::{child_fd_hygiene, inherited_fd_ranges, inherited_fds},
    note, prepare_out, report_end,
    session::{Mode, Session, SessionError},
};
use aet_kernel::{
    cgroup::{self, CgroupError, RunCgroup},
    procfs,
};
use aet_monitor::MonitorReport;
use aet_monitor::loader::Scope;

/// Options of `aet run`.
pub struct RunOptions {
    pub out: PathBuf,
    pub command: Vec<OsString>,
    pub grace: Duration,
    pub ringbuf_bytes: u32,
    pub on_overload: aet_monitor::overload::OnOverload,
    pub quiet: bool,
    /// How the command starts: in a sandbox (bwrap starts inside the run's cgroup, so its
    /// set-up is in the ledger too), as an agent identity, or as it is.
    pub launch: crate::run::launch::Launch,
    /// Metadata written with the ledger's head (e.g. protected files' identities at start).
    pub head: MetaMap,
    /// Where the monitor comes from (the daemon, or programs loaded for this run).
    pub mode: Mode,
    /// The live status on stderr while the command runs.
    pub progress: crate::run::progress::ProgressMode,
    /// The policy's watched files, fingerprinted before the command and at the end of the
    /// agent's phase.
    pub watch: Option<super::fingerprints::Fingerprints>,
    /// Decoys planted for a view aet does not build (`--decoys`): recorded in the footer.
    pub decoys: Option<aet_ledger::decoys::DecoyRecord>,
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

fn command_text(cmd: &[OsString]) -> Vec<String> {
    cmd.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// Processes of the tracked set (thread ids mapped to their processes) that still exist and are
/// not in `cg`.
fn tracked_outside(session: &mut Session, cg: Option<&Path>) -> Vec<u32> {
    let mut pids: Vec<u32> = session
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
pub async fn run(mut opts: RunOptions) -> Result<RunOutcome, RunError> {
    if opts.command.is_empty() {
        return Err(RunError::NoCommand);
    }
    // Taken before anything is loaded: a SIGTERM while the monitor attaches (a harness's
    // timeout during a slow start) is held and reaches the command once it runs, so the ledger
    // is still finished, with the command's own status. (SIGINT from a terminal still ends a
    // start that is taking too long.)
    let sigterm = signal(SignalKind::terminate());
    let ledger = prepare_out(&opts.out)?;
    let mut watch = opts.watch.take();
    // In aet's own view, the watched files are fingerprinted before anything starts (a limit
    // refuses the run here, before a ledger exists); a sandbox's stage hands its view over
    // before it execs the command.
    if let Some(w) = watch.as_mut()
        && !w.deferred
        && opts.launch.sandbox.is_none()
    {
        w.before(super::fingerprints::View::Host, opts.launch.host_context())
            .map_err(RunError::Watch)?;
        if let Some(l) = w.describe(false) {
            note(opts.quiet, l);
        }
    }
    let hold = opts
        .launch
        .sandbox
        .as_mut()
        .and_then(aet_sandbox::Prepared::take_hold);
    // Whole seconds: ctimes are compared at that resolution.
    let run_started = std::time::SystemTime::now() - Duration::from_secs(1);
    let name = format!("run-{}-{}", std::process::id(), aet_ledger::util::now_ns());
    let cg = RunCgroup::create(&name)?;
    let guard = aet_kernel::guard::Guard::start(cg.path()).map_err(RunError::Guard)?;
    let (relative, level) = cgroup::relative(cg.path())?;
    let scope = Scope::Cgroup {
        path: cg.path().to_owned(),
        id: cg.id(),
        level,
    };
    let mut head = opts.head.clone();
    head.set_json(meta::COMMAND, &command_text(&opts.command));
    head.set_json(meta::INHERITED_FDS, &inherited_fds());
    let mut session = Session::start(
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
            match session.daemon_pid() {
                Some(pid) => format!(" (aet daemon {pid})"),
                None => String::new(),
            }
        ),
    );

    // `aet phase DIR NAME` reaches the run through this.
    let mut control = match super::control::Control::open(
        ledger.parent().expect("the ledger is in the run directory"),
        cg.path(),
    ) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!(
                "aet: warning: no control socket for `aet phase` ({e}): the run has one phase"
            );
            None
        }
    };
    let mut reasons = Reasons::new();
    let mut extra = MetaMap::new();
    let driven = drive(
        &opts,
        &cg,
        &relative,
        &mut session,
        control.as_mut(),
        Held {
            socket: hold,
            watch: watch.as_mut(),
        },
        sigterm,
    )
    .await;
    drop(control);
    let mut watch_refused = false;
    let (status, killed) = match driven {
        Ok(d) => {
            if let Some(e) = d.kill_error {
                reasons.push(Incomplete::KillFailed { error: e });
            }
            watch_refused = d.watch_refused;
            (Ok(d.status), d.killed)
        }
        Err(e) => {
            // aet failed while the command ran: nothing of the run may go on unmonitored.
            eprintln!("aet: error: {e}; stopping the run");
            let _ = cg.kill_all();
            if session.failed() && session.mode() == "daemon" {
                // The daemon is gone, and the ledger with it: nothing more can be written.
                drop(session);
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
    if session.failed() {
        reasons.push(Incomplete::ConsumerStopped);
    }
    let mut end = status
        .as_ref()
        .map_or(CommandEnd::Refused, |s| CommandEnd::Exited(*s));
    let stage = opts.launch.stage_report();
    if !stage_notes(&opts, &stage) || watch_refused {
        end = CommandEnd::Refused;
    }
    if let Some(w) = watch.as_mut() {
        // The end of the agent's phase, when no `aet phase` or `aet watch --end` marked it.
        if matches!(end, CommandEnd::Exited(_)) && !w.ended() {
            match w.after("end") {
                Ok(()) => {
                    if let Some(l) = w.describe(true) {
                        note(opts.quiet, l);
                    }
                }
                Err(e) => eprintln!("aet: error: watched files: {e}"),
            }
        }
        extra.set_json(meta::WATCH, w.record());
    }
    let report_ok = stage.as_ref().and_then(|r| r.as_ref().ok());
    if let Some(b) = report_ok.and_then(|r| r.barrier.as_ref()) {
        extra.set_json(meta::BARRIER, b);
    }
    if let Some(sb) = &opts.launch.sandbox {
        extra.set_json(meta::SANDBOX, &sb.record(report_ok));
        if let Some(d) = sb.decoy_record() {
            extra.set_json(meta::DECOYS, &d);
        }
    }
    if let Some(d) = &opts.decoys {
        extra.set_json(meta::DECOYS, d);
    }
    if let Some(id) = &opts.launch.identity {
        let record = identity_end(id, run_started, report_ok, &mut reasons, opts.quiet);
        extra.set_json(meta::IDENTITY, &record);
    }
    if let CommandEnd::Exited(code) = end {
        extra.set(meta::EXIT_STATUS, code);
    }
    extra.set_json(meta::KILLED, &killed);
    let report = match session.stop(extra, reasons) {
        Ok(r) => r,
        // The daemon died as the command ended (its guard kills the runs it served, so the
        // command may be seen to end before the connection is): the ledger is its, unfinished.
        Err(SessionError::Daemon(aet_monitor::daemon::DaemonError::Gone { .. })) => {
            drop(cg);
            guard.release();
            return Err(RunError::DaemonGone(ledger));
        }
        Err(e) => return Err(e.into()),
    };
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

/// What aet's stage reported, told on stderr: the sandbox verified, the identity taken, the
/// barrier built. `false` when the agent's environment was not as specified and the command
/// did not run.
fn stage_notes(
    opts: &RunOptions,
    stage: &Option<Result<aet_ledger::plan::StageReport, aet_sandbox::SandboxError>>,
) -> bool {
    match stage {
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
            return false;
        }
        Some(Err(e)) => {
            eprintln!("aet: error: {e}");
            return false;
        }
    }
    true
}

/// The agent identity's end: every process of its uid killed, anywhere on the machine; the
/// files it left outside its workspace and home found; its record for the ledger.
fn identity_end(
    id: &crate::run::launch::IdentityRun,
    run_started: std::time::SystemTime,
    report_ok: Option<&aet_ledger::plan::StageReport>,
    reasons: &mut Reasons,
    quiet: bool,
) -> aet_ledger::metadata::IdentityRecord {
    // No process of the agent's uid may outlive the run, anywhere on the machine.
    let (strays, reap_error) = match aet_sandbox::identity::reap_uid(id.uid) {
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
    let (files, total) = aet_sandbox::identity::leftovers(
        id.uid,
        run_started,
        &[id.workspace.clone(), id.home.clone()],
        1000,
    );
    if total > 0 {
        note(
            quiet,
            format_args!(
                "the agent (uid {}) left {total} file(s) outside its workspace and home, e.g. {}",
                id.uid,
                files[0].display()
            ),
        );
    }
    id.record(report_ok, &strays, reap_error.as_deref(), &files, total)
}

/// What driving the command found.
struct Driven {
    /// The command's shell-style status.
    status: i32,
    killed: Vec<ProcessRef>,
    /// The run's processes could not all be killed.
    kill_error: Option<String>,
    /// The sandbox's view was handed over and its watched files could not be fingerprinted:
    /// the command was not run.
    watch_refused: bool,
}

/// The sandbox's hold socket (its stage hands the view over on it) and the watched files.
struct Held<'a> {
    socket: Option<std::os::unix::net::UnixStream>,
    watch: Option<&'a mut super::fingerprints::Fingerprints>,
}

/// Starts the command in the run's cgroup, waits for it (forwarding signals), gives the rest of
/// the run `grace`, and kills what is left.
async fn drive(
    opts: &RunOptions,
    cg: &RunCgroup,
    relative: &Path,
    session: &mut Session,
    mut control: Option<&mut super::control::Control>,
    mut held: Held<'_>,
    sigterm: io::Result<tokio::signal::unix::Signal>,
) -> Result<Driven, RunError> {
    let mut watch_refused = false;
    // What the sandbox's proxy forwarded and refused, for the ledger.
    let (proxy_tx, mut proxy_rx) = tokio::sync::mpsc::unbounded_channel();
    let program = &opts.command[0];
    let signals = |kind| {
        fault("signals")?;
        signal(kind)
    };
    let mut sigterm = sigterm.map_err(RunError::Signals)?;
    let mut sigint = signals(SignalKind::interrupt()).map_err(RunError::Signals)?;
    let mut sighup = signals(SignalKind::hangup()).map_err(RunError::Signals)?;
    let mut unrecorded: Option<String> = None;

    fault("cgroup").map_err(|e| {
        RunError::Cgroup(CgroupError::Io {
            path: cg.path().to_owned(),
            source: e,
        })
    })?;
    let procs = cg.procs_file()?;
    let procs_fd = procs.as_raw_fd();
    let (mut std_cmd, keep_fds) = opts.launch.command();
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
            for &fd in &keep_fds {
                aet_sandbox::inherit_fd(fd)?;
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
            let mut views = held.socket.as_ref().and_then(receive_view);
            let lost = session.lost();
            tokio::pin!(lost);
            let mut reporter = crate::run::progress::Reporter::new(opts.progress);
            let mut ticks = tokio::time::interval(crate::run::progress::INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            // A run that can no longer be recorded (its ledger cannot be written, its daemon
            // is stopped or silent) stops at once: nothing the command did after would be.
            let mut health = tokio::time::interval(LEDGER_CHECK);
            health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let status = loop {
                tokio::select! {
                    _ = health.tick(), if unrecorded.is_none() => {
                        if let Some(e) = session.unrecorded() {
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
                        let status = crate::run::progress::Status::new(
                            started.elapsed(),
                            crate::run::progress::processes(cg.path()),
                            session.progress(),
                        );
                        reporter.show(&status);
                    }
                    () = &mut lost => {
                        let _ = cg.kill_all();
                        return Err(RunError::Session(SessionError::Daemon(
                            aet_monitor::daemon::DaemonError::Gone {
                                socket: match &opts.mode {
                                    Mode::Auto(s) | Mode::Daemon(s) => s.clone(),
                                    Mode::Standalone => PathBuf::new(),
                                },
                            },
                        )));
                    }
                    Some(req) = async {
                        match control.as_mut() {
                            Some(c) => c.next().await,
                            None => std::future::pending().await,
                        }
                    } => req.answer(session, held.watch.as_deref_mut()),
                    Some(view) = async {
                        match views.as_mut() {
                            Some(v) => v.recv().await,
                            None => std::future::pending().await,
                        }
                    } => {
                        views = None;
                        let ok = take_view(
                            &opts.launch,
                            opts.quiet,
                            cg,
                            view,
                            held.watch.as_deref_mut(),
                            &proxy_tx,
                        );
                        watch_refused |= !ok;
                        if let Some(s) = held.socket.as_mut() {
                            let _ = s.write_all(if ok { &[aet_ledger::plan::HOLD_GO] } else { b"n" });
                        }
                    }
                    Some(ev) = proxy_rx.recv() => session.proxy_event(ev),
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
            while let Ok(ev) = proxy_rx.try_recv() {
                session.proxy_event(ev);
            }
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

    let (killed, kill_error) = teardown(opts, cg, session).await?;
    Ok(Driven {
        status,
        killed,
        kill_error,
        watch_refused,
    })
}

/// The rest of the run gets `grace` to finish, then everything left of it (in its cgroup, or
/// tracked outside it) is killed: what was killed, and whether the kill failed.
async fn teardown(
    opts: &RunOptions,
    cg: &RunCgroup,
    session: &mut Session,
) -> Result<(Vec<ProcessRef>, Option<String>), RunError> {
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
    leftovers.extend(tracked_outside(session, Some(cg.path())));
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
            if tracked_outside(session, None).is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    Ok((killed, kill_error))
}
