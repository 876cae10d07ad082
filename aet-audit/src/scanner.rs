//! The scanner: the audit's state over one ledger, each distinct path classified once (a front
//! cache, then a map), findings aggregated per rule, outcome, access, process and path.

use std::{os::unix::ffi::OsStrExt as _, path::Path};

use arrow_array::Array;
use rustc_hash::FxHashMap;
use std::borrow::Cow;

use crate::policy::{Access, Attempts, Policy, Severity, Target, programs};
use aet_ledger::hosts;

use super::batch::{RowRef, lossy};
use super::finding::{Class, Finding, Outcome, Proc};

pub(super) struct PathInfo {
    pub(super) rules: Box<[u16]>,
    /// Access bits the allow-list permits.
    pub(super) allowed: u8,
    /// Not a file-system path (pipe:[..], anon_inode:..., a memfd): never out of scope.
    pub(super) pseudo: bool,
    /// Access bits the barrier allows (all when there is none); `barrier_change`: whether it
    /// allows creating or removing at the path (a right of its parent directory).
    pub(super) barrier: u8,
    pub(super) barrier_change: bool,
}

pub(super) const FRONT: usize = 4096;

/// The front cache's slot for a path: its length and three of its 8-byte words, mixed.
#[inline]
pub(super) fn front_slot(p: &[u8]) -> usize {
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

/// The rows and processes a scan counts as the rows go by.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    pub rows: u64,
    pub setup_rows: u64,
    pub io_uring_rows: u64,
    /// Processes already running when the monitor attached (no fork or exec seen).
    pub unseen_starts: u64,
    pub root_pid: Option<u32>,
    pub first_ts_ns: i64,
    pub last_ts_ns: i64,
    /// Rows of a container runtime's set-up (processes that entered the run from outside it,
    /// before their first exec), left out like aet's own.
    pub runtime_rows: u64,
}

/// The engine's state over one ledger.
pub(super) struct Scanner<'p> {
    pub(super) policy: &'p Policy,
    pub(super) cache: FxHashMap<Box<[u8]>, u32>,
    /// The bytes of each path id.
    pub(super) path_bytes: Vec<Box<[u8]>>,
    /// A direct-mapped cache in front of `cache`, indexed by a few of a path's bytes (no full
    /// hash): most look-ups end here, with one comparison.
    pub(super) front: Box<[u32; FRONT]>,
    pub(super) infos: Vec<PathInfo>,
    pub(super) path_texts: Vec<String>,
    pub(super) path_hex: Vec<Option<String>>,
    pub(super) procs: FxHashMap<u32, Proc>,
    pub(super) findings: Vec<Finding>,
    pub(super) index: FxHashMap<(u32, Outcome, u8, u32, u32), usize>,
    pub(super) rule_hits: Vec<u64>,
    pub(super) protected_ids: Vec<(u64, u64, usize)>,
    pub(super) tally: Tally,
    /// Rule index used for out-of-scope findings, by access.
    pub(super) oos_rule: u32,
    /// Findings about other processes, by (actor, target, access, outcome).
    pub(super) proc_index: FxHashMap<(u32, u32, &'static str, Outcome), usize>,
    /// Findings of argv rules, by (rule, process, outcome).
    pub(super) argv_index: FxHashMap<(usize, u32, Outcome), usize>,
    /// The run's barrier (`--mode shadow|enforce`), as the stage built it.
    pub(super) barrier: Option<crate::policy::barrier::Model>,
    /// The hosts of the task repositories' upstreams (from `aet.sandbox`), normalized: what
    /// `{ host = "@upstream" }` names.
    pub(super) upstream: Vec<Vec<u8>>,
    /// Every exec and what each process touched, for the transcript's claims.
    pub(super) seen: crate::claims::Seen,
    pub(super) programs: crate::programs::Programs,
    /// The `programs.unhashed` warning, once a program row without a hash was met.
    pub(super) unhashed: Option<usize>,
    /// [`Policy::judges_programs`], taken once.
    pub(super) judges_programs: bool,
}

impl<'p> Scanner<'p> {
    pub(super) fn new(policy: &'p Policy, protected_ids: Vec<(u64, u64, usize)>) -> Self {
        let nrules = policy.rules.len() + policy.protected.len();
        Scanner {
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
            tally: Tally::default(),
            oos_rule: u32::MAX,
            proc_index: FxHashMap::default(),
            argv_index: FxHashMap::default(),
            barrier: None,
            upstream: Vec::new(),
            seen: crate::claims::Seen::default(),
            programs: crate::programs::Programs::default(),
            unhashed: None,
            judges_programs: policy.judges_programs(),
        }
    }

    /// A finding's first row: the process and where the row is; the paths' other forms, how the
    /// file was reached and the target are left for the caller.
    pub(super) fn finding(
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
                .c
                .errno
                .is_valid(row.i)
                .then(|| lossy(row.c.errno.value(row.i))),
            count: 1,
            first_seq: row.c.seq.value(row.i),
            first_ts_ns: row.ts(),
            last_ts_ns: row.ts(),
            pid: row.pid,
            uid: row.c.uid.value(row.i),
            comm: lossy(row.c.comm.value(row.i)),
            exe: p.and_then(|p| p.exe.clone()),
            argv: p.and_then(|p| p.argv.clone()),
            ancestry: Vec::new(),
            tool_call: None,
            mentioned_in_transcript: None,
            reached: None,
            target_pid: None,
            phase: self.policy.phase.clone(),
            watch: None,
            provenance: None,
        }
    }

    /// A finding of an argv rule: the process ran a command line the rule names.
    pub(super) fn record_argv(&mut self, rule: usize, line: &[u8], row: &RowRef<'_>) {
        let r = &self.policy.rules[rule];
        let class = Class::from(r.severity);
        let outcome = Outcome::Hit;
        let key = (rule, row.pid, outcome);
        if let Some(&i) = self.argv_index.get(&key) {
            let f = &mut self.findings[i];
            f.count += 1;
            f.last_ts_ns = row.ts();
            return;
        }
        let f = Finding {
            path_hex: std::str::from_utf8(line)
                .is_err()
                .then(|| aet_ledger::util::hex(line)),
            ..self.finding(class, r.name.clone(), outcome, "exec", lossy(line), row)
        };
        if class.marks_process()
            && let Some(p) = self.procs.get_mut(&row.pid)
        {
            p.flagged = true;
        }
        self.argv_index.insert(key, self.findings.len());
        self.findings.push(f);
    }

    /// A finding about an access to a process outside the run.
    pub(super) fn record_process(
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
            (_, Outcome::Attempted) | (Severity::Warning, _) => Class::Warning,
            (Severity::Cheat, _) => Class::Cheat,
            (Severity::Contaminant, _) => Class::Contaminant,
        };
        let key = (row.pid, target, access, outcome);
        if let Some(&i) = self.proc_index.get(&key) {
            let f = &mut self.findings[i];
            f.count += 1;
            f.last_ts_ns = row.ts();
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
        if class.marks_process()
            && let Some(p) = self.procs.get_mut(&row.pid)
        {
            p.flagged = true;
        }
        self.proc_index.insert(key, self.findings.len());
        self.findings.push(f);
    }

    #[inline]
    pub(super) fn path_id(&mut self, p: &[u8]) -> u32 {
        let slot = front_slot(p);
        let id = self.front[slot];
        if id != u32::MAX && *self.path_bytes[id as usize] == *p {
            return id;
        }
        let id = self.path_id_slow(p);
        self.front[slot] = id;
        id
    }

    pub(super) fn path_id_slow(&mut self, p: &[u8]) -> u32 {
        if let Some(&id) = self.cache.get(p) {
            return id;
        }
        let id = self.infos.len() as u32;
        let matches = self.policy.set.matches(p);
        // A host's key is matched by host rules only, a program's by hash rules only, a path by
        // the others.
        let host = p.starts_with(hosts::PREFIX);
        let program = p.starts_with(programs::PREFIX);
        let rules: Box<[u16]> = matches
            .iter()
            .filter(|&i| {
                let t = self.policy.rules[i].target;
                (t == Target::Host) == host && (t == Target::Program) == program
            })
            .map(|i| i as u16)
            .collect();

        let pseudo = p.first() != Some(&b'/');
        let mut allowed = 0u8;
        if program {
            // `[allow] programs` when given: the hash is listed (an unknown one never is).
            allowed = match self.policy.allow.as_ref().and_then(|a| a.programs.as_ref()) {
                None => Access::Exec.bit(),
                Some(set) => {
                    let hex = std::str::from_utf8(&p[programs::PREFIX.len()..]).unwrap_or("");
                    if set.contains(hex) {
                        Access::Exec.bit()
                    } else {
                        0
                    }
                }
            };
        } else if let Some(a) = &self.policy.allow {
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
            if host && a.hosts.as_ref().is_some_and(|h| h.matches_key(p)) {
                allowed |= Access::Host.bit();
            }
        }
        let (barrier, barrier_change) = match &self.barrier {
            None => (u8::MAX, true),
            Some(_) if program => (u8::MAX, true),
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
        self.path_hex.push(
            std::str::from_utf8(p)
                .is_err()
                .then(|| aet_ledger::util::hex(p)),
        );
        self.cache.insert(p.into(), id);
        self.path_bytes.push(p.into());
        id
    }

    pub(super) fn proc_mut(&mut self, pid: u32, ppid: u32, comm: &[u8], ts: i64) -> &mut Proc {
        self.procs.entry(pid).or_insert_with(|| Proc {
            pid,
            ppid,
            comm: lossy(comm),
            first_ts_ns: ts,
            ..Proc::default()
        })
    }

    pub(super) fn record(
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
            let f = &mut self.findings[i];
            f.count += 1;
            f.last_ts_ns = row.ts();
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
        if class.marks_process()
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
    pub(super) fn check_barrier(
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
            aet_ledger::barrier::BarrierMode::Enforce if denied => Outcome::Blocked,
            aet_ledger::barrier::BarrierMode::Shadow
                if row.ok || denied || errno == Some(b"EPERM") =>
            {
                Outcome::WouldBlock
            }
            _ => return,
        };
        self.record(Class::Barrier, BARRIER_RULE, outcome, access, id, row);
    }

    /// Classifies one access of a row at a path.
    #[inline]
    pub(super) fn classify(
        &mut self,
        row: &RowRef<'_>,
        access: Access,
        ids: &[u32],
        ident: Option<(u64, u64)>,
    ) {
        // Most accesses match no rule and are allowed (or failed): nothing to record.
        if ident.is_none() && ids.iter().all(|&i| self.infos[i as usize].rules.is_empty()) {
            let allowed = self.allowed(row, access, ids);
            if !row.ok || self.policy.allow.is_none() || allowed {
                return;
            }
        }
        self.classify_rules(row, access, ids, ident);
    }

    /// Whether the allow-list allows `access` of `row` at any of its paths `ids`. A write
    /// through the launcher's channel is the launcher's output, never the agent's choice.
    fn allowed(&self, row: &RowRef<'_>, access: Access, ids: &[u32]) -> bool {
        (row.channel && access == Access::Write)
            || ids
                .iter()
                .any(|&i| self.infos[i as usize].allowed & access.bit() != 0)
    }

    pub(super) fn classify_rules(
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
            // A rule of a path and a content: only a row of that program.
            if let Some(h) = &rule.sha256
                && row.sha256() != Some(h.as_bytes())
            {
                continue;
            }
            self.rule_hits[r as usize] += 1;
            matched_rule |= rule.severity != Severity::Warning;
            let applied = Applied {
                index: r as u32,
                severity: rule.severity,
                mask: rule.access_mask,
                attempts: rule.attempts,
            };
            self.apply_rule(applied, access, main, row);
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
                    let applied = Applied {
                        index: rule,
                        severity: Severity::Cheat,
                        mask: Access::Read.bit() | Access::Write.bit() | Access::Exec.bit(),
                        attempts: Attempts::Warning,
                    };
                    self.apply_rule(applied, access, main, row);
                }
            }
        }
        if ok
            && !matched_rule
            && let Some(allow) = &policy.allow
        {
            let info = &self.infos[main as usize];
            let allowed = self.allowed(row, access, ids);
            let counts = match access {
                Access::Read | Access::Write | Access::Exec => true,
                Access::Probe | Access::List => allow.probe.is_some(),
                Access::Connect => allow.connect.is_some(),
                Access::Host => allow.hosts.is_some(),
            };
            // An endpoint or a host is not a path: judged by `allow.connect` or `allow.hosts`
            // alone.
            let net = matches!(access, Access::Connect | Access::Host);
            // A program's hash is judged by `allow.programs` alone.
            let program = self.path_bytes[main as usize].starts_with(programs::PREFIX);
            if counts && !allowed && (!info.pseudo || net || program) {
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

    /// Rule `rule` applied to one access of `row` at path `path_id`.
    pub(super) fn apply_rule(
        &mut self,
        rule: Applied,
        access: Access,
        path_id: u32,
        row: &RowRef<'_>,
    ) {
        let Applied {
            index: rule,
            severity: sev,
            mask,
            attempts,
        } = rule;
        let ok = row.ok;
        let class = Class::from(sev);
        if mask & access.bit() != 0 {
            if ok {
                self.record(class, rule, Outcome::Hit, access, path_id, row);
            } else {
                match attempts {
                    Attempts::Ignore => {}
                    Attempts::Warning => self.record(
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

/// A rule as it is applied to an access: its index (a policy rule's, or past them a protected
/// file's), its severity, the accesses it covers and what a failed one is.
#[derive(Clone, Copy)]
pub(super) struct Applied {
    pub(super) index: u32,
    pub(super) severity: Severity,
    pub(super) mask: u8,
    pub(super) attempts: Attempts,
}

/// The rule index of barrier findings.
pub(super) const BARRIER_RULE: u32 = u32::MAX - 1;
