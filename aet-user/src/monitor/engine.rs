//! The engine: the programs, loaded once, and one consumer thread that reads the shared ring
//! buffer and routes each record to its run's ledger. Runs come and go (up to
//! [`aet_common::runs::MAX_RUNS`]); each has its slot in the kernel's run maps, its share of the
//! ring buffer, its own counters and its own ledger, so a busy run can neither make another look
//! incomplete nor hide its own loss.
//!
//! The consumer never blocks the traced processes and never drops a record it has read: a record
//! that does not decode is counted as lost, for its run when the header names one, else for every
//! run being served.

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    sync::{
        Arc, Condvar, Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use aet_common::{EventKind, HEADER_SIZE, counter, runs};
use serde::{Deserialize, Serialize};

use super::{
    DUMP_ENV, FLUSH_INTERVAL, IDLE_POLL, MonitorError, MonitorReport, RowMaker, SLOW_ENV,
    STALL_ENV, decode,
    overload::{Freezer, OnOverload},
    source::{EventSource, RingSource},
};
use crate::loader::{Counters, LoadError, LoadOptions, Programs, Scope};
use aet_core::{
    access::{Access, RowFields, classify},
    ledger::{
        record::{Incomplete, MetaMap, Reasons},
        schema::meta,
        writer::{LedgerWriter, Row, WriteError},
    },
    util::{WallClock, now_ns},
};

/// How a run meets overload: what it asked for, and where its freezes are marked for the guard
/// that thaws them if aet dies.
#[derive(Clone, Debug, Default)]
pub struct Overload {
    pub on_overload: OnOverload,
    pub marker_dir: Option<std::path::PathBuf>,
}

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

/// One run being served: its slot, scope and ledger.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunStatus {
    pub slot: u32,
    pub scope: String,
    pub ledger: PathBuf,
    pub started_ns: i64,
    pub progress: Progress,
}

/// Where one run's records go.
struct Sink {
    maker: RowMaker,
    writer: LedgerWriter,
    scope: Scope,
    /// Ring bytes of this run's records read so far (see `runs::ring_cost`).
    consumed: u64,
    /// What the kernel was last told.
    told: u64,
    quota: u64,
    decode_errors: u64,
    error: Option<WriteError>,
    progress: Progress,
    started_ns: i64,
    freezer: Freezer,
}

impl Sink {
    fn append(&mut self, row: &Row<'_>) {
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
struct OpenFlags(Option<u32>);

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

/// What the engine's threads share.
struct Shared {
    sinks: Mutex<HashMap<u32, Sink>>,
    stop: AtomicBool,
    /// Passes of the consumer that ended with the ring empty.
    emptied: Mutex<u64>,
    emptied_cv: Condvar,
    /// Set by a barrier to wake the consumer from its idle wait.
    wake: Mutex<bool>,
    wake_cv: Condvar,
    /// The consumer thread has ended (on its own, by a bug or a failure).
    consumer_done: AtomicBool,
}

impl Shared {
    /// The state shared with a consumer serving `sinks`; `stop`: the consumer ends once the
    /// source is empty (a replay, a test).
    fn new(sinks: HashMap<u32, Sink>, stop: bool) -> Self {
        Self {
            sinks: Mutex::new(sinks),
            stop: AtomicBool::new(stop),
            emptied: Mutex::new(0),
            emptied_cv: Condvar::new(),
            wake: Mutex::new(false),
            wake_cv: Condvar::new(),
            consumer_done: AtomicBool::new(false),
        }
    }

    fn lock_sinks(&self) -> MutexGuard<'_, HashMap<u32, Sink>> {
        self.sinks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until the consumer has emptied the ring after now: every record the programs made
    /// before this call has then been routed.
    fn barrier(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut n = self.emptied.lock().unwrap_or_else(|p| p.into_inner());
        // Two passes: the one running now may have started before the call.
        let want = *n + 2;
        while *n < want {
            self.wake_consumer();
            if self.consumer_done.load(Ordering::Acquire) {
                return false;
            }
            let left = deadline.saturating_duration_since(Instant::now());
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
    fn wake_consumer(&self) {
        *self.wake.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.wake_cv.notify_all();
    }

    /// The consumer's wait when the ring is empty: [`IDLE_POLL`], or less when a barrier wakes it.
    fn idle(&self) {
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

/// The programs and the consumer: serves runs until dropped.
pub struct Engine {
    shared: Arc<Shared>,
    programs: Arc<Mutex<Programs>>,
    consumer: Mutex<Option<JoinHandle<()>>>,
    clock: WallClock,
}

impl Engine {
    /// Loads and attaches the programs and starts the consumer. No run is served yet.
    pub fn load(opts: &LoadOptions) -> Result<Self, MonitorError> {
        let clock = WallClock::now();
        let mut programs = Programs::load(opts)?;
        let ring = programs
            .take_events()
            .ok_or(LoadError::MissingMap("EVENTS"))?;
        let programs = Arc::new(Mutex::new(programs));
        let shared = Arc::new(Shared::new(HashMap::new(), false));
        let stall = debug_duration(STALL_ENV, Duration::from_millis, "the consumer starts late");
        let slow = debug_duration(
            SLOW_ENV,
            Duration::from_micros,
            "the consumer sleeps after every 256 records",
        );
        let s2 = shared.clone();
        let p2 = programs.clone();
        let consumer = std::thread::Builder::new()
            .name("aet-consumer".into())
            .spawn(move || {
                // The record comes before the run: when both want a CPU, the consumer gets it
                // (a consumer that waits for a CPU lets the ring fill; root may raise it).
                // SAFETY: plain syscalls on this thread.
                unsafe {
                    let tid = libc::gettid();
                    libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, CONSUMER_NICE);
                }
                let mut kernel = KernelSide(p2);
                let source = RingSource::new(ring);
                match std::env::var_os(DUMP_ENV).map(|p| std::fs::File::create(&p)) {
                    Some(Ok(f)) => {
                        let dump = Dump {
                            inner: source,
                            out: std::io::BufWriter::new(f),
                        };
                        consume(dump, &s2, (stall, slow), &mut kernel);
                    }
                    Some(Err(e)) => {
                        eprintln!("aet: warning: {DUMP_ENV}: {e}; not dumping");
                        consume(source, &s2, (stall, slow), &mut kernel);
                    }
                    None => consume(source, &s2, (stall, slow), &mut kernel),
                }
                s2.consumer_done.store(true, Ordering::Release);
                s2.emptied_cv.notify_all();
            })
            .map_err(MonitorError::Thread)?;
        Ok(Self {
            shared,
            programs,
            consumer: Mutex::new(Some(consumer)),
            clock,
        })
    }

    fn lock_programs(&self) -> MutexGuard<'_, Programs> {
        lock(&self.programs)
    }

    /// The ring buffer's size in bytes.
    pub fn ringbuf_bytes(&self) -> u32 {
        self.lock_programs().ringbuf_bytes()
    }

    /// Starts recording a run: creates its ledger at `ledger` (which must not exist) with `head`
    /// metadata and registers its scope with a share of the ring buffer of `quota` bytes.
    pub fn start_run(
        &self,
        scope: &Scope,
        ledger: &Path,
        mut head: MetaMap,
        quota: u64,
        overload: &Overload,
    ) -> Result<u32, MonitorError> {
        if self.consumer_failed() {
            return Err(MonitorError::ConsumerStopped);
        }
        let started_ns = now_ns();
        head.set(meta::STARTED_NS, started_ns)
            .set(meta::SCOPE, scope.mode())
            .set(meta::SCOPE_TARGET, scope.describe())
            .set(
                meta::KERNEL_RELEASE,
                crate::kernel::procfs::kernel_release(),
            )
            .set(meta::HOSTNAME, crate::kernel::procfs::hostname());
        let writer = LedgerWriter::create(ledger, head.into_inner())?;
        // The sinks are locked while the slot is registered, so the consumer cannot see a record
        // of the slot before its sink is there.
        let mut sinks = self.shared.lock_sinks();
        let slot = self.lock_programs().register(scope, quota)?;
        sinks.insert(
            slot,
            Sink {
                maker: RowMaker::new(self.clock).with_run_cgroup(match scope {
                    Scope::Cgroup { path, .. } => crate::kernel::cgroup::relative(path)
                        .ok()
                        .map(|(rel, _)| rel),
                    _ => None,
                }),
                writer,
                scope: scope.clone(),
                consumed: 0,
                told: 0,
                quota,
                decode_errors: 0,
                error: None,
                progress: Progress::default(),
                started_ns,
                freezer: Freezer::new(
                    overload.on_overload,
                    scope,
                    overload.marker_dir.as_deref(),
                    slot,
                ),
            },
        );
        Ok(slot)
    }

    /// Adds a task to a run's tracked set.
    pub fn track(&self, slot: u32, tid: u32) -> Result<(), MonitorError> {
        Ok(self.lock_programs().track(slot, tid)?)
    }

    /// Removes a task (gone) from the tracked set.
    pub fn untrack(&self, tid: u32) {
        self.lock_programs().untrack(tid);
    }

    /// The tasks of a run's tracked set.
    pub fn tracked(&self, slot: u32) -> Vec<u32> {
        self.lock_programs().tracked(slot)
    }

    /// What a run has recorded so far.
    pub fn progress(&self, slot: u32) -> Progress {
        let mut p = self
            .shared
            .lock_sinks()
            .get(&slot)
            .map(|s| s.progress)
            .unwrap_or_default();
        if let Ok(c) = self.lock_programs().counters(slot) {
            p.lost = c.lost();
        }
        p
    }

    /// Why a run's ledger can no longer be written, once it cannot (disk full, file made
    /// immutable): the run must stop, its record cannot be kept.
    pub fn write_error(&self, slot: u32) -> Option<String> {
        self.shared
            .lock_sinks()
            .get(&slot)
            .and_then(|s| s.error.as_ref().map(ToString::to_string))
    }

    /// The runs being served.
    pub fn runs(&self) -> Vec<RunStatus> {
        let mut v: Vec<RunStatus> = self
            .shared
            .lock_sinks()
            .iter()
            .map(|(slot, s)| RunStatus {
                slot: *slot,
                scope: s.scope.describe(),
                ledger: s.writer.path().to_owned(),
                started_ns: s.started_ns,
                progress: s.progress,
            })
            .collect();
        v.sort_by_key(|r| r.slot);
        v
    }

    /// Has the consumer thread ended?
    pub fn consumer_failed(&self) -> bool {
        self.shared.consumer_done.load(Ordering::Acquire)
    }

    /// Stops recording a run, reads every record of it left in the ring buffer, and finishes its
    /// ledger with `extra` metadata and the loss accounting. `reasons` are causes of
    /// incompleteness found by the caller. The ledger is finished whatever else fails here,
    /// unless writing it fails.
    pub fn stop_run(
        &self,
        slot: u32,
        extra: MetaMap,
        mut reasons: Reasons,
    ) -> Result<MonitorReport, MonitorError> {
        let tracked = self.lock_programs().tracked(slot);
        if let Err(e) = self.lock_programs().unregister(slot) {
            reasons.push(Incomplete::AetFailed {
                error: format!("the run's scope could not be removed: {e}"),
            });
        }
        // A program invocation that started before the scope went may still be writing: wait
        // until every one of them has returned (unless no task of the run is left to run one).
        if !self.quiescent(slot, &tracked) {
            crate::kernel::wait_for_running_programs();
        }
        if !self.shared.barrier(Duration::from_secs(10)) {
            reasons.push(Incomplete::ConsumerStopped);
        }
        let mut sink = self
            .shared
            .lock_sinks()
            .remove(&slot)
            .ok_or(MonitorError::NoRun(slot))?;
        sink.freezer.thaw();
        let counters = {
            let mut programs = self.lock_programs();
            let c = programs.counters(slot);
            let _ = programs.release(slot);
            c
        };
        let counters = match counters {
            Ok(c) => c,
            Err(e) => {
                reasons.push(Incomplete::AetFailed {
                    error: format!("the kernel's loss counters could not be read: {e}"),
                });
                Counters::default()
            }
        };
        finish(sink, counters, extra, reasons)
    }

    /// Whether no task of the run is left: its scope is a cgroup with no process in it or in
    /// its descendants, and every process it tracked outside it is gone. Every program
    /// invocation that records for a run runs in one of its tasks, and a task leaves its cgroup
    /// (in `cgroup_exit`) only after its last one: so none can still be writing.
    fn quiescent(&self, slot: u32, tracked: &[u32]) -> bool {
        let empty_cgroup = match self.shared.lock_sinks().get(&slot).map(|s| &s.scope) {
            Some(Scope::Cgroup { path, .. }) => {
                crate::kernel::cgroup::populated(path).is_ok_and(|p| !p)
            }
            _ => false,
        };
        empty_cgroup
            && tracked
                .iter()
                .all(|tid| !Path::new(&format!("/proc/{tid}")).exists())
    }

    /// Stops the consumer and detaches the programs (the runs still served are finished first,
    /// marked incomplete).
    pub fn shutdown(&self, why: &str) {
        let slots: Vec<u32> = self.shared.lock_sinks().keys().copied().collect();
        for slot in slots {
            let mut r = Reasons::new();
            r.push(Incomplete::AetFailed {
                error: why.to_owned(),
            });
            let _ = self.stop_run(slot, MetaMap::new(), r);
        }
        // Every run is finished: what the programs still write as they are detached has no
        // ledger to go to.
        self.lock_programs().detach();
        self.shared.stop.store(true, Ordering::Release);
        if let Some(c) = self
            .consumer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = c.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown("the monitor stopped");
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Finishes a run's ledger with its loss accounting.
fn finish(
    mut sink: Sink,
    counters: Counters,
    mut extra: MetaMap,
    mut reasons: Reasons,
) -> Result<MonitorReport, MonitorError> {
    if let Some(e) = sink.error.take() {
        return Err(e.into());
    }
    let stats = sink.maker.stats();
    for (runtime, pid) in sink.maker.containers_outside() {
        reasons.push(Incomplete::ContainerOutside {
            runtime: runtime.clone(),
            pid: *pid,
        });
    }
    for (tool, pid) in sink.maker.services_outside() {
        reasons.push(Incomplete::HandedOutside {
            tool: tool.clone(),
            pid: *pid,
        });
    }
    let submitted = counters.get(counter::IO_URING_SUBMITTED);
    if stats.io_uring > 0 || submitted > 0 {
        reasons.push(Incomplete::IoUring {
            records: stats.io_uring,
            submitted,
        });
    }
    let moves = counters.get(counter::SCOPE_LEFT);
    if moves > 0 {
        reasons.push(Incomplete::ScopeLeft { moves });
    }
    let calls = counters.get(counter::BPF_CALLS);
    if calls > 0 {
        reasons.push(Incomplete::BpfCalls { calls });
    }
    let by_reason: BTreeMap<String, u64> = counter::LOSSES
        .iter()
        .map(|&i| (counter::NAMES[i as usize].to_owned(), counters.get(i)))
        .chain([("undecodable".to_owned(), sink.decode_errors)])
        .collect();
    let lost = counters.lost() + sink.decode_errors;
    if lost > 0 {
        reasons.push_front(Incomplete::EventsLost {
            lost,
            by_reason: by_reason.clone(),
        });
    }
    let all: BTreeMap<&str, u64> = counter::NAMES
        .iter()
        .enumerate()
        .map(|(i, n)| (*n, counters.get(i as u32)))
        .collect();
    extra
        .set_json(meta::OVERLOAD, &sink.freezer.record())
        .set(meta::HOST_MNTNS, sink.maker.host_mntns())
        .set(meta::ENDED_NS, now_ns())
        .set(meta::EVENTS_LOST, lost)
        .set_json(meta::EVENTS_LOST_BY_REASON, &by_reason)
        .set_json(meta::EVENTS_LOST_PER_CPU, &counters.lost_per_cpu())
        .set_json(meta::KERNEL_COUNTERS, &all)
        .set(meta::COMPLETE, reasons.is_empty())
        .set_json(meta::INCOMPLETE_REASONS, &reasons);
    let rows = sink.writer.rows();
    let overload = sink.freezer.record();
    let ledger = sink.writer.finish(extra.into_inner())?;
    Ok(MonitorReport {
        overload: Some(overload),
        ledger,
        rows,
        lost,
        counters,
        decode_errors: sink.decode_errors,
        stats,
        incomplete: reasons,
    })
}

/// The run slot a record's header names, if the record is long enough to have one.
fn slot_of(bytes: &[u8]) -> Option<u32> {
    let at = std::mem::offset_of!(aet_common::EventHeader, run);
    (bytes.len() >= HEADER_SIZE)
        .then(|| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes")))
}

/// A fault-injection setting of the environment (`var`, a number in `unit`), said aloud when set.
fn debug_duration(var: &str, unit: fn(u64) -> Duration, what: &str) -> Duration {
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
trait RunAccounting {
    /// Tells the programs how much of the run's records was read.
    fn tell(&mut self, slot: u32, consumed: u64, quota: u64);
    /// What the programs have put in the ring for the run, in ring bytes.
    fn produced(&mut self, slot: u32) -> Option<u64>;
}

/// A source whose records are also written to a file (see [`DUMP_ENV`]).
struct Dump<S> {
    inner: S,
    out: std::io::BufWriter<std::fs::File>,
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
    let mut sinks = shared.sinks.into_inner().unwrap_or_else(|p| p.into_inner());
    let sink = sinks.remove(&0).expect("the replayed run");
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

/// The programs' maps.
struct KernelSide(Arc<Mutex<Programs>>);

impl RunAccounting for KernelSide {
    fn tell(&mut self, slot: u32, consumed: u64, quota: u64) {
        let _ = lock(&self.0).set_consumed(slot, consumed, quota);
    }
    fn produced(&mut self, slot: u32) -> Option<u64> {
        lock(&self.0).produced(slot).ok()
    }
}

/// The consumer thread's nice value.
const CONSUMER_NICE: libc::c_int = -10;

/// Records between two updates of what the kernel knows was read of each run, and two looks at
/// the runs that may be frozen (each a map access per run): often enough that a run's share of
/// the ring frees up as it is read (telling it once per drain, up to 64 Ki records, made the
/// kernel drop records of a ring userspace had mostly read) and that a run is frozen well
/// before its share is full.
const ACCOUNT_EVERY: usize = 256;

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
fn consume(
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
            let mut sinks = shared.lock_sinks();
            let any_freezer = sinks.values().any(|s| s.freezer.active());
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
                }
                let cost = runs::ring_cost(bytes.len() as u64);
                match decode::decode(bytes) {
                    // A record of a run no longer served (made as it ended) has no sink: its
                    // run's ledger is finished, and nothing else is its.
                    Ok(ev) => {
                        if let Some(sink) = sinks.get_mut(&ev.header.run) {
                            sink.consumed += cost;
                            let row = sink.maker.row(&ev);
                            sink.append(&row);
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

    use super::*;
    use crate::monitor::{decode::tests::record_with, source::VecSource};

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
        let mut sinks = shared.sinks.into_inner().unwrap();
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
