//! What aet hands its stage inside the sandbox (the checks to make, the privileges to drop, what
//! to run), and what the stage reports back. Both travel as JSON.

use serde::{Deserialize, Serialize};

use crate::ppath::PPath;

/// Version of the plan and report formats (the stage is the same binary, but a stale stage
/// binary must not misread a plan).
pub const PLAN_VERSION: u32 = 1;

/// What one spec entry must look like from inside.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case", tag = "expect")]
pub enum Expect {
    /// The host object (same device and inode), read-only.
    ReadOnly { dev: u64, ino: u64 },
    /// The host object, writable.
    Writable { dev: u64, ino: u64 },
    /// A private writable tmpfs.
    Tmpfs,
    /// An empty directory on a read-only mount.
    EmptyDir,
    /// An empty regular file on a read-only mount.
    EmptyFile,
    /// Nothing there, and nothing can be created there (the nearest existing ancestor is on a
    /// read-only mount).
    Absent,
    /// A symbolic link to a masked object: it leads to an empty read-only object (a directory
    /// when `dir`), or to nothing.
    MaskedOrAbsent { dir: bool },
    /// The network namespace has no interface but loopback (`network = "none"`).
    LoopbackOnly,
}

impl Expect {
    /// A short description for reports.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::ReadOnly { .. } => "the granted object, read-only",
            Self::Writable { .. } => "the granted object, writable",
            Self::Tmpfs => "a private writable tmpfs",
            Self::EmptyDir => "an empty read-only directory",
            Self::EmptyFile => "an empty read-only file",
            Self::Absent => "nothing, and nothing can be created there",
            Self::MaskedOrAbsent { .. } => "a link to a masked object, or nothing",
            Self::LoopbackOnly => "no network interface but loopback",
        }
    }
}

/// One check of the view.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Check {
    /// The spec entry (`deny[0] = "/x"`), or what the check is about.
    pub entry: String,
    pub path: PPath,
    #[serde(flatten)]
    pub expect: Expect,
}

/// The identity the agent runs as; `None` keeps aet's uid (without capabilities).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
}

/// What the stage does once the view is verified.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum Mode {
    /// Exec the command that follows the plan.
    Exec,
    /// Probe these paths as the agent and print the results as JSON.
    Probe { paths: Vec<PPath> },
}

/// Everything the stage needs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Plan {
    pub version: u32,
    /// The agent's working directory.
    pub workspace: PPath,
    pub checks: Vec<Check>,
    /// Mount points that may be writable (besides /proc, /dev/pts and /dev's device nodes).
    pub writable: Vec<PPath>,
    /// Where the stage writes its report (a file in a directory bound from the host).
    pub report: PPath,
    /// Mounts the stage removes before the agent starts (its own binary, the report directory).
    pub unmount: Vec<PPath>,
    /// The identity to take, if any; capabilities are always dropped and no_new_privs set.
    pub identity: Option<Identity>,
    pub mode: Mode,
    /// Check the mount table (inside a sandbox); without a sandbox only the working directory is
    /// checked.
    pub view: bool,
    /// Start a new session first (bwrap's `--new-session` does it in a sandbox).
    pub new_session: bool,
    /// Fault injection (`AET_DEBUG_SKIP_SETUID` in aet's environment): skip the setuid so the
    /// tests can see the read-back refuse the run.
    #[serde(default)]
    pub debug_skip_setuid: bool,
    /// Close io_uring to the command (a seccomp filter: `io_uring_setup`, `io_uring_enter` and
    /// `io_uring_register` fail with EPERM, native and 32-bit), so the record stays complete.
    #[serde(default)]
    pub close_io_uring: bool,
    /// Keep aet's capabilities (a run with neither sandbox nor identity that has a stage only
    /// for its barrier): only no_new_privs is set.
    #[serde(default)]
    pub keep_capabilities: bool,
    /// The barrier to build (`--mode shadow`) and apply (`--mode enforce`).
    #[serde(default)]
    pub barrier: Option<crate::barrier::BarrierPlan>,
    /// Task repositories whose history the stage checks (`[[repo]]`).
    #[serde(default)]
    pub repos: Vec<RepoCheck>,
    /// A socket the stage hands the view over on once it is verified, before the command
    /// starts: its mount namespace (an fd) and a [`HeldView`]; then it waits for aet's go (the
    /// watched files are fingerprinted in between).
    #[serde(default)]
    pub hold: Option<i32>,
}

/// What the stage says of the view it hands over (with its mount namespace).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct HeldView {
    /// The command's working directory.
    pub cwd: PPath,
    /// The command's `PATH` and `HOME`.
    pub path: Option<String>,
    pub home: Option<PPath>,
}

/// The byte aet answers a held view with when the command may start.
pub const HOLD_GO: u8 = b'g';

/// A task repository to check from inside: nothing in it may reach past `base`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RepoCheck {
    /// `repo[0] = "/task/repo"`.
    pub entry: String,
    pub path: PPath,
    /// The base commit's full id.
    pub base: String,
    /// Its git directory is aet's sanitized copy.
    pub sanitized: bool,
    /// Decoy refs aet wrote into the copy (`[[decoy]] kind = "git_ref"`): the one history past
    /// base the check lets through, each ref naming exactly its commit, and its objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decoys: Vec<RepoDecoy>,
}

/// A decoy ref of a task repository, as the check from inside knows it (no token: the ids are
/// the agent's to see).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RepoDecoy {
    /// `refs/remotes/origin/main`.
    pub git_ref: String,
    pub commit: String,
    /// Every object aet wrote for it (the commit, its trees, its files).
    pub objects: Vec<String>,
}

/// Is the `AET_DEBUG_SKIP_SETUID` fault injection asked for?
pub fn debug_skip_setuid() -> bool {
    std::env::var_os("AET_DEBUG_SKIP_SETUID").is_some()
}

/// The result of one check.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CheckResult {
    pub entry: String,
    pub path: PPath,
    pub expected: String,
    pub found: String,
    pub ok: bool,
}

/// What the stage found.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct StageReport {
    pub version: u32,
    /// Every check passed and nothing else is writable: the agent may start.
    pub ok: bool,
    pub checks: Vec<CheckResult>,
    /// One sentence per problem, naming the entry or mount.
    pub failures: Vec<String>,
    /// Mounts in the view.
    pub mounts: usize,
    /// Mount points found writable (all of them allowed when `ok`).
    pub writable_mounts: Vec<PPath>,
    /// The identity taken (none: aet's uid, without capabilities).
    #[serde(default)]
    pub identity: Option<Identity>,
    /// What the command runs with, as read back after dropping privileges.
    #[serde(default)]
    pub privileges: Option<String>,
    /// io_uring as the command finds it, as tried after the filter was loaded.
    #[serde(default)]
    pub io_uring: Option<String>,
    /// The barrier as built (and applied, under enforce).
    #[serde(default)]
    pub barrier: Option<crate::barrier::BarrierReport>,
}

/// One probe result (`aet sandbox probe`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProbeResult {
    pub path: PPath,
    /// `dir`, `file`, `link`, `other`, or an errno name.
    pub stat: String,
    /// `ok` or an errno name.
    pub read: String,
    /// `ok` (an existing file opened for writing, or a file could be created in the directory,
    /// without leaving anything behind) or an errno name.
    pub write: String,
    /// `N entries`, `-` for a non-directory, or an errno name.
    pub list: String,
}
