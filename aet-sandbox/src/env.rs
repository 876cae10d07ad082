//! The agent's environment: credentials never pass unless named.
//!
//! Two starting points: the harness's environment minus anything that looks like a credential
//! (a sandbox alone), or an allow-list of harmless variables (a run with an agent identity). Then
//! the spec's `pass_env` (named variables passed even if they look like credentials), `unsetenv`
//! and `setenv`, in that order.

use std::{
    collections::BTreeMap,
    ffi::{OsStr, OsString},
    os::unix::ffi::OsStrExt as _,
};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// Names that hold credentials (case-insensitive globs). They are removed even from an
/// allow-listed environment, and pass only when named in `pass_env` or set by `setenv`.
pub const CREDENTIALS: &[&str] = &[
    "*TOKEN",
    "*_TOKEN_*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*_KEY",
    "*_KEY_*",
    "*APIKEY*",
    "*API_KEY*",
    "*CREDENTIAL*",
    "*_AUTH",
    "*_AUTH_*",
    "*SESSION_ID*",
    "*COOKIE*",
    "AWS_*",
    "AZURE_*",
    "ARM_CLIENT_*",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GCP_*",
    "GCLOUD_*",
    "CLOUDSDK_*",
    "GH_*",
    "GITHUB_*",
    "GITLAB_*",
    "CI_JOB_*",
    "BUILDKITE_AGENT_*",
    "CIRCLE_*",
    "VAULT_*",
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "KRB5CCNAME",
    "NETRC",
    "DOCKER_AUTH_CONFIG",
    "DOCKER_CONFIG",
    "KUBECONFIG",
    "NPM_CONFIG__AUTH*",
    "PGPASS*",
    "MYSQL_PWD",
    "DATABASE_URL",
];

/// Variables an agent identity gets from the harness by default (globs); everything else is
/// dropped. `HOME`, `USER`, `LOGNAME` and `SHELL` are reset for the identity, not inherited.
pub const ALLOW: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "TMPDIR",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONUNBUFFERED",
];

fn set(patterns: &[&str]) -> GlobSet {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(
            GlobBuilder::new(p)
                .case_insensitive(true)
                .literal_separator(false)
                .build()
                .expect("built-in patterns are valid globs"),
        );
    }
    b.build().expect("built-in patterns build")
}

/// Is `name` a credential by the built-in list?
pub fn is_credential(name: &OsStr) -> bool {
    static SET: std::sync::OnceLock<GlobSet> = std::sync::OnceLock::new();
    SET.get_or_init(|| set(CREDENTIALS))
        .is_match(std::path::Path::new(name))
}

fn allowed(name: &OsStr) -> bool {
    static SET: std::sync::OnceLock<GlobSet> = std::sync::OnceLock::new();
    SET.get_or_init(|| set(ALLOW))
        .is_match(std::path::Path::new(name))
}

/// Where the environment starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// The harness's environment, credentials removed.
    Inherit,
    /// Only [`ALLOW`], credentials removed.
    AllowList,
}

/// What the agent's environment is made of.
#[derive(Clone, Debug)]
pub struct EnvPolicy {
    pub start: Start,
    pub pass: Vec<String>,
    pub unset: Vec<String>,
    pub set: BTreeMap<String, String>,
}

/// The environment, and the names of the harness's variables that were kept out.
#[derive(Clone, Debug, Default)]
pub struct Env {
    pub vars: Vec<(OsString, OsString)>,
    pub removed: Vec<String>,
}

impl Env {
    /// The variable names, sorted (what the run record keeps: names, never values).
    pub fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self
            .vars
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }
}

impl EnvPolicy {
    /// Applies the policy to the harness's environment.
    pub fn apply(&self, parent: impl IntoIterator<Item = (OsString, OsString)>) -> Env {
        let mut out = Env::default();
        for (k, v) in parent {
            let name = k.to_string_lossy();
            let named = self.pass.iter().any(|p| p.as_bytes() == k.as_bytes());
            let keep = !self.unset.iter().any(|u| u.as_bytes() == k.as_bytes())
                && (named || (!is_credential(&k) && (self.start == Start::Inherit || allowed(&k))));
            if keep {
                out.vars.push((k, v));
            } else {
                out.removed.push(name.into_owned());
            }
        }
        for (k, v) in &self.set {
            out.vars.retain(|(x, _)| x.as_bytes() != k.as_bytes());
            out.vars.push((k.into(), v.into()));
        }
        out.removed.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn credentials_are_kept_out_unless_named() {
        let p = EnvPolicy {
            start: Start::Inherit,
            pass: vec!["ANTHROPIC_API_KEY".into()],
            unset: vec!["CLAUDE_CODE_SSE_PORT".into()],
            set: BTreeMap::from([("FOO".into(), "bar".into())]),
        };
        let e = p.apply(env(&[
            ("PATH", "/usr/bin"),
            ("SOME_API_TOKEN", "t"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("github_token", "g"),
            ("ANTHROPIC_API_KEY", "k"),
            ("OPENAI_API_KEY", "o"),
            ("CLAUDE_CODE_SSE_PORT", "1"),
            ("EDITOR", "vi"),
        ]));
        assert_eq!(
            e.names(),
            ["ANTHROPIC_API_KEY", "EDITOR", "FOO", "PATH"],
            "{:?}",
            e.removed
        );
        assert!(e.removed.contains(&"SOME_API_TOKEN".to_owned()));
    }

    #[test]
    fn the_allow_list_keeps_only_harmless_variables() {
        let p = EnvPolicy {
            start: Start::AllowList,
            pass: vec![],
            unset: vec![],
            set: BTreeMap::new(),
        };
        let e = p.apply(env(&[
            ("PATH", "/usr/bin"),
            ("LC_ALL", "C"),
            ("EDITOR", "vi"),
            ("HOME", "/root"),
        ]));
        assert_eq!(e.names(), ["LC_ALL", "PATH"]);
    }

    /// The Python harness's container identity (`aet.container(..., identity=)`) keeps the
    /// same variables as `aet run --identity`, and starts at the same uid: its copy in
    /// `python/src/aet/container.py` is checked here, so the two cannot drift apart.
    #[test]
    fn the_python_harness_allows_the_same_variables_and_uid() {
        let py = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../python/src/aet/container.py"
        );
        let text = std::fs::read_to_string(py).unwrap();
        let tuple = text
            .split_once("AGENT_ENV_ALLOW = (")
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(t, _)| t)
            .unwrap_or_else(|| panic!("{py}: no AGENT_ENV_ALLOW tuple"));
        let names: Vec<&str> = tuple
            .split(',')
            .map(|w| w.trim().trim_matches('"'))
            .filter(|w| !w.is_empty())
            .collect();
        assert_eq!(
            names, ALLOW,
            "{py}: AGENT_ENV_ALLOW differs from aet_sandbox::env::ALLOW"
        );
        let uid = text
            .lines()
            .find_map(|l| l.strip_prefix("DEFAULT_AGENT_ID = "))
            .unwrap_or_else(|| panic!("{py}: no DEFAULT_AGENT_ID"));
        assert_eq!(
            uid.trim().parse::<u32>().ok(),
            Some(crate::identity::DEFAULT_POOL.0),
            "{py}: DEFAULT_AGENT_ID is not the first uid of the identity pool"
        );
    }
}
