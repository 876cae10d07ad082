//! Programs by content: every executed file and every file mapped executable carries the
//! SHA-256 of the file the process had, and a policy allows or forbids programs by it.

use std::{
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use aet_tests::*;

fn sha256sum(p: &Path) -> String {
    let o = Command::new("sha256sum").arg(p).output().unwrap();
    assert!(o.status.success());
    text(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// A work directory holding `prog` (a copy of `sleep`) and a script that runs it, rewrites it in
/// place with `echo`'s bytes (same inode, new content) and runs it again. The first program
/// runs for a while: aet hashes it from the running process; the second is short, and its file
/// is unchanged after it: aet hashes it from its path.
fn replaced_in_place(d: &Path) -> (PathBuf, Vec<String>) {
    let w = d.join("w");
    std::fs::create_dir_all(&w).unwrap();
    let prog = w.join("prog");
    std::fs::copy("/bin/sleep", &prog).unwrap();
    let script = format!(
        "set -e; cd '{}'; ./prog 0.3; cat /bin/echo > prog; ./prog second",
        w.display()
    );
    (prog, vec!["sh".into(), "-c".into(), script])
}

/// The exec rows of `prog` (by the path the kernel resolved).
fn execs_of<'a>(rows: &'a [LedgerRow], prog: &Path) -> Vec<&'a LedgerRow> {
    use std::os::unix::ffi::OsStrExt as _;
    rows.iter()
        .filter(|r| {
            r.kind == "exec" && r.resolved_path.as_deref() == Some(prog.as_os_str().as_bytes())
        })
        .collect()
}

/// A program rewritten at the same path (the same inode) between two execs: two rows, two
/// hashes, each the content that ran; the mapped C library carries its own.
#[test]
fn a_program_replaced_in_place_between_two_execs_has_two_hashes() {
    let d = tempdir();
    let (prog, cmd) = replaced_in_place(d.path());
    let ino = std::fs::metadata(&prog).unwrap().ino();
    let run = run_in(&d.path().join("run"), &[], &cmd);
    assert_eq!(
        run.output.status.code(),
        Some(0),
        "{}",
        text(&run.output.stderr)
    );
    assert_complete(&run.ledger());
    let rows = run.rows();
    let execs = execs_of(&rows, &prog);
    assert_eq!(execs.len(), 2, "{execs:#?}");
    assert!(
        execs.iter().all(|r| r.ino == Some(ino)),
        "the same inode: {execs:#?}"
    );
    let want = [
        sha256sum(Path::new("/bin/sleep")),
        sha256sum(Path::new("/bin/echo")),
    ];
    let got: Vec<Option<&str>> = execs.iter().map(|r| r.sha256.as_deref()).collect();
    assert_eq!(
        got,
        [Some(want[0].as_str()), Some(want[1].as_str())],
        "each exec's content: {execs:#?}"
    );
    // Every exec of the run has a hash or says why not.
    for r in rows.iter().filter(|r| r.kind == "exec" && r.ret == Some(0)) {
        assert!(r.sha256.is_some() || r.sha256_error.is_some(), "{r:#?}");
    }
    // The C library, mapped executable by the dynamic loader, by its content.
    let libc = rows
        .iter()
        .find(|r| {
            r.kind == "mmap"
                && r.prot.is_some_and(|p| p & 4 != 0)
                && r.resolved_path
                    .as_deref()
                    .is_some_and(|p| p.ends_with(b"/libc.so.6"))
        })
        .expect("an executable mapping of libc");
    let path = PathBuf::from(std::str::from_utf8(libc.resolved_path.as_deref().unwrap()).unwrap());
    assert_eq!(
        libc.sha256.as_deref(),
        Some(sha256sum(&path).as_str()),
        "{libc:#?}"
    );
}

/// A forbidden hash disqualifies the run wherever the program sat; a path-and-hash rule only
/// that content at that path; `[allow] programs` flags what it does not list.
#[test]
fn a_policy_forbids_and_allows_programs_by_content() {
    let d = tempdir();
    let (_, cmd) = replaced_in_place(d.path());
    let run = run_in(&d.path().join("run"), &[], &cmd);
    assert_eq!(
        run.output.status.code(),
        Some(0),
        "{}",
        text(&run.output.stderr)
    );
    let echo = sha256sum(Path::new("/bin/echo"));
    let truth = sha256sum(Path::new("/bin/sleep"));
    let policy = d.path().join("forbid.toml");
    std::fs::write(
        &policy,
        format!(
            "[cheats]\nforbidden = {{ sha256 = \"{}\" }}\n\
             [warns]\nprog_true = {{ pattern = '/w/prog$', sha256 = \"{truth}\" }}\n\
             prog_other = {{ pattern = '/w/prog$', sha256 = \"{}\" }}\n",
            echo.to_uppercase(),
            "0".repeat(64)
        ),
    )
    .unwrap();
    let (out, v) = audit_json(&run.out, &policy, &[]);
    assert_eq!(out.status.code(), Some(2), "disqualified: {v:#}");
    let cheats = v["cheat_hits"].as_array().unwrap();
    assert!(
        cheats
            .iter()
            .any(|f| f["rule"] == "cheats.forbidden" && f["access"] == "exec"),
        "{v:#}"
    );
    let unused: Vec<&str> = v["unused_rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r.as_str())
        .collect();
    assert!(
        !unused.contains(&"warns.prog_true"),
        "that content at that path: {v:#}"
    );
    assert!(
        unused.contains(&"warns.prog_other"),
        "no such content: {v:#}"
    );

    // Only `sleep`'s content and the system's programs are allowed: `echo`'s is flagged.
    let allowed: Vec<String> = [
        "/usr/bin/dash",
        "/usr/bin/cat",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
    ]
    .iter()
    .map(|p| sha256sum(Path::new(p)))
    .chain([truth])
    .map(|h| format!("\"{h}\""))
    .collect();
    let listed = d.path().join("allow.toml");
    std::fs::write(
        &listed,
        format!(
            "[allow]\nread = [\"/\"]\nwrite = [\"/\"]\nprograms = [{}]\n",
            allowed.join(", ")
        ),
    )
    .unwrap();
    let (out, v) = audit_json(&run.out, &listed, &[]);
    let text_v = format!("{v:#}");
    assert_ne!(out.status.code(), Some(0), "flagged: {text_v}");
    assert!(
        text_v.contains(&format!("sha256:{echo}")),
        "the unlisted program: {text_v}"
    );
    assert!(
        !text_v.contains(&format!("sha256:{}", sha256sum(Path::new("/bin/sleep")))),
        "a listed one: {text_v}"
    );
}

/// A program that ran and was rewritten before aet could look at it (it ended at once, and its
/// file changed right after): no hash, and the row says why; `[allow] programs` never allows
/// what could not be hashed.
#[test]
fn a_program_gone_before_it_could_be_hashed_says_why_and_is_never_allowed() {
    let d = tempdir();
    let w = d.path().join("w");
    std::fs::create_dir_all(&w).unwrap();
    let prog = w.join("prog");
    std::fs::copy("/bin/true", &prog).unwrap();
    // Many short runs, each followed at once by a rewrite: the rows of those aet reached after
    // the rewrite cannot be hashed.
    let script = format!(
        "set -e; cd '{}'; for i in $(seq 40); do ./prog; cat /bin/true > prog; done",
        w.display()
    );
    let run = run_in(&d.path().join("run"), &[], &["sh", "-c", &script]);
    assert_eq!(
        run.output.status.code(),
        Some(0),
        "{}",
        text(&run.output.stderr)
    );
    let rows = run.rows();
    let execs = execs_of(&rows, &prog);
    assert_eq!(execs.len(), 40);
    let truth = sha256sum(Path::new("/bin/true"));
    for r in &execs {
        match (&r.sha256, &r.sha256_error) {
            (Some(h), None) => assert_eq!(h, &truth, "{r:#?}"),
            (None, Some(why)) => assert!(why.contains("changed"), "{r:#?}"),
            _ => panic!("a hash or why not: {r:#?}"),
        }
    }
    if let Some(unhashed) = execs.iter().find(|r| r.sha256.is_none()) {
        let listed = d.path().join("allow.toml");
        std::fs::write(
            &listed,
            format!("[allow]\nread = [\"/\"]\nwrite = [\"/\"]\nprograms = [\"{truth}\"]\n"),
        )
        .unwrap();
        let (out, v) = audit_json(&run.out, &listed, &[]);
        let text_v = format!("{v:#}");
        assert_ne!(out.status.code(), Some(0), "{unhashed:#?}: {text_v}");
        assert!(text_v.contains("sha256:unknown"), "{text_v}");
    } else {
        println!(
            "every exec was hashed before its rewrite (a fast consumer): the unknown case not met"
        );
    }
}
