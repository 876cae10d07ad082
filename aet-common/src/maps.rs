//! The names of the programs' maps that userspace opens: one copy for both sides. The kernel side
//! names each map by its static (aya-ebpf's `#[map]` takes the static's name, so it cannot use
//! these constants); the loader's unit test checks that the built object has every one of them.

pub const EVENTS: &str = "EVENTS";
pub const COUNTERS: &str = "COUNTERS";
pub const PREEMPTIONS: &str = "PREEMPTIONS";
pub const TRACKED: &str = "TRACKED";
pub const SCOPE_CGROUPS: &str = "SCOPE_CGROUPS";
pub const SCOPE_UIDS: &str = "SCOPE_UIDS";
pub const SCOPE_INDEX: &str = "SCOPE_INDEX";
pub const RUN_LIMITS: &str = "RUN_LIMITS";
pub const RUN_PRODUCED: &str = "RUN_PRODUCED";
pub const SYSCALLS: &str = "SYSCALLS";
pub const SCRATCH: &str = "SCRATCH";
pub const WALKCTX: &str = "WALKCTX";
pub const EXITS: &str = "EXITS";
pub const WITNESS_MARKS: &str = "WITNESS_MARKS";

/// Every map userspace opens or sizes by name.
pub const ALL: &[&str] = &[
    EVENTS,
    COUNTERS,
    PREEMPTIONS,
    TRACKED,
    SCOPE_CGROUPS,
    SCOPE_UIDS,
    SCOPE_INDEX,
    RUN_LIMITS,
    RUN_PRODUCED,
    SYSCALLS,
    SCRATCH,
    WALKCTX,
    EXITS,
    WITNESS_MARKS,
];
