//! A policy's watch globs made absolute in the run's view.
//!
//! - `/abs/GLOB`: as written (its literal directories resolved, so that `/bin/x` on a
//!   merged-/usr system is `/usr/bin/x`, the path the kernel records);
//! - `GLOB` (relative): at each task repository (a sandbox's `[[repo]]`), else at the command's
//!   working directory;
//! - `@path/GLOB`: at each directory of the command's `PATH`, in order;
//! - `@site/GLOB`: at each site-packages directory of the interpreters on that `PATH` (their
//!   prefix's `lib/python3*/site-packages` and `dist-packages`, a virtual environment's own, every
//!   pyenv version's behind its `shims`, Debian's `lib/python3/dist-packages`) and the user's
//!   (`~/.local/lib/python3*/site-packages`);
//! - `@prefix/GLOB`: at each of those interpreters' prefixes (a virtual environment's directory,
//!   `/usr`, a pyenv version): its `pyvenv.cfg`, its standard library
//!   (`@prefix/lib/python3*/unittest/**`);
//! - `@above/NAME`: at every directory above each task repository, from `/` down to the
//!   repository's parent (the `conftest.py` and configuration files a test runner finds there).
//!   NAME is one component: a glob that walked from `/` would walk the whole file system.
//!
//! No program of the view is run to find these: a trojaned interpreter cannot answer for itself.

use std::{
    os::unix::ffi::OsStrExt as _,
    path::{Component, Path, PathBuf},
};

use super::{Context, Resolved, ResolvedWatch, WatchSpec};
use crate::ppath::PPath;

/// The anchor a glob starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    Absolute,
    Repo,
    Path,
    Site,
    Prefix,
    Above,
}

/// Splits a glob as written into its anchor and the rest (relative for the anchors).
pub fn split(p: &str) -> (Anchor, &str) {
    if let Some(rest) = p.strip_prefix("@path/") {
        (Anchor::Path, rest)
    } else if let Some(rest) = p.strip_prefix("@site/") {
        (Anchor::Site, rest)
    } else if let Some(rest) = p.strip_prefix("@prefix/") {
        (Anchor::Prefix, rest)
    } else if let Some(rest) = p.strip_prefix("@above/") {
        (Anchor::Above, rest)
    } else if p.starts_with('/') {
        (Anchor::Absolute, p)
    } else {
        (Anchor::Repo, p)
    }
}

/// Whether a glob as written may be used: the problem in words, else `Ok`.
pub fn check(p: &str) -> Result<Anchor, String> {
    let (anchor, rest) = split(p);
    if rest.is_empty() {
        return Err("empty glob".into());
    }
    if p.starts_with('@') && anchor == Anchor::Repo {
        return Err(
            "unknown anchor (`@path/GLOB`, `@site/GLOB`, `@prefix/GLOB` or `@above/NAME`)".into(),
        );
    }
    if anchor == Anchor::Above && (rest.contains('/') || rest.contains("**")) {
        return Err(
            "`@above/` takes one name (`@above/conftest.py`): it is matched in every \
                    directory above the repository, and a deeper glob would walk the whole file \
                    system"
                .into(),
        );
    }
    if anchor != Anchor::Absolute && rest.starts_with('/') {
        return Err("an anchor is followed by a relative glob".into());
    }
    if rest.split('/').any(|c| c == "..") {
        return Err("`..` may not appear in a watched glob".into());
    }
    if p.contains('\0') {
        return Err("a NUL byte".into());
    }
    crate::util::path_glob(&format!("/{}", rest.trim_start_matches('/')))
        .map_err(|e| e.to_string())?;
    Ok(anchor)
}

/// Glob characters in a literal path, escaped.
fn escape(dir: &Path) -> Result<String, String> {
    let text = dir
        .to_str()
        .ok_or_else(|| format!("{}: not UTF-8, cannot anchor a glob there", dir.display()))?;
    Ok(globset::escape(text))
}

fn join(dir: &Path, rest: &str) -> Result<String, String> {
    let base = escape(dir)?;
    Ok(if base.ends_with('/') {
        format!("{base}{rest}")
    } else {
        format!("{base}/{rest}")
    })
}

fn canonical_dir(p: &Path) -> Option<PathBuf> {
    let c = std::fs::canonicalize(p).ok()?;
    c.is_dir().then_some(c)
}

fn push_unique(v: &mut Vec<PPath>, p: PathBuf) {
    let p = PPath(p);
    if !v.contains(&p) {
        v.push(p);
    }
}

/// The absolute directories of a `PATH` value, in order, each once: resolved when they exist,
/// as written when they do not (a directory the run makes ahead of `/usr/bin` is watched too).
pub fn path_dirs(path_var: &str) -> Vec<PPath> {
    let mut out = Vec::new();
    for d in path_var.split(':') {
        if !d.starts_with('/') {
            continue;
        }
        let p = Path::new(d);
        match std::fs::canonicalize(p) {
            Ok(c) if c.is_dir() => push_unique(&mut out, c),
            Ok(_) => {}
            Err(_) => push_unique(&mut out, p.components().collect()),
        }
    }
    out
}

/// `python`, `python3`, `python3.11`.
fn is_python(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(b"python") else {
        return false;
    };
    rest.iter().all(|b| b.is_ascii_digit() || *b == b'.')
}

/// `PREFIX/lib/python3*/{site,dist}-packages` that exist.
fn lib_sites(prefix: &Path, out: &mut Vec<PPath>) {
    let lib = prefix.join("lib");
    let Ok(rd) = std::fs::read_dir(&lib) else {
        return;
    };
    let mut names: Vec<_> = rd
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.as_bytes().starts_with(b"python3"))
        .collect();
    names.sort();
    for n in names {
        for sub in ["site-packages", "dist-packages"] {
            if let Some(c) = canonical_dir(&lib.join(&n).join(sub)) {
                push_unique(out, c);
            }
        }
    }
}

/// The site-packages directories of the interpreters on the PATH, and the user's.
pub fn site_dirs(path_dirs: &[PPath], home: Option<&Path>) -> Vec<PPath> {
    interpreters(path_dirs, home).0
}

/// The site-packages directories of the interpreters on the PATH and the user's, and the
/// interpreters' prefixes (a virtual environment's directory, `/usr`, a pyenv version's).
pub fn interpreters(path_dirs: &[PPath], home: Option<&Path>) -> (Vec<PPath>, Vec<PPath>) {
    let mut out = Vec::new();
    let mut prefixes = Vec::new();
    for dir in path_dirs {
        let dir = dir.as_path();
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut pythons: Vec<_> = rd
            .flatten()
            .filter(|e| is_python(e.file_name().as_bytes()))
            .map(|e| e.path())
            .collect();
        pythons.sort();
        if pythons.is_empty() {
            continue;
        }
        // A virtual environment: its own site-packages, then its base interpreter's.
        if let Some(prefix) = dir.parent()
            && prefix.join("pyvenv.cfg").is_file()
        {
            lib_sites(prefix, &mut out);
            push_unique(&mut prefixes, prefix.to_owned());
        }
        // pyenv's shims are scripts that pick one of its versions: every version's.
        if dir.file_name().is_some_and(|n| n == "shims")
            && let Some(root) = dir.parent()
            && let Ok(versions) = std::fs::read_dir(root.join("versions"))
        {
            let mut vs: Vec<_> = versions.flatten().map(|e| e.path()).collect();
            vs.sort();
            for v in vs {
                lib_sites(&v, &mut out);
                push_unique(&mut prefixes, v);
            }
        }
        for py in pythons {
            let Ok(real) = std::fs::canonicalize(&py) else {
                continue;
            };
            if let Some(prefix) = real.parent().and_then(Path::parent) {
                lib_sites(prefix, &mut out);
                push_unique(&mut prefixes, prefix.to_owned());
                if let Some(c) = canonical_dir(&prefix.join("lib/python3/dist-packages")) {
                    push_unique(&mut out, c);
                }
                if prefix == Path::new("/usr") {
                    lib_sites(Path::new("/usr/local"), &mut out);
                }
            }
        }
    }
    if let Some(h) = home {
        lib_sites(&h.join(".local"), &mut out);
    }
    (out, prefixes)
}

/// The directories above `dir`, from `/` down to its parent.
fn above(dir: &Path) -> Vec<PPath> {
    let mut v: Vec<PPath> = dir
        .ancestors()
        .skip(1)
        .map(|a| PPath(a.to_owned()))
        .collect();
    v.reverse();
    v
}

/// An absolute glob with its literal directories resolved (the longest existing literal
/// prefix, canonicalized).
fn canonical_glob(g: &str) -> Result<String, String> {
    let comps: Vec<&str> = g.split('/').collect();
    let lit = comps
        .iter()
        .position(|c| c.contains(['*', '?', '[', '{', '\\']))
        .unwrap_or(comps.len());
    // The longest literal prefix that exists (a literal glob's own file may not, yet).
    let mut n = lit;
    while n > 1 {
        let prefix = comps[..n].join("/");
        if let Ok(c) = std::fs::canonicalize(&prefix) {
            let rest = comps[n..].join("/");
            return Ok(if rest.is_empty() {
                escape(&c)?
            } else {
                join(&c, &rest)?
            });
        }
        n -= 1;
    }
    Ok(g.to_owned())
}

/// Resolves every watch's globs in the current view.
pub fn resolve(watches: &[WatchSpec], ctx: &Context) -> Result<Resolved, String> {
    let mut r = Resolved::default();
    let anchors: Vec<&Path> = if ctx.repos.is_empty() {
        ctx.cwd.iter().map(PPath::as_path).collect()
    } else {
        ctx.repos.iter().map(PPath::as_path).collect()
    };
    for a in anchors {
        match std::fs::canonicalize(a) {
            Ok(c) => push_unique(&mut r.anchors, c),
            Err(e) => {
                return Err(format!(
                    "the task's repository {} cannot be resolved: {e}",
                    a.display()
                ));
            }
        }
    }
    r.path_dirs = path_dirs(ctx.path_var.as_deref().unwrap_or(""));
    (r.site_dirs, r.prefix_dirs) =
        interpreters(&r.path_dirs, ctx.home.as_ref().map(PPath::as_path));
    let mut above_dirs = Vec::new();
    for a in &r.anchors {
        for d in above(a.as_path()) {
            if !above_dirs.contains(&d) {
                above_dirs.push(d);
            }
        }
    }
    for w in watches {
        let mut globs = Vec::new();
        for p in &w.paths {
            let (anchor, rest) = split(p);
            let dirs: &[PPath] = match anchor {
                Anchor::Absolute => {
                    globs.push(canonical_glob(rest)?);
                    continue;
                }
                Anchor::Repo if r.anchors.is_empty() => {
                    return Err(format!(
                        "watch.{}: {p:?} is relative, and the run has neither a task repository \
                         nor a working directory to anchor it",
                        w.name
                    ));
                }
                Anchor::Repo => &r.anchors,
                Anchor::Path => &r.path_dirs,
                Anchor::Site => &r.site_dirs,
                Anchor::Prefix => &r.prefix_dirs,
                Anchor::Above => &above_dirs,
            };
            for d in dirs {
                globs.push(join(d.as_path(), rest)?);
            }
        }
        globs.dedup();
        r.watches.push(ResolvedWatch {
            name: w.name.clone(),
            paths: w.paths.clone(),
            globs,
            tree: w.tree,
        });
    }
    Ok(r)
}

/// A glob's literal directory (where its walk starts) and how deep below it the walk goes
/// (`None`: without end, the glob has `**`).
pub fn root_of(glob: &str) -> (PathBuf, Option<usize>) {
    let comps: Vec<&str> = glob.split('/').collect();
    let lit = comps
        .iter()
        .position(|c| c.contains(['*', '?', '[', '{', '\\']))
        .unwrap_or(comps.len());
    let (root, depth) = if lit == comps.len() {
        // A literal path: the entry itself.
        (comps.join("/"), Some(0))
    } else {
        let rest = &comps[lit..];
        let depth =
            (!rest.contains(&"**") && !rest.iter().any(|c| c.contains("**"))).then_some(rest.len());
        (comps[..lit].join("/"), depth)
    };
    let root = if root.is_empty() { "/".into() } else { root };
    let p = PathBuf::from(root);
    // Normalised (no `.` components or doubled slashes).
    let p: PathBuf = p
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    (p, depth)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_and_problems() {
        assert_eq!(check("tests/**").unwrap(), Anchor::Repo);
        assert_eq!(check("@path/*").unwrap(), Anchor::Path);
        assert_eq!(check("@site/*.pth").unwrap(), Anchor::Site);
        assert_eq!(check("/srv/grader/**").unwrap(), Anchor::Absolute);
        assert!(check("@home/x").unwrap_err().contains("unknown anchor"));
        assert_eq!(check("@above/conftest.py").unwrap(), Anchor::Above);
        assert_eq!(check("@prefix/pyvenv.cfg").unwrap(), Anchor::Prefix);
        assert!(check("@above/**/x").unwrap_err().contains("one name"));
        assert!(check("@above/a/b").unwrap_err().contains("one name"));
        assert!(check("../x").unwrap_err().contains(".."));
        assert!(check("tests/[").is_err());
        assert!(check("@path/").unwrap_err().contains("empty"));
    }

    #[test]
    fn roots_and_depths() {
        assert_eq!(
            root_of("/r/tests/**"),
            (PathBuf::from("/r/tests"), None::<usize>)
        );
        assert_eq!(root_of("/usr/bin/*"), (PathBuf::from("/usr/bin"), Some(1)));
        assert_eq!(
            root_of("/r/pytest.ini"),
            (PathBuf::from("/r/pytest.ini"), Some(0))
        );
        assert_eq!(root_of("/r/**/conftest.py"), (PathBuf::from("/r"), None));
        assert_eq!(root_of("/r/*/x.py"), (PathBuf::from("/r"), Some(2)));
    }

    #[test]
    fn pyenv_shims_stand_for_every_version() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir_all(root.join("shims")).unwrap();
        std::fs::write(
            root.join("shims/python3"),
            "#!/bin/sh\nexec pyenv exec python3\n",
        )
        .unwrap();
        let site = root.join("versions/3.11.9/lib/python3.11/site-packages");
        std::fs::create_dir_all(&site).unwrap();
        let dirs = site_dirs(&[PPath(root.join("shims"))], None);
        assert_eq!(dirs, vec![PPath(site)]);
    }

    #[test]
    fn resolves_in_the_view() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let bin = root.join("venv/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(root.join("venv/lib/python3.11/site-packages")).unwrap();
        std::fs::write(root.join("venv/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        std::fs::write(bin.join("python3"), "").unwrap();
        let repo = root.join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        let ctx = Context {
            cwd: Some(PPath(root.clone())),
            repos: vec![PPath(repo.clone())],
            path_var: Some(format!(
                "{}:relative:/nonexistent/bin/:{}",
                bin.display(),
                bin.display()
            )),
            home: None,
        };
        let w = vec![WatchSpec {
            name: "t".into(),
            paths: vec![
                "tests/**".into(),
                "@path/*".into(),
                "@site/*.pth".into(),
                "@prefix/pyvenv.cfg".into(),
                "@above/conftest.py".into(),
            ],
            tree: false,
        }];
        let r = resolve(&w, &ctx).unwrap();
        assert_eq!(r.anchors, vec![PPath(repo.clone())]);
        assert_eq!(
            r.path_dirs,
            vec![PPath(bin.clone()), PPath("/nonexistent/bin".into())]
        );
        assert_eq!(
            r.site_dirs,
            vec![PPath(root.join("venv/lib/python3.11/site-packages"))]
        );
        assert_eq!(
            r.watches[0].globs,
            vec![
                format!("{}/tests/**", repo.display()),
                format!("{}/*", bin.display()),
                "/nonexistent/bin/*".to_owned(),
                format!("{}/venv/lib/python3.11/site-packages/*.pth", root.display()),
                format!("{}/venv/pyvenv.cfg", root.display()),
            ]
            .into_iter()
            .chain(above(&repo).iter().map(|d| {
                let d = d.as_path().display().to_string();
                format!("{}/conftest.py", d.trim_end_matches('/'))
            }))
            .collect::<Vec<_>>()
        );
        assert_eq!(r.prefix_dirs, vec![PPath(root.join("venv"))]);
    }
}
