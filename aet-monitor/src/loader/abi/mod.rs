//! The syscall ABI of each architecture aet runs on, in one place: the syscalls recorded
//! through `raw_syscalls:sys_exit`, by number (`(native number, aet syscall)` and `(compat
//! number, aet syscall)`), the `pt_regs` members holding the number and the arguments, and how a
//! compat (32-bit) syscall is told. Syscall numbers are the architecture's ABI (fixed forever),
//! not kernel struct layouts; the members' offsets come from the kernel's BTF at load.

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod x86_64;

#[cfg(target_arch = "aarch64")]
pub use aarch64::*;
#[cfg(target_arch = "x86_64")]
pub use x86_64::*;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("aet records on x86_64 and aarch64 only");

/// A `pt_regs` member, and a byte offset into it (an element of an array member).
#[derive(Clone, Copy, Debug)]
pub struct Reg(pub &'static str, pub u32);

/// Where a compat syscall is marked (each architecture uses one of the two).
#[derive(Clone, Copy, Debug)]
#[allow(dead_code)]
pub enum Compat {
    /// A bit of a `task_struct` member.
    Task { member: &'static str, mask: u32 },
    /// A bit of a `pt_regs` member (the saved user registers).
    Regs { member: &'static str, mask: u32 },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every number of a table names one syscall, below the dispatch table's size.
    #[test]
    fn tables_are_functions_within_the_dispatch_table() {
        for table in [NATIVE, COMPAT] {
            let mut seen = std::collections::HashMap::new();
            for &(nr, sc) in table {
                assert!(
                    (0..aet_common::SYSCALL_TABLE_SIZE as i64).contains(&nr),
                    "{nr}"
                );
                if let Some(prev) = seen.insert(nr, sc) {
                    panic!("{nr} is both {prev:?} and {sc:?}");
                }
            }
        }
    }
}
