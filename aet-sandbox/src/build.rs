//! From a checked spec to the bwrap arguments and the stage's plan.
//!
//! The view is layered in this order:
//!
//! 1. namespaces and process set-up (`--unshare-pid`, `--die-with-parent`, `--new-session`, …);
//! 2. every grant, base layer included, parents before children (by path depth; at equal depth:
//!    base, tmpfs, read-only binds, workspace, rw binds), so a writable state directory inside a
//!    broad read-only allow stays writable and a read-only bind inside a tmpfs is not hidden;
//! 3. every deny and mask, after all grants, so nothing granted can re-expose them;
//! 4. `/dev` and the sandbox root remounted read-only: only the workspace, the rw binds and the
//!    tmpfs blanks (`/tmp`, `/dev/shm` in the base) are writable.

use std::{
    ffi::{OsStr, OsString},
    fs, io,
    os::unix::fs::MetadataExt as _,
    path::{Component, Path, PathBuf},
};

use aet_ledger::{
    plan::{Check, Expect, Identity, Mode, PLAN_VERSION, Plan},
    ppath::PPath,
};

use super::spec::{Base, Role, SandboxSpec};

/// Where the stage binary is bound inside the sandbox: one level below [`libs::STAGE_ROOT`], so
/// that a run path of `$ORIGIN/../NAME` (the wheel's bundled libraries) stays inside it.
pub const STAGE_BIN: &str = "/.aet/bin/aet";
/// Where the stage's private directory is bound inside the sandbox: aet writes the plan there,
/// the stage its report; the stage removes it from the view before the agent starts.
pub const STAGE_DIR: &str = "/.aet/run";
/// The plan file inside the stage directory.
pub const PLAN_FILE: &str = "plan.json";
/// The report file inside the stage directory.
pub const REPORT_FILE: &str = "report.json";
/// The host file bound over masked files (empty, read-only, root's).
pub const EMPTY_FILE: &str = "/run/aet/empty";

/// Files of the host's `/etc` in the standard base layer: what programs need to start, resolve
/// users and hosts, find libraries, certificates and locales. Nothing that holds secrets
/// (`shadow`, `ssh/`, `ssl/private`, `sudoers`, package-manager tokens).
pub const BASE_ETC: &[&str] = &[
    "alternatives",
    "bash.bashrc",
    "ca-certificates.conf",
    "debian_version",
    "gai.conf",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "magic",
    "magic.mime",
    "mime.types",
    "networks",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "profile",
    "protocols",
    "services",
    "shells",
    "ssl/certs",
    "timezone",
];

/// The top-level directories of the standard base layer besides `/usr`: symlinks are recreated,
/// directories bound read-only.
const BASE_TOP: &[&str] = &["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

/// Problems building the view (the spec was fine, the host was not).
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("dns = true, but {path} cannot be resolved: {source}")]
    Resolver {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{entry}: cannot examine it: {source}")]
    Examine {
        entry: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot prepare {path}: {source}")]
    Host {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{entry}: {message}")]
    Repo { entry: String, message: String },
    #[error("{entry}: {message}")]
    Decoy { entry: String, message: String },
}

/// One mount (or file-system) operation of the view.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    RoBind(PathBuf),
    Bind(PathBuf),
    Tmpfs,
    /// An empty read-only directory: a tmpfs remounted read-only.
    TmpfsRo,
    /// An empty read-only file: the host's empty file bound read-only.
    EmptyFile,
    Symlink(OsString),
    Dir,
    Proc,
    Dev,
}

#[derive(Clone, Debug)]
struct Mount {
    dst: PathBuf,
    op: Op,
    /// Layering order at equal depth.
    rank: u8,
}

impl Mount {
    fn writable(&self) -> bool {
        matches!(self.op, Op::Bind(_) | Op::Tmpfs)
    }
}

/// What the stage binary needs from the host.
#[derive(Clone, Debug)]
pub struct StageFiles {
    /// This aet binary, bound at [`STAGE_BIN`].
    pub aet: PathBuf,
    /// A private directory bound at [`STAGE_DIR`], holding the plan and the stage's report.
    pub dir: PathBuf,
    /// The binary's own library directories (its `$ORIGIN` run path), bound read-only where
    /// the loader looks for them from [`STAGE_BIN`].
    pub libs: Vec<libs::LibDir>,
}

impl StageFiles {
    /// The stage of the binary `aet` with its private directory `dir`, and the library
    /// directories the binary's run path names.
    pub fn new(aet: PathBuf, dir: PathBuf) -> Self {
        let libs = libs::lib_dirs(&aet, Path::new(STAGE_BIN));
        Self { aet, dir, libs }
    }
}

/// How to build.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// Verify the view from inside before running anything (aet's stage); `None` gives the plain
    /// bwrap arguments, with no verification.
    pub stage: Option<StageFiles>,
    /// The command to run inside (may be empty when only printing the arguments).
    pub command: Vec<OsString>,
    /// Shell text run before the command (`export PATH=...;`), as the seed's `env_prefix`.
    pub env_prefix: Option<String>,
    pub mode: Mode,
    pub identity: Option<Identity>,
    /// Sanitized git directories (`[[repo]] history = "sanitize"`), by repository path: each is
    /// bound at the repository's `.git`.
    pub repo_copies: Vec<RepoCopy>,
    /// Decoys (`[[decoy]]`): what is bound read-only at each decoy's path, by the decoy's entry
    /// name (`decoy[0] = "/grader/x"`), destination and source.
    pub decoys: Vec<(String, PathBuf, PathBuf)>,
}

/// A sanitized git directory made for the run.
#[derive(Clone, Debug)]
pub struct RepoCopy {
    /// The repository's working tree.
    pub path: PathBuf,
    /// The copy's git directory.
    pub gitdir: PathBuf,
    /// Decoy refs written into it.
    pub decoys: Vec<aet_ledger::plan::RepoDecoy>,
}

/// The bwrap options, the command bwrap runs, and, with a stage, its plan.
#[derive(Clone, Debug)]
pub struct Built {
    /// bwrap's options (without `bwrap` itself and the `--` that ends them).
    pub args: Vec<OsString>,
    /// What bwrap runs: aet's stage and then the command, or the command.
    pub command: Vec<OsString>,
    pub plan: Option<Plan>,
}

impl Built {
    /// The whole command line: `bwrap`, the options, `--`, the command.
    pub fn argv(&self) -> Vec<OsString> {
        let mut v = vec![OsString::from("bwrap")];
        v.extend(self.args.iter().cloned());
        v.push("--".into());
        v.extend(self.command.iter().cloned());
        v
    }
}

/// `command` behind the seed's `env_prefix`: `/bin/sh -c 'PREFIX; exec "$@"' aet-env COMMAND...`,
/// so the command's arguments reach it exactly.
pub fn with_env_prefix(prefix: Option<&str>, command: &[OsString]) -> Vec<OsString> {
    let mut c: Vec<OsString> = Vec::new();
    if let Some(prefix) = prefix {
        c.extend([
            "/bin/sh".into(),
            "-c".into(),
            format!("{prefix}\nexec \"$@\"").into(),
            "aet-env".into(),
        ]);
    }
    c.extend(command.iter().cloned());
    c
}

/// Normalises an absolute path (drops `.` components and trailing slashes).
fn norm(p: &Path) -> PathBuf {
    p.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

fn depth(p: &Path) -> usize {
    p.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
}

/// The deepest grant whose destination is `p` or an ancestor of it.
fn covering<'a>(grants: &'a [Mount], p: &Path) -> Option<&'a Mount> {
    grants
        .iter()
        .filter(|m| p.starts_with(&m.dst) && !matches!(m.op, Op::Dir | Op::Symlink(_)))
        .max_by_key(|m| (depth(&m.dst), m.rank))
}

/// `p` with its longest existing prefix canonicalised (symlinks resolved), the rest appended.
fn canonical_alias(p: &Path) -> Option<PathBuf> {
    let mut existing = p.to_owned();
    let mut rest = Vec::new();
    loop {
        match fs::canonicalize(&existing) {
            Ok(c) => {
                let mut out = c;
                for r in rest.iter().rev() {
                    out.push(r);
                }
                return Some(out);
            }
            Err(_) => {
                let name = existing.file_name()?.to_owned();
                rest.push(name);
                if !existing.pop() {
                    return None;
                }
            }
        }
    }
}

fn ids(p: &Path, entry: &str) -> Result<(u64, u64), BuildError> {
    let m = fs::metadata(p).map_err(|source| BuildError::Examine {
        entry: entry.to_owned(),
        source,
    })?;
    Ok((m.dev(), m.ino()))
}

/// Makes sure [`EMPTY_FILE`] is an empty read-only regular file owned by root, in a directory
/// only root can write.
pub fn ensure_empty_file() -> Result<(), BuildError> {
    use std::os::unix::fs::PermissionsExt as _;
    let file = Path::new(EMPTY_FILE);
    let host = |source| BuildError::Host {
        path: file.to_owned(),
        source,
    };
    let dir = crate::runtime::runtime_dir().map_err(host)?;
    let ok = |m: &fs::Metadata| {
        m.file_type().is_file() && m.len() == 0 && m.uid() == 0 && m.mode() & 0o222 == 0
    };
    match fs::symlink_metadata(file) {
        Ok(m) if ok(&m) => return Ok(()),
        Ok(_) => fs::remove_file(file).map_err(host)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(host(e)),
    }
    let tmp = dir.join(format!(".empty-{}", std::process::id()));
    fs::write(&tmp, b"").map_err(host)?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o444)).map_err(host)?;
    fs::rename(&tmp, file).map_err(host)?;
    Ok(())
}

/// Builds the view of a checked spec.
pub fn build(spec: &SandboxSpec, opts: &BuildOptions) -> Result<Built, BuildError> {
    let mut view = View::default();
    if spec.network.private() {
        view.checks.push(Check {
            entry: match spec.network {
                super::spec::Network::Hosts(_) => "network = { hosts = [...] }".into(),
                _ => "network = \"none\"".into(),
            },
            path: PathBuf::from("/").into(),
            expect: Expect::LoopbackOnly,
        });
    }
    // Spec grants first so they take precedence over the base at the same path.
    view.spec_grants(spec)?;
    if spec.base == Base::Standard {
        view.base_layer();
    }
    let repos = view.repos(spec, opts)?;
    if spec.dns {
        view.resolver()?;
    }
    if spec.network.hosts().is_some() {
        view.proxy_resolver()?;
    }
    view.decoys(&opts.decoys)?;
    view.parents(spec);
    view.masks(spec);
    let (args, unmount) = view.bwrap_args(spec, opts);
    let View {
        checks, writable, ..
    } = view;
    let ws = norm(&spec.workspace);
    let command = with_env_prefix(opts.env_prefix.as_deref(), &opts.command);

    let plan = opts.stage.as_ref().map(|_| Plan {
        version: PLAN_VERSION,
        workspace: ws.into(),
        checks,
        writable,
        report: PathBuf::from(STAGE_DIR).join(REPORT_FILE).into(),
        unmount,
        identity: opts.identity.clone(),
        mode: opts.mode.clone(),
        view: true,
        new_session: false,
        debug_skip_setuid: aet_ledger::plan::debug_skip_setuid(),
        close_io_uring: spec.io_uring == super::spec::IoUring::Deny,
        keep_capabilities: false,
        barrier: None,
        repos,
        hold: None,
    });
    let command = match &plan {
        Some(_) => {
            let mut c: Vec<OsString> = vec![STAGE_BIN.into(), "__stage".into(), "--".into()];
            c.extend(command);
            c
        }
        None => command,
    };
    Ok(Built {
        args,
        command,
        plan,
    })
}

/// The view being built: its mounts (grants, then masks), the checks the stage makes from
/// inside, and the paths the agent may write.
#[derive(Default)]
struct View {
    grants: Vec<Mount>,
    masks: Vec<Mount>,
    /// Bound after the masks.
    decoys: Vec<Mount>,
    checks: Vec<Check>,
    writable: Vec<PPath>,
}

impl View {
    /// A grant at `dst`; a spec entry replaces the base layer's at the same place.
    fn push(&mut self, dst: PathBuf, op: Op, rank: u8) {
        if !self.grants.iter().any(|m| m.dst == dst) {
            self.grants.push(Mount { dst, op, rank });
        } else if let Some(m) = self.grants.iter_mut().find(|m| m.dst == dst)
            && rank > m.rank
        {
            *m = Mount { dst, op, rank };
        }
    }

    /// Whether a spec grant binds the host's own directory above `p` at its own place: the host's
    /// `p` is in the view through it.
    fn granted_whole(&self, p: &Path) -> bool {
        self.grants.iter().any(|m| {
            m.rank > 0
                && p != m.dst.as_path()
                && p.starts_with(&m.dst)
                && matches!(&m.op, Op::RoBind(src) | Op::Bind(src) if src == &m.dst)
        })
    }

    /// The spec's grants: tmpfs, read-only and writable binds, each with its check.
    fn spec_grants(&mut self, spec: &SandboxSpec) -> Result<(), BuildError> {
        for e in spec.entries() {
            let path = norm(&e.path);
            let name = e.name();
            match e.role {
                Role::Tmpfs => {
                    self.push(path.clone(), Op::Tmpfs, 1);
                    self.checks.push(Check {
                        entry: name,
                        path: path.as_path().into(),
                        expect: Expect::Tmpfs,
                    });
                    self.writable.push(path.into());
                }
                Role::Allow | Role::ExtraBind => {
                    let (dev, ino) = ids(&path, &name)?;
                    self.push(path.clone(), Op::RoBind(path.clone()), 2);
                    self.checks.push(Check {
                        entry: name,
                        path: path.into(),
                        expect: Expect::ReadOnly { dev, ino },
                    });
                }
                Role::Workspace | Role::RwBind => {
                    let (dev, ino) = ids(&path, &name)?;
                    let rank = if e.role == Role::Workspace { 3 } else { 4 };
                    self.push(path.clone(), Op::Bind(path.clone()), rank);
                    self.checks.push(Check {
                        entry: name,
                        path: path.as_path().into(),
                        expect: Expect::Writable { dev, ino },
                    });
                    self.writable.push(path.into());
                }
                Role::Deny | Role::MaskFile => {}
            }
        }
        Ok(())
    }

    /// The standard base layer: `/usr` and the top-level links and directories of a system,
    /// `/proc`, `/dev`, private `/tmp` and `/dev/shm`, and the parts of `/etc` a program needs.
    fn base_layer(&mut self) {
        self.push("/usr".into(), Op::RoBind("/usr".into()), 0);
        for top in BASE_TOP {
            let p = Path::new(top);
            if self.granted_whole(p) {
                continue;
            }
            match fs::symlink_metadata(p) {
                Ok(m) if m.file_type().is_symlink() => {
                    if let Ok(t) = fs::read_link(p) {
                        self.push(p.into(), Op::Symlink(t.into()), 0);
                    }
                }
                Ok(m) if m.is_dir() => self.push(p.into(), Op::RoBind(p.into()), 0),
                _ => {}
            }
        }
        self.push("/proc".into(), Op::Proc, 0);
        self.push("/dev".into(), Op::Dev, 0);
        self.push("/dev/shm".into(), Op::Tmpfs, 0);
        self.push("/tmp".into(), Op::Tmpfs, 0);
        self.push("/etc".into(), Op::Dir, 0);
        for f in BASE_ETC {
            let p = Path::new("/etc").join(f);
            // A spec that grants the host's `/etc` (or `/`) shows these files already: a link
            // made over one (`/etc/localtime`) would fail in bwrap (it exists there).
            if self.granted_whole(&p) {
                continue;
            }
            match fs::symlink_metadata(&p) {
                Ok(m) if m.file_type().is_symlink() => {
                    if let Ok(t) = fs::read_link(&p) {
                        self.push(p, Op::Symlink(t.into()), 0);
                    }
                }
                Ok(_) => self.push(p.clone(), Op::RoBind(p), 0),
                Err(_) => {}
            }
        }
        for w in ["/tmp", "/dev/shm"] {
            if !self.writable.iter().any(|x| x.as_path() == Path::new(w)) {
                self.writable.push(PathBuf::from(w).into());
            }
        }
    }

    /// The task repositories: each one's base resolved, and its sanitized `.git` bound in place
    /// when the run made one.
    fn repos(
        &mut self,
        spec: &SandboxSpec,
        opts: &BuildOptions,
    ) -> Result<Vec<aet_ledger::plan::RepoCheck>, BuildError> {
        let mut repos = Vec::new();
        for (i, r) in spec.repo.iter().enumerate() {
            let path = norm(&r.path);
            let entry = format!("repo[{i}] = {:?}", r.path);
            let base =
                super::repo::resolve(&path, &r.base).map_err(|message| BuildError::Repo {
                    entry: entry.clone(),
                    message,
                })?;
            let copy = opts.repo_copies.iter().find(|c| c.path == path);
            if let Some(RepoCopy { gitdir, .. }) = copy {
                let dst = path.join(".git");
                let (dev, ino) = ids(gitdir, &entry)?;
                self.grants.push(Mount {
                    dst: dst.clone(),
                    op: Op::Bind(gitdir.clone()),
                    rank: 5,
                });
                self.checks.push(Check {
                    entry: format!("{entry} (sanitized .git)"),
                    path: dst.as_path().into(),
                    expect: Expect::Writable { dev, ino },
                });
                self.writable.push(dst.into());
            }
            repos.push(aet_ledger::plan::RepoCheck {
                entry,
                path: path.into(),
                base,
                sanitized: copy.is_some(),
                decoys: copy.map(|c| c.decoys.clone()).unwrap_or_default(),
            });
        }
        Ok(repos)
    }

    /// `dns = true`: the host's resolver configuration, bound from its real target.
    fn resolver(&mut self) -> Result<(), BuildError> {
        let conf = Path::new("/etc/resolv.conf");
        let real = fs::canonicalize(conf).map_err(|source| BuildError::Resolver {
            path: conf.to_owned(),
            source,
        })?;
        self.grants.retain(|m| m.dst != conf);
        self.grants.push(Mount {
            dst: conf.to_owned(),
            op: Op::RoBind(real),
            rank: 5,
        });
        Ok(())
    }

    /// `network = { hosts = [...] }`: a resolver configuration naming aet's proxy on the
    /// sandbox's loopback.
    fn proxy_resolver(&mut self) -> Result<(), BuildError> {
        let conf = Path::new("/etc/resolv.conf");
        let host = |source: io::Error| BuildError::Resolver {
            path: conf.to_owned(),
            source,
        };
        let file = crate::runtime::runtime_dir()
            .map_err(host)?
            .join("resolv-proxy.conf");
        if fs::read(&file).ok().as_deref() != Some(aet_proxy::RESOLV_CONF.as_bytes()) {
            let tmp = file.with_extension(format!("{}", std::process::id()));
            fs::write(&tmp, aet_proxy::RESOLV_CONF).map_err(host)?;
            fs::set_permissions(
                &tmp,
                <fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o444),
            )
            .map_err(host)?;
            fs::rename(&tmp, &file).map_err(host)?;
        }
        self.grants.retain(|m| m.dst != conf);
        self.grants.push(Mount {
            dst: conf.to_owned(),
            op: Op::RoBind(file),
            rank: 5,
        });
        Ok(())
    }

    /// The directories bwrap would create 0700 on the way to a mount point, made 0755 first;
    /// then every grant sorted parents first.
    fn parents(&mut self, spec: &SandboxSpec) {
        // bwrap creates missing parents of a mount point with mode 0700, which would make
        // everything below them unreachable to an agent identity: create them 0755 first. (Parents
        // inside a bound host directory exist there already.)
        let mut parents: Vec<PathBuf> = Vec::new();
        let dsts: Vec<PathBuf> = self
            .grants
            .iter()
            .map(|m| m.dst.clone())
            .chain(spec.deny.iter().chain(&spec.mask_files).map(|p| norm(p)))
            .chain(self.decoys.iter().map(|m| m.dst.clone()))
            .collect();
        for d in &dsts {
            for a in d.ancestors().skip(1) {
                if a == Path::new("/") || parents.iter().any(|p| p == a) {
                    continue;
                }
                if self.grants.iter().any(|m| m.dst == a) {
                    continue;
                }
                if covering(&self.grants, a)
                    .is_some_and(|c| matches!(c.op, Op::RoBind(_) | Op::Bind(_)))
                {
                    continue;
                }
                parents.push(a.to_owned());
            }
        }
        for p in parents {
            self.grants.push(Mount {
                dst: p,
                op: Op::Dir,
                rank: 0,
            });
        }
        // Parents before children; at equal depth by rank (base, tmpfs, ro, workspace, rw).
        self.grants.sort_by_key(|m| (depth(&m.dst), m.rank));
    }

    /// The spec's denies and masks, after every grant: each where the view could show it, at
    /// its link's target, and where a symlinked parent reaches it too.
    fn masks(&mut self, spec: &SandboxSpec) {
        for e in spec.entries() {
            if e.role.grants() {
                continue;
            }
            let dir = e.role == Role::Deny;
            let path = norm(&e.path);
            let name = e.name();
            let mask_op = if dir { Op::TmpfsRo } else { Op::EmptyFile };
            let masked = if dir {
                Expect::EmptyDir
            } else {
                Expect::EmptyFile
            };
            let is_link = fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
            let alias = canonical_alias(&path).filter(|a| *a != path);
            if is_link {
                // Mask the object the link leads to, and check the link leads only there.
                if let Some(target) = &alias {
                    self.mask_at(target, &name, &mask_op, &masked, "link target");
                }
                self.checks.push(Check {
                    entry: name.clone(),
                    path: path.as_path().into(),
                    expect: Expect::MaskedOrAbsent { dir },
                });
            } else {
                self.mask_at(&path, &name, &mask_op, &masked, "");
                // The same object reached through a symlinked parent elsewhere in the view.
                if let Some(a) = &alias
                    && covering(&self.grants, a).is_some()
                {
                    self.mask_at(a, &name, &mask_op, &masked, "also reachable as");
                }
            }
        }
        self.masks.sort_by_key(|m| depth(&m.dst));
    }

    /// A mask at `p` (when the view could show anything there) and its check.
    fn mask_at(&mut self, p: &Path, name: &str, mask_op: &Op, masked: &Expect, what: &str) {
        let entry = if what.is_empty() {
            name.to_owned()
        } else {
            format!("{name} ({what} {})", p.display())
        };
        let exists = match fs::symlink_metadata(p) {
            Ok(_) => Some(true),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Some(false),
            // Cannot tell (a chmod 000 parent when not root): mask it anyway.
            Err(_) => None,
        };
        let cover = covering(&self.grants, p);
        let expect = match (exists, cover) {
            // Not in the view at all: nothing to mask, nothing can appear there.
            (_, None) => Expect::Absent,
            (Some(false), Some(c)) if !c.writable() => Expect::Absent,
            _ => {
                if !self.masks.iter().any(|m| m.dst == p) {
                    self.masks.push(Mount {
                        dst: p.to_owned(),
                        op: mask_op.clone(),
                        rank: 6,
                    });
                }
                masked.clone()
            }
        };
        self.checks.push(Check {
            entry,
            path: p.into(),
            expect,
        });
    }

    /// bwrap's arguments for the view, and the stage's mounts it unmounts before the command.
    fn bwrap_args(
        &mut self,
        spec: &SandboxSpec,
        opts: &BuildOptions,
    ) -> (Vec<OsString>, Vec<PPath>) {
        let mut args: Vec<OsString> = Vec::new();
        let mut arg = |a: &str| args.push(a.into());
        for a in [
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
        ] {
            arg(a);
        }
        if spec.network.private() {
            arg("--unshare-net");
        }
        let emit = |args: &mut Vec<OsString>, m: &Mount| {
            let dst = m.dst.as_os_str().to_owned();
            let mut push = |xs: &[&OsStr]| args.extend(xs.iter().map(|x| x.to_os_string()));
            match &m.op {
                Op::RoBind(src) => push(&["--ro-bind".as_ref(), src.as_os_str(), &dst]),
                Op::Bind(src) => push(&["--bind".as_ref(), src.as_os_str(), &dst]),
                // Sticky and world-self.writable, like /tmp: self.writable for an agent identity too.
                Op::Tmpfs => push(&[
                    "--perms".as_ref(),
                    "1777".as_ref(),
                    "--tmpfs".as_ref(),
                    &dst,
                ]),
                Op::TmpfsRo => push(&["--tmpfs".as_ref(), &dst, "--remount-ro".as_ref(), &dst]),
                Op::EmptyFile => push(&["--ro-bind".as_ref(), EMPTY_FILE.as_ref(), &dst]),
                Op::Symlink(t) => push(&["--symlink".as_ref(), t, &dst]),
                Op::Dir => push(&["--perms".as_ref(), "0755".as_ref(), "--dir".as_ref(), &dst]),
                Op::Proc => push(&["--proc".as_ref(), &dst]),
                Op::Dev => push(&["--dev".as_ref(), &dst]),
            }
        };
        // Fault injection for the tests of the stage's verification: build the view without its
        // self.masks while the plan still expects them.
        if std::env::var_os("AET_DEBUG_SANDBOX_SKIP_MASKS").is_some() {
            self.masks.clear();
        }
        for m in self.grants.iter().chain(&self.masks).chain(&self.decoys) {
            emit(&mut args, m);
        }
        let mut unmount = Vec::new();
        if let Some(st) = &opts.stage {
            emit(
                &mut args,
                &Mount {
                    dst: libs::STAGE_ROOT.into(),
                    op: Op::Dir,
                    rank: 7,
                },
            );
            let own = [
                (PathBuf::from(STAGE_BIN), Op::RoBind(st.aet.clone())),
                (PathBuf::from(STAGE_DIR), Op::Bind(st.dir.clone())),
            ];
            let libs = st
                .libs
                .iter()
                .map(|l| (l.view.clone(), Op::RoBind(l.host.clone())));
            for (dst, op) in own.into_iter().chain(libs) {
                unmount.push(PPath(dst.clone()));
                emit(&mut args, &Mount { dst, op, rank: 7 });
            }
            self.writable.push(PathBuf::from(STAGE_DIR).into());
        }
        if spec.base == Base::Standard {
            args.extend(["--remount-ro".into(), "/dev".into()]);
        }
        args.extend(["--remount-ro".into(), "/".into()]);
        for name in &spec.unsetenv {
            args.extend(["--unsetenv".into(), name.into()]);
        }
        for (k, v) in &spec.setenv {
            args.extend(["--setenv".into(), k.into(), v.into()]);
        }
        let ws = norm(&spec.workspace);
        args.extend(["--chdir".into(), ws.as_os_str().to_owned()]);

        (args, unmount)
    }
}

mod decoys;
pub mod libs;
#[cfg(test)]
mod tests;
