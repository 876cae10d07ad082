//! `aet policy draft`.
use std::{io::Write as _, path::PathBuf};

use anyhow::Context as _;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Write an allow-list policy from what a run did (read, wrote, executed, connected to),
    /// directories collapsed where it touched many files under one, writes allowed by directory,
    /// aet's own set-up left out: a draft for a person to review.
    Draft {
        /// A run directory (or its ledger file).
        run: PathBuf,
        /// Write the policy to this file (which must not exist) instead of stdout.
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
}

pub fn run(c: Command) -> anyhow::Result<u8> {
    match c {
        Command::Draft { run, out } => {
            let ledger = aet_ledger::run_dir::ledger_of(&run);
            let d = aet_audit::draft::draft(&ledger)?;
            let text = aet_audit::draft::to_toml(&d, &ledger);
            match out {
                None => super::print_out(&text)?,
                Some(path) => {
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .with_context(|| format!("cannot create {}", path.display()))?;
                    f.write_all(text.as_bytes())
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    eprintln!(
                        "aet: policy drafted from {} into {}: {} read, {} write, {} exec, {} connect entries; review it before use",
                        ledger.display(),
                        path.display(),
                        d.read.len(),
                        d.write.len(),
                        d.exec.len(),
                        d.connect.len()
                    );
                }
            }
            Ok(0)
        }
    }
}
