//! Reports at scale (issue 27): a run of 100,000 findings (1,000 `cat`s of 100 files each, under
//! an allow-list that leaves the files out), audited again and again (`aet audit`, the JSON and
//! HTML reports written), and the HTML report loaded and screenshot by headless Chromium beside
//! an empty page, alternately; medians of `--runs`.

use std::{path::Path, process::Command, time::Instant};

use anyhow::{Context as _, bail};

use super::{Args, median};
use crate::root;

fn timed(cmd: &mut Command) -> anyhow::Result<u64> {
    let t = Instant::now();
    let o = cmd.output().with_context(|| format!("{cmd:?}"))?;
    let ns = t.elapsed().as_nanos() as u64;
    // `aet audit` exits with the verdict (1: flagged): only a usage error (4) fails here.
    if o.status.code().is_some_and(|c| c >= 4) || o.status.code().is_none() {
        bail!("{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    Ok(ns)
}

pub fn run(aet: &Path, args: &Args) -> anyhow::Result<()> {
    let dir = root().join("target/aet-bench-report");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("files"))?;
    for i in 0..100 {
        std::fs::write(dir.join(format!("files/f{i:03}")), "x\n")?;
    }
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        "[allow]\nread = [\"/usr/**\", \"/etc/**\", \"/proc/**\"]\nwrite = [\"/dev/null\"]\n",
    )?;
    let run = dir.join("run");
    let script = format!(
        "for i in $(seq 1000); do cat {}/* >/dev/null; done",
        dir.join("files").display()
    );
    let o = crate::user_command(aet)
        .args(["run", "-q", "--out"])
        .arg(&run)
        .args(["--", "sh", "-c", &script])
        .output()?;
    if !o.status.success() {
        bail!(
            "recording the run failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let (json, html) = (dir.join("audit.json"), dir.join("audit.html"));
    let blank = dir.join("blank.html");
    std::fs::write(&blank, "<!DOCTYPE html><html><body>blank</body></html>\n")?;
    let chromium = |page: &Path| {
        let mut c = Command::new("chromium");
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1300,1400",
        ])
        .arg(format!("--screenshot={}", dir.join("shot.png").display()))
        .arg(format!("file://{}", page.display()));
        c
    };
    let (mut audits, mut pages, mut blanks) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.runs.clamp(1, 5) {
        let _ = std::fs::remove_file(&json);
        let _ = std::fs::remove_file(&html);
        audits.push(timed(
            crate::user_command(aet)
                .arg("audit")
                .arg(&run)
                .arg("--policy")
                .arg(&policy)
                .arg("--json")
                .arg(&json)
                .arg("--html")
                .arg(&html)
                .arg("-q"),
        )?);
        blanks.push(timed(&mut chromium(&blank))?);
        pages.push(timed(&mut chromium(&html))?);
    }
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
    let findings = report["out_of_scope"].as_array().map_or(0, Vec::len);
    let groups = report["groups"].as_array().map_or(0, Vec::len);
    let ms = |v: Vec<u64>| median(v) as f64 / 1e6;
    println!("\nreports: {findings} findings in {groups} groups");
    println!("| measure | median |");
    println!("| --- | --- |");
    println!(
        "| `aet audit` (JSON and HTML written) | {:.0} ms |",
        ms(audits)
    );
    println!(
        "| Chromium: load and screenshot audit.html | {:.0} ms |",
        ms(pages.clone())
    );
    println!(
        "| Chromium: the same for an empty page | {:.0} ms |",
        ms(blanks.clone())
    );
    let diff: Vec<u64> = pages
        .iter()
        .zip(&blanks)
        .map(|(p, b)| p.saturating_sub(*b))
        .collect();
    println!("| the report's own share | {:.0} ms |", ms(diff));
    println!(
        "| audit.html / audit.json | {:.2} MB / {:.1} MB |",
        std::fs::metadata(&html)?.len() as f64 / 1e6,
        std::fs::metadata(&json)?.len() as f64 / 1e6
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
