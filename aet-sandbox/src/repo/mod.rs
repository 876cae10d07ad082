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
    fs,
    os::unix::{
        fs::{MetadataExt as _, PermissionsExt as _},
        process::CommandExt as _,
    },
    path::{Path, PathBuf},
    process::Command,
};

pub mod decoy_ref;
mod leaks;
mod sanitize;

use leaks::is_hex_id;
pub use leaks::leaks;
pub use sanitize::sanitize;

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
