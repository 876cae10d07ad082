//! Shared support for aet's privileged end-to-end tests.
//!
//! The tests run the real `aet` binary (built by `cargo xtask test`, which passes its path in
//! `AET_BIN`) as root, with real eBPF and real bubblewrap, and read what it writes the way a user
//! would. They panic with a message rather than return errors.

use std::{
    collections::HashMap,
    ffi::OsStr,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Output},
    sync::Mutex,
    time::{Duration, Instant},
};

pub use aet_ledger::rows::LedgerRow;

/// The `aet` binary under test.
pub fn aet_bin() -> PathBuf {
    let p = std::env::var_os("AET_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!("AET_BIN is not set: run the end-to-end tests with `cargo xtask test`")
        });
    assert!(p.exists(), "AET_BIN={} does not exist", p.display());
    p
}

/// Whether the suite runs against a resident `aet daemon` (`AET_TEST_MODE=daemon`, set by
/// `cargo xtask test` with `AET_SOCKET` naming the daemon's socket), rather than with programs
/// loaded by each run.
pub fn daemon_mode() -> bool {
    std::env::var("AET_TEST_MODE").is_ok_and(|m| m == "daemon")
}

/// A command running `aet`.
pub fn aet() -> Command {
    Command::new(aet_bin())
}

/// A copy of the `aet` binary that any uid can run, for a test that drops privileges: the one
/// under test may sit in a checkout no other uid can reach (root's own home is 0700), and a
/// spawn that fails there would be a `Permission denied` of the test's making, not of aet's.
/// Kept in a directory of its own (0755), removed when the returned guard is dropped.
pub fn aet_for_any_uid() -> (tempfile::TempDir, PathBuf) {
    let dir = tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("aet");
    std::fs::copy(aet_bin(), &bin).expect("copy the aet binary");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, bin)
}

/// A daemon on a socket of its own, stopped (SIGTERM) when dropped.
pub struct Daemon {
    child: Option<Child>,
    pub socket: PathBuf,
}

impl Daemon {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    pub fn start_with(args: &[&str]) -> Self {
        Self::start_env(args, &[])
    }

    pub fn start_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        let socket = PathBuf::from(format!(
            "/run/aet/daemon-test-{}-{}.sock",
            std::process::id(),
            unique()
        ));
        let mut child = aet()
            .args(["daemon", "-q", "--socket"])
            .arg(&socket)
            .args(args)
            .envs(env.iter().copied())
            .spawn()
            .expect("aet daemon");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "the daemon did not come up");
            if let Some(st) = child.try_wait().unwrap() {
                panic!("aet daemon exited: {st}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child: Some(child),
            socket,
        }
    }

    /// `aet ARGS` using this daemon (as a user's aet would: `AET_DAEMON=auto`).
    pub fn aet(&self) -> Command {
        let mut c = aet();
        c.env("AET_SOCKET", &self.socket).env("AET_DAEMON", "auto");
        c
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the workspace")
        .to_owned()
}

/// A scratch directory for one test, removed when dropped.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("aet-test-")
        .tempdir()
        .expect("tempdir")
}

/// A scratch tree for one test (removed when dropped), its paths named relative to its root:
/// what each test file's fixture builds on.
pub struct Tree {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
}

impl Default for Tree {
    fn default() -> Self {
        Self::new()
    }
}

impl Tree {
    pub fn new() -> Self {
        let dir = tempdir();
        let root = dir.path().to_owned();
        Self { _dir: dir, root }
    }

    /// The path `rel` in the tree.
    pub fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The path `rel` in the tree, as a string (for arguments and policies).
    pub fn s(&self, rel: &str) -> String {
        self.p(rel)
            .to_str()
            .expect("tempdir paths are UTF-8")
            .to_owned()
    }

    /// Makes the directories `rels` (and their parents).
    pub fn dirs(&self, rels: &[&str]) -> &Self {
        for d in rels {
            std::fs::create_dir_all(self.p(d)).expect("mkdir");
        }
        self
    }

    /// Writes the file `rel` (its directory made first).
    pub fn file(&self, rel: &str, text: &str) -> &Self {
        let p = self.p(rel);
        std::fs::create_dir_all(p.parent().expect("a file has a directory")).expect("mkdir");
        std::fs::write(p, text).expect("write");
        self
    }
}

/// Compiles `tests/helpers/NAME.c` (once per test process) and returns the binary.
pub fn helper(name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let dir = root().join("target/helpers");
    let out = dir.join(name);
    let mut built = BUILT.lock().unwrap();
    if !built.iter().any(|b| b == name) {
        std::fs::create_dir_all(&dir).unwrap();
        let src = root().join("tests/helpers").join(format!("{name}.c"));
        // Built under a name of this process's and renamed into place: test files run side by
        // side, and another may be executing the helper while this one builds it.
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let st = Command::new("cc")
            .args(["-O2", "-pthread", "-o"])
            .arg(&tmp)
            .arg(&src)
            .status()
            .expect("cc");
        assert!(st.success(), "cc {} failed", src.display());
        std::fs::rename(&tmp, &out).expect("rename the helper into place");
        built.push(name.to_owned());
    }
    out
}

/// Command output as text (lossy).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Writes an executable file.
pub fn write_script(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The result of one `aet run`.
pub struct Run {
    pub out: PathBuf,
    pub output: Output,
}

impl Run {
    /// The ledger file.
    pub fn ledger(&self) -> PathBuf {
        self.out.join("ledger.arrow")
    }

    /// aet's and the command's stderr.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// The command's stdout.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    /// Every row of the ledger.
    pub fn rows(&self) -> Vec<LedgerRow> {
        rows(&self.ledger())
    }

    /// The ledger's metadata.
    pub fn meta(&self) -> HashMap<String, String> {
        meta(&self.ledger())
    }

    /// The exit code of `aet run`.
    pub fn code(&self) -> i32 {
        self.output.status.code().unwrap_or(-1)
    }
}

/// Runs `aet run [extra...] --out DIR -- cmd...` and waits for it.
pub fn run_in(out: &Path, extra: &[&str], cmd: &[impl AsRef<OsStr>]) -> Run {
    let output = aet()
        .arg("run")
        .args(extra)
        .arg("--out")
        .arg(out)
        .arg("--")
        .args(cmd)
        .output()
        .expect("run aet");
    Run {
        out: out.to_owned(),
        output,
    }
}

/// Runs a command under `aet run` in a fresh directory inside `dir`, asserting that aet itself
/// succeeded (exit status is the command's; 125 means aet failed).
pub fn run_ok(dir: &Path, cmd: &[impl AsRef<OsStr>]) -> Run {
    let out = dir.join(format!("run-{}", unique()));
    let r = run_in(&out, &[], cmd);
    assert_ne!(r.code(), 125, "aet run failed:\n{}", r.stderr());
    assert!(r.ledger().exists(), "no ledger written:\n{}", r.stderr());
    r
}

/// `aet run --standalone` of an open storm (`opens` opens of `target`) with a 1 MiB ring buffer
/// and the consumer held back for two seconds: the kernel side must drop records and say so.
/// Standalone, so that the ring buffer's size and the consumer are the run's own.
pub fn lossy_run(out: &Path, target: &Path, opens: u64) -> Run {
    let output = aet()
        .env(aet_monitor::STALL_ENV, "2000")
        .args(["run", "--standalone", "--ringbuf-mb", "1", "--out"])
        .arg(out)
        .arg("--")
        .arg(helper("openstorm"))
        .arg(opens.to_string())
        .arg(target)
        .output()
        .unwrap();
    Run {
        out: out.to_owned(),
        output,
    }
}

/// Runs a Python script and returns its stdout, asserting that it succeeded.
pub fn python(script: &str) -> String {
    let o = Command::new("python3")
        .arg("-c")
        .arg(script)
        .output()
        .unwrap();
    assert!(o.status.success(), "python: {}", text(&o.stderr));
    text(&o.stdout)
}

/// A process-unique number.
pub fn unique() -> u64 {
    static N: Mutex<u64> = Mutex::new(0);
    let mut n = N.lock().unwrap();
    *n += 1;
    *n
}

/// Every row of a ledger.
pub fn rows(ledger: &Path) -> Vec<LedgerRow> {
    aet_ledger::rows::read_rows(ledger)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", ledger.display()))
        .1
}

/// A ledger's metadata.
pub fn meta(ledger: &Path) -> HashMap<String, String> {
    aet_ledger::reader::Ledger::open(ledger)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", ledger.display()))
        .metadata()
}

/// Rows whose exact path is `path`.
pub fn rows_with_path<'a>(rows: &'a [LedgerRow], path: &Path) -> Vec<&'a LedgerRow> {
    use std::os::unix::ffi::OsStrExt as _;
    let want = path.as_os_str().as_bytes();
    rows.iter()
        .filter(|r| r.path.as_deref() == Some(want))
        .collect()
}

/// The `aet ledger summary --json` of a ledger.
pub fn summary(ledger: &Path) -> serde_json::Value {
    let out = aet()
        .args(["ledger", "summary", "--json"])
        .arg(ledger)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "summary failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("summary JSON")
}

/// Asserts that the ledger says it is complete with zero lost events.
pub fn assert_complete(ledger: &Path) {
    let m = meta(ledger);
    assert_eq!(
        m.get("aet.events_lost").map(String::as_str),
        Some("0"),
        "{m:?}"
    );
    assert_eq!(
        m.get("aet.complete").map(String::as_str),
        Some("true"),
        "{m:?}"
    );
}

/// A running `aet run` or `aet monitor` whose monitor is attached.
pub struct Attached {
    pub child: std::process::Child,
    rest: std::thread::JoinHandle<String>,
    head: String,
}

impl Attached {
    /// Spawns `cmd` (an aet invocation without `-q`) with stderr captured and returns once aet
    /// says it is monitoring, so the test never races the program load.
    pub fn spawn(cmd: &mut Command) -> Self {
        use std::io::BufRead as _;
        let mut child = cmd
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn aet");
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut head = String::new();
        loop {
            let mut line = String::new();
            let n = lines.read_line(&mut line).unwrap();
            head.push_str(&line);
            if n == 0 {
                panic!("aet ended before it attached:\n{head}");
            }
            if line.starts_with("aet: monitoring") {
                break;
            }
        }
        let rest = std::thread::spawn(move || {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut lines, &mut s).unwrap();
            s
        });
        Self { child, rest, head }
    }

    /// What aet wrote to stderr up to and including its "monitoring" line.
    pub fn head(&self) -> &str {
        &self.head
    }

    /// Waits for aet to end; its exit status and everything it wrote to stderr.
    pub fn wait(self) -> (std::process::ExitStatus, String) {
        self.wait_within(Duration::from_secs(600))
    }

    /// Waits for aet to end, at most `limit`: past it, aet is killed and the test fails with
    /// what aet wrote (a hung monitor never hangs the suite).
    pub fn wait_within(mut self, limit: Duration) -> (std::process::ExitStatus, String) {
        let Some(status) = wait_child_within(&mut self.child, limit) else {
            panic!(
                "aet did not end within {limit:?}; killed. It wrote first:\n{}",
                self.head
            );
        };
        let rest = self.rest.join().unwrap();
        (status, self.head + &rest)
    }
}

/// Waits for a child at most `limit`; kills it and returns `None` past that.
pub fn wait_child_within(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` to its end, at most `limit` (then it is killed and the test fails naming it),
/// with stdout and stderr captured.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut v).unwrap();
        v
    });
    let e = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut v).unwrap();
        v
    });
    // Past the limit the pipes may still be held by what the command left behind: not joined.
    let Some(status) = wait_child_within(&mut child, limit) else {
        panic!("{cmd:?} did not end within {limit:?}; killed");
    };
    Output {
        status,
        stdout: o.join().unwrap(),
        stderr: e.join().unwrap(),
    }
}

/// Asserts that `aet audit` of the run directory `run` says inconclusive (exit 3), whatever the
/// policy: the record cannot prove what the run touched.
pub fn assert_audit_inconclusive(run: &Path) {
    let policy = run.join("inconclusive-policy.toml");
    std::fs::write(&policy, "[cheats]\nx = 'nothing-here'\n").unwrap();
    let a = aet()
        .arg("audit")
        .arg(run)
        .arg("--policy")
        .arg(&policy)
        .output()
        .unwrap();
    assert_eq!(
        a.status.code(),
        Some(3),
        "inconclusive: {}",
        text(&a.stdout)
    );
}

/// `aet audit RUN --policy POLICY --json FILE [EXTRA...]`: its output and the JSON report (null
/// when none was written).
pub fn audit_json(run: &Path, policy: &Path, extra: &[&str]) -> (Output, serde_json::Value) {
    let json = run.join(format!("audit-{}.json", unique()));
    let out = aet()
        .arg("audit")
        .arg(run)
        .arg("--policy")
        .arg(policy)
        .arg("--json")
        .arg(&json)
        .args(extra)
        .output()
        .unwrap();
    let v = std::fs::read_to_string(&json)
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(serde_json::Value::Null);
    (out, v)
}

/// `aet policy draft RUN -o POLICY`.
pub fn draft(run: &Path, policy: &Path) -> Output {
    aet()
        .args(["policy", "draft"])
        .arg(run)
        .arg("-o")
        .arg(policy)
        .output()
        .unwrap()
}

/// Records a run of the built-in example in `dir/first` and drafts a policy from it into
/// `dir/drafted.toml` (`aet policy draft`): the run, the policy, and the drafted text.
pub fn draft_from_example(dir: &Path) -> (Run, PathBuf, String) {
    let agent = root().join("examples/demo/agent.sh");
    let first = run_in(&dir.join("first"), &[], &[&agent]);
    assert_eq!(first.code(), 0, "{}", first.stderr());
    let policy = dir.join("drafted.toml");
    let d = draft(&first.out, &policy);
    assert!(d.status.success(), "{}", text(&d.stderr));
    let drafted = std::fs::read_to_string(&policy).unwrap();
    (first, policy, drafted)
}

/// `git -c user.name=a -c user.email=a@b -c safe.directory=* -C REPO ARGS`, which must succeed:
/// its stdout, trimmed.
pub fn git(repo: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args([
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@b",
            "-c",
            "safe.directory=*",
        ])
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", text(&o.stderr));
    text(&o.stdout).trim().to_owned()
}

pub fn ok_opens<'a>(rows: &'a [LedgerRow], path: &Path) -> Vec<&'a LedgerRow> {
    rows_with_path(rows, path)
        .into_iter()
        .filter(|r| r.kind == "open" && r.ret.is_some_and(|v| v >= 0))
        .collect()
}

/// A task directory, a cheat file, a contaminant, and an agent script.
pub struct AgentTask {
    pub tree: Tree,
}

impl std::ops::Deref for AgentTask {
    type Target = Tree;
    fn deref(&self) -> &Tree {
        &self.tree
    }
}

impl AgentTask {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        let tree = Tree::new();
        tree.dirs(&["task/out", "task/tools"])
            .file("task/README.md", "the task\n")
            .file("secret/golden.yaml", "expected: 42\n")
            .file("secret/key.txt", "KEY\n")
            .file("other/projects/p1/notes.txt", "someone else's\n");
        let root = &tree.root;
        // The agent's helpers: one peeks at the golden file, one at another project.
        write_script(
            &root.join("task/tools/check.sh"),
            &format!(
                "#!/bin/sh\ncat {} > /dev/null\n",
                root.join("secret/golden.yaml").display()
            ),
        );
        write_script(
            &root.join("task/tools/survey.sh"),
            &format!(
                "#!/bin/sh\nhead -c 4 {} > /dev/null\n",
                root.join("other/projects/p1/notes.txt").display()
            ),
        );
        Self { tree }
    }

    /// The policy: the task and the system are allowed; the golden file is a cheat, other
    /// projects are contaminants.
    pub fn policy(&self) -> PathBuf {
        let path = self.p("policy.toml");
        std::fs::write(
            &path,
            format!(
                r#"[allow]
read  = [{task:?}, "/usr", "/etc", "/proc", "/dev", "/sys", "/root/.cargo/bin", "/root/.pyenv"]
write = [{out:?}, "/dev/null", "/dev/tty"]

[protected]
key = {key:?}

[cheats]
golden = 'golden\.yaml'

[contaminants]
other_proj = '/other/projects/'

[warns]
oracle_src = 'oracle\.py'
"#,
                task = self.s("task"),
                out = self.s("task/out"),
                key = self.s("secret/key.txt"),
            ),
        )
        .unwrap();
        path
    }

    /// Runs the agent: it reads the task and writes its output, and runs the given helpers.
    pub fn run_agent(&self, helpers: &[&str]) -> PathBuf {
        let mut script = format!(
            "cat {} > /dev/null; echo done > {}/result.txt",
            self.s("task/README.md"),
            self.s("task/out")
        );
        for h in helpers {
            script.push_str(&format!("; {}", self.s(&format!("task/tools/{h}"))));
        }
        let out = self.p(&format!("run-{}", unique()));
        let r = run_in(&out, &[], &["sh", "-c", &script]);
        assert_eq!(r.code(), 0, "{}", r.stderr());
        out
    }
}
