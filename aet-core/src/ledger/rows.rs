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
    /// The exact resolved path bytes.
    pub resolved_path: Option<Vec<u8>>,
    pub resolved_from: Option<String>,
    pub resolved_partial: Option<bool>,
    pub host_path: Option<Vec<u8>>,
    pub path2: Option<Vec<u8>>,
    pub resolved_path2: Option<Vec<u8>>,
    pub dirfd2: Option<i32>,
    pub fd: Option<i32>,
    pub dev: Option<u64>,
    pub ino: Option<u64>,
    pub mnt_id: Option<u32>,
    pub mntns: u32,
    pub bytes_read: Option<u64>,
    pub bytes_written: Option<u64>,
    pub length: Option<u64>,
    pub prot: Option<u32>,
    pub io_uring_op: Option<u32>,
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

    /// The resolved path as text (lossy), if any.
    pub fn resolved_str(&self) -> Option<String> {
        self.resolved_path
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

/// The exact bytes of a path column pair at row `i`.
fn path_bytes(text: &StringArray, raw: &BinaryArray, i: usize) -> Option<Vec<u8>> {
    if raw.is_valid(i) {
        Some(raw.value(i).to_vec())
    } else if text.is_valid(i) {
        Some(text.value(i).as_bytes().to_vec())
    } else {
        None
    }
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
    let resolved: &StringArray = get(batch, col::RESOLVED_PATH);
    let resolved_raw: &BinaryArray = get(batch, col::RESOLVED_PATH_RAW);
    let resolved_from: &StringArray = get(batch, col::RESOLVED_FROM);
    let resolved_partial: &BooleanArray = get(batch, col::RESOLVED_PARTIAL);
    let host: &StringArray = get(batch, col::HOST_PATH);
    let host_raw: &BinaryArray = get(batch, col::HOST_PATH_RAW);
    let path2: &StringArray = get(batch, col::PATH2);
    let path2_raw: &BinaryArray = get(batch, col::PATH2_RAW);
    let resolved2: &StringArray = get(batch, col::RESOLVED_PATH2);
    let resolved2_raw: &BinaryArray = get(batch, col::RESOLVED_PATH2_RAW);
    let dirfd2: &Int32Array = get(batch, col::DIRFD2);
    let fd: &Int32Array = get(batch, col::FD);
    let dev: &UInt64Array = get(batch, col::DEV);
    let ino: &UInt64Array = get(batch, col::INO);
    let mnt_id: &UInt32Array = get(batch, col::MNT_ID);
    let mntns: &UInt32Array = get(batch, col::MNTNS);
    let bytes_read: &UInt64Array = get(batch, col::BYTES_READ);
    let bytes_written: &UInt64Array = get(batch, col::BYTES_WRITTEN);
    let length: &UInt64Array = get(batch, col::LENGTH);
    let prot: &UInt32Array = get(batch, col::PROT);
    let io_uring_op: &UInt32Array = get(batch, col::IO_URING_OP);
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
            path: path_bytes(path, path_raw, i),
            path_truncated: path_trunc.value(i),
            resolved_path: path_bytes(resolved, resolved_raw, i),
            resolved_from: opt(resolved_from.is_valid(i), resolved_from.value(i).to_owned()),
            resolved_partial: opt(resolved_partial.is_valid(i), resolved_partial.value(i)),
            host_path: path_bytes(host, host_raw, i),
            path2: path_bytes(path2, path2_raw, i),
            resolved_path2: path_bytes(resolved2, resolved2_raw, i),
            dirfd2: opt(dirfd2.is_valid(i), dirfd2.value(i)),
            fd: opt(fd.is_valid(i), fd.value(i)),
            dev: opt(dev.is_valid(i), dev.value(i)),
            ino: opt(ino.is_valid(i), ino.value(i)),
            mnt_id: opt(mnt_id.is_valid(i), mnt_id.value(i)),
            mntns: mntns.value(i),
            bytes_read: opt(bytes_read.is_valid(i), bytes_read.value(i)),
            bytes_written: opt(bytes_written.is_valid(i), bytes_written.value(i)),
            length: opt(length.is_valid(i), length.value(i)),
            prot: opt(prot.is_valid(i), prot.value(i)),
            io_uring_op: opt(io_uring_op.is_valid(i), io_uring_op.value(i)),
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
