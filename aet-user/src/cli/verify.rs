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
            let public = aet_ledger::manifest::new_key(&key, seed)?;
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
    /// The run directory, or a shipped run (s3://BUCKET/PREFIX/RUN): its objects are checked
    /// against its shipped.json, then the run as downloaded as a local one is.
    pub run: PathBuf,
    /// The public key the run must be signed with (KEY.pub from `aet key new`).
    #[arg(long, value_name = "PUB")]
    pub key: Option<PathBuf>,
}

/// Exit 0 when everything verifies, 1 when anything was changed (each difference named), 4 for
/// a missing run or key or bad arguments.
pub fn verify(a: Args) -> anyhow::Result<u8> {
    let remote = if super::remote::is_url(&a.run) {
        Some(super::remote::one_run(&a.run.to_string_lossy(), false)?)
    } else {
        None
    };
    let dir = remote.as_ref().map_or(a.run.clone(), |r| r.dir.clone());
    let mut v = aet_ledger::manifest::verify(&dir, a.key.as_deref())?;
    if let Some(r) = &remote {
        // The files were read from the bucket: name them there, not in the download.
        let local = dir.display().to_string();
        for l in
            v.ok.iter_mut()
                .chain(&mut v.problems)
                .chain(&mut v.unsigned)
        {
            *l = l.replace(&local, &r.url);
        }
        v.problems.extend(r.problems.iter().cloned());
    }
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
