//! `aet daemon`: one resident monitor for the host. It loads and attaches the programs once and
//! serves every `aet run` and `aet monitor` over a unix socket (root only, mode 0600): each run
//! is a scope in the kernel's maps, so a syscall costs the same look-ups whatever the number of
//! runs, and a run starts without loading anything.
//!
//! Faults: a guard process (`aet __guard-daemon`) kills the cgroups of the runs the daemon
//! started for `aet run` if the daemon dies, even by SIGKILL; the client of a run kills its own
//! run when the daemon hangs up; a run whose client goes away is finished, marked incomplete. The
//! daemon never writes a ledger that exists (ledgers are created exclusively).

pub mod client;
pub mod protocol;

use std::{
    collections::HashMap,
    io::{BufRead as _, BufReader, Write as _},
    os::unix::{
        fs::PermissionsExt as _,
        net::{UnixListener, UnixStream},
    },
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use protocol::{Request, Response, VERSION};

use crate::{
    loader::{LoadOptions, Scope},
    monitor::{MonitorError, slots::Monitor},
};
use aet_core::{
    ledger::record::{Incomplete, MetaMap, Reasons},
    util::now_ns,
};

/// Where the daemon listens by default.
pub const DEFAULT_SOCKET: &str = "/run/aet/aet.sock";

/// Default ring buffer of a daemon: shared by every run, each with an equal share of it.
pub const DEFAULT_RINGBUF_BYTES: u32 = 256 << 20;

/// Default number of concurrent runs a daemon serves (each gets the ring buffer's size divided
/// by this as its share).
pub const DEFAULT_MAX_RUNS: u32 = 16;

/// Errors of the daemon and of talking to it.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The socket could not be used.
    #[error("aet daemon socket {socket}: {source}")]
    Io {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The daemon hung up (it died).
    #[error("the aet daemon at {socket} went away")]
    Gone { socket: PathBuf },
    /// The daemon refused a request.
    #[error("the aet daemon at {socket} refused: {message}")]
    Refused { socket: PathBuf, message: String },
    /// The daemon said something this aet does not understand.
    #[error("the aet daemon at {socket}: {message}")]
    Protocol { socket: PathBuf, message: String },
    /// The daemon is alive but does not answer: stopped (SIGSTOP), or busy past the time a
    /// request may take.
    #[error("the aet daemon (pid {pid}) at {socket} {why}: the run cannot be recorded")]
    Unresponsive {
        socket: PathBuf,
        pid: u32,
        why: String,
    },
    /// Another daemon already serves the socket.
    #[error("an aet daemon already serves {0}")]
    Running(PathBuf),
    /// The monitor failed.
    #[error(transparent)]
    Monitor(#[from] MonitorError),
    /// The guard could not be started.
    #[error("cannot start the daemon's guard: {0}")]
    Guard(#[source] std::io::Error),
}

/// Options of `aet daemon`.
#[derive(Clone, Debug)]
pub struct DaemonOptions {
    pub socket: PathBuf,
    pub ringbuf_bytes: u32,
    pub max_runs: u32,
    pub quiet: bool,
}

/// The directory where the daemon lists the cgroups of the runs it must kill if it dies.
fn state_dir(socket: &Path) -> PathBuf {
    let name = socket
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "aet.sock".into());
    socket.with_file_name(format!("{name}.runs"))
}

/// What every connection's thread shares.
struct Daemon {
    engine: Monitor,
    opts: DaemonOptions,
    started_ns: i64,
    state: PathBuf,
    /// Runs being served (a count checked against `max_runs`).
    active: std::sync::Mutex<u32>,
}

/// Runs the daemon in the foreground until SIGINT or SIGTERM (or a fatal error).
pub fn serve(opts: DaemonOptions) -> Result<(), DaemonError> {
    let socket = opts.socket.clone();
    let io = |source| DaemonError::Io {
        socket: socket.clone(),
        source,
    };
    if let Some(parent) = socket.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    // A socket file nobody answers on is a dead daemon's: replace it. One that answers is not.
    if socket.exists() {
        if UnixStream::connect(&socket).is_ok() {
            return Err(DaemonError::Running(socket.clone()));
        }
        std::fs::remove_file(&socket).map_err(io)?;
    }
    // SIGINT and SIGTERM are taken by one thread; blocked first, so every thread started from
    // here on (the consumer too) leaves them to it.
    let mut signals = signal_hook_lite()?;
    let engine = Monitor::load(&LoadOptions {
        ringbuf_bytes: opts.ringbuf_bytes,
    })?;
    let state = state_dir(&socket);
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).map_err(io)?;
    let guard = crate::guard::Guard::start_for_daemon(&state).map_err(DaemonError::Guard)?;
    let listener = UnixListener::bind(&socket).map_err(io)?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    let daemon = Arc::new(Daemon {
        engine,
        opts: opts.clone(),
        started_ns: now_ns(),
        state,
        active: std::sync::Mutex::new(0),
    });
    if !opts.quiet {
        eprintln!(
            "aet: daemon serving {} (ring buffer {} MiB, up to {} runs of {} MiB each)",
            socket.display(),
            opts.ringbuf_bytes >> 20,
            opts.max_runs,
            (opts.ringbuf_bytes / opts.max_runs) >> 20
        );
    }
    // SIGINT/SIGTERM end the accept loop: a connection to ourselves wakes it.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let stop = stop.clone();
        let socket = socket.clone();
        std::thread::spawn(move || {
            if signals.wait() {
                stop.store(true, std::sync::atomic::Ordering::Release);
                let _ = UnixStream::connect(&socket);
            }
        });
    }
    for conn in listener.incoming() {
        if stop.load(std::sync::atomic::Ordering::Acquire) {
            break;
        }
        let Ok(conn) = conn else { continue };
        let d = daemon.clone();
        std::thread::spawn(move || serve_connection(&d, conn));
    }
    if !opts.quiet {
        eprintln!("aet: daemon stopping");
    }
    let _ = std::fs::remove_file(&socket);
    daemon
        .engine
        .shutdown("the aet daemon stopped while the run was going on");
    let _ = std::fs::remove_dir_all(&daemon.state);
    guard.release();
    Ok(())
}

/// Blocks SIGINT and SIGTERM in every thread and waits for one on a thread of its own.
struct Signals(nix::sys::signal::SigSet);

impl Signals {
    fn wait(&mut self) -> bool {
        self.0.wait().is_ok()
    }
}

fn signal_hook_lite() -> Result<Signals, DaemonError> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block().map_err(|e| DaemonError::Io {
        socket: PathBuf::new(),
        source: e.into(),
    })?;
    Ok(Signals(set))
}

/// The uid of a connection's peer.
fn peer_uid(conn: &UnixStream) -> Option<u32> {
    nix::sys::socket::getsockopt(conn, nix::sys::socket::sockopt::PeerCredentials)
        .ok()
        .map(|c| c.uid())
}

fn send(conn: &mut UnixStream, r: &Response) -> std::io::Result<()> {
    let mut line = serde_json::to_string(r).expect("responses serialise");
    line.push('\n');
    conn.write_all(line.as_bytes())
}

/// One client: at most one run, whose lifetime is the connection's.
fn serve_connection(d: &Daemon, mut conn: UnixStream) {
    let uid = peer_uid(&conn);
    if uid != Some(0) {
        let _ = send(
            &mut conn,
            &Response::Error {
                message: format!(
                    "only root may use the aet daemon (the client's uid is {})",
                    uid.map_or("unknown".into(), |u| u.to_string())
                ),
            },
        );
        return;
    }
    let Ok(read) = conn.try_clone() else { return };
    let mut lines = BufReader::new(read);
    let mut run: Option<(u32, Option<PathBuf>)> = None;
    loop {
        let mut line = String::new();
        match lines.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let response = match serde_json::from_str::<Request>(&line) {
            Err(e) => Response::Error {
                message: format!("bad request: {e}"),
            },
            Ok(req) => handle(d, req, &mut run),
        };
        let stopped = matches!(response, Response::Stopped { .. });
        if send(&mut conn, &response).is_err() {
            break;
        }
        if stopped {
            run = None;
        }
    }
    // The client went away with its run still going: finish the ledger, marked incomplete.
    if let Some((slot, owned)) = run.take() {
        let mut r = Reasons::new();
        r.push(Incomplete::AetFailed {
            error: "the aet client of this run went away before the run ended".into(),
        });
        let _ = d.engine.stop_run(slot, MetaMap::new(), r);
        end_run(d, slot, owned.as_deref());
    }
}

/// Forgets a run: its place among the active runs, and its cgroup in the guard's list.
fn end_run(d: &Daemon, slot: u32, _owned: Option<&Path>) {
    let _ = std::fs::remove_file(d.state.join(slot.to_string()));
    let mut a = d.active.lock().unwrap_or_else(|p| p.into_inner());
    *a = a.saturating_sub(1);
}

fn handle(d: &Daemon, req: Request, run: &mut Option<(u32, Option<PathBuf>)>) -> Response {
    let err = |message: String| Response::Error { message };
    match req {
        Request::Hello { .. } => Response::Hello {
            version: VERSION,
            pid: std::process::id(),
            ringbuf_bytes: d.opts.ringbuf_bytes,
            max_runs: d.opts.max_runs,
        },
        Request::Start {
            scope,
            ledger,
            head,
            owned,
            on_overload,
        } => {
            if run.is_some() {
                return err("this connection already has a run".into());
            }
            {
                let mut a = d.active.lock().unwrap_or_else(|p| p.into_inner());
                if *a >= d.opts.max_runs {
                    return Response::Full {
                        max_runs: d.opts.max_runs,
                    };
                }
                *a += 1;
            }
            let quota = u64::from(d.opts.ringbuf_bytes / d.opts.max_runs);
            // Freezes are marked in the state directory: the daemon's guard thaws them.
            let overload = crate::monitor::slots::Overload {
                on_overload,
                marker_dir: Some(d.state.clone()),
            };
            match d
                .engine
                .start_run(&scope, &ledger, MetaMap(head), quota, &overload)
            {
                Ok(slot) => {
                    let cg = match (&scope, owned) {
                        (Scope::Cgroup { path, .. }, true) => Some(path.clone()),
                        _ => None,
                    };
                    if let Some(p) = &cg {
                        let _ = std::fs::write(
                            d.state.join(slot.to_string()),
                            p.as_os_str().as_encoded_bytes(),
                        );
                    }
                    *run = Some((slot, cg));
                    Response::Started { slot }
                }
                Err(e) => {
                    let mut a = d.active.lock().unwrap_or_else(|p| p.into_inner());
                    *a = a.saturating_sub(1);
                    err(e.to_string())
                }
            }
        }
        Request::Track { tids } => match run {
            Some((slot, _)) => {
                for tid in tids {
                    if let Err(e) = d.engine.track(*slot, tid) {
                        return err(e.to_string());
                    }
                }
                Response::Done
            }
            None => err("no run on this connection".into()),
        },
        // Only a task of this connection's run, and only once it is gone: otherwise any client
        // (or a root process of any run) could take a live task out of the record.
        Request::Untrack { tid } => match run {
            Some((slot, _)) if d.engine.tracked(*slot).contains(&tid) => {
                if crate::kernel::procfs::exists(tid) {
                    err(format!(
                        "task {tid} is still running: only a task that is gone leaves the \
                         tracked set"
                    ))
                } else {
                    d.engine.untrack(tid);
                    Response::Done
                }
            }
            Some(_) => err(format!(
                "task {tid} is not tracked by this connection's run"
            )),
            None => err("no run on this connection".into()),
        },
        Request::Tracked => match run {
            Some((slot, _)) => Response::Tracked {
                tids: d.engine.tracked(*slot),
            },
            None => err("no run on this connection".into()),
        },
        Request::Phase { name, keep, by } => match run {
            Some((slot, _)) => match d.engine.begin_phase(*slot, &name, keep, by) {
                Ok(record) => Response::Phase { record },
                Err(e) => err(e.to_string()),
            },
            None => err("no run on this connection".into()),
        },
        Request::Proxy { event } => match run {
            Some((slot, _)) => match d.engine.proxy_event(*slot, &event) {
                Ok(()) => Response::Done,
                Err(e) => err(e.to_string()),
            },
            None => err("no run on this connection".into()),
        },
        Request::Progress => match run {
            Some((slot, _)) => Response::Progress {
                progress: d.engine.progress(*slot),
            },
            None => err("no run on this connection".into()),
        },
        Request::Health => match run {
            Some((slot, _)) => Response::Health {
                write_error: d.engine.write_error(*slot),
            },
            None => err("no run on this connection".into()),
        },
        Request::Stop { extra, reasons } => match run.take() {
            Some((slot, owned)) => {
                let r = d.engine.stop_run(slot, MetaMap(extra), reasons);
                end_run(d, slot, owned.as_deref());
                match r {
                    Ok(report) => Response::Stopped { report },
                    Err(e) => err(e.to_string()),
                }
            }
            None => err("no run on this connection".into()),
        },
        Request::Status => Response::Status {
            pid: std::process::id(),
            started_ns: d.started_ns,
            ringbuf_bytes: d.opts.ringbuf_bytes,
            max_runs: d.opts.max_runs,
            runs: d.engine.runs(),
        },
    }
}

/// The guard of a daemon (`aet __guard-daemon DIR`): waits for its stdin to close, then kills
/// the cgroup of every run listed in `DIR` (the daemon died with them still going).
pub fn guard_main(state: &Path) -> anyhow::Result<()> {
    crate::guard::wait_for_stdin_close()?;
    // Nothing the daemon froze stays frozen: thawed before anything is killed.
    let thawed = crate::kernel::cgroup::thaw_marked(state);
    if thawed > 0 {
        eprintln!(
            "aet: daemon guard: the aet daemon died with {thawed} run(s) frozen; thawed them"
        );
    }
    let Ok(entries) = std::fs::read_dir(state) else {
        return Ok(());
    };
    let mut killed = 0;
    for e in entries.flatten() {
        let Ok(bytes) = std::fs::read(e.path()) else {
            continue;
        };
        let cg = PathBuf::from(std::ffi::OsString::from(
            String::from_utf8_lossy(&bytes).into_owned(),
        ));
        if crate::kernel::cgroup::populated(&cg).unwrap_or(false) {
            crate::kernel::cgroup::thaw(&cg);
            let _ = std::fs::write(cg.join("cgroup.kill"), b"1");
            killed += 1;
        }
        let _ = std::fs::remove_file(e.path());
    }
    if killed > 0 {
        eprintln!(
            "aet: daemon guard: the aet daemon died; killed the processes of {killed} run(s) it served"
        );
    }
    let _ = std::fs::remove_dir(state);
    Ok(())
}

/// The default socket, or `AET_SOCKET` when set.
pub fn default_socket() -> PathBuf {
    std::env::var_os("AET_SOCKET")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// How long a client waits for the daemon to answer a request before giving up.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A daemon's status (`aet daemon status`).
pub fn status(socket: &Path) -> Result<Option<Response>, DaemonError> {
    let Some(mut c) = client::Client::connect(socket)? else {
        return Ok(None);
    };
    let r = c.call(&Request::Status)?;
    c.closing();
    Ok(Some(r))
}

/// `HashMap` alias for requests.
pub type Meta = HashMap<String, String>;
