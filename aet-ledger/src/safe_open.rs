//! Opening a file a run's record names, as root, without acting for the agent.
//!
//! A path in the record (a file the run wrote, a transcript in the agent's home, a watched
//! file) lies in a tree the agent could change after the fact: a directory on the way swapped
//! for a symlink to `/dev` or to a root-only file, a FIFO or a device left at the name. aet
//! reads such a path back as root, so an open that followed a link or reached a device would be
//! aet acting for the agent (`/dev/watchdog` arms on open; a FIFO blocks the reader). Here every
//! component is taken as it is, no symlink followed anywhere on the way (`openat2` with
//! `RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`; before 5.6, a walk one component at a time
//! with `O_NOFOLLOW`), the last one opened with `O_PATH` only (which reaches no driver), and the
//! file is opened for reading (through `/proc/self/fd`) only if it is a regular file.

use std::{
    ffi::CString,
    fs::File,
    io,
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::{ffi::OsStrExt as _, fs::OpenOptionsExt as _},
    },
    path::Path,
};

/// Why a file was not opened.
#[derive(Debug, thiserror::Error)]
pub enum NotOpened {
    /// Nothing is at the path (removed or renamed away).
    #[error("no longer there")]
    Gone,
    /// A symlink on the way or at the name.
    #[error("a symlink is on its path (never followed)")]
    Symlink,
    /// Something other than a regular file is at the name.
    #[error("not a regular file ({0})")]
    NotRegular(&'static str),
    /// The path is not absolute.
    #[error("not an absolute path")]
    Relative,
    #[error("{0}")]
    Io(io::Error),
}

/// `struct open_how` (uapi).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;

/// Opens the regular file at absolute `path` for reading, following no symlink on the way (see
/// the module's text). A FIFO, a device, a socket or a directory is never opened for reading.
pub fn open_regular(path: &Path) -> Result<File, NotOpened> {
    let bytes = path.as_os_str().as_bytes();
    if !bytes.starts_with(b"/") {
        return Err(NotOpened::Relative);
    }
    let fd = match openat2_path(path) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => walk_path(path),
        r => r,
    }
    .map_err(classify)?;
    let file = File::from(fd);
    let m = file.metadata().map_err(NotOpened::Io)?;
    let ty = m.file_type();
    // O_PATH | O_NOFOLLOW names a symlink at the last component itself.
    if ty.is_symlink() {
        return Err(NotOpened::Symlink);
    }
    if !ty.is_file() {
        use std::os::unix::fs::FileTypeExt as _;
        return Err(NotOpened::NotRegular(if ty.is_dir() {
            "a directory"
        } else if ty.is_fifo() {
            "a FIFO"
        } else if ty.is_char_device() || ty.is_block_device() {
            "a device"
        } else if ty.is_socket() {
            "a socket"
        } else {
            "unknown"
        }));
    }
    // The O_PATH descriptor names the file that was checked; reopened through it, the same file.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(NotOpened::Io)
}

fn classify(e: io::Error) -> NotOpened {
    match e.raw_os_error() {
        Some(libc::ENOENT) => NotOpened::Gone,
        // RESOLVE_NO_SYMLINKS's refusal; O_NOFOLLOW's on the walk.
        Some(libc::ELOOP) => NotOpened::Symlink,
        Some(libc::ENOTDIR) => NotOpened::NotRegular("a component on the way is not a directory"),
        _ => NotOpened::Io(e),
    }
}

/// `openat2(AT_FDCWD, path, O_PATH | O_NOFOLLOW | O_CLOEXEC, RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS)`.
fn openat2_path(path: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `c` and `how` outlive the call; the kernel reads `size_of::<OpenHow>()` bytes.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The same without `openat2` (before 5.6): from `/`, each directory opened with
/// `O_PATH | O_NOFOLLOW | O_DIRECTORY`, the last component with `O_PATH | O_NOFOLLOW`.
fn walk_path(path: &Path) -> io::Result<OwnedFd> {
    let mut at = File::open("/").map(OwnedFd::from)?;
    let parts: Vec<&[u8]> = path
        .as_os_str()
        .as_bytes()
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty() && *p != b".")
        .collect();
    if parts.contains(&&b".."[..]) {
        return Err(io::Error::from_raw_os_error(libc::EXDEV));
    }
    for (n, part) in parts.iter().enumerate() {
        let last = n + 1 == parts.len();
        let c = CString::new(*part).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let mut flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        if !last {
            flags |= libc::O_DIRECTORY;
        }
        // SAFETY: a valid directory descriptor and a NUL-terminated name.
        let fd = unsafe { libc::openat(at.as_raw_fd(), c.as_ptr(), flags) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            // O_DIRECTORY | O_NOFOLLOW on a symlink says ENOTDIR: it is the symlink.
            if !last && e.raw_os_error() == Some(libc::ENOTDIR) {
                // SAFETY: as above.
                let probe = unsafe {
                    libc::openat(
                        at.as_raw_fd(),
                        c.as_ptr(),
                        libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                    )
                };
                if probe >= 0 {
                    // SAFETY: just returned, owned by nothing else.
                    let f = File::from(unsafe { OwnedFd::from_raw_fd(probe) });
                    if f.metadata().is_ok_and(|m| m.file_type().is_symlink()) {
                        return Err(io::Error::from_raw_os_error(libc::ELOOP));
                    }
                }
            }
            return Err(e);
        }
        // SAFETY: just returned, owned by nothing else.
        at = unsafe { OwnedFd::from_raw_fd(fd) };
        if last {
            let f = File::from(at);
            if f.metadata()?.file_type().is_symlink() {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
            return Ok(f.into());
        }
    }
    Err(io::Error::from_raw_os_error(libc::EISDIR))
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;

    fn both(p: &Path) -> [Result<File, NotOpened>; 2] {
        [
            open_regular(p),
            walk_path(p).map_err(classify).and_then(|fd| {
                let f = File::from(fd);
                match f.metadata() {
                    Ok(m) if m.is_file() => Ok(f),
                    Ok(_) => Err(NotOpened::NotRegular("not a file")),
                    Err(e) => Err(NotOpened::Io(e)),
                }
            }),
        ]
    }

    #[test]
    fn a_regular_file_is_read() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/f"), "token").unwrap();
        let mut s = String::new();
        open_regular(&d.path().join("sub/f"))
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "token");
        for r in both(&d.path().join("sub/f")) {
            assert!(r.is_ok());
        }
    }

    #[test]
    fn a_symlinked_parent_to_dev_or_a_root_only_file_is_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let secret = tempfile::tempdir().unwrap();
        std::fs::write(secret.path().join("key"), "secret").unwrap();
        std::os::unix::fs::symlink("/dev", d.path().join("d")).unwrap();
        std::os::unix::fs::symlink(secret.path(), d.path().join("s")).unwrap();
        std::os::unix::fs::symlink(secret.path().join("key"), d.path().join("k")).unwrap();
        for p in ["d/null", "d/kmsg", "s/key", "k"] {
            for r in both(&d.path().join(p)) {
                assert!(matches!(r, Err(NotOpened::Symlink)), "{p}: {r:?}");
            }
        }
    }

    #[test]
    fn a_fifo_or_a_device_is_not_opened_and_a_missing_file_is_gone() {
        let d = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(&d.path().join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        // A FIFO with no writer: a read open would block; it is never made.
        assert!(matches!(
            open_regular(&d.path().join("fifo")),
            Err(NotOpened::NotRegular("a FIFO"))
        ));
        assert!(matches!(
            open_regular(Path::new("/dev/null")),
            Err(NotOpened::NotRegular("a device"))
        ));
        assert!(matches!(
            open_regular(&d.path().join("missing")),
            Err(NotOpened::Gone)
        ));
        assert!(matches!(
            open_regular(Path::new("relative")),
            Err(NotOpened::Relative)
        ));
    }
}
