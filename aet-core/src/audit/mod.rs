//! The audit: a verdict from the kernel's record, against an allow-list policy.
//!
//! - [`policy`]: the TOML policy, compiled once (one `RegexSet`, `GlobSet`s);
//! - [`engine`]: one pass over the ledger's columns, each distinct path classified once;
//! - [`transcript`]: an agent's own account of its tool calls, correlated with the record;
//! - [`html`]: the self-contained HTML report.
//!
//! Verdicts and exit codes: `clean` 0, `flagged` 1 (contaminants, out-of-scope accesses or
//! warnings), `disqualified` 2 (a cheat hit), `inconclusive` 3 (the record is incomplete and no
//! cheat was found). Usage and input errors are 4.

mod account;
pub(crate) mod batch;
pub mod draft;
pub mod engine;
pub mod finding;
pub mod groups;
pub mod html;
pub mod phases;
pub mod provenance;
pub mod reached;
mod scanner;
mod targets;
pub mod transcript;
pub mod watched;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use reached::Reached;

use crate::policy::{Policy, PolicyError, Severity};
pub use batch::COLUMNS;
pub use finding::{Ancestor, Class, Finding, Outcome, Proc};

use crate::ledger::{
    reader::ReadError,
    record::{Observed, assess},
};

/// Version of the audit report format.
pub const REPORT_VERSION: u32 = 1;

/// Errors that stop an audit (exit code 4).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Ledger(#[from] ReadError),
    #[error("transcripts {path}: {message}")]
    Transcripts { path: PathBuf, message: String },
    #[error("unknown transcript format {0:?} (known: {known})", known = transcript::format_names().join(", "))]
    Format(String),
}

/// The verdict.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Clean,
    Flagged,
    Disqualified,
    Inconclusive,
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
    pub overload: Option<crate::ledger::record::OverloadRecord>,
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
    pub mode: crate::policy::barrier::BarrierMode,
    pub abi: i32,
    pub rules: usize,
    /// Files left out of the grants (cheats, protected files).
    pub excluded: Vec<String>,
    pub enforced: Option<String>,
}

/// Audit options.
pub struct Options<'a> {
    pub transcripts: Option<&'a Path>,
    pub transcript_format: &'a str,
}

/// Audits a ledger (a file, or a run directory holding `ledger.arrow`).
pub fn audit(ledger: &Path, policy_path: &Path, opts: &Options<'_>) -> Result<Report, AuditError> {
    let policy = Policy::load(policy_path)?;
    audit_with(ledger, &policy, opts)
}

/// [`audit`] with a compiled policy.
pub fn audit_with(
    ledger: &Path,
    policy: &Policy,
    opts: &Options<'_>,
) -> Result<Report, AuditError> {
    let ledger = crate::run_dir::ledger_of(ledger);
    let calls = match opts.transcripts {
        None => None,
        Some(dir) => {
            let fmt = match opts.transcript_format {
                "auto" | "" => None,
                name => Some(
                    transcript::format_by_name(name)
                        .ok_or_else(|| AuditError::Format(name.to_owned()))?,
                ),
            };
            let read = transcript::read(dir, fmt).map_err(|message| AuditError::Transcripts {
                path: dir.to_owned(),
                message,
            })?;
            Some((dir.to_owned(), read))
        }
    };
    if !ledger.exists()
        && let Some((source, read)) = calls
    {
        // No kernel record: the agent's own account is all there is.
        return Ok(account::transcripts_only(&ledger, policy, source, read));
    }
    let (scan, read) = engine::scan(&ledger, policy)?;
    Ok(build_report(&ledger, policy, scan, &read, calls))
}

fn build_report(
    ledger: &Path,
    policy: &Policy,
    mut scan: engine::Scan,
    read: &engine::Read,
    calls: Option<(PathBuf, transcript::Read)>,
) -> Report {
    let m = &read.meta;
    let mut reasons = assess(
        m,
        read.form,
        read.damaged_tail.as_deref(),
        read.doctored.as_deref(),
        Observed {
            io_uring_rows: scan.io_uring_rows,
            unseen_starts: scan.unseen_starts,
        },
    );
    for r in std::mem::take(&mut scan.watch_reasons) {
        reasons.push(r);
    }
    let complete = reasons.is_empty();

    let transcripts =
        calls.map(|(source, read)| account::correlate(policy, &mut scan, source, read));

    let mut cheat_hits = Vec::new();
    let mut contaminant_hits = Vec::new();
    let mut out_of_scope = Vec::new();
    let mut warnings = Vec::new();
    let mut blocked = Vec::new();
    let nfind = scan.findings.len();
    for f in std::mem::take(&mut scan.findings) {
        match (f.class, f.outcome) {
            (Class::Cheat, Outcome::Hit) => cheat_hits.push(f),
            (Class::Cheat, _) | (Class::Warning, _) => warnings.push(f),
            (Class::Contaminant, _) => contaminant_hits.push(f),
            (Class::OutOfScope, _) => out_of_scope.push(f),
            (Class::Barrier, _) => blocked.push(f),
        }
    }
    for v in [
        &mut blocked,
        &mut cheat_hits,
        &mut contaminant_hits,
        &mut out_of_scope,
        &mut warnings,
    ] {
        v.sort_by_key(|f| f.first_seq);
    }
    let mut unused_rules = unused_rules(policy, &scan.rule_hits, &cheat_hits, &warnings);
    for (name, section) in &policy.phases {
        match scan.phase_hits.iter().find(|(n, _)| n == name) {
            Some((_, hits)) => {
                unused_rules.extend(self::unused_rules(section, hits, &cheat_hits, &warnings));
            }
            // No row of the phase: none of its rules could match, nor its provenance judge.
            None => {
                unused_rules.extend(section.rules.iter().map(|r| r.name.clone()));
                if section.provenance.is_some() {
                    unused_rules.push(format!(
                        "phases.{name}.provenance (the run never began phase {name})"
                    ));
                }
            }
        }
    }
    let mut phase_infos = std::mem::take(&mut scan.phases);
    for ph in &mut phase_infos {
        ph.judged_by = if ph.name == policy.phase {
            Some("policy".into())
        } else {
            policy
                .phases
                .contains_key(&ph.name)
                .then(|| format!("phases.{}", ph.name))
        };
    }
    // The agent's own account decides as the record does (the seed's audit read only it): a
    // cheat it names disqualifies, a contaminant makes isolation not clean, a warning flags.
    let said = |sev: Severity| account::said(transcripts.as_ref(), sev);
    if let Some(t) = &transcripts {
        unused_rules.retain(|r| !t.hits.iter().any(|h| &h.rule == r));
    }
    let disqualified = !cheat_hits.is_empty() || said(Severity::Cheat) > 0;
    let isolation_clean =
        contaminant_hits.is_empty() && out_of_scope.is_empty() && said(Severity::Contaminant) == 0;
    let verdict = Verdict::of(
        disqualified,
        complete,
        isolation_clean && warnings.is_empty() && said(Severity::Warn) == 0,
    );
    let mut report = Report {
        format: REPORT_FORMAT.into(),
        version: REPORT_VERSION,
        aet_version: crate::version::get().into(),
        ledger: ledger.to_owned(),
        policy: policy.path.clone(),
        verdict,
        exit_code: verdict.exit_code(),
        disqualified,
        isolation_clean,
        complete,
        incomplete_reasons: reasons.texts(),
        run: RunInfo::of(m),
        counts: Counts {
            rows: scan.rows,
            setup_rows: scan.setup_rows,
            runtime_rows: scan.runtime_rows,
            distinct_paths: scan.distinct_paths,
            processes: scan.processes.len(),
            findings: nfind,
        },
        cheat_hits,
        contaminant_hits,
        out_of_scope,
        warnings,
        barrier: m.barrier.as_ref().map(BarrierInfo::of),
        blocked,
        unused_rules,
        policy_warnings: policy.warnings(),
        processes: scan.processes,
        transcripts,
        phases: phase_infos,
        watched: scan.watch.take(),
        groups: Vec::new(),
        provenance: std::mem::take(&mut scan.provenance),
    };
    report.groups = groups::group(&report);
    report
}

/// The rules (and protected files) that matched no row: they may be typos.
fn unused_rules(
    policy: &Policy,
    rule_hits: &[u64],
    cheat_hits: &[Finding],
    warnings: &[Finding],
) -> Vec<String> {
    policy
        .rules
        .iter()
        .map(|r| r.name.clone())
        .chain(
            policy
                .protected
                .iter()
                .map(|(n, _)| format!("protected.{n}")),
        )
        .zip(rule_hits.iter())
        .filter(|(_, n)| **n == 0)
        .map(|(r, _)| r)
        .filter(|r| !cheat_hits.iter().chain(warnings).any(|f| &f.rule == r))
        .collect()
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
    fn of(m: &crate::ledger::record::LedgerMeta) -> Self {
        Self {
            command: m.command.clone(),
            scope: m.scope_target.clone(),
            started_ns: m.started_ns,
            ended_ns: m.ended_ns,
            exit_status: m.exit_status,
            sandbox_verified: m.sandbox.as_ref().map(|s| s.verified),
            identity_uid: m.identity.as_ref().map(|i| i.uid),
            overload: m.overload.clone(),
        }
    }
}

impl BarrierInfo {
    /// The run's barrier in short.
    fn of(b: &crate::policy::barrier::BarrierReport) -> Self {
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

pub(crate) fn who(f: &Finding) -> String {
    chain(&f.comm, f.pid, &f.ancestry)
}

/// A process and its nearest three ancestors: `cat[12] < sh[11] < bash[10] < ...`.
pub(crate) fn chain(comm: &str, pid: u32, ancestry: &[Ancestor]) -> String {
    let mut s = format!("{comm}[{pid}]");
    for a in ancestry.iter().take(3) {
        s.push_str(&format!(" < {}[{}]", a.comm, a.pid));
    }
    if ancestry.len() > 3 {
        s.push_str(" < ...");
    }
    s
}

/// The terminal summary: one screen.
pub fn render_text(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "aet audit: {}", r.verdict.name().to_uppercase());
    let no_record = r.incomplete_reasons.iter().any(|x| x == account::NO_RECORD);
    let _ = writeln!(
        s,
        "ledger        {} ({})",
        r.ledger.display(),
        if no_record {
            "NONE: the transcripts alone"
        } else if r.complete {
            "complete"
        } else {
            "INCOMPLETE"
        }
    );
    for reason in &r.incomplete_reasons {
        let _ = writeln!(s, "              - {reason}");
    }
    if let Some(ov) = r
        .run
        .overload
        .as_ref()
        .filter(|o| o.freezes > 0 || o.note.is_some())
    {
        let _ = writeln!(s, "slowed        {}", ov.text());
    }
    let _ = writeln!(s, "policy        {}", r.policy.display());
    let _ = writeln!(
        s,
        "rows          {} ({} of aet's set-up left out{}), {} distinct paths, {} processes",
        r.counts.rows,
        r.counts.setup_rows,
        if r.counts.runtime_rows > 0 {
            format!(
                ", {} of them the container runtime's",
                r.counts.runtime_rows
            )
        } else {
            String::new()
        },
        r.counts.distinct_paths,
        r.counts.processes
    );
    if r.phases.len() > 1 {
        let shown: Vec<String> = r
            .phases
            .iter()
            .map(|p| {
                format!(
                    "{} {} rows ({})",
                    p.name,
                    p.rows,
                    p.judged_by.as_deref().unwrap_or("not judged")
                )
            })
            .collect();
        let _ = writeln!(s, "phases        {}", shown.join(", "));
    }
    let _ = writeln!(
        s,
        "findings      cheats {}, contaminants {}, out of scope {}, warnings {}",
        r.cheat_hits.len(),
        r.contaminant_hits.len(),
        r.out_of_scope.len(),
        r.warnings.len()
    );
    if let Some(w) = &r.watched {
        let _ = writeln!(s, "watched       {}", watched::summary(w));
    }
    for p in &r.provenance {
        let _ = writeln!(s, "provenance    {}", provenance::summary(p));
    }
    if let Some(b) = &r.barrier {
        let _ = writeln!(
            s,
            "barrier       {} ({} rules{}, {} file(s) left out): {} access(es) {}",
            b.mode.name(),
            b.rules,
            b.enforced
                .as_ref()
                .map(|e| format!(", {e}, Landlock ABI {}", b.abi))
                .unwrap_or_default(),
            b.excluded.len(),
            r.blocked.len(),
            if b.enforced.is_some() {
                "blocked"
            } else {
                "would be blocked"
            }
        );
    }
    groups::render_text(r, &mut s);
    if let Some(w) = r.watched.as_ref().filter(|w| !w.touched.is_empty()) {
        let shown: Vec<String> = w
            .touched
            .iter()
            .take(3)
            .map(|t| {
                format!(
                    "{}{}",
                    crate::util::escape_path(&t.path.as_path().to_string_lossy()),
                    match (&t.comm, t.pid) {
                        (Some(c), Some(p)) => format!(" (by {c}[{p}])"),
                        _ => String::new(),
                    }
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "touched       {} watched file(s) written and left as they were: {}{}",
            w.touched.len(),
            shown.join(", "),
            if w.touched.len() > 3 { ", ..." } else { "" }
        );
    }
    if !r.unused_rules.is_empty() {
        let _ = writeln!(s, "unused rules  {} (typos?)", r.unused_rules.join(", "));
    }
    for w in &r.policy_warnings {
        let _ = writeln!(s, "POLICY WARN   {w}");
    }
    if let Some(t) = &r.transcripts {
        let _ = writeln!(
            s,
            "transcripts   {} tool calls ({}), {} rule hits, {} paths named ({} not seen by the kernel)",
            t.tool_calls,
            t.format,
            t.hits.len(),
            t.paths.len(),
            t.paths.iter().filter(|p| !p.seen_by_kernel).count()
        );
        if !t.unrecognized.is_empty() {
            let _ = writeln!(
                s,
                "LEFT OUT      {} file(s) under the transcripts no format recognised: {}",
                t.unrecognized.len(),
                t.unrecognized
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for h in t.hits.iter().filter(|h| h.severity != Severity::Warn) {
            let c = &h.tool_call;
            let _ = writeln!(
                s,
                "{:<6} {} named by the agent's {} call at {}:{}{}",
                if h.severity == Severity::Cheat {
                    "CHEAT"
                } else {
                    "CONTAM"
                },
                h.rule,
                c.tool,
                c.file.display(),
                c.line,
                c.command
                    .as_deref()
                    .map(|cmd| format!(": {}", cmd.chars().take(120).collect::<String>()))
                    .unwrap_or_default(),
            );
        }
        if let Some(h) = &t.headline {
            let _ = writeln!(s, "HEADLINE      {h}");
        }
    }
    s
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
