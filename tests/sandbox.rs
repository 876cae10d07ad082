//! The sandbox against real bubblewrap, as root: every semantic of the spec, the verification
//! from inside, the probes, and `aet run --sandbox` with the monitor.

use std::{
    collections::BTreeMap,
    fs,
    os::unix::fs::PermissionsExt as _,
    time::{Duration, Instant},
};

use aet_tests::*;

#[path = "common/sandbox.rs"]
#[allow(dead_code)]
mod common;
use common::*;

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
                "test ! -s /.aet/bin/aet && test -z \"$(ls -A /.aet/run)\"".into(),
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
