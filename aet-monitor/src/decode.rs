//! Decoding of the records the eBPF programs send: a fixed [`EventHeader`] followed by the
//! sections it announces (path, second path, argv, walk, second walk). A record that does not
//! parse is an error the consumer counts as a lost event; it is never guessed at.

use aet_common::{EventHeader, EventKind, HEADER_SIZE, Syscall, section};

/// A decoded record, borrowing its variable parts from the ring buffer.
#[derive(Clone, Copy, Debug)]
pub struct RawEvent<'a> {
    pub header: EventHeader,
    pub kind: EventKind,
    pub syscall: Syscall,
    /// The path argument exactly as captured (no NUL).
    pub path: &'a [u8],
    /// The second path argument.
    pub path2: &'a [u8],
    /// The argument vector, NUL-separated (a trailing NUL may be present).
    pub argv: &'a [u8],
    /// The kernel walk of the object or of the first path's base directory: components leaf
    /// first, each followed by `/`.
    pub walk: &'a [u8],
    /// The kernel walk of the second path's base directory.
    pub walk2: &'a [u8],
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
    let syscall = u8::try_from(header.syscall)
        .ok()
        .and_then(Syscall::from_u8)
        .ok_or(DecodeError::Syscall(header.syscall))?;
    let data = &bytes[HEADER_SIZE..];
    let total: usize = header.len.iter().map(|&l| l as usize).sum();
    if total > data.len() {
        return Err(DecodeError::Length {
            announced: total,
            actual: data.len(),
        });
    }
    let mut parts = [&data[..0]; section::COUNT];
    let mut at = 0;
    for (i, part) in parts.iter_mut().enumerate() {
        let l = header.len[i] as usize;
        *part = &data[at..at + l];
        at += l;
    }
    Ok(RawEvent {
        header,
        kind,
        syscall,
        path: parts[section::PATH],
        path2: parts[section::PATH2],
        argv: parts[section::ARGV],
        walk: parts[section::WALK],
        walk2: parts[section::WALK2],
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a record as the kernel would.
    pub(crate) fn record(kind: EventKind, syscall: Syscall, path: &[u8], argv: &[u8]) -> Vec<u8> {
        record_with(kind, syscall, &[path, b"", argv, b"", b""], |_| {})
    }

    /// Builds a record with all its sections, letting the caller adjust the header.
    pub(crate) fn record_with(
        kind: EventKind,
        syscall: Syscall,
        sections: &[&[u8]; section::COUNT],
        edit: impl FnOnce(&mut EventHeader),
    ) -> Vec<u8> {
        // SAFETY: EventHeader is plain data; all-zero is valid.
        let mut h: EventHeader = unsafe { std::mem::zeroed() };
        h.kind = kind as u16;
        h.syscall = syscall as u16;
        h.ts_ns = 5;
        h.cgroup_id = 9;
        h.ret = 3;
        h.pid = 10;
        h.tid = 11;
        h.uid = 1000;
        h.gid = 1000;
        h.dirfd = -100;
        h.dirfd2 = -100;
        h.fd = -1;
        h.comm = *b"cat\0\0\0\0\0\0\0\0\0\0\0\0\0";
        edit(&mut h);
        for (i, s) in sections.iter().enumerate() {
            h.len[i] = s.len() as u16;
        }
        let mut v = vec![0u8; HEADER_SIZE];
        // SAFETY: v has HEADER_SIZE bytes.
        unsafe { std::ptr::write_unaligned(v.as_mut_ptr().cast(), h) };
        for s in sections {
            v.extend_from_slice(s);
        }
        v
    }

    #[test]
    fn round_trip_keeps_bytes_exactly() {
        let path = b"/tmp/a\nb\xff";
        let rec = record_with(
            EventKind::Open,
            Syscall::Openat,
            &[path, b"", b"", b"b\xff/a\n/tmp/", b""],
            |_| {},
        );
        let ev = decode(&rec).unwrap();
        assert_eq!(ev.path, path);
        assert_eq!(ev.walk, b"b\xff/a\n/tmp/");
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
}
