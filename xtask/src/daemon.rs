//! An `aet daemon` on a private socket, for the end-to-end tests' daemon pass and the benchmarks.

use std::{
    path::{Path, PathBuf},
    process::Child,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

/// A running `aet daemon`, stopped (SIGTERM, then waited for) when dropped or by [`Daemon::stop`].
pub struct Daemon {
    child: Option<Child>,
    socket: PathBuf,
}

impl Daemon {
    /// Starts `aet daemon -q --socket /run/aet/NAME-PID.sock ARGS…` and waits until it serves.
    pub fn start(aet: &Path, name: &str, args: &[&str]) -> anyhow::Result<Self> {
        let socket = PathBuf::from(format!("/run/aet/{name}-{}.sock", std::process::id()));
        // Its errors go to a file as well as being kept: a daemon that does not serve says why.
        let log = crate::root().join(format!("target/daemon-{name}-{}.log", std::process::id()));
        let mut child = crate::user_command(aet)
            .args(["daemon", "-q", "--socket"])
            .arg(&socket)
            .args(args)
            .stderr(std::fs::File::create(&log).context("the daemon's log")?)
            .spawn()
            .context("starting aet daemon")?;
        let why = || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n    ");
            format!("its stderr ({}):\n    {tail}", log.display())
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            if let Some(st) = child.try_wait()? {
                bail!("aet daemon exited before serving: {st}; {}", why());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!(
                    "aet daemon does not serve {} after 30 s; {}",
                    socket.display(),
                    why()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Self {
            child: Some(child),
            socket,
        })
    }

    /// The daemon's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Stops the daemon; an error if it did not end cleanly.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.terminate()
    }

    fn terminate(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        crate::sh(
            std::process::Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string()),
        )?;
        let st = child.wait()?;
        if !st.success() {
            bail!("aet daemon ended with {st}");
        }
        Ok(())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.terminate();
    }
}
