//! Decoys: files, directories and environment variables planted in the agent's view whose only
//! use is to be found by someone looking for answers, each with a token unique to the run
//! (`[[decoy]]` in the sandbox spec). The record (`aet.decoys`, footer) names each decoy, where
//! it was planted and its token; the audit makes an open of one, or its token anywhere the run
//! wrote, ran or sent, a finding. The ledger file is outside the agent's view, so the tokens are
//! out of its reach.

use serde::{Deserialize, Serialize};

/// What a decoy is.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum DecoyKind {
    /// One file (an "expected output", a solution patch).
    #[default]
    File,
    /// A directory of files (a `solutions/` folder).
    Directory,
    /// An environment variable of the agent (an answer key, a grader's token).
    Env,
    /// A ref of a task repository naming a "future" commit (an upstream branch holding the
    /// fix), written into aet's sanitized copy of the repository.
    GitRef,
}

impl DecoyKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Directory => "directory",
            Self::Env => "env",
            Self::GitRef => "git_ref",
        }
    }
}

/// One decoy as planted.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct Decoy {
    /// The spec's name for it (`decoy[N]` when it gave none).
    pub name: String,
    pub kind: DecoyKind,
    /// Where the agent sees it (a file or a directory); `None` for an environment variable.
    pub path: Option<String>,
    /// For `env`: the variable's name.
    pub var: Option<String>,
    /// Every file of it, as the agent sees them (the file itself, or a directory's files; a git
    /// ref's objects that hold the commit's content: its trees and files).
    pub files: Vec<String>,
    /// For `git_ref`: the ref (`refs/remotes/origin/main`) and the commit it names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// For `git_ref`: the commit's object file, as the agent sees it. Git reads it for the
    /// commit's message and date alone (`git log --all`, `git branch -av`, `git for-each-ref`),
    /// so an open of it is weaker evidence than an open of [`Self::files`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_files: Vec<String>,
    /// The run's token: text that exists nowhere else, in every file of the decoy (and in the
    /// variable's value).
    pub token: String,
}

/// `aet.decoys`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct DecoyRecord {
    pub version: u32,
    pub decoys: Vec<Decoy>,
}

/// The version of [`DecoyRecord`] this aet writes.
pub const DECOY_RECORD_VERSION: u32 = 1;

/// The prefix of every token: lower-case letters and digits only, so a token is a valid DNS
/// label and survives a URL, a shell word and a file name unchanged.
pub const TOKEN_PREFIX: &str = "aetdecoy";

/// A new token from 16 random bytes (`/dev/urandom`): [`TOKEN_PREFIX`] and 26 base-32 letters.
pub fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(token_of(&bytes))
}

fn token_of(bytes: &[u8; 16]) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut out = String::from(TOKEN_PREFIX);
    let n = u128::from_be_bytes(*bytes);
    for k in 0..26 {
        out.push(ALPHABET[((n >> (5 * k)) & 31) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_dns_labels_and_differ() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 26);
        assert!(a.len() <= 63, "a DNS label is at most 63 bytes");
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert_eq!(
            token_of(&[0; 16]),
            format!("{TOKEN_PREFIX}{}", "a".repeat(26))
        );
    }
}
