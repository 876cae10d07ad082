//! Small readers of `/proc`: process names, parents, descendants, owners. Used outside the event
//! path only (at attach, at teardown, for stop conditions).

use std::{collections::HashMap, fs, path::Path};

/// A process's `comm`, if it still exists.
pub fn comm(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_owned())
}

/// Does a task with this id (process or thread) exist and run? A zombie (exited, not yet
/// reaped by its parent) does not count.
pub fn exists(tid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{tid}/stat")) {
        Ok(stat) => !matches!(parse_stat_state(&stat), Some('Z' | 'X' | 'x')),
        Err(_) => Path::new(&format!("/proc/{tid}")).exists(),
    }
}

/// Is the process stopped (state `T` or `t`: SIGSTOP, or traced)?
pub fn stopped(pid: u32) -> bool {
    pid != 0
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| parse_stat_state(&s))
            .is_some_and(|c| c == 'T' || c == 't')
}

/// The state letter out of `/proc/PID/stat` text.
pub fn parse_stat_state(stat: &str) -> Option<char> {
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Parses the parent pid out of `/proc/PID/stat` text (the comm field may hold spaces and
/// parentheses, so fields are counted from the last `)`).
pub fn parse_stat_ppid(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// All live processes with their parent pid.
pub fn parents() -> HashMap<u32, u32> {
    let mut out = HashMap::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(stat) = fs::read_to_string(entry.path().join("stat"))
            && let Some(ppid) = parse_stat_ppid(&stat)
        {
            out.insert(pid, ppid);
        }
    }
    out
}

/// `root` and every live process below it.
pub fn descendants(root: u32) -> Vec<u32> {
    let parents = parents();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (&pid, &ppid) in &parents {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        if let Some(c) = children.get(&out[i]) {
            out.extend(c.iter().copied().filter(|p| *p != root));
        }
        i += 1;
    }
    out
}

/// Thread ids of a process.
pub fn threads(pid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect()
}

/// Real uid of a process (from `/proc/PID/status`).
pub fn real_uid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Live processes (zombies left out: they have ended, only their parent's wait is missing)
/// whose uids match: the real uid only, or (`any_id`) the real, effective or saved one.
fn live_processes_with(uid: u32, any_id: bool) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let want = uid.to_string();
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                let field = |name: &str| s.lines().find_map(|l| l.strip_prefix(name));
                let ended = field("State:").is_some_and(|v| {
                    let v = v.trim_start();
                    v.starts_with('Z') || v.starts_with('X')
                });
                let ids =
                    field("Uid:").map(|v| v.split_whitespace().take(if any_id { 3 } else { 1 }));
                !ended && ids.is_some_and(|mut ids| ids.any(|x| x == want))
            })
        })
        .collect()
}

/// Live processes whose real uid is `uid`.
pub fn processes_of_uid(uid: u32) -> Vec<u32> {
    live_processes_with(uid, false)
}

/// Live processes whose real, effective or saved uid is `uid`.
pub fn processes_with_any_uid(uid: u32) -> Vec<u32> {
    live_processes_with(uid, true)
}

/// The file fd `fd` of `pid` names, as aet's view has it (its link in `/proc/PID/fd`), only
/// when that file still has device `dev` and inode `ino` and the link is an absolute path of a
/// file that is not deleted: never a path that names another file.
pub fn fd_link_if(pid: u32, fd: i32, dev: u64, ino: u64) -> Option<Vec<u8>> {
    use std::os::unix::{ffi::OsStrExt, fs::MetadataExt};
    if fd < 0 {
        return None;
    }
    let link = format!("/proc/{pid}/fd/{fd}");
    let target = fs::read_link(&link).ok()?;
    let bytes = target.as_os_str().as_bytes();
    if !bytes.starts_with(b"/") || bytes.ends_with(b" (deleted)") {
        return None;
    }
    // The link's file, then the path's file: both must be the row's.
    let m = fs::metadata(&link).ok()?;
    let n = fs::metadata(&target).ok()?;
    (m.dev() == dev && m.ino() == ino && n.dev() == dev && n.ino() == ino).then(|| bytes.to_vec())
}

/// The process a pidfd of `pid` refers to (its `Pid:` in `/proc/PID/fdinfo/FD`), as a host pid.
pub fn pidfd_target(pid: u32, fd: i32) -> Option<u32> {
    let info = fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
    let line = info.lines().find_map(|l| l.strip_prefix("Pid:"))?;
    line.trim()
        .parse::<i64>()
        .ok()
        .filter(|&p| p > 0)
        .map(|p| p as u32)
}

/// Host pids of pids named inside other pid namespaces (`process` rows name their target as the
/// actor sees it). A pid named by a process of aet's own pid namespace is a host pid already.
#[derive(Debug, Default)]
pub struct PidTranslator {
    own: Option<u64>,
    /// Pid namespace by actor.
    ns: HashMap<u32, Option<u64>>,
    found: HashMap<(u64, u32), u32>,
}

fn pid_ns(pid: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(format!("/proc/{pid}/ns/pid"))
        .ok()
        .map(|m| m.ino())
}

impl PidTranslator {
    /// The host pid of `named` as `actor` named it; `None` when it cannot be told (the actor
    /// is gone, or no process of its namespace has that number).
    pub fn host_pid(&mut self, actor: u32, named: u32) -> Option<u32> {
        let own = *self.own.get_or_insert_with(|| pid_ns("self").unwrap_or(0));
        let ns = *self
            .ns
            .entry(actor)
            .or_insert_with(|| pid_ns(&actor.to_string()));
        let ns = ns?;
        if ns == own {
            return Some(named);
        }
        if let Some(&p) = self.found.get(&(ns, named)) {
            return Some(p);
        }
        // A process of that namespace whose innermost pid is `named`.
        let found = fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            let host: u32 = name.parse().ok()?;
            let status = fs::read_to_string(format!("/proc/{host}/status")).ok()?;
            let ns_pids = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
            let inner: u32 = ns_pids.split_whitespace().last()?.parse().ok()?;
            (inner == named && pid_ns(name) == Some(ns)).then_some(host)
        })?;
        self.found.insert((ns, named), found);
        Some(found)
    }
}

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The machine's host name.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ppid_survives_odd_comm() {
        assert_eq!(parse_stat_ppid("42 (a) b) c) S 7 42 42 0"), Some(7));
        assert_eq!(parse_stat_ppid("1 (init) S 0 1 1"), Some(0));
        assert_eq!(parse_stat_ppid("garbage"), None);
        assert_eq!(parse_stat_state("42 (a) b) Z 7"), Some('Z'));
    }

    #[test]
    fn a_zombie_does_not_exist() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped yet: a zombie once it has exited.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while exists(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!exists(pid));
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "still a zombie"
        );
        child.wait().unwrap();
    }

    #[test]
    fn this_process_is_its_own_descendant_root() {
        let me = std::process::id();
        assert_eq!(descendants(me)[0], me);
        assert!(exists(me));
        assert!(threads(me).contains(&me));
    }
}
