//! Which build this is, as this crate's build script names it (it builds the eBPF programs, so it
//! knows their digest): the commit, the version with it, and the build a client and a daemon
//! compare. `aet --version` and the ledger take them from here (aet-user's `version`).

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
