//! The ledger: one Arrow IPC file per run, one row per event.

/// Name of the ledger file inside a run directory.
pub const LEDGER_FILE: &str = "ledger.arrow";

/// The ledger a path names: the path itself, or `DIR/ledger.arrow` for a run directory.
pub fn ledger_path(p: &std::path::Path) -> std::path::PathBuf {
    if p.is_dir() {
        p.join(LEDGER_FILE)
    } else {
        p.to_owned()
    }
}

pub mod chain;
pub mod columns;
pub mod export;
pub mod ipc;
pub mod reader;
pub mod record;
pub mod recover;
pub mod rows;
pub mod runs;
pub mod schema;
pub mod summary;
pub mod writer;
