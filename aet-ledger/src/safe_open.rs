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
    /// Another file is at the name now.
    #[error("another file is there now (inode {ino} on device {dev})")]
    Other { dev: u64, ino: u64 },
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
const RESOLVE_BENEATH: u64 = 0x08;

/// Opens the regular file at absolute `path` for reading, following no symlink on the way (see
/// the module's text). A FIFO, a device, a socket or a directory is never opened for reading.
pub fn open_regular(path: &Path) -> Result<File, NotOpened> {
    open_regular_under(Path::new("/"), path)
}

/// [`open_regular`] of a `path` under `root`, a directory the caller chose (a transcript
/// directory named on the command line): `root` is taken as it is, symlinks and all; below it
/// no symlink is followed and nothing leads out of it. A `path` not under `root` is not opened.
pub fn open_regular_under(root: &Path, path: &Path) -> Result<File, NotOpened> {
    if !path.as_os_str().as_bytes().starts_with(b"/") {
        return Err(NotOpened::Relative);
    }
    let rel = path
        .strip_prefix(root)
        .map_err(|_| NotOpened::Io(io::Error::from_raw_os_error(libc::EXDEV)))?;
    let at = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(root)
        .map(OwnedFd::from)
        .map_err(classify)?;
    let fd = match openat2_beneath(&at, rel) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => walk_from(at, rel),
        r => r,
    }
    .map_err(classify)?;
    regular(File::from(fd), path)
}

/// Opens the regular file at `path` for reading only if it is the file `(dev, ino)` (one a
/// listing or the record named): whatever the path leads through now (symlinks, and magic
/// links such as `/proc/PID/exe`, are followed), the open that names the file reaches no driver
/// (`O_PATH`), and a file that is not that one is never read.
pub fn open_identified(path: &Path, dev: u64, ino: u64) -> Result<File, NotOpened> {
    use std::os::unix::fs::MetadataExt as _;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
        .map_err(classify)?;
    let m = f.metadata().map_err(NotOpened::Io)?;
    if (m.dev(), m.ino()) != (dev, ino) {
        return Err(NotOpened::Other {
            dev: m.dev(),
            ino: m.ino(),
        });
    }
    regular(f, path)
}

/// Reopens an `O_PATH` descriptor (of `path`) for reading if it names a regular file.
fn regular(file: File, path: &Path) -> Result<File, NotOpened> {
    use std::os::unix::fs::MetadataExt as _;
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
    let read = |p: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(p)
    };
    // The O_PATH descriptor names the file that was checked; reopened through it, the same file.
    let fd_link = format!("/proc/self/fd/{}", file.as_raw_fd());
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(&fd_link)
    {
        Ok(f) => Ok(f),
        // No /proc of this process in this view (a container's mount namespace entered with
        // setns, whose /proc is the container's): the file is opened by its name, with the
        // same flags, and read only if it is the file checked. Only a swap in between could
        // make that open reach something else, which the check then refuses.
        Err(e) if e.kind() == io::ErrorKind::NotFound && !Path::new("/proc/self/fd").exists() => {
            let f = read(path).map_err(classify)?;
            let again = f.metadata().map_err(NotOpened::Io)?;
            if (again.dev(), again.ino()) != (m.dev(), m.ino()) {
                return Err(NotOpened::Other {
                    dev: again.dev(),
                    ino: again.ino(),
                });
            }
            Ok(f)
        }
        Err(e) => Err(NotOpened::Io(e)),
    }
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

/// `openat2(at, rel, O_PATH | O_NOFOLLOW | O_CLOEXEC, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS)`.
fn openat2_beneath(at: &OwnedFd, rel: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `c` and `how` outlive the call; the kernel reads `size_of::<OpenHow>()` bytes.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            at.as_raw_fd(),
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

/// The same without `openat2` (before 5.6): from `at`, each directory opened with
/// `O_PATH | O_NOFOLLOW | O_DIRECTORY`, the last component with `O_PATH | O_NOFOLLOW`.
fn walk_from(mut at: OwnedFd, rel: &Path) -> io::Result<OwnedFd> {
    let parts: Vec<&[u8]> = rel
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
            walk_from(
                File::open("/").unwrap().into(),
                p.strip_prefix("/").unwrap(),
            )
            .map_err(classify)
            .and_then(|fd| {
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

    #[test]
    fn under_a_root_its_own_symlinks_are_taken_and_none_below_it() {
        use std::os::unix::fs::symlink;
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("real/sub")).unwrap();
        std::fs::write(d.path().join("real/sub/t.jsonl"), "{}").unwrap();
        symlink(d.path().join("real"), d.path().join("root")).unwrap();
        let root = d.path().join("root");
        let mut s = String::new();
        open_regular_under(&root, &root.join("sub/t.jsonl"))
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "{}");
        symlink("/dev", d.path().join("real/dev")).unwrap();
        symlink("/etc", d.path().join("real/etc")).unwrap();
        for p in ["dev/null", "etc/passwd"] {
            let r = open_regular_under(&root, &root.join(p));
            assert!(matches!(r, Err(NotOpened::Symlink)), "{p}: {r:?}");
        }
        // Not under the root: never opened.
        let r = open_regular_under(&root, Path::new("/etc/passwd"));
        assert!(matches!(r, Err(NotOpened::Io(_))), "{r:?}");
        let r = open_regular_under(&root, &root.join("sub/../../real/sub/t.jsonl"));
        assert!(r.is_err(), "{r:?}");
    }

    #[test]
    fn an_identified_file_is_read_and_another_at_its_name_is_not() {
        use std::os::unix::fs::MetadataExt as _;
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("dir")).unwrap();
        let f = d.path().join("dir/f");
        std::fs::write(&f, "x").unwrap();
        let m = std::fs::metadata(&f).unwrap();
        let mut s = String::new();
        open_identified(&f, m.dev(), m.ino())
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "x");
        // The directory swapped for a symlink to /dev: /dev/null is named, never opened for
        // reading, and is not the file listed.
        std::fs::rename(d.path().join("dir"), d.path().join("moved")).unwrap();
        std::os::unix::fs::symlink("/dev", d.path().join("dir")).unwrap();
        let null = d.path().join("dir/null");
        let r = open_identified(&null, m.dev(), m.ino());
        assert!(matches!(r, Err(NotOpened::Other { .. })), "{r:?}");
        let n = std::fs::metadata("/dev/null").unwrap();
        let r = open_identified(&null, n.dev(), n.ino());
        assert!(matches!(r, Err(NotOpened::NotRegular("a device"))), "{r:?}");
    }
}
