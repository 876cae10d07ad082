//! `aet daemon` and `aet daemon status`.
use std::path::PathBuf;

use super::Exit;
use crate::daemon;
use aet_monitor::daemon::{
    self as resident, DaemonError, DaemonOptions, protocol::Response, serve::serve,
};

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The socket to serve (default: $AET_SOCKET, else /run/aet/aet.sock); root only, mode 0600.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// The ring buffer every run shares, in MiB (a power of two).
    #[arg(long = "ringbuf-mb", value_parser = super::ringbuf_mb, default_value = "256", value_name = "MIB")]
    pub ringbuf_bytes: u32,
    /// Most runs served at once; each may fill the ring buffer's size divided by this, so one busy
    /// run never makes another lose events.
    #[arg(long, default_value_t = resident::DEFAULT_MAX_RUNS, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub max_runs: u32,
    /// Leave after this many seconds with no run and no connection (default: stay). A daemon
    /// a run started leaves after 300 s ($AET_DAEMON_IDLE_EXIT).
    #[arg(long, value_name = "SECS", value_parser = idle_secs)]
    pub idle_exit: Option<f64>,
    /// Started by a run that found no daemon: moves into a cgroup of its own.
    #[arg(long, hide = true)]
    pub auto: bool,
    /// Only print what is wrong.
    #[arg(long, short)]
    pub quiet: bool,
}

fn idle_secs(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or_else(|| format!("{s}: not a positive number of seconds"))
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List the runs a running daemon serves (exit 1 when no daemon answers).
    Status {
        /// The daemon's socket (default: $AET_SOCKET, else /run/aet/aet.sock).
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop the daemon: the runs it serves end now, their ledgers finished and marked
    /// incomplete (exit 1 when no daemon answers). A socket-activated daemon starts again on the
    /// next connection: `systemctl stop aet.socket aet.service` ends both.
    Stop {
        /// The daemon's socket (default: $AET_SOCKET, else /run/aet/aet.sock).
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
    },
}

pub fn run(a: Args) -> anyhow::Result<u8> {
    match a.command {
        Some(Command::Stop { socket }) => {
            let socket = socket.unwrap_or_else(resident::default_socket);
            match daemon::start::stop(&socket, std::time::Duration::from_secs(60))? {
                Some(pid) => {
                    eprintln!("aet: daemon {pid} at {} stopped", socket.display());
                    Ok(Exit::Success.code())
                }
                None => {
                    eprintln!("aet: no aet daemon answers at {}", socket.display());
                    Ok(Exit::Negative.code())
                }
            }
        }
        Some(Command::Status { socket, json }) => {
            let socket = socket.unwrap_or_else(resident::default_socket);
            match daemon::status(&socket)? {
                Some(Response::Status {
                    pid,
                    started_ns,
                    ringbuf_bytes,
                    max_runs,
                    runs,
                }) => {
                    if json {
                        let v = serde_json::json!({
                            "socket": socket, "pid": pid, "started_ns": started_ns,
                            "ringbuf_bytes": ringbuf_bytes, "max_runs": max_runs, "runs": runs,
                        });
                        super::print_out(&(serde_json::to_string_pretty(&v)? + "\n"))?;
                    } else {
                        let mut o = format!(
                            "aet daemon {pid} at {}: {} of {max_runs} runs, ring buffer {} MiB\n",
                            socket.display(),
                            runs.len(),
                            ringbuf_bytes >> 20
                        );
                        for r in &runs {
                            o += &format!(
                                "  slot {:>2}  {:>8} events  {:>3} lost  {}  -> {}\n",
                                r.slot,
                                r.progress.events,
                                r.progress.lost,
                                r.scope,
                                r.ledger.display()
                            );
                        }
                        super::print_out(&o)?;
                    }
                    Ok(Exit::Success.code())
                }
                Some(other) => anyhow::bail!("unexpected answer from the daemon: {other:?}"),
                None => {
                    eprintln!("aet: no aet daemon answers at {}", socket.display());
                    Ok(Exit::Negative.code())
                }
            }
        }
        None => {
            if !nix::unistd::geteuid().is_root() {
                anyhow::bail!(
                    "aet daemon needs root (it loads eBPF programs and serves root only)"
                );
            }
            match serve(DaemonOptions {
                socket: a.socket.unwrap_or_else(resident::default_socket),
                ringbuf_bytes: a.ringbuf_bytes,
                max_runs: a.max_runs,
                quiet: a.quiet,
                idle_exit: a.idle_exit.map(std::time::Duration::from_secs_f64),
                auto: a.auto,
            }) {
                Ok(()) => Ok(Exit::Success.code()),
                // Not a failure of this daemon: one already serves (a run started it first).
                Err(e @ DaemonError::Running(_)) => {
                    eprintln!("aet: {e}");
                    Ok(Exit::Negative.code())
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}
