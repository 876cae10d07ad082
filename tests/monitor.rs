//! End-to-end tests of `aet run` and the ledger, as root with real eBPF (`aet monitor`: attach.rs).
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
assert meta[b"aet.schema_version"] == b"7" and meta[b"aet.events_lost"] == b"0", meta
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
