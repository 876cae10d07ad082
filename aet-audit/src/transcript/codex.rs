//! OpenAI Codex: its session rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`) and the
//! events of `codex exec --json`.
//!
//! A rollout's lines are `{timestamp, type, payload}`: `session_meta` and `turn_context` carry the
//! working directory; `response_item` payloads are the model's calls (`function_call` to
//! `shell`, `shell_command`, `exec_command` with their `workdir`, `local_shell_call`,
//! `custom_tool_call` to `apply_patch` with its file headers) and their outputs (by `call_id`).
//! Rollouts of before late 2025 have the payloads as lines of their own.
//!
//! `codex exec --json` prints `item.started` / `item.completed` events whose item is a
//! `command_execution`, a `file_change` or an `mcp_tool_call` (no times); its older form printed
//! `{id, msg}` events (`exec_command_begin` with `command` and `cwd`, `patch_apply_begin`).

use std::{collections::HashMap, path::Path};

use serde_json::Value;

use super::{
    Kind, Probe, ToolCall, TranscriptFormat, arguments, json_lines, path_arguments, shell_script,
    str_of, time_of, utf8,
};

/// Codex's session rollouts.
pub struct Rollout;

/// `codex exec --json`.
pub struct ExecJson;

const ROLLOUT_TYPES: [&str; 5] = [
    "session_meta",
    "response_item",
    "turn_context",
    "event_msg",
    "compacted",
];
const ITEM_TYPES: [&str; 6] = [
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "reasoning",
];

/// The strings of a JSON array.
fn strings(v: Option<&Value>) -> Option<Vec<String>> {
    v?.as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// The files an `apply_patch` patch names (`*** Add File: p`, `*** Update File: p`,
/// `*** Delete File: p`, `*** Move to: p`), and whether it only adds files.
pub fn patch_files(patch: &str) -> (Vec<String>, bool) {
    let mut files = Vec::new();
    let mut only_adds = true;
    for l in patch.lines() {
        for (h, add) in [
            ("*** Add File: ", true),
            ("*** Update File: ", false),
            ("*** Delete File: ", false),
            ("*** Move to: ", false),
        ] {
            if let Some(p) = l.strip_prefix(h) {
                files.push(p.trim().to_owned());
                only_adds &= add;
            }
        }
    }
    let only_adds = only_adds && !files.is_empty();
    (files, only_adds)
}

/// A call of the model's (`function_call`, `custom_tool_call`, `local_shell_call`) as a tool call.
fn response_call(p: &Value, cwd: Option<&str>) -> Option<ToolCall> {
    let ty = str_of(p, "type")?;
    let mut c = ToolCall {
        id: str_of(p, "call_id")
            .or_else(|| str_of(p, "id"))
            .unwrap_or_default()
            .to_owned(),
        cwd: cwd.map(str::to_owned),
        ..ToolCall::default()
    };
    match ty {
        "local_shell_call" => {
            let action = p.get("action")?;
            c.tool = "local_shell".into();
            c.kind = Kind::Shell;
            c.command = strings(action.get("command")).map(|a| shell_script(&a));
            if let Some(d) = str_of(action, "working_directory") {
                c.cwd = Some(d.to_owned());
            }
        }
        "function_call" | "custom_tool_call" => {
            let name = str_of(p, "name").unwrap_or("?");
            c.tool = name.to_owned();
            let args = if ty == "custom_tool_call" {
                p.get("input").cloned().unwrap_or(Value::Null)
            } else {
                arguments(p.get("arguments"))
            };
            if let Some(d) = str_of(&args, "workdir") {
                c.cwd = Some(d.to_owned());
            }
            match name {
                "shell" | "container.exec" => {
                    c.kind = Kind::Shell;
                    c.command = strings(args.get("command")).map(|a| shell_script(&a));
                }
                "shell_command" | "exec_command" | "unified_exec" => {
                    c.kind = Kind::Shell;
                    c.command = str_of(&args, "command")
                        .or_else(|| str_of(&args, "cmd"))
                        .map(str::to_owned)
                        .or_else(|| strings(args.get("command")).map(|a| shell_script(&a)));
                }
                "apply_patch" => {
                    let patch = args
                        .as_str()
                        .or_else(|| str_of(&args, "input"))
                        .or_else(|| str_of(&args, "patch"))
                        .unwrap_or_default();
                    let (files, only_adds) = patch_files(patch);
                    c.kind = if only_adds { Kind::Write } else { Kind::Edit };
                    c.paths = files;
                }
                "read_file" | "view_image" => {
                    c.kind = Kind::Read;
                    c.paths = path_arguments(&args);
                }
                "list_dir" | "grep_files" => {
                    c.kind = Kind::Search;
                    c.paths = path_arguments(&args);
                }
                _ => c.paths = path_arguments(&args),
            }
        }
        _ => return None,
    }
    Some(c)
}

impl TranscriptFormat for Rollout {
    fn name(&self) -> &'static str {
        "codex"
    }

    fn recognizes(&self, probe: &Probe<'_>) -> bool {
        probe.any_line(|v| {
            let ty = str_of(v, "type").unwrap_or("");
            (ROLLOUT_TYPES.contains(&ty) && v.get("payload").is_some())
                || (ITEM_TYPES.contains(&ty) && (v.get("call_id").is_some() || ty == "reasoning"))
                || (v.get("instructions").is_some() && v.get("id").is_some())
        })
    }

    fn tool_calls(&self, file: &Path, data: &[u8]) -> Result<Vec<ToolCall>, String> {
        let text = utf8(data)?;
        let mut calls: Vec<ToolCall> = Vec::new();
        let mut by_id: HashMap<String, usize> = HashMap::new();
        let mut cwd: Option<String> = None;
        for item in json_lines(text) {
            let (ln, v) = item?;
            let ts = time_of(&v, "timestamp");
            // Before late 2025 a rollout's lines were the payloads themselves.
            let (ty, p) = match (str_of(&v, "type"), v.get("payload")) {
                (Some(t), Some(p)) => (t, p),
                _ => ("response_item", &v),
            };
            match ty {
                "session_meta" | "turn_context" => {
                    if let Some(d) = str_of(p, "cwd") {
                        cwd = Some(d.to_owned());
                    }
                }
                "response_item" => {
                    let pty = str_of(p, "type").unwrap_or("");
                    if pty.ends_with("_output") {
                        if let Some(&k) = str_of(p, "call_id").and_then(|id| by_id.get(id)) {
                            calls[k].ended_ns = ts;
                        }
                    } else if let Some(mut c) = response_call(p, cwd.as_deref()) {
                        c.file = file.to_owned();
                        c.line = ln;
                        c.started_ns = ts;
                        by_id.insert(c.id.clone(), calls.len());
                        calls.push(c.finish());
                    }
                }
                _ => {}
            }
        }
        Ok(calls)
    }
}

/// An `item` of `codex exec --json` as a tool call.
fn exec_item(item: &Value) -> Option<ToolCall> {
    let mut c = ToolCall {
        id: str_of(item, "id").unwrap_or_default().to_owned(),
        ..ToolCall::default()
    };
    match str_of(item, "type")? {
        "command_execution" => {
            c.tool = "command_execution".into();
            c.kind = Kind::Shell;
            c.command = str_of(item, "command").map(unwrap_shell);
        }
        "file_change" => {
            c.tool = "file_change".into();
            let changes = item.get("changes").and_then(Value::as_array)?;
            c.paths = changes
                .iter()
                .filter_map(|ch| str_of(ch, "path").map(str::to_owned))
                .collect();
            c.kind = if changes.iter().all(|ch| str_of(ch, "kind") == Some("add")) {
                Kind::Write
            } else {
                Kind::Edit
            };
        }
        "mcp_tool_call" => {
            c.tool = format!(
                "{}.{}",
                str_of(item, "server").unwrap_or("?"),
                str_of(item, "tool").unwrap_or("?")
            );
            c.paths = path_arguments(&arguments(item.get("arguments")));
        }
        _ => return None,
    }
    Some(c)
}

/// `bash -lc 'script'` as `codex exec --json` prints it: the script.
fn unwrap_shell(cmd: &str) -> String {
    for sh in [
        "/bin/bash -lc ",
        "bash -lc ",
        "/bin/sh -c ",
        "sh -c ",
        "bash -c ",
    ] {
        if let Some(rest) = cmd.strip_prefix(sh) {
            let rest = rest.trim();
            for q in ['\'', '"'] {
                if rest.len() >= 2 && rest.starts_with(q) && rest.ends_with(q) {
                    return rest[1..rest.len() - 1].to_owned();
                }
            }
            return rest.to_owned();
        }
    }
    cmd.to_owned()
}

impl TranscriptFormat for ExecJson {
    fn name(&self) -> &'static str {
        "codex-exec"
    }

    fn recognizes(&self, probe: &Probe<'_>) -> bool {
        probe.any_line(|v| {
            let ty = str_of(v, "type").unwrap_or("");
            ty.starts_with("thread.")
                || ty.starts_with("turn.")
                || ty.starts_with("item.")
                || (v.get("msg").is_some_and(|m| m.get("type").is_some()) && v.get("id").is_some())
        })
    }

    fn tool_calls(&self, file: &Path, data: &[u8]) -> Result<Vec<ToolCall>, String> {
        let text = utf8(data)?;
        let mut calls: Vec<ToolCall> = Vec::new();
        let mut by_id: HashMap<String, usize> = HashMap::new();
        for item in json_lines(text) {
            let (ln, v) = item?;
            let call = match (str_of(&v, "type"), v.get("item"), v.get("msg")) {
                (Some("item.started" | "item.updated" | "item.completed"), Some(item), _) => {
                    exec_item(item)
                }
                (_, _, Some(msg)) => old_event(msg),
                _ => None,
            };
            // One call per item: its first event places it.
            if let Some(mut c) = call
                && !by_id.contains_key(&c.id)
            {
                c.file = file.to_owned();
                c.line = ln;
                by_id.insert(c.id.clone(), calls.len());
                calls.push(c.finish());
            }
        }
        Ok(calls)
    }
}

/// An event of the older `codex exec --json` (`{id, msg}`).
fn old_event(msg: &Value) -> Option<ToolCall> {
    let mut c = ToolCall {
        id: str_of(msg, "call_id").unwrap_or_default().to_owned(),
        ..ToolCall::default()
    };
    match str_of(msg, "type")? {
        "exec_command_begin" => {
            c.tool = "exec_command".into();
            c.kind = Kind::Shell;
            c.command = strings(msg.get("command")).map(|a| shell_script(&a));
            c.cwd = str_of(msg, "cwd").map(str::to_owned);
        }
        "patch_apply_begin" => {
            c.tool = "apply_patch".into();
            c.kind = Kind::Edit;
            c.paths = msg
                .get("changes")
                .and_then(Value::as_object)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
        }
        _ => return None,
    }
    Some(c)
}
