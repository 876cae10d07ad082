//! Ledger rows as owned Rust values, for code that wants one event at a time (tests, small
//! ledgers, reports). Bulk analysis should work on the Arrow columns instead.

use std::path::Path;

use super::reader::{Ledger, ReadError};
pub use super::schema::{LedgerRow, rows_of};

impl LedgerRow {
    /// The path as text (lossy for non-UTF-8 bytes), if any.
    pub fn path_str(&self) -> Option<String> {
        self.path
            .as_ref()
            .map(|p| String::from_utf8_lossy(p).into_owned())
    }

    /// The resolved path as text (lossy), if any.
    pub fn resolved_str(&self) -> Option<String> {
        self.resolved_path
            .as_ref()
            .map(|p| String::from_utf8_lossy(p).into_owned())
    }
}

/// Every row of the ledger at `path`, with the ledger (for its metadata and form).
pub fn read_rows(path: &Path) -> Result<(Ledger, Vec<LedgerRow>), ReadError> {
    let mut ledger = Ledger::open(path)?;
    let mut rows = Vec::new();
    while let Some(b) = ledger.next_batch()? {
        rows.extend(rows_of(&b));
    }
    Ok((ledger, rows))
}
