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
    use std::{
        collections::{BTreeMap, BTreeSet},
        path::Path,
    };

    /// The modules each module of this crate may use: layers point one way, `cli` → `run` →
    /// `daemon` → `monitor` → `sandbox`/`identity`/`loader` → `kernel`. The pure logic is
    /// `aet_core`'s, never re-exported here, so `crate::` names only this crate's modules.
    const ALLOWED: &[(&str, &[&str])] = &[
        (
            "cli",
            &[
                "run", "daemon", "guard", "monitor", "loader", "sandbox", "identity", "kernel",
                "proxy", "version",
            ],
        ),
        (
            "run",
            &[
                "daemon", "guard", "monitor", "loader", "sandbox", "identity", "kernel", "proxy",
                "version",
            ],
        ),
        (
            "daemon",
            &["monitor", "loader", "kernel", "guard", "proxy", "version"],
        ),
        ("guard", &["kernel"]),
        ("monitor", &["loader", "kernel", "proxy"]),
        ("identity", &["sandbox", "kernel"]),
        ("sandbox", &["kernel", "proxy"]),
        ("loader", &["kernel"]),
        ("kernel", &[]),
        // The sandbox's proxy: what its requests are (a row each) and how it serves them.
        ("proxy", &[]),
        // The fuzz targets' bodies call into every layer.
        (
            "fuzz",
            &[
                "daemon", "monitor", "proxy", "sandbox", "loader", "kernel", "identity", "run",
            ],
        ),
        // Which build this is (no code of its own).
        ("version", &[]),
    ];

    /// The `crate::X` modules a source text names, grouped `use crate::{X, Y::…}` included.
    fn uses(text: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for (i, _) in text.match_indices("crate::") {
            let rest = &text[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let body = &group[..group.find("};").unwrap_or(group.len())];
                // Names at the top level of the group.
                for part in split_top(body) {
                    let name: String = part
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        out.insert(name);
                    }
                }
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.insert(name);
            }
        }
        out.remove("");
        out
    }

    fn split_top(body: &str) -> Vec<&str> {
        let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&body[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&body[start..]);
        parts
    }

    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn layers_point_one_way() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut all = Vec::new();
        files(&src, &mut all);
        let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
        let mut wrong = Vec::new();
        for f in all {
            let rel = f.strip_prefix(&src).unwrap();
            let module = rel
                .iter()
                .next()
                .unwrap()
                .to_str()
                .unwrap()
                .trim_end_matches(".rs");
            if matches!(module, "lib" | "main") {
                continue;
            }
            let ok = allowed
                .get(module)
                .unwrap_or_else(|| panic!("module {module} has no layer in ALLOWED"));
            let text = std::fs::read_to_string(&f).unwrap();
            for used in uses(&text) {
                if used != module && !ok.contains(&used.as_str()) {
                    wrong.push(format!("{} uses crate::{used}", rel.display()));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "imports against the layers:\n{}",
            wrong.join("\n")
        );
        // The check sees grouped imports.
        assert_eq!(
            uses("use crate::{a::b, c::{d, e}, f};\nlet x = crate::g::h();"),
            ["a", "c", "f", "g"].into_iter().map(String::from).collect()
        );
    }
}
