//! `aet query SQL RUNS…`: SQL over many runs on DataFusion.
//!
//! Three tables: `events` (every ledger row of every run, with `run`, the run's name), `runs`
//! (one row per run: the ledger's metadata and the verdict and counts of its `audit.json`, as
//! `aet ledger export` writes to `_runs`) and `findings` (one row per finding of every
//! `audit.json`). A run whose ledger cannot be read, or is unfinished, is left out of every
//! table and reported; one whose `audit.json` cannot be read keeps its events and its run row
//! (verdict null) and is reported. With `strict`, any of these is an error instead.

mod events;
pub mod output;
pub mod remote;

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use aet_audit::runs::{self, RunRef};
use aet_ledger::reader::{self, Form, Ledger};
use datafusion::{
    arrow::{array::RecordBatch, compute::concat_batches, datatypes::SchemaRef},
    catalog::MemTable,
    error::DataFusionError,
    prelude::{SessionConfig, SessionContext},
};
use futures::StreamExt as _;

/// A run left out (or partly out) of the tables, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub run: String,
    pub message: String,
    /// Said of the run, which is in the tables whole all the same (an unsigned report of a
    /// signed run): no reason for a non-zero exit.
    pub note: bool,
}

type Problems = Arc<Mutex<Vec<Problem>>>;

/// Why a query failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The SQL is not valid, names what is not there, or failed while running.
    #[error("{0}")]
    Sql(#[source] DataFusionError),
    /// `strict`: a run could not be read.
    #[error("run {run}: {message}")]
    Strict { run: String, message: String },
    /// The result could not be written.
    #[error("{0}")]
    Output(String),
    /// The engine could not start.
    #[error("starting the query engine: {0}")]
    Runtime(std::io::Error),
}

/// How to run a query.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Fail on the first run that cannot be read, instead of reporting and skipping it.
    pub strict: bool,
    /// Threads (and partitions of the `events` scan); 0: one per CPU.
    pub threads: usize,
}

/// What a query did.
#[derive(Debug)]
pub struct Outcome {
    /// The result's schema.
    pub schema: SchemaRef,
    /// Rows in the result.
    pub rows: u64,
    /// Runs in the tables.
    pub runs: usize,
    /// Runs left out, or partly out, and why (empty under `strict`: those fail the query).
    pub problems: Vec<Problem>,
}

/// What one run contributes before any scan: its run row, its report, its ledger's size.
struct Opened {
    run: RecordBatch,
    audit: Option<aet_audit::Report>,
    bytes: u64,
    /// Said of the run, but no reason to leave anything out (so `--strict` does not refuse it).
    note: Option<String>,
}

/// A run opened (with a problem that keeps it), or why it is left out.
type Opening = Result<(Opened, Option<String>), String>;

/// Opens one run: the ledger's metadata and row count (from the footer, not the rows) and its
/// audit report. `Err` leaves the whole run out; `Ok` with a problem keeps it.
fn open_run(r: &RunRef) -> Opening {
    let ledger = Ledger::open(&r.ledger).map_err(|e| e.to_string())?;
    if ledger.form() == Form::Unfinished {
        return Err(format!(
            "{}: the ledger is unfinished (its monitor did not finish it; `aet ledger recover` \
             rewrites it)",
            r.ledger.display()
        ));
    }
    let meta = ledger.meta().map_err(|e| e.to_string())?;
    let events = reader::count_rows(&r.ledger).map_err(|e| e.to_string())?;
    let (audit, problem) = match aet_audit::Report::read(&r.audit_path()) {
        Ok(a) => (a, None),
        Err(e) => (None, Some(e)),
    };
    let coverage =
        aet_ledger::manifest::audit_coverage(r.ledger.parent().unwrap_or(Path::new(".")));
    let run = runs::run_row(
        Some(&r.name),
        events,
        Form::Finished,
        &meta,
        audit.as_ref(),
        coverage.verdict_signed(),
    )
    .map_err(|e| format!("{}: {e}", r.ledger.display()))?;
    let bytes = std::fs::metadata(&r.ledger).map(|m| m.len()).unwrap_or(0);
    let note = match coverage {
        aet_ledger::manifest::AuditCoverage::UnsignedReport(why) if audit.is_some() => {
            Some(format!(
                "its verdict comes from an unsigned report of a signed run (verdict_signed is \
             false): {why}"
            ))
        }
        _ => None,
    };
    Ok((
        Opened {
            run,
            audit,
            bytes,
            note,
        },
        problem,
    ))
}

/// Opens every run, in parallel, keeping the order given.
fn open_all(list: &[RunRef], threads: usize) -> Vec<Opening> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Opening>>> = list.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads.min(list.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(r) = list.get(i) else { break };
                    *slots[i].lock().expect("no panics hold it") = Some(open_run(r));
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|s| {
            s.into_inner()
                .expect("no panics hold it")
                .expect("every run was taken")
        })
        .collect()
}

/// The session with the three tables over `list`.
fn session(
    list: &[RunRef],
    opts: &Options,
    threads: usize,
    problems: &Problems,
) -> Result<(SessionContext, usize), QueryError> {
    let mut sources = Vec::new();
    let mut run_rows = Vec::new();
    let mut reports: Vec<(String, aet_audit::Report)> = Vec::new();
    for (r, opened) in list.iter().zip(open_all(list, threads)) {
        let (o, problem) = match opened {
            Ok(x) => x,
            Err(message) if opts.strict => {
                return Err(QueryError::Strict {
                    run: r.name.clone(),
                    message,
                });
            }
            Err(message) => {
                events::record(problems, &r.name, format!("skipped: {message}"));
                continue;
            }
        };
        if let Some(message) = problem {
            if opts.strict {
                return Err(QueryError::Strict {
                    run: r.name.clone(),
                    message,
                });
            }
            events::record(
                problems,
                &r.name,
                format!("{message} (its verdict is null)"),
            );
        }
        if let Some(note) = o.note {
            events::note(problems, &r.name, note);
        }
        sources.push(events::Source {
            name: r.name.clone(),
            ledger: r.ledger.clone(),
            bytes: o.bytes,
        });
        run_rows.push(o.run);
        if let Some(a) = o.audit {
            reports.push((r.name.clone(), a));
        }
    }
    let config = SessionConfig::new()
        .with_target_partitions(threads)
        .with_information_schema(true);
    let ctx = SessionContext::new_with_config(config);
    let sql = QueryError::Sql;
    let n = sources.len();
    ctx.register_table(
        "events",
        Arc::new(events::Events::new(
            sources,
            threads,
            problems.clone(),
            opts.strict,
        )),
    )
    .map_err(sql)?;
    let runs_schema = empty_run_row().schema();
    let runs_batch = concat_batches(&runs_schema, &run_rows)
        .map_err(|e| QueryError::Sql(DataFusionError::ArrowError(Box::new(e), None)))?;
    ctx.register_table(
        "runs",
        Arc::new(MemTable::try_new(runs_schema, vec![vec![runs_batch]]).map_err(sql)?),
    )
    .map_err(sql)?;
    let findings = runs::finding_rows(reports.iter().map(|(n, a)| (n.as_str(), a)))
        .map_err(|e| QueryError::Sql(DataFusionError::ArrowError(Box::new(e), None)))?;
    ctx.register_table(
        "findings",
        Arc::new(MemTable::try_new(findings.schema(), vec![vec![findings]]).map_err(sql)?),
    )
    .map_err(sql)?;
    Ok((ctx, n))
}

/// A run row of nothing, for the `runs` table's schema.
fn empty_run_row() -> RecordBatch {
    runs::run_row(Some(""), 0, Form::Finished, &Default::default(), None, None)
        .expect("a row of defaults")
}

/// Runs `sql` over `list`, handing each batch of the result to `sink` as it comes.
pub fn query(
    sql: &str,
    list: &[RunRef],
    opts: &Options,
    sink: &mut dyn output::Sink,
) -> Result<Outcome, QueryError> {
    let threads = if opts.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        opts.threads
    };
    let problems: Problems = Arc::default();
    let (ctx, runs) = session(list, opts, threads, &problems)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .map_err(QueryError::Runtime)?;
    let (schema, rows) = rt.block_on(async {
        let df = ctx.sql(sql).await.map_err(QueryError::Sql)?;
        let mut stream = df.execute_stream().await.map_err(QueryError::Sql)?;
        let schema = stream.schema();
        sink.start(&schema).map_err(QueryError::Output)?;
        let mut rows = 0u64;
        while let Some(b) = stream.next().await {
            let b = b.map_err(|e| strict_or_sql(e, &problems, opts.strict))?;
            rows += b.num_rows() as u64;
            sink.write(&b).map_err(QueryError::Output)?;
        }
        sink.finish().map_err(QueryError::Output)?;
        Ok::<_, QueryError>((schema, rows))
    })?;
    let problems = problems.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(Outcome {
        schema,
        rows,
        runs,
        problems,
    })
}

/// A scan's failure: under `strict`, the run it could not read (the scan recorded it first);
/// otherwise an error of the query itself.
fn strict_or_sql(e: DataFusionError, problems: &Problems, strict: bool) -> QueryError {
    let first = problems
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|p| !p.note)
        .cloned();
    match first {
        Some(p) if strict => QueryError::Strict {
            run: p.run,
            message: p.message,
        },
        _ => QueryError::Sql(e),
    }
}

/// The runs `args` name (see [`runs::discover`]).
pub fn discover(args: &[PathBuf]) -> Result<Vec<RunRef>, runs::RunsError> {
    runs::discover(args)
}

#[cfg(test)]
mod floors {
    /// The floors of this crate's modules, from the bottom up (what the crate root defines,
    /// `Problem` and `Problems`, is below them all): the object-storage client and the output
    /// formats, then the `events` table over the ledgers.
    const FLOORS: &[&[&str]] = &[&["output", "remote"], &["events"]];

    #[test]
    fn layers_point_one_way() {
        aet_checks::layers::assert_floors(env!("CARGO_MANIFEST_DIR"), FLOORS);
    }
}
