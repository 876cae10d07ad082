//! A fleet's record: runs shipped to S3-compatible object storage (`aet run --ship`, `aet
//! ship`) and read back from it (`aet query`, `aet ledger summary|export`, `aet audit`, `aet
//! verify`), against a real S3 server: moto's server mode (from PyPI), started here on a port of
//! its own. The only thing between aet and the server is, in one test, a byte-counting TCP
//! relay that dies mid-upload as a server would.

use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use aet_tests::*;

/// The secret every test's aet is given: it must appear in nothing aet prints.
const SECRET: &str = "aetCanarySecret0123456789abcdefXYZ";

/// A moto S3 server on 127.0.0.1, killed when dropped.
struct Moto {
    child: Child,
    port: u16,
}

impl Moto {
    fn start() -> Self {
        let port = free_port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server (pip install 'moto[server]'; cargo xtask setup installs it)");
        let m = Self { child, port };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "moto_server did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        m
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A new bucket; its name.
    fn bucket(&self) -> String {
        let name = format!("aet-{}-{}", std::process::id(), unique());
        let (status, body) = http(self.port, "PUT", &format!("/{name}"), &[]);
        assert_eq!(status, 200, "creating bucket {name}: {body}");
        name
    }

    /// The keys under `prefix` in `bucket`.
    fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let (status, body) = http(
            self.port,
            "GET",
            &format!("/{bucket}?list-type=2&prefix={prefix}"),
            &[],
        );
        assert_eq!(status, 200, "{body}");
        body.split("<Key>")
            .skip(1)
            .filter_map(|s| s.split("</Key>").next())
            .map(str::to_owned)
            .collect()
    }

    fn get(&self, bucket: &str, key: &str) -> Vec<u8> {
        let (status, body) = http_bytes(self.port, "GET", &format!("/{bucket}/{key}"), &[]);
        assert_eq!(status, 200, "GET {key}");
        body
    }

    fn put(&self, bucket: &str, key: &str, body: &[u8]) {
        let (status, text) = http(self.port, "PUT", &format!("/{bucket}/{key}"), body);
        assert_eq!(status, 200, "PUT {key}: {text}");
    }

    fn delete(&self, bucket: &str, key: &str) {
        let (status, text) = http(self.port, "DELETE", &format!("/{bucket}/{key}"), &[]);
        assert!(status == 204 || status == 200, "DELETE {key}: {text}");
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One plain HTTP/1.1 request: status and body. moto does not check signatures, but treats a
/// request with no `Authorization` at all as anonymous (403 on a private object), so one is sent.
fn http_bytes(port: u16, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, \
         SignedHeaders=host, Signature=0\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP response");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut rest = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        rest = dechunk(&rest);
    }
    (status, rest)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n =
            usize::from_str_radix(std::str::from_utf8(&b[..line_end]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[line_end + 2..line_end + 2 + n]);
        b = &b[line_end + 4 + n..];
    }
}

fn http(port: u16, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let (s, b) = http_bytes(port, method, path, body);
    (s, String::from_utf8_lossy(&b).into_owned())
}

/// `aet` with the credentials and endpoint of `endpoint`.
fn aet_s3(endpoint: &str) -> Command {
    let mut c = aet();
    c.env("AWS_ACCESS_KEY_ID", "aet-test-key-id")
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AET_S3_RETRY_SECS", "3")
        .env_remove("AWS_PROFILE");
    c
}

/// Output of a command, asserting it names no secret.
fn out(c: &mut Command) -> (i32, String, String) {
    let o: Output = c.output().unwrap();
    let (so, se) = (text(&o.stdout), text(&o.stderr));
    assert!(
        !so.contains(SECRET) && !se.contains(SECRET),
        "a credential was printed:\n{so}\n{se}"
    );
    (o.status.code().unwrap_or(-1), so, se)
}

fn policy() -> String {
    root().join("policies/demo.toml").display().to_string()
}

/// `aet query SQL RUNS… --format csv` through `aet_s3`.
fn query(endpoint: &str, sql: &str, runs: &[&str]) -> (i32, String, String) {
    out(aet_s3(endpoint)
        .args(["query", sql])
        .args(runs)
        .args(["--format", "json"]))
}

#[test]
fn twenty_runs_shipped_by_two_concurrent_loops_query_as_their_local_copies() {
    let moto = Moto::start();
    let bucket = moto.bucket();
    let dir = tempdir();
    let url = format!("s3://{bucket}/sweep");
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let (dir, url, endpoint, policy) = (
                dir.path().join("runs"),
                url.clone(),
                moto.endpoint(),
                policy(),
            );
            std::thread::spawn(move || {
                for i in 0..10 {
                    let run = dir.join(format!("w{w}-r{i:02}"));
                    let (code, _, err) = out(aet_s3(&endpoint)
                        .args(["run", "-q", "--policy", &policy, "--ship", &url, "--out"])
                        .arg(&run)
                        .args([
                            "--",
                            "sh",
                            "-c",
                            "cat /etc/hostname /etc/passwd > /dev/null",
                        ]));
                    assert_eq!(code, 0, "{err}");
                    assert!(run.join("ledger.arrow").is_file());
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let keys = moto.keys(&bucket, "sweep/");
    let shipped: Vec<&String> = keys
        .iter()
        .filter(|k| k.ends_with("/shipped.json"))
        .collect();
    assert_eq!(shipped.len(), 20, "{keys:?}");
    for k in &shipped {
        let run = k.trim_end_matches("/shipped.json");
        for f in ["ledger.arrow", "audit.json", "audit.html"] {
            assert!(keys.contains(&format!("{run}/{f}")), "{run}/{f}: {keys:?}");
        }
        let index: serde_json::Value = serde_json::from_slice(&moto.get(&bucket, k)).unwrap();
        let ledger = moto.get(&bucket, &format!("{run}/ledger.arrow"));
        let local = std::fs::read(
            dir.path()
                .join("runs")
                .join(run.trim_start_matches("sweep/"))
                .join("ledger.arrow"),
        )
        .unwrap();
        assert_eq!(ledger, local, "{run}: the object is the local ledger");
        let entry = index["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "ledger.arrow")
            .unwrap();
        assert_eq!(entry["bytes"].as_u64(), Some(local.len() as u64));
    }
    let local = format!("{}/runs", dir.path().display());
    let bucket_prefix = format!("{url}/");
    for sql in [
        "select * from events order by run, seq",
        "select * from findings order by run, class, rule, path, first_seq",
        "select * from runs order by run",
    ] {
        let (c1, from_disk, e1) = query(&moto.endpoint(), sql, &[&local]);
        let (c2, from_bucket, e2) = query(&moto.endpoint(), sql, &[&bucket_prefix]);
        assert_eq!((c1, c2), (0, 0), "{e1}\n{e2}");
        assert_eq!(from_disk, from_bucket, "{sql}");
        if !sql.contains("findings") {
            let rows: Vec<serde_json::Value> = serde_json::from_str(&from_disk).unwrap();
            assert!(rows.len() >= 20, "{sql}: {from_disk}");
        }
        assert!(
            !from_disk.contains(&local),
            "no local path in the tables: {sql}"
        );
        assert!(e2.contains("from 20 run(s)"), "{e2}");
    }
    // One run of the prefix, by its own URL.
    let (code, text, err) = out(aet_s3(&moto.endpoint()).args([
        "ledger",
        "summary",
        "--json",
        &format!("{url}/w1-r03"),
    ]));
    assert_eq!(code, 0, "{err}");
    let s: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(s["complete"], true, "{text}");
    assert_eq!(s["ledger"], format!("{url}/w1-r03/ledger.arrow"), "{text}");
    let (code, text, err) = out(aet_s3(&moto.endpoint()).args([
        "audit",
        &format!("{url}/w0-r07"),
        "--policy",
        &policy(),
    ]));
    assert!(code == 0 || code == 1, "{code}: {text}{err}");
    assert!(text.starts_with("aet audit: "), "{text}");
    assert!(
        text.contains(&format!("{url}/w0-r07/ledger.arrow (complete)")),
        "the report names the object audited: {text}"
    );
}

/// A signed run shipped, then its ledger changed in the bucket: first alone (the shipped
/// hashes name it), then with shipped.json rewritten to match (the chain and the signature
/// still name it).
#[test]
fn a_ledger_changed_in_the_bucket_fails_verify_and_is_left_out_of_queries() {
    let moto = Moto::start();
    let bucket = moto.bucket();
    let dir = tempdir();
    let key = dir.path().join("k");
    let (code, _, err) = out(aet().args(["key", "new"]).arg(&key));
    assert_eq!(code, 0, "{err}");
    let run = dir.path().join("signed");
    let (code, _, err) = out(aet_s3(&moto.endpoint())
        .args(["run", "-q", "--policy", &policy(), "--sign"])
        .arg(&key)
        .args(["--ship", &format!("s3://{bucket}/v"), "--out"])
        .arg(&run)
        .args([
            "--",
            helper("openstorm").to_str().unwrap(),
            "30000",
            "/etc/hostname",
        ]));
    assert_eq!(code, 0, "{err}");
    let url = format!("s3://{bucket}/v/signed");
    let public = format!("{}.pub", key.display());
    let verify = || out(aet_s3(&moto.endpoint()).args(["verify", &url, "--key", &public]));
    let (code, text, err) = verify();
    assert_eq!(code, 0, "{text}{err}");
    assert!(text.contains("aet verify: the run verifies"), "{text}");
    assert!(text.contains(&url), "names the bucket's objects: {text}");

    // A byte of the ledger changed in place.
    let mut ledger = moto.get(&bucket, "v/signed/ledger.arrow");
    let at = ledger.len() / 2;
    ledger[at] ^= 0x01;
    moto.put(&bucket, "v/signed/ledger.arrow", &ledger);
    let (code, text, err) = verify();
    assert_eq!(code, 1, "{text}{err}");
    assert!(text.contains("THE RUN DOES NOT VERIFY"), "{text}");
    assert!(
        text.contains(&format!(
            "{url}/ledger.arrow: not the bytes that were shipped"
        )),
        "{text}"
    );
    let (code, _, err) = query(
        &moto.endpoint(),
        "select count(*) from runs",
        &[&format!("s3://{bucket}/v/")],
    );
    assert_eq!(code, 1, "left out and reported: {err}");
    assert!(err.contains(&format!("{url}/ledger.arrow")), "{err}");
    let (code, _, err) = out(aet_s3(&moto.endpoint()).args(["audit", &url, "--policy", &policy()]));
    assert_eq!(code, 4, "an audit of a changed run is refused: {err}");
    assert!(err.contains("not the one shipped"), "{err}");

    // shipped.json rewritten to the changed ledger's hash: the record itself says it.
    let mut index: serde_json::Value =
        serde_json::from_slice(&moto.get(&bucket, "v/signed/shipped.json")).unwrap();
    for f in index["files"].as_array_mut().unwrap() {
        if f["name"] == "ledger.arrow" {
            f["sha256"] = sha256_hex(&ledger).into();
        }
    }
    moto.put(
        &bucket,
        "v/signed/shipped.json",
        &serde_json::to_vec(&index).unwrap(),
    );
    let (code, text, err) = verify();
    assert_eq!(code, 1, "{text}{err}");
    assert!(text.contains("THE RUN DOES NOT VERIFY"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("CHANGED") && l.contains("ledger")),
        "{text}"
    );
    assert!(!text.contains("not the bytes that were shipped"), "{text}");

    // A file removed, and one added.
    moto.delete(&bucket, "v/signed/audit.html");
    moto.put(&bucket, "v/signed/extra.txt", b"planted");
    let (code, text, _) = verify();
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!(
            "{url}/audit.html: shipped, but no longer in the bucket"
        )),
        "{text}"
    );
    assert!(text.contains(&format!("{url}/extra.txt: added")), "{text}");
}

fn sha256_hex(b: &[u8]) -> String {
    let o = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(b)?;
            c.wait_with_output()
        })
        .unwrap();
    text(&o.stdout).split(' ').next().unwrap().to_owned()
}

/// A relay to `port` that forwards what clients send until `limit` bytes have gone through,
/// then closes every connection and stops listening: to a client, a server that died.
struct DyingRelay {
    port: u16,
    dead: Arc<AtomicBool>,
}

impl DyingRelay {
    fn start(to: u16, limit: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let dead = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        {
            let dead = dead.clone();
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if dead.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = conn else { continue };
                    let server = TcpStream::connect(("127.0.0.1", to)).unwrap();
                    let (dead, sent) = (dead.clone(), sent.clone());
                    let (mut c_in, mut s_out) =
                        (client.try_clone().unwrap(), server.try_clone().unwrap());
                    let (mut s_in, mut c_out) = (server, client);
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 64 << 10];
                        while let Ok(n) = c_in.read(&mut buf) {
                            if n == 0 || dead.load(Ordering::SeqCst) {
                                break;
                            }
                            if sent.fetch_add(n as u64, Ordering::SeqCst) + n as u64 > limit {
                                dead.store(true, Ordering::SeqCst);
                                break;
                            }
                            if s_out.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = c_in.shutdown(std::net::Shutdown::Both);
                        let _ = s_out.shutdown(std::net::Shutdown::Both);
                    });
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut s_in, &mut c_out);
                    });
                }
            });
        }
        Self { port, dead }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for DyingRelay {
    fn drop(&mut self) {
        self.dead.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

#[test]
fn a_server_dying_mid_upload_leaves_the_local_copy_and_no_half_object() {
    let moto = Moto::start();
    let bucket = moto.bucket();
    let dir = tempdir();
    let run = dir.path().join("big");
    let r = run_in(&run, &["-q", "--policy", &policy()], &["true"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    // 40 MiB beside the ledger: eight 5 MiB parts of a multipart upload.
    let big: Vec<u8> = (0..40u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(run.join("transcript.bin"), &big).unwrap();
    let before = snapshot(&run);

    let relay = DyingRelay::start(moto.port, 15 << 20);
    let (code, _, err) = out(aet_s3(&relay.endpoint())
        .env("AET_S3_PART_MB", "5")
        .arg("ship")
        .arg(&run)
        .arg(format!("s3://{bucket}/dead")));
    assert_eq!(code, 124, "{err}");
    assert!(err.contains("the run was not shipped"), "{err}");
    assert!(
        err.contains(&run.display().to_string()),
        "names the local copy: {err}"
    );
    assert!(
        relay.dead.load(Ordering::SeqCst),
        "the relay died mid-upload"
    );
    assert_eq!(snapshot(&run), before, "the local copy is untouched");
    let keys = moto.keys(&bucket, "dead/");
    assert!(
        !keys
            .iter()
            .any(|k| k.ends_with("transcript.bin") || k.ends_with("shipped.json")),
        "no half object, no index: {keys:?}"
    );
    // Readers do not take what did get there for a run.
    let (code, _, err) = query(
        &moto.endpoint(),
        "select count(*) from runs",
        &[&format!("s3://{bucket}/dead/")],
    );
    assert_ne!(code, 0, "{err}");

    // `aet run --ship` to a server that is gone: the run is whole on disk, exit 124.
    let later = dir.path().join("later");
    let (code, _, err) = out(aet_s3(&relay.endpoint())
        .args([
            "run",
            "-q",
            "--ship",
            &format!("s3://{bucket}/dead"),
            "--out",
        ])
        .arg(&later)
        .args(["--", "true"]));
    assert_eq!(code, 124, "{err}");
    assert_complete(&later.join("ledger.arrow"));

    // Shipping again, once the server answers, completes both.
    for d in [&run, &later] {
        let (code, _, err) = out(aet_s3(&moto.endpoint())
            .env("AET_S3_PART_MB", "5")
            .arg("ship")
            .arg(d)
            .arg(format!("s3://{bucket}/dead")));
        assert_eq!(code, 0, "{err}");
    }
    assert_eq!(moto.get(&bucket, "dead/big/transcript.bin"), big);
    let (code, _, err) = query(
        &moto.endpoint(),
        "select count(*) from runs",
        &[&format!("s3://{bucket}/dead/")],
    );
    assert_eq!(code, 0, "{err}");
    // The same run again is nothing to send; a different run of the same name is refused.
    let (code, _, err) = out(aet_s3(&moto.endpoint())
        .arg("ship")
        .arg(&later)
        .arg(format!("s3://{bucket}/dead")));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("already holds this run"), "{err}");
    std::fs::write(later.join("notes.txt"), "changed").unwrap();
    let (code, _, err) = out(aet_s3(&moto.endpoint())
        .arg("ship")
        .arg(&later)
        .arg(format!("s3://{bucket}/dead")));
    assert_eq!(code, 124, "{err}");
    assert!(err.contains("never overwritten"), "{err}");
}

/// Every file of a directory and its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

/// Parquet written to the bucket (`aet query -o`, `aet ledger export --parquet`), read by
/// pyarrow straight from the bucket.
#[test]
fn parquet_goes_to_the_bucket_and_pyarrow_reads_it_there() {
    let moto = Moto::start();
    let bucket = moto.bucket();
    let dir = tempdir();
    for i in 0..2 {
        let (code, _, err) = out(aet_s3(&moto.endpoint())
            .args([
                "run",
                "-q",
                "--ship",
                &format!("s3://{bucket}/runs"),
                "--out",
            ])
            .arg(dir.path().join(format!("r{i}")))
            .args(["--", "cat", "/etc/hostname"]));
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = out(aet_s3(&moto.endpoint()).args([
        "query",
        "select run, kind, count(*) as n from events group by run, kind",
        &format!("s3://{bucket}/runs/"),
        "--format",
        "parquet",
        "-o",
        &format!("s3://{bucket}/results/kinds.parquet"),
    ]));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("written to s3://{bucket}/results/kinds.parquet")),
        "{err}"
    );
    assert_eq!(&moto.get(&bucket, "results/kinds.parquet")[..4], b"PAR1");
    // The same, spelled `--export FORMAT DEST`; a format that is none is named.
    let (code, _, err) = out(aet_s3(&moto.endpoint()).args([
        "query",
        "select run, count(*) as n from events group by run",
        &format!("s3://{bucket}/runs/"),
        "--export",
        "parquet",
        &format!("s3://{bucket}/results/per-run.parquet"),
    ]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(&moto.get(&bucket, "results/per-run.parquet")[..4], b"PAR1");
    let (code, _, err) = out(aet_s3(&moto.endpoint()).args([
        "query",
        "select 1",
        &format!("s3://{bucket}/runs/"),
        "--export",
        "xlsx",
        &format!("s3://{bucket}/results/x.xlsx"),
    ]));
    assert_ne!(code, 0);
    assert!(err.contains("--export xlsx: not a format"), "{err}");
    let (code, text, err) = out(aet_s3(&moto.endpoint()).args([
        "ledger",
        "export",
        &format!("s3://{bucket}/runs/"),
        "--parquet",
        &format!("s3://{bucket}/pq"),
    ]));
    assert_eq!(code, 0, "{text}{err}");
    // A partition that is there already is never written over.
    let (code, _, err) = out(aet_s3(&moto.endpoint()).args([
        "ledger",
        "export",
        &format!("s3://{bucket}/runs/r0"),
        "--parquet",
        &format!("s3://{bucket}/pq"),
    ]));
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("never overwritten"), "{err}");
    let local_rows: usize = ["r0", "r1"]
        .iter()
        .map(|r| rows(&dir.path().join(r).join("ledger.arrow")).len())
        .sum();
    let got = python(&format!(
        r#"
import pyarrow.dataset as ds, pyarrow.fs as fs
s3 = fs.S3FileSystem(access_key="k", secret_key="s", endpoint_override="127.0.0.1:{port}",
                     scheme="http", region="us-east-1")
t = ds.dataset("{bucket}/pq", filesystem=s3, format="parquet", partitioning="hive",
               exclude_invalid_files=True).to_table()
print(t.num_rows, sorted(set(t.column("run").to_pylist())))
"#,
        port = moto.port
    ));
    assert_eq!(got.trim(), format!("{local_rows} ['r0', 'r1']"), "{got}");
}

/// With no credentials anywhere, the error says so (not only what the instance metadata
/// service, tried last, answered); a directory that is no run is named without a claim that a
/// local copy is complete.
#[test]
fn missing_credentials_and_missing_runs_are_said_as_such() {
    let moto = Moto::start();
    let bucket = moto.bucket();
    let home = tempdir();
    let dead = free_port();
    let mut c = aet();
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            c.env_remove(k);
        }
    }
    c.env("HOME", home.path())
        .env("AWS_ENDPOINT_URL", moto.endpoint())
        .env("AWS_METADATA_ENDPOINT", format!("http://127.0.0.1:{dead}"))
        .env("AET_S3_RETRY_SECS", "1")
        .args(["query", "select 1", &format!("s3://{bucket}/runs/")]);
    let (code, _, err) = out(&mut c);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("no credentials were found"), "{err}");
    assert!(err.contains(&format!("s3://{bucket}/runs")), "{err}");
    let missing = home.path().join("no-such-run");
    let (code, _, err) = out(aet_s3(&moto.endpoint())
        .arg("ship")
        .arg(&missing)
        .arg(format!("s3://{bucket}/runs")));
    assert_eq!(code, 124, "{err}");
    assert!(err.contains(&missing.display().to_string()), "{err}");
    assert!(!err.contains("is complete at"), "{err}");
    assert!(moto.keys(&bucket, "runs/").is_empty());
}
