//! `aet query SQL RUNS…`: SQL over recorded runs. Its counts equal each ledger's own summary, for
//! every kind; `runs` shows an incomplete run with its reason and a verdict from `audit.json`;
//! `findings` holds the audit's findings; a damaged or unfinished ledger among good ones is
//! reported and skipped (exit 1), and `--strict` fails (exit 4); every output format holds the
//! same rows.

use std::{collections::BTreeMap, fs, path::Path};

use aet_tests::*;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn query(sql: &str, runs: &[&Path], extra: &[&str]) -> Out {
    let o = aet()
        .arg("query")
        .arg(sql)
        .args(runs)
        .args(extra)
        .output()
        .unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: text(&o.stdout),
        stderr: text(&o.stderr),
    }
}

/// A query's rows as JSON objects.
fn rows(sql: &str, runs: &[&Path]) -> Vec<serde_json::Value> {
    let o = query(sql, runs, &["--format", "json"]);
    assert_eq!(o.code, 0, "{sql}: {}{}", o.stdout, o.stderr);
    serde_json::from_str::<Vec<serde_json::Value>>(&o.stdout)
        .unwrap_or_else(|e| panic!("{sql}: {e}: {}", o.stdout))
}

fn name(r: &Run) -> String {
    r.out.file_name().unwrap().to_str().unwrap().to_owned()
}

/// The demo under its policy (a cheat: disqualified), a shell command (no audit), and a storm
/// whose consumer is held back so that the kernel drops records (incomplete).
fn three_runs(dir: &Path) -> (Run, Run, Run) {
    let demo = run_in(
        &dir.join("demo"),
        &[
            "--policy",
            root().join("policies/demo.toml").to_str().unwrap(),
        ],
        &[root().join("examples/demo/agent.sh")],
    );
    assert_eq!(demo.code(), 0, "{}", demo.stderr());
    let sh = run_ok(dir, &["sh", "-c", "cat /etc/hostname; ls /usr > /dev/null"]);
    let target = dir.join("storm-target");
    fs::write(&target, "x").unwrap();
    let storm = lossy_run(&dir.join("storm"), &target, 100_000);
    assert_eq!(storm.code(), 0, "{}", storm.stderr());
    (demo, sh, storm)
}

#[test]
fn counts_runs_and_findings_agree_with_each_ledger_and_audit() {
    let dir = tempdir();
    let (demo, sh, storm) = three_runs(dir.path());
    let all = [demo.out.as_path(), sh.out.as_path(), storm.out.as_path()];

    // events: per run and kind, exactly each ledger's own summary.
    let got = rows(
        "select run, kind, count(*) as n from events group by run, kind",
        &all,
    );
    for r in [&demo, &sh, &storm] {
        let s = summary(&r.ledger());
        let want: BTreeMap<String, u64> = s["events_by_kind"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
            .filter(|(_, n)| *n > 0)
            .collect();
        let have: BTreeMap<String, u64> = got
            .iter()
            .filter(|x| x["run"] == name(r).as_str())
            .map(|x| {
                (
                    x["kind"].as_str().unwrap().to_owned(),
                    x["n"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(have, want, "{}", name(r));
        assert_eq!(have.values().sum::<u64>(), s["events"].as_u64().unwrap());
    }
    // The same over a directory of runs and over a glob aet expands itself.
    let total = |runs: &[&Path]| rows("select count(*) as n from events", runs)[0]["n"].clone();
    let want = total(&all);
    assert_eq!(total(&[dir.path()]), want);
    assert_eq!(total(&[&dir.path().join("*")]), want);

    // runs: the storm is incomplete with its reason, the demo has its audit's verdict and
    // counts, the shell command has no verdict; events equal the summaries'.
    let runs = rows(
        "select run, events, lost, complete, incomplete_reasons, verdict, cheats, command \
         from runs order by run",
        &all,
    );
    assert_eq!(runs.len(), 3, "{runs:#?}");
    let by: BTreeMap<String, &serde_json::Value> = runs
        .iter()
        .map(|r| (r["run"].as_str().unwrap().to_owned(), r))
        .collect();
    let s = summary(&storm.ledger());
    let st = by["storm"];
    assert_eq!(st["complete"], false, "{st}");
    assert_eq!(st["lost"], s["events_lost"], "{st}");
    assert!(st["lost"].as_u64().unwrap() > 0, "{st}");
    assert!(
        st["incomplete_reasons"].as_str().unwrap().contains("lost"),
        "{st}"
    );
    let audit: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(demo.out.join("audit.json")).unwrap()).unwrap();
    let d = by["demo"];
    assert_eq!(d["verdict"], audit["verdict"], "{d}");
    assert_eq!(
        d["cheats"].as_u64().unwrap() as usize,
        audit["cheat_hits"].as_array().unwrap().len()
    );
    assert_eq!(d["complete"], true);
    assert!(d["command"].as_str().unwrap().contains("agent.sh"), "{d}");
    assert!(by[&name(&sh)]["verdict"].is_null());
    for r in [&demo, &sh, &storm] {
        assert_eq!(
            by[&name(r)]["events"],
            summary(&r.ledger())["events"],
            "{}",
            name(r)
        );
    }

    // findings: one row per finding of the audit, with its rule, path and process.
    let f = rows(
        "select run, class, rule, outcome, access, path, comm, pid, ancestry from findings",
        &all,
    );
    let want: Vec<(String, String, String)> = [
        "cheat_hits",
        "contaminant_hits",
        "out_of_scope",
        "warnings",
        "blocked",
    ]
    .iter()
    .flat_map(|k| audit[*k].as_array().unwrap().iter())
    .map(|x| {
        (
            x["rule"].as_str().unwrap().to_owned(),
            x["path"].as_str().unwrap().to_owned(),
            x["comm"].as_str().unwrap().to_owned(),
        )
    })
    .collect();
    assert!(!want.is_empty());
    let have: Vec<(String, String, String)> = f
        .iter()
        .map(|x| {
            assert_eq!(x["run"], "demo");
            (
                x["rule"].as_str().unwrap().to_owned(),
                x["path"].as_str().unwrap().to_owned(),
                x["comm"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(have, want);

    // A join across the tables: the reads of a flagged path, by run.
    let j = rows(
        "select e.run, count(*) as n from events e join findings f \
         on e.run = f.run and e.resolved_path = f.path where e.kind = 'open' group by e.run",
        &all,
    );
    assert_eq!(j.len(), 1, "{j:?}");
    assert!(j[0]["n"].as_u64().unwrap() >= 1);
}

#[test]
fn a_damaged_or_unfinished_ledger_is_reported_and_skipped_and_strict_fails() {
    let dir = tempdir();
    let a = run_ok(dir.path(), &["sh", "-c", "cat /etc/hostname > /dev/null"]);
    let b = run_ok(dir.path(), &["sh", "-c", "ls /usr > /dev/null"]);
    // Not a ledger at all.
    let bad = dir.path().join("run-damaged");
    fs::create_dir(&bad).unwrap();
    fs::write(bad.join("ledger.arrow"), b"ARROW1\0\0not a ledger at all").unwrap();
    // A ledger cut before its footer (its monitor was killed).
    let cut = dir.path().join("run-cut");
    fs::create_dir(&cut).unwrap();
    let bytes = fs::read(b.ledger()).unwrap();
    fs::write(cut.join("ledger.arrow"), &bytes[..bytes.len() - 200]).unwrap();
    // A good ledger whose audit.json is not a report: kept, its verdict null, reported.
    let c = run_ok(dir.path(), &["true"]);
    fs::write(c.out.join("audit.json"), "{ not json").unwrap();

    let runs = [
        a.out.as_path(),
        bad.as_path(),
        cut.as_path(),
        b.out.as_path(),
        c.out.as_path(),
    ];
    let sql = "select run, count(*) as n from events group by run order by run";
    let o = query(sql, &runs, &["--format", "csv"]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("run run-damaged: skipped"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("run run-cut: skipped"), "{}", o.stderr);
    assert!(o.stderr.contains("unfinished"), "{}", o.stderr);
    assert!(o.stderr.contains("audit.json"), "{}", o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines[0], "run,n");
    let mut want = vec![name(&a), name(&b), name(&c)];
    want.sort();
    let got: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(got, want, "{}", o.stdout);
    let o = query(
        "select run, verdict, events from runs",
        &[c.out.as_path()],
        &["--format", "json"],
    );
    assert_eq!(o.code, 1, "{}", o.stderr);
    let r: Vec<serde_json::Value> = serde_json::from_str(&o.stdout).unwrap();
    assert!(r[0]["verdict"].is_null(), "{r:?}");
    assert_eq!(r[0]["events"], summary(&c.ledger())["events"]);

    // --strict: an error naming the run, exit 4, nothing on stdout.
    for bad_one in [&bad, &cut] {
        let o = query(sql, &[a.out.as_path(), bad_one], &["--strict"]);
        assert_eq!(o.code, 4, "{}{}", o.stdout, o.stderr);
        assert!(
            o.stderr
                .contains(bad_one.file_name().unwrap().to_str().unwrap()),
            "{}",
            o.stderr
        );
        assert!(o.stdout.is_empty(), "{}", o.stdout);
    }
    // A batch damaged in place: found while scanning, the run skipped whole (never half
    // counted), or with --strict the query fails.
    let hurt = dir.path().join("run-hurt");
    fs::create_dir(&hurt).unwrap();
    let mut bytes = fs::read(a.ledger()).unwrap();
    let first = aet_ledger::chain::batch_spans(&bytes).unwrap()[0].clone();
    // The batch's header (its buffers' offsets and lengths) made nonsense.
    for b in &mut bytes[first.start + 100..first.start + 180] {
        *b = 0xee;
    }
    fs::write(hurt.join("ledger.arrow"), &bytes).unwrap();
    let o = query(
        "select count(*) as n from events",
        &[b.out.as_path(), &hurt],
        &["--format", "csv"],
    );
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("run-hurt"), "{}", o.stderr);
    let n: u64 = o.stdout.lines().nth(1).unwrap().parse().unwrap();
    assert_eq!(n, summary(&b.ledger())["events"].as_u64().unwrap());
    let o = query(
        "select count(*) from events",
        &[b.out.as_path(), &hurt],
        &["--strict"],
    );
    assert_eq!(o.code, 4, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("run-hurt"), "{}", o.stderr);

    // Bad SQL and a missing run: clear errors, exit 4.
    let o = query("select nope from events", &[a.out.as_path()], &[]);
    assert_eq!(o.code, 4);
    assert!(o.stderr.contains("nope"), "{}", o.stderr);
    let o = query("select 1", &[&dir.path().join("missing")], &[]);
    assert_eq!(o.code, 4);
    assert!(o.stderr.contains("missing"), "{}", o.stderr);
}

#[test]
fn every_format_holds_the_same_rows() {
    let dir = tempdir();
    let a = run_ok(
        dir.path(),
        &["sh", "-c", "cat /etc/hostname /etc/passwd > /dev/null"],
    );
    let sql = "select run, seq, kind, resolved_path, argv from events order by seq";
    let want = rows(sql, &[a.out.as_path()]);
    assert!(want.len() > 5);
    // Arrow and Parquet files, read by pyarrow: the same rows, in order.
    for (fmt, reader) in [
        ("arrow", "pyarrow.ipc.open_file(p).read_all()"),
        ("parquet", "pyarrow.parquet.read_table(p)"),
    ] {
        let file = dir.path().join(format!("out.{fmt}"));
        let o = query(
            sql,
            &[a.out.as_path()],
            &["--format", fmt, "-o", file.to_str().unwrap()],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(o.stdout.is_empty());
        let out = python(&format!(
            "import json, pyarrow, pyarrow.ipc, pyarrow.parquet\n\
             p = '{}'\n\
             t = {reader}\n\
             print(json.dumps(t.to_pylist()))\n",
            file.display()
        ));
        let got: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
        assert_eq!(got, want, "{fmt}");
    }
    // CSV has no lists: refused before anything is written, naming the column.
    let o = query(sql, &[a.out.as_path()], &["--format", "csv"]);
    assert_eq!(o.code, 4, "{}", o.stderr);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    assert!(o.stderr.contains("argv"), "{}", o.stderr);
    // CSV: a header and one line per row.
    let o = query(
        "select run, seq, kind, resolved_path from events order by seq",
        &[a.out.as_path()],
        &["--format", "csv"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let csv: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(csv[0], "run,seq,kind,resolved_path");
    assert_eq!(csv.len(), want.len() + 1);
    for (line, r) in csv[1..].iter().zip(&want) {
        assert!(
            line.starts_with(&format!("{},{},", r["run"].as_str().unwrap(), r["seq"])),
            "{line}"
        );
    }
    // The table: every row's sequence number is there.
    let o = query(sql, &[a.out.as_path()], &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for r in &want {
        assert!(
            o.stdout.contains(&format!("| {} ", r["seq"])),
            "{}",
            o.stdout
        );
    }
    // An empty result is a header, or [].
    let o = query(
        "select run from events where false",
        &[a.out.as_path()],
        &["--format", "json"],
    );
    assert_eq!(o.stdout.trim(), "[]");
    // Binary formats are not sent to a terminal, and an existing -o target is replaced only
    // once the result is whole.
    let target = dir.path().join("keep.csv");
    fs::write(&target, "old").unwrap();
    let o = query(
        "select nope from events",
        &[a.out.as_path()],
        &["--format", "csv", "-o", target.to_str().unwrap()],
    );
    assert_eq!(o.code, 4);
    assert_eq!(fs::read_to_string(&target).unwrap(), "old");
}
