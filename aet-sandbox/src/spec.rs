//! The sandbox spec: what an agent may see and write, as users write it in TOML.
//!
//! A spec is checked whole before anything is built from it: every problem is reported, each
//! naming its entry (`deny[1] = "/x"`), and a spec with any problem is never applied, not even in
//! part.

use std::{
    collections::BTreeMap,
    fmt, fs, io,
    path::{Component, Path, PathBuf},
};

use serde::{Deserialize, Serialize};

/// The layer that makes programs start at all; see docs/sandbox.md.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Base {
    /// `/usr` and the `/bin`, `/sbin`, `/lib*` links or binds, a minimal `/etc` without
    /// secrets, `/dev`, `/proc`, a private `/tmp` and `/dev/shm`.
    #[default]
    Standard,
    /// Nothing: the spec's own binds must provide the loader, libraries and programs.
    None,
}

/// A sandbox spec (the TOML file's fields).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SandboxSpec {
    /// The only unconditionally writable directory, and the agent's working directory.
    pub workspace: PathBuf,
    /// Read-only binds of granted inputs and in-repo tools.
    #[serde(default)]
    pub allow: Vec<PathBuf>,
    /// Extra writable binds (e.g. an agent CLI's state directory under a read-only home).
    #[serde(default)]
    pub rw_binds: Vec<PathBuf>,
    /// Directories masked after every grant: empty and read-only inside.
    #[serde(default)]
    pub deny: Vec<PathBuf>,
    /// Single files masked after every grant: empty and read-only inside.
    #[serde(default)]
    pub mask_files: Vec<PathBuf>,
    /// Read-only binds of tools outside the repository.
    #[serde(default)]
    pub extra_binds: Vec<PathBuf>,
    /// Directories blanked with a private, writable, initially empty tmpfs.
    #[serde(default)]
    pub tmpfs: Vec<PathBuf>,
    /// Environment variables removed.
    #[serde(default)]
    pub unsetenv: Vec<String>,
    /// Environment variables set (after everything else).
    #[serde(default)]
    pub setenv: BTreeMap<String, String>,
    /// Environment variables passed through even though they look like credentials.
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// Make name resolution work inside (bind the host's real resolver configuration).
    #[serde(default)]
    pub dns: bool,
    /// `"host"` (or `true`, the default): the host's network; `"none"` (or `false`): a private
    /// network namespace with only loopback, checked from inside before the command starts;
    /// `{ hosts = [...] }`: that private namespace, whose only way out is aet's proxy for the
    /// named hosts.
    #[serde(default, deserialize_with = "network_value")]
    pub network: Network,
    /// The base layer.
    #[serde(default)]
    pub base: Base,
    /// io_uring for the command: `deny` (the default: a seccomp filter makes its syscalls fail
    /// with EPERM, so every read and open goes through syscalls the record sees) or `allow`
    /// (requests are recorded as submitted and the record is incomplete).
    #[serde(default)]
    pub io_uring: IoUring,
    /// Task repositories whose history must not reach past a base commit (`[[repo]]`).
    #[serde(default)]
    pub repo: Vec<RepoSpec>,
    /// Canaries planted in the view, each with a token unique to the run (`[[decoy]]`).
    #[serde(default)]
    pub decoy: Vec<crate::decoy::DecoySpec>,
}

/// A task repository (`[[repo]] path = "...", base = "...", history = "verify"|"sanitize"`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RepoSpec {
    /// The repository's working tree (it has a `.git` directory), inside the view.
    pub path: PathBuf,
    /// The commit the task starts from (any name git resolves; resolved when the run starts).
    pub base: String,
    #[serde(default)]
    pub history: History,
    /// Where the repository comes from (`https://github.com/o/r`, `git@github.com:o/r.git`, or a
    /// host name): its host is what a policy's `{ host = "@upstream" }` names.
    #[serde(default)]
    pub upstream: Option<String>,
}

/// What the sandbox does with a repository's history.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum History {
    /// Check from inside the view that nothing reaches past base; a leak stops the run.
    #[default]
    Verify,
    /// Bind a copy of the repository's git directory holding exactly base's history (checked
    /// from inside too).
    Sanitize,
}

/// What the sandbox does about io_uring.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum IoUring {
    #[default]
    Deny,
    Allow,
}

/// The sandbox's network.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// The host's network.
    #[default]
    Host,
    /// A private network namespace with only loopback.
    None,
    /// A private network namespace whose only way out is aet's proxy: DNS for these names,
    /// HTTP `CONNECT` and plain HTTP forwarding to them.
    Hosts(HostsNetwork),
}

/// `network = { hosts = [...], resolver = "ADDRESS:PORT" }`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HostsNetwork {
    /// The hosts the proxy reaches: `NAME`, `*.NAME`, `*` or an IP address, each with an
    /// optional `:PORT` or `:*` (ports 80 and 443 without), and the addresses or networks
    /// (`10.0.0.0/8`) internal addresses the names resolve to may be in.
    pub hosts: Vec<String>,
    /// The DNS server the proxy asks (default: the host's resolver, through getaddrinfo).
    #[serde(default)]
    pub resolver: Option<std::net::SocketAddr>,
    /// Most connections the run may have open through the proxy at once (tunnels included);
    /// one more is refused with a row saying so.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// Seconds a client of the proxy has to send its request (its first byte, then its whole
    /// head) before it is refused with a row saying so.
    #[serde(default = "default_client_timeout")]
    pub client_timeout: u32,
    /// Seconds a tunnel through the proxy may carry no byte either way before it is closed.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout: u32,
}

fn default_idle_timeout() -> u32 {
    300
}

fn default_max_connections() -> u32 {
    512
}

fn default_client_timeout() -> u32 {
    10
}

impl Network {
    /// Whether the sandbox has a network namespace of its own.
    pub fn private(&self) -> bool {
        !matches!(self, Self::Host)
    }

    /// The proxy's hosts, when it has one.
    pub fn hosts(&self) -> Option<&HostsNetwork> {
        match self {
            Self::Hosts(h) => Some(h),
            _ => None,
        }
    }
}

/// `network`: `"host"`/`"none"`, the older `true`/`false`, or `{ hosts = [...] }`.
fn network_value<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Network, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Value {
        Bool(bool),
        Text(String),
        Hosts(HostsNetwork),
    }
    match Value::deserialize(d).map_err(|_| {
        serde::de::Error::custom(
            "network: expected \"host\", \"none\" or { hosts = [NAME, ...], resolver = \"ADDRESS:PORT\" }",
        )
    })? {
        Value::Bool(true) => Ok(Network::Host),
        Value::Bool(false) => Ok(Network::None),
        Value::Text(t) if t == "host" => Ok(Network::Host),
        Value::Text(t) if t == "none" => Ok(Network::None),
        Value::Text(t) => Err(serde::de::Error::custom(format!(
            "network = {t:?}: expected \"host\", \"none\" or {{ hosts = [...] }}"
        ))),
        Value::Hosts(h) => Ok(Network::Hosts(h)),
    }
}

/// A spec that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The file could not be read.
    #[error("cannot read sandbox spec {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file is not a valid spec (TOML syntax, unknown key, wrong type).
    #[error("sandbox spec {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// The spec names things that cannot be honoured; every problem is listed.
    #[error("sandbox spec {}: {} problem(s), nothing was applied:{}", path.display(), problems.len(), Problems(problems))]
    Invalid {
        path: PathBuf,
        problems: Vec<String>,
    },
}

struct Problems<'a>(&'a [String]);

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in self.0 {
            write!(f, "\n  - {p}")?;
        }
        Ok(())
    }
}

/// The role of a spec entry; ordered as the mounts are layered at equal depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Tmpfs,
    Allow,
    ExtraBind,
    Workspace,
    RwBind,
    Deny,
    MaskFile,
}

impl Role {
    /// The spec key.
    pub fn key(self) -> &'static str {
        match self {
            Self::Tmpfs => "tmpfs",
            Self::Allow => "allow",
            Self::ExtraBind => "extra_binds",
            Self::Workspace => "workspace",
            Self::RwBind => "rw_binds",
            Self::Deny => "deny",
            Self::MaskFile => "mask_files",
        }
    }

    /// Does the role grant something visible (as opposed to masking)?
    pub fn grants(self) -> bool {
        !matches!(self, Self::Deny | Self::MaskFile)
    }

    /// Is what the role grants writable?
    pub fn writable(self) -> bool {
        matches!(self, Self::Tmpfs | Self::Workspace | Self::RwBind)
    }
}

/// One path entry of a spec, with its name for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub role: Role,
    /// Index in its list (0 for `workspace`).
    pub index: usize,
    pub path: PathBuf,
}

impl Entry {
    /// `deny[1] = "/x"` (or `workspace = "/x"`).
    pub fn name(&self) -> String {
        match self.role {
            Role::Workspace => format!("workspace = {:?}", self.path),
            r => format!("{}[{}] = {:?}", r.key(), self.index, self.path),
        }
    }
}

impl SandboxSpec {
    /// Reads, parses and checks a spec file.
    pub fn load(path: &Path) -> Result<Self, SpecError> {
        let text = fs::read_to_string(path).map_err(|source| SpecError::Read {
            path: path.to_owned(),
            source,
        })?;
        let (spec, mut problems) = match Self::parse(&text) {
            Ok(s) => (s, Vec::new()),
            Err(message) => match Self::parse_known(&text) {
                // Unknown keys, and otherwise a spec: every problem is listed together.
                Some((s, unknown)) if !unknown.is_empty() => (s, unknown),
                _ => {
                    return Err(SpecError::Parse {
                        path: path.to_owned(),
                        message,
                    });
                }
            },
        };
        if let Err(more) = spec.check() {
            problems.extend(more);
        }
        if !problems.is_empty() {
            return Err(SpecError::Invalid {
                path: path.to_owned(),
                problems,
            });
        }
        Ok(spec)
    }

    /// The spec without its unknown keys, and a problem naming each: `None` when the text is
    /// not TOML or is wrong in another way too.
    fn parse_known(text: &str) -> Option<(Self, Vec<String>)> {
        let mut table: toml::Table = toml::from_str(text).ok()?;
        let mut unknown = Vec::new();
        for _ in 0..64 {
            let e = match Self::deserialize(toml::Value::Table(table.clone())) {
                Ok(s) => return Some((s, unknown)),
                Err(e) => e.to_string(),
            };
            let name = e
                .split("unknown field `")
                .nth(1)?
                .split('`')
                .next()?
                .to_owned();
            let line = text
                .lines()
                .position(|l| {
                    l.trim_start()
                        .strip_prefix(name.as_str())
                        .is_some_and(|r| r.trim_start().starts_with('='))
                })
                .map(|n| format!("line {}: ", n + 1))
                .unwrap_or_default();
            if table.remove(&name).is_some() {
                unknown.push(format!("{line}unknown key `{name}`"));
                continue;
            }
            let repos = table.get_mut("repo")?.as_array_mut()?;
            let mut found = false;
            for (i, r) in repos.iter_mut().enumerate() {
                if r.as_table_mut().and_then(|t| t.remove(&name)).is_some() {
                    unknown.push(format!("{line}repo[{i}]: unknown key `{name}`"));
                    found = true;
                }
            }
            if !found {
                return None;
            }
        }
        None
    }

    /// Parses TOML text (no checks against the file system).
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string().trim_end().to_owned())
    }

    /// Every path entry, in spec order.
    pub fn entries(&self) -> Vec<Entry> {
        let mut out = vec![Entry {
            role: Role::Workspace,
            index: 0,
            path: self.workspace.clone(),
        }];
        for (role, list) in [
            (Role::Allow, &self.allow),
            (Role::ExtraBind, &self.extra_binds),
            (Role::RwBind, &self.rw_binds),
            (Role::Tmpfs, &self.tmpfs),
            (Role::Deny, &self.deny),
            (Role::MaskFile, &self.mask_files),
        ] {
            for (index, path) in list.iter().enumerate() {
                out.push(Entry {
                    role,
                    index,
                    path: path.clone(),
                });
            }
        }
        out
    }

    /// Checks the spec against itself and the file system; every problem found.
    pub fn check(&self) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        let entries = self.entries();
        for e in &entries {
            if let Err(p) = check_path_syntax(&e.path) {
                problems.push(format!("{}: {p}", e.name()));
                continue;
            }
            if e.path == Path::new("/") && e.role != Role::Deny {
                problems.push(format!(
                    "{}: `/` would expose (or hide) the whole host; name the directories instead",
                    e.name()
                ));
                continue;
            }
            match e.role {
                Role::Workspace
                    if fs::symlink_metadata(&e.path).is_ok_and(|m| m.file_type().is_symlink()) =>
                {
                    problems.push(format!(
                        "{}: is a symbolic link{}: name the directory itself (the agent's working \
                         directory is bound at the path given)",
                        e.name(),
                        fs::canonicalize(&e.path)
                            .map(|t| format!(" to {}", t.display()))
                            .unwrap_or_default()
                    ));
                }
                Role::Workspace | Role::Allow | Role::ExtraBind | Role::RwBind => {
                    match fs::metadata(&e.path) {
                        Ok(m) if e.role == Role::Workspace && !m.is_dir() => {
                            problems.push(format!("{}: is not a directory", e.name()));
                        }
                        Ok(_) => {}
                        Err(err) => problems.push(format!("{}: {}", e.name(), io_problem(&err))),
                    }
                }
                Role::Deny => {
                    if let Ok(m) = fs::metadata(&e.path)
                        && !m.is_dir()
                    {
                        problems.push(format!(
                            "{}: is a file, not a directory (mask it with mask_files)",
                            e.name()
                        ));
                    }
                }
                Role::MaskFile => {
                    if let Ok(m) = fs::metadata(&e.path)
                        && m.is_dir()
                    {
                        problems.push(format!(
                            "{}: is a directory, not a file (mask it with deny)",
                            e.name()
                        ));
                    }
                }
                Role::Tmpfs => {
                    if let Ok(m) = fs::metadata(&e.path)
                        && !m.is_dir()
                    {
                        problems.push(format!("{}: is not a directory", e.name()));
                    }
                }
            }
        }
        let places = crate::decoy::Places {
            writable: entries
                .iter()
                .filter(|e| e.role.writable())
                .map(|e| (e.path.as_path(), e.name()))
                .collect(),
            masked: entries
                .iter()
                .filter(|e| !e.role.grants())
                .map(|e| (e.path.as_path(), e.name()))
                .collect(),
            repos: self
                .repo
                .iter()
                .map(|r| (r.path.as_path(), r.history == History::Sanitize))
                .collect(),
        };
        problems.extend(crate::decoy::check(&self.decoy, &places));
        // Contradictions between entries.
        let valid: Vec<&Entry> = entries
            .iter()
            .filter(|e| check_path_syntax(&e.path).is_ok())
            .collect();
        for (i, a) in valid.iter().enumerate() {
            for b in &valid[i + 1..] {
                if let Some(p) = contradiction(a, b) {
                    problems.push(p);
                }
            }
        }
        match &self.network {
            Network::None if self.dns => problems.push(
                "dns = true with network = \"none\": names cannot resolve without a network".into(),
            ),
            Network::Hosts(h) => {
                if self.dns {
                    problems.push(
                        "dns = true with network = { hosts = [...] }: the proxy answers DNS \
                         inside the sandbox, the host's resolver configuration cannot be bound"
                            .into(),
                    );
                }
                if h.hosts.is_empty() {
                    problems.push(
                        "network.hosts is empty: use network = \"none\" for no way out".into(),
                    );
                }
                if let Err(e) = aet_proxy::Rules::new(&h.hosts) {
                    problems.push(e);
                }
                if h.max_connections == 0 {
                    problems.push("network.max_connections = 0: no request could be made".into());
                }
                if !(1..=86_400).contains(&h.idle_timeout) {
                    problems.push(format!(
                        "network.idle_timeout = {}: expected seconds, 1 to 86400",
                        h.idle_timeout
                    ));
                }
                if !(1..=3600).contains(&h.client_timeout) {
                    problems.push(format!(
                        "network.client_timeout = {}: expected seconds, 1 to 3600",
                        h.client_timeout
                    ));
                }
            }
            _ => {}
        }
        for (i, r) in self.repo.iter().enumerate() {
            if let Some(u) = &r.upstream
                && aet_ledger::hosts::upstream_host(u).is_none()
            {
                problems.push(format!(
                    "repo[{i}].upstream = {u:?}: names no host (a URL, USER@HOST:PATH or a host name)"
                ));
            }
        }
        for (i, name) in self.unsetenv.iter().enumerate() {
            if let Err(p) = check_env_name(name) {
                problems.push(format!("unsetenv[{i}] = {name:?}: {p}"));
            }
            if self.setenv.contains_key(name) {
                problems.push(format!(
                    "unsetenv[{i}] = {name:?}: also set by setenv; say one or the other"
                ));
            }
            if self.pass_env.contains(name) {
                problems.push(format!(
                    "unsetenv[{i}] = {name:?}: also passed by pass_env; say one or the other"
                ));
            }
        }
        for (name, value) in &self.setenv {
            if let Err(p) = check_env_name(name) {
                problems.push(format!("setenv.{name}: {p}"));
            }
            if value.contains('\0') {
                problems.push(format!("setenv.{name}: the value contains a NUL byte"));
            }
        }
        for (i, name) in self.pass_env.iter().enumerate() {
            if let Err(p) = check_env_name(name) {
                problems.push(format!("pass_env[{i}] = {name:?}: {p}"));
            }
        }
        for (i, r) in self.repo.iter().enumerate() {
            let name = format!("repo[{i}] (path = {:?})", r.path);
            if let Err(p) = check_path_syntax(&r.path) {
                problems.push(format!("{name}: {p}"));
                continue;
            }
            if !r.path.join(".git").is_dir() {
                problems.push(format!(
                    "{name}: {} is not a directory (a repository with its own .git is needed)",
                    r.path.join(".git").display()
                ));
                continue;
            }
            let granted = entries
                .iter()
                .any(|e| e.role.grants() && is_within(&r.path, &e.path));
            if !granted {
                problems.push(format!(
                    "{name}: not inside the workspace or a granted directory: the agent would not see it"
                ));
            }
            if let Err(p) = super::repo::resolve(&r.path, &r.base) {
                problems.push(format!("{name}: base = {:?}: {p}", r.base));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

/// Absolute, normalised, no NUL.
fn check_path_syntax(p: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt as _;
    if p.as_os_str().is_empty() {
        return Err("empty path".into());
    }
    if !p.is_absolute() {
        return Err("not an absolute path".into());
    }
    if p.as_os_str().as_bytes().contains(&0) {
        return Err("the path contains a NUL byte".into());
    }
    for c in p.components() {
        match c {
            Component::CurDir | Component::ParentDir => {
                return Err("contains `.` or `..`; write the path out".into());
            }
            Component::Normal(_) | Component::RootDir => {}
            Component::Prefix(_) => return Err("not a Unix path".into()),
        }
    }
    Ok(())
}

fn check_env_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty variable name".into());
    }
    if name.contains('=') || name.contains('\0') {
        return Err("a variable name cannot contain `=` or NUL".into());
    }
    Ok(())
}

fn io_problem(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "does not exist".into(),
        io::ErrorKind::PermissionDenied => "cannot be examined (permission denied)".into(),
        _ => e.to_string(),
    }
}

/// Is `inner` `outer` or below it (component-wise)?
pub fn is_within(inner: &Path, outer: &Path) -> bool {
    inner.starts_with(outer)
}

/// Why entries `a` and `b` cannot both be honoured, if they cannot.
fn contradiction(a: &Entry, b: &Entry) -> Option<String> {
    let same = a.path.components().eq(b.path.components());
    if same {
        if a.role == b.role {
            // Listed twice: harmless, applied once.
            return None;
        }
        let both_ro = matches!(
            (a.role, b.role),
            (Role::Allow, Role::ExtraBind) | (Role::ExtraBind, Role::Allow)
        );
        if both_ro {
            return None;
        }
        return Some(format!(
            "{} and {} name the same path: it cannot be both",
            a.name(),
            b.name()
        ));
    }
    // A grant inside a mask is hidden by it: contradictory.
    for (grant, mask) in [(a, b), (b, a)] {
        if grant.role.grants() && !mask.role.grants() && is_within(&grant.path, &mask.path) {
            return Some(format!(
                "{} is inside {}: the mask would hide it",
                grant.name(),
                mask.name()
            ));
        }
    }
    None
}

/// One key of the spec as `docs/sandbox.md` lists it (the table there is made from [`KEYS`]).
pub struct SpecKey {
    /// The key, as written (`allow`, `extra_binds`: two names of one list).
    pub keys: &'static str,
    pub kind: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
}

/// Every top-level key of the spec, in the docs' order. A test checks that it names exactly the
/// keys the parser accepts.
pub const KEYS: &[SpecKey] = &[
    SpecKey {
        keys: "`workspace`",
        kind: "path",
        default: "required",
        meaning: "writable bind, and the working directory",
    },
    SpecKey {
        keys: "`allow`, `extra_binds`",
        kind: "paths",
        default: "`[]`",
        meaning: "read-only binds (must exist)",
    },
    SpecKey {
        keys: "`rw_binds`",
        kind: "paths",
        default: "`[]`",
        meaning: "writable binds (must exist)",
    },
    SpecKey {
        keys: "`deny`",
        kind: "paths",
        default: "`[]`",
        meaning: "directories shown empty and read-only (need not exist)",
    },
    SpecKey {
        keys: "`mask_files`",
        kind: "paths",
        default: "`[]`",
        meaning: "files shown empty and read-only (need not exist)",
    },
    SpecKey {
        keys: "`tmpfs`",
        kind: "paths",
        default: "`[]`",
        meaning: "private writable tmpfs, empty at start",
    },
    SpecKey {
        keys: "`unsetenv`",
        kind: "names",
        default: "`[]`",
        meaning: "variables removed",
    },
    SpecKey {
        keys: "`setenv`",
        kind: "table",
        default: "`{}`",
        meaning: "variables set (`setenv = { LANG = \"C.UTF-8\" }`)",
    },
    SpecKey {
        keys: "`pass_env`",
        kind: "names",
        default: "`[]`",
        meaning: "variables passed even though they look like credentials",
    },
    SpecKey {
        keys: "`dns`",
        kind: "bool",
        default: "`false`",
        meaning: "provide `/etc/resolv.conf` (its real target, usually under `/run`, which is not bound)",
    },
    SpecKey {
        keys: "`network`",
        kind: "`\"host\"`, `\"none\"` (or `true`/`false`), or `{ hosts = [...], resolver = \"ADDRESS:PORT\", max_connections = 512, client_timeout = 10, idle_timeout = 300 }`",
        default: "`\"host\"`",
        meaning: "`\"none\"`: a private network namespace with only loopback, checked from inside before the command starts (the report's `network = \"none\"` check: no interface but `lo`). `{ hosts = [\"pypi.org\", \"*.pythonhosted.org\"] }`: that namespace, whose only way out is aet's proxy, [below](#a-network-by-host)",
    },
    SpecKey {
        keys: "`io_uring`",
        kind: "`\"deny\"` or `\"allow\"`",
        default: "`\"deny\"`",
        meaning: "`deny`: aet's stage loads a seccomp filter (libseccomp; native and 32-bit ABIs) that makes `io_uring_setup`, `io_uring_enter` and `io_uring_register` fail with EPERM, and checks from inside that `io_uring_setup` does, so every read and open goes through syscalls the record sees and the record stays complete (the refused attempt is a row). `allow`: io_uring works, requests are recorded as submitted, the record is incomplete",
    },
    SpecKey {
        keys: "`base`",
        kind: "`\"standard\"` or `\"none\"`",
        default: "`\"standard\"`",
        meaning: "the base layer, below",
    },
    SpecKey {
        keys: "`[[repo]]`",
        kind: "tables: `path`, `base`, `history`",
        default: "none",
        meaning: "task repositories whose history must not reach past `base`, [below](#task-repositories)",
    },
    SpecKey {
        keys: "`[[decoy]]`",
        kind: "tables: `name`, `kind`, `path`, `var`, `files`, `content`",
        default: "none",
        meaning: "canaries planted in the view with a token unique to the run, [below](#decoys)",
    },
];

/// The key table of `docs/sandbox.md`.
pub fn keys_markdown() -> String {
    let mut o = String::from("| key | type | default | meaning |\n| --- | --- | --- | --- |\n");
    for k in KEYS {
        o.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            k.keys, k.kind, k.default, k.meaning
        ));
    }
    o
}

#[cfg(test)]
mod tests;
