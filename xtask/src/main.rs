//! aet's developer tasks: `cargo xtask setup | build | demo | test | e2e | kernels | bench | fuzz | dist | docs`.
//!
//! `setup` installs everything aet needs on a fresh Debian machine, idempotently (the nightly
//! toolchain's rust-src, bpf-linker built against the toolchain's own LLVM, bubblewrap, the Python
//! ledger readers used by the tests, tracefs). `demo` and `test` run it first, so the README's two
//! commands work on a fresh machine and in CI.

mod bench;
mod daemon;
mod dist;
mod e2e;
mod fuzz;
mod install;
mod kernels;
mod setup;
mod units;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail, ensure};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what aet needs on this machine (idempotent).
    Setup,
    /// Build the release `aet` binary (with its eBPF programs).
    Build,
    /// Set up, build, and run aet on the built-in example; print the ledger summary.
    Demo,
    /// Set up, build, and run every test: unit tests, then the privileged end-to-end tests
    /// (root, real eBPF, real bwrap).
    Test {
        /// Only run end-to-end tests whose name contains this.
        filter: Option<String>,
        /// End-to-end test files run at once (default: one per CPU).
        #[arg(long, value_name = "N")]
        jobs: Option<usize>,
    },
    /// Build the binary and run only the end-to-end tests (root, real eBPF, real bwrap).
    E2e {
        /// Only run tests whose name contains this.
        filter: Option<String>,
        /// Test files run at once (default: one per CPU).
        #[arg(long, value_name = "N")]
        jobs: Option<usize>,
    },
    /// Measure aet's overhead against untraced runs (open storm, exec storm).
    Bench(bench::Args),
    /// Fuzz the parsers of untrusted bytes (cargo-fuzz, libFuzzer) for a while each, on their
    /// corpora; print executions and coverage per target.
    Fuzz(fuzz::Args),
    /// Build what users install into target/dist: the wheel (the binary and the Python
    /// package) and the Debian package (with man pages, completions and the daemon's units).
    Dist(dist::Args),
    /// Boot Debian's kernels under QEMU (and use this machine's) and check the record on each:
    /// every program's verified instructions and load time, and a conformance set of the record.
    Kernels(kernels::Args),
    /// Regenerate the generated parts of the docs (CLI reference, ledger tables) and the golden
    /// fixtures from the code.
    Docs,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::Setup => setup::setup(),
        Task::Build => build().map(|p| println!("{}", p.display())),
        Task::Demo => demo(),
        Task::Test { filter, jobs } => test(filter, jobs),
        Task::E2e { filter, jobs } => {
            let aet = build()?;
            e2e::run(
                &aet,
                filter.as_deref(),
                jobs.unwrap_or_else(cpus),
                Vec::new(),
            )
        }
        Task::Docs => {
            sh(cargo()
                .args([
                    "test",
                    "--package",
                    "aet-ledger",
                    "--package",
                    "aet-audit",
                    "--package",
                    "aet-checks",
                    "--package",
                    "aet-sandbox",
                    "--package",
                    "aet-user",
                    "--lib",
                ])
                .env("AET_BLESS", "1"))?;
            println!("docs and fixtures regenerated; review them with `git diff`");
            Ok(())
        }
        Task::Fuzz(args) => {
            setup::setup()?;
            fuzz::run(&args)
        }
        Task::Dist(args) => {
            // Installing as users do runs the Python package's Inspect tests (Docker images).
            if !args.no_setup {
                setup::setup_for(if args.install_test {
                    setup::Purpose::Test
                } else {
                    setup::Purpose::Dist
                })?;
            }
            let built = if args.reproducible {
                dist::reproducible(&args)?
            } else {
                dist::dist(&args)?
            };
            if args.install_test {
                install::test(&built)?;
            }
            Ok(())
        }
        Task::Kernels(args) => {
            if !args.no_setup {
                setup::setup()?;
            }
            kernels::run(&args)
        }
        Task::Bench(args) => {
            setup::setup()?;
            let aet = build()?;
            bench::run(&aet, args)
        }
    }
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

/// Runs a command in the workspace root (or the directory it was given), failing on a non-zero
/// exit.
pub fn sh(cmd: &mut Command) -> anyhow::Result<()> {
    if cmd.get_current_dir().is_none() {
        cmd.current_dir(root());
    }
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// A command run the way a user's shell would run it: without what `cargo run` gives xtask
/// (its `LD_LIBRARY_PATH` makes every exec probe a dozen directories for each library, which
/// multiplied the exec storm's file syscalls by ten and filled the demo's ledger with failed
/// opens), for the commands whose record or timing is shown.
pub fn user_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k == "LD_LIBRARY_PATH" || k.starts_with("CARGO") || k.starts_with("RUSTUP") {
            c.env_remove(&*k);
        }
    }
    c
}

/// Cargo of the stable toolchain, with a `PATH` that holds neither rustup's proxies nor
/// bpf-linker: what builds this way needs nothing of the eBPF toolchain.
fn stable_only_cargo() -> anyhow::Result<Command> {
    let cargo = rustup_which("cargo", Some("stable")).context("rustup has no stable toolchain")?;
    let bin = cargo.parent().context("cargo has no directory")?.to_owned();
    let mut c = Command::new(&cargo);
    c.env(
        "PATH",
        std::env::join_paths([bin, "/usr/bin".into(), "/bin".into()])?,
    )
    .env_remove("RUSTUP_TOOLCHAIN")
    .env_remove("RUSTC")
    .env_remove("RUSTC_WRAPPER")
    .env("CARGO_TARGET_DIR", root().join("target/stable"));
    // Linted as built when the suite lints (`lint_in_builds`), by stable's own clippy.
    if std::env::var_os("RUSTC_WORKSPACE_WRAPPER").is_some() {
        c.env(
            "RUSTC_WORKSPACE_WRAPPER",
            rustup_which("clippy-driver", Some("stable"))?,
        );
    }
    // The compiler cache is no part of the toolchain this checks for.
    setup::with_cache(&mut c);
    Ok(c)
}

/// Cargo as the tasks run it: cargo's bin directory first on `PATH` (bpf-linker), and every
/// compilation through sccache when setup installed it ([`setup::sccache`]).
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.env("PATH", setup::path_with_cargo_bin());
    setup::with_cache(&mut c);
    c
}

/// The time each step of a task took, printed at its end (and when a step fails, with what ran
/// before it).
struct Steps {
    done: Vec<(&'static str, std::time::Duration)>,
    started: std::time::Instant,
}

impl Steps {
    fn new() -> Self {
        Self {
            done: Vec::new(),
            started: std::time::Instant::now(),
        }
    }

    fn run<T>(
        &mut self,
        name: &'static str,
        f: impl FnOnce() -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let t = std::time::Instant::now();
        let r = f();
        self.done.push((name, t.elapsed()));
        if r.is_err() {
            self.print(&format!("{name} failed"));
        }
        r
    }

    fn print(&self, how: &str) {
        println!("\n== times ({how})");
        for (name, d) in &self.done {
            println!("{:>8.1} s  {name}", d.as_secs_f64());
        }
        println!("{:>8.1} s  in all", self.started.elapsed().as_secs_f64());
    }
}

/// Builds the release binary, with every feature, and returns its path.
pub fn build() -> anyhow::Result<PathBuf> {
    build_with(&[])
}

/// Builds the release binary with extra cargo arguments (the demo leaves `aet query` out).
fn build_with(extra: &[&str]) -> anyhow::Result<PathBuf> {
    sh(cargo().args(units::BINARY).args(extra))?;
    Ok(root().join("target/release/aet"))
}

/// Builds the release binary for another target (`aarch64-unknown-linux-gnu`, with the cross
/// toolchain `cargo xtask setup` installs).
pub fn build_for(target: &str, extra: &[&str]) -> anyhow::Result<PathBuf> {
    sh(cargo()
        .args(units::BINARY)
        .args(["--target", target])
        .args(extra))?;
    Ok(root().join("target").join(target).join("release/aet"))
}

fn demo() -> anyhow::Result<()> {
    let mut steps = Steps::new();
    steps.run("setup (what the demo needs)", || {
        setup::setup_for(setup::Purpose::Demo)
    })?;
    // Without `aet query`: its SQL engine (DataFusion) would be three quarters of a cold build.
    let aet = steps.run("build (without aet query)", || {
        build_with(&["--no-default-features"])
    })?;
    steps.run("the demo's runs", || demo_runs(&aet))?;
    steps.print("cargo xtask demo");
    Ok(())
}

fn demo_runs(aet: &Path) -> anyhow::Result<()> {
    let example = root().join("examples/demo");
    let out = root().join("target/aet-demo");
    let _ = std::fs::remove_dir_all(&out);
    println!(
        "\n$ aet run --out target/aet-demo --policy policies/demo.toml -- ./examples/demo/agent.sh"
    );
    let status = user_command(aet)
        .current_dir(root())
        .args(["run", "--out"])
        .arg(&out)
        .args(["--policy", "policies/demo.toml"])
        .arg("--")
        .arg(example.join("agent.sh"))
        .status()?;
    println!("(the command exited with {status})");
    println!("\n$ aet ledger summary target/aet-demo");
    sh(Command::new(aet).args(["ledger", "summary"]).arg(&out))?;
    println!("\n$ aet ledger summary --files target/aet-demo | grep examples/demo");
    let files = Command::new(aet)
        .args(["ledger", "summary", "--files"])
        .arg(&out)
        .output()?;
    for line in String::from_utf8_lossy(&files.stdout).lines() {
        if line.starts_with(' ') && line.contains("examples/demo") {
            println!("{line}");
        }
    }
    demo_isolated(aet)
}

/// The same example with all three parts: the sandbox (the answer key denied), the agent
/// identity (uid 2000, a protected grader root) and the monitor.
fn demo_isolated(aet: &Path) -> anyhow::Result<()> {
    let root = root();
    let example = root.join("examples/demo");
    let target = root.join("target");
    let ws = target.join("aet-demo-ws");
    let grader = target.join("aet-demo-grader");
    let out = target.join("aet-demo-isolated");
    let spec = target.join("aet-demo-sandbox.toml");
    for d in [&ws, &grader, &out] {
        let _ = std::fs::remove_dir_all(d);
    }
    std::fs::create_dir_all(&ws)?;
    std::fs::create_dir_all(&grader)?;
    std::fs::copy(example.join("answers/key.txt"), grader.join("expected.txt"))?;
    std::fs::set_permissions(
        &grader,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o700),
    )?;
    let q = |p: &Path| format!("{:?}", p.display().to_string());
    std::fs::write(
        &spec,
        format!(
            "# Generated by `cargo xtask demo` (paths are absolute).\n\
             workspace = {}\nallow = [{}]\ndeny = [{}]\nsetenv = {{ AET_DEMO_OUT = {} }}\n",
            q(&ws),
            q(&example),
            q(&example.join("answers")),
            q(&ws)
        ),
    )?;
    println!("\n$ cat target/aet-demo-sandbox.toml");
    print!("{}", std::fs::read_to_string(&spec)?);
    println!(
        "\n$ aet run --out target/aet-demo-isolated --sandbox target/aet-demo-sandbox.toml \\\n    \
         --identity --grader-root target/aet-demo-grader --policy policies/demo.toml \\\n    \
         -- ./examples/demo/agent.sh"
    );
    let status = user_command(aet)
        .current_dir(&root)
        .args(["run", "--out"])
        .arg(&out)
        .arg("--sandbox")
        .arg(&spec)
        .arg("--identity")
        .arg("--grader-root")
        .arg(&grader)
        .args(["--policy", "policies/demo.toml"])
        .arg("--")
        .arg(example.join("agent.sh"))
        .status()?;
    println!("(the command exited with {status})");
    println!("\n$ aet ledger summary target/aet-demo-isolated");
    sh(Command::new(aet).args(["ledger", "summary"]).arg(&out))?;
    println!(
        "\n(SQL over many runs, `aet query`, is in the full build: `cargo xtask build`; \
         the demo leaves its engine out to build in a few minutes)"
    );
    Ok(())
}

fn test(filter: Option<String>, jobs: Option<usize>) -> anyhow::Result<()> {
    let mut steps = Steps::new();
    steps.run("setup", setup::setup)?;
    steps.run("format, the eBPF programs' lints", lints)?;
    steps.run("one build for every step", units::check_one_build)?;
    lint_in_builds()?;
    println!("== pure logic on stable Rust alone (no nightly, no bpf-linker on PATH)");
    steps.run("ledger, audit and checks on stable Rust", || {
        let packages = [
            "--package",
            "aet-ledger",
            "--package",
            "aet-audit",
            "--package",
            "aet-checks",
        ];
        // The benchmark's code is built (and linted) here, not run.
        sh(stable_only_cargo()?
            .args(["test", "--lib", "--tests", "--benches", "--no-run"])
            .args(packages))?;
        sh(stable_only_cargo()?
            .args(["test", "--lib", "--tests"])
            .args(packages))
    })?;
    // In the release profile, like the binary and the end-to-end tests, with features that make
    // every later build of the binary (the tests', maturin's) find its crates built: DataFusion
    // (aet query), most of a cold build, is built once (docs/build.md, "One build").
    println!("== unit tests");
    steps.run("unit tests (release build)", || {
        sh(cargo().args(units::UNIT_TESTS))
    })?;
    // Every fuzz target on its corpus for a few seconds: the targets build, and what once crashed
    // them (replayed by the unit tests above) still does not.
    steps.run("fuzz targets (5 s each, unoptimised build)", || {
        fuzz::run(&fuzz::Args::short(5))
    })?;
    let aet = steps.run("build the aet binary", || e2e::binary_for_tests(&build()?))?;
    let mut extra = Vec::new();
    if filter.is_none() {
        extra.extend(python_jobs(&aet));
        // What users install, built from this tree (dirty or not) twice, the bytes compared,
        // then installed as users would: by this task itself, beside the tests.
        let mut packages = Command::new(std::env::current_exe()?);
        packages.current_dir(root()).args([
            "dist",
            "--allow-dirty",
            "--install-test",
            "--reproducible",
            "--no-setup",
            // This machine's: the arm64 packages' cross build is as long as the whole suite's
            // (`cargo xtask dist` builds both).
            "--arch",
            "amd64",
        ]);
        // A fresh checkout makes its clean Debian root first (debootstrap): minutes more.
        extra.push(
            e2e::Job::new(
                "packages",
                "the wheel and the Debian package, built twice and installed",
                packages,
            )
            .within(std::time::Duration::from_secs(1800)),
        );
    }
    // The record on every kernel of the matrix: this machine's, and Debian's booted under QEMU
    // (35-80 s each under single-threaded TCG). A step of its own, before the pool: with the
    // pool's daemon tracing QEMU's threads and tests beside it, the emulated VMs ran several times slower, and
    // a 7.2 VM lost a daemon-served process's syscalls (docs/kernels.md).
    if filter.is_none() {
        // The arm64 VMs' binary (the runs are judged here, so without `aet query`).
        let aet_arm64 = steps.run("build the aet binary for arm64 (without aet query)", || {
            build_for("aarch64-unknown-linux-gnu", &["--no-default-features"])
        })?;
        steps.run("the kernel matrix (QEMU)", || {
            kernels::run(&kernels::Args {
                only: None,
                aet: Some(aet.clone()),
                aet_arm64: Some(aet_arm64.clone()),
                write_docs: false,
                no_setup: true,
            })
        })?;
    }
    steps.run("end-to-end tests, the Python package, the packages", || {
        e2e::run(&aet, filter.as_deref(), jobs.unwrap_or_else(cpus), extra)
    })?;
    steps.print("cargo xtask test");
    Ok(())
}

/// The format, and clippy over the eBPF programs (nightly, the BPF target). The rest of the
/// workspace is linted as it is built: [`lint_in_builds`].
fn lints() -> anyhow::Result<()> {
    println!("== format and the eBPF programs' lints");
    sh(cargo().args(["fmt", "--all", "--check"]))?;
    sh(setup::with_cache(&mut Command::new("cargo"))
        .env("PATH", setup::path_with_cargo_bin())
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .args([
            "+nightly",
            "clippy",
            "--package",
            "aet-ebpf",
            "--release",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--",
            "-D",
            "warnings",
        ]))
}

/// From here on, every cargo this task and its children run compiles aet's own crates with
/// clippy's driver (`RUSTC_WORKSPACE_WRAPPER`, which is what `cargo clippy` sets, with
/// `-D warnings`): the build that the tests need is also the lint, and no check-mode build of
/// every dependency (DataFusion's about 2 minutes cold) is made for clippy alone. Dependencies
/// are compiled by rustc as before; the toolchains other than the default one (nightly for the
/// fuzz targets and the programs, stable's own for its step) drop or replace the wrapper.
fn lint_in_builds() -> anyhow::Result<()> {
    let driver = rustup_which("clippy-driver", None)?;
    // SAFETY: called between steps, while this process runs no other thread (the pool's threads
    // start later), so nothing reads the environment while it changes.
    unsafe {
        std::env::set_var("RUSTC_WORKSPACE_WRAPPER", driver);
        std::env::set_var("CLIPPY_ARGS", CLIPPY_ARGS);
    }
    Ok(())
}

/// `-D warnings`, as `cargo clippy` hands its arguments to clippy's driver.
const CLIPPY_ARGS: &str = "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__";

/// The path of a toolchain's tool (`rustup which`), of the default toolchain without one.
fn rustup_which(tool: &str, toolchain: Option<&str>) -> anyhow::Result<PathBuf> {
    let mut c = Command::new("rustup");
    c.args(["which", tool]);
    if let Some(t) = toolchain {
        c.args(["--toolchain", t]);
    }
    let out = c.output().with_context(|| format!("rustup which {tool}"))?;
    ensure!(
        out.status.success(),
        "rustup which {tool}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// The Python package: its types checked (mypy, strict), its tests run (pytest) against the
/// binary just built, with real Docker, Podman and Inspect AI; two jobs that run beside the
/// end-to-end tests.
fn python_jobs(aet: &Path) -> Vec<e2e::Job> {
    let mut mypy = Command::new("python3");
    // In the workspace root: the package's own config is named.
    mypy.current_dir(root()).args([
        "-m",
        "mypy",
        "--config-file",
        "python/pyproject.toml",
        "python/src",
    ]);
    let mut pytest = Command::new("python3");
    pytest
        .current_dir(root())
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            "python/pyproject.toml",
            "--rootdir",
            "python",
            "python/tests",
        ])
        .env("AET_BIN", aet)
        .env("AET_SOCKET", PYTHON_SOCKET)
        .env_remove("AET_DAEMON");
    let aet = aet.to_owned();
    vec![
        e2e::Job::new("mypy", "the Python package's types", mypy),
        e2e::Job::new("pytest", "the Python package's tests", pytest)
            .within(std::time::Duration::from_secs(1200))
            .then(move || {
                // As a user's first `aet.run` would, the tests' first run started a daemon: it goes
                // now, whatever the tests said.
                let s = Command::new(&aet)
                    .args(["daemon", "stop", "--socket", PYTHON_SOCKET])
                    .status()?;
                ensure!(
                    s.success() || s.code() == Some(1),
                    "aet daemon stop --socket {PYTHON_SOCKET}: {s}"
                );
                Ok(())
            }),
    ]
}

/// The socket of the daemon the Python tests' first run starts (a run of theirs that does not
/// ask for `daemon=False` is served by it, as a user's would be).
const PYTHON_SOCKET: &str = "/run/aet/python-tests.sock";

/// The `name`s of a Cargo manifest's `[[TABLE]]` entries (`test`, `bin`), in its order; an error
/// when there is none.
pub fn manifest_names(path: &Path, table: &str) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    let names: Vec<String> = text
        .split(&format!("[[{table}]]"))
        .skip(1)
        .filter_map(|t| {
            let line = t.lines().find(|l| l.trim_start().starts_with("name"))?;
            Some(line.split('"').nth(1)?.to_owned())
        })
        .collect();
    ensure!(
        !names.is_empty(),
        "{}: no [[{table}]] names",
        path.display()
    );
    Ok(names)
}

/// The CPUs this process may use.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
