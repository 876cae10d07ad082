//! Socket payloads: the names on the network. The first bytes of a socket's first message (a
//! TLS ClientHello's server name, an HTTP request's `Host`), and of every message both ways on a
//! socket that talks to port 53 (DNS queries and answers), each a `payload` record userspace
//! parses. Only sockets pay: a socket is known by its byte-accounting entry (`fileio::SOCKET`),
//! which every read and write looks up already; other files leave where they did.

use core::ffi::c_void;

use aet_common::{
    DATA_LIMIT, EventKind, FileIo, HEADER_SIZE, PAYLOAD_CAP, SOCKADDR_CAP, Syscall, counter,
    fileio, flags, payload, section,
};
use aya_ebpf::helpers::{bpf_probe_read_user, generated};

use super::{args::Args, fileio::fileio_key};
#[cfg(feature = "legacy")]
use crate::maps::{legacy_arg, legacy_call, legacy_slot};
use crate::{
    loops,
    maps::{CONFIG, FILEIO, cfg, count},
    record::{fill_header, header, scratch, send, user_word},
    task::Task,
};

/// Buffers of one message read (an iovec array's first entries).
const IOVS: u32 = 4;
/// Messages read per `sendmmsg`/`recvmmsg`.
const MMSGS: u32 = 8;
/// The DNS port (network byte order is handled where the port is read).
const DNS_PORT: u16 = 53;

/// Captures `c` ([`aet_emit_payload`]).
#[inline(always)]
fn emit_payload(c: &Capture) {
    #[cfg(not(feature = "legacy"))]
    aet_emit_payload(c);
    #[cfg(feature = "legacy")]
    legacy_call(legacy_slot::EMIT_PAYLOAD, c, aet_emit_payload_legacy);
}

/// [`aet_emit_payload`] of the capture in this CPU's slot (the legacy object's global).
#[cfg(feature = "legacy")]
#[unsafe(no_mangle)]
#[inline(never)]
extern "C" fn aet_emit_payload_legacy() -> i32 {
    // The capture is worked on in its slot (a copy on this stack would put the program's
    // call chain over the 512 bytes the kernel allows).
    // SAFETY: this CPU's slot, which the caller filled.
    legacy_arg::<Capture>(legacy_slot::EMIT_PAYLOAD).map_or(0, |p| emit(unsafe { &mut *p }) as i32)
}

/// One message to capture, shared with the `bpf_loop` callbacks.
#[repr(C)]
#[derive(Clone, Copy)]
struct Capture {
    /// A single buffer (`iovcnt` 0), or an iovec array.
    buf: u64,
    iovcnt: u64,
    /// Bytes the call moved: what is captured, up to [`PAYLOAD_CAP`].
    moved: u64,
    /// The address the call named (a send) or the kernel wrote (a receive), and its length.
    addr: u64,
    addrlen: u64,
    ret: i64,
    dir: u64,
    dev: u64,
    ino: u64,
    /// Bytes copied so far.
    done: u64,
    /// For the message loops: the `mmsghdr` array.
    msgs: u64,
    fd: i32,
    syscall: u32,
    compat: u32,
    run: u32,
    tgid: u32,
    _pad: u32,
}

/// Whether payloads are captured (always, but in the benchmark's baseline).
#[inline(always)]
pub(crate) fn on() -> bool {
    cfg(&CONFIG.no_payload) == 0
}

/// The destination port of a socket address (0 when it is not inet or inet6).
#[inline(always)]
fn port_of(addr: u64, len: u64) -> u16 {
    if addr == 0 || len < 4 {
        return 0;
    }
    // SAFETY: a fault-tolerant read of the caller's address.
    let b: [u8; 4] = unsafe { bpf_probe_read_user(addr as *const [u8; 4]) }.unwrap_or([0; 4]);
    let family = u16::from_ne_bytes([b[0], b[1]]);
    if family != libc_af::INET && family != libc_af::INET6 {
        return 0;
    }
    u16::from_be_bytes([b[2], b[3]])
}

mod libc_af {
    pub(super) const INET: u16 = 2;
    pub(super) const INET6: u16 = 10;
}

/// A connect of a socket: a new peer is a new connection (its first message is captured again),
/// and a peer on port 53 makes it a DNS socket.
#[inline(always)]
pub(crate) fn connected(entry: Option<*mut FileIo>, addr: u64, len: u64, ret: i64) {
    // 0, or EINPROGRESS for a non-blocking connect.
    if ret != 0 && ret != -115 || !on() {
        return;
    }
    let Some(p) = entry else {
        return;
    };
    // SAFETY: a map value of this process.
    let e = unsafe { &mut *p };
    if e.class != fileio::SOCKET {
        return;
    }
    e.marks &= !(fileio::SENT | fileio::DNS);
    if port_of(addr, len) == DNS_PORT {
        e.marks |= fileio::DNS;
    }
}

/// Copies up to `n` bytes of user memory at `src` to the payload section's end.
#[inline(always)]
fn copy(c: &mut Capture, src: u64, n: u64) -> bool {
    let Some(s) = scratch() else { return false };
    let want = if c.moved > PAYLOAD_CAP as u64 {
        PAYLOAD_CAP as u64
    } else {
        c.moved
    };
    if c.done >= want {
        return false;
    }
    let room = want - c.done;
    let n = if n > room { room } else { n };
    let off = HEADER_SIZE as u64 + header(s).len[section::PATH] as u64 + c.done;
    if off > DATA_LIMIT as u64 {
        return false;
    }
    // The verifier needs both bounded in the registers the helper gets.
    let off = core::hint::black_box(off) & 0xffff;
    let n = core::hint::black_box(n) & 0x1fff;
    if n == 0 || off > DATA_LIMIT as u64 {
        return n == 0;
    }
    let dst = s.buf[off as usize..].as_mut_ptr();
    // SAFETY: dst has DATA_CAP - DATA_LIMIT bytes of room; the helper is fault-tolerant.
    let r = unsafe {
        generated::bpf_probe_read_user(dst as *mut c_void, n as u32, src as *const c_void)
    };
    if r != 0 {
        return false;
    }
    c.done += n;
    true
}

extern "C" fn iov_step(i: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back the caller's context.
    let c = unsafe { &mut *(ctx as *mut Capture) };
    let compat = c.compat != 0;
    let at = c.buf + i as u64 * if compat { 8 } else { 16 };
    // One read, one check (not a pair matched at once): a verifier before 6.5 does not follow
    // the two checks the compiler merges, and walks a path where a value was never read.
    let Some(base) = user_word(at, compat) else {
        return 1;
    };
    let Some(len) = user_word(at + if compat { 4 } else { 8 }, compat) else {
        return 1;
    };
    if !copy(c, base, len) {
        return 1;
    }
    0
}

/// Sends the payload record of the message described by `c`; returns 1 when it sent one.
/// Global, so verified once per program, not once per capture path that reaches it.
// Global (verified once): the kernel takes pointer arguments to a global function since 5.12;
// the legacy object has its own global, which takes the argument from a map.
#[cfg(not(feature = "legacy"))]
#[unsafe(no_mangle)]
#[inline(never)]
extern "C" fn aet_emit_payload(capture: *const Capture) -> i32 {
    if capture.is_null() {
        return 0;
    }
    // On this program's stack: the buffer loop's context must be.
    // SAFETY: the caller's capture, checked not null.
    let mut c = unsafe { core::ptr::read(capture) };
    emit(&mut c) as i32
}

#[inline(always)]
fn emit(c: &mut Capture) -> bool {
    let mut task = Task::current();
    task.run = c.run;
    let Some(s) = scratch() else { return false };
    fill_header(
        header(s),
        &mut task,
        EventKind::Payload,
        c.syscall as u16,
        c.ret,
    );
    let h = header(s);
    h.fd = c.fd;
    h.aux = c.moved;
    h.aux2 = c.dir;
    h.dev = c.dev;
    h.ino = c.ino;
    h.flags |= flags::IDENTITY;
    if c.compat != 0 {
        h.flags |= flags::COMPAT;
    }
    if c.addr != 0 && c.addrlen > 0 {
        let n = if c.addrlen > SOCKADDR_CAP as u64 {
            SOCKADDR_CAP as u64
        } else {
            c.addrlen
        };
        let n = core::hint::black_box(n) & 0x7f;
        if n > 0 {
            let dst = s.buf[HEADER_SIZE..].as_mut_ptr();
            // SAFETY: the section has SOCKADDR_CAP bytes of room; fault-tolerant read.
            let r = unsafe {
                generated::bpf_probe_read_user(
                    dst as *mut c_void,
                    n as u32,
                    c.addr as *const c_void,
                )
            };
            if r == 0 {
                header(s).len[section::PATH] = n as u16;
            }
        }
    }
    c.done = 0;
    if c.iovcnt == 0 {
        let (buf, moved) = (c.buf, c.moved);
        copy(c, buf, moved);
    } else {
        let n = if c.iovcnt > IOVS as u64 {
            IOVS
        } else {
            c.iovcnt as u32
        };
        loops::run!(
            IOVS,
            n,
            iov_step,
            Capture,
            aet_loop_iovs,
            crate::maps::legacy_slot::LOOP_IOVS,
            c
        );
    }
    // Buffers past the fourth held bytes the capture wanted: what they hold is not seen.
    let want = if c.moved > PAYLOAD_CAP as u64 {
        PAYLOAD_CAP as u64
    } else {
        c.moved
    };
    if c.iovcnt > IOVS as u64 && c.done < want {
        count(c.run, counter::PAYLOAD_UNRECORDED);
    }
    let Some(s) = scratch() else { return false };
    let h = header(s);
    h.len[section::ARGV] = (c.done & 0x1fff) as u16;
    if c.moved > c.done {
        h.flags |= flags::ARGV_TRUNCATED;
    }
    send(s);
    true
}

/// Whether the message of socket entry `key` is captured: every one of a DNS socket (or one
/// sent to port 53), else the socket's first. Marks the entry.
#[inline(always)]
fn wanted(key: u64, dir: u64, port: u16, c: &mut Capture) -> bool {
    let Some(p) = FILEIO.get_ptr_mut(key) else {
        return false;
    };
    // SAFETY: a map value of this process.
    let e = unsafe { &mut *p };
    if e.class != fileio::SOCKET {
        return false;
    }
    c.dev = e.dev;
    c.ino = e.ino;
    if port == DNS_PORT {
        // A query sent to a DNS port: its answers come back on this socket.
        e.marks |= fileio::DNS;
    }
    if e.marks & fileio::DNS != 0 {
        return true;
    }
    if dir == payload::RECV || e.marks & fileio::SENT != 0 {
        return false;
    }
    e.marks |= fileio::SENT;
    true
}

/// The payload of a socket syscall's exit, if it has one to capture: one call site in
/// `sys_exit` (a subprogram, so the verifier checks this code once, not at every exit that
/// touches a socket). `tgid` and `run` are the task's.
#[inline(never)]
pub(crate) fn exit(args: &Args, tgid: u32, run: u32, syscall: u16, ret: i64) {
    if !on() || ret <= 0 {
        return;
    }
    let who = &Who { tgid, run };
    if syscall == Syscall::Sendmmsg as u16 || syscall == Syscall::Recvmmsg as u16 {
        messages(args, who, syscall, ret);
    } else if syscall == Syscall::Write as u16
        || syscall == Syscall::Writev as u16
        || syscall == Syscall::Sendto as u16
        || syscall == Syscall::Sendmsg as u16
    {
        capture_one(args, who, syscall, ret, payload::SEND);
    } else {
        capture_one(args, who, syscall, ret, payload::RECV);
    }
}

/// The process and run a capture is for.
struct Who {
    tgid: u32,
    run: u32,
}

#[inline(always)]
fn capture_one(args: &Args, task: &Who, syscall: u16, ret: i64, dir: u64) {
    if ret <= 0 {
        return;
    }
    let fd = args.get(0) as i32;
    let key = fileio_key(task.tgid, fd);
    // A receive is captured on DNS sockets only: the others leave after one look-up.
    if dir == payload::RECV
        // SAFETY: read only.
        && unsafe { FILEIO.get(key) }.is_none_or(|e| e.marks & fileio::DNS == 0)
    {
        return;
    }
    let mut c = Capture {
        buf: args.get(1),
        iovcnt: 0,
        moved: ret as u64,
        addr: 0,
        addrlen: 0,
        ret,
        dir,
        dev: 0,
        ino: 0,
        done: 0,
        msgs: 0,
        fd,
        syscall: syscall as u32,
        compat: args.compat as u32,
        run: task.run,
        tgid: task.tgid,
        _pad: 0,
    };
    if syscall == Syscall::Writev as u16 || syscall == Syscall::Readv as u16 {
        c.iovcnt = args.get(2);
    } else if syscall == Syscall::Sendto as u16 {
        c.addr = args.get(4);
        c.addrlen = args.get(5);
    } else if syscall == Syscall::Recvfrom as u16 {
        c.addr = args.get(4);
        let lenp = args.get(5);
        if c.addr != 0 && lenp != 0 {
            // SAFETY: a fault-tolerant read of the length the kernel wrote.
            c.addrlen = unsafe { bpf_probe_read_user(lenp as *const u32) }.unwrap_or(0) as u64;
        }
    } else if syscall == Syscall::Sendmsg as u16 || syscall == Syscall::Recvmsg as u16 {
        if !msghdr(&mut c, args.get(1)) {
            return;
        }
    } else if syscall != Syscall::Write as u16 && syscall != Syscall::Read as u16 {
        return;
    }
    let port = if dir == payload::SEND {
        port_of(c.addr, c.addrlen)
    } else {
        0
    };
    if !wanted(key, dir, port, &mut c) {
        return;
    }
    emit_payload(&c);
}

/// Reads a `msghdr`'s name and iovec array into `c`.
#[inline(always)]
fn msghdr(c: &mut Capture, m: u64) -> bool {
    let compat = c.compat != 0;
    // msghdr: name, namelen, iov, iovlen at 0, 8, 16, 24 (0, 4, 8, 12 through compat).
    let (nl, iov, cnt) = if compat { (4, 8, 12) } else { (8, 16, 24) };
    // Each read checked as it is made (see `iov_step`).
    let Some(name) = user_word(m, compat) else {
        return false;
    };
    let Some(iovp) = user_word(m + iov, compat) else {
        return false;
    };
    let Some(n) = user_word(m + cnt, compat) else {
        return false;
    };
    // SAFETY: a fault-tolerant read of the caller's msghdr.
    let namelen: u32 = unsafe { bpf_probe_read_user((m + nl) as *const u32) }.unwrap_or(0);
    c.addr = name;
    c.addrlen = if name == 0 { 0 } else { namelen as u64 };
    c.buf = iovp;
    c.iovcnt = n;
    n > 0
}

extern "C" fn mmsg_step(i: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back the caller's context.
    let c = unsafe { &mut *(ctx as *mut Capture) };
    let compat = c.compat != 0;
    // mmsghdr: a msghdr (56 bytes, 28 through compat), then msg_len.
    let size = if compat { 32 } else { 64 };
    let at = c.msgs + i as u64 * size;
    // SAFETY: a fault-tolerant read of the length the kernel wrote.
    let Ok(len) = (unsafe { bpf_probe_read_user((at + size - 8) as *const u32) }) else {
        count(c.run, counter::PAYLOAD_UNRECORDED);
        return 1;
    };
    if !msghdr(c, at) {
        return 0;
    }
    c.moved = len as u64;
    let port = if c.dir == payload::SEND {
        port_of(c.addr, c.addrlen)
    } else {
        0
    };
    // An addressed message of a sendmmsg goes out whatever its socket: it is a send to that
    // address (a `net` row), as an addressed sendto is.
    let addressed = c.dir == payload::SEND && c.addr != 0;
    if !wanted(fileio_key(c.tgid, c.fd), c.dir, port, c) && !addressed {
        return 0;
    }
    emit_payload(c);
    0
}

/// A successful `sendmmsg` or `recvmmsg`: each message (sent or received) is captured as
/// [`capture_one`] captures one.
#[inline(always)]
fn messages(args: &Args, task: &Who, syscall: u16, ret: i64) {
    if ret <= 0 {
        return;
    }
    let fd = args.get(0) as i32;
    let dir = if syscall == Syscall::Sendmmsg as u16 {
        payload::SEND
    } else {
        payload::RECV
    };
    // The socket's entry: made by the exit of its send (or its connect, for a receive).
    // SAFETY: read only.
    let Some(e) = (unsafe { FILEIO.get(fileio_key(task.tgid, fd)) }) else {
        return;
    };
    if e.class != fileio::SOCKET || dir == payload::RECV && e.marks & fileio::DNS == 0 {
        return;
    }
    let n = if ret > MMSGS as i64 {
        count(task.run, counter::PAYLOAD_UNRECORDED);
        MMSGS
    } else {
        ret as u32
    };
    let mut c = Capture {
        buf: 0,
        iovcnt: 0,
        moved: 0,
        addr: 0,
        addrlen: 0,
        ret,
        dir,
        dev: 0,
        ino: 0,
        done: 0,
        msgs: args.get(1),
        fd,
        syscall: syscall as u32,
        compat: args.compat as u32,
        run: task.run,
        tgid: task.tgid,
        _pad: 0,
    };
    loops::run!(
        MMSGS,
        n,
        mmsg_step,
        Capture,
        aet_loop_payload_mmsgs,
        crate::maps::legacy_slot::LOOP_PAYLOAD_MMSGS,
        &mut c
    );
}
