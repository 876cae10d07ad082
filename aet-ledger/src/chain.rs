//! The ledger's hash chain: a record that shows whether a ledger was changed after its run.
//!
//! When it finishes a ledger, the writer reads back what reached the file and hashes it (at the
//! end, so that the consumer never hashes on the event path; [`links`] streams, so a ledger of
//! gigabytes is never in memory whole):
//!
//! - `head = SHA-256("aet.chain.v1\0" || the file's head)` (magic and schema message: the head
//!   metadata, the command, the columns);
//! - for each record batch `i`, `hash_i = SHA-256(hash_{i-1} || the batch's message bytes)`
//!   (`hash_0` is `head`);
//! - `final = SHA-256(hash_n || the footer's metadata)`, the metadata as sorted `key`/`value`
//!   pairs, each length-prefixed, without `aet.chain` itself.
//!
//! The footer's `aet.chain` holds all of it (JSON: `version`, `head`, `batches` (one hash per
//! batch, in order), `final`). [`verify`] recomputes the chain from the file and names the first
//! part that does not match. The chain alone shows that a ledger is intact (a cut, a flipped
//! byte, an edited footer), not who wrote it: whoever edits a ledger can recompute it. A
//! signed manifest (`aet run --sign`) holds `final`, so the chain then proves the ledger is the
//! one the run wrote.

use std::{
    collections::{BTreeMap, HashMap},
    io::{self, Read as _},
    path::Path,
};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::schema::meta;

/// A SHA-256 digest.
pub type Hash = [u8; 32];

const DOMAIN: &[u8] = b"aet.chain.v1\0";

/// Lowercase hex of a digest.
pub fn hex(h: &Hash) -> String {
    crate::util::hex(h)
}

fn unhex(s: &str) -> Option<Hash> {
    crate::util::unhex(s)?.try_into().ok()
}

/// The chain as the footer keeps it (`aet.chain`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainRecord {
    pub version: u32,
    pub head: String,
    pub batches: Vec<String>,
    #[serde(rename = "final")]
    pub final_hash: String,
}

/// The chain's head and links of a file: the head is its bytes up to `head_end`, then one link
/// per `(offset, length)` span (the record batches, in order), each chained to the one before.
/// Streams: a ledger is never read into memory whole.
pub fn links(
    f: &mut (impl io::Read + io::Seek),
    head_end: u64,
    spans: &[(u64, u64)],
) -> io::Result<(Hash, Vec<Hash>)> {
    let mut h = Sha256::new();
    h.update(DOMAIN);
    f.seek(io::SeekFrom::Start(0))?;
    fn copy(f: &mut impl io::Read, h: &mut Sha256, len: u64) -> io::Result<()> {
        let n = io::copy(&mut f.by_ref().take(len), h)?;
        if n != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file ends inside a hashed span",
            ));
        }
        Ok(())
    }
    copy(f, &mut h, head_end)?;
    let head: Hash = h.finalize_reset().into();
    let mut last = head;
    let mut out = Vec::with_capacity(spans.len());
    for &(offset, len) in spans {
        f.seek(io::SeekFrom::Start(offset))?;
        h.update(last);
        copy(f, &mut h, len)?;
        last = h.finalize_reset().into();
        out.push(last);
    }
    Ok((head, out))
}

/// `final`: the last link chained with the footer's metadata (without `aet.chain`).
pub fn final_hash(last: &Hash, metadata: &HashMap<String, String>) -> Hash {
    let sorted: BTreeMap<&String, &String> = metadata
        .iter()
        .filter(|(k, _)| k.as_str() != meta::CHAIN)
        .collect();
    let mut h = Sha256::new();
    h.update(last);
    for (k, v) in sorted {
        h.update((k.len() as u64).to_le_bytes());
        h.update(k.as_bytes());
        h.update((v.len() as u64).to_le_bytes());
        h.update(v.as_bytes());
    }
    h.finalize().into()
}

/// The chain a verified ledger has.
#[derive(Clone, Debug)]
pub struct Verified {
    pub batches: usize,
    pub rows: u64,
    pub final_hash: Hash,
}

/// Why a ledger does not verify.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    Changed(String),
}

fn changed(s: impl Into<String>) -> ChainError {
    ChainError::Changed(s.into())
}

/// Recomputes the chain of the ledger at `path` and checks it against its footer. Any
/// difference is named: the head, the first batch that differs (with its rows), the footer's
/// metadata, or a file that no longer decodes.
pub fn verify(path: &Path) -> Result<Verified, ChainError> {
    let bytes = std::fs::read(path).map_err(|source| ChainError::Read {
        path: path.to_owned(),
        source,
    })?;
    let (fstart, footer) = footer(&bytes)?;
    let mut metadata = HashMap::new();
    if let Some(kv) = footer.schema().and_then(|s| s.custom_metadata()) {
        for e in kv {
            if let (Some(k), Some(v)) = (e.key(), e.value()) {
                metadata.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    let Some(text) = metadata.get(meta::CHAIN) else {
        return Err(changed(
            "the footer has no aet.chain: the ledger was written before aet kept one, or the \
             chain was removed",
        ));
    };
    let rec: ChainRecord = serde_json::from_str(text)
        .map_err(|e| changed(format!("aet.chain does not decode ({e}): it was changed")))?;
    let blocks: Vec<_> = footer
        .recordBatches()
        .map(|b| b.iter().copied().collect())
        .unwrap_or_default();
    if blocks.len() != rec.batches.len() {
        return Err(changed(format!(
            "the footer lists {} batches, the chain {}: batches were added or removed",
            blocks.len(),
            rec.batches.len()
        )));
    }
    // The end-of-stream marker sits right before the footer.
    let eos = fstart - 8;
    let head_end = blocks.first().map_or(eos as i64, |b| b.offset());
    let head_end = usize::try_from(head_end)
        .ok()
        .filter(|e| *e <= eos)
        .ok_or_else(|| changed("the first batch's offset is wrong: the footer was changed"))?;
    let mut spans = Vec::with_capacity(blocks.len());
    let mut at = head_end;
    for (i, b) in blocks.iter().enumerate() {
        let len = usize::try_from(b.metaDataLength())
            .unwrap_or(usize::MAX)
            .saturating_add(usize::try_from(b.bodyLength()).unwrap_or(usize::MAX));
        if usize::try_from(b.offset()).ok() != Some(at) || at.saturating_add(len) > eos {
            return Err(changed(format!(
                "batch {i} is not where the footer says: the file was changed"
            )));
        }
        spans.push((at as u64, len as u64));
        at += len;
    }
    same_schema_as_head(&bytes, head_end, &footer)?;
    let (head, links) = links(&mut io::Cursor::new(&bytes[..]), head_end as u64, &spans)
        .map_err(|e| changed(format!("the file cannot be hashed ({e}): it was cut")))?;
    if Some(head) != unhex(&rec.head) {
        return Err(changed(
            "the head of the file (magic, schema and head metadata: the command, the columns) \
             does not match its hash",
        ));
    }
    let mut rows = 0u64;
    for (i, (link, b)) in links.iter().zip(&blocks).enumerate() {
        let batch_rows = batch_row_count(&bytes, b.offset(), b.metaDataLength()).unwrap_or(0);
        if Some(*link) != unhex(&rec.batches[i]) {
            return Err(changed(format!(
                "batch {i} (rows {rows}–{}) does not match its hash: it was changed",
                rows + batch_rows.saturating_sub(1)
            )));
        }
        rows += batch_rows;
    }
    let last = links.last().copied().unwrap_or(head);
    if at != eos || bytes[eos..fstart] != [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0] {
        return Err(changed(
            "bytes between the last batch and the footer were changed",
        ));
    }
    let fin = final_hash(&last, &metadata);
    if Some(fin) != unhex(&rec.final_hash) {
        return Err(changed(
            "the footer's metadata (completeness, losses, end time, ...) does not match the chain: \
             it was changed",
        ));
    }
    Ok(Verified {
        batches: blocks.len(),
        rows,
        final_hash: fin,
    })
}

/// Readers decode the batches with the footer's schema, which the chain does not hash (its
/// metadata is only known at the end, and is covered by `final`). So the footer's schema must
/// say exactly what the hashed head's does, field by field (names, order, types, nullability,
/// field metadata), with the same endianness and no dictionary batches (the ledger has none):
/// otherwise two same-typed columns could swap names in the footer and a verified ledger would
/// decode to something else.
fn same_schema_as_head(
    bytes: &[u8],
    head_end: usize,
    footer: &arrow_ipc::Footer<'_>,
) -> Result<(), ChainError> {
    // The head: magic padded to 8, then the schema message (continuation marker and length,
    // or the pre-1.0 length alone), all of it inside the hashed head.
    let msg = bytes
        .get(8..head_end)
        .and_then(|h| {
            let (len_at, body_at): (usize, usize) = if h.get(..4)? == [0xff; 4] {
                (4, 8)
            } else {
                (0, 4)
            };
            let len = i32::from_le_bytes(h.get(len_at..len_at + 4)?.try_into().ok()?);
            h.get(body_at..body_at.checked_add(usize::try_from(len).ok()?)?)
        })
        .and_then(|m| arrow_ipc::root_as_message(m).ok())
        .and_then(|m| m.header_as_schema());
    let Some(head) = msg else {
        return Err(changed(
            "the head holds no schema message: the file was changed",
        ));
    };
    let Some(foot) = footer.schema() else {
        return Err(changed("the footer has no schema: it was changed"));
    };
    if footer.dictionaries().is_some_and(|d| !d.is_empty()) {
        return Err(changed(
            "the footer lists dictionary batches, which a ledger never has: it was changed",
        ));
    }
    if head.endianness() != foot.endianness() {
        return Err(changed(
            "the footer's schema declares another byte order than the head's: it was changed",
        ));
    }
    let (Some(h), Some(f)) = (
        crate::decode::fb_schema(head),
        crate::decode::fb_schema(foot),
    ) else {
        return Err(changed(
            "a schema of the file names a type Arrow does not know: the file was changed",
        ));
    };
    if let Some(differ) = crate::decode::schema_difference(&h, &f) {
        return Err(changed(format!(
            "the footer's schema, which readers decode the batches with, is not the hashed \
             head's ({differ}): the footer was changed"
        )));
    }
    Ok(())
}

/// Where the footer starts, and the footer, of a finished Arrow file's bytes.
fn footer(bytes: &[u8]) -> Result<(usize, arrow_ipc::Footer<'_>), ChainError> {
    let n = bytes.len();
    let magic = super::ipc::MAGIC;
    if n < 18 || &bytes[..6] != magic || &bytes[n - 6..] != magic {
        return Err(changed(
            "the file is not a finished Arrow file (its magic is missing at the start or the end): \
             it was cut or changed",
        ));
    }
    let flen = i32::from_le_bytes(bytes[n - 10..n - 6].try_into().expect("4 bytes"));
    let fstart = usize::try_from(flen)
        .ok()
        .and_then(|l| (n - 10).checked_sub(l))
        .filter(|s| *s >= 16)
        .ok_or_else(|| changed("the footer's length is wrong: the file was cut or changed"))?;
    let footer = arrow_ipc::root_as_footer(&bytes[fstart..n - 10])
        .map_err(|e| changed(format!("the footer does not decode ({e}): it was changed")))?;
    Ok((fstart, footer))
}

/// The byte ranges of a finished ledger's record batches, as its footer lists them.
pub fn batch_spans(bytes: &[u8]) -> Option<Vec<std::ops::Range<usize>>> {
    let (_, f) = footer(bytes).ok()?;
    f.recordBatches()?
        .iter()
        .map(|b| {
            let start = usize::try_from(b.offset()).ok()?;
            let len =
                usize::try_from(b.metaDataLength()).ok()? + usize::try_from(b.bodyLength()).ok()?;
            Some(start..start + len)
        })
        .collect()
}

/// The rows of a finished ledger's bytes, from the messages its footer lists (no batch is
/// decoded); `None` when the footer or a message does not decode.
pub fn row_count(bytes: &[u8]) -> Option<u64> {
    let (_, f) = footer(bytes).ok()?;
    f.recordBatches()?
        .iter()
        .map(|b| batch_row_count(bytes, b.offset(), b.metaDataLength()))
        .sum()
}

/// The row count a batch's message declares (for messages; `None` when it does not decode).
fn batch_row_count(bytes: &[u8], offset: i64, meta_len: i32) -> Option<u64> {
    let start = usize::try_from(offset).ok()?;
    let len = usize::try_from(meta_len).ok()?;
    let m = bytes.get(start..start.checked_add(len)?)?;
    // Continuation marker and length, then the flatbuffer message.
    let body = if m.len() >= 8 && m[..4] == [0xff; 4] {
        &m[8..]
    } else {
        m.get(4..)?
    };
    let msg = arrow_ipc::root_as_message(body).ok()?;
    msg.header_as_record_batch()
        .and_then(|b| u64::try_from(b.length()).ok())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::writer::sample_ledger;

    /// A finished ledger of `rows` sample rows (two batches when more than one batch's worth).
    fn ledger(dir: &Path, rows: u64) -> std::path::PathBuf {
        let end = HashMap::from([(meta::COMPLETE.to_owned(), "false".to_owned())]);
        sample_ledger(&dir.join(format!("l{rows}.arrow")), rows, end)
    }

    #[test]
    fn a_written_ledger_verifies_and_any_changed_byte_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let rows = crate::writer::BATCH_ROWS as u64 + 10;
        let path = ledger(dir.path(), rows);
        let v = verify(&path).unwrap();
        assert_eq!((v.batches, v.rows), (2, rows));
        let empty = ledger(dir.path(), 0);
        assert_eq!(verify(&empty).unwrap().batches, 0);
        let bytes = std::fs::read(&path).unwrap();
        let spans = batch_spans(&bytes).unwrap();
        // A byte of the head, of each batch, of the footer's metadata, and a cut file.
        let at_complete = bytes
            .windows(b"aet.complete".len())
            .rposition(|w| w == b"aet.complete")
            .unwrap();
        for (at, what) in [
            (100, "head"),
            (spans[0].start + 500, "batch 0 (rows 0–16383)"),
            (spans[1].start + 200, "batch 1 (rows 16384–"),
            (at_complete + 20, ""),
        ] {
            let mut b = bytes.clone();
            b[at] ^= 0x01;
            let p = dir.path().join("changed.arrow");
            std::fs::write(&p, &b).unwrap();
            let e = verify(&p).unwrap_err().to_string();
            assert!(e.contains(what), "{at}: {e}");
        }
        let p = dir.path().join("cut.arrow");
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        assert!(verify(&p).unwrap_err().to_string().contains("cut"));
    }

    /// The footer's copies of two column names (flatbuffer strings: length, bytes, NUL; the
    /// footer is the last copy in the file) swapped: what a reader decodes changes.
    fn swap_in_footer(bytes: &[u8], a: &str, b: &str) -> Vec<u8> {
        assert_eq!(a.len(), b.len());
        let find = |n: &str| {
            let mut pat = (n.len() as u32).to_le_bytes().to_vec();
            pat.extend_from_slice(n.as_bytes());
            pat.push(0);
            4 + bytes.windows(pat.len()).rposition(|w| w == pat).unwrap()
        };
        let (ia, ib) = (find(a), find(b));
        let mut out = bytes.to_vec();
        out[ia..ia + a.len()].copy_from_slice(b.as_bytes());
        out[ib..ib + b.len()].copy_from_slice(a.as_bytes());
        out
    }

    #[test]
    fn a_footer_schema_that_is_not_the_head_schema_is_found() {
        use crate::schema::col;
        let dir = tempfile::tempdir().unwrap();
        let path = ledger(dir.path(), 100);
        let bytes = std::fs::read(&path).unwrap();
        // Every pair of same-length, same-typed columns, their names swapped in the footer.
        let schema = crate::schema::schema(Default::default());
        let fields = schema.fields();
        let mut pairs = Vec::new();
        for (i, a) in fields.iter().enumerate() {
            for b in &fields[i + 1..] {
                if a.name().len() == b.name().len() && a.data_type() == b.data_type() {
                    pairs.push((a.name().as_str(), b.name().as_str()));
                }
            }
        }
        assert!(pairs.contains(&(col::COMM, col::PATH)), "{pairs:?}");
        for (a, b) in pairs {
            let p = dir.path().join("swapped.arrow");
            std::fs::write(&p, swap_in_footer(&bytes, a, b)).unwrap();
            let e = verify(&p).unwrap_err().to_string();
            assert!(e.contains("footer's schema"), "{a} <-> {b}: {e}");
        }
        assert!(verify(&path).is_ok());
    }
}
