//! A snapshot: every entry the resolved globs match, fingerprinted.
//!
//! Each glob is walked from its literal directory, no deeper than it can match, never through a
//! symlink (a symlink is an entry: its target is recorded, not followed), never into `/proc`,
//! `/sys` or `/dev` from above, and never into a `.git` directory the glob does not name.
//! Regular files are hashed with SHA-256, opened with `O_NOFOLLOW | O_NONBLOCK` (a FIFO swapped in
//! cannot block the walk); a file whose identity, size and times are those of the snapshot before
//! keeps that snapshot's hash (no process can set a change time). An entry only tree watches
//! (`fingerprint = "tree"`) match is not read: its fingerprint is a digest of its metadata and,
//! for a directory, of every entry below it, which the walk does not enter otherwise. The
//! limits bound entries and bytes hashed: past one, the snapshot is refused with the limit, the
//! watch and the directory named.

use std::{
    collections::BTreeMap,
    io::Read as _,
    os::unix::{ffi::OsStrExt as _, fs::MetadataExt as _},
    path::{Path, PathBuf},
    time::Instant,
};

use globset::{GlobSet, GlobSetBuilder};
use sha2::{Digest as _, Sha256};

use super::{Cost, Fingerprint, Kind, Limits, MAX_WALKED, Resolved, Snapshot, resolve::root_of};
use crate::ppath::PPath;

/// Pseudo file systems a walk from above never enters (a glob that starts in one may).
const PSEUDO: &[&str] = crate::util::PSEUDO_FS;

/// The compiled globs of every watch, each glob's index naming its watch.
pub struct Matcher {
    pub set: GlobSet,
    /// The watch of each glob in `set`.
    pub watch_of: Vec<usize>,
    pub globs: Vec<String>,
    /// Whether each glob is a tree watch's.
    tree: Vec<bool>,
}

/// How the globs that match an entry fingerprint it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Matched {
    No,
    Content,
    /// Only tree watches match it.
    Tree,
}

impl Matcher {
    pub fn new(r: &Resolved) -> Result<Self, String> {
        let mut b = GlobSetBuilder::new();
        let mut watch_of = Vec::new();
        let mut globs = Vec::new();
        let mut tree = Vec::new();
        for (wi, w) in r.watches.iter().enumerate() {
            for g in &w.globs {
                let glob = crate::util::path_glob(g)
                    .map_err(|e| format!("watch.{}: {g:?}: {e}", w.name))?;
                b.add(glob);
                watch_of.push(wi);
                globs.push(g.clone());
                tree.push(w.tree);
            }
        }
        Ok(Self {
            set: b.build().map_err(|e| e.to_string())?,
            watch_of,
            globs,
            tree,
        })
    }

    fn matched(&self, path: &Path) -> Matched {
        let m = self.set.matches(path);
        if m.is_empty() {
            Matched::No
        } else if m.iter().all(|&g| self.tree[g]) {
            Matched::Tree
        } else {
            Matched::Content
        }
    }

    /// The watches (indices) whose globs match `path`.
    pub fn watches(&self, path: &Path) -> Vec<usize> {
        let mut w: Vec<usize> = self
            .set
            .matches(path)
            .into_iter()
            .map(|g| self.watch_of[g])
            .collect();
        w.sort_unstable();
        w.dedup();
        w
    }
}

fn kind_of(ft: std::fs::FileType) -> Kind {
    if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        Kind::File
    } else {
        Kind::Other
    }
}

fn ns(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

struct Walker<'a> {
    matcher: &'a Matcher,
    limits: Limits,
    previous: BTreeMap<&'a Path, &'a Fingerprint>,
    entries: BTreeMap<PathBuf, Fingerprint>,
    /// Hashes taken in this snapshot by identity: a hard link's other names are not hashed
    /// again (busybox's hundreds of names of one program).
    by_ident: rustc_hash::FxHashMap<(u64, u64, i64), String>,
    cost: Cost,
}

impl Walker<'_> {
    /// Fingerprints one entry (already lstat'ed): by content, or (`tree`) by its metadata and
    /// its subtree's.
    fn entry(
        &mut self,
        path: &Path,
        m: &std::fs::Metadata,
        tree: bool,
        why: &str,
    ) -> Result<(), String> {
        if self.entries.contains_key(path) {
            return Ok(());
        }
        if self.cost.entries >= self.limits.files {
            return Err(format!(
                "{why}: more than {} entries to fingerprint ([limits] watch_files = {}); \
                 narrow the watch or raise the limit",
                self.limits.files, self.limits.files
            ));
        }
        let kind = kind_of(m.file_type());
        let mut fp = Fingerprint {
            path: PPath(path.to_owned()),
            kind,
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
            size: m.size(),
            sha256: None,
            target: None,
            dev: m.dev(),
            ino: m.ino(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
            tree: None,
        };
        if kind == Kind::Symlink {
            fp.target = std::fs::read_link(path).ok().map(PPath);
        }
        if tree {
            fp.tree = Some(self.tree_digest(path, &fp, why)?);
            self.cost.entries += 1;
            self.entries.insert(path.to_owned(), fp);
            return Ok(());
        }
        match kind {
            Kind::Symlink => {}
            Kind::File => {
                let same = self.previous.get(path).filter(|p| {
                    p.kind == Kind::File
                        && (p.dev, p.ino, p.size, p.mtime_ns, p.ctime_ns)
                            == (fp.dev, fp.ino, fp.size, fp.mtime_ns, fp.ctime_ns)
                });
                let ident = (fp.dev, fp.ino, fp.ctime_ns);
                if let Some(p) = same.and_then(|p| p.sha256.clone()) {
                    fp.sha256 = Some(p);
                    self.cost.reused += 1;
                } else if let Some(h) = self.by_ident.get(&ident) {
                    fp.sha256 = Some(h.clone());
                    self.cost.reused += 1;
                } else {
                    if self.cost.hashed_bytes.saturating_add(fp.size) > self.limits.bytes {
                        return Err(format!(
                            "{why}: more than {} bytes to hash ([limits] watch_bytes = {}; \
                             {} is {} bytes); narrow the watch or raise the limit",
                            self.limits.bytes,
                            self.limits.bytes,
                            path.display(),
                            fp.size
                        ));
                    }
                    let (hash, n) = hash_file(path, fp.dev, fp.ino)?;
                    self.by_ident.insert(ident, hash.clone());
                    fp.sha256 = Some(hash);
                    self.cost.hashed_files += 1;
                    self.cost.hashed_bytes += n;
                }
            }
            Kind::Dir | Kind::Other => {}
        }
        self.cost.entries += 1;
        self.entries.insert(path.to_owned(), fp);
        Ok(())
    }

    /// A tree watch's digest of an entry: its own metadata, then (a directory) every entry
    /// below it by name, never through a symlink, into `.git` or a pseudo file system.
    fn tree_digest(
        &mut self,
        path: &Path,
        top: &Fingerprint,
        why: &str,
    ) -> Result<super::TreeDigest, String> {
        let mut h = Sha256::new();
        let feed = |h: &mut Sha256, rel: &[u8], f: &Fingerprint| {
            h.update((rel.len() as u64).to_le_bytes());
            h.update(rel);
            h.update([f.kind as u8]);
            for v in [
                f.mode as u64,
                f.uid as u64,
                f.gid as u64,
                f.size,
                f.dev,
                f.ino,
                f.mtime_ns as u64,
                f.ctime_ns as u64,
            ] {
                h.update(v.to_le_bytes());
            }
            let t = f
                .target
                .as_ref()
                .map(|t| t.as_path().as_os_str().as_bytes())
                .unwrap_or_default();
            h.update((t.len() as u64).to_le_bytes());
            h.update(t);
        };
        feed(&mut h, b"", top);
        let mut below = 0u64;
        if top.kind == Kind::Dir {
            let mut stack = vec![path.to_owned()];
            while let Some(dir) = stack.pop() {
                let Ok(rd) = std::fs::read_dir(&dir) else {
                    continue;
                };
                let mut children: Vec<_> = rd.flatten().collect();
                children.sort_by_key(|e| e.file_name());
                // Depth first, in name order: pushed in reverse.
                let mut dirs = Vec::new();
                for e in children {
                    self.cost.walked += 1;
                    if self.cost.walked > MAX_WALKED {
                        return Err(format!(
                            "{why}: more than {MAX_WALKED} directory entries to look at; \
                             narrow the watch"
                        ));
                    }
                    let p = e.path();
                    let Ok(m) = std::fs::symlink_metadata(&p) else {
                        continue;
                    };
                    let f = Fingerprint {
                        path: PPath(PathBuf::new()),
                        kind: kind_of(m.file_type()),
                        mode: m.mode() & 0o7777,
                        uid: m.uid(),
                        gid: m.gid(),
                        size: m.size(),
                        sha256: None,
                        target: m
                            .file_type()
                            .is_symlink()
                            .then(|| std::fs::read_link(&p).ok().map(PPath))
                            .flatten(),
                        dev: m.dev(),
                        ino: m.ino(),
                        mtime_ns: ns(m.mtime(), m.mtime_nsec()),
                        ctime_ns: ns(m.ctime(), m.ctime_nsec()),
                        tree: None,
                    };
                    let rel = p.strip_prefix(path).unwrap_or(&p);
                    feed(&mut h, rel.as_os_str().as_bytes(), &f);
                    below += 1;
                    if m.is_dir()
                        && e.file_name().as_bytes() != b".git"
                        && !PSEUDO.iter().any(|x| p == Path::new(x))
                    {
                        dirs.push(p);
                    }
                }
                stack.extend(dirs.into_iter().rev());
            }
        }
        Ok(super::TreeDigest {
            below,
            digest: crate::util::hex(&h.finalize()),
        })
    }

    /// Walks `root` down to `depth` levels (`None`: all), fingerprinting what matches.
    fn walk(
        &mut self,
        root: &Path,
        depth: Option<usize>,
        into_git: bool,
        why: &str,
    ) -> Result<bool, String> {
        let Ok(m) = std::fs::symlink_metadata(root) else {
            return Ok(false);
        };
        let matched = self.matcher.matched(root);
        if matched != Matched::No {
            self.entry(root, &m, matched == Matched::Tree, why)?;
        }
        if !m.is_dir() || depth == Some(0) || matched == Matched::Tree {
            return Ok(true);
        }
        let mut stack = vec![(root.to_owned(), depth)];
        while let Some((dir, left)) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut children: Vec<_> = rd.flatten().collect();
            children.sort_by_key(|e| e.file_name());
            for e in children {
                self.cost.walked += 1;
                if self.cost.walked > MAX_WALKED {
                    return Err(format!(
                        "{why}: more than {MAX_WALKED} directory entries to look at; narrow the \
                         watch"
                    ));
                }
                let path = e.path();
                let Ok(m) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                let matched = self.matcher.matched(&path);
                if matched != Matched::No {
                    self.entry(&path, &m, matched == Matched::Tree, why)?;
                }
                let below = left.map(|l| l - 1);
                // A tree entry's digest covers what is below it.
                if m.is_dir()
                    && matched != Matched::Tree
                    && below != Some(0)
                    && (into_git || e.file_name().as_bytes() != b".git")
                    && !PSEUDO.iter().any(|p| path == Path::new(p))
                {
                    stack.push((path, below));
                }
            }
        }
        Ok(true)
    }
}

/// Hashes the regular file listed at `path` as `(dev, ino)`: a directory on the way swapped for
/// a symlink since (to `/dev`, to a root-only tree) leads the open to nothing it reads, and no
/// device or FIFO put at the name is opened (see [`crate::safe_open::open_identified`]).
fn hash_file(path: &Path, dev: u64, ino: u64) -> Result<(String, u64), String> {
    let mut f = match crate::safe_open::open_identified(path, dev, ino) {
        Ok(f) => f,
        Err(
            crate::safe_open::NotOpened::Other { .. } | crate::safe_open::NotOpened::NotRegular(_),
        ) => {
            return Err(format!(
                "{} changed while it was being fingerprinted",
                path.display()
            ));
        }
        Err(e) => return Err(format!("cannot hash {}: {e}", path.display())),
    };
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0u64;
    loop {
        let r = f
            .read(&mut buf)
            .map_err(|e| format!("cannot hash {}: {e}", path.display()))?;
        if r == 0 {
            break;
        }
        h.update(&buf[..r]);
        n += r as u64;
    }
    Ok((crate::util::hex(&h.finalize()), n))
}

/// Every entry the resolved globs match, now, in this view.
pub fn snapshot(
    r: &Resolved,
    limits: Limits,
    previous: Option<&Snapshot>,
    at: &str,
) -> Result<Snapshot, String> {
    let started = Instant::now();
    let matcher = Matcher::new(r)?;
    let mut w = Walker {
        matcher: &matcher,
        limits,
        previous: previous
            .map(|p| p.entries.iter().map(|f| (f.path.as_path(), f)).collect())
            .unwrap_or_default(),
        entries: BTreeMap::new(),
        by_ident: rustc_hash::FxHashMap::default(),
        cost: Cost::default(),
    };
    // Each glob's walk, the widest first, so that a root inside another one's walk is skipped.
    let mut walks: Vec<(PathBuf, Option<usize>, bool, String)> = Vec::new();
    for wt in &r.watches {
        for g in &wt.globs {
            let (root, depth) = root_of(g);
            let into_git = root.components().any(|c| c.as_os_str() == ".git");
            walks.push((root, depth, into_git, format!("watch.{}: {g}", wt.name)));
        }
    }
    walks.sort_by(|a, b| {
        a.0.components()
            .count()
            .cmp(&b.0.components().count())
            .then(a.0.cmp(&b.0))
    });
    let mut done: Vec<(PathBuf, bool)> = Vec::new();
    let mut roots = Vec::new();
    for (root, depth, into_git, why) in walks {
        // A walk without end above this root (and as willing to enter .git) covered it.
        if done
            .iter()
            .any(|(d, g)| root.starts_with(d) && (*g || !into_git))
        {
            continue;
        }
        if w.walk(&root, depth, into_git, &why)? {
            let p = PPath(root.clone());
            if !roots.contains(&p) {
                roots.push(p);
            }
        }
        if depth.is_none() {
            done.push((root, into_git));
        }
    }
    w.cost.ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(Snapshot {
        taken_ns: crate::util::now_ns(),
        at: at.to_owned(),
        roots,
        entries: w.entries.into_values().collect(),
        cost: w.cost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::ResolvedWatch;

    fn resolved(globs: &[String]) -> Resolved {
        Resolved {
            watches: vec![ResolvedWatch {
                name: "t".into(),
                paths: globs.to_vec(),
                globs: globs.to_vec(),
                tree: false,
            }],
            ..Resolved::default()
        }
    }

    #[test]
    fn fingerprints_what_matches_and_reuses_unchanged_hashes() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("tests/sub")).unwrap();
        std::fs::create_dir_all(r.join(".git")).unwrap();
        std::fs::write(r.join("tests/test_a.py"), "assert 1\n").unwrap();
        std::fs::write(r.join("tests/sub/conftest.py"), "").unwrap();
        std::fs::write(r.join(".git/conftest.py"), "").unwrap();
        std::fs::write(r.join("src.py"), "x = 1\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", r.join("tests/link")).unwrap();
        let base = r.display().to_string();
        let res = resolved(&[format!("{base}/tests/**"), format!("{base}/**/conftest.py")]);
        let s = snapshot(&res, Limits::default(), None, "start").unwrap();
        let names: Vec<String> = s
            .entries
            .iter()
            .map(|f| {
                f.path
                    .as_path()
                    .strip_prefix(r)
                    .unwrap()
                    .display()
                    .to_string()
            })
            .collect();
        assert_eq!(
            names,
            [
                "tests/link",
                "tests/sub",
                "tests/sub/conftest.py",
                "tests/test_a.py"
            ]
        );
        let link = &s.entries[0];
        assert_eq!(link.kind, Kind::Symlink);
        assert_eq!(link.target, Some(PPath("/etc/passwd".into())));
        let a = &s.entries[3];
        // sha256("assert 1\n")
        assert_eq!(a.sha256.as_deref().map(str::len), Some(64));
        assert_eq!(s.cost.hashed_files, 2);
        let again = snapshot(&res, Limits::default(), Some(&s), "end").unwrap();
        assert_eq!(again.cost.hashed_files, 0);
        assert_eq!(again.cost.reused, 2);
        assert_eq!(again.entries, s.entries);
    }

    #[test]
    fn a_tree_watch_fingerprints_directories_by_their_subtree_without_reading_files() {
        let d = tempfile::tempdir().unwrap();
        let site = d.path().join("site");
        std::fs::create_dir_all(site.join("pkg/sub")).unwrap();
        std::fs::write(site.join("pkg/sub/a.py"), "x = 1\n").unwrap();
        std::fs::write(site.join("mod.py"), "y = 2\n").unwrap();
        std::fs::write(site.join("hook.pth"), "import x\n").unwrap();
        let base = site.display().to_string();
        let mut res = resolved(&[format!("{base}/*")]);
        res.watches[0].tree = true;
        // The .pth files by content, as a second (content) watch.
        res.watches.push(ResolvedWatch {
            name: "pth".into(),
            paths: vec![],
            globs: vec![format!("{base}/*.pth")],
            tree: false,
        });
        let s = snapshot(&res, Limits::default(), None, "start").unwrap();
        let by = |n: &str| s.entries.iter().find(|f| f.path.as_path() == site.join(n));
        assert_eq!(
            s.entries.len(),
            3,
            "the directory is one entry: {:?}",
            s.entries
        );
        let pkg = by("pkg").unwrap();
        assert_eq!(pkg.tree.as_ref().unwrap().below, 2);
        assert!(pkg.sha256.is_none());
        assert!(
            by("mod.py").unwrap().sha256.is_none(),
            "a tree file is not read"
        );
        assert!(
            by("hook.pth").unwrap().sha256.is_some(),
            "a content watch reads it"
        );
        assert_eq!(s.cost.hashed_files, 1);
        // A file rewritten deep below changes the directory's digest; a new package is new.
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::write(site.join("pkg/sub/a.py"), "x = 2\n").unwrap();
        std::fs::create_dir_all(site.join("evil-1.0.dist-info")).unwrap();
        let after = snapshot(&res, Limits::default(), Some(&s), "end").unwrap();
        let (changes, _) = crate::watch::diff::diff(&s, &after);
        let what: Vec<(String, crate::watch::diff::What)> = changes
            .iter()
            .map(|c| {
                (
                    c.path
                        .as_path()
                        .file_name()
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                    c.what,
                )
            })
            .collect();
        use crate::watch::diff::What;
        assert_eq!(
            what,
            [
                ("evil-1.0.dist-info".to_owned(), What::Created),
                ("pkg".to_owned(), What::Content)
            ]
        );
        assert!(
            changes[1].detail.contains("changed below"),
            "{}",
            changes[1].detail
        );
    }

    #[test]
    fn refuses_past_a_limit_naming_it() {
        let d = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::write(d.path().join(format!("f{i}")), "0123456789").unwrap();
        }
        let res = resolved(&[format!("{}/*", d.path().display())]);
        let e = snapshot(
            &res,
            Limits {
                files: 3,
                bytes: 1 << 20,
            },
            None,
            "start",
        )
        .unwrap_err();
        assert!(
            e.contains("watch_files = 3") && e.contains("watch.t"),
            "{e}"
        );
        let e = snapshot(
            &res,
            Limits {
                files: 100,
                bytes: 25,
            },
            None,
            "start",
        )
        .unwrap_err();
        assert!(e.contains("watch_bytes = 25"), "{e}");
    }
}
