//! What a run leaves behind when the aet that ran it is killed (a harness's timeout sends
//! SIGKILL): the run's cgroup (`<cgroup v2>/aet/run-PID-NS`) and its control socket
//! (`/run/aet/control-PID-NS.sock`), both named by the pid of the `aet run` that made them. The
//! run's guard removes them when that aet dies; the daemon removes them when a client goes away
//! with its run, and at its start removes whatever a dead aet left (its pid no longer running).

use std::{
    io,
    path::{Path, PathBuf},
    time::Duration,
};

use crate::cgroup;

/// Where aet keeps its host-side runtime files: control sockets, the daemon's socket, the
/// sandbox's files.
pub const RUNTIME_DIR: &str = "/run/aet";

/// What [`sweep`] removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub cgroups: Vec<PathBuf>,
    pub sockets: Vec<PathBuf>,
}

/// The pid in a name `PREFIX<pid>-...`.
fn pid_in(name: &str, prefix: &str) -> Option<u32> {
    name.strip_prefix(prefix)?.split('-').next()?.parse().ok()
}

/// The pid of the `aet run` whose run cgroup is named `name` (`run-PID-NS`).
pub fn run_pid(name: &str) -> Option<u32> {
    pid_in(name, "run-")
}

fn running(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// The control sockets of the `aet run` with pid `pid`, in `runtime`.
pub fn control_sockets_of(runtime: &Path, pid: u32) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(runtime) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.ends_with(".sock") && pid_in(&name, "control-") == Some(pid)
        })
        .map(|e| e.path())
        .collect()
}

/// Removes the control sockets of the `aet run` with pid `pid`; returns what it removed.
pub fn remove_control_sockets(runtime: &Path, pid: u32) -> Vec<PathBuf> {
    control_sockets_of(runtime, pid)
        .into_iter()
        .filter(|p| std::fs::remove_file(p).is_ok())
        .collect()
}

/// Kills what is left in the cgroup at `path` (thawed first) and removes it with every cgroup
/// below it (a container runtime's, a sandbox's), deepest first.
pub fn remove_cgroup_tree(path: &Path) -> io::Result<()> {
    if !path.exists() {
        return Ok(());
    }
    if cgroup::populated(path).map_err(io::Error::other)? {
        cgroup::thaw(path);
        let kill = path.join("cgroup.kill");
        if kill.exists() {
            std::fs::write(&kill, b"1")?;
        } else {
            for pid in cgroup::procs(path).map_err(io::Error::other)? {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        for _ in 0..500 {
            if !cgroup::populated(path).map_err(io::Error::other)? {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let mut dirs = vec![path.to_owned()];
    let mut i = 0;
    while i < dirs.len() {
        if let Ok(entries) = std::fs::read_dir(&dirs[i]) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(e.path());
                }
            }
        }
        i += 1;
    }
    let mut last = Ok(());
    // Deepest first; a cgroup whose last process is still being reaped is tried again.
    for d in dirs.iter().rev() {
        for attempt in 0..100 {
            match std::fs::remove_dir(d) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) if attempt == 99 => last = Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
    last
}

/// Removes the run cgroups and control sockets whose `aet run` is no longer running: what aet
/// runs killed before they could clean up left behind. A name whose pid runs is left alone
/// (its run may be going on).
pub fn sweep(runtime: &Path) -> Swept {
    let mut out = Swept::default();
    if let Ok(root) = cgroup::cgroup2_root()
        && let Ok(entries) = std::fs::read_dir(root.join("aet"))
    {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if let Some(pid) = run_pid(&name)
                && !running(pid)
                && e.file_type().is_ok_and(|t| t.is_dir())
                && remove_cgroup_tree(&e.path()).is_ok()
            {
                out.cgroups.push(e.path());
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(runtime) {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".sock")
                && let Some(pid) = pid_in(&name, "control-")
                && !running(pid)
                && std::fs::remove_file(e.path()).is_ok()
            {
                out.sockets.push(e.path());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_give_their_pid() {
        assert_eq!(pid_in("control-123-456.sock", "control-"), Some(123));
        assert_eq!(run_pid("run-77-1700000000"), Some(77));
        assert_eq!(pid_in("daemon-1-2.sock", "control-"), None);
        assert_eq!(pid_in("run-x-1", "run-"), None);
    }

    #[test]
    fn sockets_of_a_dead_pid_go_and_a_running_ones_stay() {
        let d = tempfile::tempdir().unwrap();
        // A pid beyond pid_max is never running.
        let dead = d.path().join("control-4194305-1.sock");
        let mine = d
            .path()
            .join(format!("control-{}-1.sock", std::process::id()));
        let other = d.path().join("aet.sock");
        for p in [&dead, &mine, &other] {
            std::fs::write(p, "").unwrap();
        }
        let swept = sweep(d.path());
        assert_eq!(swept.sockets, vec![dead.clone()]);
        assert!(!dead.exists() && mine.exists() && other.exists());
        assert_eq!(
            remove_control_sockets(d.path(), std::process::id()),
            vec![mine.clone()]
        );
        assert!(!mine.exists());
    }
}
