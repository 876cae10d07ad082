//! Names on the network, loopback only: a DNS server, TLS and HTTP servers this test starts on
//! 127.0.0.0/8. The names a run resolves (glibc, Python, dig over UDP and TCP) are `dns` rows and
//! name its connections; a TLS ClientHello's server name and an HTTP request's host name a
//! connection made without DNS; the audit judges hosts; `network = { hosts = [...] }` is a
//! sandbox whose only way out is aet's proxy.

use std::fs;

use aet_tests::*;

#[path = "common/names.rs"]
#[allow(dead_code)]
mod common;
use common::*;

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
