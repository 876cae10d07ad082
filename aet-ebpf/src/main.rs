//! aet's eBPF programs: follow a run's process tree and record every way it touches a file.
//!
//! Programs attach to the raw syscall-exit tracepoint (`raw_syscalls:sys_exit`, one program for
//! every recorded syscall, native or compat), to `syscalls:sys_enter_execve(at)`, to the
//! scheduler's raw tracepoints (`sched_process_fork` / `exec` / `exit`) and to io_uring's request
//! submission. fentry, LSM and kprobes are not used: they are not available on every kernel aet
//! must run on.
//!
//! Rules every program here keeps:
//! - scope first: a task outside the run costs a helper call and one map lookup, and produces
//!   nothing;
//! - a syscall is recorded at its exit, from the saved registers, where the kernel has already
//!   faulted in the user strings it read (a string in a page the process never touched reads as
//!   nothing at entry);
//! - what the kernel resolved comes from kernel objects (the new fd's `struct file`, the exec'd
//!   file, the working directory), walked dentry by dentry up to the process's root, never from
//!   the user's string;
//! - records are variable-length: header, then exactly the bytes captured;
//! - nothing is dropped silently: every failure to deliver or to store increments a per-CPU
//!   counter in `COUNTERS` that userspace reads and writes into the ledger; a partial walk says so
//!   in its row;
//! - no kernel struct offset is hard-coded: they come from the running kernel's BTF via `CONFIG`.
#![no_std]
#![no_main]
#![feature(asm_experimental_arch)]

use core::{ffi::c_void, ptr::read_volatile};

use aet_common::{
    ARGV_CAP, Config, DATA_CAP, DATA_LIMIT, EventHeader, EventKind, FileIo, HEADER_SIZE, Inflight,
    Offsets, PATH_CAP, SHAPES, SYSCALL_COUNT, Shape, Syscall, WALK_CAP, WALK_STEPS, counter,
    fileio, flags, io, kfunc, obj, scope, section, shape,
    uapi::{
        AT_FDCWD, CREAT_FLAGS, F_DUPFD, F_DUPFD_CLOEXEC, MAP_ANONYMOUS, S_IFDIR, S_IFMT, S_IFREG,
    },
    walk,
};
use aya_ebpf::{
    EbpfContext as _,
    helpers::{bpf_probe_read_kernel, bpf_probe_read_user, generated},
    macros::{map, raw_tracepoint, tracepoint},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::{RawTracePointContext, TracePointContext},
};

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

/// Set by userspace before load (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
// SAFETY: Config is plain data; all-zero is its "unset" value (every program is a no-op).
static CONFIG: Config = unsafe { core::mem::zeroed() };

/// Records for userspace. Its size is set by userspace at load time.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Thread ids that descend from an in-scope task (fed by `sched_process_fork`, emptied by
/// `sched_process_exit`), and for `--pid` the target's threads and descendants found at attach.
#[map]
static TRACKED: HashMap<u32, u8> = HashMap::with_max_entries(1 << 16, 0);

/// Exec entries, for `sched_process_exec` to know which syscall (and dirfd, flags) led to it.
#[map]
static INFLIGHT: HashMap<u32, Inflight> = HashMap::with_max_entries(1 << 14, 0);

/// Byte accounting per open fd, keyed by `tgid << 32 | fd`. Entries are created at an fd's first
/// read, write, mapping or listing, not at its open: most opened files move no byte through
/// their fd.
#[map]
static FILEIO: HashMap<u64, FileIo> = HashMap::with_max_entries(1 << 16, 0);

/// Which fds of a process have a `FILEIO` entry: bit `fd` for fds below 63, bit 63 for any
/// above. Lets an exec or exit emit its process's entries without scanning the whole map.
#[map]
static FDMASK: HashMap<u32, u64> = HashMap::with_max_entries(1 << 14, 0);

/// Dispatch table: syscall number -> `syscall_entry(native, compat)`. Filled by userspace.
#[map]
static SYSCALLS: Array<u16> = Array::with_max_entries(aet_common::SYSCALL_TABLE_SIZE, 0);

const SCRATCH_SIZE: usize = HEADER_SIZE + DATA_CAP;

/// Where a record is built before it is copied into the ring buffer with its exact length.
#[repr(C, align(8))]
struct Scratch {
    buf: [u8; SCRATCH_SIZE],
}

/// One slot per CPU (indexed by CPU id; userspace sizes it to the number of possible CPUs). A
/// plain array rather than a per-CPU one: per-CPU values are limited to 32 KiB.
#[map]
static SCRATCH: Array<Scratch> = Array::with_max_entries(1, 0);

/// Per-CPU counters, indexed by `aet_common::counter`.
#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

const BPF_RB_NO_WAKEUP: u64 = 1;
const IORING_OP_OPENAT: u8 = 18;
const IORING_OP_STATX: u8 = 21;
const IORING_OP_OPENAT2: u8 = 28;

// Syscall tracepoint records: 8 bytes of common fields, `__syscall_nr` and padding, then the
// arguments as 8-byte slots from byte 16 (`sys_enter_*`). This layout is the syscall
// tracepoints' fixed format, not a kernel struct.
const SYSCALL_ARG0: usize = 2;

#[inline(always)]
fn cfg<T: Copy>(field: &T) -> T {
    // SAFETY: CONFIG is a plain global; the volatile read keeps the compiler from folding the
    // zero initialiser that userspace replaces at load time.
    unsafe { read_volatile(field) }
}

#[inline(always)]
fn offsets() -> &'static Offsets {
    &CONFIG.offsets
}

#[inline(always)]
fn count(idx: u32) {
    if let Some(p) = COUNTERS.get_ptr_mut(idx) {
        // SAFETY: per-CPU slot; programs do not migrate while they run.
        unsafe { *p += 1 };
    }
}

#[inline(always)]
fn sys_arg(ctx: &TracePointContext, n: usize) -> u64 {
    // SAFETY: direct read of the tracepoint record, inside its fixed size.
    unsafe { *(ctx.as_ptr() as *const u64).add(SYSCALL_ARG0 + n) }
}

/// Reads a kernel value at the plain address `base + off` (a helper call; see [`KPtr`] for the
/// cheap way).
#[inline(always)]
fn kread<T: Copy + Default>(base: u64, off: u32) -> T {
    if base == 0 {
        return T::default();
    }
    // SAFETY: bpf_probe_read_kernel is fault-tolerant; a bad address yields an error.
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T) }.unwrap_or_default()
}

/// A BTF-typed kernel pointer (from `bpf_get_current_task_btf()` and the pointer members reached
/// from it). The verifier checks every load through it against the kernel's BTF, and the JIT
/// makes the loads fault-safe: a struct member costs one instruction, not a helper call. The
/// offsets come from `CONFIG` (read-only, so the verifier sees them as constants).
#[derive(Clone, Copy)]
struct KPtr(*const u8);

impl KPtr {
    #[inline(always)]
    fn current_task() -> Self {
        // SAFETY: helper without preconditions.
        Self(unsafe { generated::bpf_get_current_task_btf() } as *const u8)
    }

    #[inline(always)]
    fn is_null(self) -> bool {
        self.0.is_null()
    }

    #[inline(always)]
    fn addr(self) -> u64 {
        self.0 as u64
    }

    /// Reads the member at byte offset `off`.
    #[inline(always)]
    fn read<T: Copy>(self, off: u32) -> T {
        // SAFETY: a BTF pointer: the verifier checked the member, the JIT guards the load.
        unsafe { core::ptr::read_volatile(self.0.add(off as usize) as *const T) }
    }

    /// Follows the pointer member at byte offset `off`.
    #[inline(always)]
    fn ptr(self, off: u32) -> Self {
        Self(self.read::<*const u8>(off))
    }
}

/// Is the task part of the monitored run?
#[inline(always)]
fn in_scope(task: &mut Task) -> bool {
    let hit = match cfg(&CONFIG.scope_mode) {
        scope::CGROUP => task.cgroup() == cfg(&CONFIG.target_cgroup),
        scope::UID => task.uid_gid().0 == cfg(&CONFIG.target_uid),
        scope::PID => task.tgid == cfg(&CONFIG.target_pid),
        _ => return false,
    };
    // SAFETY: the value is only tested for presence.
    hit || unsafe { TRACKED.get(task.tid) }.is_some()
}

/// The current task, as the hot path sees it: a BTF pointer, and the ids read through it once.
#[derive(Clone, Copy)]
struct Task {
    ptr: KPtr,
    tid: u32,
    tgid: u32,
    /// The cgroup v2 id once read (0 before).
    cgroup: u64,
    /// `uid | gid << 32` once read (`u64::MAX` before).
    ugid: u64,
}

impl Task {
    #[inline(always)]
    fn current() -> Self {
        let ptr = KPtr::current_task();
        let o = offsets();
        Self {
            ptr,
            tid: ptr.read::<i32>(cfg(&o.task_pid)) as u32,
            tgid: ptr.read::<i32>(cfg(&o.task_tgid)) as u32,
            cgroup: 0,
            ugid: u64::MAX,
        }
    }

    /// The task's cgroup v2 id (`task->cgroups->dfl_cgrp->kn->id`, what
    /// `bpf_get_current_cgroup_id()` returns), read once.
    #[inline(always)]
    fn cgroup(&mut self) -> u64 {
        if self.cgroup == 0 {
            let o = offsets();
            let kn = self
                .ptr
                .ptr(cfg(&o.task_cgroups))
                .ptr(cfg(&o.css_set_dfl_cgrp))
                .ptr(cfg(&o.cgroup_kn));
            self.cgroup = if kn.is_null() {
                0
            } else {
                kn.read::<u64>(cfg(&o.kernfs_node_id))
            };
        }
        self.cgroup
    }

    /// The task's real uid and gid (`task->cred->{uid,gid}`), read once.
    #[inline(always)]
    fn uid_gid(&mut self) -> (u32, u32) {
        if self.ugid == u64::MAX {
            let o = offsets();
            let cred = self.ptr.ptr(cfg(&o.task_cred));
            self.ugid = if cred.is_null() {
                0
            } else {
                cred.read::<u32>(cfg(&o.cred_uid)) as u64
                    | (cred.read::<u32>(cfg(&o.cred_gid)) as u64) << 32
            };
        }
        (self.ugid as u32, (self.ugid >> 32) as u32)
    }

    /// Is the task in a compat (32-bit) syscall?
    #[inline(always)]
    fn compat(self) -> bool {
        let mask = cfg(&CONFIG.compat_mask);
        mask != 0 && self.ptr.read::<u32>(cfg(&offsets().task_ti_status)) & mask != 0
    }

    /// The task's mount namespace id.
    #[inline(always)]
    fn mntns(self) -> u32 {
        let o = offsets();
        let ns = self
            .ptr
            .ptr(cfg(&o.task_nsproxy))
            .ptr(cfg(&o.nsproxy_mnt_ns));
        if ns.is_null() {
            0
        } else {
            ns.read::<u32>(cfg(&o.mnt_ns_inum))
        }
    }

    /// `task->fs` (NULL for some kernel threads).
    #[inline(always)]
    fn fs(self) -> KPtr {
        self.ptr.ptr(cfg(&offsets().task_fs))
    }

    #[inline(always)]
    fn in_scope(&mut self) -> bool {
        in_scope(self)
    }
}

#[inline(always)]
fn scratch() -> Option<&'static mut Scratch> {
    // SAFETY: helper without preconditions.
    let cpu = unsafe { generated::bpf_get_smp_processor_id() };
    // SAFETY: this CPU's slot, exclusive to this program invocation (programs do not migrate).
    SCRATCH.get_ptr_mut(cpu).map(|p| unsafe { &mut *p })
}

#[inline(always)]
fn header(s: &mut Scratch) -> &mut EventHeader {
    // SAFETY: the buffer starts 8-aligned and is larger than the header.
    unsafe { &mut *(s.buf.as_mut_ptr() as *mut EventHeader) }
}

/// Stores zero without letting the compiler merge neighbouring stores into a memset call (a
/// byte-by-byte loop in BPF).
#[inline(always)]
fn zero<T: Default>(p: &mut T) {
    // SAFETY: p is a valid, aligned reference.
    unsafe { core::ptr::write_volatile(p, T::default()) };
}

/// Fills the header's common part for the current task. `ppid` and `comm` are left empty: they
/// change only at fork and exec, whose records carry them ([`fill_ppid`], [`fill_comm`]), and
/// userspace keeps them per process. Every helper call counts on the hot path.
#[inline(always)]
fn fill_header(h: &mut EventHeader, task: &mut Task, kind: EventKind, syscall: u16, ret: i64) {
    let (uid, gid) = task.uid_gid();
    // SAFETY: helper without preconditions.
    let ts = unsafe { generated::bpf_ktime_get_boot_ns() };
    h.kind = kind as u16;
    h.syscall = syscall;
    h.flags = 0;
    h.ts_ns = ts;
    h.cgroup_id = task.cgroup();
    h.ret = ret;
    h.pid = task.tgid;
    h.tid = task.tid;
    h.uid = uid;
    h.gid = gid;
    h.dirfd = AT_FDCWD;
    h.dirfd2 = AT_FDCWD;
    h.fd = -1;
    h.mntns = task.mntns();
    zero(&mut h.aux);
    zero(&mut h.aux2);
    zero(&mut h.dev);
    zero(&mut h.ino);
    zero(&mut h.ppid);
    zero(&mut h.open_flags);
    zero(&mut h.mode);
    zero(&mut h.mnt_id);
    zero(&mut h.walk_flags);
    zero(&mut h.walk2_flags);
    let len = h.len.as_mut_ptr() as *mut u32;
    // SAFETY: len and walk_split are 12 contiguous, 4-aligned bytes.
    unsafe {
        zero(&mut *len);
        zero(&mut *len.add(1));
        zero(&mut *len.add(2));
    }
    h.walk_split = aet_common::NO_SPLIT;
    let comm = h.comm.as_mut_ptr() as *mut u64;
    // SAFETY: comm is 16 bytes, 8-aligned inside the header.
    unsafe {
        zero(&mut *comm);
        zero(&mut *comm.add(1));
    }
}

/// Adds the current task's `comm` to the header.
#[inline(always)]
fn fill_comm(h: &mut EventHeader) {
    // SAFETY: comm has 16 bytes of room.
    unsafe { generated::bpf_get_current_comm(h.comm.as_mut_ptr() as *mut c_void, 16) };
}

/// Adds the task's `real_parent` pid to the header.
#[inline(always)]
fn fill_ppid(h: &mut EventHeader, task: &Task) {
    let o = offsets();
    let parent = task.ptr.ptr(cfg(&o.task_real_parent));
    if !parent.is_null() {
        h.ppid = parent.read::<i32>(cfg(&o.task_tgid)) as u32;
        h.flags |= flags::PPID_KERNEL;
    }
}

/// Offset in the scratch buffer where the next section starts.
#[inline(always)]
fn section_start(h: &EventHeader) -> usize {
    HEADER_SIZE
        + h.len[section::PATH] as usize
        + h.len[section::PATH2] as usize
        + h.len[section::ARGV] as usize
        + h.len[section::WALK] as usize
        + h.len[section::WALK2] as usize
}

/// Sends the record in `s` (header plus its sections).
#[inline(always)]
fn send(s: &mut Scratch) {
    let len = section_start(header(s));
    if len > SCRATCH_SIZE {
        return;
    }
    match EVENTS.output::<[u8]>(&s.buf[..len], BPF_RB_NO_WAKEUP) {
        Ok(()) => count(counter::SENT),
        Err(_) => count(counter::RINGBUF_FULL),
    }
}

/// Copies a NUL-terminated user string as section `sec`; returns whether it could be read.
#[inline(always)]
fn capture_user_str(s: &mut Scratch, sec: usize, src: u64) -> bool {
    let start = section_start(header(s));
    if start > DATA_LIMIT {
        header(s).flags |= flags::SECTION_DROPPED;
        return false;
    }
    let dst = s.buf[start..].as_mut_ptr();
    // SAFETY: dst has PATH_CAP bytes of room (start <= DATA_LIMIT); the helper is fault-tolerant.
    let n = unsafe {
        generated::bpf_probe_read_user_str(
            dst as *mut c_void,
            PATH_CAP as u32,
            src as *const c_void,
        )
    };
    finish_str(s, sec, n, src, true)
}

/// Copies a NUL-terminated kernel string as section `sec`.
#[inline(always)]
fn capture_kernel_str(s: &mut Scratch, sec: usize, src: u64) -> bool {
    let start = section_start(header(s));
    if start > DATA_LIMIT {
        header(s).flags |= flags::SECTION_DROPPED;
        return false;
    }
    let dst = s.buf[start..].as_mut_ptr();
    // SAFETY: as above, for kernel memory.
    let n = unsafe {
        generated::bpf_probe_read_kernel_str(
            dst as *mut c_void,
            PATH_CAP as u32,
            src as *const c_void,
        )
    };
    finish_str(s, sec, n, src, false)
}

#[inline(always)]
fn finish_str(s: &mut Scratch, sec: usize, n: i64, src: u64, user: bool) -> bool {
    let h = header(s);
    if n <= 0 || src == 0 {
        if sec == section::PATH {
            h.flags |= flags::PATH_UNREADABLE;
            count(counter::PATH_UNREADABLE);
        }
        return false;
    }
    let n = n as usize;
    let len = if n >= PATH_CAP {
        // The helper stops at PATH_CAP - 1 bytes plus a NUL; the string was longer unless its
        // byte at PATH_CAP - 1 is the terminator.
        let last = src + (PATH_CAP as u64 - 1);
        // SAFETY: fault-tolerant reads.
        let b: u8 = if user {
            unsafe { bpf_probe_read_user(last as *const u8) }.unwrap_or(1)
        } else {
            unsafe { bpf_probe_read_kernel(last as *const u8) }.unwrap_or(1)
        };
        if b != 0 {
            h.flags |= if sec == section::PATH {
                flags::PATH_TRUNCATED
            } else {
                flags::PATH2_TRUNCATED
            };
        }
        PATH_CAP - 1
    } else {
        n - 1
    };
    if sec < section::COUNT {
        h.len[sec] = len as u16;
    }
    true
}

/// The first byte of a captured section (0 when empty).
#[inline(always)]
fn section_first_byte(s: &mut Scratch, sec: usize) -> u8 {
    let h = header(s);
    if h.len[sec] == 0 {
        return 0;
    }
    let mut off = HEADER_SIZE;
    let mut i = 0;
    while i < sec {
        off += h.len[i] as usize;
        i += 1;
    }
    if off >= SCRATCH_SIZE {
        return 0;
    }
    s.buf[off]
}

// ---------------------------------------------------------------------------------------------
// Files, inodes and kernel path walks

/// The `struct file` behind an fd, as a BTF pointer.
#[derive(Clone, Copy)]
enum FileRef {
    None,
    Btf(KPtr),
}

/// The `struct file` behind fd `fd` of the current task. A file in the embedded fd array is
/// reached with BTF loads at constant offsets (the verifier refuses a variable offset on a BTF
/// pointer, hence the unrolled match); any other fd with one helper read of its slot in the fd
/// table, made a BTF pointer by [`rdonly_cast`].
#[inline(always)]
fn fd_file(task: &Task, fd: i64) -> FileRef {
    let o = offsets();
    let files = task.ptr.ptr(cfg(&o.task_files));
    if files.is_null() || fd < 0 {
        return FileRef::None;
    }
    let fdt = files.ptr(cfg(&o.files_fdt));
    if fdt.is_null() {
        return FileRef::None;
    }
    let max: u32 = fdt.read(cfg(&o.fdt_max_fds));
    if fd >= max as i64 {
        return FileRef::None;
    }
    let array: u64 = fdt.read(cfg(&o.fdt_fd));
    let base = cfg(&o.files_fd_array);
    if array == files.addr() + base as u64 && (fd as u32) < cfg(&o.fd_array_len) {
        macro_rules! arms {
            ($($k:literal)*) => {
                match fd {
                    $($k => files.ptr(base + 8 * $k),)*
                    _ => KPtr(core::ptr::null()),
                }
            };
        }
        let f = arms!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29
            30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58
            59 60 61 62 63);
        return if f.is_null() {
            FileRef::None
        } else {
            FileRef::Btf(f)
        };
    }
    let f: u64 = kread(array, (8 * fd) as u32);
    let f = rdonly_cast::<{ kfunc::TYPE_FILE }>(f);
    if f.is_null() {
        FileRef::None
    } else {
        FileRef::Btf(f)
    }
}

/// The `struct mount` address around a vfsmount (`container_of`, so a plain address).
#[inline(always)]
fn mount_of(mnt: u64) -> u64 {
    if mnt == 0 {
        0
    } else {
        mnt - cfg(&offsets().mount_mnt) as u64
    }
}

#[inline(always)]
fn mount_id(mnt: u64) -> u32 {
    let m = rdonly_cast::<{ kfunc::TYPE_MOUNT }>(mount_of(mnt));
    if m.is_null() {
        return 0;
    }
    m.read::<i32>(cfg(&offsets().mount_id)) as u32
}

/// A plain kernel address as a read-only BTF pointer to the struct `TYPE` names (a
/// [`kfunc::TYPES`] marker): loads through it are single, fault-safe instructions instead of
/// helper calls. The call is a marker the loader rewrites into `bpf_rdonly_cast`.
#[inline(always)]
fn rdonly_cast<const TYPE: i32>(addr: u64) -> KPtr {
    let r: *const u8;
    // SAFETY: the loader turns this into a kfunc call with the kernel's own ids; like a helper
    // call it takes r1-r2, returns r0 and clobbers r1-r5.
    unsafe {
        core::arch::asm!(
            "call {call}",
            call = const kfunc::RDONLY_CAST,
            inout("r1") addr => _,
            inout("r2") TYPE as u64 => _,
            lateout("r0") r,
            lateout("r3") _,
            lateout("r4") _,
            lateout("r5") _,
        );
    }
    KPtr(r)
}

/// The class of an inode mode for byte accounting.
#[inline(always)]
fn mode_class(mode: u16) -> u32 {
    match mode & S_IFMT {
        S_IFREG => fileio::REGULAR,
        S_IFDIR => fileio::DIRECTORY,
        _ => fileio::IGNORED,
    }
}

/// A file's identity and class: `(dev, ino, mnt_id, class)`.
type Identity = (u64, u64, u32, u32);

#[inline(never)]
fn identity_btf(f: KPtr) -> Identity {
    let o = offsets();
    let inode = f.ptr(cfg(&o.file_inode));
    if inode.is_null() {
        return (0, 0, 0, fileio::IGNORED);
    }
    let sb = inode.ptr(cfg(&o.inode_sb));
    let dev = if sb.is_null() {
        0
    } else {
        sb.read::<u32>(cfg(&o.sb_dev)) as u64
    };
    let mnt = f.ptr(cfg(&o.file_path) + cfg(&o.path_mnt));
    (
        dev,
        inode.read::<u64>(cfg(&o.inode_ino)),
        mount_id(mnt.addr()),
        mode_class(inode.read::<u16>(cfg(&o.inode_mode))),
    )
}

#[inline(always)]
fn identity(file: FileRef) -> Option<Identity> {
    match file {
        FileRef::None => None,
        FileRef::Btf(f) => Some(identity_btf(f)),
    }
}

#[inline(always)]
fn set_identity(h: &mut EventHeader, id: Identity) {
    h.dev = id.0;
    h.ino = id.1;
    h.mnt_id = id.2;
    h.flags |= flags::IDENTITY;
}

/// Pointers of the `bpf_loop` walking up from a dentry, on the caller's stack (the only place a
/// BTF pointer keeps its type between iterations).
#[repr(C)]
struct WalkState {
    dentry: *const u8,
    mnt: *const u8,
    root_dentry: u64,
    root_mnt: u64,
    /// This CPU's record buffer and walk counters, looked up once per walk.
    s: *mut Scratch,
    c: *mut WalkCtx,
    /// 1 for a file-system walk: up `d_parent` to the file system's root, across no mount.
    fs_only: u64,
}

/// The walk's counters, kept in a map rather than on the stack: the verifier then sees the same
/// (unknown, bounds-checked) values at every iteration and verifies the callback once, instead
/// of following each value of the offset.
#[repr(C)]
#[derive(Clone, Copy)]
struct WalkCtx {
    /// Where the section starts in the scratch buffer.
    base: u32,
    /// Bytes written so far.
    off: u32,
    flags: u32,
    /// 1 before the first component (the object itself).
    first: u32,
    /// Length of the walk when it first crossed a mount (`u32::MAX` before).
    split: u32,
    _pad: u32,
    /// The root dentry of the first mount crossed.
    fs_dentry: u64,
}

#[map]
static WALKCTX: Array<WalkCtx> = Array::with_max_entries(1, 0);

#[inline(always)]
fn walk_ctx() -> Option<&'static mut WalkCtx> {
    // SAFETY: helper without preconditions.
    let cpu = unsafe { generated::bpf_get_smp_processor_id() };
    // SAFETY: this CPU's slot, exclusive to this program invocation.
    WALKCTX.get_ptr_mut(cpu).map(|p| unsafe { &mut *p })
}

/// Appends one component (`len` bytes, inline in the dentry `inline` when given, else at
/// `name`) and a `/` to the walk. Returns false when it stopped.
#[inline(always)]
fn walk_append(
    s: &mut Scratch,
    c: &mut WalkCtx,
    len: u32,
    name: u64,
    inline: Option<KPtr>,
) -> bool {
    let base = c.base as usize;
    let off = c.off as usize;
    // Room for a component of up to 255 bytes plus the separator.
    if base > DATA_LIMIT || off > WALK_CAP - 260 || len > 255 {
        c.flags |= walk::TRUNCATED as u32;
        return false;
    }
    // The verifier needs the length bounded in the registers that use it; black_box keeps the
    // compiler from dropping the mask as redundant after the check above.
    let len = core::hint::black_box(len as u64) & 0xff;
    let pos = base + off;
    let dst = s.buf[pos..].as_mut_ptr();
    let ilen = cfg(&offsets().dentry_iname_len) as u64;
    match inline {
        Some(d) if len < ilen && ilen <= 40 => {
            // The short name lives in the dentry: copy it with checked loads, 8 bytes at a time.
            let io = cfg(&offsets().dentry_iname);
            let w = dst as *mut u64;
            // Only the words the name occupies (most names are short).
            // SAFETY: dst has WALK_CAP - off >= 260 bytes of room; unaligned stores to map
            // values are allowed.
            unsafe {
                core::ptr::write_unaligned(w, d.read::<u64>(io));
                if len > 8 {
                    core::ptr::write_unaligned(w.add(1), d.read::<u64>(io + 8));
                    if len > 16 {
                        core::ptr::write_unaligned(w.add(2), d.read::<u64>(io + 16));
                        if len > 24 {
                            core::ptr::write_unaligned(w.add(3), d.read::<u64>(io + 24));
                            if len > 32 {
                                core::ptr::write_unaligned(w.add(4), d.read::<u64>(io + 32));
                            }
                        }
                    }
                }
            }
        }
        _ => {
            // SAFETY: dst has at least 260 bytes of room; len + 1 <= 256.
            let n = unsafe {
                generated::bpf_probe_read_kernel(
                    dst as *mut c_void,
                    (len + 1) as u32,
                    name as *const c_void,
                )
            };
            if n < 0 {
                c.flags |= walk::FAILED as u32;
                return false;
            }
        }
    }
    let end = pos + len as usize;
    if end < SCRATCH_SIZE {
        s.buf[end] = b'/';
    }
    c.off = (off + len as usize + 1) as u32;
    true
}

/// At the root of a mount: continue from its mountpoint in the parent mount. `struct mount` is
/// only reachable by `container_of`, so from here on the walk goes through read-only BTF pointers
/// made from plain addresses ([`rdonly_cast`]). Returns false at the top.
#[inline(always)]
fn walk_cross(st: &mut WalkState, c: &mut WalkCtx, mnt: u64, dentry: u64) -> bool {
    let o = offsets();
    if c.split == u32::MAX {
        c.split = c.off;
        c.fs_dentry = dentry;
    }
    let mount = rdonly_cast::<{ kfunc::TYPE_MOUNT }>(mount_of(mnt));
    if mount.is_null() {
        c.flags |= walk::FAILED as u32;
        return false;
    }
    let parent = mount.ptr(cfg(&o.mount_parent));
    if parent.is_null() || parent.addr() == mount.addr() {
        c.flags |= walk::UNREACHABLE as u32;
        return false;
    }
    st.dentry = mount.ptr(cfg(&o.mount_mountpoint)).0;
    // SAFETY: pointer arithmetic only (the vfsmount embedded in the parent's struct mount); the
    // verifier checks every load through it.
    st.mnt = unsafe { parent.0.add(cfg(&o.mount_mnt) as usize) };
    true
}

extern "C" fn walk_step(_i: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back the pointer to the caller's stack state.
    let st = unsafe { &mut *(ctx as *mut WalkState) };
    if walk_one(st) { 0 } else { 1 }
}

/// One step of a walk: a component, a mount crossing, or the end. Returns whether to go on.
#[inline(always)]
fn walk_one(st: &mut WalkState) -> bool {
    if st.s.is_null() || st.c.is_null() {
        return false;
    }
    // SAFETY: map values of this CPU, looked up by the walk's caller.
    let (s, c) = unsafe { (&mut *st.s, &mut *st.c) };
    let o = offsets();
    let d = KPtr(st.dentry);
    let m = KPtr(st.mnt);
    if st.fs_only == 0 {
        if d.is_null() || m.is_null() {
            c.flags |= walk::FAILED as u32;
            return false;
        }
        if d.addr() == st.root_dentry && m.addr() == st.root_mnt {
            c.flags |= walk::REACHED_ROOT as u32;
            return false;
        }
        if c.first == 1 {
            c.first = 0;
            let parent: u64 = d.read(cfg(&o.dentry_parent));
            if d.read::<u64>(cfg(&o.dentry_hash_pprev)) == 0 && parent != d.addr() {
                c.flags |= walk::DELETED as u32;
            }
        }
        let mnt_root: u64 = m.read(cfg(&o.vfsmount_root));
        if d.addr() == mnt_root {
            return walk_cross(st, c, m.addr(), d.addr());
        }
    } else if d.is_null() {
        c.flags |= walk::FAILED as u32;
        return false;
    }
    let parent = d.ptr(cfg(&o.dentry_parent));
    if parent.is_null() || parent.addr() == d.addr() {
        if st.fs_only == 1 {
            c.flags |= walk::REACHED_ROOT as u32;
            return false;
        }
        // The root of a file system no mount here shows. A pseudo file (memfd, pipe,
        // anonymous inode) is such a root itself: keep its name.
        if c.off == 0 {
            let len: u32 = d.read(cfg(&o.dentry_name_len));
            let name: u64 = d.read(cfg(&o.dentry_name));
            walk_append(s, c, len, name, None);
        }
        c.flags |= walk::UNREACHABLE as u32;
        return false;
    }
    let len: u32 = d.read(cfg(&o.dentry_name_len));
    let name: u64 = d.read(cfg(&o.dentry_name));
    let inline = if name == d.addr() + cfg(&o.dentry_iname) as u64 {
        Some(d)
    } else {
        None
    };
    if !walk_append(s, c, len, name, inline) {
        return false;
    }
    st.dentry = parent.0;
    true
}

/// Walk steps taken inline before the rest is handed to `bpf_loop`.
const INLINE_STEPS: u32 = 6;

/// Runs the walk loop from `st` up to the task's root, writing the components, leaf first, as
/// section `sec`.
#[inline(always)]
fn run_walk(s: &mut Scratch, task: &Task, sec: usize, st: &mut WalkState) {
    let start = section_start(header(s));
    let o = offsets();
    let Some(c) = walk_ctx() else { return };
    c.base = start as u32;
    c.off = 0;
    c.flags = walk::PRESENT as u32;
    c.first = 1;
    c.split = u32::MAX;
    c.fs_dentry = 0;
    let fs = task.fs();
    if !fs.is_null() && st.fs_only == 0 {
        let root = cfg(&o.fs_root);
        st.root_dentry = fs.read::<u64>(root + cfg(&o.path_dentry));
        st.root_mnt = fs.read::<u64>(root + cfg(&o.path_mnt));
    }
    if start > DATA_LIMIT {
        header(s).flags |= flags::SECTION_DROPPED;
        return;
    }
    st.s = s as *mut Scratch;
    st.c = c as *mut WalkCtx;
    // Most paths are a few components deep: walk those steps inline, and only hand a deeper path
    // to bpf_loop (each of its iterations is an indirect call).
    let mut done = false;
    for _ in 0..INLINE_STEPS {
        if !walk_one(st) {
            done = true;
            break;
        }
    }
    if !done {
        // SAFETY: callback and state are valid for the duration of the call.
        let steps = unsafe {
            generated::bpf_loop(
                WALK_STEPS - INLINE_STEPS,
                walk_step as *mut c_void,
                st as *mut WalkState as *mut c_void,
                0,
            )
        };
        if steps >= (WALK_STEPS - INLINE_STEPS) as i64
            && c.flags & (walk::REACHED_ROOT | walk::UNREACHABLE) as u32 == 0
        {
            c.flags |= walk::TRUNCATED as u32;
        }
    }
    if c.flags & (walk::TRUNCATED | walk::FAILED) as u32 != 0 {
        count(counter::WALK_PARTIAL);
    }
    let len = if c.off as usize > WALK_CAP {
        WALK_CAP as u32
    } else {
        c.off
    };
    let wflags = c.flags as u16;
    let split = c.split;
    let fs_dentry = c.fs_dentry;
    let h = header(s);
    if sec == section::WALK {
        h.len[section::WALK] = len as u16;
        h.walk_flags = wflags;
        h.walk_split = if split <= len {
            split as u16
        } else {
            aet_common::NO_SPLIT
        };
        if split <= len && st.fs_only == 0 && task.mntns() != cfg(&CONFIG.host_mntns) {
            // The process sees this file through a mount of its own namespace (a sandbox):
            // walk the file system from that mount's root, so the host's path can be told.
            walk_fs(s, task, fs_dentry);
        }
    } else {
        h.len[section::WALK2] = len as u16;
        h.walk2_flags = wflags;
    }
}

impl WalkState {
    /// Initialises the state in place, with one 8-byte store per field: the verifier tracks a
    /// stack slot's type (pointer or known number) only when it is written whole, and the
    /// compiler would otherwise zero or move the struct with byte-by-byte memset and memcpy.
    #[inline(always)]
    fn init(p: *mut Self, dentry: *const u8, mnt: *const u8) {
        // SAFETY: p points to a live, aligned WalkState slot on the caller's stack.
        unsafe {
            core::ptr::write_volatile(&raw mut (*p).dentry, dentry);
            core::ptr::write_volatile(&raw mut (*p).mnt, mnt);
            core::ptr::write_volatile(&raw mut (*p).root_dentry, 0);
            core::ptr::write_volatile(&raw mut (*p).root_mnt, 0);
            core::ptr::write_volatile(&raw mut (*p).s, core::ptr::null_mut());
            core::ptr::write_volatile(&raw mut (*p).c, core::ptr::null_mut());
            core::ptr::write_volatile(&raw mut (*p).fs_only, 0);
        }
    }
}

/// Walks from a dentry up to its file system's root, across no mount, into section WALK2.
#[inline(never)]
fn walk_fs(s: &mut Scratch, task: &Task, dentry: u64) {
    if dentry == 0 {
        return;
    }
    let d = rdonly_cast::<{ kfunc::TYPE_DENTRY }>(dentry);
    if d.is_null() {
        return;
    }
    let mut st = core::mem::MaybeUninit::<WalkState>::uninit();
    WalkState::init(st.as_mut_ptr(), d.0, core::ptr::null());
    // SAFETY: initialised above; one more whole-slot store.
    let st = unsafe {
        core::ptr::write_volatile(&raw mut (*st.as_mut_ptr()).fs_only, 1);
        &mut *st.as_mut_ptr()
    };
    run_walk(s, task, section::WALK2, st);
}

/// Records a file as the record's object: its identity and its walk. Returns its class.
#[inline(always)]
fn record_file(s: &mut Scratch, task: &Task, file: FileRef) -> u32 {
    let Some(id) = identity(file) else {
        return fileio::IGNORED;
    };
    set_identity(header(s), id);
    let mut st = core::mem::MaybeUninit::<WalkState>::uninit();
    if walk_start(st.as_mut_ptr(), task, NO_FD, file) {
        walk_from(s, task, section::WALK, st.as_mut_ptr());
    }
    header(s).flags |= flags::WALK_IS_OBJECT;
    id.3
}

/// Does the identity a stat call reported (in `h`, from its buffer) name the file `id`?
#[inline(always)]
fn stat_names(h: &EventHeader, id: Identity) -> bool {
    let (major, minor) = (id.0 >> 20, id.0 & 0xfffff);
    let dev = if h.flags & flags::DEV_STAT != 0 {
        // The kernel's new_encode_dev, as struct stat carries it.
        (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
    } else {
        major | minor << 32
    };
    h.ino == id.1 && h.dev == dev
}

/// No fd: nothing to walk.
const NO_FD: i64 = i64::MIN;

/// Sets up `st` for a walk from `file` (the file of `fd`), or from the working directory when
/// `fd` is `AT_FDCWD`. Returns false when there is nothing to walk from.
#[inline(always)]
fn walk_start(st: *mut WalkState, task: &Task, fd: i64, file: FileRef) -> bool {
    let o = offsets();
    let (dentry_off, mnt_off) = (cfg(&o.path_dentry), cfg(&o.path_mnt));
    let (d, m) = match file {
        FileRef::Btf(f) => {
            let fp = cfg(&o.file_path);
            (f.ptr(fp + dentry_off), f.ptr(fp + mnt_off))
        }
        FileRef::None if fd == AT_FDCWD as i64 => {
            let fs = task.fs();
            if fs.is_null() {
                return false;
            }
            let pwd = cfg(&o.fs_pwd);
            (fs.ptr(pwd + dentry_off), fs.ptr(pwd + mnt_off))
        }
        FileRef::None => return false,
    };
    if d.is_null() || m.is_null() {
        return false;
    }
    WalkState::init(st, d.0, m.0);
    true
}

/// Runs a walk set up by [`walk_start`] into section `sec`.
#[inline(never)]
fn walk_from(s: &mut Scratch, task: &Task, sec: usize, st: *mut WalkState) {
    // SAFETY: initialised by walk_start, on the caller's stack.
    run_walk(s, task, sec, unsafe { &mut *st });
}

// ---------------------------------------------------------------------------------------------
// Syscall exits: one raw tracepoint for every syscall, dispatched by number.
//
// The arguments are read from the task's saved registers at exit: the syscall has not changed
// them, and any user string it read is faulted in by now.

/// `struct open_how` (uapi, stable).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// The six argument registers of a syscall, read once at its exit (constant-offset loads: the
/// verifier refuses a variable offset on a BTF pointer, and the argument index comes from a
/// table).
struct Args {
    /// Arguments 0..5.
    regs: [u64; 6],
    compat: bool,
}

impl Args {
    #[inline(always)]
    fn read(regs: KPtr, compat: bool) -> Self {
        let o = offsets();
        macro_rules! load {
            ($($i:literal)*) => {
                [$(if compat {
                    regs.read::<u64>(cfg(&o.regs_args_compat[$i])) & 0xffff_ffff
                } else {
                    regs.read::<u64>(cfg(&o.regs_args[$i]))
                },)*]
            };
        }
        Self {
            regs: load!(0 1 2 3 4 5),
            compat,
        }
    }

    #[inline(always)]
    fn get(&self, n: i8) -> u64 {
        // The index comes from a table; the verifier needs it bounded in the register used,
        // and black_box keeps the compiler from moving the check to another one. (Two zero
        // words after the arguments, for a masked index, cost a call to a byte-wise memset.)
        let i = core::hint::black_box(n as u64);
        if i >= 6 {
            return 0;
        }
        // SAFETY: i < 6, checked above.
        unsafe { *self.regs.get_unchecked(i as usize) }
    }
}

#[raw_tracepoint(tracepoint = "sys_exit")]
// Inlined into the program aya's macro wraps it in (a call and a return less on every syscall).
#[inline(always)]
fn sys_exit(ctx: RawTracePointContext) -> i32 {
    let ret: i64 = ctx.arg(1);
    let o = offsets();
    // The registers through the task's BTF pointer (the tracepoint's own `regs` argument is a
    // plain address, which would take a fault-tolerant copy: the dearest helper, on every
    // syscall of the machine).
    let mut task = Task::current();
    // SAFETY: helper taking the BTF task pointer it was given by the kernel.
    let regs = KPtr(unsafe { generated::bpf_task_pt_regs(task.ptr.0 as *mut _) } as *const u8);
    if regs.is_null() {
        return 0;
    }
    let nr: i64 = regs.read(cfg(&o.regs_nr));
    if nr < 0 || nr >= aet_common::SYSCALL_TABLE_SIZE as i64 {
        return 0;
    }
    let Some(&entry) = SYSCALLS.get(nr as u32) else {
        return 0;
    };
    if entry == 0 {
        return 0;
    }
    let compat = task.compat();
    let syscall = if compat { entry >> 8 } else { entry & 0xff };
    if syscall == 0 || syscall as usize >= SYSCALL_COUNT {
        return 0;
    }
    let shape = SHAPES[syscall as usize];
    if matches!(shape.io, io::CLOSE | io::CLOSE_RANGE | io::DUP | io::FCNTL)
        // SAFETY: read only.
        && unsafe { FDMASK.get(task.tgid) }.is_none_or(|m| *m == 0)
    {
        // Closing or duplicating fds of a process with no accounted fd: nothing to do (the
        // cheapest exit for the most frequent syscall of all).
        return 0;
    }
    if !task.in_scope() {
        return 0;
    }
    let args = Args::read(regs, compat);
    if shape.io != io::NONE {
        exit_io(&args, &mut task, &shape, syscall, ret);
    } else if shape.kind == EventKind::Exec as u8 {
        exit_exec(&args, task, syscall, ret);
    } else if shape.kind != 0 {
        exit_event(&args, task, &shape, syscall, ret);
    }
    0
}

/// Records a syscall that touches the file system (everything but execs and accounting).
#[inline(always)]
fn exit_event(args: &Args, mut task: Task, shape: &Shape, syscall: u16, ret: i64) {
    let Some(s) = scratch() else { return };
    let Some(kind) = EventKind::from_u16(shape.kind as u16) else {
        return;
    };
    // What is not recorded leaves before the record is built: anonymous mappings and repeated
    // mappings of one open file (each exec makes a dozen). (An fstat in disguise is left out
    // further down, once it is known to be one.)
    let mflags = args.get(3);
    if syscall == Syscall::Mmap as u16 {
        let fd = args.get(shape.fd) as i32;
        if mflags & MAP_ANONYMOUS as u64 != 0 || fd < 0 || ret < 0 {
            return;
        }
        if let Some(e) = FILEIO.get_ptr_mut(fileio_key(task.tgid, fd)) {
            // SAFETY: a map value; plain field access.
            let e = unsafe { &mut *e };
            if e.marks & fileio::MAPPED != 0 {
                return;
            }
            e.marks |= fileio::MAPPED;
        }
    }
    fill_header(header(s), &mut task, kind, syscall, ret);
    let h = header(s);
    if args.compat {
        h.flags |= flags::COMPAT;
    }
    if shape.dirfd >= 0 {
        h.dirfd = args.get(shape.dirfd) as i32;
    }
    if shape.dirfd2 >= 0 {
        h.dirfd2 = args.get(shape.dirfd2) as i32;
    }
    if shape.fd >= 0 {
        h.fd = args.get(shape.fd) as i32;
    }
    if shape.flags >= 0 {
        h.open_flags = args.get(shape.flags) as u32;
    }
    if shape.mode >= 0 {
        h.mode = args.get(shape.mode) as u32;
    }
    if syscall == Syscall::Creat as u16 {
        h.open_flags = CREAT_FLAGS;
    } else if syscall == Syscall::Openat2 as u16 {
        // SAFETY: fault-tolerant read; the kernel copied this struct in already.
        let how: OpenHow =
            unsafe { bpf_probe_read_user(args.get(2) as *const OpenHow) }.unwrap_or_default();
        h.open_flags = how.flags as u32;
        h.mode = how.mode as u32;
        h.aux = how.resolve;
    } else if syscall == Syscall::Mmap as u16 {
        h.aux = args.get(1);
        h.aux2 = args.get(2) | mflags << 32;
    } else if syscall == Syscall::IoUringEnter as u16 || syscall == Syscall::IoUringRegister as u16
    {
        h.fd = args.get(0) as i32;
    }
    if shape.path >= 0 {
        capture_user_str(s, section::PATH, args.get(shape.path));
    }
    if shape.path2 >= 0 {
        capture_user_str(s, section::PATH2, args.get(shape.path2));
    }
    // Section WALK: the object, when the kernel hands one over, else the base directory of a
    // relative path; WALK2: the base of a relative second path. The verifier checks a walk once
    // for every place it is started from, and walks are most of its work: so the start of each
    // section's walk is chosen first, then each section has one fd look-up and one walk.
    let ok = ret >= 0;
    let mut fd: i64 = NO_FD;
    let mut object = false;
    match shape.obj {
        obj::RET_FD if ok => {
            fd = ret;
            object = true;
        }
        obj::ARG_FD => {
            fd = header(s).fd as i64;
            object = true;
        }
        obj::PWD if ok => {
            let fs = task.fs();
            if !fs.is_null() {
                let o = offsets();
                let pwd = cfg(&o.fs_pwd);
                let mnt = fs.ptr(pwd + cfg(&o.path_mnt));
                let inode = fs.ptr(pwd + cfg(&o.path_dentry)).ptr(cfg(&o.dentry_inode));
                if !inode.is_null() {
                    let sb = inode.ptr(cfg(&o.inode_sb));
                    let dev = if sb.is_null() {
                        0
                    } else {
                        sb.read::<u32>(cfg(&o.sb_dev)) as u64
                    };
                    let id = (
                        dev,
                        inode.read::<u64>(cfg(&o.inode_ino)),
                        mount_id(mnt.addr()),
                        0,
                    );
                    set_identity(header(s), id);
                }
                header(s).flags |= flags::WALK_IS_OBJECT;
                fd = AT_FDCWD as i64;
                object = true;
            }
        }
        obj::STAT if ok => {
            // struct stat (x86_64): st_dev at 0, st_ino at 8. The compat layout differs.
            if !args.compat {
                let buf = args.get(shape.buf);
                // SAFETY: one fault-tolerant read of the buffer the kernel just filled.
                let [dev, ino]: [u64; 2] =
                    unsafe { bpf_probe_read_user(buf as *const [u64; 2]) }.unwrap_or([0, 0]);
                let h = header(s);
                h.dev = dev;
                h.ino = ino;
                h.flags |= flags::IDENTITY | flags::DEV_STAT;
            }
        }
        obj::STATX if ok => {
            // struct statx (uapi): stx_ino at 32, stx_dev_major/minor at 136/140,
            // stx_mnt_id at 144.
            let buf = args.get(shape.buf);
            // SAFETY: fault-tolerant reads of the buffer the kernel just filled.
            let ino: u64 = unsafe { bpf_probe_read_user((buf + 32) as *const u64) }.unwrap_or(0);
            let [dev, mnt]: [u64; 2] =
                unsafe { bpf_probe_read_user((buf + 136) as *const [u64; 2]) }.unwrap_or([0, 0]);
            let h = header(s);
            h.ino = ino;
            h.dev = dev;
            h.mnt_id = mnt as u32;
            h.flags |= flags::IDENTITY | flags::DEV_STATX;
        }
        _ => {}
    }
    if !object && shape.path >= 0 {
        let dirfd = header(s).dirfd;
        let first = section_first_byte(s, section::PATH);
        if shape.bits & shape::PATH_VERBATIM == 0 && first != b'/' {
            fd = dirfd as i64;
            // An empty path names the dirfd itself.
            object = first == 0 && dirfd != AT_FDCWD;
        }
    }
    let mut st = core::mem::MaybeUninit::<WalkState>::uninit();
    if fd != NO_FD {
        let file = if fd == AT_FDCWD as i64 {
            FileRef::None
        } else {
            fd_file(&task, fd)
        };
        if object && let Some(id) = identity(file) {
            let h = header(s);
            if h.flags & (flags::DEV_STAT | flags::DEV_STATX) == 0 {
                set_identity(h, id);
                h.flags |= flags::WALK_IS_OBJECT;
            } else if stat_names(h, id) {
                // A stat of "" with AT_EMPTY_PATH that reported the fd's own file: an fstat
                // (glibc's fstat is this call), whose open was recorded already.
                return;
            }
            // Else the path reads "" now, but the call reported another file: a thread
            // rewrote the path after the kernel read it. The row keeps what the call reported
            // (the buffer's identity) and no object.
        }
        if walk_start(st.as_mut_ptr(), &task, fd, file) {
            walk_from(s, &task, section::WALK, st.as_mut_ptr());
        }
    }
    if shape.path2 >= 0
        && shape.bits & shape::PATH2_VERBATIM == 0
        && section_first_byte(s, section::PATH2) != b'/'
    {
        let dirfd2 = header(s).dirfd2 as i64;
        let file = if dirfd2 == AT_FDCWD as i64 {
            FileRef::None
        } else {
            fd_file(&task, dirfd2)
        };
        if walk_start(st.as_mut_ptr(), &task, dirfd2, file) {
            walk_from(s, &task, section::WALK2, st.as_mut_ptr());
        }
    }
    send(s);
}

// ---------------------------------------------------------------------------------------------
// Byte accounting per open fd

#[inline(always)]
fn fileio_key(tgid: u32, fd: i32) -> u64 {
    (tgid as u64) << 32 | fd as u32 as u64
}

/// The bit of `fd` in `FDMASK`.
#[inline(always)]
fn fd_bit(fd: i32) -> u64 {
    if (0..63).contains(&fd) {
        1u64 << fd
    } else {
        1u64 << 63
    }
}

/// Notes that `fd` of `tgid` has (`set`) or no longer has an accounting entry.
#[inline(always)]
fn fdmask_update(tgid: u32, fd: i32, set: bool) {
    let bit = fd_bit(fd);
    match FDMASK.get_ptr_mut(tgid) {
        // SAFETY: a map value of this process (its threads may race; a lost bit only costs a
        // late emission at the end of the run, never a lost count).
        Some(p) => unsafe {
            if set {
                *p |= bit;
            } else if bit != 1u64 << 63 {
                *p &= !bit;
            }
        },
        None if set && FDMASK.insert(tgid, bit, 0).is_err() => count(counter::FILEIO_FULL),
        None => {}
    }
}

/// The fd's accounting entry, created on first use for an fd opened before aet saw it (inherited,
/// duplicated before monitoring, or opened through io_uring).
#[inline(always)]
fn fileio_entry(task: &Task, fd: i32) -> Option<*mut FileIo> {
    let key = fileio_key(task.tgid, fd);
    if let Some(p) = FILEIO.get_ptr_mut(key) {
        return Some(p);
    }
    let (dev, ino, mnt_id, class) = identity(fd_file(task, fd as i64))?;
    let v = FileIo {
        dev,
        ino,
        mnt_id,
        class,
        ..FileIo::default()
    };
    if FILEIO.insert(key, v, 0).is_err() {
        count(counter::FILEIO_FULL);
        return None;
    }
    fdmask_update(task.tgid, fd, true);
    FILEIO.get_ptr_mut(key)
}

#[inline(always)]
fn fileio_add(task: &Task, fd: i32, bytes: i64, write: bool) {
    if bytes <= 0 {
        return;
    }
    let Some(p) = fileio_entry(task, fd) else {
        return;
    };
    // SAFETY: a map value, updated atomically (threads share fds).
    unsafe {
        if (*p).class != fileio::REGULAR {
            return;
        }
        let field: *mut u64 = if write {
            &mut (*p).bytes_written
        } else {
            &mut (*p).bytes_read
        };
        atomic_add(field, bytes as u64);
    }
}

/// `*p += v`, atomically (the BPF `lock` add; core's atomics lack fetch_add on this target).
#[inline(always)]
unsafe fn atomic_add(p: *mut u64, v: u64) {
    // SAFETY: p is a valid, 8-aligned map value field.
    unsafe {
        core::arch::asm!("lock *(u64 *)({p} + 0) += {v}", p = in(reg) p, v = in(reg) v);
    }
}

/// Emits an io record for a regular file's accounting entry.
#[inline(always)]
fn emit_io(task: &mut Task, fd: i32, e: &FileIo, at_exit: bool) {
    // Files opened and closed without a byte moved are in their open rows already.
    if e.class != fileio::REGULAR || e.bytes_read == 0 && e.bytes_written == 0 {
        return;
    }
    let Some(s) = scratch() else { return };
    fill_header(header(s), task, EventKind::Io, Syscall::None as u16, 0);
    let h = header(s);
    h.fd = fd;
    h.aux = e.bytes_read;
    h.aux2 = e.bytes_written;
    h.dev = e.dev;
    h.ino = e.ino;
    h.mnt_id = e.mnt_id;
    h.flags |= flags::IDENTITY;
    if at_exit {
        h.flags |= flags::IO_AT_EXIT;
    }
    send(s);
}

/// Emits and forgets the accounting of `fd`.
#[inline(always)]
fn fileio_close(task: &mut Task, fd: i32, at_exit: bool) {
    let key = fileio_key(task.tgid, fd);
    // SAFETY: copied out before the entry is removed.
    if let Some(e) = unsafe { FILEIO.get(key) }.copied() {
        let _ = FILEIO.remove(key);
        fdmask_update(task.tgid, fd, false);
        emit_io(task, fd, &e, at_exit);
    }
}

/// The `for_each` callback that emits and forgets a process's entries (at exit, exec or
/// close_range).
#[repr(C)]
struct Flush {
    tgid: u32,
    first: u32,
    last: u32,
    at_exit: u32,
}

extern "C" fn flush_step(
    _map: *mut c_void,
    key: *mut u64,
    value: *mut FileIo,
    ctx: *mut c_void,
) -> i64 {
    // SAFETY: for_each hands valid key, value and context pointers.
    let (k, f) = unsafe { (*key, &*(ctx as *const Flush)) };
    let fd = k as u32;
    if (k >> 32) as u32 != f.tgid || fd < f.first || fd > f.last {
        return 0;
    }
    // SAFETY: as above.
    let e = unsafe { *value };
    let _ = FILEIO.remove(k);
    let mut task = Task::current();
    emit_io(&mut task, fd as i32, &e, f.at_exit != 0);
    0
}

/// Emits and forgets the entries of fds `first..=last` of `tgid`: through the fd mask, and a
/// scan of the map only when the process had an entry for an fd above 62.
#[inline(always)]
fn fileio_flush(tgid: u32, first: u32, last: u32, at_exit: bool) {
    // SAFETY: copied out.
    let Some(mask) = (unsafe { FDMASK.get(tgid) }).copied() else {
        return;
    };
    let mut f = Flush {
        tgid,
        first,
        last,
        at_exit: at_exit as u32,
    };
    if mask & (1u64 << 63) != 0 {
        // SAFETY: map, callback and context are valid for the call.
        unsafe {
            generated::bpf_for_each_map_elem(
                &FILEIO as *const _ as *mut c_void,
                flush_step as *mut c_void,
                &mut f as *mut Flush as *mut c_void,
                0,
            )
        };
    } else if mask != 0 {
        // SAFETY: callback and context are valid for the call.
        unsafe {
            generated::bpf_loop(
                63,
                flush_fd as *mut c_void,
                &mut f as *mut Flush as *mut c_void,
                0,
            )
        };
    }
    if first == 0 && last == u32::MAX {
        let _ = FDMASK.remove(tgid);
    }
}

extern "C" fn flush_fd(i: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back the caller's context.
    let f = unsafe { &*(ctx as *const Flush) };
    if i < f.first || i > f.last {
        return 0;
    }
    // SAFETY: copied out.
    let Some(mask) = (unsafe { FDMASK.get(f.tgid) }).copied() else {
        return 1;
    };
    if mask & (1u64 << (i & 63)) == 0 {
        return 0;
    }
    let mut task = Task::current();
    fileio_close(&mut task, i as i32, f.at_exit != 0);
    0
}

/// Accounting syscalls: reads and writes add bytes, closes emit them.
#[inline(always)]
fn exit_io(args: &Args, task: &mut Task, shape: &Shape, syscall: u16, ret: i64) {
    let fd = args.get(shape.fd) as i32;
    match shape.io {
        io::READ => fileio_add(task, fd, ret, false),
        io::WRITE => fileio_add(task, fd, ret, true),
        io::SENDFILE => {
            fileio_add(task, args.get(1) as i32, ret, false);
            fileio_add(task, args.get(0) as i32, ret, true);
        }
        io::COPY => {
            fileio_add(task, args.get(0) as i32, ret, false);
            fileio_add(task, args.get(2) as i32, ret, true);
        }
        io::CLOSE if ret == 0 => fileio_close(task, fd, false),
        io::CLOSE_RANGE if ret == 0 => {
            fileio_flush(task.tgid, args.get(0) as u32, args.get(1) as u32, false);
        }
        io::DUP | io::FCNTL if ret >= 0 => {
            if shape.io == io::FCNTL {
                let cmd = args.get(1);
                if cmd != F_DUPFD && cmd != F_DUPFD_CLOEXEC {
                    return;
                }
            }
            let newfd = ret as i32;
            // dup2/dup3 onto an open fd close it first.
            fileio_close(task, newfd, false);
            let Some(p) = fileio_entry(task, fd) else {
                return;
            };
            // SAFETY: a map value, copied.
            let mut v = unsafe { *p };
            v.bytes_read = 0;
            v.bytes_written = 0;
            v.marks = 0;
            if FILEIO.insert(fileio_key(task.tgid, newfd), v, 0).is_err() {
                count(counter::FILEIO_FULL);
            } else {
                fdmask_update(task.tgid, newfd, true);
            }
        }
        io::LIST if ret >= 0 => {
            let Some(p) = fileio_entry(task, fd) else {
                return;
            };
            // SAFETY: a map value.
            let e = unsafe { &mut *p };
            if e.class != fileio::DIRECTORY || e.marks & fileio::LISTED != 0 {
                return;
            }
            e.marks |= fileio::LISTED;
            let Some(s) = scratch() else { return };
            fill_header(header(s), task, EventKind::List, syscall, ret);
            header(s).fd = fd;
            record_file(s, task, fd_file(task, fd as i64));
            send(s);
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Execs

#[inline(always)]
fn stash_exec(syscall: Syscall, dirfd: i32, path: u64, argv: u64, flags: u64) {
    let mut task = Task::current();
    if !task.in_scope() {
        return;
    }
    let v = Inflight {
        syscall: syscall as u16,
        _pad: 0,
        dirfd,
        path,
        aux_ptr: argv,
        flags,
        mode: 0,
    };
    if INFLIGHT.insert(task.tid, v, 0).is_err() {
        count(counter::INFLIGHT_FULL);
    }
}

#[tracepoint]
fn sys_enter_execve(ctx: TracePointContext) -> u32 {
    stash_exec(
        Syscall::Execve,
        AT_FDCWD,
        sys_arg(&ctx, 0),
        sys_arg(&ctx, 1),
        0,
    );
    0
}

#[tracepoint]
fn sys_enter_execveat(ctx: TracePointContext) -> u32 {
    let dirfd = sys_arg(&ctx, 0) as i32;
    stash_exec(
        Syscall::Execveat,
        dirfd,
        sys_arg(&ctx, 1),
        sys_arg(&ctx, 2),
        sys_arg(&ctx, 4),
    );
    0
}

/// State of the `bpf_loop` that copies a failed exec's argument vector from user memory.
#[repr(C)]
struct ArgvWalk {
    argv: u64,
    base: u32,
    off: u32,
    flags: u32,
    /// Size of a pointer in the caller's ABI (8, or 4 for compat).
    ptr_size: u32,
}

extern "C" fn argv_step(i: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back the pointer to the caller's stack state.
    let st = unsafe { &mut *(ctx as *mut ArgvWalk) };
    let slot = st.argv + st.ptr_size as u64 * i as u64;
    // SAFETY: fault-tolerant reads of argv[i].
    let p = if st.ptr_size == 4 {
        unsafe { bpf_probe_read_user(slot as *const u32) }.map(u64::from)
    } else {
        unsafe { bpf_probe_read_user(slot as *const u64) }
    };
    let Ok(p) = p else {
        st.flags |= flags::ARGV_UNREADABLE;
        return 1;
    };
    if p == 0 {
        return 1;
    }
    let Some(s) = scratch() else { return 1 };
    let base = st.base as usize;
    let off = st.off as usize;
    if base > DATA_LIMIT || off >= ARGV_CAP {
        st.flags |= flags::ARGV_TRUNCATED;
        return 1;
    }
    let room = ARGV_CAP - off;
    let dst = s.buf[base + off..].as_mut_ptr();
    // SAFETY: dst has at least `room` bytes: base <= DATA_LIMIT, off + room <= ARGV_CAP, and the
    // data area is DATA_LIMIT + 2 * ARGV_CAP long.
    let n = unsafe {
        generated::bpf_probe_read_user_str(dst as *mut c_void, room as u32, p as *const c_void)
    };
    if n <= 0 {
        st.flags |= flags::ARGV_UNREADABLE;
        return 1;
    }
    st.off += n as u32;
    if n as usize >= room {
        st.flags |= flags::ARGV_TRUNCATED;
        return 1;
    }
    0
}

/// The exit of an exec. A successful one was recorded by `sched_process_exec`; a failed one is
/// recorded here, with its file name and arguments read from the caller's memory.
#[inline(always)]
fn exit_exec(args: &Args, mut task: Task, syscall: u16, ret: i64) {
    let _ = INFLIGHT.remove(task.tid);
    if ret == 0 {
        return;
    }
    let Some(s) = scratch() else { return };
    fill_header(header(s), &mut task, EventKind::Exec, syscall, ret);
    fill_ppid(header(s), &task);
    fill_comm(header(s));
    let (path, argv) = if syscall == Syscall::Execveat as u16 {
        let h = header(s);
        h.dirfd = args.get(0) as i32;
        h.open_flags = args.get(4) as u32;
        (args.get(1), args.get(2))
    } else {
        (args.get(0), args.get(1))
    };
    if args.compat {
        header(s).flags |= flags::COMPAT;
    }
    capture_user_str(s, section::PATH, path);
    let base = section_start(header(s));
    let mut st = ArgvWalk {
        argv,
        base: base as u32,
        off: 0,
        flags: 0,
        ptr_size: if args.compat { 4 } else { 8 },
    };
    if argv != 0 {
        // SAFETY: callback and state are valid for the duration of the call.
        unsafe {
            generated::bpf_loop(
                ARGV_CAP as u32,
                argv_step as *mut c_void,
                &mut st as *mut ArgvWalk as *mut c_void,
                0,
            )
        };
    }
    let h = header(s);
    h.len[section::ARGV] = st.off as u16;
    h.flags |= st.flags;
    let dirfd = h.dirfd as i64;
    if section_first_byte(s, section::PATH) != b'/' {
        let file = if dirfd == AT_FDCWD as i64 {
            FileRef::None
        } else {
            fd_file(&task, dirfd)
        };
        let mut st = core::mem::MaybeUninit::<WalkState>::uninit();
        if walk_start(st.as_mut_ptr(), &task, dirfd, file) {
            walk_from(s, &task, section::WALK, st.as_mut_ptr());
        }
    }
    send(s);
}

/// A successful exec: the new image is in place. The file name is the kernel's copy
/// (`bprm->filename`); the arguments are read from the new process's stack, where the kernel has
/// just written them; the object is the file now running (`mm->exe_file`: for a `#!` script, its
/// interpreter).
#[raw_tracepoint(tracepoint = "sched_process_exec")]
fn sched_process_exec(ctx: RawTracePointContext) -> i32 {
    let mut task = Task::current();
    let old_pid: u32 = ctx.arg::<u64>(1) as u32;
    let bprm: u64 = ctx.arg(2);
    let mut previous = task;
    previous.tid = old_pid;
    if !task.in_scope() && !previous.in_scope() {
        return 0;
    }
    // The exec closed the process's close-on-exec fds without close(): emit their accounting.
    fileio_flush(task.tgid, 0, u32::MAX, true);
    // SAFETY: copied out before the entry is removed.
    let inflight = unsafe { INFLIGHT.get(old_pid) }.copied();
    let Some(s) = scratch() else { return 0 };
    match inflight {
        Some(inf) => {
            let _ = INFLIGHT.remove(old_pid);
            fill_header(header(s), &mut task, EventKind::Exec, inf.syscall, 0);
            let h = header(s);
            h.dirfd = inf.dirfd;
            h.open_flags = inf.flags as u32;
        }
        None => {
            count(counter::UNPAIRED);
            fill_header(
                header(s),
                &mut task,
                EventKind::Exec,
                Syscall::Execve as u16,
                0,
            );
            header(s).flags |= flags::UNPAIRED;
        }
    }
    fill_ppid(header(s), &task);
    fill_comm(header(s));
    if task.compat() {
        header(s).flags |= flags::COMPAT;
    }
    let filename: u64 =
        rdonly_cast::<{ kfunc::TYPE_BPRM }>(bprm).read(cfg(&offsets().bprm_filename));
    capture_kernel_str(s, section::PATH, filename);

    let mm = task.ptr.ptr(cfg(&offsets().task_mm));
    let (start, end) = if mm.is_null() {
        (0, 0)
    } else {
        (
            mm.read::<u64>(cfg(&offsets().mm_arg_start)),
            mm.read::<u64>(cfg(&offsets().mm_arg_end)),
        )
    };
    let base = section_start(header(s));
    if mm.is_null() || end <= start || base > DATA_LIMIT {
        header(s).flags |= flags::ARGV_UNREADABLE;
    } else {
        let mut n = (end - start) as usize;
        if n > ARGV_CAP {
            n = ARGV_CAP;
            header(s).flags |= flags::ARGV_TRUNCATED;
        }
        let dst = s.buf[base..].as_mut_ptr();
        // SAFETY: dst has ARGV_CAP bytes of room and n <= ARGV_CAP.
        let r = unsafe {
            generated::bpf_probe_read_user(dst as *mut c_void, n as u32, start as *const c_void)
        };
        if r < 0 {
            header(s).flags |= flags::ARGV_UNREADABLE;
        } else {
            header(s).len[section::ARGV] = n as u16;
        }
    }
    if !mm.is_null() {
        let exe = mm.ptr(cfg(&offsets().mm_exe_file));
        if !exe.is_null() {
            record_file(s, &task, FileRef::Btf(exe));
        }
    }
    send(s);
    0
}

// ---------------------------------------------------------------------------------------------
// The process tree

/// A new task. If its creator is in scope it joins the tracked set; a new process (not a
/// thread) is recorded.
#[raw_tracepoint(tracepoint = "sched_process_fork")]
fn sched_process_fork(ctx: RawTracePointContext) -> i32 {
    let mut task = Task::current();
    if !task.in_scope() {
        return 0;
    }
    let child = rdonly_cast::<{ kfunc::TYPE_TASK }>(ctx.arg(1));
    if child.is_null() {
        return 0;
    }
    let child_tid = child.read::<i32>(cfg(&offsets().task_pid)) as u32;
    let child_tgid = child.read::<i32>(cfg(&offsets().task_tgid)) as u32;
    if TRACKED.insert(child_tid, 1, 0).is_err() {
        count(counter::TRACKED_FULL);
    }
    if child_tid != child_tgid {
        return 0;
    }
    let Some(s) = scratch() else { return 0 };
    fill_header(
        header(s),
        &mut task,
        EventKind::Fork,
        Syscall::None as u16,
        0,
    );
    fill_ppid(header(s), &task);
    fill_comm(header(s));
    header(s).aux = child_tgid as u64;
    send(s);
    0
}

/// A task ends. It leaves the tracked set; the end of a process (its last thread) is recorded
/// with its wait status, after the byte accounting of the files it still had open.
#[raw_tracepoint(tracepoint = "sched_process_exit")]
fn sched_process_exit(ctx: RawTracePointContext) -> i32 {
    let mut task = Task::current();
    let (tid, tgid) = (task.tid, task.tgid);
    if !task.in_scope() {
        return 0;
    }
    let _ = TRACKED.remove(tid);
    let _ = INFLIGHT.remove(tid);
    let group_dead = if cfg(&CONFIG.exit_has_group_dead) != 0 {
        ctx.arg::<u64>(1) & 0xff != 0
    } else {
        tid == tgid
    };
    if !group_dead {
        return 0;
    }
    fileio_flush(tgid, 0, u32::MAX, true);
    let Some(s) = scratch() else { return 0 };
    let code: i32 = task.ptr.read(cfg(&offsets().task_exit_code));
    fill_header(
        header(s),
        &mut task,
        EventKind::Exit,
        Syscall::None as u16,
        code as i64,
    );
    fill_comm(header(s));
    send(s);
    0
}

// ---------------------------------------------------------------------------------------------
// io_uring

/// A request submitted to io_uring. Its open and statx paths are recorded (the kernel's copy);
/// their results and any reads are not, so userspace marks a run that used io_uring incomplete.
#[raw_tracepoint(tracepoint = "io_uring_submit_req")]
fn io_uring_submit_req(ctx: RawTracePointContext) -> i32 {
    let mut task = Task::current();
    if !task.in_scope() {
        return 0;
    }
    count(counter::IO_URING_SUBMITTED);
    let req: u64 = ctx.arg(0);
    let o = offsets();
    let opcode: u8 = kread(req, cfg(&o.req_opcode));
    let Some(s) = scratch() else { return 0 };
    fill_header(
        header(s),
        &mut task,
        EventKind::IoUring,
        Syscall::None as u16,
        0,
    );
    header(s).aux = opcode as u64;
    let cmd = req + cfg(&o.req_cmd) as u64;
    let filename: u64 = match opcode {
        IORING_OP_OPENAT | IORING_OP_OPENAT2 => kread(cmd, cfg(&o.io_open_filename)),
        IORING_OP_STATX => kread(cmd, cfg(&o.io_statx_filename)),
        _ => 0,
    };
    if filename != 0 {
        let name: u64 = kread(filename, cfg(&o.filename_name));
        capture_kernel_str(s, section::PATH, name);
    }
    send(s);
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
