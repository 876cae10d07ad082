//! The allow-lists' globs: paths (a pattern without glob characters is a path prefix) and
//! network endpoints.

use globset::{GlobSet, GlobSetBuilder};
use toml::Spanned;

use super::LineOf;

/// Compiles globs; a pattern without glob characters is a path prefix (itself and below).
/// `allow.connect`: endpoint globs, `ADDRESS:PORT` (`127.0.0.1:*`, `[::1]:443`) or
/// `unix:PATH` (`unix:/run/*.sock`); `*` matches within a path component.
pub(super) fn endpoint_globs(
    text: &str,
    list: &[Spanned<String>],
) -> Result<(GlobSet, Vec<String>), String> {
    let mut b = GlobSetBuilder::new();
    let mut shown = Vec::new();
    for (i, g) in list.iter().enumerate() {
        let p = g.get_ref();
        let at = LineOf(text, g.span());
        let ok = match p.strip_prefix("unix:") {
            Some(path) => path.starts_with('/') || path.starts_with('@'),
            None => p.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && !port.is_empty() && !host.contains('/')
            }),
        };
        if !ok {
            return Err(format!(
                "{at}: allow.connect[{i}] = {p:?}: not an endpoint (ADDRESS:PORT, [ADDRESS]:PORT or unix:PATH)"
            ));
        }
        // The brackets of an IPv6 endpoint are literal, not a glob's character class.
        let pat = match p.strip_prefix('[') {
            Some(rest) => format!("\\[{}", rest.replacen("]:", "\\]:", 1)),
            None => p.clone(),
        };
        let glob = aet_ledger::util::path_glob(&pat)
            .map_err(|e| format!("{at}: allow.connect[{i}] = {p:?}: {e}"))?;
        b.add(glob);
        shown.push(p.clone());
    }
    let set = b.build().map_err(|e| format!("allow.connect: {e}"))?;
    Ok((set, shown))
}

pub(super) fn globs(
    text: &str,
    key: &str,
    list: &[Spanned<String>],
) -> Result<(GlobSet, Vec<String>), String> {
    let mut b = GlobSetBuilder::new();
    let mut shown = Vec::new();
    for (i, g) in list.iter().enumerate() {
        let p = g.get_ref();
        let at = LineOf(text, g.span());
        if !p.starts_with('/') {
            return Err(format!(
                "{at}: allow.{key}[{i}] = {p:?}: not an absolute path or glob"
            ));
        }
        for pat in aet_ledger::util::path_prefix_globs(p) {
            let glob = aet_ledger::util::path_glob(&pat)
                .map_err(|e| format!("{at}: allow.{key}[{i}] = {p:?}: {e}"))?;
            b.add(glob);
        }
        shown.push(p.clone());
    }
    let set = b.build().map_err(|e| format!("allow.{key}: {e}"))?;
    Ok((set, shown))
}
