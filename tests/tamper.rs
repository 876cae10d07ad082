//! A root agent without a sandbox tries to blind the monitor: it moves itself to another cgroup,
//! asks the daemon (when there is one) to untrack it from a connection of its own, and deletes
//! its own entry from the tracked-task map with bpftool. The daemon refuses the untrack, and the
//! record says it is incomplete (the cgroup move and the bpf() calls named), never "complete".

use std::{
    fs,
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use aet_tests::*;

/// A cgroup v2 outside any run, removed when dropped.
struct Elsewhere(PathBuf);

impl Elsewhere {
    fn new() -> Self {
        let p = PathBuf::from(format!(
            "/sys/fs/cgroup/unified/aet-test-elsewhere-{}",
            unique()
        ));
        fs::create_dir(&p).unwrap();
        Self(p)
    }
}

impl Drop for Elsewhere {
    fn drop(&mut self) {
        // Whatever is left in it is moved back to the root, then it goes.
        if let Ok(pids) = fs::read_to_string(self.0.join("cgroup.procs")) {
            for pid in pids.lines() {
                let _ = fs::write("/sys/fs/cgroup/unified/cgroup.procs", pid);
            }
        }
        let _ = fs::remove_dir(&self.0);
    }
}

/// One request on a connection of its own, as any root process could send it: the reply line
/// (null when the daemon does not answer).
fn raw_request(socket: &Path, request: serde_json::Value) -> serde_json::Value {
    let exchange = || -> std::io::Result<String> {
        let mut s = UnixStream::connect(socket)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut r = BufReader::new(s.try_clone()?);
        let mut line = String::new();
        for req in [
            serde_json::json!({"op": "hello", "version": aet_monitor::daemon::protocol::VERSION}),
            request,
        ] {
            s.write_all(format!("{req}\n").as_bytes())?;
            line.clear();
            r.read_line(&mut line)?;
        }
        Ok(line)
    };
    exchange()
        .ok()
        .and_then(|l| serde_json::from_str(&l).ok())
        .unwrap_or(serde_json::Value::Null)
}

fn wait_for(p: &Path) {
    let t = Instant::now();
    while !p.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{} never came",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_root_agent_that_leaves_its_scope_and_untracks_itself_makes_the_record_incomplete() {
    let dir = tempdir();
    let d = dir.path();
    let elsewhere = Elsewhere::new();
    let (moved, go, after) = (d.join("moved"), d.join("go"), d.join("after-untrack"));
    let script = d.join("agent.py");
    fs::write(
        &script,
        format!(
            r#"import json, os, subprocess, time
pid = os.getpid()
open({cg:?} + "/cgroup.procs", "w").write(str(pid))
open({moved:?}, "w").write(str(pid))
deadline = time.time() + 60
while not os.path.exists({go:?}) and time.time() < deadline:
    time.sleep(0.02)
open({after:?}, "w").write("still recorded")
maps = json.loads(subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True).stdout)
key = ["0x%02x" % b for b in pid.to_bytes(4, "little")]
for m in maps:
    if m.get("name") == "TRACKED":
        subprocess.run(["bpftool", "map", "delete", "id", str(m["id"]), "key", *key])
open("/etc/hostname").read()
"#,
            cg = elsewhere.0.display().to_string(),
            moved = moved.display().to_string(),
            go = go.display().to_string(),
            after = after.display().to_string(),
        ),
    )
    .unwrap();
    let out = d.join("run");
    let mut child = aet()
        .args(["run", "-q", "--out"])
        .arg(&out)
        .args(["--", "/usr/bin/python3"])
        .arg(&script)
        .spawn()
        .unwrap();
    wait_for(&moved);
    let pid: u32 = fs::read_to_string(&moved).unwrap().trim().parse().unwrap();
    // Another connection, serving no run, asks the daemon to untrack the agent.
    let reply = daemon_mode().then(|| {
        let socket = PathBuf::from(std::env::var_os("AET_SOCKET").unwrap());
        raw_request(&socket, serde_json::json!({"op": "untrack", "tid": pid}))
    });
    // The agent goes on whatever the reply was (nothing is left waiting if an assertion fails).
    fs::write(&go, "").unwrap();
    if let Some(reply) = reply {
        assert_eq!(reply["reply"], "error", "refused: {reply}");
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let ledger = out.join("ledger.arrow");
    // The agent stayed tracked after the untrack request (it was refused).
    assert!(
        !rows_with_path(&rows(&ledger), &after).is_empty(),
        "the write after the untrack request is missing"
    );
    let m = meta(&ledger);
    assert_eq!(m["aet.complete"], "false", "{m:?}");
    let reasons = &m["aet.incomplete_reasons"];
    for code in ["scope_left", "bpf_calls"] {
        assert!(
            reasons.contains(&format!("\"code\":\"{code}\"")),
            "{code}: {reasons}"
        );
    }
    let counters: serde_json::Value = serde_json::from_str(&m["aet.kernel_counters"]).unwrap();
    assert!(counters["scope_left"].as_u64().unwrap() >= 1, "{counters}");
    assert!(counters["bpf_calls"].as_u64().unwrap() >= 1, "{counters}");
    assert_audit_inconclusive(&out);
}

#[test]
fn moves_inside_the_runs_cgroup_and_runs_without_bpf_stay_complete() {
    let dir = tempdir();
    // A child cgroup of the run's own, as a container runtime makes with --cgroup-parent.
    let r = run_ok(
        dir.path(),
        &[
            "sh",
            "-c",
            "d=/sys/fs/cgroup/unified$(grep '^0::' /proc/self/cgroup | cut -d: -f3); \
             mkdir $d/inner && echo $$ > $d/inner/cgroup.procs && cat /etc/hostname >/dev/null \
             && echo $$ > $d/cgroup.procs && rmdir $d/inner",
        ],
    );
    assert_complete(&r.ledger());
    let counters: serde_json::Value =
        serde_json::from_str(&r.meta()["aet.kernel_counters"]).unwrap();
    assert_eq!(counters["scope_left"], 0, "{counters}");
    assert_eq!(counters["bpf_calls"], 0, "{counters}");
}
