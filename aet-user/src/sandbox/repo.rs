//! Task repositories in the sandbox spec (`[[repo]] path, base, history`): the check that nothing
//! in a repository reaches past its base commit, and the sanitized copy that holds exactly the
//! base's history. Both use git itself: its object walk, never a parser of packs.
//!
//! What counts as a leak: a ref (branch, tag, remote, stash, replace, notes: every ref git lists)
//! or a head file (`HEAD`, `ORIG_HEAD`, `FETCH_HEAD`, `MERGE_HEAD`, `CHERRY_PICK_HEAD`,
//! `REVERT_HEAD`, `AUTO_MERGE`, a worktree's `HEAD`) that names a commit outside the base's
//! history; a reflog entry that does; alternates (objects borrowed from elsewhere); and any object
//! in the repository, reachable or not, that is not reachable from the base.

use std::{
    collections::HashSet,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

/// Runs git on `repo` (its `.git`), with no system or user configuration, and returns stdout.
fn git(repo: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = git_command(repo)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

fn git_command(repo: &Path) -> Command {
    let mut c = Command::new(find_git());
    c.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("LC_ALL", "C")
        // Command-line configuration that git's children (upload-pack) inherit too: the
        // repository may belong to the agent's uid already.
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "safe.directory")
        .env("GIT_CONFIG_VALUE_0", "*")
        .arg("-C")
        .arg(repo);
    c
}

fn find_git() -> PathBuf {
    ["/usr/bin/git", "/usr/local/bin/git", "/bin/git"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| "git".into())
}

/// Git's output or a file of the repository as text: ref names, paths and reflog messages need
/// not be UTF-8, the object ids in them are.
fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A file of the repository as text: `None` when it is not there; an error when it is there
/// but cannot be read (nothing unread is taken as clean).
fn read_text(p: &Path) -> Result<Option<String>, String> {
    match fs::read(p) {
        Ok(b) => Ok(Some(text(&b))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", p.display())),
    }
}

/// The full name of `base` in `repo` (a commit).
pub fn resolve(repo: &Path, base: &str) -> Result<String, String> {
    let out = git(
        repo,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{base}^{{commit}}"),
        ],
    )
    .map_err(|_| format!("{base:?} is not a commit of {}", repo.display()))?;
    Ok(String::from_utf8_lossy(&out).trim().to_owned())
}

fn is_hex_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Object ids named in a file's text (a head file, a reflog).
fn ids_in(text: &str) -> Vec<&str> {
    text.split(|c: char| c.is_whitespace())
        .filter(|w| is_hex_id(w) && w.bytes().any(|b| b != b'0'))
        .collect()
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                files_under(&p, out);
            } else {
                out.push(p);
            }
        }
    }
}

/// Everything in `repo` that reaches past `base` (a full commit id), one sentence each; empty
/// when the repository holds only the base's history.
pub fn leaks(repo: &Path, base: &str) -> Result<Vec<String>, String> {
    let gitdir = repo.join(".git");
    if !gitdir.is_dir() {
        return Err(format!(
            "{} is not a directory (a repository with its own .git directory is needed; \
             worktrees and submodule gitfiles are not supported)",
            gitdir.display()
        ));
    }
    let base = resolve(repo, base)?;
    let history: HashSet<String> = text(&git(repo, &["rev-list", &base])?)
        .lines()
        .map(str::to_owned)
        .collect();
    let reachable: HashSet<String> = text(&git(repo, &["rev-list", "--objects", &base])?)
        .lines()
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect();
    let short = |id: &str| id[..12.min(id.len())].to_owned();
    let mut out = Vec::new();
    // Refs (loose and packed), peeled to what they finally name.
    let refs = git(
        repo,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname) %(*objectname)",
        ],
    )?;
    for l in text(&refs).lines() {
        let mut f = l.split(' ');
        let (Some(name), Some(id)) = (f.next(), f.next()) else {
            continue;
        };
        let target = f.next().filter(|x| !x.is_empty()).unwrap_or(id);
        if !history.contains(target) && !reachable.contains(target) {
            out.push(format!(
                "ref {name} names {}, which is not in the history of base {}",
                short(target),
                short(&base)
            ));
        }
    }
    // Head files, the repository's and its worktrees'.
    let mut heads: Vec<PathBuf> = [
        "HEAD",
        "ORIG_HEAD",
        "FETCH_HEAD",
        "MERGE_HEAD",
        "CHERRY_PICK_HEAD",
        "REVERT_HEAD",
        "AUTO_MERGE",
        "BISECT_HEAD",
    ]
    .iter()
    .map(|h| gitdir.join(h))
    .collect();
    if let Ok(rd) = fs::read_dir(gitdir.join("worktrees")) {
        for e in rd.flatten() {
            heads.push(e.path().join("HEAD"));
            heads.push(e.path().join("ORIG_HEAD"));
        }
    }
    for h in heads {
        let Some(text) = read_text(&h)? else {
            continue;
        };
        let rel = h.strip_prefix(&gitdir).unwrap_or(&h).display().to_string();
        if let Some(id) = ids_in(&text).into_iter().find(|id| !history.contains(*id)) {
            out.push(format!(
                "{rel} names {}, which is not in the history of base {}",
                short(id),
                short(&base)
            ));
        }
    }
    // Reflogs: every entry's old and new value.
    let mut logs = Vec::new();
    files_under(&gitdir.join("logs"), &mut logs);
    if let Ok(rd) = fs::read_dir(gitdir.join("worktrees")) {
        for e in rd.flatten() {
            files_under(&e.path().join("logs"), &mut logs);
        }
    }
    logs.sort();
    for l in logs {
        let Some(text) = read_text(&l)? else {
            continue;
        };
        let bad: Vec<&str> = text
            .lines()
            .flat_map(|line| line.split(' ').take(2))
            .filter(|id| is_hex_id(id) && id.bytes().any(|b| b != b'0') && !history.contains(*id))
            .collect();
        if let Some(first) = bad.first() {
            out.push(format!(
                "reflog {} has {} entr{} outside the history of base {} (e.g. {})",
                l.strip_prefix(&gitdir).unwrap_or(&l).display(),
                bad.len(),
                if bad.len() == 1 { "y" } else { "ies" },
                short(&base),
                short(first)
            ));
        }
    }
    for alt in ["objects/info/alternates", "objects/info/http-alternates"] {
        if let Some(text) = read_text(&gitdir.join(alt))?
            && !text.trim().is_empty()
        {
            out.push(format!(
                "{alt} borrows objects from elsewhere: {}",
                text.trim().replace('\n', ", ")
            ));
        }
    }
    // Every object in the repository, reachable or not.
    let all = git(
        repo,
        &[
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objectname) %(objecttype)",
        ],
    )?;
    let mut stray: Vec<(String, String)> = Vec::new();
    for l in text(&all).lines() {
        if let Some((id, ty)) = l.split_once(' ')
            && !reachable.contains(id)
        {
            stray.push((id.to_owned(), ty.to_owned()));
        }
    }
    if !stray.is_empty() {
        let shown: Vec<String> = stray
            .iter()
            .take(8)
            .map(|(id, ty)| format!("{ty} {}", short(id)))
            .collect();
        out.push(format!(
            "{} object(s) not reachable from base {}: {}{}",
            stray.len(),
            short(&base),
            shown.join(", "),
            if stray.len() > 8 { ", ..." } else { "" }
        ));
    }
    Ok(out)
}

/// Gives a sanitized copy (aet made every file of it; nothing in it is a link to elsewhere) to
/// the agent's uid and gid, links themselves never followed.
pub fn hand_over(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d)? {
            let e = e?;
            let p = e.path();
            std::os::unix::fs::lchown(&p, Some(uid), Some(gid))?;
            if e.file_type()?.is_dir() {
                stack.push(p);
            }
        }
    }
    Ok(())
}

/// Makes a git directory holding exactly the history of `base` (a full commit id) of `repo`,
/// at `into/.git`, with `repo`'s working tree as its work tree: HEAD on the branch `repo` has
/// checked out (detached when it has none), an index of `base`, no other ref, no reflog, no
/// remote. Returns the new git directory.
pub fn sanitize(repo: &Path, base: &str, into: &Path) -> Result<PathBuf, String> {
    fs::create_dir_all(into).map_err(|e| format!("cannot create {}: {e}", into.display()))?;
    git(into, &["init", "--quiet"])?;
    let branch = git(repo, &["symbolic-ref", "--quiet", "--short", "HEAD"])
        .ok()
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .filter(|b| !b.is_empty());
    let target = match &branch {
        Some(b) => format!("refs/heads/{b}"),
        None => "refs/aet/base".into(),
    };
    let src = repo
        .join(".git")
        .to_str()
        .ok_or_else(|| format!("{}: not a UTF-8 path", repo.display()))?
        .to_owned();
    git(
        into,
        &[
            "fetch",
            "--quiet",
            "--no-tags",
            // Local transports drop command-line configuration for the serving side.
            "--upload-pack=git -c 'safe.directory=*' upload-pack",
            "--no-write-fetch-head",
            &src,
            &format!("{base}:{target}"),
        ],
    )?;
    let gitdir = into.join(".git");
    match &branch {
        Some(_) => {
            git(into, &["symbolic-ref", "HEAD", &target])?;
        }
        None => {
            git(into, &["update-ref", "--no-deref", "HEAD", base])?;
            git(into, &["update-ref", "-d", &target])?;
        }
    }
    let _ = fs::remove_dir_all(gitdir.join("logs"));
    // The index of base, refreshed against the real working tree.
    let with_tree = |args: &[&str]| {
        let mut c = git_command(into);
        c.env("GIT_DIR", &gitdir)
            .env("GIT_WORK_TREE", repo)
            .args(args);
        c.output()
    };
    let r = with_tree(&["read-tree", base]).map_err(|e| format!("git read-tree: {e}"))?;
    if !r.status.success() {
        return Err(format!(
            "git read-tree {base}: {}",
            String::from_utf8_lossy(&r.stderr).trim()
        ));
    }
    // Exit status 1 only says the working tree differs from base: that is the task's state.
    let _ = with_tree(&["update-index", "-q", "--refresh"]);
    Ok(gitdir)
}
