//! The consumer's benchmark: records dumped by a real run (`AET_DEBUG_RECORD_DUMP`), fed back
//! through the same consumer into a fresh ledger (`aet __replay`), so that its cost per record is
//! measured without the kernel.

use std::{
    collections::HashMap,
    path::Path,
    time::{Duration, Instant},
};

use aet_common::HEADER_SIZE;

use super::{
    MonitorError,
    overload::{Freezer, OnOverload},
    source::EventSource,
};
use crate::loader::Scope;
use crate::rows::RowMaker;
use aet_ledger::{util::WallClock, writer::LedgerWriter};

use super::consumer::{Progress, RunAccounting, Shared, Sink, consume};

/// A source whose records are also written to a file (see [`DUMP_ENV`]).
pub(super) struct Dump<S> {
    pub(super) inner: S,
    pub(super) out: std::io::BufWriter<std::fs::File>,
}

impl<S: EventSource> EventSource for Dump<S> {
    fn drain(&mut self, f: &mut dyn FnMut(&[u8])) -> bool {
        use std::io::Write as _;
        let out = &mut self.out;
        let emptied = self.inner.drain(&mut |bytes| {
            let _ = out.write_all(&(bytes.len() as u32).to_ne_bytes());
            let _ = out.write_all(bytes);
            f(bytes)
        });
        let _ = out.flush();
        emptied
    }
}

/// What the consumer's replay measured.
#[derive(Debug)]
pub struct Replay {
    pub records: u64,
    pub rows: u64,
    /// CPU time of the consuming thread, finishing the ledger included.
    pub cpu: Duration,
    /// Of which finishing the ledger (its footer and hash chain), after the last record.
    pub finish_cpu: Duration,
    pub wall: Duration,
}

/// Feeds the records of a dump (see [`DUMP_ENV`]) through the consumer into a new ledger at
/// `ledger`, as one run: decoding, rows, Arrow building and writing, on this thread.
pub fn replay(dump: &Path, ledger: &Path) -> Result<Replay, MonitorError> {
    let mut bytes = std::fs::read(dump).map_err(MonitorError::Thread)?;
    // Records in place (no copy per record, as the ring hands them out), each given to the one
    // run replayed.
    let mut records = Vec::new();
    let mut at = 0;
    while at + 4 <= bytes.len() {
        let n = u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        if at + 4 + n > bytes.len() {
            break;
        }
        if n >= HEADER_SIZE {
            let o = at + 4 + std::mem::offset_of!(aet_common::EventHeader, run);
            bytes[o..o + 4].copy_from_slice(&0u32.to_ne_bytes());
        }
        records.push((at + 4, n));
        at += 4 + n;
    }
    struct Slices {
        bytes: Vec<u8>,
        records: Vec<(usize, usize)>,
        next: usize,
    }
    impl EventSource for Slices {
        fn drain(&mut self, f: &mut dyn FnMut(&[u8])) -> bool {
            for _ in 0..super::source::MAX_DRAIN {
                let Some(&(at, n)) = self.records.get(self.next) else {
                    return true;
                };
                self.next += 1;
                f(&self.bytes[at..at + n]);
            }
            false
        }
    }
    let n = records.len() as u64;
    let sink = Sink {
        maker: RowMaker::new(WallClock::now()),
        writer: LedgerWriter::create(ledger, HashMap::new())?,
        scope: Scope::Pid(1),
        consumed: 0,
        told: 0,
        quota: u64::MAX,
        decode_errors: 0,
        error: None,
        progress: Progress::default(),
        started_ns: 0,
        freezer: Freezer::new(OnOverload::Drop, &Scope::Pid(1), None, 0),
    };
    let shared = Shared::new(HashMap::from([(0, sink)]), true);
    struct Nothing;
    impl RunAccounting for Nothing {
        fn tell(&mut self, _: u32, _: u64, _: u64) {}
        fn produced(&mut self, _: u32) -> Option<u64> {
            None
        }
    }
    let cpu = || {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the struct it is given.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    };
    let (c0, w0) = (cpu(), Instant::now());
    consume(
        Slices {
            bytes,
            records,
            next: 0,
        },
        &shared,
        (Duration::ZERO, Duration::ZERO),
        &mut Nothing,
    );
    let mut sinks = shared.sinks.into_inner();
    let mut sink = sinks.remove(&0).expect("the replayed run");
    for row in sink.maker.unanswered() {
        sink.append(&row);
    }
    if let Some(e) = sink.error {
        return Err(e.into());
    }
    let rows = sink.writer.rows();
    let c1 = cpu();
    sink.writer.finish(HashMap::new())?;
    let c2 = cpu();
    Ok(Replay {
        records: n,
        rows,
        cpu: c2 - c0,
        finish_cpu: c2 - c1,
        wall: w0.elapsed(),
    })
}
