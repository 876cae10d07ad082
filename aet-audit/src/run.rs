//! One audit from start to end: the policy and the ledger (or only the agent's transcripts) in,
//! the scan, the report out.

use std::path::{Path, PathBuf};

use aet_ledger::{
    assess::{Observed, assess},
    reader::ReadError,
};

use crate::{
    account, engine,
    finding::{Class, Finding, Outcome},
    groups,
    policy::{Policy, PolicyError, Severity},
    report::{BarrierInfo, Counts, Report, RunInfo, Verdict},
    transcript,
};

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
    #[error(
        "{0}: no kernel record (ledger.arrow) and no transcripts to audit (no file in it is a \
         transcript of a format aet knows)"
    )]
    Nothing(PathBuf),
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
    let run = ledger;
    let ledger = aet_ledger::run_dir::ledger_of(ledger);
    let calls = match opts.transcripts {
        // None named: those the run directory holds, wherever in it (`transcripts/` first).
        None => transcript::in_run(run).map_err(|message| AuditError::Transcripts {
            path: run.to_owned(),
            message,
        })?,
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
    if !ledger.exists() && run.is_dir() {
        return Err(AuditError::Nothing(run.to_owned()));
    }
    let (scan, read) = engine::scan_for(&ledger, policy, calls.is_some())?;
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
            io_uring_rows: scan.tally.io_uring_rows,
            unseen_starts: scan.tally.unseen_starts,
        },
    );
    for r in std::mem::take(&mut scan.watch_reasons) {
        reasons.push(r);
    }
    // A ledger from before program hashes, judged by a policy that names programs by content:
    // none of its programs can be judged.
    if policy.judges_programs()
        && let Some(v) = m.schema_version.as_deref()
        && v.parse::<u32>().is_ok_and(|v| v < 7)
    {
        reasons.push(aet_ledger::metadata::Incomplete::ProgramsUnhashed { schema: v.into() });
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
        isolation_clean && warnings.is_empty() && said(Severity::Warning) == 0,
    );
    let mut report = Report {
        complete,
        incomplete_reasons: reasons.texts(),
        run: RunInfo::of(m),
        counts: Counts {
            rows: scan.tally.rows,
            setup_rows: scan.tally.setup_rows,
            runtime_rows: scan.tally.runtime_rows,
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
        processes: scan.processes,
        programs: scan.programs,
        decoys: scan.decoys.take(),
        transcripts,
        phases: phase_infos,
        watched: scan.watch.take(),
        provenance: std::mem::take(&mut scan.provenance),
        ..Report::new(ledger, policy, verdict, isolation_clean)
    };
    report.groups = groups::group(&report.finding_lists());
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
