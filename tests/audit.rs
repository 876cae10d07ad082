//! The audit against ledgers recorded from real runs: verdicts, attribution, exit codes, the
//! reports (the HTML one opened in headless Chromium).

use std::{
    fs,
    os::unix::{ffi::OsStringExt as _, fs::PermissionsExt as _},
    path::{Path, PathBuf},
};

use aet_tests::{AgentTask as Fixture, audit_json as audit, *};

#[test]
fn a_subprocess_reading_a_cheat_disqualifies_with_exactly_the_hits_attributed() {
    let f = Fixture::new();
    let run = f.run_agent(&["check.sh", "survey.sh"]);
    let (out, v) = audit(&run, &f.policy(), &[]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(v["verdict"], "disqualified");
    assert_eq!(v["disqualified"], true);
    assert_eq!(v["isolation_clean"], false);
    assert_eq!(v["complete"], true);
    let cheats = v["cheat_hits"].as_array().unwrap();
    assert_eq!(cheats.len(), 1, "{cheats:?}");
    assert_eq!(cheats[0]["rule"], "cheats.golden");
    assert_eq!(cheats[0]["path"], f.s("secret/golden.yaml"));
    assert_eq!(cheats[0]["comm"], "cat");
    assert_eq!(cheats[0]["access"], "read");
    // Its ancestry: check.sh, run by the agent's shell.
    let anc: Vec<&str> = cheats[0]["ancestry"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["comm"].as_str().unwrap())
        .collect();
    assert_eq!(anc.first(), Some(&"check.sh"), "{anc:?}");
    assert!(anc.contains(&"sh"), "{anc:?}");
    let contam = v["contaminant_hits"].as_array().unwrap();
    assert_eq!(contam.len(), 1, "{contam:?}");
    assert_eq!(contam[0]["rule"], "contaminants.other_proj");
    assert_eq!(contam[0]["comm"], "head");
    assert_eq!(contam[0]["path"], f.s("other/projects/p1/notes.txt"));
    assert_eq!(
        v["out_of_scope"].as_array().unwrap().len(),
        0,
        "{}",
        v["out_of_scope"]
    );
    assert_eq!(
        v["warnings"].as_array().unwrap().len(),
        0,
        "{}",
        v["warnings"]
    );
    // The rule nothing matched is listed; the pid is the one in the ledger.
    assert_eq!(
        v["unused_rules"],
        serde_json::json!(["warns.oracle_src", "protected.key"])
    );
    let rows = rows(&run.join("ledger.arrow"));
    let pid = cheats[0]["pid"].as_u64().unwrap() as u32;
    assert!(rows.iter().any(|r| r.pid == pid
        && r.kind == "open"
        && r.resolved_str().as_deref() == Some(&f.s("secret/golden.yaml"))));
    // The terminal summary fits a screen and names the verdict and the hit.
    let summary = text(&out.stdout);
    assert!(summary.starts_with("aet audit: DISQUALIFIED"), "{summary}");
    assert!(
        summary.contains("cheats.golden") && summary.contains("cat["),
        "{summary}"
    );
    assert!(summary.lines().count() <= 24, "{summary}");
}

#[test]
fn without_the_cheat_the_run_is_flagged_and_a_clean_run_is_clean() {
    let f = Fixture::new();
    let policy = f.policy();
    let (out, v) = audit(&f.run_agent(&["survey.sh"]), &policy, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert_eq!(v["verdict"], "flagged");
    assert_eq!(v["disqualified"], false);
    assert_eq!(v["contaminant_hits"].as_array().unwrap().len(), 1);

    let (out, v) = audit(&f.run_agent(&[]), &policy, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        v["out_of_scope"]
    );
    assert_eq!(v["verdict"], "clean");
    assert_eq!(v["isolation_clean"], true);
}

#[test]
fn a_protected_file_is_caught_through_an_alias() {
    let f = Fixture::new();
    // A hard link with an innocent name: no pattern matches it, its identity does.
    fs::hard_link(f.p("secret/key.txt"), f.p("task/notes.txt")).unwrap();
    let run = f.p("run-alias");
    let policy = f.policy();
    let r = aet()
        .args(["run", "-q", "--out"])
        .arg(&run)
        .arg("--policy")
        .arg(&policy)
        .args(["--", "cat"])
        .arg(f.p("task/notes.txt"))
        .output()
        .unwrap();
    assert_eq!(
        r.status.code(),
        Some(0),
        "aet run keeps the command's status: {}",
        text(&r.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(run.join("audit.json")).unwrap()).unwrap();
    assert!(run.join("audit.html").exists());
    assert_eq!(v["verdict"], "disqualified", "{}", v["cheat_hits"]);
    assert_eq!(v["cheat_hits"][0]["rule"], "protected.key");
    assert_eq!(v["cheat_hits"][0]["path"], f.s("task/notes.txt"));
    // The identity was taken when the run started.
    assert!(meta(&run.join("ledger.arrow"))["aet.protected"].contains("\"ino\""));
}

#[test]
fn a_denied_attempt_at_a_cheat_is_a_warning_not_a_disqualification() {
    let f = Fixture::new();
    fs::set_permissions(f.p("secret/golden.yaml"), fs::Permissions::from_mode(0o000)).unwrap();
    // As the agent's uid the file cannot be read.
    fs::set_permissions(f.p("task"), fs::Permissions::from_mode(0o755)).unwrap();
    let run = f.p("run-denied");
    let r = aet()
        .args(["run", "-q", "--out"])
        .arg(&run)
        .arg("--identity")
        .arg("--workspace")
        .arg(f.p("task/out"))
        .args(["--", "cat"])
        .arg(f.p("secret/golden.yaml"))
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(1), "{}", text(&r.stderr));
    let (out, v) = audit(&run, &f.policy(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert_eq!(v["disqualified"], false);
    let w = &v["warnings"][0];
    assert_eq!(w["rule"], "cheats.golden");
    assert_eq!(w["outcome"], "attempted");
    assert_eq!(w["errno"], "EACCES");
    // The agent's uid from the pool, as the run recorded it (not 2000 when other runs hold it).
    let id: serde_json::Value =
        serde_json::from_str(&meta(&run.join("ledger.arrow"))["aet.identity"]).unwrap();
    assert!((2000..=2999).contains(&id["uid"].as_u64().unwrap()), "{id}");
    assert_eq!(w["uid"], id["uid"]);
}

#[test]
fn a_ledger_with_lost_events_is_inconclusive_even_if_nothing_matched() {
    let f = Fixture::new();
    let out = f.p("run-lossy");
    let r = aet()
        .args(["run", "-q", "--standalone", "--ringbuf-mb", "1", "--out"])
        .arg(&out)
        .arg("--")
        .arg(helper("openstorm"))
        .arg("50000")
        .arg(f.p("task/README.md"))
        .env("AET_DEBUG_CONSUMER_STALL_MS", "1500")
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
    let lost: u64 = meta(&out.join("ledger.arrow"))["aet.events_lost"]
        .parse()
        .unwrap();
    assert!(lost > 0, "the fault injection lost events");
    let (o, v) = audit(&out, &f.policy(), &[]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stdout));
    assert_eq!(v["verdict"], "inconclusive");
    assert_eq!(v["complete"], false);
    assert!(
        v["incomplete_reasons"].to_string().contains("lost"),
        "{}",
        v["incomplete_reasons"]
    );
    assert_eq!(v["cheat_hits"].as_array().unwrap().len(), 0);
}

#[test]
fn malformed_policies_exit_4_naming_line_and_key() {
    let f = Fixture::new();
    let run = f.run_agent(&[]);
    for (text_, want) in [
        (
            "[cheats]\ngolden = 'golden\\.yaml'\nbroken = '(oops'\n",
            vec!["line 3", "cheats.broken", "regular expression"],
        ),
        (
            "[allow]\nread = [\"/task/**\"]\nwrte = [\"/x\"]\n",
            vec!["line 3", "wrte"],
        ),
        ("[cheats]\ngolden = 42\n", vec!["line 2", "cheats.golden"]),
        (
            "[allow]\nread = [\"task/**\"]\n",
            vec!["line 2", "allow.read[0]"],
        ),
    ] {
        let p = f.p(&format!("bad-{}.toml", unique()));
        fs::write(&p, text_).unwrap();
        let out = aet()
            .arg("audit")
            .arg(&run)
            .arg("--policy")
            .arg(&p)
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{err}");
        assert!(err.contains(p.to_str().unwrap()), "names the file: {err}");
        for w in want {
            assert!(err.contains(w), "{w:?} not in {err}");
        }
    }
    // A corrupt ledger is an input error too.
    let junk = f.p("junk.arrow");
    fs::write(&junk, "not arrow").unwrap();
    let out = aet()
        .arg("audit")
        .arg(&junk)
        .arg("--policy")
        .arg(f.policy())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(text(&out.stderr).contains("junk.arrow"));
}

#[test]
fn the_html_report_shows_the_verdict_and_the_flagged_row_in_chromium() {
    let f = Fixture::new();
    let run = f.run_agent(&["check.sh"]);
    let html = run.join("report.html");
    let (out, _) = audit(&run, &f.policy(), &["--html", html.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let page = fs::read_to_string(&html).unwrap();
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "no network at view time"
    );
    let chromium = ["chromium", "chromium-browser"]
        .iter()
        .find(|c| aet_sandbox::find_on_path(c).is_some())
        .expect("chromium is installed by cargo xtask setup");
    let dom = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=2000",
            "--dump-dom",
        ])
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    let dom = text(&dom.stdout);
    assert!(
        dom.contains("id=\"verdict\">Verdict: DISQUALIFIED<"),
        "{}",
        &dom[..dom.len().min(2000)]
    );
    // The flagged row is in the table and not hidden by the filter script, which ran.
    let row = dom
        .split("<tr class=\"cheat\"")
        .nth(1)
        .expect("a cheat row")
        .split("</tr>")
        .next()
        .unwrap();
    assert!(row.contains(&f.s("secret/golden.yaml")), "{row}");
    assert!(!row.starts_with(" hidden"), "{row}");
    assert!(dom.contains("1 of 1 shown"), "the filter script ran");
}

#[test]
fn a_cheat_path_with_a_newline_and_invalid_utf8_is_reported_exactly() {
    use std::os::unix::ffi::OsStrExt as _;
    let f = Fixture::new();
    let mut raw = f.p("secret").into_os_string().into_vec();
    raw.extend_from_slice(b"/odd\n\xffdir");
    let odd = PathBuf::from(std::ffi::OsString::from_vec(raw));
    fs::create_dir_all(&odd).unwrap();
    let golden = odd.join("golden.yaml");
    fs::write(&golden, "42\n").unwrap();
    let run = f.p("run-odd");
    let r = run_in(
        &run,
        &[],
        &[std::ffi::OsStr::new("cat"), golden.as_os_str()],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let (out, v) = audit(&run, &f.policy(), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let hit = &v["cheat_hits"][0];
    let hex: String = golden
        .as_os_str()
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(hit["path_hex"], hex.as_str(), "the exact bytes survive");
    // The summary keeps each finding on one line.
    let summary = text(&out.stdout);
    let line = summary.lines().find(|l| l.starts_with("CHEAT")).unwrap();
    assert!(
        line.contains("odd\\n") && line.contains("golden.yaml"),
        "{summary}"
    );
}

#[test]
fn a_damaged_ledger_is_an_input_error_never_a_crash() {
    let f = Fixture::new();
    let run = f.run_agent(&["check.sh"]);
    let good = fs::read(run.join("ledger.arrow")).unwrap();
    let bad = f.p("damaged.arrow");
    // Bytes overwritten in the batches' metadata (the file's first kilobytes) and in the
    // footer: the places where a damaged file makes Arrow's decoders slice out of bounds.
    let mut seed: u64 = 0x5eed;
    let mut next = |n: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize % n
    };
    let mut input_errors = 0;
    for round in 0..80 {
        let mut d = good.clone();
        for _ in 0..2 {
            let at = if round % 2 == 0 {
                8 + next(6000.min(d.len() - 16))
            } else {
                d.len() - 10 - next(3000.min(d.len() - 16))
            };
            d[at] = next(256) as u8;
        }
        fs::write(&bad, &d).unwrap();
        for args in [&["ledger", "summary"][..], &["audit", "--policy"][..]] {
            let mut cmd = aet();
            cmd.args(args);
            if args[0] == "audit" {
                cmd.arg(f.policy());
            }
            let out = cmd.arg(&bad).output().unwrap();
            let err = text(&out.stderr);
            let code = out.status.code();
            assert!(
                matches!(code, Some(0..=4)),
                "round {round}: {args:?} ended with {:?}: {err}",
                out.status
            );
            assert!(!err.contains("panicked"), "round {round}: {args:?}: {err}");
            if code == Some(4) {
                input_errors += 1;
                assert!(err.contains("damaged.arrow"), "names the file: {err}");
                // One error line.
                assert_eq!(err.matches("aet: error:").count(), 1, "{err}");
            }
        }
    }
    // How many of the 160 damages land where a decoder checks depends on the ledger's layout
    // (its batches are cut by time, so a loaded machine makes more of them): 20-30 here.
    assert!(
        input_errors >= 10,
        "damage is reported ({input_errors} input errors)"
    );
}

/// Opens that truncate or create are writes whatever their access mode, and so is every other way
/// to change a file (here its extended attributes): outside the write list, each is an
/// out-of-scope write. A plain read of the same kind of file is not.
#[test]
fn every_way_to_change_a_file_outside_the_write_list_is_an_out_of_scope_write() {
    let f = Fixture::new();
    fs::create_dir_all(f.p("task/data")).unwrap();
    for name in [
        "truncated.txt",
        "xattr.txt",
        "xattr-removed.txt",
        "read.txt",
    ] {
        fs::write(f.p(&format!("task/data/{name}")), "original\n").unwrap();
    }
    let openflags = helper("openflags");
    // O_RDONLY|O_TRUNC (0o1000), O_RDONLY|O_CREAT (0o100), a plain O_RDONLY.
    let script = format!(
        "{of} 1000 {t} && {of} 100 {c} && {of} 0 {r} \
         && setfattr -n user.aet -v 1 {x} && setfattr -n user.gone -v 1 {x2} \
         && setfattr -x user.gone {x2}",
        of = openflags.display(),
        t = f.s("task/data/truncated.txt"),
        c = f.s("task/data/created.txt"),
        r = f.s("task/data/read.txt"),
        x = f.s("task/data/xattr.txt"),
        x2 = f.s("task/data/xattr-removed.txt"),
    );
    let run = f.p("run-writes");
    let r = run_in(&run, &["-q"], &["sh", "-c", &script]);
    assert_eq!(r.code(), 0, "{}{}", r.stdout(), r.stderr());
    assert_eq!(
        fs::read_to_string(f.p("task/data/truncated.txt")).unwrap(),
        "",
        "the read-only open truncated the file"
    );
    assert!(f.p("task/data/created.txt").exists());
    // The ledger has the attribute changes, with the attribute's name and the file.
    let rows = r.rows();
    for (sc, name, file) in [
        ("setxattr", "user.aet", "task/data/xattr.txt"),
        ("setxattr", "user.gone", "task/data/xattr-removed.txt"),
        ("removexattr", "user.gone", "task/data/xattr-removed.txt"),
    ] {
        assert!(
            rows.iter().any(|row| row.kind == "modify"
                && row.syscall.as_deref() == Some(sc)
                && row.ret == Some(0)
                && row.path2.as_deref() == Some(name.as_bytes())
                && row.resolved_path2.is_none()
                && row.resolved_str().as_deref() == Some(f.s(file).as_str())),
            "no {sc} row for {file}"
        );
    }

    let (out, v) = audit(&run, &f.policy(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert_eq!(v["verdict"], "flagged");
    let oos = v["out_of_scope"].as_array().unwrap();
    let writes: Vec<&str> = oos
        .iter()
        .filter(|x| x["access"] == "write")
        .map(|x| x["path"].as_str().unwrap())
        .collect();
    for file in [
        "task/data/truncated.txt",
        "task/data/created.txt",
        "task/data/xattr.txt",
        "task/data/xattr-removed.txt",
    ] {
        assert!(
            writes.contains(&f.s(file).as_str()),
            "{file} is not an out-of-scope write: {oos:#?}"
        );
    }
    assert!(
        !oos.iter().any(|x| x["path"] == f.s("task/data/read.txt")),
        "a plain read inside the read list is in scope: {oos:#?}"
    );
    // The summary agrees: the same opens are among the files written.
    let s = summary(&run.join("ledger.arrow"));
    let written: Vec<&str> = s["files_written"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["path"].as_str().unwrap())
        .collect();
    for file in ["task/data/truncated.txt", "task/data/created.txt"] {
        assert!(written.contains(&f.s(file).as_str()), "{written:?}");
    }
    assert!(!written.contains(&f.s("task/data/read.txt").as_str()));
}

/// `aet policy draft`: a policy drafted from a run of the built-in example passes a second run
/// of it (clean), and names what the first run touched.
#[test]
fn a_policy_drafted_from_a_run_passes_a_second_run_of_the_same_command() {
    let dir = tempdir();
    let agent = root().join("examples/demo/agent.sh");
    let (first, policy, drafted) = draft_from_example(dir.path());
    assert!(drafted.contains("[allow]"), "{drafted}");
    assert!(
        drafted.contains("examples/demo/task/README.md"),
        "{drafted}"
    );
    // The draft is a draft: it says what it allows, answer key included.
    assert!(
        drafted.contains("examples/demo/answers/key.txt"),
        "{drafted}"
    );
    // A second draft never overwrites the first.
    let again = draft(&first.out, &policy);
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("drafted.toml"),
        "{}",
        text(&again.stderr)
    );
    let second = run_in(
        &dir.path().join("second"),
        &["--policy", policy.to_str().unwrap()],
        &[&agent],
    );
    assert_eq!(second.code(), 0, "{}", second.stderr());
    let v: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(second.out.join("audit.json")).unwrap()).unwrap();
    assert_eq!(v["verdict"], "clean", "{v:#}");
}

/// A git repository with one commit, in `dir/repo`.
fn git_repo(dir: &Path) -> PathBuf {
    let repo = dir.join("repo");
    fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "x"]);
    repo
}

/// Rules on what a process ran: `{ argv = 'regex' }` matches the exec's argument vector joined
/// with spaces, whoever ran it (a script on the agent's behalf included), and names the process.
#[test]
fn argv_rules_match_what_a_process_ran_and_name_it() {
    let dir = tempdir();
    let repo = git_repo(dir.path());
    let script = dir.path().join("helper.sh");
    write_script(
        &script,
        &format!(
            "#!/bin/sh\ngit -C {} log --all --oneline > /dev/null\ngit -C {} status > /dev/null\n",
            repo.display(),
            repo.display()
        ),
    );
    let r = run_in(&dir.path().join("run"), &[], &[&script]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let policy = dir.path().join("p.toml");
    fs::write(
        &policy,
        "[warns]\nhistory = { argv = '^git .*\\blog\\b.*--all' }\nstatus = { argv = 'never-run-this' }\n",
    )
    .unwrap();
    let (out, v) = audit(&r.out, &policy, &[]);
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    let w = v["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{v:#}");
    assert_eq!(w[0]["rule"], "warns.history");
    assert_eq!(w[0]["access"], "exec");
    assert!(
        w[0]["path"].as_str().unwrap().contains("log --all"),
        "{v:#}"
    );
    assert_eq!(w[0]["comm"], "git");
    assert!(
        w[0]["ancestry"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["comm"] == "helper.sh"),
        "{v:#}"
    );
    assert!(
        v["unused_rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "warns.status"),
        "{v:#}"
    );
    // The same rule as a cheat disqualifies; a rule cannot have both `pattern` and `argv`.
    fs::write(&policy, "[cheats]\nhistory = { argv = 'log --all' }\n").unwrap();
    let (out, v) = audit(&r.out, &policy, &[]);
    assert_eq!(out.status.code(), Some(2), "{v:#}");
    fs::write(&policy, "[cheats]\nx = { argv = 'a', pattern = 'b' }\n").unwrap();
    let (out, _) = audit(&r.out, &policy, &[]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stderr).contains("line 2"),
        "{}",
        text(&out.stderr)
    );
}

/// The repository-benchmark preset flags history mining by a helper script: `git log --all`,
/// `git reflog` and a read of `.git/logs/HEAD`, and nothing for a plain `git status`.
#[test]
fn the_swe_bench_preset_flags_history_mining() {
    let dir = tempdir();
    let repo = git_repo(dir.path());
    git(&repo, &["tag", "future"]);
    let plain = dir.path().join("plain.sh");
    write_script(
        &plain,
        &format!("#!/bin/sh\ngit -C {} status > /dev/null\n", repo.display()),
    );
    let mining = dir.path().join("mining.sh");
    write_script(
        &mining,
        &format!(
            "#!/bin/sh\ncd {}\ngit log --all --oneline > /dev/null\ngit reflog > /dev/null\ncat .git/logs/HEAD > /dev/null\n",
            repo.display()
        ),
    );
    let policy = root().join("policies/swe-bench.toml");
    // The preset watches the task's tests: the run takes their fingerprints (`--policy`).
    let with_policy = ["-q", "--policy", policy.to_str().unwrap()];
    let p = run_in(&dir.path().join("plain"), &with_policy, &[&plain]);
    assert_eq!(p.code(), 0, "{}", p.stderr());
    let (out, v) = audit(&p.out, &policy, &[]);
    assert_eq!(out.status.code(), Some(0), "a plain status is clean: {v:#}");
    assert!(
        v["watched"]["before"]["entries"].as_u64().unwrap() > 0,
        "the PATH's programs are fingerprinted: {:#}",
        v["watched"]
    );
    let m = run_in(&dir.path().join("mining"), &with_policy, &[&mining]);
    assert_eq!(m.code(), 0, "{}", m.stderr());
    let (out, v) = audit(&m.out, &policy, &[]);
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    let rules: Vec<&str> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["rule"].as_str().unwrap())
        .collect();
    for want in ["warns.git_log_all", "warns.git_reflog", "warns.git_reflogs"] {
        assert!(rules.contains(&want), "{want}: {rules:?}");
    }
}

/// A file the command starts with is matched by path rules like any other access: a cheat
/// given as `< golden.yaml` disqualifies the run.
#[test]
fn a_cheat_given_as_the_commands_stdin_is_a_cheat() {
    let f = Fixture::new();
    let policy = f.root.join("stdin-policy.toml");
    fs::write(&policy, "[cheats]\ngolden = 'secret/golden'\n").unwrap();
    let out = f.root.join("stdin-run");
    let stdin = fs::File::open(f.root.join("secret/golden.yaml")).unwrap();
    let o = aet()
        .args(["run", "-q", "--policy"])
        .arg(&policy)
        .arg("--out")
        .arg(&out)
        .args(["--", "cat"])
        .stdin(stdin)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "expected: 42\n");
    let a: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out.join("audit.json")).unwrap()).unwrap();
    assert_eq!(a["verdict"], "disqualified", "{a:#}");
    let golden = f.root.join("secret/golden.yaml");
    assert!(
        a["cheat_hits"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == golden.to_str().unwrap() && c["reached"] == "inherited"),
        "{a:#}"
    );
}

/// The stdout and stderr a run is started with are the launcher's channel (`aet run ... >
/// agent.log`): bytes written through them are not judged by `[allow] write`, and the report
/// lists them. A cheat given as the output is still a cheat.
#[test]
fn output_redirected_to_a_file_is_the_launchers_and_a_cheat_given_as_output_is_still_one() {
    let f = Fixture::new();
    let policy = f.root.join("channel-policy.toml");
    fs::write(
        &policy,
        "[allow]\nread = [\"/\"]\nwrite = [\"/dev\"]\n\n[cheats]\ngolden = 'secret/golden'\n",
    )
    .unwrap();
    let run = |name: &str, fd: i32, file: fs::File, script: &str| {
        let out = f.root.join(format!("{name}-run"));
        let mut c = aet();
        c.args(["run", "-q", "--policy"])
            .arg(&policy)
            .arg("--out")
            .arg(&out)
            .args(["--", "sh", "-c", script]);
        match fd {
            1 => c.stdout(file),
            _ => c.stderr(file),
        };
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let a: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(out.join("audit.json")).unwrap()).unwrap();
        a
    };
    for (name, fd, want) in [("stdout", 1, "out\nchild\n"), ("stderr", 2, "err\n")] {
        let log = f.root.join(format!("{name}.log"));
        let script = "echo out; echo err >&2; sh -c 'echo child'";
        let a = run(name, fd, fs::File::create(&log).unwrap(), script);
        assert_eq!(fs::read_to_string(&log).unwrap(), want);
        assert_eq!(a["verdict"], "clean", "{name}: {a:#}");
        assert_eq!(a["out_of_scope"].as_array().unwrap().len(), 0, "{a:#}");
        let channels = a["run"]["output_channels"].as_array().unwrap();
        assert!(
            channels.iter().any(|c| c["fd"] == fd
                && c["kind"] == "file"
                && c["path"] == log.to_str().unwrap()),
            "{name}: {channels:?}"
        );
    }
    // The same file opened by the command itself is the command's write, judged.
    let log = f.root.join("opened.log");
    let a = run(
        "opened",
        1,
        fs::File::create(&log).unwrap(),
        &format!("echo again >> {}", log.display()),
    );
    assert_eq!(a["verdict"], "flagged", "{a:#}");
    assert!(
        a["out_of_scope"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == log.to_str().unwrap() && c["access"] == "write"),
        "{a:#}"
    );
    let golden = f.root.join("secret/golden.yaml");
    let a = run(
        "golden",
        1,
        fs::OpenOptions::new().append(true).open(&golden).unwrap(),
        "echo out",
    );
    assert_eq!(a["verdict"], "disqualified", "{a:#}");
    assert!(
        a["cheat_hits"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == golden.to_str().unwrap()
                && c["access"] == "write"
                && c["reached"] == "inherited"),
        "{a:#}"
    );
}
