//! The agent identity: a dedicated unprivileged uid/gid for the agent's command, its workspace
//! and home handed over safely, a protected grader root checked before anything runs, and a
//! teardown that leaves no process of that uid anywhere.
//!
//! The drop itself happens in aet's stage (see [`crate::stage`]), which execs the
//! command only after reading back from `/proc/self/status` that the identity is taken, every
//! capability set is empty and no_new_privs is set.

use std::{
    collections::BTreeMap,
    fs, io,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use aet_ledger::plan::Identity;

use crate::env::{self, EnvPolicy};
pub use aet_ledger::metadata::{GraderRoot, HandOver, ProcessRef};

mod handover;
mod lease;
mod teardown;

pub use handover::{check_grader_root, hand_over, open_for_search, prepare_home, reachable};
pub use lease::{DEFAULT_POOL, LEASE_SUBDIR, UidLease, lease_from_pool, lease_uid};
pub use teardown::{leftovers, reap_uid};

/// `[identity]` of a run config.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfig {
    /// The agent's uid (no /etc/passwd entry needed); default: a free uid of `pool`.
    #[serde(default)]
    pub uid: Option<u32>,
    /// The agent's gid; default: the uid.
    #[serde(default)]
    pub gid: Option<u32>,
    /// The uids to take one from when `uid` is not given: `"FIRST-LAST"` (default 2000-2999).
    #[serde(default)]
    pub pool: Option<String>,
    /// The agent's home (created if missing, handed over); default: `RUN_DIR/agent-home`.
    #[serde(default)]
    pub home: Option<PathBuf>,
    /// Variables passed to the agent besides the allow-list (credentials only when named here).
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// Variables set for the agent.
    #[serde(default)]
    pub setenv: BTreeMap<String, String>,
    /// A directory of grading material the agent must not reach: checked to be root's and 0700
    /// and outside everything the agent is granted.
    #[serde(default)]
    pub grader_root: Option<PathBuf>,
    /// Make the grader root root's and 0700 when it is not (instead of refusing to start).
    #[serde(default)]
    pub fix_grader_root: bool,
}

impl IdentityConfig {
    /// The pool, parsed.
    pub fn pool(&self) -> Result<(u32, u32), IdentityError> {
        let Some(p) = &self.pool else {
            return Ok(DEFAULT_POOL);
        };
        let bad = || IdentityError::Pool(p.clone());
        let (a, b) = p.split_once('-').ok_or_else(bad)?;
        let (a, b): (u32, u32) = (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        );
        if a == 0 || b < a {
            return Err(bad());
        }
        Ok((a, b))
    }
}

/// A run config file (`aet run --config FILE`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// A sandbox spec (relative to the config file's directory, or absolute).
    #[serde(default)]
    pub sandbox: Option<PathBuf>,
    /// The agent's workspace when there is no sandbox (the sandbox's is its spec's).
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    #[serde(default)]
    pub identity: Option<IdentityConfig>,
}

/// Why the identity barrier cannot be set up; nothing runs.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot read run config {path}: {source}")]
    ReadConfig {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("run config {path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("--identity {0:?}: expected `agent`, UID or UID:GID")]
    Spec(String),
    #[error("the agent uid/gid must not be 0 (got {uid}:{gid})")]
    Root { uid: u32, gid: u32 },
    #[error("an agent identity needs root")]
    NotRoot,
    #[error(
        "an agent identity needs a workspace: --workspace DIR, `workspace` in the run config, or a sandbox spec"
    )]
    NoWorkspace,
    #[error("grader root {path}: {problem}")]
    GraderRoot { path: PathBuf, problem: String },
    #[error("cannot hand {path} over to the agent: {source}")]
    HandOver {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{path} cannot be reached by the agent's uid {uid} without a sandbox: {problem} \
         (put it under a directory others can search, or run with --sandbox, whose view binds it)"
    )]
    Unreachable {
        path: PathBuf,
        uid: u32,
        problem: String,
    },
    #[error("identity pool {0:?}: expected FIRST-LAST, two uids above 0")]
    Pool(String),
    #[error("every uid of the pool {first}-{last} is in use (by a run, a user, or processes left)")]
    PoolExhausted { first: u32, last: u32 },
    #[error("uid {0} is the agent identity of another aet run going on")]
    UidInUse(u32),
    #[error("cannot take a lease on an agent uid in {path}: {source}")]
    Lease {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl RunConfig {
    /// Reads a run config; relative paths in it are taken from the file's directory.
    pub fn load(path: &Path) -> Result<Self, IdentityError> {
        let text = fs::read_to_string(path).map_err(|source| IdentityError::ReadConfig {
            path: path.to_owned(),
            source,
        })?;
        let mut c: Self = toml::from_str(&text).map_err(|e| IdentityError::Config {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let abs = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        if let Some(p) = c.sandbox.as_mut() {
            abs(p);
        }
        if let Some(p) = c.workspace.as_mut() {
            abs(p);
        }
        if let Some(id) = c.identity.as_mut() {
            if let Some(h) = id.home.as_mut() {
                abs(h);
            }
            if let Some(g) = id.grader_root.as_mut() {
                abs(g);
            }
        }
        Ok(c)
    }
}

/// Parses `--identity`: `agent` (a free uid of the pool, the default), `UID` or `UID:GID`.
pub fn parse_identity(s: &str) -> Result<(Option<u32>, Option<u32>), IdentityError> {
    let bad = || IdentityError::Spec(s.to_owned());
    if s == "agent" {
        return Ok((None, None));
    }
    let (u, g) = match s.split_once(':') {
        Some((u, g)) => (u, g),
        None => (s, s),
    };
    Ok((
        Some(u.parse().map_err(|_| bad())?),
        Some(g.parse().map_err(|_| bad())?),
    ))
}

/// The agent's environment: the allow-list, named passes, and its own HOME/USER/LOGNAME/SHELL.
pub fn agent_env(
    uid: u32,
    home: &Path,
    pass: &[String],
    unset: &[String],
    set: &BTreeMap<String, String>,
) -> env::Env {
    let name = nix::unistd::User::from_uid(uid.into())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| "agent".into());
    let mut all = set.clone();
    all.entry("HOME".into())
        .or_insert_with(|| home.to_string_lossy().into_owned());
    all.entry("USER".into()).or_insert_with(|| name.clone());
    all.entry("LOGNAME".into()).or_insert(name);
    all.entry("SHELL".into())
        .or_insert_with(|| "/bin/sh".into());
    EnvPolicy {
        start: env::Start::AllowList,
        pass: pass.to_vec(),
        unset: unset.to_vec(),
        set: all,
    }
    .apply(std::env::vars_os())
}

/// The identity for the stage's plan.
pub fn plan_identity(uid: u32, gid: u32) -> Identity {
    Identity { uid, gid }
}

/// Is the process root (an identity can only be given away by root)?
pub fn require_root() -> Result<(), IdentityError> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(IdentityError::NotRoot)
    }
}
