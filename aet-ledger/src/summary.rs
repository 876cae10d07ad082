//! `aet ledger summary`: what a run did, from the kernel's record — processes, execs, files read
//! and written (by open flags and changes) with the bytes moved through them, probes, failed
//! opens, lost events, duration. The seed's `file_access_ledger`, computed from syscalls instead
//! of a transcript.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fmt::Write as _,
};

use aet_common::{EventKind, ResolvedFrom, Syscall};
use serde::Serialize;

use super::{
    assess::{Observed, assess},
    metadata::ProcessRef,
    reader::{Form, Ledger, ReadError},
    rows::{LedgerRow, rows_of},
};
use crate::{
    access::{Access, RowFields, classify},
    util::{escape_path, shell_words},
};

impl RowFields for LedgerRow {
    fn syscall(&self) -> Option<Syscall> {
        Syscall::from_name(self.syscall.as_deref()?.as_bytes())
    }

    fn flags(&self) -> Option<u32> {
        self.flags
    }

    fn prot(&self) -> Option<u32> {
        self.prot
    }

    fn bytes(&self) -> (u64, u64) {
        (
            self.bytes_read.unwrap_or(0),
            self.bytes_written.unwrap_or(0),
        )
    }
}

/// One file in the summary.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FileUse {
    /// The kernel-resolved path when the ledger has one, else the path as passed (lossy UTF-8 for
    /// display).
    pub path: String,
    /// Successful opens (or changes) of this file with this access.
    pub opens: u64,
    /// Bytes moved through its fds with this access.
    pub bytes: u64,
}

/// A ledger's summary.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub ledger: String,
    /// `finished`, or `unfinished` when read from the stream form of a killed monitor's file.
    pub form: &'static str,
    pub schema_version: String,
    pub command: Vec<String>,
    pub scope: String,
    pub started_ns: Option<i64>,
    pub ended_ns: Option<i64>,
    pub duration_s: Option<f64>,
    pub exit_status: Option<i32>,
    pub events: u64,
    pub events_by_kind: BTreeMap<String, u64>,
    pub processes: u64,
    pub execs: u64,
    pub execs_failed: u64,
    pub files_read: Vec<FileUse>,
    pub files_written: Vec<FileUse>,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// stat, access, readlink and the like: paths probed without being opened.
    pub probes: u64,
    /// Changes to the file system by syscall (rename, unlink, mkdir, ...).
    pub changes_by_syscall: BTreeMap<String, u64>,
    pub failed_opens: u64,
    pub failed_opens_by_errno: BTreeMap<String, u64>,
    /// Rows whose resolved path is partial.
    pub partial_paths: u64,
    /// io_uring rows that used it: submitted requests, and set-ups, entries and registrations
    /// that worked.
    pub io_uring: u64,
    /// `None` when the ledger does not say (unfinished).
    pub events_lost: Option<u64>,
    pub events_lost_by_reason: BTreeMap<String, u64>,
    pub complete: bool,
    pub incomplete_reasons: Vec<String>,
    pub killed: Vec<ProcessRef>,
    /// How the run met overload (how often and how long it was frozen).
    pub overload: Option<crate::metadata::OverloadRecord>,
}

/// What identifies a file in the summary: its (device, inode) when the kernel said, else its
/// path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum FileKey {
    Inode(u64, u64),
    Path(Vec<u8>),
}

#[derive(Default)]
struct Tally {
    pids: HashSet<u32>,
    /// Processes whose start (fork or exec) is recorded.
    started: HashSet<u32>,
    /// The first row's process.
    root: Option<u32>,
    names: HashMap<FileKey, Vec<u8>>,
    read: BTreeMap<FileKey, (u64, u64)>,
    written: BTreeMap<FileKey, (u64, u64)>,
    first_ts: Option<i64>,
    last_ts: Option<i64>,
}

/// The row's kind, from the ledger's vocabulary (`None` for a kind this aet does not know).
fn kind_of(r: &LedgerRow) -> Option<EventKind> {
    EventKind::from_name(r.kind.as_bytes())
}

/// Was the row's path walked by the kernel from the object it touched?
fn from_object(r: &LedgerRow) -> bool {
    r.resolved_from.as_deref() == Some(ResolvedFrom::Object.name())
}

fn key_of(r: &LedgerRow, path: Option<&Vec<u8>>) -> Option<FileKey> {
    match (r.dev, r.ino) {
        (Some(d), Some(i)) if kind_of(r) != Some(EventKind::Stat) || from_object(r) => {
            Some(FileKey::Inode(d, i))
        }
        _ => path.cloned().map(FileKey::Path),
    }
}

/// Summarises an open ledger (reads all its batches, one at a time).
pub fn summarize(ledger: &mut Ledger) -> Result<Summary, ReadError> {
    let m = ledger.meta()?;
    let mut s = Summary {
        ledger: ledger.path().display().to_string(),
        form: match ledger.form() {
            Form::Finished => "finished",
            Form::Unfinished => "unfinished",
        },
        schema_version: m.schema_version.clone().unwrap_or_default(),
        command: m.command.clone(),
        scope: m.scope_target.clone().unwrap_or_default(),
        started_ns: m.started_ns,
        ended_ns: m.ended_ns,
        duration_s: None,
        exit_status: m.exit_status,
        events: 0,
        events_by_kind: BTreeMap::new(),
        processes: 0,
        execs: 0,
        execs_failed: 0,
        files_read: Vec::new(),
        files_written: Vec::new(),
        bytes_read: 0,
        bytes_written: 0,
        probes: 0,
        changes_by_syscall: BTreeMap::new(),
        failed_opens: 0,
        failed_opens_by_errno: BTreeMap::new(),
        partial_paths: 0,
        io_uring: 0,
        events_lost: m.events_lost,
        events_lost_by_reason: m.events_lost_by_reason.clone(),
        complete: false,
        incomplete_reasons: Vec::new(),
        killed: m.killed.clone(),
        overload: m.overload.clone(),
    };
    if let (Some(a), Some(b)) = (s.started_ns, s.ended_ns) {
        s.duration_s = Some(b.saturating_sub(a) as f64 / 1e9);
    }
    let mut t = Tally::default();
    while let Some(batch) = ledger.next_batch()? {
        for r in rows_of(&batch) {
            tally(&r, &mut s, &mut t);
        }
    }
    s.processes = t.pids.len() as u64;
    let to_list = |m: BTreeMap<FileKey, (u64, u64)>, names: &HashMap<FileKey, Vec<u8>>| {
        let mut v: Vec<FileUse> = m
            .into_iter()
            .map(|(k, (opens, bytes))| FileUse {
                path: match names.get(&k) {
                    Some(p) => String::from_utf8_lossy(p).into_owned(),
                    None => match &k {
                        FileKey::Inode(d, i) => format!("<dev {d} ino {i}>"),
                        FileKey::Path(p) => String::from_utf8_lossy(p).into_owned(),
                    },
                },
                opens,
                bytes,
            })
            .collect();
        v.sort_by(|a, b| a.path.cmp(&b.path));
        v
    };
    s.files_read = to_list(std::mem::take(&mut t.read), &t.names);
    s.files_written = to_list(std::mem::take(&mut t.written), &t.names);
    if s.duration_s.is_none()
        && let (Some(a), Some(b)) = (t.first_ts, t.last_ts)
    {
        s.duration_s = Some(b.saturating_sub(a) as f64 / 1e9);
    }
    let unseen_starts = t
        .pids
        .iter()
        .filter(|p| !t.started.contains(p) && Some(**p) != t.root)
        .count() as u64;
    let reasons = assess(
        &m,
        ledger.form(),
        ledger.damaged_tail.as_deref(),
        ledger.doctored.as_deref(),
        Observed {
            io_uring_rows: s.io_uring,
            unseen_starts,
        },
    );
    s.complete = reasons.is_empty();
    s.incomplete_reasons = reasons.texts();
    Ok(s)
}

fn tally(r: &LedgerRow, s: &mut Summary, t: &mut Tally) {
    s.events += 1;
    t.pids.insert(r.pid);
    t.root.get_or_insert(r.pid);
    let kind = kind_of(r);
    if kind == Some(EventKind::Exec) && r.ret.is_some_and(|v| v >= 0) {
        t.started.insert(r.pid);
    }
    if let Some(child) = r.child_pid {
        t.started.insert(child);
    }
    *s.events_by_kind.entry(r.kind.clone()).or_default() += 1;
    t.first_ts.get_or_insert(r.ts_ns);
    t.last_ts = Some(r.ts_ns);
    if r.resolved_partial == Some(true) {
        s.partial_paths += 1;
    }
    let ok = r.ret.is_some_and(|v| v >= 0);
    let best = r.resolved_path.as_ref().or(r.path.as_ref());
    let note = |key: &FileKey, t: &mut Tally| {
        if let Some(p) = best {
            let prefer = from_object(r);
            match t.names.get(key) {
                Some(_) if !prefer => {}
                _ => {
                    t.names.insert(key.clone(), p.clone());
                }
            }
        }
    };
    match kind {
        Some(EventKind::Exec) => {
            s.execs += 1;
            if !ok {
                s.execs_failed += 1;
            }
        }
        Some(EventKind::Open) if !ok => {
            s.failed_opens += 1;
            let e = r.errno.clone().unwrap_or_else(|| "?".into());
            *s.failed_opens_by_errno.entry(e).or_default() += 1;
        }
        Some(EventKind::Open) => {
            let Some(key) = key_of(r, best) else { return };
            note(&key, t);
            let acc = classify(EventKind::Open, r).first;
            if acc.contains(Access::Read) {
                t.read.entry(key.clone()).or_default().0 += 1;
            }
            if acc.contains(Access::Write) {
                t.written.entry(key).or_default().0 += 1;
            }
        }
        Some(EventKind::Io) => {
            let Some(key) = key_of(r, best) else { return };
            note(&key, t);
            let (br, bw) = (r.bytes_read.unwrap_or(0), r.bytes_written.unwrap_or(0));
            // A ledger says what it says: sums of doctored counts saturate, never wrap or panic
            // (found by the ledger fuzz target).
            s.bytes_read = s.bytes_read.saturating_add(br);
            s.bytes_written = s.bytes_written.saturating_add(bw);
            if br > 0 {
                let e = &mut t.read.entry(key.clone()).or_default().1;
                *e = e.saturating_add(br);
            }
            if bw > 0 {
                let e = &mut t.written.entry(key).or_default().1;
                *e = e.saturating_add(bw);
            }
        }
        Some(EventKind::Stat) => s.probes += 1,
        Some(EventKind::Modify) if ok => {
            let sc = r.syscall.clone().unwrap_or_default();
            *s.changes_by_syscall.entry(sc).or_default() += 1;
            // The file a change creates or overwrites: the second path of a rename, link or
            // symlink, else the first. A removed file is in the changes, not among the files
            // written.
            let acc = classify(EventKind::Modify, r);
            let target = if acc.second.contains(Access::Write) {
                r.resolved_path2.as_ref().or(r.path2.as_ref())
            } else if acc.first.contains(Access::Write) {
                best
            } else {
                None
            };
            let removal = matches!(
                r.syscall
                    .as_deref()
                    .and_then(|n| Syscall::from_name(n.as_bytes())),
                Some(Syscall::Unlink | Syscall::Unlinkat | Syscall::Rmdir)
            );
            if let Some(p) = target
                && !removal
            {
                let key = FileKey::Path(p.clone());
                t.names.entry(key.clone()).or_insert_with(|| p.clone());
                t.written.entry(key).or_default().0 += 1;
            }
        }
        // A channel the record does not see: a submitted request, or a set-up, entry or
        // registration that worked (one refused, as by the sandbox's filter, opens none).
        Some(EventKind::IoUring) if r.syscall.is_none() || r.ret.is_some_and(|v| v >= 0) => {
            s.io_uring += 1
        }
        _ => {}
    }
}

/// The summary as text for a terminal. `list_files` adds the file lists.
pub fn render_text(s: &Summary, list_files: bool) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "ledger          {} ({}, schema {})",
        s.ledger, s.form, s.schema_version
    );
    if !s.command.is_empty() {
        let _ = writeln!(o, "command         {}", shell_words(&s.command));
    }
    let _ = writeln!(o, "scope           {}", s.scope);
    if let Some(d) = s.duration_s {
        let _ = writeln!(o, "duration        {d:.3} s");
    }
    if let Some(e) = s.exit_status {
        let _ = writeln!(o, "exit status     {e}");
    }
    let kinds: Vec<String> = s
        .events_by_kind
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let _ = writeln!(o, "events          {} ({})", s.events, kinds.join(", "));
    let _ = writeln!(o, "processes       {}", s.processes);
    let _ = writeln!(o, "execs           {} ({} failed)", s.execs, s.execs_failed);
    let _ = writeln!(
        o,
        "files read      {} ({} bytes through their fds)",
        s.files_read.len(),
        s.bytes_read
    );
    let _ = writeln!(
        o,
        "files written   {} ({} bytes)",
        s.files_written.len(),
        s.bytes_written
    );
    let _ = writeln!(
        o,
        "probes          {} (stat, access, readlink, ...)",
        s.probes
    );
    if !s.changes_by_syscall.is_empty() {
        let c: Vec<String> = s
            .changes_by_syscall
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(o, "changes         {}", c.join(", "));
    }
    if s.partial_paths > 0 {
        let _ = writeln!(o, "partial paths   {}", s.partial_paths);
    }
    if s.io_uring > 0 {
        let _ = writeln!(o, "io_uring        {} rows", s.io_uring);
    }
    let errnos: Vec<String> = s
        .failed_opens_by_errno
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if errnos.is_empty() {
        let _ = writeln!(o, "failed opens    0");
    } else {
        let _ = writeln!(
            o,
            "failed opens    {} ({})",
            s.failed_opens,
            errnos.join(", ")
        );
    }
    match s.events_lost {
        Some(n) => {
            let _ = writeln!(o, "lost events     {n}");
        }
        None => {
            let _ = writeln!(o, "lost events     unknown");
        }
    }
    if let Some(ov) = &s.overload {
        let _ = writeln!(o, "overload        {}", ov.text());
    }
    if !s.killed.is_empty() {
        let _ = writeln!(o, "killed at end   {}", s.killed.len());
    }
    if s.complete {
        let _ = writeln!(o, "record          complete");
    } else {
        let _ = writeln!(o, "record          INCOMPLETE");
        for r in &s.incomplete_reasons {
            let _ = writeln!(o, "  - {r}");
        }
    }
    if list_files {
        for (what, files) in [("read", &s.files_read), ("written", &s.files_written)] {
            let _ = writeln!(o, "\nfiles {what}:");
            let _ = writeln!(o, "  opens      bytes  path");
            for f in files {
                let _ = writeln!(
                    o,
                    "  {:>5} {:>10}  {}",
                    f.opens,
                    f.bytes,
                    escape_path(&f.path)
                );
            }
        }
    }
    o
}
