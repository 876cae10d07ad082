//! Where a query's result goes: a terminal table, CSV, JSON, an Arrow IPC file or Parquet.

use std::io::Write;

use datafusion::arrow::{
    array::RecordBatch, csv, datatypes::SchemaRef, ipc::writer::FileWriter, json,
    util::pretty::pretty_format_batches,
};
use parquet::arrow::ArrowWriter;

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
        Format::Arrow => Box::new(Pending::<W, FileWriter<W>>::Waiting(out)),
        Format::Parquet => Box::new(Pending::<W, ArrowWriter<W>>::Waiting(out)),
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
        // Refused before anything is written: CSV has no lists or structs.
        if let Some(f) = schema.fields().iter().find(|f| f.data_type().is_nested()) {
            return Err(format!(
                "CSV cannot hold column {} ({}): use --format json, arrow or parquet",
                f.name(),
                f.data_type()
            ));
        }
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

/// A file format whose writer is made once the schema is known.
trait FileFormat<W>: Sized {
    fn make(out: W, schema: &SchemaRef) -> Result<Self, String>;
    fn put(&mut self, batch: &RecordBatch) -> Result<(), String>;
    fn close(self) -> Result<(), String>;
}

impl<W: Write> FileFormat<W> for FileWriter<W> {
    fn make(out: W, schema: &SchemaRef) -> Result<Self, String> {
        FileWriter::try_new(out, schema).map_err(err)
    }
    fn put(&mut self, batch: &RecordBatch) -> Result<(), String> {
        self.write(batch).map_err(err)
    }
    fn close(mut self) -> Result<(), String> {
        self.finish().map_err(err)?;
        self.into_inner().map_err(err)?.flush().map_err(err)
    }
}

impl<W: Write + Send> FileFormat<W> for ArrowWriter<W> {
    fn make(out: W, schema: &SchemaRef) -> Result<Self, String> {
        let props = aet_audit::runs::export::parquet_properties().build();
        ArrowWriter::try_new(out, schema.clone(), Some(props)).map_err(err)
    }
    fn put(&mut self, batch: &RecordBatch) -> Result<(), String> {
        self.write(batch).map_err(err)
    }
    fn close(self) -> Result<(), String> {
        self.into_inner().map_err(err)?.flush().map_err(err)
    }
}

/// An Arrow IPC or Parquet file: the output until the schema is known, then its writer.
enum Pending<W, X> {
    Waiting(W),
    Writing(X),
    Done,
}

impl<W, X: FileFormat<W>> Sink for Pending<W, X> {
    fn start(&mut self, schema: &SchemaRef) -> Result<(), String> {
        let Pending::Waiting(out) = std::mem::replace(self, Pending::Done) else {
            return Err("started twice".into());
        };
        *self = Pending::Writing(X::make(out, schema)?);
        Ok(())
    }
    fn write(&mut self, batch: &RecordBatch) -> Result<(), String> {
        match self {
            Pending::Writing(w) => w.put(batch),
            _ => Err("not started".into()),
        }
    }
    fn finish(&mut self) -> Result<(), String> {
        match std::mem::replace(self, Pending::Done) {
            Pending::Writing(w) => w.close(),
            _ => Err("not started".into()),
        }
    }
}
