//! What the proxy lets through: the spec's `network.hosts`, each entry a host pattern with the
//! ports it may be reached on, or an address or network the listed names may resolve into.
//!
//! - `NAME`, `*.NAME`, `*`: that name (names below it, every name) on ports 80 and 443;
//! - `NAME:PORT` (`pypi.org:443`, `mirror.internal:8080`): that port only; `NAME:*` any port;
//! - an IP address (`10.1.2.3`, `[fd00::5]:8443`): that address as a host, and an address the
//!   listed names may resolve to although it is internal;
//! - a network (`10.0.0.0/8`, `fd00::/8`): addresses the listed names may resolve into.
//!
//! A name that resolves to a loopback, link-local (the cloud metadata service at
//! 169.254.169.254 among them), private, shared, multicast or otherwise non-global address is
//! refused unless that address or a network holding it is listed: an allowed name must not be a
//! way to the host's own services or the provider's. The addresses checked are the ones the
//! proxy then connects to (no second resolution between the check and the connect).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use aet_ledger::hosts::{self, HostSet};
use ipnet::IpNet;

/// Ports a name is reached on when its entry names none.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// Why the proxy refused a request (the ledger's `net_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// No entry names the host.
    HostNotListed,
    /// An entry names the host, none with this port.
    PortNotListed,
    /// The host resolved only to internal addresses that no entry lists.
    InternalAddress,
    /// A tunnel's TLS server name is not its `CONNECT` host.
    ServerNameMismatch,
    /// A tunnel's client began a TLS handshake whose server name could not be read (a hello
    /// that is not one, or that did not end within the first 16 KiB).
    ServerNameUnreadable,
    /// The run already had as many connections open through the proxy as it may.
    ConnectionCap,
    /// The client sent nothing, or too slowly, within the proxy's time.
    ClientTimeout,
}

impl Reason {
    /// The ledger's `net_reason`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::HostNotListed => "host_not_listed",
            Self::PortNotListed => "port_not_listed",
            Self::InternalAddress => "internal_address",
            Self::ServerNameMismatch => "server_name_mismatch",
            Self::ServerNameUnreadable => "server_name_unreadable",
            Self::ConnectionCap => "connection_cap",
            Self::ClientTimeout => "client_timeout",
        }
    }
}

/// Which ports an entry allows.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Ports {
    Default,
    One(u16),
    Any,
}

impl Ports {
    fn allows(&self, port: u16) -> bool {
        match self {
            Self::Default => DEFAULT_PORTS.contains(&port),
            Self::One(p) => *p == port,
            Self::Any => true,
        }
    }
}

/// One host entry.
#[derive(Clone, Debug)]
struct HostEntry {
    set: HostSet,
    ports: Ports,
}

/// The proxy's rules, compiled from `network.hosts`.
#[derive(Clone, Debug)]
pub struct Rules {
    hosts: Vec<HostEntry>,
    /// Addresses and networks the names may resolve into (internal ones included).
    nets: Vec<IpNet>,
    /// The entries as written.
    pub entries: Vec<String>,
}

/// Splits `NAME:PORT`, `[V6]:PORT`, `NAME:*` into the host and its ports.
fn split_port(entry: &str) -> Result<(&str, Ports), String> {
    let bad_port = |p: &str| format!("{entry:?}: {p:?} is not a port (1-65535 or *)");
    let port = |p: &str| -> Result<Ports, String> {
        if p == "*" {
            return Ok(Ports::Any);
        }
        match p.parse::<u16>() {
            Ok(n) if n > 0 => Ok(Ports::One(n)),
            _ => Err(bad_port(p)),
        }
    };
    if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("{entry:?}: an IPv6 address in [ ] lacks its ]"))?;
        return match after.strip_prefix(':') {
            Some(p) => Ok((host, port(p)?)),
            None if after.is_empty() => Ok((host, Ports::Default)),
            None => Err(format!("{entry:?}: expected [ADDRESS]:PORT")),
        };
    }
    // A bare IPv6 address has colons of its own.
    if entry.parse::<Ipv6Addr>().is_ok() {
        return Ok((entry, Ports::Default));
    }
    match entry.rsplit_once(':') {
        Some((h, p)) => Ok((h, port(p)?)),
        None => Ok((entry, Ports::Default)),
    }
}

impl Rules {
    /// Compiles `entries`; an error names the first bad one (its index and the problem).
    pub fn new<S: AsRef<str>>(entries: &[S]) -> Result<Self, String> {
        let mut rules = Self {
            hosts: Vec::new(),
            nets: Vec::new(),
            entries: Vec::new(),
        };
        for (i, e) in entries.iter().enumerate() {
            let e = e.as_ref().trim();
            rules
                .add(e)
                .map_err(|m| format!("network.hosts[{i}]: {m}"))?;
            rules.entries.push(e.to_owned());
        }
        Ok(rules)
    }

    fn add(&mut self, e: &str) -> Result<(), String> {
        if e.contains('/') {
            let net: IpNet = e.parse().map_err(|_| {
                format!("{e:?} is not a network (ADDRESS/PREFIX, e.g. 10.0.0.0/8 or fd00::/8)")
            })?;
            self.nets.push(net.trunc());
            return Ok(());
        }
        let (host, ports) = split_port(e)?;
        if host.is_empty() {
            return Err(format!("{e:?} names no host"));
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            self.nets.push(IpNet::from(ip));
        }
        let set = HostSet::new(&[host]).map_err(|m| {
            format!("{m}; entries are NAME, *.NAME, *, an IP address, each with an optional :PORT or :*, or a network ADDRESS/PREFIX")
        })?;
        self.hosts.push(HostEntry { set, ports });
        Ok(())
    }

    /// Whether a DNS name may be answered (an entry names it, on any port).
    pub fn names(&self, host: &[u8]) -> bool {
        self.hosts.iter().any(|h| h.set.matches(host))
    }

    /// Whether `host:port` may be asked for; the reason when not.
    pub fn check(&self, host: &[u8], port: u16) -> Result<(), Reason> {
        let mut named = false;
        for h in self.hosts.iter().filter(|h| h.set.matches(host)) {
            named = true;
            if h.ports.allows(port) {
                return Ok(());
            }
        }
        Err(if named {
            Reason::PortNotListed
        } else {
            Reason::HostNotListed
        })
    }

    /// Whether an address a name resolved to may be connected to: a global address, or one
    /// an entry lists.
    pub fn reachable(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        !internal(ip) || self.nets.iter().any(|n| n.contains(&ip))
    }
}

/// An IPv4 address mapped or translated into IPv6 as itself.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return IpAddr::V4(v4);
            }
            let s = v6.segments();
            // NAT64 (64:ff9b::/96) carries the IPv4 address in its last 32 bits.
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let o = v6.octets();
                return IpAddr::V4(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
            }
            ip
        }
        v4 => v4,
    }
}

/// Whether an address is not a global unicast one: what a name on the internet should never
/// lead the proxy to.
pub fn internal(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(a) => {
            let [o0, o1, o2, _] = a.octets();
            a.is_unspecified()
                || o0 == 0 // "this network"
                || a.is_loopback()
                || a.is_private()
                || a.is_link_local() // 169.254/16, the metadata service
                || (o0 == 100 && (o1 & 0xc0) == 64) // shared address space, 100.64/10
                || (o0 == 192 && o1 == 0 && o2 == 0) // IETF protocol assignments
                || (o0 == 198 && (o1 & 0xfe) == 18) // benchmarking, 198.18/15
                || a.is_multicast()
                || o0 >= 240 // reserved and broadcast
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            a.is_unspecified()
                || a.is_loopback()
                || (s[0] & 0xfe00) == 0xfc00 // unique local, fc00::/7
                || (s[0] & 0xffc0) == 0xfe80 // link local, fe80::/10
                || (s[0] & 0xffc0) == 0xfec0 // site local (deprecated), fec0::/10
                || a.is_multicast()
        }
    }
}

/// The addresses of `addrs` the proxy may connect to, and whether any was left out as internal.
pub fn reachable_of(
    rules: &Rules,
    addrs: Vec<SocketAddr>,
) -> (Vec<SocketAddr>, Option<SocketAddr>) {
    let mut refused = None;
    let ok = addrs
        .into_iter()
        .filter(|a| {
            let r = rules.reachable(a.ip());
            if !r && refused.is_none() {
                refused = Some(*a);
            }
            r
        })
        .collect();
    (ok, refused)
}

/// Whether a TLS server name is the host a tunnel was asked for (no case, no final dot).
pub fn same_host(a: &[u8], b: &[u8]) -> bool {
    hosts::normalize(a) == hosts::normalize(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(e: &[&str]) -> Rules {
        Rules::new(e).unwrap()
    }

    #[test]
    fn a_name_without_a_port_is_reached_on_80_and_443_only() {
        let r = rules(&["allowed.test"]);
        assert_eq!(r.check(b"allowed.test", 443), Ok(()));
        assert_eq!(r.check(b"Allowed.Test.", 80), Ok(()));
        assert_eq!(r.check(b"allowed.test", 8099), Err(Reason::PortNotListed));
        assert_eq!(r.check(b"other.test", 443), Err(Reason::HostNotListed));
        assert!(r.names(b"allowed.test"));
    }

    #[test]
    fn ports_per_entry() {
        let r = rules(&[
            "pypi.org:443",
            "mirror.internal:8080",
            "*.dev.test:*",
            "[fd00::5]:8443",
        ]);
        assert_eq!(r.check(b"pypi.org", 443), Ok(()));
        assert_eq!(r.check(b"pypi.org", 80), Err(Reason::PortNotListed));
        assert_eq!(r.check(b"mirror.internal", 8080), Ok(()));
        assert_eq!(r.check(b"mirror.internal", 443), Err(Reason::PortNotListed));
        assert_eq!(r.check(b"a.dev.test", 5432), Ok(()));
        assert_eq!(r.check(b"fd00::5", 8443), Ok(()));
        assert!(r.reachable("fd00::5".parse().unwrap()));
    }

    #[test]
    fn bad_entries_are_named() {
        for (e, want) in [
            ("pypi.org:0", "is not a port"),
            ("pypi.org:http", "is not a port"),
            ("10.0.0.0/33", "is not a network"),
            ("[fd00::5", "lacks its ]"),
            (":443", "names no host"),
            ("bad host", "is not a host name"),
        ] {
            let err = Rules::new(&["ok.test", e]).unwrap_err();
            assert!(err.starts_with("network.hosts[1]: "), "{e}: {err}");
            assert!(err.contains(want), "{e}: {err}");
        }
    }

    #[test]
    fn internal_addresses_are_refused_unless_listed() {
        let r = rules(&["allowed.test"]);
        for a in [
            "127.0.0.1",
            "127.8.9.10",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "198.18.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd12:3456::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "ff02::1",
        ] {
            assert!(!r.reachable(a.parse().unwrap()), "{a} should be internal");
        }
        for a in [
            "93.184.215.14",
            "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
            "::ffff:8.8.8.8",
        ] {
            assert!(r.reachable(a.parse().unwrap()), "{a} is global");
        }
        let listed = rules(&["mirror.internal", "10.0.0.0/8", "127.0.0.1"]);
        assert!(listed.reachable("10.20.30.40".parse().unwrap()));
        assert!(listed.reachable("127.0.0.1".parse().unwrap()));
        assert!(listed.reachable("::ffff:10.0.0.1".parse().unwrap()));
        assert!(!listed.reachable("127.0.0.2".parse().unwrap()));
        assert!(!listed.reachable("169.254.169.254".parse().unwrap()));
    }

    #[test]
    fn the_refused_address_is_named_and_the_rest_kept() {
        let r = rules(&["allowed.test"]);
        let a: SocketAddr = "127.0.0.1:443".parse().unwrap();
        let b: SocketAddr = "93.184.215.14:443".parse().unwrap();
        assert_eq!(reachable_of(&r, vec![a, b]), (vec![b], Some(a)));
        assert_eq!(reachable_of(&r, vec![a]), (vec![], Some(a)));
    }
}
