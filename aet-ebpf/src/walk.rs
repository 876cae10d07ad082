//! The kernel path walk: from a dentry up to the process's root, component by component into the
//! record, across mounts (through `struct mount`), the first steps inline and the rest in
//! `bpf_loop`; and, in another mount namespace, a second walk up to the file system's root so
//! userspace can tell the host's path. A walk that stops early says so in its flags.

use core::ffi::c_void;

use aet_common::{
    DATA_LIMIT, WALK_CAP, WALK_STEPS, counter, fileio, flags, kfunc, section, uapi::AT_FDCWD, walk,
};
use aya_ebpf::{helpers::generated, macros::map, maps::Array};

use crate::{
    kernel::{KPtr, mount_of, rdonly_cast},
    loops,
    maps::{CONFIG, SCRATCH_SIZE, Scratch, cfg, count, offsets},
    record::{header, section_start},
    task::{FileRef, Task, fd_file, identity, set_identity},
};
#[cfg(feature = "legacy")]
use crate::{
    maps::{legacy_arg, legacy_slot},
    record::scratch,
};

/// BTF pointer keeps its type between iterations).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct WalkState {
    pub(crate) dentry: *const u8,
    pub(crate) mnt: *const u8,
    pub(crate) root_dentry: u64,
    pub(crate) root_mnt: u64,
    /// This CPU's record buffer and walk counters, looked up once per walk.
    pub(crate) s: *mut Scratch,
    pub(crate) c: *mut WalkCtx,
    /// 1 for a file-system walk: up `d_parent` to the file system's root, across no mount.
    pub(crate) fs_only: u64,
}

/// The walk's counters, kept in a map rather than on the stack: the verifier then sees the same
/// (unknown, bounds-checked) values at every iteration and verifies the callback once, instead
/// of following each value of the offset.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct WalkCtx {
    /// Where the section starts in the scratch buffer.
    pub(crate) base: u32,
    /// Bytes written so far.
    pub(crate) off: u32,
    pub(crate) flags: u32,
    /// 1 before the first component (the object itself).
    pub(crate) first: u32,
    /// Length of the walk when it first crossed a mount (`u32::MAX` before).
    pub(crate) split: u32,
    pub(crate) _pad: u32,
    /// The root dentry of the first mount crossed.
    pub(crate) fs_dentry: u64,
}

#[map]
pub(crate) static WALKCTX: Array<WalkCtx> = Array::with_max_entries(1, 0);

#[inline(always)]
pub(crate) fn walk_ctx() -> Option<&'static mut WalkCtx> {
    // SAFETY: helper without preconditions.
    let cpu = unsafe { generated::bpf_get_smp_processor_id() };
    // SAFETY: this CPU's slot, exclusive to this program invocation.
    WALKCTX.get_ptr_mut(cpu).map(|p| unsafe { &mut *p })
}

/// Appends one component (`len` bytes, inline in the dentry `inline` when given, else at
/// `name`) and a `/` to the walk. Returns false when it stopped.
#[inline(always)]
pub(crate) fn walk_append(
    s: &mut Scratch,
    c: &mut WalkCtx,
    len: u32,
    name: u64,
    inline: Option<KPtr>,
) -> bool {
    let base = c.base as usize;
    let off = c.off as usize;
    // Room for a component of up to 255 bytes plus the separator.
    if base > DATA_LIMIT || off > WALK_CAP - 260 || len > 255 {
        c.flags |= walk::TRUNCATED as u32;
        return false;
    }
    // The verifier needs the length bounded in the registers that use it; black_box keeps the
    // compiler from dropping the mask as redundant after the check above.
    let len = core::hint::black_box(len as u64) & 0xff;
    let pos = base + off;
    let dst = s.buf[pos..].as_mut_ptr();
    let ilen = cfg(&offsets().dentry_iname_len) as u64;
    match inline {
        Some(d) if len < ilen && ilen <= 40 => {
            // The short name lives in the dentry: copy it with checked loads, 8 bytes at a time.
            let io = cfg(&offsets().dentry_iname);
            let w = dst as *mut u64;
            // Only the words the name occupies (most names are short).
            // SAFETY: dst has WALK_CAP - off >= 260 bytes of room; unaligned stores to map
            // values are allowed.
            unsafe {
                core::ptr::write_unaligned(w, d.read::<u64>(io));
                if len > 8 {
                    core::ptr::write_unaligned(w.add(1), d.read::<u64>(io + 8));
                    if len > 16 {
                        core::ptr::write_unaligned(w.add(2), d.read::<u64>(io + 16));
                        if len > 24 {
                            core::ptr::write_unaligned(w.add(3), d.read::<u64>(io + 24));
                            if len > 32 {
                                core::ptr::write_unaligned(w.add(4), d.read::<u64>(io + 32));
                            }
                        }
                    }
                }
            }
        }
        _ => {
            // SAFETY: dst has at least 260 bytes of room; len + 1 <= 256.
            let n = unsafe {
                generated::bpf_probe_read_kernel(
                    dst as *mut c_void,
                    (len + 1) as u32,
                    name as *const c_void,
                )
            };
            if n < 0 {
                c.flags |= walk::FAILED as u32;
                return false;
            }
        }
    }
    // Masked again (black_box keeps the mask): the short-name branches above leave a verifier
    // before 5.11 with impossible bounds on `len` on some paths, and it makes the address an
    // unknown number instead of dropping the path.
    let end = pos + (core::hint::black_box(len) & 0xff) as usize;
    if end < SCRATCH_SIZE {
        s.buf[end] = b'/';
    }
    c.off = (off + len as usize + 1) as u32;
    true
}

/// At the root of a mount: continue from its mountpoint in the parent mount. `struct mount` is
/// only reachable by `container_of`, so from here on the walk goes through read-only BTF pointers
/// made from plain addresses ([`rdonly_cast`]). Returns false at the top.
#[inline(always)]
pub(crate) fn walk_cross(st: &mut WalkState, c: &mut WalkCtx, mnt: u64, dentry: u64) -> bool {
    let o = offsets();
    if c.split == u32::MAX {
        c.split = c.off;
        c.fs_dentry = dentry;
    }
    let mount = rdonly_cast::<{ kfunc::TYPE_MOUNT }>(mount_of(mnt));
    if mount.is_null() {
        c.flags |= walk::FAILED as u32;
        return false;
    }
    let parent = mount.ptr(cfg(&o.mount_parent));
    if parent.is_null() || parent.addr() == mount.addr() {
        // The top of a mount tree, and not the process's root: another mount namespace's
        // file (through /proc/PID/root or an fd from there), or one above a chroot.
        c.flags |= (walk::UNREACHABLE | walk::FOREIGN_ROOT) as u32;
        return false;
    }
    st.dentry = mount.ptr(cfg(&o.mount_mountpoint)).0;
    // SAFETY: pointer arithmetic only (the vfsmount embedded in the parent's struct mount); the
    // verifier checks every load through it.
    st.mnt = unsafe { parent.0.add(cfg(&o.mount_mnt) as usize) };
    true
}

extern "C" fn walk_step(_i: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back the pointer to the caller's stack state.
    let st = unsafe { &mut *(ctx as *mut WalkState) };
    if walk_one(st) { 0 } else { 1 }
}

/// One step of a walk: a component, a mount crossing, or the end. Returns whether to go on.
#[inline(always)]
pub(crate) fn walk_one(st: &mut WalkState) -> bool {
    #[cfg(not(feature = "legacy"))]
    let (s, c) = {
        if st.s.is_null() || st.c.is_null() {
            return false;
        }
        // SAFETY: map values of this CPU, looked up by the walk's caller.
        unsafe { (&mut *st.s, &mut *st.c) }
    };
    // The legacy object's loop keeps the state in a map, where a pointer is a plain number to
    // the verifier: this CPU's buffers (the same ones) are looked up at each step.
    #[cfg(feature = "legacy")]
    let (Some(s), Some(c)) = (scratch(), walk_ctx()) else {
        return false;
    };
    let o = offsets();
    let d = KPtr(st.dentry);
    let m = KPtr(st.mnt);
    if st.fs_only == 0 {
        if d.is_null() || m.is_null() {
            c.flags |= walk::FAILED as u32;
            return false;
        }
        if d.addr() == st.root_dentry && m.addr() == st.root_mnt {
            c.flags |= walk::REACHED_ROOT as u32;
            if c.split == u32::MAX {
                // No mount crossed: the file is on the process's root mount. Its file-system
                // walk starts at that mount's root, so that (in another mount namespace) the
                // host's path can be told without the process's mount table.
                c.split = c.off;
                c.fs_dentry = d.addr();
            }
            return false;
        }
        if c.first == 1 {
            c.first = 0;
            let parent: u64 = d.read(cfg(&o.dentry_parent));
            if d.read::<u64>(cfg(&o.dentry_hash_pprev)) == 0 && parent != d.addr() {
                c.flags |= walk::DELETED as u32;
            }
        }
        let mnt_root: u64 = m.read(cfg(&o.vfsmount_root));
        if d.addr() == mnt_root {
            return walk_cross(st, c, m.addr(), d.addr());
        }
    } else if d.is_null() {
        c.flags |= walk::FAILED as u32;
        return false;
    }
    let parent = d.ptr(cfg(&o.dentry_parent));
    if parent.is_null() || parent.addr() == d.addr() {
        if st.fs_only == 1 {
            c.flags |= walk::REACHED_ROOT as u32;
            return false;
        }
        // The root of a file system no mount here shows. A pseudo file (memfd, pipe,
        // anonymous inode) is such a root itself: keep its name.
        if c.off == 0 {
            let len: u32 = d.read(cfg(&o.dentry_name_len));
            let name: u64 = d.read(cfg(&o.dentry_name));
            walk_append(s, c, len, name, None);
        }
        c.flags |= walk::UNREACHABLE as u32;
        return false;
    }
    let len: u32 = d.read(cfg(&o.dentry_name_len));
    let name: u64 = d.read(cfg(&o.dentry_name));
    let inline = if name == d.addr() + cfg(&o.dentry_iname) as u64 {
        Some(d)
    } else {
        None
    };
    if !walk_append(s, c, len, name, inline) {
        return false;
    }
    st.dentry = parent.0;
    true
}

/// Walk steps taken inline before the rest is handed to `bpf_loop`.
pub(crate) const INLINE_STEPS: u32 = 6;

/// Walk steps taken in the loop: up to [`WALK_STEPS`] in all, fewer in the legacy object (a
/// deeper path is marked truncated in its row).
const LOOP_STEPS: u32 = loops::bound(WALK_STEPS - INLINE_STEPS, 58);

/// Runs the walk loop from `st` up to the task's root, writing the components, leaf first, as
/// section `sec`. Returns the dentry a file-system walk ([`walk_fs`]) must start from, or 0:
/// the caller makes that walk, so that the two walks' stack frames are never on the stack at
/// once (6.1's verifier refuses a call chain whose frames add up to more than 512 bytes).
#[inline(always)]
pub(crate) fn run_walk(s: &mut Scratch, task: &Task, sec: usize, st: &mut WalkState) -> u64 {
    let start = section_start(header(s));
    let o = offsets();
    let Some(c) = walk_ctx() else { return 0 };
    c.base = start as u32;
    c.off = 0;
    c.flags = walk::PRESENT as u32;
    c.first = 1;
    c.split = u32::MAX;
    c.fs_dentry = 0;
    let fs = task.fs();
    if !fs.is_null() && st.fs_only == 0 {
        let root = cfg(&o.fs_root);
        st.root_dentry = fs.read::<u64>(root + cfg(&o.path_dentry));
        st.root_mnt = fs.read::<u64>(root + cfg(&o.path_mnt));
    }
    if start > DATA_LIMIT {
        header(s).flags |= flags::SECTION_DROPPED;
        return 0;
    }
    st.s = s as *mut Scratch;
    st.c = c as *mut WalkCtx;
    // Most paths are a few components deep: walk those steps inline, and only hand a deeper path
    // to bpf_loop (each of its iterations is an indirect call).
    let mut done = false;
    for _ in 0..INLINE_STEPS {
        if !walk_one(st) {
            done = true;
            break;
        }
    }
    if !done {
        let steps = loops::run!(
            LOOP_STEPS,
            LOOP_STEPS,
            walk_step,
            WalkState,
            aet_loop_walk,
            crate::maps::legacy_slot::LOOP_WALK,
            st
        );
        if steps >= LOOP_STEPS && c.flags & (walk::REACHED_ROOT | walk::UNREACHABLE) as u32 == 0 {
            c.flags |= walk::TRUNCATED as u32;
        }
    }
    if c.flags & (walk::TRUNCATED | walk::FAILED) as u32 != 0 {
        count(header(s).run, counter::WALK_PARTIAL);
    }
    let len = if c.off as usize > WALK_CAP {
        WALK_CAP as u32
    } else {
        c.off
    };
    let wflags = c.flags as u16;
    let split = c.split;
    let fs_dentry = c.fs_dentry;
    let h = header(s);
    if sec == section::WALK {
        h.len[section::WALK] = len as u16;
        h.walk_flags = wflags;
        h.walk_split = if split <= len {
            split as u16
        } else {
            aet_common::NO_SPLIT
        };
        if split <= len
            && st.fs_only == 0
            && (wflags & walk::FOREIGN_ROOT != 0 || task.mntns() != cfg(&CONFIG.host_mntns))
        {
            // The process sees this file through a mount of its own namespace (a sandbox), or
            // the file is in another namespace's tree: walk the file system from the first
            // mount's root, so the host's path can be told.
            return fs_dentry;
        }
    } else {
        h.len[section::WALK2] = len as u16;
        h.walk2_flags = wflags;
    }
    0
}

impl WalkState {
    /// Initialises the state in place, with one 8-byte store per field: the verifier tracks a
    /// stack slot's type (pointer or known number) only when it is written whole, and the
    /// compiler would otherwise zero or move the struct with byte-by-byte memset and memcpy.
    #[inline(always)]
    pub(crate) fn init(p: *mut Self, dentry: *const u8, mnt: *const u8) {
        // SAFETY: p points to a live, aligned WalkState slot on the caller's stack.
        unsafe {
            core::ptr::write_volatile(&raw mut (*p).dentry, dentry);
            core::ptr::write_volatile(&raw mut (*p).mnt, mnt);
            core::ptr::write_volatile(&raw mut (*p).root_dentry, 0);
            core::ptr::write_volatile(&raw mut (*p).root_mnt, 0);
            core::ptr::write_volatile(&raw mut (*p).s, core::ptr::null_mut());
            core::ptr::write_volatile(&raw mut (*p).c, core::ptr::null_mut());
            core::ptr::write_volatile(&raw mut (*p).fs_only, 0);
        }
    }
}

/// Walks from a dentry up to its file system's root, across no mount, into section WALK2.
#[inline(never)]
pub(crate) fn walk_fs(s: &mut Scratch, task: &Task, dentry: u64) {
    if dentry == 0 {
        return;
    }
    let d = rdonly_cast::<{ kfunc::TYPE_DENTRY }>(dentry);
    if d.is_null() {
        return;
    }
    let mut st = core::mem::MaybeUninit::<WalkState>::uninit();
    WalkState::init(st.as_mut_ptr(), d.0, core::ptr::null());
    // SAFETY: initialised above; one more whole-slot store.
    let st = unsafe {
        core::ptr::write_volatile(&raw mut (*st.as_mut_ptr()).fs_only, 1);
        &mut *st.as_mut_ptr()
    };
    run_walk(s, task, section::WALK2, st);
}

/// Records a file as the record's object: its identity and its walk. Returns its class.
#[inline(always)]
pub(crate) fn record_file(s: &mut Scratch, task: &Task, file: FileRef) -> u32 {
    let Some(id) = identity(file) else {
        return fileio::IGNORED;
    };
    set_identity(header(s), id);
    walk_into(s, task, section::WALK, NO_FD, file);
    header(s).flags |= flags::WALK_IS_OBJECT;
    id.3
}

/// No fd: nothing to walk.
pub(crate) const NO_FD: i64 = i64::MIN;

/// Where a walk starts: a dentry and the vfsmount it is seen through (addresses, handed to
/// [`aet_walk`] in the caller's memory).
#[repr(C)]
pub(crate) struct WalkFrom {
    pub(crate) dentry: u64,
    pub(crate) mnt: u64,
}

/// Where a walk from `file` (the file of `fd`), or from the working directory when `fd` is
/// `AT_FDCWD`, starts; none when there is nothing to walk from.
#[inline(always)]
pub(crate) fn walk_start(task: &Task, fd: i64, file: FileRef) -> Option<(KPtr, KPtr)> {
    let o = offsets();
    let (dentry_off, mnt_off) = (cfg(&o.path_dentry), cfg(&o.path_mnt));
    let (d, m) = match file {
        FileRef::Btf(f) => {
            let fp = cfg(&o.file_path);
            (f.ptr(fp + dentry_off), f.ptr(fp + mnt_off))
        }
        FileRef::None if fd == AT_FDCWD as i64 => {
            let fs = task.fs();
            if fs.is_null() {
                return None;
            }
            let pwd = cfg(&o.fs_pwd);
            (fs.ptr(pwd + dentry_off), fs.ptr(pwd + mnt_off))
        }
        FileRef::None => return None,
    };
    if d.is_null() || m.is_null() {
        return None;
    }
    Some((d, m))
}

/// The file a directory fd argument names: none for `AT_FDCWD` (a walk then starts at the
/// working directory).
#[inline(always)]
pub(crate) fn dirfd_file(task: &Task, fd: i64) -> FileRef {
    if fd == AT_FDCWD as i64 {
        FileRef::None
    } else {
        fd_file(task, fd)
    }
}

/// Walks from `file` (the file of `fd`), or from the working directory for `AT_FDCWD`, into
/// section `sec`.
#[inline(always)]
pub(crate) fn walk_into(s: &mut Scratch, task: &Task, sec: usize, fd: i64, file: FileRef) {
    if let Some((d, m)) = walk_start(task, fd, file) {
        let mut from = core::mem::MaybeUninit::<WalkFrom>::uninit();
        let p = from.as_mut_ptr();
        // SAFETY: whole 8-byte stores into the caller's slot (the pointers are stored as they
        // are: the walk reads them back as numbers).
        unsafe {
            core::ptr::write_volatile(&raw mut (*p).dentry as *mut *const u8, d.0);
            core::ptr::write_volatile(&raw mut (*p).mnt as *mut *const u8, m.0);
        }
        if walk_from(s, sec as u32, p) == 2
            && let Some(c) = walk_ctx()
        {
            let fs_dentry = c.fs_dentry;
            walk_fs(s, task, fs_dentry);
        }
    }
}

/// [`aet_walk`], through this CPU's slot in the legacy object.
#[inline(always)]
fn walk_from(s: &mut Scratch, sec: u32, from: *mut WalkFrom) -> i32 {
    #[cfg(not(feature = "legacy"))]
    return aet_walk(s, sec, from);
    #[cfg(feature = "legacy")]
    {
        let _ = s;
        let Some(slot) = legacy_arg::<WalkFrom>(legacy_slot::WALK) else {
            return 0;
        };
        // SAFETY: the caller initialised both members; this CPU's slot has room for them.
        unsafe { core::ptr::copy_nonoverlapping(from, slot, 1) };
        aet_walk_legacy(sec)
    }
}

/// [`aet_walk`] from the start in this CPU's slot, into this CPU's record buffer (the legacy
/// object's global: the caller's buffer is the same one).
#[cfg(feature = "legacy")]
#[unsafe(no_mangle)]
#[inline(never)]
extern "C" fn aet_walk_legacy(sec: u32) -> i32 {
    let (Some(from), Some(s)) = (legacy_arg::<WalkFrom>(legacy_slot::WALK), scratch()) else {
        return 0;
    };
    aet_walk(s, sec, from)
}

/// Runs the walk `from` sets up (its dentry and vfsmount) into section `sec`
/// of `s`; returns 1 when it ran, 2 when the caller must also walk the file system (from the
/// walk context's `fs_dentry`: see [`run_walk`]). Global, so the verifier checks the walk once per program rather
/// than at each place a walk starts: it gets the two addresses as numbers and makes them
/// read-only BTF pointers again.
// Global (verified once) where the kernel takes pointer arguments to a global function
// (5.12+); in the legacy object, the body of a global that takes its argument from a map.
#[cfg_attr(not(feature = "legacy"), unsafe(no_mangle), inline(never))]
#[cfg_attr(feature = "legacy", inline(always))]
pub(crate) extern "C" fn aet_walk(s: *mut Scratch, sec: u32, from: *const WalkFrom) -> i32 {
    if s.is_null() || from.is_null() {
        return 0;
    }
    // SAFETY: the caller's initialised state; read as plain numbers.
    let (dentry, mnt) = unsafe {
        (
            core::ptr::read_volatile(&raw const (*from).dentry),
            core::ptr::read_volatile(&raw const (*from).mnt),
        )
    };
    let d = rdonly_cast::<{ kfunc::TYPE_DENTRY }>(dentry);
    let mount = rdonly_cast::<{ kfunc::TYPE_MOUNT }>(mount_of(mnt));
    if d.is_null() || mount.is_null() {
        return 0;
    }
    // SAFETY: pointer arithmetic only (the vfsmount embedded in its struct mount); the verifier
    // checks every load through it.
    let m = unsafe { mount.0.add(cfg(&offsets().mount_mnt) as usize) };
    let mut st = core::mem::MaybeUninit::<WalkState>::uninit();
    WalkState::init(st.as_mut_ptr(), d.0, m);
    let task = Task::current();
    // SAFETY: a map value of this CPU (the caller's record buffer); initialised above.
    let fs = run_walk(unsafe { &mut *s }, &task, sec as usize, unsafe {
        &mut *st.as_mut_ptr()
    });
    if fs != 0 { 2 } else { 1 }
}
