//! `aet ledger summary`: what a run did, from the kernel's record — processes, execs, files read
//! and written (by open flags), failed opens, lost events, duration. The seed's
//! `file_access_ledger`, computed from syscalls instead of a transcript.

use std::{
    collections::{BTreeMap, HashSet},
    fmt::Write as _,
};

use arrow_array::{
    Array, BinaryArray, Int64Array, RecordBatch, StringArray, UInt32Array, cast::AsArray as _,
};
use serde::Serialize;

use super::{
    reader::{Form, Ledger, ReadError},
    schema::{col, meta},
};

/// One file in the summary.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FileUse {
    /// The path as the process passed it (lossy UTF-8 for display).
    pub path: String,
    /// Successful opens of this path with this access.
    pub opens: u64,
}

/// A ledger's summary.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub ledger: String,
    /// `finished`, or `unfinished` when read from the stream form of a killed monitor's file.
    pub form: &'static str,
    pub schema_version: String,
    pub command: Vec<String>,
    pub scope: String,
    pub started_ns: Option<i64>,
    pub ended_ns: Option<i64>,
    pub duration_s: Option<f64>,
    pub exit_status: Option<i32>,
    pub events: u64,
    pub events_by_kind: BTreeMap<String, u64>,
    pub processes: u64,
    pub execs: u64,
    pub execs_failed: u64,
    pub files_read: Vec<FileUse>,
    pub files_written: Vec<FileUse>,
    pub failed_opens: u64,
    pub failed_opens_by_errno: BTreeMap<String, u64>,
    /// `None` when the ledger does not say (unfinished).
    pub events_lost: Option<u64>,
    pub events_lost_by_reason: BTreeMap<String, u64>,
    pub complete: bool,
    pub incomplete_reasons: Vec<String>,
    pub killed: Vec<serde_json::Value>,
}

const O_ACCMODE: u32 = 0o3;
const O_WRONLY: u32 = 0o1;
const O_RDWR: u32 = 0o2;
const O_CREAT: u32 = 0o100;
const O_TRUNC: u32 = 0o1000;

/// Summarises an open ledger (reads all its batches, one at a time).
pub fn summarize(ledger: &mut Ledger) -> Result<Summary, ReadError> {
    let m = ledger.metadata();
    let get = |k: &str| m.get(k).cloned();
    let num = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
    let mut s = Summary {
        ledger: ledger.path().display().to_string(),
        form: match ledger.form() {
            Form::Finished => "finished",
            Form::Unfinished => "unfinished",
        },
        schema_version: get(meta::SCHEMA_VERSION).unwrap_or_default(),
        command: get(meta::COMMAND)
            .and_then(|c| serde_json::from_str(&c).ok())
            .unwrap_or_default(),
        scope: get(meta::SCOPE_TARGET).unwrap_or_default(),
        started_ns: num(meta::STARTED_NS),
        ended_ns: num(meta::ENDED_NS),
        duration_s: None,
        exit_status: num(meta::EXIT_STATUS).map(|v| v as i32),
        events: 0,
        events_by_kind: BTreeMap::new(),
        processes: 0,
        execs: 0,
        execs_failed: 0,
        files_read: Vec::new(),
        files_written: Vec::new(),
        failed_opens: 0,
        failed_opens_by_errno: BTreeMap::new(),
        events_lost: num(meta::EVENTS_LOST).map(|v| v as u64),
        events_lost_by_reason: get(meta::EVENTS_LOST_BY_REASON)
            .and_then(|c| serde_json::from_str(&c).ok())
            .unwrap_or_default(),
        complete: false,
        incomplete_reasons: get(meta::INCOMPLETE_REASONS)
            .and_then(|c| serde_json::from_str(&c).ok())
            .unwrap_or_default(),
        killed: get(meta::KILLED)
            .and_then(|c| serde_json::from_str(&c).ok())
            .unwrap_or_default(),
    };
    if let (Some(a), Some(b)) = (s.started_ns, s.ended_ns) {
        s.duration_s = Some((b - a) as f64 / 1e9);
    }
    let mut pids = HashSet::new();
    let mut read: BTreeMap<Vec<u8>, (String, u64)> = BTreeMap::new();
    let mut written: BTreeMap<Vec<u8>, (String, u64)> = BTreeMap::new();
    let mut first_ts = None;
    let mut last_ts = None;
    while let Some(batch) = ledger.next_batch()? {
        tally(
            &batch,
            &mut s,
            &mut pids,
            &mut read,
            &mut written,
            &mut first_ts,
            &mut last_ts,
        );
    }
    s.processes = pids.len() as u64;
    let to_list = |m: BTreeMap<Vec<u8>, (String, u64)>| {
        m.into_values()
            .map(|(path, opens)| FileUse { path, opens })
            .collect()
    };
    s.files_read = to_list(read);
    s.files_written = to_list(written);
    if s.duration_s.is_none()
        && let (Some(a), Some(b)) = (first_ts, last_ts)
    {
        s.duration_s = Some((b - a) as f64 / 1e9);
    }

    // Completeness: only a finished ledger that says it is complete and lost nothing.
    if ledger.form() == Form::Unfinished {
        s.incomplete_reasons.push(
            "the ledger is unfinished (its monitor stopped before writing the footer); \
             rows up to its last complete batch were read, later events are missing"
                .into(),
        );
    }
    if let Some(e) = &ledger.damaged_tail {
        s.incomplete_reasons
            .push(format!("the ledger's last batch is damaged: {e}"));
    }
    if m.get(meta::RECOVERED).map(String::as_str) == Some("true")
        && !s.incomplete_reasons.iter().any(|r| r.contains("recovered"))
    {
        s.incomplete_reasons
            .push("the ledger was recovered from an unfinished file".into());
    }
    s.complete = ledger.form() == Form::Finished
        && m.get(meta::COMPLETE).map(String::as_str) == Some("true")
        && s.events_lost == Some(0)
        && s.incomplete_reasons.is_empty();
    if !s.complete && s.incomplete_reasons.is_empty() {
        s.incomplete_reasons
            .push("the ledger does not state that its record is complete".into());
    }
    Ok(s)
}

fn tally(
    batch: &RecordBatch,
    s: &mut Summary,
    pids: &mut HashSet<u32>,
    read: &mut BTreeMap<Vec<u8>, (String, u64)>,
    written: &mut BTreeMap<Vec<u8>, (String, u64)>,
    first_ts: &mut Option<i64>,
    last_ts: &mut Option<i64>,
) {
    let kind: &StringArray = batch
        .column_by_name(col::KIND)
        .expect("checked")
        .as_string();
    let pid: &UInt32Array = batch
        .column_by_name(col::PID)
        .expect("checked")
        .as_primitive();
    let flags: &UInt32Array = batch
        .column_by_name(col::FLAGS)
        .expect("checked")
        .as_primitive();
    let ret: &Int64Array = batch
        .column_by_name(col::RET)
        .expect("checked")
        .as_primitive();
    let errno: &StringArray = batch
        .column_by_name(col::ERRNO)
        .expect("checked")
        .as_string();
    let path: &StringArray = batch
        .column_by_name(col::PATH)
        .expect("checked")
        .as_string();
    let path_raw: &BinaryArray = batch
        .column_by_name(col::PATH_RAW)
        .expect("checked")
        .as_binary();
    let ts: &Int64Array = batch
        .column_by_name(col::TS_NS)
        .expect("checked")
        .as_primitive();
    for i in 0..batch.num_rows() {
        s.events += 1;
        pids.insert(pid.value(i));
        let k = kind.value(i);
        *s.events_by_kind.entry(k.to_owned()).or_default() += 1;
        let t = ts.value(i);
        first_ts.get_or_insert(t);
        *last_ts = Some(t);
        let ok = ret.is_valid(i) && ret.value(i) >= 0;
        match k {
            "exec" => {
                s.execs += 1;
                if !ok {
                    s.execs_failed += 1;
                }
            }
            "open" if !ok => {
                s.failed_opens += 1;
                let e = if errno.is_valid(i) {
                    errno.value(i)
                } else {
                    "?"
                };
                *s.failed_opens_by_errno.entry(e.to_owned()).or_default() += 1;
            }
            "open" if path.is_valid(i) => {
                let bytes = if path_raw.is_valid(i) {
                    path_raw.value(i).to_vec()
                } else {
                    path.value(i).as_bytes().to_vec()
                };
                let f = flags.value(i);
                let acc = f & O_ACCMODE;
                let is_write = acc == O_WRONLY || acc == O_RDWR || f & (O_CREAT | O_TRUNC) != 0;
                let is_read = acc != O_WRONLY;
                if is_read {
                    read.entry(bytes.clone())
                        .or_insert_with(|| (path.value(i).to_owned(), 0))
                        .1 += 1;
                }
                if is_write {
                    written
                        .entry(bytes)
                        .or_insert_with(|| (path.value(i).to_owned(), 0))
                        .1 += 1;
                }
            }
            _ => {}
        }
    }
}

/// The summary as text for a terminal. `list_files` adds the file lists.
pub fn render_text(s: &Summary, list_files: bool) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "ledger          {} ({}, schema {})",
        s.ledger, s.form, s.schema_version
    );
    if !s.command.is_empty() {
        let _ = writeln!(o, "command         {}", shell_words(&s.command));
    }
    let _ = writeln!(o, "scope           {}", s.scope);
    if let Some(d) = s.duration_s {
        let _ = writeln!(o, "duration        {d:.3} s");
    }
    if let Some(e) = s.exit_status {
        let _ = writeln!(o, "exit status     {e}");
    }
    let kinds: Vec<String> = s
        .events_by_kind
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let _ = writeln!(o, "events          {} ({})", s.events, kinds.join(", "));
    let _ = writeln!(o, "processes       {}", s.processes);
    let _ = writeln!(o, "execs           {} ({} failed)", s.execs, s.execs_failed);
    let _ = writeln!(o, "files read      {}", s.files_read.len());
    let _ = writeln!(o, "files written   {}", s.files_written.len());
    let errnos: Vec<String> = s
        .failed_opens_by_errno
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if errnos.is_empty() {
        let _ = writeln!(o, "failed opens    0");
    } else {
        let _ = writeln!(
            o,
            "failed opens    {} ({})",
            s.failed_opens,
            errnos.join(", ")
        );
    }
    match s.events_lost {
        Some(n) => {
            let _ = writeln!(o, "lost events     {n}");
        }
        None => {
            let _ = writeln!(o, "lost events     unknown");
        }
    }
    if !s.killed.is_empty() {
        let _ = writeln!(o, "killed at end   {}", s.killed.len());
    }
    if s.complete {
        let _ = writeln!(o, "record          complete");
    } else {
        let _ = writeln!(o, "record          INCOMPLETE");
        for r in &s.incomplete_reasons {
            let _ = writeln!(o, "  - {r}");
        }
    }
    if list_files {
        let _ = writeln!(o, "\nfiles read:");
        for f in &s.files_read {
            let _ = writeln!(o, "  {:>5}  {}", f.opens, escape_path(&f.path));
        }
        let _ = writeln!(o, "\nfiles written:");
        for f in &s.files_written {
            let _ = writeln!(o, "  {:>5}  {}", f.opens, escape_path(&f.path));
        }
    }
    o
}

/// Escapes control characters so a path with a newline stays on one line.
pub fn escape_path(p: &str) -> String {
    p.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Joins arguments for display, quoting those that need it.
pub fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_quotes_what_needs_it() {
        let a = vec![
            "sh".into(),
            "-c".into(),
            "cat x | wc -l".into(),
            "it's".into(),
        ];
        assert_eq!(shell_words(&a), r"sh -c 'cat x | wc -l' 'it'\''s'");
    }

    #[test]
    fn escape_keeps_paths_on_one_line() {
        assert_eq!(escape_path("/a\nb"), r"/a\nb");
    }
}
