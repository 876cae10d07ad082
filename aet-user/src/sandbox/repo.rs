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
    os::unix::{
        fs::{MetadataExt as _, PermissionsExt as _},
        process::CommandExt as _,
    },
    path::{Path, PathBuf},
    process::Command,
};

/// Git pointed at a repository without anything the repository controls: a *shadow* git
/// directory (private, made for the call) whose `config`, `HEAD` and `shallow` aet writes, and
/// whose `refs`, `packed-refs`, `reftable` and `objects` are links to the repository's. So no
/// hook, filter, fsmonitor, promisor remote, `uploadpack`, include or any other setting of the
/// repository's `config` is read, `info/grafts` is not applied, replace refs are ignored, lazy
/// fetches and every transport but the local one are off, and git runs as the repository's
/// owner with no capabilities and no_new_privs (the least privilege that reads it), never as
/// root with capabilities.
pub struct Git {
    shadow: tempfile::TempDir,
    owner: (u32, u32),
}

impl Git {
    /// The shadow of `repo` (its `.git` directory must be a directory).
    pub fn open(repo: &Path) -> Result<Self, String> {
        let gitdir = repo.join(".git");
        let meta = fs::symlink_metadata(&gitdir)
            .map_err(|e| format!("cannot read {}: {e}", gitdir.display()))?;
        if !meta.is_dir() {
            return Err(format!(
                "{} is not a directory (a repository with its own .git directory is needed; \
                 worktrees and submodule gitfiles are not supported)",
                gitdir.display()
            ));
        }
        let owner = (meta.uid(), meta.gid());
        let shadow = tempfile::Builder::new()
            .prefix("aet-git-")
            .tempdir()
            .map_err(|e| format!("cannot make a private git directory: {e}"))?;
        let sh = shadow.path();
        let fail =
            |what: &str, e: std::io::Error| format!("cannot prepare git's view ({what}): {e}");
        let settings = RepoSettings::read(&gitdir)?;
        let mut config = format!(
            "[core]\n\trepositoryformatversion = {}\n\tbare = true\n",
            if settings.extensions.is_empty() { 0 } else { 1 }
        );
        if !settings.extensions.is_empty() {
            config += "[extensions]\n";
            for (k, v) in &settings.extensions {
                config += &format!("\t{k} = {v}\n");
            }
        }
        fs::write(sh.join("config"), config).map_err(|e| fail("config", e))?;
        // HEAD as the repository has it when it is a ref or an id; git needs one to see a
        // git directory.
        let head = read_text(&gitdir.join("HEAD"))?.unwrap_or_default();
        let head = head.trim();
        let head = if head.starts_with("ref: refs/") || is_hex_id(head) {
            format!("{head}\n")
        } else {
            "ref: refs/heads/aet-no-head\n".to_owned()
        };
        fs::write(sh.join("HEAD"), head).map_err(|e| fail("HEAD", e))?;
        for name in ["refs", "packed-refs", "reftable", "objects"] {
            let real = gitdir.join(name);
            if fs::symlink_metadata(&real).is_ok() {
                std::os::unix::fs::symlink(&real, sh.join(name)).map_err(|e| fail(name, e))?;
            }
        }
        if let Some(text) = read_text(&gitdir.join("shallow"))? {
            fs::write(sh.join("shallow"), text).map_err(|e| fail("shallow", e))?;
        }
        if !sh.join("refs").exists() {
            fs::create_dir(sh.join("refs")).map_err(|e| fail("refs", e))?;
        }
        // The owner reads its own view: everything in it is aet's, and private.
        for e in fs::read_dir(sh).map_err(|e| fail("list", e))?.flatten() {
            std::os::unix::fs::lchown(e.path(), Some(owner.0), Some(owner.1))
                .map_err(|e| fail("chown", e))?;
        }
        std::os::unix::fs::lchown(sh, Some(owner.0), Some(owner.1))
            .map_err(|e| fail("chown", e))?;
        fs::set_permissions(sh, fs::Permissions::from_mode(0o700)).map_err(|e| fail("chmod", e))?;
        Ok(Self { shadow, owner })
    }

    /// The shadow git directory (for a local fetch from it).
    pub fn dir(&self) -> &Path {
        self.shadow.path()
    }

    /// Runs git on the shadow and returns stdout.
    pub fn run(&self, args: &[&str]) -> Result<Vec<u8>, String> {
        let mut c = git_command(self.owner);
        c.env("GIT_DIR", self.dir());
        output(c, args)
    }
}

/// What aet takes from a repository's own `config` (read as a file, with no include followed):
/// the extensions that say how to read it, and whether it is a partial clone.
struct RepoSettings {
    extensions: Vec<(String, String)>,
    promisors: Vec<String>,
}

impl RepoSettings {
    fn read(gitdir: &Path) -> Result<Self, String> {
        let path = gitdir.join("config");
        let mut out = Self {
            extensions: Vec::new(),
            promisors: Vec::new(),
        };
        if !path.exists() {
            return Ok(out);
        }
        let mut c = git_command(owner_of(gitdir));
        c.arg("config")
            .arg("--file")
            .arg(&path)
            .args(["--no-includes", "--null", "--list"]);
        let list = output(c, &[]).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        for item in list.split(|b| *b == 0).filter(|i| !i.is_empty()) {
            let item = text(item);
            let (key, value) = item.split_once('\n').unwrap_or((&item, "true"));
            let key = key.to_ascii_lowercase();
            match key.as_str() {
                "extensions.objectformat" | "extensions.refstorage" => out
                    .extensions
                    .push((key["extensions.".len()..].to_owned(), value.to_owned())),
                "extensions.partialclone" => out
                    .promisors
                    .push(format!("extensions.partialClone = {value}")),
                k if k.starts_with("remote.") && k.ends_with(".promisor") && value != "false" => {
                    out.promisors.push(format!("{key} = {value}"))
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

fn owner_of(p: &Path) -> (u32, u32) {
    fs::symlink_metadata(p)
        .map(|m| (m.uid(), m.gid()))
        .unwrap_or((0, 0))
}

fn output(mut c: Command, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = c
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

/// Runs git in `dir` (a git directory aet made, with aet's config) as `owner`.
fn git_in(dir: &Path, owner: (u32, u32), args: &[&str]) -> Result<Vec<u8>, String> {
    let mut c = git_command(owner);
    c.arg("-C").arg(dir);
    output(c, args)
}

/// Git with no system, user or command-line configuration but aet's, no prompt, no lazy fetch,
/// no replace objects, only the local transport, as `owner` without capabilities.
fn git_command((uid, gid): (u32, u32)) -> Command {
    let mut c = Command::new(find_git());
    c.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_NO_REPLACE_OBJECTS", "1")
        .env("GIT_NO_LAZY_FETCH", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ALLOW_PROTOCOL", "file")
        .env("GIT_PROTOCOL_FROM_USER", "0")
        .env("GIT_CEILING_DIRECTORIES", "/")
        .env("LC_ALL", "C")
        .current_dir("/");
    // Command-line configuration, which git's children (upload-pack) inherit too.
    let config = [
        ("safe.directory", "*"),
        ("core.hooksPath", "/dev/null"),
        ("core.fsmonitor", "false"),
        ("protocol.allow", "never"),
        ("protocol.file.allow", "always"),
        ("uploadpack.allowFilter", "false"),
        ("fetch.fsckObjects", "false"),
    ];
    c.env("GIT_CONFIG_COUNT", config.len().to_string());
    for (i, (k, v)) in config.iter().enumerate() {
        c.env(format!("GIT_CONFIG_KEY_{i}"), k)
            .env(format!("GIT_CONFIG_VALUE_{i}"), v);
    }
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        c.pre_exec(move || drop_to(uid, gid));
    }
    c
}

/// In the child: the owner's ids, no supplementary groups, no capabilities, no_new_privs.
fn drop_to(uid: u32, gid: u32) -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let err = std::io::Error::last_os_error;
    // SAFETY: plain syscalls on values that live through them.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setresgid(gid, gid, gid) != 0
            || libc::setresuid(uid, uid, uid) != 0
        {
            return Err(err());
        }
        let header = Header {
            version: 0x2008_0522,
            pid: 0,
        };
        let data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0
            || libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
        {
            return Err(err());
        }
    }
    Ok(())
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
    use std::io::Read as _;
    let mut b = Vec::new();
    match open_regular(p).and_then(|f| f.map(|mut f| f.read_to_end(&mut b)).transpose()) {
        Ok(Some(_)) => Ok(Some(text(&b))),
        Ok(None) => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", p.display())),
    }
}

/// A file of the repository opened for reading, only when it is a regular file: no link is
/// followed (a repository's file may name any file of the machine, which aet reads as root and
/// partly copies into git's view, the owner's) and no FIFO or device is opened (it would block
/// the guard). `Ok(None)` when there is none.
fn open_regular(p: &Path) -> std::io::Result<Option<fs::File>> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(p)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(std::io::Error::other(
                "it is a symbolic link, which aet does not follow in a repository",
            ));
        }
        Err(e) => return Err(e),
    };
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("it is not a regular file"));
    }
    Ok(Some(f))
}

/// The full name of `base` in `repo` (a commit).
pub fn resolve(repo: &Path, base: &str) -> Result<String, String> {
    resolve_in(&Git::open(repo)?, repo, base)
}

fn resolve_in(g: &Git, repo: &Path, base: &str) -> Result<String, String> {
    let out = g
        .run(&[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{base}^{{commit}}"),
        ])
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
    let all = g.run(&[
        "cat-file",
        "--batch-all-objects",
        "--batch-check=%(objectname) %(objecttype)",
    ])?;
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
    out.extend(inventory(&gitdir, &history, &messages, &short(&base))?);
    out.extend(work_tree_history(repo, &g, &history)?);
    Ok(out)
}

/// Everything else in the git directory that is not one of git's ordinary files, or that holds
/// history: what git would show the agent (grafts, a commit message in progress, a patch being
/// applied, recorded resolutions, a submodule's repository, LFS objects) or objects it has not
/// indexed (a pack being received, a quarantine). Unknown entries are named too: nothing
/// unchecked passes.
fn inventory(
    gitdir: &Path,
    history: &HashSet<String>,
    messages: &HashSet<&str>,
    base: &str,
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
                    if let Some(id) = ids_in(&t).into_iter().find(|id| !history.contains(*id)) {
                        let rel = f.strip_prefix(gitdir).unwrap_or(&f).display().to_string();
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
fn objects_not_indexed(objects: &Path) -> Vec<String> {
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
const WORK_TREE_BUDGET: usize = 500_000;

/// History in the work tree: a nested repository (`.git` below the top), a git bundle or a pack
/// file whatever its name (found by their signatures; a bundle naming commits outside the
/// base's history is named with them). Links are not followed, only regular files opened.
fn work_tree_history(
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
