//! Syscall exits: one tracepoint program for every syscall (`sys_exit`, on
//! `raw_syscalls:sys_exit`), which keeps only what is in a run and hands it on, by a tail call through [`EXITS`], to the program of the syscall's
//! family (`exit_io`, `exit_exec`, `exit_recv`, `exit_net`, `exit_event`; a socket's payload is
//! one more, `exit_payload`). Each is verified apart, so the verifier's work is the sum of the
//! families', not their product with everything before them. The arguments are read from the
//! task's saved registers at exit: the syscall has not changed them, and any user string it read
//! is faulted in by now.
//!
//! A classic (perf) tracepoint program rather than a raw tracepoint: since 7.0 the kernel runs a
//! syscall tracepoint's raw-tracepoint programs preemptibly, and one preempted mid-run makes
//! the kernel skip that program for every other task's syscall on its CPU until it resumes. The
//! perf side of the same tracepoint still runs its programs with preemption off, on every
//! kernel: nothing can take the CPU mid-record.

use aet_common::{
    EventKind, SHAPES, SYSCALL_COUNT, Shape, Syscall, counter, exits, fd_origin, fileio, flags, io,
    obj, section, shape,
    uapi::{AT_FDCWD, CREAT_FLAGS, MAP_ANONYMOUS, PROT_EXEC},
    witness,
};
use aya_ebpf::{
    EbpfContext as _,
    helpers::bpf_probe_read_user,
    macros::{map, tracepoint},
    maps::{PerCpuArray, ProgramArray},
    programs::TracePointContext,
};

use super::{
    args::Args,
    exec::record_exec,
    fileio::{fileio_key, record_io},
    handover::exit_received,
    net::record_net,
    payload,
};
use crate::{
    kernel::KPtr,
    maps::{FDMASK, FILEIO, SYSCALLS, cfg, count, mark, offsets},
    record::{
        USER, capture_str, claim, fill_header, header, scratch, section_first_byte, send,
        stat_names,
    },
    task::{SavedTask, Task, identity, inode_identity, set_identity},
    walk::{NO_FD, dirfd_file, walk_into},
};

/// The families' programs, by [`aet_common::exits`] index (filled by userspace after load).
#[map]
pub(crate) static EXITS: ProgramArray = ProgramArray::with_max_entries(aet_common::exits::COUNT, 0);

/// What `sys_exit` hands the program it tail-calls (a tail call keeps only the context): this
/// CPU's entry 0. Programs run with preemption off and a tail call does not return, so nothing
/// else writes it between the two.
#[repr(C)]
pub(crate) struct ExitState {
    pub(crate) args: Args,
    pub(crate) ret: i64,
    pub(crate) task: SavedTask,
    pub(crate) syscall: u16,
}

#[map]
pub(crate) static EXIT_STATE: PerCpuArray<ExitState> = PerCpuArray::with_max_entries(1, 0);

/// `raw_syscalls:sys_exit`'s record: 8 bytes of common fields, the syscall's number, then its
/// return value, as 8-byte slots (the tracepoint's fixed format, not a kernel struct).
const SYS_EXIT_RET: usize = 2;

/// The record's slot holding the syscall's number.
#[cfg(feature = "legacy")]
const SYS_EXIT_ID: usize = 1;

/// `struct open_how` (uapi, stable).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct OpenHow {
    pub(crate) flags: u64,
    pub(crate) mode: u64,
    pub(crate) resolve: u64,
}

#[tracepoint(category = "raw_syscalls", name = "sys_exit")]
// Inlined into the program aya's macro wraps it in (a call and a return less on every syscall).
#[inline(always)]
pub(crate) fn sys_exit(ctx: TracePointContext) -> u32 {
    mark(witness::SYS_EXIT);
    // SAFETY: direct read of the tracepoint's record, inside its fixed size (see SYS_EXIT_RET).
    let ret: i64 = unsafe { *(ctx.as_ptr() as *const i64).add(SYS_EXIT_RET) };
    let o = offsets();
    // The registers through the task's BTF pointer (the tracepoint's own `regs` argument is a
    // plain address, which would take a fault-tolerant copy: the dearest helper, on every
    // syscall of the machine).
    let mut task = Task::current();
    let regs = task.regs();
    if regs.is_null() {
        return 0;
    }
    // The low 32 bits: the whole member on x86_64 (`orig_ax`, a long holding a number below
    // 2^31 or -1), all of it on aarch64 (`syscallno`, an int).
    let nr = regs.read::<i32>(cfg(&o.regs_nr)) as i64;
    #[cfg(feature = "legacy")]
    {
        // The registers were found by arithmetic on the task's stack: a number that is not the
        // tracepoint's means they were not, and what the syscall did is lost (counted).
        // SAFETY: direct read of the record, inside its fixed size.
        let id: i64 = unsafe { *(ctx.as_ptr() as *const i64).add(SYS_EXIT_ID) };
        if id != nr {
            if task.in_scope() {
                count(task.run, counter::DISPATCH_FAILED);
            }
            return 0;
        }
    }
    let Some((syscall, shape, compat)) = recorded_syscall(&task, regs, nr) else {
        return 0;
    };
    if !task.in_scope() {
        return 0;
    }
    if syscall == Syscall::Bpf as u16 {
        // A bpf() that succeeded can reach the monitor's maps (a root task deleting its own
        // entry from the tracked set): the run's record can no longer be called complete.
        if ret >= 0 {
            count(task.run, counter::BPF_CALLS);
        }
        return 0;
    }
    claim();
    let family = if shape.io != io::NONE {
        exits::IO
    } else if shape.kind == EventKind::Exec as u8 {
        exits::EXEC
    } else if syscall == Syscall::Recvmsg as u16 || syscall == Syscall::Recvmmsg as u16 {
        exits::RECV
    } else if shape.kind == EventKind::Net as u8 {
        exits::NET
    } else if shape.kind != 0 {
        exits::EVENT
    } else {
        return 0;
    };
    let Some(state) = EXIT_STATE.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: this CPU's entry (see ExitState).
    let state = unsafe { &mut *state };
    state.args = Args::read(regs, compat);
    state.ret = ret;
    state.task = task.save();
    state.syscall = syscall;
    hand_on(&ctx, task.run, family);
    0
}

/// The syscall `nr` as aet numbers it, its shape and whether it is a compat one, if `sys_exit`
/// records it (for the run of a task in scope): what `sys_exit` and its witness decide before
/// the scope is looked up.
#[inline(always)]
pub(crate) fn recorded_syscall(task: &Task, regs: KPtr, nr: i64) -> Option<(u16, Shape, bool)> {
    if nr < 0 || nr >= aet_common::SYSCALL_TABLE_SIZE as i64 {
        return None;
    }
    let &entry = SYSCALLS.get(nr as u32)?;
    if entry == 0 {
        return None;
    }
    let compat = task.compat(regs);
    let syscall = if compat { entry >> 8 } else { entry & 0xff };
    if syscall == 0 || syscall as usize >= SYSCALL_COUNT {
        return None;
    }
    // The index is masked in the register that indexes the table (black_box keeps the mask the
    // check above makes redundant): a verifier before 6.13 does not carry a check made on
    // `syscall - 1` (what the compiler folds the two comparisons into) over to `syscall` (6.12),
    // and 6.1 loses a check made before a spill.
    let shape = SHAPES[(core::hint::black_box(syscall) as usize) % SYSCALL_COUNT];
    if matches!(shape.io, io::CLOSE | io::CLOSE_RANGE | io::DUP | io::FCNTL)
        // SAFETY: read only.
        && unsafe { FDMASK.get(task.tgid) }.is_none_or(|m| *m == 0)
    {
        // Closing or duplicating fds of a process with no accounted fd: nothing to do (the
        // cheapest exit for the most frequent syscall of all).
        return None;
    }
    Some((syscall, shape, compat))
}

/// Tail-calls the program at `index` of [`EXITS`]; returns only when the call failed (an empty
/// slot, or the kernel's limit on chained calls), which is counted as a lost event: the record
/// is never called complete without it.
#[inline(always)]
fn hand_on(ctx: &TracePointContext, run: u32, index: u32) {
    // SAFETY: the helper takes the context it was given and a program array map.
    unsafe { EXITS.tail_call(ctx, index) };
    count(run, counter::DISPATCH_FAILED);
}

/// The state `sys_exit` left for this CPU, and the task it was for.
#[inline(always)]
fn resume() -> Option<(&'static ExitState, Task)> {
    let state = EXIT_STATE.get_ptr(0)?;
    // SAFETY: this CPU's entry, written by sys_exit just before the tail call.
    let state = unsafe { &*state };
    Some((state, Task::restore(&state.task)))
}

/// Hands a syscall that moved a socket's bytes on to [`exit_payload`].
#[inline(always)]
fn payload_next(ctx: &TracePointContext, run: u32, ret: i64) {
    if ret > 0 && payload::on() {
        hand_on(ctx, run, exits::PAYLOAD);
    }
}

/// Reads, writes, closes, duplications and listings (fd accounting).
#[tracepoint]
pub(crate) fn exit_io(ctx: TracePointContext) -> u32 {
    let Some((s, mut task)) = resume() else {
        return 0;
    };
    let shape = SHAPES[(s.syscall as usize) % SYSCALL_COUNT];
    if record_io(&s.args, &mut task, &shape, s.syscall, s.ret) {
        payload_next(&ctx, task.run, s.ret);
    }
    0
}

/// execve and execveat at their exit.
#[tracepoint]
pub(crate) fn exit_exec(_ctx: TracePointContext) -> u32 {
    if let Some((s, task)) = resume() {
        record_exec(&s.args, task, s.syscall, s.ret);
    }
    0
}

/// recvmsg and recvmmsg: the fds a message carried, then its payload.
#[tracepoint]
pub(crate) fn exit_recv(ctx: TracePointContext) -> u32 {
    let Some((s, task)) = resume() else {
        return 0;
    };
    exit_received(&s.args, &task, s.syscall, s.ret);
    payload_next(&ctx, task.run, s.ret);
    0
}

/// Sockets: connect, bind, accept, sends.
#[tracepoint]
pub(crate) fn exit_net(ctx: TracePointContext) -> u32 {
    let Some((s, mut task)) = resume() else {
        return 0;
    };
    let syscall = s.syscall;
    record_net(&s.args, &mut task, syscall, s.ret);
    if syscall == Syscall::Sendto as u16
        || syscall == Syscall::Sendmsg as u16
        || syscall == Syscall::Sendmmsg as u16
    {
        payload_next(&ctx, task.run, s.ret);
    }
    0
}

/// Everything else that names a file or a process.
#[tracepoint]
pub(crate) fn exit_event(_ctx: TracePointContext) -> u32 {
    if let Some((s, task)) = resume() {
        let shape = SHAPES[(s.syscall as usize) % SYSCALL_COUNT];
        record_event(&s.args, task, &shape, s.syscall, s.ret);
    }
    0
}

/// A socket syscall's payload (a DNS message, a ClientHello, a request's first line).
#[tracepoint]
pub(crate) fn exit_payload(_ctx: TracePointContext) -> u32 {
    if let Some((s, task)) = resume() {
        payload::exit(&s.args, task.tgid, task.run, s.syscall, s.ret);
    }
    0
}

/// Records a syscall that touches the file system (everything but execs and accounting).
#[inline(always)]
fn record_event(args: &Args, mut task: Task, shape: &Shape, syscall: u16, ret: i64) {
    let Some(s) = scratch() else { return };
    let Some(kind) = EventKind::from_u16(shape.kind as u16) else {
        return;
    };
    // What is not recorded leaves before the record is built: anonymous mappings and repeated
    // mappings of one open file (each exec makes a dozen), but for its first executable one
    // (a library's code: the ledger hashes what ran). (An fstat in disguise is left out
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
            let mark = if args.get(2) & PROT_EXEC as u64 != 0 {
                fileio::MAPPED_EXEC
            } else {
                fileio::MAPPED
            };
            if e.marks & mark != 0 {
                return;
            }
            e.marks |= mark | fileio::MAPPED;
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
    } else if kind == EventKind::Process {
        // The target as the actor named it: ptrace(request, pid, ...), the others' first
        // argument.
        if syscall == Syscall::Ptrace as u16 {
            h.aux = args.get(1);
            h.aux2 = args.get(0);
        } else {
            h.aux = args.get(0);
        }
        h.mode = task.pid_level();
    } else if syscall == Syscall::PidfdGetfd as u16 {
        // pidfd_getfd(pidfd, targetfd, flags): the pidfd (whose process userspace knows from
        // its pidfd_open) and the fd's number over there.
        h.aux = fd_origin::COPIED;
        h.aux2 = args.get(1);
        h.dirfd = args.get(0) as i32;
        h.fd = ret as i32;
    }
    if shape.path >= 0 {
        capture_str::<USER>(s, section::PATH, args.get(shape.path));
    }
    if shape.path2 >= 0 {
        capture_str::<USER>(s, section::PATH2, args.get(shape.path2));
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
                    set_identity(header(s), inode_identity(inode, mnt));
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
    if fd != NO_FD {
        let file = dirfd_file(&task, fd);
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
        walk_into(s, &task, section::WALK, fd, file);
    }
    if shape.path2 >= 0
        && shape.bits & shape::PATH2_VERBATIM == 0
        && section_first_byte(s, section::PATH2) != b'/'
    {
        let dirfd2 = header(s).dirfd2 as i64;
        let file = dirfd_file(&task, dirfd2);
        walk_into(s, &task, section::WALK2, dirfd2, file);
    }
    send(s);
}
