//! A syscall's arguments as `sys_exit` read them from the task's saved registers, handed to the
//! program of the syscall's family (below every probe that takes them, above the crate's
//! shared modules).

use crate::{
    kernel::KPtr,
    maps::{cfg, offsets},
};

/// The six argument registers of a syscall, read once at its exit (constant-offset loads: the
/// verifier refuses a variable offset on a BTF pointer, and the argument index comes from a
/// table).
#[repr(C)]
pub(crate) struct Args {
    /// Arguments 0..5.
    pub(crate) regs: [u64; 6],
    pub(crate) compat: bool,
}

impl Args {
    #[inline(always)]
    pub(crate) fn read(regs: KPtr, compat: bool) -> Self {
        let o = offsets();
        macro_rules! load {
            ($($i:literal)*) => {
                [$(if compat {
                    regs.read::<u64>(cfg(&o.regs_args_compat[$i])) & 0xffff_ffff
                } else {
                    regs.read::<u64>(cfg(&o.regs_args[$i]))
                },)*]
            };
        }
        Self {
            regs: load!(0 1 2 3 4 5),
            compat,
        }
    }

    #[inline(always)]
    pub(crate) fn get(&self, n: i8) -> u64 {
        // The index comes from a table; the verifier needs it bounded in the register used,
        // and black_box keeps the compiler from moving the check to another one. (Two zero
        // words after the arguments, for a masked index, cost a call to a byte-wise memset.)
        let i = core::hint::black_box(n as u64);
        if i >= 6 {
            return 0;
        }
        // SAFETY: i < 6, checked above.
        unsafe { *self.regs.get_unchecked(i as usize) }
    }
}
