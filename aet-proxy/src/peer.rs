//! Which of the run's processes made a request: the owner of the socket at the sandbox's end of
//! the proxy's connection (or the sender of a DNS datagram), found through `/proc`.

use std::{fs, net::SocketAddr, path::Path};

/// The transport of the client's socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Proto {
    Tcp,
    Udp,
}

/// A process of the run and its real uid and gid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Owner {
    pub(super) pid: u32,
    pub(super) ppid: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    /// Its name now (read while it holds the socket: it may be gone when the row is made).
    pub(super) comm: [u8; 16],
}

/// The pids of the cgroup tree at `cg`.
fn pids(cg: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    let mut dirs = vec![cg.to_owned()];
    while let Some(d) = dirs.pop() {
        if let Ok(t) = fs::read_to_string(d.join("cgroup.procs")) {
            out.extend(t.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        if let Ok(rd) = fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(e.path());
                }
            }
        }
    }
    out
}

/// The inode of the socket bound to `local` in the `/proc/PID/net/{tcp,udp}{,6}` tables of
/// `pid`'s network namespace.
fn socket_inode(pid: u32, local: SocketAddr, proto: Proto) -> Option<u64> {
    let base = match proto {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
    };
    let want_port = format!("{:04X}", local.port());
    for table in [base.to_owned(), format!("{base}6")] {
        let Ok(text) = fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if f.len() < 10 {
                continue;
            }
            let Some((_, port)) = f[1].rsplit_once(':') else {
                continue;
            };
            if port == want_port
                && let Some(inode) = f[9].parse().ok().filter(|&i: &u64| i != 0)
            {
                return Some(inode);
            }
        }
    }
    None
}

/// Whether `pid` holds the socket `inode`.
fn holds(pid: u32, inode: u64) -> bool {
    let want = format!("socket:[{inode}]");
    let Ok(rd) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    rd.flatten()
        .any(|e| fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == want.as_str()))
}

/// The real uid and gid and the parent of `pid`.
fn ids(pid: u32) -> (u32, u32, u32) {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("Uid:"), field("Gid:"), field("PPid:"))
}

/// The inode of `pid`'s network namespace.
fn netns_of(pid: u32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    fs::metadata(format!("/proc/{pid}/ns/net"))
        .ok()
        .map(|m| m.ino())
}

/// The process of the run (cgroup `cg`) in the network namespace `netns` whose socket is bound
/// to `client` there.
pub(super) fn owner(cg: &Path, netns: u64, client: SocketAddr, proto: Proto) -> Option<Owner> {
    // Processes of the run outside the namespace (bwrap's first one) see another table.
    let pids: Vec<u32> = pids(cg)
        .into_iter()
        .filter(|&p| netns_of(p) == Some(netns))
        .collect();
    let inode = pids.iter().find_map(|&p| socket_inode(p, client, proto))?;
    let pid = pids.into_iter().find(|&p| holds(p, inode))?;
    let (uid, gid, ppid) = ids(pid);
    let mut comm = [0u8; 16];
    if let Ok(c) = fs::read(format!("/proc/{pid}/comm")) {
        let c = c.strip_suffix(b"\n").unwrap_or(&c);
        let n = c.len().min(15);
        comm[..n].copy_from_slice(&c[..n]);
    }
    Some(Owner {
        pid,
        ppid,
        uid,
        gid,
        comm,
    })
}
