//! The programs a run executed or mapped executable, by content: what the report lists (each
//! hash with its paths, how often it ran or was mapped, and by which processes), so that a
//! reviewer sees the binaries that did not come with the image, and what could not be hashed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Processes named per program, at most.
const PROCS_SHOWN: usize = 5;

/// One program by content.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Program {
    /// The SHA-256 (lowercase hex); null when it could not be taken.
    pub sha256: Option<String>,
    /// Why it could not be taken (the ledger's `sha256_error`, the first seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `exec` (run as a program) or `mapped` (mapped executable: a library's code).
    pub how: String,
    /// The paths it was at (the first few).
    pub paths: Vec<String>,
    /// Rows: execs or executable mappings.
    pub count: u64,
    /// The processes that ran or mapped it, `comm[pid]` (the first few).
    pub processes: Vec<String>,
}

/// A program's key: its hash (none: told apart by its path), how it ran, the path.
type Key = (Option<Vec<u8>>, &'static str, Vec<u8>);

/// The programs as the rows go by.
#[derive(Default)]
pub(crate) struct Programs {
    by_key: BTreeMap<Key, Program>,
}

impl Programs {
    /// One exec or executable mapping: its hash (or why none), path and process.
    pub(crate) fn add(
        &mut self,
        sha256: Option<&[u8]>,
        error: Option<&[u8]>,
        exec: bool,
        path: &[u8],
        process: impl FnOnce() -> String,
    ) {
        let how = if exec { "exec" } else { "mapped" };
        // A program without a hash is told apart by its path.
        let key_path = if sha256.is_some() {
            Vec::new()
        } else {
            path.to_vec()
        };
        let p = self
            .by_key
            .entry((sha256.map(<[u8]>::to_vec), how, key_path))
            .or_insert_with(|| Program {
                sha256: sha256.map(|h| String::from_utf8_lossy(h).into_owned()),
                error: error.map(|e| String::from_utf8_lossy(e).into_owned()),
                how: how.into(),
                ..Program::default()
            });
        p.count += 1;
        let path = String::from_utf8_lossy(path).into_owned();
        if p.paths.len() < PROCS_SHOWN && !p.paths.contains(&path) {
            p.paths.push(path);
        }
        if p.processes.len() < PROCS_SHOWN {
            let who = process();
            if !p.processes.contains(&who) {
                p.processes.push(who);
            }
        }
    }

    /// The programs: executed first, then mapped; those without a hash first in each.
    pub(crate) fn into_list(self) -> Vec<Program> {
        let mut v: Vec<Program> = self.by_key.into_values().collect();
        v.sort_by(|a, b| {
            (a.how != "exec", a.sha256.is_some(), &a.paths).cmp(&(
                b.how != "exec",
                b.sha256.is_some(),
                &b.paths,
            ))
        });
        v
    }
}

/// Programs listed by the terminal report, at most.
const SHOWN: usize = 12;

/// The terminal report's lines: a count, then the programs run from outside the system's
/// directories and those without a hash (the ones a reviewer reads first), at most [`SHOWN`].
pub fn render(programs: &[Program], s: &mut String) {
    use std::fmt::Write as _;
    let execs = programs.iter().filter(|p| p.how == "exec").count();
    let unhashed = programs.iter().filter(|p| p.sha256.is_none()).count();
    let _ = writeln!(
        s,
        "programs      {execs} executed, {} mapped executable, by content{}",
        programs.len() - execs,
        if unhashed > 0 {
            format!("; {unhashed} without a hash")
        } else {
            String::new()
        }
    );
    let system = |p: &Program| {
        p.paths.iter().all(|x| {
            ["/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/"]
                .iter()
                .any(|d| x.starts_with(d))
        })
    };
    let notable: Vec<&Program> = programs
        .iter()
        .filter(|p| p.sha256.is_none() || !system(p))
        .collect();
    for p in notable.iter().take(SHOWN) {
        let id = match (&p.sha256, &p.error) {
            (Some(h), _) => format!("sha256:{}", &h[..h.len().min(16)]),
            (None, Some(e)) => format!("no hash ({e})"),
            (None, None) => "no hash".into(),
        };
        let _ = writeln!(
            s,
            "  PROGRAM     {} {} x{} by {}  {id}",
            p.how,
            p.paths.join(", "),
            p.count,
            p.processes.join(", ")
        );
    }
    if notable.len() > SHOWN {
        let _ = writeln!(
            s,
            "  ...         {} more outside the system's directories (`--json`: every program)",
            notable.len() - SHOWN
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_grouped_by_content_and_unhashed_ones_by_path() {
        let mut p = Programs::default();
        let h = b"ab".repeat(32);
        p.add(Some(&h), None, true, b"/w/a", || "a[1]".into());
        p.add(Some(&h), None, true, b"/w/b", || "b[2]".into());
        p.add(None, Some(b"gone"), true, b"/w/c", || "c[3]".into());
        p.add(Some(&h), None, false, b"/lib/x.so", || "a[1]".into());
        let l = p.into_list();
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].error.as_deref(), Some("gone"));
        assert_eq!(
            (l[1].count, l[1].paths.len(), l[1].processes.len()),
            (2, 2, 2)
        );
        assert_eq!(l[2].how, "mapped");
    }
}
