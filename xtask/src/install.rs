//! The install tests of `cargo xtask test`: what `cargo xtask dist` built, installed as users
//! install it.
//!
//! - **The wheel**, into a fresh venv with no Rust toolchain on `PATH`: `aet --version` names
//!   the version and commit, `aet doctor` passes, `import aet` finds the wheel's binary without
//!   `AET_BIN` or `PATH`, `aet.run(["true"])` is complete (and clean under a policy), the wheel's
//!   platform tag is the one auditwheel derives and the binary links nothing outside it; then
//!   `aet[inspect]` and the package's Inspect tests, against the installed copy.
//! - **The Debian package**, with `dpkg -i` into a clean Debian 12 root (debootstrap, kept under
//!   `target/aet-root`, seen through an overlay so that it stays clean): its files, `Depends`,
//!   units (`systemd-analyze verify`, the socket enabled), `man aet-run`, the completions, the
//!   binary's libraries; a sandboxed run as the agent identity, recorded and audited clean,
//!   by the installed `aet` inside the root (the host's `/sys` bound in for the kernel side);
//!   then `dpkg --purge`, after which the overlay holds nothing of aet.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use anyhow::{Context as _, ensure};

use crate::{dist::Artefacts, root, sh};

/// A user's `PATH`: no cargo, no rustup.
const USER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The Debian release the package is installed into, and its mirror.
const SUITE: &str = "bookworm";
const MIRROR: &str = "http://deb.debian.org/debian";
/// What the clean root holds beside debootstrap's minimal base: the package's `Depends` that a
/// stock system lacks (bubblewrap), and what the checks need (man-db for `man`, systemd for
/// `systemd-analyze`).
const ROOT_PACKAGES: &str = "bubblewrap,man-db,systemd";

fn output(cmd: &mut Command) -> anyhow::Result<Output> {
    if cmd.get_current_dir().is_none() {
        cmd.current_dir(root());
    }
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

fn stdout(cmd: &mut Command) -> anyhow::Result<String> {
    Ok(String::from_utf8_lossy(&output(cmd)?.stdout)
        .trim()
        .to_owned())
}

/// The short commit `aet --version` names.
fn commit() -> anyhow::Result<String> {
    crate::dist::git(&["rev-parse", "--short=12", "HEAD"])
}

pub fn test(a: &Artefacts) -> anyhow::Result<()> {
    let version = crate::dist::version()?;
    let host = stdout(Command::new(&a.aet).arg("--version"))?;
    ensure!(
        host.starts_with(&format!("aet {version} ({version}+{}", commit()?)),
        "aet --version: {host:?} does not name version {version} and this commit"
    );
    wheel(a, &version, &host)?;
    deb(a, &version, &host)
}

fn wheel(a: &Artefacts, version: &str, host_version: &str) -> anyhow::Result<()> {
    println!("== the wheel in a fresh venv: {}", a.wheel.display());
    let dir = root().join("target/dist-test/wheel");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    ensure!(
        !Command::new("sh")
            .args(["-c", "command -v cargo || command -v rustc"])
            .env("PATH", USER_PATH)
            .status()?
            .success(),
        "{USER_PATH} holds a Rust toolchain: the test would not show the wheel needs none"
    );
    let venv = dir.join("venv");
    sh(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    let python = venv.join("bin/python");
    let user = |program: &Path| {
        let mut c = Command::new(program);
        c.env("PATH", USER_PATH)
            .env("HOME", &dir)
            .env_remove("AET_BIN")
            .env_remove("VIRTUAL_ENV")
            .env_remove("PYTHONPATH")
            .env_remove("AET_DAEMON")
            // The first run starts a daemon here, which goes at the end.
            .env("AET_SOCKET", SOCKET)
            .current_dir(&dir);
        c
    };
    let pip = |spec: &str| -> anyhow::Result<()> {
        println!("..   pip install {spec}");
        output(
            user(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                // The host's pip cache (setup's installs) serves what it holds.
                .env("HOME", std::env::var_os("HOME").unwrap_or_default())
                .arg(spec),
        )
        .map(drop)
    };
    pip(&a.wheel.display().to_string())?;
    let aet = venv.join("bin/aet");
    let v = stdout(user(&aet).arg("--version"))?;
    ensure!(
        v == host_version,
        "the wheel's aet --version {v:?}, the build's {host_version:?}"
    );
    let meta = stdout(user(&python).args([
        "-c",
        "import importlib.metadata as m, aet, aet._binary as b; \
         print(m.version('aet'), aet.__version__, aet.__file__, b.aet_binary())",
    ]))?;
    let fields: Vec<&str> = meta.split_whitespace().collect();
    ensure!(
        fields.len() == 4
            && fields[0] == version
            && fields[1] == version
            && Path::new(fields[2]).starts_with(&venv)
            && Path::new(fields[3]).starts_with(&venv)
            && fields[3].ends_with("/aet.scripts/aet"),
        "the installed package (version, aet.__version__, module, binary) is {meta:?}: \
         expected {version}, {version}, and module and binary (aet.scripts/aet, which {} \
         launches) inside {}",
        aet.display(),
        venv.display(),
    );
    let binary = Path::new(fields[3]);
    sh(user(&aet).arg("doctor"))?;
    // The platform tag: what auditwheel derives from the binary, and no library outside it.
    let shown = stdout(
        Command::new("python3")
            .args(["-m", "auditwheel", "show"])
            .arg(&a.wheel),
    )?;
    let tag = shown
        .split('"')
        .find(|t| t.starts_with("manylinux_"))
        .with_context(|| {
            format!(
                "auditwheel show {}: no manylinux tag\n{shown}",
                a.wheel.display()
            )
        })?;
    let name = a.wheel.file_name().unwrap_or_default().to_string_lossy();
    ensure!(
        name.contains(tag),
        "{name}: not tagged {tag}, the tag auditwheel derives:\n{shown}"
    );
    // libseccomp (LGPL) is bundled as a library beside the binary, not linked in.
    let libs = stdout(Command::new("ldd").arg(binary))?;
    ensure!(
        !libs.contains("not found")
            && libs
                .lines()
                .any(|l| l.contains("libseccomp") && l.contains("/aet.libs/")),
        "{}: {libs}",
        binary.display()
    );
    println!("ok   {name}: {tag}; aet {v}");

    // A user's first calls, from a directory of their own.
    std::fs::write(
        dir.join("policy.toml"),
        "[allow]\nread = [\"/\"]\nwrite = [\"/dev\"]\n",
    )?;
    let build = host_version
        .split(['(', ')'])
        .nth(1)
        .context("no build in aet --version")?;
    // The files of a run carry the version with its commit, as `aet --version` does.
    let release = build.split(".ebpf-").next().unwrap_or(build);
    let script = format!(
        "import aet, json\n\
         r = aet.run(['true'])\n\
         assert r.complete and r.exit_status == 0 and r.verdict is None, r\n\
         assert r.dir.parent.name == 'runs', r.dir\n\
         assert r.metadata['aet.version'] == {release:?}, r.metadata\n\
         c = aet.run(['true'], policy='policy.toml')\n\
         assert c.complete and c.verdict == 'clean', (c.verdict, c.findings)\n\
         v = json.loads((c.dir / 'audit.json').read_text())['aet_version']\n\
         assert v == {release:?}, v\n\
         print(c.verdict, r.metadata['aet.monitor'])\n"
    );
    let ran = stdout(user(&python).args(["-c", &script]));
    let stopped = output(user(&aet).args(["daemon", "stop", "--socket", SOCKET]));
    let ran = ran?;
    stopped.context("the daemon the first run started did not stop")?;
    ensure!(
        ran.starts_with("clean ") && ran.contains(build) && ran.contains("\"auto\""),
        "aet.run: {ran:?} (want clean, served by a daemon the first run started, of build {build})"
    );
    println!("ok   aet.run(['true']): complete; under a policy: clean");
    isolated_run(&dir, &dir, &user(&aet), Some(&user(&python)), "the wheel's")?;

    // With Inspect AI: the package's own Inspect tests, against the installed copy.
    pip(&format!("{}[inspect]", a.wheel.display()))?;
    pip("pytest")?;
    // Not the checkout's pyproject: its pythonpath would import the tree, not the wheel.
    std::fs::write(dir.join("pytest.ini"), "[pytest]\n")?;
    sh(user(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-c"])
        .arg(dir.join("pytest.ini"))
        .arg("--rootdir")
        .arg(&dir)
        .arg(root().join("python/tests/test_inspect.py")))?;
    println!("ok   aet[inspect]: the Inspect tests pass against the wheel");
    Ok(())
}

/// What a pip user's harness does first: a sandboxed run as the agent identity, recorded and
/// judged by a policy, with the wheel's `aet` (its stage must load the libraries the wheel
/// bundles inside the view), then the seed's `wrap_command(..., record=RUN)` snippet.
/// `dir` is where the files are on this machine, `seen` where the package's `aet` sees them (the
/// same for the wheel; inside the clean root for the .deb, whose `aet` runs chrooted). `python`,
/// when given, runs the seed's `wrap_command(..., record=...)` from the package's Python.
fn isolated_run(
    dir: &Path,
    seen: &Path,
    aet: &Command,
    python: Option<&Command>,
    which: &str,
) -> anyhow::Result<()> {
    let with = |c: &Command| {
        let mut n = Command::new(c.get_program());
        n.args(c.get_args()).current_dir(dir);
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => n.env(k, v),
                None => n.env_remove(k),
            };
        }
        n
    };
    let (ws, inputs) = (seen.join("ws"), seen.join("inputs"));
    std::fs::create_dir_all(dir.join("ws"))?;
    std::fs::create_dir_all(dir.join("inputs"))?;
    std::fs::write(dir.join("inputs/task.txt"), "the task\n")?;
    let run = seen.join("runs/isolated");
    std::fs::write(
        dir.join("sandbox.toml"),
        format!("workspace = {ws:?}\nallow = [{inputs:?}]\n"),
    )?;
    std::fs::write(
        dir.join("isolated.toml"),
        format!(
            "[allow]\nread = [\"/\"]\nwrite = [\"/dev\", {ws:?}, {:?}]\n",
            run.join("agent-home")
        ),
    )?;
    let out = output(
        with(aet)
            .args(["run", "-q", "--standalone", "--out"])
            .arg(&run)
            .arg("--sandbox")
            .arg(seen.join("sandbox.toml"))
            .arg("--identity")
            .arg("--policy")
            .arg(seen.join("isolated.toml"))
            .args(["--", "sh", "-c"])
            .arg(format!(
                "cd {}; id -u; cat {}; echo done > result.txt; touch \"$HOME/state\"",
                ws.display(),
                inputs.join("task.txt").display()
            )),
    )?;
    let (ws, run) = (dir.join("ws"), dir.join("runs/isolated"));
    let said = String::from_utf8_lossy(&out.stdout);
    let uid: u32 = said.lines().next().unwrap_or_default().parse().unwrap_or(0);
    ensure!(
        uid != 0 && said.contains("the task"),
        "the sandboxed run as the agent printed {said:?} (want a uid other than root's and the \
         task)\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        std::fs::read_to_string(ws.join("result.txt"))? == "done\n"
            && run.join("agent-home/state").exists(),
        "the agent's writes to its workspace and home are missing"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("audit.json"))?)?;
    ensure!(
        report["verdict"] == "clean" && report["complete"] == true,
        "the sandboxed run's audit: {report}"
    );
    println!("ok   aet run --sandbox --identity --policy: {which} stage ran, uid {uid}, clean");
    let Some(python) = python else {
        return Ok(());
    };
    let script = format!(
        "import subprocess, pathlib\n\
         from aet.isolation import SandboxSpec, wrap_command, file_access_ledger\n\
         spec = SandboxSpec(workspace=pathlib.Path({ws:?}), allow=[pathlib.Path({inputs:?})])\n\
         cmd = wrap_command('cat {task}', spec, record=pathlib.Path('runs/wrapped'))\n\
         p = subprocess.run(['bash', '-c', cmd], capture_output=True, text=True)\n\
         assert p.returncode == 0 and p.stdout == 'the task\\n', (p.returncode, p.stdout, p.stderr)\n\
         led = file_access_ledger('runs/wrapped')\n\
         assert led['complete'] and {task:?} in led['files_read'], led\n\
         print('recorded', len(led['events']))\n",
        task = inputs.join("task.txt").display(),
    );
    let said = stdout(with(python).args(["-c", &script]))?;
    ensure!(said.starts_with("recorded "), "wrap_command: {said:?}");
    println!("ok   aet.isolation.wrap_command(..., record=RUN): {said} events");
    Ok(())
}

/// The socket of the daemon the wheel's first run starts.
const SOCKET: &str = "/run/aet/dist-test.sock";

/// The clean root: debootstrap's minimal Debian with [`ROOT_PACKAGES`], made once per checkout
/// (a marker says it finished; a half-made one is made again).
fn clean_root() -> anyhow::Result<PathBuf> {
    let base = root().join(format!("target/aet-root/{SUITE}"));
    let done = base.with_extension("done");
    if done.exists() {
        println!("ok   clean root {}", base.display());
        return Ok(base);
    }
    if base.exists() {
        std::fs::remove_dir_all(&base)?;
    }
    std::fs::create_dir_all(&base)?;
    println!(
        "..   debootstrap --variant=minbase --include={ROOT_PACKAGES} {SUITE} {}",
        base.display()
    );
    output(
        Command::new("debootstrap")
            .args(["--variant=minbase", &format!("--include={ROOT_PACKAGES}")])
            .arg(SUITE)
            .arg(&base)
            .arg(MIRROR),
    )?;
    std::fs::write(&done, "")?;
    Ok(base)
}

/// An overlay over the clean root: what a test writes lands in `upper`, the root stays clean.
struct Overlay {
    merged: PathBuf,
    upper: PathBuf,
    mounted: Vec<PathBuf>,
}

impl Overlay {
    fn mount(base: &Path, dir: &Path) -> anyhow::Result<Self> {
        let (upper, work, merged) = (dir.join("upper"), dir.join("work"), dir.join("merged"));
        for d in [&upper, &work, &merged] {
            std::fs::create_dir_all(d)?;
        }
        let mut o = Self {
            merged: merged.clone(),
            upper: upper.clone(),
            mounted: Vec::new(),
        };
        output(
            Command::new("mount")
                .args(["-t", "overlay", "overlay", "-o"])
                .arg(format!(
                    "lowerdir={},upperdir={},workdir={}",
                    base.display(),
                    upper.display(),
                    work.display()
                ))
                .arg(&merged),
        )?;
        o.mounted.push(merged.clone());
        for (fs, at) in [("proc", "proc"), ("devtmpfs", "dev")] {
            let target = merged.join(at);
            output(Command::new("mount").args(["-t", fs, fs]).arg(&target))?;
            o.mounted.push(target);
        }
        // The host's /sys with what is mounted under it (cgroup2, tracefs, bpffs, BTF): the
        // package's aet records from inside the root.
        let sys = merged.join("sys");
        output(Command::new("mount").arg("--rbind").arg("/sys").arg(&sys))?;
        output(Command::new("mount").arg("--make-rslave").arg(&sys))?;
        o.mounted.push(sys);
        Ok(o)
    }

    fn chroot(&self, args: &[&str]) -> Command {
        let mut c = Command::new("chroot");
        c.arg(&self.merged)
            .args(args)
            .env("PATH", USER_PATH)
            .env("LANG", "C.UTF-8")
            .env("DEBIAN_FRONTEND", "noninteractive");
        c
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        for m in self.mounted.iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
    }
}

fn deb(a: &Artefacts, version: &str, host_version: &str) -> anyhow::Result<()> {
    println!(
        "== the Debian package in a clean Debian 12: {}",
        a.deb.display()
    );
    let base = clean_root()?;
    let dir = root().join("target/dist-test/deb");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let o = Overlay::mount(&base, &dir)?;
    // Maintainer scripts run inside the root, as an installed system runs them.
    std::fs::copy(&a.deb, o.merged.join("tmp/aet.deb"))?;
    let installing = output(&mut o.chroot(&["dpkg", "-i", "/tmp/aet.deb"]));
    std::fs::remove_file(o.merged.join("tmp/aet.deb"))?;
    installing?;
    let installed =
        stdout(&mut o.chroot(&["dpkg-query", "-W", "-f", "${Version} ${Depends}", "aet"]))?;
    ensure!(
        installed.starts_with(&format!("{version} ")) && installed.contains("bubblewrap"),
        "dpkg-query: {installed:?} (want version {version}, Depends with bubblewrap)"
    );
    let v = stdout(&mut o.chroot(&["aet", "--version"]))?;
    ensure!(
        v == host_version,
        "the package's aet --version {v:?}, the build's {host_version:?}"
    );
    let libs = stdout(&mut o.chroot(&["ldd", "/usr/bin/aet"]))?;
    ensure!(
        !libs.contains("not found"),
        "/usr/bin/aet in a clean root: {libs}"
    );
    let files = stdout(&mut o.chroot(&["dpkg-query", "-L", "aet"]))?;
    let mut want: Vec<String> = vec![
        "/usr/bin/aet".into(),
        "/usr/share/man/man1/aet.1.gz".into(),
        "/usr/share/man/man1/aet-run.1.gz".into(),
        "/usr/share/bash-completion/completions/aet".into(),
        "/usr/share/zsh/vendor-completions/_aet".into(),
        "/usr/share/fish/vendor_completions.d/aet.fish".into(),
        "/lib/systemd/system/aet.socket".into(),
        "/lib/systemd/system/aet.service".into(),
    ];
    for p in std::fs::read_dir(root().join("policies"))? {
        let name = p?.file_name();
        want.push(format!(
            "/usr/share/aet/policies/{}",
            name.to_string_lossy()
        ));
    }
    for w in &want {
        ensure!(
            files.lines().any(|l| l == w || l == format!("/usr{w}")),
            "the package does not install {w}:\n{files}"
        );
    }
    let page = stdout(&mut o.chroot(&["man", "-P", "cat", "aet-run"]))?;
    ensure!(
        page.contains("aet run") && page.contains("--standalone"),
        "man aet-run:\n{page}"
    );
    let complete = stdout(&mut o.chroot(&[
        "bash",
        "-c",
        ". /usr/share/bash-completion/completions/aet && complete -p aet",
    ]))?;
    ensure!(complete.contains(" aet"), "bash completion: {complete:?}");
    output(&mut o.chroot(&["systemd-analyze", "verify", "aet.socket", "aet.service"]))?;
    ensure!(
        o.merged
            .join("etc/systemd/system/sockets.target.wants/aet.socket")
            .symlink_metadata()
            .is_ok(),
        "the package did not enable aet.socket"
    );
    println!("ok   dpkg -i: {installed}; man aet-run, completions, units verified, socket enabled");

    // A sandboxed, identity-dropped, recorded and audited run of the installed aet, inside the
    // root (its own bwrap, libseccomp and libc).
    let iso = o.merged.join("tmp/iso");
    isolated_run(
        &iso,
        Path::new("/tmp/iso"),
        &o.chroot(&["aet"]),
        None,
        "the .deb's",
    )?;
    std::fs::remove_dir_all(&iso)?;

    output(&mut o.chroot(&["dpkg", "--purge", "aet"]))?;
    let left = leftovers(&o.upper, &base)?;
    ensure!(
        left.is_empty(),
        "after dpkg --purge aet, the root holds what it did not before:\n{}",
        left.join("\n")
    );
    println!("ok   dpkg --purge: nothing of aet is left");
    drop(o);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// What the overlay's upper layer holds that the clean root did not, outside the state of the
/// tools the test runs (dpkg's database and log, which record the install and the purge; man-db's
/// cache; systemd-analyze's /run): a file, a link, a whiteout
/// (a file of the root removed) or a directory the root lacked.
fn leftovers(upper: &Path, base: &Path) -> anyhow::Result<Vec<String>> {
    let out = stdout(Command::new("find").arg(upper).args(["-mindepth", "1"]))?;
    let mut left = Vec::new();
    for line in out.lines() {
        let rel = Path::new(line).strip_prefix(upper)?;
        let r = rel.to_string_lossy();
        // dpkg's database and log; man-db's cache (the test's `man` formats pages into it);
        // systemd-analyze's state under /run.
        if ["var/lib/dpkg", "var/log", "var/cache/man", "run"]
            .iter()
            .any(|p| r == *p || r.starts_with(&format!("{p}/")))
        {
            continue;
        }
        let meta = std::fs::symlink_metadata(line)?;
        if meta.is_dir() && base.join(rel).is_dir() {
            continue;
        }
        left.push(format!("/{r}"));
    }
    Ok(left)
}
