//! Phases: which rows each phase holds, and the processes that outlive their phase.
//!
//! A run is `agent` first; the harness marks later phases (`grading`, ...) with `aet phase`.
//! A process started in an earlier phase that acts in a later one (a background job the agent
//! left, rewriting results while the grader runs) is a finding of `[processes] lingering` (a
//! cheat by default); one that is only still alive then (its exit is in the later phase) is a
//! warning. The run's own first process and the pids the harness named with `--keep` (its
//! container's init, say) are exempt.

use arrow_array::Array as _;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

use aet_common::EventKind;

use super::batch::{BatchCols, RowRef};
use super::finding::{Class, Outcome};
use super::{batch::lossy, scanner::Scanner};
use aet_ledger::metadata::{FIRST_PHASE, PhaseRecord};

/// One phase as the report shows it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PhaseInfo {
    pub name: String,
    /// Wall-clock start (ns since the Unix epoch), when the ledger's footer lists the phase.
    pub started_ns: Option<i64>,
    /// Rows of the phase.
    pub rows: u64,
    /// The policy section that judged its rows (`policy` for the top level, `phases.NAME`),
    /// or none: the phase was recorded and reported, not judged.
    pub judged_by: Option<String>,
    /// Pids the harness said may stay alive into the phase.
    #[serde(default)]
    pub keep: Vec<u32>,
}

/// The rule name of findings about processes that outlive their phase.
pub const LINGERING_RULE: &str = "processes.lingering";

/// The phases seen so far, in order, and what each process started in.
pub(super) struct Phases {
    /// Phase names in order: the footer's, then any a row names that it does not.
    order: Vec<Vec<u8>>,
    rows: Vec<u64>,
    /// Index in `order` of the last row's phase (rows of one phase come together).
    last: usize,
    /// Pids exempt in each phase (by index): the harness's `keep`.
    keep: Vec<FxHashSet<u32>>,
    /// The phase each process started in.
    born: FxHashMap<u32, usize>,
    /// Processes reported, with their finding's index: one finding per process and kind.
    acted: FxHashMap<u32, usize>,
    alive: FxHashMap<u32, usize>,
}

impl Phases {
    pub(super) fn new(records: &[PhaseRecord]) -> Self {
        let mut p = Phases {
            order: Vec::new(),
            rows: Vec::new(),
            last: 0,
            keep: Vec::new(),
            born: FxHashMap::default(),
            acted: FxHashMap::default(),
            alive: FxHashMap::default(),
        };
        p.index(FIRST_PHASE.as_bytes());
        for r in records {
            let i = p.index(r.name.as_bytes());
            p.keep[i].extend(r.keep.iter().copied());
        }
        p
    }

    fn index(&mut self, name: &[u8]) -> usize {
        if self.order.get(self.last).is_some_and(|n| n == name) {
            return self.last;
        }
        let i = match self.order.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                self.order.push(name.to_vec());
                self.rows.push(0);
                self.keep.push(FxHashSet::default());
                self.order.len() - 1
            }
        };
        self.last = i;
        i
    }

    /// Row `i`: counted in its phase; a process's start noted; a process of an earlier phase
    /// acting (or exiting) in this one reported.
    pub(super) fn row(
        &mut self,
        e: &mut Scanner<'_>,
        c: &BatchCols<'_>,
        i: usize,
        kind: Option<EventKind>,
    ) {
        let k = self.index(c.phase(i));
        self.rows[k] += 1;
        let pid = c.pid.value(i);
        let born = *self.born.entry(pid).or_insert(k);
        if kind == Some(EventKind::Fork) && c.child.is_valid(i) {
            // A child inherits its parent's start: a job the agent left cannot hide its work
            // in children it forks later.
            let exempt = self.exempt(e, pid, k);
            self.born
                .entry(c.child.value(i))
                .or_insert(if exempt { k } else { born });
        }
        if born >= k || self.exempt(e, pid, k) || e.procs.get(&pid).is_some_and(|p| p.setup) {
            return;
        }
        let acts = kind != Some(EventKind::Exit);
        if !acts && self.acted.contains_key(&pid) {
            return;
        }
        let seen = if acts {
            &mut self.acted
        } else {
            &mut self.alive
        };
        if let Some(&f) = seen.get(&pid) {
            e.findings[f].count += 1;
            e.findings[f].last_ts_ns = c.ts.value(i);
            return;
        }
        let class = if acts {
            match e.policy.lingering {
                None => return,
                Some(sev) => Class::from(sev),
            }
        } else {
            Class::Warning
        };
        let row = RowRef::new(c, i, pid, kind, true).at_path();
        let what = match (acts, kind) {
            (false, _) => "alive",
            (true, Some(k)) => k.name(),
            (true, None) => "row",
        };
        let from = String::from_utf8_lossy(&self.order[born]).into_owned();
        let shown = match row.resolved.or(row.raw) {
            Some(p) if acts => lossy(p),
            _ => e
                .procs
                .get(&pid)
                .and_then(|p| p.exe.clone())
                .unwrap_or_else(|| lossy(c.comm.value(i))),
        };
        let mut f = e.finding(
            class,
            LINGERING_RULE.into(),
            Outcome::Hit,
            what,
            format!("{shown} (started in {from})"),
            &row,
        );
        f.phase = String::from_utf8_lossy(&self.order[k]).into_owned();
        if class.marks_process()
            && let Some(p) = e.procs.get_mut(&pid)
        {
            p.flagged = true;
        }
        seen.insert(pid, e.findings.len());
        e.findings.push(f);
    }

    /// The index of the last row's phase (in the order phases appeared).
    pub(super) fn current(&self) -> usize {
        self.last
    }

    fn exempt(&self, e: &Scanner<'_>, pid: u32, phase: usize) -> bool {
        e.tally.root_pid == Some(pid) || self.keep[..=phase].iter().any(|k| k.contains(&pid))
    }

    /// The phases in order with their rows (those the footer lists even when they hold none).
    pub(super) fn infos(&self, records: &[PhaseRecord]) -> Vec<PhaseInfo> {
        self.order
            .iter()
            .zip(&self.rows)
            .enumerate()
            .map(|(k, (name, rows))| {
                let name = String::from_utf8_lossy(name).into_owned();
                let rec = records.iter().find(|r| r.name == name);
                let mut keep: Vec<u32> = self.keep[k].iter().copied().collect();
                keep.sort_unstable();
                PhaseInfo {
                    started_ns: rec.map(|r| r.started_ns),
                    name,
                    rows: *rows,
                    judged_by: None,
                    keep,
                }
            })
            .collect()
    }

    /// The phases that hold rows.
    pub(super) fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.order
            .iter()
            .zip(&self.rows)
            .filter(|(_, r)| **r > 0)
            .map(|(n, _)| n.as_slice())
    }
}
