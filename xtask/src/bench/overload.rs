//! Backpressure benchmarks (issue 14): parallel open storms recorded with `--on-overload drop`
//! and `--on-overload freeze`, alternating, in one invocation: events lost, how often and how
//! long the run was frozen, and the wall time of each (the whole `aet run`, the command's own
//! time being what freezing stretches).

use std::{path::Path, time::Instant};

use anyhow::bail;

use super::{Args, median, summary};

/// The consumer alone: the records of a recorded run (an open storm and the built-in example's
/// kind of work: execs, mappings, stats), fed back through decoding, rows, Arrow building and
/// writing on one thread (`aet __replay`); records per CPU-second of that thread.
pub fn consumer(aet: &Path, storm: &Path, args: &Args) -> anyhow::Result<()> {
    if args
        .only
        .as_deref()
        .is_some_and(|o| !"consumer".contains(o))
    {
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("aet-bench-consumer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let result = (|| {
        let dump = dir.join("records");
        let demo = crate::root().join("examples/demo/agent.sh");
        let script = format!(
            "{} {} {} >/dev/null; {} >/dev/null 2>&1; true",
            storm.display(),
            args.opens,
            crate::root().join("Cargo.toml").display(),
            demo.display()
        );
        let o = crate::user_command(aet)
            .args(["run", "-q", "--standalone", "--out"])
            .arg(dir.join("run"))
            .args(["--", "sh", "-c", &script])
            .env("AET_DEBUG_RECORD_DUMP", &dump)
            .output()?;
        if !o.status.success() {
            bail!(
                "recording the replay's run failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let mut rates = Vec::new();
        let mut records = 0;
        for k in 0..args.overload_runs.max(5) {
            let ledger = dir.join(format!("replay-{k}.arrow"));
            let o = std::process::Command::new(aet)
                .arg("__replay")
                .arg(&dump)
                .arg(&ledger)
                .output()?;
            if !o.status.success() {
                bail!(
                    "aet __replay failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            let text = String::from_utf8_lossy(&o.stdout);
            let field = |name: &str| -> anyhow::Result<u64> {
                text.split_whitespace()
                    .find_map(|w| w.strip_prefix(&format!("{name}=")))
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| anyhow::anyhow!("no {name} in {text}"))
            };
            records = field("records")?;
            let cpu = field("cpu_ns")?;
            rates.push((records as f64 / (cpu as f64 / 1e9)) as u64);
        }
        println!();
        println!(
            "consumer replay: {records} records, {:.2} M records per CPU-second (median of {}; \
             decode, rows, Arrow building and writing on one thread; target >= 1 M/s)",
            median(rates) as f64 / 1e6,
            args.overload_runs.max(5)
        );
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Runs the storms that `args.only` selects (`overload`).
pub fn run(aet: &Path, storm: &Path, args: &Args) -> anyhow::Result<()> {
    if args
        .only
        .as_deref()
        .is_some_and(|o| !"overload".contains(o))
    {
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("aet-bench-overload-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = crate::root().join("Cargo.toml");
    println!();
    println!(
        "{:<22} {:>6} {:>11} {:>10} {:>8} {:>11} {:>12} {:>7}",
        "overload", "mode", "wall (ms)", "events", "lost", "freezes", "frozen (ms)", "ratio"
    );
    let result = (|| {
        for storms in [4usize, 2] {
            let script = format!(
                "for i in $(seq {storms}); do {} {} {} >/dev/null & done; wait",
                storm.display(),
                args.overload_opens,
                file.display()
            );
            let mut walls = [Vec::new(), Vec::new()];
            let mut last = [Sample::default(), Sample::default()];
            for _ in 0..args.overload_runs {
                for (k, mode) in ["drop", "freeze"].into_iter().enumerate() {
                    let s = one(aet, &dir, mode, &script)?;
                    walls[k].push(s.wall_ns);
                    last[k].lost += s.lost;
                    last[k].events = s.events;
                    last[k].freezes += s.freezes;
                    last[k].frozen_ms += s.frozen_ms;
                }
            }
            let drop_wall = median(walls[0].clone());
            for (k, mode) in ["drop", "freeze"].into_iter().enumerate() {
                let w = median(walls[k].clone());
                let runs = args.overload_runs as f64;
                println!(
                    "{:<22} {:>6} {:>11.0} {:>10} {:>8} {:>11.1} {:>12.0} {:>6.2}x",
                    format!("{storms} open storms"),
                    mode,
                    w as f64 / 1e6,
                    last[k].events,
                    last[k].lost,
                    last[k].freezes as f64 / runs,
                    last[k].frozen_ms / runs,
                    w as f64 / drop_wall as f64
                );
            }
        }
        println!(
            "(medians of {} alternating runs of each mode, standalone, {} opens per storm; lost \
             summed over the runs; freezes and frozen ms per run; ratio = wall / drop's wall)",
            args.overload_runs, args.overload_opens
        );
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

#[derive(Default)]
struct Sample {
    wall_ns: u64,
    events: u64,
    lost: u64,
    freezes: u64,
    frozen_ms: f64,
}

fn one(aet: &Path, dir: &Path, mode: &str, script: &str) -> anyhow::Result<Sample> {
    let out = dir.join(mode);
    let _ = std::fs::remove_dir_all(&out);
    let t = Instant::now();
    let o = crate::user_command(aet)
        .args([
            "run",
            "-q",
            "--standalone",
            "--grace",
            "0",
            "--on-overload",
            mode,
            "--out",
        ])
        .arg(&out)
        .args(["--", "sh", "-c", script])
        .output()?;
    let wall_ns = t.elapsed().as_nanos() as u64;
    if !o.status.success() {
        bail!(
            "{mode} storm failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let v = summary(aet, &out)?;
    Ok(Sample {
        wall_ns,
        events: v["events"].as_u64().unwrap_or(0),
        lost: v["events_lost"].as_u64().unwrap_or(u64::MAX),
        freezes: v["overload"]["freezes"].as_u64().unwrap_or(0),
        frozen_ms: v["overload"]["frozen_ms"].as_f64().unwrap_or(0.0),
    })
}
