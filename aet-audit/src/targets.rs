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
/// their view), `/proc/{self,thread-self,PID}/fd/N/REST` the path that process last opened as
/// fd N, then REST below it; the same under `/proc/PID/task/TID/`. Links through links are
/// followed (a few levels). `None` for any other path.
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
        let (who, mut rest) = split_first(rest);
        let mut owner = match who {
            b"self" | b"thread-self" => pid,
            d => match number(d) {
                Some(n) => n,
                None => break,
            },
        };
        // /proc/PID/task/TID/...: that thread's view (its fds are its process's).
        if let (b"task", after) = split_first(rest) {
            let (tid, after) = split_first(after);
            if number(tid).is_none() {
                break;
            }
            if who != b"self" && who != b"thread-self" {
                owner = number(who).unwrap_or(owner);
            }
            rest = after;
        }
        let (link, below) = split_first(rest);
        let mut next = match link {
            b"root" => b"/".to_vec(),
            b"fd" => {
                let (n, after) = split_first(below);
                let Some(fd) = number(n) else { break };
                let Some(base) = fds.get(&(owner, fd as i32)) else {
                    break;
                };
                let mut b = base.clone();
                if !after.is_empty() {
                    if !b.ends_with(b"/") {
                        b.push(b'/');
                    }
                    b.extend_from_slice(after);
                }
                cur = b;
                changed = true;
                continue;
            }
            _ => break,
        };
        next.extend_from_slice(below);
        cur = next;
        changed = true;
    }
    changed.then_some(cur)
}

/// `A/REST` (after a leading `/`, if any) split into `A` and `REST` (without its `/`).
fn split_first(p: &[u8]) -> (&[u8], &[u8]) {
    let p = p.strip_prefix(b"/").unwrap_or(p);
    match p.iter().position(|&b| b == b'/') {
        Some(i) => (&p[..i], &p[i + 1..]),
        None => (p, &[]),
    }
}

/// A decimal number of a `/proc` path component (a pid, a tid, an fd).
fn number(d: &[u8]) -> Option<u32> {
    if d.is_empty() || !d.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(d).ok()?.parse().ok()
}
