//! Kernel pointers and reads: BTF-typed pointers whose loads the verifier checks and the JIT makes
//! fault-safe, read-only BTF pointers made from plain addresses (`bpf_rdonly_cast`, linked by the
//! loader), and the helper read for what neither reaches.

use aet_common::kfunc;
use aya_ebpf::helpers::{bpf_probe_read_kernel, generated};

use crate::maps::{cfg, offsets};

/// cheap way).
#[inline(always)]
pub(crate) fn kread<T: Copy + Default>(base: u64, off: u32) -> T {
    if base == 0 {
        return T::default();
    }
    // SAFETY: bpf_probe_read_kernel is fault-tolerant; a bad address yields an error.
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T) }.unwrap_or_default()
}

/// A BTF-typed kernel pointer (the current task, made read-only by [`rdonly_cast`], and the
/// pointer members reached from it). The verifier checks every load through it against the
/// kernel's BTF, and the JIT makes the loads fault-safe: a struct member costs one instruction,
/// not a helper call. The offsets come from `CONFIG` (read-only, so the verifier sees them as
/// constants).
#[derive(Clone, Copy)]
pub(crate) struct KPtr(pub(crate) *const u8);

impl KPtr {
    /// The current task as a read-only (untrusted) BTF pointer. Not the trusted one
    /// `bpf_get_current_task_btf()` returns: for every load of a pointer member through a trusted
    /// pointer the verifier looks for `<type>__safe_trusted` and its kin by name in the kernel's
    /// BTF, a linear scan (6.18), which was most of the programs' load time.
    #[inline(always)]
    pub(crate) fn current_task() -> Self {
        // SAFETY: helper without preconditions.
        rdonly_cast::<{ kfunc::TYPE_TASK }>(unsafe { generated::bpf_get_current_task() })
    }

    /// The current task as the trusted BTF pointer helpers that take a task want.
    #[cfg(not(feature = "legacy"))]
    #[inline(always)]
    pub(crate) fn current_task_trusted() -> Self {
        // SAFETY: helper without preconditions.
        Self(unsafe { generated::bpf_get_current_task_btf() } as *const u8)
    }

    #[inline(always)]
    pub(crate) fn is_null(self) -> bool {
        self.0.is_null()
    }

    #[inline(always)]
    pub(crate) fn addr(self) -> u64 {
        self.0 as u64
    }

    /// Reads the member at byte offset `off`.
    #[cfg(not(feature = "helper-reads"))]
    #[inline(always)]
    pub(crate) fn read<T: Copy>(self, off: u32) -> T {
        // SAFETY: a BTF pointer: the verifier checked the member, the JIT guards the load.
        unsafe { core::ptr::read_volatile(self.0.add(off as usize) as *const T) }
    }

    /// Reads the member at byte offset `off` (zeroes when the kernel read fails: the helper
    /// clears its destination on a fault).
    #[cfg(feature = "helper-reads")]
    #[inline(always)]
    pub(crate) fn read<T: Copy>(self, off: u32) -> T {
        const { assert!(core::mem::size_of::<T>() <= 8) };
        let v = read_small(
            self.addr().wrapping_add(off as u64),
            core::mem::size_of::<T>() as u32,
        );
        // SAFETY: T is at most 8 bytes (checked at compile time) and the read left it in the
        // low bytes of v (little-endian); every member read this way is plain data.
        unsafe { core::mem::transmute_copy::<u64, T>(&v) }
    }

    /// Follows the pointer member at byte offset `off`.
    #[inline(always)]
    pub(crate) fn ptr(self, off: u32) -> Self {
        Self(self.read::<*const u8>(off))
    }
}

/// The `struct mount` address around a vfsmount (`container_of`, so a plain address).
#[inline(always)]
pub(crate) fn mount_of(mnt: u64) -> u64 {
    if mnt == 0 {
        0
    } else {
        mnt - cfg(&offsets().mount_mnt) as u64
    }
}

#[inline(always)]
pub(crate) fn mount_id(mnt: u64) -> u32 {
    let m = rdonly_cast::<{ kfunc::TYPE_MOUNT }>(mount_of(mnt));
    if m.is_null() {
        return 0;
    }
    m.read::<i32>(cfg(&offsets().mount_id)) as u32
}

/// A plain kernel address as a read-only BTF pointer to the struct `TYPE` names (a
/// [`kfunc::TYPES`] marker): loads through it are single, fault-safe instructions instead of
/// helper calls. The call is a marker the loader rewrites into `bpf_rdonly_cast`.
#[cfg(not(feature = "helper-reads"))]
#[inline(always)]
pub(crate) fn rdonly_cast<const TYPE: i32>(addr: u64) -> KPtr {
    let r: *const u8;
    // SAFETY: the loader turns this into a kfunc call with the kernel's own ids; like a helper
    // call it takes r1-r2, returns r0 and clobbers r1-r5.
    unsafe {
        core::arch::asm!(
            "call {call}",
            call = const kfunc::RDONLY_CAST,
            inout("r1") addr => _,
            inout("r2") TYPE as u64 => _,
            lateout("r0") r,
            lateout("r3") _,
            lateout("r4") _,
            lateout("r5") _,
        );
    }
    KPtr(r)
}

/// Reads `size` (1 to 8) bytes of kernel memory at `addr` into the low bytes of a word; 0 when
/// the read fails. One subprogram for every read of the helper-reads variant: an inlined read
/// took a stack slot of its own at each place, and 6.1's verifier refuses a call chain whose
/// stacks add up to more than 512 bytes.
#[cfg(feature = "helper-reads")]
#[inline(never)]
fn read_small(addr: u64, size: u32) -> u64 {
    let mut v = 0u64;
    let size = core::hint::black_box(size) & 0xf;
    if size == 0 || size > 8 {
        return 0;
    }
    // SAFETY: a fault-tolerant read of at most 8 bytes into this 8-byte slot; a bad address
    // makes the helper fail and clear the slot.
    unsafe {
        generated::bpf_probe_read_kernel(
            &mut v as *mut u64 as *mut core::ffi::c_void,
            size,
            addr as *const core::ffi::c_void,
        );
    }
    v
}

/// Without `bpf_rdonly_cast` (kernels before 6.2): the address as it is; [`KPtr::read`] then
/// reads through the helper.
#[cfg(feature = "helper-reads")]
#[inline(always)]
pub(crate) fn rdonly_cast<const TYPE: i32>(addr: u64) -> KPtr {
    KPtr(addr as *const u8)
}
