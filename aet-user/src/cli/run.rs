//! `aet run`.
use std::{ffi::OsString, path::PathBuf, time::Duration};

use anyhow::Context as _;

use crate::runner;

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
    /// Only print aet's messages when something is wrong.
    #[arg(long, short)]
    pub quiet: bool,
    /// Run the command in the bubblewrap sandbox this spec describes (verified from inside
    /// before the command starts).
    #[arg(long, value_name = "SPEC")]
    pub sandbox: Option<PathBuf>,
    /// Shell text run before the command inside the sandbox (`export PATH=...;`).
    #[arg(long, value_name = "TEXT", requires = "sandbox")]
    pub env_prefix: Option<String>,
    /// The command and its arguments.
    #[arg(required = true, value_name = "COMMAND", allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

pub fn run(a: Args) -> anyhow::Result<u8> {
    if !(0.0..=86400.0).contains(&a.grace) {
        anyhow::bail!("--grace must be between 0 and 86400 seconds");
    }
    let out = a.out.unwrap_or_else(default_out);
    let sandbox = match &a.sandbox {
        Some(spec) => Some(crate::sandbox::Prepared::new(
            spec,
            crate::sandbox::PrepareOptions {
                command: a.command.clone(),
                env_prefix: a.env_prefix.clone(),
                mode: crate::sandbox::plan::Mode::Exec,
                identity: None,
                env_start: crate::sandbox::env::Start::Inherit,
            },
        )?),
        None => None,
    };
    let opts = runner::RunOptions {
        out,
        command: a.command,
        grace: Duration::from_secs_f64(a.grace),
        ringbuf_bytes: a.ringbuf_bytes,
        quiet: a.quiet,
        sandbox,
    };
    let outcome = super::runtime()?
        .block_on(runner::run(opts))
        .context("aet run failed")?;
    Ok(u8::try_from(outcome.exit_status.clamp(0, 255)).unwrap_or(255))
}

/// `runs/<UTC time>` for a run without `--out`.
fn default_out() -> PathBuf {
    let secs = crate::monitor::now_ns() / 1_000_000_000;
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
