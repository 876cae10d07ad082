//! Which aet this is: the version, the commit it was built from and its build, one name for
//! `aet --version`, the ledger and the daemon's greeting.

/// The crate's version (`Cargo.toml`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub use aet_monitor::build_id::{BUILD_ID, COMMIT, LONG, RELEASE};

#[cfg(test)]
mod tests {
    #[test]
    fn the_build_names_the_version_and_the_commit() {
        assert!(super::BUILD_ID.starts_with(&format!("{}+{}", super::VERSION, super::COMMIT)));
        assert!(super::BUILD_ID.contains(".ebpf-"), "{}", super::BUILD_ID);
        assert!(super::LONG.contains(super::BUILD_ID));
        assert!(super::BUILD_ID.starts_with(&format!("{}.ebpf-", super::RELEASE)));
    }

    /// The wheel's version is the Python package's (`pyproject.toml`, `aet.__version__`), and
    /// the Debian package's the crate's: one version everywhere.
    #[test]
    fn the_python_package_has_the_crates_version() {
        let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../python");
        let pyproject = std::fs::read_to_string(python.join("pyproject.toml")).unwrap();
        let init = std::fs::read_to_string(python.join("src/aet/__init__.py")).unwrap();
        let v = super::VERSION;
        assert!(
            pyproject.contains(&format!("\nversion = \"{v}\"\n")),
            "python/pyproject.toml: not version {v}"
        );
        assert!(
            init.contains(&format!("__version__ = \"{v}\"\n")),
            "aet/__init__.py: not version {v}"
        );
    }
}
