//! End-to-end tests of `aet run`, `aet monitor` and the ledger, as root with real eBPF.
//!
//! Each test runs real commands under the real `aet` binary and checks what a user would check
//! in the ledger it wrote.

use std::{
    fs,
    os::unix::{
        ffi::{OsStrExt as _, OsStringExt as _},
        process::CommandExt as _,
    },
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use aet_tests::*;

fn creator(rows: &[LedgerRow], child: u32) -> Option<u32> {
    rows.iter()
        .find(|r| r.kind == "fork" && r.child_pid == Some(child))
        .map(|r| r.pid)
}

fn execs_of(rows: &[LedgerRow], pid: u32) -> Vec<&LedgerRow> {
    rows.iter()
        .filter(|r| r.kind == "exec" && r.pid == pid && r.ret == Some(0))
        .collect()
}

#[test]
fn grandchild_open_is_attributed_with_its_ppid_chain() {
    let d = tempdir();
    let marker = d.path().join("marker-grandchild");
    fs::write(&marker, "x").unwrap();
    let script = format!(
        "python3 -c 'import subprocess; subprocess.run([\"cat\", \"{}\"], check=True, stdout=subprocess.DEVNULL)'",
        marker.display()
    );
    let r = run_ok(d.path(), &["sh", "-c", &script]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_complete(&r.ledger());
    let rows = r.rows();

    let opens = ok_opens(&rows, &marker);
    assert_eq!(
        opens.len(),
        1,
        "exactly the grandchild opens the marker: {opens:?}"
    );
    let cat = opens[0];
    assert_eq!(cat.comm, "cat");
    assert!(
        execs_of(&rows, cat.pid)
            .iter()
            .any(|e| e.path_str().unwrap().ends_with("/cat"))
    );

    // cat was created by python ...
    let py = cat.ppid;
    assert_eq!(creator(&rows, cat.pid), Some(py));
    let py_execs = execs_of(&rows, py);
    assert!(
        py_execs
            .last()
            .is_some_and(|e| e.path_str().unwrap().contains("python")),
        "the middle process ends up running python: {py_execs:?}"
    );
    // ... which was created by sh, the run's root.
    let py_row = rows.iter().find(|r| r.pid == py).unwrap();
    let sh = py_row.ppid;
    assert_eq!(creator(&rows, py), Some(sh));
    let sh_exec = execs_of(&rows, sh);
    assert_eq!(sh_exec.len(), 1);
    assert_eq!(
        sh_exec[0].argv.as_deref().unwrap()[0],
        "sh",
        "the root runs the command as given"
    );
    // The root's parent is aet itself, which is not part of the record.
    let root_ppid = sh_exec[0].ppid;
    assert_ne!(root_ppid, 0);
    assert!(rows.iter().all(|r| r.pid != root_ppid));
}

#[test]
fn double_forked_setsid_daemon_is_recorded_after_its_parent_exits() {
    let d = tempdir();
    let marker = d.path().join("marker-daemon");
    fs::write(&marker, "x").unwrap();
    let script = format!(
        "(setsid sh -c 'sleep 0.5; cat {} > /dev/null' &); exit 0",
        marker.display()
    );
    let out = d.path().join("run");
    let r = run_in(&out, &["--grace", "10"], &["sh", "-c", &script]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_complete(&r.ledger());
    let rows = r.rows();
    let opens = ok_opens(&rows, &marker);
    assert_eq!(opens.len(), 1, "the daemon's open is recorded");
    let daemon_cat = opens[0];
    // Its ancestry leads back to the run's root through recorded forks.
    let root = rows.iter().find(|r| r.kind == "exec").unwrap().pid;
    let mut pid = daemon_cat.pid;
    let mut hops = 0;
    while pid != root {
        pid = creator(&rows, pid).unwrap_or_else(|| panic!("no fork row creates {pid}"));
        hops += 1;
        assert!(hops < 10);
    }
    assert!(hops >= 3, "sh -> subshell -> setsid sh -> cat");
    // The root exited before the daemon opened the marker.
    let root_exit = rows
        .iter()
        .find(|r| r.kind == "exit" && r.pid == root)
        .unwrap();
    assert!(root_exit.seq < daemon_cat.seq);
    assert_eq!(
        r.meta()["aet.killed"],
        "[]",
        "the daemon finished within the grace"
    );
}

#[test]
fn a_process_outside_the_run_is_not_recorded() {
    let d = tempdir();
    let inside = d.path().join("marker-inside");
    let outside = d.path().join("marker-outside");
    fs::write(&inside, "x").unwrap();
    fs::write(&outside, "x").unwrap();
    let mut other = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while :; do cat {} > /dev/null; sleep 0.01; done",
            outside.display()
        ))
        .spawn()
        .unwrap();
    let r = run_ok(
        d.path(),
        &[
            "sh",
            "-c",
            &format!(
                "sleep 0.5; cat {} {} > /dev/null",
                inside.display(),
                outside.display()
            ),
        ],
    );
    other.kill().unwrap();
    other.wait().unwrap();
    let rows = r.rows();
    assert_eq!(ok_opens(&rows, &inside).len(), 1);
    // The run's own cat opened the outside marker once; the loop outside never appears.
    let outside_opens = ok_opens(&rows, &outside);
    assert_eq!(outside_opens.len(), 1, "{outside_opens:?}");
    assert_eq!(outside_opens[0].comm, "cat");
    assert!(rows.iter().all(|row| row.pid != other.id()));
    let cgroups: std::collections::HashSet<u64> = rows.iter().map(|r| r.cgroup_id).collect();
    assert_eq!(cgroups.len(), 1, "every row comes from the run's cgroup");
}

#[test]
fn failed_opens_are_recorded_with_their_errno() {
    let d = tempdir();
    let secret = d.path().join("secret");
    fs::write(&secret, "answers").unwrap();
    fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let missing = d.path().join("no-such-file");
    let script = format!(
        "cat {} 2>/dev/null; python3 -c 'import os; os.setgid(65534); os.setuid(65534); open(\"{}\")' 2>/dev/null; true",
        missing.display(),
        secret.display()
    );
    let r = run_ok(d.path(), &["sh", "-c", &script]);
    assert_complete(&r.ledger());
    let rows = r.rows();
    let enoent: Vec<_> = rows_with_path(&rows, &missing);
    assert!(
        enoent
            .iter()
            .any(|r| r.ret == Some(-2) && r.errno.as_deref() == Some("ENOENT") && r.comm == "cat"),
        "{enoent:?}"
    );
    let eacces: Vec<_> = rows_with_path(&rows, &secret);
    assert!(
        eacces
            .iter()
            .any(|r| r.ret == Some(-13) && r.errno.as_deref() == Some("EACCES") && r.uid == 65534),
        "the denied attempt is attributed to the unprivileged uid: {eacces:?}"
    );
    let s = summary(&r.ledger());
    assert!(s["failed_opens_by_errno"]["EACCES"].as_u64().unwrap() >= 1);
}

#[test]
fn execveat_and_shebang_scripts_are_recorded_with_argv() {
    let d = tempdir();
    let bin = d.path().join("bin");
    fs::create_dir(&bin).unwrap();
    write_script(&bin.join("hello.sh"), "#!/bin/sh\necho \"hi $1\"\n");
    let execat = helper("execat");
    let script = format!(
        "{} {} hello.sh TOKEN-EXECVEAT; {}/hello.sh TOKEN-SHEBANG",
        execat.display(),
        bin.display(),
        bin.display()
    );
    let r = run_ok(d.path(), &["sh", "-c", &script]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(r.stdout().contains("hi TOKEN-EXECVEAT") && r.stdout().contains("hi TOKEN-SHEBANG"));
    let rows = r.rows();
    let execs: Vec<&LedgerRow> = rows
        .iter()
        .filter(|r| r.kind == "exec" && r.ret == Some(0))
        .collect();
    // The helper's own exec carries the token too; the script's exec is the one whose file is
    // hello.sh.
    let by_at = execs
        .iter()
        .find(|e| {
            e.argv
                .as_ref()
                .unwrap()
                .iter()
                .any(|a| a == "TOKEN-EXECVEAT")
                && e.path_str().unwrap().ends_with("/hello.sh")
        })
        .expect("the execveat is recorded");
    assert_eq!(by_at.syscall.as_deref(), Some("execveat"));
    assert!(by_at.dirfd.unwrap() >= 0, "relative to a directory fd");
    assert_eq!(
        by_at.path_str().unwrap(),
        format!("/dev/fd/{}/hello.sh", by_at.dirfd.unwrap()),
        "the kernel names a dirfd-relative exec through the fd"
    );
    let shebang = execs
        .iter()
        .find(|e| {
            e.argv
                .as_ref()
                .unwrap()
                .iter()
                .any(|a| a == "TOKEN-SHEBANG")
                && e.path_str().unwrap().ends_with("/hello.sh")
        })
        .expect("the script exec is recorded");
    assert_eq!(shebang.syscall.as_deref(), Some("execve"));
    assert_eq!(
        shebang.path.as_deref(),
        Some(bin.join("hello.sh").as_os_str().as_bytes())
    );
    // The kernel ran the interpreter: argv is the interpreter's view.
    let argv = shebang.argv.as_ref().unwrap();
    assert_eq!(argv[0], "/bin/sh");
    assert_eq!(argv.last().unwrap(), "TOKEN-SHEBANG");
    assert_eq!(shebang.argv_truncated, Some(false));
}

#[test]
fn non_utf8_and_newline_names_round_trip_exactly() {
    let d = tempdir();
    let newline = d.path().join("new\nline");
    let mut raw = d.path().as_os_str().as_bytes().to_vec();
    raw.extend_from_slice(b"/bad\xff\xfename");
    let invalid = PathBuf::from(std::ffi::OsString::from_vec(raw.clone()));
    fs::write(&newline, "a").unwrap();
    fs::write(&invalid, "b").unwrap();
    let r = run_ok(
        d.path(),
        &[
            std::ffi::OsStr::new("cat"),
            newline.as_os_str(),
            invalid.as_os_str(),
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let rows = r.rows();
    assert_eq!(ok_opens(&rows, &newline).len(), 1);
    let bad = ok_opens(&rows, &invalid);
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].path.as_deref(), Some(&raw[..]));
    // The exec's argv carries them too (lossy for the invalid one).
    let exec = rows
        .iter()
        .find(|r| r.kind == "exec" && r.ret == Some(0))
        .unwrap();
    assert!(
        exec.argv
            .as_ref()
            .unwrap()
            .iter()
            .any(|a| a.contains("new\nline"))
    );
}

#[test]
fn paths_in_pages_the_process_never_touched_are_captured() {
    let d = tempdir();
    let file = d.path().join("path-in-a-mapped-page");
    let mut content = file.as_os_str().as_bytes().to_vec();
    content.push(0);
    fs::write(&file, &content).unwrap();
    let r = run_ok(
        d.path(),
        &[helper("untouched").as_os_str(), file.as_os_str()],
    );
    assert_eq!(r.code(), 0, "{}{}", r.stdout(), r.stderr());
    let rows = r.rows();
    // Opened twice: once to map it, once through the mapped, never-touched page.
    assert_eq!(ok_opens(&rows, &file).len(), 2);
    let literal = Path::new("/proc/self/stat_untouched_literal_path_for_aet");
    let lit = rows_with_path(&rows, literal);
    assert_eq!(
        lit.len(),
        1,
        "the string literal in fresh .rodata is captured"
    );
    assert_eq!(lit[0].errno.as_deref(), Some("ENOENT"));
    assert!(
        rows.iter().all(|r| r.capture & 2 == 0),
        "no path read failed"
    );
}

#[test]
fn two_concurrent_runs_have_disjoint_ledgers() {
    let d = tempdir();
    let a = d.path().join("marker-a");
    let b = d.path().join("marker-b");
    fs::write(&a, "a").unwrap();
    fs::write(&b, "b").unwrap();
    let spawn = |marker: &Path, name: &str| {
        aet()
            .args(["run", "-q", "--out"])
            .arg(d.path().join(name))
            .args(["--", "sh", "-c"])
            .arg(format!(
                "i=0; while [ $i -lt 200 ]; do cat {} > /dev/null; i=$((i+1)); done",
                marker.display()
            ))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let ra = spawn(&a, "run-a");
    let rb = spawn(&b, "run-b");
    let oa = ra.wait_with_output().unwrap();
    let ob = rb.wait_with_output().unwrap();
    assert!(oa.status.success() && ob.status.success());
    let rows_a = rows(&d.path().join("run-a/ledger.arrow"));
    let rows_b = rows(&d.path().join("run-b/ledger.arrow"));
    assert_eq!(ok_opens(&rows_a, &a).len(), 200);
    assert_eq!(ok_opens(&rows_b, &b).len(), 200);
    assert!(rows_with_path(&rows_a, &b).is_empty());
    assert!(rows_with_path(&rows_b, &a).is_empty());
    let pids_a: std::collections::HashSet<u32> = rows_a.iter().map(|r| r.pid).collect();
    assert!(rows_b.iter().all(|r| !pids_a.contains(&r.pid)));
    assert_complete(&d.path().join("run-a/ledger.arrow"));
    assert_complete(&d.path().join("run-b/ledger.arrow"));
}

#[test]
fn a_burst_of_200000_opens_loses_nothing() {
    let d = tempdir();
    let target = d.path().join("storm-target");
    fs::write(&target, "x").unwrap();
    let r = run_ok(
        d.path(),
        &[
            helper("openstorm").as_os_str(),
            std::ffi::OsStr::new("200000"),
            target.as_os_str(),
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(r.stdout().contains("opens=200000"));
    assert_complete(&r.ledger());
    let rows = r.rows();
    assert_eq!(ok_opens(&rows, &target).len(), 200_000);
    let s = summary(&r.ledger());
    assert_eq!(s["events_lost"], 0);
    assert_eq!(s["complete"], true);
}

#[test]
fn notebooks_read_the_ledger_as_it_is() {
    let d = tempdir();
    let odd = {
        let mut raw = d.path().as_os_str().as_bytes().to_vec();
        raw.extend_from_slice(b"/odd\xffname");
        PathBuf::from(std::ffi::OsString::from_vec(raw))
    };
    fs::write(&odd, "x").unwrap();
    let r = run_ok(d.path(), &[std::ffi::OsStr::new("cat"), odd.as_os_str()]);
    let n = r.rows().len();
    let script = r#"
import sys, pyarrow.ipc as ipc, polars as pl, duckdb
path, n, odd = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3])
t = ipc.open_file(path).read_all()
assert t.num_rows == n, (t.num_rows, n)
meta = t.schema.metadata
assert meta[b"aet.schema_version"] == b"6" and meta[b"aet.events_lost"] == b"0", meta
for c in ["seq","ts_ns","kind","syscall","pid","tid","ppid","uid","gid","cgroup_id","comm","path","dirfd","flags","ret","argv","phase","host","host_source","dns_answers"]:
    assert c in t.column_names, c
raw = [r for r in t.column("path_raw").to_pylist() if r is not None]
assert odd in raw, raw
df = pl.read_ipc(path)
assert df.height == n
assert df.filter(pl.col("kind") == "exec").height >= 1
ledger = t
assert duckdb.sql("select count(*) from ledger").fetchall()[0][0] == n
assert duckdb.sql("select count(*) from ledger where kind = 'open' and ret >= 0").fetchall()[0][0] >= 1
print("readers ok")
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(r.ledger())
        .arg(n.to_string())
        .arg(
            odd.as_os_str()
                .as_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_command_gets_a_small_fd_table_whatever_aet_inherited() {
    // A harness that leaks a high fd into aet (fd 300 here) makes every process it forks start
    // with a table of 512 slots, which exec does not shrink. The command must not keep that
    // size: the monitor reads the files of a table of 64 slots with checked loads, and those of
    // a larger one with helper reads, several times slower on every recorded syscall.
    let d = tempdir();
    let out = d.path().join("run");
    let mut cmd = aet();
    cmd.args(["run", "-q", "--out"]).arg(&out).args([
        "--",
        "sh",
        "-c",
        "grep FDSize /proc/$$/status; ls /proc/$$/fd",
    ]);
    // SAFETY: dup2 is async-signal-safe; the new fd is not close-on-exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::dup2(2, 300) != 300 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let r = cmd.output().unwrap();
    let stdout = text(&r.stdout);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert!(stdout.contains("FDSize:\t64\n"), "{stdout}");
    let fds: Vec<&str> = stdout.lines().skip(1).collect();
    // 0, 1, 2 and the fd ls opened to list the directory.
    assert!(fds.len() <= 4 && !fds.contains(&"300"), "{fds:?}");
    // Nothing of aet's own making shows in the record before the command.
    let rows = rows(&out.join("ledger.arrow"));
    assert!(
        !rows.iter().any(|x| x.kind == "fork" && x.comm != "sh"),
        "{:?}",
        rows.iter()
            .filter(|x| x.kind == "fork")
            .map(|x| &x.comm)
            .collect::<Vec<_>>()
    );
}

#[test]
fn aet_run_exits_with_the_commands_status() {
    let d = tempdir();
    assert_eq!(run_ok(d.path(), &["sh", "-c", "exit 7"]).code(), 7);
    assert_eq!(run_ok(d.path(), &["sh", "-c", "kill -TERM $$"]).code(), 143);
    let r = run_ok(d.path(), &["no-such-command-aet-test"]);
    assert_eq!(r.code(), 127, "{}", r.stderr());
    assert!(r.stderr().contains("cannot run no-such-command-aet-test"));
    // The attempts are in the record.
    let rows = r.rows();
    assert!(rows.iter().any(|x| x.kind == "exec"
        && x.errno.as_deref() == Some("ENOENT")
        && x.path_str().unwrap().ends_with("/no-such-command-aet-test")));
}

#[test]
fn leftover_processes_are_killed_after_the_grace_and_recorded() {
    let d = tempdir();
    let started = Instant::now();
    let out = d.path().join("run");
    let r = run_in(
        &out,
        &["--grace", "0.5"],
        &["sh", "-c", "sleep 60 & echo started"],
    );
    assert_eq!(r.code(), 0);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(r.stderr().contains("killed 1 process"), "{}", r.stderr());
    let killed: serde_json::Value = serde_json::from_str(&r.meta()["aet.killed"]).unwrap();
    assert_eq!(killed[0]["comm"], "sleep");
    let pid = killed[0]["pid"].as_u64().unwrap() as u32;
    let rows = r.rows();
    let exit = rows
        .iter()
        .find(|x| x.kind == "exit" && x.pid == pid)
        .expect("the killed process's exit is recorded");
    assert_eq!(exit.exit_signal, Some(9));
    assert_complete(&r.ledger());
}

#[test]
fn compat_syscalls_are_recorded() {
    let d = tempdir();
    let target = d.path().join("opened-through-int80");
    fs::write(&target, "x").unwrap();
    let r = run_ok(d.path(), &[helper("int80").as_os_str(), target.as_os_str()]);
    assert_eq!(r.code(), 0, "{}{}", r.stdout(), r.stderr());
    let rows = r.rows();
    let opens = ok_opens(&rows, &target);
    assert_eq!(opens.len(), 1, "the ia32 open is recorded");
    assert_eq!(opens[0].syscall.as_deref(), Some("open"));
    assert_ne!(
        opens[0].capture & (1 << 6),
        0,
        "flagged as a compat syscall"
    );
}

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
