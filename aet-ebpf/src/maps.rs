//! The maps the programs share, the configuration userspace sets before load, and the loss
//! counters. Every map is sized or filled by userspace (`loader.rs`).

use core::ptr::read_volatile;

use aet_common::{
    Config, DATA_CAP, FileIo, HEADER_SIZE, Inflight, Offsets, RunLimit, ScopeIndex, counter,
    runs::{MAX_RUNS, MAX_SCOPES},
};
use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, PerCpuArray, RingBuf},
};

/// Set by userspace before load (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
// SAFETY: Config is plain data; all-zero is its "unset" value (every program is a no-op).
pub(crate) static CONFIG: Config = unsafe { core::mem::zeroed() };

/// Records for userspace, of every run (each record names its run's slot). Its size is set by
/// userspace at load time; each run may fill at most its share of it (`RUN_LIMITS`).
#[map]
pub(crate) static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Thread id -> run slot, for the threads that descend from an in-scope task (fed by
/// `sched_process_fork`, emptied by `sched_process_exit`), and for a process-tree scope its
/// threads and descendants found at attach (by userspace): a task that leaves its run's cgroup
/// stays in its run.
#[map]
pub(crate) static TRACKED: HashMap<u32, u32> = HashMap::with_max_entries(1 << 16, 0);

/// Cgroup v2 id -> run slot: the runs scoped by cgroup (with their descendant cgroups).
#[map]
pub(crate) static SCOPE_CGROUPS: HashMap<u64, u32> = HashMap::with_max_entries(MAX_SCOPES, 0);

/// Real uid -> run slot: the runs scoped by uid.
#[map]
pub(crate) static SCOPE_UIDS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_SCOPES, 0);

/// Which scope maps hold entries (entry 0), so that a task outside every run costs only the
/// look-ups that can hit.
#[map]
pub(crate) static SCOPE_INDEX: Array<ScopeIndex> = Array::with_max_entries(1, 0);

/// This CPU's last scope decision (entry 0): the task it was made for and what it was made
/// from. Most syscalls come in runs from one task, and a hit saves the look-ups of the scope
/// maps (a helper call and two hash look-ups for a task outside every run).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ScopeMemo {
    pub(crate) tid: u32,
    /// `ScopeIndex::generation` when it was made.
    pub(crate) generation: u32,
    pub(crate) start_time: u64,
    pub(crate) cgroup: u64,
    /// `uid | gid << 32`, when runs are scoped by uid (0 otherwise).
    pub(crate) ugid: u64,
    /// The run's slot, or [`NO_RUN`].
    pub(crate) slot: u32,
    /// 1 once written.
    pub(crate) valid: u32,
    /// [`ScopeMemo::sum`] of the fields above, written last: a memo two programs wrote at once
    /// (a syscall's program preempted on this CPU by another task's, on kernels whose syscall
    /// tracepoints run preemptible) mixes their fields, and one task's tid with another's "no
    /// run" would hide every later syscall of a run's process. A mixed memo does not match its
    /// sum and is made again.
    pub(crate) check: u64,
}

impl ScopeMemo {
    #[inline(always)]
    pub(crate) fn sum(&self) -> u64 {
        let a = (self.tid as u64) << 32 | self.generation as u64;
        let b = (self.slot as u64) << 32 | self.valid as u64;
        // Each field rotated apart, so that two tasks' values do not cancel.
        a ^ self.start_time.rotate_left(13)
            ^ self.cgroup.rotate_left(29)
            ^ self.ugid.rotate_left(41)
            ^ b.rotate_left(53)
            ^ 0x9e37_79b9_7f4a_7c15
    }
}

/// [`ScopeMemo::slot`] of a task in no run.
pub(crate) const NO_RUN: u32 = u32::MAX;

#[map]
pub(crate) static SCOPE_MEMO: PerCpuArray<ScopeMemo> = PerCpuArray::with_max_entries(1, 0);

/// By run slot: its share of the ring buffer and what userspace has read of it (written by
/// userspace only).
#[map]
pub(crate) static RUN_LIMITS: Array<RunLimit> = Array::with_max_entries(MAX_RUNS, 0);

/// By run slot: what the programs have put in the ring for it, in ring bytes (atomic adds).
#[map]
pub(crate) static RUN_PRODUCED: Array<u64> = Array::with_max_entries(MAX_RUNS, 0);

/// Exec entries, for `sched_process_exec` to know which syscall (and dirfd, flags) led to it.
#[map]
pub(crate) static INFLIGHT: HashMap<u32, Inflight> = HashMap::with_max_entries(1 << 14, 0);

/// Byte accounting per open fd, keyed by `tgid << 32 | fd`. Entries are created at an fd's first
/// read, write, mapping or listing, not at its open: most opened files move no byte through
/// their fd.
#[map]
pub(crate) static FILEIO: HashMap<u64, FileIo> = HashMap::with_max_entries(1 << 16, 0);

/// Which fds of a process have a `FILEIO` entry: bit `fd` for fds below 63, bit 63 for any
/// above. Lets an exec or exit emit its process's entries without scanning the whole map.
#[map]
pub(crate) static FDMASK: HashMap<u32, u64> = HashMap::with_max_entries(1 << 14, 0);

/// Dispatch table: syscall number -> `syscall_entry(native, compat)`. Filled by userspace.
#[map]
pub(crate) static SYSCALLS: Array<u16> = Array::with_max_entries(aet_common::SYSCALL_TABLE_SIZE, 0);

pub(crate) const SCRATCH_SIZE: usize = HEADER_SIZE + DATA_CAP;

/// Where a record is built before it is copied into the ring buffer with its exact length.
#[repr(C, align(8))]
pub(crate) struct Scratch {
    pub(crate) buf: [u8; SCRATCH_SIZE],
    /// The task (`pid_tgid`) whose program last began to use this CPU's scratch
    /// ([`crate::record::claim`]).
    pub(crate) owner: u64,
}

/// One slot per CPU (indexed by CPU id; userspace sizes it to the number of possible CPUs). A
/// plain array rather than a per-CPU one: per-CPU values are limited to 32 KiB.
#[map]
pub(crate) static SCRATCH: Array<Scratch> = Array::with_max_entries(1, 0);

/// Records dropped because their CPU's scratch was taken mid-record ([`crate::record::claim`]),
/// per CPU. Not by run: the sender's run is not kept beside the scratch, so userspace counts a
/// drop against every run served at the time.
#[map]
pub(crate) static PREEMPTIONS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU, by `aet_common::witness` index: the task (`pid_tgid`) a classic tracepoint program
/// last ran for, for its witness to take (`probes::witness`).
#[map]
pub(crate) static WITNESS_MARKS: PerCpuArray<u64> =
    PerCpuArray::with_max_entries(aet_common::witness::COUNT, 0);

/// Marks this CPU's entry `which` of [`WITNESS_MARKS`] with the current task: its classic
/// program ran for this event (only where witnesses are attached: `CONFIG.witness`).
#[inline(always)]
pub(crate) fn mark(which: u32) {
    if cfg(&CONFIG.witness) == 0 {
        return;
    }
    if let Some(p) = WITNESS_MARKS.get_ptr_mut(which) {
        // SAFETY: this CPU's entry; helper without preconditions.
        unsafe { *p = aya_ebpf::helpers::generated::bpf_get_current_pid_tgid() };
    }
}

/// Per-CPU counters by run, indexed by `slot * counter::COUNT + counter`.
#[map]
pub(crate) static COUNTERS: PerCpuArray<u64> =
    PerCpuArray::with_max_entries(MAX_RUNS * counter::COUNT, 0);

#[inline(always)]
pub(crate) fn cfg<T: Copy>(field: &T) -> T {
    // SAFETY: CONFIG is a plain global; the volatile read keeps the compiler from folding the
    // zero initialiser that userspace replaces at load time.
    unsafe { read_volatile(field) }
}

#[inline(always)]
pub(crate) fn offsets() -> &'static Offsets {
    &CONFIG.offsets
}

/// Counts one `idx` (an `aet_common::counter`) for the run in slot `run`.
#[inline(always)]
pub(crate) fn count(run: u32, idx: u32) {
    if let Some(p) = COUNTERS.get_ptr_mut(run.wrapping_mul(counter::COUNT).wrapping_add(idx)) {
        // SAFETY: per-CPU slot, 8-aligned. Atomic: where programs can be preempted (7.x),
        // another task's program on this CPU may add to it between a load and a store.
        unsafe { atomic_add(p, 1) };
    }
}

/// `*p += v`, atomically (the BPF `lock` add; core's atomics lack fetch_add on this target).
#[inline(always)]
pub(crate) unsafe fn atomic_add(p: *mut u64, v: u64) {
    // SAFETY: p is a valid, 8-aligned map value field.
    unsafe {
        core::arch::asm!("lock *(u64 *)({p} + 0) += {v}", p = in(reg) p, v = in(reg) v);
    }
}

/// The slots of `LEGACY_ARGS`, one per global function that takes its argument there (and per
/// loop, whose context its iterations take from there).
#[allow(dead_code)]
pub(crate) mod legacy_slot {
    pub(crate) const EMIT_FD: u32 = 0;
    pub(crate) const PARSE_MSGHDR: u32 = 1;
    pub(crate) const EMIT_PAYLOAD: u32 = 2;
    pub(crate) const WALK: u32 = 3;
    pub(crate) const FD_FILE: u32 = 4;
    pub(crate) const LOOP_WALK: u32 = 5;
    pub(crate) const LOOP_ARGV: u32 = 6;
    pub(crate) const LOOP_MSG_FDS: u32 = 7;
    pub(crate) const LOOP_MMSGS: u32 = 8;
    pub(crate) const LOOP_FAN: u32 = 9;
    pub(crate) const LOOP_IOVS: u32 = 10;
    pub(crate) const LOOP_PAYLOAD_MMSGS: u32 = 11;
    pub(crate) const LOOP_FLUSH: u32 = 12;
    pub(crate) const LOOP_FLUSH_ALL: u32 = 13;
    pub(crate) const COUNT: u32 = 14;
}

/// Room for one global function's argument in [`LEGACY_ARGS`].
#[cfg(feature = "legacy")]
#[repr(C, align(8))]
pub(crate) struct LegacyArg([u8; 192]);

/// The legacy object's way to hand a struct to a global function: a kernel before 5.12 passes
/// a global function scalars only (and the verifier checks a static one again at every call,
/// inside every loop iteration), so the caller leaves the struct in this CPU's slot of the
/// function and calls it without arguments. Per-CPU is safe there: those kernels run the
/// programs with preemption off and never nest them.
#[cfg(feature = "legacy")]
#[map]
pub(crate) static LEGACY_ARGS: PerCpuArray<LegacyArg> =
    PerCpuArray::with_max_entries(legacy_slot::COUNT, 0);

/// This CPU's slot `slot` of [`LEGACY_ARGS`], as a `T`.
#[cfg(feature = "legacy")]
#[inline(always)]
pub(crate) fn legacy_arg<T>(slot: u32) -> Option<*mut T> {
    const { assert!(core::mem::size_of::<T>() <= core::mem::size_of::<LegacyArg>()) };
    LEGACY_ARGS.get_ptr_mut(slot).map(|p| p as *mut T)
}

/// Leaves `arg` in slot `slot` and calls `global`, which reads it from there; 0 when the slot
/// cannot be had.
#[cfg(feature = "legacy")]
#[inline(always)]
pub(crate) fn legacy_call<T: Copy>(slot: u32, arg: &T, global: extern "C" fn() -> i32) -> i32 {
    match legacy_arg::<T>(slot) {
        Some(p) => {
            // SAFETY: this CPU's slot, large enough for T (checked at compile time).
            unsafe { core::ptr::write(p, *arg) };
            global()
        }
        None => 0,
    }
}
