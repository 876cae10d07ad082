//! aet: prove what an AI coding agent touched.
//!
//! The library behind the `aet` binary: the eBPF loader and monitor, the Arrow ledger, the run
//! orchestration, and the command-line front end.
pub mod cli;

/// The pure logic, from `aet-core`.
pub use aet_core::{access, audit, ledger, stage, util};

pub mod identity;
pub mod kernel;
pub mod launch;
pub mod loader;
pub mod monitor;
pub mod runner;
pub mod sandbox;
