//! `aet daemon` and `aet daemon status`.
use std::path::PathBuf;

use super::Exit;
use crate::daemon::{self, DaemonOptions, protocol::Response};

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
    #[arg(long, default_value_t = daemon::DEFAULT_MAX_RUNS, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub max_runs: u32,
    /// Only print what is wrong.
    #[arg(long, short)]
    pub quiet: bool,
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
}

pub fn run(a: Args) -> anyhow::Result<u8> {
    match a.command {
        Some(Command::Status { socket, json }) => {
            let socket = socket.unwrap_or_else(daemon::default_socket);
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
            daemon::serve(DaemonOptions {
                socket: a.socket.unwrap_or_else(daemon::default_socket),
                ringbuf_bytes: a.ringbuf_bytes,
                max_runs: a.max_runs,
                quiet: a.quiet,
            })?;
            Ok(Exit::Success.code())
        }
    }
}
