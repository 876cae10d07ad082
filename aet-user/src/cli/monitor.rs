//! `aet monitor`.
use super::Exit;
use std::path::PathBuf;

use anyhow::Context as _;

use crate::run::{self, ScopeKind, Target};

/// `--scope`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScopeArg {
    /// The target's cgroup v2 (for --pid: the cgroup the process is in).
    Cgroup,
    /// The target's real uid (for --pid: the process's uid).
    Uid,
    /// The target process and its descendants, tracked by fork.
    Tree,
}

impl From<ScopeArg> for ScopeKind {
    fn from(a: ScopeArg) -> Self {
        match a {
            ScopeArg::Cgroup => Self::Cgroup,
            ScopeArg::Uid => Self::Uid,
            ScopeArg::Tree => Self::Tree,
        }
    }
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["cgroup", "uid", "pid", "container"])))]
pub struct Args {
    /// Monitor the processes of a cgroup v2 (absolute, or relative to the cgroup2 mount).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Monitor the processes of a real uid.
    #[arg(long, value_name = "UID")]
    pub uid: Option<u32>,
    /// Monitor a process and every process it starts.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Monitor a running Docker or Podman container (by id or name): its cgroup. The record says
    /// that its processes were already running.
    #[arg(long, value_name = "ID|NAME")]
    pub container: Option<String>,
    /// How the kernel side selects events (default: cgroup for --cgroup, uid for --uid, tree for
    /// --pid). With --pid, `cgroup` and `uid` mean the process's cgroup or uid.
    #[arg(long, value_enum)]
    pub scope: Option<ScopeArg>,
    /// Run directory: the ledger is written to DIR/ledger.arrow.
    #[arg(long, short, value_name = "DIR")]
    pub out: PathBuf,
    /// Ring buffer size in MiB (a power of two).
    #[arg(long = "ringbuf-mb", value_parser = super::ringbuf_mb, default_value = "64", value_name = "MIB")]
    pub ringbuf_bytes: u32,
    /// Only print aet's messages when something is wrong.
    #[arg(long, short)]
    pub quiet: bool,
    #[command(flatten)]
    pub monitor: super::MonitorArgs,
    /// At the end, send the finished run directory to S3-compatible object storage, as `aet
    /// ship DIR URL` does (exit 124 when it could not be; the local copy stays).
    #[arg(long, value_name = "URL")]
    pub ship: Option<String>,
}

pub fn run(a: Args) -> anyhow::Result<u8> {
    if let Some(u) = &a.ship {
        super::ship::check_url(u)?;
    }
    let out = a.out.clone();
    let target = match (a.cgroup, a.uid, a.pid, a.container) {
        (Some(c), _, _, _) => Target::Cgroup(c),
        (_, Some(u), _, _) => Target::Uid(u),
        (_, _, Some(p), _) => Target::Pid(p),
        (_, _, _, Some(c)) => Target::Container(c),
        _ => unreachable!("clap requires one target"),
    };
    let report = super::runtime()?
        .block_on(run::monitor(run::MonitorOptions {
            target,
            scope: a.scope.map(Into::into),
            out: a.out,
            ringbuf_bytes: a.ringbuf_bytes,
            on_overload: a.monitor.on_overload,
            mode: a.monitor.mode()?,
            quiet: a.quiet,
        }))
        .context("aet monitor failed")?;
    if let Some(u) = &a.ship
        && let Err(e) = super::ship::ship(&out, u, a.quiet)
    {
        eprintln!("aet: error: {e:#}");
        return Ok(Exit::ShipFailed.code());
    }
    Ok(if report.complete() {
        Exit::Success
    } else {
        Exit::Negative
    }
    .code())
}
