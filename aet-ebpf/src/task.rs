//! The current task as the hot path sees it (ids, cgroup, credentials, mount namespace), whether
//! it is in the run's scope, its files by fd, and a file's identity.

use aet_common::{
    EventHeader, ScopeIndex, fileio, flags, kfunc,
    uapi::{S_IFDIR, S_IFMT, S_IFREG, S_IFSOCK},
};

#[cfg(not(feature = "legacy"))]
use aya_ebpf::helpers::generated;

#[cfg(feature = "legacy")]
use crate::maps::{legacy_arg, legacy_slot};
use crate::{
    kernel::{KPtr, kread, mount_id, rdonly_cast},
    maps::{
        CONFIG, NO_RUN, SCOPE_CGROUPS, SCOPE_INDEX, SCOPE_MEMO, SCOPE_UIDS, TRACKED, cfg, offsets,
    },
};

/// The run the task belongs to (its slot), if any: its cgroup's ancestor at a level where runs'
/// cgroups sit is a run's cgroup (so a run covers its descendant cgroups), or its uid is a run's,
/// or it descends from a task of a run (tracked).
#[inline(always)]
pub(crate) fn run_of(task: &mut Task) -> Option<u32> {
    let index = SCOPE_INDEX.get(0)?;
    // The generation is read once, before the scope maps: a decision is remembered under the
    // generation it was made in. Read again after the look-up, a generation userspace bumped
    // meanwhile (a run registered between the look-up and the store) would vouch for a "no run"
    // made before the run's scope existed, and hide that task until the next change.
    // SAFETY: a map value, read as it is.
    let generation = unsafe { core::ptr::read_volatile(&index.generation) };
    let memo = SCOPE_MEMO.get_ptr_mut(0)?;
    // SAFETY: this CPU's entry; the programs run with preemption off, so nothing else writes it
    // meanwhile.
    let memo = unsafe { &mut *memo };
    let start_time = task.start_time();
    let cgroup = task.cgroup();
    let ugid = if index.uids != 0 {
        let (u, g) = task.uid_gid();
        u as u64 | (g as u64) << 32
    } else {
        0
    };
    if memo.valid == 1
        && memo.tid == task.tid
        && memo.start_time == start_time
        && memo.generation == generation
        && memo.cgroup == cgroup
        && memo.ugid == ugid
        && memo.check == memo.sum()
    {
        return (memo.slot != NO_RUN).then_some(memo.slot);
    }
    let run = look_up_run(task, index);
    memo.tid = task.tid;
    memo.generation = generation;
    memo.start_time = start_time;
    memo.cgroup = cgroup;
    memo.ugid = ugid;
    memo.slot = run.unwrap_or(NO_RUN);
    memo.valid = 1;
    memo.check = memo.sum();
    run
}

/// The run of the nearest cgroup at one of `levels` (bits 0-7) from the task's own up, where
/// tracing programs have no `bpf_get_current_ancestor_cgroup_id` (before 5.11): up the
/// `cgroup.self.parent` chain, at most [`LEGACY_CGROUP_STEPS`] steps (a task nested deeper below
/// level 7 than that is not found in a run's cgroup; its uid may still place it).
#[cfg(feature = "legacy")]
#[inline(always)]
fn legacy_ancestor_run(task: &mut Task, levels: u32) -> Option<u32> {
    task.cgroup();
    let o = offsets();
    let mut cg = task
        .ptr
        .ptr(cfg(&o.task_cgroups))
        .ptr(cfg(&o.css_set_dfl_cgrp));
    let mut level = task.cgroup_level;
    for _ in 0..LEGACY_CGROUP_STEPS {
        if cg.is_null() {
            return None;
        }
        if level < 8 && levels & (1 << level) != 0 {
            let kn = cg.ptr(cfg(&o.cgroup_kn));
            let id = if kn.is_null() {
                0
            } else {
                kn.read::<u64>(cfg(&o.kernfs_node_id))
            };
            // SAFETY: copied out.
            if id != 0
                && let Some(&slot) = unsafe { SCOPE_CGROUPS.get(&id) }
            {
                return Some(slot);
            }
        }
        if level == 0 {
            return None;
        }
        cg = cg.ptr(cfg(&o.cgroup_parent_css)).ptr(cfg(&o.css_cgroup));
        level -= 1;
    }
    None
}

/// Steps up the cgroup tree [`legacy_ancestor_run`] takes.
#[cfg(feature = "legacy")]
const LEGACY_CGROUP_STEPS: u32 = 24;

/// [`run_of`] without the memo: the scope maps' answer.
#[inline(always)]
// `0 <= own_level` in the unrolled macro for level 0.
#[allow(unused_comparisons)]
fn look_up_run(task: &mut Task, index: &ScopeIndex) -> Option<u32> {
    let levels = index.cgroup_levels;
    #[cfg(feature = "legacy")]
    if levels != 0
        && let Some(slot) = legacy_ancestor_run(task, levels)
    {
        return Some(slot);
    }
    #[cfg(not(feature = "legacy"))]
    if levels != 0 {
        // The task's own cgroup is its ancestor at its own level (read through BTF pointers,
        // and needed for the record anyway); a cgroup above it is read by the helper, since the
        // verifier allows no load from `cgroup.ancestors` (a flexible array of pointers). One
        // look-up per level where runs' cgroups sit (usually one), none below the task's.
        let own = task.cgroup();
        let own_level = task.cgroup_level;
        macro_rules! at_level {
            ($($l:literal)*) => {$(
                if levels & (1 << $l) != 0 && $l <= own_level {
                    let id = if $l == own_level {
                        own
                    } else {
                        // SAFETY: helper without preconditions.
                        unsafe { generated::bpf_get_current_ancestor_cgroup_id($l) }
                    };
                    // SAFETY: copied out.
                    if id != 0 && let Some(&slot) = unsafe { SCOPE_CGROUPS.get(&id) } {
                        return Some(slot);
                    }
                }
            )*};
        }
        at_level!(0 1 2 3 4 5 6 7);
    }
    if index.uids != 0 {
        let uid = task.uid_gid().0;
        // SAFETY: copied out.
        if let Some(&slot) = unsafe { SCOPE_UIDS.get(uid) } {
            return Some(slot);
        }
    }
    // SAFETY: copied out.
    unsafe { TRACKED.get(task.tid) }.copied()
}

/// The current task, as the hot path sees it: a BTF pointer, and the ids read through it once.
#[derive(Clone, Copy)]
pub(crate) struct Task {
    pub(crate) ptr: KPtr,
    pub(crate) tid: u32,
    pub(crate) tgid: u32,
    /// The cgroup v2 id once read (0 before).
    pub(crate) cgroup: u64,
    /// The level of the task's cgroup v2 (the root's is 0), read with its id.
    pub(crate) cgroup_level: u32,
    /// `uid | gid << 32` once read (`u64::MAX` before).
    pub(crate) ugid: u64,
    /// The task's run (its slot), once [`Task::in_scope`] said it has one.
    pub(crate) run: u32,
}

/// What a [`Task`] has read, kept across a tail call (the BTF pointer cannot be: it is taken
/// again).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct SavedTask {
    tid: u32,
    tgid: u32,
    cgroup: u64,
    cgroup_level: u32,
    run: u32,
    ugid: u64,
}

impl Task {
    /// What [`Task::restore`] takes back.
    #[inline(always)]
    pub(crate) fn save(&self) -> SavedTask {
        SavedTask {
            tid: self.tid,
            tgid: self.tgid,
            cgroup: self.cgroup,
            cgroup_level: self.cgroup_level,
            run: self.run,
            ugid: self.ugid,
        }
    }

    /// The current task as it was saved (by the program that tail-called this one, on the same
    /// task).
    #[inline(always)]
    pub(crate) fn restore(s: &SavedTask) -> Self {
        Self {
            ptr: KPtr::current_task(),
            tid: s.tid,
            tgid: s.tgid,
            cgroup: s.cgroup,
            cgroup_level: s.cgroup_level,
            ugid: s.ugid,
            run: s.run,
        }
    }

    #[inline(always)]
    pub(crate) fn current() -> Self {
        let ptr = KPtr::current_task();
        let o = offsets();
        Self {
            ptr,
            tid: ptr.read::<i32>(cfg(&o.task_pid)) as u32,
            tgid: ptr.read::<i32>(cfg(&o.task_tgid)) as u32,
            cgroup: 0,
            cgroup_level: 0,
            ugid: u64::MAX,
            run: 0,
        }
    }

    /// The task's cgroup v2 id (`task->cgroups->dfl_cgrp->kn->id`, what
    /// `bpf_get_current_cgroup_id()` returns), read once, with its level.
    #[inline(always)]
    pub(crate) fn cgroup(&mut self) -> u64 {
        if self.cgroup == 0 {
            let o = offsets();
            let cg = self
                .ptr
                .ptr(cfg(&o.task_cgroups))
                .ptr(cfg(&o.css_set_dfl_cgrp));
            if cg.is_null() {
                return 0;
            }
            self.cgroup_level = cg.read::<i32>(cfg(&o.cgroup_level)) as u32;
            let kn = cg.ptr(cfg(&o.cgroup_kn));
            self.cgroup = if kn.is_null() {
                0
            } else {
                kn.read::<u64>(cfg(&o.kernfs_node_id))
            };
        }
        self.cgroup
    }

    /// When the task started (`task->start_time`, monotonic ns): with the tid, which task this
    /// is, even once its tid is reused.
    #[inline(always)]
    pub(crate) fn start_time(self) -> u64 {
        self.ptr.read::<u64>(cfg(&offsets().task_start_time))
    }

    /// The task's real uid and gid (`task->cred->{uid,gid}`), read once.
    #[inline(always)]
    pub(crate) fn uid_gid(&mut self) -> (u32, u32) {
        if self.ugid == u64::MAX {
            let o = offsets();
            let cred = self.ptr.ptr(cfg(&o.task_cred));
            self.ugid = if cred.is_null() {
                0
            } else {
                cred.read::<u32>(cfg(&o.cred_uid)) as u64
                    | (cred.read::<u32>(cfg(&o.cred_gid)) as u64) << 32
            };
        }
        (self.ugid as u32, (self.ugid >> 32) as u32)
    }

    /// The task's saved user registers: `bpf_task_pt_regs` (5.15+).
    #[cfg(not(feature = "legacy"))]
    #[inline(always)]
    pub(crate) fn regs(&self) -> KPtr {
        // SAFETY: helper taking the trusted BTF task pointer it was given by the kernel.
        KPtr(
            unsafe { generated::bpf_task_pt_regs(KPtr::current_task_trusted().0 as *mut _) }
                as *const u8,
        )
    }

    /// The task's saved user registers where the kernel has no `bpf_task_pt_regs`: at the top
    /// of the task's kernel stack, as the kernel's own `task_pt_regs` finds them.
    #[cfg(feature = "legacy")]
    #[inline(always)]
    pub(crate) fn regs(&self) -> KPtr {
        let o = offsets();
        let stack: u64 = self.ptr.read(cfg(&o.task_stack));
        if stack == 0 {
            return KPtr(core::ptr::null());
        }
        KPtr((stack + cfg(&o.stack_regs) as u64) as *const u8)
    }

    /// Is the task in a compat (32-bit) syscall? `regs`: its saved user registers, where the
    /// architecture marks it there (aarch64), else unused.
    #[inline(always)]
    pub(crate) fn compat(self, regs: KPtr) -> bool {
        let mask = cfg(&CONFIG.compat_mask);
        if mask == 0 {
            return false;
        }
        let at = if cfg(&CONFIG.compat_in_regs) != 0 {
            regs
        } else {
            self.ptr
        };
        !at.is_null() && at.read::<u32>(cfg(&offsets().task_ti_status)) & mask != 0
    }

    /// The task's mount namespace id.
    #[inline(always)]
    pub(crate) fn mntns(self) -> u32 {
        let o = offsets();
        let ns = self
            .ptr
            .ptr(cfg(&o.task_nsproxy))
            .ptr(cfg(&o.nsproxy_mnt_ns));
        if ns.is_null() {
            0
        } else {
            ns.read::<u32>(cfg(&o.mnt_ns_inum))
        }
    }

    /// The depth of the task's pid namespace (0: the initial one, where its pids are the host's).
    #[inline(always)]
    pub(crate) fn pid_level(self) -> u32 {
        let o = offsets();
        let pid = self.ptr.ptr(cfg(&o.task_thread_pid));
        if pid.is_null() {
            0
        } else {
            pid.read::<u32>(cfg(&o.pid_level))
        }
    }

    /// `task->fs` (NULL for some kernel threads).
    #[inline(always)]
    pub(crate) fn fs(self) -> KPtr {
        self.ptr.ptr(cfg(&offsets().task_fs))
    }

    /// Is the task in a run? Sets [`Task::run`] when it is.
    #[inline(always)]
    pub(crate) fn in_scope(&mut self) -> bool {
        match run_of(self) {
            Some(slot) => {
                self.run = slot;
                true
            }
            None => false,
        }
    }

    /// [`Task::in_scope`] from the scope maps alone, leaving this CPU's memo as it is: for a
    /// program that may run preemptibly (a raw tracepoint's, on PREEMPT_RT and 7.x), where a
    /// write of the per-CPU memo could interleave with another task's program on the CPU.
    #[inline(always)]
    pub(crate) fn in_scope_unmemoized(&mut self) -> bool {
        let Some(index) = SCOPE_INDEX.get(0) else {
            return false;
        };
        match look_up_run(self, index) {
            Some(slot) => {
                self.run = slot;
                true
            }
            None => false,
        }
    }
}

/// The `struct file` behind an fd, as a BTF pointer.
#[derive(Clone, Copy)]
pub(crate) enum FileRef {
    None,
    Btf(KPtr),
}

/// The `struct file` behind fd `fd` of the current task, as a read-only BTF pointer. The look-up
/// is [`aet_fd_file`], a global function: the verifier checks it once per program, not once at
/// each of the call sites it would be inlined into (its unrolled match is 64 paths, and each
/// went on through the caller's rest).
#[inline(always)]
pub(crate) fn fd_file(_task: &Task, fd: i64) -> FileRef {
    #[cfg(not(feature = "legacy"))]
    let addr = {
        let mut addr = 0u64;
        if aet_fd_file(fd, &mut addr) == 0 {
            return FileRef::None;
        }
        addr
    };
    #[cfg(feature = "legacy")]
    let addr = {
        if aet_fd_file_legacy(fd) == 0 {
            return FileRef::None;
        }
        match legacy_arg::<u64>(legacy_slot::FD_FILE) {
            // SAFETY: this CPU's slot, written by the call above.
            Some(p) => unsafe { *p },
            None => return FileRef::None,
        }
    };
    if addr == 0 {
        return FileRef::None;
    }
    let f = rdonly_cast::<{ kfunc::TYPE_FILE }>(addr);
    if f.is_null() {
        FileRef::None
    } else {
        FileRef::Btf(f)
    }
}

/// [`aet_fd_file`] into this CPU's slot (the legacy object's global).
#[cfg(feature = "legacy")]
#[unsafe(no_mangle)]
#[inline(never)]
extern "C" fn aet_fd_file_legacy(fd: i64) -> i32 {
    legacy_arg::<u64>(legacy_slot::FD_FILE).map_or(0, |p| aet_fd_file(fd, p))
}

/// Writes to `out` the address of the `struct file` behind fd `fd` of the current task; returns 1
/// when there is one, else 0. A file in the embedded fd array is reached with BTF loads at
/// constant offsets (the verifier refuses a variable offset on a BTF pointer, hence the unrolled
/// match); any other fd with one helper read of its slot in the fd table. Global (its BTF linkage
/// is global, so the verifier checks it apart with its arguments unknown) and so it returns a
/// number: the caller makes the address a BTF pointer again.
// Global (verified once) where the kernel takes pointer arguments to a global function
// (5.12+); in the legacy object, the body of a global that takes its argument from a map.
#[cfg_attr(not(feature = "legacy"), unsafe(no_mangle), inline(never))]
#[cfg_attr(feature = "legacy", inline(always))]
pub extern "C" fn aet_fd_file(fd: i64, out: *mut u64) -> i32 {
    if out.is_null() {
        return 0;
    }
    let task = KPtr::current_task();
    let o = offsets();
    let files = task.ptr(cfg(&o.task_files));
    if files.is_null() || fd < 0 {
        return 0;
    }
    let fdt = files.ptr(cfg(&o.files_fdt));
    if fdt.is_null() {
        return 0;
    }
    let max: u32 = fdt.read(cfg(&o.fdt_max_fds));
    if fd >= max as i64 {
        return 0;
    }
    let array: u64 = fdt.read(cfg(&o.fdt_fd));
    let base = cfg(&o.files_fd_array);
    let f: u64 = if array == files.addr() + base as u64 && (fd as u32) < cfg(&o.fd_array_len) {
        macro_rules! arms {
            ($($k:literal)*) => {
                match fd {
                    $($k => files.ptr(base + 8 * $k).addr(),)*
                    _ => 0,
                }
            };
        }
        arms!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29
            30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58
            59 60 61 62 63)
    } else {
        kread(array, (8 * fd) as u32)
    };
    // SAFETY: a pointer the verifier checks (the caller's memory, not null).
    unsafe { *out = f };
    (f != 0) as i32
}

/// The class of an inode mode for byte accounting.
#[inline(always)]
pub(crate) fn mode_class(mode: u16) -> u32 {
    match mode & S_IFMT {
        S_IFREG => fileio::REGULAR,
        S_IFDIR => fileio::DIRECTORY,
        S_IFSOCK => fileio::SOCKET,
        _ => fileio::IGNORED,
    }
}

/// A file's identity and class: `(dev, ino, mnt_id, class)`.
pub(crate) type Identity = (u64, u64, u32, u32);

#[inline(never)]
pub(crate) fn identity_btf(f: KPtr) -> Identity {
    let o = offsets();
    let inode = f.ptr(cfg(&o.file_inode));
    if inode.is_null() {
        return (0, 0, 0, fileio::IGNORED);
    }
    inode_identity(inode, f.ptr(cfg(&o.file_path) + cfg(&o.path_mnt)))
}

/// The identity of an inode (not null) seen through the vfsmount `mnt`.
#[inline(always)]
pub(crate) fn inode_identity(inode: KPtr, mnt: KPtr) -> Identity {
    let o = offsets();
    let sb = inode.ptr(cfg(&o.inode_sb));
    let dev = if sb.is_null() {
        0
    } else {
        sb.read::<u32>(cfg(&o.sb_dev)) as u64
    };
    (
        dev,
        inode.read::<u64>(cfg(&o.inode_ino)),
        mount_id(mnt.addr()),
        mode_class(inode.read::<u16>(cfg(&o.inode_mode))),
    )
}

#[inline(always)]
pub(crate) fn identity(file: FileRef) -> Option<Identity> {
    match file {
        FileRef::None => None,
        FileRef::Btf(f) => Some(identity_btf(f)),
    }
}

#[inline(always)]
pub(crate) fn set_identity(h: &mut EventHeader, id: Identity) {
    h.dev = id.0;
    h.ino = id.1;
    h.mnt_id = id.2;
    h.flags |= flags::IDENTITY;
}
