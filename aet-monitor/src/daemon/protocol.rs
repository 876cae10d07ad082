//! What `aet run`/`aet monitor` and `aet daemon` say to each other over the daemon's unix socket:
//! one JSON object a line, a request and its response. A connection serves at most one run.

use std::{collections::HashMap, path::PathBuf};

use serde::{Deserialize, Serialize};

use aet_ledger::metadata::Reasons;

use crate::loader::Scope;
use crate::{MonitorReport, consumer::Progress, slots::RunStatus};

/// Version of the protocol; a client and a daemon of different versions refuse each other, and
/// so do two builds ([`crate::build_id::BUILD_ID`]) that speak the same version.
pub const VERSION: u32 = 4;

/// A request.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// First of every connection.
    Hello {
        version: u32,
        #[serde(default)]
        build: String,
    },
    /// Start recording a run into a new ledger. `owned`: the run's cgroup is the client's own
    /// (`aet run`), to be killed if the daemon dies.
    Start {
        scope: Scope,
        ledger: PathBuf,
        head: HashMap<String, String>,
        owned: bool,
        /// What the run does when the record cannot keep up.
        #[serde(default)]
        on_overload: crate::overload::OnOverload,
    },
    /// Add tasks to the run's tracked set.
    Track { tids: Vec<u32> },
    /// Remove a task that is gone from the tracked set.
    Untrack { tid: u32 },
    /// The run's tracked tasks.
    Tracked,
    /// Begin a phase of the run (`by`: the pid that asked).
    Phase {
        name: String,
        keep: Vec<u32>,
        by: Option<u32>,
    },
    /// A request the sandbox's proxy forwarded or refused: a row of the run's ledger.
    Proxy { event: aet_proxy::Event },
    /// What the run has recorded so far.
    Progress,
    /// Whether the run's ledger is still being written (asked every 250 ms: no map is read).
    Health,
    /// Stop recording and finish the ledger.
    Stop {
        extra: HashMap<String, String>,
        reasons: Reasons,
    },
    /// The runs the daemon serves.
    Status,
    /// Leave once the runs being served have ended (`aet daemon stop`).
    Leave,
}

impl Request {
    /// The request's name, for the daemon's log.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Hello { .. } => "hello",
            Self::Start { .. } => "start",
            Self::Track { .. } => "track",
            Self::Untrack { .. } => "untrack",
            Self::Tracked => "tracked",
            Self::Phase { .. } => "phase",
            Self::Proxy { .. } => "proxy",
            Self::Progress => "progress",
            Self::Health => "health",
            Self::Stop { .. } => "stop",
            Self::Status => "status",
            Self::Leave => "leave",
        }
    }
}

/// A response.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Response {
    Hello {
        version: u32,
        #[serde(default)]
        build: String,
        pid: u32,
        ringbuf_bytes: u32,
        max_runs: u32,
        /// How the daemon was started: `manual`, `auto` (by a run) or `socket` (activated).
        #[serde(default)]
        started: String,
    },
    /// The daemon leaves (`aet daemon stop`).
    Leaving,
    Started {
        slot: u32,
    },
    Done,
    Tracked {
        tids: Vec<u32>,
    },
    Progress {
        progress: Progress,
    },
    /// The phase began.
    Phase {
        record: aet_ledger::metadata::PhaseRecord,
    },
    /// Why the run's ledger can no longer be written, once it cannot.
    Health {
        write_error: Option<String>,
    },
    Stopped {
        report: MonitorReport,
    },
    Status {
        pid: u32,
        started_ns: i64,
        ringbuf_bytes: u32,
        max_runs: u32,
        runs: Vec<RunStatus>,
    },
    /// The daemon serves as many runs as it may; nothing was started.
    Full {
        max_runs: u32,
    },
    Error {
        message: String,
    },
}

/// Decodes one line of the protocol (a request or a response): the error says what is wrong.
pub fn decode<T: serde::de::DeserializeOwned>(line: &str) -> Result<T, serde_json::Error> {
    serde_json::from_str(line)
}
