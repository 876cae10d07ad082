//! The agent's own account: its transcripts' tool calls matched against the policy's rules,
//! beside the kernel's record (each finding gets the tool call that names it and the one that
//! was running), or alone when a run has no record (a verdict that says what it rests on).

use std::path::{Path, PathBuf};

use crate::{
    engine,
    finding::Class,
    policy::{Policy, Severity, Target},
    report::{Report, TranscriptHit, TranscriptPath, Transcripts, Verdict},
    transcript::{self, ToolCall},
};

/// Why a report without a kernel record is incomplete (and never clean).
pub const NO_RECORD: &str = "no kernel record of the run (no ledger): this verdict rests on the \
     agent's own account, its transcripts, not on what the kernel saw";

/// The tool calls whose command or paths match a rule: the rules on paths (and text) over both,
/// the rules on what a process ran over the command (a text rule is in the path set already).
fn hits(policy: &Policy, calls: &[ToolCall], seen: &dyn Fn(&str) -> bool) -> Vec<TranscriptHit> {
    let mut hits = Vec::new();
    for c in calls {
        let text = c.command.clone().unwrap_or_default() + " " + &c.paths.join(" ");
        let mut matched: Vec<usize> = policy.set.matches(text.as_bytes()).into_iter().collect();
        if let Some(cmd) = &c.command {
            for m in policy.argv_set.matches(cmd.as_bytes()).iter() {
                let r = policy.argv_rules[m];
                if policy.rules[r].target == Target::Argv && !matched.contains(&r) {
                    matched.push(r);
                }
            }
        }
        for idx in matched {
            let r = &policy.rules[idx];
            hits.push(TranscriptHit {
                rule: r.name.clone(),
                severity: r.severity,
                tool_call: c.reference(),
                seen_by_kernel: c.paths.iter().any(|p| seen(p)),
            });
        }
    }
    hits
}

/// How many of the transcripts' hits are of severity `sev`.
pub(super) fn said(t: Option<&Transcripts>, sev: Severity) -> usize {
    t.map_or(0, |t| t.hits.iter().filter(|h| h.severity == sev).count())
}

/// The report of a run that has transcripts and no kernel record: the verdict rests on the
/// agent's account alone, so it is never clean: a cheat the account names disqualifies, else
/// the run is inconclusive (incomplete: [`NO_RECORD`]).
pub(super) fn transcripts_only(
    ledger: &Path,
    policy: &Policy,
    source: PathBuf,
    read: transcript::Read,
) -> Report {
    let calls = &read.calls;
    let hits = hits(policy, calls, &|_| false);
    let paths = named_paths(calls, &|_| false);
    let unused_rules = policy
        .rules
        .iter()
        .filter(|r| !hits.iter().any(|h| h.rule == r.name))
        .map(|r| r.name.clone())
        .collect();
    let t = Transcripts {
        format: read.format(),
        source,
        tool_calls: calls.len(),
        hits,
        paths,
        unrecognized: read.unrecognized,
        unmentioned_findings: 0,
        headline: None,
        claims: Default::default(),
    };
    let disqualified = said(Some(&t), Severity::Cheat) > 0;
    let isolation_clean = said(Some(&t), Severity::Contaminant) == 0;
    let verdict = Verdict::of(disqualified, false, false);
    Report {
        incomplete_reasons: vec![NO_RECORD.into()],
        unused_rules,
        transcripts: Some(t),
        ..Report::new(ledger, policy, verdict, isolation_clean)
    }
}

/// The transcripts beside the kernel's record: the tool calls whose command or paths match a
/// rule, the paths they name and whether the kernel saw them, and for each finding whether a
/// tool call names it and which one was running.
pub(super) fn correlate(
    policy: &Policy,
    scan: &mut engine::Scan,
    source: PathBuf,
    read: transcript::Read,
) -> Transcripts {
    let calls = &read.calls;
    let kernel_paths: std::collections::HashSet<&str> =
        scan.paths.iter().map(String::as_str).collect();
    let seen = |word: &str| {
        kernel_paths.contains(word) || scan.paths.iter().any(|p| transcript::names_path(word, p))
    };
    let hits = hits(policy, calls, &seen);
    let paths = named_paths(calls, &seen);
    // A call without a result ran until the next call began (an agent's calls follow one
    // another); the last such call is open-ended.
    let mut starts: Vec<i64> = calls.iter().filter_map(|c| c.started_ns).collect();
    starts.sort_unstable();
    let ends: Vec<Option<i64>> = calls
        .iter()
        .map(|c| {
            c.ended_ns.or_else(|| {
                let s = c.started_ns?;
                starts.get(starts.partition_point(|&x| x <= s)).copied()
            })
        })
        .collect();
    let mut unmentioned = 0;
    for f in &mut scan.findings {
        let names = |c: &&ToolCall| {
            c.paths.iter().any(|w| transcript::names_path(w, &f.path))
                || c.command
                    .as_deref()
                    .is_some_and(|cmd| cmd.contains(&f.path))
        };
        let naming = calls.iter().find(names);
        f.mentioned_in_transcript = Some(naming.is_some());
        if naming.is_none() && f.class != Class::Warning {
            unmentioned += 1;
        }
        // The tool call running when the access happened; when the transcript's times do not
        // place it (or it has none), the first call that names the path; else a call that
        // began before it and whose end the transcript does not say.
        let running = |open: bool| {
            calls
                .iter()
                .zip(&ends)
                .filter(|(c, end)| {
                    c.started_ns.is_some_and(|s| s <= f.first_ts_ns)
                        && match end {
                            Some(e) => !open && f.first_ts_ns <= *e,
                            None => open,
                        }
                })
                .max_by_key(|(c, _)| c.started_ns)
                .map(|(c, _)| c)
        };
        f.tool_call = running(false)
            .map(|c| attributed(c, "time"))
            .or_else(|| naming.map(|c| attributed(c, "path")))
            .or_else(|| running(true).map(|c| attributed(c, "time")));
    }
    let claims = crate::claims::compare(calls, &scan.seen, &scan.processes);
    scan.findings
        .extend(crate::claims::findings(&claims, policy));
    let headline = (unmentioned > 0).then(|| {
            format!(
                "{unmentioned} flagged access(es) by processes at paths no tool call in the transcripts names: \
                 only the kernel's record shows them"
            )
        });
    Transcripts {
        format: read.format(),
        source,
        tool_calls: calls.len(),
        hits,
        paths,
        unrecognized: read.unrecognized,
        unmentioned_findings: unmentioned,
        headline,
        claims,
    }
}

/// A call's reference, saying how the finding got it.
fn attributed(c: &ToolCall, by: &str) -> transcript::ToolCallRef {
    transcript::ToolCallRef {
        by: Some(by.into()),
        ..c.reference()
    }
}

/// The paths the calls name, each once, and whether the kernel saw each.
fn named_paths(calls: &[ToolCall], seen: &dyn Fn(&str) -> bool) -> Vec<TranscriptPath> {
    let mut paths: Vec<TranscriptPath> = Vec::new();
    for p in calls.iter().flat_map(|c| &c.paths) {
        if !paths.iter().any(|x| &x.path == p) {
            paths.push(TranscriptPath {
                path: p.clone(),
                seen_by_kernel: seen(p),
            });
        }
    }
    paths
}
