//! Agent transcripts: the tool calls an agent says it made, as a second source next to the
//! kernel's record.
//!
//! A format is a [`TranscriptFormat`]: it turns one transcript file into [`ToolCall`]s (the tool,
//! the command or paths it named, and when it ran when the transcript has timestamps). Claude
//! Code's JSON lines (`--output-format stream-json`, and the session files under
//! `~/.claude/projects/`) are the first format; another agent's format is another implementation.

use std::{
    collections::HashMap,
    fs,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

/// One tool call from a transcript.
#[derive(Clone, Debug, Serialize)]
pub struct ToolCall {
    pub file: PathBuf,
    /// 1-based line of the call in its file.
    pub line: usize,
    pub id: String,
    /// `Bash`, `Read`, `Write`, `Edit`, `Grep`, ...
    pub tool: String,
    /// The shell command, for a command tool.
    pub command: Option<String>,
    /// Paths the call names (tool arguments, and path-like words of a command).
    pub paths: Vec<String>,
    /// When the call was made and when its result came back, ns since the epoch, when the
    /// transcript says.
    pub started_ns: Option<i64>,
    pub ended_ns: Option<i64>,
}

/// A reference to a tool call in a finding.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ToolCallRef {
    pub file: PathBuf,
    pub line: usize,
    pub tool: String,
    pub command: Option<String>,
}

impl ToolCall {
    pub fn reference(&self) -> ToolCallRef {
        ToolCallRef {
            file: self.file.clone(),
            line: self.line,
            tool: self.tool.clone(),
            command: self.command.clone(),
        }
    }
}

/// A transcript format.
pub trait TranscriptFormat {
    /// The format's name (`--transcript-format`).
    fn name(&self) -> &'static str;
    /// The tool calls in one file. Lines that are not part of the format are skipped; a file
    /// with none is not an error.
    fn tool_calls(&self, file: &Path, text: &str) -> Result<Vec<ToolCall>, String>;
}

/// Claude Code's JSON lines: `assistant` messages with `tool_use` content, `user` messages with
/// the matching `tool_result`, and a `timestamp` on each line when the transcript has one.
pub struct ClaudeJsonl;

/// Seconds and nanoseconds since the epoch of an RFC 3339 time (`2026-11-29T10:00:00.123Z`).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || (b[10] != b'T' && b[10] != b' ') {
        return None;
    }
    // Digits only (`parse` would take a sign), each field in its range.
    let num = |r: std::ops::Range<usize>| {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse::<i64>().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac_ns = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let digits = &s[start..i];
        let mut v: i64 = digits.get(..9.min(digits.len()))?.parse().ok()?;
        for _ in digits.len().min(9)..9 {
            v *= 10;
        }
        frac_ns = v;
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' => 0,
        b'+' | b'-' => {
            let sign = if b[i] == b'-' { -1 } else { 1 };
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            if oh > 23 || om > 59 {
                return None;
            }
            sign * (oh * 3600 + om * 60)
        }
        _ => return None,
    };
    // Days from civil (Howard Hinnant).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86400 + h * 3600 + mi * 60 + se - offset;
    // Past 2262 the nanoseconds do not fit an i64: no time, rather than a wrong one.
    secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

/// Path-like words of a shell command: anything with a `/`, or a dotted file name.
pub fn command_paths(cmd: &str) -> Vec<String> {
    cmd.split(|c: char| c.is_whitespace() || "'\";|&<>()`$=,".contains(c))
        .filter(|w| !w.is_empty() && !w.starts_with('-'))
        .filter(|w| w.contains('/') || (w.contains('.') && !w.starts_with('.') && w.len() > 2))
        .map(str::to_owned)
        .collect()
}

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
}

impl TranscriptFormat for ClaudeJsonl {
    fn name(&self) -> &'static str {
        "claude-jsonl"
    }

    fn tool_calls(&self, file: &Path, text: &str) -> Result<Vec<ToolCall>, String> {
        let mut calls: Vec<ToolCall> = Vec::new();
        let mut by_id: HashMap<String, usize> = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let v: Lenient<Line> = match serde_json::from_str(line) {
                Ok(v) => v,
                Err(e) => return Err(format!("line {}: not JSON: {e}", n + 1)),
            };
            let Some(v) = v.0 else { continue };
            let ts = v.timestamp.get().and_then(parse_rfc3339);
            let items = v.message.0.and_then(|m| m.content.0).unwrap_or_default();
            for item in items.into_iter().filter_map(|i| i.0) {
                match item {
                    Item::ToolUse { id, name, input } => {
                        let input = input.0.unwrap_or_default();
                        let command = input.command.0.clone();
                        let mut paths: Vec<String> = [
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
                        if let Some(c) = &command {
                            paths.extend(command_paths(c));
                        }
                        let id = id.0.unwrap_or_default();
                        by_id.insert(id.clone(), calls.len());
                        calls.push(ToolCall {
                            file: file.to_owned(),
                            line: n + 1,
                            id,
                            tool: name.0.unwrap_or_else(|| "?".into()),
                            command,
                            paths,
                            started_ns: ts,
                            ended_ns: None,
                        });
                    }
                    Item::ToolResult { tool_use_id } => {
                        if let Some(&k) = tool_use_id.get().and_then(|id| by_id.get(id)) {
                            calls[k].ended_ns = ts;
                        }
                    }
                    Item::Other => {}
                }
            }
        }
        Ok(calls)
    }
}

/// The formats aet knows, by name.
pub fn format_by_name(name: &str) -> Option<Box<dyn TranscriptFormat>> {
    match name {
        "claude-jsonl" | "claude" | "claude-stream-json" => Some(Box::new(ClaudeJsonl)),
        _ => None,
    }
}

/// Reads every `*.jsonl` / `*.json` file of a directory (or one file), in name order.
pub fn read_dir(dir: &Path, format: &dyn TranscriptFormat) -> Result<Vec<ToolCall>, String> {
    let files: Vec<PathBuf> = if dir.is_file() {
        vec![dir.to_owned()]
    } else {
        let mut v: Vec<PathBuf> = fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension()
                    .is_some_and(|x| x == "jsonl" || x == "json" || x == "ndjson")
            })
            .collect();
        v.sort();
        v
    };
    let mut out = Vec::new();
    for f in files {
        let text = fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        out.extend(
            format
                .tool_calls(&f, &text)
                .map_err(|e| format!("{}: {e}", f.display()))?,
        );
    }
    Ok(out)
}

/// Does a transcript word name `path` (the path itself, or a relative path ending it at a
/// component boundary)?
pub fn names_path(word: &str, path: &str) -> bool {
    let w = word.trim_start_matches("./");
    if w.is_empty() {
        return false;
    }
    path == w || (path.ends_with(w) && path[..path.len() - w.len()].ends_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2026-11-29T10:00:00.5Z"),
            Some(1_795_946_400_500_000_000)
        );
        assert_eq!(
            parse_rfc3339("2026-11-29T11:00:00+01:00"),
            Some(1_795_946_400_000_000_000)
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
        // Found by the transcript fuzz target: a year whose nanoseconds overflow an i64 (which
        // panicked), fields out of range, signs where digits go.
        assert_eq!(parse_rfc3339("4052-12-03T10:00:02Z"), None);
        assert_eq!(
            parse_rfc3339("2262-04-11T23:47:16Z"),
            Some(9_223_372_036_000_000_000)
        );
        assert_eq!(parse_rfc3339("2026-13-29T10:00:00Z"), None);
        assert_eq!(parse_rfc3339("2026-11-29T25:00:00Z"), None);
        assert_eq!(parse_rfc3339("2026-11-29T10:00:00+99:00"), None);
        assert_eq!(parse_rfc3339("+026-11-29T10:00:00Z"), None);
        assert_eq!(
            parse_rfc3339("2026-11-29T10:00:00.999999999999Z").map(|t| t % 1_000_000_000),
            Some(999_999_999)
        );
    }

    #[test]
    fn claude_tool_calls_with_results() {
        let t = r#"{"type":"system","subtype":"init"}
{"type":"assistant","timestamp":"2026-11-29T10:00:00Z","message":{"content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"make -C src && ./check.sh out.txt"}}]}}
{"type":"user","timestamp":"2026-11-29T10:00:02Z","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}}
{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t2","name":"Read","input":{"file_path":"/task/README.md"}}]}}
"#;
        let calls = ClaudeJsonl.tool_calls(Path::new("r1.jsonl"), t).unwrap();
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
        let calls = ClaudeJsonl.tool_calls(Path::new("r.jsonl"), t).unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].tool, "Bash");
        assert_eq!(calls[0].command, None);
        assert_eq!(calls[0].paths, ["/task/a.txt"]);
        assert_eq!(calls[0].started_ns, None);
        let e = ClaudeJsonl
            .tool_calls(Path::new("r.jsonl"), "{\"type\": \n")
            .unwrap_err();
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn words_name_paths_at_component_boundaries() {
        assert!(names_path("answers/key.txt", "/task/answers/key.txt"));
        assert!(names_path("./key.txt", "/task/answers/key.txt"));
        assert!(!names_path("y.txt", "/task/answers/key.txt"));
        assert!(names_path("/task/answers/key.txt", "/task/answers/key.txt"));
    }
}
