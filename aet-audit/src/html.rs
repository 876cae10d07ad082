//! The HTML report: one self-contained file (no network at view time). The verdict, the process
//! tree (the processes that matter, the rest counted), a timeline of the flagged accesses, and a
//! filterable table of the findings' groups, each expandable to its findings (the first
//! [`GROUP_FINDINGS`] of each), are rendered into the page itself; a few lines of inline script
//! only filter the table. It stays small and fast at any size: `audit.json` has every finding.

use std::{collections::BTreeMap, fmt::Write as _};

use crate::{
    finding::{Finding, Outcome, Proc},
    reached::Reached,
    report::Report,
};

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const STYLE: &str = r#"
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}
header{padding:18px 24px;color:#fff}
header.clean{background:#1f7a3a}header.flagged{background:#9a6700}
header.disqualified{background:#b42318}header.inconclusive{background:#5b5f66}
header h1{margin:0;font-size:26px;letter-spacing:.02em}
header p{margin:4px 0 0;opacity:.9}
main{padding:16px 24px;max-width:1400px}
section{background:#fff;border:1px solid #d8dde3;border-radius:6px;padding:12px 16px;margin:0 0 16px}
h2{font-size:16px;margin:0 0 8px}
.counts span{display:inline-block;margin-right:18px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #eaeef2;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f0f2f5;position:sticky;top:0}
td.path{font-family:ui-monospace,Menlo,monospace;word-break:break-all}
tr.cheat td:first-child{border-left:4px solid #b42318}
tr.contaminant td:first-child,tr.out_of_scope td:first-child{border-left:4px solid #9a6700}
tr.warning td:first-child{border-left:4px solid #8c959f}
input,select{font:inherit;padding:4px 6px;margin:0 8px 8px 0}
ul.tree{list-style:none;padding-left:18px;margin:0;font-family:ui-monospace,Menlo,monospace;font-size:12px}
ul.tree li.flagged>span{color:#b42318;font-weight:600}
ul.tree li.setup>span{color:#8c959f}
.muted{color:#57606a}
svg text{font-size:11px;fill:#57606a}
"#;

const SCRIPT: &str = r#"
(function(){
  var q=document.getElementById('filter'),k=document.getElementById('kind'),n=document.getElementById('shown');
  var rows=Array.prototype.slice.call(document.querySelectorAll('#findings > tbody > tr'));
  function apply(){
    var t=q.value.toLowerCase(),c=k.value,shown=0;
    rows.forEach(function(r){
      var ok=(!c||r.className===c)&&(!t||r.textContent.toLowerCase().indexOf(t)>=0);
      r.hidden=!ok; if(ok)shown++;
    });
    n.textContent=shown+' of '+rows.length+' shown';
  }
  q.addEventListener('input',apply);k.addEventListener('change',apply);apply();
})();
"#;

fn class_of(kind: &str) -> &'static str {
    match kind {
        "cheat" => "cheat",
        "contaminant" => "contaminant",
        "out_of_scope" => "out_of_scope",
        "blocked" => "blocked",
        _ => "warning",
    }
}

fn finding_row(out: &mut String, kind: &str, f: &Finding, t0: i64) {
    let outcome = match f.outcome {
        Outcome::Hit => "hit",
        Outcome::Attempted => "attempted",
        Outcome::Probed => "probed",
        Outcome::Blocked => "blocked",
        Outcome::WouldBlock => "would be blocked",
    };
    let ancestry: Vec<String> = f
        .ancestry
        .iter()
        .map(|a| format!("{}[{}]", a.comm, a.pid))
        .collect();
    let argv = f.argv.as_ref().map(|a| a.join(" ")).unwrap_or_default();
    let tool = f
        .tool_call
        .as_ref()
        .map(|t| format!("{}: {}", t.tool, t.command.clone().unwrap_or_default()))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{} {}</td><td class=\"path\">{}</td>\
         <td>{}</td><td>{}[{}] <span class=\"muted\">uid {}</span><br><span class=\"muted\">{}</span></td>\
         <td class=\"muted\">{}</td><td>{:.3} s{}</td><td>{}</td><td class=\"muted\">{}</td></tr>",
        class_of(kind),
        esc(kind),
        esc(&f.rule),
        esc(&f.access),
        esc(outcome),
        esc(&match (f.reached, &f.watch) {
            (_, Some(w)) => format!("{} ({})", f.path, w.detail),
            _ if f.provenance.is_some() => format!(
                "{} ({})",
                f.path,
                f.provenance.as_ref().map(|p| p.text()).unwrap_or_default()
            ),
            (Some(r), _) if r != Reached::Path =>
                format!("{} (through an fd {})", f.path, r.text()),
            _ => f.path.clone(),
        }),
        esc(f.errno.as_deref().unwrap_or("")),
        esc(&f.comm),
        f.pid,
        f.uid,
        esc(&argv),
        esc(&ancestry.join(" < ")),
        (f.first_ts_ns - t0) as f64 / 1e9,
        if f.phase == aet_ledger::metadata::FIRST_PHASE {
            String::new()
        } else {
            format!("<br><span class=\"muted\">{}</span>", esc(&f.phase))
        },
        f.count,
        esc(&tool),
    );
}

/// Most processes the tree shows: those with a cheat or contaminant and their ancestors first,
/// then other flagged ones; the rest are counted.
const TREE_MAX: usize = 300;

/// The processes that matter: every one with a cheat or contaminant finding and its ancestors,
/// then other flagged processes (with theirs) while fewer than [`TREE_MAX`].
fn kept(r: &Report) -> std::collections::HashSet<u32> {
    let by_pid: std::collections::HashMap<u32, &Proc> =
        r.processes.iter().map(|p| (p.pid, p)).collect();
    let mut keep = std::collections::HashSet::new();
    let add = |pid: u32, keep: &mut std::collections::HashSet<u32>| {
        let mut cur = Some(pid);
        let mut guard = 0;
        while let Some(p) = cur.and_then(|c| by_pid.get(&c)) {
            if !keep.insert(p.pid) || guard > 256 {
                break;
            }
            guard += 1;
            cur = (p.ppid != p.pid).then_some(p.ppid);
        }
    };
    for f in r.cheat_hits.iter().chain(&r.contaminant_hits) {
        add(f.pid, &mut keep);
    }
    // The run's first processes: where the tree starts.
    for p in r
        .processes
        .iter()
        .filter(|p| !by_pid.contains_key(&p.ppid))
        .take(20)
    {
        add(p.pid, &mut keep);
    }
    for p in r.processes.iter().filter(|p| p.flagged) {
        if keep.len() >= TREE_MAX {
            break;
        }
        add(p.pid, &mut keep);
    }
    for p in &r.processes {
        if keep.len() >= TREE_MAX {
            break;
        }
        add(p.pid, &mut keep);
    }
    keep
}

fn tree(out: &mut String, all: &[Proc], keep: &std::collections::HashSet<u32>) {
    let procs: Vec<&Proc> = all.iter().filter(|p| keep.contains(&p.pid)).collect();
    let procs = procs.as_slice();
    let mut children: BTreeMap<u32, Vec<&Proc>> = BTreeMap::new();
    let pids: std::collections::HashSet<u32> = procs.iter().map(|p| p.pid).collect();
    let mut roots = Vec::new();
    for &p in procs {
        if pids.contains(&p.ppid) && p.ppid != p.pid {
            children.entry(p.ppid).or_default().push(p);
        } else {
            roots.push(p);
        }
    }
    fn walk(out: &mut String, p: &Proc, ch: &BTreeMap<u32, Vec<&Proc>>, depth: usize) {
        let cls = if p.flagged {
            " class=\"flagged\""
        } else if p.setup {
            " class=\"setup\""
        } else {
            ""
        };
        let mark = if p.flagged { "&#9873; " } else { "" };
        let what = p
            .argv
            .as_ref()
            .map(|a| a.join(" "))
            .or_else(|| p.exe.clone())
            .unwrap_or_default();
        let _ = write!(
            out,
            "<li{cls}><span>{mark}{}[{}]</span> <span class=\"muted\">{}{}</span>",
            esc(&p.comm),
            p.pid,
            esc(&what.chars().take(160).collect::<String>()),
            if p.setup { " (aet set-up)" } else { "" }
        );
        if let Some(kids) = ch.get(&p.pid)
            && depth < 64
        {
            out.push_str("<ul class=\"tree\">");
            for k in kids {
                walk(out, k, ch, depth + 1);
            }
            out.push_str("</ul>");
        }
        out.push_str("</li>\n");
    }
    out.push_str("<ul class=\"tree\">");
    for r in roots {
        walk(out, r, &children, 0);
    }
    out.push_str("</ul>");
    if all.len() > procs.len() {
        let _ = write!(
            out,
            "<p class=\"muted\">{} more process(es) of the run not shown: none has a cheat or \
             contaminant (audit.json lists every process).</p>",
            all.len() - procs.len()
        );
    }
}

fn timeline(out: &mut String, lists: &[(&str, &[Finding])], t0: i64, t1: i64) {
    let w = 1000.0;
    let lane = 26.0;
    let span = ((t1 - t0).max(1)) as f64;
    let h = lane * lists.len() as f64 + 24.0;
    let _ = write!(
        out,
        "<svg viewBox=\"0 0 {} {h}\" width=\"100%\" role=\"img\" aria-label=\"timeline of flagged accesses\">",
        w + 130.0
    );
    for (i, (label, list)) in lists.iter().enumerate() {
        let y = lane * i as f64 + 14.0;
        let _ = write!(
            out,
            "<text x=\"0\" y=\"{}\">{}</text><line x1=\"120\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\" stroke=\"#d8dde3\"/>",
            y + 4.0,
            esc(label),
            w + 120.0
        );
        let color = match *label {
            "cheats" => "#b42318",
            "warnings" => "#8c959f",
            _ => "#9a6700",
        };
        for f in list.iter().take(2000) {
            let x = 120.0 + w * ((f.first_ts_ns - t0) as f64 / span);
            let _ = write!(
                out,
                "<circle cx=\"{x:.1}\" cy=\"{y}\" r=\"5\" fill=\"{color}\"><title>{} {} {} by {}[{}]</title></circle>",
                esc(&f.rule),
                esc(&f.access),
                esc(&f.path),
                esc(&f.comm),
                f.pid
            );
        }
    }
    let _ = write!(
        out,
        "<text x=\"120\" y=\"{}\">0 s</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.3} s</text></svg>",
        h - 4.0,
        w + 120.0,
        h - 4.0,
        span / 1e9
    );
}

/// Findings shown under each group (every one is in `audit.json`).
pub const GROUP_FINDINGS: usize = 25;
/// Top-level groups shown (the largest of each list first; cheats and contaminants always).
const GROUPS_SHOWN: usize = 1000;
/// Path groups shown under a directory group.
const DIR_MEMBERS: usize = 100;

const FINDING_HEAD: &str = "<thead><tr><th>class</th><th>rule</th><th>access</th><th>path</th>\
    <th>errno</th><th>process</th><th>ancestry</th><th>at</th><th>rows</th><th>tool call</th>\
    </tr></thead>";

fn group_kind(g: &super::groups::Group) -> &'static str {
    match g.list.as_str() {
        "cheat_hits" => "cheat",
        "contaminant_hits" => "contaminant",
        "out_of_scope" => "out_of_scope",
        "blocked" => "blocked",
        _ => "warning",
    }
}

/// The groups' table: a row a group (its class, rule, access, path or directory, rows,
/// processes, first process, first and last time), each expandable to its findings (or a
/// directory's paths).
fn groups(o: &mut String, r: &Report, t0: i64) {
    let lists = r.finding_lists();
    let list_of = |name: &str| {
        lists
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, l)| *l)
            .unwrap_or_default()
    };
    let top: Vec<&super::groups::Group> = r.groups.iter().filter(|g| g.parent.is_none()).collect();
    let nfind: usize = lists.iter().take(4).map(|(_, l)| l.len()).sum();
    let _ = writeln!(
        o,
        "<section id=\"groups\"><h2>Flagged accesses: {} groups of {} findings</h2>\
         <input id=\"filter\" type=\"search\" placeholder=\"filter: path, process, rule...\" aria-label=\"filter\">\
         <select id=\"kind\" aria-label=\"class\"><option value=\"\">all classes</option><option value=\"cheat\">cheats</option>\
         <option value=\"contaminant\">contaminants</option><option value=\"out_of_scope\">out of scope</option><option value=\"warning\">warnings</option></select>\
         <span id=\"shown\" class=\"muted\"></span>\
         <table id=\"findings\"><thead><tr><th>class</th><th>rule</th><th>access</th><th>path</th>\
         <th>rows</th><th>processes</th><th>first by</th><th>at</th></tr></thead><tbody>",
        top.len(),
        nfind
    );
    let mut shown = 0;
    for g in &top {
        let always = matches!(g.list.as_str(), "cheat_hits" | "contaminant_hits");
        if g.list == "blocked" || (!always && shown >= GROUPS_SHOWN) {
            continue;
        }
        shown += 1;
        let kind = group_kind(g);
        let mut inner = String::new();
        if g.dir {
            inner.push_str("<table><thead><tr><th>path</th><th>rows</th><th>processes</th><th>first by</th></tr></thead><tbody>");
            for &m in g.members.iter().take(DIR_MEMBERS) {
                let p = &r.groups[m];
                let _ = write!(
                    inner,
                    "<tr><td class=\"path\">{}</td><td>{}</td><td>{}</td><td>{}[{}]</td></tr>",
                    esc(&p.path),
                    p.rows,
                    p.processes,
                    esc(&p.first.comm),
                    p.first.pid
                );
            }
            if g.members.len() > DIR_MEMBERS {
                let _ = write!(
                    inner,
                    "<tr><td colspan=\"4\" class=\"muted\">{} more paths in audit.json</td></tr>",
                    g.members.len() - DIR_MEMBERS
                );
            }
            inner.push_str("</tbody></table>");
        } else {
            let findings = list_of(&g.list);
            let _ = write!(inner, "<table>{FINDING_HEAD}<tbody>");
            for &fi in g.members.iter().take(GROUP_FINDINGS) {
                finding_row(&mut inner, kind, &findings[fi], t0);
            }
            if g.members.len() > GROUP_FINDINGS {
                let _ = write!(
                    inner,
                    "<tr><td colspan=\"10\" class=\"muted\">{} more findings in audit.json</td></tr>",
                    g.members.len() - GROUP_FINDINGS
                );
            }
            inner.push_str("</tbody></table>");
        }
        let path = if g.dir {
            format!("{}/ ({} files)", g.path, g.paths)
        } else {
            g.path.clone()
        };
        let _ = writeln!(
            o,
            "<tr class=\"{kind}\"><td>{}</td><td>{}</td><td>{} {}</td><td class=\"path\">\
             <details><summary>{}</summary>{inner}</details></td><td>{}</td><td>{}</td>\
             <td>{}[{}] <span class=\"muted\">{}</span></td><td>{:.3}&ndash;{:.3} s{}</td></tr>",
            esc(kind),
            esc(&g.rule),
            esc(&g.access),
            esc(g.outcome.name()),
            esc(&path),
            g.rows,
            g.processes,
            esc(&g.first.comm),
            g.first.pid,
            esc(&g
                .first
                .argv
                .as_ref()
                .map(|a| a.join(" "))
                .unwrap_or_default()
                .chars()
                .take(120)
                .collect::<String>()),
            (g.first_ts_ns - t0) as f64 / 1e9,
            (g.last_ts_ns - t0) as f64 / 1e9,
            if g.phase == aet_ledger::metadata::FIRST_PHASE {
                String::new()
            } else {
                format!("<br><span class=\"muted\">{}</span>", esc(&g.phase))
            },
        );
    }
    o.push_str("</tbody></table>");
    let hidden = top
        .iter()
        .filter(|g| g.list != "blocked")
        .count()
        .saturating_sub(shown);
    if hidden > 0 {
        let _ = write!(
            o,
            "<p class=\"muted\">{hidden} smaller groups not shown: audit.json has every group and finding.</p>"
        );
    }
    o.push_str("</section>\n");
}

/// Provenance: for each phase judged by it, what it loaded that an earlier phase wrote, the
/// process that loaded each file beside the one that wrote it.
fn provenance(o: &mut String, r: &Report, t0: i64) {
    let _ = write!(
        o,
        "<section id=\"provenance\"><h2>What a later phase loaded that an earlier one wrote</h2>"
    );
    for p in &r.provenance {
        let _ = write!(o, "<p>{}</p>", esc(&super::provenance::summary(p)));
    }
    let found: Vec<&Finding> = r
        .finding_lists()
        .into_iter()
        .flat_map(|(_, l)| l.iter())
        .filter(|f| f.provenance.is_some())
        .collect();
    if !found.is_empty() {
        o.push_str(
            "<table><thead><tr><th>class</th><th>loaded</th><th>where</th>\
             <th>loaded by</th><th>written by</th></tr></thead><tbody>",
        );
        for f in found.iter().take(GROUP_FINDINGS * 20) {
            let d = f.provenance.as_ref().expect("filtered");
            let writers: Vec<String> = d
                .steps
                .iter()
                .map(|s| {
                    format!(
                        "{}{} by {} in {} at {:.3} s",
                        s.how,
                        s.from
                            .as_deref()
                            .map(|x| format!(" from {x}"))
                            .unwrap_or_default(),
                        crate::finding::chain(&s.comm, s.pid, &s.ancestry),
                        s.phase,
                        (s.ts_ns - t0) as f64 / 1e9
                    )
                })
                .collect();
            let _ = write!(
                o,
                "<tr class=\"{}\"><td>{}</td><td class=\"path\">{}</td><td>{}{}</td>\
                 <td>{} in {} at {:.3} s{}</td><td>{}</td></tr>",
                class_of(f.class.name()),
                esc(f.class.name()),
                esc(&f.path),
                esc(d.place.words()),
                if d.judged != f.path {
                    format!("<br><span class=\"muted\">as {}</span>", esc(&d.judged))
                } else {
                    String::new()
                },
                esc(&crate::finding::who(f)),
                esc(&f.phase),
                (f.first_ts_ns - t0) as f64 / 1e9,
                if f.count > 1 {
                    format!(" x{}", f.count)
                } else {
                    String::new()
                },
                esc(&writers.join("; then ")),
            );
        }
        o.push_str("</tbody></table>");
    }
    o.push_str("</section>\n");
}

/// The watched files: what was fingerprinted, every change with who made it, what was touched.
fn watched(o: &mut String, w: &super::watched::WatchReport) {
    let _ = write!(
        o,
        "<section id=\"watched\"><h2>Watched files</h2><p>{}</p>\
         <table><thead><tr><th>path</th><th>watch</th><th>change</th><th>by</th><th>process</th>\
         <th>rows</th></tr></thead><tbody>",
        esc(&super::watched::summary(w))
    );
    for c in &w.changes {
        let _ = write!(
            o,
            "<tr class=\"{}\"><td class=\"path\">{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td></tr>",
            if c.by == super::watched::By::Run {
                "cheat"
            } else {
                "warning"
            },
            esc(&c.path.as_path().to_string_lossy()),
            esc(&c.watches.join(", ")),
            esc(&c.detail),
            if c.by == super::watched::By::Run {
                "the run"
            } else {
                "outside the run"
            },
            esc(&match (&c.comm, c.pid) {
                (Some(n), Some(p)) => format!("{n}[{p}]"),
                _ => String::new(),
            }),
            c.rows
        );
    }
    o.push_str("</tbody></table>");
    if !w.touched.is_empty() {
        let _ = write!(
            o,
            "<p>Written and left as they were ({}):</p><ul>",
            w.touched.len()
        );
        for t in &w.touched {
            let _ = write!(
                o,
                "<li><code>{}</code> {}</li>",
                esc(&t.path.as_path().to_string_lossy()),
                esc(&match (&t.comm, t.pid) {
                    (Some(n), Some(p)) => format!("by {n}[{p}], {} row(s)", t.rows),
                    _ => "(its change time moved; no row of the run wrote it)".into(),
                })
            );
        }
        o.push_str("</ul>");
    }
    o.push_str("</section>\n");
}

pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let verdict = r.verdict.name();
    let t0 = r.processes.iter().map(|p| p.first_ts_ns).min().unwrap_or(0);
    let t1 = [
        &r.cheat_hits,
        &r.contaminant_hits,
        &r.out_of_scope,
        &r.warnings,
    ]
    .iter()
    .flat_map(|l| l.iter().map(|f| f.first_ts_ns))
    .chain(r.run.ended_ns)
    .max()
    .unwrap_or(t0 + 1);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>aet audit: {}</title><style>{STYLE}</style></head><body>\n",
        esc(verdict)
    );
    let command = aet_ledger::util::shell_words(&r.run.command);
    let _ = write!(
        o,
        "<header class=\"{verdict}\"><h1 id=\"verdict\">Verdict: {}</h1><p>{} &middot; disqualified: {} &middot; isolation clean: {} &middot; record complete: {}</p></header>\n<main>\n",
        esc(&verdict.to_uppercase()),
        esc(&command),
        r.disqualified,
        r.isolation_clean,
        r.complete
    );
    let _ = write!(
        o,
        "<section><h2>Run</h2><div class=\"counts\"><span>ledger <code>{}</code></span><span>policy <code>{}</code></span></div>\
         <div class=\"counts\"><span>{} rows</span><span>{} of aet's set-up left out</span><span>{} distinct paths</span><span>{} processes</span></div>\
         <div class=\"counts\"><span><b>{}</b> cheat hits</span><span><b>{}</b> contaminants</span><span><b>{}</b> out of scope</span><span><b>{}</b> warnings</span></div>",
        esc(&r.ledger.display().to_string()),
        esc(&r.policy.display().to_string()),
        r.counts.rows,
        r.counts.setup_rows,
        r.counts.distinct_paths,
        r.counts.processes,
        r.cheat_hits.len(),
        r.contaminant_hits.len(),
        r.out_of_scope.len(),
        r.warnings.len()
    );
    if !r.incomplete_reasons.is_empty() {
        o.push_str("<p><b>The record is incomplete:</b></p><ul>");
        for reason in &r.incomplete_reasons {
            let _ = write!(o, "<li>{}</li>", esc(reason));
        }
        o.push_str("</ul>");
    }
    if let Some(ov) = &r.run.overload {
        let _ = write!(o, "<p>Overload: {}</p>", esc(&ov.text()));
    }
    if !r.unused_rules.is_empty() {
        let _ = write!(
            o,
            "<p class=\"muted\">Rules that matched nothing (typos?): {}</p>",
            esc(&r.unused_rules.join(", "))
        );
    }
    if let Some(t) = &r.transcripts
        && let Some(h) = &t.headline
    {
        let _ = write!(o, "<p><b>Headline:</b> {}</p>", esc(h));
    }
    o.push_str("</section>\n");

    let lists: [(&str, &[Finding]); 4] = [
        ("cheats", &r.cheat_hits),
        ("contaminants", &r.contaminant_hits),
        ("out of scope", &r.out_of_scope),
        ("warnings", &r.warnings),
    ];
    o.push_str("<section><h2>Timeline of flagged accesses</h2>");
    timeline(&mut o, &lists, t0, t1);
    o.push_str("</section>\n");

    groups(&mut o, r, t0);

    if let Some(w) = &r.watched {
        watched(&mut o, w);
    }
    if !r.provenance.is_empty() {
        provenance(&mut o, r, t0);
    }

    if let Some(b) = &r.barrier {
        let _ = write!(
            o,
            "<section><h2>Barrier ({})</h2><p>{} Landlock rules built from the policy's allow-lists{}; \
             {} file(s) left out of them: {}.</p>",
            esc(b.mode.name()),
            b.rules,
            b.enforced
                .as_ref()
                .map(|e| format!(", {} (ABI {})", esc(e), b.abi))
                .unwrap_or_else(|| ", built and not applied (shadow)".into()),
            b.excluded.len(),
            esc(&b.excluded.join(", "))
        );
        let what = if b.enforced.is_some() {
            "Blocked"
        } else {
            "Would be blocked"
        };
        let _ = write!(
            o,
            "<h3>{what}: {}</h3><table><thead><tr><th>class</th><th>rule</th><th>access</th><th>path</th><th>errno</th><th>process</th><th>ancestry</th><th>at</th><th>rows</th><th>tool call</th></tr></thead><tbody>",
            r.blocked.len()
        );
        for f in r.blocked.iter().take(GROUP_FINDINGS * 20) {
            finding_row(&mut o, "blocked", f, t0);
        }
        if r.blocked.len() > GROUP_FINDINGS * 20 {
            let _ = write!(
                o,
                "<tr><td colspan=\"10\" class=\"muted\">{} more in audit.json</td></tr>",
                r.blocked.len() - GROUP_FINDINGS * 20
            );
        }
        o.push_str("</tbody></table></section>\n");
    }

    o.push_str("<section><h2>Process tree</h2><p class=\"muted\">&#9873; marks a process with a cheat, contaminant or out-of-scope access; grey: aet's own set-up.</p>");
    tree(&mut o, &r.processes, &kept(r));
    o.push_str("</section>\n");

    let _ = writeln!(o, "</main><script>{SCRIPT}</script></body></html>");
    o
}
