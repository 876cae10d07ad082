//! The network's rows: connects, binds and sends with their addresses, the payloads the
//! programs caught (DNS questions and answers, TLS client hellos), and the proxy's requests.

use super::*;

impl RowMaker {
    /// A socket syscall: its fd, flags and the address, as the process passed it, and the host
    /// the run used for it.
    pub(super) fn net_row<'a>(&mut self, row: &mut Row<'a>, ev: &'a RawEvent<'a>) {
        let h = &ev.header;
        row.fd = Some(h.fd);
        row.set_ret(h.ret);
        if shape_of(ev).flags >= 0 {
            row.flags = Some(h.open_flags);
        }
        let (family, address, port) = sockaddr(ev.path);
        row.net_family = family;
        row.net_port = port;
        if let Some(a) = &address
            && family == Some("unix")
            && a.first() == Some(&b'/')
        {
            // A unix socket's path is a path too: the file rules see it.
            row.path = Some(a.clone().into());
            row.resolved_path = Some(a.clone().into());
            row.resolved_from = Some(ResolvedFrom::Lexical.name());
        }
        let connect = ev.syscall == aet_common::Syscall::Connect;
        if connect
            && (h.ret == 0 || h.ret == -(libc::EINPROGRESS as i64))
            && let Some(ino) = row.ino
        {
            self.names.connected(
                ino,
                Peer {
                    family,
                    address: address.clone(),
                    port,
                },
            );
        }
        if let Some(name) = address.as_deref().and_then(|a| self.names.name_of(a)) {
            row.host = Some(name.to_vec().into());
            row.host_source = Some("dns");
        }
        row.net_address = address.map(Into::into);
    }

    /// The rows a payload record makes: a `dns` row for each answered query (a query waits for
    /// its answer), a `net` row for a connection's first message that names its host (a TLS
    /// ClientHello, an HTTP request), and the `net` row of an addressed `sendmmsg` message.
    pub fn payload(&mut self, ev: &RawEvent<'_>) -> Vec<Row<'static>> {
        use aet_common::{Syscall, payload};
        let h = &ev.header;
        let ino = h.ino;
        let bytes = ev.argv;
        let (family, address, port) = sockaddr(ev.path);
        let named = address.is_some().then_some(Peer {
            family,
            address,
            port,
        });
        let peer = named
            .clone()
            .or_else(|| self.names.peer(ino).cloned())
            .unwrap_or_default();
        let dns = peer.port == Some(53);
        let base = |this: &mut Self, kind: EventKind| {
            let (mut row, _) = this.common(ev, kind);
            row.fd = Some(h.fd);
            row.set_ret(h.ret);
            // The capture bits a payload record sets say how much of the message was read:
            // not the row's.
            row.capture &= !(flags::ARGV_TRUNCATED | flags::IDENTITY);
            peer.fill(&mut row);
            row
        };
        let mut out = Vec::new();
        let addressed_mmsg = ev.syscall == Syscall::Sendmmsg && named.is_some();
        if addressed_mmsg {
            // The send to that address, as an addressed sendto's row.
            let mut row = base(self, EventKind::Net);
            if let Some(name) = peer.address.as_deref().and_then(|a| self.names.name_of(a)) {
                row.host = Some(name.to_vec().into());
                row.host_source = Some("dns");
            }
            out.push(row);
        }
        if dns {
            for m in names::dns_messages(bytes) {
                let mut row = base(self, EventKind::Dns);
                row.host = Some(m.name.clone().into());
                row.host_source = Some("dns");
                row.dns_type = Some(m.qtype);
                if h.aux2 == payload::SEND && !m.response {
                    out.extend(self.names.query(ino, &m, row));
                } else if h.aux2 == payload::RECV
                    && m.response
                    && let Some(row) = self.names.answer(ino, &m, || row)
                {
                    out.push(row);
                }
            }
        } else if h.aux2 == payload::SEND {
            let found = aet_proxy::hello::tls_server_name(bytes)
                .map(|n| (n, "tls"))
                .or_else(|| names::http_host(bytes).map(|n| (n, "http")));
            if let Some((host, source)) = found {
                // (An addressed sendto or sendmsg made its own row already, before this record:
                // the name is a row of its own, as on a connected socket.)
                if addressed_mmsg {
                    let row = out.last_mut().expect("the message's row");
                    row.host = Some(host.into());
                    row.host_source = Some(source);
                } else {
                    let mut row = base(self, EventKind::Net);
                    row.host = Some(host.into());
                    row.host_source = Some(source);
                    row.capture |= capture::PAYLOAD;
                    out.push(row);
                }
            }
        }
        for row in &mut out {
            row.seq = self.next_seq();
        }
        out
    }

    /// The row of a request the run's sandbox proxy forwarded or refused: `host_source`
    /// `proxy`, its `net_decision`, the process that asked (when the proxy found it).
    pub fn proxy_row(&mut self, ev: &aet_proxy::Event) -> Row<'static> {
        use aet_proxy::Request;
        let pid = ev.pid.unwrap_or(0);
        // Its creator from the process table (as its recorded fork says), else its parent then;
        // its name as the proxy read it while it asked (the consumer may not have reached its
        // exec yet), else the table's.
        let known = self.procs.get(&pid).copied();
        let info = ProcInfo {
            ppid: known.map_or(ev.ppid, |k| k.ppid),
            comm: match known {
                Some(k) if ev.comm[0] == 0 => k.comm,
                _ => ev.comm,
            },
        };
        let mut row = Row {
            seq: self.next_seq(),
            ts_ns: self.clock.wall(ev.boot_ns),
            phase: Some(self.phase_at(ev.boot_ns)),
            kind: if ev.request == Request::Dns {
                EventKind::Dns.name()
            } else {
                EventKind::Net.name()
            },
            syscall: None,
            pid,
            tid: pid,
            ppid: info.ppid,
            uid: ev.uid,
            gid: ev.gid,
            comm: info.comm,
            // A connection refused before it asked for anything names no host.
            host: (!ev.host.is_empty()).then(|| ev.host.clone().into()),
            host_source: Some("proxy"),
            net_decision: Some(ev.decision.name()),
            net_reason: ev.reason.map(aet_proxy::Reason::name),
            server_name: ev.server_name.clone().map(Into::into),
            net_port: (ev.port != 0).then_some(u32::from(ev.port)),
            ..Row::default()
        };
        if let Some(up) = ev.upstream {
            row.net_family = Some(if up.is_ipv4() { "inet" } else { "inet6" });
            row.net_address = Some(up.ip().to_string().into_bytes().into());
            row.net_port = Some(u32::from(up.port()));
        }
        if let Some(e) = ev.errno {
            row.set_ret(-i64::from(e));
        }
        if ev.request == Request::Dns {
            row.dns_type = ev.dns_type.as_deref().and_then(dns_name);
            row.dns_rcode = ev.dns_rcode.as_deref().and_then(dns_name);
            row.dns_answers = Some(ev.dns_answers.clone());
        }
        row
    }

    /// The rows of the queries that never had an answer (the run is ending), numbered.
    pub fn unanswered(&mut self) -> Vec<Row<'static>> {
        let mut out = self.names.unanswered();
        for row in &mut out {
            row.seq = self.next_seq();
        }
        out
    }
}

/// A DNS type or response code name as the ledger's vocabulary has it (`OptName` columns hold
/// static names).
fn dns_name(n: &str) -> Option<&'static str> {
    const NAMES: &[&str] = &[
        "A", "AAAA", "CNAME", "MX", "TXT", "NS", "SOA", "PTR", "SRV", "HTTPS", "SVCB", "CAA",
        "ANY", "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "OTHER",
    ];
    NAMES.iter().find(|x| **x == n).copied().or(Some("OTHER"))
}
