//! The syscalls aet decodes, in aet's own numbering: each one's name, its kind of row and its
//! argument shape (which argument is a path, a dirfd, flags...), and the table that maps an
//! architecture's numbers to them.

use crate::events::{EventKind, io, obj};

/// How the programs decode one syscall's arguments. Argument indexes are 0..5; -1 means none.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// An [`EventKind`] number (0 for pure accounting syscalls).
    pub kind: u8,
    pub dirfd: i8,
    pub path: i8,
    pub flags: i8,
    pub mode: i8,
    pub dirfd2: i8,
    pub path2: i8,
    /// The fd argument (fd-based syscalls, accounting).
    pub fd: i8,
    /// One of [`obj`].
    pub obj: u8,
    /// The user buffer argument for [`obj::STAT`]/[`obj::STATX`].
    pub buf: i8,
    /// One of [`io`].
    pub io: u8,
    /// Bits from [`shape`].
    pub bits: u8,
}

/// Bits of [`Shape::bits`].
pub mod shape {
    /// The first path is stored verbatim (a symlink's target), never resolved.
    pub const PATH_VERBATIM: u8 = 1 << 0;
    /// The flags argument carries `AT_EMPTY_PATH`: an empty path means the fd itself.
    pub const AT_FLAGS: u8 = 1 << 1;
    /// The second "path" is stored verbatim, never resolved: it is not a path (an extended
    /// attribute's name).
    pub const PATH2_VERBATIM: u8 = 1 << 2;
}

const N: i8 = -1;

const fn sh(kind: EventKind, dirfd: i8, path: i8, flags: i8, mode: i8) -> Shape {
    Shape {
        kind: kind as u8,
        dirfd,
        path,
        flags,
        mode,
        dirfd2: N,
        path2: N,
        fd: N,
        obj: obj::NONE,
        buf: N,
        io: io::NONE,
        bits: 0,
    }
}

const fn two(kind: EventKind, dirfd: i8, path: i8, dirfd2: i8, path2: i8, flags: i8) -> Shape {
    let mut s = sh(kind, dirfd, path, flags, N);
    s.dirfd2 = dirfd2;
    s.path2 = path2;
    s
}

const fn with_obj(mut s: Shape, o: u8) -> Shape {
    s.obj = o;
    s
}

const fn with_buf(mut s: Shape, o: u8, buf: i8) -> Shape {
    s.obj = o;
    s.buf = buf;
    s
}

const fn fdop(kind: EventKind, fd: i8, mode: i8) -> Shape {
    let mut s = sh(kind, N, N, N, mode);
    s.fd = fd;
    s.obj = obj::ARG_FD;
    s
}

/// A call whose fd argument is recorded but is not its object.
const fn with_fd(mut s: Shape, fd: i8) -> Shape {
    s.fd = fd;
    s
}

/// An fd-based extended-attribute call: the file of fd 0, the attribute's name verbatim.
const fn xattr_fd(kind: EventKind, name: i8) -> Shape {
    let mut s = fdop(kind, 0, N);
    s.path2 = name;
    s.bits |= shape::PATH2_VERBATIM;
    s
}

const fn acct(io: u8, fd: i8) -> Shape {
    let mut s = sh(EventKind::Open, N, N, N, N);
    s.kind = 0;
    s.fd = fd;
    s.io = io;
    s
}

const fn bits(mut s: Shape, b: u8) -> Shape {
    s.bits |= b;
    s
}

macro_rules! syscalls {
    ($($name:ident = $num:literal, $text:literal, $shape:expr;)*) => {
        /// The syscalls aet decodes (aet's own numbering, not the architecture's).
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Syscall {
            /// No syscall: scheduler events (fork, exit) and io_uring requests.
            None = 0,
            $($name = $num,)*
        }

        impl Syscall {
            /// Decodes a syscall number coming from the kernel.
            pub const fn from_u8(v: u8) -> Option<Self> {
                Some(match v {
                    0 => Self::None,
                    $($num => Self::$name,)*
                    _ => return None,
                })
            }

            /// The name used in the ledger's `syscall` column (`None` for scheduler events).
            pub const fn name(self) -> Option<&'static str> {
                Some(match self {
                    Self::None => return None,
                    $(Self::$name => $text,)*
                })
            }

            /// The syscall a ledger's `syscall` column names.
            pub fn from_name(name: &[u8]) -> Option<Self> {
                Some(match core::str::from_utf8(name).ok()? {
                    $($text => Self::$name,)*
                    _ => return None,
                })
            }

            /// The syscall's [`Shape`].
            pub const fn shape(self) -> Shape {
                SHAPES[self as usize]
            }
        }

        /// [`Shape`]s indexed by [`Syscall`] number.
        pub const SHAPES: [Shape; SYSCALL_COUNT] = {
            let mut t = [sh(EventKind::Open, N, N, N, N); SYSCALL_COUNT];
            t[0].kind = 0;
            $(t[$num] = $shape;)*
            t
        };
    };
}

/// Size of [`SHAPES`] (syscall numbers are below it).
pub const SYSCALL_COUNT: usize = 128;

use EventKind::*;

syscalls! {
    Open = 1, "open", with_obj(sh(Open, N, 0, 1, 2), obj::RET_FD);
    Openat = 2, "openat", with_obj(sh(Open, 0, 1, 2, 3), obj::RET_FD);
    Openat2 = 3, "openat2", with_obj(sh(Open, 0, 1, N, N), obj::RET_FD);
    Creat = 4, "creat", with_obj(sh(Open, N, 0, N, 1), obj::RET_FD);
    Execve = 5, "execve", sh(Exec, N, 0, N, N);
    Execveat = 6, "execveat", sh(Exec, 0, 1, 4, N);
    Stat = 7, "stat", with_buf(sh(EventKind::Stat, N, 0, N, N), obj::STAT, 1);
    Lstat = 8, "lstat", with_buf(sh(EventKind::Stat, N, 0, N, N), obj::STAT, 1);
    Newfstatat = 9, "newfstatat", bits(with_buf(sh(EventKind::Stat, 0, 1, 3, N), obj::STAT, 2), shape::AT_FLAGS);
    Statx = 10, "statx", bits(with_buf(sh(EventKind::Stat, 0, 1, 2, N), obj::STATX, 4), shape::AT_FLAGS);
    Access = 11, "access", sh(EventKind::Stat, N, 0, N, 1);
    Faccessat = 12, "faccessat", sh(EventKind::Stat, 0, 1, N, 2);
    Faccessat2 = 13, "faccessat2", bits(sh(EventKind::Stat, 0, 1, 3, 2), shape::AT_FLAGS);
    Readlink = 14, "readlink", sh(EventKind::Stat, N, 0, N, N);
    Readlinkat = 15, "readlinkat", sh(EventKind::Stat, 0, 1, N, N);
    Rename = 16, "rename", two(Modify, N, 0, N, 1, N);
    Renameat = 17, "renameat", two(Modify, 0, 1, 2, 3, N);
    Renameat2 = 18, "renameat2", two(Modify, 0, 1, 2, 3, 4);
    Unlink = 19, "unlink", sh(Modify, N, 0, N, N);
    Unlinkat = 20, "unlinkat", sh(Modify, 0, 1, 2, N);
    Link = 21, "link", two(Modify, N, 0, N, 1, N);
    Linkat = 22, "linkat", two(Modify, 0, 1, 2, 3, 4);
    Symlink = 23, "symlink", bits(two(Modify, N, 0, N, 1, N), shape::PATH_VERBATIM);
    Symlinkat = 24, "symlinkat", bits(two(Modify, N, 0, 1, 2, N), shape::PATH_VERBATIM);
    Mkdir = 25, "mkdir", sh(Modify, N, 0, N, 1);
    Mkdirat = 26, "mkdirat", sh(Modify, 0, 1, N, 2);
    Rmdir = 27, "rmdir", sh(Modify, N, 0, N, N);
    Truncate = 28, "truncate", sh(Modify, N, 0, N, N);
    Ftruncate = 29, "ftruncate", fdop(Modify, 0, N);
    Chmod = 30, "chmod", sh(Modify, N, 0, N, 1);
    Fchmod = 31, "fchmod", fdop(Modify, 0, 1);
    Fchmodat = 32, "fchmodat", sh(Modify, 0, 1, N, 2);
    Fchmodat2 = 33, "fchmodat2", bits(sh(Modify, 0, 1, 3, 2), shape::AT_FLAGS);
    Chown = 34, "chown", sh(Modify, N, 0, N, N);
    Fchown = 35, "fchown", fdop(Modify, 0, N);
    Lchown = 36, "lchown", sh(Modify, N, 0, N, N);
    Fchownat = 37, "fchownat", bits(sh(Modify, 0, 1, 4, N), shape::AT_FLAGS);
    Mknod = 38, "mknod", sh(Modify, N, 0, N, 1);
    Mknodat = 39, "mknodat", sh(Modify, 0, 1, N, 2);
    Chdir = 40, "chdir", with_obj(sh(EventKind::Chdir, N, 0, N, N), obj::PWD);
    Fchdir = 41, "fchdir", with_obj(fdop(EventKind::Chdir, 0, N), obj::PWD);
    OpenByHandleAt = 42, "open_by_handle_at", with_obj(sh(Open, 0, N, 2, N), obj::RET_FD);
    NameToHandleAt = 43, "name_to_handle_at", bits(sh(EventKind::Stat, 0, 1, 4, N), shape::AT_FLAGS);
    MemfdCreate = 44, "memfd_create", bits(with_obj(sh(Memfd, N, 0, 1, N), obj::RET_FD), shape::PATH_VERBATIM);
    Mmap = 45, "mmap", fdop(EventKind::Mmap, 4, N);
    IoUringSetup = 46, "io_uring_setup", sh(IoUring, N, N, N, N);
    IoUringEnter = 47, "io_uring_enter", sh(IoUring, N, N, N, N);
    IoUringRegister = 48, "io_uring_register", sh(IoUring, N, N, N, N);
    Chroot = 49, "chroot", sh(Mount, N, 0, N, N);
    PivotRoot = 50, "pivot_root", two(Mount, N, 0, N, 1, N);
    Mount = 51, "mount", bits(two(EventKind::Mount, N, 0, N, 1, 3), shape::PATH_VERBATIM);
    Umount2 = 52, "umount2", sh(EventKind::Mount, N, 0, 1, N);
    Utimensat = 53, "utimensat", bits(sh(Modify, 0, 1, 3, N), shape::AT_FLAGS);
    Read = 54, "read", acct(io::READ, 0);
    Write = 55, "write", acct(io::WRITE, 0);
    Pread64 = 56, "pread64", acct(io::READ, 0);
    Pwrite64 = 57, "pwrite64", acct(io::WRITE, 0);
    Readv = 58, "readv", acct(io::READ, 0);
    Writev = 59, "writev", acct(io::WRITE, 0);
    Preadv = 60, "preadv", acct(io::READ, 0);
    Pwritev = 61, "pwritev", acct(io::WRITE, 0);
    Preadv2 = 62, "preadv2", acct(io::READ, 0);
    Pwritev2 = 63, "pwritev2", acct(io::WRITE, 0);
    Sendfile = 64, "sendfile", acct(io::SENDFILE, 1);
    CopyFileRange = 65, "copy_file_range", acct(io::COPY, 0);
    Close = 66, "close", acct(io::CLOSE, 0);
    Getdents64 = 67, "getdents64", acct(io::LIST, 0);
    Dup = 68, "dup", acct(io::DUP, 0);
    Dup2 = 69, "dup2", acct(io::DUP, 0);
    Dup3 = 70, "dup3", acct(io::DUP, 0);
    CloseRange = 71, "close_range", acct(io::CLOSE_RANGE, 0);
    Fcntl = 72, "fcntl", acct(io::FCNTL, 0);
    Getdents = 73, "getdents", acct(io::LIST, 0);
    Setxattr = 74, "setxattr", bits(two(Modify, N, 0, N, 1, 4), shape::PATH2_VERBATIM);
    Lsetxattr = 75, "lsetxattr", bits(two(Modify, N, 0, N, 1, 4), shape::PATH2_VERBATIM);
    Fsetxattr = 76, "fsetxattr", xattr_fd(Modify, 1);
    Removexattr = 77, "removexattr", bits(two(Modify, N, 0, N, 1, N), shape::PATH2_VERBATIM);
    Lremovexattr = 78, "lremovexattr", bits(two(Modify, N, 0, N, 1, N), shape::PATH2_VERBATIM);
    Fremovexattr = 79, "fremovexattr", xattr_fd(Modify, 1);
    Setxattrat = 80, "setxattrat", bits(two(Modify, 0, 1, N, 3, 2), shape::PATH2_VERBATIM | shape::AT_FLAGS);
    Removexattrat = 81, "removexattrat", bits(two(Modify, 0, 1, N, 3, 2), shape::PATH2_VERBATIM | shape::AT_FLAGS);
    Getxattr = 82, "getxattr", bits(two(EventKind::Stat, N, 0, N, 1, N), shape::PATH2_VERBATIM);
    Lgetxattr = 83, "lgetxattr", bits(two(EventKind::Stat, N, 0, N, 1, N), shape::PATH2_VERBATIM);
    Fgetxattr = 84, "fgetxattr", xattr_fd(EventKind::Stat, 1);
    Listxattr = 85, "listxattr", sh(EventKind::Stat, N, 0, N, N);
    Llistxattr = 86, "llistxattr", sh(EventKind::Stat, N, 0, N, N);
    Flistxattr = 87, "flistxattr", fdop(EventKind::Stat, 0, N);
    Getxattrat = 88, "getxattrat", bits(two(EventKind::Stat, 0, 1, N, 3, 2), shape::PATH2_VERBATIM | shape::AT_FLAGS);
    Listxattrat = 89, "listxattrat", bits(sh(EventKind::Stat, 0, 1, 2, N), shape::AT_FLAGS);
    Splice = 90, "splice", acct(io::COPY, 0);
    Tee = 91, "tee", acct(io::TEE, 0);
    Vmsplice = 92, "vmsplice", acct(io::WRITE, 0);
    Recvmsg = 93, "recvmsg", with_fd(sh(Fd, N, N, N, N), 0);
    Recvmmsg = 94, "recvmmsg", with_fd(sh(Fd, N, N, N, N), 0);
    PidfdGetfd = 95, "pidfd_getfd", with_obj(sh(Fd, N, N, 2, N), obj::RET_FD);
    PidfdOpen = 96, "pidfd_open", sh(Process, N, N, 1, N);
    ProcessVmReadv = 97, "process_vm_readv", sh(Process, N, N, 5, N);
    ProcessVmWritev = 98, "process_vm_writev", sh(Process, N, N, 5, N);
    Ptrace = 99, "ptrace", sh(Process, N, N, N, N);
    FanotifyInit = 100, "fanotify_init", sh(Watch, N, N, 0, N);
    FanotifyMark = 101, "fanotify_mark", with_fd(sh(Watch, 3, 4, 1, N), 0);
    InotifyAddWatch = 102, "inotify_add_watch", with_fd(sh(Watch, N, 1, N, N), 0);
    Connect = 103, "connect", with_fd(sh(Net, N, N, N, N), 0);
    Bind = 104, "bind", with_fd(sh(Net, N, N, N, N), 0);
    Listen = 105, "listen", with_fd(sh(Net, N, N, N, N), 0);
    Accept = 106, "accept", with_fd(sh(Net, N, N, N, N), 0);
    Accept4 = 107, "accept4", with_fd(sh(Net, N, N, 3, N), 0);
    Sendto = 108, "sendto", with_fd(sh(Net, N, N, 3, N), 0);
    Sendmsg = 109, "sendmsg", with_fd(sh(Net, N, N, 2, N), 0);
    // No row: a successful bpf() by a task of a run is counted (`bpf_calls`), since it can
    // change the monitor's own maps.
    Bpf = 110, "bpf", unrecorded();
    // Receives and sends whose payload may name hosts (DNS answers, batched DNS queries): no
    // row of their own.
    Recvfrom = 111, "recvfrom", acct(io::READ, 0);
    Sendmmsg = 112, "sendmmsg", with_fd(sh(Net, N, N, 3, N), 0);
}

/// A syscall that is dispatched but makes no row.
const fn unrecorded() -> Shape {
    let mut s = sh(Open, N, N, N, N);
    s.kind = 0;
    s
}

/// Number of syscall numbers the dispatch table `SYSCALLS` covers (native and compat).
pub const SYSCALL_TABLE_SIZE: u32 = 1024;

/// Packs the dispatch table entry for a syscall number: the [`Syscall`] it is natively in the
/// low byte, and the one it is through the compat ABI in the high byte (0: not recorded).
pub const fn syscall_entry(native: Syscall, compat: Syscall) -> u16 {
    (native as u16) | ((compat as u16) << 8)
}
