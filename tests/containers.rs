//! Containers started under a run, with real Docker and Podman from Debian's packages and a root
//! file system made here (busybox, no registry): recorded from their entrypoint's first exec
//! when they are started with `--cgroup-parent="$AET_CGROUP"`, and a run that hands a container
//! to Docker's daemon without it is marked incomplete, naming the runtime.
//!
//! `cargo xtask test` installs docker.io, podman, runc and busybox-static and starts dockerd.

use std::{fs, path::PathBuf, process::Command, sync::OnceLock};

use aet_tests::*;

/// The file inside the container's root file system that the container reads.
const INSIDE: &str = "/data/inside.txt";

/// A busybox root file system (`target/aet-bb-rootfs`), and the Docker image `aet-bb:test` made
/// from it with `docker import`.
fn rootfs() -> PathBuf {
    static ROOTFS: OnceLock<PathBuf> = OnceLock::new();
    ROOTFS
        .get_or_init(|| {
            let dir = root().join("target/aet-bb-rootfs");
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(dir.join("bin")).unwrap();
            fs::create_dir_all(dir.join("data")).unwrap();
            fs::create_dir_all(dir.join("etc")).unwrap();
            fs::copy("/bin/busybox", dir.join("bin/busybox")).expect("busybox-static is installed");
            for c in ["sh", "cat", "ls", "sleep", "echo", "seq"] {
                std::os::unix::fs::symlink("busybox", dir.join("bin").join(c)).unwrap();
            }
            fs::write(dir.join("data/inside.txt"), "the container's own file\n").unwrap();
            let import = Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "tar -C {} -c . | docker import - aet-bb:test",
                    dir.display()
                ))
                .output()
                .unwrap();
            assert!(
                import.status.success(),
                "docker import: {}",
                text(&import.stderr)
            );
            dir
        })
        .clone()
}

/// The rows of the successful opens of the container's file (by `cat`, whose comm is `exe`
/// when busybox's shell runs its applet through `/proc/self/exe`).
fn inside_reads(rows: &[LedgerRow]) -> Vec<&LedgerRow> {
    rows.iter()
        .filter(|r| {
            r.kind == "open"
                && r.ret.is_some_and(|v| v >= 0)
                && r.resolved_path.as_deref() == Some(INSIDE.as_bytes())
        })
        .collect()
}

fn check_container_recorded(r: &Run, host_prefix: impl Fn(&str) -> bool) {
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(r.stdout(), "the container's own file\n");
    assert_complete(&r.ledger());
    let rows = r.rows();
    // The entrypoint's exec is in the record: `cat`, with its arguments.
    let exec = rows
        .iter()
        .find(|x| {
            x.kind == "exec"
                && x.ret == Some(0)
                && x.argv.as_deref() == Some(&["cat".to_owned(), INSIDE.to_owned()][..])
        })
        .expect("the container's first exec is recorded");
    // The read, as the container sees it and as the host sees it.
    let reads = inside_reads(&rows);
    assert!(!reads.is_empty(), "the container's read is recorded");
    let host =
        String::from_utf8_lossy(reads[0].host_path.as_deref().expect("a host path")).into_owned();
    assert!(host.ends_with(INSIDE) && host_prefix(&host), "{host}");
    assert_eq!(reads[0].pid, exec.pid);
    // The container is in a cgroup below the run's: the run's scope covered it.
    let run_cgroup: u64 = meta(&r.ledger())["aet.scope_target"]
        .rsplit("(id ")
        .next()
        .unwrap()
        .trim_end_matches(')')
        .parse()
        .unwrap();
    assert_ne!(
        reads[0].cgroup_id, run_cgroup,
        "the container has a cgroup of its own"
    );
}

#[test]
fn a_docker_container_with_the_runs_cgroup_parent_is_recorded_from_its_first_exec() {
    rootfs();
    let d = tempdir();
    let r = run_ok(
        d.path(),
        &[
            "sh",
            "-c",
            &format!("docker run --rm --cgroup-parent=\"$AET_CGROUP\" aet-bb:test cat {INSIDE}"),
        ],
    );
    check_container_recorded(&r, |h| h.starts_with("/var/lib/docker/"));
}

#[test]
fn a_podman_container_with_the_runs_cgroup_parent_is_recorded_from_its_first_exec() {
    let fs_root = rootfs();
    let d = tempdir();
    let r = run_ok(
        d.path(),
        &[
            "sh",
            "-c",
            &format!(
                "podman run --rm --runtime runc --cgroup-manager cgroupfs \
                 --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
                 --cgroup-parent=\"$AET_CGROUP\" --rootfs {} cat {INSIDE}",
                fs_root.display()
            ),
        ],
    );
    let prefix = fs_root.display().to_string();
    check_container_recorded(&r, |h| h.starts_with(&prefix));
}

/// Without `--cgroup-parent`, Docker's daemon starts the container outside the run: the record
/// cannot hold it, and says so (never "complete" with the agent's work missing).
#[test]
fn a_docker_container_outside_the_run_makes_the_record_incomplete_naming_docker() {
    rootfs();
    let d = tempdir();
    let r = run_ok(
        d.path(),
        &["docker", "run", "--rm", "aet-bb:test", "cat", INSIDE],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let m = meta(&r.ledger());
    assert_eq!(m["aet.complete"], "false");
    let reasons: serde_json::Value = serde_json::from_str(&m["aet.incomplete_reasons"]).unwrap();
    let outside = reasons
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["code"] == "container_outside")
        .unwrap_or_else(|| panic!("{reasons}"));
    assert_eq!(outside["runtime"], "docker");
    assert!(r.stderr().contains("INCOMPLETE RECORD"), "{}", r.stderr());
    assert!(
        inside_reads(&r.rows()).is_empty(),
        "the container ran outside the run"
    );
    assert_audit_inconclusive(&r.out);
}

/// A detached Docker container of the test image running `script`, named for this test; removed
/// when dropped.
struct Detached(String);

impl Detached {
    fn start(tag: &str, script: &str) -> Self {
        rootfs();
        let name = format!("aet-test-{tag}-{}", std::process::id());
        let started = Command::new("docker")
            .args([
                "run",
                "-d",
                "--rm",
                "--name",
                &name,
                "aet-bb:test",
                "sh",
                "-c",
            ])
            .arg(script)
            .output()
            .unwrap();
        assert!(started.status.success(), "{}", text(&started.stderr));
        Self(name)
    }

    /// `docker kill`, then `docker wait` for its end: the shell command a test runs.
    fn kill_command(&self) -> String {
        format!(
            "docker kill {0} >/dev/null 2>&1; docker wait {0} >/dev/null 2>&1; true",
            self.0
        )
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &self.0]).output();
    }
}

/// `aet monitor --container` attaches to a running container's cgroup; its record says the
/// container's processes were already running. The container reads until the test ends it,
/// after the monitor has said it is attached: nothing here depends on how long the attach takes.
#[test]
fn aet_monitor_attaches_to_a_running_container() {
    let d = tempdir();
    let c = Detached::start(
        "attach",
        &format!("while :; do cat {INSIDE} > /dev/null; sleep 0.1; done"),
    );
    let out = d.path().join("mon");
    let m = Attached::spawn(
        aet()
            .args(["monitor", "--container", &c.0, "--out"])
            .arg(&out),
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let kill = Command::new("sh").arg("-c").arg(c.kill_command()).status();
    assert!(kill.unwrap().success());
    let (status, stderr) = m.wait_within(std::time::Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "incomplete: {stderr}");
    assert!(stderr.contains("stopping: the target is gone"), "{stderr}");
    let ledger = out.join("ledger.arrow");
    assert!(inside_reads(&rows(&ledger)).len() >= 3);
    let reasons = &meta(&ledger)["aet.incomplete_reasons"];
    assert!(reasons.contains("already_running"), "{reasons}");
    assert!(!reasons.contains("target_ended"), "{reasons}");
}

/// A container that ends while the monitor attaches (here: killed by the test hook that runs
/// between finding the container and loading the programs): the monitor ends at once, its
/// record incomplete and saying that the container ended, never waiting on it.
#[test]
fn aet_monitor_of_a_container_that_ends_during_the_attach_ends_at_once() {
    let d = tempdir();
    let c = Detached::start("ends", "sleep 1000");
    let out = d.path().join("mon");
    let m = output_within(
        aet()
            .args(["monitor", "--container", &c.0, "--out"])
            .arg(&out)
            .env("AET_DEBUG_AT_ATTACH", c.kill_command()),
        std::time::Duration::from_secs(60),
    );
    let stderr = text(&m.stderr);
    assert_eq!(m.status.code(), Some(1), "incomplete: {stderr}");
    assert!(
        stderr.contains("ended before or while the monitor attached"),
        "{stderr}"
    );
    let ledger = out.join("ledger.arrow");
    let meta = meta(&ledger);
    assert_eq!(meta["aet.finished"], "true");
    let reasons = &meta["aet.incomplete_reasons"];
    assert!(reasons.contains("target_ended"), "{reasons}");
    assert!(reasons.contains(&c.0), "names the container: {reasons}");
    assert_audit_inconclusive(&out);
}
