//! `cargo xtask bench`: aet's overhead on the traced workload, against the same workload
//! untraced, measured in one invocation with alternating runs (the machines are shared and
//! noisy, so only ratios measured side by side mean anything).
//!
//! Every workload runs under the `timeit` helper, traced or not; the figure is the workload's own
//! wall time (aet's set-up and teardown are not part of it), the median of `--runs` runs.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::root;

mod barrier;
mod fleet;
mod names;
mod overload;
mod query;
mod report;
mod resident;

#[derive(clap::Args)]
pub struct Args {
    /// Runs of each workload, traced and untraced (alternating).
    #[arg(long, default_value_t = 7)]
    runs: usize,
    /// Opens in the open storm.
    #[arg(long, default_value_t = 200_000)]
    opens: u64,
    /// Processes in the exec storm.
    #[arg(long, default_value_t = 2_000)]
    execs: u64,
    /// Files in the git workload's repository.
    #[arg(long, default_value_t = 5_000)]
    git_files: usize,
    /// C files in the build workload.
    #[arg(long, default_value_t = 50)]
    c_files: usize,
    /// Only the workloads whose name contains this (`audit` for the audit's throughput).
    #[arg(long)]
    only: Option<String>,
    /// Rows of the ledger the audit benchmark classifies.
    #[arg(long, default_value_t = 10_000_000)]
    audit_rows: u64,
    /// Opens in each storm of the overload benchmark.
    #[arg(long, default_value_t = 1_000_000)]
    overload_opens: u64,
    /// Runs of each mode in the overload benchmark.
    #[arg(long, default_value_t = 3)]
    overload_runs: usize,
    /// Runs (ledgers) in the query benchmark.
    #[arg(long, default_value_t = 1_000)]
    query_runs: usize,
    /// Rows in all, over those runs, in the query benchmark.
    #[arg(long, default_value_t = 10_000_000)]
    query_rows: u64,
    /// Runs shipped in the object-storage benchmark.
    #[arg(long, default_value_t = 100)]
    fleet_runs: usize,
    /// Rows in all, over those runs, in the object-storage benchmark.
    #[arg(long, default_value_t = 2_000_000)]
    fleet_rows: u64,
    /// MiB of the one big run the object-storage benchmark ships (a multipart upload).
    #[arg(long, default_value_t = 256)]
    fleet_big_mb: u64,
}

/// Records the built-in example into `run` (the ledger the audit, query and object-storage
/// benchmarks repeat); its ledger's path.
fn template(aet: &Path, run: &Path) -> anyhow::Result<PathBuf> {
    let out = crate::user_command(aet)
        .current_dir(root())
        .args(["run", "-q", "--out"])
        .arg(run)
        .arg("--")
        .arg(root().join("examples/demo/agent.sh"))
        .output()?;
    if !out.status.success() {
        bail!(
            "recording the template ledger failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(run.join("ledger.arrow"))
}

/// A git repository of `files` files over 50 directories, committed, for the git workload.
fn git_fixture(dir: &Path, files: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for i in 0..files {
        let sub = dir.join(format!("d{:02}", i % 50));
        std::fs::create_dir_all(&sub)?;
        std::fs::write(
            sub.join(format!("f{i:05}.txt")),
            format!("file {i}\n").repeat(1 + i % 20),
        )?;
    }
    let git = |args: &[&str]| -> anyhow::Result<()> {
        let st = Command::new("git")
            .args(["-c", "user.name=aet", "-c", "user.email=aet@localhost"])
            .args(args)
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .status()
            .context("git")?;
        if !st.success() {
            bail!("git {args:?} failed in {}", dir.display());
        }
        Ok(())
    };
    git(&["init", "-q"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-q", "-m", "fixture"])?;
    Ok(())
}

/// `files` small C files and a Makefile linking them, for the build workload.
fn make_fixture(dir: &Path, files: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut objs = Vec::new();
    let mut main = String::from("#include <stdio.h>\n");
    for i in 0..files {
        let body: String = (0..20)
            .map(|j| {
                format!(
                    "static int s{j}(int x) {{ return x * {j} + {i}; }}\n\
                     int f{i}_{j}(int x) {{ int a = 0; for (int k = 0; k < x; k++) a += s{j}(k); return a; }}\n"
                )
            })
            .collect();
        std::fs::write(
            dir.join(format!("u{i:03}.c")),
            format!("#include <string.h>\n#include <stdlib.h>\n{body}"),
        )?;
        objs.push(format!("u{i:03}.o"));
        main.push_str(&format!("int f{i}_0(int);\n"));
    }
    main.push_str("int main(void) { int t = 0;\n");
    for i in 0..files {
        main.push_str(&format!("t += f{i}_0(3);\n"));
    }
    main.push_str("printf(\"%d\\n\", t); return 0; }\n");
    std::fs::write(dir.join("main.c"), main)?;
    std::fs::write(
        dir.join("Makefile"),
        format!(
            "OBJS = main.o {}\nprog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n%.o: %.c\n\t$(CC) -O1 -c -o $@ $<\n",
            objs.join(" ")
        ),
    )?;
    Ok(())
}

/// A sandbox for the sandboxed open storm: a workspace, and the storm's binary and target file
/// granted read-only (bound into the view, so every walk crosses mounts, as an agent's does).
/// Returns the spec's path.
fn sandbox_fixture(dir: &Path, storm: &Path) -> anyhow::Result<PathBuf> {
    let inputs = dir.join("inputs");
    std::fs::create_dir_all(dir.join("ws"))?;
    std::fs::create_dir_all(&inputs)?;
    std::fs::write(inputs.join("data.txt"), "data\n")?;
    let helpers = storm.parent().context("helper directory")?;
    let spec = dir.join("sandbox.toml");
    std::fs::write(
        &spec,
        format!(
            "workspace = {:?}\nallow = [{:?}, {:?}]\n",
            dir.join("ws").display().to_string(),
            inputs.display().to_string(),
            helpers.display().to_string(),
        ),
    )?;
    Ok(spec)
}

/// Compiles a C helper from `tests/helpers` into `target/helpers`.
pub fn helper(name: &str) -> anyhow::Result<PathBuf> {
    let src = root().join("tests/helpers").join(format!("{name}.c"));
    let dir = root().join("target/helpers");
    std::fs::create_dir_all(&dir)?;
    let out = dir.join(name);
    let status = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .context("cc")?;
    if !status.success() {
        bail!("cc {} failed", src.display());
    }
    Ok(out)
}

struct Sample {
    ns: u64,
    events: u64,
    lost: u64,
}

pub(super) fn elapsed(stderr: &[u8]) -> anyhow::Result<u64> {
    let text = String::from_utf8_lossy(stderr);
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix("elapsed_ns="))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no elapsed_ns in: {text}"))
}

/// Runs the workload untraced: directly, or in the sandbox of `sandbox` (`aet sandbox run`).
fn untraced(
    aet: &Path,
    timeit: &Path,
    cmd: &[String],
    sandbox: Option<&Path>,
) -> anyhow::Result<Sample> {
    let out = match sandbox {
        Some(spec) => crate::user_command(aet)
            .args(["sandbox", "run"])
            .arg(spec)
            .arg("--")
            .arg(timeit)
            .args(cmd)
            .output()?,
        None => crate::user_command(timeit).args(cmd).output()?,
    };
    if !out.status.success() {
        bail!(
            "untraced workload failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(Sample {
        ns: elapsed(&out.stderr)?,
        events: 0,
        lost: 0,
    })
}

fn traced(
    aet: &Path,
    timeit: &Path,
    cmd: &[String],
    sandbox: Option<&Path>,
    dir: &Path,
) -> anyhow::Result<Sample> {
    let _ = std::fs::remove_dir_all(dir);
    let mut run = crate::user_command(aet);
    run.args(["run", "-q", "--standalone", "--grace", "0", "--out"])
        .arg(dir);
    if let Some(spec) = sandbox {
        run.arg("--sandbox").arg(spec);
    }
    let out = run.arg("--").arg(timeit).args(cmd).output()?;
    if !out.status.success() {
        bail!(
            "traced workload failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v = summary(aet, dir)?;
    Ok(Sample {
        ns: elapsed(&out.stderr)?,
        events: v["events"].as_u64().unwrap_or(0),
        // An unknown loss count (unfinished ledger) counts as a loss.
        lost: v["events_lost"].as_u64().unwrap_or(u64::MAX),
    })
}

/// `aet ledger summary --json DIR`.
fn summary(aet: &Path, dir: &Path) -> anyhow::Result<serde_json::Value> {
    let out = Command::new(aet)
        .args(["ledger", "summary", "--json"])
        .arg(dir)
        .output()?;
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("aet ledger summary --json {}", dir.display()))
}

pub(super) fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

pub fn run(aet: &Path, args: Args) -> anyhow::Result<()> {
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let timeit = helper("timeit")?;
    let storm = helper("openstorm")?;
    let target = root().join("Cargo.toml");
    let dir = std::env::temp_dir().join(format!("aet-bench-{}", std::process::id()));
    let fixtures = std::env::temp_dir().join(format!("aet-bench-fixtures-{}", std::process::id()));
    let git_dir = fixtures.join("repo");
    let make_dir = fixtures.join("build");
    git_fixture(&git_dir, args.git_files)?;
    make_fixture(&make_dir, args.c_files)?;
    let spec = sandbox_fixture(&fixtures, &storm)?;
    let storm_cmd = |file: &Path| {
        vec![
            storm.display().to_string(),
            args.opens.to_string(),
            file.display().to_string(),
        ]
    };
    let workloads: Vec<(&str, Vec<String>, Option<&Path>)> = vec![
        ("open storm", storm_cmd(&target), None),
        (
            "sandboxed open storm",
            storm_cmd(&fixtures.join("inputs/data.txt")),
            Some(&spec),
        ),
        (
            "git cycle",
            vec![
                "sh".into(),
                "-c".into(),
                format!(
                    "cd {} && for f in d0*/f0000*.txt; do echo change >> $f; done && \
                     git status --porcelain >/dev/null && git add -A && \
                     git diff --cached --stat >/dev/null && git diff HEAD >/dev/null && \
                     git reset -q --hard",
                    git_dir.display()
                ),
            ],
            None,
        ),
        (
            "make -j2",
            vec![
                "sh".into(),
                "-c".into(),
                format!(
                    "cd {} && rm -f *.o prog && make -s -j2 prog && ./prog >/dev/null",
                    make_dir.display()
                ),
            ],
            None,
        ),
        (
            "exec storm",
            vec![
                "sh".into(),
                "-c".into(),
                format!(
                    "i=0; while [ $i -lt {} ]; do /bin/true; i=$((i+1)); done",
                    args.execs
                ),
            ],
            None,
        ),
    ];
    let workloads_for_barrier: Vec<(&str, Vec<String>)> =
        workloads.iter().map(|(n, c, _)| (*n, c.clone())).collect();
    println!(
        "{:<20} {:>14} {:>14} {:>7} {:>9} {:>12} {:>5}",
        "workload", "untraced (ms)", "traced (ms)", "ratio", "events", "events/s", "lost"
    );
    for (name, cmd, sandbox) in workloads {
        if args.only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let mut base = Vec::new();
        let mut with = Vec::new();
        let mut events = 0;
        let mut lost = 0;
        // One warm-up of each, then alternate.
        untraced(aet, &timeit, &cmd, sandbox)?;
        traced(aet, &timeit, &cmd, sandbox, &dir)?;
        for _ in 0..args.runs {
            base.push(untraced(aet, &timeit, &cmd, sandbox)?.ns);
            let s = traced(aet, &timeit, &cmd, sandbox, &dir)?;
            with.push(s.ns);
            events = s.events;
            lost = s.lost.saturating_add(lost);
        }
        let (b, t) = (median(base), median(with));
        println!(
            "{:<20} {:>14.1} {:>14.1} {:>6.2}x {:>9} {:>12.0} {:>5}",
            name,
            b as f64 / 1e6,
            t as f64 / 1e6,
            t as f64 / b as f64,
            events,
            events as f64 / (t as f64 / 1e9),
            lost
        );
    }
    println!(
        "(medians of {} alternating runs; ratio = traced / untraced; each traced run \
         standalone, timed from its command's start to its end)",
        args.runs
    );
    if args.only.as_deref().is_none_or(|o| "barrier".contains(o)) {
        let pick = |n: &str| {
            workloads_for_barrier
                .iter()
                .find(|(w, _)| *w == n)
                .cloned()
                .expect("a workload above")
        };
        barrier::run(
            aet,
            &timeit,
            &[pick("open storm"), pick("make -j2")],
            &fixtures,
            &args,
        )?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&fixtures);
    names::run(aet, &timeit, &storm, &args)?;
    resident::run(aet, &timeit, &storm, &args)?;
    overload::run(aet, &storm, &args)?;
    overload::consumer(aet, &storm, &args)?;
    if args.only.as_deref().is_none_or(|o| "audit".contains(o)) {
        audit_bench(aet, &args)?;
    }
    if args.only.as_deref().is_none_or(|o| "query".contains(o)) {
        query::run(aet, &args)?;
    }
    if args.only.as_deref().is_none_or(|o| "report".contains(o)) {
        report::run(aet, &args)?;
    }
    if args
        .only
        .as_deref()
        .is_none_or(|o| "object storage".contains(o))
    {
        fleet::run(aet, &args)?;
    }
    Ok(())
}

/// Audit throughput: a ledger recorded from the built-in example, repeated to `--audit-rows`
/// rows, audited on one thread (aet-audit's `audit` bench).
fn audit_bench(aet: &Path, args: &Args) -> anyhow::Result<()> {
    let dir = root().join("target/aet-bench-audit");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let ledger = template(aet, &dir.join("template"))?;
    println!(
        "\naudit: a ledger of the built-in example repeated to {} rows, policies/bench.toml",
        args.audit_rows
    );
    crate::sh(
        crate::cargo()
            .args(["bench", "-p", "aet-audit", "--bench", "audit", "--"])
            .arg(&ledger)
            .arg(root().join("policies/bench.toml"))
            .arg(args.audit_rows.to_string())
            .arg(args.runs.clamp(1, 5).to_string())
            .arg(root().join("policies/bench-provenance.toml")),
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
