//! The consumer: one thread that reads the ring buffer, makes each record its run's row, and
//! writes it to that run's ledger; it tells the kernel side what each run has consumed, and
//! freezes a run that outpaces it (when the run asked for that).
//!
//! It never blocks the traced processes and never drops a record it has read: a record that does
//! not decode is counted as lost, for its run when the header names one, else for every run
//! being served.

use std::{
    collections::HashMap,
    sync::{
        Arc, Condvar, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use aet_common::{EventKind, HEADER_SIZE, runs};

use super::{FLUSH_INTERVAL, IDLE_POLL, decode, overload::Freezer, source::EventSource};
use crate::loader::{Programs, Scope};
use crate::rows::RowMaker;
use serde::{Deserialize, Serialize};

use aet_ledger::{
    access::{Access, RowFields, classify},
    writer::{LedgerWriter, Row, WriteError},
};

/// What a run has recorded so far, for a live status line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Rows written.
    pub events: u64,
    /// Events lost so far (kernel side, and undecodable records).
    pub lost: u64,
    /// Successful opens for reading, and for writing.
    pub reads: u64,
    pub writes: u64,
    /// Successful execs.
    pub execs: u64,
}

/// Where one run's records go.
pub(super) struct Sink {
    pub(super) maker: RowMaker,
    pub(super) writer: LedgerWriter,
    pub(super) scope: Scope,
    /// Ring bytes of this run's records read so far (see `runs::ring_cost`).
    pub(super) consumed: u64,
    /// What the kernel was last told.
    pub(super) told: u64,
    pub(super) quota: u64,
    pub(super) decode_errors: u64,
    pub(super) error: Option<WriteError>,
    pub(super) progress: Progress,
    pub(super) started_ns: i64,
    pub(super) freezer: Freezer,
}

impl Sink {
    pub(super) fn append(&mut self, row: &Row<'_>) {
        if self.error.is_some() {
            return;
        }
        if let Some(kind) = EventKind::from_name(row.kind.as_bytes())
            && row.ret.is_none_or(|r| r >= 0)
        {
            match kind {
                EventKind::Open => {
                    let a = classify(kind, &OpenFlags(row.flags)).first;
                    self.progress.reads += u64::from(a.contains(Access::Read));
                    self.progress.writes += u64::from(a.contains(Access::Write));
                }
                EventKind::Exec => self.progress.execs += 1,
                _ => {}
            }
        }
        self.progress.events += 1;
        if let Err(e) = self.writer.append(row) {
            self.error = Some(e);
        }
    }
}

/// The classifier's view of an open row being written.
pub(super) struct OpenFlags(Option<u32>);

impl RowFields for OpenFlags {
    fn syscall(&self) -> Option<aet_common::Syscall> {
        None
    }
    fn flags(&self) -> Option<u32> {
        self.0
    }
    fn prot(&self) -> Option<u32> {
        None
    }
    fn bytes(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// What the monitor's threads (its consumer, and the callers of [`super::Monitor`]) share.
pub(super) struct Shared {
    /// The runs' sinks. A fair lock: the consumer, which holds it while it drains, hands it to
    /// a waiting request (a run's health check, start, stop) between two records; a drain of a
    /// backlog held it for 10 s under load on 7.2, and every run's health check gave up.
    pub(super) sinks: parking_lot::Mutex<HashMap<u32, Sink>>,
    /// Moves whenever the consumer has routed records: a drain wait gives up only when it
    /// stops moving.
    pub(super) routed: AtomicU64,
    pub(super) stop: AtomicBool,
    /// Passes of the consumer that ended with the ring empty.
    pub(super) emptied: Mutex<u64>,
    pub(super) emptied_cv: Condvar,
    /// Set by a drain wait to wake the consumer from its idle wait.
    pub(super) wake: Mutex<bool>,
    pub(super) wake_cv: Condvar,
    /// The consumer thread has ended (on its own, by a bug or a failure).
    pub(super) consumer_done: AtomicBool,
}

impl Shared {
    /// The state shared with a consumer serving `sinks`; `stop`: the consumer ends once the
    /// source is empty (a replay, a test).
    pub(super) fn new(sinks: HashMap<u32, Sink>, stop: bool) -> Self {
        Self {
            sinks: parking_lot::Mutex::new(sinks),
            routed: AtomicU64::new(0),
            stop: AtomicBool::new(stop),
            emptied: Mutex::new(0),
            emptied_cv: Condvar::new(),
            wake: Mutex::new(false),
            wake_cv: Condvar::new(),
            consumer_done: AtomicBool::new(false),
        }
    }

    pub(super) fn lock_sinks(&self) -> parking_lot::MutexGuard<'_, HashMap<u32, Sink>> {
        self.sinks.lock()
    }

    /// Waits until the consumer has emptied the ring after now: every record the programs made
    /// before this call has then been routed. `false` when the consumer ended, routed nothing
    /// for `timeout` (a consumer working through a backlog is waited for), or never found the
    /// ring empty within [`DRAIN_MOST`] (other runs filling it as fast as it is read).
    pub(super) fn drain_wait(&self, timeout: Duration) -> bool {
        let most = Instant::now() + DRAIN_MOST;
        let mut deadline = Instant::now() + timeout;
        let mut routed = self.routed.load(Ordering::Acquire);
        let mut n = self.emptied.lock().unwrap_or_else(|p| p.into_inner());
        // Two passes: the one running now may have started before the call.
        let want = *n + 2;
        while *n < want {
            self.wake_consumer();
            if self.consumer_done.load(Ordering::Acquire) {
                return false;
            }
            let now_routed = self.routed.load(Ordering::Acquire);
            if now_routed != routed {
                routed = now_routed;
                deadline = Instant::now() + timeout;
            }
            let left = deadline.min(most).saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            n = self
                .emptied_cv
                .wait_timeout(n, left.min(Duration::from_millis(50)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// Ends the consumer's idle wait now.
    pub(super) fn wake_consumer(&self) {
        *self.wake.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.wake_cv.notify_all();
    }

    /// The consumer's wait when the ring is empty: [`IDLE_POLL`], or less when a drain wait wakes it.
    pub(super) fn idle(&self) {
        let mut w = self.wake.lock().unwrap_or_else(|p| p.into_inner());
        if !*w {
            w = self
                .wake_cv
                .wait_timeout(w, IDLE_POLL)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *w = false;
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The run slot a record's header names, if the record is long enough to have one.
fn slot_of(bytes: &[u8]) -> Option<u32> {
    let at = std::mem::offset_of!(aet_common::EventHeader, run);
    (bytes.len() >= HEADER_SIZE)
        .then(|| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes")))
}

/// A fault-injection setting of the environment (`var`, a number in `unit`), said aloud when set.
pub(super) fn debug_duration(var: &str, unit: fn(u64) -> Duration, what: &str) -> Duration {
    let d = std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .map(unit)
        .unwrap_or_default();
    if !d.is_zero() {
        eprintln!("aet: warning: {var} is set: {what} ({d:?}; fault injection for tests)");
    }
    d
}

/// What the consumer asks of the kernel side about each run.
pub(super) trait RunAccounting {
    /// Tells the programs how much of the run's records was read.
    fn tell(&mut self, slot: u32, consumed: u64, quota: u64);
    /// What the programs have put in the ring for the run, in ring bytes.
    fn produced(&mut self, slot: u32) -> Option<u64>;
}

/// The programs' maps.
pub(super) struct KernelSide(pub(super) Arc<Mutex<Programs>>);

impl RunAccounting for KernelSide {
    fn tell(&mut self, slot: u32, consumed: u64, quota: u64) {
        let _ = lock(&self.0).set_consumed(slot, consumed, quota);
    }
    fn produced(&mut self, slot: u32) -> Option<u64> {
        lock(&self.0).produced(slot).ok()
    }
}

/// The consumer thread's nice value.
pub(super) const CONSUMER_NICE: libc::c_int = -10;

/// Records between two updates of what the kernel knows was read of each run, and two looks at
/// the runs that may be frozen (each a map access per run): often enough that a run's share of
/// the ring frees up as it is read (telling it once per drain, up to 64 Ki records, made the
/// kernel drop records of a ring userspace had mostly read) and that a run is frozen well
/// before its share is full.
pub(super) const ACCOUNT_EVERY: usize = 256;

/// The longest a drain wait lasts, progress or not: a stop answers well within a client's
/// limit (60 s), its run incomplete (`consumer_stopped`) rather than its client gone.
const DRAIN_MOST: Duration = Duration::from_secs(40);

/// How long [`ACCOUNT_EVERY`] records may take the consumer before the monitor says so.
const SLOW_RECORDS: Duration = Duration::from_secs(2);

/// Says so when the last [`ACCOUNT_EVERY`] records took [`SLOW_RECORDS`] or more: the runs'
/// requests wait for the record being made, and a stop for the ring to be read.
fn slow_records(since: Instant) {
    if since.elapsed() >= SLOW_RECORDS {
        eprintln!(
            "aet: the consumer took {:.1} s over {ACCOUNT_EVERY} records",
            since.elapsed().as_secs_f64()
        );
    }
}

/// Flushes every ledger's rows so far to its file.
fn flush_all(sinks: &mut HashMap<u32, Sink>) {
    for sink in sinks.values_mut() {
        if sink.error.is_none()
            && let Err(e) = sink.writer.flush()
        {
            sink.error = Some(e);
        }
    }
}

/// Tells the kernel what was read of each run, so its share frees up.
fn tell_consumed(sinks: &mut HashMap<u32, Sink>, kernel: &mut dyn RunAccounting) {
    for (slot, sink) in sinks.iter_mut() {
        if sink.consumed != sink.told {
            kernel.tell(*slot, sink.consumed, sink.quota);
            sink.told = sink.consumed;
        }
    }
}

/// Freezes the runs whose unread records pass their high-water mark and thaws those read down
/// below their low-water mark.
fn check_freezers(sinks: &mut HashMap<u32, Sink>, kernel: &mut dyn RunAccounting) {
    for (slot, sink) in sinks.iter_mut() {
        if !sink.freezer.active() {
            continue;
        }
        if let Some(produced) = kernel.produced(*slot) {
            let unread = produced.saturating_sub(sink.consumed);
            sink.freezer.check(unread, sink.quota);
        }
    }
}

/// The consumer: drains the ring, routes records to their runs' sinks, tells the kernel what it
/// has read of each run, freezes the runs the record cannot keep up with (and thaws them), and
/// flushes every ledger at least every [`FLUSH_INTERVAL`].
pub(super) fn consume(
    mut source: impl EventSource,
    shared: &Shared,
    (stall, slow): (Duration, Duration),
    kernel: &mut dyn RunAccounting,
) {
    std::thread::sleep(stall);
    let mut last_flush = Instant::now();
    // Records since the kernel was last told what was read (counted across drains: when the
    // consumer keeps up, a drain hands out a record or two).
    let mut since = 0usize;
    loop {
        // Read the flag before draining: once it is set no producer is left, so an empty ring
        // after it was seen means everything has been read.
        let stopping = shared.stop.load(Ordering::Acquire);
        let mut n = 0usize;
        let emptied;
        {
            let mut chunk = Instant::now();
            let mut sinks = shared.lock_sinks();
            let mut any_freezer = sinks.values().any(|s| s.freezer.active());
            emptied = source.drain(&mut |bytes| {
                n += 1;
                since += 1;
                if since >= ACCOUNT_EVERY {
                    since = 0;
                    if !slow.is_zero() {
                        std::thread::sleep(slow);
                    }
                    tell_consumed(&mut sinks, kernel);
                    if any_freezer {
                        check_freezers(&mut sinks, kernel);
                    }
                    // A long drain still flushes on time (a killed aet leaves a readable ledger).
                    if last_flush.elapsed() >= FLUSH_INTERVAL {
                        flush_all(&mut sinks);
                        last_flush = Instant::now();
                    }
                    shared
                        .routed
                        .fetch_add(ACCOUNT_EVERY as u64, Ordering::Release);
                    any_freezer = sinks.values().any(|s| s.freezer.active());
                    slow_records(chunk);
                    chunk = Instant::now();
                }
                // A request waiting for the runs is let through between two records (a run may
                // have started or ended meanwhile: every record looks its run up); without a
                // waiter this is one atomic load, no clock read, no syscall. A record can take
                // milliseconds (a program's first hash): 256 of them held the runs for 3.7 s
                // under load on 7.2 when the lock was handed over only every 256.
                parking_lot::MutexGuard::bump(&mut sinks);
                let cost = runs::ring_cost(bytes.len() as u64);
                match decode::decode(bytes) {
                    // A record of a run no longer served (made as it ended) has no sink: its
                    // run's ledger is finished, and nothing else is its.
                    Ok(ev) => {
                        if let Some(sink) = sinks.get_mut(&ev.header.run) {
                            sink.consumed += cost;
                            if ev.kind == aet_common::EventKind::Payload {
                                for row in sink.maker.payload(&ev) {
                                    sink.append(&row);
                                }
                            } else {
                                let row = sink.maker.row(&ev);
                                sink.append(&row);
                            }
                        }
                    }
                    Err(_) => match slot_of(bytes).and_then(|s| sinks.get_mut(&s)) {
                        Some(sink) => {
                            sink.consumed += cost;
                            sink.decode_errors += 1;
                        }
                        // Whose it was is unknown: every run served may have lost it.
                        None => {
                            for sink in sinks.values_mut() {
                                sink.decode_errors += 1;
                            }
                        }
                    },
                }
            });
            if n > 0 {
                tell_consumed(&mut sinks, kernel);
            }
            // A frozen run is thawed once it is read down, even if nothing more comes (its
            // records stop while it is frozen); the others are looked at every ACCOUNT_EVERY
            // records above, not after every drain (a map read per drain slowed storms by a
            // fifth when the consumer kept up).
            if any_freezer && sinks.values().any(|s| s.freezer.frozen()) {
                check_freezers(&mut sinks, kernel);
            }
            if last_flush.elapsed() >= FLUSH_INTERVAL {
                flush_all(&mut sinks);
                last_flush = Instant::now();
            }
            parking_lot::MutexGuard::unlock_fair(sinks);
        }
        if n > 0 {
            shared.routed.fetch_add(1, Ordering::Release);
        }
        if emptied {
            let mut e = shared.emptied.lock().unwrap_or_else(|p| p.into_inner());
            *e += 1;
            shared.emptied_cv.notify_all();
        }
        if stopping && n == 0 {
            break;
        }
        if n == 0 {
            shared.idle();
        }
    }
}

#[cfg(test)]
mod tests {
    use aet_common::{Syscall, flags};

    use std::path::Path;

    use aet_ledger::util::WallClock;

    use super::*;
    use crate::{decode::tests::record_with, overload::OnOverload, source::VecSource};

    fn sink(path: &Path) -> Sink {
        Sink {
            maker: RowMaker::new(WallClock::with_offset(0)),
            writer: LedgerWriter::create(path, HashMap::new()).unwrap(),
            scope: Scope::Pid(1),
            consumed: 0,
            told: 0,
            quota: 1 << 20,
            decode_errors: 0,
            error: None,
            progress: Progress::default(),
            started_ns: 0,
            freezer: Freezer::new(OnOverload::Drop, &Scope::Pid(1), None, 0),
        }
    }

    /// The consumer's view of the kernel in tests: what it was told, and a fixed production.
    struct Recorded(Vec<(u32, u64)>);

    impl RunAccounting for Recorded {
        fn tell(&mut self, slot: u32, consumed: u64, _quota: u64) {
            self.0.push((slot, consumed));
        }
        fn produced(&mut self, _slot: u32) -> Option<u64> {
            None
        }
    }

    /// Records go to their run's ledger; a record that does not decode counts against its run
    /// when its header names one, and against every run when it does not.
    #[test]
    fn the_consumer_routes_records_to_their_runs() {
        let dir = tempfile::tempdir().unwrap();
        let open = |run: u32, path: &'static [u8]| {
            record_with(
                EventKind::Open,
                Syscall::Openat,
                &[path, b"", b"", b"", b""],
                move |h| {
                    h.run = run;
                    h.flags = flags::PPID_KERNEL;
                },
            )
        };
        let mut damaged = open(1, b"/damaged");
        damaged[0] = 99; // an unknown kind, but the run field is readable
        let source = VecSource {
            records: vec![
                open(0, b"/a"),
                open(1, b"/b"),
                open(0, b"/c"),
                damaged,
                vec![1, 2, 3],
                open(7, b"/nobody"),
            ]
            .into(),
        };
        let mut sinks = HashMap::new();
        sinks.insert(0, sink(&dir.path().join("0.arrow")));
        sinks.insert(1, sink(&dir.path().join("1.arrow")));
        let shared = Shared::new(sinks, true);
        let mut kernel = Recorded(Vec::new());
        consume(
            source,
            &shared,
            (Duration::ZERO, Duration::ZERO),
            &mut kernel,
        );
        let mut told = kernel.0;
        let mut sinks = shared.sinks.into_inner();
        let s0 = sinks.remove(&0).unwrap();
        let s1 = sinks.remove(&1).unwrap();
        assert_eq!((s0.writer.rows(), s1.writer.rows()), (2, 1));
        assert_eq!((s0.decode_errors, s1.decode_errors), (1, 2));
        assert_eq!(s0.progress.reads, 2);
        assert!(s0.consumed > 0 && s1.consumed > 0);
        // The kernel is told what was read of each run.
        told.sort();
        assert_eq!(told, [(0, s0.consumed), (1, s1.consumed)]);
    }
}
