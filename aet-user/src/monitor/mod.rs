//! The monitor: turns the kernel's records into ledger rows ([`RowMaker`]); the [`engine`] loads
//! the programs once, consumes their records on a thread of its own, routes them to each run's
//! ledger, and finishes a run's ledger with its loss accounting.
//!
//! The consumer never blocks the traced processes: the programs write without waking it
//! (`BPF_RB_NO_WAKEUP`), and it polls the ring buffer, busy while there is data and sleeping
//! [`IDLE_POLL`] when there is none. It must never drop a record it has read: a record that does
//! not decode is counted as lost.

pub mod decode;
pub mod engine;
pub mod overload;
pub mod paths;
pub mod source;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::Duration,
};

use aet_common::{EventKind, flags};

use crate::loader::{Counters, LoadError};
use aet_core::{
    ledger::{
        record::Reasons,
        schema::capture,
        writer::{Row, WriteError},
    },
    util::WallClock,
};
use decode::RawEvent;
use paths::ResolvedFrom;

/// Longest time rows wait in memory before they are written to the ledger.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(250);

/// How long the consumer sleeps when the ring buffer is empty.
pub const IDLE_POLL: Duration = Duration::from_millis(2);

/// Fault injection for tests: the consumer waits this many milliseconds before it starts reading,
/// so that a small ring buffer overflows for real and the loss accounting can be checked end to
/// end. Never set it for a real run.
pub const STALL_ENV: &str = "AET_DEBUG_CONSUMER_STALL_MS";

/// Fault injection for tests: the consumer sleeps this many microseconds after every 256 records
/// it reads, as a consumer behind a slow disk would, so that a run outpaces it for real. Never set
/// it for a real run.
pub const SLOW_ENV: &str = "AET_DEBUG_CONSUMER_SLOW_US";

/// For the consumer's benchmark: every record the consumer reads is also appended to this file
/// (a native-endian u32 length, then the record), for `aet __replay` to feed back through the
/// consumer. Never set it for a real run.
pub const DUMP_ENV: &str = "AET_DEBUG_RECORD_DUMP";

/// Errors of the monitor.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    /// The programs could not be loaded or attached.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The ledger could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The consumer thread could not be started.
    #[error("cannot start the event consumer: {0}")]
    Thread(#[source] std::io::Error),
    /// The consumer has stopped: no run can be started.
    #[error("the event consumer has stopped")]
    ConsumerStopped,
    /// No run in this slot.
    #[error("no run in slot {0}")]
    NoRun(u32),
}

/// What userspace keeps per live process: the kernel sends `ppid` and `comm` only with fork,
/// exec and exit records (they change nowhere else), and every row gets them from here.
#[derive(Clone, Copy, Debug, Default)]
struct ProcInfo {
    /// The process that created this one (recorded fork), or the kernel's `real_parent` at first
    /// sight.
    ppid: u32,
    comm: [u8; 16],
}

/// What the row maker noticed that bears on the record's completeness.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowStats {
    /// io_uring set-ups, entries and submitted requests.
    pub io_uring: u64,
    /// Rows whose resolved path is partial.
    pub partial_paths: u64,
    /// Rows from another mount namespace whose host path could not be mapped.
    pub host_unmapped: u64,
}

/// An inode as one mount namespace sees it: `(mntns, dev, ino)`.
type InodeKey = (u32, u64, u64);

/// Turns records into rows: numbers them, converts time, keeps the process tree so that each
/// row's `ppid` is the process that created the actor (as recorded) and its `comm` the actor's
/// name as of its last exec, turns the kernel's walks into paths, and maps sandbox paths to the
/// host's.
pub struct RowMaker {
    clock: WallClock,
    seq: u64,
    procs: HashMap<u32, ProcInfo>,
    mapper: crate::kernel::mountinfo::HostMapper,
    /// The path (and host path) under which the kernel last saw each inode, by mount namespace:
    /// an io row is named as its own process's view shows the file (a file bwrap saw under
    /// `/newroot/...` while it built a sandbox is `/...` to the agent inside).
    inode_paths: HashMap<InodeKey, (Vec<u8>, Option<Vec<u8>>)>,
    stats: RowStats,
    /// The run's cgroup, relative to the cgroup v2 root (as `--cgroup-parent` takes it), when the
    /// run is scoped by cgroup.
    run_cgroup: Option<PathBuf>,
    /// Container runtimes the run asked to start containers outside it, with the pid that asked.
    outside: Vec<(String, u32)>,
    /// Service managers and schedulers the run handed work to, with the pid that asked.
    services: Vec<(String, u32)>,
    /// The process each pidfd of the run refers to, from its `pidfd_open`: `(pid, fd)` -> pid.
    pidfds: HashMap<(u32, i32), u32>,
    /// Host pids of pids named inside other pid namespaces: `(actor, named)` -> host pid.
    pid_names: crate::kernel::procfs::PidTranslator,
}

/// The container clients whose containers a daemon starts, outside the process tree of the run
/// that asked (podman, daemonless, starts them as its own descendants).
const DAEMON_CLIENTS: &[&str] = &["docker", "nerdctl", "ctr", "podman-remote"];

/// The subcommands that start or enter a container.
const STARTS: &[&str] = &["run", "create", "start", "exec", "restart", "compose", "up"];

/// Does this exec ask a container daemon to run processes outside the run? `Some(runtime)` when
/// it does: a `run`/`create` without `--cgroup-parent` at (or under) the run's cgroup, or a
/// `start`/`exec`/`compose` (their containers' cgroups were chosen before).
pub fn container_outside(argv: &[u8], run_cgroup: Option<&Path>) -> Option<String> {
    let args = tool_argv(argv, &[DAEMON_CLIENTS, &["podman"]])?;
    let name = base_name(args.first()?)?;
    let remote = name == "podman" && args.iter().any(|a| a == "--remote" || a == "-r");
    if !DAEMON_CLIENTS.contains(&name.as_str()) && !remote {
        return None;
    }
    let sub = args[1..]
        .iter()
        .find(|a| STARTS.contains(&a.as_str()))?
        .clone();
    if matches!(sub.as_str(), "run" | "create")
        && let Some(cg) = run_cgroup
    {
        let mut parent = None;
        for (i, a) in args.iter().enumerate() {
            if let Some(v) = a.strip_prefix("--cgroup-parent=") {
                parent = Some(v.to_owned());
            } else if a == "--cgroup-parent" {
                parent = args.get(i + 1).cloned();
            }
        }
        if parent.is_some_and(|p| Path::new(&p).starts_with(cg)) {
            return None;
        }
    }
    Some(name)
}

/// The service managers and schedulers [`service_outside`] knows.
const SERVICE_TOOLS: &[&str] = &[
    "systemd-run",
    "systemctl",
    "service",
    "at",
    "batch",
    "crontab",
];

fn base_name(arg: &str) -> Option<String> {
    Some(Path::new(arg).file_name()?.to_str()?.to_owned())
}

/// An exec's arguments as text, from the tool's name on, when one of `known` is among its first
/// three (a script run through its `#!` interpreter has the interpreter, and maybe its option,
/// before the script's path); `None`, without allocating, for every other exec.
fn tool_argv(argv: &[u8], known: &[&[&str]]) -> Option<Vec<String>> {
    let is_known = |a: &[u8]| {
        let name = a.rsplit(|&b| b == b'/').next().unwrap_or(a);
        known.iter().any(|k| k.iter().any(|n| n.as_bytes() == name))
    };
    let first = aet_core::util::split_argv(argv)
        .take(3)
        .position(is_known)?;
    Some(
        aet_core::util::split_argv(argv)
            .skip(first)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// Does this exec hand work to a service manager or scheduler that runs it outside the run (its
/// process tree and cgroup), now or later? `Some(tool)` when it does: `systemd-run` without
/// `--scope` (with it the command stays a descendant, and is followed), `systemctl` or `service`
/// starting a unit, `at`/`batch` queueing a job, `crontab` installing a table.
pub fn service_outside(argv: &[u8]) -> Option<String> {
    let args = tool_argv(argv, &[SERVICE_TOOLS])?;
    let name = base_name(args.first()?)?;
    let rest = &args[1..];
    let has = |f: &str| rest.iter().any(|a| a == f);
    let words: Vec<&str> = rest
        .iter()
        .filter(|a| !a.starts_with('-'))
        .map(String::as_str)
        .collect();
    let hands = match name.as_str() {
        "systemd-run" => !has("--scope") && !rest.is_empty(),
        "systemctl" => {
            let starts = [
                "start",
                "restart",
                "try-restart",
                "reload-or-restart",
                "try-reload-or-restart",
                "isolate",
            ];
            words.first().is_some_and(|w| starts.contains(w))
                || (words.first() == Some(&"enable") && has("--now"))
        }
        "service" => words
            .get(1)
            .is_some_and(|w| ["start", "restart", "try-restart", "force-reload"].contains(w)),
        // Listing, removing or showing jobs hands nothing over.
        "at" | "batch" => !["-l", "-r", "-d", "-c", "-V"].iter().any(|f| has(f)),
        "crontab" => !["-l", "-r"].iter().any(|f| has(f)),
        _ => false,
    };
    hands.then_some(name)
}

/// Reads what `/proc` says of a process seen for the first time without a fork or exec record
/// (it existed before monitoring began).
fn proc_info_from_procfs(pid: u32) -> ProcInfo {
    let mut info = ProcInfo::default();
    if let Some(c) = crate::kernel::procfs::comm(pid) {
        let b = c.as_bytes();
        let n = b.len().min(15);
        info.comm[..n].copy_from_slice(&b[..n]);
    }
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        info.ppid = crate::kernel::procfs::parse_stat_ppid(&stat).unwrap_or(0);
    }
    info
}

/// A socket address's family, address and port (raw bytes as the process passed them).
fn sockaddr(b: &[u8]) -> (Option<&'static str>, Option<Vec<u8>>, Option<u32>) {
    if b.len() < 2 {
        return (None, None, None);
    }
    let family = u16::from_ne_bytes([b[0], b[1]]) as i32;
    let port = || (b.len() >= 4).then(|| u32::from(u16::from_be_bytes([b[2], b[3]])));
    match family {
        libc::AF_UNIX => {
            let p = &b[2..];
            let addr = match p.first() {
                // Abstract: the name is every byte given, NULs included.
                Some(0) => {
                    let mut a = b"@".to_vec();
                    a.extend_from_slice(&p[1..]);
                    a
                }
                _ => p[..p.iter().position(|&c| c == 0).unwrap_or(p.len())].to_vec(),
            };
            (Some("unix"), (!addr.is_empty()).then_some(addr), None)
        }
        libc::AF_INET if b.len() >= 8 => {
            let ip = std::net::Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            (Some("inet"), Some(ip.to_string().into_bytes()), port())
        }
        libc::AF_INET6 if b.len() >= 24 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[8..24]);
            let ip = std::net::Ipv6Addr::from(o);
            (Some("inet6"), Some(ip.to_string().into_bytes()), port())
        }
        libc::AF_INET => (Some("inet"), None, None),
        libc::AF_INET6 => (Some("inet6"), None, None),
        libc::AF_NETLINK => (Some("netlink"), None, None),
        libc::AF_PACKET => (Some("packet"), None, None),
        libc::AF_UNSPEC => (Some("unspec"), None, None),
        _ => (Some("other"), None, None),
    }
}

/// The pid of a `/proc/PID/mem` (or `/proc/PID/task/TID/mem`) path, as named.
fn proc_mem_pid(path: &[u8]) -> Option<u32> {
    let rest = path.strip_prefix(b"/proc/")?;
    let (pid, rest) = rest.split_at(rest.iter().position(|&b| b == b'/')?);
    let pid: u32 = std::str::from_utf8(pid).ok()?.parse().ok()?;
    let tail = &rest[1..];
    let is_mem = tail == b"mem"
        || tail
            .strip_prefix(b"task/")
            .and_then(|t| t.split(|&b| b == b'/').nth(1))
            == Some(&b"mem"[..]);
    is_mem.then_some(pid)
}

/// The object's device in the userspace encoding (as `stat` reports it).
fn userspace_dev(h: &aet_common::EventHeader) -> u64 {
    if h.flags & flags::DEV_STAT != 0 {
        h.dev
    } else if h.flags & flags::DEV_STATX != 0 {
        libc::makedev(h.dev as u32, (h.dev >> 32) as u32)
    } else {
        // The kernel's dev_t: major in the top 12 bits of 32, minor in the low 20.
        libc::makedev((h.dev >> 20) as u32, (h.dev & 0xfffff) as u32)
    }
}

/// The resolved path of a path argument and how it was obtained.
fn resolve(
    raw: &[u8],
    raw_ok: bool,
    walk: &[u8],
    wflags: u16,
    is_object: bool,
) -> (Option<Vec<u8>>, Option<ResolvedFrom>, Option<bool>) {
    let walked = wflags & aet_common::walk::PRESENT != 0;
    let partial = wflags & (aet_common::walk::TRUNCATED | aet_common::walk::FAILED) != 0;
    if is_object && walked {
        return (
            Some(paths::walk_to_path(walk)),
            Some(ResolvedFrom::Object),
            Some(partial),
        );
    }
    if !raw_ok || raw.is_empty() {
        return (None, None, None);
    }
    if raw[0] == b'/' {
        return (
            Some(paths::normalize(raw)),
            Some(ResolvedFrom::Lexical),
            Some(false),
        );
    }
    if walked {
        let unreachable = wflags & aet_common::walk::REACHED_ROOT == 0;
        return (
            Some(paths::join(&paths::walk_to_path(walk), raw)),
            Some(ResolvedFrom::Joined),
            Some(partial || unreachable),
        );
    }
    (None, None, None)
}

impl RowMaker {
    /// A row maker whose first row gets `seq` 0.
    pub fn new(clock: WallClock) -> Self {
        Self {
            clock,
            seq: 0,
            procs: HashMap::new(),
            mapper: crate::kernel::mountinfo::HostMapper::new(),
            inode_paths: HashMap::new(),
            stats: RowStats::default(),
            run_cgroup: None,
            outside: Vec::new(),
            services: Vec::new(),
            pidfds: HashMap::new(),
            pid_names: crate::kernel::procfs::PidTranslator::default(),
        }
    }

    /// Fills a row's other process: `named` as the actor named it, translated to a host pid,
    /// and whether it is a process of the run.
    fn set_target(&mut self, row: &mut Row<'_>, actor: u32, named: u32, level: u32) {
        let host = if level == 0 {
            Some(named)
        } else {
            self.pid_names.host_pid(actor, named)
        };
        match host {
            Some(pid) => {
                row.target_pid = Some(pid);
                row.target_in_run = Some(self.procs.contains_key(&pid));
            }
            None => {
                row.target_pid = Some(named);
                row.capture |= capture::TARGET_UNTRANSLATED;
            }
        }
    }

    /// Names the file of an fd that arrived (a row without a walk): the path an earlier row saw
    /// the inode under, else the fd's link while it still names that inode.
    fn name_arrived_fd(&mut self, row: &mut Row<'_>, h: &aet_common::EventHeader) {
        let (Some(dev), Some(ino)) = (row.dev, row.ino) else {
            return;
        };
        if let Some((p, host)) = self.inode_paths.get(&(h.mntns, dev, ino)) {
            row.resolved_path = Some(p.clone().into());
            row.host_path = host.clone().map(Into::into);
            row.resolved_from = Some(ResolvedFrom::Inode.name());
            return;
        }
        if let Some(p) = crate::kernel::procfs::fd_link_if(h.pid, h.fd, dev, ino) {
            if h.mntns == self.mapper.own_ns() {
                // Later io rows of this inode take the same name.
                self.inode_paths
                    .insert((h.mntns, dev, ino), (p.clone(), None));
                row.resolved_path = Some(p.into());
                row.resolved_from = Some(ResolvedFrom::FdLink.name());
            } else {
                // aet's view of a file a process of another view holds.
                row.host_path = Some(p.into());
            }
        }
    }

    /// Tells the row maker the run's cgroup (relative to the cgroup v2 root), against which a
    /// container client's `--cgroup-parent` is checked.
    pub fn with_run_cgroup(mut self, cg: Option<PathBuf>) -> Self {
        self.run_cgroup = cg;
        self
    }

    /// Container runtimes the run asked to start containers outside it (runtime, pid).
    pub fn containers_outside(&self) -> &[(String, u32)] {
        &self.outside
    }

    /// Service managers and schedulers the run handed work to (tool, pid).
    pub fn services_outside(&self) -> &[(String, u32)] {
        &self.services
    }

    /// What this row maker noticed so far.
    pub fn stats(&self) -> RowStats {
        self.stats
    }

    /// aet's own mount namespace.
    pub fn host_mntns(&self) -> u32 {
        self.mapper.own_ns()
    }

    /// The process table entry for the actor of `h`, created from the record or from `/proc`.
    fn proc_of(&mut self, h: &aet_common::EventHeader) -> &mut ProcInfo {
        self.procs.entry(h.pid).or_insert_with(|| {
            if h.flags & flags::PPID_KERNEL != 0 {
                ProcInfo {
                    ppid: h.ppid,
                    comm: h.comm,
                }
            } else {
                proc_info_from_procfs(h.pid)
            }
        })
    }

    /// Makes the row for `ev`.
    pub fn row<'a>(&mut self, ev: &'a RawEvent<'a>) -> Row<'a> {
        let h = &ev.header;
        let has_comm = h.comm[0] != 0;
        let info = {
            let info = self.proc_of(h);
            if has_comm {
                // exec (a new name), fork and exit carry the current comm.
                info.comm = h.comm;
            }
            *info
        };
        self.mapper.seen(h.mntns, h.pid);
        let mut row = Row {
            seq: self.seq,
            ts_ns: self.clock.wall(h.ts_ns),
            kind: ev.kind.name(),
            syscall: ev.syscall.name(),
            pid: h.pid,
            tid: h.tid,
            ppid: info.ppid,
            uid: h.uid,
            gid: h.gid,
            cgroup_id: h.cgroup_id,
            comm: info.comm,
            mntns: h.mntns,
            capture: h.flags
                | (h.walk_flags as u32) << capture::WALK_SHIFT
                | (h.walk2_flags as u32) << capture::WALK2_SHIFT,
            ..Row::default()
        };
        self.seq += 1;
        let identity = h.flags & flags::IDENTITY != 0;
        if identity {
            row.dev = Some(userspace_dev(h));
            row.ino = Some(h.ino);
            row.mnt_id = (h.mnt_id != 0).then_some(h.mnt_id);
        }
        let shape = aet_common::SHAPES
            .get(ev.syscall as usize)
            .copied()
            .unwrap_or(aet_common::SHAPES[0]);
        let path_ok = h.flags & flags::PATH_UNREADABLE == 0;
        match ev.kind {
            EventKind::Fork => {
                let child = h.aux as u32;
                row.child_pid = Some(child);
                self.procs.insert(
                    child,
                    ProcInfo {
                        ppid: h.pid,
                        comm: info.comm,
                    },
                );
                return row;
            }
            EventKind::Exit => {
                let status = h.ret as i32;
                if status & 0x7f == 0 {
                    row.exit_code = Some((status >> 8) & 0xff);
                } else {
                    row.exit_signal = Some(status & 0x7f);
                }
                self.procs.remove(&h.pid);
                return row;
            }
            EventKind::Io => {
                row.fd = Some(h.fd);
                row.bytes_read = Some(h.aux);
                row.bytes_written = Some(h.aux2);
                if let (Some(dev), Some(ino)) = (row.dev, row.ino)
                    && let Some((p, host)) = self.inode_paths.get(&(h.mntns, dev, ino))
                {
                    row.resolved_path = Some(p.clone().into());
                    row.host_path = host.clone().map(Into::into);
                    row.resolved_from = Some(ResolvedFrom::Inode.name());
                }
                return row;
            }
            EventKind::Fd if ev.syscall != aet_common::Syscall::PidfdGetfd => {
                row.fd = Some(h.fd);
                row.fd_origin = aet_common::fd_origin::name(h.aux);
                row.set_ret(h.ret);
                if h.aux == aet_common::fd_origin::FANOTIFY {
                    self.set_target(&mut row, h.pid, h.aux2 as u32, h.mode);
                } else {
                    row.source_fd = Some(h.aux2 as i32);
                    // The socket's peer, from the kernel (a host pid).
                    if h.open_flags != 0 {
                        row.target_pid = Some(h.open_flags);
                        row.target_in_run = Some(self.procs.contains_key(&h.open_flags));
                    }
                }
                self.name_arrived_fd(&mut row, h);
                return row;
            }
            EventKind::Net => {
                row.fd = Some(h.fd);
                row.set_ret(h.ret);
                if shape.flags >= 0 {
                    row.flags = Some(h.open_flags);
                }
                let (family, address, port) = sockaddr(ev.path);
                row.net_family = family;
                row.net_port = port;
                if let Some(a) = address {
                    // A unix socket's path is a path too: the file rules see it.
                    if family == Some("unix") && a.first() == Some(&b'/') {
                        row.path = Some(a.clone().into());
                        row.resolved_path = Some(a.clone().into());
                        row.resolved_from = Some(ResolvedFrom::Lexical.name());
                    }
                    row.net_address = Some(a.into());
                }
                return row;
            }
            EventKind::Process => {
                row.set_ret(h.ret);
                let named = if ev.syscall == aet_common::Syscall::Ptrace {
                    row.ptrace_request = Some(h.aux2 as u32);
                    // PTRACE_TRACEME: the actor offers itself to its parent.
                    if h.aux2 == 0 { info.ppid as u64 } else { h.aux }
                } else {
                    h.aux
                };
                if ev.syscall == aet_common::Syscall::Ptrace && h.aux2 == 0 {
                    row.target_pid = Some(named as u32);
                    row.target_in_run = Some(self.procs.contains_key(&(named as u32)));
                } else {
                    self.set_target(&mut row, h.pid, named as u32, h.mode);
                }
                if ev.syscall == aet_common::Syscall::PidfdOpen
                    && h.ret >= 0
                    && let Some(t) = row.target_pid
                {
                    self.pidfds.insert((h.pid, h.ret as i32), t);
                }
                if shape.flags >= 0 {
                    row.flags = Some(h.open_flags);
                }
                return row;
            }
            EventKind::IoUring => {
                // A channel the record does not see: a submitted request, or a set-up, entry
                // or registration that worked (one refused, as by the sandbox's filter, is none).
                if ev.syscall == aet_common::Syscall::None || h.ret >= 0 {
                    self.stats.io_uring += 1;
                }
                if ev.syscall == aet_common::Syscall::None {
                    row.io_uring_op = Some(h.aux as u32);
                    if !ev.path.is_empty() {
                        row.path = Some(ev.path.into());
                        let (r, from, partial) = resolve(ev.path, true, b"", 0, false);
                        row.resolved_path = r.map(Into::into);
                        row.resolved_from = from.map(ResolvedFrom::name);
                        row.resolved_partial = partial;
                    }
                } else {
                    row.fd = (h.fd >= 0).then_some(h.fd);
                    row.set_ret(h.ret);
                }
                return row;
            }
            _ => {}
        }
        row.set_ret(h.ret);
        let is_exec = ev.kind == EventKind::Exec;
        if shape.dirfd >= 0 || is_exec {
            row.dirfd = Some(h.dirfd);
        }
        if shape.dirfd2 >= 0 {
            row.dirfd2 = Some(h.dirfd2);
        }
        if shape.fd >= 0 || ev.kind == EventKind::List {
            row.fd = Some(h.fd);
        }
        if shape.flags >= 0 || ev.kind == EventKind::Open || is_exec || ev.kind == EventKind::Mmap {
            row.flags = Some(h.open_flags);
        }
        match ev.kind {
            EventKind::Open => {
                use aet_common::uapi::{O_CREAT, O_TMPFILE_BIT};
                if h.open_flags & (O_CREAT | O_TMPFILE_BIT) != 0 {
                    row.mode = Some(h.mode);
                }
                if ev.syscall == aet_common::Syscall::Openat2 {
                    row.resolve = Some(h.aux);
                }
            }
            EventKind::Mmap => {
                row.length = Some(h.aux);
                row.prot = Some(h.aux2 as u32);
                row.flags = Some((h.aux2 >> 32) as u32);
            }
            EventKind::Exec => {
                if h.flags & flags::ARGV_UNREADABLE == 0 {
                    row.argv = Some(ev.argv);
                    if h.ret >= 0 {
                        if let Some(rt) = container_outside(ev.argv, self.run_cgroup.as_deref()) {
                            self.outside.push((rt, h.pid));
                        }
                        if let Some(tool) = service_outside(ev.argv) {
                            self.services.push((tool, h.pid));
                        }
                    }
                }
                row.argv_truncated = Some(h.flags & flags::ARGV_TRUNCATED != 0);
            }
            _ => {
                if shape.mode >= 0 {
                    row.mode = Some(h.mode);
                }
            }
        }
        let has_path = shape.path >= 0 || is_exec;
        if has_path && path_ok {
            row.path = Some(ev.path.into());
            row.path_truncated = h.flags & flags::PATH_TRUNCATED != 0;
        }
        let verbatim = shape.bits & aet_common::shape::PATH_VERBATIM != 0;
        let is_object = h.flags & flags::WALK_IS_OBJECT != 0;
        if !verbatim || is_object {
            let (r, from, partial) = resolve(
                ev.path,
                has_path && path_ok,
                ev.walk,
                h.walk_flags,
                is_object,
            );
            row.resolved_path = r.map(Into::into);
            row.resolved_from = from.map(ResolvedFrom::name);
            row.resolved_partial = partial;
        }
        if shape.path2 >= 0 {
            row.path2 = Some(ev.path2.into());
            if shape.bits & aet_common::shape::PATH2_VERBATIM == 0 {
                let (r, _, _) = resolve(ev.path2, true, ev.walk2, h.walk2_flags, false);
                row.resolved_path2 = r.map(Into::into);
            }
        }
        if ev.syscall == aet_common::Syscall::PidfdGetfd {
            row.fd_origin = Some("copied");
            row.fd = (h.ret >= 0).then_some(h.ret as i32);
            row.source_fd = Some(h.aux2 as i32);
            match self.pidfds.get(&(h.pid, h.dirfd)) {
                Some(&t) => {
                    row.target_pid = Some(t);
                    row.target_in_run = Some(self.procs.contains_key(&t));
                }
                None => {
                    if let Some(t) = crate::kernel::procfs::pidfd_target(h.pid, h.dirfd) {
                        row.target_pid = Some(t);
                        row.target_in_run = Some(self.procs.contains_key(&t));
                    }
                }
            }
        }
        // Another process's memory through /proc: a read or write of that process.
        if ev.kind == EventKind::Open
            && let Some(named) = row.resolved_path.as_deref().and_then(proc_mem_pid)
        {
            // The pid as the actor's procfs names it: translated through the actor's pid
            // namespace (level unknown here: the translator compares namespaces).
            self.set_target(&mut row, h.pid, named, 1);
        }
        // A walk that ended at the top of another mount tree names the file relative to that
        // tree: not the path the process sees, and perhaps another file of aet's view.
        let foreign = h.walk_flags & aet_common::walk::FOREIGN_ROOT != 0;
        if foreign && row.resolved_path.is_some() {
            row.resolved_partial = Some(true);
        }
        if row.resolved_partial == Some(true) {
            self.stats.partial_paths += 1;
        }
        if let Some(r) = &row.resolved_path
            && (foreign || h.mntns != self.mapper.own_ns() && h.mntns != 0)
        {
            let mnt = if is_object { row.mnt_id } else { None };
            // An object seen through a mount of the process's namespace: the kernel walked
            // its file system path too (walk2 + the walk below the crossing).
            let split = h.walk_split as usize;
            let from_kernel = (is_object
                && h.walk_split != aet_common::NO_SPLIT
                && h.walk2_flags & aet_common::walk::REACHED_ROOT != 0
                && split <= ev.walk.len())
            .then(|| {
                let mut fsp = paths::walk_to_path(ev.walk2);
                let below = paths::walk_to_path(&ev.walk[..split]);
                if below != b"/" {
                    if fsp == b"/" {
                        fsp.clear();
                    }
                    fsp.extend_from_slice(&below);
                }
                fsp
            });
            let mapped = match (from_kernel, row.dev) {
                (Some(fsp), Some(dev)) => self.mapper.host_of(dev, &fsp),
                // The process's mount table does not hold another namespace's mounts.
                _ if foreign => None,
                _ => self.mapper.map(h.mntns, h.pid, r, mnt),
            };
            match mapped {
                Some(host) if host[..] != r[..] => row.host_path = Some(host.into()),
                Some(_) => {}
                None => {
                    row.capture |= capture::HOST_UNMAPPED;
                    self.stats.host_unmapped += 1;
                }
            }
        }
        if h.flags & (flags::WALK_IS_OBJECT | flags::IDENTITY)
            == flags::WALK_IS_OBJECT | flags::IDENTITY
            && row.resolved_partial == Some(false)
            && let (Some(r), Some(dev), Some(ino)) = (&row.resolved_path, row.dev, row.ino)
        {
            let host = row.host_path.as_deref();
            match self.inode_paths.get_mut(&(h.mntns, dev, ino)) {
                Some((p, hp)) if p[..] == r[..] && hp.as_deref() == host => {}
                Some(e) => *e = (r.to_vec(), host.map(<[u8]>::to_vec)),
                None => {
                    self.inode_paths
                        .insert((h.mntns, dev, ino), (r.to_vec(), host.map(<[u8]>::to_vec)));
                }
            }
        }
        row
    }
}

/// The final accounting of a monitored run.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct MonitorReport {
    /// The ledger file.
    pub ledger: PathBuf,
    /// Rows written.
    pub rows: u64,
    /// Events lost (kernel side plus undecodable records).
    pub lost: u64,
    /// Kernel counters.
    pub counters: Counters,
    /// Records that could not be decoded.
    pub decode_errors: u64,
    /// What the row maker noticed.
    pub stats: RowStats,
    /// Why the record is incomplete (empty when complete).
    pub incomplete: Reasons,
    /// How the run met overload.
    #[serde(default)]
    pub overload: Option<aet_core::ledger::record::OverloadRecord>,
}

impl MonitorReport {
    /// Is the record complete?
    pub fn complete(&self) -> bool {
        self.incomplete.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use aet_common::{Syscall, flags};

    use super::*;
    use crate::monitor::decode::tests::record_with;

    fn comm(name: &str) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..name.len()].copy_from_slice(name.as_bytes());
        c
    }

    #[test]
    fn ppid_and_comm_come_from_the_recorded_tree() {
        let mut m = RowMaker::new(WallClock::with_offset(1000));
        // pid 10 (known to the kernel as a child of 1) execs python, then forks 77.
        let exec = record_with(
            EventKind::Exec,
            Syscall::Execve,
            &[b"/usr/bin/python3", b"", b"", b"", b""],
            |h| {
                h.ppid = 1;
                h.flags = flags::PPID_KERNEL;
                h.comm = comm("python3");
            },
        );
        let ev = decode::decode(&exec).unwrap();
        let row = m.row(&ev);
        assert_eq!((row.ppid, row.seq, row.ts_ns), (1, 0, 1005));
        let fork = record_with(EventKind::Fork, Syscall::None, &[b""; 5], |h| {
            h.aux = 77;
            h.ppid = 1;
            h.flags = flags::PPID_KERNEL;
            h.comm = comm("python3");
        });
        let ev = decode::decode(&fork).unwrap();
        assert_eq!(m.row(&ev).child_pid, Some(77));

        // The child opens a file after its creator died and init adopted it: the row still
        // names its creator, and its name (it has not exec'd) is its parent's.
        let open = record_with(
            EventKind::Open,
            Syscall::Openat,
            &[b"/x", b"", b"", b"", b""],
            |h| {
                h.pid = 77;
                h.comm = [0; 16];
            },
        );
        let ev = decode::decode(&open).unwrap();
        let row = m.row(&ev);
        assert_eq!(row.pid, 77);
        assert_eq!(row.ppid, 10, "creator recorded by the fork row");
        assert_eq!(&row.comm[..7], b"python3");
        assert_eq!(row.path.as_deref(), Some(&b"/x"[..]));
        assert_eq!(row.seq, 2);
    }

    #[test]
    fn walks_become_resolved_paths() {
        let mut m = RowMaker::new(WallClock::with_offset(0));
        // A relative open the kernel resolved through the new file: the object's walk.
        let open = record_with(
            EventKind::Open,
            Syscall::Openat,
            &[
                b"../answers/key.txt",
                b"",
                b"",
                b"key.txt/answers/task/",
                b"",
            ],
            |h| {
                h.flags = flags::WALK_IS_OBJECT | flags::IDENTITY;
                h.walk_flags = aet_common::walk::PRESENT | aet_common::walk::REACHED_ROOT;
                h.dev = (254 << 20) | 1;
                h.ino = 77;
            },
        );
        let ev = decode::decode(&open).unwrap();
        let row = m.row(&ev);
        assert_eq!(
            row.resolved_path.as_deref(),
            Some(&b"/task/answers/key.txt"[..])
        );
        assert_eq!(row.resolved_from, Some("object"));
        assert_eq!(row.dev, Some(libc::makedev(254, 1)));
        // A failed open: the base directory the kernel walked, joined lexically.
        let failed = record_with(
            EventKind::Open,
            Syscall::Openat,
            &[b"../answers/nope", b"", b"", b"src/task/", b""],
            |h| {
                h.ret = -2;
                h.walk_flags = aet_common::walk::PRESENT | aet_common::walk::REACHED_ROOT;
            },
        );
        let ev = decode::decode(&failed).unwrap();
        let row = m.row(&ev);
        assert_eq!(
            row.resolved_path.as_deref(),
            Some(&b"/task/answers/nope"[..])
        );
        assert_eq!(row.resolved_from, Some("joined"));
        assert_eq!(row.resolved_partial, Some(false));
        // The io record of the opened file carries the path its inode was seen under.
        let io = record_with(EventKind::Io, Syscall::None, &[b""; 5], |h| {
            h.flags = flags::IDENTITY;
            h.dev = (254 << 20) | 1;
            h.ino = 77;
            h.aux = 100;
        });
        let ev = decode::decode(&io).unwrap();
        let row = m.row(&ev);
        assert_eq!(row.bytes_read, Some(100));
        assert_eq!(
            row.resolved_path.as_deref(),
            Some(&b"/task/answers/key.txt"[..])
        );
        assert_eq!(row.resolved_from, Some("inode"));
    }

    /// An io row is named as its own process's mount namespace shows the file: bwrap seeing it
    /// under `/newroot/...` while it builds the view does not name the agent's read.
    #[test]
    fn io_rows_take_the_name_their_namespace_saw() {
        let mut m = RowMaker::new(WallClock::with_offset(0));
        let open_in = |ns: u32, walk: &'static [u8]| {
            record_with(
                EventKind::Open,
                Syscall::Openat,
                &[b"x", b"", b"", walk, b""],
                move |h| {
                    h.mntns = ns;
                    h.flags = flags::WALK_IS_OBJECT | flags::IDENTITY;
                    h.walk_flags = aet_common::walk::PRESENT | aet_common::walk::REACHED_ROOT;
                    h.dev = 7;
                    h.ino = 9;
                    h.ret = 3;
                },
            )
        };
        let setup = open_in(111, b"locale.alias/etc/newroot/");
        m.row(&decode::decode(&setup).unwrap());
        let agent = open_in(222, b"locale.alias/etc/");
        m.row(&decode::decode(&agent).unwrap());
        let io = |ns: u32| {
            record_with(EventKind::Io, Syscall::None, &[b""; 5], move |h| {
                h.mntns = ns;
                h.flags = flags::IDENTITY;
                h.dev = 7;
                h.ino = 9;
                h.aux = 10;
            })
        };
        let agent_io = io(222);
        let ev = decode::decode(&agent_io).unwrap();
        let row = m.row(&ev);
        assert_eq!(
            row.resolved_path.as_deref(),
            Some(&b"/etc/locale.alias"[..])
        );
        let setup_io = io(111);
        let ev = decode::decode(&setup_io).unwrap();
        let row = m.row(&ev);
        assert_eq!(
            row.resolved_path.as_deref(),
            Some(&b"/newroot/etc/locale.alias"[..])
        );
        // A namespace that never named the inode gets no name rather than another view's.
        let other_io = io(333);
        let ev = decode::decode(&other_io).unwrap();
        assert_eq!(m.row(&ev).resolved_path, None);
    }

    #[test]
    fn container_clients_that_start_containers_outside_the_run_are_noticed() {
        let cg = Some(Path::new("/aet/run-1"));
        let out = |argv: &[u8]| container_outside(argv, cg);
        assert_eq!(
            out(b"docker\0run\0busybox\0cat\0/x\0"),
            Some("docker".into())
        );
        assert_eq!(
            out(b"/usr/bin/docker\0run\0--cgroup-parent=/aet/run-1\0busybox\0"),
            None
        );
        assert_eq!(
            out(b"docker\0run\0--cgroup-parent\0/aet/run-1\0busybox\0"),
            None
        );
        assert_eq!(
            out(b"docker\0run\0--cgroup-parent=/elsewhere\0busybox\0"),
            Some("docker".into())
        );
        assert_eq!(out(b"docker\0exec\0c1\0cat\0/x\0"), Some("docker".into()));
        assert_eq!(out(b"nerdctl\0run\0x\0"), Some("nerdctl".into()));
        assert_eq!(out(b"podman\0--remote\0run\0x\0"), Some("podman".into()));
        // Daemonless podman starts its containers as its own descendants; clients that do not
        // start containers are not flagged.
        assert_eq!(out(b"podman\0run\0x\0"), None);
        assert_eq!(out(b"docker\0ps\0"), None);
        assert_eq!(out(b"docker\0images\0"), None);
        assert_eq!(out(b"cat\0run\0"), None);
    }

    #[test]
    fn work_handed_to_a_service_manager_or_scheduler_is_noticed() {
        let out = |argv: &[u8]| service_outside(argv);
        assert_eq!(
            out(b"systemd-run\0--unit\0x\0sh\0-c\0work\0"),
            Some("systemd-run".into())
        );
        assert_eq!(
            out(b"/usr/bin/systemd-run\0--user\0make\0"),
            Some("systemd-run".into())
        );
        assert_eq!(out(b"systemd-run\0--scope\0make\0"), None);
        assert_eq!(
            out(b"systemctl\0start\0foo.service\0"),
            Some("systemctl".into())
        );
        assert_eq!(
            out(b"systemctl\0--user\0restart\0foo\0"),
            Some("systemctl".into())
        );
        assert_eq!(
            out(b"systemctl\0enable\0--now\0foo\0"),
            Some("systemctl".into())
        );
        assert_eq!(out(b"systemctl\0status\0foo\0"), None);
        assert_eq!(out(b"systemctl\0enable\0foo\0"), None);
        assert_eq!(out(b"service\0nginx\0start\0"), Some("service".into()));
        assert_eq!(out(b"service\0nginx\0status\0"), None);
        assert_eq!(out(b"at\0now\0"), Some("at".into()));
        assert_eq!(
            out(b"at\0-f\0job.sh\0now\0+\x001\0minute\0"),
            Some("at".into())
        );
        assert_eq!(out(b"at\0-l\0"), None);
        assert_eq!(out(b"batch\0"), Some("batch".into()));
        assert_eq!(out(b"crontab\0mytab\0"), Some("crontab".into()));
        assert_eq!(out(b"crontab\0-\0"), Some("crontab".into()));
        assert_eq!(out(b"crontab\0-l\0"), None);
        assert_eq!(out(b"make\0start\0"), None);
        // A script run through its interpreter.
        assert_eq!(
            out(b"/bin/sh\0/opt/bin/systemd-run\0--unit\0x\0true\0"),
            Some("systemd-run".into())
        );
        assert_eq!(out(b"/bin/sh\0-e\0/opt/bin/at\0now\0"), Some("at".into()));
        assert_eq!(out(b"/bin/sh\0/opt/bin/systemd-run\0--scope\0true\0"), None);
    }

    #[test]
    fn exit_status_is_split_into_code_and_signal() {
        let mut m = RowMaker::new(WallClock::with_offset(0));
        let exit = record_with(EventKind::Exit, Syscall::None, &[b""; 5], |h| {
            h.ret = 3 << 8
        });
        let ev = decode::decode(&exit).unwrap();
        let row = m.row(&ev);
        assert_eq!((row.exit_code, row.exit_signal), (Some(3), None));
        let exit = record_with(EventKind::Exit, Syscall::None, &[b""; 5], |h| h.ret = 9);
        let ev = decode::decode(&exit).unwrap();
        let row = m.row(&ev);
        assert_eq!((row.exit_code, row.exit_signal), (None, Some(9)));
    }
}
