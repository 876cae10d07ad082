//! Inspect AI's eval logs: a `.json` log (one document whose `samples` each hold `messages` and
//! `events`) and a `.eval` log (a zip archive with one `samples/<id>_epoch_<n>.json` per sample).
//!
//! A sample's `tool` events carry the call (`function`, `arguments`) with the time it started
//! (`timestamp`) and ended (`completed`); a log without events gives the assistant messages'
//! `tool_calls`. Tools: `bash` (`cmd`), `python` (`code`), `text_editor` (`command`, `path`),
//! `bash_session`, and any other with path arguments.

use std::{
    io::{Cursor, Read as _},
    path::{Path, PathBuf},
};

use serde_json::Value;

use super::{
    Kind, Lines, Probe, ToolCall, TranscriptFormat, arguments, path_arguments, str_of, time_of,
    utf8,
};

/// Inspect AI's eval logs.
pub struct Inspect;

/// A tool call of Inspect's standard tools.
fn call(function: &str, args: &Value) -> ToolCall {
    let mut c = ToolCall {
        tool: function.to_owned(),
        ..ToolCall::default()
    };
    match function {
        "bash" | "bash_session" => {
            c.kind = Kind::Shell;
            c.command = str_of(args, "cmd")
                .or_else(|| str_of(args, "command"))
                .or_else(|| str_of(args, "input"))
                .map(str::to_owned);
        }
        "python" => {
            c.kind = Kind::Shell;
            c.command = str_of(args, "code").map(str::to_owned);
        }
        "text_editor" => {
            c.kind = match str_of(args, "command") {
                Some("view") => Kind::Read,
                Some("create") => Kind::Write,
                _ => Kind::Edit,
            };
            c.paths = path_arguments(args);
        }
        _ => c.paths = path_arguments(args),
    }
    c
}

/// The tool calls of one sample.
fn sample(file: &Path, s: &Value, pos: &mut Option<Lines<'_>>) -> Vec<ToolCall> {
    let mut out = Vec::new();
    let events: Vec<&Value> = s
        .get("events")
        .and_then(Value::as_array)
        .map(|e| {
            e.iter()
                .filter(|e| str_of(e, "event") == Some("tool"))
                .collect()
        })
        .unwrap_or_default();
    let mut line = |id: &str| pos.as_mut().map_or(1, |p| p.of(id));
    if !events.is_empty() {
        for e in events {
            let mut c = call(
                str_of(e, "function").unwrap_or("?"),
                &arguments(e.get("arguments")),
            );
            c.id = str_of(e, "id").unwrap_or_default().to_owned();
            c.started_ns = time_of(e, "timestamp");
            c.ended_ns = time_of(e, "completed");
            c.file = file.to_owned();
            c.line = line(&c.id);
            out.push(c.finish());
        }
        return out;
    }
    for m in s
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for tc in m
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let mut c = call(
                str_of(tc, "function").unwrap_or("?"),
                &arguments(tc.get("arguments")),
            );
            c.id = str_of(tc, "id").unwrap_or_default().to_owned();
            c.file = file.to_owned();
            c.line = line(&c.id);
            out.push(c.finish());
        }
    }
    out
}

impl TranscriptFormat for Inspect {
    fn name(&self) -> &'static str {
        "inspect"
    }

    fn recognizes(&self, probe: &Probe<'_>) -> bool {
        probe.zip
            || probe.doc.as_ref().is_some_and(|d| {
                d.get("eval").is_some_and(Value::is_object)
                    && (d.get("samples").is_some() || d.get("version").is_some())
            })
    }

    fn tool_calls(&self, file: &Path, data: &[u8]) -> Result<Vec<ToolCall>, String> {
        if !data.starts_with(b"PK\x03\x04") {
            let text = utf8(data)?;
            let doc: Value =
                serde_json::from_str(text).map_err(|e| format!("not a JSON eval log: {e}"))?;
            let mut pos = Some(Lines::new(text));
            return Ok(doc
                .get("samples")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .flat_map(|s| sample(file, s, &mut pos))
                .collect());
        }
        let mut zip = zip::ZipArchive::new(Cursor::new(data))
            .map_err(|e| format!("not a readable .eval (zip) log: {e}"))?;
        let mut names: Vec<String> = zip
            .file_names()
            .filter_map(Result::ok)
            .filter(|n| n.starts_with("samples/") && n.ends_with(".json"))
            .map(|n| n.into_owned())
            .collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            let mut text = String::new();
            zip.by_name(&name)
                .map_err(|e| format!("{name}: {e}"))?
                .read_to_string(&mut text)
                .map_err(|e| format!("{name}: {e}"))?;
            let s: Value = serde_json::from_str(&text).map_err(|e| format!("{name}: {e}"))?;
            // A call in an archive is named by the archive and its member.
            let member = PathBuf::from(format!("{}#{name}", file.display()));
            out.extend(sample(&member, &s, &mut Some(Lines::new(&text))));
        }
        Ok(out)
    }
}
