//! The audit's report: the verdict, what the run was, the findings and counts, as `audit.json`
//! holds them.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{
    finding::{Finding, Proc},
    groups, phases,
    policy::{Policy, Severity},
    provenance, transcript, watched,
};

/// Version of the audit report format.
pub const REPORT_VERSION: u32 = 1;

/// The verdict.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Clean,
    Flagged,
    Disqualified,
    Inconclusive,
}

impl Report {
    /// A report of `ledger` under `policy` with `verdict` and nothing found yet: where the
    /// audit of a record and the audit of transcripts alone both start. Incomplete until the
    /// caller says the record is complete.
    pub(crate) fn new(
        ledger: &Path,
        policy: &Policy,
        verdict: Verdict,
        isolation_clean: bool,
    ) -> Self {
        Self {
            format: REPORT_FORMAT.into(),
            version: REPORT_VERSION,
            aet_version: aet_ledger::version::get().into(),
            ledger: ledger.to_owned(),
            policy: policy.path.clone(),
            verdict,
            exit_code: verdict.exit_code(),
            disqualified: verdict == Verdict::Disqualified,
            isolation_clean,
            complete: false,
            incomplete_reasons: Vec::new(),
            run: RunInfo::default(),
            counts: Counts::default(),
            cheat_hits: Vec::new(),
            contaminant_hits: Vec::new(),
            out_of_scope: Vec::new(),
            warnings: Vec::new(),
            barrier: None,
            blocked: Vec::new(),
            unused_rules: Vec::new(),
            policy_warnings: policy.warnings(),
            processes: Vec::new(),
            programs: Vec::new(),
            decoys: None,
            transcripts: None,
            phases: Vec::new(),
            watched: None,
            groups: Vec::new(),
            provenance: Vec::new(),
        }
    }
}

impl Verdict {
    /// The exit code of `aet audit` for this verdict (aet's `Exit` codes are made from these).
    pub const fn exit_code(self) -> u8 {
        match self {
            Self::Clean => 0,
            Self::Flagged => 1,
            Self::Disqualified => 2,
            Self::Inconclusive => 3,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Clean => "clean",
            Self::Flagged => "flagged",
            Self::Disqualified => "disqualified",
            Self::Inconclusive => "inconclusive",
        }
    }
}

/// What the run was, from the ledger's metadata.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunInfo {
    pub command: Vec<String>,
    pub scope: Option<String>,
    pub started_ns: Option<i64>,
    pub ended_ns: Option<i64>,
    pub exit_status: Option<i32>,
    pub sandbox_verified: Option<bool>,
    pub identity_uid: Option<u32>,
    /// How the run met overload: how often and how long it was frozen (a harness that times
    /// agents can subtract it).
    pub overload: Option<aet_ledger::metadata::OverloadRecord>,
    /// The launcher's channels: the fds the command was started with (`aet run ... > FILE`),
    /// with what they named. Bytes written through one that is a file are the launcher's
    /// output, not judged by `[allow] write` (rules and protected files still apply).
    #[serde(default)]
    pub output_channels: Vec<aet_ledger::metadata::InheritedFd>,
}

/// Counts.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Counts {
    pub rows: u64,
    pub setup_rows: u64,
    /// Of `setup_rows`, those of a container runtime's set-up (its processes before their
    /// first exec).
    #[serde(default)]
    pub runtime_rows: u64,
    pub distinct_paths: usize,
    pub processes: usize,
    pub findings: usize,
}

/// A transcript's tool call that matches a rule.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TranscriptHit {
    pub rule: String,
    pub severity: Severity,
    pub tool_call: transcript::ToolCallRef,
    /// Whether the kernel saw an access at a path the call names (any outcome).
    pub seen_by_kernel: bool,
}

/// A path a transcript names, and whether the kernel saw it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TranscriptPath {
    pub path: String,
    pub seen_by_kernel: bool,
}

/// The transcript side of the audit.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Transcripts {
    pub format: String,
    pub source: PathBuf,
    pub tool_calls: usize,
    /// Tool calls whose command or paths match a rule (the seed's transcript audit).
    pub hits: Vec<TranscriptHit>,
    pub paths: Vec<TranscriptPath>,
    /// Files under the transcripts' directory that no format recognised (left out of the
    /// audit, and said here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unrecognized: Vec<PathBuf>,
    /// Flagged accesses (cheats, contaminants, out of scope) at paths no tool call names: what
    /// only the kernel's record shows.
    pub unmentioned_findings: usize,
    pub headline: Option<String>,
    /// The transcript held against what ran: shell calls whose programs never ran in their
    /// window, and processes no tool call accounts for.
    #[serde(default, flatten)]
    pub claims: crate::claims::Claims,
}

/// The report format's name (`format` of `audit.json`).
pub const REPORT_FORMAT: &str = "aet.audit";

/// The audit report (JSON: [`REPORT_FORMAT`] version [`REPORT_VERSION`]). Written by the audit,
/// and read back typed by every reader of `audit.json` ([`Report::read`]): a field a report of
/// an older aet lacks reads as empty.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub format: String,
    pub version: u32,
    #[serde(default)]
    pub aet_version: String,
    #[serde(default)]
    pub ledger: PathBuf,
    #[serde(default)]
    pub policy: PathBuf,
    pub verdict: Verdict,
    #[serde(default)]
    pub exit_code: u8,
    #[serde(default)]
    pub disqualified: bool,
    #[serde(default)]
    pub isolation_clean: bool,
    #[serde(default)]
    pub complete: bool,
    #[serde(default)]
    pub incomplete_reasons: Vec<String>,
    #[serde(default)]
    pub run: RunInfo,
    #[serde(default)]
    pub counts: Counts,
    #[serde(default)]
    pub cheat_hits: Vec<Finding>,
    #[serde(default)]
    pub contaminant_hits: Vec<Finding>,
    #[serde(default)]
    pub out_of_scope: Vec<Finding>,
    #[serde(default)]
    pub warnings: Vec<Finding>,
    /// `--mode shadow|enforce`: the barrier the run had.
    #[serde(default)]
    pub barrier: Option<BarrierInfo>,
    /// Accesses the barrier blocked (`enforce`, outcome `blocked`) or would have blocked
    /// (`shadow`, outcome `would_block`); they do not change the verdict.
    #[serde(default)]
    pub blocked: Vec<Finding>,
    /// Rules that matched no row: they may be typos.
    #[serde(default)]
    pub unused_rules: Vec<String>,
    /// The policy's warnings at load: rules that can match only by an unlikely chance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_warnings: Vec<String>,
    #[serde(default)]
    pub processes: Vec<Proc>,
    /// The programs the run executed or mapped executable, by content (`sha256`): hash, paths,
    /// how often, by whom; those whose hash could not be taken say why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<crate::programs::Program>,
    /// The decoys the run planted (`[[decoy]]`) and what it did with each: opens, sweeps, where
    /// its token turned up; the files read back for the tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoys: Option<crate::decoys::DecoyReport>,
    #[serde(default)]
    pub transcripts: Option<Transcripts>,
    /// The run's phases in order, with their rows and the section that judged them (a run
    /// never marked has one, `agent`).
    #[serde(default)]
    pub phases: Vec<phases::PhaseInfo>,
    /// The watched files (`[watch.NAME]`): their fingerprints' cost, what changed and who
    /// changed it, what was written and left as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watched: Option<watched::WatchReport>,
    /// The findings grouped by list, rule, outcome, access, phase and path (out-of-scope paths of
    /// one directory gathered under a directory group): what the terminal and HTML reports show
    /// first. The lists above keep every finding.
    #[serde(default)]
    pub groups: Vec<groups::Group>,
    /// Each phase judged by provenance: what it loaded that an earlier phase wrote, by place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provenance: Vec<provenance::PhaseProvenance>,
}

impl Report {
    /// The report's finding lists, in order, with the name each has in `audit.json` (the `runs`
    /// columns that count them: `runs::FINDING_COUNTS`).
    pub fn finding_lists(&self) -> [(&'static str, &[Finding]); 5] {
        [
            ("cheat_hits", &self.cheat_hits),
            ("contaminant_hits", &self.contaminant_hits),
            ("out_of_scope", &self.out_of_scope),
            ("warnings", &self.warnings),
            ("blocked", &self.blocked),
        ]
    }

    /// Reads an `audit.json`: `None` when there is none; an error naming the file when it is
    /// not an audit report of a format this aet reads.
    pub fn read(path: &Path) -> Result<Option<Self>, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let r: Self = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not an audit report: {e}", path.display()))?;
        if r.format != REPORT_FORMAT || r.version > REPORT_VERSION {
            return Err(format!(
                "{}: not an audit report this aet reads (format {:?} version {}; this aet \
                 reads {REPORT_FORMAT} up to version {REPORT_VERSION})",
                path.display(),
                r.format,
                r.version
            ));
        }
        Ok(Some(r))
    }
}

/// The run's barrier, in short (the whole of it is the ledger's `aet.barrier`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BarrierInfo {
    pub mode: aet_ledger::barrier::BarrierMode,
    pub abi: i32,
    pub rules: usize,
    /// Files left out of the grants (cheats, protected files).
    pub excluded: Vec<String>,
    pub enforced: Option<String>,
}

impl Verdict {
    /// The verdict: a cheat disqualifies even an incomplete record; an incomplete one is
    /// otherwise inconclusive; contaminants, out-of-scope accesses or warnings flag it.
    pub const fn of(disqualified: bool, complete: bool, nothing_flagged: bool) -> Self {
        if disqualified {
            Self::Disqualified
        } else if !complete {
            Self::Inconclusive
        } else if !nothing_flagged {
            Self::Flagged
        } else {
            Self::Clean
        }
    }
}

impl RunInfo {
    /// What the run was, from its ledger's metadata.
    pub(crate) fn of(m: &aet_ledger::metadata::LedgerMeta) -> Self {
        Self {
            command: m.command.clone(),
            scope: m.scope_target.clone(),
            started_ns: m.started_ns,
            ended_ns: m.ended_ns,
            exit_status: m.exit_status,
            sandbox_verified: m.sandbox.as_ref().map(|s| s.verified),
            identity_uid: m.identity.as_ref().map(|i| i.uid),
            overload: m.overload.clone(),
            output_channels: m.inherited_fds.clone(),
        }
    }
}

impl BarrierInfo {
    /// The run's barrier in short.
    pub(crate) fn of(b: &aet_ledger::barrier::BarrierReport) -> Self {
        Self {
            mode: b.mode,
            abi: b.abi,
            rules: b.rules.len(),
            excluded: b
                .excluded
                .iter()
                .map(|x| x.path.as_path().display().to_string())
                .collect(),
            enforced: b.enforced.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        assert_eq!(Verdict::Clean.exit_code(), 0);
        assert_eq!(Verdict::Flagged.exit_code(), 1);
        assert_eq!(Verdict::Disqualified.exit_code(), 2);
        assert_eq!(Verdict::Inconclusive.exit_code(), 3);
    }
}
