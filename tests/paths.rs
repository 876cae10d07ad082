//! End-to-end tests of kernel-resolved paths, file identity and every route to a file, as root
//! with real eBPF.
//!
//! For a secret file, each route must produce a row whose resolved path (or, for an alias, whose
//! device and inode) is the secret's, attributed to the process that took the route.

use std::{
    ffi::{OsStr, OsString},
    fs,
    os::unix::{
        ffi::OsStringExt as _,
        fs::{MetadataExt as _, PermissionsExt as _},
    },
    path::{Path, PathBuf},
};

use aet_tests::*;

#[path = "common/paths.rs"]
#[allow(dead_code)]
mod common;
use common::*;

#[test]
fn absolute_open() {
    let s = secret();
    let r = run_ok(&s.root, &[OsStr::new("cat"), s.path.as_os_str()]);
    let row = assert_opened(&r.rows(), &s, "cat");
    assert_eq!(row.resolved_path.as_deref(), Some(bytes(&s.path)));
    assert_complete(&r.ledger());
}

#[test]
fn relative_open_after_chdir() {
    let s = secret();
    let r = run_ok(
        &s.root,
        &[
            "sh",
            "-c",
            &format!(
                "cd {} && cd .. && cat ./grader/../grader/answers.txt",
                s.dir.display()
            ),
        ],
    );
    let row = assert_opened(&r.rows(), &s, "cat");
    assert_eq!(
        row.path.as_deref(),
        Some(&b"./grader/../grader/answers.txt"[..])
    );
    assert_eq!(row.resolved_path.as_deref(), Some(bytes(&s.path)));
}

#[test]
fn openat_with_a_dirfd() {
    let s = secret();
    let r = py(
        &s.root,
        &format!(
            "import os; d = os.open({:?}, os.O_RDONLY); os.open('answers.txt', os.O_RDONLY, dir_fd=d)",
            s.dir.display().to_string()
        ),
    );
    let rows = r.rows();
    let row = assert_opened(&rows, &s, "python3");
    assert_eq!(row.path.as_deref(), Some(&b"answers.txt"[..]));
    assert!(row.dirfd.unwrap() >= 0);
}

#[test]
fn through_a_symlink() {
    let s = secret();
    let link = s.root.join("innocent-looking");
    std::os::unix::fs::symlink(&s.path, &link).unwrap();
    let r = run_ok(&s.root, &[OsStr::new("cat"), link.as_os_str()]);
    let row = assert_opened(&r.rows(), &s, "cat");
    assert_eq!(row.path.as_deref(), Some(bytes(&link)));
    assert_eq!(
        row.resolved_path.as_deref(),
        Some(bytes(&s.path)),
        "the target, not the link"
    );
}

#[test]
fn through_a_hard_link() {
    let s = secret();
    let alias = s.root.join("alias.txt");
    fs::hard_link(&s.path, &alias).unwrap();
    let r = run_ok(&s.root, &[OsStr::new("cat"), alias.as_os_str()]);
    // A hard link is another name for the same inode: the identity gives it away.
    let row = assert_opened(&r.rows(), &s, "cat");
    assert_eq!(row.resolved_path.as_deref(), Some(bytes(&alias)));
}

#[test]
fn reopen_through_proc_self_fd() {
    let s = secret();
    let r = py(
        &s.root,
        &format!(
            "import os; fd = os.open({:?}, os.O_RDONLY); os.open('/proc/self/fd/%d' % fd, os.O_RDONLY)",
            s.path.display().to_string()
        ),
    );
    let rows = r.rows();
    let reopen: Vec<&LedgerRow> = secret_rows(&rows, &s)
        .into_iter()
        .filter(|r| {
            r.path
                .as_deref()
                .is_some_and(|p| p.starts_with(b"/proc/self/fd/"))
        })
        .collect();
    assert_eq!(
        reopen.len(),
        1,
        "the magic-link re-open resolves to the secret"
    );
    assert_eq!(reopen[0].resolved_path.as_deref(), Some(bytes(&s.path)));
}

#[test]
fn openat2_with_resolve_flags() {
    let s = secret();
    let code = format!(
        r#"
import ctypes, os
class How(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]
libc = ctypes.CDLL(None, use_errno=True)
how = How(os.O_RDONLY, 0, 0x04 | 0x02)  # RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
fd = libc.syscall(437, -100, {:?}.encode(), ctypes.byref(how), ctypes.sizeof(how))
assert fd >= 0, ctypes.get_errno()
"#,
        s.path.display().to_string()
    );
    let r = py(&s.root, &code);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let row = assert_opened(&r.rows(), &s, "python3");
    assert_eq!(row.syscall.as_deref(), Some("openat2"));
    assert_eq!(row.resolve, Some(0x06));
}

#[test]
fn open_by_handle_at_names_no_path() {
    let s = secret();
    let r = run_ok(
        &s.root,
        &[helper("byhandle").as_os_str(), s.path.as_os_str()],
    );
    assert_eq!(r.code(), 0, "{}{}", r.stdout(), r.stderr());
    let rows = r.rows();
    let row = assert_opened(&rows, &s, "byhandle");
    assert_eq!(row.syscall.as_deref(), Some("open_by_handle_at"));
    assert_eq!(row.path, None, "the syscall has no path argument");
    assert_eq!(row.resolved_path.as_deref(), Some(bytes(&s.path)));
    // The handle was made from the path: recorded as a probe.
    assert!(
        rows.iter()
            .any(|x| x.syscall.as_deref() == Some("name_to_handle_at")
                && x.resolved_path.as_deref() == Some(bytes(&s.path)))
    );
}

#[test]
fn exec_of_a_script_in_the_secret_directory() {
    let s = secret();
    let script = s.dir.join("peek.sh");
    write_script(&script, "#!/bin/sh\nexit 0\n");
    let m = fs::metadata(&script).unwrap();
    let r = run_ok(&s.root, &[script.as_os_str()]);
    assert_eq!(r.code(), 0);
    let rows = r.rows();
    let exec = rows
        .iter()
        .find(|x| x.kind == "exec" && x.ret == Some(0) && x.path.as_deref() == Some(bytes(&script)))
        .expect("the script's exec");
    // The exec's object is the program the kernel ran: the interpreter.
    assert_eq!(exec.resolved_from.as_deref(), Some("object"));
    assert!(exec.resolved_str().unwrap().ends_with("sh"), "{exec:?}");
    // The interpreter then opened the script: its kernel-resolved path and identity.
    let open = rows
        .iter()
        .find(|x| {
            x.kind == "open"
                && x.pid == exec.pid
                && x.resolved_path.as_deref() == Some(bytes(&script))
        })
        .expect("the interpreter's open of the script");
    assert_eq!((open.dev, open.ino), (Some(m.dev()), Some(m.ino())));
}

#[test]
fn execveat_of_an_fd_and_of_a_memfd() {
    let s = secret();
    let exe = s.dir.join("tool");
    fs::copy("/bin/true", &exe).unwrap();
    fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
    let m = fs::metadata(&exe).unwrap();
    let r = run_ok(
        &s.root,
        &[
            helper("execat").as_os_str(),
            OsStr::new("--fd"),
            exe.as_os_str(),
            OsStr::new("x"),
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let rows = r.rows();
    let exec = rows
        .iter()
        .find(|x| x.kind == "exec" && x.syscall.as_deref() == Some("execveat") && x.ret == Some(0))
        .expect("the execveat");
    assert!(exec.path_str().unwrap().starts_with("/dev/fd/"), "{exec:?}");
    assert_eq!(exec.resolved_path.as_deref(), Some(bytes(&exe)));
    assert_eq!((exec.dev, exec.ino), (Some(m.dev()), Some(m.ino())));

    let r = run_ok(
        &s.root,
        &[
            helper("memexec").as_os_str(),
            OsStr::new("/bin/echo"),
            OsStr::new("from-memory"),
        ],
    );
    assert!(r.stdout().contains("from-memory"));
    let rows = r.rows();
    let memfd = rows
        .iter()
        .find(|x| x.kind == "memfd")
        .expect("memfd_create recorded");
    assert_eq!(memfd.path.as_deref(), Some(&b"aet-memexec"[..]));
    let exec = rows
        .iter()
        .find(|x| x.kind == "exec" && x.syscall.as_deref() == Some("execveat") && x.ret == Some(0))
        .expect("the exec of the memfd");
    assert_eq!(
        (exec.dev, exec.ino),
        (memfd.dev, memfd.ino),
        "the program is the memfd"
    );
    assert!(
        exec.resolved_str().unwrap().contains("memfd:aet-memexec"),
        "{exec:?}"
    );
    // It lives on no file system the process can reach.
    assert_ne!(
        exec.capture & (4 << 16),
        0,
        "walk flagged unreachable: {exec:?}"
    );
}

#[test]
fn a_deep_long_path_resolves_fully() {
    let s = secret();
    let mut deep = s.root.clone();
    for i in 0..50 {
        deep.push(format!("level-{i:02}-of-a-deep-tree"));
    }
    fs::create_dir_all(&deep).unwrap();
    let file = deep.join("answers.txt");
    fs::write(&file, "deep").unwrap();
    let depth = file.components().count();
    assert!(depth > 40 && bytes(&file).len() > 255);
    // Opened relative to a directory halfway down, so the argument itself stays short.
    let half: PathBuf = s.root.join(
        (0..25)
            .map(|i| format!("level-{i:02}-of-a-deep-tree"))
            .collect::<Vec<_>>()
            .join("/"),
    );
    let rest = file.strip_prefix(&half).unwrap();
    let r = run_ok(
        &s.root,
        &[
            "sh",
            "-c",
            &format!("cd {} && cat {}", half.display(), rest.display()),
        ],
    );
    let rows = r.rows();
    let row = rows
        .iter()
        .find(|x| {
            x.kind == "open"
                && x.comm == "cat"
                && x.ret.is_some_and(|v| v >= 0)
                && x.path.as_deref() == Some(bytes(rest))
        })
        .expect("the deep open");
    assert_eq!(
        row.resolved_path.as_deref(),
        Some(bytes(&file)),
        "{depth} components"
    );
    assert_eq!(row.resolved_partial, Some(false));
}

#[test]
fn a_directory_named_with_a_newline_and_invalid_utf8() {
    let s = secret();
    let mut raw = bytes(&s.root).to_vec();
    raw.extend_from_slice(b"/odd\ndir\xff\xfe");
    let dir = PathBuf::from(OsString::from_vec(raw));
    fs::create_dir(&dir).unwrap();
    let file = dir.join("answers.txt");
    fs::write(&file, "x").unwrap();
    let r = run_ok(
        &s.root,
        &[
            OsStr::new("sh"),
            OsStr::new("-c"),
            OsStr::new("cd \"$1\" && cat answers.txt"),
            OsStr::new("sh"),
            dir.as_os_str(),
        ],
    );
    let rows = r.rows();
    let row = rows
        .iter()
        .find(|x| {
            x.kind == "open" && x.comm == "cat" && x.path.as_deref() == Some(&b"answers.txt"[..])
        })
        .expect("the open");
    assert_eq!(
        row.resolved_path.as_deref(),
        Some(bytes(&file)),
        "exact bytes"
    );
}

#[test]
fn io_uring_opens_are_recorded_and_mark_the_run_incomplete() {
    let s = secret();
    let r = run_in(
        &s.root.join("run"),
        &[],
        &[helper("uring_open").as_os_str(), s.path.as_os_str()],
    );
    assert_eq!(r.code(), 0, "{}{}", r.stdout(), r.stderr());
    let rows = r.rows();
    let submit = rows
        .iter()
        .find(|x| x.kind == "io_uring" && x.io_uring_op == Some(18))
        .expect("the IORING_OP_OPENAT request");
    assert_eq!(submit.resolved_path.as_deref(), Some(bytes(&s.path)));
    assert!(
        rows.iter()
            .any(|x| x.syscall.as_deref() == Some("io_uring_setup"))
    );
    let m = r.meta();
    assert_eq!(
        m["aet.complete"], "false",
        "a run that used io_uring is never complete"
    );
    assert!(m["aet.incomplete_reasons"].contains("io_uring"));
    assert!(r.stderr().contains("INCOMPLETE RECORD"));
}

#[test]
fn a_stat_without_open_is_evidence() {
    let s = secret();
    let r = run_ok(&s.root, &[OsStr::new("stat"), s.path.as_os_str()]);
    let rows = r.rows();
    let probe = rows
        .iter()
        .find(|x| {
            x.kind == "stat"
                && x.comm == "stat"
                && x.resolved_path.as_deref() == Some(bytes(&s.path))
        })
        .expect("the stat of the secret");
    assert_eq!((probe.dev, probe.ino), (Some(s.dev), Some(s.ino)));
    assert!(
        !rows
            .iter()
            .any(|x| x.kind == "open" && x.resolved_path.as_deref() == Some(bytes(&s.path))),
        "stat does not open"
    );
}

#[test]
fn a_written_then_renamed_file_shows_as_written() {
    let s = secret();
    let r = run_ok(
        &s.root,
        &[
            "sh",
            "-c",
            &format!(
                "cd {} && printf 12345 > draft.txt && mv draft.txt final.txt",
                s.root.display()
            ),
        ],
    );
    let rows = r.rows();
    let draft = s.root.join("draft.txt");
    let fin = s.root.join("final.txt");
    let open = rows
        .iter()
        .find(|x| x.kind == "open" && x.resolved_path.as_deref() == Some(bytes(&draft)))
        .expect("the create");
    assert_ne!(open.flags.unwrap() & 0o100, 0, "O_CREAT");
    let rename = rows
        .iter()
        .find(|x| {
            x.kind == "modify"
                && x.syscall
                    .as_deref()
                    .is_some_and(|c| c.starts_with("rename"))
        })
        .expect("the rename");
    assert_eq!(rename.resolved_path.as_deref(), Some(bytes(&draft)));
    assert_eq!(rename.resolved_path2.as_deref(), Some(bytes(&fin)));
    let io = rows
        .iter()
        .find(|x| x.kind == "io" && x.ino == open.ino && x.bytes_written.is_some_and(|b| b > 0))
        .expect("the bytes written");
    assert_eq!(io.bytes_written, Some(5));
    let summary = summary(&r.ledger());
    let written: Vec<String> = summary["files_written"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        written.contains(&draft.display().to_string()),
        "{written:?}"
    );
    assert!(written.contains(&fin.display().to_string()), "{written:?}");
}

#[test]
fn bytes_read_and_written_are_counted_per_file() {
    let s = secret();
    let big = s.root.join("big.bin");
    fs::write(&big, vec![7u8; 100_000]).unwrap();
    let out = s.root.join("copy.bin");
    let r = run_ok(
        &s.root,
        &[
            "sh",
            "-c",
            &format!("head -c 70000 {} > {}", big.display(), out.display()),
        ],
    );
    let sm = summary(&r.ledger());
    let find = |list: &str, p: &Path| {
        sm[list]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == p.display().to_string())
            .unwrap_or_else(|| panic!("{} not in {list}: {sm}", p.display()))
            .clone()
    };
    assert!(find("files_read", &big)["bytes"].as_u64().unwrap() >= 70_000);
    assert_eq!(
        find("files_written", &out)["bytes"].as_u64().unwrap(),
        70_000
    );
}
