//! Claude Code: the JSON lines of its session files (`~/.claude/projects/<project>/<session>.jsonl`,
//! and a session's subagents under `<session>/subagents/`), of `claude -p --output-format
//! stream-json` (no timestamps), and the one JSON array of `--output-format json --verbose`.
//! `assistant` messages carry `tool_use` items, `user` messages the matching `tool_result`; a
//! session file's lines have a `timestamp` and the `cwd` the call ran in.

use std::{collections::HashMap, path::Path};

use serde::Deserialize;
use serde_json::Value;

use super::{Kind, Probe, ToolCall, TranscriptFormat, parse_rfc3339, str_of, utf8};

/// Claude Code's JSON lines.
pub struct ClaudeJsonl;

/// Claude Code's `--output-format json --verbose`: the same messages as one JSON array.
pub struct ClaudeJson;

/// A JSON value taken when it is a string, and ignored otherwise (transcripts are another
/// program's output: a field of an unexpected type is skipped, never fatal).
#[derive(Debug, Default)]
struct Text(Option<String>);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Any {
            S(String),
            #[allow(dead_code)]
            Other(serde::de::IgnoredAny),
        }
        Ok(Text(match Any::deserialize(d)? {
            Any::S(s) => Some(s),
            Any::Other(_) => None,
        }))
    }
}

impl Text {
    fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

/// One line of a Claude Code transcript (the fields aet reads).
#[derive(Debug, Default, Deserialize)]
struct Line {
    #[serde(default)]
    timestamp: Text,
    #[serde(default)]
    cwd: Text,
    #[serde(default)]
    message: Lenient<Message>,
}

/// A value of type `T`, or anything else (ignored).
#[derive(Debug)]
struct Lenient<T>(Option<T>);

impl<T> Default for Lenient<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Any<T> {
            T(T),
            #[allow(dead_code)]
            Other(serde::de::IgnoredAny),
        }
        Ok(Self(match Any::<T>::deserialize(d)? {
            Any::T(t) => Some(t),
            Any::Other(_) => None,
        }))
    }
}

#[derive(Debug, Default, Deserialize)]
struct Message {
    /// A list of items (a plain string message has none aet reads).
    #[serde(default)]
    content: Lenient<Vec<Lenient<Item>>>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Item {
    ToolUse {
        #[serde(default)]
        id: Text,
        #[serde(default)]
        name: Text,
        #[serde(default)]
        input: Lenient<ToolInput>,
    },
    ToolResult {
        #[serde(default)]
        tool_use_id: Text,
        #[serde(default)]
        content: Value,
    },
    #[serde(other)]
    Other,
}

/// The fields of a tool call's input that name commands and paths.
#[derive(Debug, Default, Deserialize)]
struct ToolInput {
    #[serde(default)]
    command: Text,
    #[serde(default)]
    file_path: Text,
    #[serde(default)]
    path: Text,
    #[serde(default)]
    notebook_path: Text,
    #[serde(default)]
    pattern: Text,
    /// A `Write`'s new content.
    #[serde(default)]
    content: Text,
}

/// The kind of a Claude Code tool.
fn kind(tool: &str) -> Kind {
    match tool {
        "Bash" | "BashOutput" => Kind::Shell,
        "Read" | "NotebookRead" => Kind::Read,
        "Write" => Kind::Write,
        "Edit" | "MultiEdit" | "NotebookEdit" => Kind::Edit,
        "Grep" | "Glob" | "LS" => Kind::Search,
        _ => Kind::Other,
    }
}

/// Is this object a line of a Claude Code transcript?
fn is_line(v: &Value) -> bool {
    matches!(
        str_of(v, "type"),
        Some("user" | "assistant" | "system" | "result" | "summary")
    ) && (v.get("message").is_some()
        || v.get("session_id").is_some()
        || v.get("sessionId").is_some()
        || v.get("subtype").is_some())
}

/// The calls of a sequence of lines (each a JSON object), numbered by `line_no`.
struct Calls {
    calls: Vec<ToolCall>,
    by_id: HashMap<String, usize>,
}

impl Calls {
    fn new() -> Self {
        Calls {
            calls: Vec::new(),
            by_id: HashMap::new(),
        }
    }

    fn line(&mut self, file: &Path, line_no: usize, v: Line) {
        let ts = v.timestamp.get().and_then(parse_rfc3339);
        let cwd = v.cwd.0;
        let items = v.message.0.and_then(|m| m.content.0).unwrap_or_default();
        for item in items.into_iter().filter_map(|i| i.0) {
            match item {
                Item::ToolUse { id, name, input } => {
                    let input = input.0.unwrap_or_default();
                    let paths: Vec<String> = [
                        &input.file_path,
                        &input.path,
                        &input.notebook_path,
                        &input.pattern,
                    ]
                    .into_iter()
                    .filter_map(Text::get)
                    .filter(|p| p.contains('/') || p.contains('.'))
                    .map(str::to_owned)
                    .collect();
                    let id = id.0.unwrap_or_default();
                    let tool = name.0.unwrap_or_else(|| "?".into());
                    let bytes = (kind(&tool) == Kind::Write)
                        .then(|| input.content.get().map(|c| c.len() as u64))
                        .flatten();
                    self.by_id.insert(id.clone(), self.calls.len());
                    self.calls.push(
                        ToolCall {
                            file: file.to_owned(),
                            line: line_no,
                            id,
                            kind: kind(&tool),
                            tool,
                            command: input.command.0,
                            paths,
                            cwd: cwd.clone(),
                            started_ns: ts,
                            ended_ns: None,
                            bytes,
                            result: None,
                        }
                        .finish(),
                    );
                }
                Item::ToolResult {
                    tool_use_id,
                    content,
                } => {
                    if let Some(&k) = tool_use_id.get().and_then(|id| self.by_id.get(id)) {
                        self.calls[k].ended_ns = ts;
                        self.calls[k].result = super::result_excerpt(&content);
                    }
                }
                Item::Other => {}
            }
        }
    }
}

impl TranscriptFormat for ClaudeJsonl {
    fn name(&self) -> &'static str {
        "claude-jsonl"
    }

    fn recognizes(&self, probe: &Probe<'_>) -> bool {
        probe.any_line(is_line)
    }

    fn tool_calls(&self, file: &Path, data: &[u8]) -> Result<Vec<ToolCall>, String> {
        let text = utf8(data)?;
        let mut calls = Calls::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let v: Lenient<Line> = match serde_json::from_str(line) {
                Ok(v) => v,
                Err(e) => return Err(format!("line {}: not JSON: {e}", n + 1)),
            };
            if let Some(v) = v.0 {
                calls.line(file, n + 1, v);
            }
        }
        Ok(calls.calls)
    }
}

impl TranscriptFormat for ClaudeJson {
    fn name(&self) -> &'static str {
        "claude-json"
    }

    fn recognizes(&self, probe: &Probe<'_>) -> bool {
        probe
            .doc
            .as_ref()
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(is_line))
    }

    fn tool_calls(&self, file: &Path, data: &[u8]) -> Result<Vec<ToolCall>, String> {
        let text = utf8(data)?;
        let lines: Vec<Lenient<Line>> =
            serde_json::from_str(text).map_err(|e| format!("not a JSON array: {e}"))?;
        let mut pos = super::Lines::new(text);
        let mut calls = Calls::new();
        for v in lines.into_iter().filter_map(|l| l.0) {
            // The line of the array's element: where its first tool call's id is.
            let first_id = v
                .message
                .0
                .as_ref()
                .and_then(|m| m.content.0.as_ref())
                .and_then(|c| {
                    c.iter().find_map(|i| match &i.0 {
                        Some(Item::ToolUse { id, .. }) => id.0.clone(),
                        _ => None,
                    })
                });
            let n = first_id.map_or(1, |id| pos.of(&id));
            calls.line(file, n, v);
        }
        Ok(calls.calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_tool_calls_with_results() {
        let t = r#"{"type":"system","subtype":"init"}
{"type":"assistant","timestamp":"2026-11-29T10:00:00Z","message":{"content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"make -C src && ./check.sh out.txt"}}]}}
{"type":"user","timestamp":"2026-11-29T10:00:02Z","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}}
{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t2","name":"Read","input":{"file_path":"/task/README.md"}}]}}
"#;
        let calls = ClaudeJsonl
            .tool_calls(Path::new("r1.jsonl"), t.as_bytes())
            .unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].tool, "Bash");
        assert_eq!(calls[0].line, 2);
        assert!(calls[0].paths.contains(&"./check.sh".to_owned()));
        assert_eq!(
            calls[0].ended_ns.unwrap() - calls[0].started_ns.unwrap(),
            2_000_000_000
        );
        assert_eq!(calls[1].paths, ["/task/README.md"]);
        assert!(calls[1].started_ns.is_none());
    }

    #[test]
    fn fields_of_unexpected_types_are_skipped_not_fatal() {
        let t = r#"{"type":"user","message":{"content":"a plain text message"}}
{"type":"user","message":"not an object"}
[1, 2, 3]
{"timestamp":17,"message":{"content":[{"type":"tool_use","id":5,"name":"Bash","input":{"command":["x"],"path":"/task/a.txt"}},{"type":"thinking"},42]}}
"#;
        let calls = ClaudeJsonl
            .tool_calls(Path::new("r.jsonl"), t.as_bytes())
            .unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].tool, "Bash");
        assert_eq!(calls[0].command, None);
        assert_eq!(calls[0].paths, ["/task/a.txt"]);
        assert_eq!(calls[0].started_ns, None);
        let e = ClaudeJsonl
            .tool_calls(Path::new("r.jsonl"), b"{\"type\": \n")
            .unwrap_err();
        assert!(e.contains("line 1"), "{e}");
    }
}
