//! The agent identity, as root with real processes: the uid/gid drop and its read-back, the
//! grader root, the environment, the workspace hand-over, the teardown, and all of it together
//! with the sandbox and the monitor.

use std::{
    fs,
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    process::{Command, Output},
};

use aet_tests::*;

/// A scratch directory the agent can traverse, with a workspace and a grader root.
struct Fixture {
    tree: Tree,
}

impl std::ops::Deref for Fixture {
    type Target = Tree;
    fn deref(&self) -> &Tree {
        &self.tree
    }
}

impl Fixture {
    fn new() -> Self {
        let tree = Tree::new();
        // tempfile makes it 0700: the agent must be able to reach its workspace.
        fs::set_permissions(&tree.root, fs::Permissions::from_mode(0o755)).unwrap();
        tree.file("ws/task.md", "do the task\n")
            .file("grader/expected.txt", "EXPECTED\n");
        fs::set_permissions(tree.p("grader"), fs::Permissions::from_mode(0o700)).unwrap();
        Self { tree }
    }

    /// `aet run --identity [ID] --workspace ws --grader-root grader [extra] -- sh -c SCRIPT`.
    fn run(&self, id: Option<&str>, extra: &[&str], script: &str) -> (Output, PathBuf) {
        let out = self.p(&format!("run-{}", unique()));
        let mut c = aet();
        c.args(["run", "--out"]).arg(&out);
        match id {
            Some(i) => c.arg(format!("--identity={i}")),
            None => c.arg("--identity"),
        };
        c.arg("--workspace")
            .arg(self.p("ws"))
            .arg("--grader-root")
            .arg(self.p("grader"))
            .args(extra)
            .args(["--", "sh", "-c", script]);
        (c.output().unwrap(), out)
    }
}

fn identity_meta(run_dir: &Path) -> serde_json::Value {
    serde_json::from_str(&meta(&run_dir.join("ledger.arrow"))["aet.identity"]).unwrap()
}

/// The uid the run's agent was given from the pool (2000-2999: the first free one, so not 2000
/// when other runs hold it), as its ledger records it.
fn pool_uid(run_dir: &Path) -> u32 {
    let uid = identity_meta(run_dir)["uid"]
        .as_u64()
        .expect("the identity names its uid") as u32;
    assert!((2000..=2999).contains(&uid), "uid {uid} is not the pool's");
    uid
}

/// Live (non-zombie) processes of a uid.
fn live_processes_of(uid: u32) -> Vec<u32> {
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                !s.contains("State:\tZ")
                    && s.lines()
                        .find_map(|l| l.strip_prefix("Uid:"))
                        .is_some_and(|v| v.split_whitespace().any(|x| x == uid.to_string()))
            })
        })
        .collect()
}

#[test]
fn the_agent_cannot_read_the_grader_root_and_the_denied_attempt_is_recorded() {
    let f = Fixture::new();
    let expected = f.p("grader/expected.txt");
    let (out, run) = f.run(None, &[], &format!("cat {}", expected.display()));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "cat fails: {err}");
    assert!(err.contains("Permission denied"), "{err}");
    let ledger = run.join("ledger.arrow");
    assert_complete(&ledger);
    let rows = rows(&ledger);
    let tried: Vec<_> = rows_with_path(&rows, &expected)
        .into_iter()
        .filter(|r| r.kind == "open")
        .collect();
    assert_eq!(tried.len(), 1, "the attempt is in the ledger");
    assert_eq!(tried[0].errno.as_deref(), Some("EACCES"));
    let uid = pool_uid(&run);
    assert_eq!(tried[0].uid, uid);
    assert_eq!(tried[0].gid, uid);
    assert_eq!(tried[0].comm, "cat");
    let id = identity_meta(&run);
    assert_eq!(id["verified"], true, "{id}");
    assert_eq!(id["grader_root"]["path"], f.s("grader"));
}

#[test]
fn the_identity_is_dropped_completely_and_read_back() {
    let f = Fixture::new();
    let script = "id -u; id -g; id -G; grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status; echo HOME=$HOME";
    for (id, ids) in [(None, None), (Some("2345:2346"), Some((2345, 2346)))] {
        let (out, run) = f.run(id, &[], script);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        // The pool's uid has a group of the same number.
        let (uid, gid) = ids.unwrap_or_else(|| (pool_uid(&run), pool_uid(&run)));
        let o = text(&out.stdout);
        let lines: Vec<&str> = o.lines().collect();
        assert_eq!(lines[0], uid.to_string());
        assert_eq!(lines[1], gid.to_string());
        assert_eq!(lines[2], gid.to_string(), "no supplementary groups");
        for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert!(
                o.contains(&format!("{cap}:\t0000000000000000")),
                "{cap}: {o}"
            );
        }
        assert!(o.contains("NoNewPrivs:\t1"), "{o}");
        assert!(
            o.contains(&format!("HOME={}", run.join("agent-home").display())),
            "{o}"
        );
        let m = identity_meta(&run);
        assert!(
            m["privileges"]
                .as_str()
                .unwrap()
                .contains(&format!("uid {uid} gid {gid}")),
            "{m}"
        );
        let home = fs::metadata(run.join("agent-home")).unwrap();
        assert_eq!(
            (home.uid(), home.gid(), home.mode() & 0o777),
            (uid, gid, 0o700)
        );
    }
}

#[test]
fn a_failed_drop_is_caught_by_the_read_back_and_nothing_runs() {
    let f = Fixture::new();
    let marker = f.p("ws/agent-ran");
    let (out, run) = f.run(None, &[], &format!("touch {}", marker.display()));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(marker.exists(), "control: the command runs normally");
    fs::remove_file(&marker).unwrap();
    assert_eq!(identity_meta(&run)["verified"], true);
    let out = aet()
        .args(["run", "--out"])
        .arg(f.p("run-faulty"))
        .arg("--identity")
        .arg("--workspace")
        .arg(f.p("ws"))
        .args(["--", "touch"])
        .arg(&marker)
        .env("AET_DEBUG_SKIP_SETUID", "1")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("Uid is 0"),
        "the read-back names the mismatch: {err}"
    );
    assert!(!marker.exists(), "the command ran with the wrong identity");
    let m = identity_meta(&f.p("run-faulty"));
    assert_eq!(m["verified"], false);
}

#[test]
fn a_setuid_root_binary_stays_unprivileged() {
    let f = Fixture::new();
    let bin = f.p("suid_probe");
    fs::copy(helper("suid_probe"), &bin).unwrap();
    std::os::unix::fs::chown(&bin, Some(0), Some(0)).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o4755)).unwrap();
    // Control: without no_new_privs the setuid bit takes effect for uid 2000.
    let control = Command::new("setpriv")
        .args(["--reuid=2000", "--regid=2000", "--clear-groups"])
        .arg(&bin)
        .output()
        .unwrap();
    assert!(
        text(&control.stdout).contains("euid=0"),
        "control: {}",
        text(&control.stdout)
    );
    let (out, run) = f.run(None, &[], &bin.display().to_string());
    let o = text(&out.stdout);
    let uid = pool_uid(&run);
    assert!(o.contains(&format!("ruid={uid} euid={uid}")), "{o}");
    assert!(o.contains("shadow=Permission denied"), "{o}");
    assert!(o.contains("CapEff:\t0000000000000000"), "{o}");
}

#[test]
fn the_agent_cannot_signal_or_trace_the_monitor_or_write_the_ledger() {
    let f = Fixture::new();
    let seize = f.p("ptrace_seize");
    fs::copy(helper("ptrace_seize"), &seize).unwrap();
    let out_dir = f.p("run-x");
    let ledger = out_dir.join("ledger.arrow");
    let script = format!(
        "kill -0 $PPID && echo signal=ok || echo signal=denied; {} $PPID; \
         echo x >> {} && echo ledger=written || echo ledger=denied",
        seize.display(),
        ledger.display()
    );
    let out = aet()
        .args(["run", "--out"])
        .arg(&out_dir)
        .arg("--identity")
        .arg("--workspace")
        .arg(f.p("ws"))
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    let o = text(&out.stdout);
    assert!(o.contains("signal=denied"), "{o}");
    assert!(o.contains("EPERM"), "{o}");
    assert!(o.contains("ledger=denied"), "{o}{}", text(&out.stderr));
    assert_complete(&ledger);
}

#[test]
fn credentials_do_not_reach_the_agent_and_only_names_are_recorded() {
    let f = Fixture::new();
    let config = f.p("run.toml");
    fs::write(
        &config,
        format!(
            "workspace = {:?}\n[identity]\npass_env = [\"ANTHROPIC_API_KEY\"]\ngrader_root = {:?}\n",
            f.s("ws"),
            f.s("grader")
        ),
    )
    .unwrap();
    let run = f.p("run-env");
    let out = aet()
        .args(["run", "--out"])
        .arg(&run)
        .arg("--config")
        .arg(&config)
        .args(["--", "sh", "-c", "env"])
        .env("SOME_API_TOKEN", "leak-me")
        .env("AWS_SECRET_ACCESS_KEY", "leak-me")
        .env("EDITOR", "not-on-the-allow-list")
        .env("ANTHROPIC_API_KEY", "named")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let env = text(&out.stdout);
    assert!(!env.contains("leak-me"), "{env}");
    assert!(!env.contains("EDITOR"), "{env}");
    assert!(env.contains("ANTHROPIC_API_KEY=named"), "{env}");
    assert!(env.contains("PATH="), "{env}");
    let m = identity_meta(&run);
    let names = m["env"].to_string();
    assert!(names.contains("ANTHROPIC_API_KEY") && !names.contains("SOME_API_TOKEN"));
    assert!(m["env_removed"].to_string().contains("SOME_API_TOKEN"));
    assert!(!meta(&run.join("ledger.arrow"))["aet.identity"].contains("leak-me"));
}

#[test]
fn a_detached_daemon_is_gone_after_teardown_and_recorded() {
    let f = Fixture::new();
    let (out, run) = f.run(
        None,
        &["--grace", "0.2"],
        "setsid sh -c 'sleep 300' > /dev/null 2>&1 < /dev/null & echo started",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        live_processes_of(pool_uid(&run)).is_empty(),
        "a process of the agent survived"
    );
    let killed: serde_json::Value =
        serde_json::from_str(&meta(&run.join("ledger.arrow"))["aet.killed"]).unwrap();
    assert!(
        killed
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["comm"] == "sleep" || k["comm"] == "sh"),
        "{killed}"
    );
}

#[test]
fn files_left_outside_the_workspace_are_listed() {
    let f = Fixture::new();
    let left = PathBuf::from(format!(
        "/tmp/aet-left-by-agent-{}",
        unique() + std::process::id() as u64 * 1000
    ));
    let (out, run) = f.run(None, &[], &format!("touch {}", left.display()));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let m = identity_meta(&run);
    assert!(
        m["leftover_files"]
            .to_string()
            .contains(left.to_str().unwrap()),
        "{m}"
    );
    let _ = fs::remove_file(&left);
}

#[test]
fn a_workspace_symlink_to_etc_shadow_is_handed_over_without_touching_shadow() {
    let f = Fixture::new();
    let before = fs::metadata("/etc/shadow").unwrap();
    std::os::unix::fs::symlink("/etc/shadow", f.p("ws/shadow-link")).unwrap();
    fs::create_dir_all(f.p("ws/sub")).unwrap();
    std::os::unix::fs::symlink("/etc", f.p("ws/sub/etc-link")).unwrap();
    // A hard link to a file outside the workspace is left alone too.
    fs::write(f.p("outside.txt"), "root's\n").unwrap();
    fs::hard_link(f.p("outside.txt"), f.p("ws/hard-link.txt")).unwrap();
    let (out, run) = f.run(None, &[], "true");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let after = fs::metadata("/etc/shadow").unwrap();
    assert_eq!(
        (after.uid(), after.gid(), after.mode()),
        (before.uid(), before.gid(), before.mode()),
        "/etc/shadow changed"
    );
    assert_eq!(fs::metadata("/etc").unwrap().uid(), 0);
    let uid = pool_uid(&run);
    let link = fs::symlink_metadata(f.p("ws/shadow-link")).unwrap();
    assert_eq!(link.uid(), uid, "the link itself is the agent's");
    assert_eq!(fs::metadata(f.p("ws/task.md")).unwrap().uid(), uid);
    assert_eq!(fs::metadata(f.p("ws/sub")).unwrap().uid(), uid);
    assert_eq!(fs::metadata(f.p("outside.txt")).unwrap().uid(), 0);
    let m = identity_meta(&run);
    assert!(
        m["workspace_handover"]["skipped"]
            .to_string()
            .contains("hard-link.txt"),
        "{m}"
    );
}

#[test]
fn a_grader_root_that_is_not_protected_stops_the_run() {
    let f = Fixture::new();
    let marker = f.p("ws/agent-ran");
    let touch = format!("touch {}", marker.display());
    // Readable by others.
    fs::set_permissions(f.p("grader"), fs::Permissions::from_mode(0o755)).unwrap();
    let (out, _) = f.run(None, &[], &touch);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains(&f.s("grader")) && err.contains("mode 0755, not 0700"),
        "{err}"
    );
    assert!(!marker.exists());
    // Not root's.
    std::os::unix::fs::chown(f.p("grader"), Some(1234), None).unwrap();
    fs::set_permissions(f.p("grader"), fs::Permissions::from_mode(0o700)).unwrap();
    let (out, _) = f.run(None, &[], &touch);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("owned by uid 1234, not root"), "{err}");
    assert!(!marker.exists());
    // Fixed on request.
    let (out, _) = f.run(None, &["--fix-grader-root"], &touch);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let g = fs::metadata(f.p("grader")).unwrap();
    assert_eq!((g.uid(), g.mode() & 0o777), (0, 0o700));
    assert!(marker.exists());
    // Inside the workspace: refused.
    fs::create_dir_all(f.p("ws/grading")).unwrap();
    fs::set_permissions(f.p("ws/grading"), fs::Permissions::from_mode(0o700)).unwrap();
    let out = aet()
        .args(["run", "--out"])
        .arg(f.p("run-in-ws"))
        .arg("--identity")
        .arg("--workspace")
        .arg(f.p("ws"))
        .arg("--grader-root")
        .arg(f.p("ws/grading"))
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("is inside") && err.contains("granted"),
        "{err}"
    );
}

#[test]
fn a_bad_run_config_is_refused_naming_file_and_line() {
    let f = Fixture::new();
    let config = f.p("run.toml");
    fs::write(&config, "[identity]\nuid = 2000\ngrader = \"/x\"\n").unwrap();
    let out = aet()
        .args(["run", "--out"])
        .arg(f.p("run-bad"))
        .arg("--config")
        .arg(&config)
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains(config.to_str().unwrap()), "{err}");
    assert!(err.contains("line 3") && err.contains("grader"), "{err}");
    // And an identity of root is refused.
    let out = aet()
        .args(["run", "--out"])
        .arg(f.p("run-root"))
        .arg("--identity=0")
        .arg("--workspace")
        .arg(f.p("ws"))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("must not be 0"));
}

#[test]
fn sandbox_identity_and_monitor_together() {
    let f = Fixture::new();
    fs::create_dir_all(f.p("repo/inputs/answers")).unwrap();
    fs::write(f.p("repo/inputs/answers/key.txt"), "SECRET\n").unwrap();
    fs::write(f.p("repo/inputs/data.txt"), "data\n").unwrap();
    let spec = f.p("sandbox.toml");
    fs::write(
        &spec,
        format!(
            "workspace = {:?}\nallow = [{:?}]\ndeny = [{:?}]\n",
            f.s("ws"),
            f.s("repo/inputs"),
            f.s("repo/inputs/answers")
        ),
    )
    .unwrap();
    let run = f.p("run-all");
    let out = aet()
        .args(["run", "--out"])
        .arg(&run)
        .arg("--sandbox")
        .arg(&spec)
        .arg("--identity")
        .arg("--grader-root")
        .arg(f.p("grader"))
        .args(["--", "sh", "-c"])
        .arg(format!(
            "id -u; cat {}; cat {} || true; test -e {} || echo grader-invisible; echo ok > result.txt; touch $HOME/state",
            f.s("repo/inputs/data.txt"),
            f.s("repo/inputs/answers/key.txt"),
            f.s("grader")
        ))
        .env("SOME_API_TOKEN", "leak-me")
        .output()
        .unwrap();
    let o = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{o}{}", text(&out.stderr));
    let uid = pool_uid(&run);
    assert!(o.starts_with(&format!("{uid}\ndata\n")), "{o}");
    assert!(o.contains("grader-invisible"), "{o}");
    assert!(!o.contains("SECRET"));
    assert_eq!(fs::read_to_string(f.p("ws/result.txt")).unwrap(), "ok\n");
    assert!(run.join("agent-home/state").exists());
    let ledger = run.join("ledger.arrow");
    assert_complete(&ledger);
    let m = meta(&ledger);
    let sb: serde_json::Value = serde_json::from_str(&m["aet.sandbox"]).unwrap();
    let id: serde_json::Value = serde_json::from_str(&m["aet.identity"]).unwrap();
    assert_eq!(sb["verified"], true);
    assert_eq!(id["verified"], true);
    let rows = rows(&ledger);
    let key = f.p("repo/inputs/answers/key.txt");
    let tried: Vec<_> = rows_with_path(&rows, &key)
        .into_iter()
        .filter(|r| r.kind == "open" && r.comm == "cat")
        .collect();
    assert_eq!(tried.len(), 1);
    assert_eq!(tried[0].uid, uid);
}

/// Two runs at once with an agent identity each get a uid of their own from the pool; the second
/// run's teardown leaves the first run's agent alone, which finishes normally; neither agent can
/// signal the other's processes; a uid named for one run is refused to another while it goes on.
#[test]
fn concurrent_runs_get_their_own_uids_and_never_touch_each_other() {
    let f = Fixture::new();
    for w in ["ws-a", "ws-b"] {
        fs::create_dir_all(f.p(w)).unwrap();
    }
    let out_a = f.p("run-a");
    // The first agent waits for the second run to be over, then finishes.
    let a = Attached::spawn(
        aet()
            .args(["run", "--out"])
            .arg(&out_a)
            .args(["--identity", "--workspace"])
            .arg(f.p("ws-a"))
            .args(["--", "sh", "-c"])
            .arg(format!(
                "echo $$ > {ws}/pid; while [ ! -e {root}/b-done ]; do sleep 0.05; done; \
                 echo finished > {ws}/done",
                ws = f.s("ws-a"),
                root = f.s(""),
            )),
    );
    let pid_file = f.p("ws-a/pid");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !pid_file.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the first agent did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid_a: u32 = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let uid_a = fs::metadata(format!("/proc/{pid_a}")).unwrap().uid();
    // The second agent tries to signal the first one's shell.
    let out_b = f.p("run-b");
    let b = aet()
        .args(["run", "--out"])
        .arg(&out_b)
        .args(["--identity", "--workspace"])
        .arg(f.p("ws-b"))
        .args(["--", "sh", "-c"])
        .arg(format!(
            "kill -CONT {pid_a} 2> {ws}/kill.err; echo $? > {ws}/kill.status",
            ws = f.s("ws-b")
        ))
        .output()
        .unwrap();
    assert_eq!(b.status.code(), Some(0), "{}", text(&b.stderr));
    fs::write(f.p("b-done"), "").unwrap();
    let (status, stderr) = a.wait();
    assert!(status.success(), "the first run's agent survived: {stderr}");
    assert_eq!(fs::read_to_string(f.p("ws-a/done")).unwrap(), "finished\n");
    let uid_b = identity_meta(&out_b)["uid"].as_u64().unwrap() as u32;
    assert_eq!(identity_meta(&out_a)["uid"].as_u64().unwrap() as u32, uid_a);
    assert_ne!(uid_a, uid_b, "each run has a uid of its own");
    assert!((2000..=2999).contains(&uid_a) && (2000..=2999).contains(&uid_b));
    assert_ne!(
        fs::read_to_string(f.p("ws-b/kill.status")).unwrap().trim(),
        "0"
    );
    assert!(
        fs::read_to_string(f.p("ws-b/kill.err"))
            .unwrap()
            .contains("not permitted"),
        "the second agent could not signal the first"
    );
    // The teardown of the second run killed none of the first run's processes.
    assert!(
        identity_meta(&out_b)["killed_after_teardown"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // A uid named explicitly is refused while another run holds it.
    let hold = Attached::spawn(
        aet()
            .args(["run", "--out"])
            .arg(f.p("run-c"))
            .args(["--identity=2999", "--workspace"])
            .arg(f.p("ws-a"))
            .args(["--", "sleep", "2"]),
    );
    let (o, _) = f.run(Some("2999"), &[], "true");
    assert_eq!(o.status.code(), Some(125), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("uid 2999 is the agent identity of another aet run"),
        "{}",
        text(&o.stderr)
    );
    let (status, stderr) = hold.wait();
    assert!(status.success(), "{stderr}");
}

/// Without a sandbox the agent reaches its home through the host's directories: the default
/// home under the run directory works (written by the agent, entered by no other pool uid),
/// also when the run directory was made private beforehand; a private directory above the
/// workspace is named and nothing runs.
#[test]
fn without_a_sandbox_the_agent_writes_its_own_home_and_no_other_uid_enters_it() {
    let f = Fixture::new();
    let script = "ls -ld \"$HOME\" >/dev/null && touch \"$HOME/x\" && echo home-ok";
    // The agent passes through the run directory to its home, and reads none of aet's files
    // there (the ledger being written, a file an earlier phase left).
    let peek = "cat \"$HOME/../ledger.arrow\" >/dev/null 2>&1 && echo read-ledger; \
                cat \"$HOME/../notes.txt\" >/dev/null 2>&1 && echo read-notes; \
                ls \"$HOME/..\" >/dev/null 2>&1 && echo listed-run; exit 0";
    let script_and_peek = format!("{script}; {peek}");
    let run = f.p("run-home");
    fs::create_dir(&run).unwrap();
    fs::write(run.join("notes.txt"), "aet's").unwrap();
    fs::set_permissions(run.join("notes.txt"), fs::Permissions::from_mode(0o644)).unwrap();
    let out = aet()
        .args(["run", "-q", "--identity", "--workspace"])
        .arg(f.p("ws"))
        .arg("--out")
        .arg(&run)
        .arg("--grader-root")
        .arg(f.p("grader"))
        .args(["--", "sh", "-c", &script_and_peek])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "home-ok", "{}", text(&out.stderr));
    assert_eq!(
        fs::metadata(run.join("ledger.arrow")).unwrap().mode() & 0o007,
        0,
        "the ledger is closed to others"
    );
    let home = run.join("agent-home");
    let uid = pool_uid(&run);
    let m = fs::metadata(home.join("x")).unwrap();
    assert_eq!((m.uid(), m.gid()), (uid, uid));
    // Searchable by others, listable by none.
    assert_eq!(fs::metadata(&run).unwrap().mode() & 0o007, 0o001);
    let other = uid + 1;
    let peek = Command::new("setpriv")
        .args(["--reuid", &other.to_string(), "--regid", &other.to_string()])
        .args(["--clear-groups", "--", "ls"])
        .arg(&home)
        .output()
        .unwrap();
    assert!(
        !peek.status.success(),
        "uid {other} listed {}",
        home.display()
    );
    assert!(
        text(&peek.stderr).contains("Permission denied"),
        "{}",
        text(&peek.stderr)
    );

    // A run directory made 0700 before the run.
    let pre = f.p("private-run");
    fs::create_dir(&pre).unwrap();
    fs::set_permissions(&pre, fs::Permissions::from_mode(0o700)).unwrap();
    let o = aet()
        .args(["run", "-q", "--identity", "--workspace"])
        .arg(f.p("ws"))
        .arg("--out")
        .arg(&pre)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap();
    assert_eq!(text(&o.stdout).trim(), "home-ok", "{}", text(&o.stderr));

    // A workspace under a directory the agent cannot pass through.
    let locked = f.p("locked");
    fs::create_dir_all(locked.join("ws")).unwrap();
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o700)).unwrap();
    // Where the agent could leave a mark, had it run.
    fs::create_dir(f.p("drop")).unwrap();
    fs::set_permissions(f.p("drop"), fs::Permissions::from_mode(0o777)).unwrap();
    let marker = f.p("drop/ran");
    let o = aet()
        .args(["run", "-q", "--identity", "--workspace"])
        .arg(locked.join("ws"))
        .arg("--out")
        .arg(f.p("locked-run"))
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    let e = text(&o.stderr);
    assert!(
        e.contains(&format!("{} is mode 0700", locked.display())) && e.contains("--sandbox"),
        "{e}"
    );
    assert!(!marker.exists(), "the command ran");
}
