//! `[phases.NAME.provenance]`: what a later phase (the grader) may load that an earlier phase
//! (the agent) wrote.
//!
//! ```toml
//! [phases.grading.provenance]
//! solution = ["@tracked"]   # what the agent is meant to change, relative to the repository;
//!                           # @tracked: the files the repository tracked when the run started
//! tests = ["tests/**"]      # never the solution (test paths, test configuration)
//! repository = "cheat"      # loaded from the repository, outside the solution
//! new = "warn"              # loaded from the repository: a file it did not track, outside
//!                           # `tests` (a new module the fix added)
//! outside = "cheat"         # loaded from outside the repository (site-packages, PATH, /tmp)
//! allow = ["**/.pytest_cache/**"]   # never judged (absolute, or relative to the repository)
//! repositories = ["/testbed"]       # default: the run's task repositories
//! ```
//!
//! Classes are `cheat`, `contaminant`, `warn` or `allow` (no finding).

use std::path::{Path, PathBuf};

use globset::{GlobSet, GlobSetBuilder};
use serde::Deserialize;
use toml::Spanned;

use super::{LineOf, Severity};

/// The solution glob that names the files the repository tracked at the run's start.
pub const TRACKED: &str = "@tracked";

/// `[phases.NAME.provenance]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProvenanceSpec {
    #[serde(default)]
    repositories: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    solution: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    tests: Vec<Spanned<String>>,
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    repository: Option<Spanned<String>>,
    #[serde(default)]
    new: Option<Spanned<String>>,
    #[serde(default)]
    outside: Option<Spanned<String>>,
}

/// Where a loaded file the agent wrote lies, as the policy sees it.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    /// In the repository, in the solution: expected, never a finding.
    Solution,
    /// In the repository, outside the solution (tests, configuration, a tracked file the agent
    /// was not meant to change).
    Repository,
    /// In the repository: a file it did not track at the start, outside the test paths.
    New,
    /// Outside every task repository.
    Outside,
    /// Named by `allow`: never judged.
    Allowed,
}

impl Place {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Solution => "solution",
            Self::Repository => "repository",
            Self::New => "new",
            Self::Outside => "outside",
            Self::Allowed => "allowed",
        }
    }

    /// What the group of findings says of such files.
    pub const fn words(self) -> &'static str {
        match self {
            Self::Solution => "inside the solution",
            Self::Repository => "inside the task repository, outside the solution",
            Self::New => "new in the task repository, outside the solution",
            Self::Outside => "outside the task repository",
            Self::Allowed => "allowed by the policy",
        }
    }
}

/// Whether a path relative to the repository was tracked when the run started.
pub type TrackedFn<'a> = &'a dyn Fn(&Path) -> bool;

/// A compiled `[phases.NAME.provenance]`.
#[derive(Clone, Debug)]
pub struct Provenance {
    /// Task repositories the policy names (else the run's).
    pub repositories: Vec<PathBuf>,
    /// `solution` holds `@tracked`.
    pub tracked: bool,
    solution: GlobSet,
    tests: GlobSet,
    allow_abs: GlobSet,
    allow_rel: GlobSet,
    /// The globs as written, for reports.
    pub solution_globs: Vec<String>,
    pub tests_globs: Vec<String>,
    pub allow_globs: Vec<String>,
    pub repository: Option<Severity>,
    pub new: Option<Severity>,
    pub outside: Option<Severity>,
}

impl Provenance {
    /// The class of a file in `place` (`None`: no finding).
    pub fn severity(&self, place: Place) -> Option<Severity> {
        match place {
            Place::Solution | Place::Allowed => None,
            Place::Repository => self.repository,
            Place::New => self.new,
            Place::Outside => self.outside,
        }
    }

    /// Where `path` lies: `repo` is the task repository it is in (none: outside all), with
    /// what it tracked at the start (`None`: not recorded). `None` when the answer depends on
    /// what was tracked and that is not known.
    pub fn place(
        &self,
        path: &Path,
        repo: Option<(&Path, Option<TrackedFn<'_>>)>,
    ) -> Option<Place> {
        if self.allow_abs.is_match(path) {
            return Some(Place::Allowed);
        }
        let Some((root, tracked)) = repo else {
            return Some(Place::Outside);
        };
        let rel = path.strip_prefix(root).unwrap_or(path);
        if self.allow_rel.is_match(rel) {
            return Some(Place::Allowed);
        }
        if self.tests.is_match(rel) {
            return Some(Place::Repository);
        }
        if self.solution.is_match(rel) {
            return Some(Place::Solution);
        }
        let was_tracked = tracked?(rel);
        Some(match (self.tracked, was_tracked) {
            (true, true) => Place::Solution,
            (false, true) => Place::Repository,
            (_, false) => Place::New,
        })
    }
}

fn class(
    text: &str,
    key: &str,
    v: Option<&Spanned<String>>,
    default: Option<Severity>,
) -> Result<Option<Severity>, String> {
    let Some(v) = v else {
        return Ok(default);
    };
    match v.get_ref().as_str() {
        "cheat" => Ok(Some(Severity::Cheat)),
        "contaminant" => Ok(Some(Severity::Contaminant)),
        "warn" => Ok(Some(Severity::Warning)),
        "allow" => Ok(None),
        other => Err(format!(
            "{}: provenance.{key} = {other:?}: expected \"cheat\", \"contaminant\", \"warn\" or \
             \"allow\"",
            LineOf(text, v.span())
        )),
    }
}

fn glob_set(
    text: &str,
    key: &str,
    list: &[&Spanned<String>],
    absolute: bool,
) -> Result<GlobSet, String> {
    let mut b = GlobSetBuilder::new();
    for (i, g) in list.iter().enumerate() {
        let p = g.get_ref();
        let at = LineOf(text, g.span());
        if p.split('/').any(|c| c == "..") || p.is_empty() {
            return Err(format!(
                "{at}: provenance.{key}[{i}] = {p:?}: an empty glob or one with `..`"
            ));
        }
        if !absolute && p.starts_with('/') {
            return Err(format!(
                "{at}: provenance.{key}[{i}] = {p:?}: relative to the repository (no leading /)"
            ));
        }
        // A directory named without a glob is itself and what is below it.
        for pat in aet_ledger::util::path_prefix_globs(p) {
            b.add(
                aet_ledger::util::path_glob(&pat)
                    .map_err(|e| format!("{at}: provenance.{key}[{i}] = {p:?}: {e}"))?,
            );
        }
    }
    b.build().map_err(|e| format!("provenance.{key}: {e}"))
}

/// Compiles a phase's `provenance`, every problem named with its line.
pub(super) fn compile(text: &str, s: &ProvenanceSpec) -> Result<Provenance, String> {
    let mut repositories = Vec::new();
    for (i, r) in s.repositories.iter().flatten().enumerate() {
        if !r.get_ref().starts_with('/') {
            return Err(format!(
                "{}: provenance.repositories[{i}] = {:?}: not an absolute path",
                LineOf(text, r.span()),
                r.get_ref()
            ));
        }
        repositories.push(PathBuf::from(r.get_ref().trim_end_matches('/')));
    }
    let default_solution = [Spanned::new(0..0, TRACKED.to_owned())];
    let solution_list: Vec<&Spanned<String>> = match &s.solution {
        Some(l) => l.iter().collect(),
        None => default_solution.iter().collect(),
    };
    let tracked = solution_list.iter().any(|g| g.get_ref() == TRACKED);
    for g in &solution_list {
        if g.get_ref().starts_with('@') && g.get_ref() != TRACKED {
            return Err(format!(
                "{}: provenance.solution: {:?}: the one anchor here is {TRACKED:?}",
                LineOf(text, g.span()),
                g.get_ref()
            ));
        }
    }
    let globs: Vec<&Spanned<String>> = solution_list
        .iter()
        .copied()
        .filter(|g| g.get_ref() != TRACKED)
        .collect();
    let solution = glob_set(text, "solution", &globs, false)?;
    let tests = glob_set(text, "tests", &s.tests.iter().collect::<Vec<_>>(), false)?;
    let (abs, rel): (Vec<&Spanned<String>>, Vec<&Spanned<String>>) =
        s.allow.iter().partition(|g| g.get_ref().starts_with('/'));
    Ok(Provenance {
        repositories,
        tracked,
        solution,
        tests,
        allow_abs: glob_set(text, "allow", &abs, true)?,
        allow_rel: glob_set(text, "allow", &rel, false)?,
        solution_globs: solution_list.iter().map(|g| g.get_ref().clone()).collect(),
        tests_globs: s.tests.iter().map(|g| g.get_ref().clone()).collect(),
        allow_globs: s.allow.iter().map(|g| g.get_ref().clone()).collect(),
        repository: class(
            text,
            "repository",
            s.repository.as_ref(),
            Some(Severity::Cheat),
        )?,
        new: class(text, "new", s.new.as_ref(), Some(Severity::Warning))?,
        outside: class(text, "outside", s.outside.as_ref(), Some(Severity::Cheat))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prov(text: &str) -> Result<Provenance, String> {
        let spec: ProvenanceSpec = toml::from_str(text).map_err(|e| e.to_string())?;
        compile(text, &spec)
    }

    #[test]
    fn places_by_repository_solution_tests_and_what_was_tracked() {
        let p = prov(
            "tests = ['tests/**', '**/conftest.py']\nallow = ['**/.pytest_cache/**', '/tmp/ok']\n",
        )
        .unwrap();
        assert!(p.tracked);
        let tracked = |rel: &Path| rel == Path::new("src/a.py") || rel == Path::new("tests/t.py");
        let repo = Some((Path::new("/r"), Some(&tracked as &dyn Fn(&Path) -> bool)));
        let place = |path: &str| p.place(Path::new(path), repo).unwrap();
        assert_eq!(place("/r/src/a.py"), Place::Solution);
        assert_eq!(place("/r/tests/t.py"), Place::Repository);
        assert_eq!(place("/r/src/conftest.py"), Place::Repository);
        assert_eq!(place("/r/src/new.py"), Place::New);
        assert_eq!(place("/r/.pytest_cache/v/x"), Place::Allowed);
        assert_eq!(p.place(Path::new("/tmp/ok/x"), None), Some(Place::Allowed));
        assert_eq!(p.place(Path::new("/venv/x.py"), None), Some(Place::Outside));
        assert_eq!(p.severity(Place::Repository), Some(Severity::Cheat));
        assert_eq!(p.severity(Place::New), Some(Severity::Warning));
        assert_eq!(p.severity(Place::Outside), Some(Severity::Cheat));
        assert_eq!(p.severity(Place::Solution), None);
        // Without a record of what was tracked, globs still place a file; the rest cannot be
        // told.
        assert_eq!(
            p.place(Path::new("/r/tests/x.py"), Some((Path::new("/r"), None))),
            Some(Place::Repository)
        );
        assert_eq!(
            p.place(Path::new("/r/src/x.py"), Some((Path::new("/r"), None))),
            None
        );
        let g = prov("solution = ['src/**']\nnew = 'allow'\n").unwrap();
        assert!(!g.tracked);
        let untold = Some((Path::new("/r"), None));
        assert_eq!(
            g.place(Path::new("/r/src/x.py"), untold),
            Some(Place::Solution)
        );
        assert_eq!(g.place(Path::new("/r/setup.py"), untold), None);
        assert_eq!(g.place(Path::new("/r/setup.py"), repo), Some(Place::New));
        assert_eq!(g.severity(Place::New), None);
    }

    #[test]
    fn problems_are_named_with_their_line() {
        let e = prov("\nrepository = 'fatal'\n").unwrap_err();
        assert!(
            e.contains("line 2") && e.contains("provenance.repository"),
            "{e}"
        );
        let e = prov("solution = ['@path/x']\n").unwrap_err();
        assert!(e.contains("@tracked"), "{e}");
        let e = prov("tests = ['/abs/**']\n").unwrap_err();
        assert!(e.contains("relative"), "{e}");
        let e = prov("repositories = ['rel']\n").unwrap_err();
        assert!(e.contains("absolute"), "{e}");
        let e = prov("tests = ['../x']\n").unwrap_err();
        assert!(e.contains(".."), "{e}");
        assert!(prov("unknown = 1\n").is_err());
    }
}
