//! How the agent's command is started: as it is, in a sandbox, as an agent identity, or both.
//!
//! Everything that can refuse a run (a bad spec, a grader root that is not root's and 0700 or
//! that the agent is granted, a workspace that cannot be handed over) is decided here, before the
//! monitor or the command starts.

use std::{
    collections::BTreeMap,
    ffi::OsString,
    os::fd::RawFd,
    path::{Path, PathBuf},
};

use aet_sandbox::identity::{
    self, GraderRoot, HandOver, IdentityConfig, IdentityError, ProcessRef,
};

use aet_ledger::metadata::IdentityRecord;
use aet_ledger::{
    plan::{Mode, PLAN_VERSION, Plan, StageReport},
    ppath::PPath,
};
use aet_sandbox::{
    PrepareOptions, Prepared, SandboxError, build,
    env::{self, Env},
    spec::SandboxSpec,
};

/// Why a run cannot start as asked.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("cannot prepare the agent's stage: {0}")]
    Io(#[from] std::io::Error),
}

/// What to launch.
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    pub command: Vec<OsString>,
    pub env_prefix: Option<String>,
    /// A sandbox spec.
    pub sandbox: Option<PathBuf>,
    /// An agent identity.
    pub identity: Option<IdentityConfig>,
    /// The workspace when there is no sandbox (an identity needs one).
    pub workspace: Option<PathBuf>,
    /// The run directory (the agent's home defaults to `RUN_DIR/agent-home`).
    pub run_dir: PathBuf,
    pub mode: Mode,
    /// The barrier (`--mode shadow|enforce`): built by the stage; a run with neither sandbox
    /// nor identity gets a stage for it.
    pub barrier: Option<aet_ledger::barrier::BarrierPlan>,
    /// A sandbox's stage hands its view over before the command starts (the run watches files).
    pub hold: bool,
}

/// An agent identity, set up.
pub struct IdentityRun {
    pub config: IdentityConfig,
    /// The uid and gid, resolved; the uid is held for the run.
    pub uid: u32,
    pub gid: u32,
    pub lease: identity::UidLease,
    pub home: PathBuf,
    pub workspace: PathBuf,
    pub env: Env,
    pub workspace_handover: HandOver,
    pub home_handover: HandOver,
    /// The sandbox's `rw_binds`, handed over too (writable state the agent needs, e.g. its CLI's).
    pub rw_binds_handover: Vec<(PathBuf, HandOver)>,
    pub grader_root: Option<GraderRoot>,
}

/// A prepared launch.
pub struct Launch {
    pub sandbox: Option<Prepared>,
    pub identity: Option<IdentityRun>,
    /// What runs (after the sandbox's or identity's stage): the command, behind the env prefix.
    command: Vec<OsString>,
    /// Without a sandbox: the private directory of the stage that drops the identity or builds
    /// the barrier.
    stage_dir: Option<tempfile::TempDir>,
}

fn absolute(p: &Path) -> std::io::Result<PathBuf> {
    if p.is_absolute() {
        Ok(p.to_owned())
    } else {
        Ok(std::env::current_dir()?.join(p))
    }
}

impl Launch {
    /// A launch of the command as it is.
    pub fn plain(command: Vec<OsString>) -> Self {
        Self {
            sandbox: None,
            identity: None,
            command,
            stage_dir: None,
        }
    }

    /// Checks and prepares everything; nothing has run yet.
    pub fn prepare(opts: LaunchOptions) -> Result<Self, LaunchError> {
        let spec = match &opts.sandbox {
            Some(p) => Some((p.clone(), SandboxSpec::load(p).map_err(SandboxError::from)?)),
            None => None,
        };
        let identity = match &opts.identity {
            None => None,
            Some(c) => Some(prepare_identity(c, spec.as_ref().map(|s| &s.1), &opts)?),
        };
        let sandbox = match spec {
            Some((path, spec)) => Some(Prepared::with_spec(
                &path,
                spec,
                PrepareOptions {
                    command: opts.command.clone(),
                    env_prefix: opts.env_prefix.clone(),
                    mode: opts.mode.clone(),
                    identity: identity
                        .as_ref()
                        .map(|i| identity::plan_identity(i.uid, i.gid)),
                    env_start: env::Start::Inherit,
                    env: identity.as_ref().map(|i| i.env.clone()),
                    extra_rw: identity
                        .as_ref()
                        .map(|i| vec![i.home.clone()])
                        .unwrap_or_default(),
                    barrier: opts.barrier.clone(),
                    hold: opts.hold,
                },
            )?),
            None => None,
        };
        let command = build::with_env_prefix(opts.env_prefix.as_deref(), &opts.command);
        let mut launch = Self {
            sandbox,
            identity,
            command,
            stage_dir: None,
        };
        if launch.sandbox.is_none() && (launch.identity.is_some() || opts.barrier.is_some()) {
            // No sandbox: aet's stage still drops the identity (and checks it) or builds the
            // barrier before the exec.
            let dir = tempfile::Builder::new()
                .prefix("stage-")
                .tempdir_in(aet_sandbox::runtime_dir()?)?;
            let id = launch.identity.as_ref();
            let workspace = match id {
                Some(id) => id.workspace.clone(),
                None => std::env::current_dir()?,
            };
            let plan = Plan {
                version: PLAN_VERSION,
                workspace: PPath(workspace),
                checks: Vec::new(),
                writable: Vec::new(),
                report: PPath(dir.path().join(build::REPORT_FILE)),
                unmount: Vec::new(),
                identity: id.map(|i| identity::plan_identity(i.uid, i.gid)),
                mode: opts.mode.clone(),
                view: false,
                new_session: id.is_some(),
                debug_skip_setuid: aet_ledger::plan::debug_skip_setuid(),
                close_io_uring: false,
                keep_capabilities: id.is_none(),
                barrier: opts.barrier.clone(),
                repos: Vec::new(),
                hold: None,
            };
            std::fs::write(
                dir.path().join(build::PLAN_FILE),
                serde_json::to_vec(&plan).expect("a plan serialises"),
            )?;
            launch.stage_dir = Some(dir);
        }
        Ok(launch)
    }

    /// The command to spawn, and the fds the child must inherit (clear their close-on-exec
    /// flags between fork and exec).
    pub fn command(&self) -> (std::process::Command, Vec<RawFd>) {
        let command = &self.command;
        if let Some(sb) = &self.sandbox {
            return (sb.command(), sb.inherit_fds());
        }
        if let Some(dir) = &self.stage_dir {
            let exe = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
            let mut c = std::process::Command::new(exe);
            c.arg("__stage")
                .arg("--dir")
                .arg(dir.path())
                .arg("--")
                .args(command);
            if let Some(id) = &self.identity {
                c.current_dir(&id.workspace)
                    .env_clear()
                    .envs(id.env.vars.iter().map(|(k, v)| (k, v)));
            }
            return (c, Vec::new());
        }
        let mut c = std::process::Command::new(&command[0]);
        c.args(&command[1..]);
        (c, Vec::new())
    }

    /// The context the command starts in when it starts in aet's own view (no sandbox): its
    /// working directory and environment, for the watched files.
    pub fn host_context(&self) -> aet_ledger::watch::Context {
        let (cwd, env): (PathBuf, Vec<(OsString, OsString)>) = match &self.identity {
            Some(id) => (
                id.workspace.clone(),
                id.env
                    .vars
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
            None => (
                std::env::current_dir().unwrap_or_else(|_| "/".into()),
                std::env::vars_os().collect(),
            ),
        };
        crate::run::fingerprints::host_context(&cwd, &env)
    }

    /// The task repositories, as the sandbox's view has them (`[[repo]]`).
    pub fn repos(&self) -> Vec<aet_ledger::ppath::PPath> {
        self.sandbox
            .as_ref()
            .map(|sb| sb.spec.repo.iter().map(|r| r.path.clone().into()).collect())
            .unwrap_or_default()
    }

    /// The stage's report (sandbox or identity), when there is a stage.
    pub fn stage_report(&self) -> Option<Result<StageReport, SandboxError>> {
        if let Some(sb) = &self.sandbox {
            return Some(sb.report());
        }
        let dir = self.stage_dir.as_ref()?;
        Some(aet_sandbox::read_report(dir.path()))
    }
}

fn prepare_identity(
    c: &IdentityConfig,
    spec: Option<&SandboxSpec>,
    opts: &LaunchOptions,
) -> Result<IdentityRun, LaunchError> {
    identity::require_root()?;
    if c.uid == Some(0) || c.gid == Some(0) {
        return Err(IdentityError::Root {
            uid: c.uid.unwrap_or(0),
            gid: c.gid.unwrap_or(0),
        }
        .into());
    }
    // The uid is this run's alone while it goes on: taken from the pool, or the one named.
    let lease = match c.uid {
        Some(uid) => identity::lease_uid(uid)?,
        None => identity::lease_from_pool(c.pool()?)?,
    };
    let (uid, gid) = (lease.uid, c.gid.unwrap_or(lease.uid));
    let workspace = match (spec, &opts.workspace) {
        (Some(s), _) => s.workspace.clone(),
        (None, Some(w)) => absolute(w)?,
        (None, None) => return Err(IdentityError::NoWorkspace.into()),
    };
    let home = match &c.home {
        Some(h) => absolute(h)?,
        None => absolute(&opts.run_dir)?.join("agent-home"),
    };
    let mut granted = vec![workspace.clone(), home.clone()];
    if let Some(s) = spec {
        granted.extend(s.allow.iter().cloned());
        granted.extend(s.extra_binds.iter().cloned());
        granted.extend(s.rw_binds.iter().cloned());
        granted.extend(s.tmpfs.iter().cloned());
    }
    // The grader root is checked before anything is handed over.
    let grader_root = match &c.grader_root {
        Some(g) => Some(identity::check_grader_root(
            &absolute(g)?,
            c.fix_grader_root,
            &granted,
        )?),
        None => None,
    };
    let workspace_handover = identity::hand_over(&workspace, uid, gid)?;
    let home_handover = identity::prepare_home(&home, uid, gid)?;
    if spec.is_none() {
        // No view binds them: the agent reaches its workspace and home through the host's
        // directories. The run directory holding the default home is aet's to open for
        // search (never for listing); anything else in the way is named, and nothing runs.
        if c.home.is_none()
            && let Some(run_dir) = home.parent()
        {
            identity::open_for_search(run_dir, &home)?;
        }
        identity::reachable(&workspace, uid, gid)?;
        identity::reachable(&home, uid, gid)?;
    }
    let mut rw_binds_handover = Vec::new();
    if let Some(s) = spec {
        for rw in &s.rw_binds {
            rw_binds_handover.push((rw.clone(), identity::hand_over(rw, uid, gid)?));
        }
    }
    let mut pass = c.pass_env.clone();
    let mut unset = Vec::new();
    let mut set: BTreeMap<String, String> = BTreeMap::new();
    if let Some(s) = spec {
        pass.extend(s.pass_env.iter().cloned());
        unset.extend(s.unsetenv.iter().cloned());
        set.extend(s.setenv.clone());
    }
    set.extend(c.setenv.clone());
    let env = identity::agent_env(uid, &home, &pass, &unset, &set);
    Ok(IdentityRun {
        config: c.clone(),
        uid,
        gid,
        lease,
        home,
        workspace,
        env,
        workspace_handover,
        home_handover,
        rw_binds_handover,
        grader_root,
    })
}

impl IdentityRun {
    /// What the run record keeps of the identity (variable names, never values).
    pub fn record(
        &self,
        report: Option<&StageReport>,
        strays: &[ProcessRef],
        reap_error: Option<&str>,
        leftovers: &[PathBuf],
        leftover_total: u64,
    ) -> IdentityRecord {
        IdentityRecord {
            uid: self.uid,
            gid: self.gid,
            home: self.home.clone(),
            workspace: self.workspace.clone(),
            env: self.env.names(),
            env_removed: self.env.removed.clone(),
            workspace_handover: self.workspace_handover.clone(),
            home_handover: self.home_handover.clone(),
            rw_binds_handover: self.rw_binds_handover.clone(),
            grader_root: self.grader_root.clone(),
            privileges: report.and_then(|r| r.privileges.clone()),
            verified: report.is_some_and(|r| r.ok),
            killed_after_teardown: strays.to_vec(),
            reap_error: reap_error.map(str::to_owned),
            leftover_files: leftovers.to_vec(),
            leftover_files_total: leftover_total,
        }
    }
}
