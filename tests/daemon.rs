//! The resident monitor (`aet daemon`): who may use it, what happens when it dies or misbehaves,
//! and that runs served at once stay apart. Each test starts a daemon of its own on a socket of
//! its own.

use std::{
    fs,
    os::unix::{fs::PermissionsExt as _, net::UnixListener, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command},
    time::{Duration, Instant},
};

use aet_tests::*;

/// A daemon on a socket of its own, stopped (SIGTERM) when dropped.
struct Daemon {
    child: Option<Child>,
    socket: PathBuf,
}

impl Daemon {
    fn start() -> Self {
        Self::start_with(&[])
    }

    fn start_with(args: &[&str]) -> Self {
        Self::start_env(args, &[])
    }

    fn start_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        let socket = PathBuf::from(format!(
            "/run/aet/daemon-test-{}-{}.sock",
            std::process::id(),
            unique()
        ));
        let mut child = aet()
            .args(["daemon", "-q", "--socket"])
            .arg(&socket)
            .args(args)
            .envs(env.iter().copied())
            .spawn()
            .expect("aet daemon");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "the daemon did not come up");
            if let Some(st) = child.try_wait().unwrap() {
                panic!("aet daemon exited: {st}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child: Some(child),
            socket,
        }
    }

    /// `aet ARGS` using this daemon (and failing rather than loading programs without it).
    fn aet(&self) -> Command {
        let mut c = aet();
        c.env("AET_SOCKET", &self.socket);
        c
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}

/// Runs a command as uid/gid 1000 (no capabilities left once the ids change).
fn as_user(cmd: &mut Command) -> &mut Command {
    cmd.uid(1000).gid(1000)
}

/// `aet monitor --daemon` of the caller's own process, run as uid 1000.
fn monitor_as_user(d: &Daemon, out: &Path) -> std::process::Output {
    as_user(
        d.aet()
            .args([
                "monitor",
                "--daemon",
                "--pid",
                &std::process::id().to_string(),
            ])
            .arg("--out")
            .arg(out),
    )
    .output()
    .unwrap()
}

#[test]
fn a_client_that_is_not_root_is_refused() {
    let d = Daemon::start();
    let dir = tempdir();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
    // The socket is root's and 0600: the connection itself is refused.
    let out = monitor_as_user(&d, &dir.path().join("r1"));
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("Permission denied"),
        "{}",
        text(&out.stderr)
    );
    // Even where the socket's mode lets it connect, the daemon checks the peer's credentials.
    fs::set_permissions(&d.socket, fs::Permissions::from_mode(0o666)).unwrap();
    let out = monitor_as_user(&d, &dir.path().join("r2"));
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("only root may use the aet daemon (the client's uid is 1000)"),
        "{}",
        text(&out.stderr)
    );
    assert!(!dir.path().join("r2/ledger.arrow").exists());
}

#[test]
fn sigkill_of_the_daemon_kills_its_runs_and_leaves_readable_incomplete_ledgers() {
    let d = Daemon::start();
    let dir = tempdir();
    let marker = dir.path().join("marker");
    fs::write(&marker, "x").unwrap();
    let out = dir.path().join("run");
    let run = Attached::spawn(
        d.aet()
            .args(["run", "--daemon", "--out"])
            .arg(&out)
            .args(["--", "sh", "-c"])
            .arg(format!(
                "echo $$ > {}/pid; while :; do cat {} > /dev/null; done",
                dir.path().display(),
                marker.display()
            )),
    );
    // Long enough for batches to be flushed.
    std::thread::sleep(Duration::from_millis(1000));
    let pid: i32 = fs::read_to_string(dir.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let killed = Instant::now();
    // SAFETY: a signal to the daemon this test started.
    unsafe { libc::kill(d.pid() as i32, libc::SIGKILL) };
    // The run's processes are gone within a second.
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            killed.elapsed() < Duration::from_secs(1),
            "the run's shell {pid} outlived the daemon by a second"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (status, stderr) = run.wait();
    assert_eq!(status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("aet daemon went away"), "{stderr}");
    // The ledger reads, up to its last flushed batch, and is incomplete.
    let ledger = out.join("ledger.arrow");
    let s = summary(&ledger);
    assert_eq!(s["complete"], false);
    assert!(s["events"].as_u64().unwrap() > 10, "{s}");
    assert_audit_inconclusive(&out);
}

/// A socket that accepts and then fails is an error (exit 125), never a silent fallback to
/// loading the programs after the connection was made; the command never runs.
#[test]
fn a_socket_that_accepts_and_fails_is_an_error_not_a_fallback() {
    let dir = tempdir();
    let socket = dir.path().join("broken.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let server = std::thread::spawn(move || {
        // Accept one connection and hang up on it.
        let (conn, _) = listener.accept().unwrap();
        drop(conn);
    });
    let marker = dir.path().join("must-not-exist");
    let out = aet()
        .env("AET_SOCKET", &socket)
        .args(["run", "--out"])
        .arg(dir.path().join("run"))
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    server.join().unwrap();
    assert_eq!(
        out.status.code(),
        Some(125),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("aet daemon socket") || stderr.contains("went away"),
        "{stderr}"
    );
    assert!(!marker.exists());
    assert!(!dir.path().join("run/ledger.arrow").exists());
}

/// `--daemon` with nothing listening is an error; without it, aet loads the programs itself.
#[test]
fn without_a_daemon_aet_run_is_standalone_unless_told_otherwise() {
    let dir = tempdir();
    let socket = dir.path().join("nobody.sock");
    let out = aet()
        .env("AET_SOCKET", &socket)
        .args(["run", "--daemon", "--out"])
        .arg(dir.path().join("r1"))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("no aet daemon answers"));
    let r = run_in(&dir.path().join("r2"), &[], &["true"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(!r.stderr().contains("(aet daemon"), "{}", r.stderr());
    assert_complete(&r.ledger());
}

/// Runs served at once are isolated: a busy run that overflows its share of the ring buffer
/// loses only its own events; a quiet run beside it loses none and records only its own files.
#[test]
fn a_busy_run_cannot_make_a_quiet_one_incomplete() {
    let d = Daemon::start();
    let dir = tempdir();
    let quiet_file = dir.path().join("quiet.txt");
    let busy_file = dir.path().join("busy.txt");
    fs::write(&quiet_file, "q").unwrap();
    fs::write(&busy_file, "b").unwrap();
    // The quiet run reads its file now and then for a while.
    let quiet = Attached::spawn(
        d.aet()
            .args(["run", "--daemon", "--out"])
            .arg(dir.path().join("quiet"))
            .args(["--", "sh", "-c"])
            .arg(format!(
                "for i in $(seq 20); do cat {} > /dev/null; sleep 0.1; done",
                quiet_file.display()
            )),
    );
    // The busy run storms opens (several processes at once) far faster than the share of one run
    // of sixteen can hold while the consumer keeps up with everyone.
    let busy = d
        .aet()
        .args(["run", "--daemon", "--out"])
        .arg(dir.path().join("busy"))
        .args(["--", "sh", "-c"])
        .arg(format!(
            "for i in 1 2 3 4; do {} 400000 {} > /dev/null & done; wait",
            helper("openstorm").display(),
            busy_file.display()
        ))
        .output()
        .unwrap();
    assert_eq!(busy.status.code(), Some(0), "{}", text(&busy.stderr));
    let (status, stderr) = quiet.wait();
    assert!(status.success(), "{stderr}");
    let q = dir.path().join("quiet/ledger.arrow");
    assert_complete(&q);
    let rows = rows(&q);
    assert!(
        rows.iter()
            .any(|r| r.resolved_path.as_deref() == Some(quiet_file.as_os_str().as_encoded_bytes()))
    );
    assert!(
        !rows
            .iter()
            .any(|r| r.resolved_path.as_deref() == Some(busy_file.as_os_str().as_encoded_bytes())),
        "the quiet run's ledger holds none of the busy run's files"
    );
    // Whatever the busy run lost is its own, and counted.
    let m = meta(&dir.path().join("busy/ledger.arrow"));
    let lost: u64 = m["aet.events_lost"].parse().unwrap();
    if lost > 0 {
        assert_eq!(m["aet.complete"], "false");
        let by: serde_json::Value = serde_json::from_str(&m["aet.events_lost_by_reason"]).unwrap();
        assert!(by["quota_full"].as_u64().unwrap() > 0, "{by}");
    }
}

/// Backpressure is per run: with a consumer too slow for one run's storm, that run is frozen
/// (and loses nothing) while a quiet run beside it is never frozen.
#[test]
fn only_the_run_that_fills_its_share_is_frozen() {
    let d = Daemon::start_env(
        &["--ringbuf-mb", "8", "--max-runs", "2"],
        &[("AET_DEBUG_CONSUMER_SLOW_US", "2000")],
    );
    let dir = tempdir();
    let quiet = Attached::spawn(
        d.aet()
            .args(["run", "--daemon", "--out"])
            .arg(dir.path().join("quiet"))
            .args([
                "--",
                "sh",
                "-c",
                "for i in $(seq 15); do cat /etc/hostname > /dev/null; sleep 0.1; done",
            ]),
    );
    let busy = d
        .aet()
        .args(["run", "--daemon", "--out"])
        .arg(dir.path().join("busy"))
        .arg("--")
        .arg(helper("openstorm"))
        .args(["100000", "/etc/hostname"])
        .output()
        .unwrap();
    assert_eq!(busy.status.code(), Some(0), "{}", text(&busy.stderr));
    let (status, stderr) = quiet.wait();
    assert!(status.success(), "{stderr}");
    let overload = |run: &str| -> serde_json::Value {
        let m = meta(&dir.path().join(run).join("ledger.arrow"));
        serde_json::from_str(&m["aet.overload"]).unwrap()
    };
    assert_complete(&dir.path().join("busy/ledger.arrow"));
    assert_complete(&dir.path().join("quiet/ledger.arrow"));
    let (b, q) = (overload("busy"), overload("quiet"));
    assert!(b["freezes"].as_u64().unwrap() > 0, "busy: {b}");
    assert_eq!(q["freezes"], 0, "quiet: {q}");
}

/// A daemon serving as many runs as it may refuses another before anything starts: a plain
/// `aet run` then loads its own programs and says so; `--daemon` is an error (125), the command
/// never run.
#[test]
fn a_full_daemon_makes_a_run_standalone_or_refuses_it_with_daemon() {
    let d = Daemon::start_with(&["--max-runs", "1"]);
    let dir = tempdir();
    let first = Attached::spawn(
        d.aet()
            .args(["run", "--daemon", "--out"])
            .arg(dir.path().join("first"))
            .args(["--", "sleep", "3"]),
    );
    let marker = dir.path().join("ran");
    let refused = d
        .aet()
        .args(["run", "--daemon", "--out"])
        .arg(dir.path().join("refused"))
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert_eq!(
        refused.status.code(),
        Some(125),
        "{}",
        text(&refused.stderr)
    );
    assert!(
        text(&refused.stderr).contains("serves 1 runs, the most it may"),
        "{}",
        text(&refused.stderr)
    );
    assert!(!marker.exists(), "the command never runs");

    let target = dir.path().join("target.txt");
    fs::write(&target, "x").unwrap();
    let alone = d
        .aet()
        .args(["run", "--out"])
        .arg(dir.path().join("alone"))
        .args(["--", "cat"])
        .arg(&target)
        .output()
        .unwrap();
    assert_eq!(alone.status.code(), Some(0), "{}", text(&alone.stderr));
    assert!(
        text(&alone.stderr).contains("this run loads its own programs"),
        "{}",
        text(&alone.stderr)
    );
    let ledger = dir.path().join("alone/ledger.arrow");
    assert_complete(&ledger);
    assert!(!rows_with_path(&rows(&ledger), &target).is_empty());
    let (st, err) = first.wait();
    assert!(st.success(), "{err}");
    assert_complete(&dir.path().join("first/ledger.arrow"));
}

/// An agent that stops the daemon (SIGSTOP) and exits: `aet run` says so within a bounded time
/// (exit 125), never waits forever; and a run waiting on a stopped daemon still ends on SIGTERM.
#[test]
fn a_stopped_daemon_is_a_clear_error_within_a_bounded_time() {
    let d = Daemon::start();
    let dir = tempdir();
    let pid = d.pid();
    let started = Instant::now();
    let o = d
        .aet()
        .args(["run", "--daemon", "--out"])
        .arg(dir.path().join("run"))
        .args(["--", "sh", "-c", &format!("kill -STOP {pid}; sleep 1")])
        .output()
        .unwrap();
    let took = started.elapsed();
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    assert_eq!(o.status.code(), Some(125), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("is stopped"),
        "{}",
        text(&o.stderr)
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
    // A long command, the daemon stopped from outside, then SIGTERM to aet.
    let mut child = d
        .aet()
        .args(["run", "--daemon", "--out"])
        .arg(dir.path().join("run2"))
        .args(["--", "sleep", "60"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signals to our own children.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(200));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let started = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "aet run did not end"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    assert_ne!(st.code(), Some(0), "{st}");
}
