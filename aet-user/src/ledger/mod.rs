//! The ledger: one Arrow IPC file per run, one row per event.
pub mod ipc;
pub mod reader;
pub mod rows;
pub mod schema;
pub mod summary;
pub mod writer;
