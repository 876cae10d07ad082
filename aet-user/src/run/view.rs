//! The sandbox's view handed over to `aet run` by its stage: received on the hold socket (what
//! the stage says, its mount namespace, its network namespace), then its watched files
//! fingerprinted in that view before the command may run.

use std::{io, os::fd::AsRawFd as _};

use super::{launch::Launch, note};
use aet_kernel::cgroup::RunCgroup;

/// What the stage handed over: what it says, its mount namespace and its network namespace.
pub(super) type HeldView = Result<
    (
        aet_ledger::plan::HeldView,
        std::os::fd::OwnedFd,
        Option<std::os::fd::OwnedFd>,
    ),
    String,
>;

/// Waits (in a thread) for the stage to hand its view over: what it says, and its mount
/// namespace.
pub(super) fn receive_view(
    socket: &std::os::unix::net::UnixStream,
) -> Option<tokio::sync::mpsc::UnboundedReceiver<HeldView>> {
    let reader = socket.try_clone().ok()?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("aet-hold".into())
        .spawn(move || {
            use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
            let mut buf = vec![0u8; 1 << 16];
            let mut space = nix::cmsg_space!([std::os::fd::RawFd; 2]);
            let mut iov = [io::IoSliceMut::new(&mut buf)];
            let got = recvmsg::<()>(
                reader.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .map_err(|e| format!("receiving the sandbox's view: {e}"))
            .and_then(|m| {
                let mut fds = Vec::new();
                for c in m.cmsgs().map_err(|e| e.to_string())? {
                    if let ControlMessageOwned::ScmRights(f) = c {
                        fds.extend(f);
                    }
                }
                Ok((m.bytes, fds))
            });
            let r = got.and_then(|(n, fds)| {
                // SAFETY: fds received with this message are this process's now.
                let mut owned: Vec<std::os::fd::OwnedFd> = fds
                    .into_iter()
                    .map(|fd| unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
                    .collect();
                if n == 0 {
                    return Err("the sandbox ended before it handed its view over".into());
                }
                let view: aet_ledger::plan::HeldView = serde_json::from_slice(&buf[..n])
                    .map_err(|e| format!("the sandbox's view: {e}"))?;
                if owned.is_empty() {
                    return Err("the sandbox's view came without its namespace".to_owned());
                }
                let ns = owned.remove(0);
                let net = (!owned.is_empty()).then(|| owned.remove(0));
                Ok((view, ns, net))
            });
            let _ = tx.send(r);
        })
        .ok()?;
    Some(rx)
}

/// The sandbox's view, handed over: its watched files fingerprinted. `false` refuses the
/// command (said on stderr).
pub(super) fn take_view(
    launch: &Launch,
    quiet: bool,
    cg: &RunCgroup,
    view: HeldView,
    watch: Option<&mut super::fingerprints::Fingerprints>,
    proxy_tx: &tokio::sync::mpsc::UnboundedSender<aet_proxy::Event>,
) -> bool {
    let (v, ns, net) = match view {
        Ok(v) => v,
        Err(e) => {
            eprintln!("aet: error: {e}");
            return false;
        }
    };
    // The proxy first: the command's way out, listening before it starts.
    if let Some(sb) = launch.sandbox.as_ref()
        && let Some(h) = sb.spec.network.hosts()
    {
        let rules = match aet_proxy::Rules::new(&h.hosts) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("aet: error: {e}");
                return false;
            }
        };
        // The spec's network is the sandbox's, as its view is: unlisted hosts are refused,
        // but under `--mode shadow`, which forwards them and records what enforce would do.
        let enforce = sb
            .built
            .plan
            .as_ref()
            .and_then(|p| p.barrier.as_ref())
            .is_none_or(|b| b.enforce);
        let Some(net) = net else {
            eprintln!("aet: error: the sandbox's view came without its network namespace");
            return false;
        };
        let cfg = aet_proxy::Config {
            rules,
            enforce,
            resolver: h.resolver,
            cgroup: cg.path().to_owned(),
            max_connections: h.max_connections as usize,
            client_timeout: std::time::Duration::from_secs(u64::from(h.client_timeout)),
            idle_timeout: std::time::Duration::from_secs(u64::from(h.idle_timeout)),
        };
        if let Err(e) = aet_proxy::start(net, cfg, proxy_tx.clone()) {
            eprintln!("aet: error: cannot start the sandbox's proxy: {e}");
            return false;
        }
        note(
            quiet,
            format_args!(
                "network: the sandbox reaches {} through aet's proxy ({})",
                h.hosts.join(", "),
                if enforce {
                    "others are refused"
                } else {
                    "others are forwarded and recorded as would_refuse"
                }
            ),
        );
    }
    let Some(w) = watch else {
        return true;
    };
    let ctx = aet_ledger::watch::Context {
        cwd: Some(v.cwd),
        repos: launch.repos(),
        path_var: v.path,
        home: v.home,
    };
    match w.before(super::fingerprints::View::Namespace(ns), ctx) {
        Ok(()) => {
            if let Some(l) = w.describe(false) {
                note(quiet, l);
            }
            true
        }
        Err(e) => {
            eprintln!("aet: error: the watched files cannot be fingerprinted in the sandbox: {e}");
            false
        }
    }
}
