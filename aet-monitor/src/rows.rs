//! The row maker: one kernel record in, one ledger row out. It numbers rows, converts time,
//! keeps the process tree (each row's `ppid` and `comm`), turns the kernel's walks into paths, and
//! maps paths of other mount namespaces to the host's.
//!
//! What it learns from `/proc` (processes that existed before the attach, the link of an fd that
//! arrived, the target of a pidfd) comes through [`ProcView`], so it is tested without one.

use std::{collections::HashMap, path::PathBuf, sync::Arc};

use aet_common::{EventKind, flags};
use aet_ledger::{
    metadata::{FIRST_PHASE, PhaseRecord},
    schema::capture,
    util::WallClock,
    writer::Row,
};

/// Why a program row has no hash when the record lacks its file's device and inode.
pub const NO_IDENTITY: &str = "the file's device and inode are not in the record";

/// The kernel's boot-time clock now (what `bpf_ktime_get_boot_ns()` reads).
fn boot_now() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

use super::{
    decode::RawEvent,
    names::{self, Names, Peer},
    outside::{container_outside, service_outside},
    paths::{self, ResolvedFrom},
    sockaddr::sockaddr,
};

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
    mapper: aet_kernel::mountinfo::HostMapper,
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
    pid_names: aet_kernel::procfs::PidTranslator,
    /// Where facts no record carries come from.
    proc: Box<dyn ProcView>,
    /// The run's phases: each one's start on the kernel's boot-time clock and its name, in
    /// order (`agent` from 0).
    phases: Vec<(u64, Arc<str>)>,
    /// The same phases as the ledger's footer lists them.
    phase_records: Vec<PhaseRecord>,
    /// The run's sockets, resolutions and the queries waiting for their answers.
    names: Names,
}

/// What the row maker asks of `/proc`: the few facts no record carries. [`HostProc`] reads the
/// machine's; a test gives its own.
pub trait ProcView: Send {
    /// The parent and name of a process seen for the first time without a fork or exec record
    /// (it existed before monitoring began).
    fn process(&self, pid: u32) -> (u32, [u8; 16]);
    /// The path `pid`'s fd links to, while it still names the inode `(dev, ino)`.
    fn fd_link(&self, pid: u32, fd: i32, dev: u64, ino: u64) -> Option<Vec<u8>>;
    /// The process `pid`'s pidfd `fd` refers to.
    fn pidfd_target(&self, pid: u32, fd: i32) -> Option<u32>;
    /// The SHA-256 of the file `pid` holds as `held` ([`crate::programs::hash`]).
    fn program(
        &self,
        pid: u32,
        held: crate::programs::Held,
        identity: (u64, u64),
        path: Option<&[u8]>,
        row_wall_ns: i64,
    ) -> crate::programs::Hashed {
        let _ = (pid, held, identity, path, row_wall_ns);
        Err("not taken".into())
    }
}

/// The machine's `/proc`.
pub struct HostProc;

impl ProcView for HostProc {
    fn process(&self, pid: u32) -> (u32, [u8; 16]) {
        let mut comm = [0u8; 16];
        if let Some(c) = aet_kernel::procfs::comm(pid) {
            let b = c.as_bytes();
            let n = b.len().min(15);
            comm[..n].copy_from_slice(&b[..n]);
        }
        let ppid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| aet_kernel::procfs::parse_stat_ppid(&stat))
            .unwrap_or(0);
        (ppid, comm)
    }

    fn fd_link(&self, pid: u32, fd: i32, dev: u64, ino: u64) -> Option<Vec<u8>> {
        aet_kernel::procfs::fd_link_if(pid, fd, dev, ino)
    }

    fn pidfd_target(&self, pid: u32, fd: i32) -> Option<u32> {
        aet_kernel::procfs::pidfd_target(pid, fd)
    }

    fn program(
        &self,
        pid: u32,
        held: crate::programs::Held,
        (dev, ino): (u64, u64),
        path: Option<&[u8]>,
        row_wall_ns: i64,
    ) -> crate::programs::Hashed {
        crate::programs::hash(pid, held, dev, ino, path, row_wall_ns)
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
    /// A row maker whose first row gets `seq` 0, reading the machine's `/proc`.
    pub fn new(clock: WallClock) -> Self {
        Self::with_proc(clock, Box::new(HostProc))
    }

    /// A row maker that asks `proc` what no record carries.
    pub fn with_proc(clock: WallClock, proc: Box<dyn ProcView>) -> Self {
        Self {
            proc,
            clock,
            seq: 0,
            procs: HashMap::new(),
            mapper: aet_kernel::mountinfo::HostMapper::new(),
            inode_paths: HashMap::new(),
            stats: RowStats::default(),
            run_cgroup: None,
            outside: Vec::new(),
            services: Vec::new(),
            pidfds: HashMap::new(),
            pid_names: aet_kernel::procfs::PidTranslator::default(),
            phases: vec![(0, Arc::from(FIRST_PHASE))],
            phase_records: vec![PhaseRecord {
                name: FIRST_PHASE.into(),
                started_ns: clock.wall(boot_now()),
                keep: Vec::new(),
                by: None,
            }],
            names: Names::default(),
        }
    }

    /// Begins phase `name` now: rows the kernel stamps from now on belong to it (a row
    /// stamped before, read after, keeps its phase). `keep`: processes that may stay alive into
    /// it; `by`: the pid that asked. A phase is begun once, and never `agent` again.
    pub fn begin_phase(
        &mut self,
        name: &str,
        keep: Vec<u32>,
        by: Option<u32>,
    ) -> Result<PhaseRecord, String> {
        aet_ledger::metadata::valid_phase_name(name)?;
        if self.phase_records.iter().any(|p| p.name == name) {
            return Err(format!(
                "the run already had phase {name:?}: phases go one way (this run's: {})",
                self.phase_records
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let boot = boot_now();
        let record = PhaseRecord {
            name: name.to_owned(),
            started_ns: self.clock.wall(boot),
            keep,
            by,
        };
        self.phases.push((boot, Arc::from(name)));
        self.phase_records.push(record.clone());
        Ok(record)
    }

    /// The run's phases, for the ledger's footer.
    pub fn phases(&self) -> &[PhaseRecord] {
        &self.phase_records
    }

    /// The phase of a row the kernel stamped at `ts` (boot-time clock).
    fn phase_at(&self, ts: u64) -> Arc<str> {
        let (_, name) = self
            .phases
            .iter()
            .rev()
            .find(|(start, _)| *start <= ts)
            .unwrap_or(&self.phases[0]);
        name.clone()
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
        if let Some(p) = self.proc.fd_link(h.pid, h.fd, dev, ino) {
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
        let proc = &self.proc;
        self.procs.entry(h.pid).or_insert_with(|| {
            if h.flags & flags::PPID_KERNEL != 0 {
                ProcInfo {
                    ppid: h.ppid,
                    comm: h.comm,
                }
            } else {
                let (ppid, comm) = proc.process(h.pid);
                ProcInfo { ppid, comm }
            }
        })
    }

    /// The fields every row of the record `h` has (its `seq` is set where it is written).
    fn common<'r>(&mut self, ev: &RawEvent<'_>, kind: EventKind) -> (Row<'r>, ProcInfo) {
        let h = &ev.header;
        let info = self.actor(h);
        self.mapper.seen(h.mntns, h.pid);
        let mut row = Row {
            seq: 0,
            ts_ns: self.clock.wall(h.ts_ns),
            phase: Some(self.phase_at(h.ts_ns)),
            kind: kind.name(),
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
        if h.flags & flags::IDENTITY != 0 {
            row.dev = Some(userspace_dev(h));
            row.ino = Some(h.ino);
            row.mnt_id = (h.mnt_id != 0).then_some(h.mnt_id);
        }
        (row, info)
    }

    /// The next row's number.
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq - 1
    }

    /// Makes the row for `ev`: the fields every row has, then those of its kind. (A payload
    /// record makes its rows through [`RowMaker::payload`].)
    pub fn row<'a>(&mut self, ev: &'a RawEvent<'a>) -> Row<'a> {
        let h = &ev.header;
        let (mut row, info) = self.common(ev, ev.kind);
        row.seq = self.next_seq();
        match ev.kind {
            EventKind::Fork => self.fork_row(&mut row, h, info),
            EventKind::Exit => self.exit_row(&mut row, h),
            EventKind::Io => self.io_row(&mut row, h),
            EventKind::Fd if ev.syscall != aet_common::Syscall::PidfdGetfd => {
                self.fd_row(&mut row, h)
            }
            EventKind::Net => self.net_row(&mut row, ev),
            EventKind::Process => self.process_row(&mut row, ev, info),
            EventKind::IoUring => self.io_uring_row(&mut row, ev),
            _ => self.path_row(&mut row, ev),
        }
        row
    }

    /// The actor's process table entry, its name updated by a record that carries one (exec,
    /// fork and exit carry the current comm).
    fn actor(&mut self, h: &aet_common::EventHeader) -> ProcInfo {
        let has_comm = h.comm[0] != 0;
        let info = self.proc_of(h);
        if has_comm {
            info.comm = h.comm;
        }
        *info
    }

    fn fork_row(&mut self, row: &mut Row<'_>, h: &aet_common::EventHeader, info: ProcInfo) {
        let child = h.aux as u32;
        row.child_pid = Some(child);
        self.procs.insert(
            child,
            ProcInfo {
                ppid: h.pid,
                comm: info.comm,
            },
        );
    }

    fn exit_row(&mut self, row: &mut Row<'_>, h: &aet_common::EventHeader) {
        let status = h.ret as i32;
        if status & 0x7f == 0 {
            row.exit_code = Some((status >> 8) & 0xff);
        } else {
            row.exit_signal = Some(status & 0x7f);
        }
        self.procs.remove(&h.pid);
    }

    /// Bytes moved through an fd: named as its inode was last seen in the actor's namespace.
    fn io_row(&mut self, row: &mut Row<'_>, h: &aet_common::EventHeader) {
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
    }

    /// An fd that arrived (accepted, received, copied from a fanotify event...).
    fn fd_row(&mut self, row: &mut Row<'_>, h: &aet_common::EventHeader) {
        row.fd = Some(h.fd);
        row.fd_origin = aet_common::fd_origin::name(h.aux);
        row.set_ret(h.ret);
        if h.aux == aet_common::fd_origin::FANOTIFY {
            self.set_target(row, h.pid, h.aux2 as u32, h.mode);
        } else {
            row.source_fd = Some(h.aux2 as i32);
            // The socket's peer, from the kernel (a host pid).
            if h.open_flags != 0 {
                row.target_pid = Some(h.open_flags);
                row.target_in_run = Some(self.procs.contains_key(&h.open_flags));
            }
        }
        self.name_arrived_fd(row, h);
    }

    /// A syscall on another process (kill, ptrace, pidfd_open, process_vm_*...).
    fn process_row<'a>(&mut self, row: &mut Row<'a>, ev: &'a RawEvent<'a>, info: ProcInfo) {
        let h = &ev.header;
        row.set_ret(h.ret);
        let ptrace = ev.syscall == aet_common::Syscall::Ptrace;
        if ptrace {
            row.ptrace_request = Some(h.aux2 as u32);
        }
        if ptrace && h.aux2 == 0 {
            // PTRACE_TRACEME: the actor offers itself to its parent.
            row.target_pid = Some(info.ppid);
            row.target_in_run = Some(self.procs.contains_key(&info.ppid));
        } else {
            self.set_target(row, h.pid, h.aux as u32, h.mode);
        }
        if ev.syscall == aet_common::Syscall::PidfdOpen
            && h.ret >= 0
            && let Some(t) = row.target_pid
        {
            self.pidfds.insert((h.pid, h.ret as i32), t);
        }
        if shape_of(ev).flags >= 0 {
            row.flags = Some(h.open_flags);
        }
    }

    /// A channel the record does not see: a submitted request, or a set-up, entry or
    /// registration that worked (one refused, as by the sandbox's filter, is none).
    fn io_uring_row<'a>(&mut self, row: &mut Row<'a>, ev: &'a RawEvent<'a>) {
        let h = &ev.header;
        let request = ev.syscall == aet_common::Syscall::None;
        if request || h.ret >= 0 {
            self.stats.io_uring += 1;
        }
        if request {
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
    }

    /// A syscall on paths and fds (open, exec, stat, change, mmap, list, pidfd_getfd...): its
    /// arguments, its paths resolved, and the host's name of what it named.
    fn path_row<'a>(&mut self, row: &mut Row<'a>, ev: &'a RawEvent<'a>) {
        let h = &ev.header;
        row.set_ret(h.ret);
        self.arguments(row, ev);
        let shape = shape_of(ev);
        let is_exec = ev.kind == EventKind::Exec;
        let path_ok = h.flags & flags::PATH_UNREADABLE == 0;
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
            self.copied_fd(row, h);
        }
        // Another process's memory through /proc: a read or write of that process.
        if ev.kind == EventKind::Open
            && let Some(named) = row.resolved_path.as_deref().and_then(proc_mem_pid)
        {
            // The pid as the actor's procfs names it: translated through the actor's pid
            // namespace (level unknown here: the translator compares namespaces).
            self.set_target(row, h.pid, named, 1);
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
        if row.resolved_path.is_some()
            && (foreign || h.mntns != self.mapper.own_ns() && h.mntns != 0)
        {
            self.host_path(row, ev, foreign);
        }
        self.remember_inode(row, h);
        self.program(row, ev);
    }

    /// A successful exec's program, or a file mapped executable: its content's hash (or why
    /// there is none: [`NO_IDENTITY`] when the row lacks the file's identity).
    fn program(&mut self, row: &mut Row<'_>, ev: &RawEvent<'_>) {
        use crate::programs::Held;
        let h = &ev.header;
        let held = match ev.kind {
            EventKind::Exec if h.ret == 0 => Held::Exe {
                at_exec: (h.aux != 0).then_some((h.aux as i64, h.aux2)),
            },
            EventKind::Mmap
                if h.ret >= 0 && h.aux2 as u32 & aet_common::uapi::PROT_EXEC != 0 && h.fd >= 0 =>
            {
                Held::Mapping {
                    addr: h.ret as u64,
                    len: h.aux,
                }
            }
            _ => return,
        };
        let (Some(dev), Some(ino)) = (row.dev, row.ino) else {
            // Said, not left blank: a policy that judges programs by content cannot judge it.
            static WHY: std::sync::LazyLock<std::sync::Arc<str>> =
                std::sync::LazyLock::new(|| NO_IDENTITY.into());
            row.sha256_error = Some(WHY.clone());
            return;
        };
        let path = row.host_path.as_deref().or(row.resolved_path.as_deref());
        match self.proc.program(h.pid, held, (dev, ino), path, row.ts_ns) {
            Ok(hex) => row.sha256 = Some(hex),
            Err(why) => row.sha256_error = Some(why),
        }
    }

    /// The fds, flags and modes a path syscall's shape says it has, and what exec and mmap add.
    fn arguments<'a>(&mut self, row: &mut Row<'a>, ev: &'a RawEvent<'a>) {
        let h = &ev.header;
        let shape = shape_of(ev);
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
        if ev.kind == EventKind::Open {
            // The ledger's numbering, whatever architecture recorded it.
            row.flags = Some(aet_common::uapi::open_flags_from_native(h.open_flags));
        } else if shape.flags >= 0 || is_exec || ev.kind == EventKind::Mmap {
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
    }

    /// `pidfd_getfd`: an fd copied from the process a pidfd refers to.
    fn copied_fd(&mut self, row: &mut Row<'_>, h: &aet_common::EventHeader) {
        row.fd_origin = aet_common::fd_origin::name(aet_common::fd_origin::COPIED);
        row.fd = (h.ret >= 0).then_some(h.ret as i32);
        row.source_fd = Some(h.aux2 as i32);
        let target = match self.pidfds.get(&(h.pid, h.dirfd)) {
            Some(&t) => Some(t),
            None => self.proc.pidfd_target(h.pid, h.dirfd),
        };
        if let Some(t) = target {
            row.target_pid = Some(t);
            row.target_in_run = Some(self.procs.contains_key(&t));
        }
    }

    /// The host's path of a file named in another mount namespace (or relative to another
    /// mount tree); `HOST_UNMAPPED` when it cannot be found.
    fn host_path<'a>(&mut self, row: &mut Row<'a>, ev: &'a RawEvent<'a>, foreign: bool) {
        let h = &ev.header;
        let Some(r) = &row.resolved_path else {
            return;
        };
        let is_object = h.flags & flags::WALK_IS_OBJECT != 0;
        let mnt = if is_object { row.mnt_id } else { None };
        // An object seen through a mount of the process's namespace: the kernel walked its file
        // system path too (walk2 + the walk below the crossing).
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

    /// Remembers the path under which the kernel saw an inode whole, for the io rows and
    /// arrived fds that name it later.
    fn remember_inode(&mut self, row: &Row<'_>, h: &aet_common::EventHeader) {
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
    }
}

/// The argument layout of the record's syscall.
fn shape_of(ev: &RawEvent<'_>) -> aet_common::Shape {
    aet_common::SHAPES
        .get(ev.syscall as usize)
        .copied()
        .unwrap_or(aet_common::SHAPES[0])
}

mod net;

#[cfg(test)]
mod tests;
