//! `aet ship RUN_DIR URL` and `aet run --ship URL`: a finished run sent to object storage (see
//! `aet_query::remote`).
#![cfg_attr(not(feature = "query"), allow(dead_code, unused_imports))]
use std::path::{Path, PathBuf};

use super::Exit;

/// Send a finished run to S3-compatible object storage: every file of RUN_DIR to
/// URL/RUN/NAME (multipart above 16 MiB, retried), then URL/RUN/shipped.json (each file's
/// size and SHA-256), which readers take as the sign the run is all there. Exit 124 when it
/// could not be shipped (the local copy is untouched; shipping it again completes it).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The finished run directory.
    pub run: PathBuf,
    /// Where runs go: s3://BUCKET/PREFIX (credentials, region and endpoint from AWS_* or the
    /// shared AWS files' profile).
    pub url: String,
    /// Do not print what was sent.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn run(a: Args) -> anyhow::Result<u8> {
    check_url(&a.url)?;
    Ok(match ship(&a.run, &a.url, a.quiet) {
        Ok(()) => Exit::Success.code(),
        Err(e) => {
            eprintln!("aet: error: {e:#}");
            Exit::ShipFailed.code()
        }
    })
}

/// A destination that cannot be used is refused before anything runs.
#[cfg(feature = "query")]
pub fn check_url(url: &str) -> anyhow::Result<()> {
    aet_query::remote::Location::open(url)?;
    Ok(())
}

#[cfg(not(feature = "query"))]
pub fn check_url(url: &str) -> anyhow::Result<()> {
    anyhow::bail!("{url}: {}", super::remote::NO_REMOTE)
}

/// Ships `dir` to `url`, saying what was sent unless `quiet`; the error says the local copy is
/// kept.
#[cfg(feature = "query")]
pub fn ship(dir: &Path, url: &str, quiet: bool) -> anyhow::Result<()> {
    use aet_query::remote::RemoteError;
    let s = aet_query::remote::ship(dir, url, &Default::default()).map_err(|e| match e {
        // Nothing there to ship: no claim about a local copy.
        RemoteError::NotShippable { .. } => anyhow::anyhow!("the run was not shipped: {e}"),
        e => anyhow::anyhow!(
            "the run was not shipped: {e}; the run is complete at {} (`aet ship {} {url}` \
             sends it again)",
            dir.display(),
            dir.display()
        ),
    })?;
    if !quiet {
        if s.already {
            eprintln!("aet: {} already holds this run: nothing sent", s.url);
        } else {
            eprintln!(
                "aet: shipped to {}: {} files, {} bytes in {:.2} s ({:.1} MB/s)",
                s.url,
                s.index.files.len(),
                s.bytes,
                s.seconds,
                s.bytes as f64 / 1e6 / s.seconds.max(1e-6)
            );
        }
    }
    Ok(())
}

#[cfg(not(feature = "query"))]
pub fn ship(_: &Path, url: &str, _: bool) -> anyhow::Result<()> {
    anyhow::bail!("{url}: {}", super::remote::NO_REMOTE)
}
