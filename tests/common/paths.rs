//! The helpers of tests/paths.rs and tests/path_attacks.rs.

use std::{
    fs,
    os::unix::{ffi::OsStrExt as _, fs::MetadataExt as _},
    path::{Path, PathBuf},
};

use aet_tests::*;

/// A secret file in a directory of its own, and its identity as `stat` reports it.
pub struct Secret {
    pub _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub dir: PathBuf,
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
}

pub fn secret() -> Secret {
    let d = tempdir();
    let root = fs::canonicalize(d.path()).unwrap();
    let dir = root.join("grader");
    fs::create_dir(&dir).unwrap();
    let path = dir.join("answers.txt");
    fs::write(&path, "42\n").unwrap();
    let m = fs::metadata(&path).unwrap();
    Secret {
        _dir: d,
        root,
        dir,
        dev: m.dev(),
        ino: m.ino(),
        path,
    }
}

pub fn bytes(p: &Path) -> &[u8] {
    p.as_os_str().as_bytes()
}

/// Rows that touched the secret: by resolved path or by identity.
pub fn secret_rows<'a>(rows: &'a [LedgerRow], s: &Secret) -> Vec<&'a LedgerRow> {
    rows.iter()
        .filter(|r| {
            r.resolved_path.as_deref() == Some(bytes(&s.path))
                || (r.dev == Some(s.dev) && r.ino == Some(s.ino))
        })
        .collect()
}

/// The one successful open of the secret by a process named `comm`, with the kernel's
/// resolution and identity.
pub fn assert_opened(rows: &[LedgerRow], s: &Secret, comm: &str) -> LedgerRow {
    let hits: Vec<&LedgerRow> = secret_rows(rows, s)
        .into_iter()
        .filter(|r| r.kind == "open" && r.ret.is_some_and(|v| v >= 0) && r.comm == comm)
        .collect();
    assert!(!hits.is_empty(), "no open of the secret by {comm}");
    let r = hits[0].clone();
    assert_eq!(r.resolved_from.as_deref(), Some("object"), "{r:?}");
    assert_eq!(
        (r.dev, r.ino),
        (Some(s.dev), Some(s.ino)),
        "identity: {r:?}"
    );
    assert_eq!(r.resolved_partial, Some(false));
    r
}

pub fn py(d: &Path, code: &str) -> Run {
    run_ok(d, &["python3", "-c", code])
}
