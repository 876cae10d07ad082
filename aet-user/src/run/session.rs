//! A monitored run's connection to the monitor: the resident daemon's when its socket answers,
//! else programs loaded for this run alone. Both record the same way and finish the same ledger;
//! only where the programs live differs.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use crate::daemon::client::Client;
use aet_monitor::daemon::{
    DaemonError,
    protocol::{Request, Response},
};

use aet_monitor::loader::{LoadOptions, Scope};

use aet_ledger::metadata::{MetaMap, PhaseRecord, Reasons};
use aet_monitor::{
    MonitorError, MonitorReport,
    consumer::Progress,
    overload::OnOverload,
    slots::{Monitor, Overload},
};

/// Where the monitor should come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The daemon at this socket; when none answers, one started for the run (which then serves
    /// later runs until it is idle). A daemon of another build, or one that cannot start, leaves
    /// the run standalone, with a warning.
    Auto(PathBuf),
    /// The daemon at this socket, or an error.
    Daemon(PathBuf),
    /// Programs loaded for this run alone.
    Standalone,
}

/// The environment variable that chooses the monitor when no flag does: `auto` (the default),
/// `require` (as `--daemon`) or `never` (as `--standalone`).
pub const DAEMON_ENV: &str = "AET_DAEMON";

impl Mode {
    /// The mode of `--daemon` / `--standalone`, else of `AET_DAEMON`.
    pub fn choose(socket: PathBuf, standalone: bool, daemon: bool) -> Result<Self, String> {
        if standalone {
            return Ok(Self::Standalone);
        }
        if daemon {
            return Ok(Self::Daemon(socket));
        }
        match std::env::var(DAEMON_ENV).as_deref() {
            Err(_) | Ok("" | "auto") => Ok(Self::Auto(socket)),
            Ok("require") => Ok(Self::Daemon(socket)),
            Ok("never") => Ok(Self::Standalone),
            Ok(other) => Err(format!(
                "{DAEMON_ENV}={other}: expected auto, require or never"
            )),
        }
    }
}

/// Errors of a session.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Monitor(#[from] MonitorError),
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    /// `--daemon` (or `AET_DAEMON=require`) but nothing listens.
    #[error(
        "no aet daemon answers at {0} (start one with `aet daemon`, or leave out --daemon and \
         AET_DAEMON=require)"
    )]
    NoDaemon(PathBuf),
    /// `--daemon` but the daemon serves as many runs as it may.
    #[error(
        "the aet daemon at {socket} serves {max_runs} runs, the most it may (aet daemon --max-runs), \
         or leave out --daemon to load the programs for this run"
    )]
    DaemonFull { socket: PathBuf, max_runs: u32 },
    /// The guard that thaws a frozen run if aet dies could not be set up.
    #[error(
        "cannot set up the guard that thaws a frozen run ({0}); use --on-overload drop to run without it"
    )]
    ThawGuard(#[source] std::io::Error),
}

/// A run being recorded.
pub enum Session {
    Local {
        monitor: Monitor,
        slot: u32,
        /// The guard that thaws what this aet froze if it dies, and its marker directory.
        thaw: Option<(aet_kernel::guard::Guard, PathBuf)>,
    },
    Remote {
        client: Client,
        slot: u32,
        /// Set when the daemon hung up.
        lost: Arc<AtomicBool>,
        notify: Arc<tokio::sync::Notify>,
    },
}

/// A marker directory for this aet's freezes and the guard that thaws what they name.
fn thaw_guard() -> Result<(aet_kernel::guard::Guard, PathBuf), SessionError> {
    let io = SessionError::ThawGuard;
    let dir = aet_sandbox::runtime_dir().map_err(io)?.join(format!(
        "frozen-{}-{}",
        std::process::id(),
        aet_ledger::util::now_ns()
    ));
    std::fs::create_dir(&dir).map_err(io)?;
    let guard = aet_kernel::guard::Guard::start_thaw(&dir).map_err(io)?;
    Ok((guard, dir))
}

/// How long a daemon may take to say how a run goes.
pub const HEALTH_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Session {
    /// Starts recording `scope` into a new ledger at `ledger`. `owned`: the scope is a cgroup
    /// this aet created for the run (the daemon kills it if it dies). `ringbuf_bytes` sizes the
    /// programs' ring buffer when they are loaded for this run.
    pub fn start(
        mode: &Mode,
        scope: &Scope,
        ledger: &Path,
        head: MetaMap,
        owned: bool,
        ringbuf_bytes: u32,
        on_overload: OnOverload,
    ) -> Result<Self, SessionError> {
        let socket = match mode {
            Mode::Standalone => None,
            Mode::Auto(s) | Mode::Daemon(s) => Some(s),
        };
        if let Some(socket) = socket {
            let client = match mode {
                Mode::Daemon(_) => Client::connect(socket)?,
                _ => match crate::daemon::start::connect_or_start(socket) {
                    Ok(c) => Some(c),
                    Err(e @ (DaemonError::OtherBuild { .. } | DaemonError::Start { .. })) => {
                        eprintln!("aet: warning: {e}; this run loads its own programs");
                        None
                    }
                    Err(e) => return Err(e.into()),
                },
            };
            match client {
                Some(mut client) => {
                    let r = client.call(&Request::Start {
                        scope: scope.clone(),
                        ledger: ledger.to_owned(),
                        head: {
                            let mut h = head.clone();
                            h.set_json(
                                aet_ledger::schema::meta::MONITOR,
                                &serde_json::json!({
                                    "served_by": "daemon",
                                    "pid": client.pid,
                                    "started": client.started,
                                    "build": crate::version::BUILD_ID,
                                }),
                            );
                            h.into_inner()
                        },
                        owned,
                        on_overload,
                    })?;
                    let slot = match r {
                        Response::Started { slot } => Some(slot),
                        Response::Full { max_runs } => {
                            if matches!(mode, Mode::Daemon(_)) {
                                return Err(SessionError::DaemonFull {
                                    socket: socket.clone(),
                                    max_runs,
                                });
                            }
                            eprintln!(
                                "aet: the aet daemon at {} serves {max_runs} runs, the most it \
                                 may: this run loads its own programs",
                                socket.display()
                            );
                            None
                        }
                        r => return Err(client.unexpected(r).into()),
                    };
                    if let Some(slot) = slot {
                        let lost = Arc::new(AtomicBool::new(false));
                        let notify = Arc::new(tokio::sync::Notify::new());
                        {
                            let lost = lost.clone();
                            let notify = notify.clone();
                            client.watch(move || {
                                lost.store(true, Ordering::Release);
                                notify.notify_waiters();
                                notify.notify_one();
                            })?;
                        }
                        return Ok(Self::Remote {
                            client,
                            slot,
                            lost,
                            notify,
                        });
                    }
                }
                None if matches!(mode, Mode::Daemon(_)) => {
                    return Err(SessionError::NoDaemon(socket.clone()));
                }
                None => {}
            }
        }
        let monitor = Monitor::load(&LoadOptions { ringbuf_bytes })?;
        let quota = u64::from(monitor.ringbuf_bytes());
        // A run that may be frozen gets a guard that thaws it if this aet dies.
        let thaw = match (on_overload, scope) {
            (OnOverload::Freeze, Scope::Cgroup { .. }) => Some(thaw_guard()?),
            _ => None,
        };
        let overload = Overload {
            on_overload,
            marker_dir: thaw.as_ref().map(|(_, d)| d.clone()),
        };
        let mut head = head;
        head.set_json(
            aet_ledger::schema::meta::MONITOR,
            &serde_json::json!({"served_by": "standalone", "build": crate::version::BUILD_ID}),
        );
        let slot = monitor.start_run(scope, ledger, head, quota, &overload)?;
        Ok(Self::Local {
            monitor,
            slot,
            thaw,
        })
    }

    /// `daemon` or `standalone`.
    pub fn mode(&self) -> &'static str {
        match self {
            Self::Local { .. } => "standalone",
            Self::Remote { .. } => "daemon",
        }
    }

    /// The daemon's process id (daemon mode).
    pub fn daemon_pid(&self) -> Option<u32> {
        match self {
            Self::Local { .. } => None,
            Self::Remote { client, .. } => Some(client.pid),
        }
    }

    /// Adds tasks to the run's tracked set.
    pub fn track(&mut self, tids: &[u32]) -> Result<(), SessionError> {
        match self {
            Self::Local { monitor, slot, .. } => {
                for &tid in tids {
                    monitor.track(*slot, tid)?;
                }
                Ok(())
            }
            Self::Remote { client, .. } => {
                client.call(&Request::Track {
                    tids: tids.to_vec(),
                })?;
                Ok(())
            }
        }
    }

    /// Removes a task that is gone from the tracked set.
    pub fn untrack(&mut self, tid: u32) {
        match self {
            Self::Local { monitor, .. } => monitor.untrack(tid),
            Self::Remote { client, .. } => {
                let _ = client.call(&Request::Untrack { tid });
            }
        }
    }

    /// The run's tracked tasks.
    pub fn tracked(&mut self) -> Vec<u32> {
        match self {
            Self::Local { monitor, slot, .. } => monitor.tracked(*slot),
            Self::Remote { client, .. } => match client.call(&Request::Tracked) {
                Ok(Response::Tracked { tids }) => tids,
                _ => Vec::new(),
            },
        }
    }

    /// Begins phase `name` of the run.
    pub fn begin_phase(
        &mut self,
        name: &str,
        keep: Vec<u32>,
        by: Option<u32>,
    ) -> Result<PhaseRecord, String> {
        match self {
            Self::Local { monitor, slot, .. } => monitor
                .begin_phase(*slot, name, keep, by)
                .map_err(|e| e.to_string()),
            Self::Remote { client, .. } => match client.call(&Request::Phase {
                name: name.to_owned(),
                keep,
                by,
            }) {
                Ok(Response::Phase { record }) => Ok(record),
                Ok(Response::Error { message }) => Err(message),
                Ok(r) => Err(client.unexpected(r).to_string()),
                Err(e) => Err(e.to_string()),
            },
        }
    }

    /// Records a request the sandbox's proxy forwarded or refused (a row of the run's ledger);
    /// a failure to is the ledger's (its next health check says so).
    pub fn proxy_event(&mut self, event: aet_proxy::Event) {
        match self {
            Self::Local { monitor, slot, .. } => {
                let _ = monitor.proxy_event(*slot, &event);
            }
            Self::Remote { client, .. } => {
                if let Ok(Response::Error { message }) | Err(message) = client
                    .call(&Request::Proxy { event })
                    .map_err(|e| e.to_string())
                {
                    eprintln!(
                        "aet: warning: a request of the sandbox's proxy was not recorded: {message}"
                    );
                }
            }
        }
    }

    /// What the run has recorded so far.
    pub fn progress(&mut self) -> Progress {
        match self {
            Self::Local { monitor, slot, .. } => monitor.progress(*slot),
            Self::Remote { client, .. } => match client.call(&Request::Progress) {
                Ok(Response::Progress { progress }) => progress,
                _ => Progress::default(),
            },
        }
    }

    /// Why the run can no longer be recorded, once it cannot: its ledger cannot be written, or
    /// the daemon recording it is stopped or does not answer within [`HEALTH_LIMIT`].
    pub fn unrecorded(&mut self) -> Option<String> {
        match self {
            Self::Local { monitor, slot, .. } => monitor.write_error(*slot),
            Self::Remote { client, .. } => {
                match client.call_within(&Request::Health, HEALTH_LIMIT) {
                    Ok(Response::Health { write_error }) => write_error,
                    Ok(other) => Some(client.unexpected(other).to_string()),
                    Err(e) => Some(e.to_string()),
                }
            }
        }
    }

    /// Has the monitor stopped recording (its consumer died, or the daemon went away)?
    pub fn failed(&self) -> bool {
        match self {
            Self::Local { monitor, .. } => monitor.consumer_failed(),
            Self::Remote { lost, .. } => lost.load(Ordering::Acquire),
        }
    }

    /// Resolves when the daemon hangs up (never for a standalone monitor).
    pub fn lost(&self) -> impl std::future::Future<Output = ()> + 'static {
        let watch = match self {
            Self::Local { .. } => None,
            Self::Remote { lost, notify, .. } => Some((lost.clone(), notify.clone())),
        };
        async move {
            match watch {
                None => std::future::pending().await,
                Some((lost, notify)) => loop {
                    let n = notify.notified();
                    if lost.load(Ordering::Acquire) {
                        return;
                    }
                    n.await;
                },
            }
        }
    }

    /// Stops recording and finishes the ledger with `extra` metadata, the loss accounting and
    /// `reasons`.
    pub fn stop(self, extra: MetaMap, reasons: Reasons) -> Result<MonitorReport, SessionError> {
        match self {
            Self::Local {
                monitor,
                slot,
                thaw,
            } => {
                let report = monitor.stop_run(slot, extra, reasons);
                monitor.shutdown("the run ended");
                if let Some((guard, dir)) = thaw {
                    guard.release();
                    let _ = std::fs::remove_dir_all(dir);
                }
                Ok(report?)
            }
            Self::Remote { mut client, .. } => {
                let r = client.call(&Request::Stop {
                    extra: extra.into_inner(),
                    reasons,
                })?;
                client.closing();
                match r {
                    Response::Stopped { report } => Ok(report),
                    other => Err(client.unexpected(other).into()),
                }
            }
        }
    }
}
