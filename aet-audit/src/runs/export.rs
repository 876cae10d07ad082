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

use arrow_schema::{Schema, SchemaRef};
use parquet::{
    arrow::ArrowWriter,
    basic::{Compression, ZstdLevel},
    file::{metadata::KeyValue, properties::WriterProperties},
    schema::types::ColumnPath,
};

use aet_ledger::{
    reader::{Form, Ledger, ReadError},
    schema::col,
};

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
    /// The run's `audit.json` could not be read (its row's verdict and counts are null).
    pub audit_problem: Option<String>,
    /// Said of the run's verdict, exported all the same (an unsigned report of a signed run).
    pub audit_note: Option<String>,
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
    } else if path
        .file_name()
        .is_some_and(|n| n == aet_ledger::run_dir::LEDGER)
    {
        path.parent().map(Path::to_owned).unwrap_or_default()
    } else {
        path.with_extension("")
    };
    let p = fs::canonicalize(&p).unwrap_or(p);
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "run".into())
}

fn werr(path: &Path, e: &dyn std::fmt::Display) -> ExportError {
    ExportError::Write {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

/// Writes one partition, `table/run=NAME/part-00000.parquet`, with what `fill` writes: under a
/// temporary name first, renamed into place (removed on failure); an existing partition is
/// never overwritten. Returns the file.
fn write_partition<T>(
    table: &Path,
    run: &str,
    schema: SchemaRef,
    props: WriterProperties,
    fill: impl FnOnce(&mut ArrowWriter<fs::File>) -> Result<T, ExportError>,
) -> Result<(PathBuf, T), ExportError> {
    let name = format!("run={}", partition_value(run));
    let part = table.join(&name);
    if part.exists() {
        return Err(ExportError::Exists(part));
    }
    let tmp = table.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).map_err(|e| werr(&tmp, &e))?;
    let file_name = "part-00000.parquet";
    let written = (|| {
        let f = fs::File::create(tmp.join(file_name)).map_err(|e| werr(&tmp, &e))?;
        let mut w = ArrowWriter::try_new(f, schema, Some(props)).map_err(|e| werr(&tmp, &e))?;
        let t = fill(&mut w)?;
        w.close().map_err(|e| werr(&tmp, &e))?;
        if part.exists() {
            return Err(ExportError::Exists(part.clone()));
        }
        fs::rename(&tmp, &part).map_err(|e| werr(&part, &e))?;
        Ok(t)
    })();
    match written {
        Ok(t) => Ok((part.join(file_name), t)),
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

/// Exports the ledger at `ledger` as run `run` under `dir`.
pub fn export(ledger: &Path, run: &str, dir: &Path) -> Result<Exported, ExportError> {
    let mut l = Ledger::open(ledger)?;
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
    // Dictionary pages only for the few-valued columns readers group by: zstd finds the
    // repetition in paths and names by itself, and building their dictionaries was a sixth of
    // the export's time (`cargo xtask bench --only query`, docs/performance.md).
    let mut props = parquet_properties()
        .set_dictionary_enabled(false)
        .set_key_value_metadata(Some(kv));
    for c in [col::KIND, col::SYSCALL, col::COMM] {
        props = props.set_column_dictionary_enabled(ColumnPath::from(c), true);
    }
    let props = props.build();
    let (file, rows) = write_partition(dir, run, schema.clone(), props, |w| {
        let mut rows = 0u64;
        while let Some(b) = l.next_batch()? {
            rows += b.num_rows() as u64;
            let b = b
                .with_schema(schema.clone())
                .map_err(|e| werr(ledger, &e))?;
            w.write(&b).map_err(|e| werr(ledger, &e))?;
        }
        Ok(rows)
    })?;
    let (audit_problem, audit_note) = write_run_row(ledger, run, dir, rows, l.form(), &l.meta()?)?;
    Ok(Exported {
        audit_problem,
        audit_note,
        run: run.to_owned(),
        bytes: fs::metadata(&file).map(|m| m.len()).unwrap_or(0),
        ledger_bytes: fs::metadata(ledger).map(|m| m.len()).unwrap_or(0),
        file,
        rows,
        unfinished: l.form() == Form::Unfinished,
    })
}

/// The properties every Parquet file aet writes starts from (the export's partitions, `aet
/// query -o FILE --format parquet`): zstd at its default level.
pub fn parquet_properties() -> parquet::file::properties::WriterPropertiesBuilder {
    WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::default()))
}

/// The run's row of `DIR/_runs` (see [`super::run_row`]), and what to say of its audit: a
/// damaged `audit.json` is a problem (the row is written without the audit's columns), an
/// unsigned report of a signed run a note.
fn write_run_row(
    ledger: &Path,
    run: &str,
    dir: &Path,
    events: u64,
    form: Form,
    m: &aet_ledger::metadata::LedgerMeta,
) -> Result<(Option<String>, Option<String>), ExportError> {
    let (audit, problem) =
        match crate::report::Report::read(&aet_ledger::run_dir::audit_beside(ledger)) {
            Ok(a) => (a, None),
            Err(e) => (None, Some(e)),
        };
    let coverage = aet_ledger::manifest::audit_coverage(ledger.parent().unwrap_or(Path::new(".")));
    let batch = super::run_row(
        None,
        events,
        form,
        m,
        audit.as_ref(),
        coverage.verdict_signed(),
    )
    .map_err(|e| werr(ledger, &e))?;
    let note = match coverage {
        aet_ledger::manifest::AuditCoverage::UnsignedReport(why) if audit.is_some() => {
            Some(format!(
                "its verdict comes from an unsigned report of a signed run (verdict_signed is \
             false): {why}"
            ))
        }
        _ => None,
    };
    write_partition(
        &dir.join("_runs"),
        run,
        batch.schema(),
        parquet_properties().build(),
        |w| w.write(&batch).map_err(|e| werr(ledger, &e)),
    )?;
    Ok((problem, note))
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
