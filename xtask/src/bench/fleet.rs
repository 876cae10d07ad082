//! Object storage (issue 37): runs shipped to an S3 server and queried from it, against the
//! same work done the plain way in the same invocation: the same bytes uploaded by boto3 (the
//! AWS SDK for Python) to the same server, and the same query over the local copies.
//!
//! The server is moto's (from PyPI, `cargo xtask setup` installs it) on 127.0.0.1: no network,
//! so the figures are aet's own cost (hashing, requests, the re-check during upload) and the
//! server's, not a link's. The runs are the query benchmark's fixture: the built-in example's
//! ledger, its rows repeated.

use std::{
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::{Args, median, query};

const SQL: &str = "select run, kind, count(*) as n from events group by run, kind";

/// A moto server, killed when dropped.
struct Moto(Child, u16);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn moto() -> anyhow::Result<Moto> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("moto_server (cargo xtask setup installs moto[server])")?;
    let m = Moto(child, port);
    let t = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if t.elapsed() > Duration::from_secs(30) {
            bail!("moto_server did not listen on {port}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(m)
}

/// A command with the server's endpoint and throw-away credentials.
fn with_s3(mut c: Command, port: u16) -> Command {
    c.env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"))
        .env("AWS_ACCESS_KEY_ID", "bench")
        .env("AWS_SECRET_ACCESS_KEY", "bench")
        .env("AWS_DEFAULT_REGION", "us-east-1");
    c
}

fn timed(mut c: Command) -> anyhow::Result<u64> {
    let t = Instant::now();
    let o = c.output().with_context(|| format!("{c:?}"))?;
    if !o.status.success() {
        bail!("{c:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    Ok(t.elapsed().as_nanos() as u64)
}

/// boto3 uploading `files` (local path, key) into `bucket`, in one process; its wall time.
fn boto3(port: u16, bucket: &str, files: &[(String, String)]) -> anyhow::Result<u64> {
    let list = serde_json::to_string(files)?;
    let script = format!(
        "import boto3, json, sys\n\
         s3 = boto3.client('s3')\n\
         for path, key in json.loads(sys.argv[1]):\n\
         \x20   s3.upload_file(path, '{bucket}', key)\n"
    );
    let mut c = with_s3(Command::new("python3"), port);
    c.arg("-c").arg(script).arg(list);
    timed(c)
}

pub fn run(aet: &Path, args: &Args) -> anyhow::Result<()> {
    let dir = crate::root().join("target/aet-bench-fleet");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let result = bench(aet, args, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn bench(aet: &Path, args: &Args, dir: &Path) -> anyhow::Result<()> {
    let template = super::template(aet, &dir.join("template"))?;
    let runs_dir = dir.join("runs");
    let per_run = (args.fleet_rows / args.fleet_runs as u64) as usize;
    let bytes = query::fixture(&template, &runs_dir, args.fleet_runs, per_run)?;
    let m = moto()?;
    let bucket = "aet-bench";
    let mut c = with_s3(Command::new("python3"), m.1);
    c.args([
        "-c",
        &format!("import boto3; boto3.client('s3').create_bucket(Bucket='{bucket}')"),
    ]);
    timed(c).context("creating the bucket (boto3)")?;
    let n = args.runs.clamp(1, 5);
    println!(
        "\nobject storage: {} runs of {} rows ({:.0} MB of Arrow) to moto on 127.0.0.1, medians of {n}",
        args.fleet_runs,
        per_run,
        bytes as f64 / 1e6
    );
    let mut runs: Vec<_> = std::fs::read_dir(&runs_dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    runs.sort();
    // Many small runs, one `aet ship` each (as a sweep's runs end), against boto3 putting the
    // same files in one process.
    let (mut ship, mut sdk) = (Vec::new(), Vec::new());
    for round in 0..n {
        let t = Instant::now();
        for r in &runs {
            let mut c = with_s3(crate::user_command(aet), m.1);
            c.args(["ship", "-q"])
                .arg(r)
                .arg(format!("s3://{bucket}/ship-{round}"));
            timed(c)?;
        }
        ship.push(t.elapsed().as_nanos() as u64);
        let files: Vec<(String, String)> = runs
            .iter()
            .map(|r| {
                let name = r.file_name().unwrap().to_string_lossy();
                (
                    r.join("ledger.arrow").display().to_string(),
                    format!("sdk-{round}/{name}/ledger.arrow"),
                )
            })
            .collect();
        sdk.push(boto3(m.1, bucket, &files)?);
    }
    let (ship, sdk) = (median(ship), median(sdk));
    println!(
        "aet ship, one per run      {:>7.2} s  ({:.1} runs/s, {:.0} MB/s)\n\
         boto3, one process         {:>7.2} s  (ratio {:.2}x)",
        ship as f64 / 1e9,
        runs.len() as f64 / (ship as f64 / 1e9),
        bytes as f64 / 1e6 / (ship as f64 / 1e9),
        sdk as f64 / 1e9,
        ship as f64 / sdk.max(1) as f64
    );
    // One big run: a multipart upload.
    let big = dir.join("big");
    std::fs::create_dir_all(&big)?;
    std::fs::copy(runs[0].join("ledger.arrow"), big.join("ledger.arrow"))?;
    let mb = args.fleet_big_mb;
    let chunk: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    {
        use std::io::Write as _;
        let mut f = std::fs::File::create(big.join("transcript.bin"))?;
        for _ in 0..mb {
            f.write_all(&chunk)?;
        }
    }
    let (mut ship, mut sdk) = (Vec::new(), Vec::new());
    for round in 0..n.min(3) {
        let mut c = with_s3(crate::user_command(aet), m.1);
        c.args(["ship", "-q"])
            .arg(&big)
            .arg(format!("s3://{bucket}/big-{round}"));
        ship.push(timed(c)?);
        let files = ["ledger.arrow", "transcript.bin"].map(|f| {
            (
                big.join(f).display().to_string(),
                format!("big-sdk-{round}/big/{f}"),
            )
        });
        sdk.push(boto3(m.1, bucket, &files)?);
    }
    let (ship, sdk) = (median(ship), median(sdk));
    println!(
        "aet ship, {mb} MiB run       {:>7.2} s  ({:.0} MB/s, multipart)\n\
         boto3, same files          {:>7.2} s  (ratio {:.2}x)",
        ship as f64 / 1e9,
        (mb << 20) as f64 / 1e6 / (ship as f64 / 1e9),
        sdk as f64 / 1e9,
        ship as f64 / sdk.max(1) as f64
    );
    // The query over the bucket (fetched, checked against shipped.json, then read) against
    // the same query over the local copies.
    let query = |target: String| {
        let mut c = with_s3(crate::user_command(aet), m.1);
        c.args(["query", SQL, "--format", "csv"]).arg(target);
        c
    };
    let local = runs_dir.display().to_string();
    let remote = format!("s3://{bucket}/ship-0/");
    timed(query(remote.clone()))?;
    let (mut l, mut r) = (Vec::new(), Vec::new());
    for _ in 0..n {
        l.push(timed(query(local.clone()))?);
        r.push(timed(query(remote.clone()))?);
    }
    let (l, r) = (median(l), median(r));
    println!(
        "aet query, local copies    {:>7.2} s\n\
         aet query, s3:// prefix    {:>7.2} s  (ratio {:.2}x; {:.0} MB fetched and hashed)",
        l as f64 / 1e9,
        r as f64 / 1e9,
        r as f64 / l.max(1) as f64,
        bytes as f64 / 1e6
    );
    Ok(())
}
