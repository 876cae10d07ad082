//! The helpers of tests/sandbox.rs and tests/sandbox_run.rs.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::Output,
};

use aet_tests::*;

/// A repository, a workspace and the rest of the seed's example, in a scratch directory.
pub struct Fixture {
    pub tree: Tree,
}

impl std::ops::Deref for Fixture {
    type Target = Tree;
    fn deref(&self) -> &Tree {
        &self.tree
    }
}

impl Fixture {
    pub fn new() -> Self {
        let tree = Tree::new();
        tree.dirs(&["ws", "state", "toolchain/bin"])
            .file("repo/inputs/answers/key.txt", "SECRET\n")
            .file("repo/inputs/golden.yaml", "expected: 42\n")
            .file("repo/inputs/data.txt", "data\n")
            .file("repo/tools/tool.sh", "echo tool\n")
            .file("scratch/sibling-run.txt", "another agent's work\n");
        Self { tree }
    }

    /// The seed's example with this fixture's paths, as TOML entries (key -> value).
    pub fn seed(&self) -> BTreeMap<&'static str, String> {
        let list = |xs: &[&str]| {
            format!(
                "[{}]",
                xs.iter()
                    .map(|x| format!("{:?}", self.s(x)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        BTreeMap::from([
            ("workspace", format!("{:?}", self.s("ws"))),
            ("allow", list(&["repo/inputs", "repo/tools"])),
            ("rw_binds", list(&["state"])),
            ("deny", list(&["repo/inputs/answers"])),
            ("mask_files", list(&["repo/inputs/golden.yaml"])),
            ("extra_binds", list(&["toolchain"])),
            ("tmpfs", format!("[\"/tmp\", {:?}]", self.s("scratch"))),
            ("unsetenv", "[\"CLAUDE_CODE_SSE_PORT\"]".into()),
            ("dns", "true".into()),
        ])
    }

    /// Writes a spec file from entries.
    pub fn spec(&self, entries: &BTreeMap<&'static str, String>) -> PathBuf {
        let path = self.p(&format!("spec-{}.toml", unique()));
        let text: String = entries
            .iter()
            .map(|(k, v)| format!("{k} = {v}\n"))
            .collect();
        fs::write(&path, text).unwrap();
        path
    }
}

/// `aet sandbox run -q SPEC -- sh -c SCRIPT`.
pub fn sandboxed(spec: &Path, script: &str) -> Output {
    aet()
        .args(["sandbox", "run", "-q"])
        .arg(spec)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap()
}

/// Runs a script that prints `name=ok` or `name=fail` lines and returns them as a map.
pub fn outcomes(spec: &Path, checks: &[(&str, String)]) -> BTreeMap<String, String> {
    let script: String = checks
        .iter()
        .map(|(name, cmd)| {
            format!(
                "if ( {cmd} ) >/dev/null 2>&1; then echo {name}=ok; else echo {name}=fail; fi\n"
            )
        })
        .collect();
    let out = sandboxed(spec, &script);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect()
}

pub fn assert_outcomes(got: &BTreeMap<String, String>, want: &[(&str, &str)]) {
    for (name, w) in want {
        assert_eq!(
            got.get(*name).map(String::as_str),
            Some(*w),
            "{name}: {got:?}"
        );
    }
}
