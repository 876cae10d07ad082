//! Execs: the entry of `execve`/`execveat` is noted (which syscall, dirfd and flags led to the
//! exec); a successful exec is recorded by `sched_process_exec` with the kernel's file name, the
//! new program's arguments and the file now running; a failed one at its exit, with its file name
//! and arguments read from the caller's memory.

use core::ffi::c_void;

use aet_common::{
    ARGV_CAP, DATA_LIMIT, EventKind, Inflight, Syscall, counter, flags, section, uapi::AT_FDCWD,
    witness,
};
use aya_ebpf::{
    EbpfContext as _,
    helpers::{bpf_probe_read_user, generated},
    macros::tracepoint,
    programs::TracePointContext,
};

use super::{args::Args, fileio::fileio_flush, sched::record_field};
use crate::{
    kernel::KPtr,
    loops,
    maps::{CONFIG, INFLIGHT, cfg, count, mark, offsets},
    record::{
        KERNEL, USER, capture_str, claim, fill_proc_header, header, scratch, section_first_byte,
        section_start, send,
    },
    task::{FileRef, Task},
    walk::{dirfd_file, record_file, walk_into},
};

// Syscall tracepoint records: 8 bytes of common fields, `__syscall_nr` and padding, then the
// arguments as 8-byte slots from byte 16 (`sys_enter_*`). This layout is the syscall
// tracepoints' fixed format, not a kernel struct.
const SYSCALL_ARG0: usize = 2;

#[inline(always)]
pub(crate) fn sys_arg(ctx: &TracePointContext, n: usize) -> u64 {
    // SAFETY: direct read of the tracepoint record, inside its fixed size.
    unsafe { *(ctx.as_ptr() as *const u64).add(SYSCALL_ARG0 + n) }
}

#[inline(always)]
pub(crate) fn stash_exec(syscall: Syscall, dirfd: i32, path: u64, argv: u64, flags: u64) {
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
        count(task.run, counter::INFLIGHT_FULL);
    }
}

#[tracepoint]
pub(crate) fn sys_enter_execve(ctx: TracePointContext) -> u32 {
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
pub(crate) fn sys_enter_execveat(ctx: TracePointContext) -> u32 {
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
#[derive(Clone, Copy)]
pub(crate) struct ArgvWalk {
    pub(crate) argv: u64,
    pub(crate) base: u32,
    pub(crate) off: u32,
    pub(crate) flags: u32,
    /// Size of a pointer in the caller's ABI (8, or 4 for compat).
    pub(crate) ptr_size: u32,
    /// 1 once the vector's terminating NULL was read.
    pub(crate) ended: u32,
}

/// Arguments read: every one that fits in [`ARGV_CAP`] bytes (each takes at least its NUL), or in
/// the legacy object the first 128 (more is marked truncated).
const ARGS: u32 = loops::bound(ARGV_CAP as u32, 128);

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
        st.ended = 1;
        return 1;
    }
    let Some(s) = scratch() else { return 1 };
    let base = st.base as usize;
    let off = st.off as usize;
    if base > DATA_LIMIT || off >= ARGV_CAP {
        st.flags |= flags::ARGV_TRUNCATED;
        return 1;
    }
    // Masked (a no-op: room <= ARGV_CAP) so that a verifier following each iteration of the
    // legacy object's loop, not a callback verified once, sees the size bounded.
    let room = core::hint::black_box(ARGV_CAP - off) & (2 * ARGV_CAP - 1);
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
pub(crate) fn record_exec(args: &Args, mut task: Task, syscall: u16, ret: i64) {
    let _ = INFLIGHT.remove(task.tid);
    if ret == 0 {
        return;
    }
    let Some(s) = scratch() else { return };
    fill_proc_header(header(s), &mut task, EventKind::Exec, syscall, ret);
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
    capture_str::<USER>(s, section::PATH, path);
    let base = section_start(header(s));
    let mut st = ArgvWalk {
        argv,
        base: base as u32,
        off: 0,
        flags: 0,
        ptr_size: if args.compat { 4 } else { 8 },
        ended: 0,
    };
    if argv != 0 {
        let ran = loops::run!(
            ARGS,
            ARGS,
            argv_step,
            ArgvWalk,
            aet_loop_argv,
            crate::maps::legacy_slot::LOOP_ARGV,
            &mut st
        );
        if ran >= ARGS && st.ended == 0 {
            st.flags |= flags::ARGV_TRUNCATED;
        }
    }
    let h = header(s);
    h.len[section::ARGV] = st.off as u16;
    h.flags |= st.flags;
    let dirfd = h.dirfd as i64;
    if section_first_byte(s, section::PATH) != b'/' {
        let file = dirfd_file(&task, dirfd);
        walk_into(s, &task, section::WALK, dirfd, file);
    }
    send(s);
}

/// A successful exec: the new image is in place. The file name is the kernel's copy
/// (`bprm->filename`); the arguments are read from the new process's stack, where the kernel has
/// just written them; the object is the file now running (`mm->exe_file`: for a `#!` script, its
/// interpreter).
#[tracepoint(category = "sched", name = "sched_process_exec")]
pub(crate) fn sched_process_exec(ctx: TracePointContext) -> u32 {
    mark(witness::EXEC);
    let mut task = Task::current();
    let f = &CONFIG.fields;
    let old_pid = record_field::<i32>(&ctx, &f.exec_old_pid) as u32;
    let mut previous = task;
    previous.tid = old_pid;
    if !task.in_scope() {
        // A thread other than the leader exec'd: the process is known by its old thread id.
        if !previous.in_scope() {
            return 0;
        }
        task.run = previous.run;
    }
    claim();
    // The exec closed the process's close-on-exec fds without close(): emit their accounting.
    fileio_flush(&task, 0, u32::MAX, true);
    // SAFETY: copied out before the entry is removed.
    let inflight = unsafe { INFLIGHT.get(old_pid) }.copied();
    let Some(s) = scratch() else { return 0 };
    let (syscall, dirfd, open_flags, unpaired) = match inflight {
        Some(inf) => {
            let _ = INFLIGHT.remove(old_pid);
            (inf.syscall, inf.dirfd, inf.flags as u32, false)
        }
        None => {
            count(task.run, counter::UNPAIRED);
            (Syscall::Execve as u16, AT_FDCWD, 0, true)
        }
    };
    fill_proc_header(header(s), &mut task, EventKind::Exec, syscall, 0);
    let h = header(s);
    h.dirfd = dirfd;
    h.open_flags = open_flags;
    if unpaired {
        h.flags |= flags::UNPAIRED;
    }
    let regs = if cfg(&CONFIG.compat_in_regs) != 0 {
        task.regs()
    } else {
        KPtr(core::ptr::null())
    };
    if task.compat(regs) {
        header(s).flags |= flags::COMPAT;
    }
    // The record's copy of `bprm->filename` (a `__data_loc`: its offset in the record in the
    // low 16 bits).
    let loc = record_field::<u32>(&ctx, &f.exec_filename);
    capture_str::<KERNEL>(
        s,
        section::PATH,
        ctx.as_ptr() as u64 + (loc & 0xffff) as u64,
    );

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
            // The file's change time (ns), with its device and inode the identity userspace
            // hashes the program by: `aux` of an exec record.
            let o = offsets();
            let inode = exe.ptr(cfg(&o.file_inode));
            if !inode.is_null() {
                let sec = inode.read::<i64>(cfg(&o.inode_ctime_sec));
                let nsec = inode.read::<u32>(cfg(&o.inode_ctime_nsec)) & ((1 << 30) - 1);
                header(s).aux = (sec as u64)
                    .wrapping_mul(1_000_000_000)
                    .wrapping_add(nsec as u64);
                // And its size (`aux2`): a truncation within the same clock tick keeps the
                // change time, not the size.
                header(s).aux2 = inode.read::<i64>(cfg(&o.inode_size)) as u64;
            }
        }
    }
    send(s);
    0
}
