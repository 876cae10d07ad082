//! The names on the network: what the run's payload records say. A DNS query and its answer
//! make a `dns` row; the answer's addresses name the run's later connections to them; a TLS
//! ClientHello's server name or an HTTP request's host makes a `net` row for the connection it
//! went out on. Messages are parsed with `hickory-proto`, `tls-parser` and `httparse`.

use std::{
    borrow::Cow,
    collections::{HashMap, HashSet, VecDeque},
    net::IpAddr,
};

use aet_ledger::writer::Row;
use hickory_proto::{
    op::{Message, MessageType},
    rr::RData,
};

use aet_proxy::dns::{name_bytes, rcode_name};

/// Queries held for their answers at once; past it, the oldest is written unanswered.
const PENDING_MAX: usize = 4096;
/// Answered queries remembered (a repeated answer makes no second row).
const ANSWERED_MAX: usize = 4096;
/// Addresses remembered with the name they answered.
const RESOLVED_MAX: usize = 65_536;

/// A socket's peer, as its `connect` named it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Peer {
    pub(super) family: Option<&'static str>,
    pub(super) address: Option<Vec<u8>>,
    pub(super) port: Option<u32>,
}

impl Peer {
    pub(super) fn fill(&self, row: &mut Row<'_>) {
        row.net_family = self.family;
        row.net_address = self.address.clone().map(Cow::Owned);
        row.net_port = self.port;
    }
}

/// One DNS question with what its message said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dns {
    pub id: u16,
    pub response: bool,
    pub name: Vec<u8>,
    pub qtype: &'static str,
    pub rcode: &'static str,
    /// The answer section, each `TYPE DATA`.
    pub records: Vec<String>,
    /// The addresses of its A and AAAA records.
    pub addrs: Vec<IpAddr>,
}

fn dns_of(m: &Message) -> Vec<Dns> {
    let response = m.metadata.message_type == MessageType::Response;
    let mut records = Vec::new();
    let mut addrs = Vec::new();
    for r in &m.answers {
        let ty: &'static str = r.record_type().into();
        records.push(format!("{ty} {}", r.data));
        match &r.data {
            RData::A(a) => addrs.push(IpAddr::V4(a.0)),
            RData::AAAA(a) => addrs.push(IpAddr::V6(a.0)),
            _ => {}
        }
    }
    m.queries
        .iter()
        .map(|q| Dns {
            id: m.metadata.id,
            response,
            name: name_bytes(q.name()),
            qtype: q.query_type().into(),
            rcode: rcode_name(m.metadata.response_code),
            records: records.clone(),
            addrs: addrs.clone(),
        })
        .collect()
}

/// The DNS questions of a payload: one message (a datagram), or messages each behind a two-byte
/// length (a TCP stream's).
pub fn dns_messages(b: &[u8]) -> Vec<Dns> {
    if let Ok(m) = Message::from_vec(b) {
        return dns_of(&m);
    }
    let mut out = Vec::new();
    let mut rest = b;
    while rest.len() > 2 {
        let n = u16::from_be_bytes([rest[0], rest[1]]) as usize;
        let Some(msg) = rest.get(2..2 + n) else { break };
        match Message::from_vec(msg) {
            Ok(m) => out.extend(dns_of(&m)),
            Err(_) => break,
        }
        rest = &rest[2 + n..];
    }
    out
}

/// The host an authority names (`host`, `host:port`, `[v6]:port`), without a final dot.
fn authority_host(a: &[u8]) -> Option<Vec<u8>> {
    let host = if let Some(rest) = a.strip_prefix(b"[") {
        &rest[..rest.iter().position(|&c| c == b']')?]
    } else {
        match a.iter().rposition(|&c| c == b':') {
            Some(i) if a[i + 1..].iter().all(u8::is_ascii_digit) => &a[..i],
            _ => a,
        }
    };
    let host = host.strip_suffix(b".").unwrap_or(host);
    (!host.is_empty()).then(|| host.to_vec())
}

/// The host of an HTTP request: its `CONNECT` target, its absolute target's authority, or its
/// `Host` header.
pub fn http_host(b: &[u8]) -> Option<Vec<u8>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let complete = matches!(req.parse(b), Ok(httparse::Status::Complete(_)));
    let (method, target) = (req.method?, req.path?);
    if method.eq_ignore_ascii_case("CONNECT") {
        return authority_host(target.as_bytes());
    }
    if let Some((_, rest)) = target.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        return authority_host(authority.as_bytes());
    }
    if !complete {
        return None;
    }
    req.headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("host"))
        .and_then(|h| authority_host(h.value))
}

/// A query waiting for its answer.
struct Pending {
    row: Row<'static>,
}

/// What the row maker keeps about the run's sockets and names.
#[derive(Default)]
pub(super) struct Names {
    /// Each socket's peer (by inode), from its connect.
    peers: HashMap<u64, Peer>,
    /// Addresses the run's own resolutions returned, with the name asked for.
    resolved: HashMap<IpAddr, Vec<u8>>,
    pending: HashMap<(u64, u16, Vec<u8>), Pending>,
    order: VecDeque<(u64, u16, Vec<u8>)>,
    answered: HashSet<(u64, u16, Vec<u8>)>,
    answered_order: VecDeque<(u64, u16, Vec<u8>)>,
}

impl Names {
    /// A connect of socket `ino` to `peer`.
    pub(super) fn connected(&mut self, ino: u64, peer: Peer) {
        self.peers.insert(ino, peer);
    }

    pub(super) fn peer(&self, ino: u64) -> Option<&Peer> {
        self.peers.get(&ino)
    }

    /// The name the run resolved to this address, if it did.
    pub(super) fn name_of(&self, address: &[u8]) -> Option<&[u8]> {
        let ip: IpAddr = std::str::from_utf8(address).ok()?.parse().ok()?;
        self.resolved.get(&ip).map(Vec::as_slice)
    }

    /// A query sent on socket `ino`: held until its answer. Returns the rows of queries pushed
    /// out unanswered to make room.
    pub(super) fn query(&mut self, ino: u64, q: &Dns, row: Row<'static>) -> Vec<Row<'static>> {
        let key = (ino, q.id, q.name.to_ascii_lowercase());
        let mut out = Vec::new();
        if self.pending.insert(key.clone(), Pending { row }).is_none() {
            self.order.push_back(key);
        }
        while self.pending.len() > PENDING_MAX {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(p) = self.pending.remove(&old) {
                out.push(p.row);
            }
        }
        out
    }

    /// An answer received on socket `ino`: the query's row, completed (or `fallback`, made from
    /// the answer itself, when the query was not seen); `None` for an answer already written.
    pub(super) fn answer(
        &mut self,
        ino: u64,
        a: &Dns,
        fallback: impl FnOnce() -> Row<'static>,
    ) -> Option<Row<'static>> {
        let key = (ino, a.id, a.name.to_ascii_lowercase());
        if self.answered.contains(&key) {
            return None;
        }
        let mut row = match self.pending.remove(&key) {
            Some(p) => {
                self.order.retain(|k| k != &key);
                p.row
            }
            None => fallback(),
        };
        row.dns_rcode = Some(a.rcode);
        row.dns_answers = Some(a.records.clone());
        for ip in &a.addrs {
            if self.resolved.len() < RESOLVED_MAX || self.resolved.contains_key(ip) {
                self.resolved.insert(*ip, a.name.clone());
            }
        }
        self.answered.insert(key.clone());
        self.answered_order.push_back(key);
        while self.answered.len() > ANSWERED_MAX {
            if let Some(old) = self.answered_order.pop_front() {
                self.answered.remove(&old);
            }
        }
        Some(row)
    }

    /// The queries still waiting, in the order they were sent (the run ended without their
    /// answers).
    pub(super) fn unanswered(&mut self) -> Vec<Row<'static>> {
        let mut out = Vec::new();
        for key in std::mem::take(&mut self.order) {
            if let Some(p) = self.pending.remove(&key) {
                out.push(p.row);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::{
        op::{Message, MessageType, OpCode, Query},
        rr::{Name, RData, Record, RecordType, rdata::A},
    };

    use super::*;

    fn query(id: u16, name: &str, ty: RecordType) -> Message {
        let mut m = Message::new(id, MessageType::Query, OpCode::Query);
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), ty));
        m
    }

    #[test]
    fn dns_queries_and_answers_parse_over_udp_and_tcp() {
        let q = query(7, "github.com.", RecordType::A);
        let wire = q.to_vec().unwrap();
        let got = dns_messages(&wire);
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].id, &got[0].name[..], got[0].qtype),
            (7, &b"github.com"[..], "A")
        );
        assert!(!got[0].response);
        let mut a = Message::response(7, OpCode::Query);
        a.add_query(Query::query(
            Name::from_ascii("github.com.").unwrap(),
            RecordType::A,
        ));
        a.add_answer(Record::from_rdata(
            Name::from_ascii("github.com.").unwrap(),
            60,
            RData::A(A::new(140, 82, 112, 3)),
        ));
        let got = dns_messages(&a.to_vec().unwrap());
        assert_eq!(got[0].records, ["A 140.82.112.3"]);
        assert_eq!(got[0].rcode, "NOERROR");
        assert_eq!(got[0].addrs, [IpAddr::from([140, 82, 112, 3])]);
        // TCP: two queries, each behind its length, in one write.
        let mut stream = Vec::new();
        for m in [
            query(1, "pypi.org.", RecordType::A),
            query(2, "pypi.org.", RecordType::AAAA),
        ] {
            let w = m.to_vec().unwrap();
            stream.extend_from_slice(&(w.len() as u16).to_be_bytes());
            stream.extend_from_slice(&w);
        }
        let got = dns_messages(&stream);
        assert_eq!(
            got.iter().map(|d| (d.id, d.qtype)).collect::<Vec<_>>(),
            [(1, "A"), (2, "AAAA")]
        );
        assert!(dns_messages(b"\x00\x02hi").is_empty());
        assert!(dns_messages(b"GET / HTTP/1.1\r\n").is_empty());
    }

    #[test]
    fn http_hosts_come_from_the_target_or_the_host_header() {
        assert_eq!(
            http_host(b"GET /x HTTP/1.1\r\nHost: Example.org:8080\r\nAccept: */*\r\n\r\n"),
            Some(b"Example.org".to_vec())
        );
        assert_eq!(
            http_host(b"CONNECT github.com:443 HTTP/1.1\r\nHost: github.com:443\r\n\r\n"),
            Some(b"github.com".to_vec())
        );
        assert_eq!(
            http_host(b"GET http://user@pypi.org./simple/ HTTP/1.1\r\n"),
            Some(b"pypi.org".to_vec())
        );
        assert_eq!(
            http_host(b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"),
            Some(b"::1".to_vec())
        );
        // A head cut before its end names no Host.
        assert_eq!(http_host(b"GET / HTTP/1.1\r\nHost: a.b"), None);
        assert_eq!(http_host(b"\x16\x03\x01\x00"), None);
        assert_eq!(http_host(b"SSH-2.0-OpenSSH_9.2\r\n"), None);
    }

    #[test]
    fn a_query_row_is_completed_by_its_answer_once() {
        let mut n = Names::default();
        let q = dns_messages(&query(9, "pypi.org.", RecordType::A).to_vec().unwrap()).remove(0);
        let row = Row {
            seq: 1,
            ..Row::default()
        };
        assert!(n.query(5, &q, row).is_empty());
        let mut a = q.clone();
        a.response = true;
        a.records = vec!["A 151.101.0.223".into()];
        a.addrs = vec![IpAddr::from([151, 101, 0, 223])];
        let done = n.answer(5, &a, Row::default).unwrap();
        assert_eq!(done.seq, 1);
        assert_eq!(done.dns_answers.as_deref(), Some(&a.records[..]));
        assert_eq!(n.name_of(b"151.101.0.223"), Some(&b"pypi.org"[..]));
        // A repeated answer makes no second row; an answer never asked for (on this socket)
        // makes one of its own.
        assert!(n.answer(5, &a, Row::default).is_none());
        assert!(n.answer(6, &a, Row::default).is_some());
        assert!(n.unanswered().is_empty());
        n.query(5, &q, Row::default());
        assert_eq!(n.unanswered().len(), 1);
    }
}
