//! Findings grouped for a reviewer: which rules, which paths or directories, how often, first by
//! whom. A finding is one (rule, outcome, access, process, path); a group is every finding of one
//! list, rule, outcome, access, phase and path, across processes: its findings, rows and
//! processes counted, its first and last time, its earliest finding's process with ancestry and
//! argv. Out-of-scope path groups of one directory that holds [`DIR_AT`] or more of them are
//! gathered under a directory group (`dir`), whose members are those path groups.
//!
//! Groups never replace the findings: `audit.json` keeps every finding, and a group names its
//! findings by their index in their list.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::finding::{Ancestor, Class, Finding, Outcome};

/// Path groups of one directory from which a directory group gathers them.
pub const DIR_AT: usize = 4;

/// A group's earliest finding's process.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct First {
    pub pid: u32,
    pub comm: String,
    pub exe: Option<String>,
    pub argv: Option<Vec<String>>,
    pub ancestry: Vec<Ancestor>,
    pub ts_ns: i64,
}

/// One group.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Group {
    /// The report list its findings are in (`cheat_hits`, `out_of_scope`, ...).
    pub list: String,
    pub class: Class,
    pub rule: String,
    pub outcome: Outcome,
    pub access: String,
    pub phase: String,
    /// The path (lossy UTF-8), or a directory group's directory.
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    /// A directory group: its members are path groups below `path`.
    pub dir: bool,
    /// Distinct paths (1 for a path group).
    pub paths: usize,
    pub findings: usize,
    pub rows: u64,
    pub processes: usize,
    pub first_ts_ns: i64,
    pub last_ts_ns: i64,
    pub first: First,
    /// A path group: its findings' indices in `list`; a directory group: its path groups'
    /// indices in `groups`.
    pub members: Vec<usize>,
    /// A path group gathered under a directory group: that group's index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<usize>,
}

fn first_of(f: &Finding) -> First {
    First {
        pid: f.pid,
        comm: f.comm.clone(),
        exe: f.exe.clone(),
        argv: f.argv.clone(),
        ancestry: f.ancestry.clone(),
        ts_ns: f.first_ts_ns,
    }
}

type Key<'a> = (
    usize,
    &'a str,
    Outcome,
    &'a str,
    &'a str,
    &'a str,
    Option<&'a str>,
);

/// The groups of a report's findings: cheats first, then contaminants, out of scope, warnings
/// and blocked; within a list the largest (by rows) first.
pub fn group(lists: &[(&'static str, &[Finding])]) -> Vec<Group> {
    let mut by_key: BTreeMap<Key<'_>, Group> = BTreeMap::new();
    let mut pids: BTreeMap<Key<'_>, std::collections::BTreeSet<u32>> = BTreeMap::new();
    for (li, (name, list)) in lists.iter().enumerate() {
        for (fi, f) in list.iter().enumerate() {
            let key = (
                li,
                f.rule.as_str(),
                f.outcome,
                &*f.access,
                f.phase.as_str(),
                f.path.as_str(),
                f.path_hex.as_deref(),
            );
            pids.entry(key).or_default().insert(f.pid);
            let g = by_key.entry(key).or_insert_with(|| Group {
                list: (*name).to_owned(),
                class: f.class,
                rule: f.rule.clone(),
                outcome: f.outcome,
                access: f.access.to_string(),
                phase: f.phase.clone(),
                path: f.path.clone(),
                path_hex: f.path_hex.clone(),
                dir: false,
                paths: 1,
                findings: 0,
                rows: 0,
                processes: 0,
                first_ts_ns: f.first_ts_ns,
                last_ts_ns: f.last_ts_ns.max(f.first_ts_ns),
                first: first_of(f),
                members: Vec::new(),
                parent: None,
            });
            g.findings += 1;
            g.rows += f.count;
            g.members.push(fi);
            // A list is in row order: the group's first finding is its earliest.
            g.last_ts_ns = g.last_ts_ns.max(f.last_ts_ns).max(f.first_ts_ns);
        }
    }
    for (k, set) in &pids {
        if let Some(g) = by_key.get_mut(k) {
            g.processes = set.len();
        }
    }
    let paths: Vec<Group> = by_key.into_values().collect();
    // Directory groups: out-of-scope path groups of one rule, outcome, access and phase under
    // one directory.
    let mut dirs: BTreeMap<(String, Outcome, String, String, String), Vec<usize>> = BTreeMap::new();
    for (i, g) in paths.iter().enumerate() {
        if g.class != Class::OutOfScope || g.path_hex.is_some() {
            continue;
        }
        if let Some(d) = aet_ledger::util::parent_dir(&g.path) {
            dirs.entry((
                g.rule.clone(),
                g.outcome,
                g.access.clone(),
                g.phase.clone(),
                d.to_owned(),
            ))
            .or_default()
            .push(i);
        }
    }
    let mut dir_groups = Vec::new();
    for ((_, _, _, _, dir), members) in dirs {
        if members.len() < DIR_AT {
            continue;
        }
        let earliest = members
            .iter()
            .copied()
            .min_by_key(|&i| paths[i].first_ts_ns)
            .expect("members");
        let e = &paths[earliest];
        let mut g = Group {
            path: dir,
            path_hex: None,
            dir: true,
            paths: members.len(),
            findings: 0,
            rows: 0,
            processes: 0,
            members: Vec::new(),
            parent: None,
            ..e.clone()
        };
        let mut procs = std::collections::BTreeSet::new();
        for &m in &members {
            let p = &paths[m];
            g.findings += p.findings;
            g.rows += p.rows;
            g.last_ts_ns = g.last_ts_ns.max(p.last_ts_ns);
            let list = lists
                .iter()
                .find(|(n, _)| *n == p.list)
                .map(|(_, l)| *l)
                .unwrap_or_default();
            for &fi in &p.members {
                procs.insert(list[fi].pid);
            }
        }
        g.processes = procs.len();
        dir_groups.push((g, members));
    }
    // The final order: by list, the largest first; a directory group's members follow it.
    let order = |g: &Group| {
        (
            lists.iter().position(|(n, _)| *n == g.list).unwrap_or(9),
            std::cmp::Reverse(g.rows),
            g.path.clone(),
        )
    };
    let mut member_of = vec![None; paths.len()];
    for (di, (_, members)) in dir_groups.iter().enumerate() {
        for &m in members {
            member_of[m] = Some(di);
        }
    }
    let mut top: Vec<(bool, usize)> = Vec::new();
    top.extend((0..dir_groups.len()).map(|d| (true, d)));
    top.extend(
        (0..paths.len())
            .filter(|&i| member_of[i].is_none())
            .map(|i| (false, i)),
    );
    top.sort_by_key(|&(is_dir, i)| {
        if is_dir {
            order(&dir_groups[i].0)
        } else {
            order(&paths[i])
        }
    });
    let mut out: Vec<Group> = Vec::with_capacity(paths.len() + dir_groups.len());
    for (is_dir, i) in top {
        if !is_dir {
            out.push(paths[i].clone());
            continue;
        }
        let (g, members) = &dir_groups[i];
        let at = out.len();
        out.push(g.clone());
        let mut ms: Vec<usize> = members.clone();
        ms.sort_by_key(|&m| order(&paths[m]));
        for m in ms {
            let mut p = paths[m].clone();
            p.parent = Some(at);
            let next = out.len();
            out[at].members.push(next);
            out.push(p);
        }
    }
    out
}
