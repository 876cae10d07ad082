//! The conformance script every kernel runs and the checks of what it recorded.

use std::{collections::BTreeMap, fmt::Write as _, path::Path, process::Command};

use super::MARGIN;

/// The runs the conformance script makes (each in `$OUT/NAME`, its workload in `$BASE/NAME`).
pub(super) const RUNS: &[&str] = &["standalone", "daemon-a", "daemon-b"];

/// The conformance script: POSIX sh, run by busybox in a VM and by the host's sh here.
/// Arguments: the aet binary, the workload, the output directory, the workloads' base directory.
pub(super) const CONFORMANCE: &str = r#"
aet=$1; conform=$2; out=$3; base=$4
mkdir -p "$out" "$base"
echo "AET-KERNEL release $(uname -r)"
echo "AET-KERNEL build $(uname -v)"
AET_DEBUG_LOAD_TIMES=sequential "$aet" run --standalone --out "$out/standalone" -- "$conform" "$base/standalone" >"$out/standalone.log" 2>&1
echo "AET-KERNEL exit standalone $?"
sed 's/^/AET-KERNEL log standalone /' "$out/standalone.log"
if [ -d "$out/standalone" ]; then
  "$aet" run --out "$out/daemon-a" -- "$conform" "$base/daemon-a" >"$out/daemon-a.log" 2>&1 &
  a=$!
  "$aet" run --out "$out/daemon-b" -- "$conform" "$base/daemon-b" >"$out/daemon-b.log" 2>&1 &
  b=$!
  wait $a; echo "AET-KERNEL exit daemon-a $?"
  wait $b; echo "AET-KERNEL exit daemon-b $?"
  sed 's/^/AET-KERNEL log daemon-a /' "$out/daemon-a.log"
  sed 's/^/AET-KERNEL log daemon-b /' "$out/daemon-b.log"
  "$aet" daemon stop >/dev/null 2>&1
fi
if [ -d "$out/standalone" ]; then
  # Under load: two CPU-bound loops and a loop starting short processes beside six runs served
  # by one daemon, each reading 80 small files twelve times and listing a sysfs tree.
  lw="$base/load"; mkdir -p "$lw"
  i=0; while [ $i -lt 80 ]; do echo "file $i" >"$lw/f$i"; i=$((i+1)); done
  (while :; do :; done) & s1=$!
  (while :; do :; done) & s2=$!
  (while :; do ls / >/dev/null; done) & s3=$!
  # Another BPF user on the host (the boots with `aet.hammer` on their command line): a process
  # making bpf() map calls on a map of its own, without pause.
  hammer=""
  if grep -q 'aet[.]hammer' /proc/cmdline 2>/dev/null && [ -x /bin/bpfhammer ]; then
    /bin/bpfhammer >/dev/null 2>&1 & hammer="$!"
    echo "AET-KERNEL hammer on"
  fi
  pids=""
  for n in 1 2 3 4 5 6; do
    "$aet" run --out "$out/load-$n" -- sh -c "r=0; while [ \$r -lt 12 ]; do cat $lw/f* >/dev/null; r=\$((r+1)); done; ls -R /sys/kernel/mm >/dev/null 2>&1; true" >"$out/load-$n.log" 2>&1 &
    pids="$pids $!"
  done
  n=1; for p in $pids; do wait $p; echo "AET-KERNEL exit load-$n $?"; n=$((n+1)); done
  kill $s1 $s2 $s3 $hammer 2>/dev/null
  "$aet" daemon stop >/dev/null 2>&1
  for n in 1 2 3 4 5 6; do sed "s/^/AET-KERNEL log load-$n /" "$out/load-$n.log"; done
  # What the daemon serving them said (a slow answer, a warning).
  sed 's/^/AET-KERNEL log load-daemon /' /run/aet/aet.sock.log 2>/dev/null
fi
if [ -d "$out/standalone" ] && command -v bwrap >/dev/null; then
  ws="$base/isolated"; secret="$base/secret"
  mkdir -p "$ws" "$secret"; echo key >"$secret/key.txt"
  cp "$conform" "$ws/conform"
  printf 'workspace = "%s"\ndeny = ["%s"]\n' "$ws" "$secret" >"$out/isolated.toml"
  "$aet" run --standalone --out "$out/isolated" --sandbox "$out/isolated.toml" --identity -- \
    sh -c "$ws/conform $ws/w && ! cat $secret/key.txt" >"$out/isolated.log" 2>&1
  echo "AET-KERNEL exit isolated $?"
  sed 's/^/AET-KERNEL log isolated /' "$out/isolated.log"
fi
if [ -d "$out/standalone" ] && [ -x "${conform}32" ]; then
  # A 32-bit program (AArch32 on arm64): its syscalls come through the compat ABI.
  mkdir -p "$base/compat"
  "$aet" run --standalone --out "$out/compat" -- "${conform}32" "$base/compat" >"$out/compat.log" 2>&1
  echo "AET-KERNEL exit compat $?"
  sed 's/^/AET-KERNEL log compat /' "$out/compat.log"
fi
if [ -d "$out/standalone" ]; then
  bd="$base/barrier"; mkdir -p "$bd"; echo yes >"$bd/allowed.txt"; echo no >"$bd/denied.txt"
  printf '[allow]\nread = ["/bin", "/lib", "/lib64", "/usr", "/etc", "/proc", "/dev", "%s/allowed.txt"]\nwrite = ["/dev", "/tmp"]\n' "$bd" >"$out/barrier.toml"
  "$aet" run --standalone --out "$out/barrier" --policy "$out/barrier.toml" --mode enforce -- \
    sh -c "cat $bd/allowed.txt; cat $bd/denied.txt" >"$out/barrier.log" 2>&1
  echo "AET-KERNEL exit barrier $?"
  sed 's/^/AET-KERNEL log barrier /' "$out/barrier.log"
fi
"#;

/// One check of a run's record: a name and a condition on `events` rows (`{d}` is the run's
/// workload directory), which at least one row must meet.
const CHECKS: &[(&str, &str)] = &[
    (
        "open by dirfd",
        "kind = 'open' AND dirfd >= 0 AND path = 'a.txt' AND resolved_path = '{d}/dir/a.txt' \
         AND resolved_from = 'object'",
    ),
    (
        "a directory opened O_DIRECTORY (x86_64's number, 0o200000, on every architecture)",
        "kind = 'open' AND path = 'dir' AND resolved_path = '{d}/dir' AND ret >= 0 \
         AND (CAST(flags AS BIGINT) & 65536) <> 0 AND (CAST(flags AS BIGINT) & 16384) = 0",
    ),
    (
        "open through a symlink",
        "kind = 'open' AND path = '{d}/link' AND resolved_path = '{d}/dir/target.txt' \
         AND resolved_from = 'object'",
    ),
    (
        "open through ..",
        "kind = 'open' AND path = '../dir/b.txt' AND resolved_path = '{d}/dir/b.txt' \
         AND resolved_from = 'object'",
    ),
    (
        "failed open, its errno",
        "kind = 'open' AND path = '{d}/missing.txt' AND errno = 'ENOENT' \
         AND resolved_path = '{d}/missing.txt'",
    ),
    (
        "rename",
        "kind = 'modify' AND syscall LIKE 'rename%' AND resolved_path = '{d}/dir/b.txt' \
         AND resolved_path2 = '{d}/dir/c.txt'",
    ),
    (
        "exec with argv",
        "kind = 'exec' AND ret = 0 AND CAST(argv AS VARCHAR) LIKE '%conform-argv-marker%'",
    ),
    (
        "a daemonised process's write",
        "kind = 'open' AND resolved_path = '{d}/daemon.txt' AND ret >= 0",
    ),
    (
        "fd received with recvmmsg",
        "kind = 'fd' AND syscall = 'recvmmsg' AND fd_origin = 'received'",
    ),
    (
        "connect",
        "kind = 'net' AND syscall = 'connect' AND net_address = '127.0.0.1' AND net_port = 9",
    ),
    ("nothing of the other run", "resolved_path LIKE '{other}/%'"),
];

/// What one kernel gave.
#[derive(Default)]
pub(super) struct Outcome {
    pub(super) release: String,
    pub(super) build: String,
    /// Program -> (verified instructions, load ms).
    /// Each program's verified instructions (`None` where the kernel does not report them:
    /// `verified_insns` is 5.16's) and load time.
    pub(super) programs: BTreeMap<String, (Option<u64>, f64)>,
    /// Check -> passed (with a detail when not).
    pub(super) checks: Vec<(String, Result<(), String>)>,
    /// What the whole kernel took (boot included), seconds.
    pub(super) seconds: f64,
    /// The checks a first boot failed, when a second one was made.
    pub(super) flaked: Vec<String>,
    /// The guest kernel oopsed or panicked, or the VM died before it shipped its runs.
    pub(super) oops: bool,
    /// Another BPF user made map calls beside the load check (`aet.hammer`).
    pub(super) hammer: bool,
}

/// How many checks a kernel of `arch` runs (the arm64 VMs add the AArch32 program's): a kernel
/// that ran fewer has not been checked.
pub(super) fn expected(arch: super::Arch) -> usize {
    match arch {
        super::Arch::X86_64 => 52,
        super::Arch::Arm64 => 58,
    }
}

/// Reads what the script printed and checks the runs it left in `out`.
pub(super) fn judge(aet: &Path, text: &str, out: &Path, base: &Path) -> Outcome {
    let mut o = Outcome::default();
    let mut exits = BTreeMap::new();
    let mut logs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        // The console's first line starts with the firmware's escape sequences.
        let Some(at) = line.find("AET-KERNEL ") else {
            continue;
        };
        let rest = line[at + "AET-KERNEL ".len()..].trim_end_matches('\r');
        let (key, value) = rest.split_once(' ').unwrap_or((rest, ""));
        match key {
            "release" => o.release = value.into(),
            "hammer" => o.hammer = true,
            "build" => o.build = value.into(),
            "exit" => {
                if let Some((run, code)) = value.split_once(' ') {
                    exits.insert(run.to_owned(), code.to_owned());
                }
            }
            "log" => {
                if let Some((run, l)) = value.split_once(' ') {
                    logs.entry(run.to_owned()).or_default().push(l.to_owned());
                    if let Some((name, insns, ms)) = parse_load_line(l) {
                        o.programs.insert(name, (insns, ms));
                    }
                }
            }
            _ => {}
        }
    }
    let log_of = |run: &str| logs.get(run).map(|l| l.join("\n")).unwrap_or_default();
    let mut check = |name: &str, r: Result<(), String>| o.checks.push((name.to_owned(), r));
    if o.release.is_empty() {
        check("the VM ran the script", Err(tail(text, 15)));
        return o;
    }
    for run in RUNS {
        let code = exits.get(*run).cloned().unwrap_or_else(|| "none".into());
        check(
            &format!("{run}: the run ends 0"),
            if code == "0" {
                Ok(())
            } else {
                Err(format!("exit {code}: {}", tail(&log_of(run), 12)))
            },
        );
    }
    let programs = o.programs.clone();
    check(
        "every program loads within the margin",
        if programs.is_empty() {
            Err("no program's load was printed".into())
        } else if let Some((n, (Some(i), _))) = programs
            .iter()
            .find(|(_, (i, _))| i.is_some_and(|i| i > MARGIN))
        {
            Err(format!("{n}: {i} instructions verified (margin {MARGIN})"))
        } else {
            Ok(())
        },
    );
    for (i, run) in RUNS.iter().enumerate() {
        let d = base.join(run).display().to_string();
        let other = base.join(RUNS[(i + 1) % RUNS.len()]).display().to_string();
        let dir = out.join(run);
        if !dir.join("ledger.arrow").exists() {
            check(&format!("{run}: a ledger"), Err("no ledger".into()));
            continue;
        }
        for (name, result) in run_checks(aet, &dir, &d, &other) {
            check(&format!("{run}: {name}"), result);
        }
    }
    under_load(aet, o.hammer, &exits, &log_of, out, base, &mut check);
    isolated(aet, &exits, &log_of("isolated"), out, base, &mut check);
    barrier(aet, &exits, &log_of("barrier"), out, base, &mut check);
    if exits.contains_key("compat") {
        compat(aet, &exits, &log_of("compat"), out, base, &mut check);
    }
    o
}

/// The 32-bit program's run (arm64's VMs: AArch32 through the compat ABI): it ends 0, and its
/// open by dirfd, its `stat` and its exec are rows marked compat (flag 64), with their paths and
/// argv.
fn compat(
    aet: &Path,
    exits: &BTreeMap<String, String>,
    log: &str,
    out: &Path,
    base: &Path,
    check: &mut impl FnMut(&str, Result<(), String>),
) {
    let d = base.join("compat").display().to_string();
    let code = exits.get("compat").cloned().unwrap_or_default();
    check(
        "compat: the 32-bit program's run ends 0",
        if code == "0" {
            Ok(())
        } else {
            Err(format!("exit {code}: {}", tail(log, 12)))
        },
    );
    let run = out.join("compat");
    for (name, cond, marked) in [
        (
            "compat: the exec of the 32-bit program",
            "kind = 'exec' AND ret = 0 AND path = '/bin/conform32'".to_owned(),
            true,
        ),
        (
            "compat: open by dirfd",
            format!(
                "kind = 'open' AND dirfd >= 0 AND path = 'compat.txt' \
                 AND resolved_path = '{d}/compat.txt' AND ret >= 0"
            ),
            true,
        ),
        (
            "compat: its directory opened O_DIRECTORY, in x86_64's numbers",
            format!(
                "kind = 'open' AND resolved_path = '{d}' AND ret >= 0 \
                 AND (CAST(flags AS BIGINT) & 65536) <> 0 AND (CAST(flags AS BIGINT) & 16384) = 0"
            ),
            true,
        ),
        (
            "compat: stat",
            format!("kind = 'stat' AND resolved_path = '{d}/compat.txt'"),
            true,
        ),
        (
            "compat: its exec of a 64-bit program, with argv",
            "kind = 'exec' AND ret = 0 AND CAST(argv AS VARCHAR) LIKE '%compat-argv-marker%'"
                .to_owned(),
            false,
        ),
    ] {
        let op = if marked { "<>" } else { "=" };
        let sql = format!(
            "SELECT COUNT(*) AS n FROM events WHERE {cond} AND (CAST(capture AS BIGINT) & 64) {op} 0"
        );
        check(
            name,
            match query(aet, &sql, &run) {
                Ok(n) if n.first().is_some_and(|&n| n > 0) => Ok(()),
                Ok(_) => Err(format!(
                    "no row {} compat where {cond}",
                    if marked { "marked" } else { "unmarked" }
                )),
                Err(e) => Err(e),
            },
        );
    }
}

/// The runs made beside busy tasks ([`LOAD_RUNS`] of them, served by one daemon): each ends 0,
/// complete with nothing lost, and holds every one of its workload's opens (12 × 80). Beside
/// another BPF user (`hammer`), a run may instead be incomplete with its loss counted (the
/// kernel skipped aet's programs for its events): never complete with an open missing.
fn under_load(
    aet: &Path,
    hammer: bool,
    exits: &BTreeMap<String, String>,
    log_of: &impl Fn(&str) -> String,
    out: &Path,
    base: &Path,
    check: &mut impl FnMut(&str, Result<(), String>),
) {
    let lw = base.join("load").display().to_string();
    for n in 1..=LOAD_RUNS {
        let run = format!("load-{n}");
        let code = exits.get(&run).cloned().unwrap_or_else(|| "none".into());
        let dir = out.join(&run);
        let sql = format!(
            "SELECT SUM(CASE WHEN kind = 'open' AND resolved_path LIKE '{lw}/f%' AND ret >= 0 \
             THEN 1 ELSE 0 END) AS opens, COUNT(*) AS n FROM events"
        );
        let status = "SELECT CAST(complete AS INT) AS c, CAST(lost AS BIGINT) AS l FROM runs";
        let name = match hammer {
            false => format!("{LOAD_CHECK}{run}: ends 0, complete, nothing lost, all 960 opens"),
            true => format!(
                "{LOAD_CHECK}beside another BPF user, {run}: ends 0, complete with all 960 opens \
                 or incomplete with its loss counted"
            ),
        };
        check(
            &name,
            if code != "0" {
                Err(format!(
                    "exit {code}: {}; its daemon's log: {}",
                    tail(&log_of(&run), 12),
                    tail(&log_of("load-daemon"), 8)
                ))
            } else {
                match (query(aet, status, &dir), query(aet, &sql, &dir)) {
                    (Ok(s), Ok(r)) if s[..2] == [1, 0] && r.first() == Some(&960) => Ok(()),
                    // Rows missing from a record that says it is complete: never allowed.
                    (Ok(s), Ok(r)) if s[0] == 1 => Err(format!(
                        "complete, lost: {:?}, yet opens of the workload, rows: {r:?}: a silent loss",
                        &s[..2]
                    )),
                    (Ok(s), Ok(_)) if hammer && s[0] == 0 && s[1] > 0 => Ok(()),
                    (Ok(s), Ok(r)) => Err(format!(
                        "complete, lost: {:?}; opens of the workload, rows: {r:?}",
                        &s[..2]
                    )),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                }
            },
        );
    }
}

/// How many runs the load check makes at once.
const LOAD_RUNS: usize = 6;

/// How each load check's name starts.
pub(super) const LOAD_CHECK: &str = "under load, ";

/// The sandboxed run as the agent identity (where the image has bwrap): the workload's record
/// as in the other runs, the agent's uid on its rows, the denied directory empty to it.
fn isolated(
    aet: &Path,
    exits: &BTreeMap<String, String>,
    log: &str,
    out: &Path,
    base: &Path,
    check: &mut impl FnMut(&str, Result<(), String>),
) {
    let Some(code) = exits.get("isolated") else {
        return;
    };
    check(
        "isolated: sandbox and identity, the run ends 0 (the denied file unreadable)",
        if code == "0" {
            Ok(())
        } else {
            Err(format!("exit {code}: {}", tail(log, 12)))
        },
    );
    let run = out.join("isolated");
    let d = base.join("isolated/w").display().to_string();
    let secret = base.join("secret").display().to_string();
    let sql = format!(
        "SELECT SUM(CASE WHEN kind = 'open' AND resolved_path = '{d}/dir/a.txt' AND dirfd >= 0 \
         AND uid >= 2000 AND uid < 3000 THEN 1 ELSE 0 END) AS agent, \
         SUM(CASE WHEN kind = 'open' AND path = '{secret}/key.txt' AND ret < 0 THEN 1 ELSE 0 END) \
         AS denied, SUM(CASE WHEN kind = 'exec' AND CAST(argv AS VARCHAR) LIKE '%conform-argv-marker%' \
         AND uid >= 2000 AND uid < 3000 THEN 1 ELSE 0 END) AS exec FROM events"
    );
    check(
        "isolated: the workload's opens and execs as an agent uid, the denied read failed",
        match query(aet, &sql, &run) {
            Ok(r) if r.iter().all(|&n| n > 0) => Ok(()),
            Ok(r) => Err(format!("agent opens, denied reads, agent execs: {r:?}")),
            Err(e) => Err(e),
        },
    );
}

/// The Landlock barrier: where the kernel's ABI allows it, the allowed read succeeds and the
/// other is blocked (EACCES) and in the record; where it does not, enforce is refused in words
/// that name Landlock, and nothing runs.
fn barrier(
    aet: &Path,
    exits: &BTreeMap<String, String>,
    log: &str,
    out: &Path,
    base: &Path,
    check: &mut impl FnMut(&str, Result<(), String>),
) {
    let Some(code) = exits.get("barrier") else {
        return;
    };
    let run = out.join("barrier");
    if !run.join("ledger.arrow").exists() {
        check(
            "barrier: enforce refused, naming Landlock",
            if code != "0" && log.contains("Landlock") {
                Ok(())
            } else {
                Err(format!("exit {code}: {}", tail(log, 12)))
            },
        );
        return;
    }
    let bd = base.join("barrier").display().to_string();
    let sql = format!(
        "SELECT SUM(CASE WHEN kind = 'open' AND resolved_path = '{bd}/allowed.txt' AND ret >= 0 \
         THEN 1 ELSE 0 END) AS allowed, SUM(CASE WHEN kind = 'open' AND \
         resolved_path = '{bd}/denied.txt' AND errno = 'EACCES' THEN 1 ELSE 0 END) AS blocked \
         FROM events"
    );
    check(
        "barrier: enforced, the allowed read done and the other blocked (EACCES)",
        match query(aet, &sql, &run) {
            Ok(r) if r.iter().all(|&n| n > 0) => Ok(()),
            Ok(r) => Err(format!("allowed, blocked: {r:?}; {}", tail(log, 8))),
            Err(e) => Err(e),
        },
    );
}

/// `aet: loaded NAME in X ms (N instructions verified)`.
fn parse_load_line(l: &str) -> Option<(String, Option<u64>, f64)> {
    let rest = l.strip_prefix("aet: loaded ")?;
    let (name, rest) = rest.split_once(" in ")?;
    let (ms, rest) = rest.split_once(" ms (")?;
    // `?` where the kernel reports no count (before 5.16).
    let insns = match rest.split_whitespace().next()? {
        "?" => None,
        n => Some(n.parse().ok()?),
    };
    Some((name.to_owned(), insns, ms.parse().ok()?))
}

/// The last `n` lines of `text`, on one line each.
pub(super) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n    ")
}

/// Every check of [`CHECKS`] on one run, with `aet query`, plus its completeness.
fn run_checks(aet: &Path, run: &Path, d: &str, other: &str) -> Vec<(String, Result<(), String>)> {
    let mut sql = String::from("SELECT ");
    for (i, (_, cond)) in CHECKS.iter().enumerate() {
        let cond = cond.replace("{d}", d).replace("{other}", other);
        // At least one row meets each condition; none meets the last (the other run's files).
        let _ = write!(sql, "SUM(CASE WHEN {cond} THEN 1 ELSE 0 END) AS c{i}, ");
    }
    sql.push_str("COUNT(*) AS n FROM events");
    let mut results = Vec::new();
    match query(aet, &sql, run) {
        Ok(row) => {
            for (i, (name, _)) in CHECKS.iter().enumerate() {
                let n = row.get(i).copied().unwrap_or(-1);
                let ok = if i == CHECKS.len() - 1 { n == 0 } else { n > 0 };
                results.push((
                    (*name).to_owned(),
                    if ok {
                        Ok(())
                    } else {
                        Err(format!("{n} matching rows"))
                    },
                ));
            }
        }
        Err(e) => results.push(("the record".into(), Err(e))),
    }
    let rows_ok = results.iter().all(|(_, r)| r.is_ok());
    let status = query(
        aet,
        "SELECT CAST(complete AS INT) AS c, CAST(lost AS BIGINT) AS l FROM runs",
        run,
    );
    results.push((
        "the record is complete, nothing lost".into(),
        match &status {
            Ok(r) if r[..2] == [1, 0] => Ok(()),
            Ok(r) => Err(format!("complete, lost: {:?}", &r[..r.len().min(2)])),
            Err(e) => Err(e.clone()),
        },
    ));
    results.push((
        "a missing row is a counted loss, never a silent one".into(),
        match &status {
            _ if rows_ok => Ok(()),
            Ok(r) if r.first() == Some(&0) => Ok(()),
            Ok(_) => Err("rows are missing from a record that says it is complete".into()),
            Err(e) => Err(e.clone()),
        },
    ));
    results
}

/// The one row of integers a query gives.
fn query(aet: &Path, sql: &str, run: &Path) -> Result<Vec<i64>, String> {
    let o = Command::new(aet)
        .args(["query", "--format", "csv", "--strict", sql])
        .arg(run)
        .output()
        .map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(format!(
            "aet query failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&o.stdout);
    let row = text.lines().nth(1).ok_or("no row")?;
    row.split(',')
        .map(|v| v.trim().parse::<i64>().map_err(|e| format!("{v:?}: {e}")))
        .collect()
}
