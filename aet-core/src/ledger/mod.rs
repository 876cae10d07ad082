//! The ledger: one Arrow IPC file per run, one row per event.

/// Name of the ledger file inside a run directory.
pub const LEDGER_FILE: &str = "ledger.arrow";

pub mod columns;
pub mod ipc;
pub mod reader;
pub mod rows;
pub mod schema;
pub mod summary;
pub mod writer;
