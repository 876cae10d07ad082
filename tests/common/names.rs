//! The helpers of tests/names.rs and tests/proxy.rs.

use std::{
    fs,
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use aet_tests::*;
use hickory_proto::{
    op::{Message, MessageType, ResponseCode},
    rr::{RData, Record, RecordType, rdata::A},
};

/// The test's DNS server (UDP and TCP).
pub const DNS: &str = "127.0.0.77:53";

/// The names the test's DNS server knows.
pub fn address_of(name: &str) -> Option<Ipv4Addr> {
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

pub fn dns_answer(q: &[u8]) -> Option<Vec<u8>> {
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
pub fn dns_server() {
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
pub fn http_server(ip: &str) -> u16 {
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
pub fn tls_sink(ip: &str) -> u16 {
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
pub fn hosts_spec(dir: &Path, hosts: &[&str], more: &str) -> (PathBuf, PathBuf) {
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

pub fn dns_rows<'a>(rows: &'a [LedgerRow], name: &str) -> Vec<&'a LedgerRow> {
    rows.iter()
        .filter(|r| r.kind == "dns" && r.host.as_deref() == Some(name.as_bytes()))
        .collect()
}

pub fn named<'a>(
    rows: &'a [LedgerRow],
    kind: &str,
    name: &str,
    source: &str,
) -> Vec<&'a LedgerRow> {
    rows.iter()
        .filter(|r| {
            r.kind == kind
                && r.host.as_deref() == Some(name.as_bytes())
                && r.host_source.as_deref() == Some(source)
        })
        .collect()
}

/// The answered `A` row of `name` from the run's own query.
pub fn answered<'a>(rows: &'a [LedgerRow], name: &str) -> &'a LedgerRow {
    let all = dns_rows(rows, name);
    all.iter()
        .copied()
        .find(|r| r.dns_type.as_deref() == Some("A") && r.host_source.as_deref() == Some("dns"))
        .unwrap_or_else(|| panic!("no A query of {name}: {all:#?}"))
}

/// A package index on `127.0.0.6` serving one wheel, `aetprobe` (whose `VALUE` is
/// `probe-ok`), with Python's own HTTP server. Returns the server and its port.
pub fn package_index(dir: &Path) -> (Child, u16) {
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
