//! `aet ledger summary` and `aet ledger recover`.
use super::Exit;
use std::path::PathBuf;

use crate::ledger::{
    reader::{Form, Ledger},
    recover, summary,
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

pub fn run(c: Command) -> anyhow::Result<u8> {
    match c {
        Command::Summary {
            ledger,
            json,
            files,
            check,
        } => {
            let path = crate::ledger::ledger_path(&ledger);
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
            Ok(if check && !s.complete {
                Exit::Negative
            } else {
                Exit::Success
            }
            .code())
        }
        Command::Recover { ledger, out } => {
            let path = crate::ledger::ledger_path(&ledger);
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
