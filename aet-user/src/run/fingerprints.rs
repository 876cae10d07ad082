//! The run's watched files (`[watch.NAME]` of `aet run --policy`): fingerprinted before the
//! agent's first instruction and again at the end of its phase (`aet phase`, `aet watch --end`,
//! or the run's end), in the run's own view, into the ledger's `aet.watch`.
//!
//! The view is the host's for a run without a sandbox, the sandbox's mount namespace (its stage
//! hands it over before it execs the command, and aet keeps it open to the end), or a container's
//! (`aet watch RUN_DIR --root PID`). The walk runs in a helper, `aet __fingerprint`, that joined
//! the namespace (when the view has one): its reads are not the run's (it is not in the run's
//! cgroup), it never follows a symlink out of the view, and one that hangs is killed.

use std::{
    io::{Read as _, Write as _},
    os::{
        fd::{AsRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::Path,
    process::{Command, Stdio},
};

use aet_audit::policy::Policy;
use aet_ledger::{
    ppath::PPath,
    watch::{self, Answer, Context, Limits, Request, Resolved, WATCH_VERSION, WatchRecord},
};

/// Where the watched files are seen from.
pub enum View {
    /// aet's own mount namespace.
    Host,
    /// A mount namespace aet holds open (a sandbox's): usable after its processes are gone.
    Namespace(OwnedFd),
    /// A container's: its process, while it lives (a pidfd), and its namespace.
    Container {
        pid: u32,
        pidfd: OwnedFd,
        ns: OwnedFd,
    },
}

impl View {
    fn label(&self) -> String {
        match self {
            Self::Host => "host".into(),
            Self::Namespace(_) => "sandbox".into(),
            Self::Container { pid, .. } => format!("container (pid {pid})"),
        }
    }

    /// The view of a process of the run (a container's init): its mount namespace.
    pub fn of_process(pid: u32) -> Result<Self, String> {
        // SAFETY: pidfd_open with a pid and no flags; the result is checked.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return Err(format!(
                "process {pid}: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: a new fd this process owns.
        let pidfd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/mnt"))
            .map_err(|e| format!("process {pid}'s mount namespace: {e}"))?;
        Ok(Self::Container {
            pid,
            pidfd,
            ns: ns.into(),
        })
    }

    /// Has the process whose view this is ended?
    fn gone(&self) -> Option<u32> {
        let Self::Container { pid, pidfd, .. } = self else {
            return None;
        };
        let mut p = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, no wait.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        (n > 0).then_some(*pid)
    }

    fn namespace(&self) -> Option<&OwnedFd> {
        match self {
            Self::Host => None,
            Self::Namespace(fd) | Self::Container { ns: fd, .. } => Some(fd),
        }
    }
}

/// A run's watched files.
pub struct Fingerprints {
    watches: Vec<watch::WatchSpec>,
    /// Read what the task repositories track at the start (a phase's provenance names
    /// `@tracked`).
    tracked: bool,
    limits: Limits,
    view: Option<View>,
    record: WatchRecord,
    /// Set by `aet run --defer-watch`: the first fingerprints wait for `aet watch --root`.
    pub deferred: bool,
}

impl Fingerprints {
    /// `None` when the policy watches nothing and judges no phase by provenance (which needs
    /// the run's task repositories, as its view names them, and what they tracked).
    pub fn new(policy: &Policy, deferred: bool) -> Option<Self> {
        let provenance = policy.phases.values().any(|p| p.provenance.is_some());
        if policy.watches.is_empty() && !provenance {
            return None;
        }
        Some(Self {
            watches: policy.watches.iter().map(|w| w.spec()).collect(),
            tracked: policy.needs_tracked(),
            limits: policy.watch_limits,
            view: None,
            record: WatchRecord {
                version: WATCH_VERSION,
                limits: Some(policy.watch_limits),
                ..WatchRecord::default()
            },
            deferred,
        })
    }

    /// Whether the first fingerprints were taken.
    pub fn started(&self) -> bool {
        self.record.before.is_some()
    }

    /// Whether the agent's phase has been fingerprinted at its end.
    pub fn ended(&self) -> bool {
        self.record.after.is_some() || self.record.error.is_some()
    }

    /// The first fingerprints, in `view`: an error (naming the limit) refuses the run.
    pub fn before(&mut self, view: View, ctx: Context) -> Result<(), String> {
        let req = Request {
            watches: self.watches.clone(),
            context: ctx,
            resolved: None,
            limits: self.limits,
            previous: None,
            at: "start".into(),
            tracked: self.tracked,
        };
        let (resolved, snapshot) = take(&view, &req)?;
        self.record.view = view.label();
        self.record.resolved = resolved;
        self.record.before = Some(snapshot);
        self.view = Some(view);
        Ok(())
    }

    /// The fingerprints at the end of the agent's phase (`at` says which end); a failure is
    /// recorded (the audit then cannot judge the watched files: inconclusive) and returned.
    pub fn after(&mut self, at: &str) -> Result<(), String> {
        if self.ended() {
            return Ok(());
        }
        let r = self.try_after(at);
        if let Err(e) = &r {
            self.record.error = Some(e.clone());
        }
        r
    }

    fn try_after(&mut self, at: &str) -> Result<(), String> {
        let (Some(view), Some(before)) = (&self.view, &self.record.before) else {
            return Err(if self.deferred {
                "the watched files were never fingerprinted: no `aet watch RUN_DIR --root PID` \
                 named the container's view"
                    .into()
            } else {
                "the watched files were never fingerprinted".into()
            });
        };
        if let Some(pid) = view.gone() {
            return Err(format!(
                "the container (pid {pid}) was gone before the end of the agent's phase was \
                 fingerprinted (mark it with `aet phase` or `aet watch --end` before removing \
                 the container)"
            ));
        }
        let req = Request {
            watches: Vec::new(),
            context: Context::default(),
            resolved: Some(self.record.resolved.clone()),
            limits: self.limits,
            previous: Some(before.clone()),
            at: at.into(),
            tracked: false,
        };
        let (_, snapshot) = take(view, &req)?;
        self.record.after = Some(snapshot);
        Ok(())
    }

    /// What the ledger keeps.
    pub fn record(&self) -> &WatchRecord {
        &self.record
    }

    /// One line for stderr about a snapshot.
    pub fn describe(&self, after: bool) -> Option<String> {
        let s = if after {
            self.record.after.as_ref()
        } else {
            self.record.before.as_ref()
        }?;
        Some(format!(
            "watched files ({}, {}): {} entries, {} hashed ({:.1} MB), {} unchanged since; {:.0} ms",
            self.record.view,
            s.at,
            s.cost.entries,
            s.cost.hashed_files,
            s.cost.hashed_bytes as f64 / 1e6,
            s.cost.reused,
            s.cost.ms
        ))
    }
}

/// Takes a snapshot in `view`, always in a helper process (joined to the view's namespace when it
/// has one): one that does not answer within [`HELPER_LIMIT`] (a file that blocks its reader) is
/// killed, and the snapshot is an error, never a hang of the run.
fn take(view: &View, req: &Request) -> Result<(Resolved, watch::Snapshot), String> {
    match helper(view.namespace(), req)? {
        Answer::Taken { resolved, snapshot } => Ok((*resolved, *snapshot)),
        Answer::Refused { message } => Err(message),
    }
}

/// The fd number the helper finds the namespace at.
const NS_FD: i32 = 3;

/// How long one snapshot may take.
const HELPER_LIMIT: std::time::Duration = std::time::Duration::from_secs(240);

fn helper(ns: Option<&OwnedFd>, req: &Request) -> Result<Answer, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find aet itself: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("__fingerprint")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(ns) = ns {
        let raw = ns.as_raw_fd();
        cmd.arg("--ns-fd").arg(NS_FD.to_string());
        // SAFETY: dup2 and fcntl are async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                if raw == NS_FD {
                    if libc::fcntl(raw, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(raw, NS_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the fingerprint helper: {e}"))?;
    let input = serde_json::to_vec(req).expect("requests serialise");
    let mut stdin = child.stdin.take().expect("piped");
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        out
    });
    let deadline = std::time::Instant::now() + HELPER_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Ok(None) => {
                // Not waited for: a reader stuck in the kernel may not die at once.
                let _ = child.kill();
                return Err(format!(
                    "the fingerprint helper did not finish within {} s (a watched file that \
                     does not answer its reader?): killed",
                    HELPER_LIMIT.as_secs()
                ));
            }
            Err(e) => return Err(format!("the fingerprint helper: {e}")),
        }
    };
    let _ = writer.join();
    let out = reader.join().unwrap_or_default();
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        return Err(format!(
            "the fingerprint helper failed ({status}): {}",
            err.trim()
        ));
    }
    serde_json::from_slice(&out).map_err(|e| format!("the fingerprint helper's answer: {e}"))
}

/// `aet __fingerprint [--ns-fd N]`: joins the mount namespace at fd N (if given), reads a
/// [`Request`] on stdin, writes the [`Answer`] on stdout.
pub fn helper_main(ns_fd: Option<i32>) -> i32 {
    if let Some(fd) = ns_fd {
        // SAFETY: an fd this process inherited for this purpose.
        let ns = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        if let Err(e) = nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNS) {
            eprintln!("aet fingerprint: cannot join the run's mount namespace: {e}");
            return 1;
        }
        if let Err(e) = std::env::set_current_dir("/") {
            eprintln!("aet fingerprint: cannot enter the view's root: {e}");
            return 1;
        }
    }
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        eprintln!("aet fingerprint: cannot read the request: {e}");
        return 1;
    }
    let req: Request = match serde_json::from_slice(&input) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("aet fingerprint: not a request: {e}");
            return 1;
        }
    };
    let answer = watch::answer(&req);
    let out = serde_json::to_vec(&answer).expect("answers serialise");
    if std::io::stdout().write_all(&out).is_err() {
        return 1;
    }
    0
}

/// The context of a command that starts in aet's own view: its working directory and
/// environment.
pub fn host_context(cwd: &Path, env: &[(std::ffi::OsString, std::ffi::OsString)]) -> Context {
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    Context {
        cwd: Some(PPath(cwd.to_owned())),
        repos: Vec::new(),
        path_var: get("PATH").and_then(|v| v.into_string().ok()),
        home: get("HOME").map(|h| PPath(h.into())),
    }
}

/// The context of a process of the run seen from outside (a container's init): its working
/// directory and its `PATH` and `HOME`, as it has them in its own view; `repo`, where relative
/// globs are anchored when not its working directory.
pub fn process_context(pid: u32, repo: Option<PPath>) -> Context {
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let env: Vec<(std::ffi::OsString, std::ffi::OsString)> = environ
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let at = kv.iter().position(|b| *b == b'=')?;
            Some((
                std::ffi::OsStr::from_bytes(&kv[..at]).to_owned(),
                std::ffi::OsStr::from_bytes(&kv[at + 1..]).to_owned(),
            ))
        })
        .collect();
    let mut ctx = host_context(cwd.as_deref().unwrap_or(Path::new("/")), &env);
    ctx.repos = repo.into_iter().collect();
    ctx
}
