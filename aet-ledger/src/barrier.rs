//! The barrier's data types (`aet run --mode shadow|enforce`): the plan of grants aet hands its
//! stage ([`BarrierPlan`]), and the Landlock rules the stage made from it ([`BarrierReport`],
//! kept in the ledger as `aet.barrier`). The policy makes the plan and the audit judges
//! accesses against the report (`aet-audit`'s `policy::barrier`).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ppath::PPath;

/// What `--mode` asks of a policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BarrierMode {
    /// Record and judge afterwards (no barrier).
    #[default]
    Record,
    /// Build the barrier, do not apply it: the audit lists what it would have blocked.
    Shadow,
    /// Apply the barrier: every process of the run gets EACCES outside it.
    Enforce,
}

impl BarrierMode {
    pub fn name(self) -> &'static str {
        match self {
            Self::Record => "record",
            Self::Shadow => "shadow",
            Self::Enforce => "enforce",
        }
    }
}

/// The lowest Landlock ABI `--mode enforce` runs on: 6 (Linux 6.12) scopes signals and abstract
/// unix sockets to the run; file rights need 3 (truncate) and use 5 (device ioctls).
pub const MIN_ABI: i32 = 6;

/// Rights a rule grants, in aet's terms (the stage maps them to Landlock's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rights(pub u8);

impl Rights {
    /// Open a file for reading (and use a device's ioctls).
    pub const READ_FILE: u8 = 1;
    /// Open or list a directory.
    pub const READ_DIR: u8 = 2;
    /// Open a file for writing, truncate it.
    pub const WRITE_FILE: u8 = 4;
    /// Create files, directories, links, sockets, fifos; rename or link across directories.
    pub const MAKE: u8 = 8;
    /// Remove or rename away files and directories.
    pub const REMOVE: u8 = 16;
    /// Execute a file.
    pub const EXEC: u8 = 32;
    /// What `allow.read` grants.
    pub const READ: Self = Self(Self::READ_FILE | Self::READ_DIR);
    /// What `allow.write` grants.
    pub const WRITE: Self = Self(Self::WRITE_FILE | Self::MAKE | Self::REMOVE);
    /// What `allow.exec` grants (the kernel reads what it executes).
    pub const EXECUTE: Self = Self(Self::EXEC | Self::READ_FILE);

    const NAMES: [(u8, &'static str); 6] = [
        (Self::READ_FILE, "read_file"),
        (Self::READ_DIR, "read_dir"),
        (Self::WRITE_FILE, "write_file"),
        (Self::MAKE, "make"),
        (Self::REMOVE, "remove"),
        (Self::EXEC, "exec"),
    ];

    pub const fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES
            .iter()
            .filter(|(b, _)| self.0 & b != 0)
            .map(|(_, n)| *n)
            .collect()
    }
}

impl std::ops::BitOr for Rights {
    type Output = Self;
    fn bitor(self, o: Self) -> Self {
        Self(self.0 | o.0)
    }
}

impl fmt::Display for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.names().join(","))
    }
}

impl Serialize for Rights {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.names().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Rights {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        let mut bits = 0;
        for n in names {
            match Self::NAMES.iter().find(|(_, x)| *x == n) {
                Some((b, _)) => bits |= b,
                None => return Err(serde::de::Error::custom(format!("unknown right {n:?}"))),
            }
        }
        Ok(Self(bits))
    }
}

/// One grant of the policy: a path (a file, or a directory and everything below it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The policy entry (`allow.read[2] = "/task"`), or why aet adds it.
    pub entry: String,
    pub path: PPath,
    pub rights: Rights,
}

/// A cheat pattern the barrier keeps out of its grants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheatPattern {
    /// `cheats.golden`.
    pub rule: String,
    /// The rule's regular expression, matched against each absolute path under a grant.
    pub pattern: String,
}

/// A protected file the barrier keeps out of its grants, by identity (any name it has).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtectedId {
    /// `protected.answer_key`.
    pub rule: String,
    pub path: PPath,
    pub dev: u64,
    pub ino: u64,
}

/// What the stage builds the barrier from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierPlan {
    /// Apply it (`enforce`), or only build and report it (`shadow`).
    pub enforce: bool,
    pub grants: Vec<Grant>,
    pub cheats: Vec<CheatPattern>,
    pub protected: Vec<ProtectedId>,
    /// Entries the stage may visit under the grants before it gives up (and refuses the run).
    pub walk_limit: u64,
}

/// Entries a barrier's walk may visit by default (a Debian `/usr` holds about 130,000).
pub const WALK_LIMIT: u64 = 2_000_000;

/// One rule the stage made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierRule {
    pub path: PPath,
    pub rights: Rights,
    /// The grant it comes from.
    pub entry: String,
}

/// A file the barrier keeps out, and the rule that names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Excluded {
    pub path: PPath,
    pub rule: String,
}

/// The barrier as the stage built it (the ledger's `aet.barrier`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierReport {
    pub mode: BarrierMode,
    /// The kernel's Landlock ABI (0: none).
    pub abi: i32,
    pub rules: Vec<BarrierRule>,
    /// Files left out of the grants.
    pub excluded: Vec<Excluded>,
    /// Directories on the way to a left-out file: listed (read_dir) but not granted whole.
    pub partial_dirs: Vec<PPath>,
    /// Grants whose path does not exist in the view (nothing to grant).
    pub missing: Vec<String>,
    /// Entries visited under the grants.
    pub walked: u64,
    /// Landlock's answer when applied (`fully enforced`); `None` in shadow mode.
    pub enforced: Option<String>,
    /// Scopes applied (signals, abstract unix sockets).
    pub scoped: Vec<String>,
}
