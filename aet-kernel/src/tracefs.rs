//! tracefs: where the kernel lists its tracepoints. aya resolves a tracepoint's id under
//! `/sys/kernel/tracing`, which a fresh machine may not have mounted; aet mounts it when it can.

use std::{io, path::Path};

/// The tracefs mount point aet uses.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// Errors making tracefs available.
#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    /// tracefs is not mounted and mounting it failed.
    #[error("tracefs is not mounted at {TRACEFS} and mounting it failed: {0}")]
    Mount(#[source] io::Error),
}

/// Is tracefs mounted (does it list events)?
pub fn is_mounted() -> bool {
    Path::new(TRACEFS).join("events").is_dir()
}

/// Mounts tracefs at [`TRACEFS`] unless it is already there. Returns whether it mounted it.
pub fn ensure_mounted() -> Result<bool, TracefsError> {
    if is_mounted() {
        return Ok(false);
    }
    nix::mount::mount(
        Some("tracefs"),
        TRACEFS,
        Some("tracefs"),
        nix::mount::MsFlags::MS_NOSUID
            | nix::mount::MsFlags::MS_NODEV
            | nix::mount::MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| TracefsError::Mount(io::Error::from(e)))?;
    Ok(true)
}

/// Does the kernel have this tracepoint (`category/name`)?
pub fn has_tracepoint(category: &str, name: &str) -> bool {
    Path::new(TRACEFS)
        .join("events")
        .join(category)
        .join(name)
        .is_dir()
}
