//! Analysis across runs (issue 17): `aet query` over 1,000 ledgers holding 10 M rows in all
//! (`select run, kind, count(*) from events group by run, kind`), warm, with DuckDB beside it on
//! the same Arrow files (through pyarrow's dataset) and on their Parquet export; and the time
//! and size of that export.
//!
//! The ledgers are the built-in example's ledger, recorded once, its rows repeated to
//! `--query-rows / --query-runs` rows per run: real rows, real schema and metadata.

use std::{path::Path, process::Command, time::Instant};

use anyhow::{Context as _, bail};
use arrow_array::RecordBatch;

use super::{Args, median};

/// Writes `runs` ledgers of `rows` rows each under `dir/run-NNNN/ledger.arrow`, from the
/// template ledger's rows.
pub(super) fn fixture(
    template: &Path,
    dir: &Path,
    runs: usize,
    rows: usize,
) -> anyhow::Result<u64> {
    let mut l = aet_ledger::reader::Ledger::open(template)?;
    let schema = l.schema().clone();
    let batches: Vec<RecordBatch> = l.read_all()?;
    let have: usize = batches.iter().map(|b| b.num_rows()).sum();
    if have == 0 {
        bail!("the template ledger {} has no rows", template.display());
    }
    let mut bytes = 0;
    for i in 0..runs {
        let run = dir.join(format!("run-{i:04}"));
        std::fs::create_dir_all(&run)?;
        let path = run.join("ledger.arrow");
        let mut w = arrow_ipc::writer::FileWriter::try_new(std::fs::File::create(&path)?, &schema)?;
        let mut left = rows;
        'fill: loop {
            for b in &batches {
                if left == 0 {
                    break 'fill;
                }
                let n = b.num_rows().min(left);
                w.write(&b.slice(0, n))?;
                left -= n;
            }
        }
        w.finish()?;
        bytes += std::fs::metadata(&path)?.len();
    }
    Ok(bytes)
}

fn time(mut cmd: Command) -> anyhow::Result<(u64, String)> {
    let t = Instant::now();
    let o = cmd.output().with_context(|| format!("{cmd:?}"))?;
    let ns = t.elapsed().as_nanos() as u64;
    if !o.status.success() {
        bail!("{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    Ok((ns, String::from_utf8_lossy(&o.stdout).into_owned()))
}

const SQL: &str = "select run, kind, count(*) as n from events group by run, kind";

pub fn run(aet: &Path, args: &Args) -> anyhow::Result<()> {
    let dir = crate::root().join("target/aet-bench-query");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let template = super::template(aet, &dir.join("template"))?;
    let runs_dir = dir.join("runs");
    let per_run = (args.query_rows / args.query_runs as u64) as usize;
    let arrow_bytes = fixture(&template, &runs_dir, args.query_runs, per_run)?;
    let rows = per_run as u64 * args.query_runs as u64;
    println!(
        "\nquery: {} ledgers of {} rows ({} rows, {:.0} MB of Arrow), `{SQL}`, warm, medians of {}",
        args.query_runs,
        per_run,
        rows,
        arrow_bytes as f64 / 1e6,
        args.runs
    );
    let n = args.runs.clamp(1, 7);
    let aet_query = || {
        let mut c = crate::user_command(aet);
        c.args(["query", SQL, "--format", "csv"]).arg(&runs_dir);
        c
    };
    let (_, out) = time(aet_query())?;
    let groups = out.lines().count().saturating_sub(1);
    let mut t = Vec::new();
    for _ in 0..n {
        t.push(time(aet_query())?.0);
    }
    let q = median(t);
    // The export, timed (cold output directory each time), and its size.
    let parquet = dir.join("parquet");
    let mut t = Vec::new();
    let mut parquet_bytes = 0;
    for _ in 0..n.min(3) {
        let _ = std::fs::remove_dir_all(&parquet);
        let mut c = crate::user_command(aet);
        c.args(["ledger", "export"])
            .arg(&runs_dir)
            .arg("--parquet")
            .arg(&parquet);
        t.push(time(c)?.0);
        parquet_bytes = du(&parquet)?;
    }
    let e = median(t);
    // DuckDB, in one Python process: the query on the Arrow files (pyarrow dataset, the run
    // from the directory name) and on the Parquet export, each warm, medians.
    let script = format!(
        "import duckdb, pyarrow.dataset as ds, pyarrow as pa, time, statistics\n\
         d = ds.dataset('{runs}', format='ipc', partitioning=ds.partitioning(pa.schema([('run', pa.string())])), exclude_invalid_files=False)\n\
         con = duckdb.connect()\n\
         con.execute('set threads = 2')\n\
         def bench(sql):\n\
         \x20   con.sql(sql).fetchall()\n\
         \x20   ts = []\n\
         \x20   for _ in range({n}):\n\
         \x20       t = time.perf_counter(); r = con.sql(sql).fetchall(); ts.append(time.perf_counter() - t)\n\
         \x20   return statistics.median(ts), len(r)\n\
         events = d\n\
         a, ga = bench('select run, kind, count(*) from events group by run, kind')\n\
         p, gp = bench(\"select run, kind, count(*) from read_parquet('{pq}/*/*.parquet', hive_partitioning=true) group by run, kind\")\n\
         print(a, ga, p, gp)\n",
        runs = runs_dir.display(),
        pq = parquet.display(),
    );
    let duck = Command::new("python3").arg("-c").arg(&script).output()?;
    let duck_line = if duck.status.success() {
        let s = String::from_utf8_lossy(&duck.stdout);
        let f: Vec<f64> = s
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if f.len() == 4 {
            format!(
                "DuckDB {:.2} s on the Arrow files (via pyarrow, {} groups), {:.2} s on the Parquet export ({} groups)",
                f[0], f[1], f[2], f[3]
            )
        } else {
            format!("DuckDB: unexpected output {s}")
        }
    } else {
        format!(
            "DuckDB: failed: {}",
            String::from_utf8_lossy(&duck.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )
    };
    println!(
        "aet query            {:>8.2} s  ({} groups; target 1.5 s)\n{duck_line}\n\
         aet ledger export    {:>8.2} s  ({:.0} MB of Parquet, 1/{:.0} of the ledgers; target 4 s, 1/10)",
        q as f64 / 1e9,
        groups,
        e as f64 / 1e9,
        parquet_bytes as f64 / 1e6,
        arrow_bytes as f64 / parquet_bytes.max(1) as f64,
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Bytes of the files under `dir`.
fn du(dir: &Path) -> anyhow::Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let m = e.metadata()?;
        n += if m.is_dir() { du(&e.path())? } else { m.len() };
    }
    Ok(n)
}
