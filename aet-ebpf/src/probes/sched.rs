//! The process tree: every task created by an in-scope task joins the tracked set (so a process
//! that leaves the run's cgroup is still followed); new processes and process ends are recorded;
//! a task of a run moved to a cgroup outside the run's is counted (`scope_left`).

use aet_common::{EventKind, Syscall, counter, kfunc, runs::MAX_CGROUP_LEVEL, witness};
use aya_ebpf::{
    EbpfContext as _,
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
};

use super::fileio::fileio_flush;
use crate::{
    kernel::{kread, rdonly_cast},
    maps::{CONFIG, INFLIGHT, NO_RUN, SCOPE_CGROUPS, TRACKED, cfg, count, mark, offsets},
    record::{claim, fill_proc_header, header, scratch, send},
    task::Task,
};

/// `CLONE_THREAD` (uapi).
const CLONE_THREAD: u64 = 0x0001_0000;

/// A field of a classic tracepoint's record, at the offset its `format` gave (`CONFIG.fields`).
#[inline(always)]
pub(crate) fn record_field<T: Copy + Default>(ctx: &TracePointContext, offset: &u32) -> T {
    kread(ctx.as_ptr() as u64, cfg(offset))
}

/// A new task (`task:task_newtask`, in its creator before the task can run). If its creator
/// is in scope it joins the tracked set; a new process (not a thread) is recorded.
#[tracepoint(category = "task", name = "task_newtask")]
pub(crate) fn task_newtask(ctx: TracePointContext) -> u32 {
    mark(witness::NEWTASK);
    let mut task = Task::current();
    if !task.in_scope() {
        return 0;
    }
    claim();
    let f = &CONFIG.fields;
    let child_tid = record_field::<i32>(&ctx, &f.newtask_pid) as u32;
    let clone_flags = record_field::<u64>(&ctx, &f.newtask_flags);
    if child_tid == 0 {
        return 0;
    }
    if TRACKED.insert(child_tid, task.run, 0).is_err() {
        count(task.run, counter::TRACKED_FULL);
    }
    if clone_flags & CLONE_THREAD != 0 {
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
    header(s).aux = child_tid as u64;
    send(s);
    0
}

/// A task ends. It leaves the tracked set; the end of a process (its last thread) is recorded
/// with its wait status, after the byte accounting of the files it still had open.
#[tracepoint(category = "sched", name = "sched_process_exit")]
pub(crate) fn sched_process_exit(ctx: TracePointContext) -> u32 {
    mark(witness::EXIT);
    let mut task = Task::current();
    let (tid, tgid) = (task.tid, task.tgid);
    if !task.in_scope() {
        return 0;
    }
    claim();
    let _ = TRACKED.remove(tid);
    let _ = INFLIGHT.remove(tid);
    let group_dead = if cfg(&CONFIG.fields.exit_group_dead) != 0 {
        record_field::<u8>(&ctx, &CONFIG.fields.exit_group_dead) != 0
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

/// A task was moved to a cgroup (someone wrote its pid to a `cgroup.procs`; the tracepoint
/// fires after the move). A task that enters a run's cgroup (or one below it: a container
/// runtime placing its container under `$AET_CGROUP`) joins the run's tracked set, so that it
/// stays recorded wherever it goes next. A tracked task whose cgroup v2 is now outside its run's
/// has left what the run's end freezes and kills: counted (`scope_left`), and the record is
/// incomplete. So is a task a run's process moves out when the task was not tracked.
#[raw_tracepoint(tracepoint = "cgroup_attach_task")]
pub(crate) fn cgroup_attach_task(ctx: RawTracePointContext) -> i32 {
    let moved = rdonly_cast::<{ kfunc::TYPE_TASK }>(ctx.arg(2));
    if moved.is_null() {
        return 0;
    }
    let tid = moved.read::<i32>(cfg(&offsets().task_pid)) as u32;
    // Where the task is now on the unified hierarchy (a move on a v1 hierarchy, which runc
    // makes for every controller, leaves it unchanged): the run whose cgroup is it or an
    // ancestor of it, looked up to the deepest level a run's cgroup may sit at.
    let o = offsets();
    let mut cg = moved
        .ptr(cfg(&o.task_cgroups))
        .ptr(cfg(&o.css_set_dfl_cgrp));
    let mut now = NO_RUN;
    for _ in 0..MAX_CGROUP_LEVEL + 8 {
        if cg.is_null() {
            break;
        }
        let kn = cg.ptr(cfg(&o.cgroup_kn));
        let id = if kn.is_null() {
            0
        } else {
            kn.read::<u64>(cfg(&o.kernfs_node_id))
        };
        // SAFETY: copied out.
        if id != 0
            && let Some(&s) = unsafe { SCOPE_CGROUPS.get(id) }
        {
            now = s;
            break;
        }
        let parent = cg.ptr(cfg(&o.cgroup_parent_css));
        if parent.is_null() {
            break;
        }
        cg = parent.ptr(cfg(&o.css_cgroup));
    }
    // SAFETY: copied out.
    match unsafe { TRACKED.get(tid) }.copied() {
        Some(was) if was != now => count(was, counter::SCOPE_LEFT),
        Some(_) => {}
        None if now != NO_RUN => {
            if TRACKED.insert(tid, now, 0).is_err() {
                count(now, counter::TRACKED_FULL);
            }
        }
        None => {
            // Not through the per-CPU memo: a raw tracepoint's program may be preempted
            // (PREEMPT_RT, 7.x), and the memo is the classic programs'.
            let mut mover = Task::current();
            if mover.in_scope_unmemoized() {
                count(mover.run, counter::SCOPE_LEFT);
            }
        }
    }
    0
}
