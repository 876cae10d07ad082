//! The audit engine: one pass over a ledger's columns, each distinct path classified once.
//!
//! For every row that touches a file the engine works out the access (read, write, exec, probe,
//! list) and whether it succeeded, matches the row's paths (kernel-resolved, as passed, and the
//! host's view) against the policy's rules and allow-lists, and aggregates findings per rule,
//! outcome, access, process and path. Rows of aet's own set-up (bwrap building the sandbox, aet's
//! stage before it execs the command) are left out.

use std::path::Path;

use arrow_array::Array;
use rustc_hash::FxHashMap;

use aet_common::{EventKind, Syscall};

use super::reached::Reached;
use super::targets::proc_alias;
use crate::policy::{Access, Policy};
use aet_ledger::access::{RowFields, classify};
use aet_ledger::{
    metadata::LedgerMeta,
    reader::{Form, Ledger, ReadError},
};

use super::batch::{BatchCols, COLUMNS, RowRef};
use super::finding::{Ancestor, Finding, Proc};
use super::phases::Phases;
use super::scanner::{Scanner, Tally};

/// What one pass found.
#[derive(Debug, Default)]
pub struct Scan {
    /// The rows and processes counted as the rows went by.
    pub tally: Tally,
    pub distinct_paths: usize,
    pub findings: Vec<Finding>,
    /// Rows that matched each rule (by rule index), attempts included.
    pub rule_hits: Vec<u64>,
    pub processes: Vec<Proc>,
    /// Every distinct path the run touched (for transcript correlation), lossy text.
    pub paths: Vec<String>,
    /// The run's phases with their rows (`judged_by` filled by the report).
    pub phases: Vec<super::phases::PhaseInfo>,
    /// The rows that matched each rule of each phase section that judged rows.
    pub phase_hits: Vec<(String, Vec<u64>)>,
    /// The watched files: what changed, and who changed it.
    pub watch: Option<super::watched::WatchReport>,
    /// Why the watched files or provenance leave the record incomplete.
    pub watch_reasons: Vec<aet_ledger::metadata::Incomplete>,
    /// Each phase's provenance: what it loaded that an earlier phase wrote, by place.
    pub provenance: Vec<super::provenance::PhaseProvenance>,
    /// Every exec and what each process touched, for the transcript's claims.
    pub seen: super::claims::Seen,
    /// The programs executed or mapped executable, by content.
    pub programs: Vec<super::programs::Program>,
    /// The decoys the run planted, and what it did with them.
    pub decoys: Option<super::decoys::DecoyReport>,
}

/// How an fd arrived, with its file's identity.
pub(super) type FdOrigin = (Reached, (u64, u64));

/// What a scan read besides its findings: the ledger's metadata and how it was read.
pub struct Read {
    pub meta: LedgerMeta,
    pub form: Form,
    pub damaged_tail: Option<String>,
    /// Why the ledger's footer is not the file aet wrote, when it is not.
    pub doctored: Option<String>,
}

/// What the scan carries from row to row: how fds arrived, the paths open fds were opened by,
/// the protected files, and the process of the last row.
pub(super) struct Walk {
    /// aet's own set-up precedes the command when a stage ran (sandbox, identity or barrier).
    audit_setup: bool,
    /// How fds arrived: by (pid, fd) from the fd rows, with the file's identity.
    fd_origins: FxHashMap<(u32, i32), FdOrigin>,
    /// Under a barrier, the path each process's open fds were opened by (the last open that
    /// returned it): a denied reopen through `/proc/PID/fd/N` is that file.
    fd_paths: FxHashMap<(u32, i32), Vec<u8>>,
    /// How files arrived, by identity (fd rows and the fds the command started with).
    ident_origins: FxHashMap<(u64, u64), Reached>,
    /// The files the command started with, by identity, with the path aet saw them by: path
    /// rules are matched against it when the run reads through such an fd (`< answers/key.txt`).
    inherited_paths: FxHashMap<(u64, u64), Vec<u8>>,
    /// The files the command started with as fds (its stdout and stderr redirected to a file,
    /// say), by identity: the launcher's channels.
    channels: Vec<(u64, u64)>,
    /// The policy's protected files by path, with their index.
    protected_paths: Vec<(Vec<u8>, usize)>,
    first: bool,
    last_pid: u32,
    last_setup: bool,
    /// The phase whose rows this pass judges (the others only keep the state up to date).
    judges: Vec<u8>,
    /// The first pass's account of phases (rows, processes that outlive theirs).
    phases: Option<Phases>,
    /// The first pass's account of the watched files: the rows that wrote them.
    watch: Option<super::watched::Attribution>,
    /// The first pass's provenance: who produced what each later phase loads.
    prov: Option<super::provenance::Tracker>,
    /// The first pass's decoys: opens of them, and where their tokens went.
    decoys: Option<super::decoys::Tracker>,
    /// `aet run` (a command): a process that enters the run without a fork the run made is a
    /// container runtime's until its first exec.
    runtime_entries: bool,
}

/// Scans a ledger: every finding, process and count the report is made of. The top-level
/// rules judge the `agent` phase, with the phases and lingering processes accounted for; each
/// `[phases.NAME]` section that has rows to judge is one more pass over the ledger.
pub fn scan(ledger_path: &Path, policy: &Policy) -> Result<(Scan, Read), ReadError> {
    scan_for(ledger_path, policy, false)
}

/// [`scan`], keeping every exec and what each process touched when `claims` (a transcript is
/// to be held against the record): a cost per row the audit pays only then.
pub fn scan_for(
    ledger_path: &Path,
    policy: &Policy,
    claims: bool,
) -> Result<(Scan, Read), ReadError> {
    let (mut scan, read, phases) = pass(ledger_path, policy, true, claims)?;
    let held: Vec<Vec<u8>> = phases
        .as_ref()
        .map(|p| p.names().map(<[u8]>::to_vec).collect())
        .unwrap_or_default();
    for (name, section) in &policy.phases {
        // A section with no rules and no allow-list (only provenance, judged in the first
        // pass) has nothing for a pass of its own to find.
        if !held.iter().any(|h| h == name.as_bytes()) {
            continue;
        }
        if section.rules.is_empty() && section.allow.is_none() {
            scan.phase_hits.push((name.clone(), Vec::new()));
            continue;
        }
        let (s, _, _) = pass(ledger_path, section, false, false)?;
        for f in &s.findings {
            if f.class.marks_process()
                && let Some(p) = scan.processes.iter_mut().find(|p| p.pid == f.pid)
            {
                p.flagged = true;
            }
        }
        scan.findings.extend(s.findings);
        scan.phase_hits.push((name.clone(), s.rule_hits));
    }
    if let Some(p) = phases {
        scan.phases = p.infos(&read.meta.phases);
    }
    Ok((scan, read))
}

/// One pass over the ledger, judging the rows of `policy`'s phase; `account`: also count the
/// phases and find the processes that outlive theirs.
fn pass(
    ledger_path: &Path,
    policy: &Policy,
    account: bool,
    claims: bool,
) -> Result<(Scan, Read, Option<Phases>), ReadError> {
    let mut ledger = Ledger::open_columns(ledger_path, COLUMNS)?;
    let meta = ledger.meta()?;
    let form = ledger.form();
    let (mut e, mut w) = start(policy, &meta);
    e.seen.enabled = claims;
    let mut watch_reasons = Vec::new();
    let (mut provenance, mut watch) = (Vec::new(), None);
    if account {
        w.phases = Some(Phases::new(&meta.phases));
        w.watch = super::watched::Attribution::new(policy, &meta);
        w.prov = super::provenance::Tracker::new(policy, &meta);
        w.decoys = super::decoys::Tracker::new(meta.decoys.as_ref());
        if !policy.watches.is_empty() && meta.watch.is_none() {
            watch_reasons.push(aet_ledger::metadata::Incomplete::NotFingerprinted {
                why: "the run took no fingerprints (run it with `aet run --policy` naming a \
                          policy with these watches)"
                    .into(),
            });
        }
    }
    while let Some(b) = ledger.next_batch()? {
        let c = BatchCols::new(&b);
        e.tally.rows += b.num_rows() as u64;
        if b.num_rows() > 0 {
            e.tally.last_ts_ns = c.ts.value(b.num_rows() - 1);
        }
        for i in 0..b.num_rows() {
            scan_row(&mut e, &mut w, &c, i);
        }
    }
    if let Some(t) = w.prov.take() {
        let (findings, accounts, reasons) = t.finish();
        for f in &findings {
            if f.class.marks_process()
                && let Some(p) = e.procs.get_mut(&f.pid)
            {
                p.flagged = true;
            }
        }
        e.findings.extend(findings);
        provenance = accounts;
        watch_reasons.extend(reasons);
    }
    if let Some(a) = w.watch.take() {
        let (findings, report, reasons) = a.finish(policy);
        for f in &findings {
            if f.class.marks_process()
                && let Some(p) = e.procs.get_mut(&f.pid)
            {
                p.flagged = true;
            }
        }
        e.findings.extend(findings);
        watch = Some(report);
        watch_reasons.extend(reasons);
    }
    let mut decoys = None;
    if let Some(t) = w.decoys.take() {
        let (findings, report) = t.finish();
        for f in &findings {
            if f.class.marks_process()
                && let Some(p) = e.procs.get_mut(&f.pid)
            {
                p.flagged = true;
            }
        }
        e.findings.extend(findings);
        decoys = Some(report);
    }
    let read = Read {
        meta,
        form,
        damaged_tail: ledger.damaged_tail.clone(),
        doctored: ledger.doctored.clone(),
    };
    let scan = Scan {
        provenance,
        watch,
        decoys,
        watch_reasons,
        ..finish(e)
    };
    Ok((scan, read, w.phases))
}

/// The scanner and the walk's state before the first row: protected files identified (at run
/// start when the run recorded them, else now), the barrier modelled, the inherited fds known.
pub(super) fn start<'p>(
    policy: &'p Policy,
    meta: &aet_ledger::metadata::LedgerMeta,
) -> (Scanner<'p>, Walk) {
    let mut protected_ids = Vec::new();
    for (n, (name, path)) in policy.protected.iter().enumerate() {
        let id = meta
            .protected
            .get(name)
            .map(|p| (p.dev, p.ino))
            .or_else(|| {
                std::fs::metadata(path).ok().map(|m| {
                    (
                        std::os::unix::fs::MetadataExt::dev(&m),
                        std::os::unix::fs::MetadataExt::ino(&m),
                    )
                })
            });
        if let Some((d, i)) = id {
            protected_ids.push((d, i, n));
        }
    }
    let mut e = Scanner::new(policy, protected_ids);
    e.upstream = meta
        .sandbox
        .iter()
        .flat_map(|s| &s.network.upstream_hosts)
        .map(|h| aet_ledger::hosts::normalize(h.as_bytes()))
        .collect();
    e.barrier = meta
        .barrier
        .as_ref()
        .map(crate::policy::barrier::Model::new);
    let mut w = Walk {
        audit_setup: meta.sandbox.is_some() || meta.identity.is_some() || meta.barrier.is_some(),
        fd_origins: FxHashMap::default(),
        fd_paths: FxHashMap::default(),
        ident_origins: FxHashMap::default(),
        inherited_paths: FxHashMap::default(),
        channels: Vec::new(),
        protected_paths: policy
            .protected
            .iter()
            .enumerate()
            .map(|(n, (_, p))| (p.as_os_str().as_encoded_bytes().to_vec(), n))
            .collect(),
        first: true,
        last_pid: u32::MAX,
        last_setup: false,
        judges: policy.phase.as_bytes().to_vec(),
        phases: None,
        watch: None,
        prov: None,
        decoys: None,
        runtime_entries: !meta.command.is_empty(),
    };
    for f in &meta.inherited_fds {
        if f.kind == "file" {
            w.channels.push((f.dev, f.ino));
        }
        if f.kind == "file" || f.kind == "directory" {
            w.ident_origins.insert((f.dev, f.ino), Reached::Inherited);
            if let Some(p) = &f.path {
                w.inherited_paths.insert(
                    (f.dev, f.ino),
                    p.as_path().as_os_str().as_encoded_bytes().to_vec(),
                );
            }
        }
    }
    (e, w)
}

/// One row: the process tree and aet's set-up, then what the row did, judged.
pub(super) fn scan_row(e: &mut Scanner<'_>, w: &mut Walk, c: &BatchCols<'_>, i: usize) {
    // The row's kind, from the ledger's vocabulary (a kind this aet does not know is only
    // counted).
    let kind = EventKind::from_name(c.kind.value(i));
    let p = track(e, w, c, i, kind);
    if let Some(phases) = w.phases.as_mut() {
        phases.row(e, c, i, kind);
    }
    let Some(p) = p else {
        return;
    };
    e.seen.row(c, i, p, kind);
    let BatchCols { ret, dev, ino, .. } = c;
    let judged = c.phase(i) == w.judges.as_slice();
    if judged {
        argv_rules(e, c, i, p, kind);
    }
    let Some(known) = kind else {
        return;
    };
    let ok = match known {
        // Bytes moved: done.
        EventKind::Io => true,
        // Submitted: its result is not recorded.
        EventKind::IoUring => false,
        _ => ret.is_valid(i) && ret.value(i) >= 0,
    };
    let mut row = RowRef::new(c, i, p, kind, ok);
    row.file = (dev.is_valid(i) && ino.is_valid(i)).then(|| (dev.value(i), ino.value(i)));
    let reached = reached(w, &row);
    if let (Some(t), Some(phases)) = (w.prov.as_mut(), w.phases.as_ref()) {
        t.row(e, &row, phases.current());
    }
    if !judged {
        return;
    }
    if let Some(d) = w.decoys.as_mut() {
        d.row(e, &row.at_path());
    }
    outside(e, &row);
    if known == EventKind::Net || known == EventKind::Dns {
        host(e, &row);
    }
    if known == EventKind::Net {
        net(e, &row);
        return;
    }
    if known == EventKind::Dns {
        return;
    }
    file_access(e, w, &RowRef { reached, ..row });
    if matches!(known, EventKind::Exec | EventKind::Mmap) {
        program(e, &row.at_path());
    }
}

/// A program by content: an exec's file, or a file mapped executable, against the hash rules
/// and `[allow] programs` (a row whose hash could not be taken is `sha256:unknown`).
fn program(e: &mut Scanner<'_>, row: &RowRef<'_>) {
    let RowRef { c, i, .. } = *row;
    let error = c.sha256_error.is_valid(i).then(|| c.sha256_error.value(i));
    // A program that ran (a successful exec, a file mapped executable) with neither a hash nor
    // why in its row (a ledger from before hashes, schema 6 and older) is as one whose hash
    // could not be taken: never in `[allow] programs`. A failed exec ran nothing.
    let ran = row.ok
        && match row.kind {
            Some(EventKind::Exec) => true,
            Some(EventKind::Mmap) => {
                c.prot.is_valid(i)
                    && c.prot.value(i) & aet_common::uapi::PROT_EXEC != 0
                    && row.resolved.or(row.raw).is_some()
            }
            _ => false,
        };
    let error = match (row.sha256(), error) {
        (None, None) if ran => Some(&b"no hash in the record"[..]),
        (None, None) => return,
        (_, e) => e,
    };
    let key = match row.sha256() {
        Some(hex) => [crate::policy::programs::PREFIX, hex].concat(),
        None => crate::policy::programs::UNKNOWN.to_vec(),
    };
    let path = row.resolved.or(row.raw).unwrap_or_default();
    // A program the policy's content rules cannot judge: a warning (the run goes to review),
    // one finding for the run, each row counted.
    if row.sha256().is_none() && e.judges_programs {
        match e.unhashed {
            Some(f) => e.findings[f].count += 1,
            None => {
                let why = String::from_utf8_lossy(error.unwrap_or_default()).into_owned();
                let mut f = e.finding(
                    crate::finding::Class::Warning,
                    "programs.unhashed".into(),
                    crate::finding::Outcome::Hit,
                    "ran a program whose content is not known",
                    String::from_utf8_lossy(path).into_owned(),
                    row,
                );
                f.access = std::borrow::Cow::Owned(format!(
                    "ran a program whose content is not known ({why})"
                ));
                e.unhashed = Some(e.findings.len());
                e.findings.push(f);
            }
        }
    }
    let comm = String::from_utf8_lossy(c.comm.value(i)).into_owned();
    e.programs.add(
        row.sha256(),
        error,
        row.kind == Some(EventKind::Exec),
        path,
        || format!("{comm}[{}]", row.pid),
    );
    let id = e.path_id(&key);
    e.classify(row, Access::Exec, &[id], None);
}

/// Rules on what a process ran: its argument vector, joined with spaces (a failed exec ran
/// nothing: a shell's search of PATH fails at every directory but one).
pub(super) fn argv_rules(
    e: &mut Scanner<'_>,
    c: &BatchCols<'_>,
    i: usize,
    p: u32,
    kind: Option<EventKind>,
) {
    let BatchCols { ret, argv, .. } = c;
    if kind == Some(EventKind::Exec)
        && !e.policy.argv_rules.is_empty()
        && ret.is_valid(i)
        && ret.value(i) >= 0
        && let Some(line) = super::batch::argv_line(argv, i)
    {
        let row = RowRef::new(c, i, p, kind, true);
        for m in e.policy.argv_set.matches(&line).iter() {
            let r = e.policy.argv_rules[m];
            e.rule_hits[r] += 1;
            e.record_argv(r, &line, &row);
        }
    }
}

/// How an fd-based row's process reached its file.
pub(super) fn reached(w: &mut Walk, row: &RowRef<'_>) -> Option<Reached> {
    let RowRef {
        c, i, pid: p, file, ..
    } = *row;
    let BatchCols {
        resolved,
        fdc,
        fd_origin,
        ..
    } = c;
    match row.kind {
        Some(EventKind::Fd) => {
            let origin = Reached::from_fd_origin(fd_origin.is_valid(i).then(|| fd_origin.value(i)));
            if row.ok
                && fdc.is_valid(i)
                && let Some(id) = file
            {
                w.fd_origins.insert((p, fdc.value(i)), (origin, id));
                w.ident_origins.entry(id).or_insert(origin);
            }
            Some(origin)
        }
        Some(EventKind::Io | EventKind::Mmap | EventKind::List) => {
            let by_fd = fdc
                .is_valid(i)
                .then(|| w.fd_origins.get(&(p, fdc.value(i))))
                .flatten()
                .filter(|(_, id)| Some(*id) == file)
                .map(|(o, _)| *o);
            by_fd
                .or_else(|| file.and_then(|id| w.ident_origins.get(&id).copied()))
                .or_else(|| {
                    // Named through an earlier row that saw the file by its path.
                    Some(if resolved.get(i).is_some() {
                        Reached::Path
                    } else {
                        Reached::Unknown
                    })
                })
        }
        _ => Some(Reached::Path),
    }
}

/// An access to files: the barrier's verdict on it, then the rules and allow-lists on each of
/// its paths.
pub(super) fn file_access(e: &mut Scanner<'_>, w: &mut Walk, row: &RowRef<'_>) {
    let Some(kind) = row.kind else {
        return;
    };
    let RowRef {
        c, i, pid: p, ok, ..
    } = *row;
    let BatchCols { ret, errno, .. } = c;
    let fields = row.fields();
    let acc = classify(kind, &fields);
    let (a1, a2) = (acc.first.bits(), acc.second.bits());
    if a1 == 0 && a2 == 0 {
        return;
    }
    // Bytes moved through the launcher's channel (an fd the command was started with, not one
    // the run opened: those rows are judged at their open).
    let channel = kind == EventKind::Io
        && row.reached == Some(Reached::Inherited)
        && row.file.is_some_and(|f| w.channels.contains(&f));
    let row = RowRef {
        host: c.host.get(i),
        channel,
        ..row.at_path()
    };
    if ok && let Some(wa) = w.watch.as_mut() {
        let second = row.at_second();
        wa.row(
            e,
            &row,
            second.resolved.or(second.raw),
            acc,
            kind,
            fields.syscall(),
        );
    }
    // What Landlock governs: opens, execs, listings, and the changes it has rights for
    // (creating, removing, renaming and linking entries: a right of the parent
    // directory; truncate: of the file). chmod, chown, utimes and extended attributes
    // are not governed: the barrier never blocks them.
    let (governed, change) = match kind {
        _ if e.barrier.is_none() => (false, false),
        EventKind::Open | EventKind::Exec | EventKind::List => (true, false),
        EventKind::Modify => match fields.syscall() {
            Some(Syscall::Truncate) => (true, false),
            Some(
                Syscall::Rename
                | Syscall::Renameat
                | Syscall::Renameat2
                | Syscall::Unlink
                | Syscall::Unlinkat
                | Syscall::Rmdir
                | Syscall::Link
                | Syscall::Linkat
                | Syscall::Symlink
                | Syscall::Symlinkat
                | Syscall::Mkdir
                | Syscall::Mkdirat
                | Syscall::Mknod
                | Syscall::Mknodat,
            ) => (true, true),
            _ => (false, false),
        },
        _ => (false, false),
    };
    let err = (!ok && errno.is_valid(i)).then(|| errno.value(i));
    if governed
        && kind == EventKind::Open
        && ok
        && let Some(p1) = row.resolved.or(row.raw)
    {
        w.fd_paths.insert((p, ret.value(i) as i32), p1.to_vec());
    }
    if governed && let Some(p1) = row.resolved.or(row.raw) {
        // A denial reached through a /proc magic link is the file it leads to.
        let alias = if err == Some(b"EACCES") {
            proc_alias(p1, p, &w.fd_paths)
        } else {
            None
        };
        let p1 = alias.as_deref().unwrap_or(p1);
        let id = e.path_id(p1);
        for a in Access::ALL {
            if a1 & a.bit() != 0 {
                e.check_barrier(&row, err, a, id, change);
            }
        }
        if a2 != 0 {
            let second = row.at_second();
            if let Some(p2) = second.resolved.or(second.raw) {
                let id = e.path_id(p2);
                for a in Access::ALL {
                    if a2 & a.bit() != 0 {
                        e.check_barrier(&second, err, a, id, true);
                    }
                }
            }
        }
    }
    judge(e, w, &row, (a1, a2));
}

/// The rules and allow-lists on each path of an access (`a1` of its first path, `a2` of its
/// second).
pub(super) fn judge(e: &mut Scanner<'_>, w: &Walk, row: &RowRef<'_>, (a1, a2): (u8, u8)) {
    // The file by its identity, when a protected file is.
    let ident = row.file.filter(|_| !e.protected_ids.is_empty());
    if a1 != 0 {
        let mut ids = [u32::MAX; 3];
        let mut n = 0;
        // The same bytes need no second look-up (the argument is often the resolved
        // path itself).
        let raw = row.raw.filter(|r| Some(*r) != row.resolved);
        let host = row.host.filter(|h| Some(*h) != row.resolved);
        for cand in [row.resolved, raw, host].into_iter().flatten() {
            let id = e.path_id(cand);
            if !ids[..n].contains(&id) {
                ids[n] = id;
                n += 1;
            }
        }
        if n == 0
            && row.reached == Some(Reached::Inherited)
            && let Some(p1) = row.file.and_then(|id| w.inherited_paths.get(&id))
        {
            // Bytes read through an fd the command started with: the path it had then.
            ids[0] = e.path_id(p1);
            n = 1;
        }
        if n == 0
            && let Some(id) = ident
            && let Some(&(_, _, pn)) = e.protected_ids.iter().find(|x| (x.0, x.1) == id)
        {
            // No path (an fd that arrived, bytes read through an fd nothing named):
            // the file by its identity, under the protected file's own path.
            let pp = w
                .protected_paths
                .iter()
                .find(|(_, n)| *n == pn)
                .map(|(pp, _)| pp.clone())
                .unwrap_or_default();
            ids[0] = e.path_id(&pp);
            n = 1;
        }
        if n > 0 {
            // A protected file named by its path.
            let ident = ident.or_else(|| {
                w.protected_paths
                    .iter()
                    .find(|(pp, _)| Some(pp.as_slice()) == row.resolved)
                    .and_then(|(_, n)| e.protected_ids.iter().find(|x| x.2 == *n))
                    .map(|x| (x.0, x.1))
            });
            for a in Access::ALL {
                if a1 & a.bit() != 0 {
                    e.classify(row, a, &ids[..n], ident);
                }
            }
        }
    }
    if a2 != 0 {
        let row2 = row.at_second();
        let mut ids = [u32::MAX; 2];
        let mut n = 0;
        for cand in [row2.resolved, row2.raw].into_iter().flatten() {
            let id = e.path_id(cand);
            if !ids[..n].contains(&id) {
                ids[n] = id;
                n += 1;
            }
        }
        if n > 0 {
            for a in Access::ALL {
                if a2 & a.bit() != 0 {
                    e.classify(&row2, a, &ids[..n], None);
                }
            }
        }
    }
}

/// The scan's results: each finding's ancestry from the recorded creators, the processes in
/// order, the counts.
pub(super) fn finish(mut e: Scanner<'_>) -> Scan {
    // Ancestry for each finding (and each provenance step), from the recorded creators.
    let root = e.tally.root_pid;
    let procs = &e.procs;
    let ancestry = |pid: u32| {
        let mut out = Vec::new();
        let mut cur = procs.get(&pid).map(|p| p.ppid);
        while let Some(pp) = cur {
            if out.len() >= 256 {
                break;
            }
            let Some(p) = procs.get(&pp) else { break };
            out.push(Ancestor {
                pid: p.pid,
                comm: p.comm.clone(),
            });
            if Some(pp) == root {
                break;
            }
            cur = Some(p.ppid);
        }
        out
    };
    for f in &mut e.findings {
        f.ancestry = ancestry(f.pid);
    }
    super::provenance::fill_ancestry(&mut e.findings, ancestry);
    e.tally.unseen_starts = e
        .procs
        .values()
        .filter(|p| !p.seen_start && Some(p.pid) != root)
        .count() as u64;
    let mut procs: Vec<Proc> = e.procs.into_values().collect();
    procs.sort_by_key(|p| (p.first_ts_ns, p.pid));
    Scan {
        tally: e.tally,
        distinct_paths: e.infos.len(),
        findings: e.findings,
        rule_hits: e.rule_hits,
        processes: procs,
        paths: e.path_texts,
        seen: e.seen,
        programs: e.programs.into_list(),
        decoys: None,
        ..Scan::default()
    }
}

#[cfg(test)]
mod tests;

mod tree;
use tree::track;

mod network;
use network::{host, net, outside};
