//! The sandbox's proxy held to its word, loopback only: unlisted ports, internal addresses and a
//! tunnel to another server name refused, a run's connections capped, silent clients and idle
//! tunnels timed out, a bad hosts network refused, and shadow mode.

use std::{
    fs,
    io::Read,
    net::TcpListener,
    sync::{Arc, Mutex},
    time::Duration,
};

use aet_tests::*;

#[path = "common/names.rs"]
#[allow(dead_code)]
mod common;
use common::*;

/// A script for the sandbox: a `CONNECT` to `target` through aet's proxy, then a TLS
/// ClientHello naming `server_name`, sent `how`: `whole` (a real handshake), `records` (the
/// hello cut into TLS records of 40 bytes), `late` (the whole hello after 0.8 s of silence).
/// Prints the server name, `how` and the proxy's status.
fn tunnel_with_server_name(target: &str, server_name: &str, how: &str) -> String {
    format!(
        r#"/usr/bin/python3 - <<'PY'
import socket, ssl, time
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
print("{server_name}", "{how}", head.split()[1].decode())
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
try:
    if "{how}" == "whole":
        ctx.wrap_socket(s, server_hostname="{server_name}").do_handshake()
    else:
        out = ssl.MemoryBIO()
        o = ctx.wrap_bio(ssl.MemoryBIO(), out, server_hostname="{server_name}")
        try:
            o.do_handshake()
        except ssl.SSLWantReadError:
            pass
        hello = out.read()
        if "{how}" == "records":
            body = hello[5:]
            hello = b"".join(b"\x16\x03\x01" + len(c).to_bytes(2, "big") + c
                             for c in (body[k:k + 40] for k in range(0, len(body), 40)))
        else:
            time.sleep(0.8)
        s.sendall(hello)
        s.recv(1)
except (OSError, ssl.SSLError):
    pass
PY
"#
    )
}

/// A TCP server on `ip` that reads what each connection sends until it hangs up: the bytes of
/// each connection, in the order they ended. Returns its port.
fn counting_sink(ip: &str) -> (u16, Arc<Mutex<Vec<usize>>>) {
    let l = TcpListener::bind((ip, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let mut total = 0;
                let mut b = [0u8; 8192];
                while let Ok(n) = s.read(&mut b) {
                    if n == 0 {
                        break;
                    }
                    total += n;
                }
                seen.lock().unwrap().push(total);
            });
        }
    });
    (port, out)
}

#[test]
fn the_proxy_refuses_unlisted_ports_internal_addresses_and_a_tunnel_to_another_server_name() {
    dns_server();
    let dir = tempdir();
    let (mut index, port) = package_index(dir.path());
    let (sink, received) = counting_sink("127.0.0.7");
    // index.test on its default ports only; mirror.test on any port, but it resolves to a
    // loopback address nobody listed; metadata.test to the cloud metadata service; sni.test on
    // the sink's port, at an address listed explicitly (an internal mirror).
    let (_ws, spec) = hosts_spec(
        dir.path(),
        &[
            "index.test",
            "mirror.test:*",
            "metadata.test",
            &format!("sni.test:{sink}"),
            "127.0.0.7",
        ],
        "",
    );
    let get = |url: String| {
        format!("curl -sS -m 10 {url} -o /dev/null -w '%{{http_code}}\\n' 2>/dev/null; ")
    };
    let script = [
        get(format!("http://index.test:{port}/simple/")),
        get(format!("http://mirror.test:{port}/simple/")),
        get("http://metadata.test/latest/meta-data/".into()),
        tunnel_with_server_name(&format!("sni.test:{sink}"), "evil.test", "whole"),
        tunnel_with_server_name(&format!("sni.test:{sink}"), "evil.test", "records"),
        tunnel_with_server_name(&format!("sni.test:{sink}"), "evil.test", "late"),
        tunnel_with_server_name(&format!("sni.test:{sink}"), "sni.test", "whole"),
    ]
    .concat();
    let out = dir.path().join("run");
    let r = run_in(
        &out,
        &["--sandbox", spec.to_str().unwrap()],
        &["sh", "-c", &script],
    );
    let _ = index.kill();
    let _ = index.wait();
    assert_eq!(
        r.stdout(),
        "403\n403\n403\nevil.test whole 200\nevil.test records 200\nevil.test late 200\n\
         sni.test whole 200\n",
        "{}",
        r.stderr()
    );
    let ledger = r.ledger();
    assert_complete(&ledger);
    let rows = rows(&ledger);
    let one = |host: &str| -> Vec<&LedgerRow> { named(&rows, "net", host, "proxy") };
    let why = |rs: &[&LedgerRow]| -> Vec<(Option<String>, Option<String>)> {
        rs.iter()
            .map(|r| (r.net_decision.clone(), r.net_reason.clone()))
            .collect()
    };
    let refused = |reason: &str| vec![(Some("refused".to_owned()), Some(reason.to_owned()))];
    assert_eq!(why(&one("index.test")), refused("port_not_listed"));
    let mirror = one("mirror.test");
    assert_eq!(why(&mirror), refused("internal_address"));
    assert_eq!(mirror[0].net_address.as_deref(), Some(&b"127.0.0.6"[..]));
    let metadata = one("metadata.test");
    assert_eq!(why(&metadata), refused("internal_address"));
    assert_eq!(
        metadata[0].net_address.as_deref(),
        Some(&b"169.254.169.254"[..])
    );
    // The tunnels: each a row; those whose ClientHello named another server say which,
    // whether it came whole, cut into records, or after a silence (then the tunnel's own row
    // went out first, and the refusal is a row of its own).
    let tunnels = one("sni.test");
    type Seen<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a [u8]>);
    let seen: Vec<Seen<'_>> = tunnels
        .iter()
        .map(|t| {
            (
                t.net_decision.as_deref(),
                t.net_reason.as_deref(),
                t.server_name.as_deref(),
            )
        })
        .collect();
    let mismatch = (
        Some("refused"),
        Some("server_name_mismatch"),
        Some(&b"evil.test"[..]),
    );
    let allowed = (Some("allowed"), None, None);
    assert_eq!(
        seen,
        [mismatch, mismatch, allowed, mismatch, allowed],
        "{tunnels:#?}"
    );
    assert_eq!(tunnels[4].net_address.as_deref(), Some(&b"127.0.0.7"[..]));
    // The server heard the matching hello, and not a byte of the others.
    let t0 = std::time::Instant::now();
    while received.lock().unwrap().len() < 4 && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut got = received.lock().unwrap().clone();
    got.sort();
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(
        &got[..3],
        [0, 0, 0],
        "the mismatched tunnels sent nothing upstream: {got:?}"
    );
    assert!(
        got[3] > 100,
        "the ClientHello of sni.test reached the server: {got:?}"
    );
}

#[test]
fn the_proxy_caps_a_run_s_connections_and_times_out_silent_clients_and_idle_tunnels() {
    dns_server();
    let dir = tempdir();
    let (sink, received) = counting_sink("127.0.0.7");
    let (_ws, spec) = hosts_spec(
        dir.path(),
        &[&format!("sni.test:{sink}"), "127.0.0.7"],
        ", max_connections = 2, client_timeout = 1, idle_timeout = 1",
    );
    // Two clients that say nothing hold the run's two slots: a third is refused at once; the
    // two are timed out; three clients that reset mid-request leave no slot taken; then a
    // tunnel is served again, and one left idle is closed.
    let script = format!(
        r#"/usr/bin/python3 - <<'PY'
import socket, time
def reply(s):
    data = b""
    while True:
        b = s.recv(4096)
        if not b:
            return data.split(b" ")[1].decode() if data else "closed"
        data += b
idle = [socket.create_connection(("127.0.0.1", 3128)) for _ in range(2)]
time.sleep(0.3)
third = socket.create_connection(("127.0.0.1", 3128))
print("third", reply(third))
print("idle", " ".join(reply(s) for s in idle))
# Clients that leave mid-request (half a head, then a reset) free their slots.
import struct
for _ in range(3):
    k = socket.create_connection(("127.0.0.1", 3128))
    k.sendall(b"CONNECT sni.te")
    k.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    k.close()
    time.sleep(0.3)
t = socket.create_connection(("127.0.0.1", 3128), timeout=10)
t.sendall(b"CONNECT sni.test:{sink} HTTP/1.1\r\nHost: sni.test\r\n\r\n")
print("after", t.recv(4096).split(b" ")[1].decode())
t.sendall(b"hello")
t.close()
u = socket.create_connection(("127.0.0.1", 3128), timeout=10)
u.sendall(b"CONNECT sni.test:{sink} HTTP/1.1\r\nHost: sni.test\r\n\r\n")
u.recv(4096)
start = time.time()
u.sendall(b"x")
print("idle tunnel closed", u.recv(4096) == b"" and time.time() - start < 5)
PY
"#
    );
    let out = dir.path().join("run");
    let r = run_in(
        &out,
        &["--sandbox", spec.to_str().unwrap()],
        &["sh", "-c", &script],
    );
    assert_eq!(
        r.stdout(),
        "third 503\nidle 408 408\nafter 200\nidle tunnel closed True\n",
        "{}",
        r.stderr()
    );
    let rows = rows(&r.ledger());
    let refusals: Vec<&str> = rows
        .iter()
        .filter(|r| r.host_source.as_deref() == Some("proxy") && r.host.is_none())
        .map(|r| {
            assert_eq!(r.net_decision.as_deref(), Some("refused"), "{r:#?}");
            assert_eq!(r.comm, "python3", "the client is named: {r:#?}");
            r.net_reason.as_deref().unwrap()
        })
        .collect();
    let mut sorted = refusals.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        ["client_timeout", "client_timeout", "connection_cap"],
        "{rows:#?}"
    );
    assert_eq!(named(&rows, "net", "sni.test", "proxy").len(), 2);
    let t0 = std::time::Instant::now();
    while received.lock().unwrap().len() < 2 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut got = received.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, [1, 5], "each tunnel carried its bytes");
}

#[test]
fn a_bad_hosts_network_is_refused_naming_the_entry() {
    let dir = tempdir();
    let spec = dir.path().join("spec.toml");
    fs::write(
        &spec,
        format!(
            "workspace = {:?}\nnetwork = {{ hosts = [\"ok.test\", \"not a host\"] }}\ndns = true\n",
            dir.path()
        ),
    )
    .unwrap();
    let r = aet()
        .args(["sandbox", "check"])
        .arg(&spec)
        .output()
        .unwrap();
    assert!(!r.status.success());
    let err = text(&r.stderr);
    assert!(
        err.contains("network.hosts[1]") && err.contains("not a host name"),
        "{err}"
    );
    assert!(err.contains("dns = true with network = { hosts"), "{err}");
}

#[test]
fn under_shadow_an_unlisted_host_is_forwarded_and_recorded_as_enforce_would_refuse_it() {
    dns_server();
    let dir = tempdir();
    let (mut index, port) = package_index(dir.path());
    let (_ws, spec) = hosts_spec(dir.path(), &["index.test"], "");
    let policy = dir.path().join("policy.toml");
    fs::write(
        &policy,
        "[allow]\nread = [\"/\"]\nwrite = [\"/\"]\nhosts = [\"index.test\"]\n",
    )
    .unwrap();
    let out = dir.path().join("run");
    let script = format!(
        "curl -sS -m 10 http://other.test:{port}/simple/aetprobe/ -o /dev/null -w '%{{http_code}}\\n'"
    );
    let r = run_in(
        &out,
        &[
            "--sandbox",
            spec.to_str().unwrap(),
            "--policy",
            policy.to_str().unwrap(),
            "--mode",
            "shadow",
        ],
        &["sh", "-c", &script],
    );
    let _ = index.kill();
    let _ = index.wait();
    assert_eq!(r.stdout(), "200\n", "{}", r.stderr());
    let rows = rows(&r.ledger());
    let forwarded = named(&rows, "net", "other.test", "proxy");
    assert_eq!(forwarded.len(), 1, "{rows:#?}");
    assert_eq!(forwarded[0].net_decision.as_deref(), Some("would_refuse"));
    assert_eq!(forwarded[0].net_reason.as_deref(), Some("host_not_listed"));
    assert_eq!(forwarded[0].net_address.as_deref(), Some(&b"127.0.0.6"[..]));
    let (_, v) = audit_json(&out, &policy, &[]);
    let would: Vec<&str> = v["blocked"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["outcome"] == "would_block")
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(would.contains(&"host:other.test"), "{v:#}");
}
