//! `cargo xtask dist`: what users install, built into `target/dist/` from the tree as committed.
//!
//! - `aet-VERSION-py3-none-PLATFORM.whl`: the `aet` binary and the Python package (maturin, with
//!   `bindings = "bin"`; `python/pyproject.toml` `[tool.maturin]`), its platform tag the glibc
//!   the binary needs (maturin's auditwheel check; `auditwheel show` agrees);
//! - `aet_VERSION-1_amd64.deb`: the binary, the preset policies, man pages, completions and the
//!   socket-activated daemon's units (cargo-deb; `aet-user/Cargo.toml` `[package.metadata.deb]`);
//! - both again for arm64 (`..._aarch64.whl`, `..._arm64.deb`), built here with Debian's cross
//!   toolchain (`--arch` picks one);
//! - `share/`: the man pages, completions and units the package was made from.
//!
//! Every file in the package has the commit's time (`SOURCE_DATE_EPOCH`), every entry of the
//! wheel maturin's fixed 1980-01-01, so two builds of one commit in one checkout give the same
//! bytes.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail, ensure};

use crate::{cargo, root, sh};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Build from a tree with uncommitted changes (the version's commit then ends in `-dirty`).
    #[arg(long)]
    pub allow_dirty: bool,
    /// Then install what was built as users do and check it (xtask/src/install.rs: the wheel
    /// in a fresh venv, the Debian package in a clean Debian 12 root made by debootstrap).
    #[arg(long)]
    pub install_test: bool,
    /// Build twice and check that both builds have the same bytes (`cargo xtask test` does).
    #[arg(long)]
    pub reproducible: bool,
    /// Do not run `cargo xtask setup` first (for a caller that just ran it).
    #[arg(long, hide = true)]
    pub no_setup: bool,
    /// Which architectures' packages: `amd64`, `arm64` or `all`.
    #[arg(long, default_value = "all", value_parser = ["amd64", "arm64", "all"])]
    pub arch: String,
}

/// The cross target of arm64's packages.
const ARM64: &str = "aarch64-unknown-linux-gnu";

/// What `dist` built: this machine's architecture's packages (which `--install-test` installs),
/// and every file it made.
pub struct Artefacts {
    pub wheel: PathBuf,
    pub deb: PathBuf,
    /// The `aet` binary both carry.
    pub aet: PathBuf,
    pub all: Vec<PathBuf>,
}

/// The workspace's version (`[workspace.package]`), which the binary, the wheel and the package
/// all carry.
pub fn version() -> anyhow::Result<String> {
    let path = root().join("Cargo.toml");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let table: toml::Table = text.parse().with_context(|| path.display().to_string())?;
    table
        .get("workspace")
        .and_then(|w| w.get("package"))
        .and_then(|p| p.get("version"))
        .and_then(|v| v.as_str())
        .map(str::to_owned)
        .with_context(|| format!("{}: no [workspace.package] version", path.display()))
}

pub fn git(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root())
        .args(args)
        .output()
        .context("git")?;
    ensure!(
        out.status.success(),
        "git {}: {}",
        args.join(" "),
        out.status
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

pub fn dist(args: &Args) -> anyhow::Result<Artefacts> {
    let dirty = !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    if dirty && !args.allow_dirty {
        bail!(
            "the tree has uncommitted changes: commit them, or pass --allow-dirty (the \
             artefacts' commit then ends in -dirty)"
        );
    }
    // The Python package's version is the crate's: a unit test of aet-user/src/version.rs.
    let epoch = git(&["log", "-1", "--format=%ct"])?;
    let out = root().join("target/dist");
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| out.display().to_string())?;
    }
    std::fs::create_dir_all(&out)?;

    let arches: &[&str] = match args.arch.as_str() {
        "amd64" => &["amd64"],
        "arm64" => &["arm64"],
        _ => &["amd64", "arm64"],
    };
    for arch in arches {
        // The wheel first: maturin builds the release binary (`cargo build --release` of
        // aet-user's bin, the same build `cargo xtask build` makes and the package then takes).
        println!("== the wheel for {arch} (maturin)");
        // Not SOURCE_DATE_EPOCH: zstd-sys's build script tracks it, and setting it here would
        // rebuild the tree from zstd-sys up twice (13 min each on 2 cores: once for maturin,
        // once more for the build after it). Without it maturin stamps every entry 1980-01-01,
        // as reproducible.
        forget_repaired()?;
        let mut maturin = Command::new("python3");
        crate::setup::with_cache(&mut maturin)
            .env("PATH", crate::setup::path_with_cargo_bin())
            .env_remove("SOURCE_DATE_EPOCH")
            .args(["-m", "maturin", "build", "--release", "--locked", "--out"])
            .arg(&out);
        if *arch == "arm64" {
            maturin.args(["--target", ARM64]);
        }
        let built = sh(maturin.current_dir(root().join("python")));
        forget_repaired()?;
        built?;
    }
    // This machine's binary makes the man pages and completions (the same for both).
    let aet = crate::build()?;
    let share = out.join("share");
    generated(&aet, &share, &epoch)?;
    for arch in arches {
        println!("== the Debian package for {arch} (cargo-deb)");
        let mut deb = cargo();
        deb.env("SOURCE_DATE_EPOCH", &epoch).args([
            "deb",
            "--package",
            "aet-user",
            "--no-build",
            "--locked",
        ]);
        if *arch == "arm64" {
            crate::build_for(ARM64, &[])?;
            deb.args(["--target", ARM64]);
        }
        sh(deb.arg("--output").arg(&out))?;
    }

    let all: Vec<PathBuf> = {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&out)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "whl" || e == "deb"))
            .collect();
        v.sort();
        v
    };
    ensure!(
        all.len() == 2 * arches.len(),
        "{}: {} packages, expected {}",
        out.display(),
        all.len(),
        2 * arches.len()
    );
    let find = |ends: &str| -> anyhow::Result<PathBuf> {
        all.iter()
            .find(|p| p.to_string_lossy().ends_with(ends))
            .cloned()
            .with_context(|| format!("{}: no *{ends}", out.display()))
    };
    let (wheel, deb) = if arches.contains(&"amd64") {
        (find("_x86_64.whl")?, find("_amd64.deb")?)
    } else {
        (find("_aarch64.whl")?, find("_arm64.deb")?)
    };
    let artefacts = Artefacts {
        wheel,
        deb,
        aet,
        all,
    };
    println!("== built");
    for p in &artefacts.all {
        let size = std::fs::metadata(p)?.len();
        println!(
            "{:>8.1} MiB  {}",
            size as f64 / (1 << 20) as f64,
            p.display()
        );
    }
    Ok(artefacts)
}

/// [`dist`] twice, the second build's bytes checked against the first's.
pub fn reproducible(args: &Args) -> anyhow::Result<Artefacts> {
    let sums = |a: &Artefacts| -> anyhow::Result<String> {
        let out = Command::new("sha256sum")
            .args(&a.all)
            .output()
            .context("sha256sum")?;
        ensure!(out.status.success(), "sha256sum: {}", out.status);
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let first = sums(&dist(args)?)?;
    println!("== again, to check the bytes are the same");
    let again = dist(args)?;
    let second = sums(&again)?;
    ensure!(
        first == second,
        "two builds of one tree differ:\n{first}{second}"
    );
    println!("ok   the same bytes twice:\n{second}");
    Ok(again)
}

/// maturin repairs the binary it packs in place (patchelf: libseccomp's name changed to the
/// bundled copy's, an RPATH added), and that file is a hard link of cargo's own output in
/// `target/release/deps`, which cargo then counts as fresh: the next wheel would look for a
/// library of the changed name and fail. Every link of the repaired file goes, so cargo links it
/// again (5 s).
fn forget_repaired() -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let copy = root().join("target/maturin/aet");
    let Ok(meta) = std::fs::metadata(&copy) else {
        return Ok(());
    };
    for deps in [
        root().join("target/release/deps"),
        root().join("target").join(ARM64).join("release/deps"),
    ] {
        let Ok(rd) = std::fs::read_dir(&deps) else {
            continue;
        };
        for entry in rd {
            let path = entry?.path();
            if let Ok(m) = std::fs::symlink_metadata(&path)
                && m.ino() == meta.ino()
                && m.dev() == meta.dev()
            {
                std::fs::remove_file(&path).with_context(|| path.display().to_string())?;
            }
        }
    }
    std::fs::remove_file(&copy).with_context(|| copy.display().to_string())
}

/// The man pages (gzipped, as Debian wants them), completions and systemd units of `share`,
/// made by the binary itself from its CLI.
fn generated(aet: &Path, share: &Path, epoch: &str) -> anyhow::Result<()> {
    let man = share.join("man/man1");
    sh(Command::new(aet).args(["generate", "man"]).arg(&man))?;
    for page in std::fs::read_dir(&man)? {
        // -n: no name or time in the gzip header, so the bytes are the page's alone.
        sh(Command::new("gzip").args(["-9nf"]).arg(page?.path()))?;
    }
    let completions = share.join("completions");
    for shell in ["bash", "zsh", "fish"] {
        sh(Command::new(aet)
            .args(["generate", "completions", shell, "--dir"])
            .arg(&completions))?;
    }
    // The units of dist/systemd, with the binary where the package puts it.
    let units = share.join("systemd");
    std::fs::create_dir_all(&units)?;
    for unit in ["aet.socket", "aet.service"] {
        let text = std::fs::read_to_string(root().join("dist/systemd").join(unit))?;
        std::fs::write(
            units.join(unit),
            text.replace("/usr/local/bin/aet", "/usr/bin/aet"),
        )?;
    }
    // The generated files' times are the commit's too (the package keeps them).
    sh(Command::new("find")
        .arg(share)
        .args(["-exec", "touch", "-h", "-d"])
        .arg(format!("@{epoch}"))
        .args(["{}", "+"]))?;
    Ok(())
}
