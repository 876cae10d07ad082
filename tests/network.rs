//! Network use in the record: connects (TCP, unix) and addressed sends, with their endpoints
//! and results; the audit's `allow.connect` and rules that name endpoints; a sandbox without the
//! host's network.

use std::{fs, os::unix::net::UnixListener, path::Path};

use aet_tests::*;

fn net_rows<'a>(rows: &'a [LedgerRow], syscall: &str) -> Vec<&'a LedgerRow> {
    rows.iter()
        .filter(|r| r.kind == "net" && r.syscall.as_deref() == Some(syscall))
        .collect()
}

/// `aet audit RUN` with a policy of this text: exit status and report.
fn audit(run: &Path, policy: &str) -> (i32, serde_json::Value) {
    let p = run.join(format!("policy-{}.toml", unique()));
    fs::write(&p, policy).unwrap();
    let (out, v) = audit_json(run, &p, &[]);
    (out.status.code().unwrap_or(-1), v)
}

#[test]
fn connects_and_sends_are_recorded_with_their_endpoints_and_judged_by_the_policy() {
    let dir = tempdir();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let sock = dir.path().join("svc.sock");
    let _unix = UnixListener::bind(&sock).unwrap();
    let probe = helper("netprobe");
    let script = format!(
        "{p} tcp 127.0.0.1 {port} && {p} unix {s} && {p} udp6 9 && {p} unix {s}.missing; true",
        p = probe.display(),
        s = sock.display()
    );
    let r = run_in(&dir.path().join("run"), &[], &["sh", "-c", &script]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(r.stdout(), "ok\nok\nok\nNo such file or directory\n");
    let rows = r.rows();
    let connects = net_rows(&rows, "connect");
    let tcp_row = connects
        .iter()
        .find(|x| x.net_family.as_deref() == Some("inet"))
        .expect("the TCP connect");
    assert_eq!(tcp_row.net_address.as_deref(), Some(&b"127.0.0.1"[..]));
    assert_eq!(tcp_row.net_port, Some(u32::from(port)));
    assert_eq!(tcp_row.ret, Some(0));
    let unix: Vec<_> = connects
        .iter()
        .filter(|x| x.net_family.as_deref() == Some("unix"))
        .collect();
    assert_eq!(unix.len(), 2, "{unix:#?}");
    assert_eq!(
        unix[0].net_address.as_deref(),
        Some(sock.as_os_str().as_encoded_bytes())
    );
    assert_eq!(unix[0].ret, Some(0));
    assert_eq!(unix[1].errno.as_deref(), Some("ENOENT"));
    let send = net_rows(&rows, "sendto");
    assert_eq!(send.len(), 1, "{send:#?}");
    assert_eq!(send[0].net_family.as_deref(), Some("inet6"));
    assert_eq!(send[0].net_address.as_deref(), Some(&b"::1"[..]));
    assert_eq!(send[0].net_port, Some(9));
    assert_complete(&r.ledger());

    // Connects outside `allow.connect` are out of scope; inside, nothing.
    let (code, v) = audit(
        &r.out,
        "[allow]\nread = [\"/\"]\nwrite = [\"/\"]\nconnect = [\"127.0.0.1:*\"]\n",
    );
    assert_eq!(code, 1, "{v:#}");
    let oos: Vec<String> = v["out_of_scope"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["access"] == "connect")
        .map(|f| f["path"].as_str().unwrap().to_owned())
        .collect();
    let unix_ep = format!("unix:{}", sock.display());
    assert!(oos.contains(&unix_ep), "{oos:?}");
    assert!(oos.contains(&"[::1]:9".to_owned()), "{oos:?}");
    assert!(!oos.iter().any(|p| p.starts_with("127.0.0.1")), "{oos:?}");
    // A rule that names an endpoint.
    let (code, v) = audit(&r.out, "[cheats]\nupstream = '^\\[::1\\]:9$'\n");
    assert_eq!(code, 2, "{v:#}");
    assert_eq!(v["cheat_hits"][0]["access"], "connect");
}

#[test]
fn a_network_value_other_than_host_or_none_is_refused() {
    let dir = tempdir();
    let spec = dir.path().join("spec.toml");
    fs::write(
        &spec,
        format!("workspace = {:?}\nnetwork = \"some\"\n", dir.path()),
    )
    .unwrap();
    let r = aet()
        .args(["sandbox", "check"])
        .arg(&spec)
        .output()
        .unwrap();
    assert!(!r.status.success());
    let err = text(&r.stderr);
    assert!(
        err.contains("network") && err.contains("\"host\", \"none\" or { hosts"),
        "{err}"
    );
}

#[test]
fn without_the_hosts_network_a_connect_fails_and_is_recorded() {
    let dir = tempdir();
    let ws = dir.path().join("ws");
    fs::create_dir(&ws).unwrap();
    let probe = helper("netprobe");
    let spec = dir.path().join("spec.toml");
    fs::write(
        &spec,
        format!(
            "workspace = {:?}\nextra_binds = [{:?}]\nnetwork = \"none\"\n",
            ws.to_str().unwrap(),
            probe.parent().unwrap().to_str().unwrap()
        ),
    )
    .unwrap();
    let out = dir.path().join("run");
    let r = aet()
        .args(["run", "--out"])
        .arg(&out)
        .arg("--sandbox")
        .arg(&spec)
        .arg("--")
        .arg(&probe)
        .args(["tcp", "192.0.2.1", "80"])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(1), "{}", text(&r.stderr));
    assert_eq!(text(&r.stdout), "Network is unreachable\n");
    let ledger = out.join("ledger.arrow");
    assert_complete(&ledger);
    // Checked from inside before the command started.
    let sb: serde_json::Value = serde_json::from_str(&meta(&ledger)["aet.sandbox"]).unwrap();
    let check = sb["report"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["entry"] == "network = \"none\"")
        .unwrap_or_else(|| panic!("no network check: {sb}"))
        .clone();
    assert_eq!(check["ok"], true, "{check}");
    assert_eq!(check["found"], "interfaces lo", "{check}");
    let rows = rows(&ledger);
    let c = net_rows(&rows, "connect");
    assert_eq!(c.len(), 1, "{c:#?}");
    assert_eq!(c[0].net_address.as_deref(), Some(&b"192.0.2.1"[..]));
    assert_eq!(c[0].net_port, Some(80));
    assert_eq!(c[0].errno.as_deref(), Some("ENETUNREACH"));
}
