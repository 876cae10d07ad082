//! The sandbox's way out by host (`network = { hosts = [...] }`): the sandbox has a network
//! namespace of its own with only loopback, and aet listens on that loopback from outside (its
//! sockets are made in the namespace, then served from aet's own): DNS on port 53 for the
//! listed names only, an HTTP proxy on port 3128 that tunnels `CONNECT` and forwards plain HTTP
//! to listed hosts only. Every request it forwards or refuses is an event the run's ledger
//! records (`host_source = "proxy"`, `net_decision`). An unlisted host is refused, as the
//! spec's view is applied, whatever the mode; under `--mode shadow` it is forwarded and
//! recorded as `would_refuse` (the way a list is tried before it is enforced).

pub mod dns;
pub mod hello;
mod http;
mod peer;
pub mod replay;
pub mod rules;

use std::{
    net::{IpAddr, SocketAddr},
    os::fd::OwnedFd,
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::UnboundedSender;

pub use rules::{Reason, Rules};

/// The proxy's port on the sandbox's loopback.
pub const HTTP_PORT: u16 = 3128;
/// The proxy's URL, as the command's `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` give it.
pub const URL: &str = "http://127.0.0.1:3128";
/// What the sandbox's `/etc/resolv.conf` says.
pub const RESOLV_CONF: &str = "nameserver 127.0.0.1\noptions attempts:1 timeout:5\n";
/// Most time one upstream connection or lookup may take.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a tunnel's client has to send its first bytes before the tunnel's row goes out
/// (a protocol whose server speaks first); its bytes are checked whenever they come.
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_millis(500);

/// What the proxy did with a request.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// A listed host: forwarded.
    Allowed,
    /// An unlisted host, refused.
    Refused,
    /// An unlisted host, forwarded (`--mode shadow`): enforce would have refused it.
    WouldRefuse,
}

impl Decision {
    /// The ledger's `net_decision`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Refused => "refused",
            Self::WouldRefuse => "would_refuse",
        }
    }
}

/// What kind of request.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// An HTTP `CONNECT` tunnel (HTTPS, and anything else over TCP).
    Connect,
    /// A plain HTTP request forwarded.
    Http,
    /// A DNS query answered.
    Dns,
}

/// One request the proxy forwarded or refused: a ledger row.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Event {
    /// `CLOCK_BOOTTIME` when the request came (the kernel's clock, as rows have it).
    pub boot_ns: u64,
    pub request: Request,
    /// The host as the request named it.
    pub host: Vec<u8>,
    pub port: u16,
    pub decision: Decision,
    /// Why it was refused (or would be, under shadow).
    pub reason: Option<Reason>,
    /// The run's process that asked, when the proxy could tell (its socket's owner).
    pub pid: Option<u32>,
    /// Its parent and name as `/proc` said while it held the socket.
    pub ppid: u32,
    pub comm: [u8; 16],
    pub uid: u32,
    pub gid: u32,
    /// The address the proxy reached (forwarded requests).
    pub upstream: Option<SocketAddr>,
    /// A tunnel's TLS server name, when it is not the `CONNECT` host.
    pub server_name: Option<Vec<u8>>,
    /// Why a forwarded request failed (`ECONNREFUSED`, ...): an errno name.
    pub errno: Option<i32>,
    /// A DNS query's type, answer code and records.
    pub dns_type: Option<String>,
    pub dns_rcode: Option<String>,
    pub dns_answers: Vec<String>,
}

/// What the proxy is started with.
pub struct Config {
    /// The spec's `network.hosts`.
    pub rules: Rules,
    /// Refuse unlisted hosts (every mode but shadow); else forward them and say so.
    pub enforce: bool,
    /// The DNS server the proxy asks (default: the host's resolver).
    pub resolver: Option<SocketAddr>,
    /// The run's cgroup: whose processes' sockets name the client of a request.
    pub cgroup: PathBuf,
    /// Most connections open through the proxy at once (tunnels included).
    pub max_connections: usize,
    /// How long a client has to send its request.
    pub client_timeout: Duration,
    /// How long a tunnel may carry no byte either way before it is closed.
    pub idle_timeout: Duration,
}

/// The running proxy's shared state.
struct Shared {
    /// The inode of the sandbox's network namespace.
    netns: u64,
    /// Connections and tunnels open now.
    open: std::sync::atomic::AtomicUsize,
}

/// One open connection or tunnel of [`Shared::open`], counted while it lives.
pub(crate) struct Slot(Arc<Proxy>);

impl Slot {
    /// A slot, unless the run has as many open as it may.
    fn take(p: &Arc<Proxy>) -> Option<Self> {
        use std::sync::atomic::Ordering::SeqCst;
        let open = &p.shared.open;
        let mut n = open.load(SeqCst);
        loop {
            if n >= p.cfg.max_connections {
                return None;
            }
            match open.compare_exchange(n, n + 1, SeqCst, SeqCst) {
                Ok(_) => return Some(Self(p.clone())),
                Err(now) => n = now,
            }
        }
    }

    /// Another slot for what outlives this one (a tunnel its connection handed over): counted
    /// even past the cap, as it is the same client's.
    fn again(&self) -> Self {
        self.0
            .shared
            .open
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(self.0.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0
            .shared
            .open
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The sandbox's end of a connection to the proxy (or of a DNS datagram), and the run's process
/// that owns it, looked up in `/proc` at its first request: once a connection, not once a
/// request (a keep-alive client's thousands of requests would each scan the namespace's
/// socket tables).
pub(crate) struct Client {
    addr: SocketAddr,
    proto: peer::Proto,
    owner: std::sync::OnceLock<Option<peer::Owner>>,
}

impl Client {
    fn new(addr: SocketAddr, proto: peer::Proto) -> Self {
        Self {
            addr,
            proto,
            owner: std::sync::OnceLock::new(),
        }
    }
}

/// The proxy.
pub(crate) struct Proxy {
    cfg: Config,
    shared: Shared,
    events: UnboundedSender<Event>,
}

/// The kernel's boot-time clock now.
pub(crate) fn boot_now() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

impl Proxy {
    /// What the proxy does with a request for `host:port` (`None`: a DNS question, judged by
    /// the name alone).
    fn decide(&self, host: &[u8], port: Option<u16>) -> (Decision, Option<Reason>) {
        let verdict = match port {
            Some(port) => self.cfg.rules.check(host, port),
            None if self.cfg.rules.names(host) => Ok(()),
            None => Err(Reason::HostNotListed),
        };
        match verdict {
            Ok(()) => (Decision::Allowed, None),
            Err(r) => (self.refusal(), Some(r)),
        }
    }

    /// What a refusal is in this mode: refused, or forwarded and recorded (`--mode shadow`).
    fn refusal(&self) -> Decision {
        if self.cfg.enforce {
            Decision::Refused
        } else {
            Decision::WouldRefuse
        }
    }

    /// A new event of a request from `client` (the sandbox's side of its connection).
    fn event(
        &self,
        request: Request,
        host: &[u8],
        port: u16,
        (decision, reason): (Decision, Option<Reason>),
        client: &Client,
    ) -> Event {
        let who = *client.owner.get_or_init(|| {
            peer::owner(
                &self.cfg.cgroup,
                self.shared.netns,
                client.addr,
                client.proto,
            )
        });
        Event {
            boot_ns: boot_now(),
            request,
            host: host.to_vec(),
            port,
            decision,
            reason,
            pid: who.map(|w| w.pid),
            ppid: who.map_or(0, |w| w.ppid),
            comm: who.map_or([0; 16], |w| w.comm),
            uid: who.map_or(0, |w| w.uid),
            gid: who.map_or(0, |w| w.gid),
            upstream: None,
            server_name: None,
            errno: None,
            dns_type: None,
            dns_rcode: None,
            dns_answers: Vec::new(),
        }
    }

    fn send(&self, e: Event) {
        let _ = self.events.send(e);
    }

    /// The addresses of `host` (an IP address is itself), through the configured resolver or
    /// the host's.
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        let h = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = h.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let found = match self.cfg.resolver {
            Some(server) => dns::lookup(server, h).await?,
            None => tokio::time::timeout(UPSTREAM_TIMEOUT, tokio::net::lookup_host((h, port)))
                .await
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??
                .map(|a| a.ip())
                .collect(),
        };
        if found.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{host} has no address"),
            ));
        }
        Ok(found
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect())
    }

    /// A connection to `host:port`, to an address the rules let the proxy reach: the addresses
    /// checked are the ones connected to. An internal address no entry lists refuses the
    /// request (enforce) or is recorded on `ev` and reached (shadow).
    async fn connect(&self, host: &str, port: u16, ev: &mut Event) -> Reach {
        let addrs = match self.resolve(host, port).await {
            Ok(a) => a,
            Err(e) => return Reach::Failed(e),
        };
        let (mut ok, refused) = rules::reachable_of(&self.cfg.rules, addrs.clone());
        if ok.is_empty()
            && let Some(a) = refused
        {
            // Under shadow a request already refused keeps its first reason.
            ev.decision = self.refusal();
            ev.reason.get_or_insert(Reason::InternalAddress);
            ev.upstream = Some(a);
            if self.cfg.enforce {
                return Reach::Refused;
            }
            ok = addrs;
        }
        match tokio::time::timeout(UPSTREAM_TIMEOUT, tokio::net::TcpStream::connect(&ok[..])).await
        {
            Ok(Ok(s)) => Reach::Connected(s),
            Ok(Err(e)) => Reach::Failed(e),
            Err(_) => Reach::Failed(std::io::Error::from(std::io::ErrorKind::TimedOut)),
        }
    }
}

/// What came of reaching a request's host.
enum Reach {
    Connected(tokio::net::TcpStream),
    /// Every address was internal and unlisted (the event names the first).
    Refused,
    Failed(std::io::Error),
}

/// The listening sockets of the proxy, made inside the sandbox's network namespace.
struct Listeners {
    http: std::net::TcpListener,
    dns_udp: std::net::UdpSocket,
    dns_tcp: std::net::TcpListener,
}

/// Makes the proxy's sockets on the loopback of the network namespace `netns` (in a thread
/// that enters it and ends: aet's own threads stay in aet's namespace).
fn listen_in(netns: OwnedFd) -> std::io::Result<Listeners> {
    std::thread::Builder::new()
        .name("aet-proxy-ns".into())
        .spawn(move || {
            nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(std::io::Error::from)?;
            let lo = |port| SocketAddr::from(([127, 0, 0, 1], port));
            let l = Listeners {
                http: std::net::TcpListener::bind(lo(HTTP_PORT))?,
                dns_udp: std::net::UdpSocket::bind(lo(53))?,
                dns_tcp: std::net::TcpListener::bind(lo(53))?,
            };
            l.http.set_nonblocking(true)?;
            l.dns_udp.set_nonblocking(true)?;
            l.dns_tcp.set_nonblocking(true)?;
            Ok(l)
        })?
        .join()
        .map_err(|_| std::io::Error::other("the proxy's namespace thread panicked"))?
}

/// Starts the proxy in the sandbox's network namespace `netns`; its events go to `events`.
/// Runs on the current tokio runtime until it ends.
pub fn start(netns: OwnedFd, cfg: Config, events: UnboundedSender<Event>) -> std::io::Result<()> {
    let ino = {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::File::from(netns.try_clone()?).metadata()?.ino()
    };
    let l = listen_in(netns)?;
    let proxy = Arc::new(Proxy {
        cfg,
        shared: Shared {
            netns: ino,
            open: std::sync::atomic::AtomicUsize::new(0),
        },
        events,
    });
    let http = tokio::net::TcpListener::from_std(l.http)?;
    let udp = Arc::new(tokio::net::UdpSocket::from_std(l.dns_udp)?);
    let tcp = tokio::net::TcpListener::from_std(l.dns_tcp)?;
    tokio::spawn(http::serve(proxy.clone(), http));
    tokio::spawn(dns::serve_udp(proxy.clone(), udp));
    tokio::spawn(dns::serve_tcp(proxy, tcp));
    Ok(())
}

/// The command's environment variables that point it at the proxy.
pub fn env() -> Vec<(String, String)> {
    let mut v = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        v.push((name.to_owned(), URL.to_owned()));
        v.push((name.to_ascii_lowercase(), URL.to_owned()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        v.push((name.to_owned(), "localhost,127.0.0.1,::1".to_owned()));
    }
    v
}

#[cfg(test)]
mod floors {
    /// The floors of this crate's modules, from the bottom up (what the crate root defines is
    /// below them all).
    const FLOORS: &[&[&str]] = &[&["hello", "peer", "rules"], &["dns", "http"], &["replay"]];

    #[test]
    fn layers_point_one_way() {
        aet_checks::layers::assert_floors(env!("CARGO_MANIFEST_DIR"), FLOORS);
    }
}
