//! `aet run` with a sandbox, as root against real bubblewrap: a view that does not match its spec
//! stops the run, the monitor records bwrap and the agent, the probes, the network, the exact argv,
//! io_uring.

use std::{fs, process::Command};

use aet_tests::*;

#[path = "common/sandbox.rs"]
#[allow(dead_code)]
mod common;
use common::*;

#[test]
fn a_view_that_does_not_match_the_spec_stops_the_run_before_the_agent_starts() {
    let f = Fixture::new();
    let spec = f.spec(&f.seed());
    let marker = f.p("ws/agent-ran");
    let out = aet()
        .args(["sandbox", "run"])
        .arg(&spec)
        .arg("--")
        .arg("touch")
        .arg(&marker)
        .env("AET_DEBUG_SANDBOX_SKIP_MASKS", "1")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("deny[0]") && err.contains("with content"),
        "{err}"
    );
    assert!(err.contains("mask_files[0]"), "{err}");
    assert!(!marker.exists(), "the agent ran in an unverified sandbox");

    // Under the monitor: same refusal, and the record says why.
    let run_dir = f.p("run");
    let r = aet()
        .args(["run", "--out"])
        .arg(&run_dir)
        .arg("--sandbox")
        .arg(&spec)
        .arg("--")
        .arg("touch")
        .arg(&marker)
        .env("AET_DEBUG_SANDBOX_SKIP_MASKS", "1")
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(125), "{}", text(&r.stderr));
    assert!(!marker.exists());
    let m = meta(&run_dir.join("ledger.arrow"));
    let sb: serde_json::Value = serde_json::from_str(&m["aet.sandbox"]).unwrap();
    assert_eq!(sb["verified"], false);
    assert!(
        sb["report"]["failures"][0]
            .as_str()
            .unwrap()
            .contains("deny[0]")
    );
}

#[test]
fn aet_run_with_a_sandbox_records_bwrap_and_the_agent() {
    let f = Fixture::new();
    let spec = f.spec(&f.seed());
    let key = f.p("repo/inputs/answers/key.txt");
    let run_dir = f.p("run");
    let r = aet()
        .args(["run", "--out"])
        .arg(&run_dir)
        .arg("--sandbox")
        .arg(&spec)
        .arg("--")
        .args(["sh", "-c"])
        .arg(format!(
            "cat {} > /dev/null; cat {} || true; echo done > result.txt",
            f.s("repo/inputs/data.txt"),
            key.display()
        ))
        .env("SOME_API_TOKEN", "leak-me")
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
    let ledger = run_dir.join("ledger.arrow");
    assert_complete(&ledger);
    let m = meta(&ledger);
    let sb: serde_json::Value = serde_json::from_str(&m["aet.sandbox"]).unwrap();
    assert_eq!(sb["verified"], true, "{sb}");
    let names: Vec<&str> = sb["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(!names.contains(&"SOME_API_TOKEN"), "{names:?}");
    assert!(sb["env_removed"].to_string().contains("SOME_API_TOKEN"));
    assert!(!m["aet.sandbox"].contains("leak-me"));
    let rows = rows(&ledger);
    // bwrap's own set-up is in the record (its mounts), and so is the agent.
    assert!(rows.iter().any(|x| x.comm == "bwrap" && x.kind == "mount"));
    let tried: Vec<_> = rows_with_path(&rows, &key)
        .into_iter()
        .filter(|x| x.kind == "open" && x.comm == "cat")
        .collect();
    assert_eq!(
        tried.len(),
        1,
        "the agent's attempt at the masked key is recorded"
    );
    assert_eq!(tried[0].errno.as_deref(), Some("ENOENT"));
    let data = f.p("repo/inputs/data.txt");
    assert!(
        rows_with_path(&rows, &data)
            .iter()
            .any(|x| x.kind == "open" && x.ret.is_some_and(|r| r >= 0))
    );
    assert!(f.p("ws/result.txt").exists());
}

#[test]
fn probes_show_what_the_agent_can_reach() {
    let f = Fixture::new();
    let spec = f.spec(&f.seed());
    let out = aet()
        .args(["sandbox", "probe"])
        .arg(&spec)
        .arg("--path")
        .arg(f.p("repo/inputs/answers"))
        .arg("--path")
        .arg(f.p("repo/inputs/answers/key.txt"))
        .arg("--path")
        .arg(f.p("repo/inputs/golden.yaml"))
        .arg("--path")
        .arg(f.p("repo/inputs/data.txt"))
        .arg("--path")
        .arg(f.p("ws"))
        .arg("--path")
        .arg("/root")
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |i: usize| {
        let r = &v[i];
        (
            r["stat"].as_str().unwrap().to_owned(),
            r["read"].as_str().unwrap().to_owned(),
            r["write"].as_str().unwrap().to_owned(),
            r["list"].as_str().unwrap().to_owned(),
        )
    };
    let s = |a: &str, b: &str, c: &str, d: &str| (a.into(), b.into(), c.into(), d.into());
    assert_eq!(row(0), s("dir", "ok", "EROFS", "0 entries"));
    assert_eq!(row(1).0, "ENOENT");
    // The mask is read-only twice over: its mode and its mount.
    assert!(
        ["EROFS", "EACCES"].contains(&row(2).2.as_str()),
        "{:?}",
        row(2)
    );
    assert_eq!(
        (row(2).0, row(2).1, row(2).3),
        ("file".into(), "ok".into(), "-".into())
    );
    assert_eq!(row(3), s("file", "ok", "EROFS", "-"));
    assert_eq!(row(4).2, "ok", "the workspace is writable");
    assert_eq!(row(5).0, "ENOENT", "the host's /root is not in the view");
    // Probing left nothing behind in the workspace.
    assert_eq!(fs::read_dir(f.p("ws")).unwrap().count(), 0);

    let table = aet()
        .args(["sandbox", "probe"])
        .arg(&spec)
        .arg("--path")
        .arg(f.p("repo/inputs/answers"))
        .output()
        .unwrap();
    let t = text(&table.stdout);
    assert!(
        t.starts_with("probed as uid 0 (unchanged); no capabilities"),
        "{t}"
    );
    assert!(t.lines().nth(1).unwrap().starts_with("stat"), "{t}");
    assert!(t.contains("EROFS") && t.contains("0 entries"), "{t}");
}

#[test]
fn network_false_gives_the_agent_only_its_own_loopback() {
    let f = Fixture::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let connect = format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'");
    let mut e = f.seed();
    e.insert("dns", "false".into());
    e.insert("network", "false".into());
    let off = outcomes(&f.spec(&e), &[("connect", connect.clone())]);
    assert_outcomes(&off, &[("connect", "fail")]);
    let on = outcomes(&f.spec(&f.seed()), &[("connect", connect)]);
    assert_outcomes(&on, &[("connect", "ok")]);
}

#[test]
fn argv_prints_the_exact_bwrap_command_line() {
    let f = Fixture::new();
    let spec = f.spec(&f.seed());
    let out = aet()
        .args(["sandbox", "argv"])
        .arg(&spec)
        .args(["--", "sh", "-c", "make test"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines[0], "bwrap");
    assert_eq!(lines[lines.len() - 3..], ["sh", "-c", "make test"]);
    let at = |seq: &[&str]| {
        lines
            .windows(seq.len())
            .position(|w| w.iter().zip(seq).all(|(a, b)| a == b))
            .unwrap_or_else(|| panic!("{seq:?} missing"))
    };
    at(&["--die-with-parent"]);
    at(&["--new-session"]);
    at(&["--unshare-pid"]);
    let allow = at(&["--ro-bind", &f.s("repo/inputs"), &f.s("repo/inputs")]);
    let deny = at(&["--tmpfs", &f.s("repo/inputs/answers"), "--remount-ro"]);
    let mask = at(&[
        "--ro-bind",
        "/run/aet/empty",
        &f.s("repo/inputs/golden.yaml"),
    ]);
    let rw = at(&["--bind", &f.s("state"), &f.s("state")]);
    // Grants before masks, whatever their depth.
    assert!(allow < deny && rw < deny && deny < mask);
    at(&["--unsetenv", "CLAUDE_CODE_SSE_PORT"]);
    at(&["--chdir", &f.s("ws")]);

    // Running the printed command line by hand gives the same view (without the stage).
    let mut args = lines[1..lines.len() - 3].to_vec();
    assert_eq!(args.pop().as_deref(), Some("--"));
    let hand = Command::new("bwrap")
        .args(&args)
        .args(["--", "sh", "-c"])
        .arg(format!("ls -A {}", f.s("repo/inputs/answers")))
        .output()
        .unwrap();
    assert!(hand.status.success(), "{}", text(&hand.stderr));
    assert_eq!(text(&hand.stdout), "");
}

/// io_uring is closed in the sandbox by default (a seccomp filter: EPERM), so a run that tries it
/// still has a complete record; `io_uring = "allow"` opens it, and the record is incomplete.
#[test]
fn io_uring_is_closed_in_the_sandbox_unless_the_spec_allows_it() {
    let f = Fixture::new();
    let uring = helper("uring_open");
    let data = f.p("repo/inputs/data.txt");
    let run = |extra: Option<(&'static str, &str)>, name: &str| {
        let mut entries = f.seed();
        entries.insert(
            "extra_binds",
            format!("[\"{}\"]", uring.parent().unwrap().display()),
        );
        if let Some((k, v)) = extra {
            entries.insert(k, v.to_owned());
        }
        let spec = f.spec(&entries);
        let out = f.p(name);
        let r = aet()
            .args(["run", "--out"])
            .arg(&out)
            .arg("--sandbox")
            .arg(&spec)
            .arg("--")
            .arg(&uring)
            .arg(&data)
            .output()
            .unwrap();
        (r, out.join("ledger.arrow"))
    };
    let (closed, ledger) = run(None, "closed");
    assert_eq!(closed.status.code(), Some(1), "{}", text(&closed.stderr));
    assert!(
        text(&closed.stderr).contains("io_uring_setup: Operation not permitted"),
        "{}",
        text(&closed.stderr)
    );
    assert!(
        text(&closed.stderr).contains("io_uring closed"),
        "{}",
        text(&closed.stderr)
    );
    assert_complete(&ledger);
    let rows = rows(&ledger);
    let setup = rows
        .iter()
        .find(|x| x.syscall.as_deref() == Some("io_uring_setup"))
        .expect("the attempt is recorded");
    assert_eq!(setup.errno.as_deref(), Some("EPERM"));
    let sb: serde_json::Value = serde_json::from_str(&meta(&ledger)["aet.sandbox"]).unwrap();
    assert!(sb.to_string().contains("io_uring_setup"), "{sb}");

    let (open, ledger) = run(Some(("io_uring", "\"allow\"")), "open");
    assert_eq!(open.status.code(), Some(0), "{}", text(&open.stderr));
    let m = meta(&ledger);
    assert_eq!(m["aet.complete"], "false");
    assert!(m["aet.incomplete_reasons"].contains("io_uring"));
}
