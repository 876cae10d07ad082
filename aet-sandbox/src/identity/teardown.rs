//! After the run: no process of the agent's uid left anywhere, and the files it left outside
//! its workspace and home found.

use std::{
    fs,
    os::unix::fs::MetadataExt as _,
    path::PathBuf,
    time::{Duration, Instant},
};

use aet_ledger::metadata::ProcessRef;

/// Kills every process of `uid` left anywhere on the machine and waits until none remains.
/// Returns what it killed (processes of the agent's uid found after the run's cgroup was gone);
/// an error names the survivors.
pub fn reap_uid(uid: u32) -> Result<Vec<ProcessRef>, String> {
    // Processes killed with the run's cgroup may still be on their way out: give them a moment.
    let settle = Instant::now() + Duration::from_millis(500);
    while !aet_kernel::procfs::processes_with_any_uid(uid).is_empty() && Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut killed: Vec<ProcessRef> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = aet_kernel::procfs::processes_with_any_uid(uid);
        if left.is_empty() {
            return Ok(killed);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "processes of uid {uid} survive SIGKILL: {}",
                left.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        for pid in left {
            if !killed.iter().any(|k| k.pid == pid) {
                killed.push(ProcessRef {
                    pid,
                    comm: aet_kernel::procfs::comm(pid).unwrap_or_default(),
                });
            }
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Files and directories owned by `uid` and created or changed since `since` (their ctime)
/// under the shared scratch places (`/tmp`, `/var/tmp`, `/dev/shm`), without following links or
/// leaving their file systems; at most `limit` listed, all counted.
pub fn leftovers(
    uid: u32,
    since: std::time::SystemTime,
    skip: &[PathBuf],
    limit: usize,
) -> (Vec<PathBuf>, u64) {
    let since = since
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let mut found = Vec::new();
    let mut total = 0u64;
    for top in ["/tmp", "/var/tmp", "/dev/shm"] {
        let Ok(m) = fs::symlink_metadata(top) else {
            continue;
        };
        let dev = m.dev();
        let mut stack = vec![PathBuf::from(top)];
        while let Some(dir) = stack.pop() {
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            for e in rd.flatten() {
                let p = e.path();
                if skip.iter().any(|s| p.starts_with(s)) {
                    continue;
                }
                let Ok(m) = fs::symlink_metadata(&p) else {
                    continue;
                };
                if m.uid() == uid && m.ctime() >= since {
                    total += 1;
                    if found.len() < limit {
                        found.push(p.clone());
                    }
                }
                if m.is_dir() && m.dev() == dev {
                    stack.push(p);
                }
            }
        }
    }
    found.sort();
    (found, total)
}
