//! aet's pure logic: the access classifier, the ledger (schema, writer, readers, summary), the
//! policy and its Landlock plan, the audit (scan, findings, reports), many runs (discovery,
//! tables, export), a run directory's files, the stage's plan and report formats, and shared
//! helpers.
//!
//! This crate must never depend on the eBPF programs, aya or anything that needs root: it builds
//! and tests on stable Rust alone, so the policy parser and the audit can be developed and
//! checked anywhere. The `aet` crate (`aet-user`) adds the monitor, the sandbox and the CLI.
pub mod access;
pub mod audit;
pub mod docgen;
pub mod ledger;
pub mod manifest;
pub mod policy;
pub mod run_dir;
pub mod runs;
pub mod stage;
pub mod util;
pub mod version;
pub mod watch;
