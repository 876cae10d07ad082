//! Fds that arrive from outside the run's own opens: received over a socket (`SCM_RIGHTS`),
//! carried by fanotify events, and (through the generic path) copied with `pidfd_getfd`. Each
//! arriving fd gets an `fd` row with its file's identity and kernel walk. What cannot be parsed
//! within the loop bounds is counted (`FD_UNRECORDED`), never skipped silently.

use core::ffi::c_void;

use aet_common::{EventKind, Syscall, counter, fd_origin};
use aya_ebpf::helpers::{bpf_probe_read_kernel, bpf_probe_read_user};

use super::args::Args;
#[cfg(feature = "legacy")]
use crate::maps::{legacy_arg, legacy_call, legacy_slot};
use crate::{
    kernel::{KPtr, kread},
    loops,
    maps::{cfg, count, offsets},
    record::{fill_header, header, scratch, send, user_word},
    task::{Task, fd_file, identity, set_identity},
};

/// `SOL_SOCKET`, `SCM_RIGHTS` (uapi).
const SOL_SOCKET: u32 = 1;
const SCM_RIGHTS: u32 = 1;
/// Most fds one `SCM_RIGHTS` message carries (`SCM_MAX_FD`).
const SCM_MAX_FD: u32 = 253;
/// Fds looked at per message: all of them, or in the legacy object the first 16 (more are
/// counted as unrecorded).
const MSG_FDS: u32 = loops::bound(SCM_MAX_FD, 16);
/// Control messages looked at per message (credentials and pidfds may precede the fds).
const CMSGS: u32 = 4;
/// Messages looked at per `recvmmsg` (fewer in the legacy object; more are counted).
const MMSGS: u32 = loops::bound(64, 8);
/// Events looked at per fanotify read (fewer in the legacy object; more are counted).
const FAN_EVENTS: u32 = loops::bound(32, 8);

/// Records `row` ([`aet_emit_fd`]).
#[inline(always)]
fn emit_fd(row: &FdRow) {
    #[cfg(not(feature = "legacy"))]
    aet_emit_fd(row);
    #[cfg(feature = "legacy")]
    legacy_call(legacy_slot::EMIT_FD, row, aet_emit_fd_legacy);
}

/// [`aet_emit_fd`] of the row in this CPU's slot (the legacy object's global).
#[cfg(feature = "legacy")]
#[unsafe(no_mangle)]
#[inline(never)]
extern "C" fn aet_emit_fd_legacy() -> i32 {
    legacy_arg::<FdRow>(legacy_slot::EMIT_FD).map_or(0, |p| aet_emit_fd(p))
}

/// Parses the message `m` ([`aet_parse_msghdr`]).
#[inline(always)]
fn parse_message(m: &Msg) {
    #[cfg(not(feature = "legacy"))]
    aet_parse_msghdr(m);
    #[cfg(feature = "legacy")]
    legacy_call(legacy_slot::PARSE_MSGHDR, m, aet_parse_msghdr_legacy);
}

/// [`aet_parse_msghdr`] of the message in this CPU's slot (the legacy object's global).
#[cfg(feature = "legacy")]
#[unsafe(no_mangle)]
#[inline(never)]
extern "C" fn aet_parse_msghdr_legacy() -> i32 {
    // The message is worked on in its slot (a copy on this stack would put the program's call
    // chain over the 512 bytes the kernel allows).
    // SAFETY: this CPU's slot, which the caller filled.
    legacy_arg::<Msg>(legacy_slot::PARSE_MSGHDR)
        .map_or(0, |p| parse_msghdr(unsafe { &mut *p }) as i32)
}

/// One fd that arrived, as [`aet_emit_fd`] records it.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct FdRow {
    pub(crate) ret: i64,
    /// How it came ([`fd_origin`]) and from where (a socket fd, a pid).
    pub(crate) origin: u64,
    pub(crate) source: u64,
    pub(crate) fd: i32,
    /// The sending process (host pid), 0 when unknown.
    pub(crate) peer: u32,
    pub(crate) run: u32,
    pub(crate) syscall: u32,
}

/// Records one fd that arrived: its file's identity, how it came and from where; returns 1 when
/// it sent the row. No walk: a walk verified inside these loops costs more load time than all
/// the other handover code together (0.5 s per call site, measured); userspace names the file
/// (an earlier row of the same inode, or the fd's link while it still shows that inode). Global,
/// so verified once per program, not in every loop that finds an fd.
// Global (verified once) where the kernel takes pointer arguments to a global function
// (5.12+); in the legacy object, the body of a global that takes its argument from a map.
#[cfg_attr(not(feature = "legacy"), unsafe(no_mangle), inline(never))]
#[cfg_attr(feature = "legacy", inline(always))]
pub(crate) extern "C" fn aet_emit_fd(row: *const FdRow) -> i32 {
    if row.is_null() {
        return 0;
    }
    // SAFETY: the caller's row, checked not null.
    let r = unsafe { &*row };
    let Some(s) = scratch() else { return 0 };
    let mut task = Task::current();
    task.run = r.run;
    fill_header(header(s), &mut task, EventKind::Fd, r.syscall as u16, r.ret);
    let h = header(s);
    h.fd = r.fd;
    h.aux = r.origin;
    h.aux2 = r.source;
    h.mode = task.pid_level();
    h.open_flags = r.peer;
    if let Some(id) = identity(fd_file(&task, r.fd as i64)) {
        set_identity(h, id);
    }
    send(s);
    1
}

/// The state of one message's parse, shared with the `bpf_loop` callbacks.
#[repr(C)]
#[derive(Clone, Copy)]
struct Msg {
    /// The `msghdr` (or `mmsghdr` array, for the message loop).
    addr: u64,
    /// Start of the fd array of the current `SCM_RIGHTS` message.
    fds: u64,
    /// The socket fd.
    sock: u64,
    ret: i64,
    run: u32,
    compat: u32,
    syscall: u32,
    /// The socket's peer process (host pid), 0 when it has none.
    peer: u32,
}

extern "C" fn fd_step(i: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back the caller's context.
    let m = unsafe { &*(ctx as *const Msg) };
    // SAFETY: a fault-tolerant read of the array the kernel just filled.
    let Ok(fd) = (unsafe { bpf_probe_read_user((m.fds + 4 * i as u64) as *const i32) }) else {
        count(m.run, counter::FD_UNRECORDED);
        return 1;
    };
    let row = FdRow {
        ret: m.ret,
        origin: fd_origin::RECEIVED,
        source: m.sock,
        fd,
        peer: m.peer,
        run: m.run,
        syscall: m.syscall,
    };
    emit_fd(&row);
    0
}

/// Records every fd of the `SCM_RIGHTS` control message of the `msghdr` at `msg.addr` (after the
/// kernel updated its `msg_controllen` to what it wrote); returns 1 when it found one. Global, so
/// verified once per program with the message unknown, not once per state the message loop
/// reaches it in.
// Global (verified once): the kernel takes pointer arguments to a global function since 5.12;
// the legacy object has its own global, which takes the argument from a map.
#[cfg(not(feature = "legacy"))]
#[unsafe(no_mangle)]
#[inline(never)]
extern "C" fn aet_parse_msghdr(msg: *const Msg) -> i32 {
    if msg.is_null() {
        return 0;
    }
    // On this program's stack: the fd loop's context must be.
    // SAFETY: the caller's message, checked not null.
    let mut m = unsafe { core::ptr::read(msg) };
    parse_msghdr(&mut m) as i32
}

#[inline(always)]
fn parse_msghdr(m: &mut Msg) -> bool {
    let compat = m.compat != 0;
    // msghdr: msg_control and msg_controllen at 32 and 40 (16 and 20 through compat);
    // cmsghdr: {len, level, type} in 16 bytes (12), aligned to 8 (4).
    let (ctl_at, len_at, hdr, align) = if compat {
        (16, 20, 12u64, 3u64)
    } else {
        (32, 40, 16u64, 7u64)
    };
    // Each read checked as it is made: a verifier before 6.5 does not follow two checks the
    // compiler merges, and walks a path where a value was never read.
    let Some(ctl) = user_word(m.addr + ctl_at, compat) else {
        count(m.run, counter::FD_UNRECORDED);
        return false;
    };
    let Some(ctl_len) = user_word(m.addr + len_at, compat) else {
        count(m.run, counter::FD_UNRECORDED);
        return false;
    };
    if ctl == 0 || ctl_len < hdr {
        return false;
    }
    // Find the SCM_RIGHTS message first (the kernel writes every received fd into one), then
    // record its fds: one call site for the peer and the fd loop, which the verifier checks
    // once, where a call in the (unrolled) search loop would be checked once per unrolled step.
    let mut off = 0u64;
    let mut rights: u64 = 0;
    let mut rights_len: u64 = 0;
    let mut more = false;
    for _ in 0..CMSGS {
        if off + hdr > ctl_len {
            break;
        }
        let at = ctl + off;
        let Some(len) = user_word(at, compat) else {
            count(m.run, counter::FD_UNRECORDED);
            return false;
        };
        // SAFETY: a fault-tolerant read of the control buffer the kernel just filled.
        let Ok([level, ty]) =
            (unsafe { bpf_probe_read_user((at + if compat { 4 } else { 8 }) as *const [u32; 2]) })
        else {
            count(m.run, counter::FD_UNRECORDED);
            return false;
        };
        if len < hdr || off + len > ctl_len {
            break;
        }
        if level == SOL_SOCKET && ty == SCM_RIGHTS {
            if rights != 0 {
                more = true;
            } else {
                rights = at;
                rights_len = len;
            }
        }
        off += (len + align) & !align;
    }
    if more || off + hdr <= ctl_len {
        // A second fd message, or more control messages than looked at.
        count(m.run, counter::FD_UNRECORDED);
    }
    if rights == 0 {
        return false;
    }
    m.peer = socket_peer(m.sock);
    m.fds = rights + hdr;
    let n = ((rights_len - hdr) / 4) as u32;
    if n > MSG_FDS {
        count(m.run, counter::FD_UNRECORDED);
    }
    loops::run!(
        MSG_FDS,
        n,
        fd_step,
        Msg,
        aet_loop_msg_fds,
        crate::maps::legacy_slot::LOOP_MSG_FDS,
        m
    );
    true
}

extern "C" fn mmsg_step(i: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back the caller's context.
    let outer = unsafe { &*(ctx as *const Msg) };
    // struct mmsghdr: a msghdr and an unsigned int, 64 bytes (32 through compat).
    let size = if outer.compat != 0 { 32 } else { 64 };
    let m = Msg {
        addr: outer.addr + size * i as u64,
        fds: 0,
        sock: outer.sock,
        ret: outer.ret,
        run: outer.run,
        compat: outer.compat,
        syscall: outer.syscall,
        peer: outer.peer,
    };
    parse_message(&m);
    0
}

/// The peer process of socket fd `fd` of the current task (a unix socket's `sk_peer_pid`, as a
/// host pid), 0 when it has none or cannot be read. Helper reads only (no unrolled fd-table
/// look-up: this runs once per message that carries fds, and verifying that look-up here
/// would cost more load time than the reads cost at run time).
#[inline(never)]
fn socket_peer(fd: u64) -> u32 {
    let o = offsets();
    let files = KPtr::current_task().ptr(cfg(&o.task_files));
    if files.is_null() {
        return 0;
    }
    let fdt = files.ptr(cfg(&o.files_fdt));
    if fdt.is_null() || fd >= fdt.read::<u32>(cfg(&o.fdt_max_fds)) as u64 {
        return 0;
    }
    let array: u64 = fdt.read(cfg(&o.fdt_fd));
    let file: u64 = kread(array, (8 * fd) as u32);
    let sock: u64 = kread(file, cfg(&o.file_private_data));
    let sk: u64 = kread(sock, cfg(&o.socket_sk));
    let pid: u64 = kread(sk, cfg(&o.sock_sk_peer_pid));
    kread::<i32>(pid, cfg(&o.pid_numbers) + cfg(&o.upid_nr)) as u32
}

/// `recvmsg`/`recvmmsg` exits: an `fd` row for every fd received with `SCM_RIGHTS`.
#[inline(always)]
pub(crate) fn exit_received(args: &Args, task: &Task, syscall: u16, ret: i64) {
    if ret < 0 {
        return;
    }

    let mut m = Msg {
        addr: args.get(1),
        fds: 0,
        sock: args.get(0),
        ret,
        run: task.run,
        compat: args.compat as u32,
        syscall: syscall as u32,
        peer: 0,
    };
    // One message for recvmsg, `ret` for recvmmsg: both through the message loop, so that
    // the parse is verified once.
    let n = if syscall == Syscall::Recvmmsg as u16 {
        if ret > MMSGS as i64 {
            count(task.run, counter::FD_UNRECORDED);
            MMSGS
        } else {
            ret as u32
        }
    } else {
        1
    };
    loops::run!(
        MMSGS,
        n,
        mmsg_step,
        Msg,
        aet_loop_mmsgs,
        crate::maps::legacy_slot::LOOP_MMSGS,
        &mut m
    );
}

/// The name an anonymous inode's file gets from `fanotify_init` (`anon_inode:[fanotify]`).
const FANOTIFY_NAME: [u8; 11] = *b"[fanotify]\0";

/// Whether a file that is neither regular nor a directory is a fanotify group: its reads are
/// then parsed for event fds (whoever made the group: the run, or a process that handed it over).
#[inline(never)]
pub(crate) fn is_fanotify(f: KPtr) -> bool {
    let o = offsets();
    let d = f.ptr(cfg(&o.file_path) + cfg(&o.path_dentry));
    if d.is_null() {
        return false;
    }
    if d.read::<u32>(cfg(&o.dentry_name_len)) != 10 {
        return false;
    }
    let name: u64 = d.read(cfg(&o.dentry_name));
    // SAFETY: a fault-tolerant read of the dentry's name.
    let got: [u8; 11] =
        unsafe { bpf_probe_read_kernel(name as *const [u8; 11]) }.unwrap_or([0; 11]);
    got == FANOTIFY_NAME
}

/// One fanotify read's parse state.
#[repr(C)]
#[derive(Clone, Copy)]
struct Events {
    buf: u64,
    len: u64,
    off: u64,
    ret: i64,
    run: u32,
    syscall: u32,
}

extern "C" fn event_step(_i: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back the caller's context.
    let e = unsafe { &mut *(ctx as *mut Events) };
    // struct fanotify_event_metadata: event_len (u32) at 0, fd (s32) at 16, pid (s32) at 20.
    if e.off + 24 > e.len {
        return 1;
    }
    let at = e.buf + e.off;
    // SAFETY: fault-tolerant reads of the buffer the kernel just filled.
    let (Ok(event_len), Ok([fd, pid])) =
        (unsafe { bpf_probe_read_user(at as *const u32) }, unsafe {
            bpf_probe_read_user((at + 16) as *const [i32; 2])
        })
    else {
        count(e.run, counter::FD_UNRECORDED);
        return 1;
    };
    if event_len < 24 {
        return 1;
    }
    if fd >= 0 {
        let row = FdRow {
            ret: e.ret,
            origin: fd_origin::FANOTIFY,
            source: pid as u32 as u64,
            fd,
            peer: 0,
            run: e.run,
            syscall: e.syscall,
        };
        emit_fd(&row);
    }
    e.off += event_len as u64;
    0
}

/// A read of `len` bytes from a fanotify group's fd into `buf`: an `fd` row for every event's fd.
#[inline(never)]
pub(crate) fn fanotify_read(task: &Task, syscall: u16, buf: u64, len: i64) {
    if len <= 0 {
        return;
    }
    let mut e = Events {
        buf,
        len: len as u64,
        off: 0,
        ret: len,
        run: task.run,
        syscall: syscall as u32,
    };
    loops::run!(
        FAN_EVENTS,
        FAN_EVENTS,
        event_step,
        Events,
        aet_loop_fan,
        crate::maps::legacy_slot::LOOP_FAN,
        &mut e
    );
    if e.off + 24 <= e.len {
        // More events than looked at.
        count(task.run, counter::FD_UNRECORDED);
    }
}
