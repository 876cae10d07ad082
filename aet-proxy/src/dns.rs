//! The proxy's DNS (hickory-proto messages): queries on the sandbox's `127.0.0.1:53`, UDP and
//! TCP, answered for listed names only (an unlisted one is `REFUSED`, but under `--mode
//! shadow`), with the addresses the configured resolver, or the host's, gives.

use std::{
    net::{IpAddr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicU16, Ordering},
    },
};

use hickory_proto::{
    op::{Message, MessageType, OpCode, Query, ResponseCode},
    rr::{Name, RData, Record, RecordType, rdata},
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Decision, Proxy, Request as Kind, UPSTREAM_TIMEOUT, peer::Proto};

/// A DNS name's exact bytes, without the root's final dot (the ledger's `host`).
pub fn name_bytes(n: &Name) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, label) in n.iter().enumerate() {
        if i > 0 {
            out.push(b'.');
        }
        out.extend_from_slice(label);
    }
    out
}

/// The mnemonic of a response code (the ledger's `dns_rcode`).
pub fn rcode_name(c: ResponseCode) -> &'static str {
    match c {
        ResponseCode::NoError => "NOERROR",
        ResponseCode::FormErr => "FORMERR",
        ResponseCode::ServFail => "SERVFAIL",
        ResponseCode::NXDomain => "NXDOMAIN",
        ResponseCode::NotImp => "NOTIMP",
        ResponseCode::Refused => "REFUSED",
        _ => "OTHER",
    }
}

/// The answer to one query message from `client` (`None`: not a query; nothing is sent).
pub(super) async fn answer(
    p: &Proxy,
    bytes: &[u8],
    client: (SocketAddr, Proto),
) -> Option<Vec<u8>> {
    let req = Message::from_vec(bytes).ok()?;
    if req.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut resp = Message::response(req.metadata.id, req.metadata.op_code);
    resp.metadata.recursion_desired = req.metadata.recursion_desired;
    resp.metadata.recursion_available = true;
    let Some(q) = req.queries.first().cloned() else {
        resp.metadata.response_code = ResponseCode::FormErr;
        return resp.to_vec().ok();
    };
    resp.add_query(q.clone());
    let name = name_bytes(q.name());
    let host = String::from_utf8_lossy(&name).into_owned();
    let decision = p.decide(&name, None);
    let mut ev = p.event(
        Kind::Dns,
        &name,
        53,
        decision,
        &super::Client::new(client.0, client.1),
    );
    ev.dns_type = Some(<&'static str>::from(q.query_type()).to_owned());
    let code = if ev.decision == Decision::Refused {
        ResponseCode::Refused
    } else if matches!(q.query_type(), RecordType::A | RecordType::AAAA) {
        match p.resolve(&host, 0).await {
            Ok(addrs) => {
                for a in addrs {
                    let data = match (a.ip(), q.query_type()) {
                        (IpAddr::V4(v4), RecordType::A) => RData::A(rdata::A(v4)),
                        (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(rdata::AAAA(v6)),
                        _ => continue,
                    };
                    ev.dns_answers.push(format!(
                        "{} {}",
                        <&'static str>::from(q.query_type()),
                        data
                    ));
                    resp.add_answer(Record::from_rdata(q.name().clone(), 60, data));
                }
                ResponseCode::NoError
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ResponseCode::NXDomain,
            Err(_) => ResponseCode::ServFail,
        }
    } else {
        // Other types (HTTPS, MX, TXT, ...): no records, so clients fall back to A/AAAA.
        ResponseCode::NoError
    };
    resp.metadata.response_code = code;
    ev.dns_rcode = Some(rcode_name(code).to_owned());
    p.send(ev);
    resp.to_vec().ok()
}

/// Serves DNS over UDP.
pub(super) async fn serve_udp(p: Arc<Proxy>, sock: Arc<tokio::net::UdpSocket>) {
    let mut buf = vec![0u8; 65_535];
    loop {
        let Ok((n, from)) = sock.recv_from(&mut buf).await else {
            continue;
        };
        let query = buf[..n].to_vec();
        let (p, sock) = (p.clone(), sock.clone());
        tokio::spawn(async move {
            if let Some(r) = answer(&p, &query, (from, Proto::Udp)).await {
                let _ = sock.send_to(&r, from).await;
            }
        });
    }
}

/// Serves DNS over TCP (each message behind its two-byte length).
pub(super) async fn serve_tcp(p: Arc<Proxy>, listener: tokio::net::TcpListener) {
    loop {
        let Ok((mut s, from)) = listener.accept().await else {
            continue;
        };
        let p = p.clone();
        tokio::spawn(async move {
            while let Ok(n) = s.read_u16().await {
                let mut q = vec![0u8; n as usize];
                if s.read_exact(&mut q).await.is_err() {
                    break;
                }
                let Some(r) = answer(&p, &q, (from, Proto::Tcp)).await else {
                    break;
                };
                let len = (r.len() as u16).to_be_bytes();
                if s.write_all(&len).await.is_err() || s.write_all(&r).await.is_err() {
                    break;
                }
            }
        });
    }
}

static NEXT_ID: AtomicU16 = AtomicU16::new(0x5a17);

/// The A and AAAA addresses of `host` as the DNS server `server` answers.
pub(super) async fn lookup(server: SocketAddr, host: &str) -> std::io::Result<Vec<IpAddr>> {
    let name = Name::from_ascii(format!("{host}."))
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let bind: SocketAddr = if server.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = tokio::net::UdpSocket::bind(bind).await?;
    sock.connect(server).await?;
    let mut out = Vec::new();
    let mut nx = 0;
    for ty in [RecordType::A, RecordType::AAAA] {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let mut m = Message::new(id, MessageType::Query, OpCode::Query);
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(name.clone(), ty));
        let wire = m.to_vec().map_err(std::io::Error::other)?;
        sock.send(&wire).await?;
        let mut buf = vec![0u8; 65_535];
        let n = tokio::time::timeout(UPSTREAM_TIMEOUT, async {
            loop {
                let n = sock.recv(&mut buf).await?;
                if n >= 2 && u16::from_be_bytes([buf[0], buf[1]]) == id {
                    return Ok::<_, std::io::Error>(n);
                }
            }
        })
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        let r = Message::from_vec(&buf[..n]).map_err(std::io::Error::other)?;
        if r.metadata.response_code == ResponseCode::NXDomain {
            nx += 1;
        }
        for rec in &r.answers {
            match &rec.data {
                RData::A(a) => out.push(IpAddr::V4(a.0)),
                RData::AAAA(a) => out.push(IpAddr::V6(a.0)),
                _ => {}
            }
        }
    }
    if out.is_empty() && nx > 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{host}: NXDOMAIN"),
        ));
    }
    Ok(out)
}
