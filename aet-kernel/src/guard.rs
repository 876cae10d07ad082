//! The guard: a small process that outlives `aet run` (or `aet daemon`) to kill what it leaves
//! behind. It holds the read end of a pipe whose write end only the aet it guards holds; when
//! that aet dies, even by SIGKILL, the pipe closes and the guard kills the run's cgroup (or every
//! cgroup the daemon listed), so a command never goes on unmonitored.

use std::{io, path::Path};

use crate::{cgroup, leftovers};

/// A watchdog process for a run's cgroup. `aet run` starts it before the command and holds the
/// write end of its stdin; if `aet run` dies (even by SIGKILL) the pipe closes and the guard kills
/// everything left in the cgroup and removes it, so the command never goes on unmonitored. After
/// a normal teardown the cgroup is already gone and the guard just exits.
pub struct Guard {
    stdin: Option<std::process::ChildStdin>,
    child: std::process::Child,
}

impl Guard {
    /// Starts `aet SUBCOMMAND ARG` (this same binary) with a pipe on its stdin that only this
    /// process holds.
    fn spawn(subcommand: &str, arg: &Path) -> io::Result<Self> {
        use std::os::unix::process::CommandExt as _;
        let mut child = std::process::Command::new("/proc/self/exe")
            .arg(subcommand)
            .arg(arg)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            // A process group of its own: a harness that kills the whole group of the aet it
            // guards (`killpg`, a shell's job control) does not take the guard with it.
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take();
        Ok(Self { stdin, child })
    }

    /// Starts `aet __guard CGROUP`.
    pub fn start(cgroup: &Path) -> io::Result<Self> {
        Self::spawn("__guard", cgroup)
    }

    /// Starts `aet __guard-daemon DIR` for a daemon (see `aet_monitor::daemon::serve::guard_main`).
    pub fn start_for_daemon(state: &Path) -> io::Result<Self> {
        Self::spawn("__guard-daemon", state)
    }

    /// Starts `aet __guard-thaw DIR`: if this aet dies, every cgroup a marker in `DIR` names
    /// is thawed (see `monitor::overload`).
    pub fn start_thaw(dir: &Path) -> io::Result<Self> {
        Self::spawn("__guard-thaw", dir)
    }

    /// Tells the guard the run ended cleanly and waits for it.
    pub fn release(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// The guard process: waits for its stdin to close, then kills and removes the cgroup (with
/// any below it) if it is still there, and the control socket of the aet it guarded (the pid in
/// the run cgroup's name, `run-PID-NS`: never the parent's pid, which after an early death of
/// that aet is whichever process adopted the guard).
pub fn guard_main(cgroup: &Path) -> io::Result<()> {
    let guarded = cgroup
        .file_name()
        .and_then(|n| leftovers::run_pid(&n.to_string_lossy()));
    wait_for_stdin_close()?;
    if let Some(pid) = guarded {
        leftovers::remove_control_sockets(Path::new(leftovers::RUNTIME_DIR), pid);
    }
    if !cgroup.exists() {
        return Ok(());
    }
    if cgroup::populated(cgroup).map_err(io::Error::other)? {
        let pids = cgroup::procs(cgroup).map_err(io::Error::other)?;
        eprintln!(
            "aet: guard: aet run ended without finishing its run; killed {} process(es) left in {}",
            pids.len(),
            cgroup.display()
        );
    }
    // Thawed first, then killed: a run aet froze is never left frozen, whatever happens next.
    leftovers::remove_cgroup_tree(cgroup)
}

/// The thaw guard: waits for its stdin to close, then thaws every cgroup a marker in `dir` names
/// (a freeze the aet it guarded had not undone) and removes `dir`.
pub fn thaw_main(dir: &Path) -> io::Result<()> {
    wait_for_stdin_close()?;
    let n = cgroup::thaw_marked(dir);
    if n > 0 {
        eprintln!("aet: guard: aet ended with {n} run(s) frozen; thawed them");
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

/// A guard's wait: ignores the signals a terminal or a harness sends to a whole process group,
/// and returns when its stdin closes (the process it guards is gone).
pub fn wait_for_stdin_close() -> io::Result<()> {
    use nix::sys::signal::{SigHandler, SigSet, Signal, signal};
    // A guard started by a daemon inherits its blocked signals: unblock them to ignore them.
    SigSet::all().thread_unblock()?;
    for s in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        // SAFETY: setting a signal to be ignored has no handler to be unsafe in.
        unsafe { signal(s, SigHandler::SigIgn) }?;
    }
    let mut buf = [0u8; 64];
    loop {
        match nix::unistd::read(std::io::stdin(), &mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    Ok(())
}
