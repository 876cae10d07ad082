//! aet: prove what an AI coding agent touched.
//!
//! The library behind the `aet` binary, its parts from the front end down (each may use those
//! below it, and the pure logic of `aet-core`, by that crate's name):
//!
//! - [`cli`]: the command line;
//! - [`run`]: the life of a run (`aet run`, `aet monitor`), its launch, session and signing;
//! - [`daemon`]: the resident monitor that serves runs;
//! - [`guard`]: the watchdog process that kills what a dead aet leaves behind;
//! - [`monitor`]: kernel records to ledger rows (slots, consumer, row maker, overload);
//! - [`sandbox`] and [`identity`]: the agent's view and its uid;
//! - [`loader`]: the eBPF programs, loaded and attached;
//! - [`kernel`]: cgroups, /proc, BTF, tracefs, the mount table;
//! - [`version`]: which build this is;
//! - [`fuzz`]: the bodies of the fuzz targets (every parser of the agent's bytes).
pub mod cli;
pub mod daemon;
pub mod fuzz;
pub mod guard;
pub mod identity;
pub mod kernel;
pub mod loader;
pub mod monitor;
pub mod proxy;
pub mod run;
pub mod sandbox;
pub mod version;

#[cfg(test)]
mod tests {
    /// The floors of this crate's modules, from the bottom up: `cli` → `run` → `daemon` →
    /// `monitor`/`identity` → `sandbox`/`loader`/`guard` → `kernel`/`proxy`. The pure logic is
    /// `aet_ledger`'s and `aet_audit`'s, never re-exported here, so `crate::` names only this
    /// crate's modules.
    const FLOORS: &[&[&str]] = &[
        &["kernel", "proxy", "version"],
        &["loader", "guard", "sandbox"],
        &["identity", "monitor"],
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
