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

use super::{Decision, Proxy, Request as Kind, peer::Proto};

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

fn refused(host: &str, port: u16) -> Response<Body> {
    text(
        StatusCode::FORBIDDEN,
        format!("aet: {host}:{port} is not one of the sandbox's network hosts"),
    )
}

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(match e.kind() {
        std::io::ErrorKind::TimedOut => libc::ETIMEDOUT,
        std::io::ErrorKind::NotFound => libc::EHOSTUNREACH,
        _ => libc::EIO,
    })
}

/// Serves the proxy's listener.
pub(super) async fn serve(p: Arc<Proxy>, listener: tokio::net::TcpListener) {
    loop {
        let Ok((stream, client)) = listener.accept().await else {
            continue;
        };
        let p = p.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(p.clone(), client, req));
            let _ = hyper::server::conn::http1::Builder::new()
                .preserve_header_case(true)
                .title_case_headers(true)
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades()
                .await;
        });
    }
}

async fn handle(
    p: Arc<Proxy>,
    client: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Body>, hyper::Error> {
    if req.method() == Method::CONNECT {
        return Ok(tunnel(p, client, req).await);
    }
    forward(p, client, req).await
}

/// `CONNECT host:port`.
async fn tunnel(p: Arc<Proxy>, client: SocketAddr, req: Request<Incoming>) -> Response<Body> {
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
    let decision = p.decide(host.as_bytes());
    let mut ev = p.event(
        Kind::Connect,
        host.as_bytes(),
        port,
        decision,
        (client, Proto::Tcp),
    );
    if decision == Decision::Refused {
        p.send(ev);
        return refused(&host, port);
    }
    match p.connect(&host, port).await {
        Ok(mut upstream) => {
            ev.upstream = upstream.peer_addr().ok();
            p.send(ev);
            tokio::spawn(async move {
                if let Ok(up) = hyper::upgrade::on(req).await {
                    let mut up = TokioIo::new(up);
                    let _ = tokio::io::copy_bidirectional(&mut up, &mut upstream).await;
                }
            });
            Response::new(
                Full::new(Bytes::new())
                    .map_err(|never| match never {})
                    .boxed(),
            )
        }
        Err(e) => {
            ev.errno = Some(errno_of(&e));
            p.send(ev);
            text(
                StatusCode::BAD_GATEWAY,
                format!("aet: cannot reach {host}:{port}: {e}"),
            )
        }
    }
}

/// A plain HTTP request with an absolute URL.
async fn forward(
    p: Arc<Proxy>,
    client: SocketAddr,
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
    let decision = p.decide(host.as_bytes());
    let mut ev = p.event(
        Kind::Http,
        host.as_bytes(),
        port,
        decision,
        (client, Proto::Tcp),
    );
    if decision == Decision::Refused {
        p.send(ev);
        return Ok(refused(&host, port));
    }
    let upstream = match p.connect(&host, port).await {
        Ok(s) => s,
        Err(e) => {
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
