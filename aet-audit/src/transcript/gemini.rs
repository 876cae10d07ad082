//! Gemini CLI: its chats (`~/.gemini/tmp/<project>/chats/session-*.jsonl`: a metadata line with
//! `sessionId` and `projectHash`, then one message per line, a message written again as its tool
//! calls complete; before mid-2026 one `.json` document with the same messages); a `gemini`
//! message holds `toolCalls` with `id`, `name`, `args` and `timestamp`. And the lines of
//! `gemini -p --output-format stream-json` (`tool_use` with `tool_name`, `tool_id` and
//! `parameters`, then `tool_result`). Tools: `run_shell_command` (`command`, `directory`),
//! `read_file`, `read_many_files`, `write_file`, `replace`, `list_directory`, `glob`,
//! `search_file_content`.

use std::{collections::HashMap, path::Path};

use serde_json::Value;

use super::{
    Kind, Lines, Probe, ToolCall, TranscriptFormat, json_lines, path_arguments, str_of, time_of,
    utf8,
};

/// Gemini CLI's chats and stream-json.
pub struct Gemini;

/// A Gemini CLI tool call.
fn call(name: &str, args: &Value) -> ToolCall {
    let mut c = ToolCall {
        tool: name.to_owned(),
        paths: path_arguments(args),
        ..ToolCall::default()
    };
    c.kind = match name {
        "run_shell_command" => {
            c.command = str_of(args, "command").map(str::to_owned);
            // `directory` is relative to the project's root, which the chat does not say.
            c.paths.clear();
            Kind::Shell
        }
        "read_file" | "read_many_files" => Kind::Read,
        "write_file" => Kind::Write,
        "replace" | "edit" => Kind::Edit,
        "list_directory" | "glob" | "search_file_content" | "grep" => Kind::Search,
        _ => Kind::Other,
    };
    c
}

impl TranscriptFormat for Gemini {
    fn name(&self) -> &'static str {
        "gemini"
    }

    fn recognizes(&self, probe: &Probe<'_>) -> bool {
        probe.doc.as_ref().is_some_and(|d| {
            d.get("sessionId").is_some()
                && d.get("messages")
                    .and_then(Value::as_array)
                    .is_some_and(|m| m.iter().all(|m| m.get("type").is_some()))
        }) || probe.any_line(|v| {
            (v.get("sessionId").is_some() && v.get("projectHash").is_some())
                || (str_of(v, "type") == Some("tool_use") && v.get("tool_name").is_some())
                || (str_of(v, "type") == Some("init") && v.get("session_id").is_some())
        })
    }

    fn tool_calls(&self, file: &Path, data: &[u8]) -> Result<Vec<ToolCall>, String> {
        let text = utf8(data)?;
        let mut calls = Calls::default();
        if let Ok(doc) = serde_json::from_str::<Value>(text)
            && doc.get("messages").is_some()
        {
            let mut pos = Lines::new(text);
            for m in doc
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                calls.message(file, m, &mut |id| pos.of(id));
            }
            return Ok(calls.done());
        }
        for item in json_lines(text) {
            let (ln, v) = item?;
            match str_of(&v, "type") {
                // stream-json
                Some("tool_use") => {
                    let args = v.get("parameters").unwrap_or(&Value::Null);
                    let mut c = call(str_of(&v, "tool_name").unwrap_or("?"), args);
                    c.id = str_of(&v, "tool_id").unwrap_or_default().to_owned();
                    c.started_ns = time_of(&v, "timestamp");
                    c.file = file.to_owned();
                    c.line = ln;
                    calls.add(c);
                }
                Some("tool_result") => {
                    if let Some(&k) = str_of(&v, "tool_id").and_then(|id| calls.by_id.get(id)) {
                        calls.out[k].ended_ns = time_of(&v, "timestamp");
                    }
                }
                // a chat's message line
                Some(_) => calls.message(file, &v, &mut |_| ln),
                None => {}
            }
        }
        Ok(calls.done())
    }
}

/// Tool calls met so far, each once (a chat writes a message again as its calls complete).
#[derive(Default)]
struct Calls {
    out: Vec<ToolCall>,
    by_id: HashMap<String, usize>,
}

impl Calls {
    fn add(&mut self, c: ToolCall) {
        if c.id.is_empty() || !self.by_id.contains_key(&c.id) {
            self.by_id.insert(c.id.clone(), self.out.len());
            self.out.push(c);
        }
    }

    /// The tool calls of a chat message.
    fn message(&mut self, file: &Path, m: &Value, line: &mut dyn FnMut(&str) -> usize) {
        for tc in m
            .get("toolCalls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let id = str_of(tc, "id").unwrap_or_default();
            if !id.is_empty() && self.by_id.contains_key(id) {
                continue;
            }
            let args = tc.get("args").unwrap_or(&Value::Null);
            let mut c = call(str_of(tc, "name").unwrap_or("?"), args);
            c.id = id.to_owned();
            c.started_ns = time_of(tc, "timestamp").or_else(|| time_of(m, "timestamp"));
            c.file = file.to_owned();
            c.line = line(id);
            self.add(c);
        }
    }

    fn done(self) -> Vec<ToolCall> {
        self.out.into_iter().map(ToolCall::finish).collect()
    }
}
