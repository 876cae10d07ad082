//! The BPF file system, used for one thing: letting the kernel detach a program in the
//! background. Closing the last fd of a perf-event link (a `syscalls:*` tracepoint) detaches it
//! there and then, and waits for two RCU grace periods (about 70 ms each here); the last
//! reference dropped by unlinking a pinned link is released by a kernel worker instead.

use std::{
    io,
    path::{Path, PathBuf},
};

use aya::programs::links::FdLink;

/// Where aet pins a link for the moment it takes to release it.
pub const BPFFS: &str = "/sys/fs/bpf";

/// Is a BPF file system mounted at [`BPFFS`]?
pub fn is_mounted() -> bool {
    nix::sys::statfs::statfs(BPFFS)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::BPF_FS_MAGIC)
}

/// Mounts the BPF file system at [`BPFFS`] (where systemd mounts it) unless it is there.
pub fn ensure_mounted() -> io::Result<()> {
    if is_mounted() {
        return Ok(());
    }
    nix::mount::mount(
        Some("bpf"),
        BPFFS,
        Some("bpf"),
        nix::mount::MsFlags::MS_NOSUID
            | nix::mount::MsFlags::MS_NODEV
            | nix::mount::MsFlags::MS_NOEXEC,
        Some("mode=0700"),
    )
    .map_err(io::Error::from)
}

/// Releases `link` without waiting for the detach: pins it, closes this process's fd, and
/// unlinks the pin, whose last reference the kernel then drops on a worker. Falls back to a
/// plain (waiting) close when the BPF file system is not available. Returns whether the release
/// was deferred.
pub fn release_in_background(link: FdLink, tag: &str) -> bool {
    if ensure_mounted().is_err() {
        return false;
    }
    remove_stale_pins();
    let path = pin_path(tag);
    let _ = std::fs::remove_file(&path);
    match link.pin(&path) {
        Ok(pinned) => {
            // Not the last reference: the pin holds one.
            drop(pinned);
            std::fs::remove_file(&path).is_ok()
        }
        // The link was closed (detached) when pinning failed.
        Err(_) => false,
    }
}

/// The prefix of a pin aet makes to release a link.
const PIN_PREFIX: &str = "aet-release-";

fn pin_path(tag: &str) -> PathBuf {
    Path::new(BPFFS).join(format!("{PIN_PREFIX}{}-{tag}", std::process::id()))
}

/// Unlinks the release pins of aet processes that are gone: one killed between pinning and
/// unlinking would otherwise leave its program attached for good.
fn remove_stale_pins() {
    let Ok(dir) = std::fs::read_dir(BPFFS) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PIN_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
