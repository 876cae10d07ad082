//! Streams ledger rows into `ledger.arrow` as the run goes.
//!
//! Rows accumulate in Arrow builders and go to disk as a record batch every [`BATCH_ROWS`] rows
//! or when the caller flushes (the monitor flushes at least every
//! `FLUSH_INTERVAL`), so a run of hours holds one batch in
//! memory and a killed monitor leaves every flushed batch readable. The file is created with
//! `O_EXCL`: an existing ledger is never overwritten.

use std::{
    collections::HashMap,
    fs::{File, OpenOptions},
    io::{self, BufWriter},
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
};

use arrow_schema::{ArrowError, SchemaRef};

pub use super::schema::Row;
use super::{
    ipc::IpcFileWriter,
    schema::{self, Builders, meta},
};

/// Rows per record batch.
pub const BATCH_ROWS: usize = 16 * 1024;

/// A finished ledger at `path` of `rows` sample rows (cycling through 40 of
/// [`Row::sample`]), its footer holding `end`: for the tests of the readers and the chain.
#[cfg(test)]
pub(crate) fn sample_ledger(path: &Path, rows: u64, end: HashMap<String, String>) -> PathBuf {
    let mut w = LedgerWriter::create(path, HashMap::new()).unwrap();
    let sample: Vec<Row<'static>> = (0..40).map(Row::sample).collect();
    for i in 0..rows {
        w.append(&sample[(i % 40) as usize]).unwrap();
    }
    w.finish(end).unwrap();
    path.to_owned()
}

/// Errors writing a ledger.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The ledger file could not be created (it may already exist).
    #[error("cannot create ledger {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Encoding or writing a batch failed.
    #[error("writing ledger {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: ArrowError,
    },
}

/// Writes one ledger file.
pub struct LedgerWriter {
    path: PathBuf,
    file: IpcFileWriter<BufWriter<File>>,
    head: HashMap<String, String>,
    schema: SchemaRef,
    rows: Builders,
    total: u64,
}

impl LedgerWriter {
    /// Creates `path` (which must not exist) and writes the head of the file with `metadata`.
    pub fn create(path: &Path, metadata: HashMap<String, String>) -> Result<Self, WriteError> {
        let create = |source| WriteError::Create {
            path: path.to_owned(),
            source,
        };
        let mode = crate::run_dir::file_mode(path.parent().unwrap_or(Path::new(".")));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
            .map_err(create)?;
        let mut head = metadata;
        head.insert(meta::SCHEMA_VERSION.into(), schema::SCHEMA_VERSION.into());
        head.insert(meta::AET_VERSION.into(), crate::version::get().into());
        head.insert(meta::FINISHED.into(), "false".into());
        let schema = schema::schema(head.clone());
        let file = IpcFileWriter::try_new(BufWriter::with_capacity(1 << 20, file), &schema)
            .map_err(|source| WriteError::Write {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self {
            path: path.to_owned(),
            file,
            head,
            schema,
            rows: Builders::new(BATCH_ROWS),
            total: 0,
        })
    }

    /// The ledger's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rows appended so far.
    pub fn rows(&self) -> u64 {
        self.total
    }

    /// Rows waiting in the current batch.
    pub fn pending(&self) -> usize {
        self.rows.len
    }

    /// Appends a row; writes a batch when one is full.
    pub fn append(&mut self, row: &Row<'_>) -> Result<(), WriteError> {
        self.rows.append(row);
        self.total += 1;
        if self.rows.len >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the pending rows (if any) as a batch and flushes it to the file.
    pub fn flush(&mut self) -> Result<(), WriteError> {
        if self.rows.len == 0 {
            return Ok(());
        }
        self.rows
            .finish(self.schema.clone())
            .and_then(|b| self.file.write(&b))
            .map_err(|source| WriteError::Write {
                path: self.path.clone(),
                source,
            })
    }

    /// Writes the pending rows and the footer, whose schema metadata is the head metadata
    /// updated with `metadata` and `aet.finished = true`.
    pub fn finish(mut self, metadata: HashMap<String, String>) -> Result<PathBuf, WriteError> {
        self.flush()?;
        let mut all = self.head.clone();
        all.extend(metadata);
        all.insert(meta::FINISHED.into(), "true".into());
        all.insert(meta::EVENTS_RECORDED.into(), self.total.to_string());
        // The hash chain, read back from what reached the file (at the end, not on the way: the
        // consumer writes events, it does not hash them); its last link covers this metadata,
        // so the footer cannot be edited unseen.
        let werr = |e: std::io::Error| WriteError::Write {
            path: self.path.clone(),
            source: ArrowError::IoError(e.to_string(), e),
        };
        std::io::Write::flush(self.file.get_mut()).map_err(werr)?;
        let (head_end, spans) = self.file.spans();
        let mut f = File::open(&self.path).map_err(werr)?;
        let (head, links) = super::chain::links(&mut f, head_end, &spans).map_err(werr)?;
        let last = links.last().copied().unwrap_or(head);
        let record = super::chain::ChainRecord {
            version: 1,
            head: super::chain::hex(&head),
            batches: links.iter().map(super::chain::hex).collect(),
            final_hash: super::chain::hex(&super::chain::final_hash(&last, &all)),
        };
        all.insert(
            meta::CHAIN.into(),
            serde_json::to_string(&record).expect("a chain serialises"),
        );
        let final_schema = schema::schema(all);
        self.file
            .finish(&final_schema)
            .map_err(|source| WriteError::Write {
                path: self.path.clone(),
                source,
            })?;
        Ok(self.path)
    }
}
