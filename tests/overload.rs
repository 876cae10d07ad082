//! Lossless under load: when the record cannot keep up, the run's cgroup is frozen until it has
//! (`--on-overload freeze`, the default) instead of losing events (`--on-overload drop`). A slow
//! consumer is made for real with `AET_DEBUG_CONSUMER_SLOW_US` (it sleeps after every 256
//! records), so that a single open storm outpaces it. These runs load their own programs
//! (`--standalone`): the consumer under test is the run's own.

use std::{
    fs,
    path::Path,
    time::{Duration, Instant},
};

use aet_tests::*;

/// The consumer's sleep per 256 records: at most about 128,000 records a second.
const SLOW_US: &str = "2000";

fn overload(ledger: &Path) -> serde_json::Value {
    serde_json::from_str(&meta(ledger)["aet.overload"]).unwrap()
}

fn storm_run(out: &Path, how: &str, extra_env: &[(&str, &str)], cmd: &[&str]) -> Run {
    let mut c = aet();
    c.args([
        "run",
        "--standalone",
        "--ringbuf-mb",
        "4",
        "--on-overload",
        how,
        "--out",
    ])
    .arg(out)
    .arg("--")
    .args(cmd)
    .env("AET_DEBUG_CONSUMER_SLOW_US", SLOW_US);
    for (k, v) in extra_env {
        c.env(k, v);
    }
    let output = c.output().unwrap();
    Run {
        out: out.to_owned(),
        output,
    }
}

#[test]
fn a_storm_that_loses_events_when_dropping_loses_none_when_frozen() {
    let dir = tempdir();
    let storm = helper("openstorm");
    let storm = storm.to_str().unwrap();
    let cmd = [storm, "100000", "/etc/hostname"];
    let drop = storm_run(&dir.path().join("drop"), "drop", &[], &cmd);
    assert_eq!(drop.code(), 0, "{}", drop.stderr());
    let m = meta(&drop.ledger());
    assert_ne!(
        m["aet.events_lost"], "0",
        "the slow consumer must lose events when dropping"
    );
    assert_eq!(m["aet.complete"], "false");
    assert_eq!(overload(&drop.ledger())["used"], "drop");

    let frozen = storm_run(&dir.path().join("freeze"), "freeze", &[], &cmd);
    assert_eq!(frozen.code(), 0, "{}", frozen.stderr());
    assert_complete(&frozen.ledger());
    let ov = overload(&frozen.ledger());
    assert_eq!(ov["used"], "freeze", "{ov}");
    assert!(ov["freezes"].as_u64().unwrap() > 0, "{ov}");
    assert!(ov["frozen_ms"].as_f64().unwrap() > 0.0, "{ov}");
    assert!(
        ov["longest_ms"].as_f64().unwrap() <= ov["frozen_ms"].as_f64().unwrap(),
        "{ov}"
    );
    // Every open of the storm is in the ledger.
    let opens = frozen
        .rows()
        .iter()
        .filter(|r| r.kind == "open" && r.path.as_deref() == Some(&b"/etc/hostname"[..]))
        .count();
    assert_eq!(opens, 100_000);
    assert!(frozen.stderr().contains("frozen"), "{}", frozen.stderr());
    // The summary and the audit report say how long the run was frozen.
    let s = summary(&frozen.ledger());
    assert_eq!(s["overload"]["freezes"], ov["freezes"]);
    let policy = dir.path().join("p.toml");
    fs::write(&policy, "[cheats]\nx = 'nothing-here'\n").unwrap();
    let (a, v) = audit_json(&frozen.out, &policy, &[]);
    assert!(text(&a.stdout).contains("slowed"), "{}", text(&a.stdout));
    assert_eq!(v["run"]["overload"]["freezes"], ov["freezes"]);
}

#[test]
fn a_light_run_is_never_frozen() {
    let dir = tempdir();
    let r = run_in(
        &dir.path().join("r"),
        &["--standalone"],
        &["cat", "/etc/hostname"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let ov = overload(&r.ledger());
    assert_eq!(
        (ov["asked"].as_str(), ov["used"].as_str()),
        (Some("freeze"), Some("freeze"))
    );
    assert_eq!(ov["freezes"], 0, "{ov}");
    assert!(!r.stderr().contains("frozen"), "{}", r.stderr());
}

#[test]
fn a_process_asleep_across_freezes_wakes_up_and_finishes() {
    let dir = tempdir();
    let storm = helper("openstorm");
    let script = format!(
        "sleep 1 & s=$!; {} 100000 /etc/hostname >/dev/null; wait $s; echo slept $?",
        storm.display()
    );
    let r = storm_run(
        &dir.path().join("r"),
        "freeze",
        &[("AET_DEBUG_FREEZE_HOLD_MS", "200")],
        &["sh", "-c", &script],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(r.stdout(), "slept 0\n");
    assert_complete(&r.ledger());
    assert!(overload(&r.ledger())["freezes"].as_u64().unwrap() > 0);
    let rows = r.rows();
    let sleeper = rows
        .iter()
        .find(|x| x.kind == "exec" && x.comm.starts_with("sleep"))
        .expect("the sleep's exec");
    assert!(
        rows.iter()
            .any(|x| x.kind == "exit" && x.pid == sleeper.pid && x.exit_code == Some(0)),
        "the sleep exited normally"
    );
}

#[test]
fn sigkill_of_aet_during_a_freeze_thaws_and_kills_the_run() {
    let dir = tempdir();
    let out = dir.path().join("r");
    let storm = helper("openstorm");
    let run = Attached::spawn(
        aet()
            .args(["run", "--standalone", "--ringbuf-mb", "4", "--out"])
            .arg(&out)
            .arg("--")
            .arg(&storm)
            .args(["100000000", "/etc/hostname"])
            .env("AET_DEBUG_CONSUMER_SLOW_US", SLOW_US)
            // Once frozen, the run stays frozen until aet is killed.
            .env("AET_DEBUG_FREEZE_HOLD_MS", "600000"),
    );
    let cgroup = run
        .head()
        .lines()
        .find_map(|l| l.strip_prefix("aet: monitoring in cgroup "))
        .and_then(|l| l.split(" (id").next())
        .map(std::path::PathBuf::from)
        .expect("the run's cgroup");
    let freeze = cgroup.join("cgroup.freeze");
    let started = Instant::now();
    while fs::read_to_string(&freeze)
        .map(|v| v.trim() != "1")
        .unwrap_or(true)
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the run was never frozen"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pids = fs::read_to_string(cgroup.join("cgroup.procs")).unwrap();
    assert!(!pids.trim().is_empty());
    // SAFETY: a signal to the aet this test started.
    unsafe { libc::kill(run.child.id() as i32, libc::SIGKILL) };
    let (status, _) = run.wait();
    assert_eq!(status.code(), None, "killed by a signal");
    // The guard thaws the run and kills it: no process of it is left, none frozen.
    let killed = Instant::now();
    loop {
        let left: Vec<u32> = pids
            .lines()
            .filter_map(|p| p.trim().parse().ok())
            .filter(|p| Path::new(&format!("/proc/{p}")).exists())
            .collect();
        if left.is_empty() {
            break;
        }
        for p in &left {
            let state = fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            assert!(
                killed.elapsed() < Duration::from_secs(5),
                "process {p} outlived aet by 5 s: {state}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        fs::read_to_string(&freeze)
            .map(|v| v.trim() == "0")
            .unwrap_or(true),
        "the cgroup is left frozen"
    );
    // The ledger reads, up to its last flushed batch, and is not complete.
    let s = summary(&out.join("ledger.arrow"));
    assert_eq!(s["complete"], false);
}

/// A cgroup aet monitors but does not own is thawed, never killed, when the aet that froze it
/// dies.
#[test]
fn a_monitored_cgroup_frozen_by_an_aet_that_dies_is_thawed_and_left_running() {
    let root = aet_kernel::cgroup::cgroup2_root().unwrap();
    let cg = root.join(format!(
        "aet-test-freeze-{}-{}",
        std::process::id(),
        unique()
    ));
    fs::create_dir(&cg).unwrap();
    let mut worker = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs; exec {} 100000000 /etc/hostname",
            cg.display(),
            helper("openstorm").display()
        ))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let dir = tempdir();
    let mon = Attached::spawn(
        aet()
            .args(["monitor", "--standalone", "--ringbuf-mb", "4", "--cgroup"])
            .arg(&cg)
            .arg("--out")
            .arg(dir.path().join("mon"))
            .env("AET_DEBUG_CONSUMER_SLOW_US", SLOW_US)
            .env("AET_DEBUG_FREEZE_HOLD_MS", "600000"),
    );
    let freeze = cg.join("cgroup.freeze");
    let started = Instant::now();
    while fs::read_to_string(&freeze)
        .map(|v| v.trim() != "1")
        .unwrap_or(true)
    {
        assert!(started.elapsed() < Duration::from_secs(60), "never frozen");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: a signal to the aet this test started.
    unsafe { libc::kill(mon.child.id() as i32, libc::SIGKILL) };
    let _ = mon.wait();
    let killed = Instant::now();
    while fs::read_to_string(&freeze).unwrap().trim() != "0" {
        assert!(killed.elapsed() < Duration::from_secs(5), "left frozen");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Thawed and still running: it was never aet's to kill.
    std::thread::sleep(Duration::from_millis(100));
    let still = worker.try_wait().unwrap().is_none();
    let _ = fs::write(cg.join("cgroup.kill"), "1");
    let _ = worker.wait();
    for _ in 0..100 {
        if fs::remove_dir(&cg).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(still, "the monitored process was killed");
}
