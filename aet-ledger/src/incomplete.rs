//! Why a record is incomplete: one enum ([`Incomplete`]) with a sentence for people per reason,
//! and the ordered set of them a ledger's footer keeps ([`Reasons`]). Readers decide by variant,
//! never by matching text.

use std::{collections::BTreeMap, fmt, path::PathBuf};

use serde::{Deserialize, Serialize};

use crate::ppath::PPath;

/// What was not verified.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Unverified {
    Sandbox,
    Identity,
}

/// Why a record is incomplete. Serialised as `{"code": ..., ...fields, "text": ...}`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum Incomplete {
    /// Events the kernel side could not deliver, or records userspace could not decode.
    EventsLost {
        lost: u64,
        by_reason: BTreeMap<String, u64>,
    },
    /// The run used io_uring: its requests' results and data are not recorded.
    IoUring { records: u64, submitted: u64 },
    /// The userspace consumer stopped before the run ended.
    ConsumerStopped,
    /// Processes of the run survived the kill at its end.
    KillFailed { error: String },
    /// The agent identity's teardown could not kill every process of its uid.
    ReapFailed { error: String },
    /// aet itself failed during the run; the record ends there.
    AetFailed { error: String },
    /// The ledger has no footer: its monitor stopped before finishing it.
    Unfinished,
    /// The last batch of an unfinished ledger is damaged.
    DamagedTail { error: String },
    /// The ledger's footer does not describe its hashed stream (its schema's columns renamed,
    /// retyped or reordered): the file was changed after aet wrote it. Its rows are read with
    /// the stream's own schema, its final metadata is not trusted.
    Doctored { error: String },
    /// The ledger was rebuilt from an unfinished one by `aet ledger recover`.
    Recovered { from: PPath },
    /// The ledger does not say that its record is complete.
    NotStatedComplete,
    /// Processes were already running when the monitor attached.
    AlreadyRunning { processes: u64 },
    /// The monitored work (a container, a cgroup, a process) ended before or while the monitor
    /// attached: what it did is not in the record.
    TargetEnded { target: String },
    /// The sandbox or the agent identity was not verified.
    NotVerified { what: Unverified },
    /// The run asked a container runtime's daemon to run processes outside the run (no
    /// `--cgroup-parent` at the run's cgroup): they are not in the record.
    ContainerOutside { runtime: String, pid: u32 },
    /// The run handed work to a service manager or scheduler (`systemd-run`, `systemctl start`,
    /// `at`, `crontab`, ...) that runs it outside the run.
    HandedOutside { tool: String, pid: u32 },
    /// Tasks of the run were moved to a cgroup outside the run's (by themselves or anyone
    /// else): they left what the run's end freezes and kills.
    ScopeLeft { moves: u64 },
    /// Tasks of the run made successful bpf() calls: a privileged process can change the
    /// monitor's own maps (take itself out of the tracked set), so events may be missing.
    BpfCalls { calls: u64 },
    /// Socket messages that may name hosts (DNS queries and answers, connections' first
    /// messages) went beyond what the monitor captures (more than 8 messages in one
    /// `sendmmsg`/`recvmmsg`, more than 4 buffers in one): a host may be missing from the
    /// record.
    NamesUnrecorded { messages: u64 },
    /// Watched files changed with no row of the run that could have made the change (the
    /// audit, from `aet.watch`).
    ChangedOutside { files: u64, example: String },
    /// The policy watches files the run did not fingerprint before and after the agent's phase
    /// (the audit, from `aet.watch`).
    NotFingerprinted { why: String },
    /// The policy judges programs by their content, and the ledger is of a schema that records
    /// no program's hash (6 and older): every program the run ran is unjudged (the audit).
    ProgramsUnhashed { schema: String },
    /// A reason this build does not know (from a newer aet).
    #[serde(other)]
    Unknown,
}

impl Incomplete {
    /// The reason in a sentence.
    pub fn text(&self) -> String {
        match self {
            Self::EventsLost { lost, by_reason } => {
                let detail: Vec<String> = by_reason
                    .iter()
                    .filter(|(_, n)| **n > 0)
                    .map(|(r, n)| format!("{r}: {n}"))
                    .collect();
                format!("{lost} events lost ({})", detail.join(", "))
            }
            Self::IoUring { records, submitted } => format!(
                "the run used io_uring ({records} set-ups, entries or requests; {submitted} \
                 requests submitted): aet records the paths of its opens and stats but not their \
                 results or the data they moved"
            ),
            Self::ConsumerStopped => "the event consumer stopped early".into(),
            Self::KillFailed { error } => {
                format!("processes of the run survived the kill: {error}")
            }
            Self::ReapFailed { error } => {
                format!("the agent identity's teardown failed: {error}")
            }
            Self::AetFailed { error } => {
                format!("aet failed during the run and stopped it: {error}; the record ends there")
            }
            Self::Unfinished => "the ledger is unfinished (its monitor stopped before writing \
                                 the footer); rows up to its last complete batch were read, later \
                                 events are missing"
                .into(),
            Self::DamagedTail { error } => format!("the ledger's last batch is damaged: {error}"),
            Self::Doctored { error } => format!(
                "the ledger was changed after aet wrote it: {error}; its rows were read with the \
                 schema at its head, its footer's metadata is not trusted"
            ),
            Self::Recovered { from } => format!(
                "recovered from the unfinished ledger {}: events after its last complete batch \
                 and the loss counters are unknown",
                from.as_path().display()
            ),
            Self::NotStatedComplete => {
                "the ledger does not state that its record is complete".into()
            }
            Self::AlreadyRunning { processes } => format!(
                "{processes} process(es) were already running when the monitor attached: what \
                 they did before is not in the record"
            ),
            Self::TargetEnded { target } => format!(
                "{target} ended before or while the monitor attached: what it did is not in the \
                 record"
            ),
            Self::NotVerified { what } => format!(
                "the {} was not verified: the command did not run as specified",
                match what {
                    Unverified::Sandbox => "sandbox",
                    Unverified::Identity => "agent identity",
                }
            ),
            Self::ContainerOutside { runtime, pid } => format!(
                "the run asked {runtime} (pid {pid}) to run a container, whose processes its \
                 daemon starts outside the run: they are not in the record (start it with \
                 --cgroup-parent=\"$AET_CGROUP\" to record it)"
            ),
            Self::HandedOutside { tool, pid } => format!(
                "the run handed work to {tool} (pid {pid}), which runs it outside the run (now \
                 or later): it is not in the record"
            ),
            Self::ScopeLeft { moves } => format!(
                "{moves} time(s) a process of the run was moved to a cgroup outside the run's: \
                 it left what the run's end freezes and kills, and may have gone on working \
                 after the run"
            ),
            Self::BpfCalls { calls } => format!(
                "processes of the run made {calls} successful bpf() call(s): a privileged \
                 process can change the monitor's maps (take itself out of the record), so what \
                 it did afterwards may be missing"
            ),
            Self::NamesUnrecorded { messages } => format!(
                "{messages} socket message(s) that may name a host (a DNS query or answer, a \
                 connection's first bytes) were sent or received beyond what the monitor \
                 captures: a host the run used may be missing from the record"
            ),
            Self::ChangedOutside { files, example } => format!(
                "{files} watched file(s) changed with no row of the run that could have made \
                 the change (changed from outside the run, or through another name such as a \
                 hard link), e.g. {example}: the record does not explain them"
            ),
            Self::NotFingerprinted { why } => {
                format!("the policy watches files whose change the run cannot be judged on: {why}")
            }
            Self::ProgramsUnhashed { schema } => format!(
                "the policy judges programs by their content, and this ledger (schema {schema}) \
                 records no program's hash: no program the run ran could be judged"
            ),
            Self::Unknown => "a reason this version of aet does not know".into(),
        }
    }

    /// The reason's code, as stored (`code` of its JSON).
    pub const fn code(&self) -> &'static str {
        match self {
            Self::EventsLost { .. } => "events_lost",
            Self::IoUring { .. } => "io_uring",
            Self::ConsumerStopped => "consumer_stopped",
            Self::KillFailed { .. } => "kill_failed",
            Self::ReapFailed { .. } => "reap_failed",
            Self::AetFailed { .. } => "aet_failed",
            Self::Unfinished => "unfinished",
            Self::DamagedTail { .. } => "damaged_tail",
            Self::Doctored { .. } => "doctored",
            Self::Recovered { .. } => "recovered",
            Self::NotStatedComplete => "not_stated_complete",
            Self::AlreadyRunning { .. } => "already_running",
            Self::TargetEnded { .. } => "target_ended",
            Self::NotVerified { .. } => "not_verified",
            Self::ContainerOutside { .. } => "container_outside",
            Self::HandedOutside { .. } => "handed_outside",
            Self::ScopeLeft { .. } => "scope_left",
            Self::BpfCalls { .. } => "bpf_calls",
            Self::NamesUnrecorded { .. } => "names_unrecorded",
            Self::ChangedOutside { .. } => "changed_outside",
            Self::NotFingerprinted { .. } => "not_fingerprinted",
            Self::ProgramsUnhashed { .. } => "programs_unhashed",
            Self::Unknown => "unknown",
        }
    }

    /// One reason of each kind (both kinds of `not_verified`), with made-up values: for the docs.
    pub fn examples() -> Vec<Self> {
        vec![
            Self::EventsLost {
                lost: 1200,
                by_reason: [("ringbuf_full".to_owned(), 1200)].into(),
            },
            Self::IoUring {
                records: 3,
                submitted: 1,
            },
            Self::ConsumerStopped,
            Self::KillFailed {
                error:
                    "cgroup /sys/fs/cgroup/unified/aet/run-1 still has processes [42] after kill"
                        .into(),
            },
            Self::ReapFailed {
                error: "process 42 of uid 2000 survived SIGKILL".into(),
            },
            Self::AetFailed {
                error: "waiting for the command failed: ...".into(),
            },
            Self::Unfinished,
            Self::DamagedTail {
                error: "corrupt Arrow data".into(),
            },
            Self::Doctored {
                error: "column 2 is \"path\" at the head and \"comm\" in the footer".into(),
            },
            Self::Recovered {
                from: PathBuf::from("runs/x/ledger.arrow").into(),
            },
            Self::NotStatedComplete,
            Self::AlreadyRunning { processes: 2 },
            Self::TargetEnded {
                target: "container 4f2a9c (cgroup /sys/fs/cgroup/unified/docker/4f2a9c...)".into(),
            },
            Self::NotVerified {
                what: Unverified::Sandbox,
            },
            Self::NotVerified {
                what: Unverified::Identity,
            },
            Self::ContainerOutside {
                runtime: "docker".into(),
                pid: 4242,
            },
            Self::HandedOutside {
                tool: "systemd-run".into(),
                pid: 4243,
            },
            Self::ScopeLeft { moves: 1 },
            Self::BpfCalls { calls: 12 },
            Self::NamesUnrecorded { messages: 2 },
            Self::ChangedOutside {
                files: 1,
                example: "/testbed/tests/test_api.py".into(),
            },
            Self::NotFingerprinted {
                why: "the run took no fingerprints (run it with `aet run --policy` naming a \
                      policy with these watches)"
                    .into(),
            },
            Self::ProgramsUnhashed { schema: "6".into() },
        ]
    }

    /// Is this reason of the same kind as `other` (same variant)?
    pub fn same_kind(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

impl fmt::Display for Incomplete {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

/// How a reason is stored: its fields and its sentence.
#[derive(Serialize)]
struct ReasonOut<'a> {
    #[serde(flatten)]
    reason: &'a Incomplete,
    text: String,
}

#[derive(Deserialize)]
struct ReasonIn {
    #[serde(flatten)]
    reason: Incomplete,
}

/// The reasons a record is incomplete, in the order found; one per kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reasons(Vec<Incomplete>);

impl Reasons {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a reason, unless one of its kind is there already.
    pub fn push(&mut self, r: Incomplete) {
        if !self.has(&r) {
            self.0.push(r);
        }
    }

    /// Adds a reason in front (the most important one).
    pub fn push_front(&mut self, r: Incomplete) {
        if !self.has(&r) {
            self.0.insert(0, r);
        }
    }

    /// Is a reason of this kind there?
    pub fn has(&self, r: &Incomplete) -> bool {
        self.0.iter().any(|x| x.same_kind(r))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Incomplete> {
        self.0.iter()
    }

    /// The sentences.
    pub fn texts(&self) -> Vec<String> {
        self.0.iter().map(Incomplete::text).collect()
    }
}

impl Serialize for Reasons {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|reason| ReasonOut {
            reason,
            text: reason.text(),
        }))
    }
}

impl<'de> Deserialize<'de> for Reasons {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v: Vec<ReasonIn> = Vec::deserialize(d)?;
        Ok(Self(v.into_iter().map(|r| r.reason).collect()))
    }
}

impl FromIterator<Incomplete> for Reasons {
    fn from_iter<I: IntoIterator<Item = Incomplete>>(it: I) -> Self {
        let mut r = Self::new();
        for x in it {
            r.push(x);
        }
        r
    }
}
