//! Unit tests of `rows`.

use aet_common::{Syscall, flags};

use super::*;
use crate::decode;
use crate::decode::tests::record_with;

fn comm(name: &str) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[..name.len()].copy_from_slice(name.as_bytes());
    c
}

/// A `/proc` of the test's making: one process (pid 40, child of 4, named "old"), one fd
/// link and one pidfd.
struct FakeProc;

impl ProcView for FakeProc {
    fn process(&self, pid: u32) -> (u32, [u8; 16]) {
        if pid == 40 {
            (4, comm("old"))
        } else {
            (0, [0; 16])
        }
    }
    fn fd_link(&self, pid: u32, fd: i32, dev: u64, ino: u64) -> Option<Vec<u8>> {
        ((pid, fd, ino) == (40, 7, 99) && dev != 0).then(|| b"/srv/key".to_vec())
    }
    fn pidfd_target(&self, pid: u32, fd: i32) -> Option<u32> {
        ((pid, fd) == (40, 5)).then_some(41)
    }
}

#[test]
fn what_no_record_carries_comes_from_the_proc_view() {
    let mut m = RowMaker::with_proc(WallClock::with_offset(0), Box::new(FakeProc));
    // A process that existed before the attach: its first row (no comm, no kernel ppid)
    // takes its parent and name from /proc.
    let open = record_with(
        EventKind::Open,
        Syscall::Openat,
        &[b"/etc/hosts", b"", b"", b"", b""],
        |h| {
            h.pid = 40;
            h.comm = [0; 16];
        },
    );
    let ev = decode::decode(&open).unwrap();
    let row = m.row(&ev);
    assert_eq!((row.ppid, &row.comm[..4]), (4, &b"old\0"[..]));
    // An fd that arrived over a socket, with no earlier row of its inode: named by its link
    // (in aet's own mount namespace).
    let ns = m.host_mntns();
    let received = record_with(EventKind::Fd, Syscall::Recvmsg, &[b""; 5], |h| {
        h.pid = 40;
        h.mntns = ns;
        h.fd = 7;
        h.aux = aet_common::fd_origin::RECEIVED;
        h.flags = flags::IDENTITY;
        h.dev = 1 << 20;
        h.ino = 99;
    });
    let ev = decode::decode(&received).unwrap();
    let row = m.row(&ev);
    assert_eq!(row.fd_origin, Some("received"));
    assert_eq!(row.resolved_path.as_deref(), Some(&b"/srv/key"[..]));
    assert_eq!(row.resolved_from, Some(ResolvedFrom::FdLink.name()));
    // pidfd_getfd through a pidfd opened before the attach: its target from /proc.
    let copied = record_with(EventKind::Fd, Syscall::PidfdGetfd, &[b""; 5], |h| {
        h.pid = 40;
        h.dirfd = 5;
        h.aux2 = 9;
        h.ret = 12;
    });
    let ev = decode::decode(&copied).unwrap();
    let row = m.row(&ev);
    assert_eq!(row.fd_origin, Some("copied"));
    assert_eq!((row.fd, row.source_fd), (Some(12), Some(9)));
    assert_eq!((row.target_pid, row.target_in_run), (Some(41), Some(false)));
}

#[test]
fn ppid_and_comm_come_from_the_recorded_tree() {
    let mut m = RowMaker::new(WallClock::with_offset(1000));
    // pid 10 (known to the kernel as a child of 1) execs python, then forks 77.
    let exec = record_with(
        EventKind::Exec,
        Syscall::Execve,
        &[b"/usr/bin/python3", b"", b"", b"", b""],
        |h| {
            h.ppid = 1;
            h.flags = flags::PPID_KERNEL;
            h.comm = comm("python3");
        },
    );
    let ev = decode::decode(&exec).unwrap();
    let row = m.row(&ev);
    assert_eq!((row.ppid, row.seq, row.ts_ns), (1, 0, 1005));
    let fork = record_with(EventKind::Fork, Syscall::None, &[b""; 5], |h| {
        h.aux = 77;
        h.ppid = 1;
        h.flags = flags::PPID_KERNEL;
        h.comm = comm("python3");
    });
    let ev = decode::decode(&fork).unwrap();
    assert_eq!(m.row(&ev).child_pid, Some(77));

    // The child opens a file after its creator died and init adopted it: the row still
    // names its creator, and its name (it has not exec'd) is its parent's.
    let open = record_with(
        EventKind::Open,
        Syscall::Openat,
        &[b"/x", b"", b"", b"", b""],
        |h| {
            h.pid = 77;
            h.comm = [0; 16];
        },
    );
    let ev = decode::decode(&open).unwrap();
    let row = m.row(&ev);
    assert_eq!(row.pid, 77);
    assert_eq!(row.ppid, 10, "creator recorded by the fork row");
    assert_eq!(&row.comm[..7], b"python3");
    assert_eq!(row.path.as_deref(), Some(&b"/x"[..]));
    assert_eq!(row.seq, 2);
}

#[test]
fn walks_become_resolved_paths() {
    let mut m = RowMaker::new(WallClock::with_offset(0));
    // A relative open the kernel resolved through the new file: the object's walk.
    let open = record_with(
        EventKind::Open,
        Syscall::Openat,
        &[
            b"../answers/key.txt",
            b"",
            b"",
            b"key.txt/answers/task/",
            b"",
        ],
        |h| {
            h.flags = flags::WALK_IS_OBJECT | flags::IDENTITY;
            h.walk_flags = aet_common::walk::PRESENT | aet_common::walk::REACHED_ROOT;
            h.dev = (254 << 20) | 1;
            h.ino = 77;
        },
    );
    let ev = decode::decode(&open).unwrap();
    let row = m.row(&ev);
    assert_eq!(
        row.resolved_path.as_deref(),
        Some(&b"/task/answers/key.txt"[..])
    );
    assert_eq!(row.resolved_from, Some("object"));
    assert_eq!(row.dev, Some(libc::makedev(254, 1)));
    // A failed open: the base directory the kernel walked, joined lexically.
    let failed = record_with(
        EventKind::Open,
        Syscall::Openat,
        &[b"../answers/nope", b"", b"", b"src/task/", b""],
        |h| {
            h.ret = -2;
            h.walk_flags = aet_common::walk::PRESENT | aet_common::walk::REACHED_ROOT;
        },
    );
    let ev = decode::decode(&failed).unwrap();
    let row = m.row(&ev);
    assert_eq!(
        row.resolved_path.as_deref(),
        Some(&b"/task/answers/nope"[..])
    );
    assert_eq!(row.resolved_from, Some("joined"));
    assert_eq!(row.resolved_partial, Some(false));
    // The io record of the opened file carries the path its inode was seen under.
    let io = record_with(EventKind::Io, Syscall::None, &[b""; 5], |h| {
        h.flags = flags::IDENTITY;
        h.dev = (254 << 20) | 1;
        h.ino = 77;
        h.aux = 100;
    });
    let ev = decode::decode(&io).unwrap();
    let row = m.row(&ev);
    assert_eq!(row.bytes_read, Some(100));
    assert_eq!(
        row.resolved_path.as_deref(),
        Some(&b"/task/answers/key.txt"[..])
    );
    assert_eq!(row.resolved_from, Some("inode"));
}

/// An io row is named as its own process's mount namespace shows the file: bwrap seeing it
/// under `/newroot/...` while it builds the view does not name the agent's read.
#[test]
fn io_rows_take_the_name_their_namespace_saw() {
    let mut m = RowMaker::new(WallClock::with_offset(0));
    let open_in = |ns: u32, walk: &'static [u8]| {
        record_with(
            EventKind::Open,
            Syscall::Openat,
            &[b"x", b"", b"", walk, b""],
            move |h| {
                h.mntns = ns;
                h.flags = flags::WALK_IS_OBJECT | flags::IDENTITY;
                h.walk_flags = aet_common::walk::PRESENT | aet_common::walk::REACHED_ROOT;
                h.dev = 7;
                h.ino = 9;
                h.ret = 3;
            },
        )
    };
    let setup = open_in(111, b"locale.alias/etc/newroot/");
    m.row(&decode::decode(&setup).unwrap());
    let agent = open_in(222, b"locale.alias/etc/");
    m.row(&decode::decode(&agent).unwrap());
    let io = |ns: u32| {
        record_with(EventKind::Io, Syscall::None, &[b""; 5], move |h| {
            h.mntns = ns;
            h.flags = flags::IDENTITY;
            h.dev = 7;
            h.ino = 9;
            h.aux = 10;
        })
    };
    let agent_io = io(222);
    let ev = decode::decode(&agent_io).unwrap();
    let row = m.row(&ev);
    assert_eq!(
        row.resolved_path.as_deref(),
        Some(&b"/etc/locale.alias"[..])
    );
    let setup_io = io(111);
    let ev = decode::decode(&setup_io).unwrap();
    let row = m.row(&ev);
    assert_eq!(
        row.resolved_path.as_deref(),
        Some(&b"/newroot/etc/locale.alias"[..])
    );
    // A namespace that never named the inode gets no name rather than another view's.
    let other_io = io(333);
    let ev = decode::decode(&other_io).unwrap();
    assert_eq!(m.row(&ev).resolved_path, None);
}

#[test]
fn exit_status_is_split_into_code_and_signal() {
    let mut m = RowMaker::new(WallClock::with_offset(0));
    let exit = record_with(EventKind::Exit, Syscall::None, &[b""; 5], |h| {
        h.ret = 3 << 8
    });
    let ev = decode::decode(&exit).unwrap();
    let row = m.row(&ev);
    assert_eq!((row.exit_code, row.exit_signal), (Some(3), None));
    let exit = record_with(EventKind::Exit, Syscall::None, &[b""; 5], |h| h.ret = 9);
    let ev = decode::decode(&exit).unwrap();
    let row = m.row(&ev);
    assert_eq!((row.exit_code, row.exit_signal), (None, Some(9)));
}
