//! The sandbox against real bubblewrap, as root: every semantic of the spec, the verification
//! from inside, the probes, and `aet run --sandbox` with the monitor.

use std::{
    collections::BTreeMap,
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

use aet_tests::*;

/// A repository, a workspace and the rest of the seed's example, in a scratch directory.
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
        tree.dirs(&["ws", "state", "toolchain/bin"])
            .file("repo/inputs/answers/key.txt", "SECRET\n")
            .file("repo/inputs/golden.yaml", "expected: 42\n")
            .file("repo/inputs/data.txt", "data\n")
            .file("repo/tools/tool.sh", "echo tool\n")
            .file("scratch/sibling-run.txt", "another agent's work\n");
        Self { tree }
    }

    /// The seed's example with this fixture's paths, as TOML entries (key -> value).
    fn seed(&self) -> BTreeMap<&'static str, String> {
        let list = |xs: &[&str]| {
            format!(
                "[{}]",
                xs.iter()
                    .map(|x| format!("{:?}", self.s(x)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        BTreeMap::from([
            ("workspace", format!("{:?}", self.s("ws"))),
            ("allow", list(&["repo/inputs", "repo/tools"])),
            ("rw_binds", list(&["state"])),
            ("deny", list(&["repo/inputs/answers"])),
            ("mask_files", list(&["repo/inputs/golden.yaml"])),
            ("extra_binds", list(&["toolchain"])),
            ("tmpfs", format!("[\"/tmp\", {:?}]", self.s("scratch"))),
            ("unsetenv", "[\"CLAUDE_CODE_SSE_PORT\"]".into()),
            ("dns", "true".into()),
        ])
    }

    /// Writes a spec file from entries.
    fn spec(&self, entries: &BTreeMap<&'static str, String>) -> PathBuf {
        let path = self.p(&format!("spec-{}.toml", unique()));
        let text: String = entries
            .iter()
            .map(|(k, v)| format!("{k} = {v}\n"))
            .collect();
        fs::write(&path, text).unwrap();
        path
    }
}

/// `aet sandbox run -q SPEC -- sh -c SCRIPT`.
fn sandboxed(spec: &Path, script: &str) -> Output {
    aet()
        .args(["sandbox", "run", "-q"])
        .arg(spec)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap()
}

/// Runs a script that prints `name=ok` or `name=fail` lines and returns them as a map.
fn outcomes(spec: &Path, checks: &[(&str, String)]) -> BTreeMap<String, String> {
    let script: String = checks
        .iter()
        .map(|(name, cmd)| {
            format!(
                "if ( {cmd} ) >/dev/null 2>&1; then echo {name}=ok; else echo {name}=fail; fi\n"
            )
        })
        .collect();
    let out = sandboxed(spec, &script);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect()
}

fn assert_outcomes(got: &BTreeMap<String, String>, want: &[(&str, &str)]) {
    for (name, w) in want {
        assert_eq!(
            got.get(*name).map(String::as_str),
            Some(*w),
            "{name}: {got:?}"
        );
    }
}

#[test]
fn the_seed_example_view_holds_from_inside() {
    let f = Fixture::new();
    let spec = f.spec(&f.seed());
    let got = outcomes(
        &spec,
        &[
            (
                "read_input",
                format!("grep -q data {}", f.s("repo/inputs/data.txt")),
            ),
            (
                "run_tool",
                format!("sh {} | grep -q tool", f.s("repo/tools/tool.sh")),
            ),
            (
                "read_answer",
                format!("cat {}", f.s("repo/inputs/answers/key.txt")),
            ),
            (
                "answers_empty",
                format!("test -z \"$(ls -A {})\"", f.s("repo/inputs/answers")),
            ),
            (
                "write_answers",
                format!("touch {}/x", f.s("repo/inputs/answers")),
            ),
            (
                "mkdir_answers",
                format!("mkdir {}/d", f.s("repo/inputs/answers")),
            ),
            (
                "golden_empty",
                format!("test ! -s {}", f.s("repo/inputs/golden.yaml")),
            ),
            (
                "write_golden",
                format!("echo x > {}", f.s("repo/inputs/golden.yaml")),
            ),
            ("write_input", format!("touch {}/new", f.s("repo/inputs"))),
            ("write_tools", format!("touch {}/new", f.s("repo/tools"))),
            ("write_toolchain", format!("touch {}/new", f.s("toolchain"))),
            ("write_ws", "touch ./made-in-ws".into()),
            (
                "write_state",
                format!("touch {}/made-in-state", f.s("state")),
            ),
            (
                "write_scratch",
                format!("touch {}/made-in-scratch", f.s("scratch")),
            ),
            (
                "scratch_blank",
                format!("test ! -e {}/sibling-run.txt", f.s("scratch")),
            ),
            ("write_tmp", "touch /tmp/made-in-tmp".into()),
            ("write_root", "touch /made-at-root".into()),
            ("write_etc", "touch /etc/made".into()),
            ("write_dev", "touch /dev/made".into()),
            ("host_home", "ls /root".into()),
            ("shadow", "test -e /etc/shadow".into()),
            ("cwd_is_ws", format!("test \"$(pwd)\" = {}", f.s("ws"))),
            (
                "no_caps",
                "grep -q 'CapEff:.0000000000000000' /proc/self/status".into(),
            ),
            (
                "no_new_privs",
                "grep -q 'NoNewPrivs:.1' /proc/self/status".into(),
            ),
            (
                "no_stage_left",
                "test ! -s /.aet/aet && test -z \"$(ls -A /.aet/run)\"".into(),
            ),
        ],
    );
    assert_outcomes(
        &got,
        &[
            ("read_input", "ok"),
            ("run_tool", "ok"),
            ("read_answer", "fail"),
            ("answers_empty", "ok"),
            ("write_answers", "fail"),
            ("mkdir_answers", "fail"),
            ("golden_empty", "ok"),
            ("write_golden", "fail"),
            ("write_input", "fail"),
            ("write_tools", "fail"),
            ("write_toolchain", "fail"),
            ("write_ws", "ok"),
            ("write_state", "ok"),
            ("write_scratch", "ok"),
            ("scratch_blank", "ok"),
            ("write_tmp", "ok"),
            ("write_root", "fail"),
            ("write_etc", "fail"),
            ("write_dev", "fail"),
            ("host_home", "fail"),
            ("shadow", "fail"),
            ("cwd_is_ws", "ok"),
            ("no_caps", "ok"),
            ("no_new_privs", "ok"),
            ("no_stage_left", "ok"),
        ],
    );
    // On the host: the writable binds got the writes, the tmpfs blanks kept theirs private,
    // and the masked material is untouched.
    assert!(f.p("ws/made-in-ws").exists());
    assert!(f.p("state/made-in-state").exists());
    assert!(!f.p("scratch/made-in-scratch").exists());
    assert!(f.p("scratch/sibling-run.txt").exists());
    assert_eq!(
        fs::read_to_string(f.p("repo/inputs/golden.yaml")).unwrap(),
        "expected: 42\n"
    );
    assert!(!f.p("repo/inputs/answers/x").exists());
}

#[test]
fn a_writable_state_dir_inside_a_readonly_allow_stays_writable_and_cannot_reexpose_a_deny() {
    let f = Fixture::new();
    fs::create_dir_all(f.p("home/.state/secret")).unwrap();
    fs::write(f.p("home/.state/secret/token"), "t").unwrap();
    fs::write(f.p("home/notes"), "n").unwrap();
    let mut e = f.seed();
    // The rw bind is listed before its read-only parent, and a deny sits inside the rw bind.
    e.insert("rw_binds", format!("[{:?}]", f.s("home/.state")));
    e.insert(
        "allow",
        format!("[{:?}, {:?}]", f.s("repo/inputs"), f.s("home")),
    );
    e.insert(
        "deny",
        format!(
            "[{:?}, {:?}]",
            f.s("repo/inputs/answers"),
            f.s("home/.state/secret")
        ),
    );
    let spec = f.spec(&e);
    let got = outcomes(
        &spec,
        &[
            ("write_state", format!("touch {}/s", f.s("home/.state"))),
            ("write_home", format!("touch {}/h", f.s("home"))),
            ("read_home", format!("cat {}", f.s("home/notes"))),
            (
                "read_secret",
                format!("cat {}/token", f.s("home/.state/secret")),
            ),
            (
                "write_secret",
                format!("touch {}/x", f.s("home/.state/secret")),
            ),
            (
                "remove_secret",
                format!("rmdir {}", f.s("home/.state/secret")),
            ),
        ],
    );
    assert_outcomes(
        &got,
        &[
            ("write_state", "ok"),
            ("write_home", "fail"),
            ("read_home", "ok"),
            ("read_secret", "fail"),
            ("write_secret", "fail"),
            ("remove_secret", "fail"),
        ],
    );
}

#[test]
fn denies_and_masks_of_paths_that_do_not_exist_yet_are_enforced() {
    let f = Fixture::new();
    let mut e = f.seed();
    e.insert(
        "deny",
        format!("[{:?}, {:?}]", f.s("ws/answers"), f.s("repo/inputs/later")),
    );
    e.insert(
        "mask_files",
        format!(
            "[{:?}, {:?}]",
            f.s("ws/golden.yaml"),
            f.s("repo/inputs/late.yaml")
        ),
    );
    let spec = f.spec(&e);
    let got = outcomes(
        &spec,
        &[
            ("fill_ws_deny", format!("touch {}/x", f.s("ws/answers"))),
            ("replace_ws_deny", format!("rmdir {}", f.s("ws/answers"))),
            (
                "write_ws_mask",
                format!("echo x > {}", f.s("ws/golden.yaml")),
            ),
            (
                "create_ro_deny",
                format!("mkdir {}", f.s("repo/inputs/later")),
            ),
            (
                "create_ro_mask",
                format!("echo x > {}", f.s("repo/inputs/late.yaml")),
            ),
            ("other_ws_file", "echo x > ./fine.txt".into()),
        ],
    );
    assert_outcomes(
        &got,
        &[
            ("fill_ws_deny", "fail"),
            ("replace_ws_deny", "fail"),
            ("write_ws_mask", "fail"),
            ("create_ro_deny", "fail"),
            ("create_ro_mask", "fail"),
            ("other_ws_file", "ok"),
        ],
    );
    assert!(!f.p("ws/answers/x").exists());
    assert_eq!(fs::read(f.p("ws/golden.yaml")).unwrap_or_default(), b"");
}

#[test]
fn a_symlinked_deny_or_mask_is_masked_at_its_target_and_through_the_link() {
    let f = Fixture::new();
    fs::create_dir_all(f.p("repo/inputs/real_answers")).unwrap();
    fs::write(f.p("repo/inputs/real_answers/key.txt"), "SECRET\n").unwrap();
    std::os::unix::fs::symlink("real_answers", f.p("repo/inputs/answers_link")).unwrap();
    fs::write(f.p("repo/inputs/real_golden.yaml"), "expected: 42\n").unwrap();
    std::os::unix::fs::symlink(
        f.p("repo/inputs/real_golden.yaml"),
        f.p("repo/inputs/golden_link.yaml"),
    )
    .unwrap();
    let mut e = f.seed();
    e.insert("deny", format!("[{:?}]", f.s("repo/inputs/answers_link")));
    e.insert(
        "mask_files",
        format!("[{:?}]", f.s("repo/inputs/golden_link.yaml")),
    );
    let spec = f.spec(&e);
    let got = outcomes(
        &spec,
        &[
            (
                "via_link",
                format!("cat {}/key.txt", f.s("repo/inputs/answers_link")),
            ),
            (
                "via_target",
                format!("cat {}/key.txt", f.s("repo/inputs/real_answers")),
            ),
            (
                "target_empty",
                format!("test -z \"$(ls -A {})\"", f.s("repo/inputs/real_answers")),
            ),
            (
                "golden_link",
                format!("grep -q 42 {}", f.s("repo/inputs/golden_link.yaml")),
            ),
            (
                "golden_target",
                format!("grep -q 42 {}", f.s("repo/inputs/real_golden.yaml")),
            ),
        ],
    );
    assert_outcomes(
        &got,
        &[
            ("via_link", "fail"),
            ("via_target", "fail"),
            ("target_empty", "ok"),
            ("golden_link", "fail"),
            ("golden_target", "fail"),
        ],
    );
}

#[test]
fn a_chmod_000_denied_directory_does_not_break_the_builder_and_stays_masked() {
    let f = Fixture::new();
    fs::set_permissions(
        f.p("repo/inputs/answers"),
        fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    let spec = f.spec(&f.seed());
    let got = outcomes(
        &spec,
        &[
            (
                "list",
                format!("test -z \"$(ls -A {})\"", f.s("repo/inputs/answers")),
            ),
            (
                "read",
                format!("cat {}/key.txt", f.s("repo/inputs/answers")),
            ),
        ],
    );
    assert_outcomes(&got, &[("list", "ok"), ("read", "fail")]);
    fs::set_permissions(
        f.p("repo/inputs/answers"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
}

#[test]
fn dns_true_provides_the_hosts_real_resolver_configuration() {
    let f = Fixture::new();
    let real = fs::canonicalize("/etc/resolv.conf").unwrap();
    let host_conf = fs::read_to_string(&real).unwrap();
    let spec = f.spec(&f.seed());
    let out = sandboxed(&spec, "cat /etc/resolv.conf && getent hosts localhost");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let inside = text(&out.stdout);
    assert!(inside.starts_with(&host_conf), "{inside}");
    assert!(inside.contains("localhost"), "{inside}");

    let mut e = f.seed();
    e.insert("dns", "false".into());
    let spec = f.spec(&e);
    let got = outcomes(&spec, &[("resolv", "test -e /etc/resolv.conf".into())]);
    assert_outcomes(&got, &[("resolv", "fail")]);
}

#[test]
fn credentials_and_unset_variables_do_not_reach_the_agent() {
    let f = Fixture::new();
    let mut e = f.seed();
    e.insert("pass_env", "[\"ANTHROPIC_API_KEY\"]".into());
    e.insert("setenv", "{ FOO = \"bar\" }".into());
    let spec = f.spec(&e);
    let out = aet()
        .args(["sandbox", "run", "-q"])
        .arg(&spec)
        .args([
            "--",
            "sh",
            "-c",
            "env; echo ==; tr '\\0' ' ' < /proc/1/cmdline",
        ])
        .env("SOME_API_TOKEN", "leak-me")
        .env("AWS_SECRET_ACCESS_KEY", "leak-me")
        .env("CLAUDE_CODE_SSE_PORT", "4242")
        .env("ANTHROPIC_API_KEY", "named-so-passed")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let o = text(&out.stdout);
    let (env, pid1) = o.split_once("==").unwrap();
    assert!(!env.contains("leak-me"), "{env}");
    assert!(!env.contains("CLAUDE_CODE_SSE_PORT"), "{env}");
    assert!(env.contains("ANTHROPIC_API_KEY=named-so-passed"), "{env}");
    assert!(env.contains("FOO=bar"), "{env}");
    // The view (where the masked material is) is not in any command line the agent can read.
    assert!(!pid1.contains("answers"), "{pid1}");
    assert!(pid1.contains("--args"), "{pid1}");
}

/// Host pids of processes whose command line is exactly `argv`.
fn pids_with_cmdline(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

#[test]
fn the_agents_tree_dies_with_the_sandbox() {
    let f = Fixture::new();
    let spec = f.spec(&f.seed());
    let tag = format!("300.{}", std::process::id());
    let out = sandboxed(&spec, &format!("setsid sleep {tag} & echo started"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !pids_with_cmdline(&["sleep", &tag]).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        pids_with_cmdline(&["sleep", &tag]).is_empty(),
        "a daemon of the agent outlived the sandbox"
    );
}

#[test]
fn the_agent_gets_a_new_session_without_a_terminal() {
    let f = Fixture::new();
    let spec = f.spec(&f.seed());
    let tag = format!("7.{}", std::process::id());
    let mut child = aet()
        .args(["sandbox", "run", "-q"])
        .arg(&spec)
        .args(["--", "sleep", &tag])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = loop {
        if let Some(&p) = pids_with_cmdline(&["sleep", &tag]).first() {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "the sandboxed sleep never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let session: i32 = fields[3].parse().unwrap();
    let tty: i32 = fields[4].parse().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let ours = nix::unistd::getsid(None).unwrap().as_raw();
    assert_ne!(session, ours, "the agent shares the harness's session");
    assert_eq!(tty, 0, "the agent has a controlling terminal");
}

#[test]
fn bad_specs_are_refused_whole_with_every_problem_named() {
    let f = Fixture::new();
    let marker = f.p("must-not-exist");
    let cases: Vec<(BTreeMap<&'static str, String>, Vec<String>)> = vec![
        (
            {
                let mut e = f.seed();
                e.insert("deny", "[\"answers\"]".into());
                e.insert(
                    "allow",
                    format!("[{:?}, {:?}]", f.s("repo/inputs"), f.s("missing")),
                );
                e
            },
            vec![
                "deny[0] = \"answers\": not an absolute path".into(),
                format!("allow[1] = {:?}: does not exist", f.s("missing")),
            ],
        ),
        (
            {
                let mut e = f.seed();
                fs::create_dir_all(f.p("repo/inputs/answers/public")).unwrap();
                e.insert(
                    "allow",
                    format!(
                        "[{:?}, {:?}]",
                        f.s("repo/inputs"),
                        f.s("repo/inputs/answers/public")
                    ),
                );
                e
            },
            vec![format!(
                "allow[1] = {:?} is inside deny[0] = {:?}: the mask would hide it",
                f.s("repo/inputs/answers/public"),
                f.s("repo/inputs/answers")
            )],
        ),
        (
            {
                let mut e = f.seed();
                e.insert("rw_binds", format!("[{:?}]", f.s("repo/tools")));
                e.insert("network", "false".into());
                e
            },
            vec![
                format!("rw_binds[0] = {:?}", f.s("repo/tools")),
                "name the same path".into(),
                "dns = true with network = \"none\"".into(),
            ],
        ),
        (
            {
                let mut e = f.seed();
                e.insert("mask_file", "[]".into());
                e
            },
            vec!["mask_file".into(), "line".into()],
        ),
    ];
    for (entries, wanted) in cases {
        let spec = f.spec(&entries);
        let check = aet()
            .args(["sandbox", "check"])
            .arg(&spec)
            .output()
            .unwrap();
        let err = text(&check.stderr);
        assert_eq!(check.status.code(), Some(4), "{err}");
        assert!(
            err.contains(spec.to_str().unwrap()),
            "names the file: {err}"
        );
        for w in &wanted {
            assert!(err.contains(w.as_str()), "{w:?} not in: {err}");
        }
        let run = aet()
            .args(["sandbox", "run"])
            .arg(&spec)
            .arg("--")
            .arg("touch")
            .arg(&marker)
            .output()
            .unwrap();
        assert_eq!(run.status.code(), Some(125), "{}", text(&run.stderr));
        let monitored = aet()
            .args(["run", "--out"])
            .arg(f.p(&format!("run-{}", unique())))
            .arg("--sandbox")
            .arg(&spec)
            .arg("--")
            .arg("touch")
            .arg(&marker)
            .output()
            .unwrap();
        assert_eq!(
            monitored.status.code(),
            Some(125),
            "{}",
            text(&monitored.stderr)
        );
        assert!(!marker.exists(), "a refused spec ran the command");
    }
}

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
