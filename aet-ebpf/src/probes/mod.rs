//! The programs, one module per probe group.

pub(crate) mod args;
pub(crate) mod exec;
pub(crate) mod fileio;
pub(crate) mod handover;
pub(crate) mod io_uring;
pub(crate) mod net;
pub(crate) mod payload;
pub(crate) mod sched;
pub(crate) mod syscall;
pub(crate) mod witness;
