//! The ledger's columns as the scan reads them: only those it needs, text as bytes, each batch's
//! arrays looked up once.

use arrow_array::{
    Array, BinaryArray, BooleanArray, Int32Array, Int64Array, ListArray, RecordBatch, UInt32Array,
    UInt64Array, cast::AsArray as _,
};

use aet_common::{EventKind, Syscall};

use super::reached::Reached;
use aet_ledger::access::RowFields;
use aet_ledger::schema::col;

/// The columns the engine reads.
pub const COLUMNS: &[&str] = &[
    col::SEQ,
    col::TS_NS,
    col::KIND,
    col::SYSCALL,
    col::PID,
    col::PPID,
    col::UID,
    col::COMM,
    col::PATH,
    col::PATH_RAW,
    col::RESOLVED_PATH,
    col::RESOLVED_PATH_RAW,
    col::HOST_PATH,
    col::HOST_PATH_RAW,
    col::PATH2,
    col::PATH2_RAW,
    col::RESOLVED_PATH2,
    col::RESOLVED_PATH2_RAW,
    col::FLAGS,
    col::PROT,
    col::RET,
    col::ERRNO,
    col::ARGV,
    col::CHILD_PID,
    col::DEV,
    col::INO,
    col::BYTES_READ,
    col::BYTES_WRITTEN,
    col::FD,
    col::FD_ORIGIN,
    col::TARGET_PID,
    col::TARGET_IN_RUN,
    col::PTRACE_REQUEST,
    col::NET_FAMILY,
    col::NET_ADDRESS,
    col::NET_ADDRESS_RAW,
    col::NET_PORT,
    col::PHASE,
    col::HOST,
    col::HOST_RAW,
    col::DNS_RCODE,
    col::NET_DECISION,
    col::HOST_SOURCE,
    col::CAPTURE,
    col::SHA256,
    col::SHA256_ERROR,
];

/// A text column (read as bytes) that may have a `_raw` twin holding the exact bytes; either is
/// `None` when it is null in the whole batch (most are: a raw twin exists only for bytes that
/// are not UTF-8).
pub(super) struct Bytes<'a> {
    pub(super) text: Option<&'a BinaryArray>,
    pub(super) raw: Option<&'a BinaryArray>,
}

impl<'a> Bytes<'a> {
    pub(super) fn new(b: &'a RecordBatch, text: &str, raw: &str) -> Self {
        let some = |a: &'a BinaryArray| (a.null_count() < a.len()).then_some(a);
        Bytes {
            text: some(bin_col(b, text)),
            raw: some(bin_col(b, raw)),
        }
    }

    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<&'a [u8]> {
        if let Some(raw) = self.raw
            && raw.is_valid(i)
        {
            return Some(raw.value(i));
        }
        match self.text {
            Some(t) if t.is_valid(i) => Some(t.value(i)),
            _ => None,
        }
    }
}

pub(super) fn bin_col<'a>(b: &'a RecordBatch, name: &str) -> &'a BinaryArray {
    b.column_by_name(name)
        .expect("projected column")
        .as_binary::<i32>()
}

pub(super) fn prim<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> &'a T {
    b.column_by_name(name)
        .expect("projected column")
        .as_any()
        .downcast_ref::<T>()
        .expect("column type checked at open")
}

/// The classifier's view of row `i` of a batch: columns read only when asked.
pub(super) struct ColFields<'a> {
    pub(super) i: usize,
    pub(super) syscall: &'a BinaryArray,
    pub(super) flags: &'a UInt32Array,
    pub(super) prot: &'a UInt32Array,
    pub(super) bytes_read: &'a UInt64Array,
    pub(super) bytes_written: &'a UInt64Array,
}

impl RowFields for ColFields<'_> {
    fn syscall(&self) -> Option<Syscall> {
        let i = self.i;
        self.syscall
            .is_valid(i)
            .then(|| Syscall::from_name(self.syscall.value(i)))
            .flatten()
    }

    fn flags(&self) -> Option<u32> {
        self.flags
            .is_valid(self.i)
            .then(|| self.flags.value(self.i))
    }

    fn prot(&self) -> Option<u32> {
        self.prot.is_valid(self.i).then(|| self.prot.value(self.i))
    }

    fn bytes(&self) -> (u64, u64) {
        let v = |a: &UInt64Array| {
            if a.is_valid(self.i) {
                a.value(self.i)
            } else {
                0
            }
        };
        (v(self.bytes_read), v(self.bytes_written))
    }
}

/// One row of a batch as the audit judges it: its batch and index, its process, its kind,
/// whether it succeeded, the file it recorded by identity, and the path being judged (none,
/// the row's first path or its second: [`RowRef::at_path`], [`RowRef::at_second`]).
#[derive(Clone, Copy)]
pub(super) struct RowRef<'a> {
    pub(super) c: &'a BatchCols<'a>,
    pub(super) i: usize,
    pub(super) pid: u32,
    /// `None` for a kind this aet does not know.
    pub(super) kind: Option<EventKind>,
    pub(super) ok: bool,
    /// The file's `(dev, ino)` as the row recorded it.
    pub(super) file: Option<(u64, u64)>,
    pub(super) resolved: Option<&'a [u8]>,
    pub(super) raw: Option<&'a [u8]>,
    pub(super) host: Option<&'a [u8]>,
    pub(super) reached: Option<Reached>,
    /// Bytes moved through an fd the command was started with (the launcher's channel, as
    /// `aet run ... > FILE` makes it): its writes are not judged by `[allow] write`.
    pub(super) channel: bool,
}

impl<'a> RowRef<'a> {
    /// The row's program hash (`sha256`), when it has one.
    pub(super) fn sha256(&self) -> Option<&'a [u8]> {
        self.c
            .sha256
            .is_valid(self.i)
            .then(|| self.c.sha256.value(self.i))
    }

    /// Row `i` of `c`, made by process `pid`: no path chosen, no file, not known how it was
    /// reached.
    pub(super) fn new(
        c: &'a BatchCols<'a>,
        i: usize,
        pid: u32,
        kind: Option<EventKind>,
        ok: bool,
    ) -> Self {
        Self {
            c,
            i,
            pid,
            kind,
            ok,
            file: None,
            resolved: None,
            raw: None,
            host: None,
            reached: None,
            channel: false,
        }
    }

    /// The row judged at its first path: as the kernel resolved it and as the process passed
    /// it.
    pub(super) fn at_path(self) -> Self {
        Self {
            resolved: self.c.resolved.get(self.i),
            raw: self.c.path.get(self.i),
            host: None,
            ..self
        }
    }

    /// The row judged at its second path (a rename's or a link's target, a mount point).
    pub(super) fn at_second(self) -> Self {
        Self {
            resolved: self.c.resolved2.get(self.i),
            raw: self.c.path2.get(self.i),
            host: None,
            ..self
        }
    }

    /// When the row was recorded.
    #[inline]
    pub(super) fn ts(&self) -> i64 {
        self.c.ts.value(self.i)
    }

    /// The classifier's view of the row.
    pub(super) fn fields(&self) -> ColFields<'a> {
        let c = self.c;
        ColFields {
            i: self.i,
            syscall: c.syscall,
            flags: c.flags,
            prot: c.prot,
            bytes_read: c.bytes_read,
            bytes_written: c.bytes_written,
        }
    }
}

/// An exec's arguments joined with spaces, as its bytes.
pub(super) fn argv_line(list: &ListArray, i: usize) -> Option<Vec<u8>> {
    if !list.is_valid(i) {
        return None;
    }
    let items = list.values().as_binary::<i32>();
    let range = list.value_offsets()[i] as usize..list.value_offsets()[i + 1] as usize;
    let mut line = Vec::new();
    for (n, k) in range.enumerate() {
        if n > 0 {
            line.push(b' ');
        }
        line.extend_from_slice(items.value(k));
    }
    Some(line)
}

pub(super) fn argv_at(list: &ListArray, i: usize) -> Option<Vec<String>> {
    if !list.is_valid(i) {
        return None;
    }
    // The child's values by the list's offsets (no sliced array per row).
    let items = list.values().as_binary::<i32>();
    let range = list.value_offsets()[i] as usize..list.value_offsets()[i + 1] as usize;
    Some(range.map(|k| lossy(items.value(k))).collect())
}

/// The columns of one batch the scan reads.
pub(super) struct BatchCols<'a> {
    pub(super) kind: &'a BinaryArray,
    pub(super) syscall: &'a BinaryArray,
    pub(super) pid: &'a UInt32Array,
    pub(super) ppid: &'a UInt32Array,
    pub(super) comm: &'a BinaryArray,
    pub(super) ts: &'a Int64Array,
    pub(super) path: Bytes<'a>,
    pub(super) resolved: Bytes<'a>,
    pub(super) host: Bytes<'a>,
    pub(super) path2: Bytes<'a>,
    pub(super) resolved2: Bytes<'a>,
    pub(super) flags: &'a UInt32Array,
    pub(super) prot: &'a UInt32Array,
    pub(super) ret: &'a Int64Array,
    pub(super) errno: &'a BinaryArray,
    pub(super) seq: &'a UInt64Array,
    pub(super) uid: &'a UInt32Array,
    pub(super) argv: &'a ListArray,
    pub(super) child: &'a UInt32Array,
    pub(super) dev: &'a UInt64Array,
    pub(super) ino: &'a UInt64Array,
    pub(super) bytes_read: &'a UInt64Array,
    pub(super) bytes_written: &'a UInt64Array,
    pub(super) fdc: &'a Int32Array,
    pub(super) fd_origin: &'a BinaryArray,
    pub(super) target: &'a UInt32Array,
    pub(super) target_in: &'a BooleanArray,
    pub(super) preq: &'a UInt32Array,
    pub(super) net_family: &'a BinaryArray,
    pub(super) net_address: Bytes<'a>,
    pub(super) net_port: &'a UInt32Array,
    pub(super) phase: &'a BinaryArray,
    /// The host name of `dns` and `net` rows (`host_path` is `host`).
    pub(super) host_name: Bytes<'a>,
    pub(super) dns_rcode: &'a BinaryArray,
    pub(super) net_decision: &'a BinaryArray,
    pub(super) host_source: &'a BinaryArray,
    pub(super) capture: &'a UInt32Array,
    /// A program row's hash, and why it could not be taken.
    pub(super) sha256: &'a BinaryArray,
    pub(super) sha256_error: &'a BinaryArray,
}

impl<'a> BatchCols<'a> {
    pub(super) fn new(b: &'a RecordBatch) -> Self {
        Self {
            kind: bin_col(b, col::KIND),
            syscall: bin_col(b, col::SYSCALL),
            pid: prim::<UInt32Array>(b, col::PID),
            ppid: prim::<UInt32Array>(b, col::PPID),
            comm: bin_col(b, col::COMM),
            ts: prim::<Int64Array>(b, col::TS_NS),
            path: Bytes::new(b, col::PATH, col::PATH_RAW),
            resolved: Bytes::new(b, col::RESOLVED_PATH, col::RESOLVED_PATH_RAW),
            host: Bytes::new(b, col::HOST_PATH, col::HOST_PATH_RAW),
            path2: Bytes::new(b, col::PATH2, col::PATH2_RAW),
            resolved2: Bytes::new(b, col::RESOLVED_PATH2, col::RESOLVED_PATH2_RAW),
            flags: prim::<UInt32Array>(b, col::FLAGS),
            prot: prim::<UInt32Array>(b, col::PROT),
            ret: prim::<Int64Array>(b, col::RET),
            errno: bin_col(b, col::ERRNO),
            seq: prim::<UInt64Array>(b, col::SEQ),
            uid: prim::<UInt32Array>(b, col::UID),
            argv: b
                .column_by_name(col::ARGV)
                .expect("projected column")
                .as_list::<i32>(),
            child: prim::<UInt32Array>(b, col::CHILD_PID),
            dev: prim::<UInt64Array>(b, col::DEV),
            ino: prim::<UInt64Array>(b, col::INO),
            bytes_read: prim::<UInt64Array>(b, col::BYTES_READ),
            bytes_written: prim::<UInt64Array>(b, col::BYTES_WRITTEN),
            fdc: prim::<Int32Array>(b, col::FD),
            fd_origin: bin_col(b, col::FD_ORIGIN),
            target: prim::<UInt32Array>(b, col::TARGET_PID),
            target_in: prim::<BooleanArray>(b, col::TARGET_IN_RUN),
            preq: prim::<UInt32Array>(b, col::PTRACE_REQUEST),
            net_family: bin_col(b, col::NET_FAMILY),
            net_address: Bytes::new(b, col::NET_ADDRESS, col::NET_ADDRESS_RAW),
            net_port: prim::<UInt32Array>(b, col::NET_PORT),
            phase: bin_col(b, col::PHASE),
            host_name: Bytes::new(b, col::HOST, col::HOST_RAW),
            dns_rcode: bin_col(b, col::DNS_RCODE),
            net_decision: bin_col(b, col::NET_DECISION),
            host_source: bin_col(b, col::HOST_SOURCE),
            capture: prim::<UInt32Array>(b, col::CAPTURE),
            sha256: bin_col(b, col::SHA256),
            sha256_error: bin_col(b, col::SHA256_ERROR),
        }
    }

    /// Row `i`'s phase (`agent` in a ledger from before phases).
    #[inline]
    pub(super) fn phase(&self, i: usize) -> &'a [u8] {
        if self.phase.is_valid(i) {
            self.phase.value(i)
        } else {
            aet_ledger::metadata::FIRST_PHASE.as_bytes()
        }
    }
}

/// Bytes as text: as they are when UTF-8, else with replacement characters.
pub fn lossy(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(b).into_owned(),
    }
}
