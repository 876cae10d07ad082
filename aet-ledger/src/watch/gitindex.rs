//! The files a repository tracks, read from its index (`.git/index`) as it is when the run
//! starts: what `@tracked` in a policy's `[phases.NAME.provenance] solution` names.
//!
//! The index is parsed here, never by running git: the repository is the task's, and git
//! started on it as root would read its configuration (hooks, `core.fsmonitor`) and run what it
//! says. Versions 2, 3 and 4 are read, SHA-1 and SHA-256 object names alike; a split index (its
//! entries in a shared index file) is refused with a clear error. Every length is checked
//! against the bytes there are: a damaged index is an error, never a panic or a long loop.

use std::path::Path;

/// Most bytes of an index this reads.
pub const MAX_INDEX_BYTES: u64 = 512 << 20;

/// The paths an index tracks, relative to the work tree (`src/x.py`), in the index's order;
/// entries of directories (a sparse index's, a submodule's) end with `/`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tracked {
    pub paths: Vec<Vec<u8>>,
}

impl Tracked {
    /// Whether `rel` (a path relative to the work tree) is tracked: listed, or below a listed
    /// directory.
    pub fn contains(&self, rel: &[u8]) -> bool {
        self.paths
            .binary_search_by(|p| p.as_slice().cmp(rel))
            .is_ok()
            || self
                .paths
                .iter()
                .any(|p| p.ends_with(b"/") && rel.starts_with(p))
    }
}

/// Reads `REPO/.git/index`: the object name length comes from the repository's
/// `extensions.objectformat` (SHA-1 when it has none).
pub fn read_repo(repo: &Path) -> Result<Tracked, String> {
    let git = repo.join(".git");
    let index = git.join("index");
    let meta =
        std::fs::symlink_metadata(&index).map_err(|e| format!("{}: {e}", index.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", index.display()));
    }
    if meta.len() > MAX_INDEX_BYTES {
        return Err(format!(
            "{}: {} bytes (at most {MAX_INDEX_BYTES} are read)",
            index.display(),
            meta.len()
        ));
    }
    // The repository may be the agent's: what is at these names is read only if it is the
    // regular file looked at (the index) or a regular file reached without a symlink (the
    // configuration); a FIFO or a device put there is never opened.
    let mut bytes = Vec::new();
    {
        use std::{io::Read as _, os::unix::fs::MetadataExt as _};
        crate::safe_open::open_identified(&index, meta.dev(), meta.ino())
            .map_err(|e| format!("{}: {e}", index.display()))?
            .take(MAX_INDEX_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{}: {e}", index.display()))?;
    }
    let mut config = String::new();
    let abs = std::path::absolute(repo).unwrap_or_else(|_| repo.to_owned());
    if let Ok(f) = crate::safe_open::open_regular_under(&abs, &abs.join(".git/config")) {
        use std::io::Read as _;
        let _ = f.take(1 << 20).read_to_string(&mut config);
    }
    parse(&bytes, object_len(&config)).map_err(|e| format!("{}: {e}", index.display()))
}

/// The object name length a repository's configuration says (32 for `objectformat = sha256`).
pub fn object_len(config: &str) -> usize {
    let mut in_extensions = false;
    for line in config.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            in_extensions = l.eq_ignore_ascii_case("[extensions]");
            continue;
        }
        if in_extensions
            && let Some((k, v)) = l.split_once('=')
            && k.trim().eq_ignore_ascii_case("objectformat")
            && v.trim().eq_ignore_ascii_case("sha256")
        {
            return 32;
        }
    }
    20
}

/// Most entries an index may have.
const MAX_ENTRIES: u32 = 20_000_000;

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| format!("truncated at byte {} (wanted {n} more)", self.at))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn u16(&mut self) -> Result<u16, String> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }

    /// Up to and without the next NUL, which is consumed.
    fn until_nul(&mut self) -> Result<&'a [u8], String> {
        let rest = &self.b[self.at..];
        let n = memchr(rest).ok_or_else(|| format!("unterminated path at byte {}", self.at))?;
        let s = &rest[..n];
        self.at += n + 1;
        Ok(s)
    }

    /// Git's offset varint (index version 4).
    fn varint(&mut self) -> Result<usize, String> {
        let mut c = self.take(1)?[0];
        let mut v = (c & 0x7f) as usize;
        while c & 0x80 != 0 {
            c = self.take(1)?[0];
            v = v
                .checked_add(1)
                .and_then(|v| v.checked_mul(128))
                .and_then(|v| v.checked_add((c & 0x7f) as usize))
                .ok_or("a path prefix length overflows")?;
        }
        Ok(v)
    }
}

fn memchr(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == 0)
}

/// Parses an index file's bytes, with `oid` bytes per object name (20 or 32).
pub fn parse(b: &[u8], oid: usize) -> Result<Tracked, String> {
    let mut c = Cursor { b, at: 0 };
    if c.take(4)? != b"DIRC" {
        return Err("not a git index (no DIRC signature)".into());
    }
    let version = c.u32()?;
    if !(2..=4).contains(&version) {
        return Err(format!(
            "index version {version} (this aet reads 2, 3 and 4)"
        ));
    }
    let count = c.u32()?;
    if count > MAX_ENTRIES {
        return Err(format!("{count} entries (at most {MAX_ENTRIES})"));
    }
    // The smallest entry is 62 bytes with a SHA-1 name: a count the file cannot hold is damage.
    if (count as usize).saturating_mul(40 + oid) > b.len() {
        return Err(format!("{count} entries do not fit in {} bytes", b.len()));
    }
    let mut paths: Vec<Vec<u8>> = Vec::with_capacity(count as usize);
    let mut prev: Vec<u8> = Vec::new();
    for n in 0..count {
        let start = c.at;
        // ctime, mtime (8 bytes each), dev, ino.
        c.take(24)?;
        let mode = c.u32()?;
        // uid, gid, size, the object name.
        c.take(12 + oid)?;
        let flags = c.u16()?;
        if version >= 3 && flags & 0x4000 != 0 {
            c.u16()?;
        }
        let path = if version == 4 {
            let strip = c.varint()?;
            if strip > prev.len() {
                return Err(format!(
                    "entry {n}: strips {strip} bytes of a {}-byte path",
                    prev.len()
                ));
            }
            let suffix = c.until_nul()?;
            let mut p = prev[..prev.len() - strip].to_vec();
            p.extend_from_slice(suffix);
            p
        } else {
            let p = c.until_nul()?.to_vec();
            // NUL padding to a multiple of 8 bytes (the terminator counted).
            let len = c.at - start;
            let pad = (8 - len % 8) % 8;
            c.take(pad)?;
            p
        };
        if path.is_empty() || path.starts_with(b"/") {
            return Err(format!("entry {n}: a path that is empty or absolute"));
        }
        prev.clone_from(&path);
        let kind = mode & 0o170000;
        let mut p = path;
        // A sparse index's directory and a submodule are directories.
        if (kind == 0o040000 || kind == 0o160000) && !p.ends_with(b"/") {
            p.push(b'/');
        }
        paths.push(p);
    }
    // Extensions: a split index keeps its entries elsewhere.
    while b.len().saturating_sub(c.at) > oid + 8 {
        let sig = c.take(4)?;
        let size = c.u32()? as usize;
        if sig == b"link" {
            return Err(
                "a split index (core.splitIndex): its entries are in a shared index \
                        file this aet does not read"
                    .into(),
            );
        }
        c.take(size)?;
    }
    paths.sort();
    paths.dedup();
    Ok(Tracked { paths })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An index of `version` holding `paths` (mode 100644, or 040000 for a path ending in `/`).
    fn index(version: u32, oid: usize, paths: &[&str], ext: &[u8]) -> Vec<u8> {
        let mut b = b"DIRC".to_vec();
        b.extend(version.to_be_bytes());
        b.extend((paths.len() as u32).to_be_bytes());
        let mut prev: &[u8] = b"";
        for p in paths {
            let start = b.len();
            b.extend([0u8; 24]);
            let (name, mode) = match p.strip_suffix('/') {
                Some(d) => (d.as_bytes(), 0o040000u32),
                None => (p.as_bytes(), 0o100644),
            };
            b.extend(mode.to_be_bytes());
            b.extend(vec![0u8; 12 + oid]);
            b.extend((name.len().min(0xfff) as u16).to_be_bytes());
            if version == 4 {
                let common = prev.iter().zip(name).take_while(|(a, b)| a == b).count();
                b.push((prev.len() - common) as u8);
                b.extend(&name[common..]);
                b.push(0);
            } else {
                b.extend(name);
                b.push(0);
                while !(b.len() - start).is_multiple_of(8) {
                    b.push(0);
                }
            }
            prev = name;
        }
        b.extend(ext);
        b.extend(vec![0u8; oid]);
        b
    }

    #[test]
    fn reads_versions_2_3_and_4_with_either_object_name() {
        let paths = ["README.md", "src/a.py", "src/b.py", "tests/test_a.py"];
        for v in [2, 3, 4] {
            for oid in [20, 32] {
                let t = parse(&index(v, oid, &paths, b""), oid).unwrap();
                assert_eq!(
                    t.paths,
                    paths
                        .iter()
                        .map(|p| p.as_bytes().to_vec())
                        .collect::<Vec<_>>(),
                    "version {v}, {oid}-byte names"
                );
                assert!(t.contains(b"src/a.py"));
                assert!(!t.contains(b"src/new.py"));
            }
        }
    }

    #[test]
    fn a_directory_entry_tracks_what_is_below_it() {
        let t = parse(&index(2, 20, &["docs/", "src/a.py"], b""), 20).unwrap();
        assert!(t.contains(b"docs/x/y.md"));
        assert!(!t.contains(b"docsx"));
        assert!(!t.contains(b"src/a.pyc"));
    }

    #[test]
    fn damage_is_an_error_never_a_panic() {
        let good = index(4, 20, &["a", "bb/c"], b"");
        for cut in 0..good.len() - 20 {
            assert!(parse(&good[..cut], 20).is_err(), "cut at {cut}");
        }
        assert!(parse(b"DIRX\0\0\0\x02\0\0\0\0", 20).is_err());
        let mut huge = index(2, 20, &[], b"");
        huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse(&huge, 20).unwrap_err().contains("entries"));
        // Version 4 stripping more than the previous path had.
        let mut bad = index(4, 20, &["a"], b"");
        let at = 12 + 24 + 4 + 12 + 20 + 2;
        bad[at] = 9;
        assert!(parse(&bad, 20).unwrap_err().contains("strips"));
    }

    #[test]
    fn a_split_index_is_refused_by_name() {
        let mut ext = b"link".to_vec();
        ext.extend(20u32.to_be_bytes());
        ext.extend([0u8; 20]);
        let e = parse(&index(2, 20, &["a"], &ext), 20).unwrap_err();
        assert!(e.contains("split index"), "{e}");
    }

    #[test]
    fn the_object_format_comes_from_the_config() {
        assert_eq!(object_len("[core]\n\tbare = false\n"), 20);
        assert_eq!(
            object_len("[core]\n[extensions]\n\tobjectFormat = sha256\n"),
            32
        );
        assert_eq!(object_len("[remote \"x\"]\n\tobjectformat = sha256\n"), 20);
    }

    #[test]
    fn a_real_index_is_read_as_git_lists_it() {
        let d = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let o = std::process::Command::new("git")
                .arg("-C")
                .arg(d.path())
                .args(args)
                .output()
                .expect("git");
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            o.stdout
        };
        git(&["init", "-q"]);
        for f in ["a.py", "pkg/b.py", "pkg/sub/c.txt", "name with space"] {
            let p = d.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, f).unwrap();
        }
        git(&["add", "-A"]);
        for v in ["2", "3", "4"] {
            git(&["update-index", "--index-version", v]);
            let listed = git(&["ls-files", "-z"]);
            let want: Vec<Vec<u8>> = listed
                .split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(<[u8]>::to_vec)
                .collect();
            assert_eq!(read_repo(d.path()).unwrap().paths, want, "version {v}");
        }
    }
}
