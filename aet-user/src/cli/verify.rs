//! `aet key new` and `aet verify`.
use std::path::PathBuf;

use super::Exit;

#[derive(Debug, clap::Subcommand)]
pub enum KeyCommand {
    /// Write a new Ed25519 key pair for `aet run --sign`: KEY (mode 0600) and KEY.pub. Neither
    /// may exist.
    New {
        /// Where to write the secret key.
        key: PathBuf,
    },
}

pub fn key(c: KeyCommand) -> anyhow::Result<u8> {
    match c {
        KeyCommand::New { key } => {
            let mut seed = [0u8; 32];
            getrandom(&mut seed)?;
            let public = aet_core::manifest::new_key(&key, seed)?;
            eprintln!(
                "aet: wrote the secret key {} (mode 0600) and the public key {}",
                key.display(),
                public.display()
            );
            Ok(Exit::Success.code())
        }
    }
}

/// Fills `buf` from the kernel's random source.
fn getrandom(buf: &mut [u8]) -> anyhow::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: writes at most the remaining length into the buffer.
        let n = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), buf.len() - done, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            anyhow::bail!("getrandom: {e}");
        }
        done += n as usize;
    }
    Ok(())
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run directory.
    pub run: PathBuf,
    /// The public key the run must be signed with (KEY.pub from `aet key new`).
    #[arg(long, value_name = "PUB")]
    pub key: Option<PathBuf>,
}

/// Exit 0 when everything verifies, 1 when anything was changed (each difference named), 4 for
/// a missing run or key or bad arguments.
pub fn verify(a: Args) -> anyhow::Result<u8> {
    let v = aet_core::manifest::verify(&a.run, a.key.as_deref())?;
    let mut out = String::new();
    for l in &v.ok {
        out += &format!("ok       {l}\n");
    }
    for l in &v.problems {
        out += &format!("CHANGED  {l}\n");
    }
    for l in &v.unsigned {
        out += &format!("UNSIGNED {l}\n");
    }
    out += match (v.problems.is_empty(), v.unsigned.is_empty()) {
        (false, _) => "aet verify: THE RUN DOES NOT VERIFY\n",
        (true, true) => "aet verify: the run verifies\n",
        (true, false) => {
            "aet verify: the run verifies, except the files marked UNSIGNED, which it does not \
             cover\n"
        }
    };
    super::print_out(&out)?;
    Ok(if v.problems.is_empty() {
        Exit::Success
    } else {
        Exit::Negative
    }
    .code())
}
