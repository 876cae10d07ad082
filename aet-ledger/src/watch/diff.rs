//! What changed between two snapshots of the watched files.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Fingerprint, Kind, Snapshot};
use crate::ppath::PPath;

/// How a watched entry changed (the most telling, when several did).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum What {
    /// It is new.
    Created,
    /// It is gone.
    Deleted,
    /// Another kind of entry is at its path (a symlink swapped in for a file).
    Type,
    /// A file's bytes.
    Content,
    /// A symlink's target.
    Target,
    /// Its permission bits.
    Mode,
    /// Its owner or group.
    Owner,
}

impl What {
    pub fn name(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Deleted => "deleted",
            Self::Type => "type",
            Self::Content => "content",
            Self::Target => "target",
            Self::Mode => "mode",
            Self::Owner => "owner",
        }
    }
}

/// One watched entry that is not as it was.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Change {
    pub path: PPath,
    pub what: What,
    /// Everything that differs, in words (`content: sha256 1a2b… -> 3c4d…, 10 -> 12 bytes; mode
    /// 0644 -> 0755`).
    pub detail: String,
    pub before: Option<Fingerprint>,
    pub after: Option<Fingerprint>,
}

fn short(h: Option<&str>) -> &str {
    h.map_or("-", |h| &h[..h.len().min(12)])
}

/// The differences of one entry present in both, most telling first.
fn differences(b: &Fingerprint, a: &Fingerprint) -> Vec<(What, String)> {
    let mut d = Vec::new();
    if b.kind != a.kind {
        d.push((
            What::Type,
            format!("type: {} -> {}", b.kind.name(), a.kind.name()),
        ));
        if let Some(t) = &a.target {
            d.push((
                What::Target,
                format!("now a symlink to {}", t.as_path().display()),
            ));
        }
        return d;
    }
    if b.tree != a.tree {
        let (bt, at) = (b.tree.as_ref(), a.tree.as_ref());
        fn digest(t: Option<&super::TreeDigest>) -> &str {
            short(t.map(|t| t.digest.as_str()))
        }
        d.push((
            What::Content,
            if b.kind == Kind::Dir {
                format!(
                    "changed below: {} -> {} entries, tree digest {} -> {}",
                    bt.map_or(0, |t| t.below),
                    at.map_or(0, |t| t.below),
                    digest(bt),
                    digest(at)
                )
            } else {
                format!(
                    "rewritten or replaced: {} -> {} bytes, inode {} -> {}",
                    b.size, a.size, b.ino, a.ino
                )
            },
        ));
    }
    if b.sha256 != a.sha256 {
        d.push((
            What::Content,
            format!(
                "content: sha256 {} -> {}, {} -> {} bytes",
                short(b.sha256.as_deref()),
                short(a.sha256.as_deref()),
                b.size,
                a.size
            ),
        ));
    }
    if b.target != a.target {
        let t = |f: &Fingerprint| {
            f.target
                .as_ref()
                .map_or("-".into(), |t| t.as_path().display().to_string())
        };
        d.push((What::Target, format!("target: {} -> {}", t(b), t(a))));
    }
    if b.mode != a.mode {
        d.push((
            What::Mode,
            format!("mode: {:04o} -> {:04o}", b.mode, a.mode),
        ));
    }
    if (b.uid, b.gid) != (a.uid, a.gid) {
        d.push((
            What::Owner,
            format!("owner: {}:{} -> {}:{}", b.uid, b.gid, a.uid, a.gid),
        ));
    }
    d
}

/// What differs from `before` to `after`, by path; `touched`: entries the same in every way
/// that is compared, yet written since (their change time or identity differs).
pub fn diff(before: &Snapshot, after: &Snapshot) -> (Vec<Change>, Vec<PPath>) {
    let b: BTreeMap<&PPath, &Fingerprint> = before.entries.iter().map(|f| (&f.path, f)).collect();
    let a: BTreeMap<&PPath, &Fingerprint> = after.entries.iter().map(|f| (&f.path, f)).collect();
    let mut changes = Vec::new();
    let mut touched = Vec::new();
    for (p, fb) in &b {
        match a.get(p) {
            None if fb.kind == Kind::Dir && fb.tree.is_none() => {}
            None => changes.push(Change {
                path: (*p).clone(),
                what: What::Deleted,
                detail: format!("deleted ({}, {} bytes)", fb.kind.name(), fb.size),
                before: Some((*fb).clone()),
                after: None,
            }),
            Some(fa) => {
                let d = differences(fb, fa);
                if let Some((what, _)) = d.first() {
                    changes.push(Change {
                        path: (*p).clone(),
                        what: *what,
                        detail: d.iter().map(|x| x.1.clone()).collect::<Vec<_>>().join("; "),
                        before: Some((*fb).clone()),
                        after: Some((*fa).clone()),
                    });
                } else if fb.kind != Kind::Dir
                    && ((fb.dev, fb.ino, fb.ctime_ns) != (fa.dev, fa.ino, fa.ctime_ns))
                {
                    touched.push((*p).clone());
                }
            }
        }
    }
    for (p, fa) in &a {
        if !b.contains_key(p) && (fa.kind != Kind::Dir || fa.tree.is_some()) {
            changes.push(Change {
                path: (*p).clone(),
                what: What::Created,
                detail: match (&fa.target, &fa.tree) {
                    (Some(t), _) => format!("created: a symlink to {}", t.as_path().display()),
                    (None, Some(t)) if fa.kind == Kind::Dir => format!(
                        "created (a directory, {} entries below it, mode {:04o})",
                        t.below, fa.mode
                    ),
                    _ => format!(
                        "created ({}, {} bytes, mode {:04o}, sha256 {})",
                        fa.kind.name(),
                        fa.size,
                        fa.mode,
                        short(fa.sha256.as_deref())
                    ),
                },
                before: None,
                after: Some((*fa).clone()),
            });
        }
    }
    changes.sort_by(|x, y| x.path.cmp(&y.path));
    (changes, touched)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(path: &str, kind: Kind, sha: Option<&str>, mode: u32, ctime: i64) -> Fingerprint {
        Fingerprint {
            path: PPath(path.into()),
            kind,
            mode,
            uid: 0,
            gid: 0,
            size: 1,
            sha256: sha.map(str::to_owned),
            target: (kind == Kind::Symlink).then(|| PPath("/etc/passwd".into())),
            dev: 1,
            ino: 2,
            mtime_ns: 0,
            ctime_ns: ctime,
            tree: None,
        }
    }

    fn snap(e: Vec<Fingerprint>) -> Snapshot {
        Snapshot {
            entries: e,
            ..Snapshot::default()
        }
    }

    #[test]
    fn every_kind_of_change_and_a_touch() {
        let before = snap(vec![
            fp("/r/a", Kind::File, Some("aa"), 0o644, 1),
            fp("/r/b", Kind::File, Some("bb"), 0o644, 1),
            fp("/r/c", Kind::File, Some("cc"), 0o644, 1),
            fp("/r/d", Kind::File, Some("dd"), 0o644, 1),
            fp("/r/e", Kind::File, Some("ee"), 0o644, 1),
            fp("/r/dir", Kind::Dir, None, 0o755, 1),
        ]);
        let after = snap(vec![
            fp("/r/a", Kind::File, Some("a2"), 0o644, 2),
            fp("/r/c", Kind::Symlink, None, 0o777, 2),
            fp("/r/d", Kind::File, Some("dd"), 0o755, 2),
            fp("/r/e", Kind::File, Some("ee"), 0o644, 9),
            fp("/r/new", Kind::File, Some("nn"), 0o644, 2),
        ]);
        let (changes, touched) = diff(&before, &after);
        let got: Vec<(&str, What)> = changes
            .iter()
            .map(|c| (c.path.as_path().to_str().unwrap(), c.what))
            .collect();
        assert_eq!(
            got,
            [
                ("/r/a", What::Content),
                ("/r/b", What::Deleted),
                ("/r/c", What::Type),
                ("/r/d", What::Mode),
                ("/r/new", What::Created),
            ]
        );
        assert!(changes[2].detail.contains("now a symlink to /etc/passwd"));
        assert_eq!(touched, vec![PPath("/r/e".into())]);
    }
}
