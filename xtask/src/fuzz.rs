//! `cargo xtask fuzz [--time S] [TARGET...]`: builds the fuzz targets of `fuzz/` (cargo-fuzz,
//! libFuzzer, the nightly toolchain) and runs each for `S` seconds on its corpus, then prints
//! what each did: executions, coverage, the corpus it grew. A crash (a panic, a hang past the
//! per-input timeout, memory past the limit) fails the task and names the input libFuzzer kept;
//! once fixed, that input goes into `fuzz/regressions/TARGET/`, which the unit tests replay.
//!
//! The committed seeds (`fuzz/corpus/TARGET/`) are only read: what the fuzzer adds goes to
//! `fuzz/work/TARGET/` (ignored by git), so a longer run starts from what a shorter one found.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Instant,
};

use anyhow::{Context as _, bail};

use crate::{root, setup};

/// The cargo-fuzz version aet's targets are built with.
pub const CARGO_FUZZ_VERSION: &str = "0.13.1";

#[derive(clap::Args)]
pub struct Args {
    /// Seconds each target runs.
    #[arg(long, default_value_t = 60)]
    time: u64,
    /// Jobs at once (each target in turn runs this many libFuzzer processes).
    #[arg(long, default_value_t = 1)]
    jobs: u32,
    /// Targets run at once (default: the CPUs divided by --jobs, at least 1). Each is one
    /// libFuzzer process (or --jobs), so each target gets its seconds of a CPU either way.
    #[arg(long)]
    parallel: Option<usize>,
    /// Build without optimisations: quicker to build, several times slower to run (the short
    /// run of `cargo xtask test`).
    #[arg(long)]
    dev: bool,
    /// Start from the committed seeds alone, in a fresh work corpus (what CI has): the short
    /// run of `cargo xtask test`, which a long run's corpus would make long.
    #[arg(skip)]
    seeds_only: bool,
    /// Only these targets (default: every one).
    targets: Vec<String>,
}

impl Args {
    /// Every target for `secs` seconds, one process each.
    pub fn short(secs: u64) -> Self {
        Self {
            time: secs,
            jobs: 1,
            parallel: None,
            dev: true,
            seeds_only: true,
            targets: Vec::new(),
        }
    }
}

/// What one target's run did.
struct Outcome {
    target: String,
    secs: f64,
    execs: Option<u64>,
    cov: Option<u64>,
    features: Option<u64>,
    corpus: usize,
}

fn fuzz_dir() -> PathBuf {
    root().join("fuzz")
}

/// The targets `fuzz/Cargo.toml` declares, in its order.
pub fn targets() -> anyhow::Result<Vec<String>> {
    crate::manifest_names(&fuzz_dir().join("Cargo.toml"), "bin")
}

fn nightly_cargo() -> Command {
    let mut c = Command::new("cargo");
    // Nightly's own compiler, never the default toolchain's clippy driver the suite lints with.
    c.arg("+nightly")
        .env("PATH", setup::path_with_cargo_bin())
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .current_dir(root());
    setup::with_cache(&mut c);
    c
}

/// Builds every target: optimised, with debug assertions and overflow checks, no sanitizer
/// (the parsers are safe Rust: what the fuzzer looks for is a panic, a hang or runaway memory,
/// and a sanitizer would halve the executions), 16 codegen units (a cold build in about 6
/// minutes on 2 cores instead of far more with one); `dev`: unoptimised instead.
pub fn build(dev: bool) -> anyhow::Result<()> {
    let mut c = nightly_cargo();
    c.args(["fuzz", "build", "--sanitizer", "none"]);
    if dev {
        c.arg("--dev");
    } else {
        c.args(["--codegen-units", "16"]);
    }
    crate::sh(c.arg("--fuzz-dir").arg(fuzz_dir()))
}

/// Where `build` leaves a target.
fn binary(target: &str, dev: bool) -> PathBuf {
    fuzz_dir()
        .join("target/x86_64-unknown-linux-gnu")
        .join(if dev { "debug" } else { "release" })
        .join(target)
}

/// Number of files in a directory (0 when it is missing).
fn count(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.flatten().count())
}

/// The value after `key` in libFuzzer's last status line (`#123 DONE cov: 45 ft: 67 ...`).
fn stat(line: &str, key: &str) -> Option<u64> {
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == key {
            return words.next()?.parse().ok();
        }
    }
    None
}

fn run_one(target: &str, args: &Args) -> anyhow::Result<Outcome> {
    let (secs, jobs) = (args.time, args.jobs);
    let dir = fuzz_dir();
    let work = if args.seeds_only {
        let w = dir.join("target/short-work").join(target);
        let _ = std::fs::remove_dir_all(&w);
        w
    } else {
        dir.join("work").join(target)
    };
    let seeds = dir.join("corpus").join(target);
    let artifacts = dir.join("artifacts").join(target);
    std::fs::create_dir_all(&work)?;
    std::fs::create_dir_all(&artifacts)?;
    anyhow::ensure!(
        count(&seeds) > 0,
        "{}: the target has no seed corpus",
        seeds.display()
    );
    let bin = binary(target, args.dev);
    anyhow::ensure!(bin.exists(), "{}: not built", bin.display());
    println!("== fuzz {target} for {secs} s");
    let started = Instant::now();
    let mut cmd = Command::new(&bin);
    cmd.arg(&work)
        .arg(&seeds)
        .arg(format!("-max_total_time={secs}"))
        // A slow input is a hang: the proxy bounds its own at 20 s, the rest are far faster.
        .arg("-timeout=30")
        .arg("-rss_limit_mb=4096")
        .arg("-print_final_stats=1")
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .current_dir(&dir);
    if jobs > 1 {
        cmd.arg(format!("-fork={jobs}"));
    }
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    let log = String::from_utf8_lossy(&out.stderr);
    let last = log
        .lines()
        .rev()
        .find(|l| l.starts_with('#') && l.contains("cov:"))
        .unwrap_or("");
    let execs = log
        .lines()
        .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
        .and_then(|v| v.trim().parse().ok())
        .or_else(|| {
            last.trim_start_matches('#')
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        });
    if !out.status.success() {
        let kept: Vec<String> = std::fs::read_dir(&artifacts)?
            .flatten()
            .map(|e| e.path().display().to_string())
            .collect();
        // The panic and what libFuzzer said of it, without the backtrace's frames.
        let lines: Vec<&str> = log.lines().collect();
        let mut tail: Vec<&str> = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            if l.contains("panicked at") {
                tail.extend(lines.get(i..(i + 2).min(lines.len())).unwrap_or_default());
            }
            if l.starts_with("==") || l.starts_with("SUMMARY") || l.starts_with("artifact_prefix") {
                tail.push(l);
            }
        }
        bail!(
            "fuzz target {target} failed ({}) after {:.0} s:\n{}\n\ninputs kept: {}\n(reproduce: \
             {} INPUT; once fixed, copy INPUT into fuzz/regressions/{target}/)",
            out.status,
            started.elapsed().as_secs_f64(),
            tail.join("\n"),
            if kept.is_empty() {
                "none".into()
            } else {
                kept.join(", ")
            },
            bin.display()
        );
    }
    Ok(Outcome {
        target: target.to_owned(),
        secs: started.elapsed().as_secs_f64(),
        execs,
        cov: stat(last, "cov:"),
        features: stat(last, "ft:"),
        corpus: count(&work) + count(&seeds),
    })
}

/// `cargo xtask fuzz`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let all = targets()?;
    let chosen: Vec<String> = if args.targets.is_empty() {
        all.clone()
    } else {
        for t in &args.targets {
            anyhow::ensure!(
                all.contains(t),
                "no fuzz target {t:?}; the targets are {}",
                all.join(", ")
            );
        }
        args.targets.clone()
    };
    build(args.dev)?;
    let cpus = crate::cpus();
    let at_once = args
        .parallel
        .unwrap_or(cpus / args.jobs.max(1) as usize)
        .clamp(1, chosen.len().max(1));
    // A queue of targets, `at_once` runs at a time; after a failure no new one starts, and the
    // first failure in the targets' order is the one reported.
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Mutex<Vec<Option<anyhow::Result<Outcome>>>> =
        Mutex::new(chosen.iter().map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..at_once {
            s.spawn(|| {
                while !failed.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(t) = chosen.get(i) else { break };
                    let r = run_one(t, args);
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    results.lock().unwrap()[i] = Some(r);
                }
            });
        }
    });
    let mut done = Vec::new();
    for r in results.into_inner().unwrap().into_iter().flatten() {
        done.push(r?);
    }
    println!(
        "\n== fuzzing ({} s a target, {} at once, {} build)",
        args.time,
        at_once,
        if args.dev { "unoptimised" } else { "optimised" }
    );
    println!(
        "{:<16} {:>7} {:>12} {:>9} {:>7} {:>8} {:>7}",
        "target", "secs", "executions", "exec/s", "cov", "features", "corpus"
    );
    let num = |v: Option<u64>| v.map_or("?".into(), |v| v.to_string());
    for o in &done {
        println!(
            "{:<16} {:>7.0} {:>12} {:>9} {:>7} {:>8} {:>7}",
            o.target,
            o.secs,
            num(o.execs),
            o.execs
                .map_or("?".into(), |e| format!("{:.0}", e as f64 / o.secs.max(1.0))),
            num(o.cov),
            num(o.features),
            o.corpus
        );
    }
    println!("no crash in {} targets", done.len());
    Ok(())
}
