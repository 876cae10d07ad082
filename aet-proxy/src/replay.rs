//! One client of the proxy served in process, from the bytes it sends: no network namespace and
//! no listener, the same request handling as a run's proxy. The fuzz targets feed it the agent's
//! bytes. The rules list one upstream, a server on this host's loopback that answers every
//! request with an empty `200` (the word `UPSTREAM` in the client's bytes is its address, which
//! changes from one process to the next), and one name whose lookups fail at once (its
//! resolver's port is closed); everything else is refused.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener},
    sync::{Arc, OnceLock},
    time::Duration,
};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::{Config, Event, Proxy, Shared, Slot, dns, http, peer::Proto, rules::Rules};

/// The name the rules list whose lookups fail.
pub const LISTED_NAME: &str = "listed.test";
/// Most time one replayed client may take: longer is a hang, and panics.
const DEADLINE: Duration = Duration::from_secs(20);

/// What a replayed client got back, and the rows its requests made.
#[derive(Debug, Default)]
pub struct Replayed {
    /// The bytes the proxy sent the client.
    pub response: Vec<u8>,
    /// The events (ledger rows) of its requests.
    pub events: Vec<Event>,
}

/// The upstream server: each connection gets `HTTP/1.1 200 OK` with no body once it has sent a
/// byte, and is read until it ends.
fn upstream() -> SocketAddr {
    static ADDR: OnceLock<SocketAddr> = OnceLock::new();
    *ADDR.get_or_init(|| {
        let l = TcpListener::bind(("127.0.0.1", 0)).expect("a loopback port for the upstream");
        let addr = l.local_addr().expect("its address");
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    let mut answered = false;
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if !answered {
                            answered = true;
                            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                        }
                    }
                });
            }
        });
        addr
    })
}

/// A port of this host's loopback that nothing listens on (a lookup sent there fails at once).
fn closed_port() -> SocketAddr {
    static ADDR: OnceLock<SocketAddr> = OnceLock::new();
    *ADDR.get_or_init(|| {
        let s = std::net::UdpSocket::bind(("127.0.0.1", 0)).expect("a loopback port");
        s.local_addr().expect("its address")
    })
}

fn proxy(enforce: bool) -> (Arc<Proxy>, tokio::sync::mpsc::UnboundedReceiver<Event>) {
    let rules = Rules::new(&[format!("{}", upstream()), LISTED_NAME.to_owned()])
        .expect("the replay's rules compile");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let p = Proxy {
        cfg: Config {
            rules,
            enforce,
            resolver: Some(closed_port()),
            cgroup: "/nonexistent/aet-proxy-replay".into(),
            max_connections: 16,
            client_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(4),
        },
        shared: Shared {
            netns: 0,
            open: std::sync::atomic::AtomicUsize::new(0),
        },
        events: tx,
    };
    (Arc::new(p), rx)
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

const CLIENT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 40_000);

/// `input` with each `UPSTREAM` replaced by the upstream's address.
fn with_upstream(input: &[u8]) -> Vec<u8> {
    const WORD: &[u8] = b"UPSTREAM";
    let addr = upstream().to_string();
    let mut out = Vec::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.windows(WORD.len()).position(|w| w == WORD) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(addr.as_bytes());
        rest = &rest[i + WORD.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// Serves one HTTP proxy client that sends `input` and then ends its side.
pub fn http(input: &[u8], enforce: bool) -> Replayed {
    let (p, mut rx) = proxy(enforce);
    let input = with_upstream(input);
    let response = runtime().block_on(async move {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let slot = Slot::take(&p).expect("a first slot");
        let served = tokio::spawn(http::serve_io(p.clone(), server, CLIENT, slot));
        let (mut r, mut w) = tokio::io::split(client);
        let send = async move {
            let _ = w.write_all(&input).await;
            let _ = w.shutdown().await;
        };
        let receive = async move {
            let mut out = Vec::new();
            let _ = r.read_to_end(&mut out).await;
            out
        };
        let both = async { tokio::join!(send, receive).1 };
        let out = tokio::time::timeout(DEADLINE, both)
            .await
            .expect("the proxy answered and closed a client within its deadline");
        let _ = tokio::time::timeout(DEADLINE, served).await;
        out
    });
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    Replayed { response, events }
}

/// Answers `input` as a DNS datagram, then as a TCP stream of messages each behind its two-byte
/// length, as the proxy's DNS does.
pub fn dns(input: &[u8], enforce: bool) -> Replayed {
    let (p, mut rx) = proxy(enforce);
    let input = input.to_vec();
    let response = runtime().block_on(async move {
        let work = async {
            let mut out = dns::answer(&p, &input, (CLIENT, Proto::Udp))
                .await
                .unwrap_or_default();
            let mut rest = &input[..];
            while rest.len() >= 2 {
                let n = u16::from_be_bytes([rest[0], rest[1]]) as usize;
                let Some(msg) = rest.get(2..2 + n) else { break };
                let Some(r) = dns::answer(&p, msg, (CLIENT, Proto::Tcp)).await else {
                    break;
                };
                out.extend_from_slice(&(r.len() as u16).to_be_bytes());
                out.extend_from_slice(&r);
                rest = &rest[2 + n..];
            }
            out
        };
        tokio::time::timeout(DEADLINE, work)
            .await
            .expect("the proxy's DNS answered within its deadline")
    });
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    Replayed { response, events }
}
