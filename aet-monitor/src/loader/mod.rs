//! Loads aet's eBPF programs, configured for one run, and attaches them.
//!
//! The object is embedded in the `aet` binary at build time. Loading configures the programs'
//! `CONFIG` global (the scope and the kernel struct offsets from BTF) and the ring buffer's size,
//! then attaches every program. Any program that fails to load or attach fails the whole load:
//! aet never runs with a partial monitor.

use aet_common::{Config, RunLimit, ScopeIndex, counter, exits, runs};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData, PerCpuArray, ProgramArray, RingBuf},
    programs::{
        RawTracePoint, TracePoint, raw_trace_point::RawTracePointLink, trace_point::TracePointLink,
    },
};

use aet_kernel::{btf::KernelBtf, tracefs};

/// The compiled eBPF object (built by `build.rs` from `aet-ebpf`).
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/aet"));
/// The same programs reading kernel memory through `bpf_probe_read_kernel`, for kernels
/// without `bpf_rdonly_cast` ([`features::Variant::HelperReads`]).
static EBPF_OBJECT_HELPER_READS: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/aet-helper-reads"));
/// The same programs for kernels without `bpf_loop`, `bpf_task_pt_regs`,
/// `bpf_get_current_task_btf` or `bpf_for_each_map_elem` (5.10-5.16):
/// [`features::Variant::Legacy`].
static EBPF_OBJECT_LEGACY: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/aet-legacy"));

/// Set (to anything): the programs do not capture socket payloads (no names on the network).
/// For the benchmark's baseline of what the capture costs; a run recorded so is not complete.
pub const NO_PAYLOAD_ENV: &str = "AET_DEBUG_NO_PAYLOAD";

/// The eBPF object built into this binary (for the signed manifest's hash).
pub fn ebpf_object() -> &'static [u8] {
    EBPF_OBJECT
}

/// How a program attaches.
#[derive(Clone, Copy, Debug)]
pub enum Attach {
    /// A tracefs tracepoint `category/name`.
    TracePoint(&'static str, &'static str),
    /// A raw tracepoint by name.
    RawTracePoint(&'static str),
    /// Not attached: entry `index` of `sys_exit`'s program array (`EXITS`), which tail-calls it
    /// (a tracepoint program too: a tail call stays within one program type).
    Exit(u32),
    /// The witness of the classic program on tracefs tracepoint `category/name`: a raw
    /// tracepoint program on the same tracepoint, attached after it, where the kernel counts a
    /// classic program's skipped runs nowhere ([`witness`]).
    Witness(&'static str, &'static str),
}

/// Every program in the object and where it attaches, in attach order: the process-tree
/// programs first (so tracking starts before anything else), then the syscall exits, then the
/// exec entries; last the programs `sys_exit` hands each syscall family to, which are put in its
/// program array before anything is attached.
pub const PROGRAMS: &[(&str, Attach)] = &[
    ("task_newtask", Attach::TracePoint("task", "task_newtask")),
    (
        "sched_process_exit",
        Attach::TracePoint("sched", "sched_process_exit"),
    ),
    (
        "sched_process_exec",
        Attach::TracePoint("sched", "sched_process_exec"),
    ),
    (
        "cgroup_attach_task",
        Attach::RawTracePoint("cgroup_attach_task"),
    ),
    (
        "io_uring_submit_req",
        Attach::TracePoint("io_uring", "io_uring_submit_req"),
    ),
    ("sys_exit", Attach::TracePoint("raw_syscalls", "sys_exit")),
    (
        "sys_enter_execve",
        Attach::TracePoint("syscalls", "sys_enter_execve"),
    ),
    (
        "sys_enter_execveat",
        Attach::TracePoint("syscalls", "sys_enter_execveat"),
    ),
    (
        "witness_task_newtask",
        Attach::Witness("task", "task_newtask"),
    ),
    (
        "witness_sched_process_exit",
        Attach::Witness("sched", "sched_process_exit"),
    ),
    (
        "witness_sched_process_exec",
        Attach::Witness("sched", "sched_process_exec"),
    ),
    (
        "witness_io_uring_submit_req",
        Attach::Witness("io_uring", "io_uring_submit_req"),
    ),
    (
        "witness_sys_exit",
        Attach::Witness("raw_syscalls", "sys_exit"),
    ),
    ("exit_io", Attach::Exit(exits::IO)),
    ("exit_exec", Attach::Exit(exits::EXEC)),
    ("exit_recv", Attach::Exit(exits::RECV)),
    ("exit_net", Attach::Exit(exits::NET)),
    ("exit_event", Attach::Exit(exits::EVENT)),
    ("exit_payload", Attach::Exit(exits::PAYLOAD)),
];

/// Tracepoints some kernels still have under an earlier name: `io_uring_submit_req` was
/// `io_uring_submit_sqe` until 6.4 (its record holds the request, `req`, too).
const FORMER_NAMES: &[(&str, &str)] = &[("io_uring_submit_req", "io_uring_submit_sqe")];

/// The name this kernel gives tracepoint `category/name`: its own, or the earlier one it still
/// has ([`FORMER_NAMES`]).
pub fn tracepoint_name(category: &str, name: &'static str) -> &'static str {
    if tracefs::has_tracepoint(category, name) {
        return name;
    }
    FORMER_NAMES
        .iter()
        .find(|(now, before)| *now == name && tracefs::has_tracepoint(category, before))
        .map_or(name, |(_, before)| before)
}

mod abi;
pub mod features;
mod kfunc;
mod load;
mod misses;
mod pinned;
mod records;
pub mod refusal;
mod run_slots;
pub mod witness;

pub use load::{LOAD_TIMES_ENV, Loaded, VERIFIER_LIMIT};
use load::{Phases, load_all};
use pinned::Pinned;
use records::record_fields;

/// Which tasks a run covers.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Tasks in a cgroup v2 (by id, at its level in the hierarchy), in its descendant cgroups,
    /// and their descendants.
    Cgroup {
        path: std::path::PathBuf,
        id: u64,
        level: u32,
    },
    /// Tasks with this real uid, and their descendants.
    Uid(u32),
    /// A process (all its threads), and its descendants.
    Pid(u32),
}

impl Scope {
    /// Short name of the mode (`cgroup`, `uid`, `pid`).
    pub fn mode(&self) -> &'static str {
        match self {
            Self::Cgroup { .. } => "cgroup",
            Self::Uid(_) => "uid",
            Self::Pid(_) => "pid",
        }
    }

    /// What the scope names, for people.
    pub fn describe(&self) -> String {
        match self {
            Self::Cgroup { path, id, .. } => format!("cgroup {} (id {id})", path.display()),
            Self::Uid(uid) => format!("uid {uid}"),
            Self::Pid(pid) => format!("pid {pid}"),
        }
    }
}

/// Errors loading or attaching the monitor.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// tracefs is missing and could not be mounted.
    #[error(transparent)]
    Tracefs(#[from] tracefs::TracefsError),
    /// Kernel layouts could not be read.
    #[error(transparent)]
    Btf(#[from] aet_kernel::btf::BtfError),
    /// The object's kfunc calls could not be linked to this kernel.
    #[error("linking the eBPF object's kfunc calls failed: {0}")]
    Kfunc(String),
    /// The object could not be loaded (maps, relocations).
    #[error("loading the eBPF object failed: {0}")]
    Object(#[from] aya::EbpfError),
    /// The kernel lacks a tracepoint aet needs.
    #[error("the kernel has no tracepoint {0}")]
    NoTracepoint(String),
    /// A tracepoint's record lacks a field the programs read, or has it where they cannot.
    #[error("tracepoint {tracepoint}: {problem}")]
    RecordField { tracepoint: String, problem: String },
    /// The kernel lacks what every variant of the programs needs (one line).
    #[error("{0}")]
    Kernel(String),
    /// The verifier refused a program (a paragraph).
    #[error("{0}")]
    Refused(Box<refusal::Refusal>),
    /// A program failed to load (the verifier refused it) or to attach.
    #[error("eBPF program {name} failed to {action}: {source}")]
    Program {
        name: &'static str,
        action: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    /// A program is missing from the object.
    #[error("eBPF program {0} is missing from the object")]
    MissingProgram(&'static str),
    /// A map the programs need is missing from the object.
    #[error("eBPF map {0} is missing from the object")]
    MissingMap(&'static str),
    /// A map could not be opened.
    #[error("eBPF map {name}: {source}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    /// The number of possible CPUs could not be read.
    #[error("cannot count possible CPUs: {0}")]
    Cpus(#[source] std::io::Error),
    /// The ring buffer size is not a power of two multiple of the page size.
    #[error("ring buffer size {0} is not a power of two of at least 4096 bytes")]
    RingSize(u32),
    /// Every run slot is taken.
    #[error("the monitor already serves {0} runs, the most it can")]
    NoSlot(u32),
    /// A cgroup sits deeper than the programs look.
    #[error(
        "cgroup {path} is at level {level} of the cgroup v2 hierarchy; the monitor scopes cgroups \
         at levels below {max}"
    )]
    CgroupTooDeep {
        path: std::path::PathBuf,
        level: u32,
        max: u32,
    },
    /// The scope is already another run's.
    #[error("{0} is already monitored by another run")]
    ScopeTaken(String),
}

/// Load-time settings.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Ring buffer size in bytes (a power of two), shared by every run.
    pub ringbuf_bytes: u32,
}

/// Default ring buffer size: 64 MiB holds about half a million typical records, several seconds
/// of the densest open storm, while the consumer catches up.
pub const DEFAULT_RINGBUF_BYTES: u32 = 64 << 20;

/// Kernel-side counters of a run, summed over CPUs and per CPU.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    /// `totals[i]` for `aet_common::counter` index `i`.
    pub totals: Vec<u64>,
    /// `per_cpu[cpu][i]`.
    pub per_cpu: Vec<Vec<u64>>,
    /// Program runs the kernel skipped while the run was served (see [`misses`]): on no CPU
    /// of `per_cpu`, and possibly another run's.
    #[serde(default)]
    pub skipped: u64,
    /// Records dropped while the run was served because another task's program took their
    /// CPU's scratch mid-record (the programs' `PREEMPTIONS`): possibly another run's.
    #[serde(default)]
    pub preempted: u64,
}

impl Counters {
    /// Events (or parts of events) that never reached userspace.
    pub fn lost(&self) -> u64 {
        counter::LOSSES
            .iter()
            .map(|&i| self.totals.get(i as usize).copied().unwrap_or(0))
            .sum::<u64>()
            + self.skipped
            + self.preempted
    }

    /// Lost events per CPU.
    pub fn lost_per_cpu(&self) -> Vec<u64> {
        self.per_cpu
            .iter()
            .map(|c| counter::LOSSES.iter().map(|&i| c[i as usize]).sum())
            .collect()
    }

    /// A counter's total.
    pub fn get(&self, idx: u32) -> u64 {
        self.totals.get(idx as usize).copied().unwrap_or(0)
    }
}

/// An attachment, owned so that it can be released the way its kind needs.
enum Link {
    TracePoint(#[allow(dead_code)] TracePointLink),
    Raw(#[allow(dead_code)] RawTracePointLink),
}

fn map_err(name: &'static str) -> impl Fn(aya::maps::MapError) -> LoadError {
    move |source| LoadError::Map { name, source }
}

/// The loaded, attached programs, serving any number of runs (up to [`runs::MAX_RUNS`]), each in
/// a slot of the run maps. Dropping it detaches every program.
pub struct Programs {
    /// The scope maps' generation (see `ScopeIndex::generation`).
    generation: u32,
    /// Each program as the kernel took it, in [`PROGRAMS`] order.
    loaded: Vec<Loaded>,
    /// The object variant this kernel got.
    variant: features::Variant,
    /// Whether the witnesses are attached ([`witness::wanted`]).
    witnessed: bool,
    ebpf: Option<Ebpf>,
    /// `sys_exit`'s program array: the kernel empties it when its last descriptor closes.
    exits: Option<ProgramArray<MapData>>,
    links: Vec<Link>,
    events: Option<RingBuf<MapData>>,
    counters: PerCpuArray<MapData, u64>,
    tracked: HashMap<MapData, u32, u32>,
    scope_cgroups: HashMap<MapData, u64, u32>,
    scope_uids: HashMap<MapData, u32, u32>,
    scope_index: Array<MapData, ScopeIndex>,
    run_limits: Array<MapData, RunLimit>,
    run_produced: Array<MapData, u64>,
    /// The scope of each slot in use.
    slots: Vec<Option<Scope>>,
    /// Records dropped because their scratch was taken mid-record, per CPU.
    preemptions: PerCpuArray<MapData, u64>,
    /// The programs' skipped runs and dropped records when each slot was registered.
    since: Vec<(u64, u64)>,
    ringbuf_bytes: u32,
}

impl Programs {
    /// Loads and attaches every program. No run is served until one is registered.
    pub fn load(opts: &LoadOptions) -> Result<Self, LoadError> {
        if opts.ringbuf_bytes < 4096 || !opts.ringbuf_bytes.is_power_of_two() {
            return Err(LoadError::RingSize(opts.ringbuf_bytes));
        }
        let phase = Phases::new();
        tracefs::ensure_mounted()?;
        for (_, attach) in PROGRAMS {
            if let Attach::TracePoint(cat, name) = attach
                && !tracefs::has_tracepoint(cat, tracepoint_name(cat, name))
            {
                return Err(LoadError::NoTracepoint(format!("{cat}/{name}")));
            }
        }
        let fields = record_fields()?;
        // aya parses the kernel's BTF too (for relocations) as its loader is made: on another
        // thread, while this one reads the layouts aet needs.
        let loader = std::thread::spawn(EbpfLoader::new);
        let btf = KernelBtf::load()?;
        let missing = features::missing(&btf);
        if !missing.is_empty() {
            return Err(LoadError::Kernel(features::refusal(
                &aet_kernel::procfs::kernel_release(),
                &missing,
            )));
        }
        let variant = features::variant(&btf);
        let witnessed = witness::wanted(&aet_kernel::procfs::kernel_release());
        let mut offsets = btf.offsets()?;
        regs_offsets(&btf, &mut offsets)?;
        let (compat_mask, compat_in_regs) = compat_mark(&btf, &mut offsets);
        let host_mntns = std::fs::metadata("/proc/self/ns/mnt")
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m) as u32)
            .unwrap_or(0);
        let config = Config {
            offsets,
            compat_mask,
            compat_in_regs,
            host_mntns,
            fields,
            no_payload: u32::from(std::env::var_os(NO_PAYLOAD_ENV).is_some()),
            witness: u32::from(witnessed),
        };
        let object = match variant {
            features::Variant::Btf => kfunc::link_kfuncs(EBPF_OBJECT, &btf)?,
            features::Variant::HelperReads => EBPF_OBJECT_HELPER_READS.to_vec(),
            features::Variant::Legacy => EBPF_OBJECT_LEGACY.to_vec(),
        };
        phase.done("the kernel's BTF read, the layouts found, the object linked");
        let mut loader = loader
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        phase.done("aya's own BTF parse joined");
        let mut ebpf = loader
            .override_global("CONFIG", &config, true)
            .map_max_entries(aet_common::maps::EVENTS, opts.ringbuf_bytes)
            .map_max_entries(aet_common::maps::SCRATCH, possible_cpus()?)
            .map_max_entries(aet_common::maps::WALKCTX, possible_cpus()?)
            .load(&object)?;
        phase.done("the object parsed, the maps created");

        let mut table: Array<_, u16> = Array::try_from(
            ebpf.map_mut(aet_common::maps::SYSCALLS)
                .ok_or(LoadError::MissingMap(aet_common::maps::SYSCALLS))?,
        )
        .map_err(map_err(aet_common::maps::SYSCALLS))?;
        for (nr, entry) in syscall_table() {
            table
                .set(nr, entry, 0)
                .map_err(map_err(aet_common::maps::SYSCALLS))?;
        }
        let events = take_map(&mut ebpf, aet_common::maps::EVENTS, RingBuf::try_from)?;
        let counters = take_map(&mut ebpf, aet_common::maps::COUNTERS, PerCpuArray::try_from)?;
        let preemptions = take_map(
            &mut ebpf,
            aet_common::maps::PREEMPTIONS,
            PerCpuArray::try_from,
        )?;
        let tracked = take_map(&mut ebpf, aet_common::maps::TRACKED, HashMap::try_from)?;
        let scope_cgroups = take_map(
            &mut ebpf,
            aet_common::maps::SCOPE_CGROUPS,
            HashMap::try_from,
        )?;
        let scope_uids = take_map(&mut ebpf, aet_common::maps::SCOPE_UIDS, HashMap::try_from)?;
        let scope_index = take_map(&mut ebpf, aet_common::maps::SCOPE_INDEX, Array::try_from)?;
        let run_limits = take_map(&mut ebpf, aet_common::maps::RUN_LIMITS, Array::try_from)?;
        let run_produced = take_map(&mut ebpf, aet_common::maps::RUN_PRODUCED, Array::try_from)?;

        let mut exits = take_map(&mut ebpf, aet_common::maps::EXITS, ProgramArray::try_from)?;

        phase.done("the maps filled");
        let loaded = load_all(&mut ebpf, variant, witnessed)?;
        phase.done("the programs loaded (verified)");
        // The families' programs go in sys_exit's array before anything is attached: a tail
        // call into an empty slot is a lost event.
        for &(name, attach) in PROGRAMS {
            let Attach::Exit(index) = attach else {
                continue;
            };
            let fail = |source| LoadError::Program {
                name,
                action: "enter in sys_exit's program array",
                source,
            };
            let prog = ebpf.program(name).ok_or(LoadError::MissingProgram(name))?;
            let fd = prog.fd().map_err(fail)?;
            exits
                .set(index, fd, 0)
                .map_err(|e| fail(aya::programs::ProgramError::MapError(e)))?;
        }
        let mut links = Vec::with_capacity(PROGRAMS.len());
        for &(name, attach) in PROGRAMS {
            let prog = ebpf
                .program_mut(name)
                .ok_or(LoadError::MissingProgram(name))?;
            let fail = |source| LoadError::Program {
                name,
                action: "attach",
                source,
            };
            let link = match attach {
                Attach::Exit(_) => continue,
                Attach::TracePoint(category, tp) => {
                    let p: &mut TracePoint = prog.try_into().map_err(fail)?;
                    let id = p
                        .attach(category, tracepoint_name(category, tp))
                        .map_err(fail)?;
                    Link::TracePoint(p.take_link(id).map_err(fail)?)
                }
                Attach::RawTracePoint(tp) => {
                    let p: &mut RawTracePoint = prog.try_into().map_err(fail)?;
                    let id = p.attach(tp).map_err(fail)?;
                    Link::Raw(p.take_link(id).map_err(fail)?)
                }
                Attach::Witness(..) if !witnessed => continue,
                Attach::Witness(category, tp) => {
                    let p: &mut RawTracePoint = prog.try_into().map_err(fail)?;
                    let id = p.attach(tracepoint_name(category, tp)).map_err(fail)?;
                    Link::Raw(p.take_link(id).map_err(fail)?)
                }
            };
            links.push(link);
        }
        phase.done("the programs attached");
        Ok(Self {
            loaded,
            variant,
            witnessed,
            ebpf: Some(ebpf),
            exits: Some(exits),
            links,
            events: Some(events),
            counters,
            tracked,
            scope_cgroups,
            scope_uids,
            scope_index,
            run_limits,
            run_produced,
            slots: vec![None; runs::MAX_RUNS as usize],
            preemptions,
            since: vec![(0, 0); runs::MAX_RUNS as usize],
            generation: 0,
            ringbuf_bytes: opts.ringbuf_bytes,
        })
    }

    /// Each program as the kernel took it (verified instructions, load time).
    pub fn loaded(&self) -> &[Loaded] {
        &self.loaded
    }

    /// The object variant this kernel got.
    pub fn variant(&self) -> features::Variant {
        self.variant
    }

    /// Whether the classic programs' witnesses are attached ([`witness::wanted`]).
    pub fn witnessed(&self) -> bool {
        self.witnessed
    }

    /// The ring buffer's size in bytes.
    pub fn ringbuf_bytes(&self) -> u32 {
        self.ringbuf_bytes
    }

    /// Takes the ring buffer (to hand it to the consumer thread).
    pub fn take_events(&mut self) -> Option<RingBuf<MapData>> {
        self.events.take()
    }

    /// Detaches every program. Records already in the ring buffer stay readable.
    ///
    /// Raw tracepoints detach at once; a `syscalls:*` tracepoint's perf-event link is handed to
    /// the kernel to release in the background (see [`aet_kernel::bpffs`]), so a teardown
    /// does not wait for its RCU grace periods.
    pub fn detach(&mut self) {
        for (i, link) in self.links.drain(..).enumerate() {
            match link {
                // Dropping one waits for two RCU grace periods in the kernel (about 70 ms
                // each here, for every run's teardown): the kernel releases it in the
                // background instead.
                Link::TracePoint(l) => {
                    if let Ok(fd) = aya::programs::links::FdLink::try_from(l) {
                        aet_kernel::bpffs::release_in_background(fd, &i.to_string());
                    }
                }
                // Detached at once.
                Link::Raw(l) => drop(l),
            }
        }
        self.ebpf = None;
        self.exits = None;
    }

    /// Are the programs attached?
    pub fn attached(&self) -> bool {
        self.ebpf.is_some()
    }
}

impl Drop for Programs {
    fn drop(&mut self) {
        self.detach();
    }
}

/// The `pt_regs` members holding the syscall number and arguments (native and compat).
fn regs_offsets(btf: &KernelBtf, o: &mut aet_common::Offsets) -> Result<(), LoadError> {
    let reg = |abi::Reg(member, plus)| -> Result<u32, LoadError> {
        Ok(btf.offset_of("pt_regs", member)? + plus)
    };
    o.regs_nr = reg(abi::REGS_NR)?;
    for i in 0..6 {
        o.regs_args[i] = reg(abi::REGS_ARGS[i])?;
        o.regs_args_compat[i] = reg(abi::REGS_ARGS_COMPAT[i])?;
    }
    o.task_stack = btf.offset_of("task_struct", "stack")?;
    o.stack_regs = abi::THREAD_SIZE - btf.size_of("pt_regs")?;
    Ok(())
}

/// Where a compat syscall is marked (its offset in `task_ti_status`), its bit, and whether the
/// offset is into the registers; `(0, 0)` when this kernel has no such member (no compat ABI).
fn compat_mark(btf: &KernelBtf, o: &mut aet_common::Offsets) -> (u32, u32) {
    let (strukt, member, mask, in_regs) = match abi::COMPAT_MARK {
        abi::Compat::Task { member, mask } => ("task_struct", member, mask, 0),
        abi::Compat::Regs { member, mask } => ("pt_regs", member, mask, 1),
    };
    match btf.offset_of(strukt, member) {
        Ok(off) => {
            o.task_ti_status = off;
            (mask, in_regs)
        }
        Err(_) => (0, 0),
    }
}

/// The dispatch table entries: syscall number -> native and compat meaning.
fn syscall_table() -> Vec<(u32, u16)> {
    use aet_common::Syscall;
    let mut t = vec![(Syscall::None, Syscall::None); aet_common::SYSCALL_TABLE_SIZE as usize];
    for &(nr, sc) in abi::NATIVE {
        t[nr as usize].0 = sc;
    }
    for &(nr, sc) in abi::COMPAT {
        t[nr as usize].1 = sc;
    }
    t.into_iter()
        .enumerate()
        .filter(|(_, (n, c))| *n != Syscall::None || *c != Syscall::None)
        .map(|(nr, (n, c))| (nr as u32, aet_common::syscall_entry(n, c)))
        .collect()
}

/// Number of possible CPUs (CPU ids range below it).
fn possible_cpus() -> Result<u32, LoadError> {
    aya::util::nr_cpus()
        .map(|n| n as u32)
        .map_err(|(_, e)| LoadError::Cpus(e))
}

fn take_map<T>(
    ebpf: &mut Ebpf,
    name: &'static str,
    convert: impl FnOnce(aya::maps::Map) -> Result<T, aya::maps::MapError>,
) -> Result<T, LoadError> {
    let map = ebpf.take_map(name).ok_or(LoadError::MissingMap(name))?;
    convert(map).map_err(|source| LoadError::Map { name, source })
}

#[cfg(test)]
mod tests {
    use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

    /// The maps the loader opens by name (`aet_common::maps`) are the built objects' maps:
    /// a map renamed on one side fails here, not at a user's first run.
    #[test]
    fn the_maps_the_loader_names_are_in_the_objects() {
        for (which, elf) in [
            ("btf reads", super::EBPF_OBJECT),
            ("helper reads", super::EBPF_OBJECT_HELPER_READS),
        ] {
            let file = object::File::parse(elf).unwrap_or_else(|e| panic!("{which}: {e}"));
            let maps: Vec<&str> = file
                .symbols()
                .filter(|s| {
                    s.section_index()
                        .and_then(|i| file.section_by_index(i).ok())
                        .and_then(|sec| sec.name().ok())
                        .is_some_and(|n| n == "maps" || n == ".maps")
                })
                .filter_map(|s| s.name().ok())
                .collect();
            let missing: Vec<&&str> = aet_common::maps::ALL
                .iter()
                .filter(|m| !maps.contains(m))
                .collect();
            assert!(
                missing.is_empty(),
                "{which}: the object has no map {missing:?} (its maps: {maps:?})"
            );
        }
    }
}
