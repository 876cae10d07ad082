//! Building a record: the per-CPU scratch buffer, the header, the sections (user and kernel
//! strings), and sending it to the ring buffer with its exact length. Every failure to send is
//! counted.

use core::ffi::c_void;

use aet_common::{
    DATA_LIMIT, EventHeader, EventKind, HEADER_SIZE, PATH_CAP, counter, flags, runs, section,
    uapi::AT_FDCWD,
};
use aya_ebpf::helpers::{bpf_probe_read_kernel, bpf_probe_read_user, generated};

use crate::{
    maps::{
        EVENTS, PREEMPTIONS, RUN_LIMITS, RUN_PRODUCED, SCRATCH, SCRATCH_SIZE, Scratch, atomic_add,
        cfg, count, offsets,
    },
    task::{Identity, Task},
};

pub(crate) const BPF_RB_NO_WAKEUP: u64 = 1;

#[inline(always)]
pub(crate) fn scratch() -> Option<&'static mut Scratch> {
    // SAFETY: helper without preconditions.
    let cpu = unsafe { generated::bpf_get_smp_processor_id() };
    // SAFETY: this CPU's slot, exclusive to this program invocation (programs do not migrate).
    SCRATCH.get_ptr_mut(cpu).map(|p| unsafe { &mut *p })
}

/// Counts a record dropped (or sent mixed) because its scratch was taken mid-record.
#[inline(always)]
fn preempted() {
    if let Some(p) = PREEMPTIONS.get_ptr_mut(0) {
        // SAFETY: per-CPU slot, 8-aligned; atomic for the same reason as the counters.
        unsafe { atomic_add(p, 1) };
    }
}

/// Marks this CPU's scratch (and walk context) as the current task's, at the start of a
/// program that will build a record, once the task is known to be in scope.
///
/// Where the kernel lets a program be preempted (7.x runs tracepoint programs with migration
/// disabled but preemption enabled), another task's program can run on this CPU mid-record and
/// overwrite the per-CPU scratch: it claims it first, so [`send`] sees the claim is no longer
/// the sender's and drops the mixed record, counted in `PREEMPTIONS`.
#[inline(always)]
pub(crate) fn claim() {
    if let Some(s) = scratch() {
        // SAFETY: helper without preconditions.
        s.owner = unsafe { generated::bpf_get_current_pid_tgid() };
    }
}

#[inline(always)]
pub(crate) fn header(s: &mut Scratch) -> &mut EventHeader {
    // SAFETY: the buffer starts 8-aligned and is larger than the header.
    unsafe { &mut *(s.buf.as_mut_ptr() as *mut EventHeader) }
}

/// Stores zero without letting the compiler merge neighbouring stores into a memset call (a
/// byte-by-byte loop in BPF).
#[inline(always)]
pub(crate) fn zero<T: Default>(p: &mut T) {
    // SAFETY: p is a valid, aligned reference.
    unsafe { core::ptr::write_volatile(p, T::default()) };
}

/// Fills the header's common part for the current task. `ppid` and `comm` are left empty: they
/// change only at fork and exec, whose records carry them ([`fill_proc_header`]), and userspace
/// keeps them per process. Every helper call counts on the hot path.
#[inline(always)]
pub(crate) fn fill_header(
    h: &mut EventHeader,
    task: &mut Task,
    kind: EventKind,
    syscall: u16,
    ret: i64,
) {
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
    h.run = task.run;
    zero(&mut h._pad);
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

/// Fills the header of a record about the process itself (fork, exec, exit): the common part,
/// the task's `real_parent` pid and its `comm`, which only these records carry.
#[inline(always)]
pub(crate) fn fill_proc_header(
    h: &mut EventHeader,
    task: &mut Task,
    kind: EventKind,
    syscall: u16,
    ret: i64,
) {
    fill_header(h, task, kind, syscall, ret);
    let o = offsets();
    let parent = task.ptr.ptr(cfg(&o.task_real_parent));
    if !parent.is_null() {
        h.ppid = parent.read::<i32>(cfg(&o.task_tgid)) as u32;
        h.flags |= flags::PPID_KERNEL;
    }
    // SAFETY: comm has 16 bytes of room.
    unsafe { generated::bpf_get_current_comm(h.comm.as_mut_ptr() as *mut c_void, 16) };
}

/// Offset in the scratch buffer where the next section starts.
#[inline(always)]
pub(crate) fn section_start(h: &EventHeader) -> usize {
    HEADER_SIZE
        + h.len[section::PATH] as usize
        + h.len[section::PATH2] as usize
        + h.len[section::ARGV] as usize
        + h.len[section::WALK] as usize
        + h.len[section::WALK2] as usize
}

/// Sends the record in `s` (header plus its sections), unless its scratch was taken by another
/// task's program since this one claimed it ([`claim`]): then the record is dropped and counted.
#[inline(always)]
pub(crate) fn send(s: &mut Scratch) {
    // SAFETY: helper without preconditions.
    let me = unsafe { generated::bpf_get_current_pid_tgid() };
    if s.owner != me {
        // The task that took the scratch may itself be preempted: its record is mixed with
        // what this one wrote since, and must not go out either.
        s.owner = 0;
        preempted();
        return;
    }
    let run = header(s).run;
    let len = section_start(header(s));
    if len > SCRATCH_SIZE {
        return;
    }
    let (Some(limit), Some(produced)) = (RUN_LIMITS.get(run), RUN_PRODUCED.get_ptr_mut(run)) else {
        return;
    };
    // The run's share of the ring: a busy run loses its own records, never another run's.
    let cost = runs::ring_cost(len as u64);
    // SAFETY: a map value; read for the check (a race between CPUs overshoots by a record).
    let unread = unsafe { *produced }.wrapping_sub(limit.consumed);
    if unread.wrapping_add(cost) > limit.quota {
        count(run, counter::QUOTA_FULL);
        return;
    }
    match EVENTS.output::<[u8]>(&s.buf[..len], BPF_RB_NO_WAKEUP) {
        Ok(()) => {
            // SAFETY: an 8-aligned map value, added to atomically (CPUs share a run).
            unsafe { atomic_add(produced, cost) };
            count(run, counter::SENT);
            if s.owner != me {
                // Taken while it was copied out: the record sent may be mixed.
                preempted();
            }
        }
        Err(_) => count(run, counter::RINGBUF_FULL),
    }
}

/// Reads a pointer-sized word of the process (4 bytes through the compat ABI).
#[inline(always)]
pub(crate) fn user_word(addr: u64, compat: bool) -> Option<u64> {
    // SAFETY: fault-tolerant reads of the caller's memory.
    unsafe {
        if compat {
            bpf_probe_read_user(addr as *const u32).ok().map(u64::from)
        } else {
            bpf_probe_read_user(addr as *const u64).ok()
        }
    }
}

/// Where a string is read from.
pub(crate) const USER: bool = true;
pub(crate) const KERNEL: bool = false;

/// Copies a NUL-terminated string (from user memory when `FROM_USER`, else kernel memory) as
/// section `sec`; returns whether it could be read. A string longer than the section's room is
/// flagged truncated, an unreadable path `PATH_UNREADABLE`.
#[inline(always)]
pub(crate) fn capture_str<const FROM_USER: bool>(s: &mut Scratch, sec: usize, src: u64) -> bool {
    let start = section_start(header(s));
    if start > DATA_LIMIT {
        header(s).flags |= flags::SECTION_DROPPED;
        return false;
    }
    let dst = s.buf[start..].as_mut_ptr();
    // SAFETY: dst has PATH_CAP bytes of room (start <= DATA_LIMIT); the helpers are
    // fault-tolerant.
    let n = unsafe {
        if FROM_USER {
            generated::bpf_probe_read_user_str(
                dst as *mut c_void,
                PATH_CAP as u32,
                src as *const c_void,
            )
        } else {
            generated::bpf_probe_read_kernel_str(
                dst as *mut c_void,
                PATH_CAP as u32,
                src as *const c_void,
            )
        }
    };
    let h = header(s);
    if n <= 0 || src == 0 {
        if sec == section::PATH {
            h.flags |= flags::PATH_UNREADABLE;
            count(h.run, counter::PATH_UNREADABLE);
        }
        return false;
    }
    let n = n as usize;
    let len = if n >= PATH_CAP {
        // The helper stops at PATH_CAP - 1 bytes plus a NUL; the string was longer unless its
        // byte at PATH_CAP - 1 is the terminator.
        let last = src + (PATH_CAP as u64 - 1);
        // SAFETY: fault-tolerant reads.
        let b: u8 = if FROM_USER {
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
pub(crate) fn section_first_byte(s: &mut Scratch, sec: usize) -> u8 {
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

/// Does the identity a stat call reported (in `h`, from its buffer) name the file `id`?
#[inline(always)]
pub(crate) fn stat_names(h: &EventHeader, id: Identity) -> bool {
    let (major, minor) = (id.0 >> 20, id.0 & 0xfffff);
    let dev = if h.flags & flags::DEV_STAT != 0 {
        // The kernel's new_encode_dev, as struct stat carries it.
        (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
    } else {
        major | minor << 32
    };
    h.ino == id.1 && h.dev == dev
}
