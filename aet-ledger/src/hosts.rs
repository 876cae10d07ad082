//! Host names in a policy: `[allow] hosts`, the rules that name hosts (`{ host = "NAME" }`) and
//! the sandbox's proxy's list. A pattern is a name (`pypi.org`: that name only), `*.NAME` (every
//! name below NAME, at any depth, not NAME itself), `*` (every name), or an IP address. Names
//! are compared without case and without a final dot. The audit matches rows by the key
//! `host:NAME`.

use regex::bytes::{RegexSet, RegexSetBuilder};

/// What a host's key starts with (and a path never does).
pub const PREFIX: &[u8] = b"host:";

/// A host name as it is matched: lower case, without a final dot.
pub fn normalize(host: &[u8]) -> Vec<u8> {
    let h = host.strip_suffix(b".").unwrap_or(host);
    h.to_ascii_lowercase()
}

/// The audit's key for a host: `host:` and the normalized name.
pub fn key(host: &[u8]) -> Vec<u8> {
    let mut k = PREFIX.to_vec();
    k.extend_from_slice(&normalize(host));
    k
}

/// The pattern that names the hosts of the run's task repositories' upstreams (`[[repo]]
/// upstream` in the sandbox spec, kept in `aet.sandbox`).
pub const UPSTREAM: &str = "@upstream";

/// The host of a repository's upstream: a URL (`https://github.com/o/r`), an scp-like address
/// (`git@github.com:o/r.git`) or a host name.
pub fn upstream_host(u: &str) -> Option<String> {
    let u = u.trim();
    let authority = if let Some((_, rest)) = u.split_once("://") {
        let a = rest.split(['/', '?', '#']).next().unwrap_or(rest);
        a.rsplit('@').next().unwrap_or(a)
    } else if let Some((before, _)) = u.split_once(':') {
        before.rsplit('@').next().unwrap_or(before)
    } else {
        u
    };
    let host = match authority.strip_prefix('[') {
        Some(r) => r.split(']').next().unwrap_or(r),
        None => authority.split(':').next().unwrap_or(authority),
    };
    check(host).ok().filter(|h| !h.starts_with('*'))
}

/// Checks a pattern; returns its normalized form.
pub fn check(p: &str) -> Result<String, String> {
    if p == "*" || p == UPSTREAM || p.parse::<std::net::IpAddr>().is_ok() {
        return Ok(p.to_ascii_lowercase());
    }
    let name = p.strip_prefix("*.").unwrap_or(p);
    let name = name.strip_suffix('.').unwrap_or(name);
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if !ok {
        return Err(format!(
            "{p:?} is not a host name (NAME, *.NAME, *, an IP address or @upstream)"
        ));
    }
    let prefix = if p.starts_with("*.") { "*." } else { "" };
    Ok(format!("{prefix}{}", name.to_ascii_lowercase()))
}

/// The regular expression over keys (`host:NAME`) of a checked pattern.
pub fn regex(p: &str) -> Result<String, String> {
    let p = check(p)?;
    Ok(if p == "*" {
        "^host:.+$".into()
    } else if p == UPSTREAM {
        format!("^host:{UPSTREAM}$")
    } else if let Some(name) = p.strip_prefix("*.") {
        format!("^host:(?:[^.]+\\.)+{}$", regex::escape(name))
    } else {
        format!("^host:{}$", regex::escape(&p))
    })
}

/// A list of host patterns, compiled.
#[derive(Clone, Debug)]
pub struct HostSet {
    set: RegexSet,
    /// The patterns as written (normalized).
    pub patterns: Vec<String>,
}

impl HostSet {
    /// Compiles `patterns`; an error names the first bad one.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Self, String> {
        let mut shown = Vec::new();
        let mut res = Vec::new();
        for p in patterns {
            shown.push(check(p.as_ref())?);
            res.push(regex(p.as_ref())?);
        }
        let set = RegexSetBuilder::new(&res)
            .build()
            .map_err(|e| format!("host patterns: {e}"))?;
        Ok(Self {
            set,
            patterns: shown,
        })
    }

    /// Whether a key (`host:NAME`, normalized) is in the set.
    pub fn matches_key(&self, key: &[u8]) -> bool {
        self.set.is_match(key)
    }

    /// Whether a host name is in the set.
    pub fn matches(&self, host: &[u8]) -> bool {
        self.matches_key(&key(host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_subdomains_and_addresses_match_as_written() {
        let s = HostSet::new(&["pypi.org", "*.pythonhosted.org", "127.0.0.1"]).unwrap();
        assert!(s.matches(b"pypi.org"));
        assert!(s.matches(b"PyPI.org."));
        assert!(!s.matches(b"evil-pypi.org"));
        assert!(!s.matches(b"pypi.org.evil.com"));
        assert!(!s.matches(b"test.pypi.org"));
        assert!(s.matches(b"files.pythonhosted.org"));
        assert!(s.matches(b"a.b.pythonhosted.org"));
        assert!(!s.matches(b"pythonhosted.org"));
        assert!(s.matches(b"127.0.0.1"));
        assert!(HostSet::new(&["*"]).unwrap().matches(b"anything.example"));
        for (u, h) in [
            ("https://github.com/astropy/astropy", "github.com"),
            ("git@GitHub.com:o/r.git", "github.com"),
            ("ssh://git@gitlab.example:2222/o/r", "gitlab.example"),
            ("codeberg.org", "codeberg.org"),
        ] {
            assert_eq!(upstream_host(u).as_deref(), Some(h), "{u}");
        }
        assert_eq!(upstream_host("/srv/repo"), None);
        for bad in [
            "",
            "github.com/x",
            "a..b",
            "*github.com",
            "git hub.com",
            "*.*.x",
        ] {
            assert!(HostSet::new(&[bad]).is_err(), "{bad:?}");
        }
    }
}
