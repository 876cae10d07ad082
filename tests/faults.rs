//! Faults and bad input: a ledger that can no longer be written stops the run at once; lost
//! events make a run incomplete, loudly; a killed monitor leaves a readable ledger and no run
//! going on; a monitor that cannot attach runs nothing; every early error finishes the ledger;
//! bad ledgers get clear errors; `--out` means the same with and without a daemon; no command
//! overwrites its own input.

use std::{
    fs,
    os::unix::process::CommandExt as _,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use aet_tests::*;

/// A tmpfs of `size` at a fresh directory, unmounted when dropped.
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn new(size: &str) -> Self {
        let d = tempdir();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(d.path())
            .status()
            .unwrap();
        assert!(ok.success(), "mount tmpfs");
        Self(d)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn a_ledger_that_cannot_be_written_stops_the_run_at_once() {
    let disk = SmallDisk::new("512k");
    let dir = tempdir();
    let done = dir.path().join("done");
    let out = disk.0.path().join("run");
    let r = run_in(
        &out,
        &[],
        &[
            "sh",
            "-c",
            &format!(
                "{} 400000 /etc/hostname; touch {}",
                helper("openstorm").display(),
                done.display()
            ),
        ],
    );
    assert_eq!(r.code(), 125, "{}", r.stderr());
    assert!(!done.exists(), "the command ran on unrecorded to its end");
    let err = r.stderr();
    assert!(err.contains("can no longer be recorded"), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    // What reached the file reads as an unfinished ledger: never a complete record.
    let l = aet_ledger::reader::Ledger::open(&r.ledger()).unwrap();
    assert_eq!(l.form(), aet_ledger::reader::Form::Unfinished);
}

#[test]
fn a_relative_out_is_the_clients_directory_with_or_without_a_daemon() {
    let dir = tempdir();
    let o = aet()
        .current_dir(dir.path())
        .args(["run", "-q", "--out", "rel/run", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let ledger = dir.path().join("rel/run/ledger.arrow");
    assert!(ledger.is_file(), "{}", text(&o.stderr));
    assert_complete(&ledger);
}

#[test]
fn no_command_overwrites_its_own_input() {
    let dir = tempdir();
    let r = run_ok(dir.path(), &["cat", "/etc/hostname"]);
    let ledger = r.ledger();
    let before = fs::read(&ledger).unwrap();
    let policy = dir.path().join("p.toml");
    fs::write(&policy, "[cheats]\nx = 'nothing-here'\n").unwrap();
    let audit = |extra: &[&Path], flags: &[&str]| {
        let mut c = aet();
        c.arg("audit").arg(&r.out).arg("--policy").arg(&policy);
        for (f, p) in flags.iter().zip(extra) {
            c.arg(f).arg(p);
        }
        c.output().unwrap()
    };
    for (flag, target) in [
        ("--json", ledger.clone()),
        ("--html", ledger.clone()),
        ("--json", policy.clone()),
        ("--json", r.out.join(".").join("ledger.arrow")),
    ] {
        let o = audit(&[&target], &[flag]);
        assert_eq!(
            o.status.code(),
            Some(4),
            "{flag} {}: {}",
            target.display(),
            text(&o.stderr)
        );
        assert!(
            text(&o.stderr).contains("would overwrite"),
            "{}",
            text(&o.stderr)
        );
    }
    assert_eq!(fs::read(&ledger).unwrap(), before, "the ledger was changed");
    assert_eq!(
        fs::read_to_string(&policy).unwrap(),
        "[cheats]\nx = 'nothing-here'\n"
    );
    // The query's output may not be a ledger it reads either.
    let q = aet()
        .args(["query", "--format", "arrow", "-o"])
        .arg(&ledger)
        .arg("select * from events")
        .arg(&r.out)
        .output()
        .unwrap();
    assert_eq!(q.status.code(), Some(4), "{}", text(&q.stderr));
    assert_eq!(
        fs::read(&ledger).unwrap(),
        before,
        "the ledger was changed by aet query"
    );
    // A report beside the ledger is what it is for.
    let o = audit(&[&r.out.join("audit.json")], &["--json"]);
    assert!(
        o.status.code().is_some_and(|c| c < 4),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn lost_events_make_the_run_incomplete_loudly() {
    let d = tempdir();
    let target = d.path().join("storm-target");
    fs::write(&target, "x").unwrap();
    let out = d.path().join("run");
    let output = lossy_run(&out, &target, 100_000).output;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(0),
        "exit status is the command's: {stderr}"
    );
    assert!(stderr.contains("INCOMPLETE RECORD"), "{stderr}");
    let ledger = out.join("ledger.arrow");
    let m = meta(&ledger);
    let lost: u64 = m["aet.events_lost"].parse().unwrap();
    assert!(lost > 0);
    assert_eq!(m["aet.complete"], "false");
    let by_reason: serde_json::Value =
        serde_json::from_str(&m["aet.events_lost_by_reason"]).unwrap();
    // The run's share of the ring (all of it, when the run is alone) filled up: its records were
    // dropped, counted as quota_full (or ringbuf_full had the ring itself filled first).
    assert_eq!(
        by_reason["ringbuf_full"].as_u64().unwrap() + by_reason["quota_full"].as_u64().unwrap(),
        lost
    );
    // Recorded + lost = what the workload did (plus the runtime's own opens).
    let recorded = ok_opens(&rows(&ledger), &target).len() as u64;
    assert!(
        recorded < 100_000 && recorded + lost >= 100_000,
        "{recorded} + {lost}"
    );
    let check = aet()
        .args(["ledger", "summary", "--check"])
        .arg(&ledger)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&check.stdout).contains("INCOMPLETE"));
}

#[test]
fn sigkill_of_the_monitor_leaves_a_readable_ledger_and_kills_the_run() {
    let d = tempdir();
    let out = d.path().join("run");
    let marker = d.path().join("marker-killed");
    fs::write(&marker, "x").unwrap();
    let run = Attached::spawn(
        aet()
            .args(["run", "--out"])
            .arg(&out)
            .args(["--", "sh", "-c"])
            .arg(format!(
                "while :; do cat {} > /dev/null; done",
                marker.display()
            )),
    );
    // Long enough for several batches to be flushed.
    std::thread::sleep(Duration::from_millis(1500));
    let ledger = out.join("ledger.arrow");
    let scope = meta(&ledger)["aet.scope_target"].clone();
    let mut child = run.child;
    child.kill().unwrap();
    child.wait().unwrap();

    // The run's processes do not go on unmonitored: the guard kills them.
    let cg = scope
        .strip_prefix("cgroup ")
        .and_then(|s| s.split(" (id").next())
        .unwrap()
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&cg).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !Path::new(&cg).exists(),
        "the run's cgroup {cg} was not cleaned up"
    );

    let mut s = summary(&ledger);
    // The daemon finishes the ledger after it removed the run's scope (its footer's hash chain
    // reads the whole file back): give it the time.
    let deadline = Instant::now() + Duration::from_secs(10);
    while daemon_mode() && s["form"] != "finished" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        s = summary(&ledger);
    }
    assert_eq!(s["complete"], false);
    let events = s["events"].as_u64().unwrap();
    assert!(events > 100, "batches were flushed while running: {events}");
    if daemon_mode() {
        // The daemon writes the ledger: it finishes it when the client goes away, marked
        // incomplete with the reason.
        assert_eq!(s["form"], "finished");
        assert!(
            s["incomplete_reasons"]
                .to_string()
                .contains("client of this run went away"),
            "{}",
            s["incomplete_reasons"]
        );
        return;
    }
    // The unfinished ledger reads up to its last flushed batch, and says it is incomplete.
    assert_eq!(s["form"], "unfinished");

    let rec = aet()
        .args(["ledger", "recover"])
        .arg(&ledger)
        .output()
        .unwrap();
    assert!(
        rec.status.success(),
        "{}",
        String::from_utf8_lossy(&rec.stderr)
    );
    let recovered = out.join("ledger.recovered.arrow");
    let (l, rows) = aet_ledger::rows::read_rows(&recovered).unwrap();
    assert_eq!(l.form(), aet_ledger::reader::Form::Finished);
    assert_eq!(rows.len() as u64, events);
    let m = l.metadata();
    assert_eq!(m["aet.recovered"], "true");
    assert_eq!(m["aet.complete"], "false");
    assert!(!ok_opens(&rows, &marker).is_empty());
    // Recovering twice never overwrites.
    let again = aet()
        .args(["ledger", "recover"])
        .arg(&ledger)
        .output()
        .unwrap();
    assert!(!again.status.success());
}

#[test]
fn aet_refuses_to_run_the_command_when_the_monitor_cannot_attach() {
    let d = tempdir();
    let marker = d.path().join("must-not-exist");
    let out = d.path().join("run");
    // Root without CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN: it can create the cgroup, but the
    // kernel refuses the programs (loaded for this run: standalone).
    let mut cmd = aet();
    cmd.args(["run", "--standalone", "--out"])
        .arg(&out)
        .args(["--", "touch"])
        .arg(&marker);
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            for cap in [21, 38, 39] {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let output = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("eBPF") || stderr.contains("loading"),
        "{stderr}"
    );
    assert!(
        !marker.exists(),
        "the command must not run without a monitor"
    );
    assert!(!out.join("ledger.arrow").exists());
}

#[test]
fn bad_ledgers_get_clear_errors() {
    let d = tempdir();
    let not_arrow = d.path().join("not-a-ledger.arrow");
    fs::write(&not_arrow, "hello\n").unwrap();
    let out = aet()
        .args(["ledger", "summary"])
        .arg(&not_arrow)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not-a-ledger.arrow") && err.contains("not an aet ledger"),
        "{err}"
    );
    let missing = d.path().join("missing.arrow");
    let out = aet()
        .args(["ledger", "summary"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.arrow"));
}

#[test]
fn an_existing_ledger_is_never_overwritten() {
    let d = tempdir();
    let r = run_ok(d.path(), &["true"]);
    let before = fs::read(r.ledger()).unwrap();
    let again = run_in(&r.out, &[], &["true"]);
    assert_eq!(again.code(), 125);
    assert!(
        again.stderr().contains("already exists"),
        "{}",
        again.stderr()
    );
    assert_eq!(fs::read(r.ledger()).unwrap(), before);
}

/// A harness's timeout can fall while the monitor still attaches (a standalone start takes
/// seconds): the SIGTERM is held, reaches the command once it runs, and the ledger is finished
/// with the command's own status, never left unwritten. Sent at several points of the start.
#[test]
fn a_sigterm_during_the_start_still_finishes_the_ledger() {
    let d = tempdir();
    for (i, after) in [100u64, 400, 1200].into_iter().enumerate() {
        let out = d.path().join(format!("run-{i}"));
        let mut child = aet()
            .args(["run", "--out"])
            .arg(&out)
            .args(["--", "sleep", "60"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(after));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = wait_child_within(&mut child, Duration::from_secs(120))
            .unwrap_or_else(|| panic!("SIGTERM after {after} ms: aet did not end"));
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(143), "SIGTERM after {after} ms: {err}");
        let m = meta(&out.join("ledger.arrow"));
        assert_eq!(m["aet.finished"], "true", "SIGTERM after {after} ms: {err}");
        assert_eq!(m["aet.complete"], "true", "SIGTERM after {after} ms: {err}");
    }
}

/// When aet itself fails after the monitor attached (fault injection at each point where it can),
/// the run is stopped, the ledger is still finished and readable, says why it is incomplete, and
/// the audit calls it inconclusive; nothing of the run is left running.
#[test]
fn every_early_error_finishes_the_ledger() {
    let d = tempdir();
    let marker = d.path().join("marker");
    fs::write(&marker, "x").unwrap();
    let policy = d.path().join("policy.toml");
    fs::write(&policy, "[cheats]\nnothing = 'no-such-file-anywhere'\n").unwrap();
    let script = format!(
        "cat {} > /dev/null; sleep 0.3; echo $$ > {}/pid",
        marker.display(),
        d.path().display()
    );
    for point in ["signals", "cgroup", "wait", "teardown"] {
        let out = d.path().join(format!("run-{point}"));
        let r = aet()
            .args(["run", "--out"])
            .arg(&out)
            .args(["--", "sh", "-c", &script])
            .env("AET_DEBUG_FAIL_AT", point)
            .output()
            .unwrap();
        let stderr = text(&r.stderr);
        assert_eq!(r.status.code(), Some(125), "{point}: {stderr}");
        assert!(stderr.contains("INCOMPLETE RECORD"), "{point}: {stderr}");
        let ledger = out.join("ledger.arrow");
        let m = meta(&ledger);
        assert_eq!(m["aet.finished"], "true", "{point}: the footer is written");
        assert_eq!(m["aet.complete"], "false", "{point}");
        let reasons: serde_json::Value =
            serde_json::from_str(&m["aet.incomplete_reasons"]).unwrap();
        let failed = reasons
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["code"] == "aet_failed")
            .unwrap_or_else(|| panic!("{point}: {reasons}"));
        assert!(
            failed["text"]
                .as_str()
                .unwrap()
                .contains(&format!("fault injected at {point}")),
            "{point}: {failed}"
        );
        let a = aet()
            .arg("audit")
            .arg(&out)
            .arg("--policy")
            .arg(&policy)
            .output()
            .unwrap();
        assert_eq!(a.status.code(), Some(3), "{point}: {}", text(&a.stdout));
        // The command ran to its end only where the failure came after it.
        if let Ok(pid) = fs::read_to_string(d.path().join("pid")) {
            let pid: i32 = pid.trim().parse().unwrap();
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "{point}: the run's process {pid} is gone"
            );
            fs::remove_file(d.path().join("pid")).unwrap();
        }
    }
    // aet monitor: the same when it fails after attaching.
    let mut target = Command::new("sleep").arg("30").spawn().unwrap();
    let out = d.path().join("mon-track");
    let r = aet()
        .args(["monitor", "--pid", &target.id().to_string(), "--out"])
        .arg(&out)
        .env("AET_DEBUG_FAIL_AT", "track")
        .output()
        .unwrap();
    let _ = target.kill();
    let _ = target.wait();
    assert_eq!(r.status.code(), Some(125), "{}", text(&r.stderr));
    let m = meta(&out.join("ledger.arrow"));
    assert_eq!(m["aet.finished"], "true");
    assert!(m["aet.incomplete_reasons"].contains("fault injected at track"));
}
