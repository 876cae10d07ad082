//! The resident monitor's benchmarks (issue 12): how long `aet run -- true` takes with the daemon,
//! standalone, and as the first run of a host that starts its daemon (issue 35), 16 monitored exec storms at once, what idle runs cost an unrelated workload,
//! and the program time per syscall as runs are added. Each figure is measured side by side
//! with its untraced counterpart in this invocation.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::{Args, elapsed, median, summary};
use crate::daemon::Daemon;

/// Runs the resident monitor's benchmarks that `args.only` selects.
pub fn run(aet: &Path, timeit: &Path, storm: &Path, args: &Args) -> anyhow::Result<()> {
    let wanted = |name: &str| args.only.as_deref().is_none_or(|o| name.contains(o));
    let scratch = std::env::temp_dir().join(format!("aet-bench-resident-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = (|| {
        if wanted("start") {
            start(aet, timeit, args, &scratch)?;
        }
        if wanted("concurrent exec storms") {
            concurrent_storms(aet, timeit, args, &scratch)?;
        }
        if wanted("idle runs") {
            idle_runs(aet, timeit, storm, args, &scratch)?;
        }
        if wanted("program time") {
            program_time(aet, storm, args, &scratch)?;
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// `timeit CMD…`'s figure, in ns; an error if the command fails.
fn timed(timeit: &Path, cmd: &[&std::ffi::OsStr]) -> anyhow::Result<u64> {
    let out = crate::user_command(timeit).args(cmd).output()?;
    if !out.status.success() {
        bail!("{:?} failed: {}", cmd, String::from_utf8_lossy(&out.stderr));
    }
    elapsed(&out.stderr)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// `aet run -- true` against `true`, with the daemon and standalone.
fn start(aet: &Path, timeit: &Path, args: &Args, scratch: &Path) -> anyhow::Result<()> {
    let daemon = Daemon::start(aet, "bench", &[])?;
    let out = scratch.join("start");
    let runs = args.runs.max(11);
    let (mut base, mut served, mut alone) = (Vec::new(), Vec::new(), Vec::new());
    let aet_run = |mode: &[&str]| -> anyhow::Result<u64> {
        let _ = std::fs::remove_dir_all(&out);
        let mut cmd: Vec<&std::ffi::OsStr> = vec![aet.as_os_str()];
        cmd.extend(["run", "-q"].map(std::ffi::OsStr::new));
        cmd.extend(mode.iter().map(std::ffi::OsStr::new));
        cmd.extend([
            std::ffi::OsStr::new("--out"),
            out.as_os_str(),
            std::ffi::OsStr::new("--"),
            std::ffi::OsStr::new("true"),
        ]);
        timed(timeit, &cmd)
    };
    let socket = daemon.socket().to_str().context("socket path")?.to_owned();
    // One warm-up of each, then alternate.
    for i in 0..=runs {
        let b = timed(timeit, &[std::ffi::OsStr::new("true")])?;
        let d = aet_run(&["--daemon", "--socket", &socket])?;
        let s = aet_run(&["--standalone"])?;
        if i > 0 {
            base.push(b);
            served.push(d);
            alone.push(s);
        }
    }
    daemon.stop()?;
    let auto = first_runs(aet, timeit, &out)?;
    let (b, d, s) = (median(base), median(served), median(alone));
    println!("\nstart: `aet run -- true` against `true` (medians of {runs} alternating runs)");
    println!("{:<34} {:>10} {:>12}", "", "wall (ms)", "over true");
    println!("{:<34} {:>10.1} {:>12}", "true", ms(b), "");
    println!(
        "{:<34} {:>10.1} {:>10.1} ms",
        "aet run, served by aet daemon",
        ms(d),
        ms(d.saturating_sub(b))
    );
    println!(
        "{:<34} {:>10.1} {:>10.1} ms",
        "aet run --standalone",
        ms(s),
        ms(s.saturating_sub(b))
    );
    println!(
        "{:<34} {:>10.1} {:>10.1} ms",
        "first aet run, no daemon running",
        ms(auto.first),
        ms(auto.first.saturating_sub(b))
    );
    println!(
        "{:<34} {:>10.1} {:>10.1} ms",
        "the next run, served by that daemon",
        ms(auto.next),
        ms(auto.next.saturating_sub(b))
    );
    println!(
        "{:<34} {:>10.1}    (its log: programs loaded)",
        "that daemon's own start", auto.daemon_ms
    );
    Ok(())
}

/// Medians of [`first_runs`].
struct FirstRuns {
    first: u64,
    next: u64,
    daemon_ms: f64,
}

/// With no daemon at a fresh socket, the first `aet run -- true` (which starts one), the run
/// after it, and the started daemon's own load time from its log; the daemon stopped after each
/// of 3 rounds.
fn first_runs(aet: &Path, timeit: &Path, out: &Path) -> anyhow::Result<FirstRuns> {
    let socket = PathBuf::from(format!("/run/aet/bench-auto-{}.sock", std::process::id()));
    let log = PathBuf::from(format!("{}.log", socket.display()));
    let (mut first, mut next, mut loads) = (Vec::new(), Vec::new(), Vec::new());
    let run = || -> anyhow::Result<u64> {
        let _ = std::fs::remove_dir_all(out);
        let o = crate::user_command(timeit)
            .arg(aet)
            .args(["run", "-q", "--socket"])
            .arg(&socket)
            .arg("--out")
            .arg(out)
            .args(["--", "true"])
            .env_remove("AET_DAEMON")
            .output()?;
        if !o.status.success() {
            bail!("aet run (auto): {}", String::from_utf8_lossy(&o.stderr));
        }
        elapsed(&o.stderr)
    };
    for _ in 0..3 {
        let _ = std::fs::remove_file(&log);
        let result = (|| -> anyhow::Result<()> {
            first.push(run()?);
            next.push(run()?);
            let text = std::fs::read_to_string(&log)?;
            let load = text
                .split("programs loaded in ")
                .nth(1)
                .and_then(|t| t.split(' ').next()?.parse::<u64>().ok())
                .with_context(|| format!("{}: no load time in {text:?}", log.display()))?;
            loads.push(load);
            Ok(())
        })();
        let _ = crate::user_command(aet)
            .args(["daemon", "stop", "--socket"])
            .arg(&socket)
            .output();
        result?;
    }
    for suffix in ["log", "lock"] {
        let _ = std::fs::remove_file(format!("{}.{suffix}", socket.display()));
    }
    Ok(FirstRuns {
        first: median(first),
        next: median(next),
        daemon_ms: median(loads) as f64,
    })
}

/// What one ledger of a concurrent storm holds.
struct StormLedger {
    complete: bool,
    lost: u64,
    events: u64,
    /// Execs of this storm's marker.
    own: usize,
    /// Execs of another storm's marker.
    foreign: usize,
}

fn storm_ledger(aet: &Path, dir: &Path, marker: &str) -> anyhow::Result<StormLedger> {
    let ledger = dir.join("ledger.arrow");
    let (_, rows) = aet_ledger::rows::read_rows(&ledger)
        .with_context(|| format!("reading {}", ledger.display()))?;
    let mut own = 0;
    let mut foreign = 0;
    for r in rows.iter().filter(|r| r.kind == "exec" && r.ret == Some(0)) {
        match r.argv.as_deref() {
            Some([_, m]) if m == marker => own += 1,
            Some([_, m]) if m.starts_with("storm-") => foreign += 1,
            _ => {}
        }
    }
    let v = summary(aet, dir)?;
    Ok(StormLedger {
        complete: v["complete"].as_bool().unwrap_or(false),
        lost: v["events_lost"].as_u64().unwrap_or(u64::MAX),
        events: v["events"].as_u64().unwrap_or(0),
        own,
        foreign,
    })
}

/// Starts every command at once and waits for them all; an error if one fails.
fn all_succeed(what: &str, cmds: impl Iterator<Item = Command>) -> anyhow::Result<()> {
    let kids: Vec<Child> = cmds
        .map(|mut c| c.stderr(Stdio::piped()).spawn())
        .collect::<Result<_, _>>()?;
    for k in kids {
        let o = k.wait_with_output()?;
        if !o.status.success() {
            bail!("{what} failed: {}", String::from_utf8_lossy(&o.stderr));
        }
    }
    Ok(())
}

/// 16 exec storms at once, each in its own run served by one daemon, against the same 16
/// untraced: every ledger complete, nothing lost, and each holds exactly its own storm's execs.
fn concurrent_storms(aet: &Path, timeit: &Path, args: &Args, scratch: &Path) -> anyhow::Result<()> {
    const STORMS: usize = 16;
    let execs = (args.execs / 10).max(10);
    let daemon = Daemon::start(aet, "bench", &[])?;
    let script = |k: usize| {
        format!("i=0; while [ $i -lt {execs} ]; do /bin/true storm-{k}; i=$((i+1)); done")
    };
    let rounds = args.runs.clamp(1, 3);
    let (mut base, mut with) = (Vec::new(), Vec::new());
    let mut checks = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        all_succeed(
            "untraced storm",
            (0..STORMS).map(|k| {
                let mut c = crate::user_command(timeit);
                c.args(["sh", "-c", &script(k)]);
                c
            }),
        )?;
        base.push(t.elapsed().as_nanos() as u64);
        let dirs: Vec<PathBuf> = (0..STORMS)
            .map(|k| scratch.join(format!("storm-{k}")))
            .collect();
        for d in &dirs {
            let _ = std::fs::remove_dir_all(d);
        }
        let t = Instant::now();
        all_succeed(
            "monitored storm",
            (0..STORMS).map(|k| {
                let mut c = crate::user_command(aet);
                c.args(["run", "-q", "--daemon", "--socket"])
                    .arg(daemon.socket())
                    .arg("--out")
                    .arg(&dirs[k])
                    .args(["--", "sh", "-c", &script(k)]);
                c
            }),
        )?;
        with.push(t.elapsed().as_nanos() as u64);
        checks = dirs
            .iter()
            .enumerate()
            .map(|(k, d)| storm_ledger(aet, d, &format!("storm-{k}")))
            .collect::<Result<_, _>>()?;
    }
    daemon.stop()?;
    let (b, t) = (median(base), median(with));
    let exact = checks
        .iter()
        .filter(|c| c.own == execs as usize && c.foreign == 0)
        .count();
    let complete = checks.iter().filter(|c| c.complete).count();
    let lost: u64 = checks.iter().map(|c| c.lost).fold(0, u64::saturating_add);
    let events: u64 = checks.iter().map(|c| c.events).sum();
    println!(
        "\n{STORMS} concurrent exec storms of {execs} execs, one aet daemon (medians of {rounds}; \
         wall time of all {STORMS}, including aet's start and finish)"
    );
    println!(
        "untraced {:.1} ms, monitored {:.1} ms ({:.2}x); {events} events in the last round, \
         {lost} lost; {complete}/{STORMS} ledgers complete; {exact}/{STORMS} hold exactly their \
         own storm's {execs} execs and no other's",
        ms(b),
        ms(t),
        t as f64 / b as f64
    );
    Ok(())
}

/// Starts `count` idle runs (`sleep 600`), served by `daemon` or standalone, and waits until
/// each is recording.
fn start_idle(
    aet: &Path,
    daemon: Option<&Daemon>,
    count: usize,
    scratch: &Path,
    tag: &str,
) -> anyhow::Result<Vec<Child>> {
    let mut kids = Vec::new();
    let mut dirs = Vec::new();
    for k in 0..count {
        let dir = scratch.join(format!("idle-{tag}-{k}"));
        let _ = std::fs::remove_dir_all(&dir);
        let mut c = crate::user_command(aet);
        c.args(["run", "-q"]);
        match daemon {
            Some(d) => c.args(["--daemon", "--socket"]).arg(d.socket()),
            None => c.arg("--standalone"),
        };
        c.arg("--out")
            .arg(&dir)
            .args(["--", "sleep", "600"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        kids.push(c.spawn()?);
        dirs.push(dir);
    }
    // A run's ledger exists once it records; its command then starts.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dirs.iter().all(|d| d.join("ledger.arrow").exists()) {
        if Instant::now() > deadline {
            stop_idle(kids);
            bail!("{count} idle runs did not all start within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    Ok(kids)
}

/// Ends idle runs (SIGTERM to each `aet run`, which finishes its run) and waits for them.
fn stop_idle(kids: Vec<Child>) {
    for k in &kids {
        let _ = Command::new("kill").arg(k.id().to_string()).status();
    }
    for mut k in kids {
        let _ = k.wait();
    }
}

/// An unrelated, unmonitored open storm: with no aet, with one daemon serving 0, 1 and 8 idle
/// runs, and while 8 standalone runs (each with its own programs) sit idle.
fn idle_runs(
    aet: &Path,
    timeit: &Path,
    storm: &Path,
    args: &Args,
    scratch: &Path,
) -> anyhow::Result<()> {
    const IDLE: usize = 8;
    let target = crate::root().join("Cargo.toml");
    let opens = args.opens.to_string();
    let cmd: Vec<&std::ffi::OsStr> = vec![
        storm.as_os_str(),
        std::ffi::OsStr::new(&opens),
        target.as_os_str(),
    ];
    let served_counts = [0usize, 1, IDLE];
    let mut none = Vec::new();
    let mut served = vec![Vec::new(); served_counts.len()];
    let mut alone = Vec::new();
    timed(timeit, &cmd)?;
    for _ in 0..args.runs {
        none.push(timed(timeit, &cmd)?);
        let daemon = Daemon::start(aet, "bench", &[])?;
        for (i, &count) in served_counts.iter().enumerate() {
            let kids = start_idle(aet, Some(&daemon), count, scratch, "d")?;
            let t = timed(timeit, &cmd);
            stop_idle(kids);
            served[i].push(t?);
        }
        daemon.stop()?;
        let kids = start_idle(aet, None, IDLE, scratch, "s")?;
        let t = timed(timeit, &cmd);
        stop_idle(kids);
        alone.push(t?);
    }
    let n = median(none);
    println!(
        "\nan unrelated, unmonitored open storm ({} opens) while monitored runs sit idle \
         (medians of {} alternating runs)",
        args.opens, args.runs
    );
    println!("{:<42} {:>10} {:>7}", "", "wall (ms)", "ratio");
    println!("{:<42} {:>10.1} {:>7}", "no aet", ms(n), "");
    let line = |label: String, v: u64| {
        println!("{label:<42} {:>10.1} {:>6.2}x", ms(v), v as f64 / n as f64);
    };
    for (i, &count) in served_counts.iter().enumerate() {
        line(
            format!("aet daemon serving {count} idle run(s)"),
            median(std::mem::take(&mut served[i])),
        );
    }
    line(format!("{IDLE} idle standalone runs"), median(alone));
    Ok(())
}

/// `sys_exit`'s (run time ns, run count) from `bpf_stats`, for the program with the highest id
/// (the one loaded last: the daemon's).
fn sys_exit_stats() -> anyhow::Result<(u64, u64)> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output()
        .context("bpftool (cargo xtask setup installs it)")?;
    let progs: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let p = progs
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["name"] == "sys_exit")
        .max_by_key(|p| p["id"].as_u64())
        .context("no sys_exit program loaded")?;
    Ok((
        p["run_time_ns"].as_u64().unwrap_or(0),
        p["run_cnt"].as_u64().unwrap_or(0),
    ))
}

/// `sys_exit`'s time per invocation during a monitored open storm, with 0, 1, 7 and 15 other
/// runs registered: one lookup whatever the number of runs.
fn program_time(aet: &Path, storm: &Path, args: &Args, scratch: &Path) -> anyhow::Result<()> {
    let stats_path = "/proc/sys/kernel/bpf_stats_enabled";
    let was = std::fs::read_to_string(stats_path)?;
    std::fs::write(stats_path, "1").context("enabling bpf_stats")?;
    let result = (|| -> anyhow::Result<Vec<(usize, u64, u64)>> {
        let daemon = Daemon::start(aet, "bench", &[])?;
        let target = crate::root().join("Cargo.toml");
        let out = scratch.join("stats-run");
        let mut rows = Vec::new();
        for others in [0usize, 1, 7, 15] {
            let kids = start_idle(aet, Some(&daemon), others, scratch, "p")?;
            let mut per_call = Vec::new();
            let mut per_event = Vec::new();
            for _ in 0..args.runs.clamp(1, 5) {
                let _ = std::fs::remove_dir_all(&out);
                let before = sys_exit_stats()?;
                let st = crate::user_command(aet)
                    .args(["run", "-q", "--daemon", "--socket"])
                    .arg(daemon.socket())
                    .arg("--out")
                    .arg(&out)
                    .arg("--")
                    .arg(storm)
                    .arg((args.opens / 4).to_string())
                    .arg(&target)
                    .stdout(Stdio::null())
                    .status()?;
                let after = sys_exit_stats()?;
                if !st.success() {
                    bail!("monitored open storm failed");
                }
                let v = summary(aet, &out)?;
                let events = v["events"].as_u64().unwrap_or(0).max(1);
                let (dt, dn) = (after.0 - before.0, (after.1 - before.1).max(1));
                per_call.push(dt / dn);
                per_event.push(dt / events);
            }
            stop_idle(kids);
            rows.push((others, median(per_call), median(per_event)));
        }
        daemon.stop()?;
        Ok(rows)
    })();
    std::fs::write(stats_path, was.trim())?;
    let rows = result?;
    println!(
        "\nsys_exit program time during a monitored open storm of {} opens, with other runs \
         registered (bpf_stats; medians)",
        args.opens / 4
    );
    println!(
        "{:<12} {:>20} {:>26}",
        "other runs", "ns per invocation", "ns per recorded event"
    );
    for (others, call, event) in rows {
        println!("{others:<12} {call:>20} {event:>26}");
    }
    Ok(())
}
