//! `cargo xtask kernels`: the record on every kernel of the matrix. This machine's kernel runs
//! the conformance workload directly; Debian's kernels (fetched through apt from Debian's own
//! archive, cached under `target/kernels/`, so a re-run works offline) boot under QEMU (TCG:
//! nested KVM fails on these machines) with an initramfs of busybox, the aet binary and its
//! libraries, and the static workload `tests/helpers/conform.c`. Inside, the same script
//! ([`CONFORMANCE`]) records the workload standalone (each program's verified instructions and
//! load time printed as it loads) and through the daemon, two runs at once; the runs come back
//! over the serial console and are checked here with `aet query` ([`checks`]). The tables are
//! printed and written to `docs/kernels.md`.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, bail};

mod checks;
mod vm;

use checks::{CONFORMANCE, Outcome, judge};
use vm::{boot, fetch, initramfs_base};

use crate::{root, sh};

#[derive(clap::Args)]
pub struct Args {
    /// Only these kernels, by label, comma-separated (`native`, `5.10`, `6.1`, `6.12`, `sid`,
    /// `6.1-full+bpf`, `arm64-6.1`, `arm64-6.12`, `arm64-sid`; `x86_64` or `arm64`
    /// for all of one architecture).
    #[arg(long)]
    pub only: Option<String>,
    /// The aet binary to test (default: build it).
    #[arg(long)]
    pub aet: Option<PathBuf>,
    /// The aarch64 aet binary the arm64 VMs run (default: build it, without `aet query`, which
    /// the VMs do not use: the runs are judged on this machine).
    #[arg(long)]
    pub aet_arm64: Option<PathBuf>,
    /// Write docs/kernels.md's tables from this run.
    #[arg(long)]
    pub write_docs: bool,
    /// Skip `cargo xtask setup` (`cargo xtask test` ran it).
    #[arg(long)]
    pub no_setup: bool,
}

/// An architecture the matrix boots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arch {
    X86_64,
    Arm64,
}

impl Arch {
    /// Debian's name.
    pub(crate) fn deb(self) -> &'static str {
        match self {
            Self::X86_64 => "amd64",
            Self::Arm64 => "arm64",
        }
    }

    /// Rust's target.
    pub(crate) fn rust_target(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64-unknown-linux-gnu",
            Self::Arm64 => "aarch64-unknown-linux-gnu",
        }
    }

    /// The C compiler and binutils prefix (Debian's cross toolchain for arm64).
    pub(crate) fn tool(self, name: &str) -> String {
        match self {
            Self::X86_64 => name.to_owned(),
            Self::Arm64 => format!("aarch64-linux-gnu-{name}"),
        }
    }
}

/// One of Debian's kernels, booted one way.
pub(crate) struct Kernel {
    label: &'static str,
    /// The label of the kernel line whose image it boots (its cache under `target/kernels/`).
    image: &'static str,
    /// Added to the kernel's command line: a preemption mode (`preempt=full`), `aet.hammer`
    /// (the conformance script then runs two processes making `bpf()` map calls beside its load
    /// check: another BPF user on the host).
    append: &'static str,
    arch: Arch,
    /// Who runs a kernel of this line.
    who: &'static str,
    suite: &'static str,
    /// The package's name (a regex; the newest match is taken).
    package: &'static str,
}

const KERNELS: &[Kernel] = &[
    Kernel {
        label: "5.10",
        image: "5.10",
        append: "",
        arch: Arch::X86_64,
        who: "Debian 11 (the class of Amazon Linux 2, Ubuntu 22.04's 5.15)",
        suite: "bullseye",
        package: r"^linux-image-5\.10\.0-[0-9]+-cloud-amd64-unsigned$",
    },
    Kernel {
        label: "6.1",
        image: "6.1",
        append: "",
        arch: Arch::X86_64,
        who: "Debian 12, Amazon Linux 2023, GKE COS",
        suite: "bookworm",
        package: r"^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$",
    },
    Kernel {
        label: "6.12",
        image: "6.12",
        append: "",
        arch: Arch::X86_64,
        who: "Debian 13",
        suite: "trixie",
        package: r"^linux-image-6\.12\.[0-9]+\+deb13-cloud-amd64-unsigned$",
    },
    Kernel {
        label: "sid",
        image: "sid",
        append: "",
        arch: Arch::X86_64,
        who: "Debian sid (7.x)",
        suite: "sid",
        package: r"^linux-binary-unsigned-[0-9.]+\+deb14-cloud-amd64$",
    },
    Kernel {
        label: "6.1-full+bpf",
        image: "6.1",
        append: "preempt=full aet.hammer",
        arch: Arch::X86_64,
        who: "6.1 preempting kernel code (RHEL 9's kernel-rt, Ubuntu's lowlatency, any `preempt=full`) beside another BPF user",
        suite: "bookworm",
        package: r"^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$",
    },
    Kernel {
        label: "arm64-6.1",
        image: "arm64-6.1",
        append: "",
        arch: Arch::Arm64,
        who: "Debian 12 on Graviton and Ampere, Amazon Linux 2023 arm64",
        suite: "bookworm",
        package: r"^linux-image-6\.1\.0-[0-9]+-cloud-arm64-unsigned$",
    },
    Kernel {
        label: "arm64-6.12",
        image: "arm64-6.12",
        append: "",
        arch: Arch::Arm64,
        who: "Debian 13 arm64",
        suite: "trixie",
        package: r"^linux-image-6\.12\.[0-9]+\+deb13-cloud-arm64-unsigned$",
    },
    Kernel {
        label: "arm64-sid",
        image: "arm64-sid",
        append: "",
        arch: Arch::Arm64,
        who: "Debian sid arm64 (7.x)",
        suite: "sid",
        package: r"^linux-binary-unsigned-[0-9.]+\+deb14-cloud-arm64$",
    },
];

/// The most instructions the verifier may process for any one program: a quarter of its
/// 1,000,000 limit, so that the next kernel build's verifier, which may charge more, still
/// takes it.
pub const MARGIN: u64 = 250_000;

impl Outcome {
    /// Whether the VM ran the script through and its kernel did not oops: a boot that did not
    /// is made once more.
    fn came_up(&self) -> bool {
        !self.release.is_empty() && !self.oops
    }

    fn failures(&self) -> Vec<String> {
        self.checks
            .iter()
            .filter_map(|(n, r)| r.as_ref().err().map(|e| format!("{n}: {e}")))
            .collect()
    }
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let aet = match &args.aet {
        Some(p) => p.clone(),
        None => crate::build()?,
    };
    let dir = root().join("target/kernels");
    std::fs::create_dir_all(&dir)?;
    let conform = build_conform(&dir, Arch::X86_64)?;
    let wanted = |k: Option<&Kernel>, label: &str| {
        args.only.as_deref().is_none_or(|o| {
            o.split(',').any(|o| {
                o == label
                    || k.is_some_and(|k| {
                        o == k.arch.deb() || o == "x86_64" && k.arch == Arch::X86_64
                    })
            })
        })
    };
    let mut results: Vec<(String, String, Outcome)> = Vec::new();
    if wanted(None, "native") {
        let t = Instant::now();
        let mut o = native(&aet, &conform, &dir.join("native"))?;
        o.seconds = t.elapsed().as_secs_f64();
        let expected = checks::expected(Arch::X86_64);
        if o.checks.len() != expected {
            o.checks.push((
                format!("the kernel ran every check ({expected})"),
                Err(format!("{} checks ran", o.checks.len())),
            ));
        }
        let label = format!("this machine ({})", o.release);
        results.push((label, "the development machine, CI".into(), o));
    }
    // Each architecture's VMs in a chain of their own, the chains side by side (each VM is one
    // host thread of TCG): what they need is fetched and built first, one at a time.
    let mut chains = Vec::new();
    for arch in [Arch::X86_64, Arch::Arm64] {
        let chosen: Vec<&'static Kernel> = KERNELS
            .iter()
            .filter(|k| k.arch == arch && wanted(Some(k), k.label))
            .collect();
        if chosen.is_empty() {
            continue;
        }
        let images = fetch(&dir, &chosen)?;
        // The binary the VMs run: this one, or the arm64 build; the runs are judged here by
        // this machine's.
        let (guest_aet, guest_conform) = match arch {
            Arch::X86_64 => (aet.clone(), conform.clone()),
            Arch::Arm64 => (
                match &args.aet_arm64 {
                    Some(p) => p.clone(),
                    None => crate::build_for(arch.rust_target(), &["--no-default-features"])?,
                },
                build_conform(&dir, arch)?,
            ),
        };
        // arm64's VMs run an AArch32 program too: the compat ABI.
        let compat = match arch {
            Arch::X86_64 => None,
            Arch::Arm64 => Some(build_compat32(&dir)?),
        };
        // Another BPF user, for the boots that run one beside the load check (x86_64's).
        let hammer = match arch {
            Arch::X86_64 => Some(build_helper(&dir, arch, "bpfhammer")?),
            Arch::Arm64 => None,
        };
        let base = initramfs_base(
            &dir,
            arch,
            &guest_aet,
            &guest_conform,
            compat.as_deref(),
            hammer.as_deref(),
        )?;
        chains.push((arch, chosen, images, base));
    }
    let (aet, dir) = (&aet, &dir);
    let done: Vec<anyhow::Result<Vec<(String, String, Outcome)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = chains
            .iter()
            .map(|(arch, chosen, images, base)| {
                s.spawn(move || chain(aet, *arch, dir, chosen, images, base))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a VM chain panicked")))
            })
            .collect()
    });
    for d in done {
        results.extend(d?);
    }
    let report = report(&results);
    println!("{report}");
    std::fs::write(dir.join("report.md"), &report)?;
    if args.write_docs {
        write_docs(&report)?;
    }
    let mut bad = Vec::new();
    for (label, _, o) in &results {
        for f in o.failures() {
            bad.push(format!("{label}: {f}"));
        }
    }
    if !bad.is_empty() {
        bail!("the kernel matrix failed:\n  {}", bad.join("\n  "));
    }
    Ok(())
}

/// One architecture's kernels, one VM after another.
fn chain(
    aet: &Path,
    arch: Arch,
    dir: &Path,
    chosen: &[&Kernel],
    images: &[PathBuf],
    base: &Path,
) -> anyhow::Result<Vec<(String, String, Outcome)>> {
    let mut results = Vec::new();
    for (k, vmlinuz) in chosen.iter().zip(images) {
        let t = Instant::now();
        let mut o = boot(aet, arch, &dir.join(k.label), vmlinuz, base, k.append)?;
        // One more boot only for a boot that did not come up (no output from the script, a VM
        // that never ended, a guest oops outside aet): TCG on a busy machine is slow in ways a
        // kernel is not. A failed check fails the matrix: a second boot that forgave one hid an
        // aet bug (2026-12-07: the daemon's consumer held the runs' lock through a 10 s drain
        // and every run's health check gave up, on 7.2 and arm64's 6.12 and 7.2).
        let first = o.failures();
        if !o.came_up() {
            println!(
                "== kernels: {} did not come up; booting it once more:\n  {}",
                k.label,
                first.join("\n  ")
            );
            // The first boot's files (its runs, the daemon's log) stay for a look.
            let out = dir.join(k.label).join("out");
            let kept = dir.join(k.label).join("out.first-boot");
            let _ = std::fs::remove_dir_all(&kept);
            let _ = std::fs::rename(&out, &kept);
            o = boot(aet, arch, &dir.join(k.label), vmlinuz, base, k.append)?;
            o.flaked = first;
        }
        let expected = checks::expected(arch);
        if o.came_up() && o.checks.len() != expected {
            o.checks.push((
                format!("the kernel ran every check ({expected})"),
                Err(format!("{} checks ran", o.checks.len())),
            ));
        }
        o.seconds = t.elapsed().as_secs_f64();
        println!("== kernels: {} done in {:.0} s", k.label, o.seconds);
        results.push((format!("{} ({})", k.label, o.release), k.who.into(), o));
    }
    Ok(results)
}

/// The AArch32 workload (`tests/helpers/compat32.c`), static, for the arm64 VMs.
fn build_compat32(dir: &Path) -> anyhow::Result<PathBuf> {
    let out = dir.join("compat32");
    sh(Command::new("arm-linux-gnueabihf-gcc")
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(root().join("tests/helpers/compat32.c")))
    .context("arm-linux-gnueabihf-gcc (cargo xtask setup installs gcc-arm-linux-gnueabihf)")?;
    Ok(out)
}

/// The workload, static (it runs in the VMs' initramfs).
fn build_conform(dir: &Path, arch: Arch) -> anyhow::Result<PathBuf> {
    build_helper(dir, arch, "conform")
}

/// `tests/helpers/NAME.c`, static, for `arch`.
fn build_helper(dir: &Path, arch: Arch, name: &str) -> anyhow::Result<PathBuf> {
    let out = dir.join(match arch {
        Arch::X86_64 => name.to_owned(),
        Arch::Arm64 => format!("{name}-arm64"),
    });
    sh(Command::new(arch.tool("gcc"))
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(root().join(format!("tests/helpers/{name}.c"))))?;
    Ok(out)
}

/// The conformance script on this machine's kernel.
fn native(aet: &Path, conform: &Path, dir: &Path) -> anyhow::Result<Outcome> {
    let _ = std::fs::remove_dir_all(dir);
    let (out, base) = (dir.join("out"), dir.join("work"));
    std::fs::create_dir_all(&out)?;
    let script = dir.join("conformance.sh");
    std::fs::write(&script, CONFORMANCE)?;
    let o = crate::user_command("sh")
        .arg(&script)
        .arg(aet)
        .arg(conform)
        .arg(&out)
        .arg(&base)
        .stdin(Stdio::null())
        .output()
        .context("sh conformance.sh")?;
    let text = String::from_utf8_lossy(&o.stdout);
    Ok(judge(aet, &text, &out, &base))
}

/// The tables, as markdown.
fn report(results: &[(String, String, Outcome)]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "### Kernel × program: instructions verified (load time)\n"
    );
    let mut programs: Vec<&String> = results
        .iter()
        .flat_map(|(.., o)| o.programs.keys())
        .collect();
    programs.sort();
    programs.dedup();
    let _ = write!(s, "| program |");
    for (label, ..) in results {
        let _ = write!(s, " {label} |");
    }
    let _ = write!(s, "\n| --- |");
    for _ in results {
        let _ = write!(s, " --- |");
    }
    s.push('\n');
    for p in &programs {
        let _ = write!(s, "| `{p}` |");
        for (.., o) in results {
            match o.programs.get(*p) {
                Some((Some(i), ms)) => {
                    let _ = write!(s, " {} ({ms:.0} ms) |", thousands(*i));
                }
                Some((None, ms)) => {
                    let _ = write!(s, " loaded, count not reported ({ms:.0} ms) |");
                }
                None => s.push_str(" — |"),
            }
        }
        s.push('\n');
    }
    let _ = writeln!(s, "\n### Kernel × check\n");
    let _ = writeln!(
        s,
        "| kernel | who runs it | build | result | time | failed |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- |");
    for (label, who, o) in results {
        let failed = o.failures();
        let result = match failed.is_empty() {
            true if !o.flaked.is_empty() => format!(
                "records: {} checks pass (on a second boot; the first did not come up: {})",
                o.checks.len(),
                o.flaked.join("; ")
            ),
            true => format!("records: {} checks pass", o.checks.len()),
            false => format!("**fails** {} of {}", failed.len(), o.checks.len()),
        };
        let _ = writeln!(
            s,
            "| {label} | {who} | `{}` | {result} | {:.0} s | {} |",
            o.build,
            o.seconds,
            failed.join("; ").replace('|', "\\|").replace('\n', " ")
        );
    }
    s
}

fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut s = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            s.push(',');
        }
        s.push(c);
    }
    s
}

/// Replaces the generated part of docs/kernels.md.
fn write_docs(report: &str) -> anyhow::Result<()> {
    let path = root().join("docs/kernels.md");
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let (begin, end) = ("<!-- generated:kernels -->", "<!-- end:kernels -->");
    let (Some(a), Some(b)) = (text.find(begin), text.find(end)) else {
        bail!("{} has no {begin} ... {end} section", path.display());
    };
    let new = format!("{}{begin}\n{report}\n{}", &text[..a], &text[b..]);
    std::fs::write(&path, new)?;
    Ok(())
}
