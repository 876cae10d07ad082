//! `verify`: whatever in a repository reaches past its base commit (refs, head files, reflogs,
//! alternates, objects reachable or not), each leak named.

use std::{
    collections::HashSet,
    fs,
    path::{Path, PathBuf},
};

use aet_ledger::plan::RepoDecoy;

use super::{Git, RepoSettings, open_regular, read_text, resolve_in, text};

pub(super) fn is_hex_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Object ids named in a file's text (a head file, a reflog).
pub(super) fn ids_in(text: &str) -> Vec<&str> {
    text.split(|c: char| c.is_whitespace())
        .filter(|w| is_hex_id(w) && w.bytes().any(|b| b != b'0'))
        .collect()
}

pub(super) fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
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
/// when the repository holds only the base's history and the `decoys` aet wrote into it (each
/// ref naming exactly its commit, and those commits' objects).
pub fn leaks(repo: &Path, base: &str, decoys: &[RepoDecoy]) -> Result<Vec<String>, String> {
    let gitdir = repo.join(".git");
    let g = Git::open(repo)?;
    let base = resolve_in(&g, repo, base)?;
    let history: HashSet<String> = text(&g.run(&["rev-list", &base])?)
        .lines()
        .map(str::to_owned)
        .collect();
    // Missing objects are listed, never fetched (a partial clone's promisor is not in git's
    // view, and lazy fetches are off).
    let listing = text(&g.run(&["rev-list", "--objects", "--missing=print", &base])?);
    let mut reachable: HashSet<String> = HashSet::new();
    let mut missing: Vec<&str> = Vec::new();
    for l in listing.lines() {
        match l.strip_prefix('?') {
            Some(id) => missing.push(id),
            None => {
                reachable.extend(l.split(' ').next().map(str::to_owned));
            }
        }
    }
    let short = |id: &str| id[..12.min(id.len())].to_owned();
    let mut out = Vec::new();
    // Refs (loose and packed), peeled to what they finally name.
    let refs = g.run(&[
        "for-each-ref",
        "--format=%(refname) %(objectname) %(*objectname)",
    ])?;
    for l in text(&refs).lines() {
        let mut f = l.split(' ');
        let (Some(name), Some(id)) = (f.next(), f.next()) else {
            continue;
        };
        let target = f.next().filter(|x| !x.is_empty()).unwrap_or(id);
        let decoy = decoys
            .iter()
            .any(|d| d.git_ref == name && d.commit == target);
        if !decoy && !history.contains(target) && !reachable.contains(target) {
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
    let all = g.run(&[
        "cat-file",
        "--batch-all-objects",
        "--batch-check=%(objectname) %(objecttype)",
    ])?;
    let mut stray: Vec<(String, String)> = Vec::new();
    let planted: HashSet<&str> = decoys
        .iter()
        .flat_map(|d| d.objects.iter().map(String::as_str))
        .collect();
    for l in text(&all).lines() {
        if let Some((id, ty)) = l.split_once(' ')
            && !reachable.contains(id)
            && !planted.contains(id)
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
    if let Some(first) = missing.first() {
        out.push(format!(
            "{} object(s) of base's history are missing (e.g. {}): they are elsewhere, and aet \
             never lets git fetch them",
            missing.len(),
            short(first)
        ));
    }
    let settings = RepoSettings::read(&gitdir)?;
    for p in &settings.promisors {
        out.push(format!(
            "config: {p}: a partial clone, whose missing objects git fetches from a remote on \
             demand (aet never lets it: make a full clone, or use history = \"sanitize\")"
        ));
    }
    let messages = text(&g.run(&["log", "--format=%B%x00", &base])?);
    let messages: HashSet<&str> = messages.split('\0').map(str::trim).collect();
    out.extend(inventory(
        &gitdir,
        &history,
        &messages,
        &short(&base),
        decoys,
    )?);
    out.extend(work_tree_history(repo, &g, &history)?);
    Ok(out)
}

/// Everything else in the git directory that is not one of git's ordinary files, or that holds
/// history: what git would show the agent (grafts, a commit message in progress, a patch being
/// applied, recorded resolutions, a submodule's repository, LFS objects) or objects it has not
/// indexed (a pack being received, a quarantine). Unknown entries are named too: nothing
/// unchecked passes.
pub(super) fn inventory(
    gitdir: &Path,
    history: &HashSet<String>,
    messages: &HashSet<&str>,
    base: &str,
    decoys: &[RepoDecoy],
) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let entries =
        fs::read_dir(gitdir).map_err(|e| format!("cannot list {}: {e}", gitdir.display()))?;
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let p = gitdir.join(&name);
        let is_dir = fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir());
        let nonempty_dir = || fs::read_dir(&p).is_ok_and(|mut d| d.next().is_some());
        match name.as_str() {
            // Checked elsewhere (refs through git and file by file below, head files, reflogs,
            // worktrees), or not history.
            "HEAD" | "ORIG_HEAD" | "FETCH_HEAD" | "MERGE_HEAD" | "CHERRY_PICK_HEAD"
            | "REVERT_HEAD" | "AUTO_MERGE" | "BISECT_HEAD" | "config" | "description" | "hooks"
            | "index" | "logs" | "packed-refs" | "reftable" | "worktrees" => {}
            "refs" => {
                let mut files = Vec::new();
                files_under(&p, &mut files);
                for f in files {
                    let Some(t) = read_text(&f)? else { continue };
                    let rel = f.strip_prefix(gitdir).unwrap_or(&f).display().to_string();
                    if decoys
                        .iter()
                        .any(|d| d.git_ref == rel && t.trim() == d.commit)
                    {
                        continue;
                    }
                    if let Some(id) = ids_in(&t).into_iter().find(|id| !history.contains(*id)) {
                        out.push(format!(
                            "{rel} names {}, which is not in the history of base {base}",
                            &id[..12]
                        ));
                    }
                }
            }
            "shallow" => {
                let t = read_text(&p)?.unwrap_or_default();
                if let Some(id) = ids_in(&t).into_iter().find(|id| !history.contains(*id)) {
                    out.push(format!(
                        "shallow names {}, which is not in the history of base {base}",
                        &id[..12]
                    ));
                }
            }
            "COMMIT_EDITMSG" => {
                let t = read_text(&p)?.unwrap_or_default();
                let msg: String = t
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .collect::<Vec<_>>()
                    .join("\n");
                if !msg.trim().is_empty() && !messages.contains(msg.trim()) {
                    out.push(format!(
                        "COMMIT_EDITMSG holds a commit message that no commit of base {base}'s \
                         history has"
                    ));
                }
            }
            "branches" if !nonempty_dir() => {}
            "info" => {
                for e in fs::read_dir(&p).into_iter().flatten().flatten() {
                    let n = e.file_name().to_string_lossy().into_owned();
                    match n.as_str() {
                        "exclude" | "attributes" | "sparse-checkout" => {}
                        "grafts" => out.push(
                            "info/grafts rewrites the parents git shows (any commit can be made \
                             an ancestor of base): it counts as history"
                                .into(),
                        ),
                        "refs" => {
                            let t = read_text(&e.path())?.unwrap_or_default();
                            if let Some(id) =
                                ids_in(&t).into_iter().find(|id| !history.contains(*id))
                            {
                                out.push(format!(
                                    "info/refs names {}, which is not in the history of base \
                                     {base}",
                                    &id[..12]
                                ));
                            }
                        }
                        _ => out.push(format!(
                            "info/{n} is not a file aet checks: it may hold history (remove it, \
                             or use history = \"sanitize\")"
                        )),
                    }
                }
            }
            "objects" => out.extend(objects_not_indexed(&p)),
            "modules" => out.push(
                "modules/ holds submodule repositories, whose history aet does not check \
                 (remove them, or use history = \"sanitize\")"
                    .into(),
            ),
            "lfs" => out.push(
                "lfs/ holds Git LFS objects, any of which may be a later version of a file \
                 (remove it, or use history = \"sanitize\")"
                    .into(),
            ),
            "rr-cache" if nonempty_dir() => out.push(
                "rr-cache/ holds recorded conflict resolutions (their postimages are later \
                 versions of files)"
                    .into(),
            ),
            "rebase-apply" | "rebase-merge" | "sequencer" => out.push(format!(
                "{name}/ is an operation in progress (patches or commits being applied)"
            )),
            "MERGE_MSG" | "SQUASH_MSG" | "TAG_EDITMSG" | "MERGE_RR" | "MERGE_MODE"
            | "BISECT_LOG" | "NOTES_EDITMSG" | "EDIT_DESCRIPTION" => out.push(format!(
                "{name} is left from an operation in progress: it may describe or hold later work"
            )),
            _ => out.push(format!(
                "{name}{} is not something aet checks: it may hold history (remove it, or use \
                 history = \"sanitize\")",
                if is_dir { "/" } else { "" }
            )),
        }
    }
    Ok(out)
}

/// What in `objects/` git has not indexed, or is not git's: a pack without its index (one being
/// received: `tmp_pack_*`), a quarantine (`incoming-*`), a temporary object, anything else.
pub(super) fn objects_not_indexed(objects: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    let list = |d: &Path| -> Vec<(String, bool)> {
        let mut v: Vec<(String, bool)> = fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.file_type().is_ok_and(|t| t.is_dir()),
                )
            })
            .collect();
        v.sort();
        v
    };
    for (name, dir) in list(objects) {
        match name.as_str() {
            n if n.len() == 2 && hex(n) && dir => {
                for (f, _) in list(&objects.join(n)) {
                    if !(hex(&f) && (f.len() == 38 || f.len() == 62)) {
                        out.push(format!("objects/{n}/{f} is not an object git reads"));
                    }
                }
            }
            "pack" if dir => {
                let files = list(&objects.join("pack"));
                let names: HashSet<&str> = files.iter().map(|(f, _)| f.as_str()).collect();
                for (f, _) in &files {
                    let (stem, ext) = f.rsplit_once('.').unwrap_or((f, ""));
                    let ours = stem.strip_prefix("pack-").is_some_and(hex)
                        && matches!(
                            ext,
                            "pack" | "idx" | "rev" | "bitmap" | "keep" | "mtimes" | "promisor"
                        );
                    if !ours {
                        out.push(format!(
                            "objects/pack/{f} is not a pack git has indexed (a pack being \
                             received holds objects too)"
                        ));
                    } else if ext == "pack" && !names.contains(format!("{stem}.idx").as_str()) {
                        out.push(format!(
                            "objects/pack/{f} has no index: git does not see its objects"
                        ));
                    }
                }
            }
            "info" if dir => {
                for (f, _) in list(&objects.join("info")) {
                    if !matches!(
                        f.as_str(),
                        "packs"
                            | "alternates"
                            | "http-alternates"
                            | "commit-graph"
                            | "commit-graphs"
                    ) {
                        out.push(format!("objects/info/{f} is not a file aet checks"));
                    }
                }
            }
            _ => out.push(format!(
                "objects/{name} is not where git keeps objects it reads (a quarantine or a \
                 temporary object holds objects too)"
            )),
        }
    }
    out
}

/// Most work-tree entries looked at for history hidden outside `.git`.
pub(super) const WORK_TREE_BUDGET: usize = 500_000;

/// History in the work tree: a nested repository (`.git` below the top), a git bundle or a pack
/// file whatever its name (found by their signatures; a bundle naming commits outside the
/// base's history is named with them). Links are not followed, only regular files opened.
pub(super) fn work_tree_history(
    repo: &Path,
    g: &Git,
    history: &HashSet<String>,
) -> Result<Vec<String>, String> {
    use std::io::Read as _;
    let mut out = Vec::new();
    let mut stack = vec![repo.to_owned()];
    let mut seen = 0usize;
    while let Some(d) = stack.pop() {
        let rd = fs::read_dir(&d).map_err(|e| format!("cannot list {}: {e}", d.display()))?;
        for e in rd {
            let e = e.map_err(|e| format!("cannot list {}: {e}", d.display()))?;
            seen += 1;
            if seen > WORK_TREE_BUDGET {
                return Err(format!(
                    "the work tree has more than {WORK_TREE_BUDGET} entries: too many to check \
                     for hidden history (use history = \"sanitize\")"
                ));
            }
            let p = e.path();
            let rel = p.strip_prefix(repo).unwrap_or(&p).display().to_string();
            let t = e.file_type().map_err(|e| format!("{}: {e}", p.display()))?;
            if e.file_name() == ".git" {
                if d != repo {
                    out.push(format!(
                        "{rel} is a nested repository, whose history aet does not check"
                    ));
                }
                continue;
            }
            if t.is_dir() {
                stack.push(p);
                continue;
            }
            if !t.is_file() {
                continue;
            }
            let mut head = [0u8; 16];
            let n = match open_regular(&p) {
                Ok(Some(mut f)) => f.read(&mut head).unwrap_or(0),
                _ => 0,
            };
            let head = &head[..n];
            if head.starts_with(b"# v2 git bundle") || head.starts_with(b"# v3 git bundle") {
                let path = p.to_string_lossy().into_owned();
                let heads = g.run(&["bundle", "list-heads", &path]).map(|b| text(&b));
                match heads {
                    Ok(h) => {
                        let ids: Vec<&str> = ids_in(&h)
                            .into_iter()
                            .filter(|id| !history.contains(*id))
                            .collect();
                        out.push(if ids.is_empty() {
                            format!("{rel} is a git bundle (objects git can read)")
                        } else {
                            format!(
                                "{rel} is a git bundle of commits outside the base's history \
                                 (e.g. {})",
                                &ids[0][..12]
                            )
                        });
                    }
                    Err(_) => out.push(format!("{rel} is a git bundle (objects git can read)")),
                }
            } else if head.len() >= 8
                && &head[..4] == b"PACK"
                && matches!(head[7], 2 | 3)
                && head[4..7] == [0, 0, 0]
            {
                out.push(format!("{rel} is a git pack file (objects git can read)"));
            }
        }
    }
    Ok(out)
}
