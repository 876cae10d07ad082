//! `aet doctor`: what this kernel and machine support, what aet will use, and whether `aet run`
//! can work. The decisive check loads and attaches the real programs (scoped to this process)
//! and detaches them again.
use super::Exit;
use std::path::Path;

use serde::Serialize;

use aet_kernel::{btf, cgroup, procfs, tracefs};

use aet_monitor::loader::{self, Attach, LoadOptions, Programs};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct Check {
    name: &'static str,
    /// `ok`, `missing` (aet run cannot work), or `note` (informational, not required).
    status: &'static str,
    detail: String,
}

fn check(name: &'static str, ok: bool, detail: impl Into<String>) -> Check {
    Check {
        name,
        status: if ok { "ok" } else { "missing" },
        detail: detail.into(),
    }
}

fn note(name: &'static str, detail: impl Into<String>) -> Check {
    Check {
        name,
        status: "note",
        detail: detail.into(),
    }
}

/// Effective capability bits of this process.
fn cap_eff() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

pub fn run(a: Args) -> anyhow::Result<u8> {
    let mut checks = Vec::new();
    checks.push(note("kernel", procfs::kernel_release()));
    let caps = cap_eff();
    let (sys_admin, bpf, perfmon) = (
        caps & (1 << 21) != 0,
        caps & (1 << 39) != 0,
        caps & (1 << 38) != 0,
    );
    checks.push(check(
        "privileges",
        sys_admin || (bpf && perfmon),
        format!(
            "uid {}, CAP_SYS_ADMIN {sys_admin}, CAP_BPF {bpf}, CAP_PERFMON {perfmon}",
            nix::unistd::geteuid()
        ),
    ));
    let has_btf = Path::new(btf::VMLINUX_BTF).exists();
    checks.push(check("btf", has_btf, btf::VMLINUX_BTF));
    if has_btf {
        match btf::KernelBtf::load().and_then(|b| b.offsets()) {
            Ok(o) => checks.push(check(
                "btf offsets",
                true,
                format!(
                    "task_struct.pid@{} tgid@{} real_parent@{} mm@{} exit_code@{}; mm_struct.arg_start@{}",
                    o.task_pid, o.task_tgid, o.task_real_parent, o.task_mm, o.task_exit_code, o.mm_arg_start
                ),
            )),
            Err(e) => checks.push(check("btf offsets", false, e.to_string())),
        }
    }
    let was_mounted = tracefs::is_mounted();
    match tracefs::ensure_mounted() {
        Ok(mounted) => checks.push(check(
            "tracefs",
            true,
            if mounted && !was_mounted {
                format!("{} (mounted it now)", tracefs::TRACEFS)
            } else {
                tracefs::TRACEFS.to_owned()
            },
        )),
        Err(e) => checks.push(check("tracefs", false, e.to_string())),
    }
    let missing: Vec<String> = loader::PROGRAMS
        .iter()
        .filter_map(|(_, at)| match at {
            Attach::TracePoint(c, n)
                if !tracefs::has_tracepoint(c, loader::tracepoint_name(c, n)) =>
            {
                Some(format!("{c}/{n}"))
            }
            _ => None,
        })
        .collect();
    checks.push(check(
        "tracepoints",
        missing.is_empty(),
        if missing.is_empty() {
            "raw_syscalls:sys_exit, task:task_newtask, sched:sched_process_exec/exit, \
             io_uring:io_uring_submit_req, syscalls:sys_enter_execve(at), cgroup_attach_task (raw)"
                .to_owned()
        } else {
            format!("missing: {}", missing.join(", "))
        },
    ));
    match cgroup::cgroup2_root() {
        Ok(root) => {
            let probe = cgroup::RunCgroup::create(&format!("doctor-{}", std::process::id()));
            let writable = probe.is_ok();
            let kill = probe
                .as_ref()
                .map(|c| c.path().join("cgroup.kill").exists())
                .unwrap_or(false);
            drop(probe);
            checks.push(check(
                "cgroup v2",
                writable,
                format!(
                    "{} ({}; cgroup.kill {})",
                    root.display(),
                    if writable {
                        "can create run cgroups"
                    } else {
                        "cannot create cgroups"
                    },
                    if kill {
                        "available"
                    } else {
                        "missing, SIGKILL per process instead"
                    }
                ),
            ));
        }
        Err(e) => checks.push(check("cgroup v2", false, e.to_string())),
    }
    let socket = aet_monitor::daemon::default_socket();
    match crate::daemon::status(&socket) {
        Ok(Some(aet_monitor::daemon::protocol::Response::Status { pid, runs, max_runs, .. })) => {
            checks.push(note(
                "monitor",
                format!(
                    "aet run and aet monitor will use the aet daemon at {} (pid {pid}, serving {} of {max_runs} runs)",
                    socket.display(),
                    runs.len()
                ),
            ))
        }
        Ok(_) => checks.push(note(
            "monitor",
            format!(
                "no aet daemon answers at {}: aet run and aet monitor load the programs themselves (standalone)",
                socket.display()
            ),
        )),
        Err(e) => checks.push(check("monitor", false, e.to_string())),
    }
    match Programs::load(&LoadOptions {
        ringbuf_bytes: 1 << 20,
    }) {
        Ok(mut l) => {
            l.detach();
            checks.push(check(
                "eBPF programs",
                true,
                format!(
                    "{} programs loaded, {} attached, the rest reached from sys_exit by tail calls (ring buffer, tracepoints, raw tracepoints, program array, {}); kernel reads through {}; {}",
                    l.loaded().len(),
                    loader::PROGRAMS
                        .iter()
                        .filter(|(_, a)| match a {
                            Attach::Exit(_) => false,
                            Attach::Witness(..) => l.witnessed(),
                            _ => true,
                        })
                        .count(),
                    if l.variant() == aet_monitor::loader::features::Variant::Legacy {
                        "bounded loops"
                    } else {
                        "bpf_loop"
                    },
                    l.variant().describe(),
                    if l.witnessed() {
                        "each record-building tracepoint program has a witness that counts, as a lost event of its run, what the kernel skipped it for (kernels before 6.7 count none of it)"
                    } else {
                        "the kernel counts the programs' skipped runs (no witnesses)"
                    }
                ),
            ));
            for p in l.loaded() {
                checks.push(verified(p));
            }
        }
        Err(e) => checks.push(check("eBPF programs", false, e.to_string())),
    }
    checks.push(note(
        "not used",
        "fentry/fexit, BPF LSM and kprobes: aet uses tracepoints only",
    ));
    match which_bwrap() {
        Some(v) => checks.push(note("bubblewrap", v)),
        None => checks.push(note("bubblewrap", "not installed (needed for sandboxes)")),
    }
    checks.push(note("landlock", landlock_abi()));
    checks.push(note(
        "seccomp",
        "io_uring is closed in sandboxes by a seccomp filter (libseccomp) unless the spec says io_uring = \"allow\"",
    ));
    let ok = checks.iter().all(|c| c.status != "missing");
    if a.json {
        let v = serde_json::json!({ "ok": ok, "checks": checks });
        super::print_out(&(serde_json::to_string_pretty(&v)? + "\n"))?;
    } else {
        let mut out = String::new();
        for c in &checks {
            out += &format!("{:<8} {:<20} {}\n", c.status, c.name, c.detail);
        }
        out += if ok {
            "\naet run can work on this machine.\n"
        } else {
            "\naet run CANNOT work on this machine: see the checks marked missing.\n"
        };
        super::print_out(&out)?;
    }
    Ok(if ok { Exit::Success } else { Exit::Negative }.code())
}

/// One program's verified instructions and its margin to the verifier's limit: under a quarter
/// of the limit is the margin aet keeps (a later kernel build's verifier may charge more).
fn verified(p: &loader::Loaded) -> Check {
    let Some(n) = p.verified else {
        return note(
            "program",
            format!(
                "{}: loaded in {:.0} ms (this kernel does not count verified instructions)",
                p.name, p.ms
            ),
        );
    };
    let limit = loader::VERIFIER_LIMIT;
    let detail = format!(
        "{}: {n} instructions verified, {:.1} % of the limit {limit} ({:.0}x margin), loaded in {:.0} ms",
        p.name,
        100.0 * f64::from(n) / f64::from(limit),
        f64::from(limit) / f64::from(n.max(1)),
        p.ms
    );
    if n > limit / 4 {
        note(
            "program",
            format!(
                "{detail}: WARNING, within 4x of the limit; a later kernel build may refuse it"
            ),
        )
    } else {
        Check {
            name: "program",
            status: "ok",
            detail,
        }
    }
}

/// The kernel's Landlock ABI, and whether `--mode enforce` can run on it.
fn landlock_abi() -> String {
    let abi = aet_sandbox::barrier::kernel_abi();
    match aet_sandbox::barrier::cannot_enforce() {
        None => format!(
            "ABI {abi}: aet run --mode enforce can build its barrier (files, signals, abstract sockets)"
        ),
        Some(why) => why,
    }
}

fn which_bwrap() -> Option<String> {
    let out = std::process::Command::new("bwrap")
        .arg("--version")
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
