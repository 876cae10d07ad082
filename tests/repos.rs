//! Task repositories in the sandbox spec (`[[repo]] path, base, history`): `verify` stops a run
//! whose repository reaches past its base and names each leak; `sanitize` gives the agent a
//! repository holding exactly the base's history. Real git, real bwrap.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use aet_tests::*;

struct Task {
    _dir: tempfile::TempDir,
    root: PathBuf,
    repo: PathBuf,
    base: String,
    fix: String,
    blob: String,
}

impl Task {
    /// A repository whose base has a future: the fix committed on another branch, a tag on it,
    /// reflog entries of both, a commit reset away (ORIG_HEAD), and an unreachable blob holding
    /// the fix.
    fn leaky() -> Self {
        let t = Self::clean();
        let r = &t.repo;
        git(r, &["checkout", "-q", "-b", "upstream"]);
        fs::write(r.join("code.py"), "FIXED\n").unwrap();
        git(r, &["commit", "-qam", "the fix"]);
        let fix = git(r, &["rev-parse", "HEAD"]);
        git(r, &["tag", "v2"]);
        git(r, &["checkout", "-q", "main"]);
        // A commit made and reset away: ORIG_HEAD names it.
        git(r, &["commit", "-q", "--allow-empty", "-m", "tried"]);
        git(r, &["reset", "-q", "--hard", &t.base]);
        let blob = {
            let o = Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "echo 'FIX IN A DANGLING BLOB' | git -c safe.directory='*' -C {} hash-object -w --stdin",
                    r.display()
                ))
                .output()
                .unwrap();
            text(&o.stdout).trim().to_owned()
        };
        Self { fix, blob, ..t }
    }

    /// A repository holding only its base.
    fn clean() -> Self {
        let dir = tempdir();
        let root = dir.path().to_owned();
        let repo = root.join("ws/repo");
        fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        fs::write(repo.join("code.py"), "bug\n").unwrap();
        git(&repo, &["add", "."]);
        git(&repo, &["commit", "-qm", "base"]);
        let base = git(&repo, &["rev-parse", "HEAD"]);
        Self {
            _dir: dir,
            root,
            repo,
            base,
            fix: String::new(),
            blob: String::new(),
        }
    }

    fn spec(&self, history: &str, base: &str) -> PathBuf {
        let p = self.root.join(format!("spec-{}.toml", unique()));
        fs::write(
            &p,
            format!(
                "workspace = {:?}\n[[repo]]\npath = {:?}\nbase = {base:?}\nhistory = {history:?}\n",
                self.root.join("ws"),
                self.repo
            ),
        )
        .unwrap();
        p
    }

    fn run(&self, spec: &Path, extra: &[&str], script: &str) -> Run {
        let mut args = vec!["--sandbox", spec.to_str().unwrap()];
        args.extend_from_slice(extra);
        run_in(
            &self.root.join(format!("run-{}", unique())),
            &args,
            &["sh", "-c", script],
        )
    }
}

#[test]
fn verify_stops_a_run_whose_repository_reaches_past_its_base_and_names_each_leak() {
    let t = Task::leaky();
    let marker = t.root.join("ws/ran");
    let r = t.run(
        &t.spec("verify", "main"),
        &[],
        &format!("touch {}", marker.display()),
    );
    assert_eq!(r.code(), 125, "{}", r.stderr());
    assert!(!marker.exists(), "the agent ran");
    let err = r.stderr();
    let fix = &t.fix[..12];
    for want in [
        format!("ref refs/heads/upstream names {fix}"),
        format!("ref refs/tags/v2 names {fix}"),
        "reflog logs/refs/heads/upstream".to_owned(),
        "reflog logs/HEAD".to_owned(),
        "ORIG_HEAD names".to_owned(),
        "not reachable from base".to_owned(),
        format!("blob {}", &t.blob[..12]),
        format!("commit {fix}"),
    ] {
        assert!(err.contains(&want), "{want}: {err}");
    }
    // The stage's report keeps the check.
    let sb: serde_json::Value = serde_json::from_str(&r.meta()["aet.sandbox"]).unwrap();
    assert_eq!(sb["verified"], false);
}

#[test]
fn sanitize_gives_the_agent_only_the_base_history_and_leaves_the_original_alone() {
    let t = Task::leaky();
    let script = format!(
        "cd repo && echo LOG && git log --all --format=%H && echo REFLOG && git reflog && \
         echo FIX && (git cat-file -p {fix} 2>&1 || true) && echo BLOB && \
         (git cat-file -p {blob} 2>&1 || true) && echo TAGS && git tag && echo STATUS && \
         git status --short && cat code.py && \
         git -c user.name=x -c user.email=y commit -q --allow-empty -m agent && echo COMMITTED",
        fix = t.fix,
        blob = t.blob
    );
    let r = t.run(&t.spec("sanitize", "main"), &["--identity"], &script);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let out = r.stdout();
    assert!(
        out.starts_with(&format!("LOG\n{}\nREFLOG\nFIX\n", t.base)),
        "{out}"
    );
    assert!(!out.contains("FIXED") && !out.contains("DANGLING"), "{out}");
    assert!(out.contains("TAGS\nSTATUS\nbug\nCOMMITTED\n"), "{out}");
    assert!(
        r.stderr().contains("verified from inside"),
        "{}",
        r.stderr()
    );
    let sb: serde_json::Value = serde_json::from_str(&r.meta()["aet.sandbox"]).unwrap();
    let checks = sb["report"]["checks"].as_array().unwrap();
    assert!(
        checks
            .iter()
            .any(|c| c["entry"].as_str().unwrap().starts_with("repo[0]") && c["ok"] == true),
        "{sb:#}"
    );
    // The original still has its future (it was not rewritten), and not the agent's commit.
    let all = git(&t.repo, &["log", "--all", "--format=%s"]);
    assert!(all.contains("the fix") && !all.contains("agent"), "{all}");
}

#[test]
fn a_repository_with_only_its_base_passes_verify() {
    let t = Task::clean();
    let r = t.run(
        &t.spec("verify", &t.base[..10]),
        &[],
        "cd repo && git log --oneline",
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(r.stdout().contains("base"), "{}", r.stdout());
}

#[test]
fn bad_repo_entries_are_refused_with_each_problem_named() {
    let t = Task::clean();
    let other = t.root.join("elsewhere");
    fs::create_dir_all(&other).unwrap();
    git(&other, &["init", "-q"]);
    let spec = t.root.join("bad.toml");
    fs::write(
        &spec,
        format!(
            "workspace = {:?}\n\
             [[repo]]\npath = {:?}\nbase = \"no-such-commit\"\n\
             [[repo]]\npath = {:?}\nbase = \"HEAD\"\n\
             [[repo]]\npath = {:?}\nbase = \"HEAD\"\nhistory = \"rewrite\"\n",
            t.root.join("ws"),
            t.repo,
            other,
            t.repo
        ),
    )
    .unwrap();
    let r = t.run(&spec, &[], "true");
    assert_eq!(r.code(), 125, "{}", r.stderr());
    let err = r.stderr();
    assert!(err.contains("rewrite"), "{err}");
    fs::write(
        &spec,
        format!(
            "workspace = {:?}\n\
             [[repo]]\npath = {:?}\nbase = \"no-such-commit\"\n\
             [[repo]]\npath = {:?}\nbase = \"HEAD\"\n",
            t.root.join("ws"),
            t.repo,
            other,
        ),
    )
    .unwrap();
    let r = t.run(&spec, &[], "true");
    assert_eq!(r.code(), 125, "{}", r.stderr());
    let err = r.stderr();
    assert!(
        err.contains("repo[0]") && err.contains("no-such-commit"),
        "{err}"
    );
    assert!(
        err.contains("repo[1]") && err.contains("not inside the workspace"),
        "{err}"
    );
}

/// Runs `verify` on the clean task after `plant` put something in it: the run must stop before
/// the agent runs, naming `want`.
fn verify_names(plant: impl FnOnce(&Task), want: &str) {
    let t = Task::clean();
    plant(&t);
    let marker = t.root.join("ws/ran");
    let r = t.run(
        &t.spec("verify", "main"),
        &[],
        &format!("touch {}", marker.display()),
    );
    assert_eq!(r.code(), 125, "{want}: {}", r.stderr());
    assert!(!marker.exists(), "{want}: the agent ran");
    assert!(r.stderr().contains(want), "{want}: {}", r.stderr());
}

/// The fix as a commit of its own on a throwaway branch (then deleted): its id.
fn fix_commit(t: &Task) -> String {
    let r = &t.repo;
    git(r, &["checkout", "-q", "-b", "tmp"]);
    fs::write(r.join("code.py"), "FIXED\n").unwrap();
    git(r, &["commit", "-qam", "the fix"]);
    let fix = git(r, &["rev-parse", "HEAD"]);
    git(r, &["checkout", "-q", "main"]);
    git(r, &["branch", "-q", "-D", "tmp"]);
    fix
}

#[test]
fn verify_never_runs_what_the_repository_configures_and_names_a_partial_clone() {
    let t = Task::clean();
    let r = &t.repo;
    let marker = t.root.join("pwned");
    let hook = format!("sh -c 'id -u > {}; exit 1'", marker.display());
    // A partial clone whose promisor remote's upload-pack is a shell command, one blob of base
    // missing (git would fetch it lazily), an fsmonitor and a hook path that run commands too.
    for (k, v) in [
        ("extensions.partialClone", "origin"),
        ("remote.origin.url", "/nonexistent"),
        ("remote.origin.promisor", "true"),
        ("remote.origin.uploadpack", hook.as_str()),
        ("core.fsmonitor", hook.as_str()),
        ("core.repositoryformatversion", "1"),
    ] {
        git(r, &["config", k, v]);
    }
    let blob = git(r, &["rev-parse", "HEAD:code.py"]);
    fs::remove_file(r.join(format!(".git/objects/{}/{}", &blob[..2], &blob[2..]))).unwrap();
    let spec = t.spec("verify", "main");
    let out = t.run(&spec, &[], "true");
    assert_eq!(out.code(), 125, "{}", out.stderr());
    assert!(
        !marker.exists(),
        "the repository's command ran as uid {:?}",
        fs::read_to_string(&marker)
    );
    assert!(out.stderr().contains("partial clone"), "{}", out.stderr());
    // sanitize refuses too (the base's blob is not there), without running anything.
    let out = t.run(&t.spec("sanitize", "main"), &[], "true");
    assert_eq!(out.code(), 125, "{}", out.stderr());
    assert!(!marker.exists(), "sanitize ran the repository's command");
}

#[test]
fn verify_names_grafts_and_a_shallow_file_that_reach_past_base() {
    verify_names(
        |t| {
            let fix = fix_commit(t);
            fs::write(
                t.repo.join(".git/info/grafts"),
                format!("{} {fix}\n", t.base),
            )
            .unwrap();
        },
        "info/grafts",
    );
    verify_names(
        |t| {
            let fix = fix_commit(t);
            fs::write(t.repo.join(".git/shallow"), format!("{fix}\n")).unwrap();
        },
        "shallow names",
    );
}

#[test]
fn verify_names_history_kept_anywhere_else_in_the_git_directory_or_the_work_tree() {
    type Plant = fn(&Task);
    let cases: &[(Plant, &str)] = &[
        (
            |t| {
                let m = t.repo.join(".git/modules/lib");
                fs::create_dir_all(&m).unwrap();
                git(&m, &["init", "-q", "--bare"]);
            },
            "modules/",
        ),
        (
            |t| {
                fs::write(
                    t.repo.join(".git/objects/pack/tmp_pack_ab12"),
                    b"PACK\0\0\0\x02",
                )
                .unwrap();
            },
            "objects/pack/tmp_pack_ab12",
        ),
        (
            |t| {
                fs::create_dir_all(t.repo.join(".git/objects/incoming-x1/ab")).unwrap();
            },
            "objects/incoming-x1",
        ),
        (
            |t| {
                let d = t.repo.join(".git/rr-cache/0123abcd");
                fs::create_dir_all(&d).unwrap();
                fs::write(d.join("postimage"), "FIXED\n").unwrap();
            },
            "rr-cache/",
        ),
        (
            |t| {
                let d = t.repo.join(".git/rebase-apply");
                fs::create_dir_all(&d).unwrap();
                fs::write(d.join("patch"), "+FIXED\n").unwrap();
            },
            "rebase-apply/",
        ),
        (
            |t| fs::write(t.repo.join(".git/MERGE_MSG"), "Merge the fix\n").unwrap(),
            "MERGE_MSG",
        ),
        (
            |t| fs::write(t.repo.join(".git/SQUASH_MSG"), "the fix: FIXED\n").unwrap(),
            "SQUASH_MSG",
        ),
        (
            |t| fs::write(t.repo.join(".git/COMMIT_EDITMSG"), "the fix: FIXED\n").unwrap(),
            "COMMIT_EDITMSG",
        ),
        (
            |t| {
                let d = t.repo.join(".git/lfs/objects/ab/cd");
                fs::create_dir_all(&d).unwrap();
                fs::write(d.join("abcd1234"), "FIXED\n").unwrap();
            },
            "lfs/",
        ),
        (
            |t| {
                let fix = fix_commit(t);
                let r = &t.repo;
                git(r, &["branch", "-q", "future", &fix]);
                git(r, &["bundle", "create", "-q", "notes.txt", "future"]);
                git(r, &["branch", "-q", "-D", "future"]);
                git(r, &["reflog", "expire", "--expire=now", "--all"]);
                git(r, &["gc", "-q", "--prune=now"]);
            },
            "notes.txt is a git bundle of commits outside the base's history",
        ),
        (
            |t| fs::write(t.repo.join(".git/mystery"), "whatever\n").unwrap(),
            "mystery is not something aet checks",
        ),
        // A link to a file only root may read is never read (nor copied into git's view,
        // which is the repository owner's), and a FIFO never blocks the guard.
        (
            |t| std::os::unix::fs::symlink("/etc/shadow", t.repo.join(".git/shallow")).unwrap(),
            "shallow: it is a symbolic link",
        ),
        (
            |t| {
                let p = t.repo.join(".git/ORIG_HEAD");
                let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
                // SAFETY: a NUL-terminated path.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            },
            "ORIG_HEAD: it is not a regular file",
        ),
    ];
    for (plant, want) in cases {
        verify_names(plant, want);
    }
}

#[test]
fn sanitize_works_whatever_the_branch_is_called() {
    for branch in ["master", "main", "trunk"] {
        let t = Task::clean();
        git(&t.repo, &["branch", "-q", "-m", branch]);
        let r = t.run(
            &t.spec("sanitize", branch),
            &[],
            "cd repo && git branch --show-current && git log --format=%s",
        );
        assert_eq!(r.code(), 0, "{branch}: {}", r.stderr());
        assert_eq!(r.stdout(), format!("{branch}\nbase\n"), "{branch}");
    }
}
