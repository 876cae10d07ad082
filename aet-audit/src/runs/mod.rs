//! Many runs at once: which runs a command line names (run directories, directories of runs,
//! ledger files, globs), what one row per run says (the `runs` table of `aet query` and the
//! `_runs` table of `aet ledger export`), and the findings of a run's `audit.json`; and
//! [`export`], the runs as Parquet.

pub mod export;

use std::{
    fs,
    path::{Path, PathBuf},
    sync::Arc,
};

use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    UInt32Array, UInt64Array,
    builder::{ListBuilder, StringBuilder},
};
use arrow_schema::ArrowError;

use aet_ledger::{metadata::LedgerMeta, reader::Form, run_dir::LEDGER};

use crate::{reached::Reached, report::Report};

/// Why the runs a command line names cannot be listed.
#[derive(Debug, thiserror::Error)]
pub enum RunsError {
    /// A path that is neither a run, a ledger, a directory of runs nor a glob that matches.
    #[error("{0}: no such run, ledger or directory")]
    Missing(PathBuf),
    /// A directory that holds no ledger, and no run directory that holds one.
    #[error("{0}: not a run (no {LEDGER}) and no run directory in it holds one")]
    NoRuns(PathBuf),
    /// A glob that matches nothing, or cannot be read.
    #[error("{pattern}: {message}")]
    Glob { pattern: String, message: String },
    /// Two runs of one name (a run is named by its directory).
    #[error(
        "{0} and {1} are both named {2:?}: a run is named by its directory, so names must differ"
    )]
    SameName(PathBuf, PathBuf, String),
}

/// One run a command line named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRef {
    /// Its name: the run directory's name (or a ledger file's stem).
    pub name: String,
    /// Its ledger.
    pub ledger: PathBuf,
}

impl RunRef {
    /// The run's `audit.json`, whether or not there is one.
    pub fn audit_path(&self) -> PathBuf {
        aet_ledger::run_dir::audit_beside(&self.ledger)
    }
}

/// The runs `args` name, in order: a run directory (it holds `ledger.arrow`), a ledger file, a
/// directory of runs (each sub-directory that holds a ledger, by name), or a glob (`'runs/*'`,
/// expanded by aet when the shell did not: thousands of runs exceed a command line) whose
/// matches that are runs or `*.arrow` files are taken, the rest left. A run named twice is listed once; two runs of one name are an error.
pub fn discover(args: &[PathBuf]) -> Result<Vec<RunRef>, RunsError> {
    let mut out: Vec<RunRef> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for a in args {
        for ledger in expand(a)? {
            let canonical = fs::canonicalize(&ledger).unwrap_or_else(|_| ledger.clone());
            if !seen.insert(canonical) {
                continue;
            }
            let name = export::run_name(&ledger);
            if let Some(other) = out.iter().find(|r| r.name == name) {
                return Err(RunsError::SameName(other.ledger.clone(), ledger, name));
            }
            out.push(RunRef { name, ledger });
        }
    }
    Ok(out)
}

fn is_glob(p: &str) -> bool {
    p.contains(['*', '?', '['])
}

/// The ledgers one argument names.
fn expand(a: &Path) -> Result<Vec<PathBuf>, RunsError> {
    if !a.exists() {
        let pattern = a.to_string_lossy();
        if !is_glob(&pattern) {
            return Err(RunsError::Missing(a.to_owned()));
        }
        let glob_err = |message: String| RunsError::Glob {
            pattern: pattern.clone().into_owned(),
            message,
        };
        let mut paths: Vec<PathBuf> = glob::glob(&pattern)
            .map_err(|e| glob_err(e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| glob_err(e.to_string()))?;
        if paths.is_empty() {
            return Err(glob_err("matches nothing".into()));
        }
        paths.sort();
        // What a glob matches is a run (a directory holding a ledger) or a ledger file
        // (`*.arrow`); anything else beside them (an export, a note) is not a run.
        let out: Vec<PathBuf> = paths
            .into_iter()
            .filter_map(|p| {
                if p.join(LEDGER).is_file() {
                    Some(p.join(LEDGER))
                } else if p.is_file() && p.extension().is_some_and(|e| e == "arrow") {
                    Some(p)
                } else {
                    None
                }
            })
            .collect();
        if out.is_empty() {
            return Err(glob_err("matches no run and no ledger".into()));
        }
        return Ok(out);
    }
    if !a.is_dir() {
        return Ok(vec![a.to_owned()]);
    }
    if a.join(LEDGER).exists() {
        return Ok(vec![a.join(LEDGER)]);
    }
    let mut runs: Vec<PathBuf> = fs::read_dir(a)
        .map_err(|_| RunsError::NoRuns(a.to_owned()))?
        .filter_map(Result::ok)
        .map(|e| e.path().join(LEDGER))
        .filter(|l| l.is_file())
        .collect();
    if runs.is_empty() {
        return Err(RunsError::NoRuns(a.to_owned()));
    }
    runs.sort();
    Ok(runs)
}

/// The `runs` column that counts each finding list of a report, by the list's name in
/// `audit.json` ([`Report::finding_lists`]).
pub const FINDING_COUNTS: [(&str, &str); 5] = [
    ("cheat_hits", "cheats"),
    ("contaminant_hits", "contaminants"),
    ("out_of_scope", "out_of_scope"),
    ("warnings", "warnings"),
    ("blocked", "blocked"),
];

/// One row per run: `command`, `scope`, `started_ns`, `ended_ns`, `duration_s`,
/// `exit_status`, `events`, `lost`, `complete`, `incomplete_reasons`, `sandbox_verified`,
/// `identity_uid`, and from the run's audit report (null without one) `verdict`, `cheats`,
/// `contaminants`, `out_of_scope`, `warnings`, `blocked`, and `verdict_signed` (whether the
/// run's signed manifest covers that report: false for an unsigned run or an unsigned report of
/// a signed one); with a leading `run` column when `run` is given.
pub fn run_row(
    run: Option<&str>,
    events: u64,
    form: Form,
    m: &LedgerMeta,
    audit: Option<&Report>,
    verdict_signed: Option<bool>,
) -> Result<RecordBatch, ArrowError> {
    let count = |list: &str| -> ArrayRef {
        Arc::new(UInt64Array::from(vec![audit.map(|a| {
            a.finding_lists()
                .iter()
                .find(|(name, _)| *name == list)
                .map_or(0, |(_, l)| l.len() as u64)
        })]))
    };
    let verdict = audit.map(|a| a.verdict.name().to_owned());
    let mut reasons = m.incomplete.texts();
    if form == Form::Unfinished {
        reasons.insert(0, "the ledger is unfinished".into());
    }
    let duration = m
        .started_ns
        .zip(m.ended_ns)
        .map(|(s, e)| (e - s) as f64 / 1e9);
    let text = |v: Option<String>| -> ArrayRef { Arc::new(StringArray::from(vec![v])) };
    let mut columns: Vec<(&str, ArrayRef, bool)> = Vec::new();
    if let Some(run) = run {
        columns.push(("run", text(Some(run.to_owned())), false));
    }
    columns.extend([
        (
            "command",
            text(Some(aet_ledger::util::shell_words(&m.command))),
            false,
        ),
        ("scope", text(m.scope_target.clone()), true),
        (
            "started_ns",
            Arc::new(Int64Array::from(vec![m.started_ns])) as ArrayRef,
            true,
        ),
        (
            "ended_ns",
            Arc::new(Int64Array::from(vec![m.ended_ns])),
            true,
        ),
        (
            "duration_s",
            Arc::new(Float64Array::from(vec![duration])),
            true,
        ),
        (
            "exit_status",
            Arc::new(Int32Array::from(vec![m.exit_status])),
            true,
        ),
        ("events", Arc::new(UInt64Array::from(vec![events])), false),
        (
            "lost",
            Arc::new(UInt64Array::from(vec![m.events_lost])),
            true,
        ),
        (
            "complete",
            Arc::new(BooleanArray::from(vec![
                m.complete && form == Form::Finished,
            ])),
            false,
        ),
        ("incomplete_reasons", text(Some(reasons.join("; "))), false),
        (
            "sandbox_verified",
            Arc::new(BooleanArray::from(vec![
                m.sandbox.as_ref().map(|s| s.verified),
            ])),
            true,
        ),
        (
            "identity_uid",
            Arc::new(UInt32Array::from(vec![m.identity.as_ref().map(|i| i.uid)])),
            true,
        ),
        ("verdict", text(verdict), true),
    ]);
    columns.extend(
        FINDING_COUNTS
            .iter()
            .map(|(list, column)| (*column, count(list), true)),
    );
    columns.push((
        "verdict_signed",
        Arc::new(BooleanArray::from(vec![
            verdict_signed.filter(|_| audit.is_some()),
        ])),
        true,
    ));
    RecordBatch::try_from_iter_with_nullable(columns)
}

/// One row per finding of one or more audit reports: `run`, `class`, `rule`, `outcome`,
/// `access`, `path`, `path_hex` (the exact bytes when the path is not UTF-8), `errno`, `count`,
/// `first_seq`, `first_ts_ns`, `pid`, `uid`, `comm`, `exe`, `argv`, `ancestry` (`pid comm` of
/// each ancestor, nearest first, joined with ` < `), `reached`, `target_pid`, `phase`, and for
/// what a later phase loaded that an earlier one wrote: `provenance` (where it lies:
/// `repository`, `new`, `outside`), `judged_path`, and the first writer's `writer_pid`,
/// `writer_comm`, `writer_phase`, `writer_how`, `writer_ts_ns`.
pub fn finding_rows<'a>(
    reports: impl IntoIterator<Item = (&'a str, &'a Report)>,
) -> Result<RecordBatch, ArrowError> {
    let mut run = StringBuilder::new();
    let mut texts: [StringBuilder; 10] = Default::default();
    let mut nums: [Vec<Option<u64>>; 5] = Default::default();
    let mut ts: Vec<Option<i64>> = Vec::new();
    let mut argv = ListBuilder::new(StringBuilder::new());
    let mut ancestry = StringBuilder::new();
    let mut reached = StringBuilder::new();
    // Provenance: place, judged path, writer comm, phase, how; writer pid and time.
    let mut prov: [StringBuilder; 5] = Default::default();
    let mut writer_pid: Vec<Option<u64>> = Vec::new();
    let mut writer_ts: Vec<Option<i64>> = Vec::new();
    for (name, report) in reports {
        for f in report.finding_lists().into_iter().flat_map(|(_, l)| l) {
            run.append_value(name);
            let text = [
                Some(f.class.name()),
                Some(f.rule.as_str()),
                Some(f.outcome.name()),
                Some(&*f.access),
                Some(f.path.as_str()),
                f.path_hex.as_deref(),
                f.errno.as_deref(),
                Some(f.comm.as_str()),
                f.exe.as_deref(),
                Some(f.phase.as_str()),
            ];
            for (b, v) in texts.iter_mut().zip(text) {
                b.append_option(v);
            }
            let num = [
                Some(f.count),
                Some(f.first_seq),
                Some(u64::from(f.pid)),
                Some(u64::from(f.uid)),
                f.target_pid.map(u64::from),
            ];
            for (v, n) in nums.iter_mut().zip(num) {
                v.push(n);
            }
            ts.push(Some(f.first_ts_ns));
            match &f.argv {
                Some(a) => {
                    for x in a {
                        argv.values().append_value(x);
                    }
                    argv.append(true);
                }
                None => argv.append(false),
            }
            let chain: Vec<String> = f
                .ancestry
                .iter()
                .map(|a| format!("{} {}", a.pid, a.comm))
                .collect();
            ancestry.append_value(chain.join(" < "));
            reached.append_option(f.reached.map(Reached::name));
            let d = f.provenance.as_deref();
            let w = d.and_then(|d| d.writer());
            let v = [
                d.map(|d| d.place.name()),
                d.map(|d| d.judged.as_str()),
                w.map(|w| w.comm.as_str()),
                w.map(|w| w.phase.as_str()),
                w.map(|w| w.how.as_str()),
            ];
            for (b, x) in prov.iter_mut().zip(v) {
                b.append_option(x);
            }
            writer_pid.push(w.map(|w| u64::from(w.pid)));
            writer_ts.push(w.map(|w| w.ts_ns));
        }
    }
    let mut columns: Vec<(&str, ArrayRef, bool)> = vec![("run", Arc::new(run.finish()), false)];
    let [
        class,
        rule,
        outcome,
        access,
        path,
        path_hex,
        errno,
        comm,
        exe,
        phase,
    ] = texts;
    let [count, first_seq, pid, uid, target_pid] = nums;
    let t = |mut b: StringBuilder| -> ArrayRef { Arc::new(b.finish()) };
    let n = |v: Vec<Option<u64>>| -> ArrayRef { Arc::new(UInt64Array::from(v)) };
    columns.extend([
        ("class", t(class), true),
        ("rule", t(rule), true),
        ("outcome", t(outcome), true),
        ("access", t(access), true),
        ("path", t(path), true),
        ("path_hex", t(path_hex), true),
        ("errno", t(errno), true),
        ("count", n(count), true),
        ("first_seq", n(first_seq), true),
        (
            "first_ts_ns",
            Arc::new(Int64Array::from(ts)) as ArrayRef,
            true,
        ),
        ("pid", n(pid), true),
        ("uid", n(uid), true),
        ("comm", t(comm), true),
        ("exe", t(exe), true),
        ("argv", Arc::new(argv.finish()), true),
        ("ancestry", t(ancestry), true),
        ("reached", t(reached), true),
        ("target_pid", n(target_pid), true),
        ("phase", t(phase), true),
    ]);
    let [place, judged, wcomm, wphase, whow] = prov;
    columns.extend([
        ("provenance", t(place), true),
        ("judged_path", t(judged), true),
        ("writer_pid", n(writer_pid), true),
        ("writer_comm", t(wcomm), true),
        ("writer_phase", t(wphase), true),
        ("writer_how", t(whow), true),
        (
            "writer_ts_ns",
            Arc::new(Int64Array::from(writer_ts)) as ArrayRef,
            true,
        ),
    ]);
    RecordBatch::try_from_iter_with_nullable(columns)
}

#[cfg(test)]
mod tests {
    use arrow_array::Array as _;

    use super::*;

    fn run_dir(root: &Path, name: &str) -> PathBuf {
        let d = root.join(name);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join(LEDGER), b"x").unwrap();
        d
    }

    #[test]
    fn runs_are_found_as_directories_parents_files_and_globs() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("eval");
        let a = run_dir(&root, "a");
        run_dir(&root, "b");
        fs::create_dir_all(root.join("not-a-run")).unwrap();
        fs::write(root.join("notes.txt"), "not a run").unwrap();
        let names = |args: &[PathBuf]| -> Vec<String> {
            discover(args)
                .unwrap()
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        assert_eq!(names(std::slice::from_ref(&a)), ["a"]);
        assert_eq!(names(std::slice::from_ref(&root)), ["a", "b"]);
        assert_eq!(names(&[root.join("*")]), ["a", "b"]);
        assert_eq!(names(&[a.join(LEDGER), a.clone()]), ["a"]);
        assert!(matches!(
            discover(&[root.join("not-a-run")]),
            Err(RunsError::NoRuns(_))
        ));
        assert!(matches!(
            discover(&[root.join("nope")]),
            Err(RunsError::Missing(_))
        ));
        assert!(matches!(
            discover(&[root.join("z*")]),
            Err(RunsError::Glob { .. })
        ));
        let other = run_dir(&t.path().join("elsewhere"), "a");
        assert!(matches!(
            discover(&[a, other]),
            Err(RunsError::SameName(..))
        ));
    }

    #[test]
    fn every_finding_list_of_a_report_has_its_runs_column() {
        let report: Report = serde_json::from_value(serde_json::json!({
            "format": "aet.audit", "version": 1, "verdict": "clean"
        }))
        .unwrap();
        let lists: Vec<&str> = report.finding_lists().iter().map(|(n, _)| *n).collect();
        let counted: Vec<&str> = FINDING_COUNTS.iter().map(|(l, _)| *l).collect();
        assert_eq!(lists, counted);
    }

    #[test]
    fn findings_become_rows_with_their_run() {
        let report: Report = serde_json::from_value(serde_json::json!({
            "format": "aet.audit", "version": 1,
            "verdict": "disqualified",
            "cheat_hits": [{"class": "cheat", "rule": "cheats.key", "outcome": "hit",
                "access": "read", "path": "/k", "count": 2, "first_seq": 5, "first_ts_ns": 7,
                "pid": 9, "uid": 0, "comm": "cat", "argv": ["cat", "/k"],
                "ancestry": [{"pid": 8, "comm": "sh"}, {"pid": 1, "comm": "agent"}]}],
            "warnings": [{"class": "warning", "rule": "warns.x", "outcome": "hit", "access": "exec",
                "path": "/g", "count": 1, "first_seq": 6, "first_ts_ns": 8, "pid": 10,
                "uid": 0, "comm": "git", "ancestry": []}],
        }))
        .unwrap();
        let b = finding_rows([("r1", &report)]).unwrap();
        assert_eq!(b.num_rows(), 2);
        let col = |n: &str| {
            b.column_by_name(n)
                .unwrap()
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap()
                .clone()
        };
        assert_eq!(col("run").value(1), "r1");
        assert_eq!(col("rule").value(0), "cheats.key");
        assert_eq!(col("ancestry").value(0), "8 sh < 1 agent");
        assert_eq!(col("class").value(1), "warning");
        assert!(col("exe").is_null(0));
    }
}
