//! A run directory: the files one run holds, by name. Every part of aet that writes or reads a
//! run's files names them from here.
//!
//! ```text
//! RUN_DIR/ledger.arrow    the record (aet run, aet monitor)
//! RUN_DIR/audit.json      the audit's report (aet run --policy, aet audit --json)
//! RUN_DIR/audit.html      the same report for a person
//! RUN_DIR/manifest.json   the signed manifest (aet run --sign)
//! ```

use std::path::{Path, PathBuf};

/// The ledger.
pub const LEDGER: &str = "ledger.arrow";
/// The audit report (JSON).
pub const AUDIT: &str = "audit.json";
/// The audit report (HTML).
pub const AUDIT_HTML: &str = "audit.html";
/// The signed manifest.
pub const MANIFEST: &str = "manifest.json";
/// While a run goes on: the path of its control socket (`aet phase` reads it).
pub const CONTROL: &str = "control";

/// The ledger a path names: the path itself, or `DIR/ledger.arrow` for a run directory.
pub fn ledger_of(p: &Path) -> PathBuf {
    if p.is_dir() {
        p.join(LEDGER)
    } else {
        p.to_owned()
    }
}

/// The audit report of the run whose ledger is `ledger`: `audit.json` beside it.
pub fn audit_beside(ledger: &Path) -> PathBuf {
    ledger.parent().unwrap_or(Path::new(".")).join(AUDIT)
}

/// The mode a file aet writes into `dir` is created with: `0644`, or `0640` when `dir` lets
/// others search it but not list it (a run directory holding the default home of an agent
/// identity that runs without a sandbox): the agent, which passes through to its home, cannot
/// open aet's files by name.
pub fn file_mode(dir: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt as _;
    match std::fs::metadata(dir) {
        Ok(m) if m.mode() & 0o005 == 0o001 => 0o640,
        _ => 0o644,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_directory_names_its_ledger_and_its_report_beside_it() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(ledger_of(d.path()), d.path().join("ledger.arrow"));
        let file = d.path().join("other.arrow");
        assert_eq!(ledger_of(&file), file);
        assert_eq!(audit_beside(&file), d.path().join("audit.json"));
        assert_eq!(
            audit_beside(Path::new("ledger.arrow")),
            Path::new("audit.json")
        );
    }

    #[test]
    fn a_directory_others_may_only_search_keeps_its_files_from_them() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(file_mode(d.path()), 0o644);
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        assert_eq!(file_mode(d.path()), 0o640);
    }
}
