//! The command line: argument parsing and dispatch. Each subcommand lives in its own file.
//!
//! Exit codes are [`Exit`] (the table of `docs/cli.md` is made from [`Exit::ALL`]); `aet run`
//! otherwise exits with its command's status.

pub(crate) mod audit;
mod daemon;
mod doctor;
mod generate;
mod ledger;
mod monitor;
mod phase;
mod policy;
mod query;
mod remote;
mod run;
mod sandbox;
mod ship;
mod transcripts;
mod verify;
mod watch;

use std::{io::Write as _, process::ExitCode};

use aet_audit::Verdict;
use aet_kernel::guard;
use clap::{Parser, Subcommand};

/// Every exit code aet chooses itself (`aet run` otherwise exits with its command's status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// Success; `aet audit`: clean; `aet monitor`: a complete record.
    Success = Verdict::Clean.exit_code(),
    /// A negative answer: `aet doctor`, aet cannot run here; `aet ledger summary --check`, the
    /// record is incomplete; `aet monitor`, the record is incomplete; `aet audit`, flagged.
    Negative = Verdict::Flagged.exit_code(),
    /// `aet audit`: disqualified.
    Disqualified = Verdict::Disqualified.exit_code(),
    /// `aet audit`: inconclusive (the record is incomplete and no cheat was found).
    Inconclusive = Verdict::Inconclusive.exit_code(),
    /// A usage or input error (a malformed policy, spec or ledger; bad arguments), except for
    /// `aet run` and `aet sandbox run`.
    Usage = 4,
    /// `aet run`, `aet monitor`, `aet sandbox run`: aet itself failed (bad arguments, the monitor
    /// could not attach, the sandbox is not as specified, the ledger could not be written).
    AetFailed = 125,
    /// `aet ship`, `aet run --ship`: the run is complete on the local disk but could not be
    /// shipped to object storage.
    ShipFailed = 124,
    /// Not a code of aet's own: the command's status, passed through (the docs' last row).
    Exited = 255,
}

impl Exit {
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// Every code, with when aet exits with it (the table of `docs/cli.md`).
    pub const ALL: [(Exit, &'static str); 8] = [
        (
            Exit::Success,
            "success; `aet audit`: the run is clean; `aet monitor`: the record is complete",
        ),
        (
            Exit::Negative,
            "a negative answer: `aet audit`, flagged (contaminants, out-of-scope accesses or \
             warnings); `aet monitor` and `aet ledger summary --check`, the record is incomplete; \
             `aet doctor`, aet cannot run here",
        ),
        (
            Exit::Disqualified,
            "`aet audit`: disqualified (a cheat hit)",
        ),
        (
            Exit::Inconclusive,
            "`aet audit`: inconclusive (the record is incomplete and no cheat was found)",
        ),
        (
            Exit::Usage,
            "a usage or input error (a malformed policy: file, line and key named; a bad spec: \
             every problem listed; an unreadable or corrupt ledger; bad arguments), except for \
             the commands that exit 125",
        ),
        (
            Exit::AetFailed,
            "`aet run`, `aet sandbox run`, `aet monitor`: aet itself failed (bad arguments, the \
             monitor could not attach, the sandbox or identity is not as specified and the \
             command did not run, the ledger could not be written, aet failed during the run)",
        ),
        (
            Exit::ShipFailed,
            "`aet ship`, `aet run --ship`, `aet monitor --ship`: the run could not be shipped to object storage (the \
             error names the object and the cause); it is complete on the local disk, and no \
             reader takes the partly shipped copy for a run (`aet ship DIR URL` sends it \
             again); `aet run --ship` exits with it whatever the command's status (which the \
             ledger holds)",
        ),
        (
            Exit::Exited,
            "`aet run` and `aet sandbox run` otherwise exit with the command's own status \
             (128+N when signal N ended it; 126 not executable, 127 not found)",
        ),
    ];

    /// The exit-code table of `docs/cli.md`.
    pub fn markdown() -> String {
        let mut o = String::from("| code | when |\n| --- | --- |\n");
        for (e, when) in Self::ALL {
            let code = match e {
                Exit::Exited => "the command's".to_owned(),
                e => e.code().to_string(),
            };
            o.push_str(&format!("| {code} | {when} |\n"));
        }
        o
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e.code())
    }
}

/// A verdict's exit code is the verdict's own ([`Verdict::exit_code`]), the one mapping.
impl From<Verdict> for Exit {
    fn from(v: Verdict) -> Self {
        Self::ALL
            .iter()
            .map(|(e, _)| *e)
            .find(|e| e.code() == v.exit_code())
            .expect("every verdict's code is an Exit")
    }
}

/// aet: prove what an AI coding agent touched.
#[derive(Debug, Parser)]
#[command(name = "aet", version = crate::version::LONG, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command under the eBPF monitor and record what its process tree opens and executes.
    Run(Box<run::Args>),
    /// Attach the monitor to work something else started (a cgroup, a uid, or a process tree).
    Monitor(monitor::Args),
    /// Mark a phase of a run in progress (`grading` after `agent`): each later row says its
    /// phase, the policy judges each phase by its own rules, and a process of an earlier phase
    /// that acts in a later one is a finding. Asked from outside the run (exit 4 when refused).
    Phase(phase::Args),
    /// Name the view a run's watched files are seen in (a container's init: they are
    /// fingerprinted then), or the end of the agent's phase (fingerprinted again). Asked from
    /// outside the run (exit 4 when refused).
    Watch(watch::Args),
    /// Read ledgers.
    #[command(subcommand)]
    Ledger(ledger::Command),
    /// SQL over many runs: their events, one row per run, and their audits' findings.
    Query(query::Args),
    /// Send a finished run to S3-compatible object storage (exit 124 when it could not be).
    Ship(ship::Args),
    /// Policies: draft one from a run.
    #[command(subcommand)]
    Policy(policy::Command),
    /// Audit a run against a policy: disqualified (2), flagged (1), clean (0) or inconclusive
    /// (3), with JSON and HTML reports.
    Audit(audit::Args),
    /// The tool calls aet reads in an agent's transcripts (found by content in a run
    /// directory), as JSON: the agent's own account, for a run with or without a kernel record.
    Transcripts(transcripts::Args),
    /// Build, show, run and probe the bubblewrap sandbox of a spec.
    #[command(subcommand)]
    Sandbox(sandbox::Command),
    /// Check that a run was not changed after it ended: the ledger's hash chain, and the signed
    /// manifest when there is one (0: it verifies; 1: something was changed, named; 4: no run,
    /// no key, bad arguments).
    Verify(verify::Args),
    /// Signing keys for `aet run --sign`.
    #[command(subcommand)]
    Key(verify::KeyCommand),
    /// Report what this machine supports and whether `aet run` can work here.
    Doctor(doctor::Args),
    /// Serve every `aet run` and `aet monitor` of this host from one set of programs (a resident
    /// monitor), until SIGINT or SIGTERM; `aet daemon status` lists the runs it serves.
    Daemon(daemon::Args),
    /// Man pages and shell completions, made from this CLI.
    #[command(subcommand)]
    Generate(generate::Command),
    /// Internal: kills a run's cgroup if `aet run` dies before finishing (see `guard::Guard`).
    #[command(name = "__guard", hide = true)]
    Guard { cgroup: std::path::PathBuf },
    /// Internal: feeds a record dump (`AET_DEBUG_RECORD_DUMP`) through the consumer into a new
    /// ledger and prints its throughput (`cargo xtask bench`).
    #[command(name = "__replay", hide = true)]
    Replay {
        dump: std::path::PathBuf,
        ledger: std::path::PathBuf,
    },
    /// Internal: thaws what an aet that died had frozen (see `guard::thaw_main`).
    #[command(name = "__guard-thaw", hide = true)]
    GuardThaw { dir: std::path::PathBuf },
    /// Internal: kills the runs of an `aet daemon` that died (see `daemon::guard_main`).
    #[command(name = "__guard-daemon", hide = true)]
    GuardDaemon { state: std::path::PathBuf },
    /// Internal: fingerprints watched files in a run's mount namespace (see
    /// `run::fingerprints`).
    #[command(name = "__fingerprint", hide = true)]
    Fingerprint {
        #[arg(long)]
        ns_fd: Option<i32>,
    },
    /// Internal: aet's stage inside the sandbox (see `sandbox::stage`).
    #[command(name = "__stage", hide = true, trailing_var_arg = true)]
    Stage {
        /// The directory holding the plan (default: the sandbox's stage directory).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
        #[arg(allow_hyphen_values = true)]
        command: Vec<std::ffi::OsString>,
    },
}

/// Parses the arguments, runs the subcommand, and returns the process exit code.
pub fn main() -> ExitCode {
    // What the ledger, audit.json and the manifest record: the version with its commit.
    aet_ledger::version::set(crate::version::RELEASE);
    // A damaged ledger can make Arrow's decoder panic; the reader catches that and reports the
    // file as corrupt, so the panic itself is not printed.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !aet_ledger::decode::decoding() {
            default_hook(info);
        }
    }));
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let is_run = args.get(1).is_some_and(|a| a == "run") || is_sandbox_run(&args);
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    ExitCode::SUCCESS
                }
                _ if is_run => Exit::AetFailed.into(),
                _ => Exit::Usage.into(),
            };
        }
    };
    let (result, failure_code) = match cli.command {
        Command::Run(a) => (run::run(*a), Exit::AetFailed.code()),
        Command::Monitor(a) => (monitor::run(a), Exit::AetFailed.code()),
        Command::Phase(a) => (phase::run(a), Exit::AetFailed.code()),
        Command::Watch(a) => (watch::run(a), Exit::AetFailed.code()),
        Command::Ledger(c) => (ledger::run(c), Exit::Usage.code()),
        Command::Policy(c) => (policy::run(c), Exit::Usage.code()),
        Command::Query(a) => (query::run(a), Exit::Usage.code()),
        Command::Ship(a) => (ship::run(a), Exit::Usage.code()),
        Command::Audit(a) => (audit::run(a), Exit::Usage.code()),
        Command::Transcripts(a) => (transcripts::run(a), Exit::Usage.code()),
        Command::Doctor(a) => (doctor::run(a), Exit::Usage.code()),
        Command::Verify(a) => (verify::verify(a), Exit::Usage.code()),
        Command::Key(c) => (verify::key(c), Exit::Usage.code()),
        Command::Daemon(a) => (daemon::run(a), Exit::AetFailed.code()),
        Command::Generate(c) => (generate::run(c), Exit::Usage.code()),
        Command::Guard { cgroup } => (
            guard::guard_main(&cgroup).map(|()| 0).map_err(Into::into),
            1,
        ),
        Command::GuardDaemon { state } => (
            aet_monitor::daemon::serve::guard_main(&state)
                .map(|()| 0)
                .map_err(Into::into),
            1,
        ),
        Command::GuardThaw { dir } => (guard::thaw_main(&dir).map(|()| 0).map_err(Into::into), 1),
        Command::Replay { dump, ledger } => (
            aet_monitor::replay::replay(&dump, &ledger)
                .map(|r| {
                    println!(
                        "records={} rows={} cpu_ns={} finish_cpu_ns={} wall_ns={}",
                        r.records,
                        r.rows,
                        r.cpu.as_nanos(),
                        r.finish_cpu.as_nanos(),
                        r.wall.as_nanos()
                    );
                    0
                })
                .map_err(Into::into),
            Exit::AetFailed.code(),
        ),
        Command::Sandbox(c) => (
            sandbox::run(c),
            if is_sandbox_run(&args) {
                Exit::AetFailed.code()
            } else {
                Exit::Usage.code()
            },
        ),
        Command::Fingerprint { ns_fd } => {
            let code = crate::run::fingerprints::helper_main(ns_fd);
            return ExitCode::from(u8::try_from(code).unwrap_or(255));
        }
        Command::Stage { dir, command } => {
            let code = aet_sandbox::stage::stage_main(dir.as_deref(), strip_dashdash(&command));
            return ExitCode::from(u8::try_from(code).unwrap_or(255));
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("aet: error: {}", error_text(&e));
            ExitCode::from(failure_code)
        }
    }
}

/// `aet sandbox run` fails like `aet run` (125), not like the other subcommands.
fn is_sandbox_run(args: &[std::ffi::OsString]) -> bool {
    args.get(1).is_some_and(|a| a == "sandbox") && args.get(2).is_some_and(|a| a == "run")
}

/// The command after the stage's `--` (clap keeps a leading `--` in trailing arguments).
fn strip_dashdash(cmd: &[std::ffi::OsString]) -> &[std::ffi::OsString] {
    match cmd.first() {
        Some(a) if a == "--" => &cmd[1..],
        _ => cmd,
    }
}

/// Stdout was closed by its reader (`aet ... | head`): a clean exit, not an error. Only
/// [`print_out`] makes it: a broken pipe anywhere else (a socket) is an error like any other.
#[derive(Debug, thiserror::Error)]
#[error("stdout was closed")]
struct StdoutClosed;

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<StdoutClosed>())
}

/// Writes to stdout, turning a closed pipe into an error `main` treats as a clean exit.
/// Refuses an output that is one of the command's inputs (the same file, by identity or by
/// path) or lies inside an input directory: no command overwrites what it reads.
pub(crate) fn refuse_overwriting_inputs(
    outputs: &[(&str, &std::path::Path)],
    inputs: &[&std::path::Path],
) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let id = |p: &std::path::Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let abs = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
    for (flag, out) in outputs {
        if out.as_os_str() == "-" {
            continue;
        }
        for input in inputs {
            let same = id(out).is_some_and(|o| Some(o) == id(input)) || abs(out) == abs(input);
            let inside = input.is_dir() && abs(out).starts_with(abs(input));
            if same || inside {
                anyhow::bail!(
                    "{flag} {} would overwrite {}, an input of this command: write it elsewhere",
                    out.display(),
                    input.display()
                );
            }
        }
    }
    Ok(())
}

pub(crate) fn print_out(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let closed = |e: std::io::Error| -> anyhow::Error {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            StdoutClosed.into()
        } else {
            e.into()
        }
    };
    out.write_all(text.as_bytes()).map_err(closed)?;
    out.flush().map_err(closed)?;
    Ok(())
}

/// Where the monitor of `aet run` and `aet monitor` comes from.
#[derive(Debug, Clone, clap::Args)]
pub struct MonitorArgs {
    /// The aet daemon's socket (default: $AET_SOCKET, else /run/aet/aet.sock). When a daemon
    /// answers there, the run is recorded by it; when none does, aet starts one (detached, idle
    /// for 300 s or $AET_DAEMON_IDLE_EXIT before it leaves, logging to SOCKET.log) and is served
    /// by it. $AET_DAEMON=never loads the programs for each run instead, =require is --daemon.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<std::path::PathBuf>,
    /// Fail (exit 125) when no daemon answers, rather than start one.
    #[arg(long, conflicts_with = "standalone")]
    pub daemon: bool,
    /// Load the programs for this run, even if a daemon answers (about 2.5 s of verification).
    #[arg(long)]
    pub standalone: bool,
    /// When the record cannot keep up: `freeze` the run's cgroup until it has (nothing lost;
    /// the time frozen is in the ledger), or `drop` what does not fit and count it (the run is
    /// then incomplete). A scope that is not a cgroup (`--uid`, `--pid`) always drops, and its
    /// ledger says so.
    #[arg(long, value_enum, default_value_t = aet_monitor::overload::OnOverload::Freeze, value_name = "HOW")]
    pub on_overload: aet_monitor::overload::OnOverload,
}

impl MonitorArgs {
    pub fn mode(&self) -> anyhow::Result<crate::run::session::Mode> {
        let socket = self
            .socket
            .clone()
            .unwrap_or_else(aet_monitor::daemon::default_socket);
        crate::run::session::Mode::choose(socket, self.standalone, self.daemon)
            .map_err(anyhow::Error::msg)
    }
}

/// A current-thread tokio runtime for the subcommands that wait on processes and signals.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Parses a ring buffer size in MiB (a power of two).
pub(crate) fn ringbuf_mb(s: &str) -> Result<u32, String> {
    let mb: u32 = s.parse().map_err(|e| format!("{e}"))?;
    if mb == 0 || !mb.is_power_of_two() || mb > 1024 {
        return Err("must be a power of two between 1 and 1024".into());
    }
    Ok(mb << 20)
}

/// An error and its causes on one line, each cause once: most of aet's errors already name
/// their cause in their own message.
fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}

#[cfg(test)]
mod docs {
    use aet_audit::Verdict;
    use aet_checks::docgen;

    #[test]
    fn each_verdict_exits_with_its_own_code() {
        for v in [
            Verdict::Clean,
            Verdict::Flagged,
            Verdict::Disqualified,
            Verdict::Inconclusive,
        ] {
            assert_eq!(super::Exit::from(v).code(), v.exit_code(), "{}", v.name());
        }
        assert_eq!(
            super::Exit::from(Verdict::Disqualified),
            super::Exit::Disqualified
        );
    }

    /// An option `aet run` (or `aet sandbox run`) does not know is an error naming it, never
    /// the command: a misspelt `--sandbox` or `--policy` must not run the agent unsandboxed or
    /// unjudged. What follows the command's first word is the command's, dashes and all.
    #[test]
    fn an_unknown_option_before_the_command_is_an_error_naming_it() {
        use clap::Parser as _;
        for (words, unknown) in [
            (
                &["aet", "run", "--bogus", "--out", "R", "--", "true"][..],
                "--bogus",
            ),
            (
                &["aet", "run", "--sandbx", "s.toml", "--out", "R", "true"],
                "--sandbx",
            ),
            (
                &["aet", "sandbox", "run", "s.toml", "--polcy", "p", "true"],
                "--polcy",
            ),
        ] {
            let e = super::Cli::try_parse_from(words).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::UnknownArgument,
                "{words:?}"
            );
            assert!(e.to_string().contains(unknown), "{e}");
        }
        for words in [
            &["aet", "run", "--out", "R", "sh", "-c", "echo --out"][..],
            &["aet", "run", "--out", "R", "--", "-weird", "--flag"],
        ] {
            super::Cli::try_parse_from(words).unwrap_or_else(|e| panic!("{words:?}: {e}"));
        }
    }

    /// `docs/cli.md` is the reference clap makes, and its exit-code table is [`super::Exit`]'s.
    #[test]
    fn the_cli_docs_match_the_code() {
        let f = docgen::docs_dir().join("cli.md");
        docgen::check(&f, "exit-codes", &super::Exit::markdown());
        let reference = clap_markdown::help_markdown_custom::<super::Cli>(
            &clap_markdown::MarkdownOptions::new()
                .show_footer(false)
                .show_table_of_contents(true)
                .title("Commands".to_owned()),
        );
        // One heading level down: the page's own title is the top one.
        let reference = reference.replace("\n# ", "\n## ").replacen("# ", "## ", 1);
        docgen::check(&f, "reference", &reference);
    }

    /// Every `aet …` line the README's fenced blocks show is one the CLI accepts (its
    /// subcommands, flags and values as clap parses them).
    #[test]
    fn the_readme_commands_are_ones_the_cli_accepts() {
        use clap::Parser as _;
        let readme = docgen::workspace_root().join("README.md");
        let text = std::fs::read_to_string(&readme).unwrap();
        let commands = aet_checks::links::aet_commands(&text);
        assert!(commands.len() >= 5, "{commands:?}");
        let refused: Vec<String> = commands
            .iter()
            .filter_map(|words| {
                super::Cli::try_parse_from(words)
                    .err()
                    .filter(|e| {
                        !matches!(
                            e.kind(),
                            clap::error::ErrorKind::DisplayHelp
                                | clap::error::ErrorKind::DisplayVersion
                        )
                    })
                    .map(|e| format!("{}: {}", words.join(" "), e.kind()))
            })
            .collect();
        assert!(
            refused.is_empty(),
            "README.md shows commands aet refuses:\n{}",
            refused.join("\n")
        );
    }
}
