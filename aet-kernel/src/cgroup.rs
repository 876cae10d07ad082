//! cgroup v2 groups for runs: created per run, used to scope the monitor in the kernel (its id is
//! what `bpf_get_current_cgroup_id()` returns), to wait for the run's processes and to kill them.
//!
//! This module never kills anything outside the run's own cgroup.

use std::{
    fs,
    io::{self, Write as _},
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

/// Errors handling cgroups.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No cgroup2 filesystem is mounted.
    #[error("no cgroup v2 hierarchy is mounted (looked in /proc/self/mountinfo)")]
    NoCgroup2,
    /// A cgroup file operation failed.
    #[error("cgroup {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Processes survived `cgroup.kill`.
    #[error("cgroup {path} still has processes {pids:?} after kill")]
    Survivors { path: PathBuf, pids: Vec<u32> },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup` or, on hybrid hosts,
/// `/sys/fs/cgroup/unified`).
pub fn cgroup2_root() -> Result<PathBuf, CgroupError> {
    let info = fs::read_to_string("/proc/self/mountinfo").map_err(io_err(Path::new("/proc")))?;
    for line in info.lines() {
        // mountinfo: ... mount_point ... - fstype source options
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if right.split_whitespace().next() == Some("cgroup2")
            && let Some(mp) = left.split_whitespace().nth(4)
        {
            return Ok(PathBuf::from(unescape_mountinfo(mp)));
        }
    }
    Err(CgroupError::NoCgroup2)
}

/// Decodes the octal escapes (`\040` for a space) mountinfo uses in paths.
pub fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup v2 id of a cgroup directory (its inode number).
pub fn cgroup_id(path: &Path) -> Result<u64, CgroupError> {
    Ok(fs::metadata(path).map_err(io_err(path))?.ino())
}

/// The cgroup v2 directory of a process (from `/proc/PID/cgroup`, the `0::` line).
pub fn cgroup_of(pid: u32) -> Result<PathBuf, CgroupError> {
    let p = PathBuf::from(format!("/proc/{pid}/cgroup"));
    let text = fs::read_to_string(&p).map_err(io_err(&p))?;
    let rel = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or(CgroupError::NoCgroup2)?;
    Ok(cgroup2_root()?.join(rel.trim_start_matches('/')))
}

/// Pids listed in a cgroup's `cgroup.procs`.
pub fn procs(path: &Path) -> Result<Vec<u32>, CgroupError> {
    let p = path.join("cgroup.procs");
    let text = fs::read_to_string(&p).map_err(io_err(&p))?;
    Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// Thaws a cgroup (`cgroup.freeze` = 0) if it has the file; errors are ignored (a cgroup that
/// is gone is not frozen).
pub fn thaw(path: &Path) {
    let f = path.join("cgroup.freeze");
    if f.exists() {
        let _ = fs::write(f, b"0");
    }
}

/// The name prefix of the files that say a cgroup is frozen by aet: each holds the path of the
/// cgroup's `cgroup.freeze` (see `monitor::overload`).
pub const FREEZE_MARKER_PREFIX: &str = "frozen-";

/// Thaws every cgroup a marker in `dir` names (a guard's first step when the aet it guards died:
/// nothing it froze stays frozen). Returns how many.
pub fn thaw_marked(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in entries.flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .starts_with(FREEZE_MARKER_PREFIX)
        {
            continue;
        }
        if let Ok(bytes) = fs::read(e.path()) {
            let file = PathBuf::from(std::ffi::OsString::from(
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
            if fs::write(&file, b"0").is_ok() {
                n += 1;
            }
        }
        let _ = fs::remove_file(e.path());
    }
    n
}

/// Does the cgroup (or a descendant) hold any process? A removed cgroup holds none.
pub fn populated(path: &Path) -> Result<bool, CgroupError> {
    let p = path.join("cgroup.events");
    match fs::read_to_string(&p) {
        Ok(text) => Ok(text.lines().any(|l| l.trim() == "populated 1")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(&p)(e)),
    }
}

/// A cgroup's place in the cgroup v2 hierarchy: its path relative to the hierarchy's root (with a
/// leading `/`, the form `docker run --cgroup-parent` and `podman run --cgroup-parent` take with
/// the cgroupfs manager) and its level (the root is level 0).
pub fn relative(path: &Path) -> Result<(PathBuf, u32), CgroupError> {
    let root = cgroup2_root()?;
    let rel = path.strip_prefix(&root).map_err(|_| CgroupError::Io {
        path: path.to_owned(),
        source: std::io::Error::other(format!("not under the cgroup v2 root {}", root.display())),
    })?;
    let level = rel.components().count() as u32;
    Ok((Path::new("/").join(rel), level))
}

/// A cgroup created for one run, removed when dropped.
#[derive(Debug)]
pub struct RunCgroup {
    path: PathBuf,
    id: u64,
}

impl RunCgroup {
    /// Creates `<cgroup2 root>/aet/<name>`.
    pub fn create(name: &str) -> Result<Self, CgroupError> {
        let parent = cgroup2_root()?.join("aet");
        fs::create_dir_all(&parent).map_err(io_err(&parent))?;
        let path = parent.join(name);
        fs::create_dir(&path).map_err(io_err(&path))?;
        let id = cgroup_id(&path)?;
        Ok(Self { path, id })
    }

    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The cgroup's v2 id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Opens `cgroup.procs` for writing: a child writes `0` to it to move itself in.
    pub fn procs_file(&self) -> Result<fs::File, CgroupError> {
        let p = self.path.join("cgroup.procs");
        fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .map_err(io_err(&p))
    }

    /// Pids in the cgroup.
    pub fn procs(&self) -> Result<Vec<u32>, CgroupError> {
        procs(&self.path)
    }

    /// Does the cgroup hold any process?
    pub fn populated(&self) -> Result<bool, CgroupError> {
        populated(&self.path)
    }

    /// Waits until the cgroup is empty or `timeout` passes; returns whether it is empty.
    pub fn wait_empty(&self, timeout: Duration) -> Result<bool, CgroupError> {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.populated()? {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills every process in the cgroup (`cgroup.kill`, or SIGKILL to each pid on kernels
    /// without it) and waits until it is empty.
    pub fn kill_all(&self) -> Result<(), CgroupError> {
        thaw(&self.path);
        let kill = self.path.join("cgroup.kill");
        if kill.exists() {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .open(&kill)
                .map_err(io_err(&kill))?;
            f.write_all(b"1").map_err(io_err(&kill))?;
        } else {
            // Repeat: a process may fork between the read and the kill.
            for _ in 0..100 {
                let pids = self.procs()?;
                if pids.is_empty() {
                    break;
                }
                for pid in pids {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        if !self.wait_empty(Duration::from_secs(5))? {
            return Err(CgroupError::Survivors {
                path: self.path.clone(),
                pids: self.procs()?,
            });
        }
        Ok(())
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        // rmdir fails with EBUSY for a moment after the last process exits.
        for _ in 0..50 {
            match fs::remove_dir(&self.path) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mountinfo(r"/a\040b"), "/a b");
        assert_eq!(unescape_mountinfo(r"/plain"), "/plain");
        assert_eq!(unescape_mountinfo(r"/tail\04"), r"/tail\04");
    }
}
