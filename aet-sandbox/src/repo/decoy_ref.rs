//! A decoy ref in a sanitized copy: a "future" commit on top of base, written by git itself as
//! loose objects (so each has a file of its own the record can name), on a ref the agent can list.

use std::{
    io::Write as _,
    path::Path,
    process::{Command, Stdio},
};

use aet_ledger::plan::RepoDecoy;

use super::{git_command, owner_of, text};

/// What [`plant`] wrote.
pub struct Planted {
    pub record: RepoDecoy,
    /// The commit's object file, relative to the git directory (`objects/ab/cdef...`).
    pub commit_file: String,
    /// The files of its trees and blobs, relative to the git directory.
    pub content_files: Vec<String>,
}

/// Writes, into the sanitized git directory `gitdir`, a commit whose parent is `base` and whose
/// tree is base's with each of `files` (names at the top of the tree) holding `content`, with
/// `message`; points `git_ref` at it (no reflog). Runs git as the copy's owner.
pub fn plant(
    gitdir: &Path,
    base: &str,
    git_ref: &str,
    files: &[String],
    content: &str,
    message: &str,
) -> Result<Planted, String> {
    let owner = owner_of(gitdir);
    let git = |args: &[&str], input: Option<&[u8]>| -> Result<String, String> {
        let mut c = git_command(owner);
        c.env("GIT_DIR", gitdir);
        run(c, args, input)
    };
    git(&["check-ref-format", git_ref], None)
        .map_err(|_| format!("ref {git_ref:?} is not a valid ref name"))?;
    let head = git(&["symbolic-ref", "--quiet", "HEAD"], None).unwrap_or_default();
    if head.trim() == git_ref {
        return Err(format!(
            "ref {git_ref:?} is the branch checked out: name another (refs/remotes/origin/main)"
        ));
    }
    if git(&["rev-parse", "--verify", "--quiet", git_ref], None).is_ok() {
        return Err(format!("ref {git_ref:?} exists in the repository already"));
    }
    let blob = git(&["hash-object", "-w", "--stdin"], Some(content.as_bytes()))?;
    let blob = blob.trim();
    // Base's top tree, with the decoy's files in place of any of the same name.
    let listing = git(&["ls-tree", "-z", base], None)?;
    let mut entries: Vec<&str> = listing
        .split('\0')
        .filter(|e| !e.is_empty())
        .filter(|e| {
            let name = e.split_once('\t').map_or("", |(_, n)| n);
            !files.iter().any(|f| f == name)
        })
        .collect();
    let ours: Vec<String> = files
        .iter()
        .map(|f| format!("100644 blob {blob}\t{f}"))
        .collect();
    entries.extend(ours.iter().map(String::as_str));
    let mut input = entries.join("\0").into_bytes();
    input.push(0);
    let tree = git(&["mktree", "-z"], Some(&input))?;
    let tree = tree.trim();
    // Dated a day after base, by base's committer.
    let who = git(&["show", "-s", "--format=%cn%x00%ce%x00%ct", base], None)?;
    let mut who = who.trim_end().split('\0');
    let (name, email, time) = (
        who.next().unwrap_or("aet"),
        who.next().unwrap_or("aet@localhost"),
        who.next().and_then(|t| t.parse::<i64>().ok()).unwrap_or(0),
    );
    let date = format!("@{} +0000", time + 86_400);
    let mut c = git_command(owner);
    c.env("GIT_DIR", gitdir)
        .env("GIT_AUTHOR_NAME", name)
        .env("GIT_AUTHOR_EMAIL", email)
        .env("GIT_AUTHOR_DATE", &date)
        .env("GIT_COMMITTER_NAME", name)
        .env("GIT_COMMITTER_EMAIL", email)
        .env("GIT_COMMITTER_DATE", &date);
    let commit = run(
        c,
        &["commit-tree", "-p", base, tree],
        Some(message.as_bytes()),
    )?;
    let commit = commit.trim().to_owned();
    git(
        &[
            "-c",
            "core.logAllRefUpdates=false",
            "update-ref",
            "--no-deref",
            git_ref,
            &commit,
            "",
        ],
        None,
    )?;
    let file = |id: &str| format!("objects/{}/{}", &id[..2], &id[2..]);
    for id in [&commit[..], tree, blob] {
        let p = gitdir.join(file(id));
        if !p.is_file() {
            return Err(format!(
                "git did not write object {id} as a loose object ({} is missing)",
                p.display()
            ));
        }
    }
    Ok(Planted {
        commit_file: file(&commit),
        content_files: vec![file(tree), file(blob)],
        record: RepoDecoy {
            git_ref: git_ref.to_owned(),
            objects: vec![commit.clone(), tree.to_owned(), blob.to_owned()],
            commit,
        },
    })
}

fn run(mut c: Command, args: &[&str], input: Option<&[u8]>) -> Result<String, String> {
    c.args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().map_err(|e| format!("cannot run git: {e}"))?;
    if let Some(bytes) = input {
        let mut stdin = child.stdin.take().expect("piped");
        stdin
            .write_all(bytes)
            .map_err(|e| format!("git {}: {e}", args.join(" ")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("git {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(text(&out.stdout))
}
