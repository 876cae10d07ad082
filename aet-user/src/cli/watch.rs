//! `aet watch`.
use std::path::PathBuf;

use super::Exit;
use crate::run::control::{PhaseError, request_watch};

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["root", "end"])))]
pub struct Args {
    /// The run directory of an `aet run --defer-watch --policy P` in progress (its --out).
    pub run: PathBuf,
    /// A process of the run whose view the watched files are seen in (a container's init,
    /// started with --cgroup-parent="$AET_CGROUP"): they are fingerprinted now, before the
    /// agent's first instruction there.
    #[arg(long, value_name = "PID")]
    pub root: Option<u32>,
    /// Where relative watched globs are anchored in that view (default: the process's working
    /// directory).
    #[arg(long, value_name = "DIR", requires = "root")]
    pub repo: Option<PathBuf>,
    /// The agent's phase is over: fingerprint the watched files again now (what `aet phase`
    /// does when a harness marks a grading phase; do this before removing the container).
    #[arg(long)]
    pub end: bool,
}

pub fn run(a: Args) -> anyhow::Result<u8> {
    match request_watch(&a.run, a.root, a.repo.map(Into::into), a.end) {
        Ok(message) => {
            eprintln!("aet: {}: {message}", a.run.display());
            Ok(Exit::Success.code())
        }
        Err(e @ (PhaseError::NotRunning(_) | PhaseError::Refused(_))) => {
            eprintln!("aet: error: {e}");
            Ok(Exit::Usage.code())
        }
        Err(e) => Err(e.into()),
    }
}
