//! What a run writes and what reads it back: the ledger (one Arrow IPC file per run, one row
//! per event), its metadata, its hash chain and signature, its summary, the watched files'
//! fingerprints, the wire format between aet and its stage, the barrier's data types, run
//! directories and their manifest. Read as floors, each using only those below it:
//!
//! 1. [`util`], [`version`], [`columns`], [`ipc`], [`decoys`]: helpers, the build, the IPC file's
//!    bytes, the decoys' record;
//! 2. [`barrier`], [`plan`], [`access`]: the barrier's rules, what aet hands its stage and what
//!    it reports back, the access classifier;
//! 3. [`watch`], [`incomplete`], [`schema`]: watched files' fingerprints, why a record is
//!    incomplete, the ledger's schema;
//! 4. [`metadata`], [`chain`], [`writer`], [`reader`], [`rows`], [`recover`], [`summary`]: the
//!    ledger's metadata, its chain, writing and reading it;
//! 5. [`run_dir`], [`manifest`]: a run directory's files and their signed manifest.
//!
//! Depends on `aet-common` alone of aet's crates; never on the eBPF programs or anything that
//! needs root.

pub mod access;
pub mod assess;
pub mod barrier;
pub mod chain;
pub mod columns;
pub mod decode;
pub mod decoys;
pub mod hosts;
pub mod incomplete;
pub mod ipc;
pub mod manifest;
pub mod metadata;
pub mod plan;
pub mod ppath;
pub mod reader;
pub mod recover;
pub mod rows;
pub mod run_dir;
pub mod safe_open;
pub mod schema;
pub mod summary;
pub mod util;
pub mod version;
pub mod watch;
pub mod writer;

#[cfg(test)]
mod tests {
    /// The floors of this crate's modules, from the bottom up (the crate docs say the same).
    const FLOORS: &[&[&str]] = &[
        &[
            "util",
            "version",
            "ipc",
            "decode",
            "run_dir",
            "access",
            "hosts",
            "decoys",
            "safe_open",
        ],
        &["ppath", "columns"],
        &["barrier", "incomplete", "watch", "schema"],
        &["plan", "chain"],
        &["metadata", "writer"],
        &["reader"],
        &["assess", "recover", "rows", "manifest"],
        &["summary"],
    ];

    #[test]
    fn layers_point_one_way() {
        aet_checks::layers::assert_floors(env!("CARGO_MANIFEST_DIR"), FLOORS);
    }
}
