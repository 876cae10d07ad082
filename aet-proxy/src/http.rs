//! The HTTP proxy (hyper): `CONNECT host:port` tunnels to listed hosts, and plain HTTP requests
//! with an absolute URL forwarded to them, one request at a time (a connection that asks for
//! another host with its next request is judged again).

use std::{net::SocketAddr, sync::Arc};

use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header::{self, HeaderValue},
    service::service_fn,
};
use hyper_util::rt::TokioIo;

use super::{
    Client, Decision, Proxy, Reach, Request as Kind, Slot, hello::Hello, peer::Proto, rules::Reason,
};

type Body = BoxBody<Bytes, hyper::Error>;

fn text(status: StatusCode, msg: String) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(msg + "\n"))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn refused(host: &str, port: u16, reason: Option<Reason>) -> Response<Body> {
    let why = match reason {
        Some(Reason::PortNotListed) => "is not a port the sandbox's network hosts list for it",
        Some(Reason::InternalAddress) => {
            "resolves only to internal addresses the sandbox's network hosts do not list"
        }
        _ => "is not one of the sandbox's network hosts",
    };
    text(StatusCode::FORBIDDEN, format!("aet: {host}:{port} {why}"))
}

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(match e.kind() {
        std::io::ErrorKind::TimedOut => libc::ETIMEDOUT,
        std::io::ErrorKind::NotFound => libc::EHOSTUNREACH,
        _ => libc::EIO,
    })
}

/// Serves the proxy's listener. A connection past the run's cap, or one whose client sends no
/// byte within the client timeout, is answered (503, 408), closed and a row; a head that takes
/// longer than the timeout to arrive is closed by hyper.
pub(super) async fn serve(p: Arc<Proxy>, listener: tokio::net::TcpListener) {
    loop {
        let Ok((stream, client)) = listener.accept().await else {
            continue;
        };
        let p = p.clone();
        let slot = Slot::take(&p);
        tokio::spawn(async move {
            let Some(slot) = slot else {
                refuse_connection(&p, stream, client, Reason::ConnectionCap).await;
                return;
            };
            let mut first = [0u8; 1];
            match tokio::time::timeout(p.cfg.client_timeout, stream.peek(&mut first)).await {
                Ok(Ok(n)) if n > 0 => {}
                // Closed before a byte: nothing was asked.
                Ok(_) => return,
                Err(_) => {
                    // Its slot is free before the client hears why (a client that reconnects
                    // at once is not refused for the one it gave up).
                    drop(slot);
                    refuse_connection(&p, stream, client, Reason::ClientTimeout).await;
                    return;
                }
            }
            serve_io(p, stream, client, slot).await;
        });
    }
}

/// Serves one client connection that has sent its first byte (a TCP stream from the listener,
/// or an in-process stream: [`super::replay`]), its requests one at a time.
pub(super) async fn serve_io<S>(p: Arc<Proxy>, stream: S, client: SocketAddr, slot: Slot)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let slot = Arc::new(slot);
    let client = Arc::new(Client::new(client, Proto::Tcp));
    let svc = {
        let p = p.clone();
        service_fn(move |req| handle(p.clone(), client.clone(), req, slot.clone()))
    };
    let _ = hyper::server::conn::http1::Builder::new()
        .preserve_header_case(true)
        .title_case_headers(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(p.cfg.client_timeout)
        // A client that ends its side after its last request (`printf ... | nc`) still hears
        // every answer, pipelined requests included.
        .half_close(true)
        .serve_connection(TokioIo::new(stream), svc)
        .with_upgrades()
        .await;
}

/// Answers a connection the proxy does not serve, closes it, and records why.
async fn refuse_connection(
    p: &Proxy,
    mut stream: tokio::net::TcpStream,
    client: SocketAddr,
    reason: Reason,
) {
    use tokio::io::AsyncWriteExt as _;
    let ev = p.event(
        Kind::Http,
        b"",
        0,
        (Decision::Refused, Some(reason)),
        &Client::new(client, Proto::Tcp),
    );
    let (status, why) = match reason {
        Reason::ConnectionCap => (
            "503 Service Unavailable",
            format!(
                "aet: the run has {} connections open through the proxy, as many as it may",
                p.cfg.max_connections
            ),
        ),
        _ => (
            "408 Request Timeout",
            format!(
                "aet: no request came within {:.1} s",
                p.cfg.client_timeout.as_secs_f64()
            ),
        ),
    };
    p.send(ev);
    let body = why + "\n";
    let msg = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(p.cfg.client_timeout, stream.write_all(msg.as_bytes())).await;
    let _ = stream.shutdown().await;
}

async fn handle(
    p: Arc<Proxy>,
    client: Arc<Client>,
    req: Request<Incoming>,
    slot: Arc<Slot>,
) -> Result<Response<Body>, hyper::Error> {
    if req.method() == Method::CONNECT {
        return Ok(tunnel(p, client, req, slot.again()).await);
    }
    forward(p, client, req).await
}

/// `CONNECT host:port`.
async fn tunnel(
    p: Arc<Proxy>,
    client: Arc<Client>,
    req: Request<Incoming>,
    slot: Slot,
) -> Response<Body> {
    let Some(auth) = req.uri().authority().cloned() else {
        return text(
            StatusCode::BAD_REQUEST,
            "aet: CONNECT needs HOST:PORT".into(),
        );
    };
    let host = auth
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = auth.port_u16().unwrap_or(443);
    let decision = p.decide(host.as_bytes(), Some(port));
    let mut ev = p.event(Kind::Connect, host.as_bytes(), port, decision, &client);
    if ev.decision == Decision::Refused {
        let reason = ev.reason;
        p.send(ev);
        return refused(&host, port, reason);
    }
    match p.connect(&host, port, &mut ev).await {
        Reach::Connected(upstream) => {
            ev.upstream = upstream.peer_addr().ok();
            tokio::spawn(async move {
                // The tunnel holds its own slot: its connection's goes when hyper hands it over.
                let _slot = slot;
                match hyper::upgrade::on(req).await {
                    Ok(up) => splice(p, ev, host, TokioIo::new(up), upstream).await,
                    // The client left before its tunnel opened: the request is still a row.
                    Err(_) => p.send(ev),
                }
            });
            Response::new(
                Full::new(Bytes::new())
                    .map_err(|never| match never {})
                    .boxed(),
            )
        }
        Reach::Refused => {
            let reason = ev.reason;
            p.send(ev);
            refused(&host, port, reason)
        }
        Reach::Failed(e) => {
            ev.errno = Some(errno_of(&e));
            p.send(ev);
            text(
                StatusCode::BAD_GATEWAY,
                format!("aet: cannot reach {host}:{port}: {e}"),
            )
        }
    }
}

/// Most bytes of a tunnel's first flight read to find its TLS server name (a ClientHello with
/// post-quantum key shares is about 1,800 bytes).
const FIRST_FLIGHT: usize = 16 * 1024;

/// What a client's first bytes say about the tunnel they go through: a reason to refuse it, and
/// the server name to record; `None` when there is none (not TLS, or a hello naming the host or
/// no name at all). A TLS hello that cannot be read, or that does not end within the first
/// flight, is refused: its name could not be checked.
fn judge_first(bytes: &[u8], host: &str, full: bool) -> Option<Option<(Reason, Option<Vec<u8>>)>> {
    Some(match super::hello::client_hello(bytes) {
        Hello::Incomplete if !full => return None,
        Hello::NotTls | Hello::Hello(None) => None,
        Hello::Hello(Some(name)) if super::rules::same_host(&name, host.as_bytes()) => None,
        Hello::Hello(Some(name)) => Some((Reason::ServerNameMismatch, Some(name))),
        Hello::Incomplete | Hello::Unreadable => Some((Reason::ServerNameUnreadable, None)),
    })
}

/// A tunnel whose client's first bytes are still to be checked.
struct Pending {
    /// The client's bytes so far, held back from the server.
    bytes: Vec<u8>,
    /// The tunnel's request, the row a refusal starts from.
    ev: super::Event,
    host: String,
}

/// Carries a tunnel once its client's first bytes are known: when they are a TLS ClientHello
/// whose server name is not the `CONNECT` host (or one that cannot be read), the tunnel's row
/// says so and, under enforce, it is closed before a byte reaches the server. A client that
/// says nothing at first (a protocol whose server speaks first) has its row sent at once and
/// its first bytes checked whenever they come: a refusal then is a row of its own.
async fn splice<C>(
    p: Arc<Proxy>,
    mut ev: super::Event,
    host: String,
    mut client: C,
    upstream: tokio::net::TcpStream,
) where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncReadExt as _;
    let mut first = vec![0u8; FIRST_FLIGHT];
    let mut have = 0;
    let verdict = loop {
        let read =
            tokio::time::timeout(super::FIRST_BYTES_TIMEOUT, client.read(&mut first[have..])).await;
        match read {
            Ok(Ok(0)) | Ok(Err(_)) => {
                p.send(ev);
                return;
            }
            Ok(Ok(n)) => have += n,
            Err(_) => break None,
        }
        if let Some(v) = judge_first(&first[..have], &host, have >= FIRST_FLIGHT) {
            break Some(v);
        }
    };
    first.truncate(have);
    let pending = match verdict {
        Some(refusal) => {
            if let Some((reason, name)) = refusal {
                ev.reason = Some(reason);
                ev.decision = p.refusal();
                ev.server_name = name;
            }
            let refused = ev.decision == Decision::Refused;
            p.send(ev);
            if refused {
                return;
            }
            Err(first)
        }
        None => {
            p.send(ev.clone());
            Ok(Pending {
                bytes: first,
                ev,
                host,
            })
        }
    };
    carry(&p, client, upstream, pending).await;
}

/// Carries a tunnel's bytes both ways until both sides have ended, or until no byte has moved
/// either way for the idle timeout (the tunnel is then closed: an idle client does not hold a
/// slot for ever). One side's end is passed on to the other (a half-close), as
/// `copy_bidirectional` does. `first` is the client's bytes so far: checked already (`Err`),
/// or still to be (`Ok`), held back until they are.
async fn carry<C>(
    p: &Proxy,
    client: C,
    upstream: tokio::net::TcpStream,
    first: Result<Pending, Vec<u8>>,
) where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut ur, mut uw) = upstream.into_split();
    let mut pending = match first {
        Ok(pending) => Some(pending),
        Err(checked) => {
            if uw.write_all(&checked).await.is_err() {
                return;
            }
            None
        }
    };
    let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let (mut client_done, mut upstream_done) = (false, false);
    while !(client_done && upstream_done) {
        tokio::select! {
            r = cr.read(&mut up), if !client_done => match r {
                Ok(n) if n > 0 => {
                    let Some(check) = pending.as_mut() else {
                        if uw.write_all(&up[..n]).await.is_err() {
                            return;
                        }
                        continue;
                    };
                    check.bytes.extend_from_slice(&up[..n]);
                    let full = check.bytes.len() >= FIRST_FLIGHT;
                    let Some(verdict) = judge_first(&check.bytes, &check.host, full) else {
                        continue;
                    };
                    let check = pending.take().expect("checked above");
                    if let Some((reason, name)) = verdict {
                        let mut row = check.ev;
                        row.boot_ns = super::boot_now();
                        row.reason = Some(reason);
                        row.decision = p.refusal();
                        row.server_name = name;
                        let refused = row.decision == Decision::Refused;
                        p.send(row);
                        if refused {
                            return;
                        }
                    }
                    if uw.write_all(&check.bytes).await.is_err() {
                        return;
                    }
                }
                _ => {
                    client_done = true;
                    let _ = uw.shutdown().await;
                }
            },
            r = ur.read(&mut down), if !upstream_done => match r {
                Ok(n) if n > 0 => {
                    if cw.write_all(&down[..n]).await.is_err() {
                        return;
                    }
                }
                _ => {
                    upstream_done = true;
                    let _ = cw.shutdown().await;
                }
            },
            () = tokio::time::sleep(p.cfg.idle_timeout) => return,
        }
    }
}

/// A plain HTTP request with an absolute URL.
async fn forward(
    p: Arc<Proxy>,
    client: Arc<Client>,
    mut req: Request<Incoming>,
) -> Result<Response<Body>, hyper::Error> {
    let uri = req.uri().clone();
    let (Some(host), Some("http")) = (uri.host(), uri.scheme_str()) else {
        return Ok(text(
            StatusCode::BAD_REQUEST,
            "aet: the proxy forwards http://HOST/... requests and tunnels CONNECT HOST:PORT".into(),
        ));
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let decision = p.decide(host.as_bytes(), Some(port));
    let mut ev = p.event(Kind::Http, host.as_bytes(), port, decision, &client);
    if ev.decision == Decision::Refused {
        let reason = ev.reason;
        p.send(ev);
        return Ok(refused(&host, port, reason));
    }
    let upstream = match p.connect(&host, port, &mut ev).await {
        Reach::Connected(s) => s,
        Reach::Refused => {
            let reason = ev.reason;
            p.send(ev);
            return Ok(refused(&host, port, reason));
        }
        Reach::Failed(e) => {
            ev.errno = Some(errno_of(&e));
            p.send(ev);
            return Ok(text(
                StatusCode::BAD_GATEWAY,
                format!("aet: cannot reach {host}:{port}: {e}"),
            ));
        }
    };
    ev.upstream = upstream.peer_addr().ok();
    p.send(ev);
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .preserve_header_case(true)
        .title_case_headers(true)
        .handshake(TokioIo::new(upstream))
        .await?;
    tokio::spawn(conn);
    // Origin form to the server; hop-by-hop and proxy headers stay here.
    let origin = uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .parse()
        .unwrap_or_default();
    *req.uri_mut() = origin;
    let h = req.headers_mut();
    for name in [
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
    ] {
        h.remove(name);
    }
    if !h.contains_key(header::HOST)
        && let Some(a) = uri.authority()
        && let Ok(v) = HeaderValue::from_str(a.as_str())
    {
        h.insert(header::HOST, v);
    }
    let resp = sender.send_request(req).await?;
    Ok(resp.map(BodyExt::boxed))
}
