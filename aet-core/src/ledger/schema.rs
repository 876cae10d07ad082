//! The ledger's one schema, its version, and its metadata keys.
//!
//! Every column is documented in the README ("Ledger schema"); a change to a column's name, type
//! or meaning bumps [`SCHEMA_VERSION`]. Readers refuse a ledger whose version they do not know.

use std::{collections::HashMap, sync::Arc};

use arrow_schema::{DataType, Field, Schema, SchemaRef};

/// Version of the ledger schema written by this build.
pub const SCHEMA_VERSION: &str = "2";

/// File-level metadata keys (in the Arrow schema's metadata).
pub mod meta {
    /// The schema version ([`super::SCHEMA_VERSION`]).
    pub const SCHEMA_VERSION: &str = "aet.schema_version";
    /// The aet version that wrote the ledger.
    pub const AET_VERSION: &str = "aet.version";
    /// The monitored command, a JSON array of strings (empty for `aet monitor`).
    pub const COMMAND: &str = "aet.command";
    /// Wall-clock start of monitoring, ns since the Unix epoch.
    pub const STARTED_NS: &str = "aet.started_ns";
    /// Wall-clock end of monitoring, ns since the Unix epoch.
    pub const ENDED_NS: &str = "aet.ended_ns";
    /// `uname -r` of the monitored machine.
    pub const KERNEL_RELEASE: &str = "aet.kernel_release";
    /// Host name of the monitored machine.
    pub const HOSTNAME: &str = "aet.hostname";
    /// Scope mode: `cgroup`, `uid` or `pid`.
    pub const SCOPE: &str = "aet.scope";
    /// What the scope names (cgroup path and id, uid, pid).
    pub const SCOPE_TARGET: &str = "aet.scope_target";
    /// Events the kernel side could not deliver, plus records userspace could not decode.
    pub const EVENTS_LOST: &str = "aet.events_lost";
    /// Lost events by reason, a JSON object.
    pub const EVENTS_LOST_BY_REASON: &str = "aet.events_lost_by_reason";
    /// Lost events per CPU, a JSON array indexed by CPU.
    pub const EVENTS_LOST_PER_CPU: &str = "aet.events_lost_per_cpu";
    /// All kernel-side counters, a JSON object.
    pub const KERNEL_COUNTERS: &str = "aet.kernel_counters";
    /// Rows in the ledger.
    pub const EVENTS_RECORDED: &str = "aet.events_recorded";
    /// `true` when the record is complete: finished cleanly, nothing lost.
    pub const COMPLETE: &str = "aet.complete";
    /// Why the record is incomplete, a JSON array of sentences (empty when complete).
    pub const INCOMPLETE_REASONS: &str = "aet.incomplete_reasons";
    /// `true` once the writer finished the file (absent or `false` in the head of the file).
    pub const FINISHED: &str = "aet.finished";
    /// The command's exit status as `aet run` reports it (128+N for signal N).
    pub const EXIT_STATUS: &str = "aet.exit_status";
    /// Processes aet killed at the end of the run, a JSON array of `{pid, comm}`.
    pub const KILLED: &str = "aet.killed";
    /// aet's own mount namespace id (rows with another `mntns` come from a sandbox).
    pub const HOST_MNTNS: &str = "aet.host_mntns";
    /// `aet run --sandbox`: the spec, the exact bwrap command line, the agent's variable names,
    /// and the stage's verification report (JSON).
    pub const SANDBOX: &str = "aet.sandbox";
    /// `aet run --identity`: uid, gid, home, workspace, the agent's variable names, what was
    /// handed over, the grader root check, the privileges read back, processes killed after
    /// teardown and files left outside the workspace (JSON).
    pub const IDENTITY: &str = "aet.identity";
    /// `aet run --policy`: the policy's protected files with their identity at run start, a
    /// JSON object `{name: {path, dev, ino}}`.
    pub const PROTECTED: &str = "aet.protected";
    /// Set to `true` by `aet ledger recover` on a ledger rebuilt from an unfinished file.
    pub const RECOVERED: &str = "aet.recovered";
}

/// Column names, in schema order.
pub mod col {
    pub const SEQ: &str = "seq";
    pub const TS_NS: &str = "ts_ns";
    pub const KIND: &str = "kind";
    pub const SYSCALL: &str = "syscall";
    pub const PID: &str = "pid";
    pub const TID: &str = "tid";
    pub const PPID: &str = "ppid";
    pub const UID: &str = "uid";
    pub const GID: &str = "gid";
    pub const CGROUP_ID: &str = "cgroup_id";
    pub const COMM: &str = "comm";
    pub const PATH: &str = "path";
    pub const PATH_RAW: &str = "path_raw";
    pub const PATH_TRUNCATED: &str = "path_truncated";
    pub const RESOLVED_PATH: &str = "resolved_path";
    pub const RESOLVED_PATH_RAW: &str = "resolved_path_raw";
    pub const RESOLVED_FROM: &str = "resolved_from";
    pub const RESOLVED_PARTIAL: &str = "resolved_partial";
    pub const HOST_PATH: &str = "host_path";
    pub const HOST_PATH_RAW: &str = "host_path_raw";
    pub const PATH2: &str = "path2";
    pub const PATH2_RAW: &str = "path2_raw";
    pub const RESOLVED_PATH2: &str = "resolved_path2";
    pub const RESOLVED_PATH2_RAW: &str = "resolved_path2_raw";
    pub const DIRFD: &str = "dirfd";
    pub const DIRFD2: &str = "dirfd2";
    pub const FD: &str = "fd";
    pub const FLAGS: &str = "flags";
    pub const MODE: &str = "mode";
    pub const RESOLVE: &str = "resolve";
    pub const DEV: &str = "dev";
    pub const INO: &str = "ino";
    pub const MNT_ID: &str = "mnt_id";
    pub const MNTNS: &str = "mntns";
    pub const RET: &str = "ret";
    pub const ERRNO: &str = "errno";
    pub const ARGV: &str = "argv";
    pub const ARGV_TRUNCATED: &str = "argv_truncated";
    pub const CHILD_PID: &str = "child_pid";
    pub const EXIT_CODE: &str = "exit_code";
    pub const EXIT_SIGNAL: &str = "exit_signal";
    pub const BYTES_READ: &str = "bytes_read";
    pub const BYTES_WRITTEN: &str = "bytes_written";
    pub const LENGTH: &str = "length";
    pub const PROT: &str = "prot";
    pub const IO_URING_OP: &str = "io_uring_op";
    pub const CAPTURE: &str = "capture";
}

/// The ledger schema, with `metadata`.
pub fn schema(metadata: HashMap<String, String>) -> SchemaRef {
    use DataType::*;
    let item = Arc::new(Field::new("item", Utf8, true));
    let f = |name: &str, ty: DataType, nullable: bool| Field::new(name, ty, nullable);
    Arc::new(
        Schema::new(vec![
            f(col::SEQ, UInt64, false),
            f(col::TS_NS, Int64, false),
            f(col::KIND, Utf8, false),
            f(col::SYSCALL, Utf8, true),
            f(col::PID, UInt32, false),
            f(col::TID, UInt32, false),
            f(col::PPID, UInt32, false),
            f(col::UID, UInt32, false),
            f(col::GID, UInt32, false),
            f(col::CGROUP_ID, UInt64, false),
            f(col::COMM, Utf8, false),
            f(col::PATH, Utf8, true),
            f(col::PATH_RAW, Binary, true),
            f(col::PATH_TRUNCATED, Boolean, false),
            f(col::RESOLVED_PATH, Utf8, true),
            f(col::RESOLVED_PATH_RAW, Binary, true),
            f(col::RESOLVED_FROM, Utf8, true),
            f(col::RESOLVED_PARTIAL, Boolean, true),
            f(col::HOST_PATH, Utf8, true),
            f(col::HOST_PATH_RAW, Binary, true),
            f(col::PATH2, Utf8, true),
            f(col::PATH2_RAW, Binary, true),
            f(col::RESOLVED_PATH2, Utf8, true),
            f(col::RESOLVED_PATH2_RAW, Binary, true),
            f(col::DIRFD, Int32, true),
            f(col::DIRFD2, Int32, true),
            f(col::FD, Int32, true),
            f(col::FLAGS, UInt32, true),
            f(col::MODE, UInt32, true),
            f(col::RESOLVE, UInt64, true),
            f(col::DEV, UInt64, true),
            f(col::INO, UInt64, true),
            f(col::MNT_ID, UInt32, true),
            f(col::MNTNS, UInt32, false),
            f(col::RET, Int64, true),
            f(col::ERRNO, Utf8, true),
            f(col::ARGV, List(item), true),
            f(col::ARGV_TRUNCATED, Boolean, true),
            f(col::CHILD_PID, UInt32, true),
            f(col::EXIT_CODE, Int32, true),
            f(col::EXIT_SIGNAL, Int32, true),
            f(col::BYTES_READ, UInt64, true),
            f(col::BYTES_WRITTEN, UInt64, true),
            f(col::LENGTH, UInt64, true),
            f(col::PROT, UInt32, true),
            f(col::IO_URING_OP, UInt32, true),
            f(col::CAPTURE, UInt32, false),
        ])
        .with_metadata(metadata),
    )
}

/// Bits of the `capture` column beyond the kernel's record flags (`aet_common::flags`, bits
/// 0-15): the walk flags (`aet_common::walk`) of the walk at bits 16-21 and of the second walk at
/// bits 24-29, and userspace's own below.
pub mod capture {
    /// Shift of the first walk's flags.
    pub const WALK_SHIFT: u32 = 16;
    /// Shift of the second walk's flags.
    pub const WALK2_SHIFT: u32 = 24;
    /// The row comes from another mount namespace and its host path could not be mapped.
    pub const HOST_UNMAPPED: u32 = 1 << 31;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_has_the_documented_columns() {
        let s = schema(HashMap::new());
        for name in [
            "seq",
            "ts_ns",
            "kind",
            "syscall",
            "pid",
            "tid",
            "ppid",
            "uid",
            "gid",
            "cgroup_id",
            "comm",
            "path",
            "dirfd",
            "flags",
            "ret",
            "argv",
        ] {
            assert!(s.field_with_name(name).is_ok(), "missing column {name}");
        }
    }
}
