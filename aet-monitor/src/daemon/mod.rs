//! `aet daemon`: one resident monitor for the host. It loads and attaches the programs once and
//! serves every `aet run` and `aet monitor` over a unix socket (root only, mode 0600): each run
//! is a scope in the kernel's maps, so a syscall costs the same look-ups whatever the number of
//! runs, and a run starts without loading anything.
//!
//! Faults: a guard process (`aet __guard-daemon`) kills the cgroups of the runs the daemon
//! started for `aet run` if the daemon dies, even by SIGKILL; the client of a run kills its own
//! run when the daemon hangs up; a run whose client goes away is finished, marked incomplete. The
//! daemon never writes a ledger that exists (ledgers are created exclusively).

//!
//! Here: what the daemon and its clients share (the errors, the options, the files beside the
//! socket), the protocol ([`protocol`]) and the serving side ([`serve`]). The client and the
//! start of a daemon for a run are the `aet` binary's (`aet_user::daemon`).

pub mod protocol;
pub mod serve;

use std::{
    fs::File,
    path::{Path, PathBuf},
    time::Duration,
};

use crate::MonitorError;

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
    /// The daemon that answers is another build of aet: neither serves the other.
    #[error(
        "the aet daemon (pid {pid}) at {socket} is another build of aet ({theirs}; this aet is \
         {ours}): stop it with `aet daemon stop`, or run this build's daemon on another socket"
    )]
    OtherBuild {
        socket: PathBuf,
        pid: u32,
        theirs: String,
        ours: String,
    },
    /// A daemon started for a run did not come up.
    #[error("could not start an aet daemon at {socket}: {why} (its log: {log})")]
    Start {
        socket: PathBuf,
        log: PathBuf,
        why: String,
    },
    /// The daemon started for a run could not load the programs on this kernel: neither can
    /// the run, which says why once and does not try.
    #[error("{why}\n  (said by the aet daemon this run started; its log: {log})")]
    CannotLoad { log: PathBuf, why: String },
    /// The monitor failed.
    #[error(transparent)]
    Monitor(#[from] MonitorError),
    /// The guard could not be started.
    #[error("cannot start the daemon's guard: {0}")]
    Guard(#[source] std::io::Error),
}

/// How a daemon came to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Started {
    /// `aet daemon` by hand (or a service).
    Manual,
    /// By a run that found no daemon (`aet daemon --auto`).
    Auto,
    /// By systemd on the first connection to its socket (`LISTEN_FDS`).
    Socket,
}

impl Started {
    pub fn name(self) -> &'static str {
        match self {
            Self::Manual => "manual",
            Self::Auto => "auto",
            Self::Socket => "socket",
        }
    }
}

/// Options of `aet daemon`.
#[derive(Clone, Debug)]
pub struct DaemonOptions {
    pub socket: PathBuf,
    pub ringbuf_bytes: u32,
    pub max_runs: u32,
    pub quiet: bool,
    /// Leave after this long with no connection.
    pub idle_exit: Option<Duration>,
    /// Started by a run (`--auto`): moves itself into a cgroup of its own.
    pub auto: bool,
}

/// `SOCKET.SUFFIX`, beside the socket.
pub(crate) fn sibling(socket: &Path, suffix: &str) -> PathBuf {
    let name = socket
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "aet.sock".into());
    socket.with_file_name(format!("{name}.{suffix}"))
}

/// The log of a daemon started for a run.
pub fn log_path(socket: &Path) -> PathBuf {
    sibling(socket, "log")
}

/// The lock that one daemon start at a time holds.
pub fn lock_path(socket: &Path) -> PathBuf {
    sibling(socket, "lock")
}

/// The start lock, held until dropped; `None` when it cannot be taken (no such directory, a
/// read-only one): starts are then not serialised, and the second daemon finds the first's socket
/// answering and leaves. `create`: make the lock file if none is there (a run about to start a
/// daemon); a leaving daemon takes the lock only when runs ever used one.
pub fn lock(socket: &Path, create: bool) -> Option<nix::fcntl::Flock<File>> {
    let f = std::fs::OpenOptions::new()
        .create(create)
        .truncate(false)
        .write(true)
        .open(lock_path(socket))
        .ok()?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).ok()
}

/// Where a daemon that could not load the programs on this kernel says why (`SOCKET.refused`).
pub fn refused_path(socket: &Path) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".refused");
    PathBuf::from(p)
}

/// The default socket, or `AET_SOCKET` when set.
pub fn default_socket() -> PathBuf {
    std::env::var_os("AET_SOCKET")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}
