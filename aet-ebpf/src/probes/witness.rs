//! Witnesses: a raw tracepoint program beside each record-building classic tracepoint program,
//! on the same tracepoint and attached after it, for kernels that count a classic program's
//! skipped runs nowhere (before 6.7).
//!
//! The kernel skips a classic tracepoint's programs while anything on their CPU holds its "BPF
//! is running" mark (`bpf_prog_active`), and a `bpf()` map update, look-up or delete from
//! userspace holds it for the whole call. On a kernel that preempts kernel code (`preempt=full`,
//! PREEMPT_RT, low-latency builds), another BPF user's tool preempted inside such a call leaves
//! the mark on its CPU for every task that runs there in its place: their syscalls, forks, execs
//! and exits go unrecorded, and before 6.7 the kernel counts that nowhere. A raw tracepoint's
//! program does not look at that mark (it is skipped only while it is itself running on the
//! CPU), so the witness runs for every event the classic program should have seen.
//!
//! Before 6.7 the kernel calls a tracepoint's probes one after the other with preemption off:
//! the classic program and its witness run back to back on one CPU for one task. The classic
//! program marks its CPU's entry of [`WITNESS_MARKS`] with the task (`pid_tgid`) as it starts;
//! the witness takes the mark (leaving 0; `maps::mark` is the classic programs' side). A witness that does not find its own task there knows
//! the classic program was skipped for this event, and if the event is one the classic program
//! would have recorded for a run, it counts a lost event for that run (`program_skipped`): the
//! run is never called complete without it. It also keeps the tracked set right where the
//! skipped program would have changed it (a new task joins its creator's run; an ended one
//! leaves it), so that one skip loses one event, not a process's whole future.

use aet_common::{counter, kfunc, witness};
use aya_ebpf::{helpers::generated, macros::raw_tracepoint, programs::RawTracePointContext};

use super::syscall::recorded_syscall;
use crate::{
    kernel::rdonly_cast,
    maps::{INFLIGHT, TRACKED, WITNESS_MARKS, cfg, count, offsets},
    task::Task,
};

/// Whether the classic program `which` ran for the current task's event (its mark is there),
/// taking the mark. A mark that cannot be read is a skip: the witness then counts a loss rather
/// than vouch for what it could not see.
#[inline(always)]
fn classic_ran(which: u32) -> bool {
    let Some(p) = WITNESS_MARKS.get_ptr_mut(which) else {
        return false;
    };
    // SAFETY: this CPU's entry; helper without preconditions.
    unsafe {
        let me = generated::bpf_get_current_pid_tgid();
        let was = *p;
        *p = 0;
        was == me
    }
}

/// `raw_syscalls:sys_exit`: a syscall `sys_exit` would have recorded for a run, skipped.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub(crate) fn witness_sys_exit(_ctx: RawTracePointContext) -> i32 {
    if classic_ran(witness::SYS_EXIT) {
        return 0;
    }
    let mut task = Task::current();
    let regs = task.regs();
    if regs.is_null() {
        return 0;
    }
    let nr = regs.read::<i32>(cfg(&offsets().regs_nr)) as i64;
    if recorded_syscall(&task, regs, nr).is_some() && task.in_scope() {
        count(task.run, counter::PROGRAM_SKIPPED);
    }
    0
}

/// `task:task_newtask` (arguments: the new task, its clone flags): a run's task made a task the
/// skipped program did not put in the tracked set. It joins it here; its fork row (or a
/// thread's nothing) is counted lost.
#[raw_tracepoint(tracepoint = "task_newtask")]
pub(crate) fn witness_task_newtask(ctx: RawTracePointContext) -> i32 {
    if classic_ran(witness::NEWTASK) {
        return 0;
    }
    let mut task = Task::current();
    if !task.in_scope() {
        return 0;
    }
    count(task.run, counter::PROGRAM_SKIPPED);
    let child = rdonly_cast::<{ kfunc::TYPE_TASK }>(ctx.arg(0));
    if child.is_null() {
        return 0;
    }
    let tid = child.read::<i32>(cfg(&offsets().task_pid)) as u32;
    if tid != 0 && TRACKED.insert(tid, task.run, 0).is_err() {
        count(task.run, counter::TRACKED_FULL);
    }
    0
}

/// `sched:sched_process_exec`: a run's exec whose row is lost.
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub(crate) fn witness_sched_process_exec(_ctx: RawTracePointContext) -> i32 {
    if classic_ran(witness::EXEC) {
        return 0;
    }
    let mut task = Task::current();
    if task.in_scope() {
        count(task.run, counter::PROGRAM_SKIPPED);
    }
    0
}

/// `sched:sched_process_exit`: a run's task ended unrecorded (its end, or its files' byte
/// accounting, is lost); it leaves the tracked set here.
#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub(crate) fn witness_sched_process_exit(_ctx: RawTracePointContext) -> i32 {
    if classic_ran(witness::EXIT) {
        return 0;
    }
    let mut task = Task::current();
    if !task.in_scope() {
        return 0;
    }
    count(task.run, counter::PROGRAM_SKIPPED);
    let _ = TRACKED.remove(task.tid);
    let _ = INFLIGHT.remove(task.tid);
    0
}

/// io_uring's submission: a run's request whose row is lost (attached to the name this kernel
/// gives the tracepoint).
#[raw_tracepoint(tracepoint = "io_uring_submit_req")]
pub(crate) fn witness_io_uring_submit_req(_ctx: RawTracePointContext) -> i32 {
    if classic_ran(witness::IO_URING) {
        return 0;
    }
    let mut task = Task::current();
    if task.in_scope() {
        count(task.run, counter::PROGRAM_SKIPPED);
    }
    0
}
