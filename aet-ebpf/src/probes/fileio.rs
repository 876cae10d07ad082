//! Byte accounting per open fd: reads and writes add to the fd's entry in the kernel, and one
//! `io` record per open file goes out at `close`, `close_range`, exec or exit. A per-process fd
//! bitmap lets closes and dups of unaccounted fds leave after one lookup.

use core::ffi::c_void;

use aet_common::{
    EventKind, FileIo, Shape, Syscall, counter, fileio, flags, io,
    uapi::{F_DUPFD, F_DUPFD_CLOEXEC},
};

use super::{
    args::Args,
    handover::{fanotify_read, is_fanotify},
};
use crate::{
    loops,
    maps::{FDMASK, FILEIO, atomic_add, count},
    record::{fill_header, header, scratch, send},
    task::{FileRef, Task, fd_file, identity},
    walk::record_file,
};

#[inline(always)]
pub(crate) fn fileio_key(tgid: u32, fd: i32) -> u64 {
    (tgid as u64) << 32 | fd as u32 as u64
}

/// The bit of `fd` in `FDMASK`.
#[inline(always)]
pub(crate) fn fd_bit(fd: i32) -> u64 {
    if (0..63).contains(&fd) {
        1u64 << fd
    } else {
        1u64 << 63
    }
}

/// Notes that `fd` of `tgid` has (`set`) or no longer has an accounting entry.
#[inline(always)]
pub(crate) fn fdmask_update(task: &Task, fd: i32, set: bool) {
    let tgid = task.tgid;
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
        None if set && FDMASK.insert(tgid, bit, 0).is_err() => {
            count(task.run, counter::FILEIO_FULL)
        }
        None => {}
    }
}

/// The fd's accounting entry, created on first use for an fd opened before aet saw it (inherited,
/// duplicated before monitoring, or opened through io_uring).
#[inline(always)]
pub(crate) fn fileio_entry(task: &Task, fd: i32) -> Option<*mut FileIo> {
    let key = fileio_key(task.tgid, fd);
    if let Some(p) = FILEIO.get_ptr_mut(key) {
        return Some(p);
    }
    if aet_fileio_create(fd, task.run) == 0 {
        return None;
    }
    FILEIO.get_ptr_mut(key)
}

/// Creates the accounting entry of fd `fd` of the current process (whose run is `run`) from its
/// file's identity; returns 1 when it did. Global, so verified once per program rather than at
/// each of the places a read, write or dup first meets an fd.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn aet_fileio_create(fd: i32, run: u32) -> i32 {
    let mut task = Task::current();
    task.run = run;
    if !fileio_tracked_fd(fd) {
        count(task.run, counter::FILEIO_FULL);
        return 0;
    }
    let key = fileio_key(task.tgid, fd);
    let file = fd_file(&task, fd as i64);
    let Some((dev, ino, mnt_id, mut class)) = identity(file) else {
        return 0;
    };
    if class == fileio::IGNORED
        && let FileRef::Btf(f) = file
        && is_fanotify(f)
    {
        class = fileio::FANOTIFY;
    }
    let v = FileIo {
        dev,
        ino,
        mnt_id,
        class,
        ..FileIo::default()
    };
    if FILEIO.insert(key, v, 0).is_err() {
        count(task.run, counter::FILEIO_FULL);
        return 0;
    }
    fdmask_update(&task, fd, true);
    1
}

/// Adds `bytes` moved through `fd` to its accounting; returns the fd's class.
#[inline(always)]
pub(crate) fn fileio_add(task: &Task, fd: i32, bytes: i64, write: bool) -> u32 {
    if bytes <= 0 {
        return fileio::IGNORED;
    }
    let Some(p) = fileio_entry(task, fd) else {
        return fileio::IGNORED;
    };
    // SAFETY: a map value, updated atomically (threads share fds).
    unsafe {
        let class = (*p).class;
        if class != fileio::REGULAR {
            return class;
        }
        let field: *mut u64 = if write {
            &mut (*p).bytes_written
        } else {
            &mut (*p).bytes_read
        };
        atomic_add(field, bytes as u64);
    }
    fileio::REGULAR
}

/// Emits an io record for a regular file's accounting entry.
#[inline(always)]
pub(crate) fn emit_io(task: &mut Task, fd: i32, e: &FileIo, at_exit: bool) {
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

/// Emits and forgets the accounting of fd `fd` of the current process (whose run is `run`).
/// Global, so that a flush's loop verifies it once (scalar arguments only: a global function of
/// every kernel aet runs on).
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn aet_fileio_close(fd: i32, run: u32, at_exit: u32) -> i32 {
    let mut task = Task::current();
    task.run = run;
    fileio_close(&mut task, fd, at_exit != 0);
    0
}

/// Emits and forgets the accounting of `fd`.
#[inline(always)]
pub(crate) fn fileio_close(task: &mut Task, fd: i32, at_exit: bool) {
    let key = fileio_key(task.tgid, fd);
    // SAFETY: copied out before the entry is removed.
    if let Some(e) = unsafe { FILEIO.get(key) }.copied() {
        let _ = FILEIO.remove(key);
        fdmask_update(task, fd, false);
        emit_io(task, fd, &e, at_exit);
    }
}

/// The `for_each` callback that emits and forgets a process's entries (at exit, exec or
/// close_range).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Flush {
    pub(crate) tgid: u32,
    /// The process's run.
    pub(crate) run: u32,
    pub(crate) first: u32,
    pub(crate) last: u32,
    pub(crate) at_exit: u32,
}

#[cfg(not(feature = "legacy"))]
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
    task.run = f.run;
    emit_io(&mut task, fd as i32, &e, f.at_exit != 0);
    0
}

/// Emits and forgets every entry of the process in `first..=last`: a scan of the whole map.
#[cfg(not(feature = "legacy"))]
#[inline(always)]
fn flush_all(f: &mut Flush) {
    // SAFETY: map, callback and context are valid for the call.
    unsafe {
        aya_ebpf::helpers::generated::bpf_for_each_map_elem(
            &FILEIO as *const _ as *mut c_void,
            flush_step as *mut c_void,
            f as *mut Flush as *mut c_void,
            0,
        )
    };
}

/// Emits and forgets every entry of the process in `first..=last`, without
/// `bpf_for_each_map_elem` (5.13): fds 0 to [`LEGACY_FDS`]` - 1`, one lookup each. An entry
/// is never made for a higher fd in this object ([`fileio_tracked_fd`]).
#[cfg(feature = "legacy")]
#[inline(always)]
fn flush_all(f: &mut Flush) {
    loops::run!(
        LEGACY_FDS,
        LEGACY_FDS,
        flush_any_fd,
        Flush,
        aet_loop_flush_all,
        crate::maps::legacy_slot::LOOP_FLUSH_ALL,
        f
    );
}

/// Fds whose bytes the legacy object accounts: its flush looks each up, so a higher one gets no
/// entry (counted as `FILEIO_FULL`: its bytes are not counted).
pub(crate) const LEGACY_FDS: u32 = 1024;

/// Whether this object keeps byte accounting for `fd`.
#[inline(always)]
pub(crate) fn fileio_tracked_fd(fd: i32) -> bool {
    !cfg!(feature = "legacy") || (fd >= 0 && (fd as u32) < LEGACY_FDS)
}

#[cfg(feature = "legacy")]
#[inline(never)]
extern "C" fn flush_any_fd(i: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: the loop hands back the caller's context.
    let f = unsafe { &*(ctx as *const Flush) };
    if i < f.first || i > f.last {
        return 0;
    }
    aet_fileio_close(i as i32, f.run, f.at_exit);
    0
}

/// Emits and forgets the entries of fds `first..=last` of `tgid`: through the fd mask, and a
/// scan of the map only when the process had an entry for an fd above 62.
#[inline(always)]
pub(crate) fn fileio_flush(task: &Task, first: u32, last: u32, at_exit: bool) {
    let tgid = task.tgid;
    // SAFETY: copied out.
    let Some(mask) = (unsafe { FDMASK.get(tgid) }).copied() else {
        return;
    };
    let mut f = Flush {
        tgid,
        run: task.run,
        first,
        last,
        at_exit: at_exit as u32,
    };
    if mask & (1u64 << 63) != 0 {
        flush_all(&mut f);
    } else if mask != 0 {
        loops::run!(
            63,
            63,
            flush_fd,
            Flush,
            aet_loop_flush,
            crate::maps::legacy_slot::LOOP_FLUSH,
            &mut f
        );
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
    aet_fileio_close(i as i32, f.run, f.at_exit);
    0
}

/// Accounting syscalls: reads and writes add bytes, closes emit them. Returns whether the fd
/// read or written is a socket (whose payload may be captured).
#[inline(always)]
pub(crate) fn record_io(
    args: &Args,
    task: &mut Task,
    shape: &Shape,
    syscall: u16,
    ret: i64,
) -> bool {
    let fd = args.get(shape.fd) as i32;
    match shape.io {
        io::READ => {
            let class = fileio_add(task, fd, ret, false);
            // A fanotify group's events carry fds: each is recorded.
            if class == fileio::FANOTIFY && syscall == Syscall::Read as u16 {
                fanotify_read(task, syscall, args.get(1), ret);
            }
            return class == fileio::SOCKET;
        }
        io::WRITE => {
            return fileio_add(task, fd, ret, true) == fileio::SOCKET;
        }
        io::SENDFILE => {
            fileio_add(task, args.get(1) as i32, ret, false);
            fileio_add(task, args.get(0) as i32, ret, true);
        }
        io::COPY => {
            fileio_add(task, args.get(0) as i32, ret, false);
            fileio_add(task, args.get(2) as i32, ret, true);
        }
        io::TEE => {
            fileio_add(task, args.get(0) as i32, ret, false);
            fileio_add(task, args.get(1) as i32, ret, true);
        }
        io::CLOSE if ret == 0 => fileio_close(task, fd, false),
        io::CLOSE_RANGE if ret == 0 => {
            fileio_flush(task, args.get(0) as u32, args.get(1) as u32, false);
        }
        io::DUP | io::FCNTL if ret >= 0 => {
            if shape.io == io::FCNTL {
                let cmd = args.get(1);
                if cmd != F_DUPFD && cmd != F_DUPFD_CLOEXEC {
                    return false;
                }
            }
            let newfd = ret as i32;
            // dup2/dup3 onto an open fd close it first.
            fileio_close(task, newfd, false);
            let Some(p) = fileio_entry(task, fd) else {
                return false;
            };
            // SAFETY: a map value, copied.
            let mut v = unsafe { *p };
            v.bytes_read = 0;
            v.bytes_written = 0;
            v.marks = 0;
            if FILEIO.insert(fileio_key(task.tgid, newfd), v, 0).is_err() {
                count(task.run, counter::FILEIO_FULL);
            } else {
                fdmask_update(task, newfd, true);
            }
        }
        io::LIST if ret >= 0 => {
            let Some(p) = fileio_entry(task, fd) else {
                return false;
            };
            // SAFETY: a map value.
            let e = unsafe { &mut *p };
            if e.class != fileio::DIRECTORY || e.marks & fileio::LISTED != 0 {
                return false;
            }
            e.marks |= fileio::LISTED;
            let Some(s) = scratch() else { return false };
            fill_header(header(s), task, EventKind::List, syscall, ret);
            header(s).fd = fd;
            record_file(s, task, fd_file(task, fd as i64));
            send(s);
        }
        _ => {}
    }
    false
}
