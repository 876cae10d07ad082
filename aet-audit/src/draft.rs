//! `aet policy draft`: an allow-list policy written from what a run did, for a person to review.
//!
//! The run's ledger is scanned against an empty allow-list (read, write, exec and connect), so
//! that every successful access of the run (aet's own set-up left out, as in an audit) is "out
//! of scope"; those accesses become the lists. Reads and executions are collapsed to a directory
//! where the run touched several entries under it; writes are allowed by directory (a run that
//! makes a temporary file or directory makes another name the next time), and what a run may
//! write it may read and run back. `/proc`, `/sys` and `/dev` are allowed whole.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    path::Path,
};

use super::{
    engine::scan,
    finding::{Class, Outcome},
};
use crate::policy::Policy;
use aet_ledger::reader::ReadError;

/// Entries under one directory from which the directory is allowed instead.
const COLLAPSE_AT: usize = 3;

/// Pseudo file systems allowed whole.
const WHOLE: &[&str] = aet_ledger::util::PSEUDO_FS;

/// What a drafted policy allows, before it is written out.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Draft {
    pub read: BTreeSet<String>,
    pub write: BTreeSet<String>,
    pub exec: BTreeSet<String>,
    pub connect: BTreeSet<String>,
    /// Host names the run looked up or named on its connections (proposed as `hosts`).
    pub hosts: BTreeSet<String>,
    /// Test directories the run read in (`tests`, `test`, `testing`), and test files it read
    /// outside them (`test_*.py`, `*_test.py`): proposed as watched files.
    pub watch_tests: BTreeSet<String>,
    pub watch_test_files: BTreeSet<String>,
    /// Test-runner configuration the run read (`pytest.ini`, `tox.ini`, `setup.cfg`,
    /// `pyproject.toml`, `conftest.py` at a repository's top): proposed as watched files.
    pub watch_config: BTreeSet<String>,
    /// Why each directory was granted whole (collapsed from what the run touched under it),
    /// by list: `read` or `exec`.
    pub collapsed: Vec<Collapsed>,
    /// Paths left out because a policy cannot name them (not UTF-8).
    pub skipped: usize,
    pub rows: u64,
}

/// A directory the draft grants whole, and what the run touched under it (the audit's grouping:
/// paths, rows, processes, the first process).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Collapsed {
    pub list: &'static str,
    pub dir: String,
    pub paths: usize,
    pub rows: u64,
    pub processes: usize,
    pub first: String,
}

/// The directories of `granted` that stand for several entries the run touched (`touched`: a
/// path, its process, its rows, the process's name, in row order).
fn explain(
    list: &'static str,
    granted: &BTreeSet<String>,
    touched: &[(String, u32, u64, String)],
) -> Vec<Collapsed> {
    let mut out = Vec::new();
    for dir in granted {
        let under_it: Vec<&(String, u32, u64, String)> = touched
            .iter()
            .filter(|(p, ..)| under(p, dir) && p != dir)
            .collect();
        let paths: BTreeSet<&str> = under_it.iter().map(|t| t.0.as_str()).collect();
        if paths.len() < 2 {
            continue;
        }
        let pids: BTreeSet<u32> = under_it.iter().map(|t| t.1).collect();
        out.push(Collapsed {
            list,
            dir: dir.clone(),
            paths: paths.len(),
            rows: under_it.iter().map(|t| t.2).sum(),
            processes: pids.len(),
            first: format!("{}[{}]", under_it[0].3, under_it[0].1),
        });
    }
    out
}

/// Test-runner configuration files, by name.
const TEST_CONFIG: &[&str] = &["pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"];

/// Where installed packages and the interpreter's own tests live: not the task's tests.
fn installed(p: &str) -> bool {
    p.contains("/site-packages/")
        || p.contains("/dist-packages/")
        || p.starts_with("/usr/")
        || whole(p).is_some()
}

/// What of a path read the draft watches as a test: the `tests`/`test`/`testing` directory it
/// is in, else itself when it is named like a test (`test_*.py`, `*_test.py`).
fn test_of(p: &str) -> Option<TestPath> {
    if installed(p) {
        return None;
    }
    let comps: Vec<&str> = p.split('/').collect();
    if let Some(i) = comps
        .iter()
        .position(|c| matches!(*c, "tests" | "test" | "testing"))
        .filter(|&i| i > 0 && i + 1 < comps.len())
    {
        return Some(TestPath::Dir(comps[..=i].join("/")));
    }
    let name = comps.last()?;
    ((name.starts_with("test_") && name.ends_with(".py")) || name.ends_with("_test.py"))
        .then(|| TestPath::File(p.to_owned()))
}

/// A test directory, or a test file outside one.
#[derive(Debug, PartialEq, Eq)]
enum TestPath {
    Dir(String),
    File(String),
}

use aet_ledger::util::parent_dir as parent;

/// Is `p` `dir` or below it?
fn under(p: &str, dir: &str) -> bool {
    aet_ledger::util::path_under(p.as_bytes(), dir.as_bytes())
}

/// The pseudo file system `p` is in, if any.
fn whole(p: &str) -> Option<&'static str> {
    WHOLE.iter().copied().find(|w| under(p, w))
}

/// Drops the entries an ancestor in the set already covers.
fn minimal(set: BTreeSet<String>) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = BTreeSet::new();
    for p in set {
        // Sorted: an ancestor comes before its descendants.
        if !out.iter().any(|d| under(&p, d)) {
            out.insert(p);
        }
    }
    out
}

/// Replaces the entries of every directory (two levels deep or more) that holds
/// [`COLLAPSE_AT`] or more of them by the directory, until nothing changes.
fn collapse(paths: BTreeSet<String>) -> BTreeSet<String> {
    let mut set: BTreeSet<String> = paths
        .into_iter()
        .map(|p| whole(&p).map_or(p, str::to_owned))
        .collect();
    loop {
        let mut by_parent: BTreeMap<String, usize> = BTreeMap::new();
        for p in &set {
            if let Some(d) = parent(p)
                && d.matches('/').count() >= 2
            {
                *by_parent.entry(d.to_owned()).or_default() += 1;
            }
        }
        let dirs: Vec<String> = by_parent
            .into_iter()
            .filter(|(_, n)| *n >= COLLAPSE_AT)
            .map(|(d, _)| d)
            .collect();
        if dirs.is_empty() {
            return minimal(set);
        }
        set.retain(|p| !dirs.iter().any(|d| under(p, d) && p != d));
        set.extend(dirs);
    }
}

/// Drafts a policy from the ledger at `ledger` (a file or a run directory's ledger).
pub fn draft(ledger: &Path) -> Result<Draft, ReadError> {
    let empty = Policy::parse(
        "[allow]\nread = []\nwrite = []\nexec = []\nconnect = []\nhosts = []\n",
        Path::new("(draft)"),
    )
    .expect("the empty allow-list parses");
    let (scan, _) = scan(ledger, &empty)?;
    let mut d = Draft {
        rows: scan.tally.rows,
        ..Draft::default()
    };
    let (mut read, mut write, mut exec) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let (mut touched_read, mut touched_exec) = (Vec::new(), Vec::new());
    for f in &scan.findings {
        if f.class != Class::OutOfScope || f.outcome != Outcome::Hit {
            continue;
        }
        if f.path_hex.is_some() {
            d.skipped += 1;
            continue;
        }
        let p = f.path.clone();
        match &*f.access {
            "read" => {
                match test_of(&p) {
                    Some(TestPath::Dir(t)) => {
                        d.watch_tests.insert(t);
                    }
                    Some(TestPath::File(f)) => {
                        d.watch_test_files.insert(f);
                    }
                    None => {}
                }
                if !installed(&p)
                    && p.rsplit('/')
                        .next()
                        .is_some_and(|n| TEST_CONFIG.contains(&n))
                {
                    d.watch_config.insert(p.clone());
                }
                touched_read.push((p.clone(), f.pid, f.count, f.comm.clone()));
                read.insert(p);
            }
            "write" => {
                // The directory: the next run's temporary names differ.
                // (A file right under `/` stays itself.)
                let dir = match (whole(&p), parent(&p)) {
                    (Some(w), _) => w.to_owned(),
                    (None, Some(d)) if d != "/" => d.to_owned(),
                    _ => p,
                };
                write.insert(dir);
            }
            "exec" => {
                // A script's exec row is resolved to its interpreter: the script is the path
                // the process passed (when absolute).
                if let Some(raw) = f.raw_path.as_ref().filter(|r| r.starts_with('/')) {
                    exec.insert(raw.clone());
                }
                touched_exec.push((p.clone(), f.pid, f.count, f.comm.clone()));
                exec.insert(p);
            }
            "connect" => {
                d.connect.insert(p);
            }
            "host" => {
                // A name no pattern can write (bytes DNS allows, host names do not) is left
                // for a person to see in the report.
                match p.strip_prefix("host:").map(aet_ledger::hosts::check) {
                    Some(Ok(h)) => {
                        d.hosts.insert(h);
                    }
                    _ => d.skipped += 1,
                }
            }
            _ => {}
        }
    }
    d.watch_tests = minimal(std::mem::take(&mut d.watch_tests));
    let dirs = d.watch_tests.clone();
    d.watch_test_files
        .retain(|f| !dirs.iter().any(|t| under(f, t)));
    d.write = minimal(write);
    // What the run may write it may read and run back.
    read.extend(d.write.iter().cloned());
    exec.extend(d.write.iter().cloned());
    d.read = collapse(read);
    d.exec = collapse(exec);
    d.collapsed = explain("read", &d.read, &touched_read);
    d.collapsed.extend(explain("exec", &d.exec, &touched_exec));
    Ok(d)
}

/// The drafted policy as TOML, with a header saying where it comes from.
pub fn to_toml(d: &Draft, source: &Path) -> String {
    // Paths are globs in a policy: their glob characters are escaped.
    let escape = |p: &str| {
        let mut e = String::with_capacity(p.len());
        for c in p.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\') {
                e.push('\\');
            }
            e.push(c);
        }
        e
    };
    let list = |set: &BTreeSet<String>, esc: bool| {
        let items: Vec<String> = set
            .iter()
            .map(|p| {
                let p = if esc { escape(p) } else { p.clone() };
                format!("  {},", toml::Value::String(p))
            })
            .collect();
        if items.is_empty() {
            "[]".to_owned()
        } else {
            format!("[\n{}\n]", items.join("\n"))
        }
    };
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# Drafted by `aet policy draft` from {} ({} rows): what the run read, wrote, executed\n\
         # and connected to, directories allowed where it touched {COLLAPSE_AT} or more entries under one,\n\
         # writes allowed by directory. It allows everything this run did, answer keys included:\n\
         # review it, and add [cheats] and [protected] before you use it.",
        source.display(),
        d.rows
    );
    if d.skipped > 0 {
        let _ = writeln!(
            o,
            "# {} path(s) left out: not UTF-8, a policy cannot name them.",
            d.skipped
        );
    }
    if !d.collapsed.is_empty() {
        let _ = writeln!(
            o,
            "#\n# Granted whole, for what the run touched under them (paths, rows, processes, the \
             first):"
        );
        let mut shown: Vec<&Collapsed> = d.collapsed.iter().collect();
        shown.sort_by_key(|c| std::cmp::Reverse(c.rows));
        for c in shown.iter().take(40) {
            let _ = writeln!(
                o,
                "#   {} {}: {} paths, {} rows, {} processes, first {}",
                c.list,
                aet_ledger::util::escape_path(&c.dir),
                c.paths,
                c.rows,
                c.processes,
                c.first
            );
        }
        if shown.len() > 40 {
            let _ = writeln!(o, "#   ... and {} more directories", shown.len() - 40);
        }
    }
    let _ = writeln!(o, "\n[allow]");
    let _ = writeln!(o, "read = {}", list(&d.read, true));
    let _ = writeln!(o, "write = {}", list(&d.write, true));
    let _ = writeln!(o, "exec = {}", list(&d.exec, true));
    if !d.connect.is_empty() {
        let _ = writeln!(o, "connect = {}", list(&d.connect, false));
    }
    if !d.hosts.is_empty() {
        let _ = writeln!(o, "hosts = {}", list(&d.hosts, false));
    }
    if !d.watch_tests.is_empty() || !d.watch_test_files.is_empty() || !d.watch_config.is_empty() {
        let _ = writeln!(
            o,
            "\n# What grades the run, fingerprinted before and after the agent's phase (`aet run\n\
             # --policy`): the test directories and test-runner configuration it read, every\n\
             # conftest.py below them, and the interpreter's start-up hooks. A change the run makes\n\
             # is a cheat; one nothing in the run made makes it inconclusive."
        );
        let mut tests: Vec<String> = Vec::new();
        for t in &d.watch_tests {
            tests.push(format!("{}/**", escape(t)));
        }
        tests.extend(d.watch_test_files.iter().map(|f| escape(f)));
        if !tests.is_empty() {
            let _ = writeln!(o, "[watch.tests]\npaths = {}", glob_list(&tests));
        }
        let mut config: Vec<String> = d.watch_config.iter().map(|p| escape(p)).collect();
        config.push("**/conftest.py".into());
        let _ = writeln!(o, "[watch.test_config]\npaths = {}", glob_list(&config));
        let _ = writeln!(
            o,
            "[watch.startup]\npaths = [\"@site/*.pth\", \"@site/sitecustomize.py\", \
             \"@site/usercustomize.py\"]"
        );
    }
    o
}

/// A TOML list of globs, one a line.
fn glob_list(globs: &[String]) -> String {
    let items: Vec<String> = globs
        .iter()
        .map(|g| format!("  {},", toml::Value::String(g.clone())))
        .collect();
    format!("[\n{}\n]", items.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(xs: &[&str]) -> BTreeSet<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn directories_with_many_entries_are_collapsed_and_pseudo_file_systems_allowed_whole() {
        let got = collapse(set(&[
            "/usr/lib/a.so",
            "/usr/lib/b.so",
            "/usr/lib/c.so",
            "/usr/share/x/one",
            "/etc/hostname",
            "/proc/123/status",
            "/dev/null",
            "/task/README.md",
        ]));
        assert_eq!(
            got,
            set(&[
                "/dev",
                "/etc/hostname",
                "/proc",
                "/task/README.md",
                "/usr/lib",
                "/usr/share/x/one"
            ])
        );
        // Collapsing goes up while a directory holds enough, never to a top-level one.
        let got = collapse(set(&[
            "/a/b/c1/x",
            "/a/b/c2/x",
            "/a/b/c3/x",
            "/a/b/c3/y",
            "/a/b/c3/z",
        ]));
        assert_eq!(got, set(&["/a/b/c1/x", "/a/b/c2/x", "/a/b/c3"]));
        let got = collapse(set(&[
            "/a/b/c1/x",
            "/a/b/c1/y",
            "/a/b/c1/z",
            "/a/b/c2/x",
            "/a/b/c2/y",
            "/a/b/c2/z",
            "/a/b/c3/x",
            "/a/b/c3/y",
            "/a/b/c3/z",
        ]));
        assert_eq!(got, set(&["/a/b"]));
    }

    #[test]
    fn the_draft_parses_as_a_policy() {
        let d = Draft {
            read: set(&["/usr", "/a \"quoted\" path [1]*"]),
            write: set(&["/tmp"]),
            exec: set(&["/usr/bin"]),
            connect: set(&["127.0.0.1:8080"]),
            hosts: set(&["pypi.org"]),
            watch_tests: set(&["/task/repo/tests"]),
            watch_test_files: set(&["/task/repo/test_top.py"]),
            collapsed: vec![Collapsed {
                list: "read",
                dir: "/usr/lib\n".into(),
                paths: 57,
                rows: 812,
                processes: 12,
                first: "python3[123]".into(),
            }],
            watch_config: set(&["/task/repo/setup.cfg"]),
            skipped: 1,
            rows: 10,
        };
        let text = to_toml(&d, Path::new("run/ledger.arrow"));
        let p = Policy::parse(&text, Path::new("draft.toml")).unwrap();
        assert!(
            text.contains(
                "#   read /usr/lib\\n: 57 paths, 812 rows, 12 processes, first python3[123]"
            ),
            "{text}"
        );
        assert!(text.contains("127.0.0.1:8080"));
        let names: Vec<&str> = p.watches.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["startup", "test_config", "tests"]);
        assert_eq!(
            p.watches[2].paths,
            ["/task/repo/tests/**", "/task/repo/test_top.py"]
        );
    }

    #[test]
    fn test_directories_are_found_and_installed_packages_left_out() {
        let dir = |d: &str| Some(TestPath::Dir(d.into()));
        assert_eq!(test_of("/r/tests/unit/test_a.py"), dir("/r/tests"));
        assert_eq!(
            test_of("/r/pkg/test_b.py"),
            Some(TestPath::File("/r/pkg/test_b.py".into()))
        );
        // A conftest.py is watched wherever it is (`**/conftest.py`), not its directory.
        assert_eq!(test_of("/r/conftest.py"), None);
        assert_eq!(test_of("/r/src/main.py"), None);
        assert_eq!(
            test_of("/usr/lib/python3/dist-packages/x/tests/test_x.py"),
            None
        );
        assert_eq!(test_of("/r/tests"), None);
    }
}
