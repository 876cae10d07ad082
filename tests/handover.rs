//! Evidence that starts outside the run: a helper process outside the run's cgroup holds or hands
//! over a protected file, and the run obtains its content without opening it by path (an fd
//! inherited at start, received over a socket, copied with pidfd_getfd, carried by a fanotify
//! event), or reads another process's memory, or opens a file through another mount namespace.
//! Each route must leave rows with the file's identity and origin, and the audit must name it.

use std::{
    fs,
    io::{BufRead as _, BufReader},
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use aet_ledger::schema::capture;
use aet_tests::*;

/// `aet_common::walk::FOREIGN_ROOT` (capture bit 22 with the walk shift).
const FOREIGN_ROOT: u32 = 1 << 6;

const SECRET: &str = "answer-key: 42 is the reference fix\n";

/// A protected file in a fresh directory, and a policy that protects it (and nothing else).
struct Fixture {
    dir: tempfile::TempDir,
    key: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempdir();
        let key = dir.path().join("watched").join("key.txt");
        fs::create_dir_all(key.parent().unwrap()).unwrap();
        fs::write(&key, SECRET).unwrap();
        Self { dir, key }
    }

    fn ident(&self) -> (u64, u64) {
        let m = fs::metadata(&self.key).unwrap();
        (m.dev(), m.ino())
    }

    fn policy(&self, extra: &str) -> PathBuf {
        let p = self.dir.path().join(format!("policy-{}.toml", unique()));
        fs::write(
            &p,
            format!("[protected]\nkey = \"{}\"\n{extra}", self.key.display()),
        )
        .unwrap();
        p
    }

    fn out(&self) -> PathBuf {
        self.dir.path().join(format!("run-{}", unique()))
    }
}

/// A helper process outside the run, killed when dropped.
struct Outside(Child);

impl Outside {
    /// Starts `cmd` with stdout piped and returns it with its first line.
    fn start(cmd: &mut Command) -> (Self, String) {
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("start helper");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(!line.is_empty(), "the helper said nothing");
        (Self(child), line)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `aet run --out OUT -- handover ARGS...`.
fn run_handover(out: &Path, args: &[&std::ffi::OsStr]) -> Run {
    let mut cmd = vec![helper("handover").into_os_string()];
    cmd.extend(args.iter().map(|a| a.to_os_string()));
    run_in(out, &[], &cmd)
}

/// `aet audit RUN --policy P --json`: exit status and report.
fn audit(run: &Path, policy: &Path) -> (i32, serde_json::Value) {
    let (out, v) = audit_json(run, policy, &[]);
    (out.status.code().unwrap_or(-1), v)
}

/// The audit disqualifies the run for reading the protected file, reached as `reached` says.
fn assert_disqualified_through(run: &Path, policy: &Path, reached: &str) {
    let (code, v) = audit(run, policy);
    assert_eq!(code, 2, "disqualified: {v:#}");
    let hits = v["cheat_hits"].as_array().unwrap();
    assert!(
        hits.iter().any(|f| f["rule"] == "protected.key"
            && f["access"] == "read"
            && f["reached"] == reached),
        "a read of the protected file reached through {reached}: {v:#}"
    );
    assert!(
        !v["unused_rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "protected.key"),
        "{v:#}"
    );
}

/// The io rows that read the file with identity `id`.
fn reads_of(rows: &[LedgerRow], id: (u64, u64)) -> u64 {
    rows.iter()
        .filter(|r| r.kind == "io" && r.dev == Some(id.0) && r.ino == Some(id.1))
        .map(|r| r.bytes_read.unwrap_or(0))
        .sum()
}

fn fd_rows<'a>(rows: &'a [LedgerRow], origin: &str) -> Vec<&'a LedgerRow> {
    rows.iter()
        .filter(|r| r.kind == "fd" && r.fd_origin.as_deref() == Some(origin))
        .collect()
}

#[test]
fn a_file_given_as_stdin_is_recorded_as_inherited_and_its_read_disqualifies() {
    let f = Fixture::new();
    let out = f.out();
    let r = aet()
        .args(["run", "--out"])
        .arg(&out)
        .arg("--")
        .arg(helper("handover"))
        .arg("stdin")
        .stdin(fs::File::open(&f.key).unwrap())
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
    assert_eq!(text(&r.stdout), SECRET);
    let ledger = out.join("ledger.arrow");
    let m = meta(&ledger);
    let fds: serde_json::Value = serde_json::from_str(&m["aet.inherited_fds"]).unwrap();
    let id = f.ident();
    assert!(
        fds.as_array()
            .unwrap()
            .iter()
            .any(|x| x["fd"] == 0 && x["dev"] == id.0 && x["ino"] == id.1 && x["kind"] == "file"),
        "{fds:#}"
    );
    let rows = rows(&ledger);
    assert_eq!(reads_of(&rows, id), SECRET.len() as u64);
    assert_disqualified_through(&out, &f.policy(""), "inherited");
}

#[test]
fn an_fd_received_over_a_unix_socket_has_a_row_and_its_read_disqualifies() {
    let f = Fixture::new();
    let sock = f.dir.path().join("fd.sock");
    let (server, ready) = Outside::start(
        Command::new(helper("handover"))
            .arg("serve")
            .arg(&sock)
            .arg(&f.key),
    );
    assert_eq!(ready.trim(), "ready");
    let out = f.out();
    let r = run_handover(&out, &["recv".as_ref(), sock.as_os_str()]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(r.stdout(), SECRET);
    let rows = r.rows();
    let got = fd_rows(&rows, "received");
    assert_eq!(got.len(), 1, "one fd received: {got:#?}");
    let id = f.ident();
    assert_eq!((got[0].dev, got[0].ino), (Some(id.0), Some(id.1)));
    assert_eq!(got[0].syscall.as_deref(), Some("recvmsg"));
    assert!(got[0].source_fd.is_some(), "the socket it came through");
    // The socket's peer: the process that sent it, outside the run.
    assert_eq!(got[0].target_pid, Some(server.pid()), "{:#?}", got[0]);
    assert_eq!(got[0].target_in_run, Some(false));
    assert_eq!(reads_of(&rows, id), SECRET.len() as u64);
    assert_complete(&r.ledger());
    assert_disqualified_through(&out, &f.policy(""), "received");
}

#[test]
fn every_fd_of_a_message_received_with_recvmmsg_has_its_row() {
    let f = Fixture::new();
    let other = f.dir.path().join("other.txt");
    fs::write(&other, "other\n").unwrap();
    let sock = f.dir.path().join("fds.sock");
    let (server, ready) = Outside::start(
        Command::new(helper("handover"))
            .arg("serve")
            .arg(&sock)
            .arg(&other)
            .arg(&f.key)
            .arg(&other),
    );
    assert_eq!(ready.trim(), "ready");
    let out = f.out();
    let r = run_handover(&out, &["recvmm".as_ref(), sock.as_os_str()]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(r.stdout(), format!("other\n{SECRET}other\n"));
    let rows = r.rows();
    let got = fd_rows(&rows, "received");
    let ids: Vec<_> = got.iter().map(|r| (r.dev, r.ino)).collect();
    let o = fs::metadata(&other).unwrap();
    let k = f.ident();
    let (o, k) = ((Some(o.dev()), Some(o.ino())), (Some(k.0), Some(k.1)));
    assert_eq!(ids, vec![o, k, o], "{got:#?}");
    assert!(got.iter().all(|r| r.syscall.as_deref() == Some("recvmmsg")
        && r.target_pid == Some(server.pid())));
    assert_complete(&r.ledger());
    assert_disqualified_through(&out, &f.policy(""), "received");
}

#[test]
fn an_fd_copied_from_an_outside_process_names_that_process_and_disqualifies() {
    let f = Fixture::new();
    let (holder, line) = Outside::start(Command::new(helper("handover")).arg("hold").arg(&f.key));
    let words: Vec<&str> = line.split_whitespace().collect();
    let (pid, fd) = (words[0], words[1]);
    assert_eq!(pid, holder.pid().to_string());
    let out = f.out();
    let r = run_handover(&out, &["getfd".as_ref(), pid.as_ref(), fd.as_ref()]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(r.stdout(), SECRET);
    let rows = r.rows();
    let got = fd_rows(&rows, "copied");
    assert_eq!(got.len(), 1, "{got:#?}");
    let id = f.ident();
    assert_eq!((got[0].dev, got[0].ino), (Some(id.0), Some(id.1)));
    assert_eq!(got[0].target_pid, Some(holder.pid()));
    assert_eq!(got[0].target_in_run, Some(false));
    assert_eq!(got[0].source_fd, Some(fd.parse().unwrap()));
    assert!(
        rows.iter().any(|r| r.kind == "process"
            && r.syscall.as_deref() == Some("pidfd_open")
            && r.target_pid == Some(holder.pid())),
        "the pidfd_open"
    );
    assert_eq!(reads_of(&rows, id), SECRET.len() as u64);
    let policy = f.policy("");
    assert_disqualified_through(&out, &policy, "copied");
    // Taking an fd of a process outside the run is itself reported.
    let (_, v) = audit(&out, &policy);
    assert!(
        v["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["rule"] == "processes.outside"
                && w["access"] == "copy_fd"
                && w["target_pid"] == holder.pid()),
        "{v:#}"
    );
}

#[test]
fn an_fd_handed_over_by_fanotify_has_a_row_and_its_read_disqualifies() {
    let f = Fixture::new();
    let out = f.out();
    let watched = f.key.parent().unwrap().to_owned();
    let mut run = aet()
        .args(["run", "--out"])
        .arg(&out)
        .arg("--")
        .arg(helper("handover"))
        .arg("fanotify")
        .arg(&watched)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Opens from outside the run until the watcher inside has taken one and ended.
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(s) = run.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the watcher never saw an open"
        );
        let _ = fs::read(&f.key).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(status.success());
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut run.stdout.take().unwrap(), &mut stdout).unwrap();
    assert_eq!(stdout, SECRET);
    let rows = rows(&out.join("ledger.arrow"));
    let id = f.ident();
    let got = fd_rows(&rows, "fanotify");
    assert!(
        got.iter()
            .any(|r| (r.dev, r.ino) == (Some(id.0), Some(id.1)) && r.target_in_run == Some(false)),
        "{got:#?}"
    );
    assert!(
        rows.iter()
            .any(|r| r.kind == "watch" && r.syscall.as_deref() == Some("fanotify_mark")),
        "the watch"
    );
    assert_eq!(reads_of(&rows, id), SECRET.len() as u64);
    assert_disqualified_through(&out, &f.policy(""), "fanotify");
}

#[test]
fn bytes_spliced_from_a_file_into_a_pipe_are_accounted_to_the_file() {
    let f = Fixture::new();
    let out = f.out();
    let r = run_handover(&out, &["splice".as_ref(), f.key.as_os_str()]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(r.stdout(), SECRET);
    let rows = r.rows();
    let id = f.ident();
    assert_eq!(reads_of(&rows, id), SECRET.len() as u64, "spliced bytes");
    assert_disqualified_through(&out, &f.policy(""), "path");
}

#[test]
fn reading_an_outside_process_memory_is_recorded_and_reported() {
    let f = Fixture::new();
    let (holder, line) = Outside::start(Command::new(helper("handover")).arg("hold").arg(&f.key));
    let words: Vec<&str> = line.split_whitespace().collect();
    let (pid, addr, len) = (words[0], words[2], words[3]);
    let out = f.out();
    let h = helper("handover");
    let script = format!(
        "{0} vmread {pid} {addr} {len} && {0} peek {pid} {addr} >/dev/null && {0} vmwrite {pid} {addr}",
        h.display()
    );
    let r = run_in(&out, &[], &["sh", "-c", &script]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(r.stdout(), SECRET);
    let rows = r.rows();
    let vm: Vec<_> = rows
        .iter()
        .filter(|r| r.kind == "process" && r.syscall.as_deref() == Some("process_vm_readv"))
        .collect();
    assert_eq!(vm.len(), 1, "{vm:#?}");
    assert_eq!(vm[0].target_pid, Some(holder.pid()));
    assert_eq!(vm[0].target_in_run, Some(false));
    assert_eq!(vm[0].ret, Some(SECRET.len() as i64));
    assert!(
        rows.iter().any(|r| r.kind == "process"
            && r.syscall.as_deref() == Some("process_vm_writev")
            && r.target_pid == Some(holder.pid())
            && r.ret == Some(1)),
        "the write"
    );
    let requests: Vec<u32> = rows
        .iter()
        .filter(|r| r.kind == "process" && r.syscall.as_deref() == Some("ptrace"))
        .inspect(|r| assert_eq!(r.target_pid, Some(holder.pid())))
        .filter_map(|r| r.ptrace_request)
        .collect();
    assert!(
        requests.contains(&16) && requests.contains(&2),
        "{requests:?}"
    );
    // A warning by default...
    let (code, v) = audit(&out, &f.policy(""));
    assert_eq!(code, 1, "flagged for review: {v:#}");
    let w = v["warnings"].as_array().unwrap();
    for access in ["read", "attach", "write"] {
        assert!(
            w.iter().any(|x| x["rule"] == "processes.outside"
                && x["access"] == access
                && x["target_pid"] == holder.pid()),
            "{access}: {v:#}"
        );
    }
    // ... and a cheat when the policy says so.
    let (code, v) = audit(&out, &f.policy("[processes]\noutside = \"cheat\"\n"));
    assert_eq!(code, 2, "{v:#}");
}

#[test]
fn a_policy_with_a_bad_processes_value_is_refused_naming_the_line() {
    let f = Fixture::new();
    let run = run_ok(f.dir.path(), &["true"]);
    let p = f.policy("[processes]\noutside = \"sometimes\"\n");
    let a = aet()
        .arg("audit")
        .arg(&run.out)
        .arg("--policy")
        .arg(&p)
        .output()
        .unwrap();
    let err = text(&a.stderr);
    assert!(!a.status.success());
    assert!(
        err.contains("processes.outside") && err.contains("line 4") && err.contains("sometimes"),
        "{err}"
    );
}

#[test]
fn a_file_opened_through_another_mount_namespace_is_marked_with_its_host_path() {
    let f = Fixture::new();
    let innocent = f.dir.path().join("innocent.txt");
    fs::write(&innocent, "nothing to see\n").unwrap();
    // Outside the run, in its own mount namespace: the protected file bound over the innocent
    // name (visible only there).
    let script = format!(
        "mount --bind {} {} && echo ready && exec sleep 120",
        f.key.display(),
        innocent.display()
    );
    let (ns, ready) = Outside::start(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(&script),
    );
    assert_eq!(ready.trim(), "ready");
    let through = format!("/proc/{}/root{}", ns.pid(), innocent.display());
    let out = f.out();
    let r = run_in(&out, &[], &["cat", &through]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(
        r.stdout(),
        SECRET,
        "the other namespace shows the protected file"
    );
    let rows = r.rows();
    let id = f.ident();
    let open = rows
        .iter()
        .find(|r| r.kind == "open" && r.path.as_deref() == Some(through.as_bytes()))
        .unwrap_or_else(|| panic!("no open of {through}"));
    assert_eq!((open.dev, open.ino), (Some(id.0), Some(id.1)));
    assert_eq!(open.resolved_partial, Some(true), "{open:#?}");
    assert_ne!(
        open.capture & FOREIGN_ROOT << capture::WALK_SHIFT,
        0,
        "{open:#?}"
    );
    assert_eq!(
        open.host_path.as_deref(),
        Some(f.key.as_os_str().as_encoded_bytes()),
        "{open:#?}"
    );
    // No row names the innocent file as what was read.
    assert!(
        !rows
            .iter()
            .any(|r| r.host_path.as_deref() == Some(innocent.as_os_str().as_encoded_bytes())),
        "a row names the innocent file"
    );
    assert_disqualified_through(&out, &f.policy(""), "path");
}
