//! Unit tests of the sandbox spec: its keys, its refusals, the docs' key table.

/// The keys the parser accepts, as serde lists them when it refuses an unknown one.
fn accepted_keys() -> Vec<String> {
    let e = super::SandboxSpec::parse("workspace = \"/w\"\nno_such_key = 1\n").unwrap_err();
    let list = e
        .split("expected one of ")
        .nth(1)
        .unwrap_or_else(|| panic!("no key list in {e:?}"));
    list.split(", ")
        .map(|k| {
            k.trim()
                .trim_matches(|c: char| c == '`' || !c.is_ascii_graphic())
                .to_owned()
        })
        .filter(|k| !k.is_empty())
        .collect()
}

#[test]
fn the_docs_spec_keys_are_the_parser_s() {
    let documented: Vec<String> = super::KEYS
        .iter()
        .flat_map(|k| k.keys.split(", "))
        .map(|k| {
            k.trim_matches(|c| c == '`' || c == '[' || c == ']')
                .to_owned()
        })
        .collect();
    let mut accepted = accepted_keys();
    accepted.sort();
    let mut doc = documented.clone();
    doc.sort();
    assert_eq!(doc, accepted, "KEYS and the spec's fields differ");
    aet_checks::docgen::check(
        &aet_checks::docgen::docs_dir().join("sandbox.md"),
        "spec-keys",
        &super::keys_markdown(),
    );
}

use super::*;

#[test]
fn the_seed_example_parses_as_written() {
    let text = r#"
workspace   = "/run/ws"
allow       = ["/repo/inputs", "/repo/tools"]
rw_binds    = ["/root/.claude"]
deny        = ["/repo/inputs/answers"]
mask_files  = ["/repo/inputs/golden.yaml"]
extra_binds = ["/opt/toolchain"]
tmpfs       = ["/tmp", "/scratch"]
unsetenv    = ["CLAUDE_CODE_SSE_PORT"]
dns         = true
"#;
    let s = SandboxSpec::parse(text).unwrap();
    assert_eq!(s.workspace, Path::new("/run/ws"));
    assert_eq!(s.deny, vec![PathBuf::from("/repo/inputs/answers")]);
    assert!(s.dns && s.network == Network::Host);
    assert_eq!(s.base, Base::Standard);
}

#[test]
fn unknown_keys_and_wrong_types_name_the_line() {
    let e = SandboxSpec::parse("workspace = \"/w\"\nallw = [\"/x\"]\n").unwrap_err();
    assert!(e.contains("line 2") && e.contains("allw"), "{e}");
    let e = SandboxSpec::parse("workspace = \"/w\"\ndns = \"yes\"\n").unwrap_err();
    assert!(e.contains("line 2") && e.contains("dns"), "{e}");
}

#[test]
fn a_spec_with_an_unknown_key_lists_every_other_problem_too() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    fs::create_dir(&real).unwrap();
    let link = dir.path().join("ws");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let spec = dir.path().join("s.toml");
    fs::write(
        &spec,
        format!(
            "workspace = {link:?}\nallw = [\"/x\"]\nallow = [\"/no/such/dir\"]\n\
             [[repo]]\npath = {real:?}\nbase = \"HEAD\"\nhistroy = \"verify\"\n"
        ),
    )
    .unwrap();
    let e = SandboxSpec::load(&spec).unwrap_err().to_string();
    for want in [
        "line 2: unknown key `allw`",
        "repo[0]: unknown key `histroy`",
        "allow[0]",
        "is a symbolic link",
    ] {
        assert!(e.contains(want), "{want}: {e}");
    }
}

#[test]
fn contradictions_are_found() {
    let e = |role, index, p: &str| Entry {
        role,
        index,
        path: p.into(),
    };
    assert!(
        contradiction(&e(Role::Allow, 0, "/a/b/c"), &e(Role::Deny, 1, "/a/b"))
            .unwrap()
            .contains("inside deny[1]")
    );
    assert!(contradiction(&e(Role::Allow, 0, "/a"), &e(Role::RwBind, 0, "/a")).is_some());
    assert!(contradiction(&e(Role::Allow, 0, "/a"), &e(Role::Deny, 0, "/a/b")).is_none());
    assert!(contradiction(&e(Role::Allow, 0, "/a"), &e(Role::ExtraBind, 0, "/a")).is_none());
    assert!(
        contradiction(&e(Role::Allow, 0, "/a/bc"), &e(Role::Deny, 0, "/a/b")).is_none(),
        "component-wise, not string prefix"
    );
}

#[test]
fn path_syntax() {
    assert!(check_path_syntax(Path::new("rel")).is_err());
    assert!(check_path_syntax(Path::new("/a/../b")).is_err());
    assert!(check_path_syntax(Path::new("/a/b")).is_ok());
}
