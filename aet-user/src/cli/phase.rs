//! `aet phase`.
use std::path::PathBuf;

use super::Exit;
use crate::run::control::{PhaseError, request_phase};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run directory of an `aet run` in progress (its --out).
    pub run: PathBuf,
    /// The phase to begin: 1 to 32 of a-z, 0-9, '_' and '-' (`grading`, `tests`, ...). Each
    /// phase is begun once; the run starts in `agent`.
    pub name: String,
    /// A process that may stay alive into the phase without a finding (the harness's own: a
    /// container's init, a keeper); repeat for more.
    #[arg(long, value_name = "PID")]
    pub keep: Vec<u32>,
}

pub fn run(a: Args) -> anyhow::Result<u8> {
    match request_phase(&a.run, &a.name, &a.keep) {
        Ok(record) => {
            eprintln!(
                "aet: {}: phase {} began (rows the kernel stamps from now on are its own)",
                a.run.display(),
                record.name
            );
            Ok(Exit::Success.code())
        }
        Err(e @ (PhaseError::NotRunning(_) | PhaseError::Refused(_))) => {
            eprintln!("aet: error: {e}");
            Ok(Exit::Usage.code())
        }
        Err(e) => Err(e.into()),
    }
}
