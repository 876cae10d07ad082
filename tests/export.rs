//! `aet ledger export RUNS… --parquet DIR`: Hive-style partitions that DuckDB and pyarrow read as
//! a whole evaluation, with the same counts as each ledger's own summary; the ledger's metadata
//! in the files; a damaged ledger reported and skipped; nothing overwritten.

use std::{fs, path::Path};

use aet_tests::*;

fn export(runs: &[&Path], dir: &Path) -> (i32, String, String) {
    let o = aet()
        .args(["ledger", "export"])
        .args(runs)
        .arg("--parquet")
        .arg(dir)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        text(&o.stdout),
        text(&o.stderr),
    )
}

#[test]
fn an_export_reads_as_one_table_with_each_ledgers_counts_and_metadata() {
    let dir = tempdir();
    let a = run_ok(dir.path(), &[root().join("examples/demo/agent.sh")]);
    let b = run_ok(
        dir.path(),
        &["sh", "-c", "cat /etc/hostname; ls /usr > /dev/null"],
    );
    // A damaged ledger among good ones: reported, skipped, the exit status says so.
    let bad = dir.path().join("run-damaged");
    fs::create_dir(&bad).unwrap();
    fs::write(bad.join("ledger.arrow"), b"ARROW1\0\0not a ledger at all").unwrap();
    let out = dir.path().join("parquet");
    let (code, stdout, stderr) = export(&[&a.out, &b.out, &bad], &out);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("run-damaged"), "{stderr}");
    assert!(stdout.contains("2 run(s)"), "{stdout}");
    let name = |r: &Run| r.out.file_name().unwrap().to_str().unwrap().to_owned();
    for r in [&a, &b] {
        assert!(
            out.join(format!("run={}", name(r)))
                .join("part-00000.parquet")
                .is_file()
        );
    }
    assert!(!out.join("run=run-damaged").exists());
    // DuckDB over the whole directory, by run and kind, against each ledger's summary.
    let counts = python(&format!(
        "import duckdb\n\
         for run, kind, n in duckdb.sql(\"select run, kind, count(*) from read_parquet('{}/*/*.parquet', hive_partitioning=true) group by all order by all\").fetchall():\n\
         \x20   print(run, kind, n)\n",
        out.display()
    ));
    for r in [&a, &b] {
        let s = summary(&r.ledger());
        let want: std::collections::BTreeMap<String, u64> = s["events_by_kind"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
            .filter(|(_, n)| *n > 0)
            .collect();
        let got: std::collections::BTreeMap<String, u64> = counts
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f.len() == 3 && f[0] == name(r)).then(|| (f[1].to_owned(), f[2].parse().unwrap()))
            })
            .collect();
        assert_eq!(got, want, "{counts}");
        assert_eq!(got.values().sum::<u64>(), s["events"].as_u64().unwrap());
    }
    // The ledger's metadata is the files' key-value metadata.
    let meta = python(&format!(
        "import pyarrow.parquet as pq\n\
         m = pq.read_metadata('{}/run={}/part-00000.parquet').metadata\n\
         print(m[b'aet.run'].decode(), m[b'aet.complete'].decode(), m[b'aet.command'].decode())\n",
        out.display(),
        name(&a)
    ));
    assert!(meta.starts_with(&format!("{} true [", name(&a))), "{meta}");
    assert!(meta.contains("agent.sh"), "{meta}");
    // Nothing is overwritten: a second export of the same run is refused.
    let (code, _, stderr) = export(&[&a.out], &out);
    assert_ne!(code, 0);
    assert!(stderr.contains("exists already"), "{stderr}");
}

/// PySpark (local, on the machine's JRE) over the export of recorded runs gets exactly each
/// ledger's counts by kind, and each run's verdict, completeness and events from `_runs` (Spark
/// reads Parquet's unsigned 64-bit integers as decimals: converted back here), and exactly what
/// `aet query` gives over the runs themselves.
#[test]
fn spark_reads_the_export_with_the_same_counts_and_verdicts() {
    let dir = tempdir();
    let a = run_in(
        &dir.path().join("demo"),
        &[
            "--policy",
            root().join("policies/demo.toml").to_str().unwrap(),
        ],
        &[root().join("examples/demo/agent.sh")],
    );
    assert_eq!(a.code(), 0, "{}", a.stderr());
    let b = run_ok(dir.path(), &["sh", "-c", "cat /etc/hostname > /dev/null"]);
    let out = dir.path().join("parquet");
    let (code, stdout, stderr) = export(&[&a.out, &b.out], &out);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let spark = python(&format!(
        "import json\n\
         from pyspark.sql import SparkSession\n\
         s = SparkSession.builder.master('local[2]').appName('aet-test').config('spark.ui.enabled', 'false').getOrCreate()\n\
         s.sparkContext.setLogLevel('ERROR')\n\
         ev = s.read.parquet('{d}')\n\
         counts = {{}}\n\
         for r in ev.groupBy('run', 'kind').count().collect():\n\
         \x20   counts.setdefault(r['run'], {{}})[r['kind']] = r['count']\n\
         runs = {{r['run']: {{'verdict': r['verdict'], 'complete': r['complete'], 'events': int(r['events']), 'lost': None if r['lost'] is None else int(r['lost'])}}\n\
         \x20       for r in s.read.parquet('{d}/_runs').collect()}}\n\
         print(json.dumps({{'counts': counts, 'runs': runs}}))\n\
         s.stop()\n",
        d = out.display()
    ));
    let v: serde_json::Value = serde_json::from_str(spark.lines().last().unwrap()).unwrap();
    for r in [&a, &b] {
        let name = r.out.file_name().unwrap().to_str().unwrap();
        let s = summary(&r.ledger());
        let want: serde_json::Map<String, serde_json::Value> = s["events_by_kind"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, n)| n.as_u64() != Some(0))
            .map(|(k, n)| (k.clone(), n.clone()))
            .collect();
        assert_eq!(v["counts"][name].as_object().unwrap(), &want, "{name}");
        assert_eq!(v["runs"][name]["events"], s["events"], "{v:#}");
        assert_eq!(v["runs"][name]["complete"], s["complete"], "{v:#}");
        assert_eq!(v["runs"][name]["lost"], s["events_lost"], "{v:#}");
    }
    // Exactly what `aet query` gives over the runs themselves.
    let q = |sql: &str| -> Vec<serde_json::Value> {
        let o = aet()
            .args(["query", sql])
            .arg(&a.out)
            .arg(&b.out)
            .args(["--format", "json"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let mut counts = serde_json::Map::new();
    for r in q("select run, kind, count(*) as n from events group by run, kind") {
        counts
            .entry(r["run"].as_str().unwrap())
            .or_insert_with(|| serde_json::json!({}))
            .as_object_mut()
            .unwrap()
            .insert(r["kind"].as_str().unwrap().to_owned(), r["n"].clone());
    }
    assert_eq!(v["counts"], serde_json::Value::Object(counts), "{v:#}");
    let mut runs = serde_json::Map::new();
    for r in q("select run, verdict, complete, events, lost from runs") {
        let name = r["run"].as_str().unwrap().to_owned();
        let mut r = r.as_object().unwrap().clone();
        r.remove("run");
        runs.insert(name, serde_json::Value::Object(r));
    }
    assert_eq!(v["runs"], serde_json::Value::Object(runs), "{v:#}");
    let audit: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(a.out.join("audit.json")).unwrap()).unwrap();
    assert_eq!(v["runs"]["demo"]["verdict"], audit["verdict"], "{v:#}");
    let bname = b.out.file_name().unwrap().to_str().unwrap();
    assert!(v["runs"][bname]["verdict"].is_null(), "{v:#}");
}
