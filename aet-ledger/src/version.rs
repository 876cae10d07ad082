//! The version aet's files record (the ledger's `aet.version`, `audit.json`'s and the manifest's
//! `aet_version`): the crate's version, with the commit it was built from once the binary has said
//! which (`aet` sets it at start; this crate has no build script to learn it).

use std::sync::OnceLock;

static BUILT: OnceLock<&'static str> = OnceLock::new();

/// Sets the version with its commit (`0.1.0+1a2b3c4d5e6f`); the first call wins.
pub fn set(version: &'static str) {
    let _ = BUILT.set(version);
}

/// The version with its commit when the binary set it, else the crate's bare version.
pub fn get() -> &'static str {
    BUILT.get().copied().unwrap_or(env!("CARGO_PKG_VERSION"))
}
