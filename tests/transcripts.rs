//! The agent's transcripts decide as the kernel's record does (the seed's audit read only
//! them): a cheat a transcript names disqualifies, a contaminant makes isolation not clean, and
//! a rule on commands matches the commands the agent says it ran.

use std::{fs, path::Path};

use aet_tests::{audit_json as audit, *};

/// A Claude Code transcript of Bash calls, one per command.
fn transcript(dir: &Path, commands: &[&str]) {
    fs::create_dir_all(dir).unwrap();
    let mut s = String::new();
    for (i, c) in commands.iter().enumerate() {
        let call = serde_json::json!({"type": "assistant", "message": {"content": [
            {"type": "tool_use", "id": format!("t{i}"), "name": "Bash", "input": {"command": c}}
        ]}});
        s.push_str(&format!("{call}\n"));
    }
    fs::write(dir.join("round-1.jsonl"), s).unwrap();
}

#[test]
fn a_cheat_only_a_transcript_names_disqualifies_and_command_rules_match_its_commands() {
    let t = Tree::new();
    t.dirs(&["task"]).file("task/README.md", "the task\n");
    let run = t.p("run");
    let r = run_in(
        &run,
        &[],
        &[
            "sh",
            "-c",
            &format!("cat {} > /dev/null", t.s("task/README.md")),
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let policy = t.p("policy.toml");
    fs::write(
        &policy,
        "[cheats]\noracle = { text = 'import\\s+solver\\.oracle' }\n\
         [contaminants]\nother = { argv = 'other/projects' }\n\
         [warns]\npeek = 'never-named\\.txt'\n",
    )
    .unwrap();

    // The kernel saw nothing of the rules: clean, every rule unused.
    let (out, v) = audit(&run, &policy, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert_eq!(v["unused_rules"].as_array().unwrap().len(), 3, "{v}");

    // The agent says it ran the oracle and looked at another project.
    let dir = t.p("transcripts");
    transcript(
        &dir,
        &[
            "python3 -c 'import solver.oracle; print(solver.oracle.answer())'",
            "ls /other/projects/p1",
        ],
    );
    let (out, v) = audit(&run, &policy, &["--transcripts", dir.to_str().unwrap()]);
    let summary = text(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{summary}");
    assert_eq!(v["verdict"], "disqualified");
    assert_eq!(v["disqualified"], true);
    assert_eq!(v["isolation_clean"], false, "the contaminant it names");
    assert!(
        v["cheat_hits"].as_array().unwrap().is_empty(),
        "the kernel saw no cheat"
    );
    let hits: Vec<(&str, &str)> = v["transcripts"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["rule"].as_str().unwrap(), h["severity"].as_str().unwrap()))
        .collect();
    assert_eq!(
        hits,
        [
            ("cheats.oracle", "cheat"),
            ("contaminants.other", "contaminant")
        ]
    );
    assert_eq!(
        v["unused_rules"].as_array().unwrap(),
        &[serde_json::json!("warns.peek")],
        "a rule a transcript matched is used"
    );
    assert!(
        summary.contains("CHEAT  cheats.oracle named by the agent's Bash call at")
            && summary.contains("round-1.jsonl:1: python3 -c 'import solver.oracle"),
        "{summary}"
    );
}

#[test]
fn a_run_with_transcripts_and_no_record_gets_a_verdict_that_says_what_it_rests_on() {
    let t = Tree::new();
    let policy = t.p("policy.toml");
    fs::write(
        &policy,
        "[cheats]\noracle = { text = 'import\\s+solver\\.oracle' }\n\
         [warns]\npeek = 'never-named\\.txt'\n",
    )
    .unwrap();
    let run = t.p("old-run");
    fs::create_dir_all(&run).unwrap();
    let dir = run.join("transcripts");

    // An account that names nothing of the rules: inconclusive, never clean.
    transcript(&dir, &["ls /task"]);
    let (out, v) = audit(&run, &policy, &["--transcripts", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(v["verdict"], "inconclusive");
    assert_eq!(v["complete"], false);
    let reason = v["incomplete_reasons"][0].as_str().unwrap();
    assert!(
        reason.contains("rests on the agent's own account"),
        "{reason}"
    );

    // An account that names a cheat: disqualified, on its word.
    transcript(&dir, &["ls /task", "python3 -c 'import solver.oracle'"]);
    let (out, v) = audit(&run, &policy, &["--transcripts", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(v["disqualified"], true);
    assert_eq!(v["transcripts"]["hits"][0]["rule"], "cheats.oracle");
    assert_eq!(v["unused_rules"], serde_json::json!(["warns.peek"]));

    // Not named: the run directory's own transcripts are read, the same verdict.
    let (out, v) = audit(&run, &policy, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(
        v["transcripts"]["source"],
        dir.to_str().unwrap(),
        "{}",
        v["transcripts"]
    );

    // Neither a record nor a transcript: an error naming the run.
    fs::remove_dir_all(&dir).unwrap();
    let (out, _) = audit(&run, &policy, &[]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no kernel record (ledger.arrow) and no transcripts"),
        "{}",
        text(&out.stderr)
    );
}

/// A transcript of `cmds` run in `cwd`, in `format`, as that agent writes it: the file's name, its
/// text, and for each call a string only its record holds (where the audit must point).
fn agent_transcript(format: &str, cwd: &str, cmds: &[&str]) -> (&'static str, String, Vec<String>) {
    use serde_json::json;
    let lines = |v: Vec<serde_json::Value>| v.iter().map(|l| format!("{l}\n")).collect::<String>();
    let ids: Vec<String> = (0..cmds.len())
        .map(|i| format!("call_{format}_{i}"))
        .collect();
    let at = |i: usize| format!("2026-11-30T09:00:{:02}.000000", i * 2);
    match format {
        "claude-jsonl" => {
            let mut v = Vec::new();
            for (c, id) in cmds.iter().zip(&ids) {
                v.push(json!({"type": "assistant", "cwd": cwd, "sessionId": "s", "message": {"role": "assistant", "content": [
                    {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": c}}]}}));
                v.push(json!({"type": "user", "cwd": cwd, "sessionId": "s", "message": {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "content": ""}]}}));
            }
            ("session.jsonl", lines(v), ids)
        }
        "claude-json" => {
            let v: Vec<_> = cmds
                .iter()
                .zip(&ids)
                .map(|(c, id)| {
                    json!({"type": "assistant", "session_id": "s", "message": {"content": [
                {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": c}}]}})
                })
                .collect();
            let text = format!(
                "[{}]\n",
                v.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(",\n")
            );
            ("out.json", text, ids)
        }
        "codex" => {
            let mut v = vec![
                json!({"timestamp": "2026-11-30T09:00:00Z", "type": "session_meta", "payload": {"id": "s", "cwd": cwd}}),
            ];
            for (c, id) in cmds.iter().zip(&ids) {
                let args = json!({"command": ["bash", "-lc", c], "workdir": cwd}).to_string();
                v.push(
                    json!({"timestamp": "2026-11-30T09:00:01Z", "type": "response_item", "payload":
                    {"type": "function_call", "name": "shell", "arguments": args, "call_id": id}}),
                );
                // Days before the run: the times place no access, the paths do.
                v.push(
                    json!({"timestamp": "2026-11-30T09:00:02Z", "type": "response_item", "payload":
                    {"type": "function_call_output", "call_id": id, "output": "ok"}}),
                );
            }
            ("rollout-2026-11-30T09-00-00-s.jsonl", lines(v), ids)
        }
        "codex-exec" => {
            let mut v = vec![json!({"type": "thread.started", "thread_id": "t"})];
            for (c, id) in cmds.iter().zip(&ids) {
                let item = json!({"id": id, "type": "command_execution", "command": format!("bash -lc '{c}'"), "status": "completed"});
                v.push(json!({"type": "item.completed", "item": item}));
            }
            ("exec.jsonl", lines(v), ids)
        }
        "inspect" => {
            let calls: Vec<_> = cmds.iter().zip(&ids).map(|(c, id)| json!({"role": "assistant", "content": "",
                "tool_calls": [{"id": id, "function": "bash", "arguments": {"cmd": c}, "type": "function"}]})).collect();
            let log = json!({"version": 2, "status": "success", "eval": {"task": "t", "model": "m"},
                "samples": [{"id": 1, "epoch": 1, "messages": calls}]});
            ("log.json", serde_json::to_string_pretty(&log).unwrap(), ids)
        }
        "swe-agent" => {
            let steps: Vec<_> = cmds
                .iter()
                .map(|c| {
                    json!({"action": c, "observation": "",
                "state": {"open_file": "n/a", "working_dir": cwd}, "thought": ""})
                })
                .collect();
            let traj =
                json!({"environment": "docker", "trajectory": steps, "history": [], "info": {}});
            let needles = cmds.iter().map(|c| (*c).to_owned()).collect();
            (
                "i1.traj",
                serde_json::to_string_pretty(&traj).unwrap(),
                needles,
            )
        }
        "mini-swe-agent" => {
            let mut v = vec![json!({"role": "system", "content": "You run commands."})];
            let mut needles = Vec::new();
            for c in cmds {
                let content = format!("THOUGHT: next.\n\n```mswea_bash_command\n{c}\n```");
                v.push(json!({"role": "assistant", "content": content}));
                v.push(json!({"role": "user", "content": "<returncode>0</returncode>"}));
                needles.push(content);
            }
            (
                "i1.traj.json",
                serde_json::to_string_pretty(&v).unwrap(),
                needles,
            )
        }
        "openhands" => {
            let mut v = Vec::new();
            let mut needles = Vec::new();
            for (i, c) in cmds.iter().enumerate() {
                v.push(json!({"id": 2 * i, "timestamp": at(2 * i), "source": "agent", "message": format!("Running command: {c}"),
                    "action": "run", "args": {"command": c, "is_input": false, "thought": ""}}));
                v.push(json!({"id": 2 * i + 1, "timestamp": at(2 * i + 1), "source": "agent", "cause": 2 * i, "observation": "run",
                    "content": "", "extras": {"command": c, "metadata": {"exit_code": 0, "working_dir": cwd}}}));
                needles.push(at(2 * i));
            }
            (
                "trajectory.json",
                serde_json::to_string_pretty(&v).unwrap(),
                needles,
            )
        }
        "gemini" => {
            let mut v = vec![
                json!({"sessionId": "g", "projectHash": "h", "startTime": "2026-11-30T09:00:00Z", "lastUpdated": "2026-11-30T09:00:00Z"}),
            ];
            for (c, id) in cmds.iter().zip(&ids) {
                v.push(json!({"id": format!("m-{id}"), "timestamp": "2026-11-30T09:00:01Z", "type": "gemini", "content": "",
                    "toolCalls": [{"id": id, "name": "run_shell_command", "args": {"command": c}, "status": "success", "timestamp": "2026-11-30T09:00:01Z"}]}));
            }
            ("session-2026-11-30T09-00-g.jsonl", lines(v), ids)
        }
        f => panic!("no transcript writer for {f}"),
    }
}

#[test]
fn every_agents_transcript_names_the_tool_call_each_flagged_access_came_from() {
    let t = Tree::new();
    t.dirs(&["task/answers", "other/projects/p1"])
        .file("task/answers/key.txt", "42\n")
        .file("other/projects/p1/README.md", "another agent's work\n");
    let task = t.s("task");
    // The commands, each a tool call, as the agent ran them in the task's directory.
    let cmds = [
        "cat answers/key.txt",
        "head -1 ../other/projects/p1/README.md",
    ];
    let run = t.p("run");
    let script = format!(
        "cd {task} && {} >/dev/null && {} >/dev/null",
        cmds[0], cmds[1]
    );
    let r = run_in(&run, &[], &["sh", "-c", &script]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let policy = t.p("policy.toml");
    fs::write(
        &policy,
        "[cheats]\nkey = 'answers/key\\.txt'\n[contaminants]\nother = 'other/projects/'\n",
    )
    .unwrap();

    for format in [
        "claude-jsonl",
        "claude-json",
        "codex",
        "codex-exec",
        "inspect",
        "swe-agent",
        "mini-swe-agent",
        "openhands",
        "gemini",
    ] {
        let (name, body, needles) = agent_transcript(format, &task, &cmds);
        let dir = t.p(&format!("transcripts-{format}"));
        // Under a subfolder: the directory is walked, and the format found by its content.
        fs::create_dir_all(dir.join("agent")).unwrap();
        let file = dir.join("agent").join(name);
        fs::write(&file, &body).unwrap();
        let line_of = |needle: &str| {
            let quoted = serde_json::to_string(needle).unwrap();
            let i = body
                .find(&quoted)
                .unwrap_or_else(|| panic!("{format}: {quoted} not in {body}"));
            body[..i].matches('\n').count() + 1
        };
        let (out, v) = audit(&run, &policy, &["--transcripts", dir.to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{format}: {}",
            text(&out.stderr)
        );
        assert_eq!(v["transcripts"]["format"], format, "{format}");
        assert_eq!(v["transcripts"]["tool_calls"], 2, "{format}");
        for (hits, i) in [("cheat_hits", 0), ("contaminant_hits", 1)] {
            let f = &v[hits][0];
            assert_eq!(f["mentioned_in_transcript"], true, "{format} {hits}: {f}");
            let c = &f["tool_call"];
            assert_eq!(c["file"], file.to_str().unwrap(), "{format} {hits}: {c}");
            assert_eq!(c["line"], line_of(&needles[i]), "{format} {hits}: {c}");
            assert_eq!(c["kind"], "shell", "{format} {hits}: {c}");
            assert_eq!(c["command"], cmds[i], "{format} {hits}: {c}");
            assert_eq!(c["by"], "path", "{format} {hits}: {c}");
        }
        assert!(
            text(&out.stdout).contains(&format!("tool calls ({format})")),
            "{format}: {}",
            text(&out.stdout)
        );
        // Both commands ran. A transcript without times is matched by command: no call is
        // unrun, and the shell that ran both, the harness's, is a process no call started.
        // OpenHands' times, without a zone, place nothing. Codex's fixture has times days
        // before the run, with results: it claims both ran when the kernel saw neither, each
        // call listed by time, and nothing of the run is in a call's window. Gemini's calls
        // have times and no results: still running as far as the transcript says, so every
        // exec after them is in their window.
        let unrun: Vec<(String, String)> = v["transcripts"]["unrun_calls"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|u| {
                        (
                            u["missing"][0].as_str().unwrap().to_owned(),
                            u["matched_by"].as_str().unwrap().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let expect: Vec<(String, String)> = if format == "codex" {
            vec![
                ("cat".into(), "time".into()),
                ("head".into(), "time".into()),
            ]
        } else {
            Vec::new()
        };
        assert_eq!(unrun, expect, "{format}: {}", v["transcripts"]);
        let unaccounted: Vec<&str> = v["transcripts"]["unaccounted"]
            .as_array()
            .map(|a| a.iter().map(|p| p["argv"][0].as_str().unwrap()).collect())
            .unwrap_or_default();
        let expect: &[&str] = match format {
            "gemini" => &[],
            "codex" => &["sh", "cat", "head"],
            _ => &["sh"],
        };
        assert_eq!(unaccounted, expect, "{format}: {}", v["transcripts"]);
    }
}

#[test]
fn a_path_rule_written_as_a_command_line_is_warned_of_in_the_report() {
    let t = Tree::new();
    let policy = t.p("policy.toml");
    fs::write(&policy, "[cheats]\noracle = 'import\\s+solver\\.oracle'\n").unwrap();
    let run = t.p("old-run");
    let dir = run.join("transcripts");
    transcript(&dir, &["python3 -c 'import solver.oracle'"]);
    let (out, v) = audit(&run, &policy, &["--transcripts", dir.to_str().unwrap()]);
    // It loads (paths may hold spaces), and still matches the transcript's command text.
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let w = v["policy_warnings"][0].as_str().unwrap();
    assert!(
        w.starts_with("line 2: cheats.oracle") && w.contains("text ="),
        "{w}"
    );
    let summary = text(&out.stdout);
    assert!(
        summary.contains("POLICY WARN   line 2: cheats.oracle"),
        "{summary}"
    );
}

#[test]
fn transcripts_are_correlated_and_the_unmentioned_read_is_the_headline() {
    let f = AgentTask::new();
    let run = f.run_agent(&["check.sh"]);
    let m = meta(&run.join("ledger.arrow"));
    let start: i64 = m["aet.started_ns"].parse().unwrap();
    let end: i64 = m["aet.ended_ns"].parse().unwrap();
    let iso = |ns: i64| {
        let secs = ns.div_euclid(1_000_000_000);
        let frac = ns.rem_euclid(1_000_000_000);
        let out = std::process::Command::new("date")
            .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%S"])
            .output()
            .unwrap();
        format!("{}.{frac:09}Z", text(&out.stdout).trim())
    };
    let dir = f.p("transcripts");
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("round-1.jsonl"),
        format!(
            concat!(
                "{{\"type\":\"assistant\",\"timestamp\":\"{}\",\"message\":{{\"content\":[{{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"Bash\",\"input\":{{\"command\":\"sh run-agent.sh {}\"}}}}]}}}}\n",
                "{{\"type\":\"user\",\"timestamp\":\"{}\",\"message\":{{\"content\":[{{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"ok\"}}]}}}}\n",
                "{{\"type\":\"assistant\",\"timestamp\":\"{}\",\"message\":{{\"content\":[{{\"type\":\"tool_use\",\"id\":\"t2\",\"name\":\"Read\",\"input\":{{\"file_path\":\"{}\"}}}}]}}}}\n"
            ),
            iso(start - 1_000_000_000),
            f.s("task/README.md"),
            iso(end + 1_000_000_000),
            iso(end + 2_000_000_000),
            f.s("task/never-opened.md"),
        ),
    )
    .unwrap();
    let (out, v) = audit(&run, &f.policy(), &["--transcripts", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let t = &v["transcripts"];
    assert_eq!(t["tool_calls"], 2);
    assert_eq!(t["unmentioned_findings"], 1);
    assert!(
        t["headline"].as_str().unwrap().contains("only the kernel"),
        "{t}"
    );
    let cheat = &v["cheat_hits"][0];
    assert_eq!(cheat["mentioned_in_transcript"], false);
    assert_eq!(
        cheat["tool_call"]["tool"], "Bash",
        "the call running at the time: {cheat}"
    );
    let paths = t["paths"].as_array().unwrap();
    let seen = |p: &str| {
        paths
            .iter()
            .find(|x| x["path"] == p)
            .map(|x| x["seen_by_kernel"].as_bool().unwrap())
    };
    assert_eq!(seen(&f.s("task/README.md")), Some(true));
    assert_eq!(seen(&f.s("task/never-opened.md")), Some(false));
    assert!(text(&out.stdout).contains("HEADLINE"));
}

/// A Claude Code transcript of Bash calls, each at a time and with the result it says it got.
fn timed_transcript(dir: &Path, calls: &[(&str, i64, i64, &str)]) {
    fs::create_dir_all(dir).unwrap();
    let at = |ns: i64| {
        let secs = ns.div_euclid(1_000_000_000);
        let frac = ns.rem_euclid(1_000_000_000);
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        // Civil date from days since the epoch (Howard Hinnant's algorithm).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        let y = yoe + era * 400 + i64::from(m <= 2);
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
            rem / 3600,
            rem / 60 % 60,
            rem % 60,
            frac
        )
    };
    let mut s = String::new();
    for (i, (cmd, start, end, result)) in calls.iter().enumerate() {
        let call = serde_json::json!({"type": "assistant", "timestamp": at(*start), "message":
            {"content": [{"type": "tool_use", "id": format!("t{i}"), "name": "Bash",
                          "input": {"command": cmd}}]}});
        let answer = serde_json::json!({"type": "user", "timestamp": at(*end), "message":
            {"content": [{"type": "tool_result", "tool_use_id": format!("t{i}"),
                          "content": result}]}});
        s.push_str(&format!("{call}\n{answer}\n"));
    }
    fs::write(dir.join("session.jsonl"), s).unwrap();
}

#[test]
fn a_call_that_never_ran_and_a_process_no_call_started_are_listed_and_a_policy_judges_them() {
    let t = Tree::new();
    t.dirs(&["task"])
        .file("task/README.md", "the task\n")
        .file("task/late.txt", "read after every call had returned\n");
    let run = t.p("run");
    let script = format!(
        "cat {} >/dev/null; sleep 3; cat {} >/dev/null",
        t.s("task/README.md"),
        t.s("task/late.txt")
    );
    let r = run_in(&run, &[], &["sh", "-c", &script]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let rows = r.rows();
    let cat = rows
        .iter()
        .find(|x| x.kind == "exec" && x.ret == Some(0) && x.comm == "cat")
        .expect("the first cat's exec");
    let t0 = cat.ts_ns;
    // The agent says it read the task, then ran the tests and saw them pass: the tests never
    // ran. The second cat ran three seconds later, when no call was running.
    let dir = run.join("agent/rounds/1");
    timed_transcript(
        &dir,
        &[
            (
                &format!("cat {}", t.s("task/README.md")),
                t0 - 50_000_000,
                t0 + 50_000_000,
                "the task",
            ),
            (
                "cd /task && pytest -q tests/",
                t0 + 100_000_000,
                t0 + 150_000_000,
                "5 passed in 0.12s",
            ),
        ],
    );
    let policy = t.p("policy.toml");
    fs::write(&policy, "[warns]\nnothing = 'never-named'\n").unwrap();
    // Found in the run directory by content, no --transcripts.
    let (out, v) = audit(&run, &policy, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "listed, not judged: {}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stdout).contains("NEVER RAN     pytest (the Bash call at ")
            && text(&out.stdout).contains("which says it returned \"5 passed in 0.12s\""),
        "{}",
        text(&out.stdout)
    );
    let tr = &v["transcripts"];
    assert_eq!(tr["tool_calls"], 2, "{tr}");
    let unrun = tr["unrun_calls"].as_array().expect("unrun calls");
    assert_eq!(unrun.len(), 1, "{unrun:?}");
    assert_eq!(unrun[0]["missing"], serde_json::json!(["pytest"]));
    assert_eq!(unrun[0]["result"], "5 passed in 0.12s");
    assert_eq!(unrun[0]["matched_by"], "time");
    assert_eq!(unrun[0]["tool_call"]["line"], 3, "{}", unrun[0]);
    let late: Vec<&serde_json::Value> = tr["unaccounted"]
        .as_array()
        .expect("unaccounted processes")
        .iter()
        .filter(|p| p["argv"][1] == t.s("task/late.txt"))
        .collect();
    assert_eq!(late.len(), 1, "{}", tr["unaccounted"]);
    assert!(
        late[0]["sample"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| *s == t.s("task/late.txt")),
        "what it touched: {}",
        late[0]
    );
    assert!(
        late[0]["ancestry"][0].as_str().unwrap().ends_with(" sh"),
        "{}",
        late[0]
    );
    // The first cat and the sleep started while the first call ran: accounted for.
    assert!(
        !tr["unaccounted"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["argv"][1] == t.s("task/README.md")),
        "{}",
        tr["unaccounted"]
    );

    // A policy makes either a finding.
    fs::write(
        &policy,
        "[transcripts]\nunrun = 'warn'\nunaccounted = 'contaminant'\n",
    )
    .unwrap();
    let (out, v) = audit(&run, &policy, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert_eq!(v["verdict"], "flagged");
    let warn = &v["warnings"][0];
    assert_eq!(warn["rule"], "transcripts.unrun", "{warn}");
    assert_eq!(warn["path"], "pytest");
    assert_eq!(warn["tool_call"]["line"], 3, "{warn}");
    assert!(
        v["contaminant_hits"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["rule"] == "transcripts.unaccounted" && f["argv"][1] == t.s("task/late.txt")),
        "{}",
        v["contaminant_hits"]
    );
    // A bad level is named.
    fs::write(&policy, "[transcripts]\nunrun = 'maybe'\n").unwrap();
    let (out, _) = audit(&run, &policy, &[]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stderr).contains("transcripts.unrun = \"maybe\": expected"),
        "{}",
        text(&out.stderr)
    );
}
