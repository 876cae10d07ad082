//! The audit engine: one pass over a ledger's columns, each distinct path classified once.
//!
//! For every row that touches a file the engine works out the access (read, write, exec, probe,
//! list) and whether it succeeded, matches the row's paths (kernel-resolved, as passed, and the
//! host's view) against the policy's rules and allow-lists, and aggregates findings per rule,
//! outcome, access, process and path. Rows of aet's own set-up (bwrap building the sandbox, aet's
//! stage before it execs the command) are left out.

use std::{os::unix::ffi::OsStrExt as _, path::Path};

use arrow_array::{
    Array, BinaryArray, BooleanArray, Int32Array, Int64Array, ListArray, RecordBatch, UInt32Array,
    UInt64Array, cast::AsArray as _,
};
use rustc_hash::FxHashMap;
use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use aet_common::{EventKind, Syscall};

use super::policy::{Access, Attempts, Policy, Severity};
use super::reached::Reached;
use crate::access::{RowFields, classify};
use crate::ledger::{
    reader::{Form, Ledger, ReadError},
    record::LedgerMeta,
    schema::col,
};

/// The columns the engine reads.
pub const COLUMNS: &[&str] = &[
    col::SEQ,
    col::TS_NS,
    col::KIND,
    col::SYSCALL,
    col::PID,
    col::PPID,
    col::UID,
    col::COMM,
    col::PATH,
    col::PATH_RAW,
    col::RESOLVED_PATH,
    col::RESOLVED_PATH_RAW,
    col::HOST_PATH,
    col::HOST_PATH_RAW,
    col::PATH2,
    col::PATH2_RAW,
    col::RESOLVED_PATH2,
    col::RESOLVED_PATH2_RAW,
    col::FLAGS,
    col::PROT,
    col::RET,
    col::ERRNO,
    col::ARGV,
    col::CHILD_PID,
    col::DEV,
    col::INO,
    col::BYTES_READ,
    col::BYTES_WRITTEN,
    col::FD,
    col::FD_ORIGIN,
    col::TARGET_PID,
    col::TARGET_IN_RUN,
    col::PTRACE_REQUEST,
    col::NET_FAMILY,
    col::NET_ADDRESS,
    col::NET_ADDRESS_RAW,
    col::NET_PORT,
];

/// What a finding is.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The access succeeded.
    Hit,
    /// It was denied or failed.
    Attempted,
    /// A cheat path was only probed or listed.
    Probed,
    /// `--mode enforce`: the barrier denied it (EACCES).
    Blocked,
    /// `--mode shadow`: the barrier would have denied it.
    WouldBlock,
}

impl Outcome {
    pub const ALL: [Outcome; 5] = [
        Self::Hit,
        Self::Attempted,
        Self::Probed,
        Self::Blocked,
        Self::WouldBlock,
    ];

    /// The name in reports (the serde name).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::Attempted => "attempted",
            Self::Probed => "probed",
            Self::Blocked => "blocked",
            Self::WouldBlock => "would_block",
        }
    }
}

/// Where a finding belongs in the verdict.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    Cheat,
    Contaminant,
    OutOfScope,
    Warning,
    /// What the barrier blocked (or would have): no effect on the verdict.
    Barrier,
}

impl Class {
    pub const ALL: [Class; 5] = [
        Self::Cheat,
        Self::Contaminant,
        Self::OutOfScope,
        Self::Warning,
        Self::Barrier,
    ];

    /// The name in reports (the serde name).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Cheat => "cheat",
            Self::Contaminant => "contaminant",
            Self::OutOfScope => "out_of_scope",
            Self::Warning => "warning",
            Self::Barrier => "barrier",
        }
    }
}

/// One finding: a rule, an outcome, an access, a process and a path; the first occurrence and
/// how many rows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Finding {
    pub class: Class,
    pub rule: String,
    pub outcome: Outcome,
    pub access: Cow<'static, str>,
    /// The kernel-resolved path (else the path as passed); lossy UTF-8.
    pub path: String,
    /// The exact bytes of `path` in hex, set only when they are not UTF-8.
    pub path_hex: Option<String>,
    /// The path as the process passed it, when different.
    pub raw_path: Option<String>,
    pub host_path: Option<String>,
    pub errno: Option<String>,
    pub count: u64,
    pub first_seq: u64,
    pub first_ts_ns: i64,
    pub pid: u32,
    pub uid: u32,
    pub comm: String,
    /// The program the process was running (its last exec before the access).
    pub exe: Option<String>,
    pub argv: Option<Vec<String>>,
    /// The process's ancestors up to the run's first process, nearest first.
    pub ancestry: Vec<Ancestor>,
    /// The transcript's tool call running at that time (when transcripts were given).
    pub tool_call: Option<super::transcript::ToolCallRef>,
    /// Whether a transcript mentions the path (when transcripts were given).
    pub mentioned_in_transcript: Option<bool>,
    /// How the process reached the file: `path` (named it), or through an fd that was
    /// `inherited` at start, `received` over a socket, `copied` from another process, handed
    /// over by `fanotify`, or of `unknown` origin (no recorded open, arrival or start explains
    /// it). For process findings, unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reached: Option<Reached>,
    /// For a finding about another process: its pid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_pid: Option<u32>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Ancestor {
    pub pid: u32,
    pub comm: String,
}

/// A process of the run, for the report's tree.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    pub exe: Option<String>,
    pub argv: Option<Vec<String>>,
    pub first_ts_ns: i64,
    /// Part of aet's own set-up (bwrap, aet's stage): not audited.
    pub setup: bool,
    /// Has a finding (cheat, contaminant or out-of-scope).
    pub flagged: bool,
    #[serde(skip)]
    seen_start: bool,
}

/// What one pass found.
#[derive(Debug, Default)]
pub struct Scan {
    pub rows: u64,
    pub setup_rows: u64,
    pub distinct_paths: usize,
    pub findings: Vec<Finding>,
    /// Rows that matched each rule (by rule index), attempts included.
    pub rule_hits: Vec<u64>,
    pub processes: Vec<Proc>,
    pub io_uring_rows: u64,
    /// Processes already running when the monitor attached (no fork or exec seen).
    pub unseen_starts: u64,
    pub root_pid: Option<u32>,
    /// Every distinct path the run touched (for transcript correlation), lossy text.
    pub paths: Vec<String>,
    pub first_ts_ns: i64,
    pub last_ts_ns: i64,
}

struct PathInfo {
    rules: Box<[u16]>,
    /// Access bits the allow-list permits.
    allowed: u8,
    /// Not a file-system path (pipe:[..], anon_inode:..., a memfd): never out of scope.
    pseudo: bool,
    /// Access bits the barrier allows (all when there is none); `barrier_change`: whether it
    /// allows creating or removing at the path (a right of its parent directory).
    barrier: u8,
    barrier_change: bool,
}

/// A text column (read as bytes) that may have a `_raw` twin holding the exact bytes; either is
/// `None` when it is null in the whole batch (most are: a raw twin exists only for bytes that
/// are not UTF-8).
struct Bytes<'a> {
    text: Option<&'a BinaryArray>,
    raw: Option<&'a BinaryArray>,
}

impl<'a> Bytes<'a> {
    fn new(b: &'a RecordBatch, text: &str, raw: &str) -> Self {
        let some = |a: &'a BinaryArray| (a.null_count() < a.len()).then_some(a);
        Bytes {
            text: some(bin_col(b, text)),
            raw: some(bin_col(b, raw)),
        }
    }

    #[inline]
    fn get(&self, i: usize) -> Option<&'a [u8]> {
        if let Some(raw) = self.raw
            && raw.is_valid(i)
        {
            return Some(raw.value(i));
        }
        match self.text {
            Some(t) if t.is_valid(i) => Some(t.value(i)),
            _ => None,
        }
    }
}

fn bin_col<'a>(b: &'a RecordBatch, name: &str) -> &'a BinaryArray {
    b.column_by_name(name)
        .expect("projected column")
        .as_binary::<i32>()
}

fn prim<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> &'a T {
    b.column_by_name(name)
        .expect("projected column")
        .as_any()
        .downcast_ref::<T>()
        .expect("column type checked at open")
}

/// The classifier's view of row `i` of a batch: columns read only when asked.
struct ColFields<'a> {
    i: usize,
    syscall: &'a BinaryArray,
    flags: &'a UInt32Array,
    prot: &'a UInt32Array,
    bytes_read: &'a UInt64Array,
    bytes_written: &'a UInt64Array,
}

impl RowFields for ColFields<'_> {
    fn syscall(&self) -> Option<Syscall> {
        let i = self.i;
        self.syscall
            .is_valid(i)
            .then(|| Syscall::from_name(self.syscall.value(i)))
            .flatten()
    }

    fn flags(&self) -> Option<u32> {
        self.flags
            .is_valid(self.i)
            .then(|| self.flags.value(self.i))
    }

    fn prot(&self) -> Option<u32> {
        self.prot.is_valid(self.i).then(|| self.prot.value(self.i))
    }

    fn bytes(&self) -> (u64, u64) {
        let v = |a: &UInt64Array| {
            if a.is_valid(self.i) {
                a.value(self.i)
            } else {
                0
            }
        };
        (v(self.bytes_read), v(self.bytes_written))
    }
}

const FRONT: usize = 4096;

/// The front cache's slot for a path: its length and three of its 8-byte words, mixed.
#[inline]
fn front_slot(p: &[u8]) -> usize {
    let n = p.len();
    let word = |at: usize| u64::from_ne_bytes(p[at..at + 8].try_into().expect("8 bytes"));
    let (a, b, c) = if n >= 8 {
        (word(0), word((n / 2).min(n - 8)), word(n - 8))
    } else {
        let mut w = [0u8; 8];
        w[..n].copy_from_slice(p);
        (u64::from_ne_bytes(w), 0, 0)
    };
    let h =
        (a ^ b.rotate_left(21) ^ c.rotate_left(42) ^ n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> (64 - FRONT.trailing_zeros())) as usize
}

fn lossy(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(b).into_owned(),
    }
}

/// The engine's state over one ledger.
struct Engine<'p> {
    policy: &'p Policy,
    cache: FxHashMap<Box<[u8]>, u32>,
    /// The bytes of each path id.
    path_bytes: Vec<Box<[u8]>>,
    /// A direct-mapped cache in front of `cache`, indexed by a few of a path's bytes (no full
    /// hash): most look-ups end here, with one comparison.
    front: Box<[u32; FRONT]>,
    infos: Vec<PathInfo>,
    path_texts: Vec<String>,
    path_hex: Vec<Option<String>>,
    procs: FxHashMap<u32, Proc>,
    findings: Vec<Finding>,
    index: FxHashMap<(u32, Outcome, u8, u32, u32), usize>,
    rule_hits: Vec<u64>,
    protected_ids: Vec<(u64, u64, usize)>,
    scan: Scan,
    /// Rule index used for out-of-scope findings, by access.
    oos_rule: u32,
    /// Findings about other processes, by (actor, target, access, outcome).
    proc_index: FxHashMap<(u32, u32, &'static str, Outcome), usize>,
    /// Findings of argv rules, by (rule, process, outcome).
    argv_index: FxHashMap<(usize, u32, Outcome), usize>,
    /// The run's barrier (`--mode shadow|enforce`), as the stage built it.
    barrier: Option<crate::barrier::Model>,
}

impl<'p> Engine<'p> {
    fn new(policy: &'p Policy, protected_ids: Vec<(u64, u64, usize)>) -> Self {
        let nrules = policy.rules.len() + policy.protected.len();
        Engine {
            policy,
            cache: FxHashMap::default(),
            path_bytes: Vec::new(),
            front: Box::new([u32::MAX; FRONT]),
            infos: Vec::new(),
            path_texts: Vec::new(),
            path_hex: Vec::new(),
            procs: FxHashMap::default(),
            findings: Vec::new(),
            index: FxHashMap::default(),
            rule_hits: vec![0; nrules],
            protected_ids,
            scan: Scan::default(),
            oos_rule: u32::MAX,
            proc_index: FxHashMap::default(),
            argv_index: FxHashMap::default(),
            barrier: None,
        }
    }

    /// A finding's first row: the process and where the row is; the paths' other forms, how the
    /// file was reached and the target are left for the caller.
    fn finding(
        &self,
        class: Class,
        rule: String,
        outcome: Outcome,
        access: &'static str,
        path: String,
        row: &RowRef<'_>,
    ) -> Finding {
        let p = self.procs.get(&row.pid);
        Finding {
            class,
            rule,
            outcome,
            access: Cow::Borrowed(access),
            path,
            path_hex: None,
            raw_path: None,
            host_path: None,
            errno: row
                .cols
                .errno
                .is_valid(row.i)
                .then(|| lossy(row.cols.errno.value(row.i))),
            count: 1,
            first_seq: row.cols.seq.value(row.i),
            first_ts_ns: row.cols.ts.value(row.i),
            pid: row.pid,
            uid: row.cols.uid.value(row.i),
            comm: lossy(row.cols.comm.value(row.i)),
            exe: p.and_then(|p| p.exe.clone()),
            argv: p.and_then(|p| p.argv.clone()),
            ancestry: Vec::new(),
            tool_call: None,
            mentioned_in_transcript: None,
            reached: None,
            target_pid: None,
        }
    }

    /// A finding of an argv rule: the process ran a command line the rule names.
    fn record_argv(&mut self, rule: usize, line: &[u8], row: &RowRef<'_>) {
        let r = &self.policy.rules[rule];
        let class = match r.severity {
            Severity::Cheat => Class::Cheat,
            Severity::Contaminant => Class::Contaminant,
            Severity::Warn => Class::Warning,
        };
        let outcome = Outcome::Hit;
        let key = (rule, row.pid, outcome);
        if let Some(&i) = self.argv_index.get(&key) {
            self.findings[i].count += 1;
            return;
        }
        let f = Finding {
            path_hex: std::str::from_utf8(line)
                .is_err()
                .then(|| crate::util::hex(line)),
            ..self.finding(class, r.name.clone(), outcome, "exec", lossy(line), row)
        };
        if matches!(class, Class::Cheat | Class::Contaminant)
            && let Some(p) = self.procs.get_mut(&row.pid)
        {
            p.flagged = true;
        }
        self.argv_index.insert(key, self.findings.len());
        self.findings.push(f);
    }

    /// A finding about an access to a process outside the run.
    fn record_process(
        &mut self,
        sev: Severity,
        access: &'static str,
        target: u32,
        row: &RowRef<'_>,
    ) {
        let outcome = if row.ok {
            Outcome::Hit
        } else {
            Outcome::Attempted
        };
        let class = match (sev, outcome) {
            (_, Outcome::Attempted) | (Severity::Warn, _) => Class::Warning,
            (Severity::Cheat, _) => Class::Cheat,
            (Severity::Contaminant, _) => Class::Contaminant,
        };
        let key = (row.pid, target, access, outcome);
        if let Some(&i) = self.proc_index.get(&key) {
            self.findings[i].count += 1;
            return;
        }
        let f = Finding {
            raw_path: row.raw.map(lossy),
            target_pid: Some(target),
            ..self.finding(
                class,
                "processes.outside".into(),
                outcome,
                access,
                format!("pid {target}"),
                row,
            )
        };
        if matches!(class, Class::Cheat | Class::Contaminant)
            && let Some(p) = self.procs.get_mut(&row.pid)
        {
            p.flagged = true;
        }
        self.proc_index.insert(key, self.findings.len());
        self.findings.push(f);
    }

    #[inline]
    fn path_id(&mut self, p: &[u8]) -> u32 {
        let slot = front_slot(p);
        let id = self.front[slot];
        if id != u32::MAX && *self.path_bytes[id as usize] == *p {
            return id;
        }
        let id = self.path_id_slow(p);
        self.front[slot] = id;
        id
    }

    fn path_id_slow(&mut self, p: &[u8]) -> u32 {
        if let Some(&id) = self.cache.get(p) {
            return id;
        }
        let id = self.infos.len() as u32;
        let matches = self.policy.set.matches(p);
        let rules: Box<[u16]> = matches.iter().map(|i| i as u16).collect();
        let pseudo = p.first() != Some(&b'/');
        let mut allowed = 0u8;
        if let Some(a) = &self.policy.allow {
            let path = Path::new(std::ffi::OsStr::from_bytes(p));
            let read = a.read.is_match(path);
            if read {
                allowed |= Access::Read.bit();
            }
            if a.write.is_match(path) {
                allowed |= Access::Write.bit();
            }
            let exec = match &a.exec {
                Some(e) => e.is_match(path),
                None => read,
            };
            if exec {
                allowed |= Access::Exec.bit();
            }
            let probe = match &a.probe {
                Some(pr) => pr.is_match(path),
                None => true,
            };
            if probe {
                allowed |= Access::Probe.bit() | Access::List.bit();
            }
            if a.connect.as_ref().is_some_and(|c| c.is_match(path)) {
                allowed |= Access::Connect.bit();
            }
        }
        let (barrier, barrier_change) = match &self.barrier {
            None => (u8::MAX, true),
            Some(m) => (
                Access::ALL
                    .iter()
                    .filter(|a| m.allows(p, **a, false))
                    .fold(0, |b, a| b | a.bit()),
                m.allows(p, Access::Write, true),
            ),
        };
        self.infos.push(PathInfo {
            rules,
            allowed,
            pseudo,
            barrier,
            barrier_change,
        });
        self.path_texts.push(lossy(p));
        self.path_hex
            .push(std::str::from_utf8(p).is_err().then(|| crate::util::hex(p)));
        self.cache.insert(p.into(), id);
        self.path_bytes.push(p.into());
        id
    }

    fn proc_mut(&mut self, pid: u32, ppid: u32, comm: &[u8], ts: i64) -> &mut Proc {
        self.procs.entry(pid).or_insert_with(|| Proc {
            pid,
            ppid,
            comm: lossy(comm),
            first_ts_ns: ts,
            ..Proc::default()
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        class: Class,
        rule: u32,
        outcome: Outcome,
        access: Access,
        path_id: u32,
        row: &RowRef<'_>,
    ) {
        let key = (rule, outcome, access.bit(), row.pid, path_id);
        if let Some(&i) = self.index.get(&key) {
            self.findings[i].count += 1;
            return;
        }
        let rule_name = if rule == self.oos_rule {
            format!("out_of_scope.{}", access.name())
        } else if rule == BARRIER_RULE {
            format!("barrier.{}", access.name())
        } else if (rule as usize) < self.policy.rules.len() {
            self.policy.rules[rule as usize].name.clone()
        } else {
            let (name, _) = &self.policy.protected[rule as usize - self.policy.rules.len()];
            format!("protected.{name}")
        };
        let f = Finding {
            path_hex: self.path_hex[path_id as usize].clone(),
            raw_path: row.raw.filter(|r| Some(*r) != row.resolved).map(lossy),
            host_path: row.host.map(lossy),
            reached: row.reached,
            ..self.finding(
                class,
                rule_name,
                outcome,
                access.name(),
                self.path_texts[path_id as usize].clone(),
                row,
            )
        };
        if matches!(class, Class::Cheat | Class::Contaminant | Class::OutOfScope)
            && let Some(p) = self.procs.get_mut(&row.pid)
        {
            p.flagged = true;
        }
        self.index.insert(key, self.findings.len());
        self.findings.push(f);
    }

    /// Lists an access the barrier blocked (enforce: it failed with EACCES and the rules deny
    /// it) or would have blocked (shadow: it succeeded, or was refused by permissions, and the
    /// rules deny it).
    fn check_barrier(
        &mut self,
        row: &RowRef<'_>,
        errno: Option<&[u8]>,
        access: Access,
        id: u32,
        change: bool,
    ) {
        let Some(mode) = self.barrier.as_ref().map(|m| m.mode) else {
            return;
        };
        let info = &self.infos[id as usize];
        let allowed = if change && access == Access::Write {
            info.barrier_change
        } else {
            info.barrier & access.bit() != 0
        };
        if allowed {
            return;
        }
        let denied = errno == Some(b"EACCES");
        let outcome = match mode {
            crate::barrier::BarrierMode::Enforce if denied => Outcome::Blocked,
            crate::barrier::BarrierMode::Shadow if row.ok || denied || errno == Some(b"EPERM") => {
                Outcome::WouldBlock
            }
            _ => return,
        };
        self.record(Class::Barrier, BARRIER_RULE, outcome, access, id, row);
    }

    /// Classifies one access of a row at a path.
    #[inline]
    fn classify(
        &mut self,
        row: &RowRef<'_>,
        access: Access,
        ids: &[u32],
        ident: Option<(u64, u64)>,
    ) {
        // Most accesses match no rule and are allowed (or failed): nothing to record.
        if ident.is_none() && ids.iter().all(|&i| self.infos[i as usize].rules.is_empty()) {
            let allowed = ids
                .iter()
                .any(|&i| self.infos[i as usize].allowed & access.bit() != 0);
            if !row.ok || self.policy.allow.is_none() || allowed {
                return;
            }
        }
        self.classify_rules(row, access, ids, ident);
    }

    fn classify_rules(
        &mut self,
        row: &RowRef<'_>,
        access: Access,
        ids: &[u32],
        ident: Option<(u64, u64)>,
    ) {
        let ok = row.ok;
        let policy = self.policy;
        let mut matched_rule = false;
        let mut rules: Vec<u16> = Vec::new();
        for &id in ids {
            for &r in self.infos[id as usize].rules.iter() {
                if !rules.contains(&r) {
                    rules.push(r);
                }
            }
        }
        let main = ids[0];
        for &r in &rules {
            let rule = &policy.rules[r as usize];
            self.rule_hits[r as usize] += 1;
            matched_rule |= rule.severity != Severity::Warn;
            self.apply_rule(
                r as u32,
                rule.severity,
                rule.access_mask,
                rule.attempts,
                access,
                ok,
                main,
                row,
            );
        }
        // Protected files by identity: an alias (hard link, bind mount, /proc/self/fd) cannot
        // hide them.
        if let Some((dev, ino)) = ident {
            for k in 0..self.protected_ids.len() {
                let (d, i, n) = self.protected_ids[k];
                if d == dev && i == ino {
                    matched_rule = true;
                    let rule = (policy.rules.len() + n) as u32;
                    self.rule_hits[rule as usize] += 1;
                    let mask = Access::Read.bit() | Access::Write.bit() | Access::Exec.bit();
                    self.apply_rule(
                        rule,
                        Severity::Cheat,
                        mask,
                        Attempts::Warn,
                        access,
                        ok,
                        main,
                        row,
                    );
                }
            }
        }
        if ok
            && !matched_rule
            && let Some(allow) = &policy.allow
        {
            let info = &self.infos[main as usize];
            let allowed = ids
                .iter()
                .any(|&i| self.infos[i as usize].allowed & access.bit() != 0);
            let counts = match access {
                Access::Read | Access::Write | Access::Exec => true,
                Access::Probe | Access::List => allow.probe.is_some(),
                Access::Connect => allow.connect.is_some(),
            };
            // An endpoint is not a path: judged by `allow.connect` alone.
            if counts && !allowed && (!info.pseudo || access == Access::Connect) {
                self.record(
                    Class::OutOfScope,
                    self.oos_rule,
                    Outcome::Hit,
                    access,
                    main,
                    row,
                );
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn apply_rule(
        &mut self,
        rule: u32,
        sev: Severity,
        mask: u8,
        attempts: Attempts,
        access: Access,
        ok: bool,
        path_id: u32,
        row: &RowRef<'_>,
    ) {
        let class = match sev {
            Severity::Cheat => Class::Cheat,
            Severity::Contaminant => Class::Contaminant,
            Severity::Warn => Class::Warning,
        };
        if mask & access.bit() != 0 {
            if ok {
                self.record(class, rule, Outcome::Hit, access, path_id, row);
            } else {
                match attempts {
                    Attempts::Ignore => {}
                    Attempts::Warn => self.record(
                        Class::Warning,
                        rule,
                        Outcome::Attempted,
                        access,
                        path_id,
                        row,
                    ),
                    Attempts::Same => {
                        self.record(class, rule, Outcome::Attempted, access, path_id, row)
                    }
                }
            }
        } else if sev == Severity::Cheat && matches!(access, Access::Probe | Access::List) {
            let outcome = if ok {
                Outcome::Probed
            } else {
                Outcome::Attempted
            };
            self.record(Class::Warning, rule, outcome, access, path_id, row);
        }
    }
}

/// The rule index of barrier findings.
const BARRIER_RULE: u32 = u32::MAX - 1;

/// The columns a finding's first row is described with (read only for new findings).
struct Cols<'a> {
    seq: &'a UInt64Array,
    ts: &'a Int64Array,
    uid: &'a UInt32Array,
    comm: &'a BinaryArray,
    errno: &'a BinaryArray,
}

/// The row being classified.
#[derive(Clone, Copy)]
struct RowRef<'a> {
    cols: &'a Cols<'a>,
    i: usize,
    pid: u32,
    ok: bool,
    resolved: Option<&'a [u8]>,
    raw: Option<&'a [u8]>,
    host: Option<&'a [u8]>,
    reached: Option<Reached>,
}

fn is_stage(exe: &[u8], argv: Option<&[String]>) -> bool {
    exe == b"/.aet/aet" || argv.is_some_and(|a| a.get(1).is_some_and(|x| x == "__stage"))
}

fn argv_at(list: &ListArray, i: usize) -> Option<Vec<String>> {
    if !list.is_valid(i) {
        return None;
    }
    // The child's values by the list's offsets (no sliced array per row).
    let items = list.values().as_binary::<i32>();
    let range = list.value_offsets()[i] as usize..list.value_offsets()[i + 1] as usize;
    Some(range.map(|k| lossy(items.value(k))).collect())
}

/// How an fd arrived, with its file's identity.
type FdOrigin = (Reached, (u64, u64));

/// A `net` row's endpoint as the policy names endpoints: `ADDRESS:PORT`, `[ADDRESS]:PORT` (IPv6)
/// or `unix:PATH` (`unix:@NAME` for an abstract socket).
pub fn endpoint(
    family: Option<&[u8]>,
    address: Option<&[u8]>,
    port: Option<u32>,
) -> Option<Vec<u8>> {
    let address = address?;
    let mut ep = Vec::with_capacity(address.len() + 8);
    match family? {
        b"inet" => {
            ep.extend_from_slice(address);
            ep.extend_from_slice(format!(":{}", port?).as_bytes());
        }
        b"inet6" => {
            ep.push(b'[');
            ep.extend_from_slice(address);
            ep.extend_from_slice(format!("]:{}", port?).as_bytes());
        }
        b"unix" => {
            ep.extend_from_slice(b"unix:");
            ep.extend_from_slice(address);
        }
        _ => return None,
    }
    Some(ep)
}

/// What a ptrace request does to its target (`None`: nothing to report, as `PTRACE_TRACEME`,
/// whose target is the tracer).
fn ptrace_access(request: Option<u32>) -> Option<&'static str> {
    Some(match request? {
        0 => return None,
        1..=3 | 12 | 14 | 0x4204 | 0x4209 => "read",
        4..=6 | 13 | 15 | 0x4205 => "write",
        16 | 0x4206 => "attach",
        _ => "control",
    })
}

/// What a scan read besides its findings: the ledger's metadata and how it was read.
pub struct Read {
    pub meta: LedgerMeta,
    pub form: Form,
    pub damaged_tail: Option<String>,
}

/// Scans a ledger with a policy.
/// The file a `/proc` magic link leads to, as far as the record knows it:
/// `/proc/{self,thread-self,PID}/root/REST` is `/REST` (a run's processes share the root of
/// their view), `/proc/{self,thread-self,PID}/fd/N` the path that process last opened as fd N.
/// Links through links are followed (a few levels). `None` for any other path.
fn proc_alias(p: &[u8], pid: u32, fds: &FxHashMap<(u32, i32), Vec<u8>>) -> Option<Vec<u8>> {
    let mut cur = p.to_vec();
    let mut changed = false;
    for _ in 0..8 {
        let Some(rest) = cur.strip_prefix(b"/proc/") else {
            break;
        };
        let (who, rest) = match rest.iter().position(|&b| b == b'/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => break,
        };
        let owner = match who {
            b"self" | b"thread-self" => pid,
            d if !d.is_empty() && d.iter().all(u8::is_ascii_digit) => {
                std::str::from_utf8(d).ok()?.parse().ok()?
            }
            _ => break,
        };
        let next = if let Some(r) = rest.strip_prefix(b"/root") {
            if r.is_empty() {
                b"/".to_vec()
            } else if r.starts_with(b"/") {
                r.to_vec()
            } else {
                break;
            }
        } else if let Some(n) = rest.strip_prefix(b"/fd/") {
            let fd: i32 = std::str::from_utf8(n).ok()?.parse().ok()?;
            fds.get(&(owner, fd))?.clone()
        } else {
            break;
        };
        cur = next;
        changed = true;
    }
    changed.then_some(cur)
}

pub fn scan(ledger_path: &Path, policy: &Policy) -> Result<(Scan, Read), ReadError> {
    let mut ledger = Ledger::open_columns(ledger_path, COLUMNS)?;
    let meta = ledger.meta()?;
    let form = ledger.form();
    // aet's own set-up precedes the command when a stage ran (sandbox or identity).
    let audit_setup = meta.sandbox.is_some() || meta.identity.is_some() || meta.barrier.is_some();
    let mut protected_ids = Vec::new();
    for (n, (name, path)) in policy.protected.iter().enumerate() {
        // The identity taken at run start when the run recorded it, else now.
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
    let mut e = Engine::new(policy, protected_ids);
    e.barrier = meta.barrier.as_ref().map(crate::barrier::Model::new);
    let protected_paths: Vec<(Vec<u8>, usize)> = policy
        .protected
        .iter()
        .enumerate()
        .map(|(n, (_, p))| (p.as_os_str().as_encoded_bytes().to_vec(), n))
        .collect();
    // How fds arrived: by (pid, fd) from the fd rows, with the file's identity; and by identity
    // (fd rows and the fds the command started with).
    let mut fd_origins: FxHashMap<(u32, i32), FdOrigin> = FxHashMap::default();
    // Under a barrier, the path each process's open fds were opened by (the last open that
    // returned it): a denied reopen through `/proc/PID/fd/N` is that file.
    let mut fd_paths: FxHashMap<(u32, i32), Vec<u8>> = FxHashMap::default();
    let mut ident_origins: FxHashMap<(u64, u64), Reached> = FxHashMap::default();
    // The files the command started with, by identity, with the path aet saw them by: path
    // rules are matched against it when the run reads through such an fd (`< answers/key.txt`).
    let mut inherited_paths: FxHashMap<(u64, u64), Vec<u8>> = FxHashMap::default();
    for f in &meta.inherited_fds {
        if f.kind == "file" || f.kind == "directory" {
            ident_origins.insert((f.dev, f.ino), Reached::Inherited);
            if let Some(p) = &f.path {
                inherited_paths.insert(
                    (f.dev, f.ino),
                    p.as_path().as_os_str().as_encoded_bytes().to_vec(),
                );
            }
        }
    }
    let mut first = true;
    let mut last_pid = u32::MAX;
    let mut last_setup = false;
    while let Some(b) = ledger.next_batch()? {
        let seq = prim::<UInt64Array>(&b, col::SEQ);
        let ts = prim::<Int64Array>(&b, col::TS_NS);
        let kind = bin_col(&b, col::KIND);
        let syscall = bin_col(&b, col::SYSCALL);
        let pid = prim::<UInt32Array>(&b, col::PID);
        let ppid = prim::<UInt32Array>(&b, col::PPID);
        let uid = prim::<UInt32Array>(&b, col::UID);
        let comm = bin_col(&b, col::COMM);
        let path = Bytes::new(&b, col::PATH, col::PATH_RAW);
        let resolved = Bytes::new(&b, col::RESOLVED_PATH, col::RESOLVED_PATH_RAW);
        let host = Bytes::new(&b, col::HOST_PATH, col::HOST_PATH_RAW);
        let path2 = Bytes::new(&b, col::PATH2, col::PATH2_RAW);
        let resolved2 = Bytes::new(&b, col::RESOLVED_PATH2, col::RESOLVED_PATH2_RAW);
        let flags = prim::<UInt32Array>(&b, col::FLAGS);
        let prot = prim::<UInt32Array>(&b, col::PROT);
        let ret = prim::<Int64Array>(&b, col::RET);
        let errno = bin_col(&b, col::ERRNO);
        let cols = Cols {
            seq,
            ts,
            uid,
            comm,
            errno,
        };
        let argv = b
            .column_by_name(col::ARGV)
            .expect("projected column")
            .as_list::<i32>();
        let child = prim::<UInt32Array>(&b, col::CHILD_PID);
        let dev = prim::<UInt64Array>(&b, col::DEV);
        let ino = prim::<UInt64Array>(&b, col::INO);
        let bytes_read = prim::<UInt64Array>(&b, col::BYTES_READ);
        let bytes_written = prim::<UInt64Array>(&b, col::BYTES_WRITTEN);
        let fdc = prim::<Int32Array>(&b, col::FD);
        let fd_origin = bin_col(&b, col::FD_ORIGIN);
        let target = prim::<UInt32Array>(&b, col::TARGET_PID);
        let target_in = prim::<BooleanArray>(&b, col::TARGET_IN_RUN);
        let preq = prim::<UInt32Array>(&b, col::PTRACE_REQUEST);
        let net_family = bin_col(&b, col::NET_FAMILY);
        let net_address = Bytes::new(&b, col::NET_ADDRESS, col::NET_ADDRESS_RAW);
        let net_port = prim::<UInt32Array>(&b, col::NET_PORT);
        // Protected files by identity need the row's dev and ino; other policies never read
        // them.
        let by_ident = !e.protected_ids.is_empty();
        e.scan.rows += b.num_rows() as u64;
        if b.num_rows() > 0 {
            e.scan.last_ts_ns = ts.value(b.num_rows() - 1);
        }
        for i in 0..b.num_rows() {
            let p = pid.value(i);
            let k = kind.value(i);
            // The columns only a process's first row needs.
            let (c, t) = (|| comm.value(i), || ts.value(i));
            if first {
                first = false;
                e.scan.root_pid = Some(p);
                e.scan.first_ts_ns = t();
                let pr = e.proc_mut(p, ppid.value(i), c(), t());
                pr.setup = audit_setup;
                pr.seen_start = true;
            }
            // Rows of one process come in runs: remember the last one's state.
            let setup = if p == last_pid {
                last_setup
            } else {
                let pp = ppid.value(i);
                last_pid = p;
                last_setup = e.proc_mut(p, pp, c(), t()).setup;
                last_setup
            };
            match k {
                b"fork" => {
                    if child.is_valid(i) {
                        let ch = child.value(i);
                        let pr = e.proc_mut(ch, p, c(), t());
                        pr.seen_start = true;
                        pr.setup = setup;
                        pr.ppid = p;
                        if ch == last_pid {
                            last_setup = setup;
                        }
                    }
                    continue;
                }
                b"exit" | b"memfd" => {
                    if setup {
                        e.scan.setup_rows += 1;
                    }
                    continue;
                }
                b"exec" => {
                    let ok = ret.is_valid(i) && ret.value(i) >= 0;
                    if ok {
                        let exe = resolved.get(i).or(path.get(i)).unwrap_or_default();
                        let args = argv_at(argv, i);
                        let stays_setup =
                            setup && (exe.ends_with(b"/bwrap") || is_stage(exe, args.as_deref()));
                        let pr = e.procs.get_mut(&p).expect("created above");
                        pr.seen_start = true;
                        pr.exe = Some(lossy(exe));
                        pr.argv = args;
                        pr.comm = lossy(c());
                        pr.setup = stays_setup;
                        if p == last_pid {
                            last_setup = stays_setup;
                        }
                    }
                }
                // Used, not refused (see the summary's count).
                b"io_uring" if !syscall.is_valid(i) || ret.is_valid(i) && ret.value(i) >= 0 => {
                    e.scan.io_uring_rows += 1
                }
                _ => {}
            }
            if setup {
                e.scan.setup_rows += 1;
                // The stage's exec of the command is the command's first access.
                if k == b"exec"
                    && e.barrier.is_some()
                    && errno.is_valid(i)
                    && let Some(p1) = resolved.get(i).or(path.get(i))
                {
                    let row = RowRef {
                        cols: &cols,
                        i,
                        pid: p,
                        ok: false,
                        resolved: resolved.get(i),
                        raw: path.get(i),
                        host: None,
                        reached: None,
                    };
                    let id = e.path_id(p1);
                    e.check_barrier(&row, Some(errno.value(i)), Access::Exec, id, false);
                }
                continue;
            }
            // Rules on what a process ran: its argument vector, joined with spaces (a failed exec
            // ran nothing: a shell's search of PATH fails at every directory but one).
            if k == b"exec"
                && !e.policy.argv_rules.is_empty()
                && argv.is_valid(i)
                && ret.is_valid(i)
                && ret.value(i) >= 0
            {
                let items = argv.values().as_binary::<i32>();
                let range = argv.value_offsets()[i] as usize..argv.value_offsets()[i + 1] as usize;
                let mut line = Vec::new();
                for (n, k) in range.enumerate() {
                    if n > 0 {
                        line.push(b' ');
                    }
                    line.extend_from_slice(items.value(k));
                }
                let row = RowRef {
                    cols: &cols,
                    i,
                    pid: p,
                    ok: true,
                    resolved: None,
                    raw: None,
                    host: None,
                    reached: None,
                };
                for m in e.policy.argv_set.matches(&line).iter() {
                    let r = e.policy.argv_rules[m];
                    e.rule_hits[r] += 1;
                    e.record_argv(r, &line, &row);
                }
            }
            let Some(kind) = EventKind::from_name(k) else {
                continue;
            };
            let ok = match kind {
                // Bytes moved: done.
                EventKind::Io => true,
                // Submitted: its result is not recorded.
                EventKind::IoUring => false,
                _ => ret.is_valid(i) && ret.value(i) >= 0,
            };
            let row_ident =
                (dev.is_valid(i) && ino.is_valid(i)).then(|| (dev.value(i), ino.value(i)));
            // How an fd-based row's process reached its file.
            let reached = match kind {
                EventKind::Fd => {
                    let origin =
                        Reached::from_fd_origin(fd_origin.is_valid(i).then(|| fd_origin.value(i)));
                    if ok
                        && fdc.is_valid(i)
                        && let Some(id) = row_ident
                    {
                        fd_origins.insert((p, fdc.value(i)), (origin, id));
                        ident_origins.entry(id).or_insert(origin);
                    }
                    Some(origin)
                }
                EventKind::Io | EventKind::Mmap | EventKind::List => {
                    let by_fd = fdc
                        .is_valid(i)
                        .then(|| fd_origins.get(&(p, fdc.value(i))))
                        .flatten()
                        .filter(|(_, id)| Some(*id) == row_ident)
                        .map(|(o, _)| *o);
                    by_fd
                        .or_else(|| row_ident.and_then(|id| ident_origins.get(&id).copied()))
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
            };
            // Accesses to processes outside the run.
            if target.is_valid(i)
                && !(target_in.is_valid(i) && target_in.value(i))
                && let Some(sev) = policy.processes_outside
            {
                let syscall_name = syscall.is_valid(i).then(|| syscall.value(i));
                let access = match (kind, syscall_name) {
                    (EventKind::Process, Some(b"process_vm_readv")) => Some("read"),
                    (EventKind::Process, Some(b"process_vm_writev")) => Some("write"),
                    (EventKind::Process, Some(b"pidfd_open")) => Some("pidfd"),
                    (EventKind::Process, Some(b"ptrace")) => {
                        ptrace_access(preq.is_valid(i).then(|| preq.value(i)))
                    }
                    (EventKind::Fd, Some(b"pidfd_getfd")) => Some("copy_fd"),
                    (EventKind::Open, _) => Some(
                        match crate::access::open_accesses(if flags.is_valid(i) {
                            flags.value(i)
                        } else {
                            0
                        })
                        .contains(Access::Write)
                        {
                            true => "write",
                            false => "read",
                        },
                    ),
                    _ => None,
                };
                if let Some(access) = access {
                    let row = RowRef {
                        cols: &cols,
                        i,
                        pid: p,
                        ok,
                        resolved: resolved.get(i),
                        raw: resolved.get(i),
                        host: None,
                        reached: None,
                    };
                    e.record_process(sev, access, target.value(i), &row);
                }
            }
            // Network endpoints: connects and addressed sends, by `ADDRESS:PORT`,
            // `[ADDRESS]:PORT` or `unix:PATH`, against the rules and `allow.connect`.
            if kind == EventKind::Net {
                let outgoing = syscall.is_valid(i)
                    && matches!(syscall.value(i), b"connect" | b"sendto" | b"sendmsg");
                let family = net_family.is_valid(i).then(|| net_family.value(i));
                let port = net_port.is_valid(i).then(|| net_port.value(i));
                if outgoing && let Some(ep) = endpoint(family, net_address.get(i), port) {
                    let id = e.path_id(&ep);
                    let row = RowRef {
                        cols: &cols,
                        i,
                        pid: p,
                        ok,
                        resolved: None,
                        raw: None,
                        host: None,
                        reached: None,
                    };
                    e.classify(&row, Access::Connect, &[id], None);
                }
                continue;
            }
            let fields = ColFields {
                i,
                syscall,
                flags,
                prot,
                bytes_read,
                bytes_written,
            };
            let acc = classify(kind, &fields);
            let (a1, a2) = (acc.first.bits(), acc.second.bits());
            if a1 == 0 && a2 == 0 {
                continue;
            }
            let row = RowRef {
                cols: &cols,
                i,
                pid: p,
                ok,
                resolved: resolved.get(i),
                raw: path.get(i),
                host: host.get(i),
                reached,
            };
            let ident = row_ident.filter(|_| by_ident);
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
                fd_paths.insert((p, ret.value(i) as i32), p1.to_vec());
            }
            if governed && let Some(p1) = row.resolved.or(row.raw) {
                // A denial reached through a /proc magic link is the file it leads to.
                let alias = if err == Some(b"EACCES") {
                    proc_alias(p1, p, &fd_paths)
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
                if a2 != 0
                    && let Some(p2) = resolved2.get(i).or(path2.get(i))
                {
                    let id = e.path_id(p2);
                    let row2 = RowRef {
                        resolved: resolved2.get(i),
                        raw: path2.get(i),
                        host: None,
                        ..row
                    };
                    for a in Access::ALL {
                        if a2 & a.bit() != 0 {
                            e.check_barrier(&row2, err, a, id, true);
                        }
                    }
                }
            }
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
                    && reached == Some(Reached::Inherited)
                    && let Some(p1) = row_ident.and_then(|id| inherited_paths.get(&id))
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
                    let pp = protected_paths
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
                        protected_paths
                            .iter()
                            .find(|(pp, _)| Some(pp.as_slice()) == row.resolved)
                            .and_then(|(_, n)| e.protected_ids.iter().find(|x| x.2 == *n))
                            .map(|x| (x.0, x.1))
                    });
                    for a in Access::ALL {
                        if a1 & a.bit() != 0 {
                            e.classify(&row, a, &ids[..n], ident);
                        }
                    }
                }
            }
            if a2 != 0 {
                let row2 = RowRef {
                    resolved: resolved2.get(i),
                    raw: path2.get(i),
                    host: None,
                    ..row
                };
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
    }
    // Ancestry for each finding, from the recorded creators.
    let root = e.scan.root_pid;
    for f in &mut e.findings {
        let mut cur = e.procs.get(&f.pid).map(|p| p.ppid);
        let mut guard = 0;
        while let Some(pp) = cur {
            guard += 1;
            if guard > 256 {
                break;
            }
            let Some(p) = e.procs.get(&pp) else { break };
            f.ancestry.push(Ancestor {
                pid: p.pid,
                comm: p.comm.clone(),
            });
            if Some(pp) == root {
                break;
            }
            cur = Some(p.ppid);
        }
    }
    e.scan.unseen_starts = e
        .procs
        .values()
        .filter(|p| !p.seen_start && Some(p.pid) != root)
        .count() as u64;
    let mut procs: Vec<Proc> = e.procs.into_values().collect();
    procs.sort_by_key(|p| (p.first_ts_ns, p.pid));
    e.scan.processes = procs;
    e.scan.distinct_paths = e.infos.len();
    e.scan.paths = e.path_texts;
    e.scan.rule_hits = e.rule_hits;
    e.scan.findings = e.findings;
    let read = Read {
        meta,
        form,
        damaged_tail: ledger.damaged_tail.clone(),
    };
    Ok((e.scan, read))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_ids_are_exact_whatever_the_front_cache_slot() {
        let policy =
            Policy::parse("[allow]\nread = [\"/usr/**\"]\n", Path::new("p.toml")).expect("policy");
        let mut e = Engine::new(&policy, Vec::new());
        // Paths of one length whose first, middle and last words are equal collide in the
        // front cache; each must still get its own id, and the same id every time.
        let paths: Vec<Vec<u8>> = (0..3000u32)
            .map(|n| format!("/usr/share/aaaaaaaa{n:06}bbbbbbbbbb/x.txt").into_bytes())
            .chain([b"/a".to_vec(), b"/a\n\xff".to_vec(), Vec::new()])
            .collect();
        let ids: Vec<u32> = paths.iter().map(|p| e.path_id(p)).collect();
        for _ in 0..2 {
            for (p, id) in paths.iter().zip(&ids) {
                assert_eq!(e.path_id(p), *id);
                assert_eq!(&*e.path_bytes[*id as usize], p.as_slice());
            }
        }
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), paths.len());
    }

    #[test]
    fn proc_magic_links_lead_to_the_file_they_name() {
        let mut fds = FxHashMap::default();
        fds.insert((7, 3), b"/task/answers/key.txt".to_vec());
        let a = |p: &str, pid| proc_alias(p.as_bytes(), pid, &fds).map(|v| lossy(&v));
        assert_eq!(a("/proc/self/root/etc/x", 7).as_deref(), Some("/etc/x"));
        assert_eq!(a("/proc/12/root", 7).as_deref(), Some("/"));
        assert_eq!(
            a("/proc/thread-self/fd/3", 7).as_deref(),
            Some("/task/answers/key.txt")
        );
        assert_eq!(
            a("/proc/7/fd/3", 1).as_deref(),
            Some("/task/answers/key.txt")
        );
        assert_eq!(
            a("/proc/self/root/proc/self/fd/3", 7).as_deref(),
            Some("/task/answers/key.txt")
        );
        assert_eq!(a("/proc/self/fd/4", 7), None);
        assert_eq!(a("/proc/self/rootx/a", 7), None);
        assert_eq!(a("/proc/self/status", 7), None);
        assert_eq!(a("/etc/passwd", 7), None);
    }
}
