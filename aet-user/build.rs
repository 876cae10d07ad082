//! Builds the eBPF programs (`aet-ebpf`, for bpfel-unknown-none, with the nightly toolchain and
//! bpf-linker that `cargo xtask setup` installs) and leaves the object in OUT_DIR, from where
//! `src/loader/mod.rs` embeds it into the `aet` binary.
use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
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
    aya_build::build_ebpf(
        [aya_build::Package {
            name: ebpf.name.as_str(),
            root_dir: root_dir.as_str(),
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
    .context(
        "building the eBPF programs failed; `cargo xtask setup` installs what they need \
         (nightly rust-src and bpf-linker)",
    )
}
