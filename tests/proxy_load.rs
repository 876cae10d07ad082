//! The sandbox's proxy under load, from one run: 1,000 tunnels open at once, then 50,000
//! plain HTTP requests. Every request is a ledger row and none is lost; the memory of the aet
//! process that serves the proxy is measured while it works, and bounded.

use std::{
    io::{Read, Write},
    net::TcpListener,
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use aet_tests::*;

/// The upstream's address (loopback, listed by address in the spec).
const UPSTREAM: &str = "127.0.0.8";
const TUNNELS: usize = 1_000;
const REQUESTS: usize = 50_000;
const CLIENTS: usize = 10;
/// What the proxy's process may hold at its peak: its tunnels' buffers (about 48 KiB each),
/// the ledger's writer, the monitor; far more would be a leak.
const PEAK_RSS_LIMIT_KB: u64 = 512 * 1024;

/// A keep-alive HTTP server: every request gets `200` and two bytes. Returns its port.
fn http_server() -> u16 {
    let l = TcpListener::bind((UPSTREAM, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 4096];
                loop {
                    while let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        head.drain(..i + 4);
                        if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                            .is_err()
                        {
                            return;
                        }
                    }
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
            });
        }
    });
    port
}

/// A TCP server that counts the connections that sent it a byte before they ended.
fn sink() -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind((UPSTREAM, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let got = Arc::new(AtomicUsize::new(0));
    let seen = got.clone();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(120)));
                let mut b = [0u8; 64];
                let mut any = false;
                while let Ok(n) = s.read(&mut b) {
                    if n == 0 {
                        break;
                    }
                    any = true;
                }
                if any {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    (port, got)
}

/// The peak resident memory of process `pid` (its `VmHWM`), in KiB.
fn peak_rss_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[test]
fn a_thousand_tunnels_at_once_and_fifty_thousand_requests_are_each_a_row() {
    let dir = tempdir();
    let http = http_server();
    let (sink_port, tunneled) = sink();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let spec = dir.path().join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "workspace = {ws:?}\nnetwork = {{ hosts = [\"{UPSTREAM}:{http}\", \
             \"{UPSTREAM}:{sink_port}\"], max_connections = 2048 }}\n"
        ),
    )
    .unwrap();
    let script = format!(
        r#"/usr/bin/python3 - <<'PY'
import resource, socket, threading
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
PROXY = ("127.0.0.1", 3128)
tunnels = []
for i in range({TUNNELS}):
    s = socket.create_connection(PROXY, timeout=60)
    s.sendall(b"CONNECT {UPSTREAM}:{sink_port} HTTP/1.1\r\n\r\n")
    tunnels.append(s)
opened = 0
for s in tunnels:
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(4096)
        if not b:
            break
        head += b
    opened += head.startswith(b"HTTP/1.1 200")
print("tunnels open at once", opened, flush=True)
for s in tunnels:
    s.sendall(b"x")
for s in tunnels:
    s.close()
answered = []
def client(k, n):
    s = socket.create_connection(PROXY, timeout=60)
    f = s.makefile("rb")
    good = 0
    for i in range(n):
        s.sendall(b"GET http://{UPSTREAM}:{http}/%d/%d HTTP/1.1\r\nHost: {UPSTREAM}\r\n\r\n" % (k, i))
        status = f.readline()
        length = 0
        while True:
            h = f.readline()
            if h in (b"\r\n", b""):
                break
            if h.lower().startswith(b"content-length:"):
                length = int(h.split(b":")[1])
        f.read(length)
        good += status.startswith(b"HTTP/1.1 200")
    answered.append(good)
threads = [threading.Thread(target=client, args=(k, {REQUESTS} // {CLIENTS})) for k in range({CLIENTS})]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("requests answered", sum(answered), flush=True)
PY
"#
    );
    let out = dir.path().join("run");
    let started = Instant::now();
    let mut child = aet()
        .args(["run", "--sandbox", spec.to_str().unwrap(), "--out"])
        .arg(&out)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The proxy serves from this process: its peak memory, read until it ends.
    let pid = child.id();
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        peak = peak.max(peak_rss_kb(pid).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout,
        format!("tunnels open at once {TUNNELS}\nrequests answered {REQUESTS}\n"),
        "{stderr}"
    );
    let t0 = Instant::now();
    while tunneled.load(Ordering::SeqCst) < TUNNELS && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        tunneled.load(Ordering::SeqCst),
        TUNNELS,
        "every tunnel carried its byte"
    );
    let ledger = out.join("ledger.arrow");
    let meta = meta(&ledger);
    assert_eq!(
        meta.get("aet.complete").map(String::as_str),
        Some("true"),
        "{meta:#?}"
    );
    assert_eq!(meta.get("aet.events_lost").map(String::as_str), Some("0"));
    let rows = rows(&ledger);
    let proxy: Vec<_> = rows
        .iter()
        .filter(|r| r.host_source.as_deref() == Some("proxy"))
        .collect();
    let count = |port: u16| {
        proxy
            .iter()
            .filter(|r| {
                r.net_port == Some(u32::from(port))
                    && r.net_decision.as_deref() == Some("allowed")
                    && r.host.as_deref() == Some(UPSTREAM.as_bytes())
            })
            .count()
    };
    assert_eq!(count(sink_port), TUNNELS, "a row for each tunnel");
    assert_eq!(count(http), REQUESTS, "a row for each request");
    assert_eq!(proxy.len(), TUNNELS + REQUESTS, "no other proxy row");
    println!(
        "proxy load: {TUNNELS} tunnels at once and {REQUESTS} requests in {:.1} s, \
         {} rows, peak RSS of the aet process {} MiB",
        took.as_secs_f64(),
        rows.len(),
        peak / 1024
    );
    assert!(
        peak > 0 && peak < PEAK_RSS_LIMIT_KB,
        "peak RSS {peak} KiB (limit {PEAK_RSS_LIMIT_KB} KiB)"
    );
}
