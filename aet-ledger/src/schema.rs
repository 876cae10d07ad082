//! The ledger's one schema: its version, its metadata keys, and the column table from which the
//! Arrow schema, the writer's row and builders, the reader's row, the column-name constants and
//! the documented column list (`docs/ledger.md`, checked by a test) are all made.
//!
//! A change to a column's name, type or meaning bumps [`SCHEMA_VERSION`]. Readers refuse a ledger
//! whose version they do not know; an older ledger is read with the columns later versions added
//! null (`ADDED_IN_3` to `ADDED_IN_6` in `reader/versions.rs`).

use std::{borrow::Cow, collections::HashMap, fmt::Write as _, sync::Arc};

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, Field, Schema, SchemaRef};

use super::columns::{
    Argv, Comm, Flag, Kind, Name, Opt, OptFlag, OptName, OptShared, Path, Phase, Req, Texts,
};
use arrow_array::types::{
    Int32Type as I32, Int64Type as I64, UInt32Type as U32, UInt64Type as U64,
};

/// Version of the ledger schema written by this build.
pub const SCHEMA_VERSION: &str = "7";

macro_rules! meta_keys {
    ($($(#[doc = $doc:literal])* $konst:ident = $key:literal;)*) => {
        /// File-level metadata keys (in the Arrow schema's metadata). Values are strings; JSON
        /// values are the typed records of [`crate::meta`].
        pub mod meta {
            $($(#[doc = $doc])* pub const $konst: &str = $key;)*

            /// Every key with its documentation, in order.
            pub const KEYS: &[(&str, &str)] = &[$(($key, concat!($($doc, "\n"),*)),)*];
        }
    };
}

meta_keys! {
    /// The schema version (`7`; this build also reads `6`, whose ledgers lack `sha256` and
    /// `sha256_error`, `5`, whose ledgers also lack `net_reason` and `server_name`, `4`, whose ledgers also lack the host and DNS columns, `3`, whose ledgers
    /// also lack `phase`, and `2`, whose ledgers also lack the fd, process and network columns:
    /// read as null).
    SCHEMA_VERSION = "aet.schema_version";
    /// The aet version that wrote the ledger, with the commit it was built from
    /// (`0.1.0+1a2b3c4d5e6f`; `-dirty` after it when the tree had uncommitted changes).
    AET_VERSION = "aet.version";
    /// What recorded the run: `standalone` (programs loaded for it), or `daemon` with its pid,
    /// how it was started (`manual`, `auto`: by a run, `socket`: activated by systemd) and its
    /// build, a JSON object `{served_by, pid, started, build}`.
    MONITOR = "aet.monitor";
    /// The monitored command, a JSON array of strings (`[]` for `aet monitor`).
    COMMAND = "aet.command";
    /// Wall-clock start of monitoring, ns since the Unix epoch.
    STARTED_NS = "aet.started_ns";
    /// Wall-clock end of monitoring, ns since the Unix epoch.
    ENDED_NS = "aet.ended_ns";
    /// `uname -r` of the monitored machine.
    KERNEL_RELEASE = "aet.kernel_release";
    /// Host name of the monitored machine.
    HOSTNAME = "aet.hostname";
    /// Scope mode: `cgroup`, `uid` or `pid`.
    SCOPE = "aet.scope";
    /// What the scope names (cgroup path and id, uid, pid).
    SCOPE_TARGET = "aet.scope_target";
    /// aet's own mount namespace: rows with another `mntns` come from a sandbox.
    HOST_MNTNS = "aet.host_mntns";
    /// Rows in the ledger.
    EVENTS_RECORDED = "aet.events_recorded";
    /// Events the kernel side could not deliver, plus records userspace could not decode;
    /// **non-zero means incomplete**.
    EVENTS_LOST = "aet.events_lost";
    /// Lost events by reason, a JSON object: `ringbuf_full`, `inflight_full`, `tracked_full`,
    /// `fileio_full` (byte accounting could not track an open file), `quota_full` (the run's
    /// share of the ring was full), `fd_unrecorded` (an fd arrived that no `fd` row records),
    /// `dispatch_failed` (a syscall `sys_exit` could not hand to its family's program),
    /// `program_skipped` (a record-building program the kernel skipped for an event of the run,
    /// seen by its witness on a kernel that counts such skips nowhere, before 6.7),
    /// `preempted` (a program was preempted mid-record and another task's program took the
    /// CPU's scratch buffer: the record was dropped, or may be mixed if it was taken while being
    /// copied out; a raw tracepoint's program on a kernel that runs them preemptibly, 7.x: aet's
    /// record-building programs are classic tracepoint programs, which run with preemption off),
    /// `undecodable`, `skipped` (runs of a program the kernel skipped because it was already
    /// running on that CPU, or, for a classic tracepoint's, because something on that CPU held
    /// the kernel's BPF mark: its `recursion_misses`; counted for every run served meanwhile,
    /// since the kernel does not say whose syscall it was).
    EVENTS_LOST_BY_REASON = "aet.events_lost_by_reason";
    /// Lost events per CPU, a JSON array indexed by CPU.
    EVENTS_LOST_PER_CPU = "aet.events_lost_per_cpu";
    /// Every kernel-side counter, a JSON object (records sent, path read failures, partial
    /// walks, io_uring submissions, ...).
    KERNEL_COUNTERS = "aet.kernel_counters";
    /// `true` only when the ledger is finished, nothing was lost and nothing else makes it
    /// incomplete.
    COMPLETE = "aet.complete";
    /// Why the record is incomplete: a JSON array of `{code, text, ...}` objects (empty when
    /// complete). `code` is one of the reasons in `docs/ledger.md`; `text` says it in a sentence.
    INCOMPLETE_REASONS = "aet.incomplete_reasons";
    /// `true` in the footer; `false` in the head of the file (what an unfinished file shows).
    FINISHED = "aet.finished";
    /// `aet run`: the command's exit status (128+N for signal N).
    EXIT_STATUS = "aet.exit_status";
    /// `aet run`: processes killed at the end of the run, a JSON array of `{pid, comm}`.
    KILLED = "aet.killed";
    /// `aet run --sandbox`: JSON with `spec`, `bwrap_argv`, `env` (names), `env_removed`
    /// (names), `verified`, the stage's `report` (each check with what it expected and found,
    /// failures, writable mounts), and `network` (`mode`: `host`, `none` or `hosts`; `hosts`,
    /// the proxy's; `upstream_hosts`, the hosts of the `[[repo]]` upstreams).
    SANDBOX = "aet.sandbox";
    /// `aet run --identity`: JSON with `uid`, `gid`, `home`, `workspace`, `env` and
    /// `env_removed` (names), `workspace_handover`/`home_handover`/`rw_binds_handover`
    /// (`changed`, `skipped`), `grader_root` (`path`, `fixed`), `privileges` (as read back),
    /// `verified`, `killed_after_teardown`, `reap_error`, `leftover_files`,
    /// `leftover_files_total`.
    IDENTITY = "aet.identity";
    /// `aet run --policy`: the policy's protected files with their identity at run start, a
    /// JSON object `{name: {path, dev, ino}}`.
    PROTECTED = "aet.protected";
    /// `aet run`: the fds the command was started with (stdin, stdout, stderr: aet closes every
    /// other), a JSON array of `{fd, dev, ino, kind, path}`. A read through one of them is an
    /// `io` row with that identity and no open of its own.
    INHERITED_FDS = "aet.inherited_fds";
    /// How the run met overload, a JSON object: `asked` and `used` (`freeze`: the run's cgroup
    /// is frozen while its unread records fill more than an eighth of its share of the ring
    /// buffer, until they are below a sixteenth; `drop`: the kernel drops what does not fit and counts
    /// it), `freezes`, `frozen_ms` (total), `longest_ms`, and a `note` when the run used
    /// another than it asked (a scope that is not a cgroup) or freezing failed.
    OVERLOAD = "aet.overload";
    /// `aet run --mode shadow|enforce`: the barrier as the stage built it, a JSON object:
    /// `mode`, `abi` (the kernel's Landlock ABI), `rules` (`{path, rights, entry}`), `excluded`
    /// (`{path, rule}`: files a cheat pattern or a protected identity keeps out of the grants),
    /// `partial_dirs`, `missing` (grants with nothing at their path), `walked`, `enforced`,
    /// `scoped`.
    BARRIER = "aet.barrier";
    /// The ledger's hash chain (footer only), a JSON object: `version`, `head` (SHA-256 of the
    /// file's head), `batches` (each batch's hash, chained to the previous one), `final` (the
    /// last link chained with the footer's other metadata). `aet verify` recomputes it.
    CHAIN = "aet.chain";
    /// `true` on a ledger rebuilt by `aet ledger recover`.
    RECOVERED = "aet.recovered";
    /// The run's phases in order (footer only), a JSON array of `{name, started_ns, keep,
    /// by}`: `agent` from the start, then each phase `aet phase` began (`started_ns`
    /// wall-clock; `keep`: the pids the harness said may stay alive into it; `by`: the pid
    /// that asked). Every row's `phase` column names one of them.
    PHASES = "aet.phases";
    /// `aet run --policy` with `[watch.NAME]` sections (footer only): the watched files, a JSON
    /// object: `version`, `view` (`host`, `sandbox`, `container (pid N)`), `resolved` (the
    /// `anchors`, `path_dirs` and `site_dirs` the globs were resolved with, and each watch's
    /// `globs`), `limits`, `before` and `after` (each `{taken_ns, at, roots, entries, cost}`;
    /// an entry is `{path, kind, mode, uid, gid, size, sha256, target, dev, ino, mtime_ns,
    /// ctime_ns}`; `cost` is `{entries, walked, hashed_files, hashed_bytes, reused, ms}`), and
    /// `error` when a snapshot could not be taken.
    WATCH = "aet.watch";
    /// `aet run --sandbox` with `[[decoy]]` entries (footer only): the decoys planted in the
    /// agent's view, a JSON object: `version`, `decoys` (each `{name, kind, path, var, files,
    /// token}`: `kind` is `file`, `directory` or `env`; `files`, the paths the agent sees; the
    /// token is the run's own, out of the agent's reach).
    DECOYS = "aet.decoys";
}

/// A column as the docs list it.
#[derive(Clone, Copy, Debug)]
pub struct ColumnDoc {
    pub name: &'static str,
    /// The type (`uint64`; `?` when it may be null).
    pub doc_type: &'static str,
    /// A path column: `name` and `name_raw`.
    pub raw: bool,
    pub doc: &'static str,
}

macro_rules! columns {
    (@raw $raw:ident) => { true };
    (@raw) => { false };
    ($($(#[doc = $doc:literal])* $konst:ident $(/ $raw:ident)? = $field:ident : $kind:ty;)*) => {
        /// Column names, in schema order.
        pub mod col {
            $(
                pub const $konst: &str = stringify!($field);
                $(pub const $raw: &str = concat!(stringify!($field), "_raw");)?
            )*
        }

        /// One ledger row as the monitor writes it (borrowing what it can from the record).
        /// Optional columns are null where `None`.
        #[derive(Clone, Debug, Default)]
        pub struct Row<'a> {
            $($(#[doc = $doc])* pub $field: <$kind as Kind>::In<'a>,)*
        }

        /// One ledger row as a reader gets it: owned values, `None` where the ledger has null;
        /// paths as their exact bytes.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct LedgerRow {
            $($(#[doc = $doc])* pub $field: <$kind as Kind>::Out,)*
        }

        /// The Arrow builders of one batch, a field per column.
        pub(crate) struct Builders {
            $($field: <$kind as Kind>::Builder,)*
            pub(crate) len: usize,
        }

        impl Builders {
            pub(crate) fn new(rows: usize) -> Self {
                Self {
                    $($field: <$kind as Kind>::builder(rows),)*
                    len: 0,
                }
            }

            pub(crate) fn append(&mut self, r: &Row<'_>) {
                $(<$kind as Kind>::append(&mut self.$field, &r.$field);)*
                self.len += 1;
            }

            /// The batch of the rows appended since the last one.
            pub(crate) fn finish(&mut self, schema: SchemaRef) -> Result<RecordBatch, ArrowError> {
                let mut columns = Vec::with_capacity(schema.fields().len());
                $(<$kind as Kind>::finish(&mut self.$field, &mut columns);)*
                self.len = 0;
                RecordBatch::try_new(schema, columns)
            }
        }

        /// The ledger's Arrow fields, in order.
        pub fn fields() -> Vec<Field> {
            let mut f = Vec::new();
            $(f.extend(<$kind as Kind>::fields(stringify!($field)));)*
            f
        }

        /// The rows of one batch (whose schema was checked).
        pub fn rows_of(batch: &RecordBatch) -> Vec<LedgerRow> {
            $(let $field = <$kind as Kind>::reader(batch, stringify!($field));)*
            (0..batch.num_rows())
                .map(|i| LedgerRow {
                    $($field: <$kind as Kind>::get(&$field, i),)*
                })
                .collect()
        }

        impl Row<'_> {
            /// The row a reader gets back for this one.
            pub fn to_ledger_row(&self) -> LedgerRow {
                LedgerRow {
                    $($field: <$kind as Kind>::out(&self.$field),)*
                }
            }

            /// A row whose every column has a value of its own (nulls included), different for
            /// each `seed`: for round-trip tests.
            pub fn sample(seed: u64) -> Row<'static> {
                let mut n = 0u64;
                let mut next = || {
                    n += 1;
                    seed * 64 + n
                };
                Row {
                    $($field: <$kind as Kind>::sample(next()),)*
                }
            }
        }

        /// Every column, as the docs list it.
        pub const COLUMNS: &[ColumnDoc] = &[$(ColumnDoc {
            name: stringify!($field),
            doc_type: <$kind as Kind>::DOC_TYPE,
            raw: columns!(@raw $($raw)?),
            doc: concat!($($doc, "\n"),*),
        },)*];
    };
}

columns! {
    /// Per-run sequence number, in the order the kernel committed the records (0, 1, 2, ...).
    SEQ = seq: Req<U64>;
    /// Wall-clock time of the event, ns since the Unix epoch (the kernel's boot-time clock plus
    /// an offset measured at start).
    TS_NS = ts_ns: Req<I64>;
    /// What the row is: `open`, `exec`, `fork`, `exit`, `stat`, `modify`, `chdir`, `mmap`,
    /// `list`, `io`, `io_uring`, `mount`, `memfd`, `fd`, `process`, `watch`, `net`, `dns` (see
    /// "Kinds of rows").
    KIND = kind: Name;
    /// The syscall's name; null for fork, exit, io and io_uring requests.
    SYSCALL = syscall: OptName;
    /// The acting process (thread-group id).
    PID = pid: Req<U32>;
    /// The acting thread.
    TID = tid: Req<U32>;
    /// The process that **created** the actor (from the recorded fork); for a process that
    /// existed before monitoring, its parent at first sight. Not changed by reparenting, so a
    /// daemon keeps its ancestry.
    PPID = ppid: Req<U32>;
    /// The actor's real uid at the event.
    UID = uid: Req<U32>;
    /// The actor's real gid at the event.
    GID = gid: Req<U32>;
    /// The actor's cgroup v2 id.
    CGROUP_ID = cgroup_id: Req<U64>;
    /// The actor's name as of its last exec.
    COMM = comm: Comm;
    /// The path argument as the process passed it (the exec'd file name for execs; the name of
    /// a memfd; a symlink's target text for `symlink`; a mount's source).
    PATH / PATH_RAW = path: Path;
    /// The argument was longer than 4,095 bytes (the kernel refuses it with `ENAMETOOLONG`);
    /// `path` is its prefix.
    PATH_TRUNCATED = path_truncated: Flag;
    /// The absolute path of what was touched, **as the process sees it** (from its root); see
    /// `resolved_from`.
    RESOLVED_PATH / RESOLVED_PATH_RAW = resolved_path: Path;
    /// How `resolved_path` was obtained. `object`: walked by the kernel from the object it
    /// opened, ran, or changed to (the fd's `struct file`, the exec'd binary, the new cwd):
    /// `..`, symlinks, dirfd and cwd are resolved and it names the file actually touched,
    /// whatever the string said. `joined`: the kernel walked the base directory (dirfd or cwd)
    /// and the argument was joined to it lexically (failed opens, probes, changes: calls that
    /// hand over no object; a symlink in the argument is not followed). `lexical`: an absolute
    /// argument, normalised lexically. `inode`: an `io` row, named by the path under which an
    /// earlier row saw the same dev/ino.
    RESOLVED_FROM = resolved_from: OptName;
    /// The walk stopped early (over 8 KiB or 4,096 steps, or a kernel read failed) or ended at a
    /// root that is not the process's (a pipe, a memfd, a file outside a chroot, a file of
    /// another mount namespace reached through `/proc/PID/root`: capture bit 22): the path is a
    /// suffix, or relative to another root, and `host_path` (when set) names the file as aet's
    /// view has it. Never silently shortened.
    RESOLVED_PARTIAL = resolved_partial: OptFlag;
    /// For a process in another mount namespace (a bubblewrap sandbox), or an object of another
    /// mount namespace (capture bit 22): the same object's path in aet's own view, when it
    /// differs. Taken from a second kernel walk of the object's file
    /// system (root of the file system up to the object, mapped through aet's mountinfo); the
    /// fallback for non-objects maps the process's mount table. When neither works, capture bit
    /// 31 is set.
    HOST_PATH / HOST_PATH_RAW = host_path: Path;
    /// The second path of `rename`, `link`, `symlink`, `mount`, `pivot_root`; for extended
    /// attribute calls, the attribute's name (not a path: never resolved).
    PATH2 / PATH2_RAW = path2: Path;
    /// `path2` resolved (joined to its own dirfd).
    RESOLVED_PATH2 / RESOLVED_PATH2_RAW = resolved_path2: Path;
    /// The directory fd argument (-100 = `AT_FDCWD`).
    DIRFD = dirfd: Opt<I32>;
    /// The second directory fd argument.
    DIRFD2 = dirfd2: Opt<I32>;
    /// The fd an fd-based call acted on (`fchdir`, `fchmod`, `mmap`, `getdents`, io rows).
    FD = fd: Opt<I32>;
    /// Open flags (`O_*`), `AT_*` flags, extended-attribute flags, or mmap flags.
    FLAGS = flags: Opt<U32>;
    /// The mode of an open that may create (`O_CREAT`/`O_TMPFILE`), of `mkdir`, `chmod`,
    /// `mknod`, `access`.
    MODE = mode: Opt<U32>;
    /// `openat2`'s `RESOLVE_*` flags.
    RESOLVE = resolve: Opt<U64>;
    /// The object's device, as `stat` reports `st_dev`. Set when the kernel handed over the
    /// object (opens, execs, cwd, fd calls, io) or filled a stat buffer.
    DEV = dev: Opt<U64>;
    /// The object's inode number (with `dev`, its identity).
    INO = ino: Opt<U64>;
    /// The object's mount id (as in `/proc/PID/mountinfo`); from a stat buffer only with
    /// `statx`.
    MNT_ID = mnt_id: Opt<U32>;
    /// The actor's mount namespace (inode of `/proc/PID/ns/mnt`).
    MNTNS = mntns: Req<U32>;
    /// The syscall's result (fd or 0, or `-errno`).
    RET = ret: Opt<I64>;
    /// The errno's name (`ENOENT`, `EACCES`, ...) when `ret` is negative.
    ERRNO = errno: OptName;
    /// Exec arguments as the new program sees them (for a `#!` script: interpreter, script,
    /// args), lossy UTF-8; cut at 16 KiB.
    ARGV = argv: Argv;
    /// The argument vector was cut.
    ARGV_TRUNCATED = argv_truncated: OptFlag;
    /// For `fork`: the new process.
    CHILD_PID = child_pid: Opt<U32>;
    /// For `exit`: the exit status.
    EXIT_CODE = exit_code: Opt<I32>;
    /// For `exit`: the signal that ended the process.
    EXIT_SIGNAL = exit_signal: Opt<I32>;
    /// For `io`: bytes read through that open file.
    BYTES_READ = bytes_read: Opt<U64>;
    /// For `io`: bytes written through that open file.
    BYTES_WRITTEN = bytes_written: Opt<U64>;
    /// For `mmap`: the mapping's length.
    LENGTH = length: Opt<U64>;
    /// For `mmap`: the mapping's protection (`PROT_*`).
    PROT = prot: Opt<U32>;
    /// For a submitted io_uring request: its opcode (`IORING_OP_*`).
    IO_URING_OP = io_uring_op: Opt<U32>;
    /// For `fd` rows: how the fd came into the run: `received` (over a socket, `SCM_RIGHTS`),
    /// `copied` (from another process, `pidfd_getfd`), `fanotify` (carried by a fanotify event
    /// the run read). The fds the command started with are in `aet.inherited_fds`.
    FD_ORIGIN = fd_origin: OptName;
    /// The other process: for `process` rows the process acted on (ptrace, process_vm_readv/
    /// writev, pidfd_open), for `fd` rows the process the fd came from (`copied`: the pidfd's
    /// process; `received`: the socket's peer, for a unix socket; `fanotify`: the process whose
    /// access made the event), for an open of
    /// `/proc/PID/mem` that PID. A host pid; a pid named inside another pid namespace is
    /// translated when aet can, else kept as named and capture bit 30 is set.
    TARGET_PID = target_pid: Opt<U32>;
    /// Whether `target_pid` was a process of the run at the time (null when unknown).
    TARGET_IN_RUN = target_in_run: OptFlag;
    /// For `fd` rows: the fd the new one came through (`received`: the socket; `copied`: the
    /// fd's number in the other process).
    SOURCE_FD = source_fd: Opt<I32>;
    /// For `net` rows: the socket address's family (`inet`, `inet6`, `unix`, `netlink`,
    /// `packet`, `unspec`, `other`).
    NET_FAMILY = net_family: OptName;
    /// For `net` rows: the address (an IPv4 or IPv6 address; for `unix`, the socket's path, or
    /// `@` and the name of an abstract socket). The endpoint the audit matches is
    /// `ADDRESS:PORT`, `[ADDRESS]:PORT` or `unix:PATH`.
    NET_ADDRESS / NET_ADDRESS_RAW = net_address: Path;
    /// For `net` rows of `inet`/`inet6`: the port.
    NET_PORT = net_port: Opt<U32>;
    /// For `ptrace` rows: the request (`PTRACE_*` number: 16 attach, 0x4206 seize, 1-3
    /// peeks, 4-6 pokes, ...).
    PTRACE_REQUEST = ptrace_request: Opt<U32>;
    /// The host name: for `dns` rows the name asked for; for `net` rows the name the run used
    /// for that endpoint (see `host_source`), exactly as it went out (a DNS name without its
    /// final dot).
    HOST / HOST_RAW = host: Path;
    /// Where `host` came from. `dns`: a `dns` row's question, or (on a `net` row) an answer to
    /// the run's own earlier query for that name held the address. `tls`: the server name of
    /// the TLS ClientHello the run sent on that connection. `http`: the `Host` (or the
    /// absolute or `CONNECT` target) of the HTTP request the run sent on it. `proxy`: a request
    /// to aet's proxy (`network = { hosts = [...] }`), as the proxy read it.
    HOST_SOURCE = host_source: OptName;
    /// For `dns` rows: the question's type (`A`, `AAAA`, `HTTPS`, `MX`, ...).
    DNS_TYPE = dns_type: OptName;
    /// For `dns` rows: the answer's response code (`No Error`, `Non-Existent Domain`,
    /// `Refused`, ...); null when no answer was seen.
    DNS_RCODE = dns_rcode: OptName;
    /// For `dns` rows: the answer's records, each `TYPE DATA` (`A 140.82.112.3`, `CNAME
    /// github.com.`); null when no answer was seen.
    DNS_ANSWERS = dns_answers: Texts;
    /// For `net` rows of aet's proxy: `allowed` (forwarded) or `refused`.
    NET_DECISION = net_decision: OptName;
    /// Capture flags (see "The capture column").
    CAPTURE = capture: Req<U32>;
    /// The phase of the run the row belongs to: `agent` from the start, then the phase each
    /// `aet phase` began (by the row's kernel time, so a row made just before a boundary but
    /// read after it keeps its phase). Null in ledgers before schema 4 (all `agent`).
    PHASE = phase: Phase;
    /// For `net` and `dns` rows of aet's proxy that it refused (or, under `--mode shadow`,
    /// would have): why. `host_not_listed`, `port_not_listed` (an entry names the host, not
    /// this port), `internal_address` (the host resolved only to loopback, link-local, private
    /// or other internal addresses no entry lists; `net_address` is the first),
    /// `server_name_mismatch` (the tunnel's TLS ClientHello named `server_name`, not its
    /// `CONNECT` host), `server_name_unreadable` (its client began a TLS handshake whose server
    /// name could not be read within the first 16 KiB), `connection_cap` (the run had as many connections open through the
    /// proxy as it may), `client_timeout` (the client sent no request in time). Null otherwise.
    NET_REASON = net_reason: OptName;
    /// For a tunnel of aet's proxy: the server name of the TLS ClientHello sent through it,
    /// when it is not the `CONNECT` host.
    SERVER_NAME / SERVER_NAME_RAW = server_name: Path;
    /// For a successful `exec` and an `mmap` of a file with `PROT_EXEC`: the SHA-256 (lowercase
    /// hex) of the file the process had, taken from it (`/proc/PID/exe`, `/proc/PID/map_files`)
    /// while the process lived, or from the file at its path when that is the same file
    /// (device and inode) unchanged since before the row (its change time). Once per file
    /// identity (device, inode, change time). Null when it could not be taken
    /// (`sha256_error`) and on other rows.
    SHA256 = sha256: OptShared;
    /// Why `sha256` could not be taken (the process had ended and the file at its path is
    /// gone, is another file, or changed after the row; the file could not be read).
    SHA256_ERROR = sha256_error: OptShared;
}

impl Row<'_> {
    /// Sets the syscall's result and, for a failure, its errno's name.
    pub fn set_ret(&mut self, ret: i64) {
        self.ret = Some(ret);
        self.errno = (ret < 0).then(|| crate::util::errno_name((-ret) as i32));
    }

    /// Sets a path column's value from borrowed bytes.
    pub fn borrowed(p: &[u8]) -> Option<Cow<'_, [u8]>> {
        Some(Cow::Borrowed(p))
    }
}

/// The ledger schema, with `metadata`.
pub fn schema(metadata: HashMap<String, String>) -> SchemaRef {
    Arc::new(Schema::new(fields()).with_metadata(metadata))
}

/// Bits of the `capture` column beyond the kernel's record flags (`aet_common::flags`, bits
/// 0-15): the walk flags (`aet_common::walk`) of the walk at bits 16-22 and of the second walk at
/// bits 24-29, and userspace's own below.
pub mod capture {
    use aet_common::{flags, walk};

    /// Shift of the first walk's flags.
    pub const WALK_SHIFT: u32 = 16;
    /// Shift of the second walk's flags.
    pub const WALK2_SHIFT: u32 = 24;
    /// A `net` row made of the first bytes of a connection's message (its TLS server name or
    /// HTTP host), not of a syscall's address: the connect before it is the access to the
    /// endpoint.
    pub const PAYLOAD: u32 = 1 << 23;
    /// `target_pid` was named inside another pid namespace and could not be translated to a
    /// host pid: it is the number as named.
    pub const TARGET_UNTRANSLATED: u32 = 1 << 30;
    /// The row comes from another mount namespace and its host path could not be mapped.
    pub const HOST_UNMAPPED: u32 = 1 << 31;

    const fn w(bit: u16) -> u32 {
        (bit as u32) << WALK_SHIFT
    }

    /// Every bit, with what it means.
    pub const BITS: &[(u32, &str)] = &[
        (flags::PATH_TRUNCATED, "path truncated"),
        (flags::PATH_UNREADABLE, "path unreadable"),
        (flags::ARGV_TRUNCATED, "argv truncated"),
        (flags::ARGV_UNREADABLE, "argv unreadable"),
        (
            flags::UNPAIRED,
            "exec seen without its entry (syscall, dirfd and flags unknown)",
        ),
        (flags::PPID_KERNEL, "ppid from the kernel"),
        (flags::COMPAT, "made through the 32-bit compat ABI"),
        (flags::PATH2_TRUNCATED, "second path truncated"),
        (flags::IDENTITY, "dev/ino/mnt_id identify the object"),
        (
            flags::WALK_IS_OBJECT,
            "the walk is the object itself (else the base directory)",
        ),
        (
            flags::SECTION_DROPPED,
            "a section did not fit in the record",
        ),
        (
            flags::IO_AT_EXIT,
            "the io row was flushed by exec or exit rather than `close`",
        ),
        (flags::DEV_STAT, "device taken from a `stat` buffer"),
        (flags::DEV_STATX, "device taken from a `statx` buffer"),
        (w(walk::PRESENT), "walk: present"),
        (w(walk::REACHED_ROOT), "walk: reached the process's root"),
        (w(walk::UNREACHABLE), "walk: ended at another root"),
        (w(walk::TRUNCATED), "walk: truncated"),
        (w(walk::DELETED), "walk: the object was deleted"),
        (w(walk::FAILED), "walk: a kernel read failed"),
        (
            w(walk::FOREIGN_ROOT),
            "walk: ended at the top of another mount tree (another mount namespace, or above the process's root)",
        ),
        (
            (walk::PRESENT as u32) << WALK2_SHIFT,
            "host walk: present (bits 25-29: as bits 17-21, for the host walk)",
        ),
        (
            TARGET_UNTRANSLATED,
            "the target pid is as named in another pid namespace",
        ),
        (HOST_UNMAPPED, "the host path could not be mapped"),
        (
            PAYLOAD,
            "a net row made of a connection's first message (its host), not of a syscall's address",
        ),
    ];
}

/// One doc comment, as one line of Markdown.
fn doc_line(doc: &str) -> String {
    doc.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The column table of `docs/ledger.md`.
pub fn columns_markdown() -> String {
    let mut o = String::from("| column | type | meaning |\n| --- | --- | --- |\n");
    for c in COLUMNS {
        let name = if c.raw {
            format!("`{0}`, `{0}_raw`", c.name)
        } else {
            format!("`{}`", c.name)
        };
        let _ = writeln!(
            o,
            "| {name} | {} | {} |",
            c.doc_type.replace('<', "\\<"),
            doc_line(c.doc)
        );
    }
    o
}

/// The metadata table of `docs/ledger.md`.
pub fn metadata_markdown() -> String {
    let mut o = String::from("| key | meaning |\n| --- | --- |\n");
    for (key, doc) in meta::KEYS {
        let _ = writeln!(o, "| `{key}` | {} |", doc_line(doc));
    }
    o
}

/// The capture-bit table of `docs/ledger.md`.
pub fn capture_markdown() -> String {
    let mut o = String::from("| bit | value | meaning |\n| --- | --- | --- |\n");
    for (mask, what) in capture::BITS {
        let _ = writeln!(o, "| {} | {mask} | {what} |", mask.trailing_zeros());
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{reader::Ledger, writer::LedgerWriter};

    /// Every column survives a write and a read, with values that differ from column to column
    /// (so two columns of one type cannot be swapped unseen), nulls and non-UTF-8 bytes included.
    #[test]
    fn every_column_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.arrow");
        let rows: Vec<Row<'static>> = (0..40).map(Row::sample).collect();
        let mut w = LedgerWriter::create(&path, HashMap::new()).unwrap();
        for r in &rows {
            w.append(r).unwrap();
        }
        w.finish(HashMap::new()).unwrap();
        let mut l = Ledger::open(&path).unwrap();
        let mut back = Vec::new();
        while let Some(b) = l.next_batch().unwrap() {
            back.extend(rows_of(&b));
        }
        let want: Vec<LedgerRow> = rows.iter().map(Row::to_ledger_row).collect();
        assert_eq!(back.len(), want.len());
        for (i, (got, want)) in back.iter().zip(&want).enumerate() {
            assert_eq!(got, want, "row {i}");
        }
        // The samples exercise nulls and non-UTF-8 paths.
        assert!(back.iter().any(|r| r.path.is_none()));
        assert!(back.iter().any(|r| {
            r.path
                .as_ref()
                .is_some_and(|p| std::str::from_utf8(p).is_err())
        }));
    }

    #[test]
    fn the_schema_is_the_column_table() {
        let s = schema(HashMap::new());
        let names: Vec<&str> = s.fields().iter().map(|f| f.name().as_str()).collect();
        let mut want = Vec::new();
        for c in COLUMNS {
            want.push(c.name.to_owned());
            if c.raw {
                want.push(format!("{}_raw", c.name));
            }
        }
        assert_eq!(names, want);
        assert_eq!(col::PATH_RAW, "path_raw");
        assert_eq!(col::RESOLVED_PATH2_RAW, "resolved_path2_raw");
        for c in COLUMNS {
            assert!(!c.doc.trim().is_empty(), "column {} is documented", c.name);
        }
        for (k, doc) in meta::KEYS {
            assert!(k.starts_with("aet.") && !doc.trim().is_empty(), "{k}");
        }
    }

    #[test]
    fn every_record_flag_has_a_capture_bit() {
        use aet_common::flags::*;
        for f in [
            PATH_TRUNCATED,
            PATH_UNREADABLE,
            ARGV_TRUNCATED,
            ARGV_UNREADABLE,
            UNPAIRED,
            PPID_KERNEL,
            COMPAT,
            PATH2_TRUNCATED,
            IDENTITY,
            WALK_IS_OBJECT,
            SECTION_DROPPED,
            IO_AT_EXIT,
            DEV_STAT,
            DEV_STATX,
        ] {
            assert!(capture::BITS.iter().any(|(m, _)| *m == f), "{f:#x}");
        }
        let mut seen = 0u32;
        for (m, _) in capture::BITS {
            assert_eq!(m.count_ones(), 1);
            assert_eq!(seen & m, 0, "bit {m:#x} listed twice");
            seen |= m;
        }
    }
}

#[cfg(test)]
mod docs {
    use aet_checks::docgen;

    /// `docs/ledger.md` shows the tables the code makes.
    #[test]
    fn the_ledger_docs_match_the_code() {
        let f = docgen::docs_dir().join("ledger.md");
        docgen::check(&f, "columns", &super::columns_markdown());
        docgen::check(&f, "capture", &super::capture_markdown());
        docgen::check(&f, "metadata", &super::metadata_markdown());
        docgen::check(&f, "incomplete", &crate::metadata::incomplete_markdown());
    }
}
