//! The daemon nobody has to start: a run that finds no daemon at its socket starts one
//! (`aet daemon --auto`, detached, logging to `SOCKET.log`, leaving when idle) and is served by
//! it. A lock beside the socket (`SOCKET.lock`) makes two first runs start one daemon: the
//! second waits for the first's, then connects to it.

use std::{
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use aet_monitor::daemon::{DaemonError, Started, lock, log_path, protocol::Request, refused_path};

use super::client::Client;

/// How long an automatic daemon stays with no connection (`AET_DAEMON_IDLE_EXIT`, seconds,
/// overrides it).
pub const AUTO_IDLE_EXIT: Duration = Duration::from_secs(300);

/// The environment variable that sets an automatic daemon's idle time, in seconds.
pub const IDLE_EXIT_ENV: &str = "AET_DAEMON_IDLE_EXIT";

/// How long a run waits for the daemon it started to answer.
const START_LIMIT: Duration = Duration::from_secs(60);

/// The idle time of an automatic daemon: `AET_DAEMON_IDLE_EXIT` seconds, else 300.
pub fn auto_idle_exit() -> Result<Duration, String> {
    match std::env::var(IDLE_EXIT_ENV) {
        Err(_) => Ok(AUTO_IDLE_EXIT),
        Ok(v) => v
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| format!("{IDLE_EXIT_ENV}={v}: not a positive number of seconds")),
    }
}

/// Connects to the daemon at `socket`, starting one first when none answers.
pub fn connect_or_start(socket: &Path) -> Result<Client, DaemonError> {
    if let Some(c) = Client::connect(socket)? {
        return Ok(c);
    }
    let start_err = |why: String| DaemonError::Start {
        socket: socket.to_owned(),
        log: log_path(socket),
        why,
    };
    let idle = auto_idle_exit().map_err(start_err)?;
    if let Some(parent) = socket.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| start_err(format!("{}: {e}", parent.display())))?;
    }
    let _lock = lock(socket, true);
    // Another run may have started one while this one waited for the lock.
    if let Some(c) = Client::connect(socket)? {
        return Ok(c);
    }
    let log = log_path(socket);
    let refused = refused_path(socket);
    let _ = std::fs::remove_file(&refused);
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| start_err(format!("{}: {e}", log.display())))?;
    let err = out
        .try_clone()
        .map_err(|e| start_err(format!("{}: {e}", log.display())))?;
    let exe = std::env::current_exe().map_err(|e| start_err(format!("this aet's path: {e}")))?;
    let mut cmd = Command::new(exe);
    // The daemon outlives this run: none of its debugging switches, fault points or passed
    // sockets go with it.
    // (But for the kernel the run was told to see: the daemon loads for it.)
    cmd.env_clear().envs(std::env::vars_os().filter(|(k, _)| {
        let k = k.to_string_lossy();
        k == aet_monitor::loader::features::LACKS_ENV
            || !(k.starts_with("AET_DEBUG_") || k.starts_with("LISTEN_"))
    }));
    // It outlives the run's directory too: it works from `/`, its socket named absolutely.
    let absolute =
        std::path::absolute(socket).map_err(|e| start_err(format!("{}: {e}", socket.display())))?;
    cmd.current_dir("/")
        .args(["daemon", "--auto", "--socket"])
        .arg(&absolute)
        .arg("--idle-exit")
        .arg(format!("{}", idle.as_secs_f64()))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    // SAFETY: setsid is async-signal-safe; the child leaves this aet's session and process
    // group, so a terminal's ^C or a harness killing the group does not reach it.
    // Every fd past stderr is closed at exec: a harness's pipe this aet inherited must not stay
    // open for as long as the daemon lives.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
            if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| start_err(format!("cannot run aet daemon: {e}")))?;
    let started = Instant::now();
    loop {
        if let Some(c) = Client::connect(socket)? {
            return Ok(c);
        }
        if let Ok(Some(status)) = child.try_wait() {
            // Exit 1: another daemon serves the socket (it came up meanwhile).
            if let Some(c) = Client::connect(socket)? {
                return Ok(c);
            }
            if let Ok(why) = std::fs::read_to_string(&refused) {
                return Err(DaemonError::CannotLoad {
                    log,
                    why: why.trim_end().to_owned(),
                });
            }
            return Err(start_err(format!("it exited ({status})")));
        }
        if started.elapsed() > START_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(start_err(format!(
                "it did not answer within {} s; killed",
                START_LIMIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `aet daemon stop`: asks the daemon at `socket` to leave and waits until it no longer
/// answers. `Ok(None)` when no daemon answers there; else the daemon's pid.
pub fn stop(socket: &Path, limit: Duration) -> Result<Option<u32>, DaemonError> {
    let Some(mut c) = Client::connect(socket)? else {
        return Ok(None);
    };
    let pid = c.daemon_pid();
    // systemd keeps an activated daemon's socket: a connection would start it again, so its
    // leaving is seen in its process instead (`systemctl stop aet.socket` ends both).
    let activated = c.started == Started::Socket.name();
    c.closing();
    c.call(&Request::Leave)?;
    drop(c);
    let started = Instant::now();
    let here = |pid| Path::new(&format!("/proc/{pid}")).exists();
    while if activated {
        here(pid)
    } else {
        std::os::unix::net::UnixStream::connect(socket).is_ok()
    } {
        if started.elapsed() > limit {
            return Err(DaemonError::Unresponsive {
                socket: socket.to_owned(),
                pid,
                why: format!("did not leave within {} s", limit.as_secs()),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Some(pid))
}
