//! aet's eBPF programs: follow a run's process tree and record every open and exec.
//!
//! Programs attach to the raw syscall-exit tracepoint (`raw_syscalls:sys_exit`, one program for
//! every recorded syscall, native or compat), to `syscalls:sys_enter_execve(at)`, and to the
//! scheduler's raw tracepoints (`sched_process_fork` / `exec` / `exit`). fentry, LSM and kprobes
//! are not used: they are not available on every kernel aet must run on.
//!
//! Rules every program here keeps:
//! - scope first: a task outside the run costs a helper call and one map lookup, and produces
//!   nothing;
//! - a syscall is recorded at its exit, from the saved registers, where the kernel has already
//!   faulted in the user strings it read (a string in a page the process never touched reads as
//!   nothing at entry);
//! - records are variable-length: header, then exactly the bytes captured;
//! - nothing is dropped silently: every failure to deliver or to store increments a per-CPU
//!   counter in `COUNTERS` that userspace reads and writes into the ledger;
//! - no kernel struct offset is hard-coded: they come from the running kernel's BTF via `CONFIG`.
#![no_std]
#![no_main]

use core::{ffi::c_void, ptr::read_volatile};

use aet_common::{
    ARGV_CAP, Config, DATA_CAP, EventHeader, EventKind, HEADER_SIZE, Inflight, Offsets, PATH_CAP,
    Syscall, counter, flags, scope,
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
static CONFIG: Config = Config {
    scope_mode: 0,
    target_uid: 0,
    target_pid: 0,
    exit_has_group_dead: 0,
    target_cgroup: 0,
    compat_mask: 0,
    offsets: Offsets {
        task_pid: 0,
        task_tgid: 0,
        task_real_parent: 0,
        task_mm: 0,
        task_exit_code: 0,
        task_ti_status: 0,
        task_cred: 0,
        cred_uid: 0,
        cred_gid: 0,
        task_cgroups: 0,
        css_set_dfl_cgrp: 0,
        cgroup_kn: 0,
        kernfs_node_id: 0,
        mm_arg_start: 0,
        mm_arg_end: 0,
        bprm_filename: 0,
        regs_nr: 0,
        regs_args: [0; 6],
        regs_args_compat: [0; 6],
        _pad: 0,
    },
};

/// Records for userspace. Its size is set by userspace at load time.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Thread ids that descend from an in-scope task (fed by `sched_process_fork`, emptied by
/// `sched_process_exit`), and for `--pid` the target's threads and descendants found at attach.
#[map]
static TRACKED: HashMap<u32, u8> = HashMap::with_max_entries(1 << 16, 0);

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

const AT_FDCWD: i32 = -100;
const BPF_RB_NO_WAKEUP: u64 = 1;
const O_CREAT_WRONLY_TRUNC: u64 = 0o100 | 0o1 | 0o1000;

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

/// Reads a kernel value at `base + off`.
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

/// Is the task `tid` (of process `tgid`, in cgroup `cgroup`, with real uid `uid`) part of the
/// monitored run? `uid` and `cgroup` are only read in the modes that need them.
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
            let cgrp = self
                .ptr
                .ptr(cfg(&o.task_cgroups))
                .ptr(cfg(&o.css_set_dfl_cgrp))
                .ptr(cfg(&o.cgroup_kn));
            self.cgroup = if cgrp.is_null() {
                0
            } else {
                cgrp.read::<u64>(cfg(&o.kernfs_node_id))
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

/// Fills the header's common part for the current task. `ppid` and `comm` are left empty: they
/// change only at fork and exec, whose records carry them ([`fill_ppid`], [`fill_comm`]), and
/// userspace keeps them per process. Every helper call counts on the hot path.
#[inline(always)]
fn fill_header(h: &mut EventHeader, task: &mut Task, kind: EventKind, syscall: u16, ret: i64) {
    let (uid, gid) = task.uid_gid();
    // SAFETY: helper without preconditions.
    let ts = unsafe { generated::bpf_ktime_get_boot_ns() };
    // Plain field stores: a whole-struct write would become a byte-by-byte memset loop in BPF.
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
    zero(&mut h.aux);
    zero(&mut h.ppid);
    zero(&mut h.open_flags);
    zero(&mut h.mode);
    zero(&mut h.path_len);
    zero(&mut h.argv_len);
    let comm = h.comm.as_mut_ptr() as *mut u64;
    // SAFETY: comm is 16 bytes, 8-aligned inside the header.
    unsafe {
        zero(&mut *comm);
        zero(&mut *comm.add(1));
    }
}

/// Stores zero without letting the compiler merge neighbouring stores into a memset call.
#[inline(always)]
fn zero<T: Default>(p: &mut T) {
    // SAFETY: p is a valid, aligned reference.
    unsafe { core::ptr::write_volatile(p, T::default()) };
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

/// Sends the record in `s` (header plus `path_len + argv_len` bytes).
#[inline(always)]
fn send(s: &mut Scratch) {
    let h = header(s);
    let len = HEADER_SIZE + h.path_len as usize + h.argv_len as usize;
    if len > SCRATCH_SIZE {
        return;
    }
    match EVENTS.output::<[u8]>(&s.buf[..len], BPF_RB_NO_WAKEUP) {
        Ok(()) => count(counter::SENT),
        Err(_) => count(counter::RINGBUF_FULL),
    }
}

/// Copies a NUL-terminated user string to the path slot; sets `path_len` and flags.
#[inline(always)]
fn capture_user_path(s: &mut Scratch, src: u64) {
    let dst = s.buf[HEADER_SIZE..].as_mut_ptr();
    // SAFETY: dst has PATH_CAP bytes of room; the helper is fault-tolerant.
    let n = unsafe {
        generated::bpf_probe_read_user_str(
            dst as *mut c_void,
            PATH_CAP as u32,
            src as *const c_void,
        )
    };
    finish_path(s, n, src, true);
}

/// Copies a NUL-terminated kernel string to the path slot; sets `path_len` and flags.
#[inline(always)]
fn capture_kernel_path(s: &mut Scratch, src: u64) {
    let dst = s.buf[HEADER_SIZE..].as_mut_ptr();
    // SAFETY: as above, for kernel memory.
    let n = unsafe {
        generated::bpf_probe_read_kernel_str(
            dst as *mut c_void,
            PATH_CAP as u32,
            src as *const c_void,
        )
    };
    finish_path(s, n, src, false);
}

#[inline(always)]
fn finish_path(s: &mut Scratch, n: i64, src: u64, user: bool) {
    let h = header(s);
    if n <= 0 || src == 0 {
        h.path_len = 0;
        h.flags |= flags::PATH_UNREADABLE;
        count(counter::PATH_UNREADABLE);
        return;
    }
    let n = n as usize;
    if n >= PATH_CAP {
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
            h.flags |= flags::PATH_TRUNCATED;
        }
        h.path_len = (PATH_CAP - 1) as u32;
    } else {
        h.path_len = (n - 1) as u32;
    }
}

// ---------------------------------------------------------------------------------------------
// Syscall exits: one raw tracepoint for every syscall, dispatched by number.
//
// The arguments are read from the task's saved registers at exit: the syscall has not changed
// them, and any user string it read is faulted in by now. No entry program is needed (and no
// per-thread map traffic) for the syscalls recorded here.

/// Dispatch table: syscall number -> `syscall_entry(native, compat)`. Filled by userspace.
#[map]
static SYSCALLS: Array<u16> = Array::with_max_entries(aet_common::SYSCALL_TABLE_SIZE, 0);

/// `struct open_how` (uapi, stable).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// The saved registers of a syscall, read once at its exit.
struct Args {
    /// `task_pt_regs(current)`, a BTF pointer: each argument is one guarded load.
    regs: KPtr,
    compat: bool,
}

impl Args {
    #[inline(always)]
    fn get(&self, n: usize) -> u64 {
        let o = offsets();
        let off = if self.compat {
            cfg(&o.regs_args_compat[n])
        } else {
            cfg(&o.regs_args[n])
        };
        let v: u64 = self.regs.read(off);
        // Compat arguments are 32-bit registers: pointers and ints live in the low half.
        if self.compat { v & 0xffff_ffff } else { v }
    }
}

#[raw_tracepoint(tracepoint = "sys_exit")]
fn sys_exit(ctx: RawTracePointContext) -> i32 {
    let regs: u64 = ctx.arg(0);
    let ret: i64 = ctx.arg(1);
    let o = offsets();
    let nr: i64 = kread(regs, cfg(&o.regs_nr));
    if nr < 0 || nr >= aet_common::SYSCALL_TABLE_SIZE as i64 {
        return 0;
    }
    let Some(&entry) = SYSCALLS.get(nr as u32) else {
        return 0;
    };
    if entry == 0 {
        return 0;
    }
    let mut task = Task::current();
    if !task.in_scope() {
        return 0;
    }
    let compat = task.compat();
    let syscall = if compat { entry >> 8 } else { entry & 0xff };
    if syscall == 0 {
        return 0;
    }
    // One read for the number and every argument.
    // SAFETY: helper taking the BTF task pointer it was given by the kernel.
    let regs = KPtr(unsafe { generated::bpf_task_pt_regs(task.ptr.0 as *mut _) } as *const u8);
    let args = Args { regs, compat };
    if syscall == Syscall::Execve as u16 || syscall == Syscall::Execveat as u16 {
        exit_exec(&args, task, syscall, ret);
    } else {
        exit_open(&args, task, syscall, ret);
    }
    0
}

#[inline(always)]
fn exit_open(args: &Args, mut task: Task, syscall: u16, ret: i64) {
    let Some(s) = scratch() else { return };
    fill_header(header(s), &mut task, EventKind::Open, syscall, ret);
    let h = header(s);
    if args.compat {
        h.flags |= flags::COMPAT;
    }
    let path = if syscall == Syscall::Open as u16 {
        h.open_flags = args.get(1) as u32;
        h.mode = args.get(2) as u32;
        args.get(0)
    } else if syscall == Syscall::Creat as u16 {
        h.open_flags = O_CREAT_WRONLY_TRUNC as u32;
        h.mode = args.get(1) as u32;
        args.get(0)
    } else if syscall == Syscall::Openat as u16 {
        h.dirfd = args.get(0) as i32;
        h.open_flags = args.get(2) as u32;
        h.mode = args.get(3) as u32;
        args.get(1)
    } else {
        h.dirfd = args.get(0) as i32;
        // SAFETY: fault-tolerant read; the kernel copied this struct in already.
        let how: OpenHow =
            unsafe { bpf_probe_read_user(args.get(2) as *const OpenHow) }.unwrap_or_default();
        h.open_flags = how.flags as u32;
        h.mode = how.mode as u32;
        h.aux = how.resolve;
        args.get(1)
    };
    capture_user_path(s, path);
    send(s);
}

// ---------------------------------------------------------------------------------------------
// Execs

/// Exec entries, for `sched_process_exec` to know which syscall (and dirfd, flags) led to it.
#[map]
static INFLIGHT: HashMap<u32, Inflight> = HashMap::with_max_entries(1 << 14, 0);

#[inline(always)]
fn stash_exec(syscall: Syscall, dirfd: i32, path: u64, argv: u64, flags: u64) {
    let mut task = Task::current();
    if !task.in_scope() {
        return;
    }
    let tid = task.tid;
    let v = Inflight {
        syscall: syscall as u16,
        _pad: 0,
        dirfd,
        path,
        aux_ptr: argv,
        flags,
        mode: 0,
    };
    if INFLIGHT.insert(tid, v, 0).is_err() {
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
    if base > HEADER_SIZE + PATH_CAP || off >= ARGV_CAP {
        st.flags |= flags::ARGV_TRUNCATED;
        return 1;
    }
    let room = ARGV_CAP - off;
    let dst = s.buf[base + off..].as_mut_ptr();
    // SAFETY: dst has at least `room` bytes: base <= HEADER+PATH_CAP, off + room <= ARGV_CAP, and
    // the buffer is HEADER + PATH_CAP + 2 * ARGV_CAP long.
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
    capture_user_path(s, path);
    let base = HEADER_SIZE + header(s).path_len as usize;
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
    h.argv_len = st.off;
    h.flags |= st.flags;
    send(s);
}

/// A successful exec: the new image is in place. The file name is the kernel's copy
/// (`bprm->filename`); the arguments are read from the new process's stack, where the kernel has
/// just written them.
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
    let filename: u64 = kread(bprm, cfg(&offsets().bprm_filename));
    capture_kernel_path(s, filename);

    let mm = task.ptr.ptr(cfg(&offsets().task_mm));
    let (start, end) = if mm.is_null() {
        (0, 0)
    } else {
        (
            mm.read::<u64>(cfg(&offsets().mm_arg_start)),
            mm.read::<u64>(cfg(&offsets().mm_arg_end)),
        )
    };
    let path_len = header(s).path_len as usize;
    if mm.is_null() || end <= start || path_len > PATH_CAP {
        header(s).flags |= flags::ARGV_UNREADABLE;
    } else {
        let mut n = (end - start) as usize;
        if n > ARGV_CAP {
            n = ARGV_CAP;
            header(s).flags |= flags::ARGV_TRUNCATED;
        }
        let dst = s.buf[HEADER_SIZE + path_len..].as_mut_ptr();
        // SAFETY: dst has ARGV_CAP bytes of room and n <= ARGV_CAP.
        let r = unsafe {
            generated::bpf_probe_read_user(dst as *mut c_void, n as u32, start as *const c_void)
        };
        if r < 0 {
            header(s).flags |= flags::ARGV_UNREADABLE;
        } else {
            header(s).argv_len = n as u32;
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
    let child: u64 = ctx.arg(1);
    let child_tid: u32 = kread(child, cfg(&offsets().task_pid));
    let child_tgid: u32 = kread(child, cfg(&offsets().task_tgid));
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

/// A task ends. It leaves the tracked set; the end of a process (its last thread) is recorded with
/// its wait status.
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

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
