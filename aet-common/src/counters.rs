//! The loss counters: every way the programs can fail to deliver a record, counted per CPU.

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
    /// A socket message that names hosts (a DNS query or answer, a connection's first bytes)
    /// was sent or received beyond what the programs capture (more messages in one
    /// `sendmmsg`/`recvmmsg`, or more buffers than they read): a name may be missing.
    pub const PAYLOAD_UNRECORDED: u32 = 13;
    /// A syscall of the run could not be handed from `sys_exit` to its family's program (the
    /// tail call failed: an empty slot of the program array): the event is lost.
    pub const DISPATCH_FAILED: u32 = 14;
    /// The kernel skipped a record-building program for an event of the run (a classic
    /// tracepoint's program is skipped while anything on its CPU holds the kernel's BPF mark:
    /// another BPF user's `bpf()` map call preempted there), seen by that program's witness on
    /// a kernel that counts such a skip nowhere (before 6.7): the event is lost.
    pub const PROGRAM_SKIPPED: u32 = 15;
    /// Number of counters.
    pub const COUNT: u32 = 16;
    /// Counters that mean an event or part of one never reached userspace.
    pub const LOSSES: [u32; 8] = [
        RINGBUF_FULL,
        INFLIGHT_FULL,
        TRACKED_FULL,
        FILEIO_FULL,
        QUOTA_FULL,
        FD_UNRECORDED,
        DISPATCH_FAILED,
        PROGRAM_SKIPPED,
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
        "payload_unrecorded",
        "dispatch_failed",
        "program_skipped",
    ];
}

/// The record-building classic tracepoint programs that have a witness: a raw tracepoint
/// program on the same tracepoint, attached after it, which the kernel runs even when it
/// skips the classic one (a raw tracepoint's program is skipped only for itself running on
/// that CPU, never for the kernel's BPF mark). The classic program marks its CPU's entry
/// (`WITNESS_MARKS`, by these indices) with the task it ran for; a witness that finds no mark
/// of its task knows the classic program was skipped for this event.
pub mod witness {
    /// `raw_syscalls:sys_exit` (`sys_exit`).
    pub const SYS_EXIT: u32 = 0;
    /// `task:task_newtask`.
    pub const NEWTASK: u32 = 1;
    /// `sched:sched_process_exec`.
    pub const EXEC: u32 = 2;
    /// `sched:sched_process_exit`.
    pub const EXIT: u32 = 3;
    /// io_uring's submission.
    pub const IO_URING: u32 = 4;
    /// Number of entries.
    pub const COUNT: u32 = 5;
}

/// The programs `sys_exit` hands a syscall to, by their index in its program array (`EXITS`;
/// the loader's `PROGRAMS` names the program at each).
pub mod exits {
    /// Reads, writes, closes, duplications, listings.
    pub const IO: u32 = 0;
    /// execve, execveat.
    pub const EXEC: u32 = 1;
    /// recvmsg, recvmmsg.
    pub const RECV: u32 = 2;
    /// The other socket syscalls.
    pub const NET: u32 = 3;
    /// Everything else that names a file or a process.
    pub const EVENT: u32 = 4;
    /// A socket syscall's payload, after its family's record.
    pub const PAYLOAD: u32 = 5;
    /// Number of entries.
    pub const COUNT: u32 = 6;
}
