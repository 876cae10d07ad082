//! What the audit finds: a finding (its class, outcome, access, path and process), and the
//! processes of the report's tree.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use aet_ledger::watch::{Fingerprint, diff};

use crate::{policy::provenance::Place, reached::Reached};

/// What a finding is.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The access succeeded.
    Hit,
    /// It was denied or failed.
    Attempted,
    /// A cheat path was only probed or listed.
    Probed,
    /// `--mode enforce`: the barrier denied it (EACCES).
    Blocked,
    /// `--mode shadow`: the barrier would have denied it.
    WouldBlock,
}

impl Outcome {
    pub const ALL: [Outcome; 5] = [
        Self::Hit,
        Self::Attempted,
        Self::Probed,
        Self::Blocked,
        Self::WouldBlock,
    ];

    /// The name in reports (the serde name).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::Attempted => "attempted",
            Self::Probed => "probed",
            Self::Blocked => "blocked",
            Self::WouldBlock => "would_block",
        }
    }
}

/// Where a finding belongs in the verdict.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    Cheat,
    Contaminant,
    OutOfScope,
    Warning,
    /// What the barrier blocked (or would have): no effect on the verdict.
    Barrier,
}

impl Class {
    pub const ALL: [Class; 5] = [
        Self::Cheat,
        Self::Contaminant,
        Self::OutOfScope,
        Self::Warning,
        Self::Barrier,
    ];

    /// Whether a finding of this class marks the process that made it (`flagged` in the
    /// report's process tree): what breaks the verdict's isolation or disqualifies (cheats,
    /// contaminants, out-of-scope accesses), not warnings (review notes, often many) nor what
    /// the barrier blocked. The one answer every finding's maker asks.
    pub const fn marks_process(self) -> bool {
        matches!(self, Self::Cheat | Self::Contaminant | Self::OutOfScope)
    }

    /// The name in reports (the serde name).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Cheat => "cheat",
            Self::Contaminant => "contaminant",
            Self::OutOfScope => "out_of_scope",
            Self::Warning => "warning",
            Self::Barrier => "barrier",
        }
    }
}

/// The class a rule's severity gives its hits.
impl From<crate::policy::Severity> for Class {
    fn from(s: crate::policy::Severity) -> Self {
        use crate::policy::Severity;
        match s {
            Severity::Cheat => Self::Cheat,
            Severity::Contaminant => Self::Contaminant,
            Severity::Warning => Self::Warning,
        }
    }
}

/// One finding: a rule, an outcome, an access, a process and a path; the first occurrence and
/// how many rows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Finding {
    pub class: Class,
    pub rule: String,
    pub outcome: Outcome,
    pub access: Cow<'static, str>,
    /// The kernel-resolved path (else the path as passed); lossy UTF-8.
    pub path: String,
    /// The exact bytes of `path` in hex, set only when they are not UTF-8.
    pub path_hex: Option<String>,
    /// The path as the process passed it, when different.
    pub raw_path: Option<String>,
    pub host_path: Option<String>,
    pub errno: Option<String>,
    pub count: u64,
    pub first_seq: u64,
    pub first_ts_ns: i64,
    /// The time of its last row (its first's in reports of an older aet).
    #[serde(default)]
    pub last_ts_ns: i64,
    pub pid: u32,
    pub uid: u32,
    pub comm: String,
    /// The program the process was running (its last exec before the access).
    pub exe: Option<String>,
    pub argv: Option<Vec<String>>,
    /// The process's ancestors up to the run's first process, nearest first.
    pub ancestry: Vec<Ancestor>,
    /// The transcript's tool call running at that time (when transcripts were given).
    pub tool_call: Option<super::transcript::ToolCallRef>,
    /// Whether a transcript mentions the path (when transcripts were given).
    pub mentioned_in_transcript: Option<bool>,
    /// How the process reached the file: `path` (named it), or through an fd that was
    /// `inherited` at start, `received` over a socket, `copied` from another process, handed
    /// over by `fanotify`, or of `unknown` origin (no recorded open, arrival or start explains
    /// it). For process findings, unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reached: Option<Reached>,
    /// For a finding about another process: its pid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_pid: Option<u32>,
    /// The phase of the run the access was in (`agent` unless the run was marked with `aet
    /// phase`).
    #[serde(default = "agent_phase")]
    pub phase: String,
    /// A watched file's change: what changed, and its fingerprints before and after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<Box<WatchDetail>>,
    /// A later phase loaded what an earlier one wrote: where it lies, and who wrote it how.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Box<ProvenanceDetail>>,
}

fn agent_phase() -> String {
    aet_ledger::metadata::FIRST_PHASE.to_owned()
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ancestor {
    pub pid: u32,
    pub comm: String,
}

/// A process of the run, for the report's tree.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    pub exe: Option<String>,
    pub argv: Option<Vec<String>>,
    pub first_ts_ns: i64,
    /// Part of aet's own set-up (bwrap, aet's stage) or a container runtime's: not audited.
    pub setup: bool,
    /// It entered the run from outside (a container runtime's process): its rows before its
    /// first exec are the runtime's set-up.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub runtime: bool,
    /// Has a finding (cheat, contaminant or out-of-scope).
    pub flagged: bool,
    #[serde(skip)]
    pub(super) seen_start: bool,
    /// aet's stage (until it runs the command), and the programs it runs before that (the git
    /// of its repository check): aet's set-up whatever they exec.
    #[serde(skip)]
    pub(super) stage: bool,
    #[serde(skip)]
    pub(super) stage_helper: bool,
}

/// What a change finding carries beyond a finding's fields.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WatchDetail {
    pub what: diff::What,
    pub detail: String,
    pub before: Option<Fingerprint>,
    pub after: Option<Fingerprint>,
}

/// One step of how the loaded content came to be, in `audit.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Step {
    /// `written`, `truncated`, `renamed`, `linked`, `symlinked`, `mounted`, `copied`,
    /// `compiled`.
    pub how: String,
    /// The name it produced.
    pub path: String,
    /// What it was renamed, linked, copied or compiled from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    pub pid: u32,
    pub comm: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    pub phase: String,
    pub seq: u64,
    pub ts_ns: i64,
    /// The process's ancestors, nearest first.
    #[serde(default)]
    pub ancestry: Vec<Ancestor>,
}

/// What a provenance finding carries beyond a finding's fields.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ProvenanceDetail {
    pub place: Place,
    /// The path its place was judged by: the loaded file's, or, when a later phase copied or
    /// moved it there, the name the earlier phase gave it.
    pub judged: String,
    /// The task repository it lies in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// How the content came to be, the first writer first (at most 8 steps).
    pub steps: Vec<Step>,
}

impl ProvenanceDetail {
    /// The first writer.
    pub fn writer(&self) -> Option<&Step> {
        self.steps.first()
    }

    /// In a line: where it lies and how it came to be (`loaded what the agent wrote (outside
    /// the task repository): written by bash[12] < sh[11] in agent; renamed from /tmp/x by
    /// mv[13] in agent`).
    pub fn text(&self) -> String {
        let phases: Vec<&str> = {
            let mut p: Vec<&str> = self.steps.iter().map(|s| s.phase.as_str()).collect();
            p.dedup();
            p
        };
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|s| {
                format!(
                    "{}{} by {} in {}",
                    s.how,
                    s.from
                        .as_deref()
                        .map(|f| format!(" from {f}"))
                        .unwrap_or_default(),
                    crate::finding::chain(&s.comm, s.pid, &s.ancestry),
                    s.phase
                )
            })
            .collect();
        let judged = if self.steps.last().is_some_and(|s| s.path != self.judged) {
            format!(", as {}", self.judged)
        } else {
            String::new()
        };
        format!(
            "loaded what the {} phase wrote ({}{judged}): {}",
            phases.first().copied().unwrap_or("earlier"),
            self.place.words(),
            steps.join("; ")
        )
    }
}

/// A finding's process and its nearest ancestors (see [`chain`]).
pub fn who(f: &Finding) -> String {
    chain(&f.comm, f.pid, &f.ancestry)
}

/// A process and its nearest three ancestors: `cat[12] < sh[11] < bash[10] < ...`.
pub fn chain(comm: &str, pid: u32, ancestry: &[Ancestor]) -> String {
    let mut s = format!("{comm}[{pid}]");
    for a in ancestry.iter().take(3) {
        s.push_str(&format!(" < {}[{}]", a.comm, a.pid));
    }
    if ancestry.len() > 3 {
        s.push_str(" < ...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::Class;

    /// Which classes mark the process that made them, pinned for every class: the seven places
    /// that make findings asked this once each, and one (path findings) counted out-of-scope
    /// accesses where six did not.
    #[test]
    fn cheats_contaminants_and_out_of_scope_accesses_mark_their_process() {
        let marks: Vec<(&str, bool)> = Class::ALL
            .iter()
            .map(|c| (c.name(), c.marks_process()))
            .collect();
        assert_eq!(
            marks,
            [
                ("cheat", true),
                ("contaminant", true),
                ("out_of_scope", true),
                ("warning", false),
                ("barrier", false),
            ]
        );
    }
}
