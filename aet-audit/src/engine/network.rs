//! The engine's judges of rows that are not file accesses: accesses to processes outside the
//! run, host names (`dns` rows and `net` rows that name one), and network endpoints.

use arrow_array::Array as _;

use aet_common::{EventKind, Syscall};

use super::super::batch::{BatchCols, RowRef};
use super::super::finding::{Class, Outcome};
use super::super::scanner::{BARRIER_RULE, Scanner};
use super::super::targets::{endpoint, ptrace_access};
use crate::policy::Access;

/// Accesses to processes outside the run.
pub(crate) fn outside(e: &mut Scanner<'_>, row: &RowRef<'_>) {
    let RowRef { c, i, .. } = *row;
    let BatchCols {
        syscall,
        resolved,
        flags,
        target,
        target_in,
        preq,
        ..
    } = c;
    let policy = e.policy;
    if target.is_valid(i)
        && !(target_in.is_valid(i) && target_in.value(i))
        && let Some(sev) = policy.processes_outside
    {
        let sc = syscall
            .is_valid(i)
            .then(|| syscall.value(i))
            .and_then(Syscall::from_name);
        let access = match (row.kind, sc) {
            (Some(EventKind::Process), Some(Syscall::ProcessVmReadv)) => Some("read"),
            (Some(EventKind::Process), Some(Syscall::ProcessVmWritev)) => Some("write"),
            (Some(EventKind::Process), Some(Syscall::PidfdOpen)) => Some("pidfd"),
            (Some(EventKind::Process), Some(Syscall::Ptrace)) => {
                ptrace_access(preq.is_valid(i).then(|| preq.value(i)))
            }
            (Some(EventKind::Fd), Some(Syscall::PidfdGetfd)) => Some("copy_fd"),
            (Some(EventKind::Open), _) => Some(
                match aet_ledger::access::open_accesses(if flags.is_valid(i) {
                    flags.value(i)
                } else {
                    0
                })
                .contains(Access::Write)
                {
                    true => "write",
                    false => "read",
                },
            ),
            _ => None,
        };
        if let Some(access) = access {
            // The path as the kernel resolved it, for both.
            let row = RowRef {
                resolved: resolved.get(i),
                raw: resolved.get(i),
                ..*row
            };
            e.record_process(sev, access, target.value(i), &row);
        }
    }
}

/// Host names: a `dns` row's question (done when it was answered `NOERROR`), a `net` row's
/// host (done when the call or the proxy's forwarding was), against the host rules and
/// `allow.hosts`.
pub(crate) fn host(e: &mut Scanner<'_>, row: &RowRef<'_>) {
    let RowRef { c, i, .. } = *row;
    let Some(name) = c.host_name.get(i) else {
        return;
    };
    let decision = c.net_decision.is_valid(i).then(|| c.net_decision.value(i));
    if c.host_source.is_valid(i) && c.host_source.value(i) == b"proxy" {
        // The sandbox's proxy's decision (the run's own rows of the request are judged by
        // the rules): what it refused, or would have refused under enforce.
        let outcome = match decision {
            Some(b"refused") => Outcome::Blocked,
            Some(b"would_refuse") => Outcome::WouldBlock,
            _ => return,
        };
        let id = e.path_id(&aet_ledger::hosts::key(name));
        let row = RowRef { ok: false, ..*row };
        e.record(
            Class::Barrier,
            BARRIER_RULE,
            outcome,
            Access::Host,
            id,
            &row,
        );
        return;
    }
    let ok = match row.kind {
        Some(EventKind::Dns) => c.dns_rcode.is_valid(i) && c.dns_rcode.value(i) == b"NOERROR",
        _ => {
            let refused = decision == Some(b"refused");
            let pending = c.errno.is_valid(i) && c.errno.value(i) == b"EINPROGRESS";
            (row.ok || pending) && !refused
        }
    };
    let mut ids = vec![e.path_id(&aet_ledger::hosts::key(name))];
    // A task repository's upstream is also `host:@upstream`, which `{ host = "@upstream" }`
    // rules name.
    let norm = aet_ledger::hosts::normalize(name);
    if e.upstream.contains(&norm) {
        let mut k = aet_ledger::hosts::PREFIX.to_vec();
        k.extend_from_slice(aet_ledger::hosts::UPSTREAM.as_bytes());
        ids.push(e.path_id(&k));
    }
    e.classify(&RowRef { ok, ..*row }, Access::Host, &ids, None);
}

/// Network endpoints: connects and addressed sends, by `ADDRESS:PORT`, `[ADDRESS]:PORT` or
/// `unix:PATH`, against the rules and `allow.connect`.
pub(crate) fn net(e: &mut Scanner<'_>, row: &RowRef<'_>) {
    let RowRef { c, i, .. } = *row;
    let BatchCols {
        syscall,
        net_family,
        net_address,
        net_port,
        ..
    } = c;
    let outgoing = matches!(
        syscall
            .is_valid(i)
            .then(|| syscall.value(i))
            .and_then(Syscall::from_name),
        Some(Syscall::Connect | Syscall::Sendto | Syscall::Sendmsg)
    );
    // A row made of a connection's first message (its TLS or HTTP host) is not a second send
    // to the endpoint its connect went to.
    let named_by_payload = c.capture.value(i) & aet_ledger::schema::capture::PAYLOAD != 0;
    let family = net_family.is_valid(i).then(|| net_family.value(i));
    let port = net_port.is_valid(i).then(|| net_port.value(i));
    if outgoing
        && !named_by_payload
        && let Some(ep) = endpoint(family, net_address.get(i), port)
    {
        let id = e.path_id(&ep);
        e.classify(row, Access::Connect, &[id], None);
    }
}
