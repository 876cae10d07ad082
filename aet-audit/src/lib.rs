//! The audit: a verdict from the kernel's record, against an allow-list policy. Read as floors,
//! each using only those below it and the ledger (`aet-ledger`):
//!
//! 1. [`policy`]: the TOML policy, compiled once (one `RegexSet`, `GlobSet`s), and its Landlock
//!    plan;
//! 2. [`finding`], [`batch`], [`targets`], [`reached`], [`groups`]: what a finding is, the
//!    ledger's columns as one judged row, the targets a policy names;
//! 3. [`claims`]: what a transcript's shell calls claim ran, held against the execs seen;
//!    [`scanner`], [`provenance`], [`watched`], [`phases`], [`decoys`]: the checks made on each
//!    row;
//! 4. [`engine`]: one pass over the ledger's columns, each distinct path classified once;
//! 5. [`transcript`], [`account`]: an agent's own account of its tool calls, correlated with the
//!    record;
//! 6. [`report`], [`run`]: the report and the audit from start to end;
//! 7. [`text`], [`html`], [`draft`]: the terminal summary, the self-contained HTML report, a
//!    policy drafted from a run;
//! 8. [`runs`]: many runs (discovery, tables, export).
//!
//! Verdicts and exit codes: `clean` 0, `flagged` 1 (contaminants, out-of-scope accesses or
//! warnings), `disqualified` 2 (a cheat hit), `inconclusive` 3 (the record is incomplete and no
//! cheat was found). Usage and input errors are 4.
//!
//! This crate never depends on the eBPF programs, aya or anything that needs root: the policy
//! parser and the audit build and test on stable Rust anywhere.

pub mod account;
pub mod batch;
pub mod claims;
pub mod decoys;
pub mod draft;
pub mod engine;
pub mod finding;
pub mod groups;
pub mod html;
pub mod phases;
pub mod policy;
pub mod programs;
pub mod provenance;
pub mod reached;
pub mod report;
pub mod run;
pub mod runs;
pub mod scanner;
pub mod targets;
pub mod text;
pub mod transcript;
pub mod watched;

pub use batch::COLUMNS;
pub use finding::{Ancestor, Class, Finding, Outcome, Proc};
pub use reached::Reached;
pub use report::{
    BarrierInfo, Counts, REPORT_FORMAT, REPORT_VERSION, Report, RunInfo, TranscriptHit,
    TranscriptPath, Transcripts, Verdict,
};
pub use run::{AuditError, Options, audit, audit_with};
pub use text::render_text;

#[cfg(test)]
mod tests {
    /// The floors of this crate's modules, from the bottom up (the crate docs say the same).
    const FLOORS: &[&[&str]] = &[
        &["policy", "programs", "reached", "targets", "transcript"],
        &["finding", "batch"],
        &["claims"],
        &["scanner", "groups"],
        &["phases", "provenance", "watched", "decoys"],
        &["engine"],
        &["report", "draft"],
        &["account"],
        &["run", "text", "html"],
        &["runs"],
    ];

    #[test]
    fn layers_point_one_way() {
        aet_checks::layers::assert_floors(env!("CARGO_MANIFEST_DIR"), FLOORS);
    }
}
