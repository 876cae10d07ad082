//! Unit tests of the view's builder: the bwrap command line each spec makes.

use super::*;

fn spec(ws: &Path) -> SandboxSpec {
    SandboxSpec::parse(&format!("workspace = {:?}", ws.to_str().unwrap())).unwrap()
}

fn opts() -> BuildOptions {
    BuildOptions {
        stage: None,
        command: vec!["true".into()],
        env_prefix: None,
        mode: Mode::Exec,
        identity: None,
        repo_copies: Vec::new(),
        decoys: Vec::new(),
    }
}

fn pos(args: &[OsString], seq: &[&str]) -> usize {
    args.windows(seq.len())
        .position(|w| w.iter().zip(seq).all(|(a, b)| a == b))
        .unwrap_or_else(|| panic!("{seq:?} not in {args:?}"))
}

#[test]
fn grants_are_layered_parents_first_and_masks_last() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    for p in ["home/u/.state", "home/u/secret", "ws"] {
        fs::create_dir_all(root.join(p)).unwrap();
    }
    let s = |p: &str| root.join(p).to_str().unwrap().to_owned();
    let mut sp = spec(&root.join("ws"));
    // The rw child is listed before its read-only parent: the order still puts the parent
    // first.
    sp.rw_binds = vec![s("home/u/.state").into()];
    sp.allow = vec![s("home/u").into()];
    sp.deny = vec![s("home/u/secret").into()];
    let b = build(&sp, &opts()).unwrap();
    let ro = pos(&b.args, &["--ro-bind", &s("home/u"), &s("home/u")]);
    let rw = pos(
        &b.args,
        &["--bind", &s("home/u/.state"), &s("home/u/.state")],
    );
    let deny = pos(&b.args, &["--tmpfs", &s("home/u/secret"), "--remount-ro"]);
    let ws = pos(&b.args, &["--bind", &s("ws"), &s("ws")]);
    assert!(ro < rw && rw < deny && ws < deny, "{:?}", b.args);
    let root_ro = pos(&b.args, &["--remount-ro", "/"]);
    assert!(deny < root_ro);
    assert_eq!(b.command, ["true"]);
}

#[test]
fn a_missing_deny_under_a_read_only_grant_is_checked_absent() {
    let d = tempfile::tempdir().unwrap();
    fs::create_dir_all(d.path().join("in")).unwrap();
    fs::create_dir_all(d.path().join("ws")).unwrap();
    let mut sp = spec(&d.path().join("ws"));
    sp.allow = vec![d.path().join("in")];
    sp.deny = vec![d.path().join("in/answers"), d.path().join("ws/answers")];
    let mut o = opts();
    o.stage = Some(StageFiles::new("/proc/self/exe".into(), "/tmp".into()));
    let b = build(&sp, &o).unwrap();
    let plan = b.plan.unwrap();
    let find = |p: PathBuf| {
        plan.checks
            .iter()
            .find(|c| c.path.0 == p)
            .unwrap()
            .expect
            .clone()
    };
    // Cannot be created under a read-only bind: no mount, checked absent.
    assert_eq!(find(d.path().join("in/answers")), Expect::Absent);
    // Could be created in the writable workspace: masked.
    assert_eq!(find(d.path().join("ws/answers")), Expect::EmptyDir);
    let ws_answers = d.path().join("ws/answers");
    pos(&b.args, &["--tmpfs", ws_answers.to_str().unwrap()]);
}

/// The seed's example (`examples/sandbox/seed.toml`), its paths made under a scratch root
/// and the base layer left out so that nothing depends on the host, builds exactly the
/// command line of `tests/fixtures/seed.bwrap-argv.txt` (`$ROOT` for the scratch root).
/// `AET_BLESS=1` rewrites the fixture.
#[test]
fn seed_example_builds_the_golden_argv() {
    // Under /tmp whatever TMPDIR says: its parents are in the command line.
    let d = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    let root = d.path().canonicalize().unwrap();
    for p in [
        "run/ws",
        "repo/inputs",
        "repo/tools",
        "root/.claude",
        "opt/toolchain",
        "repo/inputs/answers",
    ] {
        fs::create_dir_all(root.join(p)).unwrap();
    }
    fs::write(root.join("repo/inputs/golden.yaml"), "expected: 42\n").unwrap();
    let seed = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sandbox/seed.toml"),
    )
    .unwrap();
    // Every absolute path of the seed, under the scratch root; no host resolver, no base.
    let text = seed
        .replace("\"/", &format!("\"{}/", root.display()))
        .replace("dns         = true", "base = \"none\"");
    let spec = SandboxSpec::parse(&text).unwrap();
    let b = build(
        &spec,
        &BuildOptions {
            command: vec!["claude".into(), "-p".into(), "do the task".into()],
            ..opts()
        },
    )
    .unwrap();
    let got = crate::format_args_lines(&b.argv()).replace(root.to_str().unwrap(), "$ROOT");
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seed.bwrap-argv.txt");
    if std::env::var_os(aet_checks::docgen::BLESS_ENV).is_some() {
        fs::write(&golden, &got).unwrap();
    }
    let want = fs::read_to_string(&golden).unwrap_or_default();
    assert_eq!(
        got, want,
        "the seed's bwrap command line changed; if that is intended, run `cargo xtask docs`"
    );
}

/// `allow = ["/etc"]` is a valid spec: the base layer's own `/etc` files are not made again over
/// the host's `/etc` the grant shows (a link over `/etc/localtime` failed in bwrap: it exists).
#[test]
fn a_granted_etc_takes_the_place_of_the_base_layer_s_etc_files() {
    let d = tempfile::tempdir().unwrap();
    fs::create_dir_all(d.path().join("ws")).unwrap();
    let mut sp = spec(&d.path().join("ws"));
    sp.allow = vec!["/etc".into()];
    let b = build(&sp, &opts()).unwrap();
    pos(&b.args, &["--ro-bind", "/etc", "/etc"]);
    let under_etc: Vec<_> = b
        .args
        .iter()
        .filter(|a| Path::new(a).starts_with("/etc") && Path::new(a) != Path::new("/etc"))
        .collect();
    assert!(under_etc.is_empty(), "{under_etc:?} in {:?}", b.args);
    // Without the grant, the base layer's files are there.
    let b = build(&spec(&d.path().join("ws")), &opts()).unwrap();
    pos(&b.args, &["--ro-bind", "/etc/passwd", "/etc/passwd"]);
}
