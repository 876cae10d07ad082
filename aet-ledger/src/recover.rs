//! `aet ledger recover`: turns the unfinished ledger of a killed monitor into a finished one,
//! marked incomplete and recovered. Nothing in the original is changed; the copy is new.

use std::{
    fs::OpenOptions,
    io::{self, BufWriter},
    path::{Path, PathBuf},
};

use arrow_array::RecordBatch;
use arrow_schema::ArrowError;

use super::{
    ipc::IpcFileWriter,
    metadata::{Incomplete, MetaMap, Reasons},
    reader::{Form, Ledger, ReadError},
    schema::meta,
};

/// Why a ledger could not be recovered.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// The ledger could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// It is finished already.
    #[error("{0} is a finished ledger; there is nothing to recover")]
    Finished(PathBuf),
    /// The copy could not be created (it may exist).
    #[error("cannot create {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The copy could not be written.
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: ArrowError,
    },
}

/// What a recovery wrote.
#[derive(Clone, Debug)]
pub struct Recovered {
    pub out: PathBuf,
    pub rows: u64,
    pub batches: usize,
}

/// The default name of a recovered copy: `NAME.recovered.arrow` beside the original.
pub fn default_out(path: &Path) -> PathBuf {
    path.with_extension("recovered.arrow")
}

/// Copies every complete batch of the unfinished ledger `path` into the new file `out`, with
/// the head's metadata, marked finished, incomplete and recovered.
pub fn recover(path: &Path, out: &Path) -> Result<Recovered, RecoverError> {
    let mut l = Ledger::open(path)?;
    if l.form() == Form::Finished {
        return Err(RecoverError::Finished(path.to_owned()));
    }
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(out)
        .map_err(|source| RecoverError::Create {
            path: out.to_owned(),
            source,
        })?;
    let write_err = |source| RecoverError::Write {
        path: out.to_owned(),
        source,
    };
    let mut head = MetaMap(l.metadata());
    head.set(meta::RECOVERED, true);
    let schema = l.schema().as_ref().clone().with_metadata(head.0.clone());
    let mut w = IpcFileWriter::try_new(BufWriter::new(file), &schema).map_err(write_err)?;
    let mut rows = 0u64;
    while let Some(b) = l.next_batch()? {
        rows += b.num_rows() as u64;
        let b =
            RecordBatch::try_new(schema.clone().into(), b.columns().to_vec()).map_err(write_err)?;
        w.write(&b).map_err(write_err)?;
    }
    let batches = w.batches();
    let mut reasons = Reasons::new();
    reasons.push(Incomplete::Recovered { from: path.into() });
    if let Some(e) = &l.damaged_tail {
        reasons.push(Incomplete::DamagedTail { error: e.clone() });
    }
    head.set(meta::FINISHED, true)
        .set(meta::COMPLETE, false)
        .set(meta::EVENTS_RECORDED, rows)
        .set_json(meta::INCOMPLETE_REASONS, &reasons);
    w.finish(&schema.with_metadata(head.into_inner()))
        .map_err(write_err)?;
    Ok(Recovered {
        out: out.to_owned(),
        rows,
        batches,
    })
}
