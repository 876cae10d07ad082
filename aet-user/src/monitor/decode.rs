//! Decoding of the records the eBPF programs send: a fixed [`EventHeader`] followed by the path
//! and argument bytes it announces. A record that does not parse is an error the consumer counts
//! as a lost event; it is never guessed at.

use aet_common::{EventHeader, EventKind, HEADER_SIZE, Syscall};

/// A decoded record, borrowing its variable parts from the ring buffer.
#[derive(Clone, Copy, Debug)]
pub struct RawEvent<'a> {
    pub header: EventHeader,
    pub kind: EventKind,
    pub syscall: Syscall,
    /// The path bytes exactly as captured (no NUL).
    pub path: &'a [u8],
    /// The argument vector, NUL-separated (a trailing NUL may be present).
    pub argv: &'a [u8],
}

/// Why a record could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than a header.
    #[error("record of {0} bytes is shorter than the {HEADER_SIZE}-byte header")]
    Short(usize),
    /// The header announces more bytes than the record has.
    #[error("record announces {announced} bytes of data but carries {actual}")]
    Length { announced: usize, actual: usize },
    /// Unknown event kind.
    #[error("unknown event kind {0}")]
    Kind(u16),
    /// Unknown syscall number.
    #[error("unknown syscall number {0}")]
    Syscall(u16),
}

/// Decodes one record.
pub fn decode(bytes: &[u8]) -> Result<RawEvent<'_>, DecodeError> {
    if bytes.len() < HEADER_SIZE {
        return Err(DecodeError::Short(bytes.len()));
    }
    // SAFETY: at least HEADER_SIZE bytes; EventHeader is plain data valid for any bits; the read
    // is unaligned-safe.
    let header: EventHeader = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
    let kind = EventKind::from_u16(header.kind).ok_or(DecodeError::Kind(header.kind))?;
    let syscall = Syscall::from_u16(header.syscall).ok_or(DecodeError::Syscall(header.syscall))?;
    let path_len = header.path_len as usize;
    let argv_len = header.argv_len as usize;
    let data = &bytes[HEADER_SIZE..];
    if path_len + argv_len > data.len() {
        return Err(DecodeError::Length {
            announced: path_len + argv_len,
            actual: data.len(),
        });
    }
    Ok(RawEvent {
        header,
        kind,
        syscall,
        path: &data[..path_len],
        argv: &data[path_len..path_len + argv_len],
    })
}

/// Splits a NUL-separated argument vector into arguments (a trailing NUL ends the last one).
pub fn split_argv(argv: &[u8]) -> impl Iterator<Item = &[u8]> {
    let trimmed = argv.strip_suffix(&[0]).unwrap_or(argv);
    trimmed
        .split(|&b| b == 0)
        .filter(move |_| !trimmed.is_empty())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a record as the kernel would.
    pub(crate) fn record(kind: EventKind, syscall: Syscall, path: &[u8], argv: &[u8]) -> Vec<u8> {
        record_with(kind, syscall, path, argv, |_| {})
    }

    /// Builds a record, letting the caller adjust the header.
    pub(crate) fn record_with(
        kind: EventKind,
        syscall: Syscall,
        path: &[u8],
        argv: &[u8],
        edit: impl FnOnce(&mut EventHeader),
    ) -> Vec<u8> {
        let mut h = EventHeader {
            kind: kind as u16,
            syscall: syscall as u16,
            flags: 0,
            ts_ns: 5,
            cgroup_id: 9,
            ret: 3,
            aux: 0,
            pid: 10,
            tid: 11,
            ppid: 1,
            uid: 1000,
            gid: 1000,
            dirfd: -100,
            open_flags: 0,
            mode: 0,
            path_len: path.len() as u32,
            argv_len: argv.len() as u32,
            comm: *b"cat\0\0\0\0\0\0\0\0\0\0\0\0\0",
        };
        edit(&mut h);
        h.path_len = path.len() as u32;
        h.argv_len = argv.len() as u32;
        let mut v = vec![0u8; HEADER_SIZE];
        // SAFETY: v has HEADER_SIZE bytes.
        unsafe { std::ptr::write_unaligned(v.as_mut_ptr().cast(), h) };
        v.extend_from_slice(path);
        v.extend_from_slice(argv);
        v
    }

    #[test]
    fn round_trip_keeps_bytes_exactly() {
        let path = b"/tmp/a\nb\xff";
        let rec = record(EventKind::Open, Syscall::Openat, path, b"");
        let ev = decode(&rec).unwrap();
        assert_eq!(ev.path, path);
        assert_eq!(ev.kind, EventKind::Open);
        assert_eq!(ev.syscall, Syscall::Openat);
        assert_eq!(ev.header.pid, 10);
    }

    #[test]
    fn short_and_overlong_records_are_errors() {
        assert_eq!(decode(&[0; 10]).unwrap_err(), DecodeError::Short(10));
        let mut rec = record(EventKind::Open, Syscall::Openat, b"/x", b"");
        rec.truncate(HEADER_SIZE + 1);
        assert!(matches!(decode(&rec), Err(DecodeError::Length { .. })));
        let mut rec = record(EventKind::Open, Syscall::Openat, b"/x", b"");
        rec[0] = 99;
        assert_eq!(decode(&rec).unwrap_err(), DecodeError::Kind(99));
    }

    #[test]
    fn argv_splits_on_nul() {
        let args: Vec<&[u8]> = split_argv(b"sh\0-c\0echo hi\0").collect();
        assert_eq!(args, vec![&b"sh"[..], b"-c", b"echo hi"]);
        assert_eq!(split_argv(b"").count(), 0);
        let args: Vec<&[u8]> = split_argv(b"a\0\0b").collect();
        assert_eq!(args, vec![&b"a"[..], b"", b"b"]);
    }
}
