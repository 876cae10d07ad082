//! The policy parser's tests.

use super::*;

const SMALLEST: &str = r#"
[allow]
read  = ["/task/**", "/usr/**"]
write = ["/task/out/**"]

[cheats]
golden = 'golden\.yaml'
oracle = 'solver/oracle'

[contaminants]
other_proj = '/other/projects/'

[warns]
oracle_src = 'oracle\.py'
"#;

#[test]
fn the_smallest_policy_compiles() {
    let p = Policy::parse(SMALLEST, Path::new("p.toml")).unwrap();
    let names: Vec<&str> = p.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "cheats.golden",
            "cheats.oracle",
            "contaminants.other_proj",
            "warns.oracle_src"
        ]
    );
    let a = p.allow.unwrap();
    assert!(a.read.is_match("/task/x/y.txt"));
    assert!(!a.read.is_match("/taskforce/x"));
    assert!(a.write.is_match("/task/out/result.txt"));
    assert!(!a.write.is_match("/task/in.txt"));
}

#[test]
fn every_policy_under_policies_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let pol = Policy::load(&p).unwrap_or_else(|e| panic!("{e}"));
            assert!(!pol.rules.is_empty(), "{}", p.display());
            n += 1;
        }
    }
    assert!(n >= 2, "the example policies are there");
}

#[test]
fn every_bad_rule_is_named_and_the_cost_is_bounded() {
    let e = Policy::parse(
        "[cheats]\na = '(unclosed'\nb = { pattern = 'x', access = [] }\nc = 'fine'\n\
             [warns]\nd = '[z-a]'\n",
        Path::new("p"),
    )
    .unwrap_err();
    for want in ["cheats.a", "cheats.b", "warns.d"] {
        assert!(e.contains(want), "{want}: {e}");
    }
    assert_eq!(e.lines().count(), 3, "{e}");
    // Too many rules, too many bytes: refused at once, the limit named.
    let mut many = String::from("[cheats]\n");
    for i in 0..=MAX_RULES {
        many += &format!("r{i} = 'x{i}'\n");
    }
    let t = std::time::Instant::now();
    let e = Policy::parse(&many, Path::new("p")).unwrap_err();
    assert!(e.contains(&MAX_RULES.to_string()), "{e}");
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
    let big = format!("# {}\n", "x".repeat(MAX_POLICY_BYTES));
    let e = Policy::parse(&big, Path::new("p")).unwrap_err();
    assert!(e.contains(&MAX_POLICY_BYTES.to_string()), "{e}");
    // One pattern that compiles too large is named.
    let e = Policy::parse("[cheats]\nhuge = '(\\w{100}){100}'\n", Path::new("p")).unwrap_err();
    assert!(e.contains("cheats.huge"), "{e}");
}

#[test]
fn literal_allow_entries_are_prefixes() {
    let p = Policy::parse("[allow]\nread = [\"/usr\"]\n", Path::new("p")).unwrap();
    let a = p.allow.unwrap();
    assert!(a.read.is_match("/usr") && a.read.is_match("/usr/lib/x.so"));
    assert!(!a.read.is_match("/usrx"));
}

#[test]
fn errors_name_the_line_and_key() {
    let e = Policy::parse(
        "[cheats]\ngolden = 'golden\\.yaml'\nbad = '(unclosed'\n",
        Path::new("p"),
    )
    .unwrap_err();
    assert!(e.contains("line 3") && e.contains("cheats.bad"), "{e}");
    let e = Policy::parse("[allow]\nread = [\"/a/[\"]\n", Path::new("p")).unwrap_err();
    assert!(e.contains("line 2") && e.contains("allow.read[0]"), "{e}");
    let e = Policy::parse("[cheat]\nx = 'y'\n", Path::new("p")).unwrap_err();
    assert!(e.contains("line 1") && e.contains("cheat"), "{e}");
    let e = Policy::parse("[allow]\nread = \"/a\"\n", Path::new("p")).unwrap_err();
    assert!(e.contains("line 2"), "{e}");
    let e = Policy::parse(
        "[cheats]\nx = { pattern = 'y', access = [\"reed\"] }\n",
        Path::new("p"),
    )
    .unwrap_err();
    assert!(e.contains("line 2"), "{e}");
}

#[cfg(test)]
mod endpoint_tests {
    use super::*;

    #[test]
    fn connect_globs_match_endpoints_and_bad_ones_are_refused() {
        let p = Policy::parse(
            "[allow]\nread = [\"/usr\"]\nwrite = []\nconnect = [\"127.0.0.1:*\", \"[::1]:443\", \"unix:/run/*.sock\"]\n",
            Path::new("p.toml"),
        )
        .unwrap();
        let c = p.allow.as_ref().unwrap().connect.as_ref().unwrap();
        for (ep, want) in [
            ("127.0.0.1:8080", true),
            ("127.0.0.2:8080", false),
            ("[::1]:443", true),
            ("[::1]:80", false),
            ("unix:/run/x.sock", true),
            ("unix:/run/a/x.sock", false),
        ] {
            assert_eq!(c.is_match(ep), want, "{ep}");
        }
        let e = Policy::parse(
            "[allow]\nread = []\nwrite = []\nconnect = [\"github.com\"]\n",
            Path::new("p.toml"),
        )
        .unwrap_err();
        assert!(e.contains("line 4") && e.contains("not an endpoint"), "{e}");
    }

    #[test]
    fn phase_sections_are_policies_of_their_own_and_bad_ones_are_named() {
        let p = Policy::parse(
            "[cheats]\ntests = '^/tests/'\n\n[phases.grading.cheats]\nresults = '^/results'\n\n\
             [processes]\nlingering = \"warn\"\n",
            Path::new("p.toml"),
        )
        .unwrap();
        assert_eq!(p.phase, "agent");
        assert_eq!(p.lingering, Some(Severity::Warning));
        let g = p.for_phase("grading").expect("a section");
        assert_eq!(g.phase, "grading");
        assert_eq!(g.rules[0].name, "phases.grading.cheats.results");
        assert!(g.set.is_match(b"/results.txt") && !g.set.is_match(b"/tests/x"));
        assert!(
            p.for_phase("setup").is_none(),
            "a phase without a section is not judged"
        );
        assert_eq!(
            Policy::parse("", Path::new("p.toml")).unwrap().lingering,
            Some(Severity::Cheat)
        );
        for (text, says) in [
            (
                "[phases.Grading.cheats]\nx = 'y'\n",
                "line 1: phases.Grading: \"Grading\" is not a phase name",
            ),
            (
                "[phases.agent.cheats]\nx = 'y'\n",
                "phases.agent: the top-level rules are the `agent` phase's",
            ),
            (
                "[phases.grading.protected]\nk = '/k'\n",
                "phases.grading.protected: a phase section holds only",
            ),
            (
                "[phases.grading.cheats]\nx = '('\n",
                "line 2: phases.grading.cheats.x = \"(\": invalid regular expression",
            ),
            (
                "[processes]\nlingering = \"maybe\"\n",
                "processes.lingering = \"maybe\": expected",
            ),
            (
                "[allow]\nread = [\"/\"]\nprograms = [\"abc\"]\n",
                "line 3: allow.programs[0]: \"abc\" is not a SHA-256",
            ),
            (
                "[cheats]\nx = { sha256 = \"abc\" }\n",
                "line 2: cheats.x: \"abc\" is not a SHA-256",
            ),
            (
                "[cheats]\nx = { argv = 'a', sha256 = \"HASH\" }\n",
                "cheats.x: `sha256` names a program's content",
            ),
            (
                "[cheats]\nx = { sha256 = \"HASH\", access = [\"read\"] }\n",
                "cheats.x: a `sha256` rule matches what ran",
            ),
        ] {
            let text = &text.replace("HASH", &"a".repeat(64));
            let e = Policy::parse(text, Path::new("p.toml")).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}

#[test]
fn a_text_rule_matches_paths_and_commands_as_the_seed_did() {
    let p = Policy::parse(
        "[cheats]\noracle = { text = 'import\\s+solver\\.oracle' }\n\
         golden = { text = 'golden\\.yaml' }\n\
         [warns]\nlisted = { text = 'answers/', access = ['list'] }\n",
        Path::new("p.toml"),
    )
    .unwrap();
    let idx = |n: &str| p.rules.iter().position(|r| r.name == n).unwrap();
    assert!(p.rules.iter().all(|r| r.target == Target::Text));
    // A path: the path set.
    assert!(
        p.set
            .matches(b"/repo/golden.yaml")
            .matched(idx("cheats.golden"))
    );
    // A command: the argv set, for the rules that count what a process runs.
    let ran: Vec<usize> = p
        .argv_set
        .matches(b"python3 -c import solver.oracle")
        .iter()
        .map(|m| p.argv_rules[m])
        .collect();
    assert_eq!(ran, [idx("cheats.oracle")]);
    assert!(
        !p.argv_rules.contains(&idx("warns.listed")),
        "a rule that does not count exec is not matched against what processes run"
    );
}

#[test]
fn a_rule_with_two_targets_or_a_bad_text_is_refused_naming_it() {
    let e = Policy::parse(
        "[cheats]\na = { text = 'x', argv = 'y' }\nb = { text = 3 }\n",
        Path::new("p.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("cheats.a") && e.contains("`argv` and `text` together"),
        "{e}"
    );
    assert!(
        e.contains("cheats.b") && e.contains("`text` must be a string"),
        "{e}"
    );
}

#[test]
fn a_rule_whose_target_and_access_leave_it_nothing_to_match_is_refused() {
    let e = Policy::parse(
        "[cheats]\na = { host = 'github.com', access = ['read'] }\n\
         b = { argv = 'curl', access = ['read', 'write'] }\n\
         c = { pattern = '/answers/', access = ['host'] }\n\
         d = { text = 'oracle', access = ['host'] }\n\
         ok = { argv = 'curl', access = ['exec'] }\n",
        Path::new("p.toml"),
    )
    .unwrap_err()
    .to_string();
    for (name, why) in [
        ("cheats.a", "a `host` rule matches host names"),
        ("cheats.b", "an `argv` rule matches what a process ran"),
        ("cheats.c", "a path pattern never matches a host name"),
        ("cheats.d", "a path pattern never matches a host name"),
    ] {
        assert!(
            e.lines()
                .any(|l| l.contains(name) && l.contains(why) && l.ends_with("could never match")),
            "{name}: {e}"
        );
    }
    assert!(!e.contains("cheats.ok"), "{e}");
}

#[test]
fn a_path_rule_that_needs_whitespace_loads_with_a_warning_naming_it() {
    let text = "[cheats]\nok = 'golden\\.yaml'\noracle = 'import\\s+solver\\.oracle'\n\
                [phases.grading.warns]\nrun = { pattern = 'pytest -x', access = [\"read\"] }\n\
                [contaminants]\ncmd = { text = 'import\\s+other' }\n";
    let p = Policy::parse(text, Path::new("p.toml")).unwrap();
    let w = p.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].starts_with("line 3: cheats.oracle") && w[0].contains("{ text = '...' }"),
        "{w:?}"
    );
    assert!(
        w[1].starts_with("line 5: phases.grading.warns.run"),
        "{w:?}"
    );
    assert!(
        Policy::parse(SMALLEST, Path::new("p.toml"))
            .unwrap()
            .warnings()
            .is_empty()
    );
}

/// Host rules and `[network] hosts` (the patterns are `aet_ledger::hosts`').
mod hosts {
    use crate::policy::Policy;

    fn load(text: &str) -> Result<Policy, String> {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(&f, text).unwrap();
        Policy::load(&f).map_err(|e| e.to_string())
    }

    #[test]
    fn host_rules_and_allowed_hosts_compile_and_bad_ones_are_named() {
        let p = load(
            "[allow]\nread = []\nwrite = []\nhosts = [\"pypi.org\"]\n[cheats]\nup = { host = \"github.com\" }\n",
        )
        .unwrap();
        assert_eq!(p.rules[0].target, crate::policy::Target::Host);
        assert_eq!(p.rules[0].access, [crate::policy::Access::Host]);
        assert!(p.allow.unwrap().hosts.unwrap().matches(b"pypi.org"));
        let e = load("[allow]\nread = []\nwrite = []\nhosts = [\"ok.org\", \"bad/host\"]\n")
            .unwrap_err();
        assert!(
            e.contains("line 4: allow.hosts[1]") && e.contains("bad/host"),
            "{e}"
        );
        let e = load("[cheats]\nup = { host = \"git hub\" }\n").unwrap_err();
        assert!(
            e.contains("line 2: cheats.up") && e.contains("not a host name"),
            "{e}"
        );
        let e = load("[cheats]\nup = { host = \"a.b\", pattern = \"x\" }\n").unwrap_err();
        assert!(e.contains("together"), "{e}");
    }
}
