//! The barrier (`aet run --policy P --mode enforce|shadow`): a Landlock ruleset built from the
//! policy's allow-lists, without its cheats and protected files; what it blocks is in the ledger
//! (EACCES) and in the audit as `blocked`; in shadow mode nothing is blocked and the audit lists
//! the same accesses as `would_block`. Real kernel, real Landlock, real bwrap.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

use aet_tests::*;

/// System paths every policy here grants (the shell, cat, their libraries).
const SYSTEM: &[&str] = &["/usr", "/etc", "/lib", "/lib64", "/bin", "/proc", "/dev"];

struct Task {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Task {
    fn new() -> Self {
        let dir = tempdir();
        let root = dir.path().to_owned();
        for d in ["task/src", "task/answers", "task/notes", "out", "outside"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        fs::write(root.join("task/README"), "the task\n").unwrap();
        fs::write(root.join("task/src/a.c"), "int main;\n").unwrap();
        fs::write(root.join("task/src/grader.py"), "GRADER\n").unwrap();
        fs::write(root.join("task/answers/key.txt"), "SECRET\n").unwrap();
        fs::write(root.join("task/answers/hint.txt"), "a hint\n").unwrap();
        fs::write(root.join("outside/secret.txt"), "OUTSIDE\n").unwrap();
        // A second name of the protected grader, where a path rule would not see it.
        fs::hard_link(
            root.join("task/src/grader.py"),
            root.join("task/notes/copy.py"),
        )
        .unwrap();
        Self { _dir: dir, root }
    }

    fn s(&self, rel: &str) -> String {
        self.root.join(rel).to_str().unwrap().to_owned()
    }

    /// A policy reading the system and the task, writing `out`, plus `extra` TOML.
    fn policy(&self, extra: &str) -> PathBuf {
        let mut read: Vec<String> = SYSTEM.iter().map(|s| format!("{s:?}")).collect();
        read.push(format!("{:?}", self.s("task")));
        let text = format!(
            "[allow]\nread = [{}]\nwrite = [{:?}, \"/dev/null\"]\n{extra}",
            read.join(", "),
            self.s("out")
        );
        let p = self.root.join(format!("policy-{}.toml", unique()));
        fs::write(&p, text).unwrap();
        p
    }

    fn run(&self, name: &str, policy: &Path, mode: &str, script: &str) -> Run {
        run_in(
            &self.root.join(name),
            &["--policy", policy.to_str().unwrap(), "--mode", mode],
            &["sh", "-c", script],
        )
    }
}

fn audit_of(run: &Run) -> serde_json::Value {
    serde_json::from_str(&fs::read_to_string(run.out.join("audit.json")).unwrap()).unwrap()
}

/// (access, path, outcome) of the audit's `blocked` list.
fn blocked(v: &serde_json::Value) -> BTreeSet<(String, String, String)> {
    v["blocked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["access"].as_str().unwrap().to_owned(),
                f["path"].as_str().unwrap().to_owned(),
                f["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn failed_opens<'a>(rows: &'a [LedgerRow], path: &str) -> Vec<&'a LedgerRow> {
    rows.iter()
        .filter(|r| {
            r.kind == "open"
                && r.resolved_path.as_deref().or(r.path.as_deref()) == Some(path.as_bytes())
                && r.ret == Some(-13)
        })
        .collect()
}

/// The script of the enforce and shadow tests: one allowed read and write, one read and one
/// write outside the lists.
fn outside_script(t: &Task) -> String {
    format!(
        "cat {readme}; cat {secret}; echo x > {new}; echo y > {ok}; true",
        readme = t.s("task/README"),
        secret = t.s("outside/secret.txt"),
        new = t.s("outside/new.txt"),
        ok = t.s("out/ok.txt"),
    )
}

#[test]
fn enforce_blocks_reads_and_writes_outside_the_lists_records_them_and_stays_clean() {
    let t = Task::new();
    let policy = t.policy("");
    let r = t.run("enforce", &policy, "enforce", &outside_script(&t));
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(r.stdout(), "the task\n", "{}", r.stderr());
    let err = r.stderr();
    assert_eq!(err.matches("Permission denied").count(), 2, "{err}");
    assert!(err.contains("fully enforced"), "{err}");
    assert!(!t.root.join("outside/new.txt").exists());
    assert_eq!(
        fs::read_to_string(t.root.join("out/ok.txt")).unwrap(),
        "y\n"
    );
    // Every denied access is in the ledger, with EACCES.
    let rows = r.rows();
    for p in ["outside/secret.txt", "outside/new.txt"] {
        let denied = failed_opens(&rows, &t.s(p));
        assert_eq!(denied.len(), 1, "{p}: {denied:#?}");
        assert_eq!(denied[0].errno.as_deref(), Some("EACCES"));
    }
    assert_complete(&r.ledger());
    let b: serde_json::Value = serde_json::from_str(&r.meta()["aet.barrier"]).unwrap();
    assert_eq!(b["mode"], "enforce");
    assert_eq!(b["enforced"], "fully enforced");
    assert!(b["abi"].as_i64().unwrap() >= 6, "{b}");
    // The audit lists them as blocked; nothing else happened, so the run is clean.
    let v = audit_of(&r);
    assert_eq!(
        blocked(&v),
        BTreeSet::from([
            (
                "read".into(),
                t.s("outside/secret.txt"),
                "blocked".to_owned()
            ),
            ("write".into(), t.s("outside/new.txt"), "blocked".to_owned()),
        ]),
        "{v:#}"
    );
    assert_eq!(v["verdict"], "clean", "{v:#}");
    assert_eq!(v["barrier"]["mode"], "enforce");
}

#[test]
fn shadow_blocks_nothing_and_lists_the_same_accesses_as_would_be_blocked() {
    let t = Task::new();
    let policy = t.policy("");
    let script = outside_script(&t);
    let enforce = t.run("enforce", &policy, "enforce", &script);
    assert_eq!(enforce.code(), 0, "{}", enforce.stderr());
    fs::remove_file(t.root.join("out/ok.txt")).unwrap();
    let shadow = t.run("shadow", &policy, "shadow", &script);
    assert_eq!(shadow.code(), 0, "{}", shadow.stderr());
    // Nothing was blocked.
    assert_eq!(
        shadow.stdout(),
        "the task\nOUTSIDE\n",
        "{}",
        shadow.stderr()
    );
    assert!(!shadow.stderr().contains("Permission denied"));
    assert_eq!(
        fs::read_to_string(t.root.join("outside/new.txt")).unwrap(),
        "x\n"
    );
    let b: serde_json::Value = serde_json::from_str(&shadow.meta()["aet.barrier"]).unwrap();
    assert_eq!(b["mode"], "shadow");
    assert!(b["enforced"].is_null(), "{b}");
    // The same accesses, as "would be blocked".
    let strip = |s: BTreeSet<(String, String, String)>| -> BTreeSet<(String, String)> {
        s.into_iter().map(|(a, p, _)| (a, p)).collect()
    };
    let e = blocked(&audit_of(&enforce));
    let v = audit_of(&shadow);
    let s = blocked(&v);
    assert!(s.iter().all(|(_, _, o)| o == "would_block"), "{s:?}");
    assert_eq!(strip(s), strip(e));
    // Shadow changes nothing else: the accesses are out of scope, as in record mode.
    assert_eq!(v["verdict"], "flagged", "{v:#}");
    assert_eq!(v["out_of_scope"].as_array().unwrap().len(), 2, "{v:#}");
}

#[test]
fn cheats_and_protected_files_inside_an_allowed_directory_stay_out_and_their_siblings_stay_in() {
    let t = Task::new();
    let policy = t.policy(&format!(
        "[cheats]\nkey = 'answers/key'\n[protected]\ngrader = {:?}\n",
        t.s("task/src/grader.py")
    ));
    let script = format!(
        "for f in answers/key.txt answers/hint.txt src/grader.py notes/copy.py src/a.c README; do \
           if cat {root}/task/$f > /dev/null 2>&1; then echo \"$f ok\"; else echo \"$f denied\"; fi; \
         done; ls {root}/task/answers",
        root = t.root.display()
    );
    let r = t.run("cheats", &policy, "enforce", &script);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(
        r.stdout(),
        "answers/key.txt denied\nanswers/hint.txt ok\nsrc/grader.py denied\nnotes/copy.py denied\n\
         src/a.c ok\nREADME ok\nhint.txt\nkey.txt\n",
        "{}",
        r.stderr()
    );
    let b: serde_json::Value = serde_json::from_str(&r.meta()["aet.barrier"]).unwrap();
    let excluded: BTreeSet<(String, String)> = b["excluded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["path"].as_str().unwrap().to_owned(),
                x["rule"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        excluded,
        BTreeSet::from([
            (t.s("task/answers/key.txt"), "cheats.key".into()),
            (t.s("task/src/grader.py"), "protected.grader".into()),
            (t.s("task/notes/copy.py"), "protected.grader".into()),
        ])
    );
    let v = audit_of(&r);
    let got = blocked(&v);
    for p in [
        "task/answers/key.txt",
        "task/src/grader.py",
        "task/notes/copy.py",
    ] {
        assert!(
            got.contains(&("read".into(), t.s(p), "blocked".into())),
            "{p}: {got:?}"
        );
    }
    assert_eq!(got.len(), 3, "{got:?}");
    // A blocked cheat is still an attempt at one, for review.
    assert_eq!(v["cheat_hits"].as_array().unwrap().len(), 0, "{v:#}");
    assert!(
        v["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["rule"] == "cheats.key" && w["outcome"] == "attempted"),
        "{v:#}"
    );
}

#[test]
fn a_policy_drafted_from_the_built_in_example_passes_under_enforce() {
    let dir = tempdir();
    let agent = root().join("examples/demo/agent.sh");
    let (_, policy, _) = draft_from_example(dir.path());
    let second = run_in(
        &dir.path().join("second"),
        &["--policy", policy.to_str().unwrap(), "--mode", "enforce"],
        &[&agent],
    );
    assert_eq!(second.code(), 0, "{}", second.stderr());
    assert!(
        second.stdout().contains("check: matches"),
        "{}",
        second.stdout()
    );
    assert!(
        second.stderr().contains("fully enforced"),
        "{}",
        second.stderr()
    );
    assert_complete(&second.ledger());
    let v = audit_of(&second);
    assert_eq!(v["verdict"], "clean", "{v:#}");
    assert_eq!(v["blocked"].as_array().unwrap().len(), 0, "{v:#}");
}

#[test]
fn enforce_refuses_to_start_without_the_landlock_it_needs_or_with_rules_it_cannot_express() {
    let t = Task::new();
    let marker = t.root.join("ran");
    let script = format!("touch {}", marker.display());
    // A kernel whose Landlock ABI lacks scoping (fault injection: this kernel has ABI >= 6).
    let policy = t.policy("");
    let with_abi = |abi: &str, out: &str| {
        aet()
            .args(["run", "--policy", policy.to_str().unwrap()])
            .args(["--mode", "enforce", "--out"])
            .arg(t.root.join(out))
            .args(["--", "sh", "-c", &script])
            .env("AET_DEBUG_LANDLOCK_ABI", abi)
            .output()
            .unwrap()
    };
    let r = with_abi("4", "old-kernel");
    assert_eq!(r.status.code(), Some(125), "{}", text(&r.stderr));
    assert!(
        text(&r.stderr).contains("Landlock ABI is 4") && text(&r.stderr).contains("ABI 6"),
        "{}",
        text(&r.stderr)
    );
    let r = with_abi("0", "no-landlock");
    assert_eq!(r.status.code(), Some(125), "{}", text(&r.stderr));
    assert!(
        text(&r.stderr).contains("no Landlock"),
        "{}",
        text(&r.stderr)
    );
    // A glob the barrier cannot express is named.
    let globbed = t.root.join("globbed.toml");
    fs::write(&globbed, "[allow]\nread = [\"/usr\", \"/**/task/*.sh\"]\n").unwrap();
    let r = run_in(
        &t.root.join("globbed"),
        &["--policy", globbed.to_str().unwrap(), "--mode", "shadow"],
        &["sh", "-c", &script],
    );
    assert_eq!(r.code(), 125, "{}", r.stderr());
    assert!(
        r.stderr().contains("allow.read[1] = \"/**/task/*.sh\"")
            && r.stderr().contains("globbed.toml"),
        "{}",
        r.stderr()
    );
    // A mode without a policy.
    let r = run_in(&t.root.join("nopolicy"), &["--mode", "enforce"], &["true"]);
    assert_eq!(r.code(), 125, "{}", r.stderr());
    assert!(r.stderr().contains("--policy"), "{}", r.stderr());
    assert!(!marker.exists(), "the command ran");
    for d in ["old-kernel", "no-landlock", "globbed", "nopolicy"] {
        assert!(!t.root.join(d).join("ledger.arrow").exists(), "{d}");
    }
}

#[test]
fn under_enforce_signals_and_abstract_sockets_stay_inside_the_run() {
    let t = Task::new();
    let policy = t.policy("");
    let mut outside = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let name = format!("aet-test-{}-{}", std::process::id(), unique());
    let addr =
        <std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(
            name.as_bytes(),
        )
        .unwrap();
    let _listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let probe = helper("netprobe");
    let script = format!(
        "kill -0 {pid} && echo signal ok || echo signal denied; \
         {probe} unix @{name} || true; sleep 0.2 & kill -0 $! && echo own ok",
        pid = outside.id(),
        probe = probe.display(),
    );
    // The helper lives under target/: granted to exec.
    let policy_text = fs::read_to_string(&policy).unwrap().replace(
        "read = [",
        &format!("read = [{:?}, ", probe.parent().unwrap().to_str().unwrap()),
    );
    fs::write(&policy, policy_text).unwrap();
    let rec = t.run("record", &policy, "record", &script);
    let enf = t.run("enforce", &policy, "enforce", &script);
    let _ = outside.kill();
    let _ = outside.wait();
    assert_eq!(rec.stdout(), "signal ok\nok\nown ok\n", "{}", rec.stderr());
    assert_eq!(
        enf.stdout(),
        "signal denied\nOperation not permitted\nown ok\n",
        "{}",
        enf.stderr()
    );
}

#[test]
fn enforce_holds_inside_a_sandbox_as_an_agent_identity() {
    let t = Task::new();
    fs::create_dir_all(t.root.join("ws")).unwrap();
    let spec = t.root.join("spec.toml");
    fs::write(
        &spec,
        format!(
            "workspace = {:?}\nallow = [{:?}, {:?}]\n",
            t.s("ws"),
            t.s("task"),
            t.s("outside")
        ),
    )
    .unwrap();
    let policy = t.policy("[cheats]\nkey = 'answers/key'\n");
    // The workspace is writable in the view and by the policy.
    let text = fs::read_to_string(&policy)
        .unwrap()
        .replace("write = [", &format!("write = [{:?}, ", t.s("ws")));
    fs::write(&policy, text).unwrap();
    let script = format!(
        "cat {readme}; cat {secret} || true; cat {key} || true; echo done > {ws}/result.txt; id -u",
        readme = t.s("task/README"),
        secret = t.s("outside/secret.txt"),
        key = t.s("task/answers/key.txt"),
        ws = t.s("ws"),
    );
    let r = run_in(
        &t.root.join("run"),
        &[
            "--sandbox",
            spec.to_str().unwrap(),
            "--identity",
            "--policy",
            policy.to_str().unwrap(),
            "--mode",
            "enforce",
        ],
        &["sh", "-c", &script],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let out = r.stdout();
    assert!(out.starts_with("the task\n"), "{out}");
    assert!(!out.contains("OUTSIDE") && !out.contains("SECRET"), "{out}");
    assert_ne!(out.lines().last(), Some("0"), "{out}");
    assert_eq!(
        fs::read_to_string(t.root.join("ws/result.txt")).unwrap(),
        "done\n"
    );
    let v = audit_of(&r);
    let got = blocked(&v);
    assert!(
        got.contains(&("read".into(), t.s("outside/secret.txt"), "blocked".into()))
            && got.contains(&("read".into(), t.s("task/answers/key.txt"), "blocked".into())),
        "{got:?}"
    );
}

#[test]
fn enforce_blocks_execs_and_changes_outside_the_lists_and_never_claims_what_landlock_does_not_govern()
 {
    let t = Task::new();
    let policy = t.policy("");
    let script = format!(
        "cp /usr/bin/true {out}/mytrue && echo copied; \
         {out}/mytrue && echo ran || echo exec denied; \
         mkdir {outside}/d 2>/dev/null && echo made || echo mkdir denied; \
         mv {task}/README {out}/README 2>/dev/null && echo moved || echo move denied; \
         chmod 600 {task}/src/a.c && echo chmodded",
        out = t.s("out"),
        outside = t.s("outside"),
        task = t.s("task"),
    );
    let r = t.run("changes", &policy, "enforce", &script);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(
        r.stdout(),
        "copied\nexec denied\nmkdir denied\nmove denied\nchmodded\n",
        "{}",
        r.stderr()
    );
    assert!(t.root.join("task/README").exists());
    let v = audit_of(&r);
    let got = blocked(&v);
    for want in [
        ("exec", t.s("out/mytrue")),
        ("write", t.s("outside/d")),
        ("write", t.s("task/README")),
    ] {
        assert!(
            got.contains(&(want.0.into(), want.1.clone(), "blocked".into())),
            "{want:?}: {got:?}"
        );
    }
    // chmod is not Landlock's: it went through, is out of scope, and is not listed as blocked.
    assert!(
        !got.iter().any(|(_, p, _)| p.ends_with("src/a.c")),
        "{got:?}"
    );
    assert!(
        v["out_of_scope"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"].as_str().unwrap().ends_with("src/a.c") && f["access"] == "write"),
        "{v:#}"
    );
}

#[test]
fn links_never_grant_what_is_left_out_and_proc_aliases_are_listed_as_blocked() {
    let t = Task::new();
    // An innocent name for the key, a cheat-named link to an innocent file, and the key
    // reached through /proc: none may read what the cheat rule leaves out.
    std::os::unix::fs::symlink("answers/key.txt", t.root.join("task/notes.txt")).unwrap();
    std::os::unix::fs::symlink("../README", t.root.join("task/answers/readme-link")).unwrap();
    let policy = t.policy("[cheats]\nkey = 'answers/'\n");
    let key = t.s("task/answers/key.txt");
    let script = format!(
        "cat {notes}; cat /proc/self/root{key}; cat /proc/self/root{secret}; \
         python3 -c 'import os; fd = os.open(\"{secret}\", os.O_PATH); \
         os.open(\"/proc/self/fd/%d\" % fd, os.O_RDONLY)' 2>/dev/null; \
         python3 -c 'import os; d = os.open(\"{task}\", os.O_RDONLY); \
         os.open(\"/proc/self/fd/%d/answers/key.txt\" % d, os.O_RDONLY)' 2>/dev/null; \
         python3 -c 'import os, threading; \
         os.open(\"/proc/self/task/%d/root{key}\" % threading.get_native_id(), os.O_RDONLY)' \
         2>/dev/null; true",
        task = t.s("task"),
        notes = t.s("task/notes.txt"),
        secret = t.s("outside/secret.txt"),
    );
    let r = t.run("links", &policy, "enforce", &script);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(!r.stdout().contains("SECRET"), "{}", r.stdout());
    assert!(!r.stdout().contains("OUTSIDE"), "{}", r.stdout());
    let b: serde_json::Value = serde_json::from_str(&r.meta()["aet.barrier"]).unwrap();
    // No rule is on a link (a rule on one grants its target).
    for rule in b["rules"].as_array().unwrap() {
        let p = Path::new(rule["path"].as_str().unwrap());
        assert!(!p.is_symlink(), "a rule on the link {}: {b:#}", p.display());
    }
    let got = blocked(&audit_of(&r));
    for path in [
        t.s("task/notes.txt"),
        key.clone(),
        t.s("outside/secret.txt"),
    ] {
        assert!(
            got.iter()
                .any(|(a, p, o)| a == "read" && *p == path && o == "blocked"),
            "{path}: {got:#?}"
        );
    }
    // The secret was denied twice through /proc (root and an fd reopen): both explained.
    let secret = t.s("outside/secret.txt");
    let a = audit_of(&r);
    let n: u64 = a["blocked"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"] == secret.as_str())
        .map(|f| f["count"].as_u64().unwrap_or(1))
        .sum();
    assert!(n >= 2, "{a:#}");
    // The key, denied through /proc/self/root, below a directory's fd, and through a thread's
    // root: each explained as the key.
    let n: u64 = a["blocked"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"] == key.as_str())
        .map(|f| f["count"].as_u64().unwrap_or(1))
        .sum();
    assert!(n >= 3, "{a:#}");
}

#[test]
fn a_cheat_link_leaves_its_target_out_too() {
    let t = Task::new();
    fs::write(t.root.join("task/src/real-key.txt"), "SECRET\n").unwrap();
    std::os::unix::fs::symlink("../src/real-key.txt", t.root.join("task/answers/key2.txt"))
        .unwrap();
    let policy = t.policy("[cheats]\nkey = 'answers/'\n");
    let target = t.s("task/src/real-key.txt");
    let r = t.run(
        "target",
        &policy,
        "enforce",
        &format!(
            "cat {target}; cat {}; cat {}; true",
            t.s("task/answers/key2.txt"),
            t.s("task/src/a.c")
        ),
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(r.stdout(), "int main;\n", "{}", r.stderr());
    let b: serde_json::Value = serde_json::from_str(&r.meta()["aet.barrier"]).unwrap();
    assert!(
        b["excluded"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["path"] == target.as_str()),
        "{b:#}"
    );
}
