//! The records the programs send: their kinds, the header every record starts with, the
//! sections after it, and the flags and codes the header carries.

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
    /// The first bytes of a socket message (kernel records only, never a row): a send's or a
    /// DNS answer's payload, in [`section::ARGV`] (at most [`PAYLOAD_CAP`] bytes, flagged
    /// [`flags::ARGV_TRUNCATED`] when the message was longer); [`section::PATH`] holds the
    /// destination (or source) address when the call named one. `aux` is the message's length,
    /// `aux2` its [`payload`] direction, `dev`/`ino` the socket's identity. Userspace makes a
    /// `dns` row of a query and its answer, and a `net` row of a TLS ClientHello or an HTTP
    /// request that names a host.
    Payload = 18,
    /// A DNS query of the run and its answer (rows only: made from two payload records).
    Dns = 19,
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
            18 => Self::Payload,
            19 => Self::Dns,
            _ => return None,
        })
    }

    /// Every kind, in number order.
    pub const ALL: [EventKind; 19] = [
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
        Self::Payload,
        Self::Dns,
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
            b"payload" => Self::Payload,
            b"dns" => Self::Dns,
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
            Self::Payload => "payload",
            Self::Dns => "dns",
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

/// Most bytes of a socket address a `net` record holds (`struct sockaddr_un` is 110).
pub const SOCKADDR_CAP: usize = 112;

/// Most bytes of a socket message a payload record holds: a DNS message over UDP, a TLS
/// ClientHello with post-quantum key shares (about 1.8 KB), an HTTP request's head.
pub const PAYLOAD_CAP: usize = 4096;

/// The direction of a payload record ([`EventHeader::aux2`]).
pub mod payload {
    /// Sent by the run.
    pub const SEND: u64 = 0;
    /// Received by the run.
    pub const RECV: u64 = 1;
}

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
    /// the length for `Mmap`, the opcode for an io_uring request, the running file's change
    /// time (ns since the epoch; 0 unknown) for a successful `Exec`.
    pub aux: u64,
    /// Kind-specific: bytes written for `Io`, `prot | flags << 32` for `Mmap`, the running
    /// file's size for a successful `Exec`.
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

/// How a row's resolved path was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolvedFrom {
    /// Walked by the kernel from the object it opened or ran: symlinks, `..`, dirfd and cwd are
    /// already resolved, and the path names the file actually touched.
    Object,
    /// The kernel walked the base directory (dirfd or cwd) and the argument was joined to it
    /// lexically: the best the kernel can say when it hands over no object (a failed open, a
    /// stat, an unlink). A symlink in the argument is not followed.
    Joined,
    /// The argument was absolute and is only normalised lexically.
    Lexical,
    /// An io record: the path under which an earlier row of the run saw the same inode.
    Inode,
    /// An fd that arrived (`fd` rows): the fd's link in `/proc/PID/fd`, read by aet when the
    /// row arrived and kept only when the file it names has the row's device and inode. The
    /// path as aet's view has it.
    FdLink,
}

impl ResolvedFrom {
    /// The name used in the ledger's `resolved_from` column.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Object => "object",
            Self::Joined => "joined",
            Self::Lexical => "lexical",
            Self::Inode => "inode",
            Self::FdLink => "fd_link",
        }
    }
}
