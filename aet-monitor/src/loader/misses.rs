//! Runs of a program the kernel skipped: its `recursion_misses`.
//!
//! The kernel runs a raw tracepoint's program only if that program is not already running on
//! the same CPU, and a classic tracepoint's only if no kprobe or classic tracepoint program is
//! running there; when it is (a raw tracepoint's program preempted mid-run where the kernel
//! lets programs be preempted, or an interrupt's tracepoint nesting in a task's), the kernel
//! skips the run and counts it in the program's `recursion_misses` (5.12+ for raw tracepoints,
//! later kernels for classic ones, whose programs run with preemption off: only an interrupt
//! nesting in a program can make one miss), nowhere else. A skipped `sys_exit` is a syscall without a row:
//! the record must know of it. The count is the program's, not a run's, so a skip while runs
//! are served counts against each of them.

use std::os::fd::{AsRawFd, BorrowedFd};

use super::{Attach, LoadError, PROGRAMS, Programs, map_err};

/// `BPF_OBJ_GET_INFO_BY_FD`.
const OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// `struct bpf_prog_info`'s `recursion_misses` (after `run_time_ns` and `run_cnt`).
const RECURSION_MISSES_OFFSET: usize = 208;
/// The info buffer handed to the kernel: past `recursion_misses`, within every kernel's struct.
const INFO_BYTES: usize = 216;

/// A program's `recursion_misses`, or `None` where the kernel does not count them (before 5.12).
pub(super) fn recursion_misses(prog: BorrowedFd<'_>) -> std::io::Result<Option<u64>> {
    let mut info = [0u8; INFO_BYTES];
    // `union bpf_attr`'s `info` member: the fd, the buffer's length, the buffer.
    #[repr(C)]
    struct Attr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    let mut attr = Attr {
        bpf_fd: prog.as_raw_fd() as u32,
        info_len: INFO_BYTES as u32,
        info: info.as_mut_ptr() as u64,
    };
    // SAFETY: `attr` and `info` outlive the call; the kernel writes at most `info_len` bytes of
    // `info` and its own length back into `attr.info_len`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            OBJ_GET_INFO_BY_FD,
            &mut attr as *mut Attr,
            std::mem::size_of::<Attr>() as u32,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if (attr.info_len as usize) < RECURSION_MISSES_OFFSET + 8 {
        return Ok(None);
    }
    let field = &info[RECURSION_MISSES_OFFSET..RECURSION_MISSES_OFFSET + 8];
    Ok(Some(u64::from_ne_bytes(field.try_into().expect("8 bytes"))))
}

/// Says on stderr (the daemon's log) which program the kernel skipped, once per new count:
/// the ledger has the sum only.
fn note_skips(name: &'static str, n: u64) {
    use std::{collections::HashMap, sync::Mutex};
    static SEEN: Mutex<Option<HashMap<&'static str, u64>>> = Mutex::new(None);
    if n == 0 {
        return;
    }
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let last = seen
        .get_or_insert_with(HashMap::new)
        .entry(name)
        .or_insert(0);
    if n > *last {
        eprintln!("aet: the kernel skipped {n} run(s) of program {name} since it was loaded");
        *last = n;
    }
}

/// Programs whose skipped runs lose no event: an exec's entry (`sys_enter_execve(at)`) only
/// saves the syscall, dirfd and flags for `sched_process_exec`, which records the exec without
/// them when the entry is missing (the row flagged `UNPAIRED`, counted as `unpaired`); a failed
/// exec is recorded at its exit from its own arguments. Measured on 7.2 under the matrix's
/// load check: the one skip of a boot was this program's, and the run's exec row was there.
pub(super) const ENTRY_ONLY: [&str; 2] = ["sys_enter_execve", "sys_enter_execveat"];

impl Programs {
    /// Runs of the attached programs the kernel skipped since they were loaded, summed (see
    /// [`misses`]), but for the programs whose skips lose nothing ([`ENTRY_ONLY`]: their
    /// consequence is counted as `unpaired`). 0 where the kernel does not count them.
    pub fn misses(&self) -> Result<u64, LoadError> {
        let Some(ebpf) = &self.ebpf else {
            return Ok(0);
        };
        let mut sum = 0;
        for &(name, attach) in PROGRAMS {
            if matches!(attach, Attach::Exit(_)) {
                // Tail-called: the kernel checks (and counts) the caller, `sys_exit`.
                continue;
            }
            if matches!(attach, Attach::Witness(..)) && !self.witnessed {
                // Not loaded on this kernel.
                continue;
            }
            let fail = |source| LoadError::Program {
                name,
                action: "read the skipped runs of",
                source,
            };
            let prog = ebpf.program(name).ok_or(LoadError::MissingProgram(name))?;
            let fd = prog.fd().map_err(fail)?;
            let n = recursion_misses(std::os::fd::AsFd::as_fd(fd)).map_err(|e| {
                fail(aya::programs::ProgramError::SyscallError(
                    aya::sys::SyscallError {
                        call: "bpf_obj_get_info_by_fd",
                        io_error: e,
                    },
                ))
            })?;
            let n = n.unwrap_or(0);
            note_skips(name, n);
            if !ENTRY_ONLY.contains(&name) {
                sum += n;
            }
        }
        Ok(sum)
    }

    /// Records the programs dropped since they were loaded because another task's program took
    /// their CPU's scratch mid-record, summed over CPUs.
    pub fn preemptions(&self) -> Result<u64, LoadError> {
        let _pinned = super::Pinned::new();
        let values = self
            .preemptions
            .get(&0, 0)
            .map_err(map_err(aet_common::maps::PREEMPTIONS))?;
        Ok(values.iter().sum())
    }
}

#[cfg(test)]
mod tests {
    use aet_common::counter;

    use super::*;
    use crate::loader::Counters;

    #[test]
    fn a_descriptor_not_a_program_is_an_error_not_a_zero() {
        let f = std::fs::File::open("/dev/null").unwrap();
        // A descriptor that is not a BPF program: the kernel refuses, nothing is read as 0.
        let err = recursion_misses(std::os::fd::AsFd::as_fd(&f)).unwrap_err();
        assert!(err.raw_os_error().is_some(), "{err}");
    }

    /// The programs whose skips are not losses are programs aet loads, and only entries.
    #[test]
    fn the_entry_only_programs_are_loaded_entries() {
        for name in ENTRY_ONLY {
            assert!(
                PROGRAMS.iter().any(|(n, a)| *n == name
                    && matches!(a, Attach::TracePoint("syscalls", t) if t.starts_with("sys_enter_"))),
                "{name}"
            );
        }
    }

    #[test]
    fn skipped_runs_and_dropped_records_are_lost_events_on_no_cpu() {
        let mut c = Counters {
            totals: vec![0; counter::COUNT as usize],
            per_cpu: vec![vec![0; counter::COUNT as usize]; 2],
            skipped: 0,
            preempted: 0,
        };
        c.totals[counter::RINGBUF_FULL as usize] = 1;
        c.per_cpu[1][counter::RINGBUF_FULL as usize] = 1;
        assert_eq!(c.lost(), 1);
        c.skipped = 3;
        c.preempted = 2;
        assert_eq!(c.lost(), 6, "skips and dropped records are losses");
        assert_eq!(c.lost_per_cpu(), vec![0, 1], "on no CPU");
    }
}
