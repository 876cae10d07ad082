//! What capturing names on the network costs: each workload untraced, traced without the
//! payload capture (`AET_DEBUG_NO_PAYLOAD`), and traced as aet records, alternating. The open
//! storm must not move (the capture is on sockets only); the socket workloads pay per captured
//! message, which the table divides out.

use std::path::Path;

use anyhow::bail;

use super::{Args, elapsed, median, summary};

/// One traced run of `cmd` (without the payload capture when `no_payload`): its wall time
/// and rows.
fn traced(
    aet: &Path,
    timeit: &Path,
    cmd: &[String],
    dir: &Path,
    no_payload: bool,
) -> anyhow::Result<(u64, u64)> {
    let _ = std::fs::remove_dir_all(dir);
    let mut run = crate::user_command(aet);
    if no_payload {
        run.env("AET_DEBUG_NO_PAYLOAD", "1");
    }
    let out = run
        .args(["run", "-q", "--standalone", "--grace", "0", "--out"])
        .arg(dir)
        .arg("--")
        .arg(timeit)
        .args(cmd)
        .output()?;
    if !out.status.success() {
        bail!(
            "traced workload failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v = summary(aet, dir)?;
    Ok((elapsed(&out.stderr)?, v["events"].as_u64().unwrap_or(0)))
}

fn untraced(timeit: &Path, cmd: &[String]) -> anyhow::Result<u64> {
    let out = crate::user_command(timeit).args(cmd).output()?;
    if !out.status.success() {
        bail!(
            "untraced workload failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    elapsed(&out.stderr)
}

pub(super) fn run(aet: &Path, timeit: &Path, storm: &Path, args: &Args) -> anyhow::Result<()> {
    let sock = super::helper("sockstorm")?;
    let target = crate::root().join("Cargo.toml");
    let dir = std::env::temp_dir().join(format!("aet-bench-names-{}", std::process::id()));
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<String>>();
    let opens = args.opens.to_string();
    let conns = 2_000u64;
    let queries = 20_000u64;
    // (name, command, captured messages)
    let workloads: Vec<(&str, Vec<String>, u64)> = vec![
        (
            "open storm",
            s(&[
                &storm.display().to_string(),
                &opens,
                &target.display().to_string(),
            ]),
            0,
        ),
        (
            "tcp: 2000 conns x 8 writes",
            s(&[&sock.display().to_string(), "tcp", &conns.to_string(), "8"]),
            conns,
        ),
        (
            "dns: 20000 queries",
            s(&[&sock.display().to_string(), "dns", &queries.to_string()]),
            queries,
        ),
    ];
    let wanted = |name: &str| {
        args.only
            .as_deref()
            .is_none_or(|o| "names".contains(o) || name.contains(o))
    };
    if !workloads.iter().any(|(n, _, _)| wanted(n)) {
        return Ok(());
    }
    println!();
    println!("== names on the network: what the payload capture costs");
    println!(
        "{:<28} {:>11} {:>14} {:>14} {:>9} {:>9} {:>12}",
        "workload", "untraced", "no capture", "capture", "ratio", "rows", "per message"
    );
    for (name, cmd, messages) in workloads {
        if !wanted(name) {
            continue;
        }
        let (mut base, mut off, mut on) = (Vec::new(), Vec::new(), Vec::new());
        let mut rows = 0;
        untraced(timeit, &cmd)?;
        traced(aet, timeit, &cmd, &dir, false)?;
        for i in 0..args.runs {
            base.push(untraced(timeit, &cmd)?);
            // Which of the two goes first alternates too (a storm of connections leaves its
            // sockets in TIME_WAIT for the next run).
            for no_payload in if i % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            } {
                let (t, r) = traced(aet, timeit, &cmd, &dir, no_payload)?;
                if no_payload {
                    off.push(t);
                } else {
                    on.push(t);
                    rows = r;
                }
            }
        }
        let (b, f, n) = (median(base), median(off), median(on));
        let per = if messages > 0 {
            format!("{:.2} µs", (n as f64 - f as f64) / messages as f64 / 1e3)
        } else {
            "-".into()
        };
        println!(
            "{:<28} {:>8.1} ms {:>11.1} ms {:>11.1} ms {:>8.2}x {:>9} {:>12}",
            name,
            b as f64 / 1e6,
            f as f64 / 1e6,
            n as f64 / 1e6,
            n as f64 / f as f64,
            rows,
            per
        );
    }
    println!(
        "(medians of {} alternating runs; ratio = capture / no capture; per message = the \
         difference over the messages captured)",
        args.runs
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
