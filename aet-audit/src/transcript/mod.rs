//! Agent transcripts: the tool calls an agent says it made, as a second source next to the
//! kernel's record.
//!
//! A format is a [`TranscriptFormat`]: it recognises its files by their content and turns one
//! into [`ToolCall`]s, each the same whatever the agent: the tool as the agent named it and its
//! [`Kind`] (shell, read, write, edit, search), the command, the paths it names resolved against
//! the call's working directory, and when it ran when the transcript has times. The formats:
//! Claude Code ([`claude`]), OpenAI Codex's session rollouts and `codex exec --json` ([`codex`]),
//! Inspect AI's eval logs, `.json` and `.eval` ([`inspect`]), SWE-agent's `.traj` and
//! mini-swe-agent's trajectories ([`swe`]), OpenHands' event lists ([`openhands`]) and Gemini
//! CLI's chats ([`gemini`]). [`read`] walks a directory recursively and finds each file's format
//! by its content unless one is named.

use std::{
    fs,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod claude;
pub mod codex;
mod discover;
pub mod gemini;
pub mod inspect;
pub mod openhands;
pub mod swe;

pub use claude::ClaudeJsonl;
pub use discover::in_run;

/// What a tool call does, the same for every agent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Runs a command (or code) in a shell or interpreter.
    Shell,
    Read,
    /// Creates or overwrites a file.
    Write,
    /// Changes part of a file (a patch, a replacement).
    Edit,
    /// Lists, globs or greps.
    Search,
    #[default]
    Other,
}

/// One tool call from a transcript.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ToolCall {
    pub file: PathBuf,
    /// 1-based line of the call in its file (for a file that is one JSON document: the line
    /// where the call's id or command first appears).
    pub line: usize,
    pub id: String,
    /// The tool as the agent names it: `Bash`, `Read`, `shell_command`, `apply_patch`, ...
    pub tool: String,
    pub kind: Kind,
    /// The shell command (or code), for a command tool.
    pub command: Option<String>,
    /// Paths the call names (tool arguments, and path-like words of a command), resolved against
    /// `cwd` when it is known.
    pub paths: Vec<String>,
    /// The call's working directory, when the transcript says.
    pub cwd: Option<String>,
    /// When the call was made and when its result came back, ns since the epoch, when the
    /// transcript says.
    pub started_ns: Option<i64>,
    pub ended_ns: Option<i64>,
    /// The bytes the call wrote, when the transcript holds them (a whole file's new content).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// What the transcript says the call returned: its first [`RESULT_CHARS`] characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// How much of a call's result is kept.
pub const RESULT_CHARS: usize = 300;

/// The first [`RESULT_CHARS`] characters of a result's text: a string, or the text items of a
/// list of content blocks.
pub fn result_excerpt(v: &Value) -> Option<String> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(|i| i.get("text").and_then(Value::as_str).or_else(|| i.as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => return None,
    };
    (!text.is_empty()).then(|| text.chars().take(RESULT_CHARS).collect())
}

/// A reference to a tool call in a finding.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ToolCallRef {
    pub file: PathBuf,
    pub line: usize,
    pub tool: String,
    /// Absent in reports of an older aet.
    #[serde(default)]
    pub kind: Kind,
    pub command: Option<String>,
    /// How a finding got this call: `time` (it was running when the access happened) or `path`
    /// (it names the path; the transcript has no times that place the access).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl ToolCall {
    pub fn reference(&self) -> ToolCallRef {
        ToolCallRef {
            file: self.file.clone(),
            line: self.line,
            tool: self.tool.clone(),
            kind: self.kind,
            command: self.command.clone(),
            by: None,
        }
    }

    /// The call with its command's path-like words added to its paths, every relative path
    /// resolved against its working directory (but a command's words when the command changes
    /// directory: where they lead is not known), each path once.
    pub fn finish(mut self) -> Self {
        let cwd = self.cwd.as_deref().filter(|c| c.starts_with('/'));
        let mut paths: Vec<String> = Vec::new();
        let named = std::mem::take(&mut self.paths);
        let words = self
            .command
            .as_deref()
            .map(command_paths)
            .unwrap_or_default();
        let moves = self.command.as_deref().is_some_and(changes_directory);
        for (p, from_command) in named
            .into_iter()
            .map(|p| (p, false))
            .chain(words.into_iter().map(|w| (w, true)))
        {
            let p = match cwd {
                Some(c) if !(from_command && moves) => resolve(c, &p),
                _ => p,
            };
            if !p.is_empty() && !paths.contains(&p) {
                paths.push(p);
            }
        }
        self.paths = paths;
        self
    }
}

/// A path resolved against a working directory, `.` and `..` taken lexically; an absolute path
/// normalised the same way; `~` paths and URLs as they are.
pub fn resolve(cwd: &str, path: &str) -> String {
    if path.starts_with('~') || path.contains("://") {
        return path.to_owned();
    }
    let joined = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{cwd}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for c in joined.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Does a command change its shell's directory (`cd`, `pushd`)?
fn changes_directory(cmd: &str) -> bool {
    cmd.split(|c: char| c.is_whitespace() || ";&|(".contains(c))
        .any(|w| w == "cd" || w == "pushd")
}

/// The script of `bash -lc SCRIPT` (and `sh -c`, `zsh -lc`, ...), else the argv joined with
/// spaces: the command as the agent wrote it.
pub fn shell_script(argv: &[String]) -> String {
    if let [sh, flag, .., script] = argv
        && ["bash", "sh", "zsh", "dash"].contains(&sh.rsplit('/').next().unwrap_or(sh))
        && flag.starts_with('-')
        && flag.contains('c')
    {
        return script.clone();
    }
    argv.join(" ")
}

/// A transcript format.
pub trait TranscriptFormat: Sync {
    /// The format's name (`--transcript-format`).
    fn name(&self) -> &'static str;
    /// Whether a file's content is this format.
    fn recognizes(&self, probe: &Probe<'_>) -> bool;
    /// The tool calls in one file. Parts of a file that are not part of the format are skipped;
    /// a file with no tool call is not an error.
    fn tool_calls(&self, file: &Path, data: &[u8]) -> Result<Vec<ToolCall>, String>;
}

/// What format detection looks at: the file as one JSON document when it is one, its first
/// JSON-lines objects otherwise (a one-line file is both), or a zip archive.
#[derive(Debug, Default)]
pub struct Probe<'a> {
    pub zip: bool,
    pub doc: Option<Value>,
    pub lines: Vec<Value>,
    pub name: &'a str,
}

impl<'a> Probe<'a> {
    pub fn new(file: &'a Path, data: &[u8]) -> Self {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if data.starts_with(b"PK\x03\x04") {
            return Probe {
                zip: true,
                name,
                ..Probe::default()
            };
        }
        // A file damaged past its start is still recognised by its start (and reading it then
        // says where it is damaged).
        let text = match std::str::from_utf8(data) {
            Ok(t) => t,
            Err(e) => std::str::from_utf8(&data[..e.valid_up_to()]).unwrap_or_default(),
        };
        let doc = serde_json::from_str::<Value>(text).ok();
        let lines = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .take(8)
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(Value::is_object)
            .collect();
        Probe {
            zip: false,
            doc,
            lines,
            name,
        }
    }

    /// Does any of the first lines satisfy `f`?
    pub fn any_line(&self, f: impl Fn(&Value) -> bool) -> bool {
        self.lines.iter().any(f)
    }
}

/// Every format aet knows, in detection order (the document formats, whose files are one JSON
/// value with keys of their own, before the line formats).
pub fn formats() -> [&'static dyn TranscriptFormat; 9] {
    [
        &inspect::Inspect,
        &swe::SweAgent,
        &swe::MiniSweAgent,
        &gemini::Gemini,
        &openhands::OpenHands,
        &codex::Rollout,
        &codex::ExecJson,
        &claude::ClaudeJsonl,
        &claude::ClaudeJson,
    ]
}

/// The names `--transcript-format` takes (`auto` finds each file's format by its content).
pub fn format_names() -> Vec<&'static str> {
    std::iter::once("auto")
        .chain(formats().iter().map(|f| f.name()))
        .collect()
}

/// The format named `name` (or one of its other names); `auto` is `None` here.
pub fn format_by_name(name: &str) -> Option<&'static dyn TranscriptFormat> {
    let name = match name {
        "claude" | "claude-stream-json" => "claude-jsonl",
        "codex-rollout" => "codex",
        "inspect-ai" | "inspect-eval" => "inspect",
        "sweagent" | "swe-agent-traj" => "swe-agent",
        "mini" => "mini-swe-agent",
        "gemini-cli" => "gemini",
        n => n,
    };
    formats().into_iter().find(|f| f.name() == name)
}

/// The format of one file, found by its content.
pub fn detect(file: &Path, data: &[u8]) -> Option<&'static dyn TranscriptFormat> {
    let probe = Probe::new(file, data);
    formats().into_iter().find(|f| f.recognizes(&probe))
}

/// The files a transcript directory holds: every `*.jsonl`, `*.json`, `*.ndjson`, `*.traj` and
/// `*.eval` file under it, at any depth (Claude Code keeps subagents' sessions in subfolders,
/// Codex its rollouts by date), in path order, regular files only; or the one file given.
pub(crate) fn files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    if !dir.is_dir() {
        return if dir.exists() {
            Ok(vec![dir.to_owned()])
        } else {
            Err(format!("{}: no such file or directory", dir.display()))
        };
    }
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))? {
            let e = e.map_err(|e| format!("{}: {e}", d.display()))?;
            let p = e.path();
            let ty = e.file_type().map_err(|e| format!("{}: {e}", p.display()))?;
            if ty.is_dir() {
                todo.push(p);
            // Regular files only: a symlink, a FIFO or a device under the directory (the
            // agent's home is in a run directory) is never opened, never waited on.
            } else if ty.is_file()
                && p.extension().is_some_and(|x| {
                    ["jsonl", "json", "ndjson", "traj", "eval"]
                        .iter()
                        .any(|k| x == *k)
                })
            {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// What [`read`] found: the tool calls, and the format of each file read (or why a file was
/// left out: no format recognised it).
#[derive(Debug, Default)]
pub struct Read {
    pub calls: Vec<ToolCall>,
    pub files: Vec<(PathBuf, &'static str)>,
    pub unrecognized: Vec<PathBuf>,
}

impl Read {
    /// The formats read, each once, in the order first met (`claude-jsonl`, `codex+inspect`).
    pub fn format(&self) -> String {
        let mut names: Vec<&str> = Vec::new();
        for (_, f) in &self.files {
            if !names.contains(f) {
                names.push(f);
            }
        }
        names.join("+")
    }
}

/// Reads a transcript directory (recursively) or one file: with `format`, every file in it;
/// without, each file in the format its content shows. A file no format recognises is left out
/// and listed; when no file at all is recognised, that is an error naming them.
pub fn read(dir: &Path, format: Option<&dyn TranscriptFormat>) -> Result<Read, String> {
    let root = if dir.is_dir() {
        dir.to_owned()
    } else {
        // One file named: it is taken as it is (a symlink named on the command line too).
        if !dir.exists() {
            return Err(format!("{}: no such file or directory", dir.display()));
        }
        let real = fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let parent = real.parent().unwrap_or(Path::new("/")).to_owned();
        return read_files(&parent, vec![real], format);
    };
    read_files(&root, files(dir)?, format)
}

/// [`read`] of the files given, each under `root`: a transcript directory may be the agent's
/// home, which the agent could change while aet reads it, so nothing below `root` is reached
/// through a symlink and only a regular file is opened (never a FIFO or a device).
pub(crate) fn read_files(
    root: &Path,
    files: Vec<PathBuf>,
    format: Option<&dyn TranscriptFormat>,
) -> Result<Read, String> {
    use std::io::Read as _;
    let mut out = Read::default();
    let root = std::path::absolute(root).map_err(|e| format!("{}: {e}", root.display()))?;
    for f in files {
        let abs = std::path::absolute(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        let mut data = Vec::new();
        aet_ledger::safe_open::open_regular_under(&root, &abs)
            .map_err(|e| e.to_string())
            .and_then(|mut h| h.read_to_end(&mut data).map_err(|e| e.to_string()))
            .map_err(|e| format!("{}: {e}", f.display()))?;
        let Some(fmt) = format.or_else(|| detect(&f, &data)) else {
            out.unrecognized.push(f);
            continue;
        };
        out.calls.extend(
            fmt.tool_calls(&f, &data)
                .map_err(|e| format!("{}: {e}", f.display()))?,
        );
        out.files.push((f, fmt.name()));
    }
    if out.files.is_empty() && !out.unrecognized.is_empty() {
        let names: Vec<String> = out
            .unrecognized
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        return Err(format!(
            "no file is a transcript of a format aet knows ({}); name one with \
             --transcript-format: {}",
            format_names()[1..].join(", "),
            names.join(", ")
        ));
    }
    Ok(out)
}

/// The text of a file that must be UTF-8 (JSON is), or an error saying where it is not.
pub(crate) fn utf8(data: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(data).map_err(|e| {
        format!(
            "not UTF-8 at byte {} (a transcript is JSON, which is UTF-8)",
            e.valid_up_to()
        )
    })
}

/// The JSON values of a JSON-lines text, each with its 1-based line (blank lines skipped); a
/// line that is not JSON is an error naming it.
pub(crate) fn json_lines(text: &str) -> impl Iterator<Item = Result<(usize, Value), String>> + '_ {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            serde_json::from_str(l)
                .map(|v| (n + 1, v))
                .map_err(|e| format!("line {}: not JSON: {e}", n + 1))
        })
}

/// Positions in a file that is one JSON document: the line where a call's id (or command) first
/// appears after the previous call's, so calls point at their place in the file.
pub(crate) struct Lines<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Lines<'a> {
    pub fn new(text: &'a str) -> Self {
        Lines { text, pos: 0 }
    }

    /// The 1-based line where `needle` (as JSON, quoted and escaped) next appears; 1 when it
    /// does not.
    pub fn of(&mut self, needle: &str) -> usize {
        if needle.is_empty() {
            return self.line_at(self.pos);
        }
        let quoted = serde_json::to_string(needle).unwrap_or_default();
        let at = self.text[self.pos..]
            .find(&quoted)
            .map(|i| i + self.pos)
            .or_else(|| self.text.find(&quoted));
        match at {
            Some(i) => {
                self.pos = i + quoted.len();
                self.line_at(i)
            }
            None => 1,
        }
    }

    fn line_at(&self, i: usize) -> usize {
        self.text[..i.min(self.text.len())].matches('\n').count() + 1
    }
}

/// A string field of a JSON object.
pub(crate) fn str_of<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v.get(key).and_then(Value::as_str)
}

/// A time field (RFC 3339) of a JSON object.
pub(crate) fn time_of(v: &Value, key: &str) -> Option<i64> {
    str_of(v, key).and_then(parse_rfc3339)
}

/// Tool arguments that may be an object or a JSON string of one (OpenAI's function calls).
pub(crate) fn arguments(v: Option<&Value>) -> Value {
    match v {
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        Some(v) => v.clone(),
        None => Value::Null,
    }
}

/// The string fields of an argument object that name paths (`file_path`, `path`, `dir_path`,
/// ...), and the strings of its `paths` lists.
pub(crate) fn path_arguments(args: &Value) -> Vec<String> {
    const KEYS: [&str; 9] = [
        "file_path",
        "path",
        "absolute_path",
        "notebook_path",
        "dir_path",
        "directory",
        "filename",
        "target_file",
        "pattern",
    ];
    let mut out: Vec<String> = KEYS
        .iter()
        .filter_map(|k| str_of(args, k))
        .filter(|p| p.contains('/') || p.contains('.'))
        .map(str::to_owned)
        .collect();
    for k in ["paths", "file_paths"] {
        if let Some(a) = args.get(k).and_then(Value::as_array) {
            out.extend(a.iter().filter_map(Value::as_str).map(str::to_owned));
        }
    }
    out
}

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

/// Does a transcript word name `path` (the path itself, or a relative path ending it at a
/// component boundary; a relative path's leading `./` and `../` say nothing of where it ends)?
pub fn names_path(word: &str, path: &str) -> bool {
    let mut w = word;
    while let Some(rest) = w.strip_prefix("./").or_else(|| w.strip_prefix("../")) {
        w = rest;
    }
    if w.is_empty() {
        return false;
    }
    path == w || (path.ends_with(w) && path[..path.len() - w.len()].ends_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of the listing swapped for a symlink before it is read (to a root-only tree,
    /// to `/dev`): what it leads to is never read, and the error names the file.
    #[test]
    fn a_transcript_reached_through_a_symlink_below_the_directory_is_not_read() {
        let home = tempfile::tempdir().unwrap();
        let secret = tempfile::tempdir().unwrap();
        let line = r#"{"type":"assistant","message":{"role":"assistant","content":[]}}"#;
        std::fs::write(secret.path().join("s.jsonl"), line).unwrap();
        std::os::unix::fs::symlink(secret.path(), home.path().join("projects")).unwrap();
        let f = home.path().join("projects/s.jsonl");
        let e = read_files(home.path(), vec![f.clone()], None).unwrap_err();
        assert!(
            e.contains(&f.display().to_string()) && e.contains("symlink"),
            "{e}"
        );
        // A FIFO named on its own is refused, not waited on.
        let fifo = home.path().join("t.jsonl");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = read(&fifo, None).unwrap_err();
        assert!(e.contains("FIFO"), "{e}");
    }

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
    fn words_name_paths_at_component_boundaries() {
        assert!(names_path("answers/key.txt", "/task/answers/key.txt"));
        assert!(names_path("./key.txt", "/task/answers/key.txt"));
        assert!(names_path("../answers/key.txt", "/task/answers/key.txt"));
        assert!(!names_path("../", "/task/answers/key.txt"));
        assert!(!names_path("y.txt", "/task/answers/key.txt"));
        assert!(names_path("/task/answers/key.txt", "/task/answers/key.txt"));
    }
}
