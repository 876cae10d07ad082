//! Names on the network, loopback only: a DNS server, TLS and HTTP servers this test starts on
//! 127.0.0.0/8. The names a run resolves (glibc, Python, dig over UDP and TCP) are `dns` rows and
//! name its connections; a TLS ClientHello's server name and an HTTP request's host name a
//! connection made without DNS; the audit judges hosts; `network = { hosts = [...] }` is a
//! sandbox whose only way out is aet's proxy.

use std::{
    fs,
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use aet_tests::*;
use hickory_proto::{
    op::{Message, MessageType, ResponseCode},
    rr::{RData, Record, RecordType, rdata::A},
};

/// The test's DNS server (UDP and TCP).
const DNS: &str = "127.0.0.77:53";

/// The names the test's DNS server knows.
fn address_of(name: &str) -> Option<Ipv4Addr> {
    Some(match name.trim_end_matches('.') {
        "repo.test" => Ipv4Addr::new(127, 0, 0, 2),
        "pkgs.test" | "tcp.test" | "udp.test" => Ipv4Addr::new(127, 0, 0, 3),
        "python.test" => Ipv4Addr::new(127, 0, 0, 4),
        "index.test" | "other.test" | "mirror.test" => Ipv4Addr::new(127, 0, 0, 6),
        "sni.test" => Ipv4Addr::new(127, 0, 0, 7),
        "metadata.test" => Ipv4Addr::new(169, 254, 169, 254),
        _ => return None,
    })
}

fn dns_answer(q: &[u8]) -> Option<Vec<u8>> {
    let req = Message::from_vec(q).ok()?;
    if req.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut resp = Message::response(req.metadata.id, req.metadata.op_code);
    resp.metadata.recursion_desired = req.metadata.recursion_desired;
    resp.metadata.recursion_available = true;
    let query = req.queries.first()?.clone();
    resp.add_query(query.clone());
    match address_of(&query.name().to_ascii()) {
        Some(ip) if query.query_type() == RecordType::A => {
            resp.add_answer(Record::from_rdata(
                query.name().clone(),
                60,
                RData::A(A(ip)),
            ));
        }
        Some(_) => {}
        None => resp.metadata.response_code = ResponseCode::NXDomain,
    }
    resp.to_vec().ok()
}

/// Starts the test's DNS server once.
fn dns_server() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let udp = UdpSocket::bind(DNS).expect("the test's DNS server binds 127.0.0.77:53");
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok((n, from)) = udp.recv_from(&mut buf) {
                if let Some(r) = dns_answer(&buf[..n]) {
                    let _ = udp.send_to(&r, from);
                }
            }
        });
        let tcp = TcpListener::bind(DNS).unwrap();
        std::thread::spawn(move || {
            for mut s in tcp.incoming().flatten() {
                std::thread::spawn(move || {
                    loop {
                        let mut len = [0u8; 2];
                        if s.read_exact(&mut len).is_err() {
                            break;
                        }
                        let mut q = vec![0u8; u16::from_be_bytes(len) as usize];
                        if s.read_exact(&mut q).is_err() {
                            break;
                        }
                        let Some(r) = dns_answer(&q) else { break };
                        let _ = s.write_all(&(r.len() as u16).to_be_bytes());
                        let _ = s.write_all(&r);
                    }
                });
            }
        });
    });
}

/// An HTTP server on `ip`: every request gets `200 ok`. Returns its port.
fn http_server(ip: &str) -> u16 {
    let l = TcpListener::bind((ip, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut head = Vec::new();
            let mut b = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&b[..n]),
                }
            }
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    port
}

/// A TCP server on `ip` that reads what comes (a ClientHello) and hangs up. Returns its port.
fn tls_sink(ip: &str) -> u16 {
    let l = TcpListener::bind((ip, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut b = [0u8; 8192];
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.read(&mut b);
        }
    });
    port
}

/// A workspace and a sandbox spec whose network is aet's proxy for `hosts`, asking the test's
/// DNS server (`more`: more keys of the network's table, `, KEY = VALUE`).
fn hosts_spec(dir: &Path, hosts: &[&str], more: &str) -> (PathBuf, PathBuf) {
    let ws = dir.join("ws");
    fs::create_dir(&ws).unwrap();
    let spec = dir.join("spec.toml");
    fs::write(
        &spec,
        format!(
            "workspace = {ws:?}\nnetwork = {{ hosts = {hosts:?}, resolver = \"{DNS}\"{more} }}\n"
        ),
    )
    .unwrap();
    (ws, spec)
}

fn dns_rows<'a>(rows: &'a [LedgerRow], name: &str) -> Vec<&'a LedgerRow> {
    rows.iter()
        .filter(|r| r.kind == "dns" && r.host.as_deref() == Some(name.as_bytes()))
        .collect()
}

fn named<'a>(rows: &'a [LedgerRow], kind: &str, name: &str, source: &str) -> Vec<&'a LedgerRow> {
    rows.iter()
        .filter(|r| {
            r.kind == kind
                && r.host.as_deref() == Some(name.as_bytes())
                && r.host_source.as_deref() == Some(source)
        })
        .collect()
}

/// The answered `A` row of `name` from the run's own query.
fn answered<'a>(rows: &'a [LedgerRow], name: &str) -> &'a LedgerRow {
    let all = dns_rows(rows, name);
    all.iter()
        .copied()
        .find(|r| r.dns_type.as_deref() == Some("A") && r.host_source.as_deref() == Some("dns"))
        .unwrap_or_else(|| panic!("no A query of {name}: {all:#?}"))
}

#[test]
fn names_a_run_resolves_are_dns_rows_and_name_its_connections() {
    dns_server();
    let dir = tempdir();
    let port = http_server("127.0.0.2");
    let resolv = dir.path().join("resolv.conf");
    fs::write(
        &resolv,
        "nameserver 127.0.0.77\noptions attempts:1 timeout:2\n",
    )
    .unwrap();
    // The run's own view of /etc/resolv.conf names the test's server (a mount namespace of its
    // own: the machine's file is untouched).
    let script = format!(
        "mount --bind {resolv} /etc/resolv.conf && \
         getent ahosts repo.test | head -n 1 && \
         /usr/bin/python3 -c 'import socket; print(socket.getaddrinfo(\"python.test\", 80, proto=socket.IPPROTO_TCP)[0][4][0])' && \
         dig +short +tries=1 +time=2 @127.0.0.77 pkgs.test && \
         dig +tcp +short +tries=1 +time=2 @127.0.0.77 tcp.test && \
         /usr/bin/python3 -c 'import socket\n\
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)\n\
s.sendto(bytes.fromhex(\"abcd01000001000000000000037564700474657374000001 0001\".replace(\" \", \"\")), (\"127.0.0.77\", 53))\n\
print(socket.inet_ntoa(s.recvfrom(512)[0][-4:]))' && \
         curl -sS -m 5 http://repo.test:{port}/ && echo",
        resolv = resolv.display()
    );
    let r = run_ok(dir.path(), &["unshare", "-m", "sh", "-c", &script]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(
        r.stdout(),
        "127.0.0.2       STREAM repo.test\n127.0.0.4\n127.0.0.3\n127.0.0.3\n127.0.0.3\nok\n"
    );
    let rows = r.rows();
    // glibc (getent, curl), Python (through glibc, and its own datagram on an unconnected
    // socket) and dig over UDP and TCP: each query a row, with its answer.
    for (name, ip) in [
        ("udp.test", "127.0.0.3"),
        ("repo.test", "127.0.0.2"),
        ("python.test", "127.0.0.4"),
        ("pkgs.test", "127.0.0.3"),
        ("tcp.test", "127.0.0.3"),
    ] {
        let a = answered(&rows, name);
        assert_eq!(a.dns_rcode.as_deref(), Some("NOERROR"), "{a:#?}");
        assert_eq!(a.dns_answers, Some(vec![format!("A {ip}")]), "{a:#?}");
        assert_eq!(a.net_address.as_deref(), Some(&b"127.0.0.77"[..]), "{a:#?}");
        assert_eq!(a.net_port, Some(53));
    }
    // glibc asks for A and AAAA in one sendmmsg: both are rows.
    let aaaa = dns_rows(&rows, "python.test")
        .into_iter()
        .find(|r| r.dns_type.as_deref() == Some("AAAA"))
        .expect("the AAAA query");
    assert_eq!(aaaa.dns_answers, Some(vec![]));
    // The connection to the address the run resolved carries the name; the request's Host
    // names it too.
    let connect = rows
        .iter()
        .find(|r| {
            r.kind == "net"
                && r.syscall.as_deref() == Some("connect")
                && r.net_address.as_deref() == Some(&b"127.0.0.2"[..])
                && r.net_port == Some(u32::from(port))
        })
        .expect("curl's connect");
    assert_eq!(
        connect.host.as_deref(),
        Some(&b"repo.test"[..]),
        "{connect:#?}"
    );
    assert_eq!(connect.host_source.as_deref(), Some("dns"));
    let http = named(&rows, "net", "repo.test", "http");
    assert_eq!(http.len(), 1, "{http:#?}");
    assert_eq!(http[0].net_port, Some(u32::from(port)));
    assert_complete(&r.ledger());
}

#[test]
fn tls_and_http_name_connections_made_without_dns_and_the_audit_judges_hosts() {
    let dir = tempdir();
    let tls = tls_sink("127.0.0.5");
    let http = http_server("127.0.0.2");
    let script = format!(
        "curl -sk -m 5 --resolve secret.test:{tls}:127.0.0.5 https://secret.test:{tls}/; \
         curl -sS -m 5 --resolve plain.test:{http}:127.0.0.2 http://plain.test:{http}/; echo; \
         /usr/bin/python3 -c 'import socket, ssl\n\
c = ssl.create_default_context(); c.check_hostname = False; c.verify_mode = ssl.CERT_NONE\n\
s = socket.create_connection((\"127.0.0.5\", {tls}))\n\
try: c.wrap_socket(s, server_hostname=\"pysni.test\")\n\
except OSError: pass'; true"
    );
    let r = run_ok(dir.path(), &["sh", "-c", &script]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(r.stdout(), "ok\n");
    let rows = r.rows();
    for (name, source, ip, port) in [
        ("secret.test", "tls", "127.0.0.5", tls),
        ("pysni.test", "tls", "127.0.0.5", tls),
        ("plain.test", "http", "127.0.0.2", http),
    ] {
        let got = named(&rows, "net", name, source);
        assert_eq!(got.len(), 1, "{name}: {got:#?}");
        assert_eq!(
            got[0].net_address.as_deref(),
            Some(ip.as_bytes()),
            "{:#?}",
            got[0]
        );
        assert_eq!(got[0].net_port, Some(u32::from(port)));
        assert!(
            dns_rows(&rows, name).is_empty(),
            "no DNS was asked for {name}"
        );
    }
    assert_complete(&r.ledger());

    // One name allowed, one a cheat, the third outside the allow-list.
    let policy = dir.path().join("hosts.toml");
    fs::write(
        &policy,
        "[allow]\nread = [\"/\"]\nwrite = [\"/\"]\nhosts = [\"plain.test\"]\n\n\
         [cheats]\nupstream = { host = \"secret.test\" }\n",
    )
    .unwrap();
    let (out, v) = audit_json(&r.out, &policy, &[]);
    assert_eq!(out.status.code(), Some(2), "{v:#}");
    assert_eq!(v["verdict"], "disqualified");
    let cheats = v["cheat_hits"].as_array().unwrap();
    assert_eq!(cheats.len(), 1, "{cheats:#?}");
    assert_eq!(cheats[0]["rule"], "cheats.upstream");
    assert_eq!(cheats[0]["path"], "host:secret.test");
    let oos: Vec<&str> = v["out_of_scope"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["access"] == "host")
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(oos, ["host:pysni.test"], "{v:#}");
}

/// A package index on `127.0.0.6` serving one wheel, `aetprobe` (whose `VALUE` is
/// `probe-ok`), with Python's own HTTP server. Returns the server and its port.
fn package_index(dir: &Path) -> (Child, u16) {
    let root = dir.join("index");
    fs::create_dir_all(root.join("simple/aetprobe")).unwrap();
    fs::create_dir_all(root.join("files")).unwrap();
    let wheel = root.join("files/aetprobe-1.0-py3-none-any.whl");
    python(&format!(
        r#"
import zipfile
files = {{
    "aetprobe/__init__.py": "VALUE = 'probe-ok'\n",
    "aetprobe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: aetprobe\nVersion: 1.0\n",
    "aetprobe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: aet-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}}
files["aetprobe-1.0.dist-info/RECORD"] = "".join(f"{{n}},,\n" for n in files) + "aetprobe-1.0.dist-info/RECORD,,\n"
with zipfile.ZipFile({wheel:?}, "w") as z:
    for n, t in files.items():
        z.writestr(n, t)
"#
    ));
    fs::write(
        root.join("simple/aetprobe/index.html"),
        "<html><body><a href=\"/files/aetprobe-1.0-py3-none-any.whl\">aetprobe-1.0-py3-none-any.whl</a></body></html>\n",
    )
    .unwrap();
    let port = {
        let l = TcpListener::bind("127.0.0.6:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let child = Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.6",
        ])
        .arg("--directory")
        .arg(&root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while std::net::TcpStream::connect(SocketAddr::from(([127, 0, 0, 6], port))).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the index did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, port)
}

#[test]
fn a_sandbox_by_host_reaches_listed_names_through_the_proxy_and_nothing_else() {
    dns_server();
    let dir = tempdir();
    let (mut index, port) = package_index(dir.path());
    // The index is a host-only service on loopback: its port and its address are listed.
    let (ws, spec) = hosts_spec(
        dir.path(),
        &[&format!("index.test:{port}"), "127.0.0.6"],
        "",
    );
    let script = format!(
        "/usr/bin/python3 -m pip install -q --no-cache-dir --disable-pip-version-check \
           --index-url http://index.test:{port}/simple/ --trusted-host index.test \
           --target {ws}/site aetprobe && \
         /usr/bin/python3 -c 'import sys; sys.path.insert(0, \"{ws}/site\"); import aetprobe; print(aetprobe.VALUE)'; \
         curl -sS -m 10 https://blocked.test/ -o /dev/null 2>/dev/null; echo curl=$?; \
         getent ahosts blocked.test; echo getent=$?; \
         curl -sS -m 3 --noproxy '*' http://127.0.0.6:{port}/ -o /dev/null 2>/dev/null; echo direct=$?; \
         curl -sS -m 3 --noproxy '*' http://192.0.2.1/ -o /dev/null 2>/dev/null; echo outside=$?",
        ws = ws.display()
    );
    let out = dir.path().join("run");
    let r = run_in(
        &out,
        &["--sandbox", spec.to_str().unwrap()],
        &["sh", "-c", &script],
    );
    let _ = index.kill();
    let _ = index.wait();
    assert_eq!(r.code(), 0, "{}", r.stderr());
    // pip installed from the listed index; the unlisted host fails for the command, by name
    // and by DNS; no address but the proxy's is reachable from inside.
    assert_eq!(
        r.stdout(),
        "probe-ok\ncurl=56\ngetent=2\ndirect=7\noutside=7\n",
        "{}",
        r.stderr()
    );
    let ledger = r.ledger();
    assert_complete(&ledger);
    let sb: serde_json::Value = serde_json::from_str(&meta(&ledger)["aet.sandbox"]).unwrap();
    let check = sb["report"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["entry"] == "network = { hosts = [...] }")
        .unwrap_or_else(|| panic!("no network check: {sb}"))
        .clone();
    assert_eq!(
        (&check["ok"], &check["found"]),
        (&true.into(), &"interfaces lo".into())
    );
    let rows = rows(&ledger);
    // Every request the proxy forwarded or refused is a row, with the process that asked.
    let fetched = named(&rows, "net", "index.test", "proxy");
    assert!(!fetched.is_empty(), "{rows:#?}");
    for f in &fetched {
        assert_eq!(f.net_decision.as_deref(), Some("allowed"), "{f:#?}");
        assert_eq!(f.net_address.as_deref(), Some(&b"127.0.0.6"[..]));
        assert_eq!(f.net_port, Some(u32::from(port)));
        assert_eq!(f.comm, "python3", "the proxy names who asked: {f:#?}");
    }
    let tunnel = named(&rows, "net", "blocked.test", "proxy");
    assert_eq!(tunnel.len(), 1, "{tunnel:#?}");
    assert_eq!(tunnel[0].net_decision.as_deref(), Some("refused"));
    assert_eq!(tunnel[0].net_reason.as_deref(), Some("host_not_listed"));
    assert_eq!(tunnel[0].net_port, Some(443));
    assert_eq!(tunnel[0].comm, "curl");
    let lookups = named(&rows, "dns", "blocked.test", "proxy");
    assert!(!lookups.is_empty(), "{rows:#?}");
    for l in &lookups {
        assert_eq!(l.net_decision.as_deref(), Some("refused"));
        assert_eq!(l.dns_rcode.as_deref(), Some("REFUSED"));
    }
    // The run's own rows say what it asked for: the CONNECT's host, the query and its answer.
    assert_eq!(named(&rows, "net", "blocked.test", "http").len(), 1);
    let q = dns_rows(&rows, "blocked.test")
        .into_iter()
        .find(|r| r.host_source.as_deref() == Some("dns"))
        .expect("getent's query");
    assert_eq!(q.dns_rcode.as_deref(), Some("REFUSED"));
    // The audit lists what the proxy blocked.
    let policy = dir.path().join("policy.toml");
    fs::write(
        &policy,
        "[allow]\nread = [\"/\"]\nwrite = [\"/\"]\nhosts = [\"index.test\"]\n",
    )
    .unwrap();
    let (_, v) = audit_json(&out, &policy, &[]);
    let blocked: Vec<(&str, &str)> = v["blocked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["rule"].as_str().unwrap(), f["path"].as_str().unwrap()))
        .collect();
    assert!(
        blocked.contains(&("barrier.host", "host:blocked.test")),
        "{v:#}"
    );
}

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
