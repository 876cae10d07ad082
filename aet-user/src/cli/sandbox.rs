//! `aet sandbox`: build, show, run and probe the bubblewrap view of a spec.
use super::Exit;
use std::{
    ffi::OsString,
    io::Write as _,
    os::unix::{ffi::OsStrExt as _, process::CommandExt as _},
    path::PathBuf,
};

use anyhow::Context as _;

use aet_ledger::{
    plan::{Mode, ProbeResult, StageReport},
    ppath::PPath,
};
use aet_sandbox::{
    PrepareOptions, Prepared, SandboxError,
    build::{self, BuildOptions, StageFiles},
    env,
    spec::SandboxSpec,
};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check a spec without building anything: every problem, each naming its entry.
    Check {
        /// The spec (TOML).
        spec: PathBuf,
    },
    /// Print the bwrap arguments for a spec, one a line.
    #[command(trailing_var_arg = true)]
    Argv {
        /// The spec (TOML).
        spec: PathBuf,
        /// Include aet's verifying stage as `aet sandbox run` does (the report directory is a
        /// fresh private one per run, shown here as a placeholder).
        #[arg(long)]
        stage: bool,
        /// Separate the arguments with NUL bytes instead of newlines (exact for any bytes).
        #[arg(long, short = '0')]
        null: bool,
        /// Shell text run before the command (`export PATH=...;`).
        #[arg(long, value_name = "TEXT")]
        env_prefix: Option<String>,
        /// The command, appended after the arguments.
        #[arg(value_name = "COMMAND")]
        command: Vec<OsString>,
    },
    /// Run a command in the sandbox (verified from inside first). Exits with the command's
    /// status, or 125 when the sandbox could not be built or verified.
    #[command(trailing_var_arg = true)]
    Run {
        /// The spec (TOML).
        spec: PathBuf,
        /// Shell text run before the command (`export PATH=...;`).
        #[arg(long, value_name = "TEXT")]
        env_prefix: Option<String>,
        /// Write the stage's verification report (JSON) here.
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
        /// Only print aet's messages when something is wrong.
        #[arg(long, short)]
        quiet: bool,
        /// The command and its arguments.
        #[arg(required = true, value_name = "COMMAND")]
        command: Vec<OsString>,
    },
    /// Probe paths from inside the sandbox, as the agent would: stat, open for reading, open for
    /// writing (nothing is left behind), list.
    Probe {
        /// The spec (TOML).
        spec: PathBuf,
        /// A path to probe (repeat for more).
        #[arg(long = "path", required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Probe as the agent identity `aet run --identity` would use: `agent` (a free uid of
        /// the pool 2000-2999, the default), UID or UID:GID. The workspace is handed over to
        /// it, as for a run.
        #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "agent")]
        identity: Option<String>,
    },
}

pub fn run(c: Command) -> anyhow::Result<u8> {
    match c {
        Command::Check { spec } => {
            SandboxSpec::load(&spec)?;
            super::print_out(&format!("{}: ok\n", spec.display()))?;
            Ok(Exit::Success.code())
        }
        Command::Argv {
            spec,
            stage,
            null,
            env_prefix,
            command,
        } => {
            let s = SandboxSpec::load(&spec)?;
            // The masks bind this file: make sure it is there for whoever runs the printout.
            if let Err(e) = build::ensure_empty_file() {
                eprintln!("aet: note: {e} (masked files are bound from it)");
            }
            let built = build::build(
                &s,
                &BuildOptions {
                    stage: stage.then(|| {
                        StageFiles::new(
                            std::env::current_exe().unwrap_or_else(|_| "aet".into()),
                            PathBuf::from(aet_sandbox::RUNTIME_DIR).join("stage-XXXXXX"),
                        )
                    }),
                    command,
                    env_prefix,
                    mode: Mode::Exec,
                    identity: None,
                    // Sanitized copies are made when a run starts; argv shows the view without
                    // them.
                    repo_copies: Vec::new(),
                    // So are decoys, each with its run's token: argv shows the view without
                    // them (a printout must not carry a token a run would use).
                    decoys: Vec::new(),
                },
            )?;
            if !s.decoy.is_empty() {
                eprintln!(
                    "aet: note: {} decoy(s) are planted when a run starts, with the run's own \
                     tokens: these arguments leave them out",
                    s.decoy.len()
                );
            }
            let args = built.argv();
            if null {
                let mut out = std::io::stdout().lock();
                for a in &args {
                    out.write_all(a.as_bytes())?;
                    out.write_all(b"\0")?;
                }
                out.flush()?;
            } else {
                super::print_out(&aet_sandbox::format_args_lines(&args))?;
            }
            Ok(Exit::Success.code())
        }
        Command::Run {
            spec,
            env_prefix,
            report,
            quiet,
            command,
        } => run_sandboxed(spec, env_prefix, report, quiet, command),
        Command::Probe {
            spec,
            paths,
            json,
            identity,
        } => {
            let identity = match identity {
                Some(s) => {
                    let (uid, gid) = aet_sandbox::identity::parse_identity(&s)?;
                    Some(aet_sandbox::identity::IdentityConfig {
                        uid,
                        gid,
                        ..Default::default()
                    })
                }
                None => None,
            };
            let home = tempfile::Builder::new()
                .prefix("probe-")
                .tempdir_in(aet_sandbox::runtime_dir()?)
                .context("cannot create the probe's home")?;
            let launch = crate::run::launch::Launch::prepare(crate::run::launch::LaunchOptions {
                command: Vec::new(),
                env_prefix: None,
                sandbox: Some(spec),
                identity,
                workspace: None,
                run_dir: home.path().to_owned(),
                mode: Mode::Probe {
                    paths: paths.iter().map(|p| PPath(p.clone())).collect(),
                },
                barrier: None,
                hold: false,
            })?;
            let (mut cmd, fds) = launch.command();
            // SAFETY: only fcntl between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    for &fd in &fds {
                        aet_sandbox::inherit_fd(fd)?;
                    }
                    Ok(())
                })
            };
            let out = cmd
                .stderr(std::process::Stdio::inherit())
                .output()
                .context("cannot start bwrap")?;
            let report = launch.stage_report().expect("a sandbox has a stage")?;
            if !report.ok {
                anyhow::bail!(verify_failed(&report));
            }
            let results: Vec<ProbeResult> =
                serde_json::from_slice(&out.stdout).with_context(|| {
                    format!("the probes gave no result (exit status {})", out.status)
                })?;
            if json {
                super::print_out(&format!("{}\n", serde_json::to_string_pretty(&results)?))?;
            } else {
                if let Some(p) = &report.privileges {
                    super::print_out(&format!("probed as {p}\n"))?;
                }
                super::print_out(&probe_table(&results))?;
            }
            Ok(Exit::Success.code())
        }
    }
}

fn verify_failed(report: &StageReport) -> String {
    let mut s = String::from("the sandbox is not what the spec says; nothing was run:");
    for f in &report.failures {
        s.push_str("\n  - ");
        s.push_str(f);
    }
    s
}

/// A table of probe results.
pub fn probe_table(results: &[ProbeResult]) -> String {
    let mut s = format!(
        "{:<10} {:<10} {:<10} {:<12} path\n",
        "stat", "read", "write", "list"
    );
    for r in results {
        s.push_str(&format!(
            "{:<10} {:<10} {:<10} {:<12} {}\n",
            r.stat,
            r.read,
            r.write,
            r.list,
            aet_ledger::util::escape_path(&r.path.0.to_string_lossy())
        ));
    }
    s
}

fn run_sandboxed(
    spec: PathBuf,
    env_prefix: Option<String>,
    report_out: Option<PathBuf>,
    quiet: bool,
    command: Vec<OsString>,
) -> anyhow::Result<u8> {
    let prepared = Prepared::new(
        &spec,
        PrepareOptions {
            command,
            env_prefix,
            mode: Mode::Exec,
            identity: None,
            env_start: env::Start::Inherit,
            env: None,
            extra_rw: Vec::new(),
            barrier: None,
            hold: false,
        },
    )?;
    let mut cmd = prepared.command();
    let fds = prepared.inherit_fds();
    // SAFETY: only fcntl between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &fds {
                aet_sandbox::inherit_fd(fd)?;
            }
            Ok(())
        })
    };
    let status = cmd.status().context("cannot start bwrap")?;
    let report = prepared.report();
    if let (Some(path), Ok(r)) = (&report_out, &report) {
        std::fs::write(path, serde_json::to_string_pretty(r)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    match report {
        Err(SandboxError::NoReport) => {
            eprintln!("aet: error: {}", SandboxError::NoReport);
            Ok(Exit::AetFailed.code())
        }
        Err(e) => Err(e.into()),
        Ok(r) if !r.ok => {
            // The stage printed the failures too; say it once more, as aet.
            eprintln!("aet: error: {}", verify_failed(&r));
            Ok(Exit::AetFailed.code())
        }
        Ok(r) => {
            if !quiet {
                eprintln!(
                    "aet: sandbox verified from inside: {} checks, {} mounts, writable: {}",
                    r.checks.len(),
                    r.mounts,
                    r.writable_mounts
                        .iter()
                        .filter(|p| p.as_path() != std::path::Path::new(build::STAGE_DIR))
                        .map(|p| p.0.display().to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                );
            }
            Ok(u8::try_from(crate::run::exit_code_of(status).clamp(0, 255)).unwrap_or(255))
        }
    }
}
