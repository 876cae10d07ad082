//! The ledger's one schema, its version, and its metadata keys.
//!
//! Every column is documented in the README ("Ledger schema"); a change to a column's name, type
//! or meaning bumps [`SCHEMA_VERSION`]. Readers refuse a ledger whose version they do not know.

use std::{collections::HashMap, sync::Arc};

use arrow_schema::{DataType, Field, Schema, SchemaRef};

/// Version of the ledger schema written by this build.
pub const SCHEMA_VERSION: &str = "1";

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
    pub const DIRFD: &str = "dirfd";
    pub const FLAGS: &str = "flags";
    pub const MODE: &str = "mode";
    pub const RESOLVE: &str = "resolve";
    pub const RET: &str = "ret";
    pub const ERRNO: &str = "errno";
    pub const ARGV: &str = "argv";
    pub const ARGV_TRUNCATED: &str = "argv_truncated";
    pub const CHILD_PID: &str = "child_pid";
    pub const EXIT_CODE: &str = "exit_code";
    pub const EXIT_SIGNAL: &str = "exit_signal";
    pub const CAPTURE: &str = "capture";
}

/// The ledger schema, with `metadata`.
pub fn schema(metadata: HashMap<String, String>) -> SchemaRef {
    let item = Arc::new(Field::new("item", DataType::Utf8, true));
    Arc::new(
        Schema::new(vec![
            Field::new(col::SEQ, DataType::UInt64, false),
            Field::new(col::TS_NS, DataType::Int64, false),
            Field::new(col::KIND, DataType::Utf8, false),
            Field::new(col::SYSCALL, DataType::Utf8, true),
            Field::new(col::PID, DataType::UInt32, false),
            Field::new(col::TID, DataType::UInt32, false),
            Field::new(col::PPID, DataType::UInt32, false),
            Field::new(col::UID, DataType::UInt32, false),
            Field::new(col::GID, DataType::UInt32, false),
            Field::new(col::CGROUP_ID, DataType::UInt64, false),
            Field::new(col::COMM, DataType::Utf8, false),
            Field::new(col::PATH, DataType::Utf8, true),
            Field::new(col::PATH_RAW, DataType::Binary, true),
            Field::new(col::PATH_TRUNCATED, DataType::Boolean, false),
            Field::new(col::DIRFD, DataType::Int32, true),
            Field::new(col::FLAGS, DataType::UInt32, true),
            Field::new(col::MODE, DataType::UInt32, true),
            Field::new(col::RESOLVE, DataType::UInt64, true),
            Field::new(col::RET, DataType::Int64, true),
            Field::new(col::ERRNO, DataType::Utf8, true),
            Field::new(col::ARGV, DataType::List(item), true),
            Field::new(col::ARGV_TRUNCATED, DataType::Boolean, true),
            Field::new(col::CHILD_PID, DataType::UInt32, true),
            Field::new(col::EXIT_CODE, DataType::Int32, true),
            Field::new(col::EXIT_SIGNAL, DataType::Int32, true),
            Field::new(col::CAPTURE, DataType::UInt32, false),
        ])
        .with_metadata(metadata),
    )
}

/// The symbolic name of an errno value (`ENOENT`), or `E<n>` for one the platform does not name.
pub fn errno_name(errno: i32) -> &'static str {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        (0..256)
            .map(|n| {
                let e = nix::errno::Errno::from_raw(n);
                let s = format!("{e:?}");
                let s = if s == "UnknownErrno" {
                    format!("E{n}")
                } else {
                    s
                };
                &*Box::leak(s.into_boxed_str())
            })
            .collect()
    });
    match usize::try_from(errno) {
        Ok(n) if n < names.len() => names[n],
        _ => "EUNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_names() {
        assert_eq!(errno_name(2), "ENOENT");
        assert_eq!(errno_name(13), "EACCES");
        assert_eq!(errno_name(36), "ENAMETOOLONG");
        assert_eq!(errno_name(-1), "EUNKNOWN");
    }

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
