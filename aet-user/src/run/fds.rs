//! The fds a command starts with: what aet hands it (recorded in the ledger's head), and the
//! hygiene that closes every other one in the child before exec.

use std::os::fd::RawFd;

use aet_ledger::metadata::InheritedFd;

/// The fds the command starts with: aet's stdin, stdout and stderr (every other is closed in
/// the child, see [`child_fd_hygiene`]), with what they name.
pub(super) fn inherited_fds() -> Vec<InheritedFd> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    (0..3)
        .filter_map(|fd: i32| {
            let link = format!("/proc/self/fd/{fd}");
            let m = std::fs::metadata(&link).ok()?;
            let t = m.file_type();
            let kind = if t.is_file() {
                "file"
            } else if t.is_dir() {
                "directory"
            } else if t.is_fifo() {
                "pipe"
            } else if t.is_socket() {
                "socket"
            } else if t.is_char_device() {
                "char"
            } else if t.is_block_device() {
                "block"
            } else {
                "other"
            };
            let path = std::fs::read_link(&link)
                .ok()
                .filter(|p| p.is_absolute())
                .map(aet_ledger::ppath::PPath);
            Some(InheritedFd {
                fd,
                dev: m.dev(),
                ino: m.ino(),
                kind: kind.into(),
                path,
            })
        })
        .collect()
}

/// aet's fds that the command would inherit (above stderr, not close-on-exec), as ranges for
/// `close_range`: a harness's stray fds, which must never leak into the agent. Read in the
/// parent, where reading a directory is allowed; fds aet opens meanwhile are close-on-exec (Rust
/// opens every fd that way), so the list cannot miss one.
pub(super) fn inherited_fd_ranges() -> Vec<(libc::c_uint, libc::c_uint)> {
    let mut fds: Vec<libc::c_uint> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .filter(|&fd: &libc::c_uint| fd > 2)
                // SAFETY: F_GETFD reads a flag; a closed fd (the directory's own) gives -1.
                .filter(|&fd| unsafe { libc::fcntl(fd as RawFd, libc::F_GETFD) } == 0)
                .collect()
        })
        .unwrap_or_default();
    fds.sort_unstable();
    let mut ranges: Vec<(libc::c_uint, libc::c_uint)> = Vec::new();
    for fd in fds {
        match ranges.last_mut() {
            Some((_, last)) if *last + 1 == fd => *last = fd,
            _ => ranges.push((fd, fd)),
        }
    }
    ranges
}

/// In the command's child, before exec: closes the inherited fds `strays` (see
/// [`inherited_fd_ranges`]; the command starts with stdio only), then gives the child an fd table
/// sized to what is left.
///
/// The table a forked child gets is as large as its parent's highest open fd (one stray fd 251
/// of a harness is enough for 256 slots) and never shrinks, not even at exec. The monitor reaches
/// a file in the kernel's embedded 64-slot array with checked loads, and in a larger table only
/// with helper reads, which costs the command about 300 ns more per recorded syscall.
/// `unshare(CLONE_FILES)` copies the table, sized to the fds still open, but only when it is
/// shared: so it is shared for a moment with a helper process that waits to be killed. The
/// helper is made before the child joins the run's cgroup, so the monitor does not see it.
///
/// Async-signal-safe: only close_range, getpid, clone, prctl, unshare, kill and waitpid.
pub(super) fn child_fd_hygiene(strays: &[(libc::c_uint, libc::c_uint)]) {
    // SAFETY: plain syscalls on fds of this (forked, single-threaded) process. The helper
    // continues on its own copy of this stack (no CLONE_VM) and only calls pause(2).
    unsafe {
        for &(first, last) in strays {
            libc::syscall(libc::SYS_close_range, first, last, 0);
        }
        // No exit signal: the helper's death raises no SIGCHLD in a process whose handlers are
        // still aet's.
        let parent = libc::getpid();
        let helper = libc::syscall(
            libc::SYS_clone,
            libc::CLONE_FILES as libc::c_long,
            0,
            0,
            0,
            0,
        );
        if helper == 0 {
            // Never outlive this child, even if it is killed before it kills the helper.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::_exit(0);
            }
            loop {
                libc::pause();
            }
        }
        libc::unshare(libc::CLONE_FILES);
        if helper > 0 {
            libc::kill(helper as libc::pid_t, libc::SIGKILL);
            libc::waitpid(helper as libc::pid_t, std::ptr::null_mut(), libc::__WALL);
        }
    }
}
