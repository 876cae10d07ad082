//! `aet ledger summary` and `aet ledger recover`.
use std::{
    collections::HashMap,
    fs::OpenOptions,
    io::BufWriter,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

use crate::ledger::{
    ipc::IpcFileWriter,
    reader::{Form, Ledger},
    schema::meta,
    summary,
};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Summarise a ledger: processes, execs, files read and written, failed opens, lost events.
    Summary {
        /// A ledger file, or a run directory holding ledger.arrow.
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
    /// Rebuild a finished ledger from one whose monitor was killed before finishing it.
    Recover {
        /// The unfinished ledger.
        ledger: PathBuf,
        /// Where to write the recovered ledger (default: <name>.recovered.arrow beside it).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
}

/// A ledger path from a file or run-directory argument.
pub fn ledger_path(p: &Path) -> PathBuf {
    if p.is_dir() {
        p.join(crate::ledger::LEDGER_FILE)
    } else {
        p.to_owned()
    }
}

pub fn run(c: Command) -> anyhow::Result<u8> {
    match c {
        Command::Summary {
            ledger,
            json,
            files,
            check,
        } => {
            let path = ledger_path(&ledger);
            let mut l = Ledger::open(&path)?;
            if l.form() == Form::Unfinished {
                eprintln!(
                    "aet: warning: {} is unfinished (its monitor did not finish it); reading \
                     it up to its last complete batch",
                    path.display()
                );
            }
            let s = summary::summarize(&mut l)?;
            if json {
                super::print_out(&(serde_json::to_string_pretty(&s)? + "\n"))?;
            } else {
                super::print_out(&summary::render_text(&s, files))?;
            }
            Ok(if check && !s.complete { 1 } else { 0 })
        }
        Command::Recover { ledger, out } => {
            let path = ledger_path(&ledger);
            let mut l = Ledger::open(&path)?;
            if l.form() == Form::Finished {
                bail!(
                    "{} is a finished ledger; there is nothing to recover",
                    path.display()
                );
            }
            let out = out.unwrap_or_else(|| path.with_extension("recovered.arrow"));
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&out)
                .with_context(|| format!("cannot create {}", out.display()))?;
            let mut head: HashMap<String, String> = l.metadata();
            head.insert(meta::RECOVERED.into(), "true".into());
            let schema = l.schema().as_ref().clone().with_metadata(head.clone());
            let mut w = IpcFileWriter::try_new(BufWriter::new(file), &schema)?;
            let mut rows = 0u64;
            while let Some(b) = l.next_batch()? {
                rows += b.num_rows() as u64;
                let b =
                    arrow_array::RecordBatch::try_new(schema.clone().into(), b.columns().to_vec())?;
                w.write(&b)?;
            }
            let batches = w.batches();
            let mut reasons = vec![format!(
                "recovered from the unfinished ledger {}: events after its last complete batch \
                 and the loss counters are unknown",
                path.display()
            )];
            if let Some(e) = &l.damaged_tail {
                reasons.push(format!("its last batch was damaged and dropped: {e}"));
            }
            head.insert(meta::FINISHED.into(), "true".into());
            head.insert(meta::COMPLETE.into(), "false".into());
            head.insert(meta::EVENTS_RECORDED.into(), rows.to_string());
            head.insert(
                meta::INCOMPLETE_REASONS.into(),
                serde_json::to_string(&reasons)?,
            );
            w.finish(&schema.with_metadata(head))?;
            eprintln!(
                "aet: recovered {rows} events in {batches} batches into {} (marked incomplete)",
                out.display()
            );
            Ok(0)
        }
    }
}
