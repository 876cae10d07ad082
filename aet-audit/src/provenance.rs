//! Provenance: what a later phase (the grader) loaded that an earlier phase (the agent) wrote.
//!
//! One pass over every row of every phase keeps, for each name and each file identity, the last
//! row that produced what is there: written, truncated, renamed or linked onto the name, a
//! symlink made at it, a directory renamed or mounted over one above it, or a copy (a process
//! that read a file and then wrote one carries what it read). A phase with
//! `[phases.NAME.provenance]` that opens for reading, executes or maps a file whose content an
//! earlier phase produced gets a finding naming the file, the writer (process, phase, time, how)
//! and the process that loaded it, classed by where the file lies: inside the solution (no
//! finding), inside the task repository outside it, new in the repository, or outside it.
//!
//! Bytecode the interpreter compiled from a source it had just read (`__pycache__/X.*.pyc`
//! after `X.py`) carries the source's provenance, not its writer's: an agent that ran the tests
//! leaves bytecode of files it never changed, which is no finding. What that does not cover is
//! said in docs/limits.md.
//!
//! Nothing here may make a run look cleaner than its record: a load whose place cannot be
//! told (the repository's tracked files unknown) leaves the record incomplete.

use std::{
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
};

use arrow_array::Array as _;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use aet_common::{EventKind, Syscall};

use super::batch::RowRef;
use super::batch::lossy;
use super::finding::{Ancestor, Class, Finding, Outcome, ProvenanceDetail, Step};
use super::scanner::Scanner;
use crate::policy::{
    Policy,
    provenance::{Place, Provenance},
};
use aet_ledger::access::Access;
use aet_ledger::metadata::{Incomplete, LedgerMeta};
use aet_ledger::watch::gitindex::Tracked;

/// How a producer put content at its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    Written,
    Truncated,
    /// Renamed onto the name from the path `from` (a path id).
    Renamed {
        from: u32,
    },
    Linked {
        from: u32,
    },
    /// A symlink made at the name.
    Symlinked,
    /// A mount over the directory.
    Mounted,
    /// Written by a process that had just read `from`.
    Copied {
        from: u32,
    },
    /// Bytecode compiled from the source `from`.
    Compiled {
        from: u32,
    },
}

/// One row that produced content at a name.
struct Producer {
    phase: usize,
    pid: u32,
    seq: u64,
    ts_ns: i64,
    path: u32,
    how: How,
    /// The producer of what was renamed, linked, copied or compiled.
    origin: Option<u32>,
}

/// A process's last read: the path, and the producer of what it read.
#[derive(Clone, Copy)]
struct LastRead {
    path: u32,
    producer: Option<u32>,
}

/// A task repository: its root and what it tracked at the start.
struct Repo {
    root: Vec<u8>,
    tracked: Result<Tracked, String>,
}

/// One phase's account in `audit.json`'s `provenance`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PhaseProvenance {
    pub phase: String,
    /// The task repositories it was judged by.
    pub repositories: Vec<String>,
    /// Loaded files an earlier phase produced, by place (`solution`, `repository`, `new`,
    /// `outside`, `allowed`); rows, not distinct files.
    pub loaded: std::collections::BTreeMap<String, u64>,
    /// Distinct files of each place.
    pub files: std::collections::BTreeMap<String, u64>,
    /// Loads whose place could not be told.
    pub unjudged: u64,
}

/// The pass's side of provenance.
pub(super) struct Tracker {
    /// The phases' sections, by name.
    named: Vec<(String, Provenance)>,
    /// Each phase's section (in `named`) by phase index, looked up as phases appear.
    sections: Vec<Option<usize>>,
    repos: Vec<Repo>,
    producers: Vec<Producer>,
    by_name: FxHashMap<u32, u32>,
    by_ident: FxHashMap<(u64, u64), u32>,
    /// Directories renamed or mounted over: what is below them came from elsewhere.
    replaced: FxHashMap<u32, u32>,
    last_read: FxHashMap<u32, LastRead>,
    /// The Python sources each process read (what bytecode it writes may be compiled from).
    sources_read: FxHashMap<u32, rustc_hash::FxHashSet<u32>>,
    /// Findings by (loader pid, loaded path id).
    index: FxHashMap<(u32, u32), usize>,
    findings: Vec<Finding>,
    /// Each judged path's place (and repository) by section: globs matched once per path.
    placed: FxHashMap<(usize, u32), (Option<Place>, Option<String>)>,
    /// Files seen per (phase index, place) and their rows.
    seen: FxHashMap<(usize, Place, u32), ()>,
    accounts: Vec<PhaseProvenance>,
    unjudged: Vec<(String, String)>,
    phase_names: Vec<String>,
}

impl Tracker {
    /// `None` when no phase of the policy is judged by provenance.
    pub(super) fn new(policy: &Policy, meta: &LedgerMeta) -> Option<Self> {
        if !policy.phases.values().any(|p| p.provenance.is_some()) {
            return None;
        }
        let recorded = meta.watch.as_ref().map(|w| &w.resolved);
        let mut repos: Vec<Repo> = Vec::new();
        let mut add = |root: &Path| {
            let root = root.as_os_str().as_bytes().to_vec();
            if repos.iter().any(|r| r.root == root) {
                return;
            }
            let tracked = recorded
                .and_then(|r| {
                    r.tracked
                        .iter()
                        .find(|t| t.root.as_path().as_os_str().as_bytes() == root.as_slice())
                })
                .map(|t| match &t.error {
                    Some(e) => Err(e.clone()),
                    None => Ok(Tracked {
                        paths: t
                            .files
                            .iter()
                            .map(|f| f.as_path().as_os_str().as_bytes().to_vec())
                            .collect(),
                    }),
                })
                .unwrap_or_else(|| Err("the run did not record what it tracked".into()));
            repos.push(Repo { root, tracked });
        };
        let named: Vec<&Path> = policy
            .phases
            .values()
            .filter_map(|p| p.provenance.as_ref())
            .flat_map(|p| p.repositories.iter().map(PathBuf::as_path))
            .collect();
        if named.is_empty() {
            for a in recorded.iter().flat_map(|r| &r.anchors) {
                add(a.as_path());
            }
        } else {
            for r in named {
                add(r);
            }
        }
        Some(Self {
            named: policy
                .phases
                .iter()
                .filter_map(|(n, p)| p.provenance.clone().map(|v| (n.clone(), v)))
                .collect(),
            sections: Vec::new(),
            repos,
            producers: Vec::new(),
            by_name: FxHashMap::default(),
            by_ident: FxHashMap::default(),
            replaced: FxHashMap::default(),
            last_read: FxHashMap::default(),
            sources_read: FxHashMap::default(),
            placed: FxHashMap::default(),
            index: FxHashMap::default(),
            findings: Vec::new(),
            seen: FxHashMap::default(),
            accounts: Vec::new(),
            unjudged: Vec::new(),
            phase_names: Vec::new(),
        })
    }

    /// The section of phase `k` (named `name`), if it has one (its index in `named`).
    fn section(&mut self, k: usize, name: &[u8]) -> Option<usize> {
        while self.sections.len() <= k {
            self.sections.push(None);
            self.phase_names.push(String::new());
        }
        if self.phase_names[k].is_empty() {
            self.phase_names[k] = lossy(name);
            self.sections[k] = self
                .named
                .iter()
                .position(|(n, _)| *n == self.phase_names[k]);
            if self.sections[k].is_some() {
                self.accounts.push(PhaseProvenance {
                    phase: self.phase_names[k].clone(),
                    repositories: self.repos.iter().map(|r| lossy(&r.root)).collect(),
                    ..PhaseProvenance::default()
                });
            }
        }
        self.sections[k]
    }

    /// A row of a process of the run (not aet's or a runtime's set-up), in phase `k`.
    pub(super) fn row(&mut self, e: &mut Scanner<'_>, row: &RowRef<'_>, k: usize) {
        let RowRef {
            c,
            i,
            pid,
            ok,
            file: ident,
            ..
        } = *row;
        let Some(kind) = row.kind.filter(|_| ok) else {
            return;
        };
        let fields = row.fields();
        let p1 = c
            .resolved
            .get(i)
            .or_else(|| c.path.get(i).filter(|p| p.starts_with(b"/")));
        let Some(p1) = p1 else { return };
        let phase_name = c.phase(i);
        let section = self.section(k, phase_name);
        match kind {
            EventKind::Open | EventKind::Mmap | EventKind::Exec => {
                let acc = aet_ledger::access::classify(kind, &fields);
                let name = e.path_id(p1);
                if acc.first.contains(Access::Write) {
                    let trunc = kind == EventKind::Open
                        && c.flags.is_valid(i)
                        && c.flags.value(i) & libc::O_TRUNC as u32 != 0;
                    let how = if trunc { How::Truncated } else { How::Written };
                    self.produce(e, row, k, name, how);
                } else if acc.first.contains(Access::Read) || acc.first.contains(Access::Exec) {
                    let raw = c
                        .path
                        .get(i)
                        .filter(|r| r.starts_with(b"/") && *r != p1)
                        .map(|r| e.path_id(r));
                    let found = self.lookup(e, name, raw, ident);
                    if p1.ends_with(b".py") {
                        self.sources_read.entry(pid).or_default().insert(name);
                    }
                    self.last_read.insert(
                        pid,
                        LastRead {
                            path: name,
                            producer: found,
                        },
                    );
                    if let (Some(q), Some(sec)) = (found, section) {
                        self.load(e, row, k, sec, name, q);
                    }
                }
            }
            EventKind::Io => {
                let (_, written) = aet_ledger::access::RowFields::bytes(&fields);
                if written > 0 {
                    let name = e.path_id(p1);
                    // Bytes written through an fd the open row already produced: only a new
                    // producer when the content's is not this process's in this phase.
                    let known = ident
                        .and_then(|id| self.by_ident.get(&id))
                        .map(|&q| &self.producers[q as usize])
                        .is_some_and(|q| q.pid == pid && q.phase == k);
                    if !known {
                        self.produce(e, row, k, name, How::Written);
                    }
                }
            }
            EventKind::Modify => {
                let sc = c
                    .syscall
                    .is_valid(i)
                    .then(|| Syscall::from_name(c.syscall.value(i)))
                    .flatten();
                let p2 = c.resolved2.get(i).or_else(|| c.path2.get(i));
                let p2 = p2.filter(|p| p.starts_with(b"/")).map(|p| e.path_id(p));
                let name = e.path_id(p1);
                match sc {
                    Some(Syscall::Truncate | Syscall::Ftruncate) => {
                        self.produce(e, row, k, name, How::Truncated)
                    }
                    Some(Syscall::Rename | Syscall::Renameat | Syscall::Renameat2) => {
                        if let Some(dst) = p2 {
                            let origin = self.by_name.get(&name).copied();
                            let q = self.push(row, k, dst, How::Renamed { from: name }, origin);
                            self.by_name.insert(dst, q);
                            self.replaced.insert(dst, q);
                        }
                    }
                    Some(Syscall::Link | Syscall::Linkat) => {
                        if let Some(dst) = p2 {
                            let origin = self.by_name.get(&name).copied();
                            let q = self.push(row, k, dst, How::Linked { from: name }, origin);
                            self.by_name.insert(dst, q);
                        }
                    }
                    Some(Syscall::Symlink | Syscall::Symlinkat) => {
                        if let Some(dst) = p2 {
                            let q = self.push(row, k, dst, How::Symlinked, None);
                            self.by_name.insert(dst, q);
                        }
                    }
                    Some(Syscall::Mknod | Syscall::Mknodat) => {
                        self.produce(e, row, k, name, How::Written)
                    }
                    _ => {}
                }
            }
            EventKind::Mount => {
                // The mount point: what is below it now comes from the mounted source.
                let target = c
                    .resolved2
                    .get(i)
                    .or_else(|| c.path2.get(i))
                    .filter(|p| p.starts_with(b"/"))
                    .map(|p| e.path_id(p))
                    .unwrap_or_else(|| e.path_id(p1));
                let q = self.push(row, k, target, How::Mounted, None);
                self.replaced.insert(target, q);
            }
            _ => {}
        }
    }

    /// Content at `path` made by `row` in phase `k`, `how`, from producer `origin`.
    fn push(
        &mut self,
        row: &RowRef<'_>,
        k: usize,
        path: u32,
        how: How,
        origin: Option<u32>,
    ) -> u32 {
        self.producers.push(Producer {
            phase: k,
            pid: row.pid,
            seq: row.c.seq.value(row.i),
            ts_ns: row.ts(),
            path,
            how,
            origin,
        });
        (self.producers.len() - 1) as u32
    }

    /// Content `row` wrote at `name` (its file's identity: `row.file`): a copy of the
    /// process's last read when that came from an earlier phase, bytecode of the source it just
    /// read, else its own.
    fn produce(&mut self, e: &mut Scanner<'_>, row: &RowRef<'_>, k: usize, name: u32, how: How) {
        let pid = row.pid;
        let last = self.last_read.get(&pid).copied();
        let (how, origin) = match (self.compiled_from(e, pid, name), last) {
            (Some(src), _) => (How::Compiled { from: src }, self.by_name.get(&src).copied()),
            (
                None,
                Some(LastRead {
                    path,
                    producer: Some(q),
                }),
            ) if self.producers[q as usize].phase < k => (How::Copied { from: path }, Some(q)),
            _ => (how, None),
        };
        let q = self.push(row, k, name, how, origin);
        self.by_name.insert(name, q);
        if let Some(id) = row.file {
            self.by_ident.insert(id, q);
        }
    }

    /// The producer of what a load at `name` (as passed: `raw`; identity `ident`) reads: the
    /// name's own, the identity's, or a directory above it replaced.
    fn lookup(
        &self,
        e: &Scanner<'_>,
        name: u32,
        raw: Option<u32>,
        ident: Option<(u64, u64)>,
    ) -> Option<u32> {
        if let Some(&q) = self.by_name.get(&name) {
            return Some(q);
        }
        if let Some(q) = raw.and_then(|r| self.by_name.get(&r)) {
            return Some(*q);
        }
        if let Some(q) = ident.and_then(|id| self.by_ident.get(&id)) {
            return Some(*q);
        }
        if self.replaced.is_empty() {
            return None;
        }
        let p: &[u8] = &e.path_bytes[name as usize];
        let mut at = p.len();
        while let Some(j) = p[..at].iter().rposition(|&b| b == b'/') {
            if j == 0 {
                break;
            }
            if let Some(id) = e.cache.get(&p[..j])
                && let Some(&q) = self.replaced.get(id)
            {
                return Some(q);
            }
            at = j;
        }
        None
    }

    /// A load (`row`'s read or exec of `name`, judged by phase section `sec`) in phase `k` of
    /// content producer `q` made: judged when an earlier phase made it.
    fn load(&mut self, e: &Scanner<'_>, row: &RowRef<'_>, k: usize, sec: usize, name: u32, q: u32) {
        let pid = row.pid;
        let access = if row.kind == Some(EventKind::Exec) {
            "exec"
        } else {
            "read"
        };
        let phase = self.named[sec].0.clone();
        let phase = phase.as_str();
        // Back through what this phase itself moved or copied, to what an earlier phase made.
        let mut cur = Some(q);
        let mut earlier = None;
        let mut guard = 0;
        while let Some(x) = cur {
            guard += 1;
            if guard > 64 {
                break;
            }
            let pr = &self.producers[x as usize];
            if pr.phase < k {
                earlier = Some(x);
                break;
            }
            cur = match pr.how {
                How::Renamed { .. } | How::Linked { .. } | How::Copied { .. } => pr.origin,
                _ => None,
            };
        }
        let Some(earlier) = earlier else { return };
        // Bytecode of a source no earlier phase changed is the source's, unchanged.
        if self.untouched_bytecode(earlier) {
            return;
        }
        // Bytecode is judged by its source; what this phase moved, by the name the earlier
        // phase gave it.
        let judged_id = self.bytecode_source(earlier).unwrap_or(if earlier == q {
            name
        } else {
            self.producers[earlier as usize].path
        });
        let judged = &e.path_bytes[judged_id as usize];
        let (placed, repo_root) = match self.placed.get(&(sec, judged_id)) {
            Some(p) => p.clone(),
            None => {
                let p = self.place(sec, judged);
                self.placed.insert((sec, judged_id), p.clone());
                p
            }
        };
        let Some(place) = placed else {
            let why = match repo_root.as_ref().and_then(|r| self.repo(r.as_bytes())) {
                Some(r) => r.tracked.as_ref().err().cloned().unwrap_or_default(),
                None => "no task repository is known".into(),
            };
            self.unjudged.push((repo_root.unwrap_or_default(), why));
            self.account(k, phase, None, judged_id);
            return;
        };
        self.account(k, phase, Some(place), judged_id);
        let Some(sev) = self.named[sec].1.severity(place) else {
            return;
        };
        if let Some(&f) = self.index.get(&(pid, name)) {
            self.findings[f].count += 1;
            self.findings[f].last_ts_ns = row.ts();
            return;
        }
        let row = row.at_path();
        let loaded = &e.path_bytes[name as usize];
        let mut f = e.finding(
            Class::from(sev),
            format!("phases.{phase}.provenance.{}", place.name()),
            Outcome::Hit,
            access,
            lossy(loaded),
            &row,
        );
        f.path_hex = std::str::from_utf8(loaded)
            .is_err()
            .then(|| aet_ledger::util::hex(loaded));
        f.phase = phase.to_owned();
        f.provenance = Some(Box::new(ProvenanceDetail {
            place,
            judged: lossy(judged),
            repository: repo_root,
            steps: self.steps(e, q),
        }));
        self.index.insert((pid, name), self.findings.len());
        self.findings.push(f);
    }

    fn repo(&self, root: &[u8]) -> Option<&Repo> {
        self.repos.iter().find(|r| r.root == root)
    }

    /// Where `judged` lies for section `sec` (`None`: it cannot be told), and the task
    /// repository it is in.
    fn place(&self, sec: usize, judged: &[u8]) -> (Option<Place>, Option<String>) {
        let repo = self
            .repos
            .iter()
            .find(|r| judged.starts_with(&r.root) && judged.get(r.root.len()) == Some(&b'/'));
        if repo.is_none() && self.repos.is_empty() {
            // No repository known: it may be the solution.
            return (None, None);
        }
        let tracked_fn;
        let tracked: Option<&dyn Fn(&Path) -> bool> = match repo.map(|r| &r.tracked) {
            Some(Ok(t)) => {
                tracked_fn = |rel: &Path| t.contains(rel.as_os_str().as_bytes());
                Some(&tracked_fn)
            }
            _ => None,
        };
        let path = Path::new(std::ffi::OsStr::from_bytes(judged));
        let root = repo.map(|r| Path::new(std::ffi::OsStr::from_bytes(&r.root)));
        (
            self.named[sec].1.place(path, root.map(|r| (r, tracked))),
            repo.map(|r| lossy(&r.root)),
        )
    }

    fn account(&mut self, k: usize, phase: &str, place: Option<Place>, file: u32) {
        let a = match self.accounts.iter_mut().position(|a| a.phase == phase) {
            Some(x) => &mut self.accounts[x],
            None => {
                self.accounts.push(PhaseProvenance {
                    phase: phase.to_owned(),
                    repositories: self.repos.iter().map(|r| lossy(&r.root)).collect(),
                    ..PhaseProvenance::default()
                });
                self.accounts.last_mut().expect("pushed")
            }
        };
        match place {
            None => a.unjudged += 1,
            Some(p) => {
                *a.loaded.entry(p.name().to_owned()).or_default() += 1;
                if self.seen.insert((k, p, file), ()).is_none() {
                    *a.files.entry(p.name().to_owned()).or_default() += 1;
                }
            }
        }
    }

    /// The steps from the first writer to producer `q`.
    fn steps(&self, e: &Scanner<'_>, q: u32) -> Vec<Step> {
        let mut chain = Vec::new();
        let mut cur = Some(q);
        while let Some(x) = cur {
            if chain.len() >= 8 {
                break;
            }
            chain.push(x);
            let pr = &self.producers[x as usize];
            cur = match pr.how {
                How::Renamed { .. }
                | How::Linked { .. }
                | How::Copied { .. }
                | How::Compiled { .. } => pr.origin,
                _ => None,
            };
        }
        chain.reverse();
        chain
            .into_iter()
            .map(|x| {
                let pr = &self.producers[x as usize];
                let proc = e.procs.get(&pr.pid);
                let (how, from) = match pr.how {
                    How::Written => ("written", None),
                    How::Truncated => ("truncated", None),
                    How::Renamed { from } => ("renamed", Some(from)),
                    How::Linked { from } => ("linked", Some(from)),
                    How::Symlinked => ("symlinked", None),
                    How::Mounted => ("mounted", None),
                    How::Copied { from } => ("copied", Some(from)),
                    How::Compiled { from } => ("compiled", Some(from)),
                };
                Step {
                    how: how.into(),
                    path: lossy(&e.path_bytes[pr.path as usize]),
                    from: from.map(|f| lossy(&e.path_bytes[f as usize])),
                    pid: pr.pid,
                    comm: proc.map(|p| p.comm.clone()).unwrap_or_default(),
                    exe: proc.and_then(|p| p.exe.clone()),
                    phase: self.phase_names.get(pr.phase).cloned().unwrap_or_default(),
                    seq: pr.seq,
                    ts_ns: pr.ts_ns,
                    ancestry: Vec::new(),
                }
            })
            .collect()
    }

    /// The findings, each phase's account, and why the record cannot be judged (if it cannot).
    pub(super) fn finish(self) -> (Vec<Finding>, Vec<PhaseProvenance>, Vec<Incomplete>) {
        let mut reasons = Vec::new();
        if let Some((root, why)) = self.unjudged.first() {
            reasons.push(Incomplete::NotFingerprinted {
                why: if root.is_empty() {
                    format!(
                        "provenance: {} loaded file(s) an earlier phase wrote could not be \
                         placed: {why} (run it with `aet run --policy` naming this policy, or \
                         name `repositories` in the provenance section)",
                        self.unjudged.len()
                    )
                } else {
                    format!(
                        "provenance: {} loaded file(s) an earlier phase wrote in {root} could \
                         not be told from the solution: what it tracked at the start is \
                         unknown ({why})",
                        self.unjudged.len()
                    )
                },
            });
        }
        (self.findings, self.accounts, reasons)
    }
}

/// One line for the terminal: what a phase loaded that an earlier one wrote.
pub fn summary(p: &PhaseProvenance) -> String {
    let n = |k: &str| p.files.get(k).copied().unwrap_or(0);
    let mut t = format!(
        "{}: loaded {} file(s) an earlier phase wrote: {} in the solution, {} in the \
         repository outside it, {} new in it, {} outside it, {} allowed",
        p.phase,
        p.files.values().sum::<u64>(),
        n("solution"),
        n("repository"),
        n("new"),
        n("outside"),
        n("allowed")
    );
    if p.unjudged > 0 {
        t.push_str(&format!("; {} load(s) could not be placed", p.unjudged));
    }
    t
}

/// Fills each provenance step's ancestry from the recorded creators.
pub(super) fn fill_ancestry(findings: &mut [Finding], ancestry: impl Fn(u32) -> Vec<Ancestor>) {
    for f in findings {
        if let Some(d) = f.provenance.as_mut() {
            for s in &mut d.steps {
                s.ancestry = ancestry(s.pid);
            }
        }
    }
}

mod bytecode;
pub use bytecode::source_of_bytecode;

#[cfg(test)]
mod tests;
