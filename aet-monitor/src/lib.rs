//! The monitor: the eBPF programs loaded once, and the event path that turns their records into
//! ledger rows, stage by stage:
//!
//! - [`slots`]: the [`slots::Monitor`], runs' slots in the kernel's maps, their start, drain and finish;
//! - [`source`] and [`consumer`]: the ring buffer read on a thread of its own, each record routed
//!   to its run's ledger, the kernel told what each run consumed;
//! - [`decode`] and [`rows`]: a record's bytes checked and split, then made a ledger row
//!   ([`RowMaker`]), with paths from [`paths`] and notes of work handed outside the run;
//! - [`overload`]: what a run that outpaces the consumer gets (freezes, or counted drops);
//! - [`replay`]: the consumer's benchmark, fed from a dump of real records;
//! - [`daemon`]: the resident monitor (`aet daemon`) that serves every run of a host from one
//!   [`slots::Monitor`], its protocol and the errors it shares with its clients.
//!
//! The consumer never blocks the traced processes: the programs write without waking it
//! (`BPF_RB_NO_WAKEUP`), and it polls the ring buffer, busy while there is data and sleeping
//! [`IDLE_POLL`] when there is none. It must never drop a record it has read: a record that does
//! not decode is counted as lost.

pub mod build_id;
pub mod consumer;
pub mod daemon;
pub mod decode;
pub mod loader;
pub mod names;
mod outside;
pub mod overload;
pub mod paths;
pub mod programs;
pub mod replay;
pub mod rows;
pub mod slots;
mod sockaddr;
pub mod source;

pub use rows::{RowMaker, RowStats};

use std::{path::PathBuf, time::Duration};

use crate::loader::{Counters, LoadError};
use aet_ledger::{metadata::Reasons, writer::WriteError};

/// Longest time rows wait in memory before they are written to the ledger.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(250);

/// How long the consumer sleeps when the ring buffer is empty.
pub const IDLE_POLL: Duration = Duration::from_millis(2);

/// Fault injection for tests: the consumer waits this many milliseconds before it starts reading,
/// so that a small ring buffer overflows for real and the loss accounting can be checked end to
/// end. Never set it for a real run.
pub const STALL_ENV: &str = "AET_DEBUG_CONSUMER_STALL_MS";

/// Fault injection for tests: the consumer sleeps this many microseconds after every 256 records
/// it reads, as a consumer behind a slow disk would, so that a run outpaces it for real. Never set
/// it for a real run.
pub const SLOW_ENV: &str = "AET_DEBUG_CONSUMER_SLOW_US";

/// For the consumer's benchmark: every record the consumer reads is also appended to this file
/// (a native-endian u32 length, then the record), for `aet __replay` to feed back through the
/// consumer. Never set it for a real run.
pub const DUMP_ENV: &str = "AET_DEBUG_RECORD_DUMP";

/// Errors of the monitor.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    /// The programs could not be loaded or attached.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The ledger could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The consumer thread could not be started.
    #[error("cannot start the event consumer: {0}")]
    Thread(#[source] std::io::Error),
    /// The consumer has stopped: no run can be started.
    #[error("the event consumer has stopped")]
    ConsumerStopped,
    /// No run in this slot.
    #[error("no run in slot {0}")]
    NoRun(u32),
    /// A phase that cannot begin.
    #[error("{0}")]
    Phase(String),
}

/// The final accounting of a monitored run.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct MonitorReport {
    /// The ledger file.
    pub ledger: PathBuf,
    /// Rows written.
    pub rows: u64,
    /// Events lost (kernel side plus undecodable records).
    pub lost: u64,
    /// Kernel counters.
    pub counters: Counters,
    /// Records that could not be decoded.
    pub decode_errors: u64,
    /// What the row maker noticed.
    pub stats: RowStats,
    /// Why the record is incomplete (empty when complete).
    pub incomplete: Reasons,
    /// How the run met overload.
    #[serde(default)]
    pub overload: Option<aet_ledger::metadata::OverloadRecord>,
}

impl MonitorReport {
    /// Is the record complete?
    pub fn complete(&self) -> bool {
        self.incomplete.is_empty()
    }
}

#[cfg(test)]
mod floors {
    /// The floors of this crate's modules, from the bottom up (what the crate root defines is
    /// below them all).
    const FLOORS: &[&[&str]] = &[
        &[
            "build_id", "decode", "loader", "names", "outside", "paths", "programs", "sockaddr",
            "source",
        ],
        &["overload", "rows"],
        &["consumer"],
        &["replay"],
        &["slots"],
        &["daemon"],
    ];

    #[test]
    fn layers_point_one_way() {
        aet_checks::layers::assert_floors(env!("CARGO_MANIFEST_DIR"), FLOORS);
    }

    /// The floors of the eBPF programs' crate (`aet-ebpf`, which this crate's build script
    /// builds; it is compiled for the BPF target only, so its check runs here): the maps and
    /// the configuration, the kernel reads, the task, the record, the path walk, the probes.
    /// Inside `probes`, the dispatcher (`syscall`) calls every family, so what it hands them
    /// (`probes/args.rs`) sits below them: a circle of files fails the test.
    const EBPF_FLOORS: &[&[&str]] = &[
        &["loops", "maps"],
        &["kernel"],
        &["task"],
        &["record"],
        &["walk"],
        &["probes"],
    ];

    #[test]
    fn the_kernel_programs_layers_point_one_way() {
        aet_checks::layers::assert_floors(
            concat!(env!("CARGO_MANIFEST_DIR"), "/../aet-ebpf"),
            EBPF_FLOORS,
        );
    }
}
