//! Loops over a callback. Kernels with `bpf_loop` (5.17+) verify the callback once, whatever the
//! count; the legacy object (`--features legacy`, for 5.10-5.16) runs a loop bounded by a
//! constant, whose iterations the verifier follows one by one: its bounds are smaller, and what
//! lies beyond them is marked in the row or counted, as past the larger ones.

use core::ffi::c_void;

/// A loop's callback: `(iteration, context) -> 0 to go on, 1 to stop`.
pub(crate) type Step = extern "C" fn(u32, *mut c_void) -> i64;

/// Picks the bound of the object being built: `full` where `bpf_loop` verifies the callback once,
/// `legacy` where the verifier follows each iteration.
#[inline(always)]
pub(crate) const fn bound(full: u32, legacy: u32) -> u32 {
    if cfg!(feature = "legacy") {
        legacy
    } else {
        full
    }
}

/// Runs `step(i, ctx)` for `i` in `0..n` (at most `MAX`) until it returns non-zero; the
/// iterations run, counting the one that stopped (as `bpf_loop` counts).
///
/// `run!(MAX, n, step, Ctx, global_name, slot, ctx)`: in the legacy object each iteration calls
/// `global_name`, a global function made here, which takes the context from this CPU's `slot`
/// of `LEGACY_ARGS` into its own stack and calls `step` on it: the verifier checks `step` once,
/// with the context unknown, as it checks a `bpf_loop` callback.
macro_rules! run {
    ($max:expr, $n:expr, $step:path, $ty:ty, $global:ident, $slot:expr, $ctx:expr) => {
        $crate::loops::run!($max, $n, $step, $ty, $global, $slot, $ctx, false)
    };
    ($max:expr, $n:expr, $step:path, $ty:ty, $global:ident, $slot:expr, $ctx:expr, $copy:expr) => {{
        #[cfg(not(feature = "legacy"))]
        let ran = $crate::loops::run_bpf_loop::<{ $max }, $ty>($n, $step, $ctx);
        #[cfg(feature = "legacy")]
        let ran = {
            #[unsafe(no_mangle)]
            #[inline(never)]
            extern "C" fn $global(i: u32) -> i64 {
                $crate::loops::legacy_step::<$ty, { $copy }>(i, $slot, $step)
            }
            $crate::loops::run_legacy::<{ $max }, $ty>($n, $slot, $global, $ctx)
        };
        ran
    }};
}
pub(crate) use run;

/// One iteration of a legacy loop: `step` on the context in the slot. A context holding
/// pointers is copied to this stack and back (`COPY`): a pointer read back from a map is a
/// plain number to the verifier, so `step` must make it again.
#[cfg(feature = "legacy")]
#[inline(always)]
pub(crate) fn legacy_step<C: Copy, const COPY: bool>(i: u32, slot: u32, step: Step) -> i64 {
    let Some(p) = crate::maps::legacy_arg::<C>(slot) else {
        return 1;
    };
    if !COPY {
        return step(i, p as *mut c_void);
    }
    // SAFETY: this CPU's slot, which the loop's caller filled with a C.
    let mut c = unsafe { core::ptr::read(p) };
    let r = step(i, &mut c as *mut C as *mut c_void);
    // SAFETY: as above.
    unsafe { core::ptr::write(p, c) };
    r
}

/// The legacy loop: the context to `slot`, a bounded loop over `global`, the context back.
#[cfg(feature = "legacy")]
#[inline(always)]
pub(crate) fn run_legacy<const MAX: u32, C: Copy>(
    n: u32,
    slot: u32,
    global: extern "C" fn(u32) -> i64,
    ctx: &mut C,
) -> u32 {
    let Some(p) = crate::maps::legacy_arg::<C>(slot) else {
        return 0;
    };
    // SAFETY: this CPU's slot, large enough for a C (checked where it is made).
    unsafe { core::ptr::write(p, *ctx) };
    let n = if n > MAX { MAX } else { n };
    let mut i = 0;
    let mut ran = MAX;
    while i < MAX {
        if i >= n {
            ran = i;
            break;
        }
        if global(i) != 0 {
            ran = i + 1;
            break;
        }
        i += 1;
    }
    // SAFETY: as above.
    *ctx = unsafe { core::ptr::read(p) };
    ran
}

/// The `bpf_loop` call of [`run!`].
#[cfg(not(feature = "legacy"))]
#[inline(always)]
pub(crate) fn run_bpf_loop<const MAX: u32, C>(n: u32, step: Step, ctx: &mut C) -> u32 {
    let n = if n > MAX { MAX } else { n };
    // SAFETY: callback and context are valid for the duration of the call.
    let ran = unsafe {
        aya_ebpf::helpers::generated::bpf_loop(
            n,
            step as *mut c_void,
            ctx as *mut C as *mut c_void,
            0,
        )
    };
    if ran < 0 { 0 } else { ran as u32 }
}
