//! The privileged end-to-end tests (`tests/`, root, real eBPF, real bwrap): built once, then their
//! files run side by side, each file's tests one at a time as before.
//!
//! Most of a test's time is spent waiting (for a run to end, a daemon to leave, a grace period),
//! so two files at once on two CPUs take about half as long as one after the other. Each file's
//! output goes to `target/e2e-logs/FILE.log` and is printed whole when the file ends, so the log
//! reads as it would from `cargo test`. Every file runs even when one fails; the step fails at the
//! end, naming each file that failed. A file that runs past its time limit is killed (its whole
//! process group) and is a failure: a hang can never hold CI to its 90 minutes.

use std::{
    collections::BTreeMap,
    fs::File,
    io::{BufRead as _, BufReader},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};

use crate::{cargo, daemon, manifest_names, root};

/// The files about the standalone path itself (loading, losses, faults, the daemon's own start):
/// every run in them loads its programs. Every other file is served by one daemon: the kernel
/// side and the ledger are the same code either way, and the standalone start (a second of
/// verification per run) would be most of the suite's time.
const STANDALONE_TESTS: &[&str] = &[
    "monitor", "attach", "overload", "faults", "daemon", "kernels", "churn",
];

/// Files that run with nothing beside them: what they provoke needs the machine's CPUs (the
/// overload tests need a storm to outrun the consumer with `--on-overload drop`; the races of
/// `paths` need two threads on two CPUs at once).
const ALONE: &[&str] = &["overload", "paths"];

/// How long one file may run before it is killed as hung (`AET_E2E_TIMEOUT_SECS`).
const DEFAULT_TIMEOUT_SECS: u64 = 600;

/// The socket no daemon serves: every run of the standalone files loads its own programs,
/// whatever runs on this machine.
const NO_DAEMON: &str = "/run/aet/no-daemon-for-tests.sock";

/// The `[[test]]` files of tests/Cargo.toml, in its order.
fn files() -> anyhow::Result<Vec<String>> {
    let path = root().join("tests/Cargo.toml");
    let names = manifest_names(&path, "test")?;
    for s in STANDALONE_TESTS.iter().chain(ALONE) {
        ensure!(
            names.iter().any(|n| n == s),
            "{}: no [[test]] named {s}",
            path.display()
        );
    }
    Ok(names)
}

/// One thing to run in the pool: a test file's executable, or another suite (the Python
/// package's) that can run beside them.
pub struct Job {
    name: String,
    what: &'static str,
    cmd: Command,
    alone: bool,
    /// How long it may run before it is killed as hung.
    limit: Option<Duration>,
    /// Run after the command ends, whatever its status (cleaning up what it started); its error
    /// fails the job.
    after: Option<Box<dyn FnOnce() -> anyhow::Result<()>>>,
}

impl Job {
    /// A job named `name` (`what` says which kind, in the log) running `cmd`.
    pub fn new(name: &str, what: &'static str, cmd: Command) -> Self {
        Self {
            name: name.to_owned(),
            what,
            cmd,
            alone: false,
            limit: None,
            after: None,
        }
    }

    /// Its own time limit, in place of the test files' (`AET_E2E_TIMEOUT_SECS`).
    pub fn within(mut self, limit: Duration) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Runs `f` once the command has ended.
    pub fn then(mut self, f: impl FnOnce() -> anyhow::Result<()> + 'static) -> Self {
        self.after = Some(Box::new(f));
        self
    }
}

/// A job that is running.
struct Running {
    job: Job,
    child: Child,
    log: PathBuf,
    started: Instant,
}

/// Builds every test file (one cargo invocation) and returns each file's executable by name.
fn build(names: &[String]) -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let mut cmd = cargo();
    cmd.args(crate::units::END_TO_END)
        .arg("--message-format=json-render-diagnostics");
    for n in names {
        cmd.args(["--test", n]);
    }
    let mut child = cmd
        .current_dir(root())
        .stdout(Stdio::piped())
        .spawn()
        .context("cargo test --no-run")?;
    let mut exes = BTreeMap::new();
    let out = child.stdout.take().context("cargo's stdout")?;
    for line in BufReader::new(out).lines() {
        let line = line.context("reading cargo's messages")?;
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let is_test = msg["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "test"));
        if let (true, Some(name), Some(exe)) = (
            is_test,
            msg["target"]["name"].as_str(),
            msg["executable"].as_str(),
        ) {
            exes.insert(name.to_owned(), PathBuf::from(exe));
        }
    }
    let st = child.wait()?;
    ensure!(st.success(), "cargo test --no-run of aet-tests: {st}");
    for n in names {
        ensure!(
            exes.contains_key(n),
            "cargo built no test executable for {n}"
        );
    }
    Ok(exes)
}

/// What each job took last time (`target/e2e-times.json`): only the order depends on it, so a
/// stale or missing file costs time, never a result.
fn times_path() -> PathBuf {
    root().join("target/e2e-times.json")
}

/// The times of the last run here, or else the ones kept in the tree (`xtask/e2e-times.json`,
/// for a fresh clone).
fn last_times() -> BTreeMap<String, f64> {
    [times_path(), root().join("xtask/e2e-times.json")]
        .iter()
        .find_map(|p| serde_json::from_slice(&std::fs::read(p).ok()?).ok())
        .unwrap_or_default()
}

/// Runs the end-to-end tests and `extra` (other suites that can run beside them), `jobs` at once:
/// the standalone files with no daemon, every other file served by one `aet daemon`. `filter`
/// is passed to every file (a test name part).
pub fn run(aet: &Path, filter: Option<&str>, jobs: usize, extra: Vec<Job>) -> anyhow::Result<()> {
    let names = files()?;
    println!(
        "== end-to-end tests (root, eBPF, bwrap): {} files{}, {jobs} at once; {} standalone, \
         the rest served by one aet daemon",
        names.len(),
        extra
            .iter()
            .map(|j| format!(" and {}", j.name))
            .collect::<String>(),
        STANDALONE_TESTS.join(", ")
    );
    let exes = build(&names)?;
    let daemon = daemon::Daemon::start(aet, "test", &[])?;
    let mut all: Vec<Job> = names
        .iter()
        .map(|n| {
            let standalone = STANDALONE_TESTS.contains(&n.as_str());
            let mut cmd = Command::new(&exes[n]);
            cmd.args(["--test-threads=1", "--nocapture"])
                .args(filter)
                // As `cargo test` runs it: in the package's directory.
                .current_dir(root().join("tests"))
                .env("AET_BIN", aet);
            if standalone {
                // Never a daemon started by a run in the standalone files.
                cmd.env("AET_TEST_MODE", "standalone")
                    .env("AET_SOCKET", NO_DAEMON)
                    .env("AET_DAEMON", "never");
            } else {
                // Never a run that is not the daemon's.
                cmd.env("AET_TEST_MODE", "daemon")
                    .env("AET_SOCKET", daemon.socket())
                    .env("AET_DAEMON", "require");
            }
            let mut job = Job::new(n, if standalone { "standalone" } else { "served" }, cmd);
            job.alone = ALONE.contains(&n.as_str());
            job
        })
        .collect();
    all.extend(extra);
    let ran = pool(all, jobs, filter.is_none());
    daemon.stop()?;
    ran
}

/// Runs `all`, `lanes` at once; `record` keeps what each took for the next run's order.
fn pool(mut pending: Vec<Job>, lanes: usize, record: bool) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(
        std::env::var("AET_E2E_TIMEOUT_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(DEFAULT_TIMEOUT_SECS),
    );
    let before = last_times();
    let count = pending.len();
    // Jobs that must run alone go first (nothing else is running yet); then the longest first
    // (a job never timed counts as long), so the last to finish is a short one.
    pending.sort_by(|a, b| {
        let t = |j: &Job| before.get(&j.name).copied().unwrap_or(f64::MAX);
        b.alone.cmp(&a.alone).then(t(b).total_cmp(&t(a)))
    });
    pending.reverse(); // taken from the end
    let logs = root().join("target/e2e-logs");
    std::fs::create_dir_all(&logs).with_context(|| logs.display().to_string())?;
    let mut running: Vec<Running> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    let mut took = before;
    let started = Instant::now();
    loop {
        while running.len() < lanes.max(1) {
            let Some(next) = pending.last() else { break };
            if (next.alone || running.iter().any(|r| r.job.alone)) && !running.is_empty() {
                break;
            }
            let job = pending.pop().expect("looked at");
            running.push(start(job, &logs)?);
        }
        if running.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut i = 0;
        while i < running.len() {
            let r = &mut running[i];
            let status = r.child.try_wait()?;
            let limit = r.job.limit.unwrap_or(timeout);
            if status.is_none() && r.started.elapsed() <= limit {
                i += 1;
                continue;
            }
            let mut r = running.swap_remove(i);
            let mut verdict = match status {
                Some(st) if st.success() => Ok(()),
                Some(st) => Err(format!("FAILED ({st})")),
                None => {
                    kill_group(r.child.id());
                    let _ = r.child.wait();
                    Err(format!(
                        "FAILED: killed as hung after {} s",
                        limit.as_secs()
                    ))
                }
            };
            if let Some(after) = r.job.after.take()
                && let Err(e) = after()
                && verdict.is_ok()
            {
                verdict = Err(format!("FAILED: {e:#}"));
            }
            let secs = r.started.elapsed().as_secs_f64();
            println!(
                "\n---- {} ({}): {} in {secs:.1} s; its output ({}):",
                r.job.name,
                r.job.what,
                verdict.as_ref().err().map_or("ok", String::as_str),
                r.log.display()
            );
            let mut log = File::open(&r.log).with_context(|| r.log.display().to_string())?;
            std::io::copy(&mut log, &mut std::io::stdout())?;
            match verdict {
                Ok(()) => {
                    took.insert(r.job.name.clone(), secs);
                }
                Err(_) => failed.push(r.job.name.clone()),
            }
        }
    }
    if record && failed.is_empty() {
        let _ = std::fs::write(times_path(), serde_json::to_vec_pretty(&took)?);
    }
    println!(
        "== {count} jobs in {:.1} s, {lanes} at once",
        started.elapsed().as_secs_f64()
    );
    if !failed.is_empty() {
        bail!("failed: {}", failed.join(", "));
    }
    Ok(())
}

/// A job left running when the pool stops early (an error starting or watching another) is
/// killed with its process group, never left behind.
impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            kill_group(self.child.id());
            let _ = self.child.wait();
        }
    }
}

/// Starts a job in its own process group, its output to its log.
fn start(mut job: Job, logs: &Path) -> anyhow::Result<Running> {
    let log = logs.join(format!("{}.log", job.name));
    let out = File::create(&log).with_context(|| log.display().to_string())?;
    let child = job
        .cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {:?}", job.cmd))?;
    Ok(Running {
        job,
        child,
        log,
        started: Instant::now(),
    })
}

/// SIGKILL to the process group a job leads.
fn kill_group(leader: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{leader}")])
        .status();
}

/// A copy of the binary for the tests (`target/e2e-bin/aet`): the packages job relinks
/// `target/release/aet` while the tests run it.
pub fn binary_for_tests(aet: &Path) -> anyhow::Result<PathBuf> {
    let dir = root().join("target/e2e-bin");
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    let copy = dir.join("aet");
    let fresh = dir.join(".aet.new");
    std::fs::copy(aet, &fresh)
        .with_context(|| format!("copy {} to {}", aet.display(), fresh.display()))?;
    std::fs::rename(&fresh, &copy).with_context(|| copy.display().to_string())?;
    Ok(copy)
}
