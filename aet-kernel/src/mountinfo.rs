//! Mount tables (`/proc/PID/mountinfo`) and the mapping of a path seen inside another mount
//! namespace (a bubblewrap sandbox pivots to its own root) back to the host's view.
//!
//! The rule: a path P seen through mount M (mount point `M.mount_point`, showing directory
//! `M.root` of the file system on device `M.dev`) is `M.root + (P - M.mount_point)` within that
//! file system; the host path is that file system path seen through a host mount of the same
//! device whose root is a prefix of it. A path that no host mount shows has no host path.

use std::{collections::HashMap, fs, os::unix::ffi::OsStrExt as _, path::Path};

/// One line of a mountinfo file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    pub id: u32,
    pub parent: u32,
    /// `major:minor` in the userspace encoding (as `stat` reports `st_dev`).
    pub dev: u64,
    /// The directory of the file system this mount shows.
    pub root: Vec<u8>,
    /// Where it is mounted, relative to the process's root.
    pub mount_point: Vec<u8>,
    /// The mount is read-only (`ro` in its per-mount options).
    pub read_only: bool,
    /// The file system type (`tmpfs`, `ext4`, `proc`, ...).
    pub fstype: Vec<u8>,
}

/// Decodes mountinfo's octal escapes (`\040` for a space).
pub fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\'
            && i + 3 < s.len()
            && s[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((s[i + 1] - b'0') * 64 + (s[i + 2] - b'0') * 8 + (s[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// Parses mountinfo text; lines that do not parse are skipped.
pub fn parse(text: &[u8]) -> Vec<MountEntry> {
    text.split(|&b| b == b'\n')
        .filter_map(|line| {
            let f: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            if f.len() < 5 {
                return None;
            }
            let num = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u32>().ok();
            let (maj, min) = {
                let s = std::str::from_utf8(f[2]).ok()?;
                let (a, b) = s.split_once(':')?;
                (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)
            };
            let read_only = f
                .get(5)
                .is_some_and(|o| o.split(|&b| b == b',').any(|o| o == b"ro"));
            // Optional fields end at " - ", then the file system type.
            let fstype = f
                .iter()
                .skip(6)
                .skip_while(|x| **x != b"-")
                .nth(1)
                .map(|t| t.to_vec())
                .unwrap_or_default();
            Some(MountEntry {
                id: num(f[0])?,
                parent: num(f[1])?,
                dev: libc::makedev(maj, min),
                root: unescape(f[3]),
                mount_point: unescape(f[4]),
                read_only,
                fstype,
            })
        })
        .collect()
}

/// Reads a process's mount table.
pub fn read(pid: u32) -> Option<Vec<MountEntry>> {
    fs::read(format!("/proc/{pid}/mountinfo"))
        .ok()
        .map(|t| parse(&t))
}

/// `rest` if `path` is `prefix` or below it (component-wise).
fn strip_prefix<'a>(path: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    if prefix == b"/" {
        return Some(path);
    }
    let rest = path.strip_prefix(prefix)?;
    (rest.is_empty() || rest[0] == b'/').then_some(rest)
}

fn concat(base: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut out = base.to_vec();
    if out.last() == Some(&b'/') && rest.first() == Some(&b'/') {
        out.pop();
    }
    out.extend_from_slice(rest);
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// The file-system path (device, path within it) of `path` as seen through `mounts`: through the
/// mount with id `mnt_id` when given and known, else the mount with the longest mount point that
/// contains the path.
pub fn fs_path(mounts: &[MountEntry], path: &[u8], mnt_id: Option<u32>) -> Option<(u64, Vec<u8>)> {
    let by_id = mnt_id.and_then(|id| mounts.iter().find(|m| m.id == id));
    let m = match by_id {
        Some(m) => m,
        None => mounts
            .iter()
            .filter(|m| strip_prefix(path, &m.mount_point).is_some())
            .max_by_key(|m| m.mount_point.len())?,
    };
    let rest = strip_prefix(path, &m.mount_point)?;
    Some((m.dev, concat(&m.root, rest)))
}

/// The host path of file-system path `fsp` on device `dev`, through the host mount (same device,
/// root a prefix of `fsp`) with the longest root.
pub fn host_path(host: &[MountEntry], dev: u64, fsp: &[u8]) -> Option<Vec<u8>> {
    let m = host
        .iter()
        .filter(|m| m.dev == dev && strip_prefix(fsp, &m.root).is_some())
        .max_by_key(|m| m.root.len())?;
    let rest = strip_prefix(fsp, &m.root)?;
    Some(concat(&m.mount_point, rest))
}

/// Maps paths from other mount namespaces to the host's, with a cache of each namespace's mount
/// table (read from `/proc` the first time a namespace is seen, while its processes live, and
/// again when a mount id is not in the cached table) and of the host's (read again when a new
/// namespace appears or a device is not found; mounts that are gone are kept, so that the rows
/// of a container that ended still map).
pub struct HostMapper {
    own_ns: u32,
    host: Vec<MountEntry>,
    host_read: std::time::Instant,
    tables: HashMap<u32, Vec<MountEntry>>,
    /// A live process seen in each namespace, to read its table from.
    members: HashMap<u32, u32>,
    refreshed: HashMap<(u32, u32), ()>,
}

/// Shortest time between two reads of the host's mount table for a device not found.
const HOST_REREAD: std::time::Duration = std::time::Duration::from_millis(50);

impl HostMapper {
    /// A mapper for this process's mount namespace.
    pub fn new() -> Self {
        let own_ns = fs::metadata("/proc/self/ns/mnt")
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m) as u32)
            .unwrap_or(0);
        Self {
            own_ns,
            host: read(std::process::id()).unwrap_or_default(),
            host_read: std::time::Instant::now(),
            tables: HashMap::new(),
            members: HashMap::new(),
            refreshed: HashMap::new(),
        }
    }

    /// Reads the host's mount table again, keeping the mounts that are gone.
    fn reread_host(&mut self) {
        let Some(fresh) = read(std::process::id()) else {
            return;
        };
        let gone: Vec<MountEntry> = self
            .host
            .drain(..)
            .filter(|old| {
                !fresh
                    .iter()
                    .any(|m| m.id == old.id || (m.dev == old.dev && m.root == old.root))
            })
            .collect();
        self.host = fresh;
        // Gone mounts after the live ones: a live mount of the same device wins.
        self.host.extend(gone);
        self.host_read = std::time::Instant::now();
    }

    /// aet's own mount namespace id.
    pub fn own_ns(&self) -> u32 {
        self.own_ns
    }

    /// Notes that `pid` lives in namespace `ns` (to read the table from later).
    pub fn seen(&mut self, ns: u32, pid: u32) {
        if ns != self.own_ns && ns != 0 && self.members.insert(ns, pid).is_none() {
            // A new namespace (a sandbox, a container) came with mounts of its own, and often
            // new host mounts under it: read both now, while its first process lives.
            self.reread_host();
            let _ = self.table(ns, pid, None);
        }
    }

    fn table(&mut self, ns: u32, pid: u32, mnt_id: Option<u32>) -> Option<&Vec<MountEntry>> {
        let stale = match (self.tables.get(&ns), mnt_id) {
            (None, _) => true,
            (Some(t), Some(id)) => !t.iter().any(|m| m.id == id),
            _ => false,
        };
        if stale {
            let key = (ns, mnt_id.unwrap_or(0));
            let first = !self.tables.contains_key(&ns);
            if first || !self.refreshed.contains_key(&key) {
                self.refreshed.insert(key, ());
                let fresh = read(pid).or_else(|| self.members.get(&ns).and_then(|&p| read(p)));
                if let Some(t) = fresh {
                    // Only trust a table that belongs to the namespace.
                    let ns_of = |p: u32| {
                        fs::metadata(format!("/proc/{p}/ns/mnt"))
                            .map(|m| std::os::unix::fs::MetadataExt::ino(&m) as u32)
                            .ok()
                    };
                    if ns_of(pid) == Some(ns)
                        || self.members.get(&ns).and_then(|&p| ns_of(p)) == Some(ns)
                    {
                        self.tables.insert(ns, t);
                    }
                }
            }
        }
        self.tables.get(&ns)
    }

    /// The host path of file-system path `fsp` on device `dev` (userspace encoding).
    pub fn host_of(&mut self, dev: u64, fsp: &[u8]) -> Option<Vec<u8>> {
        if let Some(p) = host_path(&self.host, dev, fsp) {
            return Some(p);
        }
        if self.host_read.elapsed() >= HOST_REREAD {
            self.reread_host();
            return host_path(&self.host, dev, fsp);
        }
        None
    }

    /// The host path of `path` seen by `pid` in namespace `ns` through mount `mnt_id`; `None`
    /// when it cannot be mapped. Paths from aet's own namespace are already host paths.
    pub fn map(&mut self, ns: u32, pid: u32, path: &[u8], mnt_id: Option<u32>) -> Option<Vec<u8>> {
        if ns == self.own_ns || ns == 0 {
            return Some(path.to_vec());
        }
        let table = self.table(ns, pid, mnt_id)?.clone();
        let (dev, fsp) = fs_path(&table, path, mnt_id)?;
        self.host_of(dev, &fsp)
    }
}

impl Default for HostMapper {
    fn default() -> Self {
        Self::new()
    }
}

/// The mount point of the host mount that contains `path` (for display).
pub fn host_mount_of(path: &Path) -> Option<Vec<u8>> {
    let host = read(std::process::id())?;
    let p = path.as_os_str().as_bytes();
    host.iter()
        .filter(|m| strip_prefix(p, &m.mount_point).is_some())
        .max_by_key(|m| m.mount_point.len())
        .map(|m| m.mount_point.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SANDBOX: &[u8] = b"\
100 90 0:50 / / rw - tmpfs tmpfs rw
101 100 254:0 /repo/inputs /inputs ro - ext4 /dev/vda rw
102 100 0:51 / /tmp rw - tmpfs tmpfs rw
103 100 254:0 /run/ws /work rw - ext4 /dev/vda rw
104 100 254:1 /alice /home/alice ro - ext4 /dev/vdb rw
105 100 254:0 /odd\\040dir /odd ro - ext4 /dev/vda rw
";
    const HOST: &[u8] = b"\
20 1 254:0 / / rw - ext4 /dev/vda rw
21 20 254:1 / /home rw - ext4 /dev/vdb rw
22 20 0:22 / /proc rw - proc proc rw
";

    #[test]
    fn mountinfo_parses_with_escapes() {
        let t = parse(SANDBOX);
        assert_eq!(t.len(), 6);
        assert_eq!(t[1].root, b"/repo/inputs");
        assert_eq!(t[1].mount_point, b"/inputs");
        assert_eq!(t[1].dev, libc::makedev(254, 0));
        assert_eq!(t[5].root, b"/odd dir");
        assert!(t[1].read_only && !t[0].read_only);
        assert_eq!(t[0].fstype, b"tmpfs");
        assert_eq!(t[1].fstype, b"ext4");
    }

    #[test]
    fn sandbox_paths_map_to_host_paths() {
        let sb = parse(SANDBOX);
        let host = parse(HOST);
        let map = |p: &[u8], id| {
            let (dev, fsp) = fs_path(&sb, p, id)?;
            host_path(&host, dev, &fsp)
        };
        assert_eq!(
            map(b"/inputs/answers/key.txt", Some(101)).unwrap(),
            b"/repo/inputs/answers/key.txt"
        );
        assert_eq!(map(b"/work/out.txt", None).unwrap(), b"/run/ws/out.txt");
        // A file system mounted elsewhere on the host.
        assert_eq!(
            map(b"/home/alice/notes", Some(104)).unwrap(),
            b"/home/alice/notes"
        );
        assert_eq!(map(b"/odd/x", Some(105)).unwrap(), b"/odd dir/x");
        // The sandbox's own tmpfs is nowhere on the host.
        assert!(map(b"/tmp/scratch", Some(102)).is_none());
        // `/inputsx` is not under `/inputs`.
        assert_eq!(fs_path(&sb, b"/inputsx", None).unwrap().1, b"/inputsx");
    }
}
