//! Reads ledgers, finished or not.
//!
//! A finished ledger is an Arrow IPC file. An unfinished one (its monitor was killed before it
//! wrote the footer) is read from its stream form, up to its last complete batch, and is reported
//! as unfinished: whoever reads it must treat the record as incomplete. Anything else (not Arrow,
//! not a ledger, a schema version this build does not know) is an error naming the file.

use std::{
    collections::HashMap,
    fs::File,
    io::{self, BufReader, Read, Seek, SeekFrom},
    path::{Path, PathBuf},
    sync::Arc,
};

use arrow_array::{RecordBatch, make_array};
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

use super::{
    ipc::MAGIC,
    schema::{self, SCHEMA_VERSION, meta},
};

/// Errors reading a ledger.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file is not an Arrow IPC file.
    #[error("{path}: not an aet ledger (no Arrow IPC magic at its start)")]
    NotArrow { path: PathBuf },
    /// The file is Arrow but cannot be decoded.
    #[error("{path}: corrupt Arrow data: {source}")]
    Corrupt {
        path: PathBuf,
        #[source]
        source: ArrowError,
    },
    /// The file is Arrow but not a ledger this build can read.
    #[error("{path}: not an aet ledger this version can read: {reason}")]
    Schema { path: PathBuf, reason: String },
    /// A metadata value is not what its key says.
    #[error("{path}: {source}")]
    Metadata {
        path: PathBuf,
        #[source]
        source: crate::metadata::MetaError,
    },
}

/// How the ledger was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// A finished Arrow IPC file (footer present).
    Finished,
    /// An unfinished file read from its stream form: the monitor did not finish it.
    Unfinished,
}

/// An open ledger.
pub struct Ledger {
    path: PathBuf,
    form: Form,
    schema: SchemaRef,
    batches: Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>>>,
    /// Set when reading an unfinished ledger stopped at a damaged (partly written) batch.
    pub damaged_tail: Option<String>,
    /// Bytes at the end of an unfinished file that make no whole message, found at open: the
    /// damaged tail once the batches before them are read.
    cut_tail: Option<String>,
    /// Set when a finished file's footer does not describe its stream (the schema readers decode
    /// the batches with is not the one at the head of the file, which the chain hashes): the
    /// file was changed. Its rows are then read from the stream, with the head's schema.
    pub doctored: Option<String>,
}

impl Ledger {
    /// Opens a ledger and checks its schema.
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        Self::open_inner(path, None)
    }

    /// Opens a ledger whose batches hold only `columns` (in that order), with every text column
    /// (`Utf8`, and `List<Utf8>`) delivered as `Binary`: the exact bytes, whose offsets are
    /// checked but whose UTF-8 is not (checking it is most of the cost of decoding a ledger).
    /// The schema and metadata are still the whole ledger's. For bulk analysis of a few columns.
    pub fn open_columns(path: &Path, columns: &[&str]) -> Result<Self, ReadError> {
        Self::open_inner(path, Some(columns))
    }

    fn open_inner(path: &Path, columns: Option<&[&str]>) -> Result<Self, ReadError> {
        let io_err = |source| ReadError::Io {
            path: path.to_owned(),
            source,
        };
        let mut file = File::open(path).map_err(io_err)?;
        let mut head = [0u8; 8];
        let n = read_up_to(&mut file, &mut head).map_err(io_err)?;
        if n < 6 || &head[..6] != MAGIC {
            return Err(ReadError::NotArrow {
                path: path.to_owned(),
            });
        }
        file.seek(SeekFrom::Start(0)).map_err(io_err)?;
        let corrupt = |source| ReadError::Corrupt {
            path: path.to_owned(),
            source,
        };
        // Every length the file declares is checked against the file before a reader
        // allocates by it (Arrow's readers allocate what a block or a message says, and an
        // allocation of 2^50 bytes aborts the process).
        let len = file.metadata().map_err(io_err)?.len();
        let bytes = |e: String| ReadError::Corrupt {
            path: path.to_owned(),
            source: ArrowError::ParseError(e),
        };
        let finished = footer_blocks_fit(&mut file, len).map_err(bytes)?;
        file.seek(SeekFrom::Start(0)).map_err(io_err)?;
        let mut cut_tail = None;
        let footer_reader = finished
            .then(|| crate::decode::guarded(|| FileReader::try_new(BufReader::new(file), None)))
            .and_then(Result::ok);
        // A footer whose schema is not the stream's would decode the batches as something aet
        // never wrote (two same-typed columns renamed into each other's places): the stream is
        // read instead, and the ledger is doctored.
        let doctored = match &footer_reader {
            Some(r) => head_schema(path, len)?
                .and_then(|head| crate::decode::schema_difference(&head, r.schema().as_ref()))
                .map(|d| format!("its footer's schema is not the one at its head: {d}")),
            None => None,
        };
        let footer_reader = footer_reader.filter(|_| doctored.is_none());
        let (form, schema, batches): (Form, SchemaRef, Box<dyn Iterator<Item = _>>) =
            match footer_reader {
                Some(r) => (Form::Finished, r.schema(), Box::new(r)),
                None => {
                    // No footer: read the stream that follows the 8-byte head, up to the first
                    // message whose declared lengths pass the file's end (a damaged tail).
                    let mut file = File::open(path).map_err(io_err)?;
                    let end = stream_extent(&mut file, len).map_err(io_err)?;
                    // A doctored file's footer follows its stream: no damage of its own.
                    if end < len && doctored.is_none() {
                        cut_tail = Some(format!(
                            "the last {} bytes (from offset {end}) are not a whole message: \
                             the file was cut or its lengths are damaged",
                            len - end
                        ));
                    }
                    file.seek(SeekFrom::Start(8)).map_err(io_err)?;
                    let r = crate::decode::guarded(|| {
                        StreamReader::try_new(BufReader::new(file.take(end - 8)), None)
                    })
                    .map_err(corrupt)?;
                    (Form::Unfinished, r.schema(), Box::new(r))
                }
            };
        let missing = check_schema(path, &schema)?;
        let batches = match columns {
            None => batches,
            Some(cols) => {
                let projection = cols
                    .iter()
                    .filter(|c| !missing.contains(c))
                    .map(|c| {
                        schema.index_of(c).map_err(|_| ReadError::Schema {
                            path: path.to_owned(),
                            reason: format!("column {c} is missing"),
                        })
                    })
                    .collect::<Result<Vec<usize>, _>>()?;
                drop(batches);
                let file = File::open(path).map_err(io_err)?;
                match form {
                    // A finished file is mapped: only the projected columns' pages are read,
                    // without copies.
                    Form::Finished => Box::new(
                        MappedBatches::open(&file, Arc::new(bytes_schema(&schema)), projection)
                            .map_err(corrupt)?,
                    ) as Box<dyn Iterator<Item = _>>,
                    Form::Unfinished => {
                        // Only as far as the messages whose declared lengths fit the file, as
                        // when read whole (found by the ledger fuzz target: a body length of
                        // 2^56 made Arrow's reader abort the process on its allocation).
                        let mut file = file;
                        let end = stream_extent(&mut file, len).map_err(io_err)?;
                        file.seek(SeekFrom::Start(8)).map_err(io_err)?;
                        let file = file.take(end.saturating_sub(8));
                        Box::new(
                            crate::decode::guarded(|| {
                                StreamReader::try_new(BufReader::new(file), Some(projection))
                            })
                            .map_err(corrupt)?
                            .map(|b| b.and_then(|b| text_as_bytes(&b))),
                        )
                    }
                }
            }
        };
        // An older ledger: the columns added since are null in every row, in their places.
        let batches = if missing.is_empty() {
            batches
        } else {
            let full = schema::schema(HashMap::new());
            let want: Vec<Field> = match columns {
                None => full.fields().iter().map(|f| f.as_ref().clone()).collect(),
                Some(cols) => cols
                    .iter()
                    .filter_map(|c| full.field_with_name(c).ok())
                    .map(|f| f.clone().with_data_type(bytes_type(f.data_type())))
                    .collect(),
            };
            Box::new(batches.map(move |b| b.and_then(|b| fill_missing(&b, &want))))
                as Box<dyn Iterator<Item = _>>
        };
        Ok(Self {
            path: path.to_owned(),
            form,
            schema,
            batches,
            damaged_tail: None,
            cut_tail,
            doctored,
        })
    }

    /// The ledger's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How it was read.
    pub fn form(&self) -> Form {
        self.form
    }

    /// The schema (with the file's metadata: final for a finished ledger, the head's otherwise).
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The file-level metadata, typed.
    pub fn meta(&self) -> Result<crate::metadata::LedgerMeta, ReadError> {
        crate::metadata::LedgerMeta::parse(&self.metadata()).map_err(|source| ReadError::Metadata {
            path: self.path.clone(),
            source,
        })
    }

    /// The file-level metadata.
    pub fn metadata(&self) -> HashMap<String, String> {
        self.schema
            .metadata()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The next batch. For an unfinished ledger, a damaged batch ends the reading (and is noted
    /// in `damaged_tail`); for a finished one it is an error.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        // Arrow's decoders check a batch's metadata against its buffers by slicing them, which
        // panics on a damaged file instead of failing: that is a corrupt file too.
        let next = crate::decode::catching(|| self.batches.next());
        let next = next.unwrap_or_else(|panic| {
            let why = crate::decode::panic_text(&*panic);
            Some(Err(ArrowError::InvalidArgumentError(format!(
                "a batch does not match its metadata ({why})"
            ))))
        });
        match next {
            None => {
                if self.damaged_tail.is_none() {
                    self.damaged_tail = self.cut_tail.take();
                }
                Ok(None)
            }
            Some(Ok(b)) => Ok(Some(b)),
            Some(Err(e)) if self.form == Form::Unfinished => {
                self.damaged_tail = Some(e.to_string());
                self.batches = Box::new(std::iter::empty());
                Ok(None)
            }
            Some(Err(source)) => Err(ReadError::Corrupt {
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// Reads every remaining batch.
    pub fn read_all(&mut self) -> Result<Vec<RecordBatch>, ReadError> {
        let mut out = Vec::new();
        while let Some(b) = self.next_batch()? {
            out.push(b);
        }
        Ok(out)
    }
}

/// The schema at the head of the file (the stream's first message, its declared length checked
/// against the file's before it is read); `None` when the head holds no schema message.
fn head_schema(path: &Path, len: u64) -> Result<Option<Schema>, ReadError> {
    let io_err = |source| ReadError::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = File::open(path).map_err(io_err)?;
    file.seek(SeekFrom::Start(8)).map_err(io_err)?;
    let mut word = [0u8; 4];
    if read_up_to(&mut file, &mut word).map_err(io_err)? < 4 {
        return Ok(None);
    }
    let (mut head, mut meta_len) = (12u64, i32::from_le_bytes(word));
    if meta_len == -1 {
        if read_up_to(&mut file, &mut word).map_err(io_err)? < 4 {
            return Ok(None);
        }
        (head, meta_len) = (16, i32::from_le_bytes(word));
    }
    let Some(n) = u64::try_from(meta_len)
        .ok()
        .filter(|n| *n > 0 && head + n <= len)
    else {
        return Ok(None);
    };
    let mut meta = vec![0u8; n as usize];
    file.read_exact(&mut meta).map_err(io_err)?;
    let Some(fb) = arrow_ipc::root_as_message(&meta)
        .ok()
        .and_then(|m| m.header_as_schema())
    else {
        return Ok(None);
    };
    crate::decode::fb_schema(fb)
        .map(Some)
        .ok_or_else(|| ReadError::Corrupt {
            path: path.to_owned(),
            source: ArrowError::ParseError(
                "the schema at the head of the file names a type Arrow does not know".into(),
            ),
        })
}

/// The rows of a finished ledger, counted from the batches' headers (their data is not read).
pub fn count_rows(path: &Path) -> Result<u64, ReadError> {
    let file = File::open(path).map_err(|source| ReadError::Io {
        path: path.to_owned(),
        source,
    })?;
    // SAFETY: a finished ledger is never changed again; only its footer and batch headers are
    // read.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| ReadError::Io {
        path: path.to_owned(),
        source,
    })?;
    super::chain::row_count(&map).ok_or_else(|| ReadError::Corrupt {
        path: path.to_owned(),
        source: ArrowError::ParseError("its footer or a batch header does not decode".into()),
    })
}

/// The record batches of a finished IPC file, decoded in place from a read-only mapping.
struct MappedBatches {
    decoder: arrow_ipc::reader::FileDecoder,
    buffer: arrow_buffer::Buffer,
    blocks: Vec<arrow_ipc::Block>,
    next: usize,
}

impl MappedBatches {
    fn open(file: &File, schema: SchemaRef, projection: Vec<usize>) -> Result<Self, ArrowError> {
        // SAFETY: the ledger is finished (it has its footer): aet never changes it again. A
        // file truncated under the mapping by someone else would fault the reader.
        let map = unsafe { memmap2::Mmap::map(file) }
            .map_err(|e| ArrowError::IoError(e.to_string(), e))?;
        let len = map.len();
        if len < 10 {
            return Err(ArrowError::ParseError("file too short".into()));
        }
        let ptr = std::ptr::NonNull::new(map.as_ptr() as *mut u8)
            .ok_or_else(|| ArrowError::ParseError("empty mapping".into()))?;
        // SAFETY: the pointer and length describe the mapping, which the Arc keeps alive as
        // long as the buffer.
        let buffer = unsafe {
            arrow_buffer::Buffer::from_custom_allocation(ptr, len, std::sync::Arc::new(map))
        };
        let trailer: [u8; 10] = buffer[len - 10..].try_into().expect("10 bytes");
        let footer_len = arrow_ipc::reader::read_footer_length(trailer)?;
        let start = (len - 10)
            .checked_sub(footer_len)
            .ok_or_else(|| ArrowError::ParseError("footer longer than the file".into()))?;
        let footer = arrow_ipc::root_as_footer(&buffer[start..len - 10])
            .map_err(|e| ArrowError::ParseError(format!("bad footer: {e}")))?;
        // Arrow's own per-value validation checks offsets through a chain of closures, which
        // costs more than the rest of an audit. Decoding skips it and `check_array` then checks
        // the same invariants (these columns are all fixed-width, binary or lists of binary: no
        // UTF-8 to check) before any value is read.
        // SAFETY: every batch is checked by `check_batch` in `next` before it is returned.
        let mut decoder = unsafe {
            arrow_ipc::reader::FileDecoder::new(schema, footer.version())
                .with_projection(projection)
                .with_skip_validation(true)
        };
        let slice = |b: &arrow_ipc::Block| -> Result<arrow_buffer::Buffer, ArrowError> {
            let off = usize::try_from(b.offset())
                .map_err(|_| ArrowError::ParseError("bad block".into()))?;
            let n = b.bodyLength() as usize + b.metaDataLength() as usize;
            if off.checked_add(n).is_none_or(|end| end > len) {
                return Err(ArrowError::ParseError(
                    "a block lies outside the file".into(),
                ));
            }
            Ok(buffer.slice_with_length(off, n))
        };
        for b in footer.dictionaries().iter().flatten() {
            decoder.read_dictionary(b, &slice(b)?)?;
        }
        let blocks: Vec<arrow_ipc::Block> = footer
            .recordBatches()
            .map(|v| v.iter().copied().collect())
            .unwrap_or_default();
        for b in &blocks {
            slice(b)?;
        }
        Ok(Self {
            decoder,
            buffer,
            blocks,
            next: 0,
        })
    }
}

impl Iterator for MappedBatches {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let b = *self.blocks.get(self.next)?;
        self.next += 1;
        let n = b.bodyLength() as usize + b.metaDataLength() as usize;
        let data = self.buffer.slice_with_length(b.offset() as usize, n);
        if let Err(e) = check_message(&b, &data) {
            return Some(Err(e));
        }
        let decoded = self.decoder.read_record_batch(&b, &data).transpose()?;
        Some(decoded.and_then(|batch| {
            check_batch(&batch)?;
            Ok(batch)
        }))
    }
}

/// Checks that every buffer a batch's metadata lists lies inside its body (Arrow's decoder
/// panics on one that does not).
fn check_message(b: &arrow_ipc::Block, data: &arrow_buffer::Buffer) -> Result<(), ArrowError> {
    let bad = |what: &str| ArrowError::ParseError(format!("a batch's metadata is damaged: {what}"));
    let meta = data
        .get(..b.metaDataLength() as usize)
        .ok_or_else(|| bad("longer than its block"))?;
    // The encapsulated message: [0xffffffff] length flatbuffer (the marker is absent in files
    // written before Arrow 0.15).
    let fb = match meta {
        [0xff, 0xff, 0xff, 0xff, _, _, _, _, rest @ ..] => rest,
        [_, _, _, _, rest @ ..] => rest,
        _ => return Err(bad("too short")),
    };
    let msg = arrow_ipc::root_as_message(fb).map_err(|e| bad(&e.to_string()))?;
    let rb = msg
        .header_as_record_batch()
        .ok_or_else(|| bad("not a record batch"))?;
    // Every column's node, read or not: a damaged one is a damaged batch, whatever the query.
    let rows = rb.length();
    for node in rb.nodes().iter().flatten() {
        if rows < 0
            || node.length() < 0
            || node.null_count() < 0
            || node.null_count() > node.length()
        {
            return Err(bad("a column's length or null count is impossible"));
        }
    }
    let body = b.bodyLength();
    for buf in rb.buffers().iter().flatten() {
        let end = buf.offset().checked_add(buf.length());
        if buf.offset() < 0 || buf.length() < 0 || end.is_none_or(|e| e > body) {
            return Err(bad("a buffer lies outside the batch's body"));
        }
    }
    Ok(())
}

/// What Arrow's validation would have checked of a batch decoded without it.
fn check_batch(batch: &RecordBatch) -> Result<(), ArrowError> {
    for (c, f) in batch.columns().iter().zip(batch.schema_ref().fields()) {
        if c.len() != batch.num_rows() || c.data_type() != f.data_type() {
            return Err(ArrowError::InvalidArgumentError(format!(
                "column {} does not match its batch",
                f.name()
            )));
        }
        check_array(&c.to_data())?;
    }
    Ok(())
}

/// Checks everything Arrow's full validation checks for the types a projected ledger holds:
/// buffer sizes and null counts (Arrow's O(1) checks), and every offset of a binary or list
/// array (in bounds and non-decreasing), in one pass the compiler can vectorise.
fn check_array(data: &arrow_data::ArrayData) -> Result<(), ArrowError> {
    data.validate()?;
    data.validate_nulls()?;
    let limit = match data.data_type() {
        DataType::Binary => data.buffers()[1].len(),
        DataType::List(_) => {
            let child = &data.child_data()[0];
            check_array(child)?;
            child.len()
        }
        t if t.is_primitive() || t == &DataType::Boolean || t == &DataType::Null => return Ok(()),
        t => {
            return Err(ArrowError::InvalidArgumentError(format!(
                "unexpected column type {t} in a projected ledger"
            )));
        }
    };
    // `validate` checked the buffer holds `len + 1` offsets after `offset`.
    let offsets: &[i32] = &data.buffer::<i32>(0)[..=data.len()];
    let first_ok = offsets[0] >= 0;
    // Without early exit, so that it vectorises.
    let decreasing = offsets[1..]
        .iter()
        .zip(offsets)
        .fold(0u32, |any, (next, prev)| any | u32::from(next < prev));
    let ordered = decreasing == 0;
    let last_ok = offsets[offsets.len() - 1] as usize <= limit;
    if first_ok && ordered && last_ok {
        Ok(())
    } else {
        Err(ArrowError::InvalidArgumentError(format!(
            "{} column with offsets out of order or out of bounds",
            data.data_type()
        )))
    }
}

/// The type a text column is decoded as by [`Ledger::open_columns`].
fn bytes_type(t: &DataType) -> DataType {
    match t {
        DataType::Utf8 => DataType::Binary,
        DataType::List(f) if f.data_type() == &DataType::Utf8 => DataType::List(Arc::new(
            Field::new(f.name(), DataType::Binary, f.is_nullable()),
        )),
        t => t.clone(),
    }
}

fn bytes_schema(schema: &Schema) -> Schema {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_data_type(bytes_type(f.data_type())))
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// A batch whose text columns are re-typed as binary (same buffers, no copy).
fn text_as_bytes(b: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    let schema = Arc::new(bytes_schema(&b.schema()));
    let columns = b
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                return Ok(c.clone());
            }
            let retyped = match (c.data_type(), f.data_type()) {
                (DataType::List(_), DataType::List(inner)) => {
                    let child = c.to_data().child_data()[0]
                        .clone()
                        .into_builder()
                        .data_type(inner.data_type().clone())
                        .build()?;
                    c.to_data()
                        .into_builder()
                        .data_type(f.data_type().clone())
                        .child_data(vec![child])
                        .build()?
                }
                _ => c
                    .to_data()
                    .into_builder()
                    .data_type(f.data_type().clone())
                    .build()?,
            };
            Ok(make_array(retyped))
        })
        .collect::<Result<Vec<_>, ArrowError>>()?;
    RecordBatch::try_new(schema, columns)
}

/// Whether the file ends with a footer, having checked that every block the footer lists lies
/// inside the file (an error naming the first that does not). `Ok(false)`: no footer.
fn footer_blocks_fit(file: &mut File, len: u64) -> Result<bool, String> {
    if len < 18 {
        return Ok(false);
    }
    let mut trailer = [0u8; 10];
    file.seek(SeekFrom::Start(len - 10))
        .and_then(|_| file.read_exact(&mut trailer))
        .map_err(|e| e.to_string())?;
    if &trailer[4..] != MAGIC {
        return Ok(false);
    }
    let flen = i32::from_le_bytes(trailer[..4].try_into().expect("4 bytes"));
    let Some(start) = u64::try_from(flen)
        .ok()
        .and_then(|f| (len - 10).checked_sub(f))
        .filter(|s| *s >= 8)
    else {
        return Err(format!(
            "the footer's length ({flen}) does not fit in the file ({len} bytes)"
        ));
    };
    let mut footer = vec![0u8; (len - 10 - start) as usize];
    file.seek(SeekFrom::Start(start))
        .and_then(|_| file.read_exact(&mut footer))
        .map_err(|e| e.to_string())?;
    let Ok(f) = arrow_ipc::root_as_footer(&footer) else {
        // Not a footer after all: read as a stream.
        return Ok(false);
    };
    let blocks = f
        .recordBatches()
        .into_iter()
        .flatten()
        .map(|b| ("batch", b))
        .chain(
            f.dictionaries()
                .into_iter()
                .flatten()
                .map(|b| ("dictionary", b)),
        );
    for (i, (what, b)) in blocks.enumerate() {
        let end = u64::try_from(b.offset()).ok().and_then(|o| {
            o.checked_add(u64::try_from(b.metaDataLength()).ok()?)?
                .checked_add(u64::try_from(b.bodyLength()).ok()?)
        });
        if b.offset() < 8 || end.is_none_or(|e| e > start) {
            return Err(format!(
                "the footer's {what} block {i} (offset {}, {} + {} bytes) lies outside the \
                 file ({len} bytes)",
                b.offset(),
                b.metaDataLength(),
                b.bodyLength()
            ));
        }
        // Each batch's columns and buffers as its metadata declares them, as the reader by
        // column checks them (found by the ledger_diff fuzz target: a null count past a
        // column's length was read whole, and refused by column).
        if what == "batch" {
            let mut meta = vec![0u8; b.metaDataLength() as usize];
            file.seek(SeekFrom::Start(b.offset() as u64))
                .and_then(|_| file.read_exact(&mut meta))
                .map_err(|e| e.to_string())?;
            check_message(b, &arrow_buffer::Buffer::from_vec(meta))
                .map_err(|e| format!("the footer's batch block {i}: {e}"))?;
        }
    }
    Ok(true)
}

/// Where the stream of the unfinished ledger at `path` stops making sense (see
/// [`stream_extent`]): what its reader reads, for a second reader to read the same.
pub fn stream_end(path: &Path) -> io::Result<u64> {
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    stream_extent(&mut f, len)
}

/// Where the stream of an unfinished file stops making sense: the offset of its first message
/// whose declared lengths pass the file's end (or the end of the file).
fn stream_extent(file: &mut File, len: u64) -> io::Result<u64> {
    let mut at = 8u64;
    file.seek(SeekFrom::Start(at))?;
    let mut r = BufReader::new(file);
    loop {
        let mut word = [0u8; 4];
        if at + 4 > len || r.read_exact(&mut word).is_err() {
            return Ok(at.min(len).max(8));
        }
        let mut head = 4u64;
        let mut meta_len = i32::from_le_bytes(word);
        if meta_len == -1 {
            if at + 8 > len || r.read_exact(&mut word).is_err() {
                return Ok(at);
            }
            head = 8;
            meta_len = i32::from_le_bytes(word);
        }
        if meta_len == 0 {
            return Ok(len);
        }
        let Some(meta_end) = u64::try_from(meta_len)
            .ok()
            .map(|m| at + head + m)
            .filter(|e| *e <= len)
        else {
            return Ok(at);
        };
        let mut meta = vec![0u8; (meta_end - at - head) as usize];
        if r.read_exact(&mut meta).is_err() {
            return Ok(at);
        }
        let Some(body) = arrow_ipc::root_as_message(&meta)
            .ok()
            .and_then(|m| u64::try_from(m.bodyLength()).ok())
        else {
            return Ok(at);
        };
        let Some(end) = meta_end.checked_add(body).filter(|e| *e <= len) else {
            return Ok(at);
        };
        r.seek_relative(body as i64)?;
        at = end;
    }
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

mod versions;
use versions::{check_schema, fill_missing};

#[cfg(test)]
mod tests;
