//! `aet ledger summary` and `aet ledger recover`.
use super::Exit;
use std::path::PathBuf;

use aet_ledger::{
    reader::{Form, Ledger},
    recover, summary,
};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Summarise a ledger: processes, execs, files read and written, failed opens, lost events.
    Summary {
        /// A ledger file, or a run directory holding ledger.arrow, or a shipped run
        /// (s3://BUCKET/PREFIX/RUN, checked against its shipped.json).
        ledger: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// List the files read and written.
        #[arg(long)]
        files: bool,
        /// Exit 1 when the record is incomplete (lost events, unfinished ledger).
        #[arg(long)]
        check: bool,
    },
    /// Export runs as Parquet, partitioned Hive-style by run (DIR/run=NAME/part-00000.parquet,
    /// zstd, the ledger's metadata in each file), for Spark, Trino or DuckDB. A ledger that
    /// cannot be read is reported and skipped, a run whose audit.json cannot be read is
    /// exported without its verdict (exit 1 for either); an existing partition is never
    /// overwritten.
    Export {
        /// Run directories, ledger files, directories of runs, or globs of these ('runs/*',
        /// expanded by aet); a run is named by its directory. s3://BUCKET/PREFIX: the runs
        /// shipped there.
        #[arg(required = true)]
        runs: Vec<PathBuf>,
        /// The directory to write the partitions into; s3://BUCKET/PREFIX uploads them there
        /// (written locally first, each file uploaded whole).
        #[arg(long, value_name = "DIR")]
        parquet: PathBuf,
    },
    /// Rebuild a finished ledger from one whose monitor was killed before finishing it.
    Recover {
        /// The unfinished ledger.
        ledger: PathBuf,
        /// Where to write the recovered ledger (default: <name>.recovered.arrow beside it).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
}

pub fn run(c: Command) -> anyhow::Result<u8> {
    match c {
        Command::Export { runs, parquet } => export(&runs, &parquet),
        Command::Summary {
            ledger,
            json,
            files,
            check,
        } => {
            let remote = if super::remote::is_url(&ledger) {
                Some(super::remote::one_run(&ledger.to_string_lossy(), true)?)
            } else {
                None
            };
            let ledger = remote.as_ref().map_or(ledger, |r| r.dir.clone());
            let path = aet_ledger::run_dir::ledger_of(&ledger);
            let mut l = Ledger::open(&path)?;
            if l.form() == Form::Unfinished {
                eprintln!(
                    "aet: warning: {} is unfinished (its monitor did not finish it); reading \
                     it up to its last complete batch",
                    path.display()
                );
            }
            let mut s = summary::summarize(&mut l)?;
            if let Some(r) = &remote {
                // Named by the object read, not the temporary copy it was read from.
                s.ledger = format!("{}/{}", r.url, aet_ledger::run_dir::LEDGER);
            }
            if json {
                super::print_out(&(serde_json::to_string_pretty(&s)? + "\n"))?;
            } else {
                super::print_out(&summary::render_text(&s, files))?;
            }
            Ok(if check && !s.complete {
                Exit::Negative
            } else {
                Exit::Success
            }
            .code())
        }
        Command::Recover { ledger, out } => {
            let path = aet_ledger::run_dir::ledger_of(&ledger);
            let out = out.unwrap_or_else(|| recover::default_out(&path));
            let r = recover::recover(&path, &out)?;
            eprintln!(
                "aet: recovered {} events in {} batches into {} (marked incomplete)",
                r.rows,
                r.batches,
                r.out.display()
            );
            Ok(Exit::Success.code())
        }
    }
}

/// `aet ledger export`.
fn export(runs: &[PathBuf], dest: &std::path::Path) -> anyhow::Result<u8> {
    use aet_audit::runs::export;
    let local = super::remote::localize(runs)?;
    for p in &local.problems {
        eprintln!("aet: {p}");
    }
    // Names first: two runs of one name would land in one partition.
    let named: Vec<(String, PathBuf)> = aet_audit::runs::discover(&local.paths)?
        .into_iter()
        .map(|r| (r.name, r.ledger))
        .collect();
    // Into the bucket: no partition that is there already is written over; the partitions are
    // made locally, then uploaded.
    let remote = super::remote::is_url(dest).then(|| dest.to_string_lossy().into_owned());
    let staging = match &remote {
        Some(url) => {
            for (name, _) in &named {
                super::remote::refuse_existing(url, &format!("run={name}"))?;
            }
            Some(tempfile::Builder::new().prefix("aet-export-").tempdir()?)
        }
        None => None,
    };
    let dir = staging.as_ref().map_or(dest, |s| s.path());
    let (mut rows, mut bytes, mut ledger_bytes, mut done, mut skipped) =
        (0u64, 0u64, 0u64, 0, local.left_out);
    let mut out = String::new();
    // Runs are independent: one worker per CPU, results in the order given.
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<export::Exported, export::ExportError>>>> =
        named.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..workers.min(named.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((name, ledger)) = named.get(i) else {
                        break;
                    };
                    let r = export::export(ledger, name, dir);
                    *results[i].lock().expect("no panics hold it") = Some(r);
                }
            });
        }
    });
    for ((name, _), r) in named.iter().zip(results) {
        let r = r
            .into_inner()
            .expect("no panics hold it")
            .expect("every run was taken");
        match r {
            Ok(e) => {
                out += &format!(
                    "run={}: {} rows, {} bytes (ledger {} bytes){}\n",
                    name,
                    e.rows,
                    e.bytes,
                    e.ledger_bytes,
                    if e.unfinished {
                        ", unfinished ledger"
                    } else {
                        ""
                    }
                );
                if let Some(n) = &e.audit_note {
                    eprintln!("aet: {name}: {n}");
                }
                if let Some(p) = &e.audit_problem {
                    eprintln!("aet: {name}: exported without its verdict: {p}");
                    skipped += 1;
                }
                rows += e.rows;
                bytes += e.bytes;
                ledger_bytes += e.ledger_bytes;
                done += 1;
            }
            Err(e) => {
                eprintln!("aet: skipped {name}: {e}");
                skipped += 1;
            }
        }
    }
    if let Some(url) = &remote {
        super::remote::upload_tree(dir, url)?;
    }
    out += &format!(
        "exported {done} run(s), {rows} rows, to {}: {bytes} bytes of Parquet for {ledger_bytes} \
         bytes of ledgers{}\n",
        dest.display(),
        if skipped > 0 {
            format!("; {skipped} skipped")
        } else {
            String::new()
        }
    );
    super::print_out(&out)?;
    Ok(if skipped > 0 {
        Exit::Negative
    } else {
        Exit::Success
    }
    .code())
}
