//! The resident monitor (`aet daemon`): who may use it, what happens when it dies or misbehaves,
//! and that runs served at once stay apart. Each test starts a daemon of its own on a socket of
//! its own.

use std::{
    fs,
    os::unix::{fs::PermissionsExt as _, net::UnixListener, process::CommandExt as _},
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use aet_tests::*;

/// Runs a command as uid/gid 1000 (no capabilities left once the ids change).
fn as_user(cmd: &mut Command) -> &mut Command {
    cmd.uid(1000).gid(1000)
}

/// `aet monitor --daemon` of the caller's own process, run as uid 1000 (from a copy of the
/// binary that uid can reach, wherever the checkout lies).
fn monitor_as_user(d: &Daemon, out: &Path) -> std::process::Output {
    let (_keep, bin) = aet_for_any_uid();
    as_user(
        Command::new(bin)
            .env("AET_SOCKET", &d.socket)
            .env("AET_DAEMON", "auto")
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
        .env("AET_DAEMON", "auto")
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

/// `--daemon` with nothing listening is an error; `AET_DAEMON=never` and `--standalone` load
/// the programs for the run and start no daemon.
#[test]
fn never_and_standalone_start_no_daemon_and_require_needs_one() {
    let dir = tempdir();
    let socket = fresh_socket();
    let out = aet()
        .env("AET_SOCKET", &socket)
        .env("AET_DAEMON", "auto")
        .args(["run", "--daemon", "--out"])
        .arg(dir.path().join("r1"))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("no aet daemon answers"));
    let out = aet()
        .env("AET_SOCKET", &socket)
        .env("AET_DAEMON", "require")
        .args(["run", "--out"])
        .arg(dir.path().join("r2"))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no aet daemon answers"));
    for (name, env, flag) in [("r3", "never", None), ("r4", "auto", Some("--standalone"))] {
        let out = dir.path().join(name);
        let mut c = aet();
        c.env("AET_SOCKET", &socket)
            .env("AET_DAEMON", env)
            .arg("run");
        c.args(flag).arg("--out").arg(&out).args(["--", "true"]);
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o.stderr));
        assert!(
            !text(&o.stderr).contains("(aet daemon"),
            "{}",
            text(&o.stderr)
        );
        let ledger = out.join("ledger.arrow");
        assert_complete(&ledger);
        assert_eq!(monitor_of(&ledger)["served_by"], "standalone", "{name}");
        assert!(!socket.exists(), "{name}: no daemon was started");
    }
    let bad = aet()
        .env("AET_SOCKET", &socket)
        .env("AET_DAEMON", "sometimes")
        .args(["run", "--out"])
        .arg(dir.path().join("r5"))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(125));
    assert!(
        text(&bad.stderr).contains("AET_DAEMON=sometimes: expected auto, require or never"),
        "{}",
        text(&bad.stderr)
    );
}

/// A socket path of its own under /run/aet, nothing there yet.
fn fresh_socket() -> PathBuf {
    PathBuf::from(format!(
        "/run/aet/auto-test-{}-{}.sock",
        std::process::id(),
        unique()
    ))
}

/// The ledger's `aet.monitor`.
fn monitor_of(ledger: &Path) -> serde_json::Value {
    serde_json::from_str(&meta(ledger)["aet.monitor"]).unwrap()
}

/// A daemon started by a run, stopped (`aet daemon stop`, else SIGKILL) when dropped.
struct AutoDaemon {
    socket: PathBuf,
}

impl AutoDaemon {
    fn new() -> Self {
        Self {
            socket: fresh_socket(),
        }
    }

    /// `aet ARGS` as a user runs it: `AET_DAEMON` unset, so `auto`.
    fn aet(&self, idle: &str) -> Command {
        let mut c = aet();
        c.env("AET_SOCKET", &self.socket)
            .env_remove("AET_DAEMON")
            .env("AET_DAEMON_IDLE_EXIT", idle);
        c
    }

    /// `aet run -- true` into `out`; its ledger's `aet.monitor`.
    fn run_true(&self, out: &Path) -> serde_json::Value {
        let o = output_within(
            self.aet("60")
                .args(["run", "--out"])
                .arg(out)
                .args(["--", "true"]),
            Duration::from_secs(120),
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let ledger = out.join("ledger.arrow");
        assert_complete(&ledger);
        monitor_of(&ledger)
    }

    fn log(&self) -> String {
        fs::read_to_string(format!("{}.log", self.socket.display())).unwrap_or_default()
    }
}

impl Drop for AutoDaemon {
    fn drop(&mut self) {
        let pid = fs::read_to_string(format!("{}.log", self.socket.display()))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("aet: daemon "))
            .filter_map(|l| l.split(' ').next()?.parse::<i32>().ok())
            .next_back();
        let _ = aet()
            .args(["daemon", "stop", "--socket"])
            .arg(&self.socket)
            .output();
        if let Some(pid) = pid {
            // SAFETY: a daemon this test's runs started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        for suffix in ["", ".log", ".lock"] {
            let _ = fs::remove_file(format!("{}{suffix}", self.socket.display()));
        }
    }
}

fn gone(pid: u64, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Path::new(&format!("/proc/{pid}")).exists() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// With no daemon running, the first run starts one (detached: a session and a cgroup of its
/// own, a log it names) and is served by it; later runs are served by the same daemon; `aet
/// daemon stop` ends it and removes its socket.
#[test]
fn the_first_run_starts_a_daemon_that_serves_the_next() {
    let a = AutoDaemon::new();
    let dir = tempdir();
    let first = a.run_true(&dir.path().join("first"));
    assert_eq!(first["served_by"], "daemon", "{first}");
    assert_eq!(first["started"], "auto", "{first}");
    let pid = first["pid"].as_u64().unwrap();
    let cgroup = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    // The unified hierarchy's line (a hybrid host lists its v1 hierarchies beside it).
    assert!(
        cgroup.lines().any(|l| l == "0::/aet/daemon"),
        "the daemon's own cgroup: {cgroup}"
    );
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(fields[3], pid.to_string(), "a session of its own: {stat}");
    let log = a.log();
    assert!(
        log.contains(&format!("aet: daemon {pid} (auto) serving")),
        "{log}"
    );
    assert!(log.contains("leaves after 60 s idle"), "{log}");
    let second = a.run_true(&dir.path().join("second"));
    assert_eq!(second["pid"], first["pid"], "{second}");
    let stop = a
        .aet("60")
        .args(["daemon", "stop", "--socket"])
        .arg(&a.socket)
        .output()
        .unwrap();
    assert_eq!(stop.status.code(), Some(0), "{}", text(&stop.stderr));
    assert!(gone(pid, Duration::from_secs(20)), "the daemon left");
    assert!(!a.socket.exists());
    let again = a
        .aet("60")
        .args(["daemon", "stop", "--socket"])
        .arg(&a.socket)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1), "{}", text(&again.stderr));
}

/// Three first runs at once start one daemon, which serves all three.
#[test]
fn first_runs_at_once_start_one_daemon() {
    let a = AutoDaemon::new();
    let dir = tempdir();
    let children: Vec<_> = (0..3)
        .map(|i| {
            a.aet("60")
                .args(["run", "--out"])
                .arg(dir.path().join(format!("r{i}")))
                .args(["--", "true"])
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        let st = wait_child_within(&mut c, Duration::from_secs(120)).expect("aet run ended");
        assert!(st.success(), "{st}");
    }
    let pids: std::collections::BTreeSet<_> = (0..3)
        .map(|i| monitor_of(&dir.path().join(format!("r{i}/ledger.arrow")))["pid"].as_u64())
        .collect();
    assert_eq!(pids.len(), 1, "one daemon served all: {pids:?}");
    let log = a.log();
    assert_eq!(
        log.matches(") serving").count(),
        1,
        "one daemon started: {log}"
    );
}

/// A daemon a run started leaves once idle for `AET_DAEMON_IDLE_EXIT` seconds, its socket
/// removed; the next run starts another.
#[test]
fn an_idle_daemon_leaves_and_the_next_run_starts_another() {
    let a = AutoDaemon::new();
    let dir = tempdir();
    let o = a
        .aet("1")
        .args(["run", "--out"])
        .arg(dir.path().join("r1"))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let pid = monitor_of(&dir.path().join("r1/ledger.arrow"))["pid"]
        .as_u64()
        .unwrap();
    assert!(gone(pid, Duration::from_secs(20)), "the idle daemon left");
    assert!(!a.socket.exists(), "its socket went with it");
    assert!(a.log().contains("stopping (idle)"), "{}", a.log());
    let next = a.run_true(&dir.path().join("r2"));
    assert_eq!(next["served_by"], "daemon");
    assert_ne!(next["pid"].as_u64().unwrap(), pid, "{next}");
}

/// A socket file left by a daemon that died (nobody accepts on it) is replaced by the daemon
/// the next run starts.
#[test]
fn a_stale_socket_is_replaced_by_the_started_daemon() {
    let a = AutoDaemon::new();
    drop(UnixListener::bind(&a.socket).unwrap());
    assert!(a.socket.exists());
    let dir = tempdir();
    let m = a.run_true(&dir.path().join("r"));
    assert_eq!(m["served_by"], "daemon", "{m}");
    assert_eq!(m["started"], "auto", "{m}");
}

/// A daemon of another build answers: a run is not served by it (it would write the ledger
/// with its own code) and loads its own programs, saying why; `--daemon` refuses to run.
#[test]
fn a_daemon_of_another_build_is_refused() {
    let a = AutoDaemon::new();
    let listener = UnixListener::bind(&a.socket).unwrap();
    let server = std::thread::spawn(move || {
        use std::io::{BufRead as _, Write as _};
        for _ in 0..2 {
            let (mut conn, _) = listener.accept().unwrap();
            let mut line = String::new();
            std::io::BufReader::new(conn.try_clone().unwrap())
                .read_line(&mut line)
                .unwrap();
            assert!(line.contains("\"hello\""), "{line}");
            let hello = r#"{"reply":"hello","version":4,"build":"0.0.1+0123456789ab.ebpf-00","pid":1,"ringbuf_bytes":1,"max_runs":1,"started":"manual"}"#;
            conn.write_all(format!("{hello}\n").as_bytes()).unwrap();
        }
    });
    let dir = tempdir();
    let o = a
        .aet("60")
        .args(["run", "--out"])
        .arg(dir.path().join("r"))
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("is another build of aet"), "{err}");
    assert!(err.contains("this run loads its own programs"), "{err}");
    assert_eq!(
        monitor_of(&dir.path().join("r/ledger.arrow"))["served_by"],
        "standalone"
    );
    let o = a
        .aet("60")
        .args(["run", "--daemon", "--out"])
        .arg(dir.path().join("r2"))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("is another build of aet"));
    server.join().unwrap();
}

/// Socket activation as systemd does it (`systemd-socket-activate`, the same LISTEN_FDS
/// protocol as `dist/systemd/aet.socket`): the first connection starts the daemon, which serves
/// the run on the socket it was passed.
#[test]
fn a_socket_activated_daemon_serves_the_first_connection() {
    let socket = fresh_socket();
    let mut activator = Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(&socket)
        .arg(aet_bin())
        .args(["daemon", "-q"])
        .spawn()
        .expect("systemd-socket-activate (package systemd)");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "the activator did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let dir = tempdir();
    let o = output_within(
        aet()
            .env("AET_SOCKET", &socket)
            .args(["run", "--daemon", "--out"])
            .arg(dir.path().join("r"))
            .args(["--", "true"]),
        Duration::from_secs(120),
    );
    let _ = activator.kill();
    let _ = activator.wait();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let m = monitor_of(&dir.path().join("r/ledger.arrow"));
    assert_eq!(m["served_by"], "daemon", "{m}");
    assert_eq!(m["started"], "socket", "{m}");
    if let Some(pid) = m["pid"].as_u64() {
        // SAFETY: the daemon the activator started for this test.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        assert!(gone(pid, Duration::from_secs(20)));
    }
    let _ = fs::remove_file(&socket);
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
