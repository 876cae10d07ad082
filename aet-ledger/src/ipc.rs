//! An Arrow IPC *file* writer whose footer carries a schema with different (final) metadata
//! from the one at the head of the file.
//!
//! Why not `arrow_ipc::writer::FileWriter`: the ledger streams batches to disk as a run goes (so a
//! monitor killed with SIGKILL leaves everything up to its last batch), but the facts readers
//! need most (`aet.events_lost`, `aet.ended_ns`, completeness) are only known at the end.
//! `FileWriter` writes the footer with the schema it was created with. This writer writes the
//! same bytes (magic, schema message, record batch messages, end-of-stream marker, footer, footer
//! length, magic) using arrow-ipc's public encoders, and lets `finish` pass the final schema.
//! File readers (pyarrow, polars, duckdb, arrow-rs) take the schema from the footer; a stream
//! reader pointed at byte 8 of an unfinished file sees the head schema and every complete batch.
//!
//! Dictionary-encoded columns are not supported (the ledger has none); a batch with one is
//! refused rather than written wrongly.

use std::io::{self, Write};

use arrow_array::RecordBatch;
use arrow_ipc::{
    Block, FooterBuilder, MetadataVersion,
    convert::{IpcSchemaEncoder, metadata_to_fb},
    writer::{
        DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions, write_message,
    },
};
use arrow_schema::{ArrowError, DataType, Schema};
use flatbuffers::FlatBufferBuilder;

/// The 6-byte magic that opens and closes an Arrow IPC file, padded to 8 at the head.
pub const MAGIC: &[u8; 6] = b"ARROW1";

/// Streams record batches into an Arrow IPC file.
pub struct IpcFileWriter<W: Write> {
    w: W,
    options: IpcWriteOptions,
    generator: IpcDataGenerator,
    tracker: DictionaryTracker,
    context: IpcWriteContext,
    blocks: Vec<Block>,
    offset: usize,
}

impl<W: Write> IpcFileWriter<W> {
    /// Writes the file head: magic and `head_schema`.
    pub fn try_new(mut w: W, head_schema: &Schema) -> Result<Self, ArrowError> {
        if head_schema
            .fields()
            .iter()
            .any(|f| matches!(f.data_type(), DataType::Dictionary(..)))
        {
            return Err(ArrowError::InvalidArgumentError(
                "dictionary columns are not supported by the ledger writer".into(),
            ));
        }
        let options = IpcWriteOptions::default();
        w.write_all(MAGIC)?;
        w.write_all(&[0, 0])?;
        let generator = IpcDataGenerator::default();
        let mut tracker = DictionaryTracker::new(true);
        let encoded =
            generator.schema_to_bytes_with_dictionary_tracker(head_schema, &mut tracker, &options);
        let (meta, body) = write_message(&mut w, encoded, &options)?;
        // The head reaches the file at once: a run killed before its first batch still leaves
        // a ledger that reads (with no rows).
        w.flush()?;
        Ok(Self {
            w,
            options,
            generator,
            tracker,
            context: IpcWriteContext::default(),
            blocks: Vec::new(),
            offset: 8 + meta + body,
        })
    }

    /// Appends a batch and flushes it to the underlying writer.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), ArrowError> {
        let (dicts, encoded) =
            self.generator
                .encode(batch, &mut self.tracker, &self.options, &mut self.context)?;
        if !dicts.is_empty() {
            return Err(ArrowError::InvalidArgumentError(
                "dictionary batches are not supported by the ledger writer".into(),
            ));
        }
        let (meta, body) = write_message(&mut self.w, encoded, &self.options)?;
        self.blocks
            .push(Block::new(self.offset as i64, meta as i32, body as i64));
        self.offset += meta + body;
        self.w.flush()?;
        Ok(())
    }

    /// Where the file's head ends and each batch lies, as (offset, length): what the ledger's
    /// hash chain covers (see [`super::chain`]).
    pub fn spans(&self) -> (u64, Vec<(u64, u64)>) {
        let spans: Vec<(u64, u64)> = self
            .blocks
            .iter()
            .map(|b| {
                (
                    b.offset() as u64,
                    b.metaDataLength() as u64 + b.bodyLength() as u64,
                )
            })
            .collect();
        let head_end = spans.first().map_or(self.offset as u64, |s| s.0);
        (head_end, spans)
    }

    /// Number of batches written.
    pub fn batches(&self) -> usize {
        self.blocks.len()
    }

    /// Writes the end-of-stream marker and the footer, whose schema is `final_schema` (same
    /// fields as the head schema, final metadata). Returns the underlying writer.
    pub fn finish(mut self, final_schema: &Schema) -> Result<W, ArrowError> {
        // End of stream: continuation marker, zero length.
        self.w.write_all(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0])?;
        let mut fbb = FlatBufferBuilder::new();
        let dictionaries = fbb.create_vector::<Block>(&[]);
        let record_batches = fbb.create_vector(&self.blocks);
        let schema = IpcSchemaEncoder::new().schema_to_fb_offset(&mut fbb, final_schema);
        let custom = (!final_schema.metadata().is_empty())
            .then(|| metadata_to_fb(&mut fbb, final_schema.metadata()));
        let root = {
            let mut footer = FooterBuilder::new(&mut fbb);
            footer.add_version(MetadataVersion::V5);
            footer.add_schema(schema);
            footer.add_dictionaries(dictionaries);
            footer.add_recordBatches(record_batches);
            if let Some(custom) = custom {
                footer.add_custom_metadata(custom);
            }
            footer.finish()
        };
        fbb.finish(root, None);
        let data = fbb.finished_data();
        self.w.write_all(data)?;
        self.w.write_all(&(data.len() as i32).to_le_bytes())?;
        self.w.write_all(MAGIC)?;
        self.w.flush()?;
        Ok(self.w)
    }

    /// Access to the underlying writer.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.w
    }
}

/// Maps an `io::Error` from a finished writer.
pub fn io_error(e: ArrowError) -> io::Error {
    match e {
        ArrowError::IoError(_, e) => e,
        other => io::Error::other(other),
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::HashMap, io::Cursor, sync::Arc};

    use arrow_array::{Int32Array, StringArray};
    use arrow_ipc::reader::{FileReader, StreamReader};
    use arrow_schema::Field;

    use super::*;

    fn schema(meta: &[(&str, &str)]) -> Schema {
        Schema::new(vec![
            Field::new("a", DataType::Int32, false),
            Field::new("s", DataType::Utf8, true),
        ])
        .with_metadata(
            meta.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>(),
        )
    }

    fn batch(s: &Schema, base: i32) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(s.clone()),
            vec![
                Arc::new(Int32Array::from(vec![base, base + 1])),
                Arc::new(StringArray::from(vec![Some("x"), None])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn footer_schema_carries_final_metadata() {
        let head = schema(&[("state", "running")]);
        let mut w = IpcFileWriter::try_new(Vec::new(), &head).unwrap();
        w.write(&batch(&head, 0)).unwrap();
        w.write(&batch(&head, 10)).unwrap();
        let bytes = w
            .finish(&schema(&[("state", "done"), ("lost", "0")]))
            .unwrap();

        let r = FileReader::try_new(Cursor::new(bytes.clone()), None).unwrap();
        assert_eq!(r.schema().metadata()["state"], "done");
        assert_eq!(r.schema().metadata()["lost"], "0");
        let batches: Vec<_> = r.map(Result::unwrap).collect();
        assert_eq!(batches.len(), 2);
        let a = batches[1]
            .column(0)
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap();
        assert_eq!(a.values(), &[10, 11]);

        // The stream part (from byte 8) is a valid stream with the head schema.
        let s = StreamReader::try_new(Cursor::new(bytes[8..].to_vec()), None).unwrap();
        assert_eq!(s.schema().metadata()["state"], "running");
        assert_eq!(s.map(Result::unwrap).count(), 2);
    }

    #[test]
    fn unfinished_file_reads_as_stream_up_to_last_batch() {
        let head = schema(&[]);
        let mut w = IpcFileWriter::try_new(Vec::new(), &head).unwrap();
        w.write(&batch(&head, 0)).unwrap();
        let len_after_first = w.get_mut().len();
        w.write(&batch(&head, 2)).unwrap();
        let mut bytes = std::mem::take(w.get_mut());
        // Cut the second batch in half, as a SIGKILL mid-write would.
        bytes.truncate(len_after_first + (bytes.len() - len_after_first) / 2);
        assert!(FileReader::try_new(Cursor::new(bytes.clone()), None).is_err());
        let mut s = StreamReader::try_new(Cursor::new(bytes[8..].to_vec()), None).unwrap();
        assert!(s.next().unwrap().is_ok());
        assert!(s.next().is_none_or(|r| r.is_err()));
    }
}
