//! `sanitize`: a copy of a repository that holds exactly its base's history, made by git itself.

use std::{
    fs,
    path::{Path, PathBuf},
};

use super::{Git, git_command, git_in, text};

/// Makes a git directory holding exactly the history of `base` (a full commit id) of `repo`,
/// at `into/.git`, with `repo`'s working tree as its work tree: HEAD on the branch `repo` has
/// checked out (detached when it has none), an index of `base`, no other ref, no reflog, no
/// remote. Returns the new git directory.
pub fn sanitize(repo: &Path, base: &str, into: &Path) -> Result<PathBuf, String> {
    let g = Git::open(repo)?;
    let owner = g.owner;
    fs::create_dir_all(into).map_err(|e| format!("cannot create {}: {e}", into.display()))?;
    // The copy is made by the repository's owner, like everything git does here.
    std::os::unix::fs::lchown(into, Some(owner.0), Some(owner.1)).map_err(|e| {
        format!(
            "cannot hand {} to the repository's owner: {e}",
            into.display()
        )
    })?;
    git_in(into, owner, &["init", "--quiet"])?;
    let branch = g
        .run(&["symbolic-ref", "--quiet", "--short", "HEAD"])
        .ok()
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .filter(|b| !b.is_empty());
    let target = match &branch {
        Some(b) => format!("refs/heads/{b}"),
        None => "refs/aet/base".into(),
    };
    let src = g
        .dir()
        .to_str()
        .ok_or_else(|| format!("{}: not a UTF-8 path", g.dir().display()))?
        .to_owned();
    git_in(
        into,
        owner,
        &[
            "fetch",
            "--quiet",
            "--no-tags",
            // The new repository's HEAD names git's default branch, which may be the one
            // fetched into.
            "--update-head-ok",
            // Local transports drop command-line configuration for the serving side, which
            // serves from the shadow (aet's config) all the same.
            "--upload-pack=git -c 'safe.directory=*' -c core.hooksPath=/dev/null upload-pack",
            "--no-write-fetch-head",
            &src,
            &format!("{base}:{target}"),
        ],
    )?;
    let gitdir = into.join(".git");
    match &branch {
        Some(_) => {
            git_in(into, owner, &["symbolic-ref", "HEAD", &target])?;
        }
        None => {
            git_in(into, owner, &["update-ref", "--no-deref", "HEAD", base])?;
            git_in(into, owner, &["update-ref", "-d", &target])?;
        }
    }
    let _ = fs::remove_dir_all(gitdir.join("logs"));
    // Whatever the new repository's default branch was, only the target is left.
    let others = text(&git_in(
        into,
        owner,
        &["for-each-ref", "--format=%(refname)"],
    )?);
    for r in others.lines().filter(|r| *r != target) {
        git_in(into, owner, &["update-ref", "-d", r])?;
    }
    // The index of base, refreshed against the real working tree.
    let with_tree = |args: &[&str]| {
        let mut c = git_command(owner);
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
