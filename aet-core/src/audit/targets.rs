//! What a row names besides a plain path: a network endpoint, what a ptrace request does to its
//! target, and the file a `/proc` magic link leads to.

use rustc_hash::FxHashMap;

/// A `net` row's endpoint as the policy names endpoints: `ADDRESS:PORT`, `[ADDRESS]:PORT` (IPv6)
/// or `unix:PATH` (`unix:@NAME` for an abstract socket).
pub fn endpoint(
    family: Option<&[u8]>,
    address: Option<&[u8]>,
    port: Option<u32>,
) -> Option<Vec<u8>> {
    let address = address?;
    let mut ep = Vec::with_capacity(address.len() + 8);
    match family? {
        b"inet" => {
            ep.extend_from_slice(address);
            ep.extend_from_slice(format!(":{}", port?).as_bytes());
        }
        b"inet6" => {
            ep.push(b'[');
            ep.extend_from_slice(address);
            ep.extend_from_slice(format!("]:{}", port?).as_bytes());
        }
        b"unix" => {
            ep.extend_from_slice(b"unix:");
            ep.extend_from_slice(address);
        }
        _ => return None,
    }
    Some(ep)
}

/// What a ptrace request does to its target (`None`: nothing to report, as `PTRACE_TRACEME`,
/// whose target is the tracer).
pub(super) fn ptrace_access(request: Option<u32>) -> Option<&'static str> {
    Some(match request? {
        0 => return None,
        1..=3 | 12 | 14 | 0x4204 | 0x4209 => "read",
        4..=6 | 13 | 15 | 0x4205 => "write",
        16 | 0x4206 => "attach",
        _ => "control",
    })
}

/// The file a `/proc` magic link leads to, as far as the record knows it:
/// `/proc/{self,thread-self,PID}/root/REST` is `/REST` (a run's processes share the root of
/// their view), `/proc/{self,thread-self,PID}/fd/N` the path that process last opened as fd N.
/// Links through links are followed (a few levels). `None` for any other path.
pub(super) fn proc_alias(
    p: &[u8],
    pid: u32,
    fds: &FxHashMap<(u32, i32), Vec<u8>>,
) -> Option<Vec<u8>> {
    let mut cur = p.to_vec();
    let mut changed = false;
    for _ in 0..8 {
        let Some(rest) = cur.strip_prefix(b"/proc/") else {
            break;
        };
        let (who, rest) = match rest.iter().position(|&b| b == b'/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => break,
        };
        let owner = match who {
            b"self" | b"thread-self" => pid,
            d if !d.is_empty() && d.iter().all(u8::is_ascii_digit) => {
                std::str::from_utf8(d).ok()?.parse().ok()?
            }
            _ => break,
        };
        let next = if let Some(r) = rest.strip_prefix(b"/root") {
            if r.is_empty() {
                b"/".to_vec()
            } else if r.starts_with(b"/") {
                r.to_vec()
            } else {
                break;
            }
        } else if let Some(n) = rest.strip_prefix(b"/fd/") {
            let fd: i32 = std::str::from_utf8(n).ok()?.parse().ok()?;
            fds.get(&(owner, fd))?.clone()
        } else {
            break;
        };
        cur = next;
        changed = true;
    }
    changed.then_some(cur)
}
