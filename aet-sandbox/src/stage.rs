//! aet's stage: the first program bwrap runs inside the sandbox. It checks the view bwrap actually
//! built against the plan, writes its report where aet can read it, removes itself and the report
//! directory from the view, drops every privilege, checks that they are gone, and only then runs
//! the agent's command (or, for `aet sandbox probe`, probes paths as the agent would).

use std::{
    ffi::{CString, OsString},
    fs,
    io::{self, Write as _},
    os::unix::{
        ffi::OsStrExt as _,
        fs::{FileTypeExt as _, MetadataExt as _},
    },
    path::Path,
};

use nix::{errno::Errno, sys::statvfs::FsFlags};

use aet_kernel::mountinfo;
use aet_ledger::plan::{
    Check, CheckResult, Expect, Identity, Mode, PLAN_VERSION, Plan, ProbeResult, StageReport,
};
use aet_ledger::ppath::PPath;

/// Exit status of the stage when the view is not what the spec says (the command never runs).
pub const EXIT_VERIFY_FAILED: i32 = 125;
/// Exit status when privileges could not be dropped as planned.
pub const EXIT_PRIVILEGES: i32 = 124;

fn errno_name(e: &io::Error) -> String {
    aet_ledger::util::errno_name(e.raw_os_error().unwrap_or(0)).to_owned()
}

fn read_only(p: &Path) -> io::Result<bool> {
    nix::sys::statvfs::statvfs(p)
        .map(|s| s.flags().contains(FsFlags::ST_RDONLY))
        .map_err(io::Error::from)
}

/// The nearest existing ancestor of `p` (`p` itself excluded).
fn existing_ancestor(p: &Path) -> Option<&Path> {
    let mut a = p.parent();
    while let Some(x) = a {
        if fs::symlink_metadata(x).is_ok() {
            return Some(x);
        }
        a = x.parent();
    }
    None
}

fn writable_by_access(p: &Path) -> bool {
    nix::unistd::access(p, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// Checks one entry: what was found, and whether it is what the plan expects.
fn check_one(c: &Check) -> (bool, String) {
    let p = c.path.as_path();
    let meta = fs::metadata(p);
    let kind = |m: &fs::Metadata| {
        if m.is_dir() {
            "directory"
        } else if m.is_file() {
            "file"
        } else {
            "special file"
        }
    };
    let ro = || read_only(p).unwrap_or(false);
    match &c.expect {
        Expect::LoopbackOnly => match nix::net::if_::if_nameindex() {
            Ok(list) => {
                let names: Vec<String> = list
                    .iter()
                    .map(|i| i.name().to_string_lossy().into_owned())
                    .collect();
                (names == ["lo"], format!("interfaces {}", names.join(", ")))
            }
            Err(e) => (false, format!("cannot list interfaces ({e})")),
        },
        Expect::ReadOnly { dev, ino } | Expect::Writable { dev, ino } => {
            let m = match meta {
                Ok(m) => m,
                Err(e) => return (false, format!("missing ({})", errno_name(&e))),
            };
            if (m.dev(), m.ino()) != (*dev, *ino) {
                return (
                    false,
                    format!(
                        "another object (dev {} ino {}, the host's is dev {dev} ino {ino})",
                        m.dev(),
                        m.ino()
                    ),
                );
            }
            let want_ro = matches!(c.expect, Expect::ReadOnly { .. });
            if want_ro {
                if ro() {
                    (true, "read-only".into())
                } else {
                    (false, "writable".into())
                }
            } else if ro() {
                (false, "read-only".into())
            } else if !writable_by_access(p) {
                (false, "not writable (permissions)".into())
            } else {
                (true, "writable".into())
            }
        }
        Expect::Tmpfs => match nix::sys::statfs::statfs(p) {
            Ok(s) if s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC && !ro() => {
                (true, "writable tmpfs".into())
            }
            Ok(_) => (false, "not a writable tmpfs".into()),
            Err(e) => (false, format!("missing ({e})")),
        },
        Expect::EmptyDir | Expect::EmptyFile | Expect::MaskedOrAbsent { .. } => {
            let m = match meta {
                Ok(m) => m,
                Err(e)
                    if e.kind() == io::ErrorKind::NotFound
                        && matches!(c.expect, Expect::MaskedOrAbsent { .. }) =>
                {
                    return (true, "leads nowhere".into());
                }
                Err(e) => return (false, format!("missing ({})", errno_name(&e))),
            };
            let dir = match c.expect {
                Expect::EmptyDir => true,
                Expect::EmptyFile => false,
                Expect::MaskedOrAbsent { dir } => dir,
                _ => unreachable!(),
            };
            let empty = if dir {
                m.is_dir()
                    && fs::read_dir(p)
                        .map(|mut d| d.next().is_none())
                        .unwrap_or(false)
            } else {
                m.is_file() && m.len() == 0
            };
            if !empty {
                return (false, format!("a {} with content", kind(&m)));
            }
            if !ro() {
                return (false, format!("an empty {} that is writable", kind(&m)));
            }
            (true, format!("empty read-only {}", kind(&m)))
        }
        Expect::Absent => match fs::symlink_metadata(p) {
            Ok(m) => (false, format!("a {} exists there", kind(&m))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => match existing_ancestor(p) {
                Some(a) if read_only(a).unwrap_or(false) => {
                    (true, format!("absent, {} is read-only", a.display()))
                }
                Some(a) => (
                    false,
                    format!(
                        "absent, but {} is writable: it could be created",
                        a.display()
                    ),
                ),
                None => (false, "absent, no ancestor found".into()),
            },
            Err(e) => (false, format!("cannot tell ({})", errno_name(&e))),
        },
    }
}

/// Is a writable mount allowed by the plan?
fn writable_allowed(plan: &Plan, m: &mountinfo::MountEntry) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let mp = Path::new(std::ffi::OsStr::from_bytes(&m.mount_point));
    if plan.writable.iter().any(|w| w.as_path() == mp) {
        return true;
    }
    if m.fstype == b"proc" || m.fstype == b"devpts" || m.fstype == b"mqueue" {
        return true;
    }
    // Device nodes bwrap's --dev binds (/dev/null, /dev/tty, ...).
    mp.starts_with("/dev") && fs::metadata(mp).is_ok_and(|x| x.file_type().is_char_device())
}

/// Verifies the view against the plan.
pub fn verify(plan: &Plan) -> StageReport {
    let mut report = StageReport {
        version: PLAN_VERSION,
        ..StageReport::default()
    };
    for c in &plan.checks {
        let (ok, found) = check_one(c);
        if !ok {
            report.failures.push(format!(
                "{}: expected {}, found {found}",
                c.entry,
                c.expect.describe()
            ));
        }
        report.checks.push(CheckResult {
            entry: c.entry.clone(),
            path: c.path.clone(),
            expected: c.expect.describe().into(),
            found,
            ok,
        });
    }
    match fs::read("/proc/self/mountinfo") {
        _ if !plan.view => {}
        Ok(text) => {
            let mounts = mountinfo::parse(&text);
            report.mounts = mounts.len();
            for m in &mounts {
                if m.read_only {
                    continue;
                }
                let mp = PPath(std::ffi::OsStr::from_bytes(&m.mount_point).into());
                if !writable_allowed(plan, m) {
                    report.failures.push(format!(
                        "mount {} ({}) is writable, but the spec grants no write there",
                        mp.0.display(),
                        String::from_utf8_lossy(&m.fstype)
                    ));
                }
                report.writable_mounts.push(mp);
            }
        }
        Err(e) => report
            .failures
            .push(format!("cannot read /proc/self/mountinfo: {e}")),
    }
    match std::env::current_dir() {
        Ok(d) if d == plan.workspace.as_path() => {}
        Ok(d) => report.failures.push(format!(
            "working directory is {}, not the workspace {}",
            d.display(),
            plan.workspace.0.display()
        )),
        Err(e) => report
            .failures
            .push(format!("cannot read the working directory: {e}")),
    }
    // Task repositories: nothing in them may reach past their base (git's own object walk).
    for r in &plan.repos {
        let expected = format!(
            "no history past base {}{}",
            &r.base[..12.min(r.base.len())],
            if r.sanitized { " (sanitized copy)" } else { "" }
        );
        let (ok, found) = match super::repo::leaks(r.path.as_path(), &r.base, &r.decoys) {
            Ok(l) if l.is_empty() => (true, "only base's history".to_owned()),
            Ok(l) => {
                for leak in &l {
                    report.failures.push(format!("{}: {leak}", r.entry));
                }
                (false, l.join("; "))
            }
            Err(e) => {
                report
                    .failures
                    .push(format!("{}: cannot check its history: {e}", r.entry));
                (false, e)
            }
        };
        report.checks.push(CheckResult {
            entry: r.entry.clone(),
            path: r.path.clone(),
            expected,
            found,
            ok,
        });
    }
    report.ok = report.failures.is_empty();
    report
}

/// Drops every privilege: the identity (when planned), all capability sets, the ability to
/// regain them (securebits), and sets no_new_privs. Then checks, from /proc/self/status, that
/// they are gone.
pub fn drop_privileges(identity: Option<&Identity>, skip_setuid: bool) -> Result<(), String> {
    use caps::CapSet;
    // Root keeps no special treatment: no capabilities at exec, none kept across setuid.
    const SECBITS: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x10 | 0x20 | 0x40 | 0x80;
    // SAFETY: plain prctl calls.
    if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, SECBITS, 0, 0, 0) } != 0 {
        return Err(format!(
            "cannot set securebits: {}",
            io::Error::last_os_error()
        ));
    }
    if let Some(id) = identity {
        let gid = nix::unistd::Gid::from_raw(id.gid);
        let uid = nix::unistd::Uid::from_raw(id.uid);
        nix::unistd::setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
        nix::unistd::setresgid(gid, gid, gid).map_err(|e| format!("setresgid: {e}"))?;
        // Fault injection for the test of the read-back below (it can only make a run fail).
        if !skip_setuid {
            nix::unistd::setresuid(uid, uid, uid).map_err(|e| format!("setresuid: {e}"))?;
        }
    }
    for cap in caps::all() {
        // Shrinking the bounding set needs CAP_SETPCAP, still effective here: the securebits
        // above keep capabilities across the identity change until they are cleared below.
        if caps::has_cap(None, CapSet::Bounding, cap).unwrap_or(false) {
            caps::drop(None, CapSet::Bounding, cap)
                .map_err(|e| format!("cannot drop {cap} from the bounding set: {e}"))?;
        }
    }
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|e| format!("cannot clear {set:?} capabilities: {e}"))?;
    }
    set_no_new_privs()?;
    check_dropped(identity)
}

fn set_no_new_privs() -> Result<(), String> {
    // SAFETY: plain prctl call.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(format!(
            "cannot set no_new_privs: {}",
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Reads back the process's credentials from /proc/self/status.
pub fn check_dropped(identity: Option<&Identity>) -> Result<(), String> {
    let status = fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    let mut wrong = Vec::new();
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let v = field(cap);
        if u64::from_str_radix(&v, 16) != Ok(0) {
            wrong.push(format!("{cap} is {v}"));
        }
    }
    if field("NoNewPrivs") != "1" {
        wrong.push(format!("NoNewPrivs is {}", field("NoNewPrivs")));
    }
    if let Some(id) = identity {
        let all = |v: String, want: u32| v.split_whitespace().all(|x| x == want.to_string());
        if !all(field("Uid"), id.uid) {
            wrong.push(format!("Uid is {}", field("Uid")));
        }
        if !all(field("Gid"), id.gid) {
            wrong.push(format!("Gid is {}", field("Gid")));
        }
        if !field("Groups").is_empty() {
            wrong.push(format!("Groups is {}", field("Groups")));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join(", "))
    }
}

/// Probes one path as the current process.
pub fn probe(p: &Path) -> ProbeResult {
    use std::os::unix::fs::OpenOptionsExt as _;
    let name = |e: io::Error| errno_name(&e);
    let meta = fs::metadata(p);
    let stat = match &meta {
        Ok(m) if m.is_dir() => "dir".to_owned(),
        Ok(m) if m.is_file() => "file".to_owned(),
        Ok(_) => "other".to_owned(),
        Err(e) => errno_name(e),
    };
    let is_dir = meta.as_ref().is_ok_and(|m| m.is_dir());
    let read = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(p)
    {
        Ok(_) => "ok".to_owned(),
        Err(e) => name(e),
    };
    // Writing leaves nothing behind: an existing file is only opened; in a directory an unnamed
    // O_TMPFILE file is created and vanishes when closed. A missing path is tried in its parent.
    let tmpfile_in = |dir: &Path| {
        fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open(dir)
            .map(|_| "ok".to_owned())
            .unwrap_or_else(&name)
    };
    let write = match &meta {
        Ok(_) if is_dir => tmpfile_in(p),
        Ok(_) => fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(p)
            .map(|_| "ok".to_owned())
            .unwrap_or_else(&name),
        Err(e) if e.kind() == io::ErrorKind::NotFound => match p.parent() {
            Some(parent) if fs::metadata(parent).is_ok_and(|m| m.is_dir()) => tmpfile_in(parent),
            _ => "ENOENT".into(),
        },
        Err(e) => errno_name(e),
    };
    let list = if is_dir {
        match fs::read_dir(p) {
            Ok(d) => match d.count() {
                1 => "1 entry".to_owned(),
                n => format!("{n} entries"),
            },
            Err(e) => name(e),
        }
    } else if meta.is_ok() {
        "-".into()
    } else {
        stat.clone()
    };
    ProbeResult {
        path: p.into(),
        stat,
        read,
        write,
        list,
    }
}

/// The stage's entry point (`aet __stage [--dir DIR] -- COMMAND...`): the plan is in DIR (in a
/// sandbox, the directory aet bound at [`super::build::STAGE_DIR`]). Returns the exit status
/// when it does not exec.
pub fn stage_main(dir: Option<&Path>, command: &[OsString]) -> i32 {
    let dir = dir.unwrap_or(Path::new(super::build::STAGE_DIR));
    let plan_path = dir.join(super::build::PLAN_FILE);
    let plan: Plan = match fs::read(&plan_path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_slice(&t).map_err(|e| e.to_string()))
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("aet stage: unreadable plan {}: {e}", plan_path.display());
            return EXIT_VERIFY_FAILED;
        }
    };
    if plan.version != PLAN_VERSION {
        eprintln!(
            "aet stage: plan version {}, this stage reads {PLAN_VERSION}",
            plan.version
        );
        return EXIT_VERIFY_FAILED;
    }
    // The report file is opened now, as root: its directory leaves the view (or becomes
    // unwritable to the identity) before the report is written.
    let mut out = match fs::File::create(plan.report.as_path()) {
        Ok(f) => Some(f),
        Err(e) => {
            eprintln!(
                "aet stage: cannot write the report {}: {e}",
                plan.report.0.display()
            );
            None
        }
    };
    let mut report = verify(&plan);
    for m in &plan.unmount {
        if let Err(e) = nix::mount::umount2(m.as_path(), nix::mount::MntFlags::MNT_DETACH) {
            report.failures.push(format!(
                "cannot remove {} from the view: {e}",
                m.0.display()
            ));
        }
    }
    let verified = report.failures.is_empty() && out.is_some();
    let mut code = 0;
    if !verified {
        eprintln!(
            "aet: the agent's environment is not what was specified; the command was not run:"
        );
        for f in &report.failures {
            eprintln!("aet:   - {f}");
        }
        code = EXIT_VERIFY_FAILED;
    } else {
        // The watched files are fingerprinted in this view now, before anything of the
        // agent's runs (and before the barrier, which would keep /proc from the stage).
        if let Some(fd) = plan.hold
            && let Err(e) = hand_over_view(fd)
        {
            eprintln!("aet: {e}; the command was not run");
            report.failures.push(format!("watched files: {e}"));
            code = EXIT_VERIFY_FAILED;
        }
        if plan.new_session {
            let _ = nix::unistd::setsid();
        }
        // The barrier is built as root (its walk must see every file it leaves out), applied
        // once the privileges are gone.
        let mut barrier = None;
        if code == 0
            && let Some(b) = &plan.barrier
        {
            match super::barrier::build(b) {
                Ok(built) => barrier = Some(built),
                Err(e) => {
                    eprintln!("aet: cannot build the barrier, the command was not run: {e}");
                    report.failures.push(format!("barrier: {e}"));
                    code = EXIT_VERIFY_FAILED;
                }
            }
        }
        let dropped = if code != 0 {
            Ok(())
        } else if plan.keep_capabilities {
            set_no_new_privs()
        } else {
            drop_privileges(plan.identity.as_ref(), plan.debug_skip_setuid)
        };
        match dropped {
            Ok(()) if code != 0 => {}
            Ok(()) if plan.keep_capabilities => {
                report.privileges = Some(format!(
                    "uid {} (unchanged), capabilities kept; no_new_privs",
                    nix::unistd::getuid()
                ));
            }
            Ok(()) => report.privileges = Some(privileges_summary(plan.identity.as_ref())),
            Err(e) => {
                eprintln!("aet: cannot drop privileges, the command was not run: {e}");
                report.failures.push(format!("privileges: {e}"));
                code = EXIT_PRIVILEGES;
            }
        }
        if code == 0
            && let Some(built) = barrier
        {
            match built.apply() {
                Ok(r) => report.barrier = Some(r),
                Err(e) => {
                    eprintln!("aet: cannot apply the barrier, the command was not run: {e}");
                    report.failures.push(format!("barrier: {e}"));
                    code = EXIT_VERIFY_FAILED;
                }
            }
        }
        if code == 0 && plan.close_io_uring {
            match close_io_uring() {
                Ok(found) => report.io_uring = Some(found),
                Err(e) => {
                    eprintln!("aet: cannot close io_uring, the command was not run: {e}");
                    report.failures.push(format!("io_uring: {e}"));
                    code = EXIT_VERIFY_FAILED;
                }
            }
        }
    }
    report.identity = plan.identity.clone();
    report.ok = report.failures.is_empty() && out.is_some();
    if let Some(f) = out.as_mut() {
        let _ = serde_json::to_writer(&mut *f, &report);
        let _ = f.write_all(b"\n");
        let _ = f.sync_all();
    }
    drop(out);
    if code != 0 {
        return code;
    }
    // Nothing of aet's reaches the agent.
    // SAFETY: closes this process's own descriptors above stderr.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    match plan.mode {
        Mode::Probe { paths } => {
            let results: Vec<ProbeResult> = paths.iter().map(|p| probe(p.as_path())).collect();
            println!(
                "{}",
                serde_json::to_string(&results).expect("probe results serialise")
            );
            0
        }
        Mode::Exec => exec(command),
    }
}

/// Makes `io_uring_setup`, `io_uring_enter` and `io_uring_register` fail with EPERM for this
/// process and everything it runs (a seccomp filter, native and 32-bit ABIs; no_new_privs is set
/// already), then checks it: `io_uring_setup` must fail with EPERM.
fn close_io_uring() -> Result<String, String> {
    use libseccomp::{ScmpAction, ScmpArch, ScmpFilterContext, ScmpSyscall};
    let mut f = ScmpFilterContext::new(ScmpAction::Allow).map_err(|e| e.to_string())?;
    // The compat ABI too (a 32-bit program's syscalls would otherwise meet the filter's
    // default for an architecture it does not name, which kills them).
    let compat = match ScmpArch::native() {
        ScmpArch::X8664 => Some(ScmpArch::X86),
        ScmpArch::Aarch64 => Some(ScmpArch::Arm),
        _ => None,
    };
    if let Some(arch) = compat {
        f.add_arch(arch).map_err(|e| e.to_string())?;
    }
    for name in ["io_uring_setup", "io_uring_enter", "io_uring_register"] {
        let sc = ScmpSyscall::from_name(name).map_err(|e| format!("{name}: {e}"))?;
        f.add_rule(ScmpAction::Errno(libc::EPERM), sc)
            .map_err(|e| format!("{name}: {e}"))?;
    }
    f.load().map_err(|e| format!("loading the filter: {e}"))?;
    // SAFETY: io_uring_setup with no parameters: fails, and must fail with EPERM.
    let r = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, std::ptr::null_mut::<u8>()) };
    let errno = Errno::last();
    if r != -1 || errno != Errno::EPERM {
        return Err(format!(
            "io_uring_setup still answers ({r}, {errno}) after the filter was loaded"
        ));
    }
    Ok(
        "closed: io_uring_setup, io_uring_enter and io_uring_register fail with EPERM (seccomp)"
            .into(),
    )
}

/// What the process is after [`drop_privileges`], for the report.
fn privileges_summary(identity: Option<&Identity>) -> String {
    let who = match identity {
        Some(id) => format!("uid {} gid {}, no supplementary groups", id.uid, id.gid),
        None => format!("uid {} (unchanged)", nix::unistd::getuid()),
    };
    format!("{who}; no capabilities in any set; no_new_privs (read back from /proc/self/status)")
}

fn exec(command: &[OsString]) -> i32 {
    let Some(program) = command.first() else {
        eprintln!("aet stage: no command");
        return 127;
    };
    let c = |s: &OsString| CString::new(s.as_bytes()).ok();
    let (Some(prog), Some(args)) = (
        c(program),
        command.iter().map(c).collect::<Option<Vec<_>>>(),
    ) else {
        eprintln!("aet: the command contains a NUL byte");
        return 127;
    };
    let err = nix::unistd::execvp(&prog, &args).unwrap_err();
    eprintln!("aet: cannot run {}: {err}", program.to_string_lossy());
    if err == Errno::ENOENT { 127 } else { 126 }
}

/// Hands the view over to aet on the hold socket `fd` (this process's mount namespace and the
/// command's working directory, `PATH` and `HOME`) and waits for its go.
fn hand_over_view(fd: i32) -> Result<(), String> {
    use std::os::fd::AsRawFd as _;
    let ns = fs::File::open("/proc/self/ns/mnt")
        .map_err(|e| format!("cannot open the view's mount namespace: {e}"))?;
    let net = fs::File::open("/proc/self/ns/net")
        .map_err(|e| format!("cannot open the view's network namespace: {e}"))?;
    let held = aet_ledger::plan::HeldView {
        cwd: std::env::current_dir()
            .unwrap_or_else(|_| "/".into())
            .into(),
        path: std::env::var("PATH").ok(),
        home: std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).into()),
    };
    let msg = serde_json::to_vec(&held).expect("a held view serialises");
    let fds = [ns.as_raw_fd(), net.as_raw_fd()];
    let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
    let iov = [std::io::IoSlice::new(&msg)];
    nix::sys::socket::sendmsg::<()>(fd, &iov, &cmsg, nix::sys::socket::MsgFlags::empty(), None)
        .map_err(|e| format!("cannot hand the view over to aet: {e}"))?;
    drop((ns, net));
    let mut go = [0u8; 1];
    // SAFETY: reads one byte into a local buffer.
    let n = unsafe { libc::read(fd, go.as_mut_ptr().cast(), 1) };
    if n == 1 && go[0] == aet_ledger::plan::HOLD_GO {
        Ok(())
    } else {
        Err("aet could not fingerprint the watched files in the view, or start its proxy".into())
    }
}
