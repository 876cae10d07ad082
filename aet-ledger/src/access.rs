//! The one access classifier: what a ledger row does to the files it names.
//!
//! The audit (rules and allow-lists), the summary (files read and written) and enforcement all
//! ask this module, so they cannot disagree about what counts as a write. It must never keep a
//! copy of a flag value: they live in [`aet_common::uapi`].
//!
//! The rules:
//! - an open's access mode says read or write, **and** an open that creates (`O_CREAT`,
//!   `O_TMPFILE`) or truncates (`O_TRUNC`) is a write whatever its access mode; `O_PATH` only
//!   names the file (a probe); a read-only open of a directory is a listing;
//! - every way to change a file is a write: the `modify` kind (rename, link, unlink, mkdir,
//!   truncate, chmod, chown, utimes, extended attributes set or removed, ...), a shared writable
//!   mapping, bytes written through an fd, a mount or unmount over a path;
//! - bytes read through an fd and mappings are reads; execs are execs; stats, `access`,
//!   `readlink`, reads of extended attributes and `chdir` are probes;
//! - an argument the kernel never resolves as a path (a symlink's text, a mount's source, an
//!   extended attribute's name) is not accessed.

use aet_common::{
    EventKind, Syscall, shape,
    uapi::{
        MAP_PRIVATE, MAP_SHARED, MAP_SHARED_VALIDATE, MAP_TYPE, O_ACCMODE, O_CREAT, O_DIRECTORY,
        O_PATH, O_RDONLY, O_RDWR, O_TMPFILE_BIT, O_TRUNC, O_WRONLY, PROT_READ, PROT_WRITE,
    },
};
use serde::{Deserialize, Serialize};

/// One kind of access.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Opened for reading, mapped, or bytes read through an fd.
    Read,
    /// Opened for writing, created, truncated, renamed, removed, changed.
    Write,
    /// Executed.
    Exec,
    /// stat, access, readlink, extended attributes read, chdir, an `O_PATH` open: existence and
    /// metadata.
    Probe,
    /// A directory listed (or opened read-only as a directory).
    List,
    /// A connection or a datagram to a network endpoint (`net` rows of connect, sendto and
    /// sendmsg), matched by its endpoint: `ADDRESS:PORT`, `[ADDRESS]:PORT`, `unix:PATH`.
    Connect,
    /// A host name the run looked up (`dns` rows) or named on a connection (`net` rows with a
    /// `host`: its own resolution of the address, a TLS server name, an HTTP host, a request
    /// to aet's proxy), matched by the name as `host:NAME`.
    Host,
}

impl Access {
    pub const ALL: [Access; 7] = [
        Access::Read,
        Access::Write,
        Access::Exec,
        Access::Probe,
        Access::List,
        Access::Connect,
        Access::Host,
    ];

    pub const fn bit(self) -> u8 {
        1 << self as u8
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Exec => "exec",
            Self::Probe => "probe",
            Self::List => "list",
            Self::Connect => "connect",
            Self::Host => "host",
        }
    }
}

/// A set of [`Access`]es.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Accesses(u8);

impl Accesses {
    pub const NONE: Self = Self(0);
    pub const READ: Self = Self::one(Access::Read);
    pub const WRITE: Self = Self::one(Access::Write);
    pub const EXEC: Self = Self::one(Access::Exec);
    pub const PROBE: Self = Self::one(Access::Probe);
    pub const LIST: Self = Self::one(Access::List);
    pub const CONNECT: Self = Self::one(Access::Connect);

    pub const fn one(a: Access) -> Self {
        Self(a.bit())
    }

    /// The set of these accesses.
    pub fn of(list: &[Access]) -> Self {
        Self(list.iter().fold(0, |m, a| m | a.bit()))
    }

    pub const fn contains(self, a: Access) -> bool {
        self.0 & a.bit() != 0
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The bits (`1 << Access as u8`).
    pub const fn bits(self) -> u8 {
        self.0
    }

    pub const fn from_bits(bits: u8) -> Self {
        Self(bits & 0x7f)
    }

    /// The accesses in the set, in [`Access::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Access> {
        Access::ALL.into_iter().filter(move |a| self.contains(*a))
    }
}

impl std::ops::BitOr for Accesses {
    type Output = Self;
    fn bitor(self, o: Self) -> Self {
        Self(self.0 | o.0)
    }
}

impl std::ops::BitOrAssign for Accesses {
    fn bitor_assign(&mut self, o: Self) {
        self.0 |= o.0;
    }
}

/// What one row does: to its first path (or the file it names through an fd) and to its second
/// path (the new name of a rename or link, a symlink's location, a mount point).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accessed {
    pub first: Accesses,
    pub second: Accesses,
}

/// The columns of a row the classifier may need besides its kind. Readers over Arrow columns
/// implement it lazily: most rows need none of them.
pub trait RowFields {
    /// The `syscall` column.
    fn syscall(&self) -> Option<Syscall>;
    /// The `flags` column (open flags; `mmap` flags).
    fn flags(&self) -> Option<u32>;
    /// The `prot` column (`mmap`).
    fn prot(&self) -> Option<u32>;
    /// The `bytes_read` and `bytes_written` columns (`io`).
    fn bytes(&self) -> (u64, u64);
}

/// The accesses an open with these flags makes.
pub const fn open_accesses(flags: u32) -> Accesses {
    if flags & O_PATH != 0 {
        // The kernel ignores every other flag but O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC.
        return Accesses::PROBE;
    }
    let tmpfile = flags & O_TMPFILE_BIT != 0;
    let mode = match flags & O_ACCMODE {
        O_RDONLY if flags & O_DIRECTORY != 0 && !tmpfile => Accesses::LIST,
        O_RDONLY => Accesses::READ,
        O_WRONLY => Accesses::WRITE,
        // O_RDWR, and 3 (which Linux checks as both).
        _ => Accesses(Access::Read.bit() | Access::Write.bit()),
    };
    if flags & (O_CREAT | O_TRUNC) != 0 || tmpfile {
        Accesses(mode.0 | Access::Write.bit())
    } else {
        mode
    }
}

/// Does a mapping with these protections and flags write to its file?
pub const fn mmap_writes(prot: u32, flags: u32) -> bool {
    let ty = flags & MAP_TYPE;
    prot & PROT_WRITE != 0 && (ty == MAP_SHARED || ty == MAP_SHARED_VALIDATE)
}

/// What a row of this kind does to its paths.
pub fn classify(kind: EventKind, row: &impl RowFields) -> Accessed {
    // Only changes and mounts have arguments that may not be paths (the syscall is read for
    // them alone: most rows are opens and stats).
    let syscall = match kind {
        EventKind::Modify | EventKind::Mount => row.syscall(),
        _ => None,
    };
    let shape = syscall.map(Syscall::shape);
    let verbatim = |bit: u8| shape.is_some_and(|s| s.bits & bit != 0);
    let first = match kind {
        EventKind::Open => open_accesses(row.flags().unwrap_or(0)),
        EventKind::Exec => Accesses::EXEC,
        EventKind::Stat | EventKind::Chdir => Accesses::PROBE,
        EventKind::List => Accesses::LIST,
        EventKind::Modify => Accesses::WRITE,
        EventKind::Mmap => {
            if mmap_writes(row.prot().unwrap_or(0), row.flags().unwrap_or(0)) {
                Accesses::READ | Accesses::WRITE
            } else {
                Accesses::READ
            }
        }
        EventKind::Io => {
            let (read, written) = row.bytes();
            let mut a = Accesses::NONE;
            if read > 0 {
                a |= Accesses::READ;
            }
            if written > 0 {
                a |= Accesses::WRITE;
            }
            a
        }
        // A request submitted through io_uring (its path; its flags are not recorded).
        EventKind::IoUring => Accesses::READ,
        EventKind::Mount => match syscall {
            Some(Syscall::Chroot) => Accesses::PROBE,
            _ => Accesses::WRITE,
        },
        // An fd that arrived holds the file open (what is read through it is in io rows); a
        // watch learns what happens at a path.
        EventKind::Fd | EventKind::Watch => Accesses::PROBE,
        // Another process, not a file (the audit judges its target); a socket address (the
        // audit judges its endpoint).
        EventKind::Process | EventKind::Net => Accesses::NONE,
        // A name looked up (the audit judges its host); payload records make no rows.
        EventKind::Dns | EventKind::Payload => Accesses::NONE,
        EventKind::Memfd | EventKind::Fork | EventKind::Exit => Accesses::NONE,
    };
    let first = if verbatim(shape::PATH_VERBATIM) {
        Accesses::NONE
    } else {
        first
    };
    let second = match (kind, shape) {
        (EventKind::Modify | EventKind::Mount, Some(s))
            if s.path2 >= 0 && s.bits & shape::PATH2_VERBATIM == 0 =>
        {
            Accesses::WRITE
        }
        _ => Accesses::NONE,
    };
    Accessed { first, second }
}

/// The access table of `docs/policy.md`, made by asking [`classify`] about every recorded
/// syscall (and the rows no syscall makes) under the argument values that change its answer: for
/// each access, which rows count as it, and when.
pub fn access_markdown() -> String {
    use aet_common::SYSCALL_COUNT;
    /// A row of a kind, with the fields the classifier may read.
    struct Case {
        syscall: Option<Syscall>,
        flags: u32,
        prot: u32,
        bytes: (u64, u64),
    }
    impl RowFields for Case {
        fn syscall(&self) -> Option<Syscall> {
            self.syscall
        }
        fn flags(&self) -> Option<u32> {
            Some(self.flags)
        }
        fn prot(&self) -> Option<u32> {
            Some(self.prot)
        }
        fn bytes(&self) -> (u64, u64) {
            self.bytes
        }
    }
    let case = |syscall, flags, prot, bytes| Case {
        syscall,
        flags,
        prot,
        bytes,
    };
    // The argument values that change the answer, by kind, each with its words.
    let cases = |kind: EventKind, sc: Option<Syscall>| -> Vec<(&'static str, Case)> {
        match kind {
            EventKind::Open => vec![
                ("`O_RDONLY`", case(sc, O_RDONLY, 0, (0, 0))),
                ("`O_WRONLY`", case(sc, O_WRONLY, 0, (0, 0))),
                ("`O_RDWR`", case(sc, O_RDWR, 0, (0, 0))),
                ("`O_CREAT`", case(sc, O_RDONLY | O_CREAT, 0, (0, 0))),
                ("`O_TRUNC`", case(sc, O_RDONLY | O_TRUNC, 0, (0, 0))),
                (
                    "`O_TMPFILE`",
                    case(sc, O_RDWR | O_TMPFILE_BIT | O_DIRECTORY, 0, (0, 0)),
                ),
                (
                    "`O_DIRECTORY` read-only",
                    case(sc, O_RDONLY | O_DIRECTORY, 0, (0, 0)),
                ),
                ("`O_PATH`", case(sc, O_PATH, 0, (0, 0))),
            ],
            EventKind::Mmap => vec![
                (
                    "a private or read-only mapping",
                    case(sc, MAP_PRIVATE, PROT_READ, (0, 0)),
                ),
                (
                    "a shared writable mapping",
                    case(sc, MAP_SHARED, PROT_READ | PROT_WRITE, (0, 0)),
                ),
            ],
            EventKind::Io => vec![
                ("bytes read", case(sc, 0, 0, (1, 0))),
                ("bytes written", case(sc, 0, 0, (0, 1))),
            ],
            _ => vec![("", case(sc, 0, 0, (0, 0)))],
        }
    };
    // Every kind of row with the syscalls that make it (none: rows no syscall makes).
    let mut rows: Vec<(EventKind, Vec<Option<Syscall>>)> = Vec::new();
    for kind in EventKind::ALL {
        let mut scs: Vec<Option<Syscall>> = (1..SYSCALL_COUNT as u8)
            .filter_map(Syscall::from_u8)
            .filter(|sc| sc.shape().kind as u16 == kind as u16)
            .map(Some)
            .collect();
        if matches!(kind, EventKind::Io | EventKind::IoUring | EventKind::List) || scs.is_empty() {
            scs.push(None);
        }
        rows.push((kind, scs));
    }
    let mut o = String::from(
        "| access | rows that count as it (first path; `when` the argument values that make it) |\n| --- | --- |\n",
    );
    for access in Access::ALL {
        let mut parts: Vec<String> = Vec::new();
        for (kind, scs) in &rows {
            // Syscalls of this kind grouped by the cases in which they count as `access`.
            let mut groups: Vec<(Vec<&'static str>, Vec<String>)> = Vec::new();
            for sc in scs {
                let cs = cases(*kind, *sc);
                let all = cs.len();
                let when: Vec<&'static str> = cs
                    .iter()
                    .filter(|(_, c)| classify(*kind, c).first.contains(access))
                    .map(|(w, _)| *w)
                    .collect();
                if when.is_empty() {
                    continue;
                }
                let when = if when.len() == all { Vec::new() } else { when };
                let name = sc
                    .and_then(Syscall::name)
                    .map_or_else(|| "rows".to_owned(), |n| format!("`{n}`"));
                match groups.iter_mut().find(|(w, _)| *w == when) {
                    Some((_, names)) => names.push(name),
                    None => groups.push((when, vec![name])),
                }
            }
            for (when, names) in groups {
                let mut t = format!("`{}`: {}", kind.name(), names.join(", "));
                if !when.is_empty() {
                    t.push_str(&format!(" when {}", when.join(" or ")));
                }
                parts.push(t);
            }
        }
        if access == Access::Connect {
            parts.push(
                "`net`: `connect`, `sendto`, `sendmsg` with an address (judged by its endpoint, \
                 not by a path)"
                    .to_owned(),
            );
        }
        if access == Access::Host {
            parts.push(
                "`dns`: the name asked for; `net` rows with a `host` (judged by the name as \
                 `host:NAME`, not by a path)"
                    .to_owned(),
            );
        }
        let second: Vec<String> = rows
            .iter()
            .flat_map(|(kind, scs)| scs.iter().map(move |sc| (*kind, *sc)))
            .filter(|(kind, sc)| {
                cases(*kind, *sc)
                    .iter()
                    .any(|(_, c)| classify(*kind, c).second.contains(access))
            })
            .filter_map(|(_, sc)| sc.and_then(Syscall::name).map(|n| format!("`{n}`")))
            .collect();
        if !second.is_empty() {
            parts.push(format!("the second path of {}", second.join(", ")));
        }
        o.push_str(&format!("| `{}` | {} |\n", access.name(), parts.join("; ")));
    }
    o
}

#[cfg(test)]
mod tests {
    use aet_common::{SYSCALL_COUNT, uapi::*};

    use super::*;

    struct Row {
        syscall: Option<Syscall>,
        flags: Option<u32>,
        prot: Option<u32>,
        bytes: (u64, u64),
    }

    impl RowFields for Row {
        fn syscall(&self) -> Option<Syscall> {
            self.syscall
        }
        fn flags(&self) -> Option<u32> {
            self.flags
        }
        fn prot(&self) -> Option<u32> {
            self.prot
        }
        fn bytes(&self) -> (u64, u64) {
            self.bytes
        }
    }

    fn row(syscall: Syscall) -> Row {
        Row {
            syscall: Some(syscall),
            flags: None,
            prot: None,
            bytes: (0, 0),
        }
    }

    fn set(list: &[Access]) -> Accesses {
        Accesses::of(list)
    }

    use Access::{Exec as X, List as L, Probe as P, Read as R, Write as W};

    #[test]
    fn open_flags_table() {
        let table: &[(u32, &[Access])] = &[
            (O_RDONLY, &[R]),
            (O_WRONLY, &[W]),
            (O_RDWR, &[R, W]),
            (O_ACCMODE, &[R, W]),
            // The two that passed as reads: a read-only open that truncates, or creates.
            (O_RDONLY | O_TRUNC, &[R, W]),
            (O_RDONLY | O_CREAT, &[R, W]),
            (O_RDONLY | O_CREAT | O_EXCL, &[R, W]),
            (O_WRONLY | O_CREAT | O_TRUNC, &[W]),
            (CREAT_FLAGS, &[W]),
            (O_WRONLY | O_APPEND, &[W]),
            (O_RDWR | O_CREAT, &[R, W]),
            (O_RDWR | O_TMPFILE, &[R, W]),
            (O_WRONLY | O_TMPFILE, &[W]),
            (O_RDONLY | O_DIRECTORY, &[L]),
            (O_RDONLY | O_DIRECTORY | O_TRUNC, &[L, W]),
            (O_RDONLY | O_DIRECTORY | O_CREAT, &[L, W]),
            (O_PATH, &[P]),
            (O_PATH | O_DIRECTORY, &[P]),
            (O_PATH | O_NOFOLLOW, &[P]),
            (O_PATH | O_WRONLY | O_TRUNC | O_CREAT, &[P]),
        ];
        for &(flags, want) in table {
            assert_eq!(open_accesses(flags), set(want), "flags {flags:#o}");
            for sc in [
                Syscall::Open,
                Syscall::Openat,
                Syscall::Openat2,
                Syscall::OpenByHandleAt,
            ] {
                let r = Row {
                    flags: Some(flags),
                    ..row(sc)
                };
                let a = classify(EventKind::Open, &r);
                assert_eq!(a.first, set(want), "{sc:?} {flags:#o}");
                assert!(a.second.is_empty());
            }
        }
    }

    #[test]
    fn mmap_table() {
        let table: &[(u32, u32, &[Access])] = &[
            (PROT_READ, MAP_PRIVATE, &[R]),
            (PROT_READ | PROT_WRITE, MAP_PRIVATE, &[R]),
            (PROT_READ | PROT_EXEC, MAP_PRIVATE, &[R]),
            (PROT_READ, MAP_SHARED, &[R]),
            (PROT_READ | PROT_WRITE, MAP_SHARED, &[R, W]),
            (PROT_WRITE, MAP_SHARED_VALIDATE, &[R, W]),
            (PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, &[R, W]),
        ];
        for &(prot, flags, want) in table {
            let r = Row {
                flags: Some(flags),
                prot: Some(prot),
                ..row(Syscall::Mmap)
            };
            assert_eq!(
                classify(EventKind::Mmap, &r).first,
                set(want),
                "{prot} {flags:#x}"
            );
        }
    }

    #[test]
    fn io_rows_are_reads_and_writes_by_their_bytes() {
        for (bytes, want) in [
            ((0, 0), set(&[])),
            ((5, 0), set(&[R])),
            ((0, 5), set(&[W])),
            ((5, 5), set(&[R, W])),
        ] {
            let r = Row {
                syscall: None,
                flags: None,
                prot: None,
                bytes,
            };
            assert_eq!(classify(EventKind::Io, &r).first, want, "{bytes:?}");
        }
    }

    /// Every syscall aet records, with what it does to its first and second paths. A syscall
    /// added to `aet_common` without a line here fails the test.
    #[test]
    fn every_syscall_is_classified() {
        use Syscall::*;
        let none: &[crate::access::Access] = &[];
        let table: &[(Syscall, &[crate::access::Access], &[crate::access::Access])] = &[
            (Open, &[R], none),
            (Openat, &[R], none),
            (Openat2, &[R], none),
            (Creat, &[R], none), // flags (recorded as CREAT_FLAGS) decide: see open_flags_table
            (OpenByHandleAt, &[R], none),
            (Execve, &[X], none),
            (Execveat, &[X], none),
            (Stat, &[P], none),
            (Lstat, &[P], none),
            (Newfstatat, &[P], none),
            (Statx, &[P], none),
            (Access, &[P], none),
            (Faccessat, &[P], none),
            (Faccessat2, &[P], none),
            (Readlink, &[P], none),
            (Readlinkat, &[P], none),
            (NameToHandleAt, &[P], none),
            (Getxattr, &[P], none),
            (Lgetxattr, &[P], none),
            (Fgetxattr, &[P], none),
            (Listxattr, &[P], none),
            (Llistxattr, &[P], none),
            (Flistxattr, &[P], none),
            (Getxattrat, &[P], none),
            (Listxattrat, &[P], none),
            (Rename, &[W], &[W]),
            (Renameat, &[W], &[W]),
            (Renameat2, &[W], &[W]),
            (Link, &[W], &[W]),
            (Linkat, &[W], &[W]),
            (Symlink, none, &[W]),
            (Symlinkat, none, &[W]),
            (Unlink, &[W], none),
            (Unlinkat, &[W], none),
            (Mkdir, &[W], none),
            (Mkdirat, &[W], none),
            (Rmdir, &[W], none),
            (Truncate, &[W], none),
            (Ftruncate, &[W], none),
            (Chmod, &[W], none),
            (Fchmod, &[W], none),
            (Fchmodat, &[W], none),
            (Fchmodat2, &[W], none),
            (Chown, &[W], none),
            (Fchown, &[W], none),
            (Lchown, &[W], none),
            (Fchownat, &[W], none),
            (Mknod, &[W], none),
            (Mknodat, &[W], none),
            (Utimensat, &[W], none),
            (Setxattr, &[W], none),
            (Lsetxattr, &[W], none),
            (Fsetxattr, &[W], none),
            (Removexattr, &[W], none),
            (Lremovexattr, &[W], none),
            (Fremovexattr, &[W], none),
            (Setxattrat, &[W], none),
            (Removexattrat, &[W], none),
            (Chdir, &[P], none),
            (Fchdir, &[P], none),
            (MemfdCreate, none, none),
            (Mmap, &[R], none),
            (IoUringSetup, &[R], none),
            (IoUringEnter, &[R], none),
            (IoUringRegister, &[R], none),
            (Chroot, &[P], none),
            (PivotRoot, &[W], &[W]),
            (Mount, none, &[W]),
            (Umount2, &[W], none),
            (Recvmsg, &[P], none),
            (Recvmmsg, &[P], none),
            (PidfdGetfd, &[P], none),
            (PidfdOpen, none, none),
            (ProcessVmReadv, none, none),
            (ProcessVmWritev, none, none),
            (Ptrace, none, none),
            (FanotifyInit, &[P], none),
            (FanotifyMark, &[P], none),
            (InotifyAddWatch, &[P], none),
            (Connect, none, none),
            (Bind, none, none),
            (Listen, none, none),
            (Accept, none, none),
            (Accept4, none, none),
            (Sendto, none, none),
            (Sendmsg, none, none),
            (Sendmmsg, none, none),
        ];
        let mut seen = [false; SYSCALL_COUNT];
        for &(sc, first, second) in table {
            let kind = EventKind::from_u16(sc.shape().kind as u16).expect("a recorded kind");
            let a = classify(kind, &row(sc));
            assert_eq!(a.first, set(first), "{sc:?}: first path");
            assert_eq!(a.second, set(second), "{sc:?}: second path");
            seen[sc as usize] = true;
        }
        for n in 1..SYSCALL_COUNT as u8 {
            let Some(sc) = Syscall::from_u8(n) else {
                continue;
            };
            // Pure accounting syscalls make io and list rows, classified by kind.
            if sc.shape().kind == 0 {
                continue;
            }
            assert!(seen[n as usize], "{sc:?} is not in the table");
        }
    }

    #[test]
    fn the_policy_docs_access_table_is_the_classifier_s() {
        let table = access_markdown();
        for a in Access::ALL {
            assert!(
                table.contains(&format!("| `{}` | `", a.name())),
                "{a:?} has rows: {table}"
            );
        }
        aet_checks::docgen::check(
            &aet_checks::docgen::docs_dir().join("policy.md"),
            "access-table",
            &table,
        );
    }

    #[test]
    fn names_round_trip() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::from_name(k.name().as_bytes()), Some(k));
        }
        for n in 1..SYSCALL_COUNT as u8 {
            if let Some(sc) = Syscall::from_u8(n) {
                let name = sc.name().expect("named");
                assert_eq!(Syscall::from_name(name.as_bytes()), Some(sc));
            }
        }
        assert_eq!(EventKind::from_name(b"opem"), None);
        assert_eq!(Syscall::from_name(b""), None);
    }
}
