//! Churn: a few hundred runs served by one daemon of its own, four at a time, plain and
//! sandboxed as an agent uid, a third of them ended by a SIGKILL of their client at a random
//! point of the run (a harness's timeout). Every finished run is complete; every killed one is
//! finished by the daemon, incomplete, saying why; and nothing is left behind: no run cgroup,
//! no control socket of any of these clients, and the daemon's memory after the churn within
//! 10 % of what it was after its first 50 runs.

use std::{
    collections::BTreeSet,
    fs,
    path::Path,
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use aet_tests::*;

/// How many runs, how many at once, and after how many the daemon's memory is first read.
const RUNS: usize = 240;
const AT_ONCE: usize = 4;
const SETTLED: usize = 50;

/// The daemon's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

/// What is left of the clients `pids`: their run cgroups and their control sockets.
fn leftovers(pids: &BTreeSet<u32>) -> (Vec<String>, Vec<String>) {
    let mine = |name: &str, prefix: &str| {
        name.strip_prefix(prefix)
            .and_then(|r| r.split('-').next()?.parse::<u32>().ok())
            .is_some_and(|p| pids.contains(&p))
    };
    let names = |dir: &Path| -> Vec<String> {
        fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let root = aet_kernel::cgroup::cgroup2_root().unwrap().join("aet");
    let cgroups = names(&root)
        .into_iter()
        .filter(|n| mine(n, "run-"))
        .collect();
    let sockets = names(Path::new(aet_kernel::leftovers::RUNTIME_DIR))
        .into_iter()
        .filter(|n| mine(n, "control-"))
        .collect();
    (cgroups, sockets)
}

/// The ledger's metadata once the daemon has finished it (a killed client's run is finished by
/// the daemon after the connection closes).
fn finished_meta(ledger: &Path) -> std::collections::HashMap<String, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(l) = aet_ledger::reader::Ledger::open(ledger)
            && l.metadata().get("aet.finished").map(String::as_str) == Some("true")
        {
            return meta(ledger);
        }
        assert!(
            Instant::now() < deadline,
            "{} was never finished",
            ledger.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn killed_clients_leave_nothing_behind_and_every_run_says_what_it_is() {
    let d = Daemon::start();
    let t = Tree::new();
    t.dirs(&["ws"]);
    let ws = t.s("ws");
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let settled_rss = Mutex::new(None::<u64>);
    let clients = Mutex::new(BTreeSet::new());
    // (run directory, killed) for every run.
    let runs = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..AT_ONCE {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= RUNS {
                        break;
                    }
                    // Plain, agent, killed plain, plain, killed agent, agent: a third killed.
                    let (agent, killed) = match i % 6 {
                        0 | 3 => (false, false),
                        1 | 5 => (true, false),
                        2 => (false, true),
                        _ => (true, true),
                    };
                    let out = t.p(&format!("run-{i}"));
                    let mut cmd = d.aet();
                    cmd.arg("run").arg("-q").arg("--out").arg(&out);
                    // An agent run has a workspace of its own: the identity hands it to the
                    // run's agent uid for the run.
                    let ws = if agent {
                        let own = t.p(&format!("ws-{i}"));
                        fs::create_dir(&own).unwrap();
                        let spec = t.p(&format!("spec-{i}.toml"));
                        fs::write(&spec, format!("workspace = {own:?}\nnetwork = \"none\"\n"))
                            .unwrap();
                        cmd.arg("--sandbox").arg(&spec).arg("--identity");
                        own.display().to_string()
                    } else {
                        ws.clone()
                    };
                    let started = format!("{ws}/started-{i}");
                    let script = if killed {
                        format!("echo x > {started}; exec sleep 60")
                    } else {
                        format!("cat /etc/hostname > /dev/null; echo x > {ws}/done-{i}")
                    };
                    cmd.args(["--", "sh", "-c", &script]);
                    if killed {
                        let mut child = cmd.spawn().unwrap();
                        clients.lock().unwrap().insert(child.id());
                        let deadline = Instant::now() + Duration::from_secs(30);
                        while !Path::new(&started).exists() {
                            assert!(Instant::now() < deadline, "run {i} never started");
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        // A point of the run that differs from run to run.
                        std::thread::sleep(Duration::from_millis((i as u64 * 37) % 250));
                        child.kill().unwrap();
                        child.wait().unwrap();
                    } else {
                        let o = cmd.output().unwrap();
                        assert_eq!(o.status.code(), Some(0), "run {i}: {}", text(&o.stderr));
                    }
                    runs.lock().unwrap().push((out, killed));
                    if done.fetch_add(1, Ordering::Relaxed) + 1 == SETTLED {
                        *settled_rss.lock().unwrap() = Some(rss_kib(d.pid()));
                    }
                }
            });
        }
    });
    let runs = runs.into_inner().unwrap();
    let mut finished = 0;
    let mut ended = 0;
    for (out, killed) in &runs {
        let m = finished_meta(&out.join("ledger.arrow"));
        if *killed {
            assert_eq!(m["aet.complete"], "false", "{}", out.display());
            assert!(
                m["aet.incomplete_reasons"].contains("went away"),
                "{}: {}",
                out.display(),
                m["aet.incomplete_reasons"]
            );
            ended += 1;
        } else {
            assert_eq!(
                m["aet.complete"],
                "true",
                "{}: {}",
                out.display(),
                m["aet.incomplete_reasons"]
            );
            finished += 1;
        }
    }
    // The guards and the daemon clean up as the clients die: give them a moment.
    let clients = clients.into_inner().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let (cgroups, sockets) = loop {
        let (c, s) = leftovers(&clients);
        if (c.is_empty() && s.is_empty()) || Instant::now() > deadline {
            break (c, s);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let settled = settled_rss.into_inner().unwrap().expect("50 runs");
    let last = rss_kib(d.pid());
    println!(
        "churn: {finished} runs finished complete, {ended} killed and marked incomplete; \
         left behind: {} cgroup(s), {} control socket(s); daemon RSS {settled} KiB after {SETTLED} \
         runs, {last} KiB after {RUNS}",
        cgroups.len(),
        sockets.len()
    );
    assert!(cgroups.is_empty(), "run cgroups left behind: {cgroups:?}");
    assert!(
        sockets.is_empty(),
        "control sockets left behind: {sockets:?}"
    );
    assert!(
        last * 10 <= settled * 11,
        "the daemon's memory grew from {settled} KiB after {SETTLED} runs to {last} KiB after {RUNS}"
    );
}
