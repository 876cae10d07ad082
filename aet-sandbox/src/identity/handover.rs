//! The grader root checked, and the workspace and home handed over to the agent's uid, never
//! through a link.

use std::{
    ffi::{CString, OsStr},
    fs, io,
    os::{
        fd::OwnedFd,
        unix::{ffi::OsStrExt as _, fs::MetadataExt as _},
    },
    path::{Path, PathBuf},
};

use nix::{
    fcntl::{AtFlags, OFlag},
    sys::stat::Mode,
};

use aet_ledger::metadata::{GraderRoot, HandOver};

use super::IdentityError;

/// Checks (or, with `fix`, makes) the grader root root-owned and 0700, and outside every path
/// the agent is granted (neither inside one nor containing one).
pub fn check_grader_root(
    path: &Path,
    fix: bool,
    granted: &[PathBuf],
) -> Result<GraderRoot, IdentityError> {
    let err = |problem: String| IdentityError::GraderRoot {
        path: path.to_owned(),
        problem,
    };
    if !path.is_absolute() {
        return Err(err("not an absolute path".into()));
    }
    let meta = fs::symlink_metadata(path).map_err(|e| err(e.to_string()))?;
    if meta.file_type().is_symlink() {
        return Err(err("is a symbolic link; name the directory itself".into()));
    }
    if !meta.is_dir() {
        return Err(err("is not a directory".into()));
    }
    let real = fs::canonicalize(path).map_err(|e| err(e.to_string()))?;
    for g in granted {
        let gr = fs::canonicalize(g).unwrap_or_else(|_| g.clone());
        if real.starts_with(&gr) {
            return Err(err(format!(
                "is inside {}, which the agent is granted",
                g.display()
            )));
        }
        if gr.starts_with(&real) {
            return Err(err(format!(
                "contains {}, which the agent is granted",
                g.display()
            )));
        }
    }
    let mode = meta.mode() & 0o7777;
    let mut wrong = Vec::new();
    if meta.uid() != 0 {
        wrong.push(format!("owned by uid {}, not root", meta.uid()));
    }
    if mode & 0o077 != 0 {
        wrong.push(format!("mode {mode:04o}, not 0700"));
    }
    if wrong.is_empty() {
        return Ok(GraderRoot {
            path: path.to_owned(),
            fixed: None,
        });
    }
    if !fix {
        return Err(err(format!(
            "{} (fix it, or set fix_grader_root = true / --fix-grader-root)",
            wrong.join(", ")
        )));
    }
    // Through an fd opened without following links, so a swapped path cannot redirect it.
    let fd = nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err(format!("cannot open: {e}")))?;
    nix::unistd::fchown(&fd, Some(0.into()), Some(0.into()))
        .map_err(|e| err(format!("cannot chown: {e}")))?;
    nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o700))
        .map_err(|e| err(format!("cannot chmod: {e}")))?;
    Ok(GraderRoot {
        path: path.to_owned(),
        fixed: Some(format!("was {}; now root's, 0700", wrong.join(", "))),
    })
}

/// Gives `dir` and everything in it to `uid:gid` without ever following a symbolic link: the
/// walk opens each directory relative to its parent with `O_NOFOLLOW`, links themselves are
/// `lchown`ed, a file with more than one hard link (it may be linked from outside) is left
/// alone, and other file systems are not entered.
pub fn hand_over(dir: &Path, uid: u32, gid: u32) -> Result<HandOver, IdentityError> {
    let err = |source: io::Error| IdentityError::HandOver {
        path: dir.to_owned(),
        source,
    };
    let root = nix::fcntl::open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err(e.into()))?;
    let dev = nix::sys::stat::fstat(&root)
        .map_err(|e| err(e.into()))?
        .st_dev;
    let mut out = HandOver::default();
    nix::unistd::fchown(&root, Some(uid.into()), Some(gid.into())).map_err(|e| err(e.into()))?;
    out.changed += 1;
    walk(&root, dir, dev, uid, gid, &mut out, 0).map_err(err)?;
    Ok(out)
}

fn walk(
    dirfd: &OwnedFd,
    path: &Path,
    dev: u64,
    uid: u32,
    gid: u32,
    out: &mut HandOver,
    depth: u32,
) -> io::Result<()> {
    if depth > 256 {
        out.skipped
            .push(format!("{}: deeper than 256 levels", path.display()));
        return Ok(());
    }
    // A second fd for reading the directory (Dir takes ownership).
    let dup = nix::fcntl::openat(
        dirfd,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let mut d = nix::dir::Dir::from_fd(dup)?;
    let names: Vec<CString> = d
        .iter()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_owned())
        .filter(|n: &CString| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .collect();
    for name in names {
        let child = path.join(OsStr::from_bytes(name.as_bytes()));
        let st = match nix::sys::stat::fstatat(dirfd, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
        {
            Ok(st) => st,
            Err(e) => {
                out.skipped.push(format!("{}: {e}", child.display()));
                continue;
            }
        };
        if st.st_dev != dev {
            out.skipped
                .push(format!("{}: another file system", child.display()));
            continue;
        }
        let kind = st.st_mode & libc::S_IFMT;
        if kind == libc::S_IFDIR {
            let fd = match nix::fcntl::openat(
                dirfd,
                name.as_c_str(),
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(e) => {
                    out.skipped.push(format!("{}: {e}", child.display()));
                    continue;
                }
            };
            nix::unistd::fchown(&fd, Some(uid.into()), Some(gid.into()))?;
            out.changed += 1;
            walk(&fd, &child, dev, uid, gid, out, depth + 1)?;
        } else {
            if kind != libc::S_IFLNK && st.st_nlink > 1 {
                out.skipped.push(format!(
                    "{}: has {} hard links (one may be outside)",
                    child.display(),
                    st.st_nlink
                ));
                continue;
            }
            nix::unistd::fchownat(
                dirfd,
                name.as_c_str(),
                Some(uid.into()),
                Some(gid.into()),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )?;
            out.changed += 1;
        }
    }
    Ok(())
}

/// Creates the agent's home (0700) if missing and hands it over. Directories created above it
/// (the run directory, for the default home) are 0711: the identity can pass through them to
/// its home, and list nothing there.
pub fn prepare_home(home: &Path, uid: u32, gid: u32) -> Result<HandOver, IdentityError> {
    use std::os::unix::fs::DirBuilderExt as _;
    let fail = |source| IdentityError::HandOver {
        path: home.to_owned(),
        source,
    };
    if let Some(parent) = home.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(parent)
            .map_err(fail)?;
    }
    match fs::DirBuilder::new().mode(0o700).create(home) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && home.is_dir() => {}
        Err(e) => return Err(fail(e)),
    }
    hand_over(home, uid, gid)
}

/// Makes `dir` searchable (never listable) by every identity, as a run directory holding the
/// default home must be for the agent to reach its home without a sandbox. What the directory
/// already holds, other than `keep` (the home), is closed to other users, and others lose the
/// right to list or write the directory: the agent reaches its home and nothing of aet's by
/// name (aet's writers create their files there without access for others, see
/// `aet_ledger::run_dir::file_mode`).
pub fn open_for_search(dir: &Path, keep: &Path) -> Result<(), IdentityError> {
    use std::os::unix::fs::PermissionsExt as _;
    let fail = |path: &Path, source| IdentityError::HandOver {
        path: path.to_owned(),
        source,
    };
    let mode = fs::symlink_metadata(dir).map_err(|e| fail(dir, e))?.mode() & 0o7777;
    let searchable = (mode | 0o001) & !0o006;
    if searchable != mode {
        fs::set_permissions(dir, fs::Permissions::from_mode(searchable))
            .map_err(|e| fail(dir, e))?;
    }
    for entry in fs::read_dir(dir).map_err(|e| fail(dir, e))? {
        let path = entry.map_err(|e| fail(dir, e))?.path();
        if path == keep {
            continue;
        }
        let m = fs::symlink_metadata(&path).map_err(|e| fail(&path, e))?;
        if m.file_type().is_symlink() || m.mode() & 0o007 == 0 {
            continue;
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(m.mode() & 0o7770))
            .map_err(|e| fail(&path, e))?;
    }
    Ok(())
}

/// Whether `uid`/`gid` (with no supplementary groups, as the agent runs) can reach `path`:
/// every directory above it searchable by that identity. The first that is not, with why.
pub fn reachable(path: &Path, uid: u32, gid: u32) -> Result<(), IdentityError> {
    for dir in path.ancestors().skip(1) {
        let m = match fs::metadata(dir) {
            Ok(m) => m,
            Err(e) => {
                return Err(IdentityError::Unreachable {
                    path: path.to_owned(),
                    uid,
                    problem: format!("{}: {e}", dir.display()),
                });
            }
        };
        let mode = m.mode();
        let bit = if m.uid() == uid {
            0o100
        } else if m.gid() == gid {
            0o010
        } else {
            0o001
        };
        if mode & bit == 0 {
            return Err(IdentityError::Unreachable {
                path: path.to_owned(),
                uid,
                problem: format!(
                    "{} is mode {:04o}, owned by uid {} gid {}, and the agent cannot pass \
                     through it",
                    dir.display(),
                    mode & 0o7777,
                    m.uid(),
                    m.gid()
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn a_directory_the_agent_cannot_search_is_named() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("run/agent-home");
        fs::create_dir_all(&home).unwrap();
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(d.path().join("run"), fs::Permissions::from_mode(0o700)).unwrap();
        let owner = fs::metadata(d.path()).unwrap().uid();
        let (uid, gid) = (owner + 4321, owner + 4321);
        let e = reachable(&home, uid, gid).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{}/run is mode 0700", d.path().display())),
            "{e}"
        );
        open_for_search(&d.path().join("run"), &d.path().join("run/agent-home")).unwrap();
        let mode = fs::metadata(d.path().join("run")).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o701, "searchable, not listable");
        reachable(&home, uid, gid).unwrap();
        // Its owner passes through it on the owner's bits alone.
        fs::set_permissions(d.path().join("run"), fs::Permissions::from_mode(0o700)).unwrap();
        reachable(&home, owner, owner).unwrap();
    }
}
