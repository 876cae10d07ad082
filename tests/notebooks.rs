//! `examples/notebooks`: executed (nbclient) on runs the test records, as CI does; an error cell
//! or a `plt.show()` without a figure fails.

use std::{fs, path::Path, process::Command};

use aet_tests::*;

fn check(env: &[(&str, &Path)], out: &Path) -> (i32, String) {
    let nb = root().join("examples/notebooks");
    let mut c = Command::new("python3");
    c.arg(nb.join("check.py"))
        .arg(out)
        .arg(nb.join("one-run.ipynb"))
        .arg(nb.join("many-runs.ipynb"));
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        text(&o.stdout) + &text(&o.stderr),
    )
}

#[test]
fn the_notebooks_run_on_recorded_runs_and_draw_their_figures() {
    let dir = tempdir();
    let runs = dir.path().join("runs");
    fs::create_dir(&runs).unwrap();
    let demo = run_in(
        &runs.join("demo"),
        &[
            "--policy",
            root().join("policies/demo.toml").to_str().unwrap(),
        ],
        &[root().join("examples/demo/agent.sh")],
    );
    assert_eq!(demo.code(), 0, "{}", demo.stderr());
    let policy = dir.path().join("narrow.toml");
    fs::write(
        &policy,
        "[allow]\nread = [\"/usr\", \"/lib\"]\nwrite = []\n",
    )
    .unwrap();
    let other = run_in(
        &runs.join("other"),
        &["--policy", policy.to_str().unwrap()],
        &["cat", "/etc/hostname"],
    );
    assert_eq!(other.code(), 0, "{}", other.stderr());
    let parquet = dir.path().join("parquet");
    let e = aet()
        .args(["ledger", "export"])
        .arg(&demo.out)
        .arg(&other.out)
        .arg("--parquet")
        .arg(&parquet)
        .output()
        .unwrap();
    assert!(e.status.success(), "{}", text(&e.stderr));
    let out = dir.path().join("executed");
    let (code, text) = check(
        &[
            ("AET_RUN", &demo.out),
            ("AET_RUNS", &runs),
            ("AET_PARQUET", &parquet),
        ],
        &out,
    );
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("one-run.ipynb: ok, 1 figure(s)"), "{text}");
    assert!(text.contains("many-runs.ipynb: ok, 3 figure(s)"), "{text}");
    // The executed notebook shows the run's flagged access and the export's counts.
    let one = fs::read_to_string(out.join("one-run.ipynb")).unwrap();
    assert!(
        one.contains("answers/key.txt"),
        "the flagged read is listed"
    );
    let many = fs::read_to_string(out.join("many-runs.ipynb")).unwrap();
    assert!(many.contains("2 runs"), "both runs were read");
    assert!(
        many.contains("/etc/hostname"),
        "the out-of-scope path is counted"
    );

    // The check can fail: a run directory that is not there makes an error cell.
    let (code, text) = check(
        &[
            ("AET_RUN", &dir.path().join("missing")),
            ("AET_RUNS", &runs),
        ],
        &dir.path().join("executed-bad"),
    );
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("one-run.ipynb: a cell failed"), "{text}");
}
