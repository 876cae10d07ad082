//! Faults and bad input: a ledger that can no longer be written stops the run at once; `--out`
//! means the same with and without a daemon; no command overwrites its own input.

use std::{fs, path::Path, process::Command};

use aet_tests::*;

/// A tmpfs of `size` at a fresh directory, unmounted when dropped.
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn new(size: &str) -> Self {
        let d = tempdir();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(d.path())
            .status()
            .unwrap();
        assert!(ok.success(), "mount tmpfs");
        Self(d)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn a_ledger_that_cannot_be_written_stops_the_run_at_once() {
    let disk = SmallDisk::new("512k");
    let dir = tempdir();
    let done = dir.path().join("done");
    let out = disk.0.path().join("run");
    let r = run_in(
        &out,
        &[],
        &[
            "sh",
            "-c",
            &format!(
                "{} 400000 /etc/hostname; touch {}",
                helper("openstorm").display(),
                done.display()
            ),
        ],
    );
    assert_eq!(r.code(), 125, "{}", r.stderr());
    assert!(!done.exists(), "the command ran on unrecorded to its end");
    let err = r.stderr();
    assert!(err.contains("can no longer be recorded"), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    // What reached the file reads as an unfinished ledger: never a complete record.
    let l = aet_core::ledger::reader::Ledger::open(&r.ledger()).unwrap();
    assert_eq!(l.form(), aet_core::ledger::reader::Form::Unfinished);
}

#[test]
fn a_relative_out_is_the_clients_directory_with_or_without_a_daemon() {
    let dir = tempdir();
    let o = aet()
        .current_dir(dir.path())
        .args(["run", "-q", "--out", "rel/run", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let ledger = dir.path().join("rel/run/ledger.arrow");
    assert!(ledger.is_file(), "{}", text(&o.stderr));
    assert_complete(&ledger);
}

#[test]
fn no_command_overwrites_its_own_input() {
    let dir = tempdir();
    let r = run_ok(dir.path(), &["cat", "/etc/hostname"]);
    let ledger = r.ledger();
    let before = fs::read(&ledger).unwrap();
    let policy = dir.path().join("p.toml");
    fs::write(&policy, "[cheats]\nx = 'nothing-here'\n").unwrap();
    let audit = |extra: &[&Path], flags: &[&str]| {
        let mut c = aet();
        c.arg("audit").arg(&r.out).arg("--policy").arg(&policy);
        for (f, p) in flags.iter().zip(extra) {
            c.arg(f).arg(p);
        }
        c.output().unwrap()
    };
    for (flag, target) in [
        ("--json", ledger.clone()),
        ("--html", ledger.clone()),
        ("--json", policy.clone()),
        ("--json", r.out.join(".").join("ledger.arrow")),
    ] {
        let o = audit(&[&target], &[flag]);
        assert_eq!(
            o.status.code(),
            Some(4),
            "{flag} {}: {}",
            target.display(),
            text(&o.stderr)
        );
        assert!(
            text(&o.stderr).contains("would overwrite"),
            "{}",
            text(&o.stderr)
        );
    }
    assert_eq!(fs::read(&ledger).unwrap(), before, "the ledger was changed");
    assert_eq!(
        fs::read_to_string(&policy).unwrap(),
        "[cheats]\nx = 'nothing-here'\n"
    );
    // The query's output may not be a ledger it reads either.
    let q = aet()
        .args(["query", "--format", "arrow", "-o"])
        .arg(&ledger)
        .arg("select * from events")
        .arg(&r.out)
        .output()
        .unwrap();
    assert_eq!(q.status.code(), Some(4), "{}", text(&q.stderr));
    assert_eq!(
        fs::read(&ledger).unwrap(),
        before,
        "the ledger was changed by aet query"
    );
    // A report beside the ledger is what it is for.
    let o = audit(&[&r.out.join("audit.json")], &["--json"]);
    assert!(
        o.status.code().is_some_and(|c| c < 4),
        "{}",
        text(&o.stderr)
    );
}
