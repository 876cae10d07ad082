//! `aet audit`: a verdict for a run, from its ledger and a policy.
use super::Exit;
use std::path::PathBuf;

use anyhow::Context as _;

use aet_audit as audit;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A run directory (holding ledger.arrow) or a ledger file, or a shipped run
    /// (s3://BUCKET/PREFIX/RUN, checked against its shipped.json first).
    pub run: PathBuf,
    /// The policy (TOML).
    #[arg(long, value_name = "FILE")]
    pub policy: PathBuf,
    /// The agent's transcripts: a directory (read recursively) or one file.
    #[arg(long, value_name = "DIR")]
    pub transcripts: Option<PathBuf>,
    /// The transcripts' format: `auto` (each file's, found by its content), `claude-jsonl`,
    /// `claude-json`, `codex`, `codex-exec`, `inspect`, `swe-agent`, `mini-swe-agent`,
    /// `openhands`, `gemini`.
    #[arg(long, value_name = "NAME", default_value = "auto")]
    pub transcript_format: String,
    /// Write the JSON report here (`-` for stdout, instead of the summary).
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
    /// Write the HTML report here.
    #[arg(long, value_name = "OUT")]
    pub html: Option<PathBuf>,
    /// Do not print the summary.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Writes the outputs of an audit; returns the verdict's exit code.
pub fn write_outputs(
    r: &audit::Report,
    json: Option<&std::path::Path>,
    html: Option<&std::path::Path>,
    quiet: bool,
) -> anyhow::Result<u8> {
    let to_stdout = json.is_some_and(|p| p.as_os_str() == "-");
    if let Some(p) = json {
        let text = serde_json::to_string_pretty(r)? + "\n";
        if to_stdout {
            super::print_out(&text)?;
        } else {
            std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?;
        }
    }
    if let Some(p) = html {
        std::fs::write(p, audit::html::render(r))
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    if !quiet && !to_stdout {
        super::print_out(&audit::render_text(r))?;
    }
    Ok(Exit::from(r.verdict).code())
}

pub fn run(mut a: Args) -> anyhow::Result<u8> {
    let remote = if super::remote::is_url(&a.run) {
        Some(super::remote::one_run(&a.run.to_string_lossy(), true)?)
    } else {
        None
    };
    if let Some(r) = &remote {
        a.run = r.dir.clone();
    }
    let ledger = aet_ledger::run_dir::ledger_of(&a.run);
    let mut inputs = vec![ledger.as_path(), a.policy.as_path()];
    inputs.extend(a.transcripts.as_deref());
    let mut outputs = Vec::new();
    outputs.extend(a.json.as_deref().map(|p| ("--json", p)));
    outputs.extend(a.html.as_deref().map(|p| ("--html", p)));
    super::refuse_overwriting_inputs(&outputs, &inputs)?;
    if let (Some(j), Some(h)) = (&a.json, &a.html)
        && j.as_os_str() != "-"
        && std::path::absolute(j).ok() == std::path::absolute(h).ok()
    {
        anyhow::bail!("--json and --html name the same file {}", j.display());
    }
    let mut report = audit::audit(
        &a.run,
        &a.policy,
        &audit::Options {
            transcripts: a.transcripts.as_deref(),
            transcript_format: &a.transcript_format,
        },
    )?;
    if let Some(r) = &remote {
        // The reports name the object audited, not the temporary copy it was read from.
        report.ledger = PathBuf::from(format!("{}/{}", r.url, aet_ledger::run_dir::LEDGER));
    }
    write_outputs(&report, a.json.as_deref(), a.html.as_deref(), a.quiet)
}
