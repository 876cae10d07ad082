//! `aet ledger export RUNS… --parquet DIR`: ledgers as Parquet, partitioned Hive-style by run
//! (`DIR/run=NAME/part-00000.parquet`), so Spark, Trino or DuckDB read a whole evaluation from a
//! directory or an object store as it is; and one row per run in `DIR/_runs/run=NAME/` (the
//! command, times, exit status, events, losses, completeness and its reasons, sandbox and
//! identity, and the verdict and counts of the run's `audit.json`). Readers of `DIR` skip
//! `_runs` (a leading underscore hides a directory from Hive-style discovery, and it sits one
//! level deeper than the events' files).
//!
//! Each file holds the ledger's rows with the ledger's schema (the `run` column comes from the
//! partition directory, as Hive-style readers expect), zstd-compressed, and the ledger's final
//! metadata (`aet.command`, `aet.complete`, `aet.events_lost`, ...) as the Parquet file's
//! key-value metadata, with `aet.run` (the run's name) and `aet.source` (the ledger it came
//! from). A partition is written to a temporary name and renamed into place: a reader never
//! sees half of one, and an existing partition is never overwritten.

use std::{
    fs,
    path::{Path, PathBuf},
    sync::Arc,
};

use arrow_schema::Schema;
use parquet::{
    arrow::ArrowWriter,
    basic::{Compression, ZstdLevel},
    file::{metadata::KeyValue, properties::WriterProperties},
};

use super::reader::{Form, Ledger, ReadError};

/// Why a run could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{path}: {message}")]
    Write { path: PathBuf, message: String },
    #[error("{0} exists already (a run of that name was exported there): remove it first")]
    Exists(PathBuf),
}

/// One run, exported.
#[derive(Debug, Clone)]
pub struct Exported {
    pub run: String,
    pub file: PathBuf,
    pub rows: u64,
    pub bytes: u64,
    /// The ledger's own size.
    pub ledger_bytes: u64,
    /// The ledger was unfinished (its rows up to its last complete batch were exported).
    pub unfinished: bool,
}

/// A run's name as a Hive partition value: bytes outside `[A-Za-z0-9._-]` as `%XX` (what Spark
/// and DuckDB unescape).
pub fn partition_value(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The name a run is exported under: its directory's name (or, for a ledger file named
/// otherwise than `ledger.arrow`, the file's stem).
pub fn run_name(path: &Path) -> String {
    let p = if path.is_dir() {
        path.to_owned()
    } else if path.file_name().is_some_and(|n| n == super::LEDGER_FILE) {
        path.parent().map(Path::to_owned).unwrap_or_default()
    } else {
        path.with_extension("")
    };
    let p = fs::canonicalize(&p).unwrap_or(p);
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "run".into())
}

/// Exports the ledger at `ledger` as run `run` under `dir`.
pub fn export(ledger: &Path, run: &str, dir: &Path) -> Result<Exported, ExportError> {
    let mut l = Ledger::open(ledger)?;
    let part = dir.join(format!("run={}", partition_value(run)));
    if part.exists() {
        return Err(ExportError::Exists(part));
    }
    let werr = |path: &Path, e: &dyn std::fmt::Display| ExportError::Write {
        path: path.to_owned(),
        message: e.to_string(),
    };
    let mut metadata = l.metadata();
    metadata.insert("aet.run".into(), run.to_owned());
    metadata.insert("aet.source".into(), ledger.display().to_string());
    let mut kv: Vec<KeyValue> = metadata
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    kv.sort_by(|a, b| a.key.cmp(&b.key));
    let schema = Arc::new(Schema::new_with_metadata(
        l.schema().fields().clone(),
        metadata,
    ));
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_key_value_metadata(Some(kv))
        .build();
    fs::create_dir_all(dir).map_err(|e| werr(dir, &e))?;
    let tmp = dir.join(format!(
        ".run={}.{}.tmp",
        partition_value(run),
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir(&tmp).map_err(|e| werr(&tmp, &e))?;
    let file_name = "part-00000.parquet";
    let result = (|| {
        let f = fs::File::create(tmp.join(file_name)).map_err(|e| werr(&tmp, &e))?;
        let mut w =
            ArrowWriter::try_new(f, schema.clone(), Some(props)).map_err(|e| werr(&tmp, &e))?;
        let mut rows = 0u64;
        while let Some(b) = l.next_batch()? {
            rows += b.num_rows() as u64;
            let b = b
                .with_schema(schema.clone())
                .map_err(|e| werr(ledger, &e))?;
            w.write(&b).map_err(|e| werr(&tmp, &e))?;
        }
        w.close().map_err(|e| werr(&tmp, &e))?;
        Ok(rows)
    })();
    let rows = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    if part.exists() {
        let _ = fs::remove_dir_all(&tmp);
        return Err(ExportError::Exists(part));
    }
    fs::rename(&tmp, &part).map_err(|e| werr(&part, &e))?;
    write_run_row(ledger, run, dir, rows, l.form(), &l.meta()?)?;
    let file = part.join(file_name);
    Ok(Exported {
        run: run.to_owned(),
        bytes: fs::metadata(&file).map(|m| m.len()).unwrap_or(0),
        ledger_bytes: fs::metadata(ledger).map(|m| m.len()).unwrap_or(0),
        file,
        rows,
        unfinished: l.form() == Form::Unfinished,
    })
}

/// The run's row of `DIR/_runs`.
fn write_run_row(
    ledger: &Path,
    run: &str,
    dir: &Path,
    events: u64,
    form: Form,
    m: &super::record::LedgerMeta,
) -> Result<(), ExportError> {
    use arrow_array::{
        ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
        UInt32Array, UInt64Array,
    };
    use arrow_schema::{DataType, Field};
    let werr = |path: &Path, e: &dyn std::fmt::Display| ExportError::Write {
        path: path.to_owned(),
        message: e.to_string(),
    };
    let audit: Option<serde_json::Value> = ledger
        .parent()
        .map(|d| d.join("audit.json"))
        .and_then(|p| fs::read_to_string(p).ok())
        .and_then(|t| serde_json::from_str(&t).ok());
    let count = |key: &str| {
        audit
            .as_ref()
            .and_then(|a| a.get(key)?.as_array().map(|x| x.len() as u64))
    };
    let mut reasons = m.incomplete.texts();
    if form == Form::Unfinished {
        reasons.insert(0, "the ledger is unfinished".into());
    }
    let complete = m.complete && form == Form::Finished;
    let duration = match (m.started_ns, m.ended_ns) {
        (Some(s), Some(e)) => Some((e - s) as f64 / 1e9),
        _ => None,
    };
    let cols: Vec<(&str, ArrayRef, bool)> = vec![
        (
            "command",
            Arc::new(StringArray::from(vec![crate::util::shell_words(
                &m.command,
            )])),
            false,
        ),
        (
            "scope",
            Arc::new(StringArray::from(vec![m.scope_target.clone()])),
            true,
        ),
        (
            "started_ns",
            Arc::new(Int64Array::from(vec![m.started_ns])),
            true,
        ),
        (
            "ended_ns",
            Arc::new(Int64Array::from(vec![m.ended_ns])),
            true,
        ),
        (
            "duration_s",
            Arc::new(Float64Array::from(vec![duration])),
            true,
        ),
        (
            "exit_status",
            Arc::new(Int32Array::from(vec![m.exit_status])),
            true,
        ),
        ("events", Arc::new(UInt64Array::from(vec![events])), false),
        (
            "lost",
            Arc::new(UInt64Array::from(vec![m.events_lost])),
            true,
        ),
        (
            "complete",
            Arc::new(BooleanArray::from(vec![complete])),
            false,
        ),
        (
            "incomplete_reasons",
            Arc::new(StringArray::from(vec![reasons.join("; ")])),
            false,
        ),
        (
            "sandbox_verified",
            Arc::new(BooleanArray::from(vec![
                m.sandbox.as_ref().map(|s| s.verified),
            ])),
            true,
        ),
        (
            "identity_uid",
            Arc::new(UInt32Array::from(vec![m.identity.as_ref().map(|i| i.uid)])),
            true,
        ),
        (
            "verdict",
            Arc::new(StringArray::from(vec![audit.as_ref().and_then(|a| {
                a.get("verdict").and_then(|v| v.as_str()).map(str::to_owned)
            })])),
            true,
        ),
        (
            "cheats",
            Arc::new(UInt64Array::from(vec![count("cheat_hits")])),
            true,
        ),
        (
            "contaminants",
            Arc::new(UInt64Array::from(vec![count("contaminant_hits")])),
            true,
        ),
        (
            "out_of_scope",
            Arc::new(UInt64Array::from(vec![count("out_of_scope")])),
            true,
        ),
        (
            "warnings",
            Arc::new(UInt64Array::from(vec![count("warnings")])),
            true,
        ),
        (
            "blocked",
            Arc::new(UInt64Array::from(vec![count("blocked")])),
            true,
        ),
    ];
    let schema = Arc::new(Schema::new(
        cols.iter()
            .map(|(n, a, null)| Field::new(*n, a.data_type().clone(), *null))
            .collect::<Vec<_>>(),
    ));
    debug_assert!(
        schema
            .fields()
            .iter()
            .all(|f| f.data_type() != &DataType::Null)
    );
    let batch = RecordBatch::try_new(schema.clone(), cols.into_iter().map(|c| c.1).collect())
        .map_err(|e| werr(ledger, &e))?;
    let runs = dir.join("_runs");
    let part = runs.join(format!("run={}", partition_value(run)));
    if part.exists() {
        return Err(ExportError::Exists(part));
    }
    let tmp = runs.join(format!(
        ".run={}.{}.tmp",
        partition_value(run),
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).map_err(|e| werr(&tmp, &e))?;
    let f = fs::File::create(tmp.join("part-00000.parquet")).map_err(|e| werr(&tmp, &e))?;
    let mut w = ArrowWriter::try_new(f, schema, None).map_err(|e| werr(&tmp, &e))?;
    w.write(&batch).map_err(|e| werr(&tmp, &e))?;
    w.close().map_err(|e| werr(&tmp, &e))?;
    fs::rename(&tmp, &part).map_err(|e| werr(&part, &e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn partition_values_escape_what_hive_readers_unescape() {
        assert_eq!(
            super::partition_value("20261130T220507Z"),
            "20261130T220507Z"
        );
        assert_eq!(super::partition_value("a b/c=d"), "a%20b%2Fc%3Dd");
        assert_eq!(super::partition_value("é"), "%C3%A9");
    }
}
