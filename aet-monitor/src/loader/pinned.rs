//! The monitor's own map accesses, made where nothing can take their CPU.
//!
//! A map update, look-up or delete made through the `bpf()` syscall marks its CPU busy with
//! BPF (`bpf_prog_active`) for its duration, and a classic tracepoint's program does not run on
//! a CPU so marked: the kernel skips it and counts it in the program's `recursion_misses`. On a
//! kernel that preempts kernel code (7.x's lazy preemption, a full-preemption build), a
//! monitor thread preempted inside such a syscall leaves the mark on its CPU while the tasks
//! that run there in its place make syscalls: each is skipped (measured under load on 7.2: 92
//! in one boot, every run beside it `inconclusive`). So the thread takes the lowest real-time
//! priority (`SCHED_FIFO` 1) around each of its map accesses: no normal task preempts it
//! there, and while it runs, no other task's syscall happens on its CPU. Where the priority
//! cannot be had (no `CAP_SYS_NICE`: a container's default), the access is made as before and
//! a skip stays counted.

use std::cell::Cell;

thread_local! {
    /// How deep this thread is in pinned accesses (the outermost restores the policy).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// While it lives, the current thread runs at `SCHED_FIFO` priority 1 (when it may).
pub(super) struct Pinned {
    /// The policy and priority to restore, when this guard changed them.
    restore: Option<(libc::c_int, libc::sched_param)>,
}

impl Pinned {
    pub(super) fn new() -> Self {
        let depth = DEPTH.with(|d| {
            let v = d.get();
            d.set(v + 1);
            v
        });
        if depth > 0 {
            return Self { restore: None };
        }
        // SAFETY: plain syscalls on the calling thread with valid pointers.
        unsafe {
            let policy = libc::sched_getscheduler(0);
            let mut param = libc::sched_param { sched_priority: 0 };
            if policy < 0 || libc::sched_getparam(0, &mut param) != 0 {
                return Self { restore: None };
            }
            if policy == libc::SCHED_FIFO || policy == libc::SCHED_RR {
                return Self { restore: None };
            }
            let fifo = libc::sched_param { sched_priority: 1 };
            if libc::sched_setscheduler(0, libc::SCHED_FIFO, &fifo) != 0 {
                return Self { restore: None };
            }
            Self {
                restore: Some((policy, param)),
            }
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        if let Some((policy, param)) = self.restore {
            // SAFETY: restores what `new` read for this thread. The nice value is kept by the
            // kernel across the two changes.
            unsafe { libc::sched_setscheduler(0, policy, &param) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_access_runs_real_time_and_the_thread_gets_its_policy_and_nice_back() {
        std::thread::spawn(|| {
            // SAFETY: plain syscalls on this thread.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 5) };
            let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            assert_eq!(nice(), 5);
            {
                let _outer = Pinned::new();
                // SAFETY: as above.
                let policy = unsafe { libc::sched_getscheduler(0) };
                // Root (CI, this machine) may take the priority; elsewhere nothing changes.
                if nix::unistd::geteuid().is_root() {
                    assert_eq!(policy, libc::SCHED_FIFO);
                }
                let inner = Pinned::new();
                drop(inner);
                // SAFETY: as above.
                assert_eq!(unsafe { libc::sched_getscheduler(0) }, policy, "nested");
            }
            // SAFETY: as above.
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER);
            assert_eq!(nice(), 5);
        })
        .join()
        .unwrap();
    }
}
