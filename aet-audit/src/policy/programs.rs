//! Programs by content: `[allow] programs` (the SHA-256s a run may execute or map executable)
//! and rules that name a hash (`{ sha256 = "..." }`, or with a `pattern`: that file at that
//! path). The ledger's `sha256` column holds each executed or mapped file's hash; the audit
//! matches a program row by the key `sha256:HEX` (or `sha256:unknown` when its hash could not
//! be taken).

use std::collections::BTreeSet;

use toml::Spanned;

use super::LineOf;

/// The key prefix of a program row's hash.
pub const PREFIX: &[u8] = b"sha256:";

/// The key of a program row whose hash could not be taken: never in `[allow] programs`.
pub const UNKNOWN: &[u8] = b"sha256:unknown";

/// Whether `s` is a SHA-256 as the ledger writes it (64 lowercase hex digits).
pub fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A hash as a policy gives it: 64 hex digits, any case (kept lowercase).
pub fn parse(s: &str) -> Result<String, String> {
    let l = s.trim().to_ascii_lowercase();
    if is_sha256(&l) {
        Ok(l)
    } else {
        Err(format!(
            "{s:?} is not a SHA-256 (64 hexadecimal digits, as `sha256sum` prints it)"
        ))
    }
}

/// `[allow] programs`, checked.
pub fn allow_list(text: &str, list: &[Spanned<String>]) -> Result<BTreeSet<String>, String> {
    list.iter()
        .enumerate()
        .map(|(i, h)| {
            parse(h.get_ref())
                .map_err(|e| format!("{}: allow.programs[{i}]: {e}", LineOf(text, h.span())))
        })
        .collect()
}

/// The pattern of a hash-only rule: the key of program rows with that hash.
pub fn key_pattern(hex: &str) -> String {
    format!("^sha256:{hex}$")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_is_64_hex_digits_in_any_case() {
        let h = "C79BF44242829108E323378531F4AC839513CA1FBA45EFD6583643526E1E9FD2";
        assert_eq!(parse(h).unwrap(), h.to_ascii_lowercase());
        assert!(parse("c79bf4").unwrap_err().contains("not a SHA-256"));
        assert!(parse(&"g".repeat(64)).is_err());
    }
}
