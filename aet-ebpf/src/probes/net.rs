//! Network use: `connect`, `bind`, `listen`, `accept`/`accept4`, and `sendto`/`sendmsg` with a
//! destination, each a `net` record with the socket address as raw bytes (userspace decodes the
//! family, address and port, or the unix path). A send on a connected socket names no
//! destination and makes no record (its connect did).

use core::ffi::c_void;

use aet_common::{EventKind, SOCKADDR_CAP, Syscall, flags, section};
use aya_ebpf::helpers::{bpf_probe_read_user, generated};

use super::{args::Args, fileio::fileio_entry, payload};
use crate::{
    record::{fill_header, header, scratch, section_start, send, user_word},
    task::Task,
};

/// `net` syscall exits.
#[inline(always)]
pub(crate) fn record_net(args: &Args, task: &mut Task, syscall: u16, ret: i64) {
    // The address and its length, by syscall.
    let (addr, len) = if syscall == Syscall::Connect as u16 || syscall == Syscall::Bind as u16 {
        (args.get(1), args.get(2))
    } else if syscall == Syscall::Sendto as u16 {
        (args.get(4), args.get(5))
    } else if syscall == Syscall::Sendmsg as u16 {
        // msghdr: msg_name and msg_namelen first (a pointer, then a 4-byte length).
        let m = args.get(1);
        let at = if args.compat { 4 } else { 8 };
        // SAFETY: a fault-tolerant read of the caller's msghdr.
        let namelen: u32 = unsafe { bpf_probe_read_user((m + at) as *const u32) }.unwrap_or(0);
        (user_word(m, args.compat).unwrap_or(0), namelen as u64)
    } else if syscall == Syscall::Accept as u16 || syscall == Syscall::Accept4 as u16 {
        // The peer's address, as the kernel wrote it (its length through the pointer).
        let lenp = args.get(2);
        // SAFETY: a fault-tolerant read of the length the kernel wrote.
        let n: u32 = if lenp == 0 {
            0
        } else {
            unsafe { bpf_probe_read_user(lenp as *const u32) }.unwrap_or(0)
        };
        (args.get(1), n as u64)
    } else {
        (0, 0)
    };
    let sends = syscall == Syscall::Sendto as u16 || syscall == Syscall::Sendmsg as u16;
    // The socket's accounting entry, made on first sight: its identity, and the marks of its
    // payload capture.
    let entry = if ret >= 0 || ret == -115 {
        fileio_entry(task, args.get(0) as i32)
    } else {
        None
    };
    // (Sends' payloads are captured after this exit: `payload::exit`.)
    if syscall == Syscall::Sendmmsg as u16 {
        // Each message a payload record (an addressed one names its destination).
        return;
    } else if syscall == Syscall::Connect as u16 {
        payload::connected(entry, addr, len, ret);
    }
    // A send without a destination is a send on a connected socket: no record.
    if sends && addr == 0 {
        return;
    }
    let Some(s) = scratch() else { return };
    fill_header(header(s), task, EventKind::Net, syscall, ret);
    let h = header(s);
    if args.compat {
        h.flags |= flags::COMPAT;
    }
    h.fd = args.get(0) as i32;
    h.aux = len;
    // The socket's identity: what its later payload records are matched to.
    if let Some(p) = entry {
        // SAFETY: a map value, read.
        let e = unsafe { &*p };
        let h = header(s);
        h.dev = e.dev;
        h.ino = e.ino;
        h.mnt_id = e.mnt_id;
        h.flags |= flags::IDENTITY;
    }
    let accept = syscall == Syscall::Accept as u16 || syscall == Syscall::Accept4 as u16;
    if addr != 0 && len > 0 && !(accept && ret < 0) {
        let start = section_start(header(s));
        let n = if len > SOCKADDR_CAP as u64 {
            SOCKADDR_CAP as u64
        } else {
            len
        };
        // The verifier needs the length bounded in the register the helper gets.
        let n = core::hint::black_box(n) & 0x7f;
        if start <= aet_common::DATA_LIMIT && n > 0 {
            let dst = s.buf[start..].as_mut_ptr();
            // SAFETY: dst has DATA_CAP - DATA_LIMIT bytes of room; the helper is fault-tolerant.
            let r = unsafe {
                generated::bpf_probe_read_user(dst as *mut c_void, n as u32, addr as *const c_void)
            };
            if r == 0 {
                header(s).len[section::PATH] = n as u16;
            } else {
                header(s).flags |= flags::PATH_UNREADABLE;
            }
        }
    }
    send(s);
}
