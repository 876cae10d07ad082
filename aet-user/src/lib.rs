//! aet: prove what an AI coding agent touched.
//!
//! The library behind the `aet` binary, its parts from the front end down (each may use those
//! below it, and the crates below it by their names: `aet-monitor`, `aet-sandbox`, `aet-proxy`,
//! `aet-kernel`, `aet-audit`, `aet-ledger`):
//!
//! - [`cli`]: the command line;
//! - [`run`]: the life of a run (`aet run`, `aet monitor`), its launch, session and signing;
//! - [`daemon`]: the client of the resident monitor (`aet_monitor::daemon`), and the start of
//!   one for a run that finds none;
//! - [`version`]: which build this is;
//! - [`fuzz`]: the bodies of the fuzz targets (every parser of the agent's bytes).
pub mod cli;
pub mod daemon;
pub mod fuzz;
pub mod run;
pub mod version;

#[cfg(test)]
mod tests {
    /// The floors of this crate's modules, from the top down: `cli` → `run` → `daemon` →
    /// `version`. The crates below are named by their names, never re-exported here, so `crate::`
    /// names only this crate's modules.
    const FLOORS: &[&[&str]] = &[
        &["version"],
        &["daemon"],
        &["run"],
        // The fuzz targets' bodies call into every floor.
        &["cli", "fuzz"],
    ];

    #[test]
    fn layers_point_one_way() {
        aet_checks::layers::assert_floors(env!("CARGO_MANIFEST_DIR"), FLOORS);
    }
}
