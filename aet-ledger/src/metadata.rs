//! The ledger's metadata as typed records: what a run writes into the head and the footer of its
//! ledger, and what every reader (the summary, the audit) reads back. No reader indexes untyped
//! JSON; a value that does not parse is an error naming its key.
//!
//! The reasons a record is incomplete are an enum ([`Incomplete`]), each with a sentence for
//! people; readers decide by variant, never by matching text.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    path::PathBuf,
};

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use super::schema::meta;
use crate::{plan::StageReport, ppath::PPath};

pub use super::incomplete::{Incomplete, Reasons, Unverified};

/// A process, named: one killed at the end of a run, or one of the agent's uid found after it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcessRef {
    pub pid: u32,
    pub comm: String,
}

/// A protected file's identity when the run started.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProtectedFile {
    pub path: PPath,
    pub dev: u64,
    pub ino: u64,
}

/// How the run met overload (`aet.overload`): what it asked for, what it used, and how often
/// and how long it was frozen.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct OverloadRecord {
    /// `freeze` or `drop`, as asked (`--on-overload`).
    pub asked: String,
    /// What the run used: `drop` when its scope cannot be frozen.
    pub used: String,
    pub freezes: u64,
    pub frozen_ms: f64,
    pub longest_ms: f64,
    /// Why it used another than it asked, or what went wrong.
    pub note: Option<String>,
}

impl OverloadRecord {
    /// One line for the summary and the audit report: how the run was slowed, if it was.
    pub fn text(&self) -> String {
        let mut t = if self.used == "freeze" {
            if self.freezes == 0 {
                "freeze on overload: never frozen".to_owned()
            } else {
                format!(
                    "freeze on overload: frozen {} time{}, {:.0} ms in all (longest {:.0} ms)",
                    self.freezes,
                    if self.freezes == 1 { "" } else { "s" },
                    self.frozen_ms,
                    self.longest_ms
                )
            }
        } else {
            "drop on overload (lost events are counted)".to_owned()
        };
        if let Some(n) = &self.note {
            t.push_str(&format!("; {n}"));
        }
        t
    }
}

/// An fd the command was started with (`aet.inherited_fds`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct InheritedFd {
    pub fd: i32,
    pub dev: u64,
    pub ino: u64,
    /// `file`, `directory`, `pipe`, `socket`, `char`, `block`, `other`.
    pub kind: String,
    /// What the fd names in aet's view (`/proc/self/fd/N`), when it is a path.
    pub path: Option<PPath>,
}

/// What handing a directory over to the agent identity did.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HandOver {
    /// Entries given to the agent.
    pub changed: u64,
    /// Entries left alone, with why (hard-linked files, other file systems).
    pub skipped: Vec<String>,
}

/// The grader root as checked.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct GraderRoot {
    pub path: PathBuf,
    /// What aet changed to make it root's and 0700 (`fix_grader_root`), if anything.
    pub fixed: Option<String>,
}

/// `aet.sandbox`: what the run record keeps of the sandbox: the spec, the exact arguments, the
/// variable names (never values), and the stage's report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SandboxRecord {
    pub spec: PathBuf,
    pub bwrap_argv: Vec<String>,
    pub env: Vec<String>,
    pub env_removed: Vec<String>,
    /// The stage checked the view and found it as specified.
    pub verified: bool,
    pub report: Option<StageReport>,
    /// The hosts of the task repositories' upstreams (`[[repo]] upstream`): what a policy's
    /// The sandbox's network: its mode, the proxy's hosts, the repositories' upstream hosts.
    #[serde(default)]
    pub network: NetworkRecord,
}

/// What `aet.sandbox` keeps of the sandbox's network.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetworkRecord {
    /// `host`, `none` or `hosts`.
    pub mode: String,
    /// `network = { hosts = [...] }`: the hosts the proxy reaches.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// The hosts of the task repositories' upstreams (`[[repo]] upstream`): what a policy's
    /// `{ host = "@upstream" }` names.
    #[serde(default)]
    pub upstream_hosts: Vec<String>,
}

/// `aet.identity`: what the run record keeps of the agent identity (variable names, never
/// values).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct IdentityRecord {
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    pub workspace: PathBuf,
    pub env: Vec<String>,
    pub env_removed: Vec<String>,
    pub workspace_handover: HandOver,
    pub home_handover: HandOver,
    pub rw_binds_handover: Vec<(PathBuf, HandOver)>,
    pub grader_root: Option<GraderRoot>,
    /// The privileges the command ran with, as read back by the stage.
    pub privileges: Option<String>,
    /// The drop was read back and matched.
    pub verified: bool,
    pub killed_after_teardown: Vec<ProcessRef>,
    pub reap_error: Option<String>,
    pub leftover_files: Vec<PathBuf>,
    pub leftover_files_total: u64,
}

/// A metadata value that is not what its key says.
#[derive(Debug, thiserror::Error)]
#[error("metadata {key}: {message}")]
pub struct MetaError {
    pub key: &'static str,
    pub message: String,
}

/// A ledger's metadata, typed. Keys a ledger does not have are `None` (or empty).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LedgerMeta {
    pub schema_version: Option<String>,
    pub aet_version: Option<String>,
    pub command: Vec<String>,
    pub started_ns: Option<i64>,
    pub ended_ns: Option<i64>,
    pub kernel_release: Option<String>,
    pub hostname: Option<String>,
    pub scope: Option<String>,
    pub scope_target: Option<String>,
    pub host_mntns: Option<u32>,
    pub events_recorded: Option<u64>,
    pub events_lost: Option<u64>,
    pub events_lost_by_reason: BTreeMap<String, u64>,
    pub events_lost_per_cpu: Vec<u64>,
    pub kernel_counters: BTreeMap<String, u64>,
    /// `aet.complete` is `true`.
    pub complete: bool,
    pub incomplete: Reasons,
    /// `aet.finished` is `true`.
    pub finished: bool,
    pub exit_status: Option<i32>,
    pub killed: Vec<ProcessRef>,
    pub sandbox: Option<SandboxRecord>,
    pub identity: Option<IdentityRecord>,
    pub protected: BTreeMap<String, ProtectedFile>,
    pub inherited_fds: Vec<InheritedFd>,
    pub overload: Option<OverloadRecord>,
    pub barrier: Option<crate::barrier::BarrierReport>,
    /// `aet.recovered` is `true`.
    pub recovered: bool,
    /// `aet.phases`: empty in ledgers before schema 4, and in unfinished ones (their rows still
    /// name their phase).
    pub phases: Vec<PhaseRecord>,
    /// `aet.watch`: the watched files before and after the agent's phase.
    pub watch: Option<crate::watch::WatchRecord>,
    /// `aet.decoys`: the decoys planted in the agent's view, with their tokens.
    pub decoys: Option<crate::decoys::DecoyRecord>,
}

/// The first phase of every run.
pub const FIRST_PHASE: &str = "agent";

/// One phase of a run, as `aet.phases` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseRecord {
    pub name: String,
    /// Wall-clock start, ns since the Unix epoch (the run's start for `agent`).
    pub started_ns: i64,
    /// Processes the harness said may stay alive into this phase (its own: a container's
    /// init, a keeper); a process of an earlier phase that is not one of them and is still alive
    /// or acts in this phase is a finding.
    #[serde(default)]
    pub keep: Vec<u32>,
    /// The pid that asked for the phase (none for `agent`).
    #[serde(default)]
    pub by: Option<u32>,
}

/// Whether `name` may name a phase: 1 to 32 of `a-z`, `0-9`, `_` and `-`, starting with a
/// letter (it is a policy section's name and a column value people type in SQL).
pub fn valid_phase_name(name: &str) -> Result<(), String> {
    let ok = (1..=32).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a phase name: 1 to 32 of a-z, 0-9, '_' and '-', starting with a letter"
        ))
    }
}

fn text(m: &HashMap<String, String>, key: &str) -> Option<String> {
    m.get(key).cloned()
}

fn number<T: std::str::FromStr>(
    m: &HashMap<String, String>,
    key: &'static str,
) -> Result<Option<T>, MetaError>
where
    T::Err: fmt::Display,
{
    m.get(key)
        .map(|v| {
            v.parse::<T>().map_err(|e| MetaError {
                key,
                message: format!("{v:?}: {e}"),
            })
        })
        .transpose()
}

fn json<T: DeserializeOwned>(
    m: &HashMap<String, String>,
    key: &'static str,
) -> Result<Option<T>, MetaError> {
    m.get(key)
        .map(|v| {
            serde_json::from_str(v).map_err(|e| MetaError {
                key,
                message: e.to_string(),
            })
        })
        .transpose()
}

fn flag(m: &HashMap<String, String>, key: &str) -> bool {
    m.get(key).map(String::as_str) == Some("true")
}

impl LedgerMeta {
    /// Reads the typed metadata from a ledger's key-value metadata.
    pub fn parse(m: &HashMap<String, String>) -> Result<Self, MetaError> {
        Ok(Self {
            schema_version: text(m, meta::SCHEMA_VERSION),
            aet_version: text(m, meta::AET_VERSION),
            command: json(m, meta::COMMAND)?.unwrap_or_default(),
            started_ns: number(m, meta::STARTED_NS)?,
            ended_ns: number(m, meta::ENDED_NS)?,
            kernel_release: text(m, meta::KERNEL_RELEASE),
            hostname: text(m, meta::HOSTNAME),
            scope: text(m, meta::SCOPE),
            scope_target: text(m, meta::SCOPE_TARGET),
            host_mntns: number(m, meta::HOST_MNTNS)?,
            events_recorded: number(m, meta::EVENTS_RECORDED)?,
            events_lost: number(m, meta::EVENTS_LOST)?,
            events_lost_by_reason: json(m, meta::EVENTS_LOST_BY_REASON)?.unwrap_or_default(),
            events_lost_per_cpu: json(m, meta::EVENTS_LOST_PER_CPU)?.unwrap_or_default(),
            kernel_counters: json(m, meta::KERNEL_COUNTERS)?.unwrap_or_default(),
            complete: flag(m, meta::COMPLETE),
            incomplete: json(m, meta::INCOMPLETE_REASONS)?.unwrap_or_default(),
            finished: flag(m, meta::FINISHED),
            exit_status: number(m, meta::EXIT_STATUS)?,
            killed: json(m, meta::KILLED)?.unwrap_or_default(),
            sandbox: json(m, meta::SANDBOX)?,
            identity: json(m, meta::IDENTITY)?,
            protected: json(m, meta::PROTECTED)?.unwrap_or_default(),
            inherited_fds: json(m, meta::INHERITED_FDS)?.unwrap_or_default(),
            overload: json(m, meta::OVERLOAD)?,
            barrier: json(m, meta::BARRIER)?,
            recovered: flag(m, meta::RECOVERED),
            phases: json(m, meta::PHASES)?.unwrap_or_default(),
            watch: json(m, meta::WATCH)?,
            decoys: json(m, meta::DECOYS)?,
        })
    }
}

/// Key-value metadata being written, with typed setters.
#[derive(Clone, Debug, Default)]
pub struct MetaMap(pub HashMap<String, String>);

impl MetaMap {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a plain value (a number, a name).
    pub fn set(&mut self, key: &str, v: impl fmt::Display) -> &mut Self {
        self.0.insert(key.to_owned(), v.to_string());
        self
    }

    /// Sets a JSON value.
    pub fn set_json<T: Serialize + ?Sized>(&mut self, key: &str, v: &T) -> &mut Self {
        let text = serde_json::to_string(v).expect("metadata records serialise");
        self.0.insert(key.to_owned(), text);
        self
    }

    /// Adds everything of `other` (its values win).
    pub fn extend(&mut self, other: MetaMap) -> &mut Self {
        self.0.extend(other.0);
        self
    }

    pub fn into_inner(self) -> HashMap<String, String> {
        self.0
    }
}

/// The table of incompleteness reasons in `docs/ledger.md`.
pub fn incomplete_markdown() -> String {
    use std::fmt::Write as _;
    let mut o = String::from("| `code` | example `text` |\n| --- | --- |\n");
    for r in Incomplete::examples() {
        let _ = writeln!(o, "| `{}` | {} |", r.code(), r.text());
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip_with_their_text() {
        let mut r = Reasons::new();
        r.push(Incomplete::IoUring {
            records: 3,
            submitted: 1,
        });
        r.push_front(Incomplete::EventsLost {
            lost: 7,
            by_reason: [("ringbuf_full".to_owned(), 7)].into(),
        });
        r.push(Incomplete::IoUring {
            records: 9,
            submitted: 9,
        });
        r.push(Incomplete::NotVerified {
            what: Unverified::Sandbox,
        });
        let mut m = MetaMap::new();
        m.set_json(meta::INCOMPLETE_REASONS, &r);
        let text = &m.0[meta::INCOMPLETE_REASONS];
        assert!(text.contains(r#""code":"events_lost""#), "{text}");
        assert!(
            text.contains(r#""text":"7 events lost (ringbuf_full: 7)""#),
            "{text}"
        );
        let back = LedgerMeta::parse(&m.0).unwrap();
        assert_eq!(back.incomplete, r);
        assert_eq!(back.incomplete.iter().count(), 3, "one io_uring reason");
        // A reason from a newer aet is kept as unknown, not an error.
        let mut m = HashMap::new();
        m.insert(
            meta::INCOMPLETE_REASONS.to_owned(),
            r#"[{"code":"from_the_future","text":"x"}]"#.to_owned(),
        );
        let back = LedgerMeta::parse(&m).unwrap();
        assert_eq!(back.incomplete.iter().next(), Some(&Incomplete::Unknown));
    }

    #[test]
    fn codes_are_the_stored_tags_and_every_kind_has_an_example() {
        let examples = Incomplete::examples();
        let mut codes = std::collections::BTreeSet::new();
        for r in &examples {
            let v = serde_json::to_value(r).unwrap();
            assert_eq!(v["code"], r.code(), "{r:?}");
            codes.insert(r.code());
        }
        // Every variant but Unknown (which only reading makes) has an example.
        let all = [
            "events_lost",
            "io_uring",
            "consumer_stopped",
            "kill_failed",
            "reap_failed",
            "aet_failed",
            "unfinished",
            "damaged_tail",
            "doctored",
            "recovered",
            "not_stated_complete",
            "already_running",
            "target_ended",
            "not_verified",
            "container_outside",
            "handed_outside",
            "scope_left",
            "bpf_calls",
            "names_unrecorded",
            "changed_outside",
            "not_fingerprinted",
            "programs_unhashed",
        ];
        assert_eq!(codes, all.into_iter().collect());
    }

    #[test]
    fn a_bad_value_names_its_key() {
        let mut m = HashMap::new();
        m.insert(meta::SANDBOX.to_owned(), "{not json".to_owned());
        let e = LedgerMeta::parse(&m).unwrap_err();
        assert_eq!(e.key, meta::SANDBOX);
        let mut m = HashMap::new();
        m.insert(meta::EVENTS_LOST.to_owned(), "many".to_owned());
        assert_eq!(LedgerMeta::parse(&m).unwrap_err().key, meta::EVENTS_LOST);
    }
}
