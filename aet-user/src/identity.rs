//! The agent identity: a dedicated unprivileged uid/gid for the agent's command, its workspace
//! and home handed over safely, a protected grader root checked before anything runs, and a
//! teardown that leaves no process of that uid anywhere.
//!
//! The drop itself happens in aet's stage (see [`crate::sandbox::stage`]), which execs the
//! command only after reading back from `/proc/self/status` that the identity is taken, every
//! capability set is empty and no_new_privs is set.

use std::{
    collections::BTreeMap,
    ffi::{CString, OsStr},
    fs, io,
    os::{
        fd::OwnedFd,
        unix::{ffi::OsStrExt as _, fs::MetadataExt as _},
    },
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use nix::{
    fcntl::{AtFlags, OFlag},
    sys::stat::Mode,
};
use serde::{Deserialize, Serialize};

pub use crate::ledger::record::{GraderRoot, HandOver, ProcessRef};
use crate::sandbox::{
    env::{self, EnvPolicy},
    plan::Identity,
};

/// The pool agent uids are taken from when none is named: each run with an agent identity gets a
/// uid of its own (and the gid of the same number), so runs side by side never share one.
pub const DEFAULT_POOL: (u32, u32) = (2000, 2999);

/// Where aet keeps the leases of agent uids, under the runtime directory (one lock file a uid,
/// locked while a run uses it).
pub const LEASE_SUBDIR: &str = "uids";

/// `[identity]` of a run config.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfig {
    /// The agent's uid (no /etc/passwd entry needed); default: a free uid of `pool`.
    #[serde(default)]
    pub uid: Option<u32>,
    /// The agent's gid; default: the uid.
    #[serde(default)]
    pub gid: Option<u32>,
    /// The uids to take one from when `uid` is not given: `"FIRST-LAST"` (default 2000-2999).
    #[serde(default)]
    pub pool: Option<String>,
    /// The agent's home (created if missing, handed over); default: `RUN_DIR/agent-home`.
    #[serde(default)]
    pub home: Option<PathBuf>,
    /// Variables passed to the agent besides the allow-list (credentials only when named here).
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// Variables set for the agent.
    #[serde(default)]
    pub setenv: BTreeMap<String, String>,
    /// A directory of grading material the agent must not reach: checked to be root's and 0700
    /// and outside everything the agent is granted.
    #[serde(default)]
    pub grader_root: Option<PathBuf>,
    /// Make the grader root root's and 0700 when it is not (instead of refusing to start).
    #[serde(default)]
    pub fix_grader_root: bool,
}

impl IdentityConfig {
    /// The pool, parsed.
    pub fn pool(&self) -> Result<(u32, u32), IdentityError> {
        let Some(p) = &self.pool else {
            return Ok(DEFAULT_POOL);
        };
        let bad = || IdentityError::Pool(p.clone());
        let (a, b) = p.split_once('-').ok_or_else(bad)?;
        let (a, b): (u32, u32) = (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        );
        if a == 0 || b < a {
            return Err(bad());
        }
        Ok((a, b))
    }
}

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
        crate::sandbox::runtime_dir().map_err(err(Path::new(crate::sandbox::RUNTIME_DIR)))?;
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
        if !crate::kernel::procfs::processes_with_any_uid(uid).is_empty() {
            continue;
        }
        return Ok(lease);
    }
    Err(IdentityError::PoolExhausted { first, last })
}

/// A run config file (`aet run --config FILE`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// A sandbox spec (relative to the config file's directory, or absolute).
    #[serde(default)]
    pub sandbox: Option<PathBuf>,
    /// The agent's workspace when there is no sandbox (the sandbox's is its spec's).
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    #[serde(default)]
    pub identity: Option<IdentityConfig>,
}

/// Why the identity barrier cannot be set up; nothing runs.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot read run config {path}: {source}")]
    ReadConfig {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("run config {path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("--identity {0:?}: expected `agent`, UID or UID:GID")]
    Spec(String),
    #[error("the agent uid/gid must not be 0 (got {uid}:{gid})")]
    Root { uid: u32, gid: u32 },
    #[error("an agent identity needs root")]
    NotRoot,
    #[error(
        "an agent identity needs a workspace: --workspace DIR, `workspace` in the run config, or a sandbox spec"
    )]
    NoWorkspace,
    #[error("grader root {path}: {problem}")]
    GraderRoot { path: PathBuf, problem: String },
    #[error("cannot hand {path} over to the agent: {source}")]
    HandOver {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("identity pool {0:?}: expected FIRST-LAST, two uids above 0")]
    Pool(String),
    #[error("every uid of the pool {first}-{last} is in use (by a run, a user, or processes left)")]
    PoolExhausted { first: u32, last: u32 },
    #[error("uid {0} is the agent identity of another aet run going on")]
    UidInUse(u32),
    #[error("cannot take a lease on an agent uid in {path}: {source}")]
    Lease {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl RunConfig {
    /// Reads a run config; relative paths in it are taken from the file's directory.
    pub fn load(path: &Path) -> Result<Self, IdentityError> {
        let text = fs::read_to_string(path).map_err(|source| IdentityError::ReadConfig {
            path: path.to_owned(),
            source,
        })?;
        let mut c: Self = toml::from_str(&text).map_err(|e| IdentityError::Config {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let abs = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        if let Some(p) = c.sandbox.as_mut() {
            abs(p);
        }
        if let Some(p) = c.workspace.as_mut() {
            abs(p);
        }
        if let Some(id) = c.identity.as_mut() {
            if let Some(h) = id.home.as_mut() {
                abs(h);
            }
            if let Some(g) = id.grader_root.as_mut() {
                abs(g);
            }
        }
        Ok(c)
    }
}

/// Parses `--identity`: `agent` (a free uid of the pool, the default), `UID` or `UID:GID`.
pub fn parse_identity(s: &str) -> Result<(Option<u32>, Option<u32>), IdentityError> {
    let bad = || IdentityError::Spec(s.to_owned());
    if s == "agent" {
        return Ok((None, None));
    }
    let (u, g) = match s.split_once(':') {
        Some((u, g)) => (u, g),
        None => (s, s),
    };
    Ok((
        Some(u.parse().map_err(|_| bad())?),
        Some(g.parse().map_err(|_| bad())?),
    ))
}

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

/// Creates the agent's home (0700) if missing and hands it over.
pub fn prepare_home(home: &Path, uid: u32, gid: u32) -> Result<HandOver, IdentityError> {
    use std::os::unix::fs::DirBuilderExt as _;
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(home)
    {
        Ok(()) => {}
        Err(source) => {
            return Err(IdentityError::HandOver {
                path: home.to_owned(),
                source,
            });
        }
    }
    hand_over(home, uid, gid)
}

/// The agent's environment: the allow-list, named passes, and its own HOME/USER/LOGNAME/SHELL.
pub fn agent_env(
    uid: u32,
    home: &Path,
    pass: &[String],
    unset: &[String],
    set: &BTreeMap<String, String>,
) -> env::Env {
    let name = nix::unistd::User::from_uid(uid.into())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| "agent".into());
    let mut all = set.clone();
    all.entry("HOME".into())
        .or_insert_with(|| home.to_string_lossy().into_owned());
    all.entry("USER".into()).or_insert_with(|| name.clone());
    all.entry("LOGNAME".into()).or_insert(name);
    all.entry("SHELL".into())
        .or_insert_with(|| "/bin/sh".into());
    EnvPolicy {
        start: env::Start::AllowList,
        pass: pass.to_vec(),
        unset: unset.to_vec(),
        set: all,
    }
    .apply(std::env::vars_os())
}

/// Kills every process of `uid` left anywhere on the machine and waits until none remains.
/// Returns what it killed (processes of the agent's uid found after the run's cgroup was gone);
/// an error names the survivors.
pub fn reap_uid(uid: u32) -> Result<Vec<ProcessRef>, String> {
    // Processes killed with the run's cgroup may still be on their way out: give them a moment.
    let settle = Instant::now() + Duration::from_millis(500);
    while !crate::kernel::procfs::processes_with_any_uid(uid).is_empty() && Instant::now() < settle
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut killed: Vec<ProcessRef> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = crate::kernel::procfs::processes_with_any_uid(uid);
        if left.is_empty() {
            return Ok(killed);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "processes of uid {uid} survive SIGKILL: {}",
                left.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        for pid in left {
            if !killed.iter().any(|k| k.pid == pid) {
                killed.push(ProcessRef {
                    pid,
                    comm: crate::kernel::procfs::comm(pid).unwrap_or_default(),
                });
            }
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Files and directories owned by `uid` and created or changed since `since` (their ctime)
/// under the shared scratch places (`/tmp`, `/var/tmp`, `/dev/shm`), without following links or
/// leaving their file systems; at most `limit` listed, all counted.
pub fn leftovers(
    uid: u32,
    since: std::time::SystemTime,
    skip: &[PathBuf],
    limit: usize,
) -> (Vec<PathBuf>, u64) {
    let since = since
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let mut found = Vec::new();
    let mut total = 0u64;
    for top in ["/tmp", "/var/tmp", "/dev/shm"] {
        let Ok(m) = fs::symlink_metadata(top) else {
            continue;
        };
        let dev = m.dev();
        let mut stack = vec![PathBuf::from(top)];
        while let Some(dir) = stack.pop() {
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            for e in rd.flatten() {
                let p = e.path();
                if skip.iter().any(|s| p.starts_with(s)) {
                    continue;
                }
                let Ok(m) = fs::symlink_metadata(&p) else {
                    continue;
                };
                if m.uid() == uid && m.ctime() >= since {
                    total += 1;
                    if found.len() < limit {
                        found.push(p.clone());
                    }
                }
                if m.is_dir() && m.dev() == dev {
                    stack.push(p);
                }
            }
        }
    }
    found.sort();
    (found, total)
}

/// The identity for the stage's plan.
pub fn plan_identity(uid: u32, gid: u32) -> Identity {
    Identity { uid, gid }
}

/// Is the process root (an identity can only be given away by root)?
pub fn require_root() -> Result<(), IdentityError> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(IdentityError::NotRoot)
    }
}
