//! Reports a reviewer can read: findings grouped by rule, access and path (and out-of-scope paths
//! by directory), every cheat shown, and an HTML report that stays small and opens fast in
//! headless Chromium at 100,000 findings.

use std::{collections::BTreeMap, path::Path};

use aet_tests::*;
use serde_json::Value;

fn audit_of(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("audit.json")).unwrap()).unwrap()
}

/// Checks what every grouping must hold: one group per list, rule, outcome, access, phase and
/// path; the path groups' findings and rows add up to the lists; each group's first process is
/// its earliest finding's; a directory group's members are path groups below it.
fn check_groups(a: &Value) {
    let groups = a["groups"].as_array().unwrap();
    let mut keys = std::collections::BTreeSet::new();
    let mut totals: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (i, g) in groups.iter().enumerate() {
        let list = g["list"].as_str().unwrap();
        let findings = a[list].as_array().unwrap();
        if g["dir"].as_bool().unwrap() {
            let dir = g["path"].as_str().unwrap();
            let members = g["members"].as_array().unwrap();
            assert!(members.len() >= 4, "{g:#}");
            assert_eq!(g["paths"].as_u64().unwrap() as usize, members.len());
            let mut rows = 0;
            for m in members {
                let p = &groups[m.as_u64().unwrap() as usize];
                assert_eq!(p["parent"].as_u64(), Some(i as u64));
                assert!(p["path"].as_str().unwrap().starts_with(&format!("{dir}/")));
                rows += p["rows"].as_u64().unwrap();
            }
            assert_eq!(g["rows"].as_u64().unwrap(), rows);
            continue;
        }
        let key = (
            list.to_owned(),
            g["rule"].to_string(),
            g["outcome"].to_string(),
            g["access"].to_string(),
            g["phase"].to_string(),
            g["path"].to_string(),
        );
        assert!(keys.insert(key), "two groups for one path: {g:#}");
        let members: Vec<&Value> = g["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| &findings[m.as_u64().unwrap() as usize])
            .collect();
        let rows: u64 = members.iter().map(|f| f["count"].as_u64().unwrap()).sum();
        assert_eq!(g["rows"].as_u64().unwrap(), rows);
        assert_eq!(g["findings"].as_u64().unwrap() as usize, members.len());
        let earliest = members
            .iter()
            .min_by_key(|f| {
                (
                    f["first_ts_ns"].as_i64().unwrap(),
                    f["first_seq"].as_u64().unwrap(),
                )
            })
            .unwrap();
        assert_eq!(g["first"]["pid"], earliest["pid"], "{g:#}");
        assert_eq!(g["first_ts_ns"], earliest["first_ts_ns"]);
        for f in &members {
            assert_eq!(f["rule"], g["rule"]);
            assert_eq!(f["path"], g["path"]);
        }
        let pids: std::collections::BTreeSet<u64> =
            members.iter().map(|f| f["pid"].as_u64().unwrap()).collect();
        assert_eq!(g["processes"].as_u64().unwrap() as usize, pids.len());
        let t = totals.entry(list.to_owned()).or_default();
        t.0 += members.len() as u64;
        t.1 += rows;
    }
    for list in [
        "cheat_hits",
        "contaminant_hits",
        "out_of_scope",
        "warnings",
        "blocked",
    ] {
        let findings = a[list].as_array().unwrap();
        let rows: u64 = findings.iter().map(|f| f["count"].as_u64().unwrap()).sum();
        let t = totals.get(list).copied().unwrap_or_default();
        assert_eq!(
            t,
            (findings.len() as u64, rows),
            "{list}: the groups add up"
        );
    }
}

/// The reviewer's loop: 300 `ls` and `cat` under a narrow allow-list touch 77 paths and make
/// twelve thousand out-of-scope findings; the groups are one per path (and a few directories),
/// they add up, and the terminal shows them in a screen, every cheat finding included.
#[test]
fn a_loop_of_300_commands_is_a_screen_of_groups_and_every_cheat_is_shown() {
    let t = Tree::new();
    let policy = t.p("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[allow]\nread = [\"{}/**\"]\nwrite = [\"/dev/null\"]\n\n[cheats]\nhostname = '^/etc/hostname$'\n",
            t.s("")
        ),
    )
    .unwrap();
    let out = t.p("run");
    let o = aet()
        .args(["run", "-q", "--policy"])
        .arg(&policy)
        .arg("--out")
        .arg(&out)
        .args([
            "--",
            "sh",
            "-c",
            "for i in $(seq 300); do ls / >/dev/null; cat /etc/hostname >/dev/null; done",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let a = audit_of(&out);
    assert!(a["out_of_scope"].as_array().unwrap().len() > 10_000);
    assert_eq!(a["cheat_hits"].as_array().unwrap().len(), 300);
    check_groups(&a);
    let groups = a["groups"].as_array().unwrap();
    let paths = a["counts"]["distinct_paths"].as_u64().unwrap() as usize;
    let path_groups = groups
        .iter()
        .filter(|g| !g["dir"].as_bool().unwrap())
        .count();
    assert!(
        path_groups <= paths * 3,
        "{path_groups} path groups for {paths} paths"
    );
    assert!(
        groups.iter().any(|g| g["dir"].as_bool().unwrap()),
        "a directory of many files read is one group"
    );
    let cheat = groups.iter().find(|g| g["list"] == "cheat_hits").unwrap();
    assert_eq!(cheat["processes"], 300);
    assert_eq!(cheat["first"]["comm"], "cat");

    let shown = aet()
        .arg("audit")
        .arg(&out)
        .arg("--policy")
        .arg(&policy)
        .output()
        .unwrap();
    let screen = text(&shown.stdout);
    // Every cheat finding, under its group; the rest folded to the largest groups.
    let cheat_lines = screen.lines().filter(|l| l.contains("by cat[")).count();
    assert!(cheat_lines >= 300, "{screen}");
    let scope_lines = screen.lines().filter(|l| l.starts_with("SCOPE")).count();
    assert!((1..=12).contains(&scope_lines), "{screen}");
    let html = std::fs::metadata(out.join("audit.html")).unwrap().len();
    assert!(html < 2_000_000, "audit.html is {html} bytes");
}

/// 100,000 findings: the JSON keeps every one, the HTML is at most 5 MB and Chromium renders
/// it, groups first (its DOM after the page's script ran says how many groups it shows).
#[test]
fn a_run_of_100000_findings_has_a_small_html_report_chromium_renders() {
    let Some(chromium) = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find(|c| {
            std::process::Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
    else {
        panic!("no headless Chromium on this machine (cargo xtask setup installs it)");
    };
    let t = Tree::new();
    for i in 0..100 {
        t.file(&format!("files/f{i:03}"), "x\n");
    }
    let policy = t.p("policy.toml");
    std::fs::write(
        &policy,
        "[allow]\nread = [\"/usr/**\", \"/etc/**\", \"/proc/**\"]\nwrite = [\"/dev/null\"]\n",
    )
    .unwrap();
    let out = t.p("run");
    let script = format!(
        "for i in $(seq 1000); do cat {}/* >/dev/null; done",
        t.s("files")
    );
    let o = aet()
        .args(["run", "-q", "--policy"])
        .arg(&policy)
        .arg("--out")
        .arg(&out)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let a = audit_of(&out);
    let n = a["out_of_scope"].as_array().unwrap().len();
    assert!(n >= 100_000, "{n} findings");
    check_groups(&a);
    let html = out.join("audit.html");
    let size = std::fs::metadata(&html).unwrap().len();
    assert!(size <= 5_000_000, "audit.html is {size} bytes");
    let dom = std::process::Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    let dom = text(&dom.stdout);
    let top = a["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["parent"].is_null())
        .count();
    assert!(
        dom.contains(&format!("Flagged accesses: {top} groups of {n} findings")),
        "the groups' heading"
    );
    // The page's script counted the group rows it filters: it ran over the whole table.
    assert!(
        dom.contains(&format!("{top} of {top} shown")),
        "the script's count of groups"
    );
    let shot = t.p("shot.png");
    let s = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1300,1400",
        ])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    assert!(s.status.success(), "{}", text(&s.stderr));
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
}
