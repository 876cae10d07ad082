//! aet's eBPF programs: follow a run's process tree and record every way it touches a file.
//!
//! Programs attach to classic (perf) tracepoints: the syscall exit (`raw_syscalls:sys_exit`, one
//! program for every recorded syscall, native or compat, which tail-calls one program per
//! syscall family so that each is verified apart), a new task (`task:task_newtask`), an exec and
//! a task's end (`sched:sched_process_exec` / `exit`), an exec's entry
//! (`syscalls:sys_enter_execve(at)`) and io_uring's request submission; a cgroup move to the
//! raw tracepoint `cgroup_attach_task` (it builds no record). A classic
//! tracepoint runs its programs with preemption off on every kernel, where since 7.0 a raw
//! tracepoint's may be preempted mid-record (docs/kernels.md). fentry, LSM and kprobes are not
//! used: they are not available on every kernel aet must run on.
//!
//! Rules every program here keeps:
//! - scope first: a task outside the run costs a helper call and one map lookup, and produces
//!   nothing;
//! - a syscall is recorded at its exit, from the saved registers, where the kernel has already
//!   faulted in the user strings it read (a string in a page the process never touched reads as
//!   nothing at entry);
//! - what the kernel resolved comes from kernel objects (the new fd's `struct file`, the exec'd
//!   file, the working directory), walked dentry by dentry up to the process's root, never from
//!   the user's string;
//! - records are variable-length: header, then exactly the bytes captured;
//! - nothing is dropped silently: every failure to deliver or to store increments a per-CPU
//!   counter in `COUNTERS` that userspace reads and writes into the ledger; a partial walk says so
//!   in its row;
//! - no kernel struct offset is hard-coded: they come from the running kernel's BTF via `CONFIG`.
//!
//! Modules, from the bottom up (each names only those below it; aet-monitor's test
//! `the_kernel_programs_layers_point_one_way` checks it): [`maps`] (the maps, `CONFIG`, the
//! counters, the scratch buffer's type), [`kernel`] (BTF pointers and reads), [`task`] (the
//! current task, scope, files by fd, identity), [`record`] (building and sending a record),
//! [`walk`] (the path walk), and [`probes`], one module per probe group over `probes::args`
//! (what the `sys_exit` dispatcher hands them).
#![no_std]
#![no_main]
#![feature(asm_experimental_arch)]

mod kernel;
mod loops;
mod maps;
mod probes;
mod record;
mod task;
mod walk;

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
