//! What a user reads when this kernel cannot take aet's programs, and the object a kernel
//! without `bpf_rdonly_cast` gets, recorded here: `AET_DEBUG_KERNEL_LACKS` makes aet see this
//! kernel without the functions it names (the other kernels themselves are `cargo xtask
//! kernels`'s, in VMs).

use std::{path::Path, process::Command};

use aet_tests::*;

/// aet as on a kernel without `funcs`.
fn lacking(funcs: &str) -> Command {
    let mut c = aet();
    c.env("AET_DEBUG_KERNEL_LACKS", funcs);
    c
}

fn resolved<'a>(rows: &'a [LedgerRow], path: &Path) -> Vec<&'a LedgerRow> {
    use std::os::unix::ffi::OsStrExt as _;
    let want = path.as_os_str().as_bytes();
    rows.iter()
        .filter(|r| r.resolved_path.as_deref() == Some(want))
        .collect()
}

/// A kernel without a helper every variant needs: refused before anything loads, in one line
/// that names each missing function and the release that has it, and no ledger claims a record.
#[test]
fn a_kernel_without_the_helpers_is_refused_at_once_in_one_line() {
    let d = tempdir();
    let out = d.path().join("run");
    let o = lacking("bpf_ringbuf_output,bpf_loop")
        .args(["run", "--standalone", "--out"])
        .arg(&out)
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line, not a log:\n{err}");
    let l = lines[0];
    assert!(l.contains("cannot run aet's programs"), "{l}");
    assert!(l.contains("bpf_ringbuf_output (Linux 5.8+"), "{l}");
    assert!(l.contains("aet records on Linux 5.8 and later"), "{l}");
    assert!(
        !out.join("ledger.arrow").exists()
            || !summary(&out.join("ledger.arrow"))["complete"]
                .as_bool()
                .unwrap_or(false),
        "a refused run never has a complete record"
    );
}

/// A run whose daemon (started by the run) cannot load says the daemon's reason once and does
/// not repeat the load itself.
#[test]
fn a_daemon_that_cannot_load_says_why_and_the_run_does_not_retry() {
    let d = tempdir();
    let socket = d.path().join("aet.sock");
    let o = lacking("bpf_ringbuf_output")
        .env("AET_SOCKET", &socket)
        .env("AET_DAEMON", "auto")
        .args(["run", "--out"])
        .arg(d.path().join("run"))
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert_eq!(
        err.matches("cannot run aet's programs").count(),
        1,
        "the reason once:\n{err}"
    );
    assert!(err.contains("bpf_ringbuf_output (Linux 5.8+"), "{err}");
    assert!(
        err.contains("said by the aet daemon this run started"),
        "{err}"
    );
    assert!(!err.contains("loads its own programs"), "no retry:\n{err}");
    let refused = std::fs::read_to_string(d.path().join("aet.sock.refused")).unwrap();
    assert!(
        refused.contains("bpf_ringbuf_output (Linux 5.8+"),
        "{refused}"
    );
}

/// Without `bpf_rdonly_cast` aet loads the helper-reads object; on this kernel it records what
/// the other one does: the conformance workload's opens by dirfd, through a symlink and `..`,
/// its failed open, rename, exec, daemon's write, received fd and connect.
#[test]
fn the_helper_reads_object_records_the_workload() {
    records_the_workload("bpf_rdonly_cast", "kernel reads through helper reads (");
}

/// Without the loop and task helpers of 5.11-5.17 (5.10's kernel) aet loads the legacy object
/// (bounded loops, registers from the task's stack): it records the same workload.
#[test]
fn the_legacy_object_records_the_workload() {
    for lacks in [
        "bpf_loop",
        "bpf_task_pt_regs,bpf_get_current_task_btf,bpf_for_each_map_elem",
    ] {
        records_the_workload(lacks, "helper reads and bounded loops (the legacy object");
    }
}

fn records_the_workload(lacks: &str, variant: &str) {
    let doctor = lacking(lacks).arg("doctor").output().unwrap();
    let dtext = text(&doctor.stdout);
    assert!(doctor.status.success(), "{dtext}");
    assert!(dtext.contains(variant), "{dtext}");
    let d = tempdir();
    let work = d.path().join("w");
    let out = d.path().join("run");
    let o = lacking(lacks)
        .args(["run", "--standalone", "--out"])
        .arg(&out)
        .arg("--")
        .arg(helper("conform"))
        .arg(&work)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let ledger = out.join("ledger.arrow");
    assert_complete(&ledger);
    let rows = rows(&ledger);
    let opened = |rel: &str, path: &str| {
        resolved(&rows, &work.join(rel)).into_iter().any(|r| {
            r.kind == "open"
                && r.path.as_deref() == Some(path.as_bytes())
                && r.resolved_from.as_deref() == Some("object")
        })
    };
    assert!(opened("dir/a.txt", "a.txt"), "the open by dirfd");
    let link = work.join("link");
    assert!(
        opened("dir/target.txt", link.to_str().unwrap()),
        "the open through the symlink"
    );
    assert!(opened("dir/b.txt", "../dir/b.txt"), "the open through ..");
    assert!(
        resolved(&rows, &work.join("missing.txt"))
            .iter()
            .any(|r| r.kind == "open" && r.errno.as_deref() == Some("ENOENT")),
        "the failed open"
    );
    assert!(
        resolved(&rows, &work.join("dir/b.txt"))
            .iter()
            .any(|r| r.kind == "modify"
                && r.resolved_path2.as_deref()
                    == Some(work.join("dir/c.txt").to_str().unwrap().as_bytes())),
        "the rename"
    );
    assert!(
        rows.iter().any(|r| r.kind == "exec"
            && r.argv
                .as_ref()
                .is_some_and(|a| a.iter().any(|x| x == "conform-argv-marker"))),
        "the exec's argv"
    );
    assert!(
        !resolved(&rows, &work.join("daemon.txt")).is_empty(),
        "the daemonised process's write"
    );
    assert!(
        rows.iter().any(|r| r.kind == "fd"
            && r.fd_origin.as_deref() == Some("received")
            && r.syscall.as_deref() == Some("recvmmsg")),
        "the fd received with recvmmsg"
    );
    assert!(
        rows.iter()
            .any(|r| r.kind == "net" && r.net_port == Some(9)),
        "the connect"
    );
}
