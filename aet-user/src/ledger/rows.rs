//! Ledger rows as owned Rust values, for code that wants one event at a time (tests, small
//! ledgers, reports). Bulk analysis should work on the Arrow columns instead.

use std::path::Path;

use arrow_array::{
    Array, BinaryArray, BooleanArray, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    UInt32Array, UInt64Array, cast::AsArray as _,
};

use super::{
    reader::{Ledger, ReadError},
    schema::col,
};

/// One ledger row. Optional columns are `None` where the ledger has null.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LedgerRow {
    pub seq: u64,
    pub ts_ns: i64,
    pub kind: String,
    pub syscall: Option<String>,
    pub pid: u32,
    pub tid: u32,
    pub ppid: u32,
    pub uid: u32,
    pub gid: u32,
    pub cgroup_id: u64,
    pub comm: String,
    /// The exact path bytes (from `path_raw` when the path is not UTF-8).
    pub path: Option<Vec<u8>>,
    pub path_truncated: bool,
    pub dirfd: Option<i32>,
    pub flags: Option<u32>,
    pub mode: Option<u32>,
    pub resolve: Option<u64>,
    pub ret: Option<i64>,
    pub errno: Option<String>,
    pub argv: Option<Vec<String>>,
    pub argv_truncated: Option<bool>,
    pub child_pid: Option<u32>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub capture: u32,
}

impl LedgerRow {
    /// The path as text (lossy for non-UTF-8 bytes), if any.
    pub fn path_str(&self) -> Option<String> {
        self.path
            .as_ref()
            .map(|p| String::from_utf8_lossy(p).into_owned())
    }
}

fn get<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> &'a T {
    batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("ledger schema was checked; column {name} exists"))
        .as_any()
        .downcast_ref::<T>()
        .unwrap_or_else(|| panic!("ledger schema was checked; column {name} has its type"))
}

fn opt<T>(valid: bool, v: T) -> Option<T> {
    valid.then_some(v)
}

/// The rows of one batch.
pub fn rows_of(batch: &RecordBatch) -> Vec<LedgerRow> {
    let seq: &UInt64Array = get(batch, col::SEQ);
    let ts: &Int64Array = get(batch, col::TS_NS);
    let kind: &StringArray = get(batch, col::KIND);
    let syscall: &StringArray = get(batch, col::SYSCALL);
    let pid: &UInt32Array = get(batch, col::PID);
    let tid: &UInt32Array = get(batch, col::TID);
    let ppid: &UInt32Array = get(batch, col::PPID);
    let uid: &UInt32Array = get(batch, col::UID);
    let gid: &UInt32Array = get(batch, col::GID);
    let cgroup: &UInt64Array = get(batch, col::CGROUP_ID);
    let comm: &StringArray = get(batch, col::COMM);
    let path: &StringArray = get(batch, col::PATH);
    let path_raw: &BinaryArray = get(batch, col::PATH_RAW);
    let path_trunc: &BooleanArray = get(batch, col::PATH_TRUNCATED);
    let dirfd: &Int32Array = get(batch, col::DIRFD);
    let flags: &UInt32Array = get(batch, col::FLAGS);
    let mode: &UInt32Array = get(batch, col::MODE);
    let resolve: &UInt64Array = get(batch, col::RESOLVE);
    let ret: &Int64Array = get(batch, col::RET);
    let errno: &StringArray = get(batch, col::ERRNO);
    let argv: &ListArray = get(batch, col::ARGV);
    let argv_trunc: &BooleanArray = get(batch, col::ARGV_TRUNCATED);
    let child: &UInt32Array = get(batch, col::CHILD_PID);
    let code: &Int32Array = get(batch, col::EXIT_CODE);
    let sig: &Int32Array = get(batch, col::EXIT_SIGNAL);
    let capture: &UInt32Array = get(batch, col::CAPTURE);
    (0..batch.num_rows())
        .map(|i| LedgerRow {
            seq: seq.value(i),
            ts_ns: ts.value(i),
            kind: kind.value(i).to_owned(),
            syscall: opt(syscall.is_valid(i), syscall.value(i).to_owned()),
            pid: pid.value(i),
            tid: tid.value(i),
            ppid: ppid.value(i),
            uid: uid.value(i),
            gid: gid.value(i),
            cgroup_id: cgroup.value(i),
            comm: comm.value(i).to_owned(),
            path: if path_raw.is_valid(i) {
                Some(path_raw.value(i).to_vec())
            } else if path.is_valid(i) {
                Some(path.value(i).as_bytes().to_vec())
            } else {
                None
            },
            path_truncated: path_trunc.value(i),
            dirfd: opt(dirfd.is_valid(i), dirfd.value(i)),
            flags: opt(flags.is_valid(i), flags.value(i)),
            mode: opt(mode.is_valid(i), mode.value(i)),
            resolve: opt(resolve.is_valid(i), resolve.value(i)),
            ret: opt(ret.is_valid(i), ret.value(i)),
            errno: opt(errno.is_valid(i), errno.value(i).to_owned()),
            argv: argv.is_valid(i).then(|| {
                let v = argv.value(i);
                let s = v.as_string::<i32>();
                (0..s.len()).map(|j| s.value(j).to_owned()).collect()
            }),
            argv_truncated: opt(argv_trunc.is_valid(i), argv_trunc.value(i)),
            child_pid: opt(child.is_valid(i), child.value(i)),
            exit_code: opt(code.is_valid(i), code.value(i)),
            exit_signal: opt(sig.is_valid(i), sig.value(i)),
            capture: capture.value(i),
        })
        .collect()
}

/// Every row of the ledger at `path`, with the ledger (for its metadata and form).
pub fn read_rows(path: &Path) -> Result<(Ledger, Vec<LedgerRow>), ReadError> {
    let mut ledger = Ledger::open(path)?;
    let mut rows = Vec::new();
    while let Some(b) = ledger.next_batch()? {
        rows.extend(rows_of(&b));
    }
    Ok((ledger, rows))
}
