//! The ledger: one Arrow IPC file per run, one row per event.

// The ledger file's name in a run directory: `crate::run_dir::LEDGER`.

pub mod chain;
pub mod columns;
pub mod incomplete;
pub mod ipc;
pub mod reader;
pub mod record;
pub mod recover;
pub mod rows;
pub mod schema;
pub mod summary;
pub mod writer;
