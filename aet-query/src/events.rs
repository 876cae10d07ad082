//! The `events` table: every row of every run's ledger, with the run's name, read where it lies.
//!
//! A scan reads only the columns the query uses (a finished ledger is mapped and only those
//! columns' pages are touched), in as many partitions as the session has, each holding whole
//! runs (balanced by ledger size). A run's rows are handed on only once all of its batches have
//! decoded: a ledger found damaged during the scan is reported and skipped whole (or, strict,
//! stops the query), never half counted.

use std::{collections::VecDeque, fmt, path::PathBuf, sync::Arc};

use aet_ledger::reader::{Form, Ledger};
use async_trait::async_trait;
use datafusion::{
    arrow::{
        array::{
            Array, ArrayRef, BinaryArray, ListArray, RecordBatch, RecordBatchOptions, StringArray,
        },
        datatypes::{DataType, Field, Schema, SchemaRef},
        error::ArrowError,
    },
    catalog::{Session, TableProvider},
    error::{DataFusionError, Result},
    execution::TaskContext,
    logical_expr::{Expr, TableType},
    physical_expr::LexOrdering,
    physical_plan::{
        ExecutionPlan, SendableRecordBatchStream,
        stream::RecordBatchStreamAdapter,
        streaming::{PartitionStream, StreamingTableExec},
    },
};

use crate::Problems;

/// A run whose ledger the `events` table reads.
#[derive(Clone, Debug)]
pub(crate) struct Source {
    pub name: String,
    pub ledger: PathBuf,
    pub bytes: u64,
}

/// The `events` table.
#[derive(Debug)]
pub(crate) struct Events {
    schema: SchemaRef,
    sources: Arc<[Source]>,
    partitions: usize,
    problems: Problems,
    strict: bool,
}

/// The table's schema: `run`, then the ledger's columns (all nullable: a ledger of an older
/// schema version has the newer columns null).
pub(crate) fn schema() -> SchemaRef {
    let ledger = aet_ledger::schema::schema(Default::default());
    let mut fields = vec![Field::new("run", DataType::Utf8, false)];
    fields.extend(
        ledger
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true)),
    );
    Arc::new(Schema::new(fields))
}

impl Events {
    pub(crate) fn new(
        sources: Vec<Source>,
        partitions: usize,
        problems: Problems,
        strict: bool,
    ) -> Self {
        Self {
            schema: schema(),
            sources: sources.into(),
            partitions: partitions.max(1),
            problems,
            strict,
        }
    }

    /// Runs dealt to `n` partitions, the largest ledger first to the least loaded.
    fn deal(&self, n: usize) -> Vec<Vec<Source>> {
        let mut order: Vec<&Source> = self.sources.iter().collect();
        order.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
        let mut parts: Vec<(u64, Vec<Source>)> = vec![(0, Vec::new()); n];
        for s in order {
            let least = parts
                .iter_mut()
                .min_by_key(|(load, _)| *load)
                .expect("at least one partition");
            least.0 += s.bytes.max(1);
            least.1.push(s.clone());
        }
        parts.into_iter().map(|(_, p)| p).collect()
    }
}

#[async_trait]
impl TableProvider for Events {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let projected = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };
        let n = self.partitions.min(self.sources.len()).max(1);
        let parts: Vec<Arc<dyn PartitionStream>> = self
            .deal(n)
            .into_iter()
            .map(|sources| {
                Arc::new(Part {
                    schema: projected.clone(),
                    sources: sources.into(),
                    problems: self.problems.clone(),
                    strict: self.strict,
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        Ok(Arc::new(StreamingTableExec::try_new(
            projected,
            parts,
            None,
            Vec::<LexOrdering>::new(),
            false,
            limit,
        )?))
    }
}

/// One partition of a scan: whole runs, read one after another.
struct Part {
    schema: SchemaRef,
    sources: Arc<[Source]>,
    problems: Problems,
    strict: bool,
}

impl fmt::Debug for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "aet ledgers ({} runs)", self.sources.len())
    }
}

impl PartitionStream for Part {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let rows = Rows {
            schema: self.schema.clone(),
            sources: self.sources.clone(),
            next: 0,
            ready: VecDeque::new(),
            problems: self.problems.clone(),
            strict: self.strict,
            failed: false,
        };
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(rows),
        ))
    }
}

/// The batches of a partition's runs, a run at a time.
struct Rows {
    schema: SchemaRef,
    sources: Arc<[Source]>,
    next: usize,
    ready: VecDeque<RecordBatch>,
    problems: Problems,
    strict: bool,
    failed: bool,
}

impl Iterator for Rows {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Some(Ok(b));
            }
            if self.failed {
                return None;
            }
            let source = self.sources.get(self.next)?.clone();
            self.next += 1;
            match read_run(&self.schema, &source) {
                Ok(batches) => self.ready.extend(batches),
                Err(message) if self.strict => {
                    self.failed = true;
                    let e = DataFusionError::Execution(format!("run {}: {message}", source.name));
                    record(&self.problems, &source.name, message);
                    return Some(Err(e));
                }
                Err(message) => record(
                    &self.problems,
                    &source.name,
                    format!("skipped from events: {message}"),
                ),
            }
        }
    }
}

pub(crate) fn record(problems: &Problems, run: &str, message: String) {
    push(problems, run, message, false);
}

/// Says something of a run that is in the tables whole.
pub(crate) fn note(problems: &Problems, run: &str, message: String) {
    push(problems, run, message, true);
}

fn push(problems: &Problems, run: &str, message: String, note: bool) {
    let mut p = problems.lock().unwrap_or_else(|e| e.into_inner());
    if !p.iter().any(|x| x.run == run && x.message == message) {
        p.push(crate::Problem {
            run: run.to_owned(),
            message,
            note,
        });
    }
}

/// Every batch of one run, in the scan's schema; an error (naming the ledger) if any batch
/// cannot be read.
fn read_run(schema: &SchemaRef, source: &Source) -> Result<Vec<RecordBatch>, String> {
    let wanted: Vec<&str> = schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .filter(|n| *n != "run")
        .collect();
    // A query that uses no ledger column (count(*)) still needs the rows: read the narrowest.
    let read: Vec<&str> = if wanted.is_empty() {
        vec![aet_ledger::schema::col::SEQ]
    } else {
        wanted.clone()
    };
    let mut ledger = Ledger::open_columns(&source.ledger, &read).map_err(|e| e.to_string())?;
    if ledger.form() == Form::Unfinished {
        return Err(format!(
            "{}: the ledger is unfinished (`aet ledger recover` rewrites it)",
            source.ledger.display()
        ));
    }
    let mut out = Vec::new();
    while let Some(b) = ledger.next_batch().map_err(|e| e.to_string())? {
        out.push(
            shape(schema, &b, &source.name)
                .map_err(|e| format!("{}: {e}", source.ledger.display()))?,
        );
    }
    Ok(out)
}

/// A projected ledger batch (text as bytes) in the scan's schema: text checked as UTF-8 and
/// typed as text again, the run's name where the schema has `run`.
fn shape(schema: &SchemaRef, b: &RecordBatch, run: &str) -> Result<RecordBatch, ArrowError> {
    let rows = b.num_rows();
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            if f.name() == "run" {
                return Ok(Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                    run, rows,
                ))) as ArrayRef);
            }
            let c = b.column_by_name(f.name()).ok_or_else(|| {
                ArrowError::SchemaError(format!("column {} is missing", f.name()))
            })?;
            as_text(c, f.data_type())
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )
}

/// A column read as bytes, as the text type `want` (its UTF-8 checked), or as it is.
fn as_text(c: &ArrayRef, want: &DataType) -> Result<ArrayRef, ArrowError> {
    match (c.data_type(), want) {
        (DataType::Binary, DataType::Utf8) => {
            let bin = c
                .as_any()
                .downcast_ref::<BinaryArray>()
                .expect("binary")
                .clone();
            Ok(Arc::new(StringArray::try_from_binary(bin)?))
        }
        (DataType::List(_), DataType::List(inner)) if inner.data_type() == &DataType::Utf8 => {
            let list = c.as_any().downcast_ref::<ListArray>().expect("list");
            let values = as_text(list.values(), &DataType::Utf8)?;
            Ok(Arc::new(ListArray::try_new(
                inner.clone(),
                list.offsets().clone(),
                values,
                list.nulls().cloned(),
            )?))
        }
        _ => Ok(c.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(name: &str, bytes: u64) -> Source {
        Source {
            name: name.into(),
            ledger: PathBuf::from(format!("/runs/{name}/ledger.arrow")),
            bytes,
        }
    }

    #[test]
    fn runs_are_dealt_whole_and_balanced_by_size() {
        let sources = vec![
            source("a", 100),
            source("b", 60),
            source("c", 50),
            source("d", 10),
        ];
        let e = Events::new(sources, 2, Problems::default(), false);
        let parts = e.deal(2);
        let load = |p: &[Source]| p.iter().map(|s| s.bytes).sum::<u64>();
        let mut loads: Vec<u64> = parts.iter().map(|p| load(p)).collect();
        loads.sort();
        assert_eq!(loads, [110, 110]);
        let mut names: Vec<&str> = parts.iter().flatten().map(|s| s.name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["a", "b", "c", "d"], "every run once");
    }

    #[test]
    fn text_read_as_bytes_is_checked_as_utf8() {
        let good: ArrayRef = Arc::new(BinaryArray::from(vec![Some(&b"/etc/passwd"[..]), None]));
        let t = as_text(&good, &DataType::Utf8).unwrap();
        let t = t.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(t.value(0), "/etc/passwd");
        assert!(t.is_null(1));
        let bad: ArrayRef = Arc::new(BinaryArray::from(vec![&b"\xff\xfe"[..]]));
        assert!(as_text(&bad, &DataType::Utf8).is_err());
    }

    #[test]
    fn a_batch_gets_its_run_and_only_its_projected_columns() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("run", DataType::Utf8, false),
            Field::new("kind", DataType::Utf8, true),
        ]));
        let b = RecordBatch::try_from_iter([(
            "kind",
            Arc::new(BinaryArray::from(vec![&b"open"[..], b"exec"])) as ArrayRef,
        )])
        .unwrap();
        let out = shape(&schema, &b, "task-17").unwrap();
        assert_eq!(out.num_rows(), 2);
        let run = out
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!((run.value(0), run.value(1)), ("task-17", "task-17"));
        let kind = out
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(kind.value(1), "exec");
        // No column at all (count(*)): the rows are still counted.
        let none = shape(&Arc::new(Schema::empty()), &b, "x").unwrap();
        assert_eq!(none.num_rows(), 2);
    }
}
