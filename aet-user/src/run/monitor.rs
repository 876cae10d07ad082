//! `aet monitor`: the monitor on work something else started (a cgroup, a uid, a process tree,
//! a container), until the target is gone or a signal asks to stop.

use std::{path::PathBuf, time::Duration};

use aet_ledger::{
    metadata::{Incomplete, MetaMap, Reasons},
    schema::meta,
};
use tokio::signal::unix::{SignalKind, signal};

use super::{
    RunError, fault, note, prepare_out, report_end,
    session::{Mode, Session},
};
use aet_kernel::{cgroup, procfs};
use aet_monitor::MonitorReport;
use aet_monitor::loader::Scope;

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
    pub on_overload: aet_monitor::overload::OnOverload,
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

/// Where the monitored work is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Presence {
    /// It has processes.
    Running,
    /// It has none now, but may have later (an empty cgroup, a uid with no process).
    Idle,
    /// It can have none again: the cgroup was removed (or replaced by another of the same
    /// name), the process has exited.
    Gone,
}

fn presence(scope: &Scope) -> Presence {
    match scope {
        Scope::Cgroup { path, id, .. } => match cgroup::cgroup_id(path) {
            Ok(now) if now == *id => match cgroup::populated(path) {
                Ok(true) => Presence::Running,
                Ok(false) => Presence::Idle,
                Err(_) => Presence::Gone,
            },
            _ => Presence::Gone,
        },
        Scope::Uid(uid) if procfs::processes_of_uid(*uid).is_empty() => Presence::Idle,
        Scope::Uid(_) => Presence::Running,
        Scope::Pid(pid) if procfs::exists(*pid) => Presence::Running,
        Scope::Pid(_) => Presence::Gone,
    }
}

/// Is the monitored work gone? `seen` says whether it has had processes since the monitor
/// started (an idle cgroup or uid is waited for until it has had some).
fn target_gone(scope: &Scope, seen: &mut bool, session: &mut Session) -> bool {
    let now = presence(scope);
    // Drop tracked tasks that are gone without an exit seen (exited before the attach).
    let tracked = session.tracked();
    let mut live = 0;
    for tid in tracked {
        if procfs::exists(tid) {
            live += 1;
        } else {
            session.untrack(tid);
        }
    }
    if now == Presence::Running || live > 0 {
        *seen = true;
        return false;
    }
    now == Presence::Gone || *seen
}

/// Test hook: `AET_DEBUG_AT_ATTACH=COMMAND` runs COMMAND (with `sh -c`) after `aet monitor` has
/// found its target and before it attaches, so that a test can end the target during the attach
/// without depending on how long the attach takes. Never set it for a real run.
pub const AT_ATTACH_ENV: &str = "AET_DEBUG_AT_ATTACH";

fn at_attach_hook() {
    if let Some(cmd) = std::env::var_os(AT_ATTACH_ENV) {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .status();
        eprintln!("aet: {AT_ATTACH_ENV} ran: {status:?}");
    }
}

/// `aet monitor`. Once the monitor is attached, every path out of here finishes the ledger.
pub async fn monitor(opts: MonitorOptions) -> Result<MonitorReport, RunError> {
    let scope = resolve_scope(&opts.target, opts.scope)?;
    // A container was found running; a cgroup, uid or process that has processes now has been
    // seen: if it has none once the monitor is attached, it ended during the attach.
    let mut seen =
        matches!(opts.target, Target::Container(_)) || presence(&scope) == Presence::Running;
    let ledger = prepare_out(&opts.out)?;
    at_attach_hook();
    let mut head = MetaMap::new();
    head.set_json(meta::COMMAND, &Vec::<String>::new());
    let mut sigterm = signal(SignalKind::terminate()).map_err(RunError::Signals)?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(RunError::Signals)?;
    let mut session = Session::start(
        &opts.mode,
        &scope,
        &ledger,
        head,
        false,
        opts.ringbuf_bytes,
        opts.on_overload,
    )?;
    if opts.on_overload == aet_monitor::overload::OnOverload::Freeze
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
        Scope::Pid(pid) => track_tree(&mut session, pid),
        _ => Ok(()),
    };
    if let Err(e) = &tracked {
        eprintln!("aet: error: {e}; stopping");
        reasons.push(Incomplete::AetFailed {
            error: e.to_string(),
        });
    } else if target_gone(&scope, &mut seen, &mut session) {
        // Nothing to wait for: the target ended before or while the programs were loaded.
        let target = match &opts.target {
            Target::Container(c) => format!("container {c} ({})", scope.describe()),
            _ => scope.describe(),
        };
        eprintln!("aet: {target} ended before or while the monitor attached; stopping");
        reasons.push(Incomplete::TargetEnded { target });
    } else {
        note(
            opts.quiet,
            format_args!(
                "monitoring {} -> {} (until it is gone, or SIGINT/SIGTERM)",
                scope.describe(),
                ledger.display()
            ),
        );
        let mut reason = "the target is gone";
        loop {
            tokio::select! {
                _ = sigterm.recv() => { reason = "SIGTERM"; break; }
                _ = sigint.recv() => { reason = "SIGINT"; break; }
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    if target_gone(&scope, &mut seen, &mut session) {
                        break;
                    }
                    if session.failed() {
                        reason = "the monitor stopped recording";
                        break;
                    }
                }
            }
        }
        note(opts.quiet, format_args!("stopping: {reason}"));
    }
    if session.failed() {
        reasons.push(Incomplete::ConsumerStopped);
    }
    let report = session.stop(MetaMap::new(), reasons)?;
    report_end(&report, opts.quiet);
    tracked?;
    Ok(report)
}

/// Processes the target started before the attach: tracks them and their threads. Twice, for
/// anything forked while the first pass ran.
fn track_tree(session: &mut Session, pid: u32) -> Result<(), RunError> {
    fault("track").map_err(RunError::Track)?;
    for _ in 0..2 {
        let tids: Vec<u32> = procfs::descendants(pid)
            .into_iter()
            .flat_map(procfs::threads)
            .collect();
        session.track(&tids)?;
    }
    Ok(())
}
