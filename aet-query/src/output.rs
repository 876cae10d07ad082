//! Where a query's result goes: a terminal table, CSV, JSON, an Arrow IPC file or Parquet.

use std::io::Write;

use datafusion::arrow::{
    array::RecordBatch, csv, datatypes::SchemaRef, ipc::writer::FileWriter, json,
    util::pretty::pretty_format_batches,
};
use parquet::{
    arrow::ArrowWriter,
    basic::{Compression, ZstdLevel},
    file::properties::WriterProperties,
};

/// A result's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A table for a person (the whole result is held until it is printed).
    Table,
    /// CSV with a header row.
    Csv,
    /// One JSON array of objects, one per row, every column in each (null as null).
    Json,
    /// An Arrow IPC file.
    Arrow,
    /// A Parquet file (zstd).
    Parquet,
}

impl Format {
    /// Whether the format is bytes a terminal should not be sent.
    pub fn is_binary(self) -> bool {
        matches!(self, Format::Arrow | Format::Parquet)
    }
}

/// Receives a result: its schema, then its batches as they come, then the end.
pub trait Sink {
    fn start(&mut self, schema: &SchemaRef) -> Result<(), String>;
    fn write(&mut self, batch: &RecordBatch) -> Result<(), String>;
    fn finish(&mut self) -> Result<(), String>;
}

/// A sink writing `format` to `out`.
pub fn sink<W: Write + Send + 'static>(format: Format, out: W) -> Box<dyn Sink> {
    match format {
        Format::Table => Box::new(Table {
            out,
            batches: Vec::new(),
            schema: None,
        }),
        Format::Csv => Box::new(Csv(Some(csv::Writer::new(out)))),
        Format::Json => Box::new(Json(Some(
            json::WriterBuilder::new()
                .with_explicit_nulls(true)
                .build::<_, json::writer::JsonArray>(out),
        ))),
        Format::Arrow => Box::new(Arrow(Pending::Waiting(out))),
        Format::Parquet => Box::new(Parquet(Pending::Waiting(out))),
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

struct Table<W> {
    out: W,
    batches: Vec<RecordBatch>,
    schema: Option<SchemaRef>,
}

impl<W: Write> Sink for Table<W> {
    fn start(&mut self, schema: &SchemaRef) -> Result<(), String> {
        self.schema = Some(schema.clone());
        Ok(())
    }
    fn write(&mut self, batch: &RecordBatch) -> Result<(), String> {
        if batch.num_rows() > 0 {
            self.batches.push(batch.clone());
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<(), String> {
        let batches = if self.batches.is_empty() {
            // The header of an empty result.
            self.schema
                .iter()
                .map(|s| RecordBatch::new_empty(s.clone()))
                .collect()
        } else {
            std::mem::take(&mut self.batches)
        };
        let table = pretty_format_batches(&batches).map_err(err)?;
        writeln!(self.out, "{table}").map_err(err)?;
        self.out.flush().map_err(err)
    }
}

struct Csv<W: Write>(Option<csv::Writer<W>>);

impl<W: Write> Sink for Csv<W> {
    fn start(&mut self, schema: &SchemaRef) -> Result<(), String> {
        // The header, even for a result of no rows.
        let w = self.0.as_mut().expect("not finished");
        w.write(&RecordBatch::new_empty(schema.clone()))
            .map_err(err)
    }
    fn write(&mut self, batch: &RecordBatch) -> Result<(), String> {
        self.0
            .as_mut()
            .expect("not finished")
            .write(batch)
            .map_err(err)
    }
    fn finish(&mut self) -> Result<(), String> {
        let mut out = self.0.take().expect("finished once").into_inner();
        out.flush().map_err(err)
    }
}

struct Json<W: Write>(Option<json::ArrayWriter<W>>);

impl<W: Write> Sink for Json<W> {
    fn start(&mut self, _schema: &SchemaRef) -> Result<(), String> {
        Ok(())
    }
    fn write(&mut self, batch: &RecordBatch) -> Result<(), String> {
        self.0
            .as_mut()
            .expect("not finished")
            .write(batch)
            .map_err(err)
    }
    fn finish(&mut self) -> Result<(), String> {
        let mut w = self.0.take().expect("finished once");
        w.finish().map_err(err)?;
        // An empty result is `[]`.
        w.into_inner().flush().map_err(err)
    }
}

/// A writer made when the schema is known.
enum Pending<W, X> {
    Waiting(W),
    Writing(X),
    Done,
}

struct Arrow<W: Write>(Pending<W, FileWriter<W>>);

impl<W: Write> Sink for Arrow<W> {
    fn start(&mut self, schema: &SchemaRef) -> Result<(), String> {
        let Pending::Waiting(out) = std::mem::replace(&mut self.0, Pending::Done) else {
            return Err("started twice".into());
        };
        self.0 = Pending::Writing(FileWriter::try_new(out, schema).map_err(err)?);
        Ok(())
    }
    fn write(&mut self, batch: &RecordBatch) -> Result<(), String> {
        match &mut self.0 {
            Pending::Writing(w) => w.write(batch).map_err(err),
            _ => Err("not started".into()),
        }
    }
    fn finish(&mut self) -> Result<(), String> {
        match std::mem::replace(&mut self.0, Pending::Done) {
            Pending::Writing(mut w) => {
                w.finish().map_err(err)?;
                w.into_inner().map_err(err)?.flush().map_err(err)
            }
            _ => Err("not started".into()),
        }
    }
}

struct Parquet<W: Write + Send>(Pending<W, ArrowWriter<W>>);

impl<W: Write + Send> Sink for Parquet<W> {
    fn start(&mut self, schema: &SchemaRef) -> Result<(), String> {
        let Pending::Waiting(out) = std::mem::replace(&mut self.0, Pending::Done) else {
            return Err("started twice".into());
        };
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build();
        self.0 =
            Pending::Writing(ArrowWriter::try_new(out, schema.clone(), Some(props)).map_err(err)?);
        Ok(())
    }
    fn write(&mut self, batch: &RecordBatch) -> Result<(), String> {
        match &mut self.0 {
            Pending::Writing(w) => w.write(batch).map_err(err),
            _ => Err("not started".into()),
        }
    }
    fn finish(&mut self) -> Result<(), String> {
        match std::mem::replace(&mut self.0, Pending::Done) {
            Pending::Writing(w) => {
                let mut out = w.into_inner().map_err(err)?;
                out.flush().map_err(err)
            }
            _ => Err("not started".into()),
        }
    }
}
