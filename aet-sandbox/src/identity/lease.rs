//! Agent uids leased so that runs side by side never share one.

use std::{fs, io, path::Path};

use super::IdentityError;

/// The pool agent uids are taken from when none is named: each run with an agent identity gets a
/// uid of its own (and the gid of the same number), so runs side by side never share one.
pub const DEFAULT_POOL: (u32, u32) = (2000, 2999);

/// Where aet keeps the leases of agent uids, under the runtime directory (one lock file a uid,
/// locked while a run uses it).
pub const LEASE_SUBDIR: &str = "uids";

/// A uid this run holds: no other aet run takes it while the lease lives (an exclusive `flock`
/// on its lock file, which the kernel releases when the holder dies).
#[derive(Debug)]
pub struct UidLease {
    pub uid: u32,
    _lock: fs::File,
}

/// Takes the lease of `uid`, if no other run holds it.
fn try_lease(uid: u32) -> Result<Option<UidLease>, IdentityError> {
    use std::os::fd::AsRawFd as _;
    let err = |path: &Path| {
        let path = path.to_owned();
        move |source| IdentityError::Lease {
            path: path.clone(),
            source,
        }
    };
    // Root's, writable by root alone (checked), so no one else can take or fake a lease.
    let runtime =
        crate::runtime::runtime_dir().map_err(err(Path::new(crate::runtime::RUNTIME_DIR)))?;
    let dir = runtime.join(LEASE_SUBDIR);
    let err = err(&dir);
    fs::create_dir_all(&dir).map_err(&err)?;
    let path = dir.join(uid.to_string());
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(&err)?;
    // SAFETY: flock on an fd this function owns.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(None)
        } else {
            Err(err(e))
        };
    }
    Ok(Some(UidLease { uid, _lock: f }))
}

/// The lease of a named uid; an error when another run holds it.
pub fn lease_uid(uid: u32) -> Result<UidLease, IdentityError> {
    try_lease(uid)?.ok_or(IdentityError::UidInUse(uid))
}

/// The lease of a free uid of the pool: not held by another run, not a user of this machine
/// (no /etc/passwd entry), and with no process left (a run that died may have left some).
pub fn lease_from_pool((first, last): (u32, u32)) -> Result<UidLease, IdentityError> {
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    let users: std::collections::HashSet<u32> = passwd
        .lines()
        .filter_map(|l| l.split(':').nth(2)?.parse().ok())
        .collect();
    for uid in first..=last {
        if users.contains(&uid) {
            continue;
        }
        let Some(lease) = try_lease(uid)? else {
            continue;
        };
        if !aet_kernel::procfs::processes_with_any_uid(uid).is_empty() {
            continue;
        }
        return Ok(lease);
    }
    Err(IdentityError::PoolExhausted { first, last })
}
