//! `aet query SQL RUNS…`: SQL over many runs (see `aet_query`).
//!
//! The engine (DataFusion) is most of a cold build, so it is the `query` feature (on by default);
//! `cargo xtask demo` builds without it, and such a binary says so when asked for a query.
#![cfg_attr(not(feature = "query"), allow(dead_code, unused_imports))]
use std::{
    io::Write,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

#[cfg(feature = "query")]
use aet_query::output::Format;

use super::Exit;

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum FormatArg {
    Table,
    Csv,
    Json,
    Arrow,
    Parquet,
}

/// Run SQL (DataFusion's dialect) over runs. Tables: `events` (every ledger row, with `run`,
/// the run's directory name), `runs` (one row per run: command, scope, times, exit status,
/// events, lost, complete and its reasons, sandbox and identity, and the verdict and counts of
/// its audit.json) and `findings` (one row per finding of every audit.json). A run whose ledger
/// is unfinished or cannot be read, or whose audit.json cannot be read, is reported and
/// skipped (exit 1); with --strict it is an error (exit 4).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The query, e.g. "select run, kind, count(*) from events group by run, kind".
    sql: String,
    /// Run directories, ledger files, directories of runs, or globs of these ('runs/*',
    /// expanded by aet); a run is named by its directory. s3://BUCKET/PREFIX: every run
    /// shipped under the prefix (`aet ship`), downloaded and checked against its shipped.json.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// The result's format: a table for a person, CSV with a header, a JSON array of objects,
    /// an Arrow IPC file, or Parquet (zstd).
    #[arg(long, value_enum, default_value = "table")]
    format: FormatArg,
    /// Write the result to FILE (written under a temporary name, then renamed into place)
    /// instead of standard output; s3://BUCKET/KEY uploads it there once whole.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// The result in FORMAT to DEST, a file or s3://BUCKET/KEY: `--export parquet
    /// s3://evals/q.parquet` is `--format parquet -o s3://evals/q.parquet`.
    #[arg(long, num_args = 2, value_names = ["FORMAT", "DEST"], conflicts_with_all = ["format", "output"])]
    export: Option<Vec<String>>,
    /// Fail (exit 4) on the first run that cannot be read instead of skipping it.
    #[arg(long)]
    strict: bool,
    /// Threads (and partitions of the events scan); default: one per CPU.
    #[arg(long, default_value_t = 0, hide_default_value = true)]
    threads: usize,
}

/// Standard output, noting a closed pipe (a reader that stopped early is not an error).
struct Stdout(Arc<AtomicBool>);

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::io::stdout().write(buf).inspect_err(|e| self.closed(e))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush().inspect_err(|e| self.closed(e))
    }
}

impl Stdout {
    fn closed(&self, e: &std::io::Error) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(not(feature = "query"))]
pub fn run(_: Args) -> anyhow::Result<u8> {
    anyhow::bail!(
        "this aet was built without `aet query` (the `query` feature: `cargo xtask demo` leaves \
         the SQL engine out to build fast); `cargo xtask build` builds the whole aet"
    )
}

#[cfg(feature = "query")]
pub fn run(mut a: Args) -> anyhow::Result<u8> {
    use std::io::IsTerminal as _;
    if let Some([format, dest]) = a.export.as_deref() {
        a.format = <FormatArg as clap::ValueEnum>::from_str(format, true).map_err(|_| {
            anyhow::anyhow!("--export {format}: not a format (table, csv, json, arrow or parquet)")
        })?;
        a.output = Some(PathBuf::from(dest));
    }
    let format = match a.format {
        FormatArg::Table => Format::Table,
        FormatArg::Csv => Format::Csv,
        FormatArg::Json => Format::Json,
        FormatArg::Arrow => Format::Arrow,
        FormatArg::Parquet => Format::Parquet,
    };
    if format.is_binary() && a.output.is_none() && std::io::stdout().is_terminal() {
        anyhow::bail!(
            "--format {:?} is binary: give -o FILE or redirect the output",
            a.format
        );
    }
    let local = super::remote::localize(&a.runs)?;
    for p in &local.problems {
        eprintln!("aet: {p}");
    }
    if a.strict && !local.problems.is_empty() {
        anyhow::bail!("--strict: {} run(s) of the bucket left out", local.left_out);
    }
    let runs = aet_query::discover(&local.paths)?;
    // An s3:// result is written to a local file first, uploaded once whole.
    let remote_out = a
        .output
        .as_ref()
        .filter(|o| super::remote::is_url(o))
        .cloned();
    let staging = match &remote_out {
        Some(_) => Some(tempfile::Builder::new().prefix("aet-query-").tempdir()?),
        None => None,
    };
    if let (Some(r), Some(d)) = (&remote_out, &staging) {
        let name = r.file_name().unwrap_or("result".as_ref()).to_owned();
        a.output = Some(d.path().join(name));
    }
    if let Some(o) = &a.output {
        let reports: Vec<PathBuf> = runs.iter().map(|r| r.audit_path()).collect();
        let inputs: Vec<&std::path::Path> = runs
            .iter()
            .map(|r| r.ledger.as_path())
            .chain(reports.iter().map(PathBuf::as_path))
            .collect();
        super::refuse_overwriting_inputs(&[("-o", o)], &inputs)?;
    }
    let opts = aet_query::Options {
        strict: a.strict,
        threads: a.threads,
    };
    let closed = Arc::new(AtomicBool::new(false));
    // A regular file is written under a temporary name and renamed into place; anything else
    // that exists (/dev/null, a FIFO) is written as it is.
    let special = a
        .output
        .as_ref()
        .and_then(|o| std::fs::metadata(o).ok())
        .is_some_and(|m| !m.is_file());
    let tmp = a.output.as_ref().filter(|_| !special).map(|o| {
        let mut name = o.file_name().unwrap_or_default().to_owned();
        name.push(format!(".{}.tmp", std::process::id()));
        o.with_file_name(name)
    });
    let mut sink = match (&tmp, &a.output) {
        (Some(t), _) => {
            let f =
                std::fs::File::create(t).map_err(|e| anyhow::anyhow!("{}: {e}", t.display()))?;
            aet_query::output::sink(format, std::io::BufWriter::new(f))
        }
        (None, Some(o)) => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(o)
                .map_err(|e| anyhow::anyhow!("{}: {e}", o.display()))?;
            aet_query::output::sink(format, std::io::BufWriter::new(f))
        }
        (None, None) => aet_query::output::sink(format, Stdout(closed.clone())),
    };
    let done = aet_query::query(&a.sql, &runs, &opts, sink.as_mut());
    drop(sink);
    let outcome = match done {
        Ok(o) => o,
        Err(e) => {
            if let Some(t) = &tmp {
                let _ = std::fs::remove_file(t);
            }
            if closed.load(Ordering::Relaxed) {
                return Ok(Exit::Success.code());
            }
            return Err(match e {
                aet_query::QueryError::Sql(e) => anyhow::anyhow!("SQL: {e}"),
                e => e.into(),
            });
        }
    };
    if let (Some(t), Some(o)) = (&tmp, &a.output) {
        // Only a whole result replaces what was there.
        std::fs::rename(t, o).map_err(|e| anyhow::anyhow!("{}: {e}", o.display()))?;
    }
    if let (Some(r), Some(o)) = (&remote_out, &a.output) {
        super::remote::upload(o, &r.to_string_lossy())?;
        a.output = Some(r.clone());
    }
    for p in &outcome.problems {
        eprintln!("aet: run {}: {}", p.run, p.message);
    }
    let bucket_skipped = local.left_out;
    let skipped: std::collections::BTreeSet<&str> = outcome
        .problems
        .iter()
        .filter(|p| !p.note)
        .map(|p| p.run.as_str())
        .collect();
    eprintln!(
        "aet: {} row(s) from {} run(s){}{}",
        outcome.rows,
        outcome.runs,
        if skipped.is_empty() && bucket_skipped == 0 {
            String::new()
        } else {
            format!("; {} run(s) reported above", skipped.len() + bucket_skipped)
        },
        a.output
            .as_ref()
            .map(|o| format!("; written to {}", o.display()))
            .unwrap_or_default()
    );
    Ok(if skipped.is_empty() && bucket_skipped == 0 {
        Exit::Success
    } else {
        Exit::Negative
    }
    .code())
}
