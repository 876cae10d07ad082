//! One build for the whole suite: the binary's build, the end-to-end tests' and maturin's must
//! find every crate the unit tests' build made. A dependency whose features differ between them
//! (a feature a dev-dependency turns on, a host crate of a build script) changes the hash of
//! everything above it, and a cold suite then compiles DataFusion and the rest a second time
//! (docs/build.md, "One build"). This compares the units cargo would compile for each build
//! (`cargo +nightly build --unit-graph`: each unit's package, features, profile, mode, target and
//! dependencies) and names what the others would compile anew.

use std::collections::{HashMap, HashSet};
use std::process::Command;

use anyhow::{Context as _, ensure};

use crate::{root, setup};

/// The unit tests' selection (`cargo xtask test`'s "unit tests" step).
pub const UNIT_TESTS: &[&str] = &[
    "test",
    "--release",
    "--workspace",
    "--exclude",
    "aet-ledger",
    "--exclude",
    "aet-audit",
    "--exclude",
    "aet-checks",
    "--exclude",
    "aet-tests",
    "--exclude",
    "aet-ebpf",
];

/// The binary's build (`cargo xtask build`; maturin and cargo-deb take the same one).
pub const BINARY: &[&str] = &[
    "build",
    "--release",
    "--package",
    "aet-user",
    "--bin",
    "aet",
];

/// The end-to-end test files' build (the pool's first step).
pub const END_TO_END: &[&str] = &["test", "--release", "--package", "aet-tests", "--no-run"];

/// The builds that must reuse the unit tests' crates, and the package each may compile itself.
const OTHERS: &[(&str, &[&str], &str)] = &[
    (
        "the binary (`cargo xtask build`, maturin, cargo-deb)",
        BINARY,
        "aet-user",
    ),
    ("the end-to-end tests", END_TO_END, "aet-tests"),
];

/// Each unit's identity (its package, features, profile, mode, target and, recursively, its
/// dependencies'), with its package's name.
fn units(args: &[&str]) -> anyhow::Result<HashMap<u64, String>> {
    let out = setup::with_cache(&mut Command::new("cargo"))
        .env("PATH", setup::path_with_cargo_bin())
        .current_dir(root())
        .arg("+nightly")
        .args(args)
        .args(["--unit-graph", "-Z", "unstable-options"])
        .output()
        .context("cargo +nightly --unit-graph")?;
    ensure!(
        out.status.success(),
        "cargo +nightly {} --unit-graph: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let graph: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let list = graph["units"].as_array().context("a unit graph")?;
    let mut memo: Vec<Option<u64>> = vec![None; list.len()];
    fn ident(i: usize, list: &[serde_json::Value], memo: &mut Vec<Option<u64>>) -> u64 {
        use std::hash::{Hash as _, Hasher as _};
        if let Some(h) = memo[i] {
            return h;
        }
        let u = &list[i];
        let mut profile = u["profile"].clone();
        // `cargo test --release` names its profile `bench`, a build `release`: the same
        // settings, the same artefacts.
        if let Some(p) = profile.as_object_mut() {
            p.remove("name");
        }
        let mut deps: Vec<u64> = u["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["index"].as_u64())
            .map(|d| ident(d as usize, list, memo))
            .collect();
        deps.sort_unstable();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (
            u["pkg_id"].to_string(),
            u["features"].to_string(),
            profile.to_string(),
            u["mode"].to_string(),
            u["target"]["kind"].to_string(),
            u["target"]["name"].to_string(),
            u["platform"].to_string(),
            deps,
        )
            .hash(&mut h);
        let v = h.finish();
        memo[i] = Some(v);
        v
    }
    let mut out = HashMap::new();
    for i in 0..list.len() {
        let name = package_name(list[i]["pkg_id"].as_str().unwrap_or_default());
        out.insert(ident(i, list, &mut memo), name);
    }
    Ok(out)
}

/// A package's name from its id (`registry+https://…#serde_core@1.0.229`,
/// `path+file:///…/aet-user#0.1.0`, `path+file:///…/tests#aet-tests@0.1.0`).
fn package_name(id: &str) -> String {
    let tail = id.rsplit('/').next().unwrap_or(id);
    match tail.split_once('#') {
        Some((dir, rest)) => rest.split_once('@').map_or(dir, |(name, _)| name),
        None => tail,
    }
    .to_owned()
}

/// Fails, naming the crates, when another build of the suite would compile a crate the unit
/// tests' build did not (beyond its own package).
pub fn check_one_build() -> anyhow::Result<()> {
    let tests = units(UNIT_TESTS)?;
    for (what, args, own) in OTHERS {
        let other = units(args)?;
        let anew: HashSet<&str> = other
            .iter()
            .filter(|(h, name)| !tests.contains_key(h) && name.as_str() != *own)
            .map(|(_, name)| name.as_str())
            .collect();
        let mut anew: Vec<&str> = anew.into_iter().collect();
        anew.sort_unstable();
        ensure!(
            anew.is_empty(),
            "{what} would compile {} crate(s) the unit tests' build makes with other features \
             (a cold suite would build them twice; docs/build.md, \"One build\"): {}",
            anew.len(),
            anew.join(", ")
        );
    }
    println!("ok   one build: the binary and the end-to-end tests reuse the unit tests' crates");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn package_names_from_ids() {
        for (id, name) in [
            (
                "registry+https://github.com/rust-lang/crates.io-index#serde_core@1.0.229",
                "serde_core",
            ),
            ("path+file:///work/main/aet-user#0.1.0", "aet-user"),
            ("path+file:///work/main/tests#aet-tests@0.1.0", "aet-tests"),
        ] {
            assert_eq!(super::package_name(id), name);
        }
    }
}
