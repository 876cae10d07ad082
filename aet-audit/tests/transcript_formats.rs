//! Every transcript format aet reads, on files the agents themselves wrote (the tools'
//! repositories' own test data) and on files composed from each tool's published types where
//! its repository keeps none: `tests/data/transcripts/SOURCES.md` says which is which.

use std::path::{Path, PathBuf};

use aet_audit::transcript::{self, Kind, ToolCall};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/transcripts")
        .join(name)
}

/// The calls of one fixture, with the format detection found for it.
fn calls(name: &str) -> (&'static str, Vec<ToolCall>) {
    let p = data(name);
    let bytes = std::fs::read(&p).unwrap();
    let f = transcript::detect(&p, &bytes).unwrap_or_else(|| panic!("{name}: no format"));
    (f.name(), f.tool_calls(&p, &bytes).unwrap())
}

/// (tool, kind, command, paths, line) of each call.
type Shown = (String, Kind, Option<String>, Vec<String>, usize);

fn show(calls: &[ToolCall]) -> Vec<Shown> {
    calls
        .iter()
        .map(|c| {
            (
                c.tool.clone(),
                c.kind,
                c.command.clone(),
                c.paths.clone(),
                c.line,
            )
        })
        .collect()
}

fn call(tool: &str, kind: Kind, command: Option<&str>, paths: &[&str], line: usize) -> Shown {
    (
        tool.into(),
        kind,
        command.map(str::to_owned),
        paths.iter().map(|p| (*p).to_owned()).collect(),
        line,
    )
}

#[test]
fn codex_rollouts_give_shell_exec_patch_and_local_shell_calls_in_their_workdirs() {
    let (f, c) =
        calls("codex-rollout-2026-11-30T09-00-00-0199a8f2-5c1e-7b20-9d4e-3c2f1a0b9e77.jsonl");
    assert_eq!(f, "codex");
    assert_eq!(
        show(&c),
        [
            call(
                "shell",
                Kind::Shell,
                Some("cat answers/key.txt"),
                &["/work/task/answers/key.txt"],
                4
            ),
            call("shell_command", Kind::Shell, Some("ls -la src"), &[], 7),
            call(
                "exec_command",
                Kind::Shell,
                Some("python3 -m pytest -q test_lib.py"),
                &["/work/task/tests/test_lib.py"],
                9
            ),
            call(
                "apply_patch",
                Kind::Edit,
                None,
                &["/work/task/src/lib.py", "/work/task/NOTES.md"],
                11
            ),
            call(
                "local_shell",
                Kind::Shell,
                Some("head -1 ../other/README.md"),
                &["/work/other/README.md"],
                13
            ),
        ]
    );
    // Outputs end the calls they answer; a call without one is still running.
    assert_eq!(
        c[0].ended_ns.unwrap() - c[0].started_ns.unwrap(),
        1_000_000_000
    );
    assert_eq!(c[4].ended_ns, None);
}

#[test]
fn codex_exec_json_gives_one_call_per_item() {
    let (f, c) = calls("codex-exec.jsonl");
    assert_eq!(f, "codex-exec");
    assert_eq!(
        show(&c),
        [
            call(
                "command_execution",
                Kind::Shell,
                Some("cat answers/key.txt"),
                &["answers/key.txt"],
                3
            ),
            call(
                "file_change",
                Kind::Edit,
                None,
                &["/work/task/src/lib.py"],
                5
            ),
        ]
    );
}

#[test]
fn claude_sessions_are_read_with_their_subagents_and_stream_json_without_times() {
    let r = transcript::read(&data("claude-session"), None).unwrap();
    assert_eq!(r.format(), "claude-jsonl");
    let mut c = r.calls;
    c.sort_by_key(|c| c.started_ns);
    let tools: Vec<(&str, Kind, &str)> = c
        .iter()
        .map(|c| {
            (
                c.tool.as_str(),
                c.kind,
                c.file.file_name().unwrap().to_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tools,
        [
            (
                "Bash",
                Kind::Shell,
                "3f1c0a4e-7d2b-4c1e-9a55-2b7e0c9d1a10.jsonl"
            ),
            (
                "Task",
                Kind::Other,
                "3f1c0a4e-7d2b-4c1e-9a55-2b7e0c9d1a10.jsonl"
            ),
            ("Glob", Kind::Search, "agent-a1b2c3d4.jsonl"),
            ("Read", Kind::Read, "agent-a1b2c3d4.jsonl"),
            (
                "Edit",
                Kind::Edit,
                "3f1c0a4e-7d2b-4c1e-9a55-2b7e0c9d1a10.jsonl"
            ),
        ]
    );
    assert_eq!(
        c[0].paths,
        ["/work/task/answers/key.txt"],
        "resolved against the line's cwd"
    );

    let (f, c) = calls("claude-stream.jsonl");
    assert_eq!(f, "claude-jsonl");
    assert_eq!(
        show(&c),
        [call(
            "Bash",
            Kind::Shell,
            Some("cat answers/key.txt"),
            &["answers/key.txt"],
            2
        )]
    );
    assert_eq!(c[0].started_ns, None);

    // `--output-format json --verbose`: the same messages as one array.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("out.json");
    std::fs::write(
        &p,
        r#"[{"type":"system","subtype":"init","session_id":"s"},
{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_9","name":"Write","input":{"file_path":"/w/x.txt","content":"y"}}]},"session_id":"s"}]"#,
    )
    .unwrap();
    let r = transcript::read(&p, None).unwrap();
    assert_eq!(r.format(), "claude-json");
    assert_eq!(
        show(&r.calls),
        [call("Write", Kind::Write, None, &["/w/x.txt"], 2)]
    );
}

#[test]
fn gemini_chats_give_each_call_once_however_often_its_message_is_written() {
    let (f, c) = calls("gemini-session-2026-11-30T09-00-7c0e4f1a.jsonl");
    assert_eq!(f, "gemini");
    assert_eq!(
        show(&c),
        [
            call(
                "run_shell_command",
                Kind::Shell,
                Some("cat answers/key.txt"),
                &["answers/key.txt"],
                3
            ),
            call("read_file", Kind::Read, None, &["/work/task/src/lib.py"], 5),
        ]
    );
    assert!(c[0].started_ns.is_some());
    // The chats of before mid-2026: one JSON document.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("session-2025-10-18T14-57-f86f5318.json");
    std::fs::write(
        &p,
        r#"{"sessionId":"f86f","projectHash":"79b6","startTime":"2025-10-18T14:57:28.974Z","lastUpdated":"2025-10-18T14:58:07.161Z","messages":[
{"id":"1","timestamp":"2025-10-18T14:57:28.974Z","type":"user","content":"list"},
{"id":"2","timestamp":"2025-10-18T14:57:30.000Z","type":"gemini","content":"","toolCalls":[{"id":"list_directory-1","name":"list_directory","args":{"dir_path":"/home/u/p"},"status":"success","timestamp":"2025-10-18T14:57:31.000Z"}]}]}"#,
    )
    .unwrap();
    let r = transcript::read(&p, None).unwrap();
    assert_eq!(r.format(), "gemini");
    assert_eq!(
        show(&r.calls),
        [call(
            "list_directory",
            Kind::Search,
            None,
            &["/home/u/p"],
            3
        )]
    );
}

#[test]
fn inspect_eval_zips_and_json_logs_are_read_from_inspects_own_test_data() {
    let (f, c) = calls("inspect-log_message_deduplication.eval");
    assert_eq!(f, "inspect");
    assert_eq!(c.len(), 5);
    assert!(
        c.iter().all(|c| c.tool == "bash"
            && c.kind == Kind::Shell
            && c.command.as_deref() == Some("ls"))
    );
    // From the tool events: when each started and completed.
    assert!(
        c.iter()
            .all(|c| c.ended_ns.unwrap() > c.started_ns.unwrap())
    );
    assert!(
        c[0].file
            .to_str()
            .unwrap()
            .ends_with(".eval#samples/0_epoch_1.json"),
        "{:?}",
        c[0].file
    );
    // A log whose messages are tool results only has no calls, and is no error.
    let (f, c) = calls("inspect-log_tool_call_error.json");
    assert_eq!(f, "inspect");
    assert!(c.is_empty());
}

#[test]
fn swe_agent_trajectories_give_its_tools_kinds_in_the_working_dir() {
    let (f, c) = calls("swe-agent-6e44b9__sweagenttestrepo-1c2844.traj");
    assert_eq!(f, "swe-agent");
    let file = "/SWE-agent__test-repo/tests/missing_colon.py";
    assert_eq!(
        show(&c),
        [
            call("find_file", Kind::Search, None, &[], 5),
            call("open", Kind::Read, None, &[file], 16),
            call("edit", Kind::Edit, None, &[file], 27),
            call(
                "bash",
                Kind::Shell,
                Some(&format!("python3 {file}")),
                &[file],
                38
            ),
            call("submit", Kind::Other, None, &[], 49),
        ]
    );
}

#[test]
fn mini_swe_agent_runs_the_one_fenced_command_of_each_assistant_message() {
    let (f, c) = calls("mini-swe-agent-local.traj.json");
    assert_eq!(f, "mini-swe-agent");
    assert_eq!(
        show(&c),
        [
            call("bash", Kind::Shell, Some("echo 'hello world'"), &[], 12),
            call(
                "bash",
                Kind::Shell,
                Some("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
                &[],
                20
            ),
        ]
    );
    // The system prompt's examples are not calls; `mswea_bash_command` blocks are.
    let (_, c) = calls("mini-swe-agent-github_issue.traj.json");
    assert_eq!(c.len(), 10);
    assert_eq!(c[3].command.as_deref(), Some("cat tests/missing_colon.py"));
    assert_eq!(c[3].line, 36);
    // Newer versions: tool calls.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("i1.traj.json");
    std::fs::write(
        &p,
        r#"{"info":{"mini_version":"2.0.0"},"trajectory_format":"mini-swe-agent-1.1","messages":[
{"role":"system","content":"You can run bash."},
{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\": \"cat /testbed/setup.py\"}"}}]},
{"role":"tool","tool_call_id":"call_1","content":"..."}]}"#,
    )
    .unwrap();
    let r = transcript::read(&p, None).unwrap();
    assert_eq!(r.format(), "mini-swe-agent");
    assert_eq!(
        show(&r.calls),
        [call(
            "bash",
            Kind::Shell,
            Some("cat /testbed/setup.py"),
            &["/testbed/setup.py"],
            3
        )]
    );
}

#[test]
fn openhands_event_lists_give_run_read_and_edit_actions() {
    let (f, c) = calls("openhands-wrong_initial_state.json");
    assert_eq!(f, "openhands");
    let mv = "mv /workspace/game_2048.py /workspace/2048.py";
    assert_eq!(
        show(&c),
        [
            call("read", Kind::Read, None, &["/workspace"], 17),
            call(
                "run",
                Kind::Shell,
                Some(mv),
                &["/workspace/game_2048.py", "/workspace/2048.py"],
                140
            ),
            call("read", Kind::Read, None, &["/workspace"], 274),
        ]
    );
    assert_eq!(
        c[1].cwd.as_deref(),
        Some("/workspace"),
        "from its observation"
    );
    let (_, c) = calls("openhands-basic.json");
    assert_eq!(show(&c)[0].1, Kind::Edit);
    assert_eq!(c[0].paths, ["/workspace/game_2048.py"]);
    assert!(c[0].line > 1);
}

#[test]
fn a_directory_is_walked_and_each_file_read_in_its_own_format() {
    let r = transcript::read(&data(""), None).unwrap();
    let mut formats: Vec<&str> = r.files.iter().map(|(_, f)| *f).collect();
    formats.sort();
    formats.dedup();
    assert_eq!(
        formats,
        [
            "claude-jsonl",
            "codex",
            "codex-exec",
            "gemini",
            "inspect",
            "mini-swe-agent",
            "openhands",
            "swe-agent"
        ]
    );
    assert!(r.unrecognized.is_empty(), "{:?}", r.unrecognized);
    // A named format reads every file as that format: the others give no calls, not errors.
    let r = transcript::read(&data("claude-session"), transcript::format_by_name("codex")).unwrap();
    assert!(r.calls.is_empty());
}

#[test]
fn a_directory_of_nothing_known_is_an_error_naming_the_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.json"), r#"{"hello": "world"}"#).unwrap();
    let e = transcript::read(dir.path(), None).unwrap_err();
    assert!(
        e.contains("notes.json") && e.contains("--transcript-format"),
        "{e}"
    );
    // Beside a transcript it is left out, and said.
    std::fs::copy(data("codex-exec.jsonl"), dir.path().join("codex.jsonl")).unwrap();
    let r = transcript::read(dir.path(), None).unwrap();
    assert_eq!(r.calls.len(), 2);
    assert_eq!(r.unrecognized, [dir.path().join("notes.json")]);
    // Not UTF-8, not JSON: an error naming the file and the place.
    std::fs::write(
        dir.path().join("codex.jsonl"),
        b"{\"type\":\"turn.started\"}\n\xff\xfe\n",
    )
    .unwrap();
    let e = transcript::read(dir.path(), None).unwrap_err();
    assert!(e.contains("codex.jsonl") && e.contains("UTF-8"), "{e}");
}
