//! Which aet this is: the version, the commit it was built from and its build, one name for
//! `aet --version`, the ledger and the daemon's greeting.

/// The crate's version (`Cargo.toml`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit the binary was built from (`-dirty` with uncommitted changes; `unknown` outside a
/// git checkout).
pub const COMMIT: &str = env!("AET_COMMIT");

/// The version with its commit (`0.1.0+1a2b3c4d5e6f`): what the ledger, `audit.json` and the
/// manifest record as `aet_version` (set in `aet_ledger::version` at start).
pub const RELEASE: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("AET_COMMIT"));

/// The build: version, commit and the digest of the eBPF object. A client and a daemon of
/// different builds refuse each other (the daemon writes the client's ledger with its own code).
pub const BUILD_ID: &str = env!("AET_BUILD_ID");

/// `aet --version`: the version, then the build.
pub const LONG: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("AET_BUILD_ID"), ")");

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
