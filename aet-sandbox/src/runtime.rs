//! Where aet keeps the sandbox's host-side files: a directory only root can write.

use std::{io, path::Path};

/// Where aet keeps the sandbox's host-side files (the empty mask file, report directories), and
/// runs their control sockets.
pub const RUNTIME_DIR: &str = aet_kernel::leftovers::RUNTIME_DIR;

/// [`RUNTIME_DIR`], created if it is missing (`/run` is emptied at boot): a directory owned by
/// root that no one else can write, or an error naming what is wrong with it.
pub fn runtime_dir() -> io::Result<&'static Path> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    let dir = Path::new(RUNTIME_DIR);
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io::Error::new(e.kind(), format!("{RUNTIME_DIR}: {e}"))),
    }
    let m = std::fs::symlink_metadata(dir)?;
    if !m.is_dir() || m.uid() != 0 || m.mode() & 0o022 != 0 {
        return Err(io::Error::other(format!(
            "{RUNTIME_DIR} must be a directory owned by root that only root can write"
        )));
    }
    Ok(dir)
}
