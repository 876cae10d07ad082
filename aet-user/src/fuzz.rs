//! The bodies of the fuzz targets: every parser of bytes the agent or a task author controls, fed
//! whatever a fuzzer makes. `fuzz/` (cargo-fuzz, libFuzzer) calls each of [`TARGETS`] from a
//! target of the same name, and `tests/fuzz_corpus.rs` runs each one over its committed corpus
//! and the inputs that once crashed it (`fuzz/regressions/`), so a crash found becomes a test.
//!
//! A target fails by panicking: on a parser's panic, on a hang it bounds (the proxy's), or, for
//! the differential targets, when two implementations that must agree do not.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use aet_audit::{self as audit, policy::Policy};
use aet_ledger::{chain, reader, summary};

/// A fuzz target: its name (the file under `fuzz/fuzz_targets/`, the folder of its corpus) and
/// its body.
pub struct Target {
    pub name: &'static str,
    /// What it feeds, in a few words.
    pub about: &'static str,
    pub run: fn(&[u8]),
}

thread_local! {
    /// Set while a target runs code whose panics it catches on purpose (arrow-rs's own reader
    /// in [`ledger_diff`]).
    static CAUGHT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes the panics aet catches on purpose (Arrow's decoders on a damaged ledger, which the
/// reader turns into a "corrupt ledger" error) pass the fuzzer's panic hook, which aborts on
/// every other: those are the crashes a target looks for.
pub fn quiet_caught_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let fuzzer = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if aet_ledger::decode::decoding() || CAUGHT.get() {
                return;
            }
            fuzzer(info);
        }));
    });
}

/// Every fuzz target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "ledger",
        about: "a ledger file (finished or an unfinished stream): reader, summary, chain check, audit",
        run: ledger,
    },
    Target {
        name: "ledger_diff",
        about: "a ledger file read by aet's reader and by arrow-rs's, and by column (mapped)",
        run: ledger_diff,
    },
    Target {
        name: "footer",
        about: "a ledger's footer metadata (known keys, arbitrary values): typed, summarised, audited",
        run: footer,
    },
    Target {
        name: "audit_json",
        about: "an audit.json read back and rendered as text and HTML",
        run: audit_json,
    },
    Target {
        name: "policy",
        about: "an audit policy (TOML), compiled",
        run: policy,
    },
    Target {
        name: "spec",
        about: "a sandbox spec (TOML), parsed and checked",
        run: spec,
    },
    Target {
        name: "transcript",
        about: "an agent transcript (claude-jsonl): tool calls and the paths their commands name",
        run: transcript,
    },
    Target {
        name: "names",
        about: "a socket's payload: DNS (a datagram, or TCP's framing), a TLS ClientHello, HTTP",
        run: names,
    },
    Target {
        name: "dns_diff",
        about: "a DNS message parsed by hickory-proto (aet's) and by simple-dns: same questions",
        run: dns_diff,
    },
    Target {
        name: "proxy",
        about: "a client of the sandbox's proxy, served in process: HTTP, CONNECT, DNS",
        run: proxy,
    },
    Target {
        name: "daemon_protocol",
        about: "a line of the daemon's socket protocol, as request and response, round-tripped",
        run: daemon_protocol,
    },
];

/// The target named `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// A directory of this process's own for the files a target writes (a ledger is read from a
/// file, as `aet` reads it).
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = Path::new("/dev/shm");
        let base = if base.is_dir() {
            base.to_owned()
        } else {
            std::env::temp_dir()
        };
        // A fuzzer ends by exiting, which leaves its directory: those of processes that are
        // gone go now.
        for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = e.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("aet-fuzz-")) else {
                continue;
            };
            if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let d = base.join(format!("aet-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("a scratch directory for the fuzz target");
        d
    })
}

/// `bytes` written to `name` in the scratch directory of this thread.
fn file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = scratch().join(format!("{:?}", std::thread::current().id()).replace(['(', ')'], ""));
    std::fs::create_dir_all(&dir).expect("the thread's scratch directory");
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("a scratch file");
    p
}

/// The policy the ledger targets audit with (the task preset, with cheats, contaminants, warns,
/// protected files and hosts).
fn preset() -> &'static Policy {
    static P: OnceLock<Policy> = OnceLock::new();
    P.get_or_init(|| {
        Policy::parse(
            include_str!("../../policies/agent-task.toml"),
            Path::new("policies/agent-task.toml"),
        )
        .expect("the preset policy compiles")
    })
}

/// Everything aet does with a ledger file it did not write itself.
fn ledger_file(p: &Path) {
    if let Ok(mut l) = reader::Ledger::open(p) {
        let _ = l.meta();
        let _ = l.read_all();
    }
    if let Ok(mut l) = reader::Ledger::open(p) {
        let _ = summary::summarize(&mut l);
    }
    let _ = aet_ledger::rows::read_rows(p);
    let _ = reader::count_rows(p);
    let _ = chain::verify(p);
    if let Ok(r) = audit::audit_with(
        p,
        preset(),
        &audit::Options {
            transcripts: None,
            transcript_format: "claude-jsonl",
        },
    ) {
        let _ = audit::render_text(&r);
        let _ = audit::html::render(&r);
    }
}

/// A ledger file (finished, unfinished, damaged, doctored).
pub fn ledger(data: &[u8]) {
    ledger_file(&file("ledger.arrow", data));
}

/// Columns read both whole and by projection in [`ledger_diff`]: text, numbers, a list.
const PROJECTED: &[&str] = &[
    "kind",
    "path",
    "resolved_path",
    "pid",
    "comm",
    "ret",
    "argv",
];

/// A ledger read by aet's reader and by arrow-rs's own must give the same rows; read by column
/// (a finished one is decoded in place from a mapping, text as bytes) the same values.
pub fn ledger_diff(data: &[u8]) {
    use arrow_array::{Array as _, RecordBatch};
    let p = file("ledger.arrow", data);
    let Ok(mut ours) = reader::Ledger::open(&p) else {
        return;
    };
    let form = ours.form();
    let doctored = ours.doctored.is_some();
    let Ok(mine) = ours.read_all() else { return };
    // arrow-rs's stream reader allocates whatever length a message declares (2^62 bytes aborts
    // the process, 1.7 GB takes a second to zero): it reads as far as aet's reader does, to the
    // first message whose declared lengths pass the file's end.
    let stream_end = reader::stream_end(&p).unwrap_or(8);
    // arrow-rs's reader, over the same bytes, as aet would have used it (its panics on damaged
    // input are arrow-rs's, caught).
    CAUGHT.set(true);
    let theirs = std::panic::catch_unwind(|| {
        let f = std::fs::File::open(&p).expect("the scratch file");
        let mut out = Vec::new();
        match form {
            reader::Form::Finished => {
                if let Ok(r) = arrow_ipc::reader::FileReader::try_new(f, None) {
                    out.extend(r.map_while(Result::ok));
                }
            }
            reader::Form::Unfinished => {
                use std::io::{Read as _, Seek as _, SeekFrom};
                let mut f = f;
                f.seek(SeekFrom::Start(8)).expect("seek");
                let f = f.take(stream_end.saturating_sub(8));
                if let Ok(r) = arrow_ipc::reader::StreamReader::try_new(f, None) {
                    out.extend(r.map_while(Result::ok));
                }
            }
        }
        out
    });
    CAUGHT.set(false);
    let theirs: Vec<RecordBatch> = theirs.unwrap_or_default();
    if !doctored && form == reader::Form::Finished {
        assert_eq!(
            mine.len(),
            theirs.len(),
            "aet's reader and arrow-rs's read different numbers of batches"
        );
    }
    assert!(
        mine.len() <= theirs.len() || doctored,
        "aet's reader found batches arrow-rs's did not ({} > {})",
        mine.len(),
        theirs.len()
    );
    for (a, b) in mine.iter().zip(&theirs) {
        for (i, f) in b.schema().fields().iter().enumerate() {
            if doctored {
                break;
            }
            let Ok(j) = a.schema().index_of(f.name()) else {
                continue;
            };
            assert_eq!(
                a.column(j).to_data(),
                b.column(i).to_data(),
                "column {} differs between aet's reader and arrow-rs's",
                f.name()
            );
        }
    }
    // By column: the same values, text as its bytes.
    let Ok(mut cols) = reader::Ledger::open_columns(&p, PROJECTED) else {
        panic!("a ledger aet reads whole does not open by column");
    };
    let mut by_col = Vec::new();
    while let Ok(Some(b)) = cols.next_batch() {
        by_col.push(b);
    }
    let whole_rows: usize = mine.iter().map(RecordBatch::num_rows).sum();
    let col_rows: usize = by_col.iter().map(RecordBatch::num_rows).sum();
    if col_rows != whole_rows {
        // A finished ledger read whole has no damaged batch; by column it must have none either.
        assert!(
            form == reader::Form::Unfinished,
            "read by column, a finished ledger has {col_rows} rows; read whole, {whole_rows}"
        );
        return;
    }
    let flat = |bs: &[RecordBatch], name: &str| -> Vec<Option<Cell>> {
        let mut out = Vec::new();
        for b in bs {
            let Some(c) = b.column_by_name(name) else {
                continue;
            };
            for r in 0..c.len() {
                out.push(cell(c.as_ref(), r));
            }
        }
        out
    };
    for name in PROJECTED {
        if mine
            .first()
            .is_some_and(|b| b.column_by_name(name).is_none())
        {
            continue;
        }
        assert_eq!(
            flat(&mine, name),
            flat(&by_col, name),
            "column {name} read whole and read by column differ"
        );
    }
}

/// One cell: text and binary as their bytes (lists of them joined by NUL), anything else as
/// its Arrow data (compared by value).
#[derive(Debug, PartialEq)]
enum Cell {
    Bytes(Vec<u8>),
    Data(arrow_data::ArrayData),
}

fn cell(c: &dyn arrow_array::Array, r: usize) -> Option<Cell> {
    use arrow_array::cast::AsArray as _;
    use arrow_schema::DataType;
    if c.is_null(r) {
        return None;
    }
    Some(match c.data_type() {
        DataType::Utf8 => Cell::Bytes(c.as_string::<i32>().value(r).as_bytes().to_vec()),
        DataType::Binary => Cell::Bytes(c.as_binary::<i32>().value(r).to_vec()),
        DataType::List(_) => {
            let v = c.as_list::<i32>().value(r);
            let mut out = Vec::new();
            for k in 0..v.len() {
                if let Some(Cell::Bytes(b)) = cell(v.as_ref(), k) {
                    out.extend(b);
                }
                out.push(0);
            }
            Cell::Bytes(out)
        }
        _ => Cell::Data(c.slice(r, 1).to_data()),
    })
}

/// A footer's metadata: each entry a known key (or, past the list, any key) and any value; the
/// ledger written with it is read, summarised, verified and audited.
pub fn footer(data: &[u8]) {
    if let Some(p) = footer_ledger(data) {
        ledger_file(&p);
    }
}

/// The ledger [`footer`] writes for `data`: one row, the metadata `data` makes; `None` when
/// `data` makes none or the writer refuses it.
fn footer_ledger(data: &[u8]) -> Option<PathBuf> {
    use arbitrary::{Arbitrary as _, Unstructured};
    let keys = aet_ledger::schema::meta::KEYS;
    let mut u = Unstructured::new(data);
    let entries = Vec::<(u8, String, String)>::arbitrary(&mut u).ok()?;
    let mut meta = HashMap::new();
    for (k, name, value) in entries {
        let key = keys
            .get(k as usize)
            .map_or(name, |(key, _)| (*key).to_owned());
        meta.insert(key, value);
    }
    let _ = aet_ledger::metadata::LedgerMeta::parse(&meta);
    let p = file("footer.arrow", b"");
    // The writer makes a new file only.
    std::fs::remove_file(&p).ok()?;
    let mut w = aet_ledger::writer::LedgerWriter::create(&p, HashMap::new()).ok()?;
    let mut row = aet_ledger::writer::Row {
        kind: "open",
        path: Some(std::borrow::Cow::Borrowed(
            b"/task/answers/key.txt".as_slice(),
        )),
        ..Default::default()
    };
    row.pid = 2;
    w.append(&row).ok()?;
    w.finish(meta).ok()
}

/// An `audit.json`, as `aet report` and the grouped reports read one back.
pub fn audit_json(data: &[u8]) {
    let p = file("audit.json", data);
    if let Ok(Some(r)) = audit::Report::read(&p) {
        let _ = audit::render_text(&r);
        let _ = audit::html::render(&r);
    }
}

/// A policy file.
pub fn policy(data: &[u8]) {
    let p = file("policy.toml", data);
    if let Ok(pol) = Policy::load(&p) {
        let _ = pol.needs_tracked();
        let _ = pol.for_phase("test");
    }
}

/// A sandbox spec.
pub fn spec(data: &[u8]) {
    let p = file("spec.toml", data);
    if let Ok(s) = aet_sandbox::spec::SandboxSpec::load(&p) {
        let _ = s.check();
        let _ = s.entries();
    }
}

/// A transcript file.
pub fn transcript(data: &[u8]) {
    use aet_audit::transcript;
    let p = file("transcript.jsonl", data);
    let _ = transcript::read(&p, None);
    for f in transcript::formats() {
        let _ = f.tool_calls(&p, data);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        for line in text.lines().take(64) {
            let _ = transcript::command_paths(line);
        }
    }
}

/// A socket's payload, as the monitor's row maker reads it.
pub fn names(data: &[u8]) {
    for m in aet_monitor::names::dns_messages(data) {
        assert!(!m.qtype.is_empty());
    }
    let _ = aet_proxy::hello::client_hello(data);
    let _ = aet_proxy::hello::tls_server_name(data);
    let _ = aet_monitor::names::http_host(data);
}

/// A DNS message that both hickory-proto (what aet parses with) and simple-dns read must have
/// the same id and the same questions (each name's labels, byte for byte, and type).
pub fn dns_diff(data: &[u8]) {
    use hickory_proto::op::Message;
    let (Ok(a), Ok(b)) = (Message::from_vec(data), simple_dns::Packet::parse(data)) else {
        return;
    };
    assert_eq!(a.metadata.id, b.id(), "the message id");
    let ours: Vec<(Vec<u8>, u16)> = a
        .queries
        .iter()
        .map(|q| {
            (
                aet_proxy::dns::name_bytes(q.name()),
                u16::from(q.query_type()),
            )
        })
        .collect();
    let theirs: Vec<(Vec<u8>, u16)> = b
        .questions
        .iter()
        .map(|q| {
            let mut name = Vec::new();
            for (i, l) in q.qname.get_labels().iter().enumerate() {
                if i > 0 {
                    name.push(b'.');
                }
                name.extend_from_slice(l.as_ref());
            }
            (name, u16::from(q.qtype))
        })
        .collect();
    assert_eq!(ours, theirs, "the questions");
}

/// A client of the proxy: the first byte chooses HTTP (even) or DNS (odd) and the mode
/// (enforce, or shadow); the rest is what it sends. Every request the proxy answered with a
/// decision is a row.
pub fn proxy(data: &[u8]) {
    let Some((&how, input)) = data.split_first() else {
        return;
    };
    let enforce = how & 2 == 0;
    if how & 1 == 0 {
        let r = aet_proxy::replay::http(input, enforce);
        for e in &r.events {
            assert!(
                e.decision != aet_proxy::Decision::Allowed || e.reason.is_none(),
                "an allowed request with a reason to refuse it: {e:?}"
            );
        }
    } else {
        let _ = aet_proxy::replay::dns(input, enforce);
    }
}

/// A line of the daemon's protocol, decoded as a request and as a response; what decodes
/// encodes back to a line that decodes to the same (compared as JSON values: a map's keys come
/// out in any order).
pub fn daemon_protocol(data: &[u8]) {
    use aet_monitor::daemon::protocol::{Request, Response};
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    round_trip::<Request>(line);
    round_trip::<Response>(line);
}

/// When `line` decodes as a `T`, its encoding decodes to the same.
fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(line: &str) {
    use aet_monitor::daemon::protocol::decode;
    let Ok(r) = decode::<T>(line) else { return };
    let once = serde_json::to_string(&r).expect("what decodes encodes");
    let again: T = decode(&once).expect("what was encoded decodes");
    assert_eq!(
        serde_json::to_value(&r).expect("encodes"),
        serde_json::to_value(&again).expect("encodes")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fuzz_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
    }

    fn files(dir: &Path) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_file())
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    /// Every target is a libFuzzer target of the same name calling its body, with seeds.
    #[test]
    fn every_target_is_built_by_cargo_fuzz_and_has_seeds() {
        let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
        for t in TARGETS {
            assert!(
                manifest.contains(&format!("name = \"{}\"", t.name)),
                "fuzz/Cargo.toml has no [[bin]] {}",
                t.name
            );
            let src = fuzz_dir().join(format!("fuzz_targets/{}.rs", t.name));
            let text =
                std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
            assert!(
                text.contains(&format!("aet::fuzz::{}(data)", t.name)),
                "{} does not call aet::fuzz::{}",
                src.display(),
                t.name
            );
            assert!(
                !files(&fuzz_dir().join("corpus").join(t.name)).is_empty(),
                "fuzz/corpus/{} has no seed",
                t.name
            );
        }
        assert_eq!(
            manifest.matches("[[bin]]").count(),
            TARGETS.len(),
            "fuzz/Cargo.toml and TARGETS list the same targets"
        );
    }

    /// The seeds, and every input that once crashed a target (`fuzz/regressions/TARGET/`), run
    /// through the targets: what was fixed stays fixed.
    #[test]
    fn the_corpora_and_the_regressions_run_clean() {
        let mut ran = 0;
        for t in TARGETS {
            for dir in ["corpus", "regressions"] {
                for f in files(&fuzz_dir().join(dir).join(t.name)) {
                    let data = std::fs::read(&f).unwrap();
                    let r = std::panic::catch_unwind(|| (t.run)(&data));
                    assert!(r.is_ok(), "fuzz target {} fails on {}", t.name, f.display());
                    ran += 1;
                }
            }
        }
        assert!(ran >= TARGETS.len(), "{ran} inputs");
    }

    /// The targets see what they are for: a seed ledger is read and audited, the proxy's
    /// upstream is reached and its refusals are rows.
    #[test]
    fn the_targets_reach_what_they_fuzz() {
        let seed = std::fs::read(fuzz_dir().join("corpus/ledger/finished-true.arrow")).unwrap();
        let p = file("ledger.arrow", &seed);
        let mut l = reader::Ledger::open(&p).unwrap();
        assert_eq!(l.form(), reader::Form::Finished);
        assert!(!l.read_all().unwrap().is_empty());
        ledger_diff(&seed);
        // The footer target writes a new ledger every time (the writer makes new files only).
        for _ in 0..2 {
            let p = footer_ledger(b"").expect("a ledger with empty metadata");
            assert_eq!(reader::count_rows(&p).unwrap(), 1);
        }

        let r = aet_proxy::replay::http(
            b"GET http://UPSTREAM/x HTTP/1.1\r\n\r\nCONNECT github.com:443 HTTP/1.1\r\n\r\n",
            true,
        );
        let text = String::from_utf8_lossy(&r.response);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(text.contains("403"), "{text}");
        let decisions: Vec<_> = r.events.iter().map(|e| e.decision).collect();
        assert_eq!(
            decisions,
            [aet_proxy::Decision::Allowed, aet_proxy::Decision::Refused],
            "{:?}",
            r.events
        );
    }
}
