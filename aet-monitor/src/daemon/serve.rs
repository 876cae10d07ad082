//! The daemon's serving side: it loads the programs once, listens on the socket, and serves
//! each connection's run on a thread of its own until it is asked to leave, is idle past
//! `--idle-exit`, or gets SIGINT or SIGTERM. Its guard (`aet __guard-daemon`, [`guard_main`])
//! kills the runs it started if it dies.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::{
        fs::PermissionsExt as _,
        net::{UnixListener, UnixStream},
    },
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use aet_kernel::guard::{Guard, wait_for_stdin_close};
use aet_ledger::{
    metadata::{Incomplete, MetaMap, Reasons},
    util::now_ns,
};

use super::protocol::{Request, Response, VERSION};
use super::{DaemonError, DaemonOptions, Started, lock, refused_path, sibling};
use crate::loader::{LoadError, LoadOptions, Scope};
use crate::{MonitorError, build_id::BUILD_ID, slots::Monitor};

/// The directory where a daemon lists the cgroups of the runs it must kill if it dies (one per
/// daemon: one leaving while the next starts never share it).
fn state_dir(socket: &Path) -> PathBuf {
    sibling(socket, &format!("runs.{}", std::process::id()))
}

/// Why the accept loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leave {
    /// SIGINT, SIGTERM or `aet daemon stop`: the runs going on are finished, incomplete.
    Stop,
    /// Idle past `--idle-exit`: what is already connected is served to its end.
    Idle,
}

/// What every connection's thread shares.
struct Daemon {
    monitor: Monitor,
    opts: DaemonOptions,
    started: Started,
    started_ns: i64,
    state: PathBuf,
    /// Runs being served (a count checked against `max_runs`).
    active: std::sync::Mutex<u32>,
    /// Connections open, and when the last one closed (for `--idle-exit`).
    connections: std::sync::Mutex<(u32, std::time::Instant)>,
    /// Set when the daemon is to leave, and why.
    leave: std::sync::Mutex<Option<Leave>>,
}

impl Daemon {
    fn leaving(&self) -> Option<Leave> {
        *self.leave.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks the accept loop to end (a connection to ourselves wakes it).
    fn leave(&self, why: Leave) {
        self.leave
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(why);
        let _ = UnixStream::connect(&self.opts.socket);
    }

    fn connection(&self, delta: i32) {
        let mut c = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        c.0 = c.0.saturating_add_signed(delta);
        c.1 = std::time::Instant::now();
    }
}

/// The socket systemd passed (`LISTEN_FDS`), if it passed one.
fn activated(socket: &Path) -> Result<Option<UnixListener>, DaemonError> {
    let mut fds = listenfd::ListenFd::from_env();
    if fds.len() == 0 {
        return Ok(None);
    }
    fds.take_unix_listener(0).map_err(|source| DaemonError::Io {
        socket: socket.to_owned(),
        source,
    })
}

/// Runs the daemon in the foreground until SIGINT or SIGTERM, `aet daemon stop`, an idle time
/// past `--idle-exit`, or a fatal error.
pub fn serve(mut opts: DaemonOptions) -> Result<(), DaemonError> {
    let begun = std::time::Instant::now();
    let passed = activated(&opts.socket)?;
    // A socket systemd activated is named by the socket itself.
    if let Some(path) = passed
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .and_then(|a| a.as_pathname().map(Path::to_owned))
    {
        opts.socket = path;
    }
    let started = match (&passed, opts.auto) {
        (Some(_), _) => Started::Socket,
        (None, true) => Started::Auto,
        (None, false) => Started::Manual,
    };
    let socket = opts.socket.clone();
    let io = |source| DaemonError::Io {
        socket: socket.clone(),
        source,
    };
    if passed.is_none() {
        if let Some(parent) = socket.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        // A socket file nobody answers on is a dead daemon's: replace it. One that answers is
        // not.
        if socket.exists() {
            if UnixStream::connect(&socket).is_ok() {
                return Err(DaemonError::Running(socket.clone()));
            }
            std::fs::remove_file(&socket).map_err(io)?;
        }
    }
    if opts.auto {
        own_cgroup();
    }
    // SIGINT and SIGTERM are taken by one thread; blocked first, so every thread started from
    // here on (the consumer too) leaves them to it.
    let mut signals = signal_hook_lite()?;
    let refused_at = refused_path(&socket);
    let monitor = match Monitor::load(&LoadOptions {
        ringbuf_bytes: opts.ringbuf_bytes,
    }) {
        Ok(e) => e,
        Err(e) => {
            // What this kernel cannot load, no run on it can: the run that started this daemon
            // reads why from here and does not try the same load itself.
            // A new file (the socket's directory may be anyone's: never through a link).
            if let MonitorError::Load(LoadError::Refused(_) | LoadError::Kernel(_)) = &e {
                let _ = std::fs::remove_file(&refused_at);
                if let Ok(mut f) = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&refused_at)
                {
                    let _ = std::io::Write::write_all(&mut f, format!("{e}\n").as_bytes());
                }
            }
            return Err(e.into());
        }
    };
    let _ = std::fs::remove_file(&refused_at);
    let loaded = begun.elapsed();
    // What runs whose aet was killed left behind (their cgroups, their control sockets): an
    // earlier daemon's clients, or standalone runs.
    let swept = aet_kernel::leftovers::sweep(Path::new(aet_kernel::leftovers::RUNTIME_DIR));
    if !opts.quiet && (!swept.cgroups.is_empty() || !swept.sockets.is_empty()) {
        eprintln!(
            "aet: daemon: removed what dead runs left: {} cgroup(s), {} control socket(s)",
            swept.cgroups.len(),
            swept.sockets.len()
        );
    }
    let state = state_dir(&socket);
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).map_err(io)?;
    let guard = Guard::start_for_daemon(&state).map_err(DaemonError::Guard)?;
    let listener = match passed {
        Some(l) => l,
        None => {
            // Bound under a name of its own, made root's alone, then renamed into place: the
            // socket is never reachable with the mode the umask gave it.
            let name = socket.file_name().unwrap_or_default().to_string_lossy();
            let fresh = socket.with_file_name(format!(".{name}.{}", std::process::id()));
            let _ = std::fs::remove_file(&fresh);
            let l = UnixListener::bind(&fresh).map_err(io)?;
            std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o600))
                .and_then(|()| std::fs::rename(&fresh, &socket))
                .inspect_err(|_| {
                    let _ = std::fs::remove_file(&fresh);
                })
                .map_err(io)?;
            l
        }
    };
    let daemon = Arc::new(Daemon {
        monitor,
        opts: opts.clone(),
        started,
        started_ns: now_ns(),
        state,
        active: std::sync::Mutex::new(0),
        connections: std::sync::Mutex::new((0, std::time::Instant::now())),
        leave: std::sync::Mutex::new(None),
    });
    if !opts.quiet {
        eprintln!(
            "aet: daemon {} ({}) serving {} (programs loaded in {} ms; ring buffer {} MiB, up \
             to {} runs of {} MiB each{})",
            std::process::id(),
            started.name(),
            socket.display(),
            loaded.as_millis(),
            opts.ringbuf_bytes >> 20,
            opts.max_runs,
            (opts.ringbuf_bytes / opts.max_runs) >> 20,
            match opts.idle_exit {
                Some(t) => format!("; leaves after {} s idle", t.as_secs_f64()),
                None => String::new(),
            }
        );
    }
    {
        let d = daemon.clone();
        std::thread::spawn(move || {
            if signals.wait() {
                d.leave(Leave::Stop);
            }
        });
    }
    if let Some(idle) = opts.idle_exit {
        let d = daemon.clone();
        std::thread::spawn(move || idle_watch(&d, idle));
    }
    for conn in listener.incoming() {
        let why = daemon.leaving();
        let Ok(conn) = conn else { continue };
        // Leaving because idle: a client that connected at that moment is still served.
        if why == Some(Leave::Stop) {
            break;
        }
        spawn_connection(&daemon, conn);
        if why.is_some() {
            break;
        }
    }
    let why = daemon.leaving().unwrap_or(Leave::Stop);
    if !opts.quiet {
        eprintln!(
            "aet: daemon stopping ({})",
            match why {
                Leave::Stop => "asked to",
                Leave::Idle => "idle",
            }
        );
    }
    if started != Started::Socket {
        // Under the start lock: a run that finds no socket from here on starts the next daemon
        // only once this one's socket is gone.
        let lock = lock(&socket, false);
        let _ = std::fs::remove_file(&socket);
        drop(lock);
    }
    if why == Leave::Idle {
        // What connected before the socket went is served to its end.
        let _ = listener.set_nonblocking(true);
        while let Ok((conn, _)) = listener.accept() {
            let _ = conn.set_nonblocking(false);
            spawn_connection(&daemon, conn);
        }
        drop(listener);
        while daemon
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            > 0
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    daemon
        .monitor
        .shutdown("the aet daemon stopped while the run was going on");
    let _ = std::fs::remove_dir_all(&daemon.state);
    guard.release();
    Ok(())
}

/// Serves a connection on a thread of its own, counted while it is open.
fn spawn_connection(d: &Arc<Daemon>, conn: UnixStream) {
    d.connection(1);
    let d = d.clone();
    std::thread::spawn(move || {
        serve_connection(&d, conn);
        d.connection(-1);
    });
}

/// Leaves once no connection has been open for `idle`.
fn idle_watch(d: &Daemon, idle: Duration) {
    loop {
        std::thread::sleep(idle.min(Duration::from_millis(500)));
        if d.leaving().is_some() {
            return;
        }
        let (open, since) = *d.connections.lock().unwrap_or_else(|p| p.into_inner());
        if open == 0 && since.elapsed() >= idle {
            d.leave(Leave::Idle);
            return;
        }
    }
}

/// A daemon a run started moves into a cgroup of its own (`<cgroup2>/aet/daemon`): it is no
/// part of the run, the shell or the job that started it, and outlives them.
fn own_cgroup() {
    let Ok(root) = aet_kernel::cgroup::cgroup2_root() else {
        return;
    };
    let dir = root.join("aet").join("daemon");
    if std::fs::create_dir_all(&dir).is_ok()
        && let Err(e) = std::fs::write(dir.join("cgroup.procs"), b"0")
    {
        eprintln!(
            "aet: warning: the daemon stays in its starter's cgroup ({}: {e})",
            dir.display()
        );
    }
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

/// The uid and pid of a connection's peer.
fn peer(conn: &UnixStream) -> Option<(u32, u32)> {
    nix::sys::socket::getsockopt(conn, nix::sys::socket::sockopt::PeerCredentials)
        .ok()
        .map(|c| (c.uid(), c.pid() as u32))
}

fn send(conn: &mut UnixStream, r: &Response) -> std::io::Result<()> {
    let mut line = serde_json::to_string(r).expect("responses serialise");
    line.push('\n');
    conn.write_all(line.as_bytes())
}

/// How long an answer may take before the daemon's log says so.
const SLOW_ANSWER: Duration = Duration::from_secs(2);

/// One client: at most one run, whose lifetime is the connection's.
fn serve_connection(d: &Daemon, mut conn: UnixStream) {
    let peer = peer(&conn);
    let uid = peer.map(|(u, _)| u);
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
        let response = match super::protocol::decode::<Request>(&line) {
            Err(e) => Response::Error {
                message: format!("bad request: {e}"),
            },
            Ok(req) => {
                let kind = req.kind();
                let t = std::time::Instant::now();
                let r = handle(d, req, &mut run);
                // A slow answer is said in the daemon's log: a run gives up on a health check
                // after 10 s, and this is where to look for why.
                if t.elapsed() >= SLOW_ANSWER {
                    eprintln!(
                        "aet: daemon: a {kind} request took {:.1} s{}",
                        t.elapsed().as_secs_f64(),
                        run.as_ref()
                            .map(|(slot, _)| format!(" (run slot {slot})"))
                            .unwrap_or_default()
                    );
                }
                r
            }
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
        let _ = d.monitor.stop_run(slot, MetaMap::new(), r);
        end_run(d, slot, owned.as_deref());
        // Nothing of it is left behind: what still runs in its cgroup is killed and the cgroup
        // removed (its client's guard does the same; whichever comes first), and so is the
        // client's control socket.
        if let Some(cg) = &owned
            && let Err(e) = aet_kernel::leftovers::remove_cgroup_tree(cg)
        {
            eprintln!(
                "aet: daemon: the cgroup {} of a run whose client went away: {e}",
                cg.display()
            );
        }
        if let Some((_, pid)) = peer {
            aet_kernel::leftovers::remove_control_sockets(
                Path::new(aet_kernel::leftovers::RUNTIME_DIR),
                pid,
            );
        }
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
            build: BUILD_ID.into(),
            pid: std::process::id(),
            ringbuf_bytes: d.opts.ringbuf_bytes,
            max_runs: d.opts.max_runs,
            started: d.started.name().into(),
        },
        Request::Leave => {
            d.leave(Leave::Stop);
            Response::Leaving
        }
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
            let overload = crate::slots::Overload {
                on_overload,
                marker_dir: Some(d.state.clone()),
            };
            match d
                .monitor
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
                    if let Err(e) = d.monitor.track(*slot, tid) {
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
            Some((slot, _)) if d.monitor.tracked(*slot).contains(&tid) => {
                if aet_kernel::procfs::exists(tid) {
                    err(format!(
                        "task {tid} is still running: only a task that is gone leaves the \
                         tracked set"
                    ))
                } else {
                    d.monitor.untrack(tid);
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
                tids: d.monitor.tracked(*slot),
            },
            None => err("no run on this connection".into()),
        },
        Request::Phase { name, keep, by } => match run {
            Some((slot, _)) => match d.monitor.begin_phase(*slot, &name, keep, by) {
                Ok(record) => Response::Phase { record },
                Err(e) => err(e.to_string()),
            },
            None => err("no run on this connection".into()),
        },
        Request::Proxy { event } => match run {
            Some((slot, _)) => match d.monitor.proxy_event(*slot, &event) {
                Ok(()) => Response::Done,
                Err(e) => err(e.to_string()),
            },
            None => err("no run on this connection".into()),
        },
        Request::Progress => match run {
            Some((slot, _)) => Response::Progress {
                progress: d.monitor.progress(*slot),
            },
            None => err("no run on this connection".into()),
        },
        Request::Health => match run {
            Some((slot, _)) => Response::Health {
                write_error: d.monitor.write_error(*slot),
            },
            None => err("no run on this connection".into()),
        },
        Request::Stop { extra, reasons } => match run.take() {
            Some((slot, owned)) => {
                let r = d.monitor.stop_run(slot, MetaMap(extra), reasons);
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
            runs: d.monitor.runs(),
        },
    }
}

/// The guard of a daemon (`aet __guard-daemon DIR`): waits for its stdin to close, then kills
/// the cgroup of every run listed in `DIR` (the daemon died with them still going).
pub fn guard_main(state: &Path) -> std::io::Result<()> {
    wait_for_stdin_close()?;
    // Nothing the daemon froze stays frozen: thawed before anything is killed.
    let thawed = aet_kernel::cgroup::thaw_marked(state);
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
        if aet_kernel::cgroup::populated(&cg).unwrap_or(false) {
            aet_kernel::cgroup::thaw(&cg);
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
