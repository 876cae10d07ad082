//! Builds the eBPF programs (`aet-ebpf`, for bpfel-unknown-none, with the nightly toolchain and
//! bpf-linker that `cargo xtask setup` installs) and leaves the object in OUT_DIR, from where
//! `src/loader/mod.rs` embeds it into the `aet` binary. Also names the build (`AET_BUILD_ID`:
//! the version, the commit it was built from, the eBPF objects' digest), which a client and a
//! daemon compare: two builds never serve each other.
use anyhow::{Context as _, anyhow};
use sha2::{Digest as _, Sha256};

fn main() -> anyhow::Result<()> {
    // A fuzz build (cargo-fuzz passes `--cfg fuzzing`) fuzzes the parsers, never loads the
    // programs, and builds with flags the eBPF target must not get: it embeds no object.
    if std::env::var_os("CARGO_CFG_FUZZING").is_some() {
        let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("aet");
        std::fs::write(&out, b"").with_context(|| format!("{}", out.display()))?;
        for name in ["aet-helper-reads", "aet-legacy"] {
            let out = out.with_file_name(name);
            std::fs::write(&out, b"").with_context(|| format!("{}", out.display()))?;
        }
        println!("cargo:rustc-env=AET_COMMIT=fuzzing");
        println!(
            "cargo:rustc-env=AET_BUILD_ID={}+fuzzing",
            std::env::var("CARGO_PKG_VERSION")?
        );
        return Ok(());
    }
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let ebpf = metadata
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == "aet-ebpf")
        .ok_or_else(|| anyhow!("aet-ebpf is not in the workspace"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("aet-ebpf manifest has no parent"))?;
    // Three objects of the same programs: for kernels without bpf_loop and the task helpers
    // (5.10-5.16), then with kernel memory read through the helper (for kernels without the
    // bpf_rdonly_cast kfunc, before 6.2), then through BTF pointers. aya-build leaves each as
    // OUT_DIR/aet; the first two are moved aside.
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let out = out_dir.join("aet");
    let helper_reads = out_dir.join("aet-helper-reads");
    let legacy = out_dir.join("aet-legacy");
    for (features, aside) in [
        (&["legacy"][..], Some(&legacy)),
        (&["helper-reads"][..], Some(&helper_reads)),
        (&[][..], None),
    ] {
        aya_build::build_ebpf(
            [aya_build::Package {
                name: ebpf.name.as_str(),
                root_dir: root_dir.as_str(),
                features,
                ..Default::default()
            }],
            aya_build::Toolchain::default(),
        )
        .context(
            "building the eBPF programs failed; `cargo xtask setup` installs what they need \
             (nightly rust-src and bpf-linker)",
        )?;
        if let Some(aside) = aside {
            std::fs::rename(&out, aside)
                .with_context(|| format!("{} -> {}", out.display(), aside.display()))?;
        }
    }
    let mut object = std::fs::read(&out).with_context(|| format!("{}", out.display()))?;
    for aside in [&helper_reads, &legacy] {
        object.extend(std::fs::read(aside).with_context(|| format!("{}", aside.display()))?);
    }
    let digest: String = Sha256::digest(&object)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let commit = commit(root_dir.as_std_path().parent().expect("the workspace"));
    println!("cargo:rustc-env=AET_COMMIT={commit}");
    println!(
        "cargo:rustc-env=AET_BUILD_ID={}+{commit}.ebpf-{digest}",
        std::env::var("CARGO_PKG_VERSION")?
    );
    Ok(())
}

/// The commit the tree was built from (`-dirty` with uncommitted changes), or `unknown` outside
/// a git checkout (a source tarball). The build script runs again when HEAD moves.
fn commit(workspace: &std::path::Path) -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(workspace)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{r}");
        }
    }
    let Some(hash) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".into();
    };
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty { format!("{hash}-dirty") } else { hash }
}
