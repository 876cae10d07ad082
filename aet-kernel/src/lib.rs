//! What aet needs from the running kernel: BTF layouts, tracefs, cgroups, /proc, and the guard
//! process that kills (or thaws) a run's cgroup when the aet that ran it dies.
pub mod bpffs;
pub mod btf;
pub mod cgroup;
pub mod guard;
pub mod leftovers;
pub mod mountinfo;
pub mod procfs;
pub mod tracefs;

/// Returns once every BPF program invocation running when it was called has returned: the
/// programs run with preemption off (or inside an RCU read section), and
/// `membarrier(MEMBARRIER_CMD_GLOBAL)` is `synchronize_rcu()` (about 8 ms here). Where that
/// command is refused (`nohz_full` kernels), sleeps 20 ms, far longer than any invocation.
pub fn wait_for_running_programs() {
    /// `MEMBARRIER_CMD_GLOBAL` of `<linux/membarrier.h>`.
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    // SAFETY: a syscall without pointer arguments.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
    if r != 0 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[cfg(test)]
mod floors {
    /// The floors of this crate's modules, from the bottom up (what the crate root defines is
    /// below them all).
    const FLOORS: &[&[&str]] = &[
        &["bpffs", "btf", "cgroup", "mountinfo", "procfs", "tracefs"],
        &["leftovers"],
        &["guard"],
    ];

    #[test]
    fn layers_point_one_way() {
        aet_checks::layers::assert_floors(env!("CARGO_MANIFEST_DIR"), FLOORS);
    }
}
