//! Types shared by aet's eBPF programs (`aet-ebpf`) and its userspace (`aet-user`).
//!
//! Everything here crosses the kernel/user boundary as raw bytes, so every type is `#[repr(C)]`,
//! `Copy`, has no implicit padding, and has its size pinned by a compile-time assertion: a layout
//! change is a compile error on both sides, never a silent misread. Numbers given to event kinds,
//! syscalls, flags and counters are never reused for something else.
//!
//! This crate must never depend on `std` (the eBPF side is `no_std`); the `user` feature adds the
//! `aya::Pod` impls that userspace needs.
#![no_std]

use core::mem::size_of;

/// Capacity, in bytes, of a captured path argument, including its terminating NUL. This is the
/// kernel's `PATH_MAX`: any path the kernel accepts fits; a longer argument (which the kernel
/// refuses with `ENAMETOOLONG`) is captured up to this size and flagged
/// [`flags::PATH_TRUNCATED`].
pub const PATH_CAP: usize = 4096;

/// Capacity, in bytes, of a captured argument vector (NUL-separated, as in `/proc/PID/cmdline`).
/// A longer vector is cut at this size and flagged [`flags::ARGV_TRUNCATED`].
pub const ARGV_CAP: usize = 16384;

/// Capacity, in bytes, of one kernel path walk (components, leaf first, each followed by `/`).
/// A longer walk stops there and is flagged [`walk::TRUNCATED`].
pub const WALK_CAP: usize = 8192;

/// Most dentries one walk steps through (components plus mount crossings).
pub const WALK_STEPS: u32 = 4096;

/// Kernel functions (kfuncs) the programs call. aya cannot relocate a kfunc call, so a program
/// calls a marker helper number instead, with marker type ids in its arguments, and the loader
/// rewrites both into the running kernel's BTF ids before loading (`loader::link_kfuncs`).
pub mod kfunc {
    /// `void *bpf_rdonly_cast(const void *obj, u32 btf_id)`: a plain kernel address as a
    /// read-only, fault-safe BTF pointer of the given struct type.
    pub const RDONLY_CAST: i32 = 0x7ae7_0001;
    /// Marker type ids, by struct.
    pub const TYPE_MOUNT: i32 = 0x7ae7_0101;
    pub const TYPE_DENTRY: i32 = 0x7ae7_0102;
    pub const TYPE_FILE: i32 = 0x7ae7_0103;
    pub const TYPE_TASK: i32 = 0x7ae7_0104;
    pub const TYPE_BPRM: i32 = 0x7ae7_0105;
    /// Every marker type id and its struct's name.
    pub const TYPES: [(i32, &str); 5] = [
        (TYPE_MOUNT, "mount"),
        (TYPE_DENTRY, "dentry"),
        (TYPE_FILE, "file"),
        (TYPE_TASK, "task_struct"),
        (TYPE_BPRM, "linux_binprm"),
    ];
}

/// The kernel's user ABI flags aet reads (x86_64 values, `asm-generic`), defined once for the
/// programs, the monitor, the access classifier, the summary and enforcement alike.
pub mod uapi {
    /// `open(2)` flags.
    pub const O_ACCMODE: u32 = 0o3;
    pub const O_RDONLY: u32 = 0o0;
    pub const O_WRONLY: u32 = 0o1;
    pub const O_RDWR: u32 = 0o2;
    pub const O_CREAT: u32 = 0o100;
    pub const O_EXCL: u32 = 0o200;
    pub const O_TRUNC: u32 = 0o1000;
    pub const O_APPEND: u32 = 0o2000;
    pub const O_DIRECTORY: u32 = 0o200000;
    pub const O_NOFOLLOW: u32 = 0o400000;
    pub const O_PATH: u32 = 0o10000000;
    /// `__O_TMPFILE`: the bit that makes `O_TMPFILE` (which is `__O_TMPFILE | O_DIRECTORY`).
    pub const O_TMPFILE_BIT: u32 = 0o20000000;
    pub const O_TMPFILE: u32 = O_TMPFILE_BIT | O_DIRECTORY;
    /// What `creat(path, mode)` is: `open(path, O_CREAT | O_WRONLY | O_TRUNC, mode)`.
    pub const CREAT_FLAGS: u32 = O_CREAT | O_WRONLY | O_TRUNC;
    /// `mmap(2)` protections and flags.
    pub const PROT_READ: u32 = 1;
    pub const PROT_WRITE: u32 = 2;
    pub const PROT_EXEC: u32 = 4;
    /// The mapping type bits of `mmap`'s flags: `MAP_SHARED` (1), `MAP_PRIVATE` (2),
    /// `MAP_SHARED_VALIDATE` (3).
    pub const MAP_TYPE: u32 = 0x0f;
    pub const MAP_SHARED: u32 = 0x01;
    pub const MAP_PRIVATE: u32 = 0x02;
    pub const MAP_SHARED_VALIDATE: u32 = 0x03;
    pub const MAP_ANONYMOUS: u32 = 0x20;
    /// `*at` calls.
    pub const AT_FDCWD: i32 = -100;
    pub const AT_EMPTY_PATH: u32 = 0x1000;
    /// `fcntl` commands that duplicate an fd.
    pub const F_DUPFD: u64 = 0;
    pub const F_DUPFD_CLOEXEC: u64 = 1030;
    /// `st_mode` file types.
    pub const S_IFMT: u16 = 0o170000;
    pub const S_IFREG: u16 = 0o100000;
    pub const S_IFDIR: u16 = 0o040000;
}

/// Sections after the header, in this order; their lengths are in [`EventHeader::len`].
pub mod section {
    /// The path argument as the process passed it.
    pub const PATH: usize = 0;
    /// The second path argument (rename, link, symlink).
    pub const PATH2: usize = 1;
    /// An exec's argument vector.
    pub const ARGV: usize = 2;
    /// The kernel walk of the object (or of the first path's base directory).
    pub const WALK: usize = 3;
    /// The kernel walk of the second path's base directory.
    pub const WALK2: usize = 4;
    /// Number of sections.
    pub const COUNT: usize = 5;
}

/// Where sections may start: the verifier needs every write offset bounded, so a section that
/// would start beyond this is dropped and flagged.
pub const DATA_LIMIT: usize = 32768;

/// Bytes after the header in the record scratch buffer: room for a section starting at
/// [`DATA_LIMIT`] plus the largest single write ([`ARGV_CAP`]) and slack.
pub const DATA_CAP: usize = 65536;

/// What a record describes. Numbers are part of the kernel/user ABI and are never reused.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A file open (`open`, `openat`, `openat2`, `creat`, `open_by_handle_at`).
    Open = 1,
    /// A program execution (`execve`, `execveat`).
    Exec = 2,
    /// A new process (not a new thread) created by the actor; `aux` holds the child's pid.
    Fork = 3,
    /// The last thread of a process exited; `ret` holds the wait status.
    Exit = 4,
    /// A metadata or existence probe: stat family, access, readlink, name_to_handle_at.
    Stat = 5,
    /// A change to the file system: rename, unlink, link, symlink, mkdir, rmdir, truncate,
    /// chmod, chown, mknod, utimensat.
    Modify = 6,
    /// A change of working directory (`chdir`, `fchdir`); the walk is the new directory.
    Chdir = 7,
    /// A file mapped into memory (`mmap` of a file), first mapping per open file.
    Mmap = 8,
    /// Bytes read and written through one open file, emitted at close or process exit.
    Io = 9,
    /// A directory listed (`getdents64`), first listing per open directory.
    List = 10,
    /// io_uring set up, entered, or a request submitted through it.
    IoUring = 11,
    /// mount, umount, chroot, pivot_root.
    Mount = 12,
    /// `memfd_create`: an anonymous file that can be written and executed.
    Memfd = 13,
    /// An fd that came into the run from elsewhere: received over a socket (`recvmsg` with
    /// `SCM_RIGHTS`), copied from another process (`pidfd_getfd`), or handed over by fanotify
    /// (an event read from a fanotify fd). One row per fd, with the file's identity (and, for
    /// `pidfd_getfd`, the kernel walk of the new fd); `aux` is the [`fd_origin`], `aux2` the
    /// source (the socket fd, the other process's fd, the event's pid); for fanotify, `mode` is
    /// the reader's pid namespace level; for a received fd, `open_flags` is the socket's peer
    /// process (host pid; 0 when the socket has none).
    Fd = 14,
    /// An access to another process: `ptrace`, `process_vm_readv`/`writev`, `pidfd_open`;
    /// `aux` is the target pid as the actor named it, `aux2` the ptrace request, `mode` the
    /// actor's pid namespace level (0: the pid is a host pid).
    Process = 15,
    /// A watch on the file system: `fanotify_init`, `fanotify_mark`, `inotify_add_watch`.
    Watch = 16,
    /// Network use: `connect`, `bind`, `listen`, `accept`/`accept4` and `sendto`/`sendmsg` with a
    /// destination. The section [`section::PATH`] holds the socket address as the process passed
    /// it (for accept, as the kernel wrote the peer's), raw bytes; `fd` is the socket.
    Net = 17,
}

impl EventKind {
    /// Decodes a kind number coming from the kernel.
    pub const fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            1 => Self::Open,
            2 => Self::Exec,
            3 => Self::Fork,
            4 => Self::Exit,
            5 => Self::Stat,
            6 => Self::Modify,
            7 => Self::Chdir,
            8 => Self::Mmap,
            9 => Self::Io,
            10 => Self::List,
            11 => Self::IoUring,
            12 => Self::Mount,
            13 => Self::Memfd,
            14 => Self::Fd,
            15 => Self::Process,
            16 => Self::Watch,
            17 => Self::Net,
            _ => return None,
        })
    }

    /// Every kind, in number order.
    pub const ALL: [EventKind; 17] = [
        Self::Open,
        Self::Exec,
        Self::Fork,
        Self::Exit,
        Self::Stat,
        Self::Modify,
        Self::Chdir,
        Self::Mmap,
        Self::Io,
        Self::List,
        Self::IoUring,
        Self::Mount,
        Self::Memfd,
        Self::Fd,
        Self::Process,
        Self::Watch,
        Self::Net,
    ];

    /// The kind a ledger's `kind` column names.
    pub fn from_name(name: &[u8]) -> Option<Self> {
        Some(match name {
            b"open" => Self::Open,
            b"exec" => Self::Exec,
            b"fork" => Self::Fork,
            b"exit" => Self::Exit,
            b"stat" => Self::Stat,
            b"modify" => Self::Modify,
            b"chdir" => Self::Chdir,
            b"mmap" => Self::Mmap,
            b"io" => Self::Io,
            b"list" => Self::List,
            b"io_uring" => Self::IoUring,
            b"mount" => Self::Mount,
            b"memfd" => Self::Memfd,
            b"fd" => Self::Fd,
            b"process" => Self::Process,
            b"watch" => Self::Watch,
            b"net" => Self::Net,
            _ => return None,
        })
    }

    /// The name used in the ledger's `kind` column.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Exec => "exec",
            Self::Fork => "fork",
            Self::Exit => "exit",
            Self::Stat => "stat",
            Self::Modify => "modify",
            Self::Chdir => "chdir",
            Self::Mmap => "mmap",
            Self::Io => "io",
            Self::List => "list",
            Self::IoUring => "io_uring",
            Self::Mount => "mount",
            Self::Memfd => "memfd",
            Self::Fd => "fd",
            Self::Process => "process",
            Self::Watch => "watch",
            Self::Net => "net",
        }
    }
}

/// Where a syscall's object (the file it touched) comes from.
pub mod obj {
    /// Nothing beyond the path strings.
    pub const NONE: u8 = 0;
    /// The file behind the returned fd (on success).
    pub const RET_FD: u8 = 1;
    /// The file behind the fd argument [`super::Shape::fd`].
    pub const ARG_FD: u8 = 2;
    /// The task's new working directory (on success).
    pub const PWD: u8 = 3;
    /// A `struct stat` the kernel filled, argument [`super::Shape::buf`] (on success).
    pub const STAT: u8 = 4;
    /// A `struct statx` the kernel filled, argument [`super::Shape::buf`] (on success).
    pub const STATX: u8 = 5;
}

/// What a syscall does to the per-open-file byte accounting (`FILEIO`).
pub mod io {
    /// Not an accounting syscall.
    pub const NONE: u8 = 0;
    /// `ret` bytes read from fd [`super::Shape::fd`].
    pub const READ: u8 = 1;
    /// `ret` bytes written to fd [`super::Shape::fd`].
    pub const WRITE: u8 = 2;
    /// sendfile: `ret` bytes read from arg 1, written to arg 0.
    pub const SENDFILE: u8 = 3;
    /// copy_file_range: `ret` bytes read from arg 0, written to arg 2.
    pub const COPY: u8 = 4;
    /// close(fd): the fd's accounting is emitted.
    pub const CLOSE: u8 = 5;
    /// dup family: the returned fd starts its own accounting of the same file.
    pub const DUP: u8 = 6;
    /// getdents64: the first listing of a directory fd is recorded.
    pub const LIST: u8 = 7;
    /// close_range(first, last): every accounted fd in range is emitted.
    pub const CLOSE_RANGE: u8 = 8;
    /// fcntl: `F_DUPFD`/`F_DUPFD_CLOEXEC` behave as [`DUP`].
    pub const FCNTL: u8 = 9;
    /// tee: `ret` bytes read from arg 0, written to arg 1 (both pipes: no file's bytes).
    pub const TEE: u8 = 10;
}

/// Where the fd of an [`EventKind::Fd`] row came from ([`EventHeader::aux`]).
pub mod fd_origin {
    // 1 is not used: the fds a command starts with are in the ledger's metadata
    // (`aet.inherited_fds`), not in rows.
    /// Received over a socket (`recvmsg`/`recvmmsg` with `SCM_RIGHTS`).
    pub const RECEIVED: u64 = 2;
    /// Copied from another process (`pidfd_getfd`).
    pub const COPIED: u64 = 3;
    /// Handed over by fanotify: an event read from a fanotify fd carried it.
    pub const FANOTIFY: u64 = 4;
    /// The name of an origin, as the ledger's `fd_origin` column has it.
    pub const fn name(o: u64) -> Option<&'static str> {
        Some(match o {
            RECEIVED => "received",
            COPIED => "copied",
            FANOTIFY => "fanotify",
            _ => return None,
        })
    }
}

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
}

/// A syscall that is dispatched but makes no row.
const fn unrecorded() -> Shape {
    let mut s = sh(Open, N, N, N, N);
    s.kind = 0;
    s
}

/// Most bytes of a socket address a `net` record holds (`struct sockaddr_un` is 110).
pub const SOCKADDR_CAP: usize = 112;

/// Bits of [`EventHeader::flags`].
pub mod flags {
    /// The path argument did not fit in [`crate::PATH_CAP`]; the captured bytes are a prefix.
    pub const PATH_TRUNCATED: u32 = 1 << 0;
    /// The path argument could not be read from the process's memory (the row has no path).
    pub const PATH_UNREADABLE: u32 = 1 << 1;
    /// The argument vector did not fit in [`crate::ARGV_CAP`]; the captured arguments are a
    /// prefix.
    pub const ARGV_TRUNCATED: u32 = 1 << 2;
    /// The argument vector could not be read.
    pub const ARGV_UNREADABLE: u32 = 1 << 3;
    /// A successful exec was seen without its entry (it entered before the monitor attached,
    /// came through the compat ABI, or the entry could not be stored): the file name, arguments
    /// and result are exact; the syscall (reported as `execve`), dirfd and flags are not known.
    pub const UNPAIRED: u32 = 1 << 4;
    /// The header's `ppid` is the kernel's `real_parent` at event time (fork and exec records).
    pub const PPID_KERNEL: u32 = 1 << 5;
    /// The syscall was made through the 32-bit compat ABI (`int 0x80` or a 32-bit program).
    pub const COMPAT: u32 = 1 << 6;
    /// The second path argument did not fit and was truncated.
    pub const PATH2_TRUNCATED: u32 = 1 << 7;
    /// `dev`, `ino` and `mnt_id` identify the object (from the kernel's file, or a stat buffer
    /// it filled).
    pub const IDENTITY: u32 = 1 << 8;
    /// The walk section is the object itself; otherwise (when present) it is the base
    /// directory the first path is relative to.
    pub const WALK_IS_OBJECT: u32 = 1 << 9;
    /// A section could not be stored (the record's data limit was reached).
    pub const SECTION_DROPPED: u32 = 1 << 10;
    /// The fd of an io record was closed without `close` (by the process's exit or exec).
    pub const IO_AT_EXIT: u32 = 1 << 11;
    /// `dev` is in the userspace encoding of `struct stat` (not the kernel's).
    pub const DEV_STAT: u32 = 1 << 12;
    /// `dev` is `statx`'s major (low 32 bits) and minor (high 32 bits).
    pub const DEV_STATX: u32 = 1 << 13;
}

/// Bits of a walk's flags ([`EventHeader::walk_flags`]).
pub mod walk {
    /// A walk was made.
    pub const PRESENT: u16 = 1 << 0;
    /// It ended at the process's root: the path is complete, as the process sees it.
    pub const REACHED_ROOT: u16 = 1 << 1;
    /// It ended at a root that is not the process's (an internal mount such as a memfd's or a
    /// pipe's, or a file outside the process's root): the path is relative to that root.
    pub const UNREACHABLE: u16 = 1 << 2;
    /// It stopped at [`crate::WALK_CAP`] bytes or [`crate::WALK_STEPS`] steps: partial.
    pub const TRUNCATED: u16 = 1 << 3;
    /// The object has been unlinked (its dentry is no longer hashed).
    pub const DELETED: u16 = 1 << 4;
    /// A kernel read failed during the walk: partial.
    pub const FAILED: u16 = 1 << 5;
    /// It ended at the top of a mount tree that is not the process's root (with
    /// [`UNREACHABLE`]): the file is in another mount namespace (reached through
    /// `/proc/PID/root`, or an fd from there) or above the process's root. The path is relative
    /// to that tree's root, not to the process's: it may name a different file there.
    pub const FOREIGN_ROOT: u16 = 1 << 6;
}

/// The fixed part of every record the eBPF programs send, followed by its sections (see
/// [`section`]), each `len[i]` bytes long.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EventHeader {
    /// An [`EventKind`] number.
    pub kind: u16,
    /// A [`Syscall`] number (u8 range).
    pub syscall: u16,
    /// Bits from [`flags`].
    pub flags: u32,
    /// `bpf_ktime_get_boot_ns()` when the record was made (`CLOCK_BOOTTIME`).
    pub ts_ns: u64,
    /// The actor's cgroup v2 id.
    pub cgroup_id: u64,
    /// The syscall's result (fd, 0, or -errno); for `Exit`, the wait status.
    pub ret: i64,
    /// Kind-specific: `openat2`'s `resolve` flags, the new pid for `Fork`, bytes read for `Io`,
    /// the length for `Mmap`, the opcode for an io_uring request.
    pub aux: u64,
    /// Kind-specific: bytes written for `Io`, `prot | flags << 32` for `Mmap`.
    pub aux2: u64,
    /// The object's device (kernel `dev_t` encoding) and inode, when [`flags::IDENTITY`].
    pub dev: u64,
    pub ino: u64,
    /// The actor's process id (thread-group id).
    pub pid: u32,
    /// The actor's thread id.
    pub tid: u32,
    /// The actor's parent process id when [`flags::PPID_KERNEL`].
    pub ppid: u32,
    /// The actor's real user id.
    pub uid: u32,
    /// The actor's real group id.
    pub gid: u32,
    /// The first directory fd argument (`AT_FDCWD` = -100 when none).
    pub dirfd: i32,
    /// The second directory fd argument.
    pub dirfd2: i32,
    /// The fd argument or the io record's fd (-1 when none).
    pub fd: i32,
    /// Flags argument (`O_*`, `AT_*`, ...).
    pub open_flags: u32,
    /// Mode argument.
    pub mode: u32,
    /// The object's mount id (as in /proc/PID/mountinfo), when [`flags::IDENTITY`].
    pub mnt_id: u32,
    /// The actor's mount namespace (inode number of /proc/PID/ns/mnt).
    pub mntns: u32,
    /// Walk flags ([`walk`]) of the walk and walk2 sections.
    pub walk_flags: u16,
    pub walk2_flags: u16,
    /// Lengths of the sections, in [`section`] order.
    pub len: [u16; section::COUNT],
    /// For an object walk that crossed a mount in a mount namespace other than aet's: the
    /// length of the walk below the first crossing; the walk2 section then holds the walk from
    /// that mount's root up to its file system's root (what maps the path to the host's view).
    /// [`NO_SPLIT`] otherwise.
    pub walk_split: u16,
    /// The actor's `comm` (task name), NUL-padded (fork, exec and exit records only).
    pub comm: [u8; 16],
    /// The run the record belongs to: its slot in the run maps ([`runs`]).
    pub run: u32,
    pub _pad: u32,
}

/// [`EventHeader::walk_split`] when there is no file-system walk.
pub const NO_SPLIT: u16 = u16::MAX;

/// Size in bytes of [`EventHeader`].
pub const HEADER_SIZE: usize = size_of::<EventHeader>();
const _: () = assert!(HEADER_SIZE == 152);

/// Indexes of the per-CPU, per-run counters array `COUNTERS` (the counter `c` of the run in slot
/// `s` is entry `s * COUNT + c`). Never reused.
pub mod counter {
    /// A record could not be put in the ring buffer (it was full): the event is lost.
    pub const RINGBUF_FULL: u32 = 0;
    /// An exec's entry could not be stored: its syscall, dirfd and flags are lost.
    pub const INFLIGHT_FULL: u32 = 1;
    /// A new task of the tree could not be added to the tracked set: its later events may be
    /// lost.
    pub const TRACKED_FULL: u32 = 2;
    /// A path argument could not be read (row delivered, flagged `PATH_UNREADABLE`).
    pub const PATH_UNREADABLE: u32 = 3;
    /// An exec seen without its entry (row delivered, flagged `UNPAIRED`).
    pub const UNPAIRED: u32 = 4;
    /// Records sent to the ring buffer.
    pub const SENT: u32 = 5;
    /// An open file's byte accounting could not be stored: its bytes are not counted.
    pub const FILEIO_FULL: u32 = 6;
    /// A walk that ended partial (truncated or a failed read); the row says so.
    pub const WALK_PARTIAL: u32 = 7;
    /// io_uring requests submitted by the run (their reads and results are not recorded).
    pub const IO_URING_SUBMITTED: u32 = 8;
    /// A record was dropped because its run's unread records already filled the run's share of
    /// the ring buffer (its quota): the event is lost, and no other run pays for it.
    pub const QUOTA_FULL: u32 = 9;
    /// An fd arrived (over a socket, from a fanotify read) beyond what one record set could
    /// parse (more control messages or events than the programs read), or its carrier could
    /// not be read: at least one fd of the run has no `fd` row.
    pub const FD_UNRECORDED: u32 = 10;
    /// A task of the run was moved to a cgroup outside the run's (by itself or by anyone): it
    /// is no longer in what the run's end freezes and kills.
    pub const SCOPE_LEFT: u32 = 11;
    /// A task of the run made a successful bpf() call: it could change the monitor's maps
    /// (untrack itself, say), so the record can no longer be trusted to be complete.
    pub const BPF_CALLS: u32 = 12;
    /// Number of counters.
    pub const COUNT: u32 = 13;
    /// Counters that mean an event or part of one never reached userspace.
    pub const LOSSES: [u32; 6] = [
        RINGBUF_FULL,
        INFLIGHT_FULL,
        TRACKED_FULL,
        FILEIO_FULL,
        QUOTA_FULL,
        FD_UNRECORDED,
    ];
    /// Names, by index, as they appear in the ledger metadata.
    pub const NAMES: [&str; COUNT as usize] = [
        "ringbuf_full",
        "inflight_full",
        "tracked_full",
        "path_unreadable",
        "unpaired",
        "sent",
        "fileio_full",
        "walk_partial",
        "io_uring_submitted",
        "quota_full",
        "fd_unrecorded",
        "scope_left",
        "bpf_calls",
    ];
}

/// The runs the programs serve at once. A run has a slot; its scope is in the scope maps
/// (cgroups, uids, tracked tasks, each mapping to the slot), its share of the ring buffer and what
/// userspace has read of it in `RUN_LIMITS`, what the programs put in the ring in `RUN_PRODUCED`,
/// and its counters in `COUNTERS`. A task in no run's scope costs the scope look-ups and produces
/// nothing, whatever the number of runs.
pub mod runs {
    /// Slots (concurrent runs on a host).
    pub const MAX_RUNS: u32 = 64;
    /// Cgroup levels a run's cgroup may sit at (0..MAX_CGROUP_LEVEL): a task is in a run when its
    /// cgroup's ancestor at a registered level is the run's cgroup, so a run's cgroup covers its
    /// descendant cgroups (a container started with `--cgroup-parent`).
    pub const MAX_CGROUP_LEVEL: u32 = 8;
    /// Entries of the cgroup and uid scope maps.
    pub const MAX_SCOPES: u32 = 256;
    /// What a record takes in the ring buffer: its length and the ring's 8-byte header, rounded
    /// up to 8 bytes. The programs and userspace count a run's share with this.
    pub const fn ring_cost(len: u64) -> u64 {
        (len + 8 + 7) & !7
    }
}

/// A run's share of the ring buffer (`RUN_LIMITS`, written by userspace only).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunLimit {
    /// Bytes of the run's records userspace has read (see [`runs::ring_cost`]).
    pub consumed: u64,
    /// Most bytes of the run's records that may wait unread in the ring; 0: the slot is free.
    pub quota: u64,
}

/// Which scope maps have entries (`SCOPE_INDEX`, written by userspace): the programs look only
/// in those.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScopeIndex {
    /// Bit `l`: a run's cgroup sits at cgroup level `l`.
    pub cgroup_levels: u32,
    /// Runs scoped by uid.
    pub uids: u32,
    /// Bumped by userspace whenever a scope or a tracked task is added or removed: a scope
    /// decision the programs remembered under another generation is made again.
    pub generation: u32,
    pub _pad: u32,
}

const _: () = assert!(size_of::<RunLimit>() == 16);
const _: () = assert!(size_of::<ScopeIndex>() == 16);

/// Byte offsets of kernel struct members, read from the running kernel's BTF by userspace and
/// handed to the programs at load time. Nothing here is hard-coded.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offsets {
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_real_parent: u32,
    pub task_mm: u32,
    pub task_exit_code: u32,
    /// `task_struct.thread_info.status` (where x86 keeps `TS_COMPAT`).
    pub task_ti_status: u32,
    /// `task_struct.cred` (the subjective credentials).
    pub task_cred: u32,
    /// `cred.uid.val` and `cred.gid.val` (real ids).
    pub cred_uid: u32,
    pub cred_gid: u32,
    /// `task_struct.cgroups`, `css_set.dfl_cgrp`, `cgroup.kn`, `kernfs_node.id`: the chain to the
    /// task's cgroup v2 id.
    pub task_cgroups: u32,
    pub css_set_dfl_cgrp: u32,
    pub cgroup_kn: u32,
    pub kernfs_node_id: u32,
    /// `cgroup.level` (the root is 0).
    pub cgroup_level: u32,
    /// `cgroup.self.parent` and `cgroup_subsys_state.cgroup`: a cgroup's parent.
    pub cgroup_parent_css: u32,
    pub css_cgroup: u32,
    /// `task_struct.start_time` (with the tid, a task's identity over time).
    pub task_start_time: u32,
    pub mm_arg_start: u32,
    pub mm_arg_end: u32,
    /// `mm_struct.exe_file`.
    pub mm_exe_file: u32,
    pub bprm_filename: u32,
    /// `task_struct.files`, `files_struct.fdt`, `files_struct.fd_array`, `fdtable.fd`,
    /// `fdtable.max_fds`.
    pub task_files: u32,
    pub files_fdt: u32,
    pub files_fd_array: u32,
    pub fdt_fd: u32,
    pub fdt_max_fds: u32,
    /// Entries of `files_struct.fd_array`.
    pub fd_array_len: u32,
    /// `task_struct.fs`, `fs_struct.root`, `fs_struct.pwd` (each a `struct path`).
    pub task_fs: u32,
    pub fs_root: u32,
    pub fs_pwd: u32,
    /// `path.mnt`, `path.dentry`.
    pub path_mnt: u32,
    pub path_dentry: u32,
    /// `file.f_path`, `file.f_inode`.
    pub file_path: u32,
    pub file_inode: u32,
    /// `inode.i_ino`, `inode.i_sb`, `inode.i_mode`, `super_block.s_dev`.
    pub inode_ino: u32,
    pub inode_sb: u32,
    pub inode_mode: u32,
    pub sb_dev: u32,
    /// `dentry.d_parent`, `dentry.d_name.len`, `dentry.d_name.name`, `dentry.d_inode`, the
    /// inline short name, `dentry.d_hash.pprev` (NULL once unhashed).
    pub dentry_parent: u32,
    pub dentry_name_len: u32,
    pub dentry_name: u32,
    pub dentry_inode: u32,
    pub dentry_iname: u32,
    pub dentry_hash_pprev: u32,
    /// Size of the inline short name.
    pub dentry_iname_len: u32,
    /// `vfsmount.mnt_root`; `mount.mnt` (where the vfsmount sits in its `struct mount`),
    /// `mount.mnt_parent`, `mount.mnt_mountpoint`, `mount.mnt_id`.
    pub vfsmount_root: u32,
    pub mount_mnt: u32,
    pub mount_parent: u32,
    pub mount_mountpoint: u32,
    pub mount_id: u32,
    /// `task_struct.nsproxy`, `nsproxy.mnt_ns`, `mnt_namespace.ns.inum`.
    pub task_nsproxy: u32,
    pub nsproxy_mnt_ns: u32,
    pub mnt_ns_inum: u32,
    /// `task_struct.thread_pid`, `pid.level` (0 in the initial pid namespace).
    pub task_thread_pid: u32,
    pub pid_level: u32,
    /// `file.private_data` (a socket file's `struct socket`), `socket.sk`, `sock.sk_peer_pid`,
    /// `pid.numbers`, `upid.nr`: the peer process of a unix socket, as a host pid.
    pub file_private_data: u32,
    pub socket_sk: u32,
    pub sock_sk_peer_pid: u32,
    pub pid_numbers: u32,
    pub upid_nr: u32,
    /// `io_kiocb.opcode`, `io_kiocb.cmd`, `io_open.filename`, `io_statx.filename`,
    /// `filename.name`. 0 when the kernel has no io_uring.
    pub req_opcode: u32,
    pub req_cmd: u32,
    pub io_open_filename: u32,
    pub io_statx_filename: u32,
    pub filename_name: u32,
    /// `pt_regs` member holding the syscall number at syscall exit (`orig_ax` on x86_64).
    pub regs_nr: u32,
    /// `pt_regs` members holding syscall arguments 0..5 for native syscalls.
    pub regs_args: [u32; 6],
    /// `pt_regs` members holding syscall arguments 0..5 for compat (32-bit) syscalls.
    pub regs_args_compat: [u32; 6],
}

/// Number of syscall numbers the dispatch table `SYSCALLS` covers (native and compat).
pub const SYSCALL_TABLE_SIZE: u32 = 1024;

/// Packs the dispatch table entry for a syscall number: the [`Syscall`] it is natively in the
/// low byte, and the one it is through the compat ABI in the high byte (0: not recorded).
pub const fn syscall_entry(native: Syscall, compat: Syscall) -> u16 {
    (native as u16) | ((compat as u16) << 8)
}

/// The programs' configuration, a global (`CONFIG`) set by userspace before load.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// 1 when `sched_process_exit` passes `group_dead` as its second argument.
    pub exit_has_group_dead: u32,
    /// Bit of `thread_info.status` set during a compat syscall (`TS_COMPAT`); 0 when the
    /// architecture has no compat ABI.
    pub compat_mask: u32,
    /// aet's own mount namespace: a task in another one gets file-system walks for its objects.
    pub host_mntns: u32,
    pub offsets: Offsets,
    pub _pad: u32,
}

const _: () = assert!(size_of::<Offsets>() == 312);
const _: () = assert!(size_of::<Config>() == 328);

/// An exec's entry, kept until `sched_process_exec` or the exec's failure (keyed by thread id).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Inflight {
    pub syscall: u16,
    pub _pad: u16,
    pub dirfd: i32,
    /// User pointer to the path argument.
    pub path: u64,
    /// User pointer to `argv`.
    pub aux_ptr: u64,
    pub flags: u64,
    pub mode: u64,
}

const _: () = assert!(size_of::<Inflight>() == 40);

/// Byte accounting of one open fd of one process (`FILEIO`, keyed by `tgid << 32 | fd`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FileIo {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub dev: u64,
    pub ino: u64,
    pub mnt_id: u32,
    /// One of [`fileio`].
    pub class: u32,
    /// Bits from [`fileio`]'s `LISTED`/`MAPPED`.
    pub marks: u32,
    pub _pad: u32,
}

const _: () = assert!(size_of::<FileIo>() == 48);

/// Values of [`FileIo::class`] and bits of [`FileIo::marks`].
pub mod fileio {
    /// Not a file aet accounts (pipe, socket, device): reads and writes are ignored.
    pub const IGNORED: u32 = 0;
    /// A regular file: bytes are counted.
    pub const REGULAR: u32 = 1;
    /// A directory: its first listing is recorded.
    pub const DIRECTORY: u32 = 2;
    /// The directory's listing was recorded.
    pub const LISTED: u32 = 1 << 0;
    /// The file's first mapping was recorded.
    pub const MAPPED: u32 = 1 << 1;
    /// A fanotify group's fd: the events read from it carry fds, each recorded as an `fd`
    /// row.
    pub const FANOTIFY: u32 = 3;
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data: repr(C), Copy, no padding (sizes asserted above), any bit pattern
    // is valid.
    unsafe impl aya::Pod for super::Config {}
    unsafe impl aya::Pod for super::Offsets {}
    unsafe impl aya::Pod for super::Inflight {}
    unsafe impl aya::Pod for super::EventHeader {}
    unsafe impl aya::Pod for super::FileIo {}
    unsafe impl aya::Pod for super::RunLimit {}
    unsafe impl aya::Pod for super::ScopeIndex {}
}
