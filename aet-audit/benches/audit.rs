//! Audit throughput on a large ledger (run by `cargo xtask bench --only audit`).
//!
//! `cargo bench -p aet-audit --bench audit -- TEMPLATE POLICY ROWS [RUNS] [POLICY2]`: writes a
//! ledger of at least ROWS rows by repeating the batches of TEMPLATE (a ledger recorded from a
//! real run), its second half in the phase `grading`, then audits it RUNS times on one thread
//! and prints the median rows/s; with POLICY2 (one that judges `grading` by provenance), each
//! run audits with both, one after the other, and prints both medians and their ratio.

use std::{fs::File, path::PathBuf, time::Instant};

use arrow_ipc::writer::FileWriter;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let [template, policy, rows, rest @ ..] = args.as_slice() else {
        anyhow::bail!("usage: audit TEMPLATE POLICY ROWS [RUNS] [POLICY2]");
    };
    let want: u64 = rows.parse()?;
    let runs: usize = rest.first().map(|r| r.parse()).transpose()?.unwrap_or(3);
    let mut ledger = aet_ledger::reader::Ledger::open(template.as_ref())?;
    let schema = ledger.schema().clone();
    let batches = ledger.read_all()?;
    let per: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    anyhow::ensure!(per > 0, "the template ledger is empty");
    let big = PathBuf::from(template).with_file_name("big-ledger.arrow");
    let t = Instant::now();
    let keep = std::env::var_os("AET_BENCH_KEEP").is_some();
    // With AET_BENCH_KEEP a ledger kept by an earlier run is reused.
    let mut n = want.div_ceil(per) * per;
    if !(keep && big.exists()) {
        // Written the way aet's ledger writer writes (1 MiB buffered writes), which decides how
        // the page cache holds it (large folios map much faster than 4 KiB pages).
        let out = std::io::BufWriter::with_capacity(1 << 20, File::create(&big)?);
        let mut w = FileWriter::try_new(out, &schema)?;
        n = 0;
        let phase_at = schema.index_of(aet_ledger::schema::col::PHASE)?;
        while n < want {
            for b in &batches {
                if n >= want / 2 {
                    // The second half: the grader's phase.
                    let mut cols = b.columns().to_vec();
                    cols[phase_at] = std::sync::Arc::new(arrow_array::StringArray::from(vec![
                        "grading";
                        b.num_rows()
                    ]));
                    w.write(&arrow_array::RecordBatch::try_new(b.schema(), cols)?)?;
                } else {
                    w.write(b)?;
                }
            }
            n += per;
        }
        w.finish()?;
    }
    let size = std::fs::metadata(&big)?.len();
    println!(
        "ledger: {n} rows ({} x {per} recorded rows), {:.1} MiB, written in {:.1} s",
        n / per,
        size as f64 / (1 << 20) as f64,
        t.elapsed().as_secs_f64()
    );
    // The engine is measured, not the disk, nor how the writes left the page cache: the file is
    // dropped from the cache and read once, as a ledger recorded earlier is on its first audit.
    {
        let f = File::open(&big)?;
        nix::fcntl::posix_fadvise(
            &f,
            0,
            0,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        )?;
        std::io::copy(&mut &f, &mut std::io::sink())?;
    }
    let policy = aet_audit::policy::Policy::load(policy.as_ref())?;
    let opts = aet_audit::Options {
        transcripts: None,
        transcript_format: "claude-jsonl",
    };
    {
        let t = Instant::now();
        let mut l = aet_ledger::reader::Ledger::open_columns(&big, aet_audit::COLUMNS)?;
        let mut rows = 0usize;
        while let Some(b) = l.next_batch()? {
            rows += b.num_rows();
        }
        println!(
            "reading the audited columns alone: {rows} rows in {:.2} s",
            t.elapsed().as_secs_f64()
        );
    }
    let second = rest
        .get(1)
        .map(|p| aet_audit::policy::Policy::load(p.as_ref()))
        .transpose()?;
    let mut rates = Vec::new();
    let mut rates2 = Vec::new();
    for i in 0..runs {
        for (which, p) in
            std::iter::once(("", &policy)).chain(second.iter().map(|p| (" (provenance)", p)))
        {
            let t = Instant::now();
            let r = aet_audit::audit_with(&big, p, &opts)?;
            let secs = t.elapsed().as_secs_f64();
            let rate = r.counts.rows as f64 / secs;
            println!(
                "run {}{which}: {} rows in {:.2} s = {:.1} M rows/s ({} distinct paths, verdict {})",
                i + 1,
                r.counts.rows,
                secs,
                rate / 1e6,
                r.counts.distinct_paths,
                r.verdict.name()
            );
            if which.is_empty() {
                rates.push(rate);
            } else {
                rates2.push(rate);
            }
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let m = median(rates);
    println!(
        "median: {:.1} M rows/s on one thread (target >= 20 M rows/s)",
        m / 1e6
    );
    if !rates2.is_empty() {
        let m2 = median(rates2);
        println!(
            "median with provenance: {:.1} M rows/s ({:.2}x the time without)",
            m2 / 1e6,
            m / m2
        );
    }
    if !keep {
        std::fs::remove_file(&big)?;
    }
    Ok(())
}
