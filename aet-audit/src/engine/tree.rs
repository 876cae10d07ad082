//! The process tree as the engine walks it: forks, execs and exits tracked per process, and
//! the rows of aet's own set-up (bwrap building the sandbox, aet's stage) and of a container
//! runtime's (before the container's first exec) left out.

use arrow_array::Array;

use aet_common::EventKind;

use super::super::batch::{BatchCols, RowRef, argv_at};
use super::super::{batch::lossy, scanner::Scanner};
use super::Walk;
use crate::policy::Access;

/// aet's stage: the binary bound at `/.aet/bin/aet` (at `/.aet/aet` before 0.2), run as
/// `aet __stage`.
fn is_stage(exe: &[u8], argv: Option<&[String]>) -> bool {
    matches!(exe, b"/.aet/bin/aet" | b"/.aet/aet")
        || argv.is_some_and(|a| a.get(1).is_some_and(|x| x == "__stage"))
}

/// Whether an exec is a container runtime re-executing itself to set the container up (`runc
/// init`, `crun init`, `youki init`: runc runs a sealed copy of its own binary, through
/// `/dev/fd/N` or a memfd, before the container's first process), which is still the runtime's.
/// Asked only of a process that entered the run from outside and has not run the command yet.
fn is_runtime_init(argv: Option<&[String]>) -> bool {
    let Some([prog, sub, ..]) = argv else {
        return false;
    };
    let name = prog.rsplit('/').next().unwrap_or(prog);
    sub == "init" && matches!(name, "runc" | "crun" | "youki")
}

/// The process tree and aet's set-up: `None` when the row is done with here (a fork, an exit,
/// a row of aet's own set-up), else the row's process.
pub(super) fn track(
    e: &mut Scanner<'_>,
    w: &mut Walk,
    c: &BatchCols<'_>,
    i: usize,
    kind: Option<EventKind>,
) -> Option<u32> {
    let BatchCols {
        syscall,
        pid,
        ppid,
        comm,
        ts,
        path,
        resolved,
        ret,
        errno,
        argv,
        child,
        ..
    } = c;
    let p = pid.value(i);
    // The columns only a process's first row needs.
    let (name, t) = (|| comm.value(i), || ts.value(i));
    if w.first {
        w.first = false;
        e.tally.root_pid = Some(p);
        e.tally.first_ts_ns = t();
        let pr = e.proc_mut(p, ppid.value(i), name(), t());
        pr.setup = w.audit_setup;
        pr.seen_start = true;
    }
    // Rows of one process come in runs: remember the last one's state.
    let setup = if p == w.last_pid {
        w.last_setup
    } else {
        let pp = ppid.value(i);
        w.last_pid = p;
        let new = !e.procs.contains_key(&p);
        let pr = e.proc_mut(p, pp, name(), t());
        if new && w.runtime_entries {
            // No process of the run forked it: it entered the run's cgroup from outside (a
            // container runtime's `runc init`, joining the container it sets up). Until its
            // first exec it is the runtime's, not the command's; its children are too.
            pr.setup = true;
            pr.runtime = true;
        }
        w.last_setup = pr.setup;
        w.last_setup
    };
    match kind {
        Some(EventKind::Fork) => {
            if child.is_valid(i) {
                let ch = child.value(i);
                let parent = e.procs.get(&p);
                let runtime = parent.is_some_and(|x| x.runtime && x.setup);
                let helper = parent.is_some_and(|x| x.setup && (x.stage || x.stage_helper));
                let pr = e.proc_mut(ch, p, name(), t());
                pr.seen_start = true;
                pr.setup = setup;
                pr.runtime = runtime;
                pr.stage_helper = helper;
                pr.ppid = p;
                if ch == w.last_pid {
                    w.last_setup = setup;
                }
            }
            return None;
        }
        Some(EventKind::Exit | EventKind::Memfd) => {
            if setup {
                e.tally.setup_rows += 1;
            }
            return None;
        }
        Some(EventKind::Exec) => {
            let ok = ret.is_valid(i) && ret.value(i) >= 0;
            if ok {
                let exe = resolved.get(i).or(path.get(i)).unwrap_or_default();
                let args = argv_at(argv, i);
                let pr = e.procs.get_mut(&p).expect("created above");
                let stage = setup && is_stage(exe, args.as_deref());
                // What the stage runs before the command is aet's; the stage's own exec of
                // anything else is the command.
                let stays_setup = setup
                    && (exe.ends_with(b"/bwrap")
                        || stage
                        || pr.stage_helper
                        || pr.runtime && is_runtime_init(args.as_deref()));
                pr.stage = stage;
                pr.seen_start = true;
                pr.exe = Some(lossy(exe));
                pr.argv = args;
                pr.comm = lossy(name());
                pr.setup = stays_setup;
                if p == w.last_pid {
                    w.last_setup = stays_setup;
                }
            }
        }
        // Used, not refused (see the summary's count).
        Some(EventKind::IoUring)
            if !syscall.is_valid(i) || ret.is_valid(i) && ret.value(i) >= 0 =>
        {
            e.tally.io_uring_rows += 1
        }
        _ => {}
    }
    if setup {
        e.tally.setup_rows += 1;
        if e.procs.get(&p).is_some_and(|x| x.runtime) {
            e.tally.runtime_rows += 1;
        }
        // The stage's exec of the command is the command's first access.
        if kind == Some(EventKind::Exec)
            && e.barrier.is_some()
            && errno.is_valid(i)
            && let Some(p1) = resolved.get(i).or(path.get(i))
        {
            let row = RowRef::new(c, i, p, kind, false).at_path();
            let id = e.path_id(p1);
            e.check_barrier(&row, Some(errno.value(i)), Access::Exec, id, false);
        }
        return None;
    }
    Some(p)
}
