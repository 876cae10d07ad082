//! The watched files in the audit: what changed between the fingerprints before and after the
//! agent's phase, and which rows of the run made each change.
//!
//! Every watched entry created, deleted, or changed in content, mode, owner or type is a
//! finding of its watch's class when rows of the agent's phase could have made it: a successful
//! write to its path (an open that writes, creates or truncates; a rename, link, unlink, chmod,
//! ...), or a rename or mount over a directory above it. The finding names the first such row's
//! process; `count` is how many rows. A change no row explains was made from outside the run (or
//! through another name, a hard link): it makes the record incomplete unless the watch says who
//! may make it (`outside`). An entry written and left as it was is reported as touched, not as a
//! change.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use aet_common::{EventKind, Syscall};

use super::batch::RowRef;
use super::finding::{Class, Finding, Outcome, WatchDetail};
use super::scanner::Scanner;
use crate::policy::{Policy, Severity, watch::Outside};
use aet_ledger::access::Accessed;
use aet_ledger::metadata::{Incomplete, LedgerMeta};
use aet_ledger::ppath::PPath;
use aet_ledger::watch::{Cost, Fingerprint, WatchRecord, diff, walk::Matcher};

/// The report's account of one watch.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WatchInfo {
    pub name: String,
    pub paths: Vec<String>,
    pub globs: Vec<String>,
    pub change: Severity,
    pub outside: Outside,
    /// Entries it matched before and after.
    pub before: usize,
    pub after: usize,
}

/// One snapshot, in short.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SnapshotInfo {
    pub taken_ns: i64,
    pub at: String,
    pub entries: usize,
    pub cost: Cost,
}

/// Who made a change.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum By {
    /// Rows of the run's agent phase.
    Run,
    /// No row of the run could have made it.
    Outside,
}

/// One watched entry that changed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WatchedChange {
    pub path: PPath,
    pub watches: Vec<String>,
    pub what: diff::What,
    pub detail: String,
    pub by: By,
    /// Rows of the run that could have made it.
    pub rows: u64,
    /// The first such row's process.
    pub pid: Option<u32>,
    pub comm: Option<String>,
    pub before: Option<Fingerprint>,
    pub after: Option<Fingerprint>,
}

/// A watched entry written and left as it was.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Touched {
    pub path: PPath,
    pub watches: Vec<String>,
    pub rows: u64,
    pub pid: Option<u32>,
    pub comm: Option<String>,
}

/// `audit.json`'s `watched`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WatchReport {
    pub view: String,
    pub watches: Vec<WatchInfo>,
    pub before: Option<SnapshotInfo>,
    pub after: Option<SnapshotInfo>,
    pub changes: Vec<WatchedChange>,
    pub touched: Vec<Touched>,
    /// Why the watched files could not be compared.
    pub error: Option<String>,
}

/// The rows that wrote one watched path.
struct Slot {
    rows: u64,
    first: Option<Finding>,
}

/// The pass's side of the watched files: every watched path (before or after), and the rows of
/// the agent's phase that wrote them.
pub(super) struct Attribution {
    record: WatchRecord,
    by_path: BTreeMap<Box<[u8]>, usize>,
    slots: Vec<Slot>,
    /// The tree watches' directories (their slots): a write below one is its change.
    trees: BTreeMap<Box<[u8]>, usize>,
}

/// Whether a row may have replaced what lies below its path (a directory renamed, or mounted
/// over).
fn replaces_below(kind: EventKind, syscall: Option<Syscall>) -> bool {
    kind == EventKind::Mount
        || matches!(
            syscall,
            Some(Syscall::Rename | Syscall::Renameat | Syscall::Renameat2)
        )
}

impl Attribution {
    /// `None` when the policy watches nothing, or the run fingerprinted nothing to compare.
    pub(super) fn new(policy: &Policy, meta: &LedgerMeta) -> Option<Self> {
        if policy.watches.is_empty() {
            return None;
        }
        let record = meta.watch.clone()?;
        let mut by_path = BTreeMap::new();
        let mut slots = Vec::new();
        let mut trees = BTreeMap::new();
        for s in [&record.before, &record.after].into_iter().flatten() {
            for f in &s.entries {
                let key: Box<[u8]> = f.path.as_path().as_os_str().as_encoded_bytes().into();
                let slot = *by_path.entry(key.clone()).or_insert_with(|| {
                    slots.push(Slot {
                        rows: 0,
                        first: None,
                    });
                    slots.len() - 1
                });
                if f.tree.is_some() && f.kind == aet_ledger::watch::Kind::Dir {
                    trees.insert(key, slot);
                }
            }
        }
        Some(Self {
            record,
            by_path,
            slots,
            trees,
        })
    }

    fn hit(&mut self, e: &Scanner<'_>, slot: usize, row: &RowRef<'_>, path: &[u8]) {
        let s = &mut self.slots[slot];
        s.rows += 1;
        if s.first.is_none() {
            s.first = Some(e.finding(
                Class::Warning,
                String::new(),
                Outcome::Hit,
                "write",
                super::batch::lossy(path),
                row,
            ));
        }
    }

    /// A successful row of the agent's phase: does it write a watched path (or replace a
    /// directory above one)?
    pub(super) fn row(
        &mut self,
        e: &Scanner<'_>,
        row: &RowRef<'_>,
        second: Option<&[u8]>,
        acc: Accessed,
        kind: EventKind,
        syscall: Option<Syscall>,
    ) {
        if self.slots.is_empty() {
            return;
        }
        let below = replaces_below(kind, syscall);
        let first = row.resolved.or(row.raw);
        for (p, a) in [(first, acc.first), (second, acc.second)] {
            let Some(p) = p else { continue };
            if !a.contains(aet_ledger::access::Access::Write) {
                continue;
            }
            if let Some(&slot) = self.by_path.get(p) {
                self.hit(e, slot, row, p);
            }
            if !self.trees.is_empty() {
                // A tree watch's directory above the path: its digest covers it.
                let mut at = p.len();
                while let Some(i) = p[..at].iter().rposition(|&c| c == b'/') {
                    if i == 0 {
                        break;
                    }
                    if let Some(&slot) = self.trees.get(&p[..i]) {
                        self.hit(e, slot, row, p);
                        break;
                    }
                    at = i;
                }
            }
            if below {
                let mut dir = p.to_vec();
                dir.push(b'/');
                let inside: Vec<usize> = self
                    .by_path
                    .range::<[u8], _>((
                        std::ops::Bound::Included(dir.as_slice()),
                        std::ops::Bound::Unbounded,
                    ))
                    .take_while(|(k, _)| k.starts_with(&dir))
                    .map(|(_, &s)| s)
                    .collect();
                for slot in inside {
                    self.hit(e, slot, row, p);
                }
            }
        }
    }

    /// The findings and the report, once the pass is done.
    pub(super) fn finish(self, policy: &Policy) -> (Vec<Finding>, WatchReport, Vec<Incomplete>) {
        let mut reasons = Vec::new();
        let rec = &self.record;
        let mut report = WatchReport {
            view: rec.view.clone(),
            watches: Vec::new(),
            before: rec.before.as_ref().map(info),
            after: rec.after.as_ref().map(info),
            changes: Vec::new(),
            touched: Vec::new(),
            error: rec.error.clone(),
        };
        let matcher = Matcher::new(&rec.resolved);
        for w in &policy.watches {
            let recorded = rec
                .resolved
                .watches
                .iter()
                .find(|r| r.name == w.name && r.paths == w.paths);
            let count = |s: &Option<aet_ledger::watch::Snapshot>| {
                let (Some(s), Ok(m), Some(r)) = (s, matcher.as_ref(), recorded) else {
                    return 0;
                };
                let wi = rec.resolved.watches.iter().position(|x| x == r);
                s.entries
                    .iter()
                    .filter(|f| wi.is_some_and(|wi| m.watches(f.path.as_path()).contains(&wi)))
                    .count()
            };
            report.watches.push(WatchInfo {
                name: w.name.clone(),
                paths: w.paths.clone(),
                globs: recorded.map(|r| r.globs.clone()).unwrap_or_default(),
                change: w.change,
                outside: w.outside,
                before: count(&rec.before),
                after: count(&rec.after),
            });
            if recorded.is_none() && rec.before.is_some() {
                reasons.push(Incomplete::NotFingerprinted {
                    why: format!(
                        "watch.{} was not fingerprinted by the run (the policy the run had \
                         watched other files)",
                        w.name
                    ),
                });
            }
        }
        let (Some(before), Some(after), Ok(matcher)) = (&rec.before, &rec.after, matcher) else {
            // The snapshots' own failure says more than a watch the record lacks.
            reasons.clear();
            reasons.push(Incomplete::NotFingerprinted {
                why: rec.error.clone().unwrap_or_else(|| {
                    "the watched files were not fingerprinted at the end of the agent's phase"
                        .into()
                }),
            });
            return (Vec::new(), report, reasons);
        };
        // The policy's watches by their index in the record.
        let watch_of: Vec<Option<&crate::policy::watch::Watch>> = rec
            .resolved
            .watches
            .iter()
            .map(|r| {
                policy
                    .watches
                    .iter()
                    .find(|w| w.name == r.name && w.paths == r.paths)
            })
            .collect();
        let (changes, touched) = diff::diff(before, after);
        let mut findings = Vec::new();
        let mut outside_paths = Vec::new();
        let slot_of = |p: &PPath| {
            self.by_path
                .get(p.as_path().as_os_str().as_encoded_bytes())
                .map(|&s| &self.slots[s])
        };
        let mut touched_paths: Vec<PPath> = touched;
        for (k, &s) in &self.by_path {
            if self.slots[s].rows > 0 {
                let p = PPath(std::path::PathBuf::from(
                    <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(k),
                ));
                if !changes.iter().any(|c| c.path == p) && !touched_paths.contains(&p) {
                    touched_paths.push(p);
                }
            }
        }
        touched_paths.sort();
        for c in changes {
            let ws: Vec<&crate::policy::watch::Watch> = matcher
                .watches(c.path.as_path())
                .into_iter()
                .filter_map(|i| watch_of.get(i).copied().flatten())
                .collect();
            if ws.is_empty() {
                continue;
            }
            let names: Vec<String> = ws.iter().map(|w| w.rule()).collect();
            let slot = slot_of(&c.path);
            let rows = slot.map_or(0, |s| s.rows);
            let first = slot.and_then(|s| s.first.clone());
            let mut detail = c.detail.clone();
            if let Some(f) = &first
                && c.before.iter().chain(&c.after).any(|x| x.tree.is_some())
                && f.path != c.path.as_path().to_string_lossy()
            {
                // A tree entry: the file below it that the run wrote.
                detail.push_str(&format!("; {} written below it", f.path));
            }
            if c.what == diff::What::Created
                && let Some(sh) = shadows(&c.path, &rec.resolved.path_dirs, after)
            {
                detail.push_str(&format!("; it comes before {sh} on the PATH"));
            }
            let by = if first.is_some() {
                By::Run
            } else {
                By::Outside
            };
            report.changes.push(WatchedChange {
                path: c.path.clone(),
                watches: names.clone(),
                what: c.what,
                detail: detail.clone(),
                by,
                rows,
                pid: first.as_ref().map(|f| f.pid),
                comm: first.as_ref().map(|f| f.comm.clone()),
                before: c.before.clone(),
                after: c.after.clone(),
            });
            let watch_detail = Some(Box::new(WatchDetail {
                what: c.what,
                detail,
                before: c.before,
                after: c.after,
            }));
            // The strongest of the watches that name it.
            let path_text = c.path.as_path().to_string_lossy().into_owned();
            let bytes = c.path.as_path().as_os_str().as_encoded_bytes();
            let path_hex = std::str::from_utf8(bytes)
                .is_err()
                .then(|| aet_ledger::util::hex(bytes));
            match first {
                Some(f) => {
                    let w = ws.iter().min_by_key(|w| w.change).expect("a watch");
                    findings.push(Finding {
                        class: Class::from(w.change),
                        rule: w.rule(),
                        access: std::borrow::Cow::Borrowed(c.what.name()),
                        path: path_text,
                        path_hex,
                        raw_path: None,
                        host_path: None,
                        count: rows,
                        watch: watch_detail,
                        ..f
                    });
                }
                None => {
                    let sev = ws.iter().filter_map(|w| w.outside.severity()).min();
                    let allowed = ws.iter().all(|w| w.outside == Outside::Allow);
                    if ws.iter().any(|w| w.outside == Outside::Inconclusive) {
                        outside_paths.push(path_text.clone());
                    }
                    if allowed {
                        continue;
                    }
                    let w = ws[0];
                    findings.push(Finding {
                        path_hex,
                        ..outside_finding(
                            sev.map_or(Class::Warning, Class::from),
                            w.rule(),
                            c.what.name(),
                            path_text,
                            after.taken_ns,
                            watch_detail,
                        )
                    });
                }
            }
        }
        for p in touched_paths {
            let ws: Vec<String> = matcher
                .watches(p.as_path())
                .into_iter()
                .filter_map(|i| watch_of.get(i).copied().flatten().map(|w| w.rule()))
                .collect();
            if ws.is_empty() {
                continue;
            }
            let slot = slot_of(&p);
            let first = slot.and_then(|s| s.first.as_ref());
            report.touched.push(Touched {
                path: p,
                watches: ws,
                rows: slot.map_or(0, |s| s.rows),
                pid: first.map(|f| f.pid),
                comm: first.map(|f| f.comm.clone()),
            });
        }
        if !outside_paths.is_empty() {
            reasons.push(Incomplete::ChangedOutside {
                files: outside_paths.len() as u64,
                example: outside_paths[0].clone(),
            });
        }
        (findings, report, reasons)
    }
}

fn info(s: &aet_ledger::watch::Snapshot) -> SnapshotInfo {
    SnapshotInfo {
        taken_ns: s.taken_ns,
        at: s.at.clone(),
        entries: s.entries.len(),
        cost: s.cost,
    }
}

/// For an entry created in a PATH directory: the entry of the same name in a later PATH
/// directory that it now comes before.
fn shadows(
    path: &PPath,
    path_dirs: &[PPath],
    after: &aet_ledger::watch::Snapshot,
) -> Option<String> {
    let p = path.as_path();
    let (dir, name) = (p.parent()?, p.file_name()?);
    let at = path_dirs.iter().position(|d| d.as_path() == dir)?;
    path_dirs[at + 1..].iter().find_map(|d| {
        let other = d.as_path().join(name);
        after
            .entries
            .iter()
            .any(|f| f.path.as_path() == other)
            .then(|| other.display().to_string())
    })
}

fn outside_finding(
    class: Class,
    rule: String,
    access: &'static str,
    path: String,
    ts: i64,
    watch: Option<Box<WatchDetail>>,
) -> Finding {
    Finding {
        class,
        rule,
        outcome: Outcome::Hit,
        access: std::borrow::Cow::Borrowed(access),
        path,
        path_hex: None,
        raw_path: None,
        host_path: None,
        errno: None,
        count: 0,
        first_seq: u64::MAX,
        first_ts_ns: ts,
        last_ts_ns: ts,
        pid: 0,
        uid: 0,
        comm: "(outside the run)".into(),
        exe: None,
        argv: None,
        ancestry: Vec::new(),
        tool_call: None,
        mentioned_in_transcript: None,
        reached: None,
        target_pid: None,
        phase: aet_ledger::metadata::FIRST_PHASE.into(),
        watch,
        provenance: None,
    }
}

/// One line for the terminal: what was fingerprinted, at what cost, and what changed.
pub fn summary(w: &WatchReport) -> String {
    let snap = |s: &Option<SnapshotInfo>| match s {
        Some(s) => format!(
            "{} entries at {} ({} hashed, {:.1} MB, {:.0} ms)",
            s.entries,
            s.at,
            s.cost.hashed_files,
            s.cost.hashed_bytes as f64 / 1e6,
            s.cost.ms
        ),
        None => "none".into(),
    };
    let outside = w.changes.iter().filter(|c| c.by == By::Outside).count();
    let mut t = format!(
        "{} watch(es) in the {} view; before: {}; after: {}; {} changed ({} by the run, {} from \
         outside it), {} touched",
        w.watches.len(),
        w.view,
        snap(&w.before),
        snap(&w.after),
        w.changes.len(),
        w.changes.len() - outside,
        outside,
        w.touched.len()
    );
    if let Some(e) = &w.error {
        t.push_str(&format!("; {e}"));
    }
    t
}
