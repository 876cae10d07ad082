//! Watched files: the files whose content decides how a run is graded (tests, test data,
//! `conftest.py`, test-runner configuration, graders, interpreter start-up hooks, the programs on
//! the command's PATH), fingerprinted before the agent's first instruction and again at the end
//! of its phase.
//!
//! - [`resolve`]: a policy's `[watch.NAME]` globs made absolute in the run's view (relative ones
//!   at the task's repository, `@path/` at each directory of the command's PATH, `@site/` at the
//!   interpreters' site-packages);
//! - [`walk`]: every entry those globs match, fingerprinted (type, mode, owner, size, SHA-256,
//!   a symlink's target), within limits the policy sets;
//! - [`diff`]: what changed between two snapshots.
//!
//! This module only reads files; it must never follow a symlink out of the view it was given,
//! and never hash more than its limits allow. Where the view is (the host's, a sandbox's or a
//! container's mount namespace) is the caller's business: `aet` runs the walk in a helper that
//! joined the run's mount namespace.

pub mod diff;
pub mod gitindex;
pub mod resolve;
pub mod walk;

use serde::{Deserialize, Serialize};

use crate::ppath::PPath;

/// Version of the `aet.watch` record.
pub const WATCH_VERSION: u32 = 1;

/// Default most entries a snapshot fingerprints (`[limits] watch_files`).
pub const DEFAULT_MAX_FILES: u64 = 50_000;
/// Default most bytes a snapshot hashes (`[limits] watch_bytes`): 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// Most directory entries one snapshot may look at while walking (matched or not).
pub const MAX_WALKED: u64 = 2_000_000;

/// What a snapshot may cost.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Limits {
    /// Most entries fingerprinted.
    pub files: u64,
    /// Most bytes hashed (a file whose identity and change time are those of the snapshot
    /// before is not hashed again).
    pub bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            files: DEFAULT_MAX_FILES,
            bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// One `[watch.NAME]` of a policy: globs as written, and what a change counts as.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct WatchSpec {
    pub name: String,
    /// As written: absolute, relative (at the task's repository), `@path/GLOB`, `@site/GLOB`,
    /// `@prefix/GLOB`, `@above/NAME`.
    pub paths: Vec<String>,
    /// `fingerprint = "tree"`: entries are fingerprinted by their metadata, a directory by its
    /// whole subtree's (no file is read).
    #[serde(default)]
    pub tree: bool,
}

/// A watch's globs made absolute in the run's view.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResolvedWatch {
    pub name: String,
    pub paths: Vec<String>,
    /// Absolute globs (`*` within a component, `**` across).
    pub globs: Vec<String>,
    /// Fingerprinted by metadata, directories by their subtree (`fingerprint = "tree"`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tree: bool,
}

/// What a run's view is, for resolving a policy's watches: seen from inside it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Context {
    /// The command's working directory.
    pub cwd: Option<PPath>,
    /// The task repositories (a sandbox's `[[repo]]`); none: the working directory is.
    pub repos: Vec<PPath>,
    /// The command's `PATH`.
    pub path_var: Option<String>,
    /// The command's `HOME` (for the user site-packages).
    pub home: Option<PPath>,
}

/// The anchors the globs were resolved with, and the globs.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Resolved {
    /// Where relative globs are anchored (the repositories, else the working directory).
    pub anchors: Vec<PPath>,
    /// The PATH's directories that exist, resolved, in PATH order.
    pub path_dirs: Vec<PPath>,
    /// The interpreters' site-packages directories found.
    pub site_dirs: Vec<PPath>,
    /// The interpreters' prefixes (`@prefix/`).
    #[serde(default)]
    pub prefix_dirs: Vec<PPath>,
    pub watches: Vec<ResolvedWatch>,
    /// The files each task repository tracked when the run started (its index), when the
    /// policy's provenance asked for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tracked: Vec<TrackedRepo>,
}

/// What one task repository tracked at the run's start.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TrackedRepo {
    pub root: PPath,
    /// Paths relative to the repository, sorted (a directory entry ends with `/`).
    pub files: Vec<PPath>,
    /// Why its index could not be read (then `files` is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What an entry is.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device node.
    Other,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Dir => "directory",
            Self::Symlink => "symlink",
            Self::Other => "special file",
        }
    }
}

/// One entry as it was.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Fingerprint {
    pub path: PPath,
    pub kind: Kind,
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// A regular file's SHA-256, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A symlink's target, as stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<PPath>,
    pub dev: u64,
    pub ino: u64,
    pub mtime_ns: i64,
    /// The change time: no process can set it, so an entry whose identity and change time are
    /// those of an earlier snapshot is unchanged since.
    pub ctime_ns: i64,
    /// An entry of a tree watch (`fingerprint = "tree"`): a digest of its metadata and, for a
    /// directory, of every entry below it. No file is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<TreeDigest>,
}

/// A tree watch's fingerprint of one entry: SHA-256 over the relative path, type, mode, owner,
/// size, identity, modification and change times and link target of the entry and of every
/// entry below it (sorted by name), and how many entries that was.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TreeDigest {
    /// Entries below it (0 for a file).
    pub below: u64,
    pub digest: String,
}

/// What a snapshot cost.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Cost {
    /// Entries fingerprinted.
    pub entries: u64,
    /// Directory entries looked at.
    pub walked: u64,
    pub hashed_files: u64,
    pub hashed_bytes: u64,
    /// Files whose hash was taken from the snapshot before, or from another name of the same
    /// file in this one (same identity and change time).
    pub reused: u64,
    pub ms: f64,
}

/// Every watched entry at one time.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Snapshot {
    /// Wall clock, ns since the Unix epoch.
    pub taken_ns: i64,
    /// Why it was taken then: `start`, `phase NAME`, `end`, `aet watch --end`.
    pub at: String,
    /// The directories walked (the globs' literal prefixes) that exist.
    pub roots: Vec<PPath>,
    pub entries: Vec<Fingerprint>,
    pub cost: Cost,
}

/// `aet.watch`: the run's watched files, before and after the agent's phase.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct WatchRecord {
    pub version: u32,
    /// Whose view the files were seen in: `host`, `sandbox`, `container (pid N)`.
    pub view: String,
    pub resolved: Resolved,
    pub limits: Option<Limits>,
    pub before: Option<Snapshot>,
    pub after: Option<Snapshot>,
    /// Why a snapshot is missing (a limit, a view that was gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the fingerprint helper is asked: resolve the watches in this context (the first
/// snapshot), or take the globs resolved before (a later one), and snapshot them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Request {
    pub watches: Vec<WatchSpec>,
    pub context: Context,
    /// The globs of the first snapshot (then `watches` and `context` are not used).
    pub resolved: Option<Resolved>,
    pub limits: Limits,
    /// The snapshot before, whose hashes are reused for entries unchanged since.
    pub previous: Option<Snapshot>,
    pub at: String,
    /// With the first snapshot: read each task repository's index (what it tracks now).
    #[serde(default)]
    pub tracked: bool,
}

/// The helper's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Answer {
    Taken {
        resolved: Box<Resolved>,
        snapshot: Box<Snapshot>,
    },
    Refused {
        message: String,
    },
}

/// What a repository's index tracks now.
fn tracked_repo(root: &PPath) -> TrackedRepo {
    use std::os::unix::ffi::OsStrExt as _;
    match gitindex::read_repo(root.as_path()) {
        Ok(t) => TrackedRepo {
            root: root.clone(),
            files: t
                .paths
                .into_iter()
                .map(|p| PPath(std::ffi::OsStr::from_bytes(&p).into()))
                .collect(),
            error: None,
        },
        Err(e) => TrackedRepo {
            root: root.clone(),
            files: Vec::new(),
            error: Some(e),
        },
    }
}

/// Resolves (when asked) and snapshots: the helper's whole job, in whatever view it runs.
pub fn answer(req: &Request) -> Answer {
    let resolved = match &req.resolved {
        Some(r) => r.clone(),
        None => match resolve::resolve(&req.watches, &req.context) {
            Ok(mut r) => {
                if req.tracked {
                    r.tracked = r.anchors.iter().map(tracked_repo).collect();
                }
                r
            }
            Err(message) => return Answer::Refused { message },
        },
    };
    match walk::snapshot(&resolved, req.limits, req.previous.as_ref(), &req.at) {
        Ok(snapshot) => Answer::Taken {
            resolved: Box::new(resolved),
            snapshot: Box::new(snapshot),
        },
        Err(message) => Answer::Refused { message },
    }
}
