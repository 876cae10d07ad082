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

/// Most bytes the sample members of one `.eval` archive may hold uncompressed, in all: they are
/// read whole, and a small archive can say (or hold) far more than it weighs. A larger one is
/// an error naming the member where the limit was passed, never a part of it read.
pub const EVAL_UNZIPPED_LIMIT: u64 = 1 << 30;

/// The sample members of a `.eval` archive (`samples/*.json`), in name order, with their text:
/// at most `limit` bytes uncompressed in all, whatever the archive's headers say.
fn samples(data: &[u8], limit: u64) -> Result<Vec<(String, String)>, String> {
    let mut zip = zip::ZipArchive::new(Cursor::new(data))
        .map_err(|e| format!("not a readable .eval (zip) log: {e}"))?;
    let mut names: Vec<String> = zip
        .file_names()
        .filter_map(Result::ok)
        .filter(|n| n.starts_with("samples/") && n.ends_with(".json"))
        .map(|n| n.into_owned())
        .collect();
    names.sort();
    let too_big = |name: &str| {
        format!(
            "{name}: the archive's samples hold more than {} MiB uncompressed (read whole, so \
             refused rather than cut)",
            limit >> 20
        )
    };
    let mut used = 0u64;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let member = zip.by_name(&name).map_err(|e| format!("{name}: {e}"))?;
        let left = limit - used;
        if member.size() > left {
            return Err(too_big(&name));
        }
        let mut text = String::new();
        member
            .take(left + 1)
            .read_to_string(&mut text)
            .map_err(|e| format!("{name}: {e}"))?;
        if text.len() as u64 > left {
            return Err(too_big(&name));
        }
        used += text.len() as u64;
        out.push((name, text));
    }
    Ok(out)
}

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
        let mut out = Vec::new();
        for (name, text) in samples(data, EVAL_UNZIPPED_LIMIT)? {
            let s: Value = serde_json::from_str(&text).map_err(|e| format!("{name}: {e}"))?;
            // A call in an archive is named by the archive and its member.
            let member = PathBuf::from(format!("{}#{name}", file.display()));
            out.extend(sample(&member, &s, &mut Some(Lines::new(&text))));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::samples;

    /// A zip of `members` (name, bytes), deflated.
    fn zip_of(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, bytes) in members {
            w.start_file(*name, opts).unwrap();
            w.write_all(bytes).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn an_eval_archive_past_the_unzipped_limit_is_refused_naming_the_member() {
        let big = vec![b' '; 3 << 20];
        let data = zip_of(&[
            ("samples/1_epoch_1.json", b"{}"),
            ("samples/2_epoch_1.json", &big),
            ("header.json", &big),
        ]);
        assert!(data.len() < 64 << 10, "deflated to {} bytes", data.len());
        let err = samples(&data, 2 << 20).unwrap_err();
        assert!(
            err.starts_with("samples/2_epoch_1.json: the archive's samples hold more than 2 MiB"),
            "{err}"
        );
        // The limit counts every sample together, not each one alone.
        let two = zip_of(&[
            ("samples/1_epoch_1.json", &big[..(3 << 19)]),
            ("samples/2_epoch_1.json", &big[..(3 << 19)]),
        ]);
        let err = samples(&two, 2 << 20).unwrap_err();
        assert!(err.starts_with("samples/2_epoch_1.json:"), "{err}");
        // Within it, every sample is read whole, in name order; other members are not read.
        let got = samples(&data, 4 << 20).unwrap();
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["samples/1_epoch_1.json", "samples/2_epoch_1.json"]);
        assert_eq!(got[1].1.len(), 3 << 20);
    }
}
