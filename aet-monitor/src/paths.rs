//! Paths from what the kernel sent: walks turned into absolute paths, relative arguments joined
//! to the base directory the kernel walked, and lexical normalisation for paths the kernel did
//! not resolve into an object.
//!
//! Paths are bytes (Linux paths need not be UTF-8) and nothing here loses a byte.

pub use aet_common::ResolvedFrom;

/// Turns a walk (components leaf first, each followed by `/`) into an absolute path.
pub fn walk_to_path(walk: &[u8]) -> Vec<u8> {
    let trimmed = walk.strip_suffix(b"/").unwrap_or(walk);
    let mut out = Vec::with_capacity(walk.len() + 1);
    if trimmed.is_empty() {
        out.push(b'/');
        return out;
    }
    for comp in trimmed.rsplit(|&b| b == b'/') {
        out.push(b'/');
        out.extend_from_slice(comp);
    }
    out
}

/// Lexically normalises an absolute path: drops empty and `.` components, applies `..` to the
/// component before it (never above `/`).
pub fn normalize(path: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for comp in path.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = Vec::with_capacity(path.len());
    for p in &parts {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// Joins a relative argument to a base directory and normalises the result.
pub fn join(base: &[u8], rel: &[u8]) -> Vec<u8> {
    let mut p = base.to_vec();
    p.push(b'/');
    p.extend_from_slice(rel);
    normalize(&p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_become_absolute_paths() {
        assert_eq!(walk_to_path(b"hostname/etc/"), b"/etc/hostname");
        assert_eq!(walk_to_path(b""), b"/");
        assert_eq!(walk_to_path(b"a\nb/\xff/"), b"/\xff/a\nb");
    }

    #[test]
    fn normalisation_is_lexical() {
        assert_eq!(normalize(b"/a/./b//c/../d"), b"/a/b/d");
        assert_eq!(normalize(b"/../../x"), b"/x");
        assert_eq!(normalize(b"/"), b"/");
        assert_eq!(
            join(b"/work/repo", b"../answers/key.txt"),
            b"/work/answers/key.txt"
        );
        assert_eq!(join(b"/", b"etc/hostname"), b"/etc/hostname");
    }
}
