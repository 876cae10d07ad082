//! Policies: what a run may touch, and the patterns whose hits disqualify, flag or warn.
//!
//! A policy is TOML. Every error names the file, the line and the key: TOML syntax, unknown keys
//! and wrong types come from the parser; bad regular expressions and globs are checked here with
//! the spans the parser kept.

pub mod barrier;
mod globs;
mod lint;
pub mod programs;
pub mod provenance;
pub mod watch;

use std::{
    collections::BTreeMap,
    fmt, fs,
    path::{Path, PathBuf},
};

use globs::{endpoint_globs, globs};
use globset::GlobSet;
use regex::bytes::RegexSet;
use serde::{Deserialize, Serialize};
use toml::Spanned;

pub use aet_ledger::access::{Access, Accesses};
use aet_ledger::hosts;

/// What a failed (denied) access at a rule's path counts as.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Attempts {
    /// Not counted.
    Ignore,
    /// A warning that says "attempted" (`"warn"` in a policy).
    #[serde(rename = "warn")]
    Warning,
    /// The same as a successful access.
    Same,
}

/// How bad a rule's hit is.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Disqualifies the run.
    Cheat,
    /// Flags the run: isolation is not clean.
    Contaminant,
    /// For human review: its findings are warnings (`[warns]`, `"warn"` in a policy).
    #[serde(rename = "warn")]
    Warning,
}

impl Severity {
    pub fn key(self) -> &'static str {
        match self {
            Self::Cheat => "cheats",
            Self::Contaminant => "contaminants",
            Self::Warning => "warns",
        }
    }
}

/// A rule as written: `name = 'regex'` or `name = { pattern = 'regex', access = [...],
/// attempts = "..." }` (kept as a spanned value so errors can name the line).
type RuleSpec = Spanned<toml::Value>;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AllowSpec {
    #[serde(default)]
    read: Vec<Spanned<String>>,
    #[serde(default)]
    write: Vec<Spanned<String>>,
    #[serde(default)]
    exec: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    probe: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    connect: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    hosts: Option<Vec<Spanned<String>>>,
    /// The SHA-256s of the programs (executed, or mapped executable) a run may run.
    #[serde(default)]
    programs: Option<Vec<Spanned<String>>>,
}

/// `[processes]`: what an access to a process outside the run counts as.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessesSpec {
    #[serde(default)]
    outside: Option<Spanned<String>>,
    #[serde(default)]
    lingering: Option<Spanned<String>>,
}

/// `[transcripts]`: what a claim the record does not bear out counts as (listed only, by
/// default).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TranscriptsSpec {
    #[serde(default)]
    unrun: Option<Spanned<String>>,
    #[serde(default)]
    unaccounted: Option<Spanned<String>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicySpec {
    #[serde(default)]
    processes: Option<ProcessesSpec>,
    #[serde(default)]
    transcripts: Option<TranscriptsSpec>,
    #[serde(default)]
    allow: Option<AllowSpec>,
    #[serde(default)]
    protected: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    cheats: BTreeMap<String, RuleSpec>,
    #[serde(default)]
    contaminants: BTreeMap<String, RuleSpec>,
    #[serde(default)]
    warns: BTreeMap<String, RuleSpec>,
    /// `[phases.NAME]`: the rules of a later phase of the run (`grading`, ...), each a policy of
    /// its own (without `protected`, `processes` or phases of its own).
    #[serde(default)]
    phases: BTreeMap<String, Spanned<PolicySpec>>,
    /// `[watch.NAME]`: files whose content decides grading, fingerprinted before and after the
    /// agent's phase.
    #[serde(default)]
    watch: BTreeMap<String, Spanned<watch::WatchEntrySpec>>,
    #[serde(default)]
    limits: Option<watch::LimitsSpec>,
    /// `[phases.NAME.provenance]`: what the phase may load that an earlier phase wrote.
    #[serde(default)]
    provenance: Option<Spanned<provenance::ProvenanceSpec>>,
}

/// A policy that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read policy {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("policy {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// One compiled rule.
#[derive(Clone, Debug, Serialize)]
pub struct Rule {
    /// `cheats.golden`.
    pub name: String,
    pub severity: Severity,
    pub pattern: String,
    /// Accesses that count as a hit.
    pub access: Vec<Access>,
    #[serde(skip)]
    pub access_mask: u8,
    pub attempts: Attempts,
    pub target: Target,
    /// A path rule that also names a hash (`{ pattern, sha256 }`): it hits only a program row
    /// of that content.
    pub sha256: Option<String>,
}

/// The allow-list, compiled.
#[derive(Clone, Debug)]
pub struct Allow {
    pub read: GlobSet,
    pub write: GlobSet,
    pub exec: Option<GlobSet>,
    pub probe: Option<GlobSet>,
    /// Network endpoints the run may connect or send to (when given).
    pub connect: Option<GlobSet>,
    /// Host names the run may look up and connect to by name (when given).
    pub hosts: Option<hosts::HostSet>,
    /// The SHA-256s of the programs the run may execute or map executable (when given).
    pub programs: Option<std::collections::BTreeSet<String>>,
    pub patterns: BTreeMap<&'static str, Vec<String>>,
}

/// Most bytes of a policy file: more is refused before anything is compiled.
pub const MAX_POLICY_BYTES: usize = 4 << 20;
/// Most rules (cheats, contaminants and warnings together) of a policy.
pub const MAX_RULES: usize = 10_000;
/// Most bytes one rule's compiled pattern may take.
const RULE_REGEX_BYTES: usize = 1 << 20;
/// Most bytes all rules' patterns together may take compiled.
const SET_REGEX_BYTES: usize = 64 << 20;

/// A policy, compiled once: every rule's pattern in one [`RegexSet`], the allow-lists in
/// [`GlobSet`]s.
#[derive(Clone, Debug)]
pub struct Policy {
    pub path: PathBuf,
    pub rules: Vec<Rule>,
    pub set: RegexSet,
    /// The argv rules' patterns, and each one's index in `rules`.
    pub argv_set: RegexSet,
    pub argv_rules: Vec<usize>,
    pub allow: Option<Allow>,
    /// Named protected files (name, path): matched by path and by identity.
    pub protected: Vec<(String, PathBuf)>,
    /// What reading, writing, tracing or taking an fd of a process outside the run counts as
    /// (`[processes] outside`, a warning by default); `None`: not reported.
    pub processes_outside: Option<Severity>,
    /// What a process started in an earlier phase that acts in a later one counts as
    /// (`[processes] lingering`, a cheat by default; one that is only still alive is a
    /// warning); `None`: not reported.
    pub lingering: Option<Severity>,
    /// What a shell call whose programs never ran counts as (`[transcripts] unrun`), and a
    /// process no tool call accounts for (`[transcripts] unaccounted`); `None` (the default):
    /// listed in the report, not a finding.
    pub unrun_calls: Option<Severity>,
    pub unaccounted_processes: Option<Severity>,
    /// `[phases.NAME]`: the policy each later phase is judged by, its rules named
    /// `phases.NAME.cheats.x`. The top-level rules judge the `agent` phase; a phase without a
    /// section is recorded and reported, not judged.
    pub phases: BTreeMap<String, Policy>,
    /// The phase this policy judges (`agent` for the top level).
    pub phase: String,
    /// `[watch.NAME]`: the watched files, in name order.
    pub watches: Vec<watch::Watch>,
    /// `[limits]`: what fingerprinting the watched files may cost.
    pub watch_limits: aet_ledger::watch::Limits,
    /// `[phases.NAME.provenance]`: what this phase may load that an earlier one wrote.
    pub provenance: Option<provenance::Provenance>,
    /// Rules that can match only by an unlikely chance, each named with its line (see
    /// [`Policy::warnings`]).
    pub warnings: Vec<String>,
}

pub(crate) struct LineOf<'a>(pub(crate) &'a str, pub(crate) std::ops::Range<usize>);

impl fmt::Display for LineOf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = self.0[..self.1.start.min(self.0.len())]
            .matches('\n')
            .count()
            + 1;
        write!(f, "line {line}")
    }
}

fn defaults(sev: Severity) -> (Vec<Access>, Attempts) {
    match sev {
        Severity::Cheat => (
            vec![
                Access::Read,
                Access::Write,
                Access::Exec,
                Access::Connect,
                Access::Host,
            ],
            Attempts::Warning,
        ),
        Severity::Contaminant => (
            vec![
                Access::Read,
                Access::Write,
                Access::Exec,
                Access::Connect,
                Access::Host,
            ],
            Attempts::Ignore,
        ),
        Severity::Warning => (Access::ALL.to_vec(), Attempts::Same),
    }
}

/// What a rule's pattern is matched against.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// Every path of a row (and a `net` row's endpoint).
    Path,
    /// An exec's argument vector, joined with spaces.
    Argv,
    /// A host name (`host:NAME`): `dns` rows and `net` rows that name one.
    Host,
    /// Text, as the seed's rules matched it: every path of a row (as [`Target::Path`]) and
    /// every command (an exec's argument vector as [`Target::Argv`], and the commands of the
    /// agent's transcripts).
    Text,
    /// A program's content (`sha256:HEX`): executed files and files mapped executable.
    Program,
}

/// A rule's pattern, accesses, attempts and target, from `'regex'` or
/// `{ pattern | argv, access, attempts }`.
type RuleFields = (String, Vec<Access>, Attempts, Target, Option<String>);

fn rule_fields(v: &toml::Value, sev: Severity) -> Result<RuleFields, String> {
    let (def_access, def_attempts) = defaults(sev);
    match v {
        toml::Value::String(p) => Ok((p.clone(), def_access, def_attempts, Target::Path, None)),
        toml::Value::Table(t) => {
            for k in t.keys() {
                if !["pattern", "argv", "host", "text", "sha256", "access", "attempts"]
                    .contains(&k.as_str())
                {
                    return Err(format!(
                        "unknown key `{k}` (expected `pattern`, `argv`, `host`, `text` or \
                         `sha256`, `access`, `attempts`)"
                    ));
                }
            }
            let sha256 = match t.get("sha256") {
                None => None,
                Some(toml::Value::String(h)) => Some(programs::parse(h)?),
                Some(_) => return Err("`sha256` must be a string".into()),
            };
            if sha256.is_some() && ["argv", "host", "text"].iter().any(|k| t.contains_key(*k)) {
                return Err(
                    "`sha256` names a program's content: alone, or with a `pattern` (that \
                     content at that path)"
                        .into(),
                );
            }
            let given: Vec<&str> = ["pattern", "argv", "host", "text"]
                .into_iter()
                .filter(|k| t.contains_key(*k))
                .collect();
            if given.len() > 1 {
                return Err(format!(
                    "`{}` together: a rule matches one of `pattern`, `argv`, `host` or `text`",
                    given.join("` and `")
                ));
            }
            let (pattern, target) = match given.first().copied() {
                None if sha256.is_some() => (
                    programs::key_pattern(sha256.as_deref().unwrap_or_default()),
                    Target::Program,
                ),
                None => {
                    return Err("missing `pattern` (or `argv`, `host`, `text`, `sha256`)".into());
                }
                Some(key) => match (key, &t[key]) {
                    ("pattern", toml::Value::String(p)) => (p.clone(), Target::Path),
                    ("argv", toml::Value::String(p)) => (p.clone(), Target::Argv),
                    ("text", toml::Value::String(p)) => (p.clone(), Target::Text),
                    ("host", toml::Value::String(h)) => (hosts::regex(h)?, Target::Host),
                    (key, _) => return Err(format!("`{key}` must be a string")),
                },
            };
            let access = match t.get("access") {
                None => def_access,
                Some(v) => v.clone().try_into::<Vec<Access>>().map_err(|_| {
                    "`access` must be a list of \"read\", \"write\", \"exec\", \"probe\", \"list\""
                        .to_owned()
                })?,
            };
            let attempts = match t.get("attempts") {
                None => def_attempts,
                Some(v) => v.clone().try_into::<Attempts>().map_err(|_| {
                    "`attempts` must be \"ignore\", \"warn\" or \"same\"".to_owned()
                })?,
            };
            // An argv rule is about running something.
            let access = match target {
                _ if t.get("access").is_some() => access,
                Target::Argv | Target::Program => vec![Access::Exec],
                Target::Host => vec![Access::Host],
                Target::Path | Target::Text => access,
            };
            // A hash-only rule is the program's key; with a pattern, the path's rule checked
            // against the row's hash.
            let sha256 = if target == Target::Program { None } else { sha256 };
            Ok((pattern, access, attempts, target, sha256))
        }
        _ => Err(
            "expected a regular expression or a table { pattern | argv | host | text, access, attempts }"
                .into(),
        ),
    }
}

/// Why a rule's target and accesses leave it nothing of a run to match, if they do: a host
/// rule is judged on host names only, an argv rule on what processes ran, and a path (or text)
/// pattern never matches a host name.
fn never_matches(target: Target, access: &[Access]) -> Option<String> {
    let names = || {
        access
            .iter()
            .map(|a| format!("{a:?}").to_lowercase())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match target {
        Target::Host if !access.contains(&Access::Host) => Some(format!(
            "a `host` rule matches host names (access `host`), and its `access` is [{}]",
            names()
        )),
        Target::Argv if !access.contains(&Access::Exec) => Some(format!(
            "an `argv` rule matches what a process ran (access `exec`), and its `access` is [{}]",
            names()
        )),
        Target::Program if !access.contains(&Access::Exec) => Some(format!(
            "a `sha256` rule matches what ran (access `exec`), and its `access` is [{}]",
            names()
        )),
        Target::Path | Target::Text if access.iter().all(|a| *a == Access::Host) => Some(
            "a path pattern never matches a host name, and its only `access` is `host` (a \
             host rule is `{ host = \"NAME\" }`)"
                .into(),
        ),
        _ => None,
    }
}

/// A regular expression that matches nothing (the path set's entry for an argv rule).
const NEVER: &str = r"[^\s\S]";

impl Policy {
    /// Whether the policy judges programs by their content (`[allow] programs`, or a rule
    /// naming a hash), here or in a later phase's policy: then a program row without a hash is
    /// one it cannot judge.
    pub fn judges_programs(&self) -> bool {
        self.allow.as_ref().is_some_and(|a| a.programs.is_some())
            || self
                .rules
                .iter()
                .any(|r| r.target == Target::Program || r.sha256.is_some())
            || self.phases.values().any(Policy::judges_programs)
    }

    /// The protected files' identities now (those that exist), for a run to record at its start.
    pub fn protected_identities(
        &self,
    ) -> std::collections::BTreeMap<String, aet_ledger::metadata::ProtectedFile> {
        use std::os::unix::fs::MetadataExt as _;
        self.protected
            .iter()
            .filter_map(|(name, path)| {
                let m = fs::metadata(path).ok()?;
                Some((
                    name.clone(),
                    aet_ledger::metadata::ProtectedFile {
                        path: path.as_path().into(),
                        dev: m.dev(),
                        ino: m.ino(),
                    },
                ))
            })
            .collect()
    }

    /// Reads and compiles a policy file.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        if let Ok(m) = fs::metadata(path)
            && m.len() > MAX_POLICY_BYTES as u64
        {
            return Err(PolicyError::Invalid {
                path: path.to_owned(),
                message: format!(
                    "{} bytes: a policy may hold at most {MAX_POLICY_BYTES} (write fewer, \
                     broader rules)",
                    m.len()
                ),
            });
        }
        let text = fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path).map_err(|message| PolicyError::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses and compiles policy text (`path` only names it). Every problem of the rules is
    /// named, one per line; the cost is bounded by [`MAX_POLICY_BYTES`] and [`MAX_RULES`].
    pub fn parse(text: &str, path: &Path) -> Result<Self, String> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(format!(
                "{} bytes: a policy may hold at most {MAX_POLICY_BYTES} (write fewer, broader \
                 rules)",
                text.len()
            ));
        }
        let spec: PolicySpec =
            toml::from_str(text).map_err(|e| e.to_string().trim_end().to_owned())?;
        let rules = |s: &PolicySpec| s.cheats.len() + s.contaminants.len() + s.warns.len();
        let count = rules(&spec)
            + spec
                .phases
                .values()
                .map(|p| rules(p.get_ref()))
                .sum::<usize>();
        if count > MAX_RULES {
            return Err(format!(
                "{count} rules: a policy may hold at most {MAX_RULES} (write fewer, broader rules)"
            ));
        }
        let mut phases = BTreeMap::new();
        let mut problems = Vec::new();
        for (name, section) in &spec.phases {
            let at = LineOf(text, section.span());
            let section = section.get_ref();
            if let Err(e) = aet_ledger::metadata::valid_phase_name(name) {
                problems.push(format!("{at}: phases.{name}: {e}"));
                continue;
            }
            if name == aet_ledger::metadata::FIRST_PHASE {
                problems.push(format!(
                    "{at}: phases.{name}: the top-level rules are the `{name}` phase's; write \
                     them there"
                ));
                continue;
            }
            let nested = [
                ("protected", !section.protected.is_empty()),
                ("processes", section.processes.is_some()),
                ("transcripts", section.transcripts.is_some()),
                ("phases", !section.phases.is_empty()),
                ("watch", !section.watch.is_empty()),
                ("limits", section.limits.is_some()),
            ];
            if let Some((key, _)) = nested.iter().find(|(_, has)| *has) {
                problems.push(format!(
                    "{at}: phases.{name}.{key}: a phase section holds only allow, cheats, \
                     contaminants, warns and provenance ({key} is the whole policy's)"
                ));
                continue;
            }
            let prov = section
                .provenance
                .as_ref()
                .map(|p| provenance::compile(text, p.get_ref()))
                .transpose()
                .map_err(|e| format!("phases.{name}.{e}"));
            match (
                compile(text, section, path, name, &format!("phases.{name}.")),
                prov,
            ) {
                (Ok(mut p), Ok(prov)) => {
                    p.provenance = prov;
                    phases.insert(name.clone(), p);
                }
                (Err(e), _) | (_, Err(e)) => problems.push(e),
            }
        }
        if !problems.is_empty() {
            return Err(problems.join("\n"));
        }
        if let Some(p) = &spec.provenance {
            return Err(format!(
                "{}: provenance: the agent's phase has no earlier phase to have written what it \
                 loads; write it in the section of the phase that grades (`[phases.grading.\
                 provenance]`)",
                LineOf(text, p.span())
            ));
        }
        let mut top = compile(text, &spec, path, aet_ledger::metadata::FIRST_PHASE, "")?;
        top.protected = protected_of(text, &spec)?;
        let processes = spec.processes.unwrap_or_default();
        top.processes_outside = severity_of(
            text,
            "processes.outside",
            processes.outside,
            Severity::Warning,
        )?;
        top.lingering = severity_of(
            text,
            "processes.lingering",
            processes.lingering,
            Severity::Cheat,
        )?;
        let claims = spec.transcripts.unwrap_or_default();
        let listed = |key, v: Option<Spanned<String>>| match v {
            None => Ok(None),
            v => severity_of(text, key, v, Severity::Warning),
        };
        top.unrun_calls = listed("transcripts.unrun", claims.unrun)?;
        top.unaccounted_processes = listed("transcripts.unaccounted", claims.unaccounted)?;
        top.phases = phases;
        top.watches = watch::compile(text, &spec.watch)?;
        top.watch_limits = watch::limits(spec.limits.as_ref())?;
        Ok(top)
    }

    /// The warnings of the policy and of its phases' sections: rules that load but can match
    /// only by an unlikely chance (a path pattern that needs whitespace).
    pub fn warnings(&self) -> Vec<String> {
        let mut w = self.warnings.clone();
        for p in self.phases.values() {
            w.extend(p.warnings.iter().cloned());
        }
        w
    }

    /// Whether a phase's provenance needs what the task repositories tracked at the start.
    pub fn needs_tracked(&self) -> bool {
        self.phases
            .values()
            .any(|p| p.provenance.as_ref().is_some_and(|v| v.tracked))
    }

    /// The policy that judges rows of `phase` (`None`: the phase is recorded, not judged).
    pub fn for_phase(&self, phase: &str) -> Option<&Policy> {
        if phase == self.phase {
            Some(self)
        } else {
            self.phases.get(phase)
        }
    }
}

/// One policy body (the top level's, or a phase section's): its rules, whose names start with
/// `prefix`, and its allow-lists.
fn compile(
    text: &str,
    spec: &PolicySpec,
    path: &Path,
    phase: &str,
    prefix: &str,
) -> Result<Policy, String> {
    let compiled = compile_rules(text, spec, prefix)?;
    let set = rule_set(&compiled.patterns, "rules", &compiled.rules)?;
    let argv_set = rule_set(&compiled.argv_patterns, "argv rules", &compiled.rules)?;
    let allow = spec
        .allow
        .as_ref()
        .map(|a| compile_allow(text, a))
        .transpose()?;
    Ok(Policy {
        path: path.to_owned(),
        rules: compiled.rules,
        set,
        argv_set,
        argv_rules: compiled.argv_rules,
        allow,
        protected: Vec::new(),
        processes_outside: None,
        lingering: None,
        unrun_calls: None,
        unaccounted_processes: None,
        phases: BTreeMap::new(),
        phase: phase.to_owned(),
        watches: Vec::new(),
        watch_limits: aet_ledger::watch::Limits::default(),
        provenance: None,
        warnings: compiled.warnings,
    })
}

/// A policy's rules compiled one by one (every problem named), and the patterns of its two
/// regex sets: one entry per rule in the path set (an argv rule's matches nothing), the argv
/// rules' own patterns in the other.
struct Compiled {
    rules: Vec<Rule>,
    warnings: Vec<String>,
    patterns: Vec<String>,
    argv_patterns: Vec<String>,
    argv_rules: Vec<usize>,
}

fn compile_rules(text: &str, spec: &PolicySpec, prefix: &str) -> Result<Compiled, String> {
    let mut problems: Vec<String> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    let mut rules = Vec::new();
    let mut patterns = Vec::new();
    let (mut argv_patterns, mut argv_rules) = (Vec::new(), Vec::new());
    for (sev, table) in [
        (Severity::Cheat, &spec.cheats),
        (Severity::Contaminant, &spec.contaminants),
        (Severity::Warning, &spec.warns),
    ] {
        for (name, r) in table {
            let full = format!("{prefix}{}.{name}", sev.key());
            let at = LineOf(text, r.span());
            let (pat, access, attempts, target, sha256) = match rule_fields(r.get_ref(), sev) {
                Ok(f) => f,
                Err(e) => {
                    problems.push(format!("{at}: {full}: {e}"));
                    continue;
                }
            };
            if let Err(e) = regex::bytes::RegexBuilder::new(&pat)
                .size_limit(RULE_REGEX_BYTES)
                .build()
            {
                let first = e.to_string();
                let first = first.lines().last().unwrap_or("invalid").trim();
                problems.push(format!(
                    "{at}: {full} = {pat:?}: invalid regular expression: {first}"
                ));
                continue;
            }
            if access.is_empty() {
                problems.push(format!(
                    "{at}: {full}: `access` is empty: the rule could never match"
                ));
                continue;
            }
            if let Some(why) = never_matches(target, &access) {
                problems.push(format!("{at}: {full}: {why}: the rule could never match"));
                continue;
            }
            if let Some(why) = lint::unlikely(target, &pat) {
                warnings.push(format!("{at}: {full} = {pat:?}: {why}"));
            }
            let access_mask = access.iter().fold(0u8, |m, a| m | a.bit());
            // The path set keeps one entry per rule (its index is the rule's): an argv
            // rule's is one that matches nothing, and its pattern goes to the argv set; a text
            // rule's goes to both (to the argv set when it counts what a process runs).
            match target {
                Target::Path | Target::Host | Target::Program => patterns.push(pat.clone()),
                Target::Argv => {
                    patterns.push(NEVER.into());
                    argv_patterns.push(pat.clone());
                    argv_rules.push(rules.len());
                }
                Target::Text => {
                    patterns.push(pat.clone());
                    if access.contains(&Access::Exec) {
                        argv_patterns.push(pat.clone());
                        argv_rules.push(rules.len());
                    }
                }
            }
            rules.push(Rule {
                name: full,
                severity: sev,
                pattern: pat,
                access,
                access_mask,
                attempts,
                target,
                sha256,
            });
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("\n"));
    }
    Ok(Compiled {
        rules,
        warnings,
        patterns,
        argv_patterns,
        argv_rules,
    })
}

/// One regex set of a policy's patterns, within its size limit (else the longest rules named).
fn rule_set(
    patterns: &[String],
    what: &str,
    rules: &[Rule],
) -> Result<regex::bytes::RegexSet, String> {
    regex::bytes::RegexSetBuilder::new(patterns)
        .size_limit(SET_REGEX_BYTES)
        .build()
        .map_err(|e| {
            let mut longest: Vec<&Rule> = rules.iter().collect();
            longest.sort_by_key(|r| std::cmp::Reverse(r.pattern.len()));
            let names: Vec<&str> = longest.iter().take(3).map(|r| r.name.as_str()).collect();
            format!(
                "the {} {what} together do not compile within {SET_REGEX_BYTES} bytes \
                     ({}): write fewer or simpler patterns (the longest: {})",
                patterns.len(),
                e.to_string().lines().last().unwrap_or("too large").trim(),
                names.join(", ")
            )
        })
}

/// `[allow]`: the globs of each access, and the endpoints of `connect`.
fn compile_allow(text: &str, a: &AllowSpec) -> Result<Allow, String> {
    let mut shown = BTreeMap::new();
    let (read, r) = globs(text, "read", &a.read)?;
    shown.insert("read", r);
    let (write, w) = globs(text, "write", &a.write)?;
    shown.insert("write", w);
    let exec = match &a.exec {
        Some(l) => {
            let (s, e) = globs(text, "exec", l)?;
            shown.insert("exec", e);
            Some(s)
        }
        None => None,
    };
    let probe = match &a.probe {
        Some(l) => {
            let (s, p) = globs(text, "probe", l)?;
            shown.insert("probe", p);
            Some(s)
        }
        None => None,
    };
    let hosts = match &a.hosts {
        Some(l) => {
            for (i, h) in l.iter().enumerate() {
                hosts::check(h.get_ref())
                    .map_err(|e| format!("{}: allow.hosts[{i}]: {e}", LineOf(text, h.span())))?;
            }
            let names: Vec<&str> = l.iter().map(|h| h.get_ref().as_str()).collect();
            let set = hosts::HostSet::new(&names)?;
            shown.insert("hosts", set.patterns.clone());
            Some(set)
        }
        None => None,
    };
    let connect = match &a.connect {
        Some(l) => {
            let (s, c) = endpoint_globs(text, l)?;
            shown.insert("connect", c);
            Some(s)
        }
        None => None,
    };
    let programs = match &a.programs {
        Some(l) => {
            let set = programs::allow_list(text, l)?;
            shown.insert("programs", set.iter().cloned().collect());
            Some(set)
        }
        None => None,
    };
    Ok(Allow {
        connect,
        hosts,
        programs,
        read,
        write,
        exec,
        probe,
        patterns: shown,
    })
}

/// `[protected]`: each an absolute path.
fn protected_of(text: &str, spec: &PolicySpec) -> Result<Vec<(String, PathBuf)>, String> {
    let mut protected = Vec::new();
    for (name, p) in &spec.protected {
        if !p.get_ref().starts_with('/') {
            return Err(format!(
                "{}: protected.{name} = {:?}: not an absolute path",
                LineOf(text, p.span()),
                p.get_ref()
            ));
        }
        protected.push((name.clone(), PathBuf::from(p.get_ref())));
    }
    Ok(protected)
}

/// `[processes] KEY`: what a kind of access to processes counts as (`default` when unset).
fn severity_of(
    text: &str,
    key: &str,
    value: Option<Spanned<String>>,
    default: Severity,
) -> Result<Option<Severity>, String> {
    Ok(match value {
        None => Some(default),
        Some(v) => match v.get_ref().as_str() {
            "warn" => Some(Severity::Warning),
            "contaminant" => Some(Severity::Contaminant),
            "cheat" => Some(Severity::Cheat),
            "ignore" => None,
            other => {
                return Err(format!(
                    "{}: {key} = {other:?}: expected \"warn\", \"contaminant\", \"cheat\" or \"ignore\"",
                    LineOf(text, v.span())
                ));
            }
        },
    })
}

#[cfg(test)]
mod tests;
