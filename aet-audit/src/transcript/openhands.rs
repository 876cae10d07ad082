//! OpenHands: its event lists. A trajectory saved from the UI or by `save_trajectory_path` is a
//! JSON array of events; an evaluation's `output.jsonl` has one instance per line with the events
//! under `history`; a session's `events/` directory has one event per file. An action event is
//! `{id, timestamp, source, action, args}` (`run` with `command`, `run_ipython` with `code`,
//! `read`, `write`, `edit` with `path`); its observation names it by `cause` and says the shell's
//! `working_dir` after it. The newer agent SDK's events (`ActionEvent` with `tool_name` and
//! `action`) are read too.
//!
//! OpenHands writes its times without a time zone, so they cannot be placed on the kernel's
//! clock: calls have no times, and a finding gets the call that names its path.

use std::{collections::HashMap, path::Path};

use serde_json::Value;

use super::{Kind, Lines, Probe, ToolCall, TranscriptFormat, json_lines, str_of, utf8};

/// OpenHands' event lists.
pub struct OpenHands;

/// Is this object an OpenHands event?
fn is_event(v: &Value) -> bool {
    (v.get("action").is_some_and(Value::is_string) && v.get("args").is_some())
        || (v.get("observation").is_some_and(Value::is_string) && v.get("cause").is_some())
        || str_of(v, "kind").is_some_and(|k| k.ends_with("Event") && v.get("source").is_some())
}

/// The events of a document: an array of events, an object with `history`, or one event.
fn events(doc: &Value) -> Vec<&Value> {
    if let Some(a) = doc.as_array() {
        return a.iter().collect();
    }
    if let Some(h) = doc.get("history").and_then(Value::as_array) {
        return h.iter().collect();
    }
    if is_event(doc) {
        return vec![doc];
    }
    Vec::new()
}

/// An editor command's kind.
fn editor_kind(command: Option<&str>) -> Kind {
    match command {
        Some("view") => Kind::Read,
        Some("create") => Kind::Write,
        _ => Kind::Edit,
    }
}

/// An action event as a tool call (`None` for messages, thoughts, the end).
fn action(e: &Value) -> Option<ToolCall> {
    let mut c = ToolCall::default();
    if let Some(a) = str_of(e, "action") {
        let args = e.get("args").unwrap_or(&Value::Null);
        let path = str_of(args, "path").map(str::to_owned);
        c.tool = a.to_owned();
        match a {
            "run" => {
                c.kind = Kind::Shell;
                c.command = str_of(args, "command").map(str::to_owned);
            }
            "run_ipython" => {
                c.kind = Kind::Shell;
                c.command = str_of(args, "code").map(str::to_owned);
            }
            "read" => c.kind = Kind::Read,
            "write" => c.kind = Kind::Write,
            "edit" => c.kind = editor_kind(str_of(args, "command")),
            _ => return None,
        }
        c.paths.extend(path);
        c.id = e.get("id").map(|i| i.to_string()).unwrap_or_default();
        return Some(c);
    }
    // The agent SDK's events.
    if str_of(e, "kind") != Some("ActionEvent") {
        return None;
    }
    let act = e.get("action").unwrap_or(&Value::Null);
    c.tool = str_of(e, "tool_name").unwrap_or("?").to_owned();
    c.id = str_of(e, "tool_call_id").unwrap_or_default().to_owned();
    if let Some(p) = str_of(act, "path") {
        c.kind = editor_kind(str_of(act, "command"));
        c.paths.push(p.to_owned());
    } else if let Some(cmd) = str_of(act, "command") {
        c.kind = Kind::Shell;
        c.command = Some(cmd.to_owned());
    }
    Some(c)
}

/// The calls of a list of events.
fn calls(file: &Path, evs: &[&Value], pos: &mut Lines<'_>, line: Option<usize>) -> Vec<ToolCall> {
    let mut out: Vec<ToolCall> = Vec::new();
    let mut cwd: Option<String> = None;
    let mut by_id: HashMap<String, usize> = HashMap::new();
    for e in evs {
        if let Some(mut c) = action(e) {
            c.file = file.to_owned();
            c.cwd = cwd.clone();
            // An event's time is ASCII and its own: where it is, is where the event is.
            c.line = line.unwrap_or_else(|| pos.of(str_of(e, "timestamp").unwrap_or_default()));
            by_id.insert(c.id.clone(), out.len());
            out.push(c);
        } else if e.get("observation").is_some() {
            let meta = e
                .get("extras")
                .and_then(|x| x.get("metadata"))
                .unwrap_or(&Value::Null);
            if let Some(d) = str_of(meta, "working_dir") {
                // The first command's directory is the one its observation reports.
                if let Some(&k) = e.get("cause").and_then(|c| by_id.get(&c.to_string()))
                    && out[k].cwd.is_none()
                {
                    out[k].cwd = Some(d.to_owned());
                }
                cwd = Some(d.to_owned());
            }
        }
    }
    out.into_iter().map(ToolCall::finish).collect()
}

impl TranscriptFormat for OpenHands {
    fn name(&self) -> &'static str {
        "openhands"
    }

    fn recognizes(&self, probe: &Probe<'_>) -> bool {
        probe
            .doc
            .as_ref()
            .is_some_and(|d| events(d).iter().any(|e| is_event(e)))
            || probe.any_line(|v| {
                v.get("history")
                    .and_then(Value::as_array)
                    .is_some_and(|h| h.iter().any(is_event))
            })
    }

    fn tool_calls(&self, file: &Path, data: &[u8]) -> Result<Vec<ToolCall>, String> {
        let text = utf8(data)?;
        let mut pos = Lines::new(text);
        if let Ok(doc) = serde_json::from_str::<Value>(text) {
            return Ok(calls(file, &events(&doc), &mut pos, None));
        }
        // An evaluation's output: one instance per line.
        let mut out = Vec::new();
        for item in json_lines(text) {
            let (ln, v) = item?;
            out.extend(calls(file, &events(&v), &mut pos, Some(ln)));
        }
        Ok(out)
    }
}
