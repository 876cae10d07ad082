//! Streams ledger rows into `ledger.arrow` as the run goes.
//!
//! Rows accumulate in Arrow builders and go to disk as a record batch every [`BATCH_ROWS`] rows
//! or when the caller flushes (the monitor flushes at least every
//! `FLUSH_INTERVAL`), so a run of hours holds one batch in
//! memory and a killed monitor leaves every flushed batch readable. The file is created with
//! `O_EXCL`: an existing ledger is never overwritten.

use std::{
    collections::HashMap,
    fs::{File, OpenOptions},
    io::{self, BufWriter},
    path::{Path, PathBuf},
    sync::Arc,
};

use arrow_array::{
    ArrayRef, RecordBatch,
    builder::{
        BinaryBuilder, BooleanBuilder, Int32Builder, Int64Builder, ListBuilder, StringBuilder,
        UInt32Builder, UInt64Builder,
    },
};
use arrow_schema::{ArrowError, SchemaRef};

use super::{
    ipc::IpcFileWriter,
    schema::{self, meta},
};

/// Rows per record batch.
pub const BATCH_ROWS: usize = 16 * 1024;

/// Errors writing a ledger.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The ledger file could not be created (it may already exist).
    #[error("cannot create ledger {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Encoding or writing a batch failed.
    #[error("writing ledger {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: ArrowError,
    },
}

/// One ledger row. Optional fields are null in the ledger when `None`.
#[derive(Clone, Debug, Default)]
pub struct Row<'a> {
    pub seq: u64,
    pub ts_ns: i64,
    pub kind: &'static str,
    pub syscall: Option<&'static str>,
    pub pid: u32,
    pub tid: u32,
    pub ppid: u32,
    pub uid: u32,
    pub gid: u32,
    pub cgroup_id: u64,
    pub comm: [u8; 16],
    pub path: Option<&'a [u8]>,
    pub path_truncated: bool,
    pub resolved_path: Option<Vec<u8>>,
    pub resolved_from: Option<&'static str>,
    pub resolved_partial: Option<bool>,
    pub host_path: Option<Vec<u8>>,
    pub path2: Option<&'a [u8]>,
    pub resolved_path2: Option<Vec<u8>>,
    pub dirfd: Option<i32>,
    pub dirfd2: Option<i32>,
    pub fd: Option<i32>,
    pub flags: Option<u32>,
    pub mode: Option<u32>,
    pub resolve: Option<u64>,
    pub dev: Option<u64>,
    pub ino: Option<u64>,
    pub mnt_id: Option<u32>,
    pub mntns: u32,
    pub ret: Option<i64>,
    /// NUL-separated arguments.
    pub argv: Option<&'a [u8]>,
    pub argv_truncated: Option<bool>,
    pub child_pid: Option<u32>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub bytes_read: Option<u64>,
    pub bytes_written: Option<u64>,
    pub length: Option<u64>,
    pub prot: Option<u32>,
    pub io_uring_op: Option<u32>,
    pub capture: u32,
}

/// A path column pair: `name` (UTF-8, lossy) and `name_raw` (the exact bytes, only when they
/// are not UTF-8).
struct PathCol {
    text: StringBuilder,
    raw: BinaryBuilder,
}

impl PathCol {
    fn new(n: usize) -> Self {
        Self {
            text: StringBuilder::with_capacity(n, n * 32),
            raw: BinaryBuilder::new(),
        }
    }

    fn append(&mut self, p: Option<&[u8]>) {
        match p {
            None => {
                self.text.append_null();
                self.raw.append_null();
            }
            Some(p) => match std::str::from_utf8(p) {
                Ok(s) => {
                    self.text.append_value(s);
                    self.raw.append_null();
                }
                Err(_) => {
                    self.text.append_value(String::from_utf8_lossy(p));
                    self.raw.append_value(p);
                }
            },
        }
    }

    fn finish(&mut self) -> [ArrayRef; 2] {
        [Arc::new(self.text.finish()), Arc::new(self.raw.finish())]
    }
}

struct Builders {
    seq: UInt64Builder,
    ts: Int64Builder,
    kind: StringBuilder,
    syscall: StringBuilder,
    pid: UInt32Builder,
    tid: UInt32Builder,
    ppid: UInt32Builder,
    uid: UInt32Builder,
    gid: UInt32Builder,
    cgroup_id: UInt64Builder,
    comm: StringBuilder,
    path: PathCol,
    path_truncated: BooleanBuilder,
    resolved: PathCol,
    resolved_from: StringBuilder,
    resolved_partial: BooleanBuilder,
    host: PathCol,
    path2: PathCol,
    resolved2: PathCol,
    dirfd: Int32Builder,
    dirfd2: Int32Builder,
    fd: Int32Builder,
    flags: UInt32Builder,
    mode: UInt32Builder,
    resolve: UInt64Builder,
    dev: UInt64Builder,
    ino: UInt64Builder,
    mnt_id: UInt32Builder,
    mntns: UInt32Builder,
    ret: Int64Builder,
    errno: StringBuilder,
    argv: ListBuilder<StringBuilder>,
    argv_truncated: BooleanBuilder,
    child_pid: UInt32Builder,
    exit_code: Int32Builder,
    exit_signal: Int32Builder,
    bytes_read: UInt64Builder,
    bytes_written: UInt64Builder,
    length: UInt64Builder,
    prot: UInt32Builder,
    io_uring_op: UInt32Builder,
    capture: UInt32Builder,
    len: usize,
}

impl Builders {
    fn new() -> Self {
        let n = BATCH_ROWS;
        Self {
            seq: UInt64Builder::with_capacity(n),
            ts: Int64Builder::with_capacity(n),
            kind: StringBuilder::with_capacity(n, n * 4),
            syscall: StringBuilder::with_capacity(n, n * 6),
            pid: UInt32Builder::with_capacity(n),
            tid: UInt32Builder::with_capacity(n),
            ppid: UInt32Builder::with_capacity(n),
            uid: UInt32Builder::with_capacity(n),
            gid: UInt32Builder::with_capacity(n),
            cgroup_id: UInt64Builder::with_capacity(n),
            comm: StringBuilder::with_capacity(n, n * 8),
            path: PathCol::new(n),
            path_truncated: BooleanBuilder::with_capacity(n),
            resolved: PathCol::new(n),
            resolved_from: StringBuilder::with_capacity(n, n * 6),
            resolved_partial: BooleanBuilder::with_capacity(n),
            host: PathCol::new(n / 8),
            path2: PathCol::new(n / 8),
            resolved2: PathCol::new(n / 8),
            dirfd: Int32Builder::with_capacity(n),
            dirfd2: Int32Builder::with_capacity(n),
            fd: Int32Builder::with_capacity(n),
            flags: UInt32Builder::with_capacity(n),
            mode: UInt32Builder::with_capacity(n),
            resolve: UInt64Builder::with_capacity(n),
            dev: UInt64Builder::with_capacity(n),
            ino: UInt64Builder::with_capacity(n),
            mnt_id: UInt32Builder::with_capacity(n),
            mntns: UInt32Builder::with_capacity(n),
            ret: Int64Builder::with_capacity(n),
            errno: StringBuilder::new(),
            argv: ListBuilder::new(StringBuilder::new()),
            argv_truncated: BooleanBuilder::with_capacity(n),
            child_pid: UInt32Builder::with_capacity(n),
            exit_code: Int32Builder::with_capacity(n),
            exit_signal: Int32Builder::with_capacity(n),
            bytes_read: UInt64Builder::with_capacity(n),
            bytes_written: UInt64Builder::with_capacity(n),
            length: UInt64Builder::with_capacity(n),
            prot: UInt32Builder::with_capacity(n),
            io_uring_op: UInt32Builder::with_capacity(n),
            capture: UInt32Builder::with_capacity(n),
            len: 0,
        }
    }

    fn append(&mut self, r: &Row<'_>) {
        self.seq.append_value(r.seq);
        self.ts.append_value(r.ts_ns);
        self.kind.append_value(r.kind);
        self.syscall.append_option(r.syscall);
        self.pid.append_value(r.pid);
        self.tid.append_value(r.tid);
        self.ppid.append_value(r.ppid);
        self.uid.append_value(r.uid);
        self.gid.append_value(r.gid);
        self.cgroup_id.append_value(r.cgroup_id);
        let comm = r.comm.split(|&b| b == 0).next().unwrap_or_default();
        self.comm.append_value(String::from_utf8_lossy(comm));
        self.path.append(r.path);
        self.path_truncated.append_value(r.path_truncated);
        self.resolved.append(r.resolved_path.as_deref());
        self.resolved_from.append_option(r.resolved_from);
        self.resolved_partial.append_option(r.resolved_partial);
        self.host.append(r.host_path.as_deref());
        self.path2.append(r.path2);
        self.resolved2.append(r.resolved_path2.as_deref());
        self.dirfd.append_option(r.dirfd);
        self.dirfd2.append_option(r.dirfd2);
        self.fd.append_option(r.fd);
        self.flags.append_option(r.flags);
        self.mode.append_option(r.mode);
        self.resolve.append_option(r.resolve);
        self.dev.append_option(r.dev);
        self.ino.append_option(r.ino);
        self.mnt_id.append_option(r.mnt_id);
        self.mntns.append_value(r.mntns);
        self.ret.append_option(r.ret);
        match r.ret {
            Some(ret) if ret < 0 => self
                .errno
                .append_value(crate::util::errno_name((-ret) as i32)),
            _ => self.errno.append_null(),
        }
        match r.argv {
            Some(argv) => {
                for arg in crate::util::split_argv(argv) {
                    self.argv
                        .values()
                        .append_value(String::from_utf8_lossy(arg));
                }
                self.argv.append(true);
            }
            None => self.argv.append(false),
        }
        self.argv_truncated.append_option(r.argv_truncated);
        self.child_pid.append_option(r.child_pid);
        self.exit_code.append_option(r.exit_code);
        self.exit_signal.append_option(r.exit_signal);
        self.bytes_read.append_option(r.bytes_read);
        self.bytes_written.append_option(r.bytes_written);
        self.length.append_option(r.length);
        self.prot.append_option(r.prot);
        self.io_uring_op.append_option(r.io_uring_op);
        self.capture.append_value(r.capture);
        self.len += 1;
    }

    fn finish(&mut self, schema: SchemaRef) -> Result<RecordBatch, ArrowError> {
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.seq.finish()),
            Arc::new(self.ts.finish()),
            Arc::new(self.kind.finish()),
            Arc::new(self.syscall.finish()),
            Arc::new(self.pid.finish()),
            Arc::new(self.tid.finish()),
            Arc::new(self.ppid.finish()),
            Arc::new(self.uid.finish()),
            Arc::new(self.gid.finish()),
            Arc::new(self.cgroup_id.finish()),
            Arc::new(self.comm.finish()),
        ];
        columns.extend(self.path.finish());
        columns.push(Arc::new(self.path_truncated.finish()));
        columns.extend(self.resolved.finish());
        columns.push(Arc::new(self.resolved_from.finish()));
        columns.push(Arc::new(self.resolved_partial.finish()));
        columns.extend(self.host.finish());
        columns.extend(self.path2.finish());
        columns.extend(self.resolved2.finish());
        columns.extend([
            Arc::new(self.dirfd.finish()) as ArrayRef,
            Arc::new(self.dirfd2.finish()),
            Arc::new(self.fd.finish()),
            Arc::new(self.flags.finish()),
            Arc::new(self.mode.finish()),
            Arc::new(self.resolve.finish()),
            Arc::new(self.dev.finish()),
            Arc::new(self.ino.finish()),
            Arc::new(self.mnt_id.finish()),
            Arc::new(self.mntns.finish()),
            Arc::new(self.ret.finish()),
            Arc::new(self.errno.finish()),
            Arc::new(self.argv.finish()),
            Arc::new(self.argv_truncated.finish()),
            Arc::new(self.child_pid.finish()),
            Arc::new(self.exit_code.finish()),
            Arc::new(self.exit_signal.finish()),
            Arc::new(self.bytes_read.finish()),
            Arc::new(self.bytes_written.finish()),
            Arc::new(self.length.finish()),
            Arc::new(self.prot.finish()),
            Arc::new(self.io_uring_op.finish()),
            Arc::new(self.capture.finish()),
        ]);
        self.len = 0;
        RecordBatch::try_new(schema, columns)
    }
}

/// Writes one ledger file.
pub struct LedgerWriter {
    path: PathBuf,
    file: IpcFileWriter<BufWriter<File>>,
    head: HashMap<String, String>,
    schema: SchemaRef,
    rows: Builders,
    total: u64,
}

impl LedgerWriter {
    /// Creates `path` (which must not exist) and writes the head of the file with `metadata`.
    pub fn create(path: &Path, metadata: HashMap<String, String>) -> Result<Self, WriteError> {
        let create = |source| WriteError::Create {
            path: path.to_owned(),
            source,
        };
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(create)?;
        let mut head = metadata;
        head.insert(meta::SCHEMA_VERSION.into(), schema::SCHEMA_VERSION.into());
        head.insert(meta::AET_VERSION.into(), env!("CARGO_PKG_VERSION").into());
        head.insert(meta::FINISHED.into(), "false".into());
        let schema = schema::schema(head.clone());
        let file = IpcFileWriter::try_new(BufWriter::with_capacity(1 << 20, file), &schema)
            .map_err(|source| WriteError::Write {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self {
            path: path.to_owned(),
            file,
            head,
            schema,
            rows: Builders::new(),
            total: 0,
        })
    }

    /// The ledger's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rows appended so far.
    pub fn rows(&self) -> u64 {
        self.total
    }

    /// Rows waiting in the current batch.
    pub fn pending(&self) -> usize {
        self.rows.len
    }

    /// Appends a row; writes a batch when one is full.
    pub fn append(&mut self, row: &Row<'_>) -> Result<(), WriteError> {
        self.rows.append(row);
        self.total += 1;
        if self.rows.len >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the pending rows (if any) as a batch and flushes it to the file.
    pub fn flush(&mut self) -> Result<(), WriteError> {
        if self.rows.len == 0 {
            return Ok(());
        }
        self.rows
            .finish(self.schema.clone())
            .and_then(|b| self.file.write(&b))
            .map_err(|source| WriteError::Write {
                path: self.path.clone(),
                source,
            })
    }

    /// Writes the pending rows and the footer, whose schema metadata is the head metadata
    /// updated with `metadata` and `aet.finished = true`.
    pub fn finish(mut self, metadata: HashMap<String, String>) -> Result<PathBuf, WriteError> {
        self.flush()?;
        let mut all = self.head.clone();
        all.extend(metadata);
        all.insert(meta::FINISHED.into(), "true".into());
        all.insert(meta::EVENTS_RECORDED.into(), self.total.to_string());
        let final_schema = schema::schema(all);
        self.file
            .finish(&final_schema)
            .map_err(|source| WriteError::Write {
                path: self.path.clone(),
                source,
            })?;
        Ok(self.path)
    }
}
