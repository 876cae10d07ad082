//! The process tree: every task created by an in-scope task joins the tracked set (so a process
//! that leaves the run's cgroup is still followed); new processes and process ends are recorded.

use aet_common::{EventKind, Syscall, counter, kfunc};
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

use super::fileio::fileio_flush;
use crate::{
    kernel::rdonly_cast,
    maps::{CONFIG, INFLIGHT, TRACKED, cfg, count, offsets},
    record::{fill_proc_header, header, scratch, send},
    task::Task,
};

/// A new task. If its creator is in scope it joins the tracked set; a new process (not a
/// thread) is recorded.
#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub(crate) fn sched_process_fork(ctx: RawTracePointContext) -> i32 {
    let mut task = Task::current();
    if !task.in_scope() {
        return 0;
    }
    let child = rdonly_cast::<{ kfunc::TYPE_TASK }>(ctx.arg(1));
    if child.is_null() {
        return 0;
    }
    let child_tid = child.read::<i32>(cfg(&offsets().task_pid)) as u32;
    let child_tgid = child.read::<i32>(cfg(&offsets().task_tgid)) as u32;
    if TRACKED.insert(child_tid, task.run, 0).is_err() {
        count(task.run, counter::TRACKED_FULL);
    }
    if child_tid != child_tgid {
        return 0;
    }
    let Some(s) = scratch() else { return 0 };
    fill_proc_header(
        header(s),
        &mut task,
        EventKind::Fork,
        Syscall::None as u16,
        0,
    );
    header(s).aux = child_tgid as u64;
    send(s);
    0
}

/// A task ends. It leaves the tracked set; the end of a process (its last thread) is recorded
/// with its wait status, after the byte accounting of the files it still had open.
#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub(crate) fn sched_process_exit(ctx: RawTracePointContext) -> i32 {
    let mut task = Task::current();
    let (tid, tgid) = (task.tid, task.tgid);
    if !task.in_scope() {
        return 0;
    }
    let _ = TRACKED.remove(tid);
    let _ = INFLIGHT.remove(tid);
    let group_dead = if cfg(&CONFIG.exit_has_group_dead) != 0 {
        ctx.arg::<u64>(1) & 0xff != 0
    } else {
        tid == tgid
    };
    if !group_dead {
        return 0;
    }
    fileio_flush(&task, 0, u32::MAX, true);
    let Some(s) = scratch() else { return 0 };
    let code: i32 = task.ptr.read(cfg(&offsets().task_exit_code));
    fill_proc_header(
        header(s),
        &mut task,
        EventKind::Exit,
        Syscall::None as u16,
        code as i64,
    );
    send(s);
    0
}
