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

/// Capacity, in bytes, of a captured path, including its terminating NUL. This is the kernel's
/// `PATH_MAX`: any path the kernel accepts fits; a longer argument (which the kernel refuses with
/// `ENAMETOOLONG`) is captured up to this size and flagged [`flags::PATH_TRUNCATED`].
pub const PATH_CAP: usize = 4096;

/// Capacity, in bytes, of a captured argument vector (NUL-separated, as in `/proc/PID/cmdline`).
/// A longer vector is cut at this size and flagged [`flags::ARGV_TRUNCATED`].
pub const ARGV_CAP: usize = 16384;

/// Room the eBPF side reserves after the header: a path, then an argument vector at a variable
/// offset. The verifier bounds the write offset and the write size separately, so the buffer is
/// sized for the sum of both maxima.
pub const DATA_CAP: usize = PATH_CAP + 2 * ARGV_CAP;

/// What a record describes. Numbers are part of the kernel/user ABI and are never reused.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A file open (`open`, `openat`, `openat2`, `creat`), successful or not.
    Open = 1,
    /// A program execution (`execve`, `execveat`), successful or not.
    Exec = 2,
    /// A new process (not a new thread) created by the actor; `aux` holds the child's pid.
    Fork = 3,
    /// The last thread of a process exited; `ret` holds the wait status (`exit_code`).
    Exit = 4,
}

impl EventKind {
    /// Decodes a kind number coming from the kernel.
    pub const fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            1 => Self::Open,
            2 => Self::Exec,
            3 => Self::Fork,
            4 => Self::Exit,
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
        }
    }
}

/// The syscall that produced a record (aet's own numbering, not the architecture's).
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syscall {
    /// No syscall: scheduler events (fork, exit).
    None = 0,
    Open = 1,
    Openat = 2,
    Openat2 = 3,
    Creat = 4,
    Execve = 5,
    Execveat = 6,
}

impl Syscall {
    /// Decodes a syscall number coming from the kernel.
    pub const fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            0 => Self::None,
            1 => Self::Open,
            2 => Self::Openat,
            3 => Self::Openat2,
            4 => Self::Creat,
            5 => Self::Execve,
            6 => Self::Execveat,
            _ => return None,
        })
    }

    /// The name used in the ledger's `syscall` column (`None` for scheduler events).
    pub const fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::None => return None,
            Self::Open => "open",
            Self::Openat => "openat",
            Self::Openat2 => "openat2",
            Self::Creat => "creat",
            Self::Execve => "execve",
            Self::Execveat => "execveat",
        })
    }
}

/// Bits of [`EventHeader::flags`].
pub mod flags {
    /// The path argument did not fit in [`crate::PATH_CAP`]; the captured bytes are a prefix.
    pub const PATH_TRUNCATED: u32 = 1 << 0;
    /// The path argument could not be read from the process's memory (the row has no path).
    pub const PATH_UNREADABLE: u32 = 1 << 1;
    /// The argument vector did not fit in [`crate::ARGV_CAP`] (or had more arguments than the
    /// capture reads); the captured arguments are a prefix.
    pub const ARGV_TRUNCATED: u32 = 1 << 2;
    /// The argument vector could not be read.
    pub const ARGV_UNREADABLE: u32 = 1 << 3;
    /// A successful exec was seen without its entry (it entered before the monitor attached,
    /// came through the compat ABI, or the entry could not be stored): the file name, arguments
    /// and result are exact; the syscall (reported as `execve`), dirfd and flags are not known.
    pub const UNPAIRED: u32 = 1 << 4;
    /// The header's `ppid` is the kernel's `real_parent` at event time (fork and exec records;
    /// other records leave it 0 and userspace fills it from the process tree).
    pub const PPID_KERNEL: u32 = 1 << 5;
    /// The syscall was made through the 32-bit compat ABI (`int 0x80` or a 32-bit program).
    pub const COMPAT: u32 = 1 << 6;
}

/// The fixed part of every record the eBPF programs send. It is followed by `path_len` bytes of
/// path (no NUL) and then `argv_len` bytes of NUL-separated arguments.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EventHeader {
    /// An [`EventKind`] number.
    pub kind: u16,
    /// A [`Syscall`] number.
    pub syscall: u16,
    /// Bits from [`flags`].
    pub flags: u32,
    /// `bpf_ktime_get_boot_ns()` when the record was made (`CLOCK_BOOTTIME`).
    pub ts_ns: u64,
    /// The actor's cgroup v2 id.
    pub cgroup_id: u64,
    /// The syscall's result (fd, 0, or -errno); for `Exit`, the wait status; 0 for `Fork`.
    pub ret: i64,
    /// Syscall-specific: `openat2`'s `resolve` flags, the new process's pid for `Fork`.
    pub aux: u64,
    /// The actor's process id (thread-group id).
    pub pid: u32,
    /// The actor's thread id.
    pub tid: u32,
    /// The actor's parent process id (`real_parent`) at the time of the event.
    pub ppid: u32,
    /// The actor's real user id.
    pub uid: u32,
    /// The actor's real group id.
    pub gid: u32,
    /// The directory fd argument (`AT_FDCWD` = -100 when the syscall has none).
    pub dirfd: i32,
    /// Open flags (`O_*`) or `execveat` flags (`AT_*`).
    pub open_flags: u32,
    /// The mode argument of an open that may create.
    pub mode: u32,
    /// Length of the path that follows the header.
    pub path_len: u32,
    /// Length of the argument vector that follows the path.
    pub argv_len: u32,
    /// The actor's `comm` (task name), NUL-padded.
    pub comm: [u8; 16],
}

/// Size in bytes of [`EventHeader`].
pub const HEADER_SIZE: usize = size_of::<EventHeader>();
const _: () = assert!(HEADER_SIZE == 96);

/// Indexes of the per-CPU counters array `COUNTERS`. Never reused.
pub mod counter {
    /// A record could not be put in the ring buffer (it was full): the event is lost.
    pub const RINGBUF_FULL: u32 = 0;
    /// An exec's entry could not be stored: its syscall, dirfd and flags are lost (the exec
    /// still produces a row, flagged `UNPAIRED`).
    pub const INFLIGHT_FULL: u32 = 1;
    /// A new task of the tree could not be added to the tracked set: its later events may be lost.
    pub const TRACKED_FULL: u32 = 2;
    /// A path argument could not be read (row delivered, flagged `PATH_UNREADABLE`).
    pub const PATH_UNREADABLE: u32 = 3;
    /// An exec seen without its entry (row delivered, flagged `UNPAIRED`).
    pub const UNPAIRED: u32 = 4;
    /// Records sent to the ring buffer.
    pub const SENT: u32 = 5;
    /// Number of counters.
    pub const COUNT: u32 = 6;
    /// Counters that mean an event or part of one never reached userspace.
    pub const LOSSES: [u32; 3] = [RINGBUF_FULL, INFLIGHT_FULL, TRACKED_FULL];
    /// Names, by index, as they appear in the ledger metadata.
    pub const NAMES: [&str; COUNT as usize] = [
        "ringbuf_full",
        "inflight_full",
        "tracked_full",
        "path_unreadable",
        "unpaired",
        "sent",
    ];
}

/// How the programs decide whether the current task belongs to the monitored run. In every mode
/// a task that descends (by fork/clone) from an in-scope task is in scope too.
pub mod scope {
    /// Tasks in the cgroup v2 whose id is [`crate::Config::target_cgroup`].
    pub const CGROUP: u32 = 1;
    /// Tasks whose real uid is [`crate::Config::target_uid`].
    pub const UID: u32 = 2;
    /// The process [`crate::Config::target_pid`] (all its threads).
    pub const PID: u32 = 3;
}

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
    pub mm_arg_start: u32,
    pub mm_arg_end: u32,
    pub bprm_filename: u32,
    /// `pt_regs` member holding the syscall number at syscall exit (`orig_ax` on x86_64).
    pub regs_nr: u32,
    /// `pt_regs` members holding syscall arguments 0..5 for native syscalls.
    pub regs_args: [u32; 6],
    /// `pt_regs` members holding syscall arguments 0..5 for compat (32-bit) syscalls.
    pub regs_args_compat: [u32; 6],
    pub _pad: u32,
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
    /// One of [`scope`]'s modes; 0 (unset) makes every program a no-op.
    pub scope_mode: u32,
    pub target_uid: u32,
    pub target_pid: u32,
    /// 1 when `sched_process_exit` passes `group_dead` as its second argument.
    pub exit_has_group_dead: u32,
    pub target_cgroup: u64,
    /// Bit of `thread_info.status` set during a compat syscall (`TS_COMPAT`); 0 when the
    /// architecture has no compat ABI.
    pub compat_mask: u32,
    pub offsets: Offsets,
}

const _: () = assert!(size_of::<Offsets>() == 120);
const _: () = assert!(size_of::<Config>() == 152);

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

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data: repr(C), Copy, no padding (sizes asserted above), any bit pattern
    // is valid.
    unsafe impl aya::Pod for super::Config {}
    unsafe impl aya::Pod for super::Offsets {}
    unsafe impl aya::Pod for super::Inflight {}
    unsafe impl aya::Pod for super::EventHeader {}
}
