//! End-to-end tests of `aet monitor` attached to what already runs (a process tree, a cgroup),
//! `aet doctor`, a run's progress as it goes, and work handed to a service manager, as root with
//! real eBPF.

use std::{fs, process::Command, time::Duration};

use aet_tests::*;

#[test]
fn monitor_follows_a_pid_and_its_descendants_until_they_are_gone() {
    let d = tempdir();
    let m1 = d.path().join("marker-1");
    let m2 = d.path().join("marker-2");
    fs::write(&m1, "x").unwrap();
    fs::write(&m2, "x").unwrap();
    // The target waits for the monitor to be attached before it does anything.
    let go = d.path().join("go");
    let mut target = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while [ ! -e {} ]; do sleep 0.01; done; cat {} > /dev/null; sh -c 'cat {} > /dev/null'",
            go.display(),
            m1.display(),
            m2.display()
        ))
        .spawn()
        .unwrap();
    let out = d.path().join("mon");
    let mon = Attached::spawn(
        aet()
            .args(["monitor", "--pid", &target.id().to_string(), "--out"])
            .arg(&out),
    );
    fs::write(&go, "").unwrap();
    target.wait().unwrap();
    let (status, stderr) = mon.wait();
    assert!(status.success(), "{stderr}");
    let ledger = out.join("ledger.arrow");
    assert_complete(&ledger);
    let rows = rows(&ledger);
    assert_eq!(ok_opens(&rows, &m1).len(), 1);
    assert_eq!(ok_opens(&rows, &m2).len(), 1, "grandchild recorded");
    assert_eq!(meta(&ledger)["aet.scope"], "pid");
    // A process tree is not a cgroup aet can freeze: it says so, and the ledger too.
    assert!(stderr.contains("not a cgroup aet can freeze"), "{stderr}");
    let ov: serde_json::Value = serde_json::from_str(&meta(&ledger)["aet.overload"]).unwrap();
    assert_eq!(
        (ov["asked"].as_str(), ov["used"].as_str()),
        (Some("freeze"), Some("drop"))
    );
    assert!(
        ov["note"].as_str().unwrap().contains("not a cgroup"),
        "{ov}"
    );
}

#[test]
fn monitor_on_a_cgroup_stops_cleanly_on_sigint() {
    let d = tempdir();
    let marker = d.path().join("marker-cg");
    fs::write(&marker, "x").unwrap();
    let root = aet_kernel::cgroup::cgroup2_root().unwrap();
    let cg = root.join(format!("aet-test-{}", std::process::id()));
    fs::create_dir(&cg).unwrap();
    let mut worker = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs; while :; do cat {} > /dev/null; sleep 0.05; done",
            cg.display(),
            marker.display()
        ))
        .spawn()
        .unwrap();
    let out = d.path().join("mon");
    let mon = Attached::spawn(
        aet()
            .args(["monitor", "--cgroup"])
            .arg(&cg)
            .arg("--out")
            .arg(&out),
    );
    // The worker opens the marker every 50 ms.
    std::thread::sleep(Duration::from_millis(1000));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(mon.child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let (status, stderr) = mon.wait();
    worker.kill().unwrap();
    worker.wait().unwrap();
    let _ = fs::write(cg.join("cgroup.kill"), "1");
    std::thread::sleep(Duration::from_millis(100));
    let _ = fs::remove_dir(&cg);
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("stopping: SIGINT"), "{stderr}");
    let ledger = out.join("ledger.arrow");
    assert_complete(&ledger);
    assert_eq!(meta(&ledger)["aet.finished"], "true");
    assert!(ok_opens(&rows(&ledger), &marker).len() >= 5);
}

/// A target that ends while the monitor attaches (the test hook runs between finding the
/// target and loading the programs): the monitor ends at once, never waiting on what is gone,
/// and its record says the target ended. A cgroup removed, and a process that exited.
#[test]
fn monitor_whose_target_ends_during_the_attach_ends_at_once_incomplete() {
    let d = tempdir();
    let root = aet_kernel::cgroup::cgroup2_root().unwrap();
    let cg = root.join(format!("aet-test-ends-{}", std::process::id()));
    fs::create_dir(&cg).unwrap();
    let mut worker = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs; exec sleep 1000",
            cg.display()
        ))
        .spawn()
        .unwrap();
    while !fs::read_to_string(cg.join("cgroup.events"))
        .unwrap()
        .contains("populated 1")
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let hook = format!(
        "kill -9 {pid}; until grep -qx 'populated 0' {cg}/cgroup.events; do sleep 0.01; done; \
         rmdir {cg}",
        pid = worker.id(),
        cg = cg.display()
    );
    let out = d.path().join("cg");
    let m = output_within(
        aet()
            .args(["monitor", "--cgroup"])
            .arg(&cg)
            .arg("--out")
            .arg(&out)
            .env("AET_DEBUG_AT_ATTACH", &hook),
        Duration::from_secs(60),
    );
    worker.wait().unwrap();
    let _ = fs::remove_dir(&cg);
    let stderr = text(&m.stderr);
    assert_eq!(m.status.code(), Some(1), "{stderr}");
    let reasons = &meta(&out.join("ledger.arrow"))["aet.incomplete_reasons"];
    assert!(reasons.contains("target_ended"), "{reasons}");
    assert!(reasons.contains(&*cg.to_string_lossy()), "{reasons}");

    // A process tree whose process exits during the attach.
    let mut target = Command::new("sleep").arg("1000").spawn().unwrap();
    let out = d.path().join("pid");
    let m = output_within(
        aet()
            .args(["monitor", "--pid", &target.id().to_string(), "--out"])
            .arg(&out)
            .env("AET_DEBUG_AT_ATTACH", format!("kill -9 {}", target.id())),
        Duration::from_secs(60),
    );
    target.wait().unwrap();
    let stderr = text(&m.stderr);
    assert_eq!(m.status.code(), Some(1), "{stderr}");
    let ledger = out.join("ledger.arrow");
    assert_eq!(meta(&ledger)["aet.finished"], "true");
    assert!(meta(&ledger)["aet.incomplete_reasons"].contains("target_ended"));
}

#[test]
fn doctor_says_aet_can_run_here() {
    let out = aet().arg("doctor").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("aet run can work on this machine"), "{text}");
    assert!(!text.contains("missing"), "{text}");
}

/// `--progress json` reports the run as it goes (events and reads growing, the processes alive,
/// nothing lost), `--progress line` rewrites one line, and `-q` silences the automatic status.
#[test]
fn the_run_reports_its_progress_while_it_goes() {
    let d = tempdir();
    let target = d.path().join("target.txt");
    fs::write(&target, "x").unwrap();
    let script = format!(
        "for i in 1 2 3 4 5 6 7 8; do cat {} >/dev/null; sleep 0.2; done",
        target.display()
    );
    let r = run_in(
        &d.path().join("json"),
        &["--progress", "json"],
        &["sh", "-c", &script],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let statuses: Vec<serde_json::Value> = r
        .stderr()
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert!(statuses.len() >= 4, "about four a second: {}", r.stderr());
    let field =
        |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
    for w in statuses.windows(2) {
        assert!(field(&w[1], "events") >= field(&w[0], "events"));
        assert!(w[1]["elapsed_s"].as_f64() >= w[0]["elapsed_s"].as_f64());
    }
    let last = statuses.last().unwrap();
    assert!(
        field(last, "reads") >= 3,
        "the cats' reads are counted: {last}"
    );
    assert!(field(last, "execs") >= 3, "{last}");
    assert_eq!(field(last, "lost"), 0);
    assert!(statuses.iter().any(|s| field(s, "processes") >= 1));
    assert!(field(last, "events") <= r.rows().len() as u64);

    let line = run_in(
        &d.path().join("line"),
        &["--progress", "line"],
        &["sh", "-c", "sleep 0.6"],
    );
    assert_eq!(line.code(), 0);
    let err = line.stderr();
    assert!(err.contains("\r\x1b[2Kaet: "), "{err:?}");
    assert!(err.contains(" events · 0 lost · "), "{err:?}");

    // Not a terminal, or -q: no status at all.
    for extra in [&["-q"][..], &[][..]] {
        let quiet = run_in(
            &d.path().join(format!("q{}", extra.len())),
            extra,
            &["sh", "-c", "sleep 0.6"],
        );
        assert_eq!(quiet.code(), 0);
        assert!(
            !quiet.stderr().contains('{') && !quiet.stderr().contains('\r'),
            "{}",
            quiet.stderr()
        );
    }
}

/// Work handed to a service manager or a scheduler runs outside the run: the record says so, and
/// names the tool (a stand-in `systemd-run` here: what counts is what the run asked for).
#[test]
fn work_handed_to_a_service_manager_makes_the_record_incomplete() {
    let d = tempdir();
    let bin = d.path().join("bin");
    fs::create_dir_all(&bin).unwrap();
    write_script(&bin.join("systemd-run"), "#!/bin/sh\nexit 0\n");
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let handed = run_in(
        &d.path().join("handed"),
        &[],
        &[
            "env",
            &format!("PATH={path}"),
            "systemd-run",
            "--unit",
            "x",
            "true",
        ],
    );
    assert_eq!(handed.code(), 0, "{}", handed.stderr());
    let m = handed.meta();
    assert_eq!(m["aet.complete"], "false");
    let reasons: serde_json::Value = serde_json::from_str(&m["aet.incomplete_reasons"]).unwrap();
    let r = reasons
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["code"] == "handed_outside")
        .unwrap_or_else(|| panic!("{reasons}"));
    assert_eq!(r["tool"], "systemd-run");
    assert!(handed.stderr().contains("INCOMPLETE RECORD"));

    // With --scope the command stays in the run's process tree, and is recorded.
    let scoped = run_in(
        &d.path().join("scoped"),
        &[],
        &[
            "env",
            &format!("PATH={path}"),
            "systemd-run",
            "--scope",
            "true",
        ],
    );
    assert_eq!(scoped.code(), 0, "{}", scoped.stderr());
    assert_complete(&scoped.ledger());
}
