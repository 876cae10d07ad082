//! The process tree: every task created by an in-scope task joins the tracked set (so a process
//! that leaves the run's cgroup is still followed); new processes and process ends are recorded;
//! a task of a run moved to a cgroup outside the run's is counted (`scope_left`).

use aet_common::{EventKind, Syscall, counter, kfunc, runs::MAX_CGROUP_LEVEL};
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

use super::fileio::fileio_flush;
use crate::{
    kernel::rdonly_cast,
    maps::{CONFIG, INFLIGHT, NO_RUN, SCOPE_CGROUPS, TRACKED, cfg, count, offsets},
    record::{claim, fill_proc_header, header, scratch, send},
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
    claim();
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
    claim();
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
            let mut mover = Task::current();
            if mover.in_scope() {
                count(mover.run, counter::SCOPE_LEFT);
            }
        }
    }
    0
}
