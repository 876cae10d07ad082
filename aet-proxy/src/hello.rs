//! A TLS ClientHello's server name, from the first bytes a client sent: the monitor names a
//! connection by it, the proxy checks a tunnel's against its `CONNECT` host. The handshake
//! message is put together from as many records as it was cut into (a client may fragment its
//! hello, and one that wants past a check will), then parsed (tls-parser).

use tls_parser::{TlsExtension, TlsMessage, TlsMessageHandshake};

/// What a client's first bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hello {
    /// Not a TLS handshake record.
    NotTls,
    /// The start of a ClientHello whose end has not come yet.
    Incomplete,
    /// A TLS handshake that is no ClientHello tls-parser can read.
    Unreadable,
    /// A ClientHello, with its server name when it names one.
    Hello(Option<Vec<u8>>),
}

/// TLS record header: type, version, length.
const RECORD_HEADER: usize = 5;
/// Content type of handshake records.
const HANDSHAKE: u8 = 0x16;
/// Handshake type of a ClientHello.
const CLIENT_HELLO: u8 = 1;

/// Reads the ClientHello at the start of `b`.
pub fn client_hello(b: &[u8]) -> Hello {
    if b.is_empty() {
        return Hello::Incomplete;
    }
    if b[0] != HANDSHAKE {
        return Hello::NotTls;
    }
    // The handshake bytes, from each record in turn, until the message is whole.
    let mut msg = Vec::new();
    let mut rest = b;
    loop {
        if rest.len() < RECORD_HEADER {
            return Hello::Incomplete;
        }
        if rest[0] != HANDSHAKE {
            return Hello::Unreadable;
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        let Some(body) = rest.get(RECORD_HEADER..RECORD_HEADER + len) else {
            // The record's end has not come (or never will: the proxy reads a bounded flight).
            return Hello::Incomplete;
        };
        msg.extend_from_slice(body);
        rest = &rest[RECORD_HEADER + len..];
        if msg.len() >= 4 {
            if msg[0] != CLIENT_HELLO {
                return Hello::Unreadable;
            }
            let want =
                4 + (usize::from(msg[1]) << 16 | usize::from(msg[2]) << 8 | usize::from(msg[3]));
            if msg.len() >= want {
                return parse(&msg[..want]);
            }
        }
    }
}

fn parse(msg: &[u8]) -> Hello {
    let Ok((_, TlsMessage::Handshake(TlsMessageHandshake::ClientHello(ch)))) =
        tls_parser::parse_tls_message_handshake(msg)
    else {
        return Hello::Unreadable;
    };
    let Some(ext) = ch.ext else {
        return Hello::Hello(None);
    };
    let Ok((_, exts)) = tls_parser::parse_tls_client_hello_extensions(ext) else {
        return Hello::Unreadable;
    };
    for e in exts {
        if let TlsExtension::SNI(names) = e {
            return Hello::Hello(names.first().map(|(_, n)| n.to_vec()));
        }
    }
    Hello::Hello(None)
}

/// The server name of the ClientHello at the start of `b`, if it is one and names one.
pub fn tls_server_name(b: &[u8]) -> Option<Vec<u8>> {
    match client_hello(b) {
        Hello::Hello(name) => name,
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello handshake message naming `name` (TLS 1.2 layout, one cipher suite).
    fn hello_message(name: &[u8]) -> Vec<u8> {
        let mut sni = Vec::new();
        let entry_len = 3 + name.len();
        sni.extend_from_slice(&(entry_len as u16).to_be_bytes());
        sni.push(0);
        sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
        sni.extend_from_slice(name);
        let mut exts = vec![0, 0];
        exts.extend_from_slice(&(sni.len() as u16).to_be_bytes());
        exts.extend_from_slice(&sni);
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0);
        body.extend_from_slice(&[0, 2, 0x13, 0x01]);
        body.extend_from_slice(&[1, 0]);
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut msg = vec![CLIENT_HELLO];
        msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend_from_slice(&body);
        msg
    }

    /// `msg` in TLS records of at most `size` bytes each.
    fn records(msg: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for part in msg.chunks(size) {
            out.extend_from_slice(&[HANDSHAKE, 3, 1]);
            out.extend_from_slice(&(part.len() as u16).to_be_bytes());
            out.extend_from_slice(part);
        }
        out
    }

    #[test]
    fn a_hello_is_read_whole_or_cut_into_records() {
        let msg = hello_message(b"evil.test");
        for size in [msg.len(), 40, 7, 1] {
            let b = records(&msg, size);
            assert_eq!(
                client_hello(&b),
                Hello::Hello(Some(b"evil.test".to_vec())),
                "records of {size}"
            );
            // Every prefix is the start of a hello, never a hello without a name.
            for cut in 0..b.len() {
                assert_eq!(client_hello(&b[..cut]), Hello::Incomplete, "{size}, {cut}");
            }
        }
        assert_eq!(
            tls_server_name(&records(&msg, 40)),
            Some(b"evil.test".to_vec())
        );
    }

    #[test]
    fn other_bytes_are_named_for_what_they_are() {
        assert_eq!(client_hello(b"SSH-2.0-OpenSSH\r\n"), Hello::NotTls);
        assert_eq!(client_hello(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        // A handshake record that is not a ClientHello, and a hello whose bytes are nonsense.
        assert_eq!(
            client_hello(&records(&[2, 0, 0, 1, 0], 64)),
            Hello::Unreadable
        );
        assert_eq!(
            client_hello(&records(&[1, 0, 0, 3, 9, 9, 9], 64)),
            Hello::Unreadable
        );
        // A hello continued by a record of another type.
        let msg = hello_message(b"a.test");
        let mut b = records(&msg[..20], 64);
        b.extend_from_slice(&[0x17, 3, 3, 0, 1, 0]);
        assert_eq!(client_hello(&b), Hello::Unreadable);
    }
}
