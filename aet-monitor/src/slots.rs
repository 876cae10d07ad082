//! The monitor: the programs, loaded once, and one consumer thread that reads the shared ring
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
    sync::{Arc, Mutex, MutexGuard, atomic::Ordering},
    thread::JoinHandle,
    time::Duration,
};

use aet_common::counter;
use serde::{Deserialize, Serialize};

use super::{
    DUMP_ENV, MonitorError, MonitorReport, SLOW_ENV, STALL_ENV,
    overload::{Freezer, OnOverload},
    source::RingSource,
};
use crate::loader::{Counters, LoadError, LoadOptions, Programs, Scope};
use crate::rows::RowMaker;
use aet_ledger::{
    metadata::{Incomplete, MetaMap, PhaseRecord, Reasons},
    schema::meta,
    util::{WallClock, now_ns},
    writer::LedgerWriter,
};

use super::{
    consumer::{CONSUMER_NICE, KernelSide, Progress, Shared, Sink, consume, debug_duration, lock},
    replay::Dump,
};

/// How a run meets overload: what it asked for, and where its freezes are marked for the guard
/// that thaws them if aet dies.
#[derive(Clone, Debug, Default)]
pub struct Overload {
    pub on_overload: OnOverload,
    pub marker_dir: Option<std::path::PathBuf>,
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

/// The programs and the consumer: serves runs until dropped.
pub struct Monitor {
    shared: Arc<Shared>,
    programs: Arc<Mutex<Programs>>,
    consumer: Mutex<Option<JoinHandle<()>>>,
    clock: WallClock,
}

impl Monitor {
    /// Loads and attaches the programs and starts the consumer. No run is served yet.
    pub fn load(opts: &LoadOptions) -> Result<Self, MonitorError> {
        let clock = WallClock::now();
        let mut programs = Programs::load(opts)?;
        let ring = programs
            .take_events()
            .ok_or(LoadError::MissingMap(aet_common::maps::EVENTS))?;
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
            .set(meta::KERNEL_RELEASE, aet_kernel::procfs::kernel_release())
            .set(meta::HOSTNAME, aet_kernel::procfs::hostname());
        let writer = LedgerWriter::create(ledger, head.into_inner())?;
        // The sinks are locked while the slot is registered, so the consumer cannot see a record
        // of the slot before its sink is there.
        let mut sinks = self.shared.lock_sinks();
        let slot = self.lock_programs().register(scope, quota)?;
        sinks.insert(
            slot,
            Sink {
                maker: RowMaker::new(self.clock).with_run_cgroup(match scope {
                    Scope::Cgroup { path, .. } => {
                        aet_kernel::cgroup::relative(path).ok().map(|(rel, _)| rel)
                    }
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

    /// Begins phase `name` of a run (see [`RowMaker::begin_phase`]).
    pub fn begin_phase(
        &self,
        slot: u32,
        name: &str,
        keep: Vec<u32>,
        by: Option<u32>,
    ) -> Result<PhaseRecord, MonitorError> {
        // The consumer holds the sinks while it drains: a row made after this is stamped after
        // the phase's start.
        let mut sinks = self.shared.lock_sinks();
        let sink = sinks.get_mut(&slot).ok_or(MonitorError::NoRun(slot))?;
        sink.maker
            .begin_phase(name, keep, by)
            .map_err(MonitorError::Phase)
    }

    /// Writes the row of a request the run's sandbox proxy forwarded or refused.
    pub fn proxy_event(&self, slot: u32, event: &aet_proxy::Event) -> Result<(), MonitorError> {
        let mut sinks = self.shared.lock_sinks();
        let sink = sinks.get_mut(&slot).ok_or(MonitorError::NoRun(slot))?;
        let row = sink.maker.proxy_row(event);
        sink.append(&row);
        Ok(())
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
        if std::env::var_os(crate::loader::NO_PAYLOAD_ENV).is_some() {
            reasons.push(Incomplete::AetFailed {
                error: format!(
                    "socket payloads were not captured ({} is set): no names on the network",
                    crate::loader::NO_PAYLOAD_ENV
                ),
            });
        }
        let tracked = self.lock_programs().tracked(slot);
        if let Err(e) = self.lock_programs().unregister(slot) {
            reasons.push(Incomplete::AetFailed {
                error: format!("the run's scope could not be removed: {e}"),
            });
        }
        // A program invocation that started before the scope went may still be writing: wait
        // until every one of them has returned (unless no task of the run is left to run one).
        let t = std::time::Instant::now();
        if !self.quiescent(slot, &tracked) {
            aet_kernel::wait_for_running_programs();
        }
        let programs_done = t.elapsed();
        if !self.shared.drain_wait(Duration::from_secs(10)) {
            reasons.push(Incomplete::ConsumerStopped);
        }
        if t.elapsed() >= Duration::from_secs(2) {
            eprintln!(
                "aet: run slot {slot} stopping: {:.1} s for running programs to return, {:.1} s \
                 for the consumer to read the ring empty",
                programs_done.as_secs_f64(),
                (t.elapsed() - programs_done).as_secs_f64()
            );
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
                aet_kernel::cgroup::populated(path).is_ok_and(|p| !p)
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

impl Drop for Monitor {
    fn drop(&mut self) {
        self.shutdown("the monitor stopped");
    }
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
    for row in sink.maker.unanswered() {
        sink.append(&row);
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
    let messages = counters.get(counter::PAYLOAD_UNRECORDED);
    if messages > 0 {
        reasons.push(Incomplete::NamesUnrecorded { messages });
    }
    let by_reason: BTreeMap<String, u64> = counter::LOSSES
        .iter()
        .map(|&i| (counter::NAMES[i as usize].to_owned(), counters.get(i)))
        .chain([
            ("undecodable".to_owned(), sink.decode_errors),
            // Program runs the kernel skipped (`recursion_misses`), and records dropped because
            // their scratch was taken mid-record, while the run was served.
            ("skipped".to_owned(), counters.skipped),
            ("preempted".to_owned(), counters.preempted),
        ])
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
        .set_json(meta::PHASES, sink.maker.phases())
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
