//! Runs in the kernel's maps: how many at once, and the per-run limits and scope entries.

use core::mem::size_of;

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
