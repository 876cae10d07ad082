//! The barrier's cost (issue 15): the open storm and make -j2 recorded under a policy with
//! `--mode record` and with `--mode enforce` (a Landlock ruleset from the same policy),
//! alternating, in one invocation. The ratio is enforce / record; the start (the stage's walk
//! of the granted trees) is outside the timed command.

use std::path::Path;

use anyhow::bail;

use super::{Args, elapsed, median};

fn policy(dir: &Path, fixtures: &Path) -> anyhow::Result<std::path::PathBuf> {
    let text = format!(
        "[allow]\nread = [\"/usr\", \"/etc\", \"/lib\", \"/lib64\", \"/bin\", \"/proc\", \"/dev\", \"/tmp\", {root:?}, {fx:?}]\n\
         write = [{fx:?}, \"/dev\", \"/tmp\"]\n[cheats]\nanswer_key = '^{root}/examples/demo/answers/'\n",
        root = crate::root().display().to_string(),
        fx = fixtures.display().to_string(),
    );
    let p = dir.join("barrier-bench.toml");
    std::fs::create_dir_all(dir)?;
    std::fs::write(&p, text)?;
    Ok(p)
}

fn timed(
    aet: &Path,
    timeit: &Path,
    cmd: &[String],
    policy: &Path,
    mode: &str,
    out: &Path,
) -> anyhow::Result<u64> {
    let _ = std::fs::remove_dir_all(out);
    let o = crate::user_command(aet)
        .args(["run", "-q", "--standalone", "--grace", "0", "--out"])
        .arg(out)
        .arg("--policy")
        .arg(policy)
        .args(["--mode", mode, "--"])
        .arg(timeit)
        .args(cmd)
        .output()?;
    if !o.status.success() {
        bail!("{mode} run failed: {}", String::from_utf8_lossy(&o.stderr));
    }
    elapsed(&o.stderr)
}

pub fn run(
    aet: &Path,
    timeit: &Path,
    workloads: &[(&str, Vec<String>)],
    fixtures: &Path,
    args: &Args,
) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("aet-bench-barrier-{}", std::process::id()));
    let policy = policy(&dir, fixtures)?;
    println!(
        "\n{:<20} {:>14} {:>14} {:>7}",
        "barrier", "record (ms)", "enforce (ms)", "ratio"
    );
    for (name, cmd) in workloads {
        let out = dir.join("run");
        timed(aet, timeit, cmd, &policy, "record", &out)?;
        timed(aet, timeit, cmd, &policy, "enforce", &out)?;
        let (mut rec, mut enf) = (Vec::new(), Vec::new());
        for _ in 0..args.runs {
            rec.push(timed(aet, timeit, cmd, &policy, "record", &out)?);
            enf.push(timed(aet, timeit, cmd, &policy, "enforce", &out)?);
        }
        let (r, e) = (median(rec), median(enf));
        println!(
            "{:<20} {:>14.1} {:>14.1} {:>6.2}x",
            name,
            r as f64 / 1e6,
            e as f64 / 1e6,
            e as f64 / r as f64
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "(medians of {} alternating runs, each recorded standalone under the same policy; \
         ratio = enforce / record)",
        args.runs
    );
    Ok(())
}
