//! `aet run`.
use std::{ffi::OsString, path::PathBuf, time::Duration};

use anyhow::Context as _;

use super::Exit;
use crate::run;

/// `--progress`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Progress {
    Auto,
    Line,
    Json,
    None,
}

impl Progress {
    fn mode(self, quiet: bool) -> crate::run::progress::ProgressMode {
        use crate::run::progress::ProgressMode as M;
        match self {
            Self::Auto if !quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()) => M::Line,
            Self::Auto | Self::None => M::None,
            Self::Line => M::Line,
            Self::Json => M::Json,
        }
    }
}

/// `--mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyMode {
    Record,
    Shadow,
    Enforce,
}

#[derive(Debug, clap::Args)]
#[command(trailing_var_arg = true)]
pub struct Args {
    /// Run directory: the ledger is written to DIR/ledger.arrow (default: runs/<UTC time>).
    #[arg(long, short, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seconds the rest of the run's processes get after the command exits before they are
    /// killed.
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    pub grace: f64,
    /// Ring buffer size in MiB (a power of two).
    #[arg(long = "ringbuf-mb", value_parser = super::ringbuf_mb, default_value = "64", value_name = "MIB")]
    pub ringbuf_bytes: u32,
    /// Only print aet's messages when something is wrong (and no status line).
    #[arg(long, short)]
    pub quiet: bool,
    /// The live status while the command runs (elapsed, processes, events, lost, files read and
    /// written): `auto` is a line on stderr rewritten in place when stderr is a terminal and -q
    /// is not given; `json` prints one JSON object per line on stderr, four times a second.
    #[arg(long, value_enum, default_value_t = Progress::Auto, value_name = "HOW")]
    pub progress: Progress,
    #[command(flatten)]
    pub monitor: super::MonitorArgs,
    /// Run the command in the bubblewrap sandbox this spec describes (verified from inside
    /// before the command starts).
    #[arg(long, value_name = "SPEC")]
    pub sandbox: Option<PathBuf>,
    /// Shell text run before the command (`export PATH=...;`), inside the sandbox and as the
    /// agent identity.
    #[arg(long, value_name = "TEXT")]
    pub env_prefix: Option<String>,
    /// Run as a dedicated unprivileged identity: `agent` (a uid of its own from the pool
    /// 2000-2999, leased for the run; the default), UID or UID:GID; without a value, the run
    /// config's `[identity]` or the default.
    #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "")]
    pub identity: Option<String>,
    /// A run config (TOML): `sandbox`, `workspace` and `[identity]`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The agent's workspace, handed over to the identity (a sandbox's is its spec's).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Grading material the agent must not reach: must be root's, 0700, and outside everything
    /// the agent is granted.
    #[arg(long, value_name = "DIR")]
    pub grader_root: Option<PathBuf>,
    /// Make the grader root root's and 0700 instead of refusing to start.
    #[arg(long)]
    pub fix_grader_root: bool,
    /// Audit the run against this policy at the end: DIR/audit.json and DIR/audit.html, and a
    /// summary (aet run still exits with the command's status).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// What the policy does while the command runs: `record` (judged afterwards), `shadow` (the
    /// audit also lists every access the barrier would have blocked) or `enforce` (a Landlock
    /// barrier built from the policy's `[allow]` lists, without its cheats and protected files:
    /// every process of the run gets EACCES outside it, and the audit lists what was blocked).
    #[arg(long, value_enum, default_value_t = PolicyMode::Record, value_name = "MODE")]
    pub mode: PolicyMode,
    /// Sign the run: write RUN_DIR/manifest.json (the ledger's final chain hash, the hashes of
    /// the policy, the spec, aet and its eBPF object, the kernel, losses, completeness and the
    /// verdict), signed with this Ed25519 key (`aet key new`). `aet verify` checks it.
    #[arg(long, value_name = "KEY")]
    pub sign: Option<PathBuf>,
    /// At the end (after the audit and the signature), send the finished run directory to
    /// S3-compatible object storage as `aet ship DIR URL` does: URL/RUN/… and shipped.json
    /// last. The run is written locally first and stays there; a failed upload is exit 124.
    #[arg(long, value_name = "URL")]
    pub ship: Option<String>,
    /// The policy's watched files are seen from a container the run will start: their first
    /// fingerprints wait for `aet watch RUN_DIR --root PID` (the container's init), not the
    /// command's start.
    #[arg(long, requires = "policy")]
    pub defer_watch: bool,
    /// Decoys (a TOML file of `[[decoy]]` tables, as in a sandbox spec) for a view aet does not
    /// build, a container the run starts: aet writes each with this run's token under
    /// RUN/decoys/ and says in RUN/decoys.json (root's alone) what to bind where and which
    /// variables to set; the harness puts them in the container (`aet.container(decoys=...)`
    /// does). The tokens are recorded in the ledger's footer and the audit judges them as a
    /// sandbox's decoys (docs/sandbox.md, "Decoys").
    #[arg(long, value_name = "FILE", conflicts_with = "sandbox")]
    pub decoys: Option<PathBuf>,
    /// The agent's transcripts, for the audit.
    #[arg(long, value_name = "DIR", requires = "policy")]
    pub transcripts: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `--decoys FILE`: each decoy written with a new token into RUN/decoys/ (0700), and where each
/// goes into RUN/decoys.json (0600); their record for the ledger's footer.
fn plant_decoys(
    file: &std::path::Path,
    out: &std::path::Path,
) -> anyhow::Result<aet_sandbox::decoy::DecoyRecord> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    let specs = aet_sandbox::decoy::load(file).map_err(|e| anyhow::anyhow!(e))?;
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot make the run directory {}", out.display()))?;
    let dir = out.join("decoys");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot make {}", dir.display()))?;
    let planted = aet_sandbox::decoy::plant(&specs, &dir, &[]).map_err(|(entry, e)| {
        anyhow::anyhow!("{}: {entry}: {e} (in {})", file.display(), dir.display())
    })?;
    let placement = aet_sandbox::decoy::Placement::of(&planted);
    let json = out.join("decoys.json");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&json)
        .with_context(|| format!("cannot write {}", json.display()))?;
    std::io::Write::write_all(&mut f, &serde_json::to_vec_pretty(&placement)?)?;
    Ok(aet_sandbox::decoy::DecoyRecord {
        version: aet_ledger::decoys::DECOY_RECORD_VERSION,
        decoys: planted.into_iter().map(|p| p.record).collect(),
    })
}

pub fn run(a: Args) -> anyhow::Result<u8> {
    if !(0.0..=86400.0).contains(&a.grace) {
        anyhow::bail!("--grace must be between 0 and 86400 seconds");
    }
    let out = a.out.unwrap_or_else(default_out);
    // The destination and a signing key are checked before anything runs.
    if let Some(u) = &a.ship {
        super::ship::check_url(u)?;
    }
    let signing = match &a.sign {
        Some(k) => Some(aet_ledger::manifest::read_secret(k)?),
        None => None,
    };
    let ledger = out.join(aet_ledger::run_dir::LEDGER);
    if ledger.symlink_metadata().is_ok() {
        anyhow::bail!(run::RunError::LedgerExists(ledger));
    }
    // A policy is checked before anything runs, and its protected files are identified now.
    let policy = match &a.policy {
        Some(p) => Some(aet_audit::policy::Policy::load(p)?),
        None => None,
    };
    let mut head = aet_ledger::metadata::MetaMap::new();
    let protected = policy
        .as_ref()
        .map(|p| p.protected_identities())
        .unwrap_or_default();
    if policy.as_ref().is_some_and(|p| !p.protected.is_empty()) {
        head.set_json(aet_ledger::schema::meta::PROTECTED, &protected);
    }
    // Decoys for a container's view: checked, then planted, before anything runs.
    let decoys = match &a.decoys {
        None => None,
        Some(p) => Some(plant_decoys(p, &out)?),
    };
    // The barrier is planned (and the kernel checked) before anything runs.
    let barrier = plan_barrier(a.mode, policy.as_ref(), &protected, &a.command[0])?;
    let config = match &a.config {
        Some(p) => aet_sandbox::identity::RunConfig::load(p)?,
        None => aet_sandbox::identity::RunConfig::default(),
    };
    let mut identity = match (&a.identity, config.identity) {
        (None, c) => c,
        (Some(s), c) => {
            let mut c = c.unwrap_or_default();
            if !s.is_empty() {
                (c.uid, c.gid) = aet_sandbox::identity::parse_identity(s)?;
            }
            Some(c)
        }
    };
    if let Some(id) = identity.as_mut() {
        if let Some(g) = &a.grader_root {
            id.grader_root = Some(g.clone());
        }
        id.fix_grader_root |= a.fix_grader_root;
    } else if a.grader_root.is_some() || a.fix_grader_root {
        anyhow::bail!(
            "--grader-root protects grading material from an agent identity: add --identity"
        );
    }
    let watch = policy
        .as_ref()
        .and_then(|p| crate::run::fingerprints::Fingerprints::new(p, a.defer_watch));
    let sandbox = a.sandbox.or(config.sandbox);
    let spec_path = sandbox.clone();
    let workspace = a.workspace.or(config.workspace);
    let launch = if sandbox.is_none() && identity.is_none() && barrier.is_none() {
        if a.env_prefix.is_some() {
            anyhow::bail!("--env-prefix applies inside a sandbox or as an agent identity");
        }
        crate::run::launch::Launch::plain(a.command.clone())
    } else {
        crate::run::launch::Launch::prepare(crate::run::launch::LaunchOptions {
            command: a.command.clone(),
            env_prefix: a.env_prefix.clone(),
            sandbox,
            identity,
            workspace,
            run_dir: out.clone(),
            mode: aet_ledger::plan::Mode::Exec,
            barrier,
            hold: watch.as_ref().is_some_and(|w| !w.deferred),
        })?
    };
    let command = a.command;
    let run_dir = out.clone();
    let quiet = a.quiet;
    let opts = run::RunOptions {
        head,
        out,
        command,
        grace: Duration::from_secs_f64(a.grace),
        ringbuf_bytes: a.ringbuf_bytes,
        on_overload: a.monitor.on_overload,
        quiet: a.quiet,
        mode: a.monitor.mode()?,
        progress: a.progress.mode(a.quiet),
        launch,
        watch,
        decoys,
    };
    let outcome = super::runtime()?
        .block_on(run::run(opts))
        .context("aet run failed")?;
    let verdict = policy
        .as_ref()
        .and_then(|p| audit_run(&run_dir, p, a.transcripts.as_deref(), quiet).transpose())
        .transpose()?;
    if let Some(key) = &signing {
        match crate::run::sign::sign(
            &run_dir,
            key,
            a.policy.as_deref(),
            spec_path.as_deref(),
            verdict,
        ) {
            Ok(p) => {
                if !quiet {
                    eprintln!("aet: signed: {}", p.display());
                }
            }
            Err(e) => {
                eprintln!("aet: error: the run could not be signed: {e:#}");
                return Ok(Exit::AetFailed.code());
            }
        }
    }
    if let Some(u) = &a.ship
        && !matches!(outcome.end, run::CommandEnd::Refused)
        && let Err(e) = super::ship::ship(&run_dir, u, quiet)
    {
        eprintln!("aet: error: {e:#}");
        return Ok(Exit::ShipFailed.code());
    }
    Ok(match outcome.end {
        run::CommandEnd::Exited(code) => u8::try_from(code.clamp(0, 255)).unwrap_or(255),
        run::CommandEnd::Refused => Exit::AetFailed.code(),
    })
}

/// The barrier of `--mode shadow|enforce`, planned from the policy (and the kernel checked for
/// Landlock under enforce) before anything runs; the command's own program is granted, since
/// aet runs it.
fn plan_barrier(
    mode: PolicyMode,
    policy: Option<&aet_audit::policy::Policy>,
    protected: &std::collections::BTreeMap<String, aet_ledger::metadata::ProtectedFile>,
    program: &OsString,
) -> anyhow::Result<Option<aet_ledger::barrier::BarrierPlan>> {
    Ok(match (mode, policy) {
        (PolicyMode::Record, _) => None,
        (_, None) => anyhow::bail!("--mode shadow and enforce apply a policy: add --policy FILE"),
        (mode, Some(p)) => {
            let enforce = mode == PolicyMode::Enforce;
            if enforce && let Some(why) = aet_sandbox::barrier::cannot_enforce() {
                anyhow::bail!("{why}");
            }
            let mut plan = aet_audit::policy::barrier::plan(p, enforce, protected)
                .map_err(anyhow::Error::msg)?;
            // The command's own program: aet runs it, so the barrier lets it.
            let program = std::path::Path::new(program);
            let found = if program.as_os_str().as_encoded_bytes().contains(&b'/') {
                std::path::absolute(program).ok()
            } else {
                program.to_str().and_then(aet_sandbox::find_on_path)
            };
            if let Some(path) = found.filter(|p| p.is_file()) {
                plan.grants.push(aet_ledger::barrier::Grant {
                    entry: "aet: the command's program".into(),
                    path: aet_ledger::ppath::PPath(path),
                    rights: aet_ledger::barrier::Rights::EXECUTE,
                });
            }
            Some(plan)
        }
    })
}

/// The audit at the end of `aet run --policy`: `audit.json` and `audit.html` in the run
/// directory, the summary on stderr (stdout is the command's); the verdict's name, or `None`
/// when the audit failed (said on stderr: the run's own outcome stands).
fn audit_run(
    run_dir: &std::path::Path,
    policy: &aet_audit::policy::Policy,
    transcripts: Option<&std::path::Path>,
    quiet: bool,
) -> anyhow::Result<Option<String>> {
    let report = aet_audit::audit_with(
        run_dir,
        policy,
        &aet_audit::Options {
            transcripts,
            transcript_format: "auto",
        },
    );
    match report {
        Ok(r) => {
            // The summary goes to stderr: stdout is the command's.
            super::audit::write_outputs(
                &r,
                Some(&run_dir.join(aet_ledger::run_dir::AUDIT)),
                Some(&run_dir.join(aet_ledger::run_dir::AUDIT_HTML)),
                true,
            )?;
            if !quiet {
                eprint!("{}", aet_audit::render_text(&r));
                eprintln!(
                    "aet: audit: {} ({}, {})",
                    r.verdict.name(),
                    run_dir.join(aet_ledger::run_dir::AUDIT).display(),
                    run_dir.join(aet_ledger::run_dir::AUDIT_HTML).display()
                );
            }
            Ok(Some(r.verdict.name().to_owned()))
        }
        Err(e) => {
            eprintln!("aet: error: the audit failed: {e}");
            Ok(None)
        }
    }
}

/// `runs/<UTC time>` for a run without `--out`.
fn default_out() -> PathBuf {
    let secs = aet_ledger::util::now_ns() / 1_000_000_000;
    PathBuf::from("runs").join(utc_stamp(secs))
}

/// `YYYYmmddTHHMMSSZ` for seconds since the epoch.
pub(crate) fn utc_stamp(secs: i64) -> String {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_stamp_matches_known_dates() {
        assert_eq!(super::utc_stamp(0), "19700101T000000Z");
        assert_eq!(super::utc_stamp(1_795_000_000), "20261118T110640Z");
        assert_eq!(super::utc_stamp(951_782_400), "20000229T000000Z");
    }
}
