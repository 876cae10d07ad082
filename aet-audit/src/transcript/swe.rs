//! SWE-agent's trajectories (`.traj`) and mini-swe-agent's (`.traj.json`).
//!
//! A `.traj` is one document whose `trajectory` steps each hold the `action` the agent ran (a
//! shell command, or one of SWE-agent's tools: `str_replace_editor view|create|str_replace|insert
//! PATH`, `open`, `create`, `edit`, `find_file`, `search_dir`, ...) and the `state` after it
//! (`working_dir`, `open_file`; a JSON string in older versions).
//!
//! mini-swe-agent saves the conversation: a list of `{role, content}` messages (or an object with
//! `messages` and `info`). An assistant message runs the one command of its fenced block
//! (` ```bash ` or ` ```mswea_bash_command `; a message with none or several ran nothing), or,
//! in newer versions, its `tool_calls` (`bash` with a `command` argument).

use std::path::Path;

use serde_json::Value;

use super::{Kind, Lines, Probe, ToolCall, TranscriptFormat, arguments, str_of, utf8};

/// SWE-agent's `.traj` files.
pub struct SweAgent;

/// mini-swe-agent's trajectories.
pub struct MiniSweAgent;

/// A step's state: an object, or a JSON string of one.
fn state(step: &Value) -> Value {
    match step.get("state") {
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::Null),
        Some(v) => v.clone(),
        None => Value::Null,
    }
}

/// The first word of `s` and the next, unquoted.
fn words(s: &str) -> impl Iterator<Item = &str> {
    s.split_whitespace().map(|w| w.trim_matches(['"', '\'']))
}

/// A SWE-agent action as a tool call.
fn action(act: &str, open_file: Option<&str>) -> ToolCall {
    let mut w = words(act.lines().next().unwrap_or(""));
    let tool = w.next().unwrap_or("").to_owned();
    let mut c = ToolCall {
        tool: tool.clone(),
        ..ToolCall::default()
    };
    let path = |w: Option<&str>| w.filter(|p| !p.is_empty()).map(str::to_owned);
    match tool.as_str() {
        "str_replace_editor" | "edit_file" => {
            let sub = w.next();
            c.paths.extend(path(w.next()));
            c.kind = match sub {
                Some("view") => Kind::Read,
                Some("create") => Kind::Write,
                _ => Kind::Edit,
            };
        }
        "open" | "goto" | "scroll_up" | "scroll_down" => {
            c.kind = Kind::Read;
            c.paths.extend(path(w.next()).filter(|_| tool == "open"));
        }
        "create" => {
            c.kind = Kind::Write;
            c.paths.extend(path(w.next()));
        }
        "edit" | "insert" => {
            c.kind = Kind::Edit;
            c.paths
                .extend(open_file.filter(|f| *f != "n/a").map(str::to_owned));
        }
        "find_file" | "search_dir" | "search_file" => {
            c.kind = Kind::Search;
            c.paths.extend(w.skip(1).map(str::to_owned));
        }
        "submit" | "exit_forfeit" | "" => c.kind = Kind::Other,
        _ => {
            c.tool = "bash".into();
            c.kind = Kind::Shell;
            c.command = Some(act.to_owned());
        }
    }
    c
}

impl TranscriptFormat for SweAgent {
    fn name(&self) -> &'static str {
        "swe-agent"
    }

    fn recognizes(&self, probe: &Probe<'_>) -> bool {
        probe.doc.as_ref().is_some_and(|d| {
            d.get("trajectory")
                .and_then(Value::as_array)
                .is_some_and(|t| t.iter().all(|s| s.get("action").is_some()))
        })
    }

    fn tool_calls(&self, file: &Path, data: &[u8]) -> Result<Vec<ToolCall>, String> {
        let text = utf8(data)?;
        let doc: Value =
            serde_json::from_str(text).map_err(|e| format!("not a JSON trajectory: {e}"))?;
        let mut pos = Lines::new(text);
        let mut out = Vec::new();
        let steps = doc.get("trajectory").and_then(Value::as_array);
        for (i, step) in steps.into_iter().flatten().enumerate() {
            let Some(act) = str_of(step, "action").filter(|a| !a.trim().is_empty()) else {
                continue;
            };
            let st = state(step);
            let mut c = action(act.trim(), str_of(&st, "open_file"));
            c.id = format!("step-{}", i + 1);
            c.cwd = str_of(&st, "working_dir").map(str::to_owned);
            c.file = file.to_owned();
            c.line = pos.of(act);
            out.push(c.finish());
        }
        Ok(out)
    }
}

/// The one command of a mini-swe-agent message's fenced block, if it has exactly one.
pub fn fenced_command(content: &str) -> Option<String> {
    let mut found = Vec::new();
    let mut rest = content;
    while let Some(i) = rest.find("```") {
        let after = &rest[i + 3..];
        let (lang, body) = after.split_once('\n')?;
        let Some(end) = body.find("```") else { break };
        if ["bash", "sh", "shell", "mswea_bash_command"].contains(&lang.trim()) {
            found.push(body[..end].trim_end_matches('\n').to_owned());
        }
        rest = &body[end + 3..];
    }
    (found.len() == 1).then(|| found.remove(0))
}

/// A message's text: a string, or the `text` of its content items.
fn content_text(m: &Value) -> String {
    match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| str_of(i, "text"))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A mini-swe-agent trajectory's messages.
fn messages(doc: &Value) -> Option<&Vec<Value>> {
    doc.as_array()
        .or_else(|| doc.get("messages").and_then(Value::as_array))
}

impl TranscriptFormat for MiniSweAgent {
    fn name(&self) -> &'static str {
        "mini-swe-agent"
    }

    fn recognizes(&self, probe: &Probe<'_>) -> bool {
        let Some(doc) = probe.doc.as_ref() else {
            return false;
        };
        let tagged = str_of(doc, "trajectory_format").is_some_and(|f| f.starts_with("mini-swe"));
        tagged
            || messages(doc).is_some_and(|ms| {
                !ms.is_empty()
                    && ms.iter().all(|m| m.get("role").is_some())
                    && ms.iter().any(|m| {
                        str_of(m, "role") == Some("assistant")
                            && (fenced_command(&content_text(m)).is_some()
                                || m.get("tool_calls").is_some())
                    })
            })
    }

    fn tool_calls(&self, file: &Path, data: &[u8]) -> Result<Vec<ToolCall>, String> {
        let text = utf8(data)?;
        let doc: Value =
            serde_json::from_str(text).map_err(|e| format!("not a JSON trajectory: {e}"))?;
        let mut pos = Lines::new(text);
        let mut out = Vec::new();
        for (i, m) in messages(&doc).into_iter().flatten().enumerate() {
            if str_of(m, "role") != Some("assistant") {
                continue;
            }
            let calls: Vec<(String, String)> = match m.get("tool_calls").and_then(Value::as_array) {
                Some(tcs) => tcs
                    .iter()
                    .filter_map(|tc| {
                        let f = tc.get("function")?;
                        let args = arguments(f.get("arguments"));
                        let cmd = str_of(&args, "command").or_else(|| str_of(&args, "cmd"))?;
                        Some((
                            str_of(tc, "id").unwrap_or_default().to_owned(),
                            cmd.to_owned(),
                        ))
                    })
                    .collect(),
                None => fenced_command(&content_text(m))
                    .map(|c| (format!("message-{}", i + 1), c))
                    .into_iter()
                    .collect(),
            };
            for (id, cmd) in calls {
                let line = if id.starts_with("message-") {
                    pos.of(&content_text(m))
                } else {
                    pos.of(&id)
                };
                out.push(
                    ToolCall {
                        file: file.to_owned(),
                        line,
                        id,
                        tool: "bash".into(),
                        kind: Kind::Shell,
                        command: Some(cmd),
                        ..ToolCall::default()
                    }
                    .finish(),
                );
            }
        }
        Ok(out)
    }
}
