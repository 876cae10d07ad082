//! Debian's kernels: fetched through apt, booted under QEMU with an initramfs of the workload.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::{
    Arch, Kernel,
    checks::{CONFORMANCE, Outcome, judge, tail},
};
use crate::sh;

/// The VM's `/init`.
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
# bwrap cannot pivot_root out of the initramfs: the tree moves to a tmpfs root first.
if [ ! -e /.on-tmpfs ]; then
  mkdir /newroot
  mount -t tmpfs -o size=1536m tmpfs /newroot
  for d in bin sbin usr lib lib64 etc init conformance.sh; do
    [ -e "/$d" ] && cp -a "/$d" /newroot/
  done
  mkdir -p /newroot/proc /newroot/sys /newroot/dev /newroot/tmp /newroot/run
  touch /newroot/.on-tmpfs
  exec switch_root /newroot /init
fi
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tracefs tracefs /sys/kernel/tracing
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
ip link set lo up
sh /conformance.sh /bin/aet /bin/conform /tmp/out /tmp/aet-conform
cp /tmp/aet-verifier-*.log /tmp/out/ 2>/dev/null
cp /run/aet/*.log /tmp/out/ 2>/dev/null
echo AET-KERNEL-SHIP-BEGIN
tar -C /tmp/out -cf - . | gzip | base64
echo AET-KERNEL-SHIP-END
poweroff -f
"#;

/// apt with its own lists and cache under `dir` (the system's sources untouched).
fn apt(dir: &Path, tool: &str) -> anyhow::Result<Command> {
    let sources = dir.join("sources.list");
    let mut text = String::new();
    for s in ["bullseye", "bookworm", "trixie", "sid"] {
        let _ = writeln!(
            text,
            "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
             http://deb.debian.org/debian {s} main"
        );
    }
    for d in ["lists/partial", "archives/partial"] {
        std::fs::create_dir_all(dir.join(d))?;
    }
    std::fs::write(&sources, text)?;
    let mut c = Command::new(tool);
    let opt = |k: &str, v: &Path| format!("-o{k}={}", v.display());
    c.arg(opt("Dir::Etc::SourceList", &sources))
        .arg("-oDir::Etc::SourceParts=/dev/null")
        .arg(opt("Dir::State::Lists", &dir.join("lists")))
        .arg(opt("Dir::Cache::Archives", &dir.join("archives")))
        .arg("-oDir::State::Status=/dev/null")
        .arg("-oAPT::Architectures::=amd64")
        .arg("-oAPT::Architectures::=arm64")
        .arg("-oAPT::Sandbox::User=root")
        .arg("-oAcquire::IndexTargets::deb::DEP-11::DefaultEnabled=false")
        .current_dir(dir.join("archives"));
    Ok(c)
}

/// Each kernel's vmlinuz: from the cache under `target/kernels/LABEL/`, else the newest package
/// of its line, downloaded and unpacked.
pub(super) fn fetch(dir: &Path, kernels: &[&Kernel]) -> anyhow::Result<Vec<PathBuf>> {
    let apt_dir = dir.join("apt");
    let mut updated = apt_dir.join("lists/.arm64").exists();
    let mut images = Vec::new();
    for k in kernels {
        let kdir = dir.join(k.image);
        let image = kdir.join("vmlinuz");
        if image.exists() {
            images.push(image);
            continue;
        }
        if !updated {
            println!("== kernels: apt-get update (Debian's archive, lists under target/kernels)");
            sh(apt(&apt_dir, "apt-get")?.args(["-q", "update"]))?;
            // Lists that have arm64's packages (an older cache has amd64's alone).
            std::fs::write(apt_dir.join("lists/.arm64"), "")?;
            updated = true;
        }
        let o = apt(&apt_dir, "apt-cache")?
            .args(["--names-only", "search", k.package])
            .output()?;
        let mut names: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.split(" - ").next().map(str::to_owned))
            .collect();
        names.sort_by_key(|a| version_key(a));
        let Some(name) = names.pop() else {
            bail!("no package matches {} in Debian {}", k.package, k.suite);
        };
        println!("== kernels: {} is {name}", k.label);
        let archives = apt_dir.join("archives");
        sh(apt(&apt_dir, "apt-get")?.args([
            "-q",
            "download",
            &format!("{name}:{}", k.arch.deb()),
        ]))?;
        let deb = std::fs::read_dir(&archives)?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{name}_")))
            })
            .with_context(|| format!("apt-get download {name} left no .deb"))?;
        let unpacked = kdir.join("deb");
        let _ = std::fs::remove_dir_all(&unpacked);
        std::fs::create_dir_all(&unpacked)?;
        sh(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked))?;
        let found = find_vmlinuz(&unpacked).with_context(|| format!("no vmlinuz in {name}"))?;
        std::fs::rename(&found, &image)?;
        std::fs::write(kdir.join("package"), format!("{name}\n"))?;
        let _ = std::fs::remove_dir_all(&unpacked);
        images.push(image);
    }
    Ok(images)
}

/// A package name's numbers, for "newest".
fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

fn find_vmlinuz(dir: &Path) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            if let Some(f) = find_vmlinuz(&p) {
                return Some(f);
            }
        } else if e.file_name().to_string_lossy().starts_with("vmlinuz") {
            return Some(p);
        }
    }
    None
}

/// The packages an arm64 VM's userland comes from (Debian 12's, like this machine's C library
/// the cross toolchain builds against): busybox, bwrap and the libraries aet and bwrap link.
const ARM64_USERLAND: &[&str] = &[
    "busybox-static",
    "bubblewrap",
    "libc6",
    "libseccomp2",
    "libgcc-s1",
    "libcap2",
    "libselinux1",
    "libpcre2-8-0",
];

/// The arm64 userland, unpacked under `target/kernels/userland-arm64` (kept: offline re-runs).
fn arm64_userland(dir: &Path) -> anyhow::Result<PathBuf> {
    let tree = dir.join("userland-arm64");
    let stamp = tree.join(".complete");
    if stamp.exists() {
        return Ok(tree);
    }
    let apt_dir = dir.join("apt");
    if !apt_dir.join("lists/.arm64").exists() {
        sh(apt(&apt_dir, "apt-get")?.args(["-q", "update"]))?;
        std::fs::write(apt_dir.join("lists/.arm64"), "")?;
    }
    let debs = dir.join("userland-arm64.debs");
    let _ = std::fs::remove_dir_all(&debs);
    std::fs::create_dir_all(&debs)?;
    let mut c = apt(&apt_dir, "apt-get")?;
    c.current_dir(&debs).args(["-q", "download"]);
    for p in ARM64_USERLAND {
        c.arg(format!("{p}:arm64/bookworm"));
    }
    sh(&mut c)?;
    let _ = std::fs::remove_dir_all(&tree);
    std::fs::create_dir_all(&tree)?;
    for e in std::fs::read_dir(&debs)?.flatten() {
        sh(Command::new("dpkg-deb").arg("-x").arg(e.path()).arg(&tree))?;
    }
    std::fs::write(&stamp, "")?;
    let _ = std::fs::remove_dir_all(&debs);
    Ok(tree)
}

/// Copies every shared library (`*.so*`) and the dynamic loader of `from`'s `lib` directories
/// into `to`'s, at the same paths.
fn copy_libraries(from: &Path, to: &Path) -> anyhow::Result<()> {
    for d in ["lib", "lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu"] {
        let Ok(rd) = std::fs::read_dir(from.join(d)) else {
            continue;
        };
        std::fs::create_dir_all(to.join(d))?;
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.contains(".so") {
                continue;
            }
            let dst = to.join(d).join(&name);
            if e.file_type()?.is_symlink() {
                let _ = std::fs::remove_file(&dst);
                std::os::unix::fs::symlink(std::fs::read_link(e.path())?, &dst)?;
            } else if e.file_type()?.is_file() {
                std::fs::copy(e.path(), &dst)?;
            }
        }
    }
    Ok(())
}

/// The initramfs's tree: busybox, aet and the libraries it links, the workload, the scripts,
/// all of `arch`.
pub(super) fn initramfs_base(
    dir: &Path,
    arch: Arch,
    aet: &Path,
    conform: &Path,
    compat32: Option<&Path>,
    hammer: Option<&Path>,
) -> anyhow::Result<PathBuf> {
    let tree = dir.join(match arch {
        Arch::X86_64 => "initramfs",
        Arch::Arm64 => "initramfs-arm64",
    });
    let _ = std::fs::remove_dir_all(&tree);
    for d in [
        "bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "tmp", "run", "etc",
    ] {
        std::fs::create_dir_all(tree.join(d))?;
    }
    // Stripped: the initramfs is unpacked and copied once more in the VM.
    sh(Command::new(arch.tool("strip"))
        .arg("-o")
        .arg(tree.join("bin/aet"))
        .arg(aet))?;
    std::fs::copy(conform, tree.join("bin/conform"))?;
    if let Some(h) = hammer {
        std::fs::copy(h, tree.join("bin/bpfhammer"))?;
    }
    if let Some(c) = compat32 {
        std::fs::copy(c, tree.join("bin/conform32"))?;
    }
    match arch {
        Arch::X86_64 => {
            let busybox = Path::new("/bin/busybox");
            if !busybox.exists() {
                bail!("/bin/busybox is missing: `cargo xtask setup` installs busybox-static");
            }
            std::fs::copy(busybox, tree.join("bin/busybox"))?;
            let bwrap = Path::new("/usr/bin/bwrap");
            std::fs::copy(bwrap, tree.join("usr/bin/bwrap"))
                .context("/usr/bin/bwrap (cargo xtask setup installs bubblewrap)")?;
            // The libraries the dynamic programs link, at the paths ldd names.
            for program in [aet, bwrap] {
                let ldd = Command::new("ldd").arg(program).output().context("ldd")?;
                for line in String::from_utf8_lossy(&ldd.stdout).lines() {
                    let path = line
                        .split_whitespace()
                        .find(|w| w.starts_with('/'))
                        .map(PathBuf::from);
                    if let Some(p) = path {
                        let to = tree.join(p.strip_prefix("/")?);
                        std::fs::create_dir_all(to.parent().context("a library has a directory")?)?;
                        std::fs::copy(&p, &to).with_context(|| format!("copy {}", p.display()))?;
                    }
                }
            }
        }
        Arch::Arm64 => {
            // Debian's arm64 packages: ldd cannot read another architecture's programs, so
            // every library of the packages goes in.
            let user = arm64_userland(dir)?;
            std::fs::copy(user.join("bin/busybox"), tree.join("bin/busybox"))?;
            std::fs::copy(user.join("usr/bin/bwrap"), tree.join("usr/bin/bwrap"))?;
            copy_libraries(&user, &tree)?;
        }
    }
    std::fs::write(tree.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
    std::fs::write(tree.join("etc/group"), "root:x:0:\n")?;
    std::fs::write(tree.join("conformance.sh"), CONFORMANCE)?;
    let init = tree.join("init");
    std::fs::write(&init, INIT)?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755))?;
    let cpio = dir.join(format!("initramfs-{}.cpio.gz", arch.deb()));
    sh(Command::new("sh").arg("-c").arg(format!(
        "cd '{}' && find . | cpio --quiet -o -H newc | gzip -1 > '{}'",
        tree.display(),
        cpio.display()
    )))?;
    Ok(cpio)
}

/// Boots `vmlinuz` with the initramfs and judges what it printed.
pub(super) fn boot(
    aet: &Path,
    arch: Arch,
    kdir: &Path,
    vmlinuz: &Path,
    initramfs: &Path,
    append: &str,
) -> anyhow::Result<Outcome> {
    let out = kdir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out)?;
    let (qemu, machine, console, package): (_, &[&str], _, _) = match arch {
        Arch::X86_64 => (
            "qemu-system-x86_64",
            &["-cpu", "max"],
            "ttyS0",
            "qemu-system-x86",
        ),
        // An ARMv8.0 core: `max` adds pointer authentication, SVE and MTE, which TCG emulates
        // slowly and the checks do not need.
        Arch::Arm64 => (
            "qemu-system-aarch64",
            &["-machine", "virt", "-cpu", "cortex-a57"],
            "ttyAMA0",
            "qemu-system-arm",
        ),
    };
    let mut child = Command::new(qemu)
        // One host thread for both vCPUs: with a thread per vCPU, QEMU 7.2's TCG let a vCPU run
        // code another had just patched (the kernel's int3-based text patching of static keys),
        // and the guest died with "Oops: int3" in 1 boot of 4 or 5 (at boot in
        // sched_clock_cpu, or in trace_syscall_exit as aet's programs detached). The two vCPUs
        // still interleave (the load check's preemption is the same); boots take about 1.7
        // times as long (6.12: 36 -> 60 s, sid: 45 -> 79 s).
        .args(["-accel", "tcg,thread=single"])
        .args(machine)
        .args(["-m", "2048", "-smp", "2"])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initramfs)
        .args([
            "-append",
            &format!("console={console} quiet loglevel=1 panic=-1 {append}"),
            "-nographic",
            "-no-reboot",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("{qemu} (cargo xtask setup installs {package})"))?;
    let stdout = child.stdout.take().context("qemu's stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut { stdout }, &mut s);
        s
    });
    // Emulating another architecture is slower (TCG translates every instruction).
    // Seen on 2026-12-07: every boot of the x86_64 chain about twice as long as the day before
    // on a machine of the same kind (6.12: 58 -> 117 s, 5.10: 101 -> over 150 s): the limit
    // is for a VM that hangs, not for a slow host (7.2 then took 156-275 s a boot).
    let limit = Duration::from_secs(match arch {
        Arch::X86_64 => 420,
        Arch::Arm64 => 480,
    }) + if append.contains("aet.hammer") {
        // Two more processes busy on two vCPUs through the load check.
        Duration::from_secs(150)
    } else {
        Duration::ZERO
    };
    let started = Instant::now();
    while child.try_wait()?.is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.wait();
    let text = reader.join().unwrap_or_default();
    std::fs::write(kdir.join("console.log"), &text)?;
    if started.elapsed() > limit {
        let mut o = Outcome::default();
        o.checks.push((
            "the VM ends".into(),
            Err(format!("killed after {limit:?}: {}", tail(&text, 10))),
        ));
        return Ok(o);
    }
    // A VM that died while it printed its runs (a guest kernel's oops under TCG, seen on sid's
    // 7.2 as aet's programs detached) is a failed boot, booted once more, not the end of the
    // matrix.
    if let Err(e) = unship(&text, &out) {
        let mut o = Outcome::default();
        o.checks.push((
            "the VM ships its runs back".into(),
            Err(format!("{e}: {}", tail(&text, 10))),
        ));
        o.oops = true;
        return Ok(o);
    }
    let mut o = judge(aet, &text, &out, Path::new("/tmp/aet-conform"));
    // The guest kernel's own oops or panic (TCG's, or the kernel's): the boot is made again.
    o.oops |= ["Oops:", "Kernel panic", "BUG: "]
        .iter()
        .any(|m| text.contains(m));
    Ok(o)
}

/// Unpacks the runs the VM printed (a base64 tar.gz between markers) into `out`.
fn unship(text: &str, out: &Path) -> anyhow::Result<()> {
    let mut b64 = String::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        match line {
            "AET-KERNEL-SHIP-BEGIN" => inside = true,
            "AET-KERNEL-SHIP-END" => inside = false,
            l if inside
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=') =>
            {
                b64.push_str(l);
                b64.push('\n');
            }
            _ => {}
        }
    }
    if b64.is_empty() {
        return Ok(());
    }
    let mut c = Command::new("sh")
        .arg("-c")
        .arg(format!("base64 -d | tar -xzf - -C '{}'", out.display()))
        .stdin(Stdio::piped())
        .spawn()?;
    std::io::Write::write_all(&mut c.stdin.take().context("stdin")?, b64.as_bytes())?;
    let st = c.wait()?;
    if !st.success() {
        bail!("the runs the VM printed do not unpack");
    }
    Ok(())
}
