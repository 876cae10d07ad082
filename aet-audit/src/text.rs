//! The audit's terminal summary: one screen.

use crate::{
    account,
    finding::{Finding, Outcome},
    groups::{First, Group},
    policy::Severity,
    provenance,
    report::Report,
    watched,
};

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
    if !r.programs.is_empty() {
        crate::programs::render(&r.programs, &mut s);
    }
    if let Some(d) = &r.decoys {
        crate::decoys::render(d, &mut s);
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
    render_groups(r, &mut s);
    if let Some(w) = r.watched.as_ref().filter(|w| !w.touched.is_empty()) {
        let shown: Vec<String> = w
            .touched
            .iter()
            .take(3)
            .map(|t| {
                format!(
                    "{}{}",
                    aet_ledger::util::escape_path(&t.path.as_path().to_string_lossy()),
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
        for u in &t.claims.unrun_calls {
            let _ = writeln!(
                s,
                "NEVER RAN     {} (the {} call at {}:{}{})",
                u.missing.join(", "),
                u.tool_call.tool,
                u.tool_call.file.display(),
                u.tool_call.line,
                u.result
                    .as_deref()
                    .map(|r| format!(
                        ", which says it returned {:?}",
                        r.lines().next().unwrap_or("")
                    ))
                    .unwrap_or_default()
            );
        }
        let n = t.claims.unaccounted.len() + t.claims.unaccounted_more;
        if n > 0 {
            let _ = writeln!(
                s,
                "NO CALL RAN   {n} process(es) no tool call accounts for: {}",
                t.claims
                    .unaccounted
                    .iter()
                    .take(5)
                    .map(|p| format!("{} {}", p.pid, p.exe.as_deref().unwrap_or("?")))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
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
        for h in t.hits.iter().filter(|h| h.severity != Severity::Warning) {
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

/// Most lines of groups the terminal shows of the lists that fold (out of scope, warnings,
/// blocked); cheats and contaminants are always shown whole.
const FOLDED_LINES: usize = 12;

fn label(r: &Report, list: &str) -> &'static str {
    match list {
        "cheat_hits" => "CHEAT",
        "contaminant_hits" => "CONTAM",
        "out_of_scope" => "SCOPE",
        "warnings" => "WARN",
        _ if r.barrier.as_ref().is_some_and(|b| b.enforced.is_some()) => "DENIED",
        _ => "SHADOW",
    }
}

fn outcome_text(o: Outcome) -> &'static str {
    match o {
        Outcome::Hit => "",
        Outcome::Attempted => " (attempted)",
        Outcome::Probed => " (probed)",
        Outcome::Blocked => " (blocked)",
        Outcome::WouldBlock => " (would be blocked)",
    }
}

fn first_text(f: &First) -> String {
    crate::finding::chain(&f.comm, f.pid, &f.ancestry)
}

/// One group in a line.
pub fn line(r: &Report, g: &Group) -> String {
    let path = aet_ledger::util::escape_path(&g.path);
    let what = if g.dir {
        format!("{path}/ ({} files)", g.paths)
    } else {
        path
    };
    let phase = if g.phase == aet_ledger::metadata::FIRST_PHASE {
        String::new()
    } else {
        format!(" [{}]", g.phase)
    };
    let count = match (g.rows, g.processes) {
        (1, _) => String::new(),
        (n, 1) => format!(" x{n}"),
        (n, p) => format!(" x{n}, {p} processes"),
    };
    format!(
        "{:<7}{} {}{} {what}{count}{phase}  {}by {}",
        label(r, &g.list),
        g.rule,
        g.access,
        outcome_text(g.outcome),
        if g.processes > 1 { "first " } else { "" },
        first_text(&g.first)
    )
}

/// The findings in the terminal: every cheat finding (under its group) and every contaminant
/// group, then the largest groups of the rest, and what is not shown.
/// The lines under a finding: a watched file's change, or who wrote what a later phase loaded.
fn details(f: &Finding) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(w) = &f.watch {
        v.push(w.detail.clone());
    }
    if let Some(p) = &f.provenance {
        v.push(p.text());
    }
    v
}

fn render_groups(r: &Report, s: &mut String) {
    use std::fmt::Write as _;
    let lists = r.finding_lists();
    let list = |name: &str| {
        lists
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, l)| *l)
            .unwrap_or_default()
    };
    let mut folded_lines = 0;
    let (mut hidden, mut hidden_findings) = (0usize, 0usize);
    for g in r.groups.iter().filter(|g| g.parent.is_none()) {
        match g.list.as_str() {
            "cheat_hits" => {
                let _ = writeln!(s, "{}", line(r, g));
                let findings = list("cheat_hits");
                for &fi in &g.members {
                    let f = &findings[fi];
                    if g.findings > 1 {
                        let _ = writeln!(
                            s,
                            "{:<9}by {}{}",
                            "",
                            crate::finding::who(f),
                            if f.count > 1 {
                                format!(" x{}", f.count)
                            } else {
                                String::new()
                            }
                        );
                    }
                    for d in details(f) {
                        let _ = writeln!(s, "{:<9}{d}", "");
                    }
                }
            }
            "contaminant_hits" => {
                let _ = writeln!(s, "{}", line(r, g));
            }
            _ if folded_lines < FOLDED_LINES => {
                let _ = writeln!(s, "{}", line(r, g));
                folded_lines += 1;
                if let Some(f) = g
                    .members
                    .first()
                    .filter(|_| !g.dir)
                    .and_then(|&fi| list(&g.list).get(fi))
                {
                    for d in details(f) {
                        let _ = writeln!(s, "{:<9}{d}", "");
                    }
                }
            }
            _ => {
                hidden += 1;
                hidden_findings += g.findings;
            }
        }
    }
    if hidden > 0 {
        let _ = writeln!(
            s,
            "...    {hidden} more group(s) ({hidden_findings} findings) not shown (see the JSON \
             or HTML report)"
        );
    }
}
