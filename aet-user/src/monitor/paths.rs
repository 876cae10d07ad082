//! Paths from what the kernel sent: walks turned into absolute paths, relative arguments joined
//! to the base directory the kernel walked, and lexical normalisation for paths the kernel did
//! not resolve into an object.
//!
//! Paths are bytes (Linux paths need not be UTF-8) and nothing here loses a byte.

/// How a row's resolved path was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolvedFrom {
    /// Walked by the kernel from the object it opened or ran: symlinks, `..`, dirfd and cwd are
    /// already resolved, and the path names the file actually touched.
    Object,
    /// The kernel walked the base directory (dirfd or cwd) and the argument was joined to it
    /// lexically: the best the kernel can say when it hands over no object (a failed open, a
    /// stat, an unlink). A symlink in the argument is not followed.
    Joined,
    /// The argument was absolute and is only normalised lexically.
    Lexical,
    /// An io record: the path under which an earlier row of the run saw the same inode.
    Inode,
    /// An fd that arrived (`fd` rows): the fd's link in `/proc/PID/fd`, read by aet when the
    /// row arrived and kept only when the file it names has the row's device and inode. The
    /// path as aet's view has it.
    FdLink,
}

impl ResolvedFrom {
    /// The name used in the ledger's `resolved_from` column.
    pub fn name(self) -> &'static str {
        match self {
            Self::Object => "object",
            Self::Joined => "joined",
            Self::Lexical => "lexical",
            Self::Inode => "inode",
            Self::FdLink => "fd_link",
        }
    }
}

/// Turns a walk (components leaf first, each followed by `/`) into an absolute path.
pub fn walk_to_path(walk: &[u8]) -> Vec<u8> {
    let trimmed = walk.strip_suffix(b"/").unwrap_or(walk);
    let mut out = Vec::with_capacity(walk.len() + 1);
    if trimmed.is_empty() {
        out.push(b'/');
        return out;
    }
    for comp in trimmed.rsplit(|&b| b == b'/') {
        out.push(b'/');
        out.extend_from_slice(comp);
    }
    out
}

/// Lexically normalises an absolute path: drops empty and `.` components, applies `..` to the
/// component before it (never above `/`).
pub fn normalize(path: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for comp in path.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = Vec::with_capacity(path.len());
    for p in &parts {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// Joins a relative argument to a base directory and normalises the result.
pub fn join(base: &[u8], rel: &[u8]) -> Vec<u8> {
    let mut p = base.to_vec();
    p.push(b'/');
    p.extend_from_slice(rel);
    normalize(&p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_become_absolute_paths() {
        assert_eq!(walk_to_path(b"hostname/etc/"), b"/etc/hostname");
        assert_eq!(walk_to_path(b""), b"/");
        assert_eq!(walk_to_path(b"a\nb/\xff/"), b"/\xff/a\nb");
    }

    #[test]
    fn normalisation_is_lexical() {
        assert_eq!(normalize(b"/a/./b//c/../d"), b"/a/b/d");
        assert_eq!(normalize(b"/../../x"), b"/x");
        assert_eq!(normalize(b"/"), b"/");
        assert_eq!(
            join(b"/work/repo", b"../answers/key.txt"),
            b"/work/answers/key.txt"
        );
        assert_eq!(join(b"/", b"etc/hostname"), b"/etc/hostname");
    }
}
