//! The life of a monitored run, `aet run` and `aet monitor`, in the order a run goes:
//!
//! - [`command`]: `aet run`, from the run's cgroup to the finished ledger;
//! - [`monitor`]: `aet monitor`, the same monitor on work something else started;
//! - [`launch`]: how the command starts (sandbox, agent identity, or as it is);
//! - [`fds`]: the fds the command inherits, and the hygiene that closes the others;
//! - [`session`]: where the monitor comes from (the daemon, or programs loaded for this run);
//! - [`progress`]: the live status line while the command runs;
//! - [`control`]: the run's control socket, through which `aet phase` marks its phases and
//!   `aet watch` names the watched files' view;
//! - [`fingerprints`]: the policy's watched files, before and after the agent's phase;
//! - [`sign`]: the run directory's signed manifest.
//!
//! Here: what both commands share (their errors, the run directory, the end-of-run lines).

pub mod command;
pub mod control;
mod fds;
pub mod fingerprints;
pub mod launch;
pub mod monitor;
pub mod progress;
pub mod session;
pub mod sign;
mod view;

pub use command::{RunOptions, RunOutcome, run};
pub use monitor::{MonitorOptions, ScopeKind, Target, monitor};

use std::{
    io,
    os::unix::process::ExitStatusExt as _,
    path::{Path, PathBuf},
};

use aet_kernel::cgroup::CgroupError;

use aet_monitor::{MonitorError, MonitorReport};
use session::SessionError;

/// Errors of `run` and `monitor`.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The run can no longer be recorded (its ledger cannot be written: disk full, file made
    /// immutable; or its daemon is stopped or silent): the run was stopped.
    #[error("the run can no longer be recorded: {0}")]
    Unrecorded(String),
    /// The output directory could not be prepared.
    #[error("cannot use output directory {path}: {source}")]
    OutDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The ledger already exists.
    #[error("{0} already exists; aet never overwrites a ledger (choose another --out)")]
    LedgerExists(PathBuf),
    /// cgroup set-up or teardown failed.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// The monitor failed.
    #[error(transparent)]
    Monitor(#[from] MonitorError),
    /// The monitor (standalone or the daemon) failed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The daemon went away while the run was going on.
    #[error(
        "the aet daemon went away during the run: the run was killed; its ledger {0} is \
         unfinished (readable, and incomplete)"
    )]
    DaemonGone(PathBuf),
    /// Waiting for the command failed.
    #[error("waiting for the command failed: {0}")]
    Wait(#[source] io::Error),
    /// Signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] io::Error),
    /// The monitor target does not exist.
    #[error("monitor target {0} does not exist")]
    NoTarget(String),
    /// The cgroup guard could not be started.
    #[error("cannot start the cgroup guard: {0}")]
    Guard(#[source] io::Error),
    /// The command is empty.
    #[error("no command given")]
    NoCommand,
    /// The target's processes could not be tracked.
    #[error("cannot track the target's processes: {0}")]
    Track(#[source] io::Error),
    /// The policy's watched files cannot be fingerprinted (a limit, an unreadable view): the
    /// command was not run.
    #[error("the watched files cannot be fingerprinted: {0}; the command was not run")]
    Watch(String),
}

/// The variable that gives the command its run's cgroup, relative to the cgroup v2 root (the
/// form `docker run --cgroup-parent` and `podman run --cgroup-parent` take).
pub const CGROUP_ENV: &str = "AET_CGROUP";

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandEnd {
    /// It ran: its shell-style status (128+N for signal N; 127 not found; 126 not executable).
    Exited(i32),
    /// aet's stage found the agent's environment not as specified: the command did not run.
    Refused,
}

/// The run directory made, and its ledger's path, absolute: a daemon (whose working directory
/// is not the client's) writes where the client said.
fn prepare_out(out: &Path) -> Result<PathBuf, RunError> {
    std::fs::create_dir_all(out).map_err(|source| RunError::OutDir {
        path: out.to_owned(),
        source,
    })?;
    let out = std::path::absolute(out).map_err(|source| RunError::OutDir {
        path: out.to_owned(),
        source,
    })?;
    let ledger = out.join(aet_ledger::run_dir::LEDGER);
    if ledger.symlink_metadata().is_ok() {
        return Err(RunError::LedgerExists(ledger));
    }
    Ok(ledger)
}

fn note(quiet: bool, msg: impl std::fmt::Display) {
    if !quiet {
        eprintln!("aet: {msg}");
    }
}

/// Converts a wait status to a shell-style exit status.
pub fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 255,
    }
}

/// Fault injection for tests: `AET_DEBUG_FAIL_AT=POINT` makes aet fail at that point of a run
/// (`signals`, `cgroup`, `wait`, `teardown`, `track`), so that each early error path is shown to
/// finish the ledger. Never set it for a real run.
pub const FAIL_AT_ENV: &str = "AET_DEBUG_FAIL_AT";

fn fault(point: &str) -> io::Result<()> {
    match std::env::var(FAIL_AT_ENV) {
        Ok(p) if p == point => Err(io::Error::other(format!(
            "fault injected at {point} ({FAIL_AT_ENV})"
        ))),
        _ => Ok(()),
    }
}

/// Prints the end-of-run line; an incomplete record is always printed, loudly.
pub fn report_end(report: &MonitorReport, quiet: bool) {
    if let Some(ov) = report
        .overload
        .as_ref()
        .filter(|o| o.freezes > 0 || o.note.is_some())
    {
        note(quiet, format_args!("{}", ov.text()));
    }
    if report.complete() {
        note(
            quiet,
            format_args!(
                "ledger {}: {} events, 0 lost, record complete",
                report.ledger.display(),
                report.rows
            ),
        );
    } else {
        eprintln!(
            "aet: INCOMPLETE RECORD in {}: {} events recorded, {} lost",
            report.ledger.display(),
            report.rows,
            report.lost
        );
        for r in report.incomplete.iter() {
            eprintln!("aet:   - {r}");
        }
        eprintln!("aet: this ledger cannot prove what the run touched.");
    }
}
