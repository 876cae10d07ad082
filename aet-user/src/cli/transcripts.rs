//! `aet transcripts`: the tool calls aet reads in an agent's transcripts, as JSON: what the
//! audit holds against the kernel's record, and the seed's tool-level ledger of a run that has
//! no kernel record (`aet.isolation.file_access_ledger`).

use std::path::PathBuf;

use aet_audit::transcript;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A run directory (its `transcripts/` folder, or every file in it that a format
    /// recognises by its content, at any depth), a directory of transcripts, or one file.
    pub path: PathBuf,
    /// The transcripts' format: `auto` (each file's, found by its content), or one of the
    /// names `aet audit --transcript-format` takes.
    #[arg(long, value_name = "NAME", default_value = "auto")]
    pub format: String,
}

#[derive(serde::Serialize)]
struct File {
    path: PathBuf,
    format: &'static str,
}

#[derive(serde::Serialize)]
struct Out<'a> {
    /// Where the transcripts were read from.
    source: PathBuf,
    /// That this is the agent's own account, not what the kernel saw.
    account: &'static str,
    files: Vec<File>,
    unrecognized: &'a [PathBuf],
    tool_calls: &'a [transcript::ToolCall],
}

pub fn run(a: Args) -> anyhow::Result<u8> {
    let (source, read) = if a.format == "auto" && a.path.is_dir() {
        transcript::in_run(&a.path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", a.path.display()))?
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: no file in it is a transcript of a format aet knows ({})",
                    a.path.display(),
                    transcript::format_names()[1..].join(", ")
                )
            })?
    } else {
        let fmt = match a.format.as_str() {
            "auto" => None,
            name => Some(transcript::format_by_name(name).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown transcript format {name:?} (known: {})",
                    transcript::format_names().join(", ")
                )
            })?),
        };
        let read = transcript::read(&a.path, fmt)
            .map_err(|e| anyhow::anyhow!("transcripts {}: {e}", a.path.display()))?;
        (a.path.clone(), read)
    };
    let out = Out {
        source,
        account: "the agent's own account (its transcripts), not the kernel's record",
        files: read
            .files
            .iter()
            .map(|(path, format)| File {
                path: path.clone(),
                format,
            })
            .collect(),
        unrecognized: &read.unrecognized,
        tool_calls: &read.calls,
    };
    super::print_out(&(serde_json::to_string_pretty(&out)? + "\n"))?;
    Ok(0)
}
