//! Phases of a run in progress (`aet phase`), standalone and served by the daemon: the grader's
//! read of the tests is its own, a process the agent left that acts while the grader runs is a
//! finding naming it, and the run itself cannot mark its own phases.

use std::{
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use aet_tests::*;

fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn phase(out: &Path, name: &str, keep: &[u32]) -> std::process::Output {
    let mut c = aet();
    c.arg("phase").arg(out).arg(name);
    for k in keep {
        c.arg("--keep").arg(k.to_string());
    }
    c.output().unwrap()
}

/// The agent reads the tests and leaves a job behind that rewrites the results once grading
/// has begun; then the grader reads the tests. Returns the run directory and its audit.
#[test]
fn each_phase_is_judged_by_its_own_rules_and_a_left_job_is_found() {
    let t = Tree::new();
    t.dirs(&["tests", "sync"])
        .file("tests/test_x.sh", "echo ok\n")
        .file("results.txt", "0 passed\n");
    let policy = t.p("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[cheats]\ntests = '^{tests}/'\n\n[phases.grading.cheats]\nresults = {{ pattern = '^{results}$', access = [\"write\"] }}\n",
            tests = t.s("tests"),
            results = t.s("results.txt")
        ),
    )
    .unwrap();
    let (tests, results, sync) = (t.s("tests/test_x.sh"), t.s("results.txt"), t.s("sync"));
    let script = format!(
        "cat {tests} >/dev/null; \
         (while [ ! -e {sync}/go ]; do sleep 0.02; done; echo '9 passed' > {results}) & \
         touch {sync}/agent-done; \
         while [ ! -e {sync}/go ]; do sleep 0.02; done; wait; \
         cat {tests} >/dev/null"
    );
    let out = t.p("run");
    let child = aet()
        .arg("run")
        .arg("--out")
        .arg(&out)
        .arg("--policy")
        .arg(&policy)
        .args(["--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&t.p("sync/agent-done"));
    let p = phase(&out, "grading", &[]);
    assert!(p.status.success(), "{}", text(&p.stderr));
    assert!(text(&p.stderr).contains("phase grading began"));
    // A phase is begun once.
    let again = phase(&out, "grading", &[]);
    assert_eq!(again.status.code(), Some(4));
    assert!(
        text(&again.stderr).contains("already had phase"),
        "{}",
        text(&again.stderr)
    );
    std::fs::write(t.p("sync/go"), "").unwrap();
    let end = child.wait_with_output().unwrap();
    assert!(end.status.success(), "{}", text(&end.stderr));
    assert!(
        !out.join("control").exists(),
        "the control file is gone with the run"
    );

    let ledger = out.join("ledger.arrow");
    assert_complete(&ledger);
    let m = meta(&ledger);
    assert_eq!(m["aet.schema_version"], "7");
    let phases: serde_json::Value = serde_json::from_str(&m["aet.phases"]).unwrap();
    let names: Vec<&str> = phases
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["agent", "grading"]);
    assert!(phases[1]["by"].as_u64().is_some(), "{phases}");
    // Each read of the tests is in its phase's rows.
    let rows = rows(&ledger);
    let reads: Vec<&str> = ok_opens(&rows, &t.p("tests/test_x.sh"))
        .iter()
        .map(|r| r.phase.as_deref().unwrap())
        .collect();
    assert_eq!(reads, ["agent", "grading"]);

    let a: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("audit.json")).unwrap()).unwrap();
    assert_eq!(a["verdict"], "disqualified");
    let cheats: Vec<(String, String, String, u64)> = a["cheat_hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["rule"].as_str().unwrap().to_owned(),
                f["phase"].as_str().unwrap().to_owned(),
                f["path"].as_str().unwrap().to_owned(),
                f["pid"].as_u64().unwrap(),
            )
        })
        .collect();
    // The agent's read of the tests is a cheat; the grader's is not.
    assert!(
        cheats
            .iter()
            .any(|c| (c.0.as_str(), c.1.as_str(), &c.2) == ("cheats.tests", "agent", &tests)),
        "{cheats:?}"
    );
    assert!(
        !cheats
            .iter()
            .any(|c| c.0 == "cheats.tests" && c.1 == "grading"),
        "{cheats:?}"
    );
    // The job the agent left wrote the results during grading: the grading rule names the
    // write, and the job is a lingering process of the agent's phase (named by its first act
    // in grading, whatever it was).
    let write = cheats
        .iter()
        .find(|c| c.0 == "phases.grading.cheats.results")
        .unwrap_or_else(|| panic!("{cheats:?}"));
    assert_eq!((write.1.as_str(), &write.2), ("grading", &results));
    let lingering = cheats
        .iter()
        .find(|c| c.0 == "processes.lingering" && c.3 == write.3)
        .unwrap_or_else(|| panic!("the writer {} is not lingering: {cheats:?}", write.3));
    assert_eq!(lingering.1, "grading");
    assert!(lingering.2.ends_with("(started in agent)"), "{lingering:?}");
    // SQL over the run and its Parquet export carry the phase.
    let q = aet()
        .arg("query")
        .arg(
            "select (select string_agg(phase || ':' || cast(n as varchar), ',' order by phase) \
             from (select phase, count(*) as n from events where kind = 'open' and \
             resolved_path like '%test_x.sh' group by phase)) as reads, \
             (select string_agg(distinct phase, ',') from findings where rule = 'processes.lingering') as lingering",
        )
        .arg(&out)
        .args(["--format", "csv"])
        .output()
        .unwrap();
    assert!(q.status.success(), "{}", text(&q.stderr));
    assert_eq!(
        text(&q.stdout),
        "reads,lingering\n\"agent:1,grading:1\",grading\n"
    );
    let pq = t.p("parquet");
    let x = aet()
        .args(["ledger", "export"])
        .arg(&out)
        .arg("--parquet")
        .arg(&pq)
        .output()
        .unwrap();
    assert!(x.status.success(), "{}", text(&x.stderr));
    let phases_in_parquet = python(&format!(
        "import pyarrow.dataset as ds\n\
         t = ds.dataset('{}', format='parquet', partitioning='hive').to_table(columns=['phase'])\n\
         print(sorted(set(t.column('phase').to_pylist())))",
        pq.display()
    ));
    assert_eq!(phases_in_parquet.trim(), "['agent', 'grading']");

    let judged: Vec<(String, serde_json::Value)> = a["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                p["judged_by"].clone(),
            )
        })
        .collect();
    assert_eq!(
        judged,
        [
            ("agent".into(), serde_json::json!("policy")),
            ("grading".into(), serde_json::json!("phases.grading"))
        ]
    );
}

/// The agent cannot declare its own work graded: `aet phase` from inside the run is refused.
#[test]
fn a_process_of_the_run_cannot_mark_its_phase() {
    let d = tempdir();
    let out = d.path().join("run");
    let script = format!(
        "{} phase {} grading; echo \"code=$?\"",
        aet_bin().display(),
        out.display()
    );
    let r = run_in(&out, &[], &["sh", "-c", &script]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(r.stdout(), "code=4\n");
    assert!(
        r.stderr()
            .contains("is part of the run: a run's phases are marked from outside it"),
        "{}",
        r.stderr()
    );
    let phases = &meta(&r.ledger())["aet.phases"];
    assert!(!phases.contains("grading"), "{phases}");
}

#[test]
fn a_phase_needs_a_run_in_progress_and_a_name() {
    let d = tempdir();
    let p = phase(d.path(), "grading", &[]);
    assert_eq!(p.status.code(), Some(4));
    assert!(
        text(&p.stderr).contains("has no run in progress"),
        "{}",
        text(&p.stderr)
    );
    let p = phase(d.path(), "Grading Now", &[]);
    assert_eq!(p.status.code(), Some(4));
    assert!(
        text(&p.stderr).contains("is not a phase name"),
        "{}",
        text(&p.stderr)
    );
}
