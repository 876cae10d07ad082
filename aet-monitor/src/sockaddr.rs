//! Socket addresses as a process passed them to `connect`, `bind` or `sendto`.

/// A socket address's family, address and port (raw bytes as the process passed them).
pub(super) fn sockaddr(b: &[u8]) -> (Option<&'static str>, Option<Vec<u8>>, Option<u32>) {
    if b.len() < 2 {
        return (None, None, None);
    }
    let family = u16::from_ne_bytes([b[0], b[1]]) as i32;
    let port = || (b.len() >= 4).then(|| u32::from(u16::from_be_bytes([b[2], b[3]])));
    match family {
        libc::AF_UNIX => {
            let p = &b[2..];
            let addr = match p.first() {
                // Abstract: the name is every byte given, NULs included.
                Some(0) => {
                    let mut a = b"@".to_vec();
                    a.extend_from_slice(&p[1..]);
                    a
                }
                _ => p[..p.iter().position(|&c| c == 0).unwrap_or(p.len())].to_vec(),
            };
            (Some("unix"), (!addr.is_empty()).then_some(addr), None)
        }
        libc::AF_INET if b.len() >= 8 => {
            let ip = std::net::Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            (Some("inet"), Some(ip.to_string().into_bytes()), port())
        }
        libc::AF_INET6 if b.len() >= 24 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[8..24]);
            let ip = std::net::Ipv6Addr::from(o);
            (Some("inet6"), Some(ip.to_string().into_bytes()), port())
        }
        libc::AF_INET => (Some("inet"), None, None),
        libc::AF_INET6 => (Some("inet6"), None, None),
        libc::AF_NETLINK => (Some("netlink"), None, None),
        libc::AF_PACKET => (Some("packet"), None, None),
        libc::AF_UNSPEC => (Some("unspec"), None, None),
        _ => (Some("other"), None, None),
    }
}
