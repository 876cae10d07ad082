//! aet: prove what an AI coding agent touched.
//!
//! The library behind the `aet` binary: the eBPF loader and monitor, the Arrow ledger, the run
//! orchestration, and the command-line front end.
pub mod access;
pub mod audit;
pub mod cli;
pub mod identity;
pub mod kernel;
pub mod launch;
pub mod ledger;
pub mod loader;
pub mod monitor;
pub mod runner;
pub mod sandbox;
