//! `[watch.NAME]` and `[limits]`: the files whose content decides grading, and what a change
//! to one counts as.
//!
//! ```toml
//! [watch.tests]
//! paths = ["tests/**", "**/conftest.py", "@site/*.pth", "@path/*"]
//! change = "cheat"            # a change the run made: cheat (default), contaminant, warn
//! outside = "inconclusive"    # a change no row of the run could have made: inconclusive
//!                             # (default), cheat, contaminant, warn, allow
//! fingerprint = "content"     # content (default): SHA-256 of every file; tree: metadata
//!                             # only, a directory by its whole subtree (site-packages)
//! [limits]
//! watch_files = 50000         # most entries a snapshot fingerprints
//! watch_bytes = 1073741824    # most bytes a snapshot hashes
//! ```

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::{LineOf, Severity};
use aet_ledger::watch::{Limits, WatchSpec, resolve};

/// `[watch.NAME]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WatchEntrySpec {
    paths: Vec<Spanned<String>>,
    #[serde(default)]
    change: Option<Spanned<String>>,
    #[serde(default)]
    outside: Option<Spanned<String>>,
    #[serde(default)]
    fingerprint: Option<Spanned<String>>,
}

/// `[limits]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitsSpec {
    #[serde(default)]
    watch_files: Option<u64>,
    #[serde(default)]
    watch_bytes: Option<u64>,
}

/// What a change to a watched file that no row of the run could have made counts as.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outside {
    /// The record does not explain the file: the run is inconclusive.
    Inconclusive,
    /// Someone outside the run may change it (the harness): reported, no finding.
    Allow,
    Cheat,
    Contaminant,
    /// A warning (`"warn"` in a policy).
    #[serde(rename = "warn")]
    Warning,
}

impl Outside {
    /// The finding class it makes, if any.
    pub fn severity(self) -> Option<Severity> {
        match self {
            Self::Cheat => Some(Severity::Cheat),
            Self::Contaminant => Some(Severity::Contaminant),
            Self::Warning => Some(Severity::Warning),
            Self::Inconclusive | Self::Allow => None,
        }
    }
}

/// A compiled `[watch.NAME]`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Watch {
    pub name: String,
    pub paths: Vec<String>,
    pub change: Severity,
    pub outside: Outside,
    /// `fingerprint = "tree"`: by metadata, directories by their subtree.
    pub tree: bool,
}

impl Watch {
    /// The rule name its findings carry.
    pub fn rule(&self) -> String {
        format!("watch.{}", self.name)
    }

    pub fn spec(&self) -> WatchSpec {
        WatchSpec {
            name: self.name.clone(),
            paths: self.paths.clone(),
            tree: self.tree,
        }
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The watches of a policy, every problem named with its line.
pub(super) fn compile(
    text: &str,
    specs: &std::collections::BTreeMap<String, Spanned<WatchEntrySpec>>,
) -> Result<Vec<Watch>, String> {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (name, s) in specs {
        let at = LineOf(text, s.span());
        let s = s.get_ref();
        if !valid_name(name) {
            problems.push(format!(
                "{at}: watch.{name}: a watch's name is 1 to 64 of a-z, A-Z, 0-9, '_' and '-'"
            ));
            continue;
        }
        if s.paths.is_empty() {
            problems.push(format!(
                "{at}: watch.{name}.paths is empty: the watch could never see a file"
            ));
        }
        for (i, p) in s.paths.iter().enumerate() {
            if let Err(e) = resolve::check(p.get_ref()) {
                problems.push(format!(
                    "{}: watch.{name}.paths[{i}] = {:?}: {e}",
                    LineOf(text, p.span()),
                    p.get_ref()
                ));
            }
        }
        let change = match s.change.as_ref() {
            None => Severity::Cheat,
            Some(v) => match v.get_ref().as_str() {
                "cheat" => Severity::Cheat,
                "contaminant" => Severity::Contaminant,
                "warn" => Severity::Warning,
                other => {
                    problems.push(format!(
                        "{}: watch.{name}.change = {other:?}: expected \"cheat\", \
                         \"contaminant\" or \"warn\"",
                        LineOf(text, v.span())
                    ));
                    continue;
                }
            },
        };
        let outside = match s.outside.as_ref() {
            None => Outside::Inconclusive,
            Some(v) => match v.get_ref().as_str() {
                "inconclusive" => Outside::Inconclusive,
                "allow" => Outside::Allow,
                "cheat" => Outside::Cheat,
                "contaminant" => Outside::Contaminant,
                "warn" => Outside::Warning,
                other => {
                    problems.push(format!(
                        "{}: watch.{name}.outside = {other:?}: expected \"inconclusive\", \
                         \"allow\", \"cheat\", \"contaminant\" or \"warn\"",
                        LineOf(text, v.span())
                    ));
                    continue;
                }
            },
        };
        let tree = match s
            .fingerprint
            .as_ref()
            .map(|v| (v.get_ref().as_str(), v.span()))
        {
            None | Some(("content", _)) => false,
            Some(("tree", _)) => true,
            Some((other, span)) => {
                problems.push(format!(
                    "{}: watch.{name}.fingerprint = {other:?}: expected \"content\" or \"tree\"",
                    LineOf(text, span)
                ));
                continue;
            }
        };
        out.push(Watch {
            name: name.clone(),
            paths: s.paths.iter().map(|p| p.get_ref().clone()).collect(),
            change,
            outside,
            tree,
        });
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems.join("\n"))
    }
}

/// `[limits]`, with the defaults for what is not given.
pub(super) fn limits(spec: Option<&LimitsSpec>) -> Result<Limits, String> {
    let d = Limits::default();
    let s = spec.cloned().unwrap_or_default();
    let l = Limits {
        files: s.watch_files.unwrap_or(d.files),
        bytes: s.watch_bytes.unwrap_or(d.bytes),
    };
    if l.files == 0 {
        return Err("limits.watch_files = 0: no watched file could be fingerprinted".into());
    }
    Ok(l)
}
