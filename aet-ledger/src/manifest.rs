//! A run's signed manifest (`aet run --sign KEY` writes `RUN_DIR/manifest.json`) and its check
//! (`aet verify`).
//!
//! The manifest names what a leaderboard needs to trust a run: the ledger's final chain hash
//! (see [`crate::chain`]), the hashes of the policy, the sandbox spec, the aet binary and
//! its eBPF object, the kernel release, losses and completeness, and the audit's verdict with
//! the hash of `audit.json`. It is signed with Ed25519 over its canonical JSON (keys sorted, no
//! spaces) without the `signature` field; the public key is in it too, and `aet verify --key`
//! checks that it is the expected one.

use std::{
    fs,
    io::Write as _,
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
};

use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{chain, util::unhex};

const FORMAT: &str = "aet.manifest";
const SECRET_HEAD: &str = "aet ed25519 secret key";
const PUBLIC_HEAD: &str = "aet ed25519 public key";

/// A file named in the manifest by its hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileHash {
    pub path: String,
    pub sha256: String,
}

/// What the manifest says (everything but the signature).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Body {
    pub format: String,
    pub version: u32,
    pub aet_version: String,
    /// The ledger file (relative to the run directory) and its chain's final hash.
    pub ledger: String,
    pub ledger_final_hash: String,
    pub ledger_batches: usize,
    pub ledger_rows: u64,
    pub policy: Option<FileHash>,
    pub sandbox_spec: Option<FileHash>,
    pub aet_binary: FileHash,
    pub ebpf_object_sha256: String,
    pub kernel_release: Option<String>,
    pub events_lost: Option<u64>,
    pub complete: bool,
    pub incomplete_reasons: Vec<String>,
    /// The audit's verdict (`aet run --policy`), and `audit.json`'s hash.
    pub verdict: Option<String>,
    pub audit: Option<FileHash>,
    /// `audit.html`'s hash (absent from manifests written before aet signed it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_html: Option<FileHash>,
    /// The signer's public key (hex).
    pub public_key: String,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read the key {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not an aet {what} key (aet key new writes them)")]
    Format { path: PathBuf, what: &'static str },
    #[error("cannot write the key {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// SHA-256 of a file, hex.
pub fn sha256_file(p: &Path) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let mut f = fs::File::open(p)?;
    std::io::copy(&mut f, &mut h)?;
    Ok(crate::util::hex(&h.finalize()))
}

/// SHA-256 of bytes, hex.
pub fn sha256(b: &[u8]) -> String {
    crate::util::hex(&Sha256::digest(b))
}

fn key_text(p: &Path, head: &str, what: &'static str) -> Result<[u8; 32], KeyError> {
    let text = fs::read_to_string(p).map_err(|source| KeyError::Read {
        path: p.to_owned(),
        source,
    })?;
    let mut lines = text.lines();
    let bad = || KeyError::Format {
        path: p.to_owned(),
        what,
    };
    if lines.next() != Some(head) {
        return Err(bad());
    }
    let bytes = lines.next().and_then(|l| unhex(l.trim())).ok_or_else(bad)?;
    bytes.try_into().map_err(|_| bad())
}

/// Reads a secret key file.
pub fn read_secret(p: &Path) -> Result<SigningKey, KeyError> {
    key_text(p, SECRET_HEAD, "Ed25519 secret").map(|b| SigningKey::from_bytes(&b))
}

/// Reads a public key file.
pub fn read_public(p: &Path) -> Result<VerifyingKey, KeyError> {
    let b = key_text(p, PUBLIC_HEAD, "Ed25519 public")?;
    VerifyingKey::from_bytes(&b).map_err(|_| KeyError::Format {
        path: p.to_owned(),
        what: "Ed25519 public",
    })
}

/// Writes a new key pair: `path` (mode 0600) and `path.pub`. Neither may exist.
pub fn new_key(path: &Path, seed: [u8; 32]) -> Result<PathBuf, KeyError> {
    let key = SigningKey::from_bytes(&seed);
    let public = PathBuf::from(format!("{}.pub", path.display()));
    let write = |p: &Path, mode: u32, text: String| {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(p)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|source| KeyError::Write {
                path: p.to_owned(),
                source,
            })
    };
    if public.exists() {
        return Err(KeyError::Write {
            path: public,
            source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        });
    }
    write(
        path,
        0o600,
        format!("{SECRET_HEAD}\n{}\n", crate::util::hex(&seed)),
    )?;
    write(
        &public,
        0o644,
        format!(
            "{PUBLIC_HEAD}\n{}\n",
            crate::util::hex(key.verifying_key().as_bytes())
        ),
    )?;
    Ok(public)
}

fn canonical(body: &Body) -> Vec<u8> {
    // serde_json's map is sorted by key: a Value serialises canonically.
    let v = serde_json::to_value(body).expect("a manifest serialises");
    serde_json::to_vec(&v).expect("a value serialises")
}

/// Signs `body` and writes `RUN_DIR/manifest.json`.
pub fn write(run_dir: &Path, mut body: Body, key: &SigningKey) -> std::io::Result<PathBuf> {
    body.format = FORMAT.into();
    body.public_key = crate::util::hex(key.verifying_key().as_bytes());
    let sig = key.sign(&canonical(&body));
    let mut v = serde_json::to_value(&body).expect("a manifest serialises");
    v["signature"] = serde_json::Value::String(crate::util::hex(&sig.to_bytes()));
    let path = run_dir.join(crate::run_dir::MANIFEST);
    fs::write(
        &path,
        serde_json::to_string_pretty(&v).expect("json") + "\n",
    )?;
    Ok(path)
}

/// What `aet verify` found.
#[derive(Debug, Default)]
pub struct Verification {
    /// What checked out, one line each.
    pub ok: Vec<String>,
    /// What does not match, one line each: non-empty means the run was changed.
    pub problems: Vec<String>,
    /// Files of the run directory that nothing verified covers (anyone may have written them),
    /// one line each.
    pub unsigned: Vec<String>,
}

/// Whether a run's `audit.json` is covered by its signed manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuditCoverage {
    /// No `audit.json`.
    NoReport,
    /// The run is not signed: nothing covers anything but the chain.
    UnsignedRun,
    /// The signed manifest names this `audit.json` by its hash.
    Signed,
    /// The run is signed but its `audit.json` is not the one the manifest names (or the
    /// manifest names none): the verdict is nobody's word. The reason says which.
    UnsignedReport(String),
}

impl AuditCoverage {
    /// `verdict_signed` in the runs table: null without a report.
    pub fn verdict_signed(&self) -> Option<bool> {
        match self {
            Self::NoReport => None,
            Self::Signed => Some(true),
            Self::UnsignedRun | Self::UnsignedReport(_) => Some(false),
        }
    }
}

/// Reads the manifest, checks its signature, and says whether `audit.json` is the one it names.
/// Cheap (the ledger is not hashed): for the runs table of thousands of runs. `aet verify` is
/// the full check.
pub fn audit_coverage(run_dir: &Path) -> AuditCoverage {
    let audit = run_dir.join(crate::run_dir::AUDIT);
    if !audit.exists() {
        return AuditCoverage::NoReport;
    }
    let Ok(text) = fs::read_to_string(run_dir.join(crate::run_dir::MANIFEST)) else {
        return AuditCoverage::UnsignedRun;
    };
    let unsigned = |why: &str| AuditCoverage::UnsignedReport(format!("{}: {why}", audit.display()));
    let Some((body, sig)) = parse_manifest(&text) else {
        return unsigned("the run's manifest does not decode, so nothing covers the verdict");
    };
    if !signature_holds(&body, &sig) {
        return unsigned("the run's manifest does not verify, so nothing covers the verdict");
    }
    match &body.audit {
        None => unsigned(
            "the run was signed without an audit (aet run --sign without --policy): its \
             manifest does not cover this report or its verdict",
        ),
        Some(a) => match sha256_file(&run_dir.join(&a.path)) {
            Ok(h) if h == a.sha256 && Path::new(&a.path) == Path::new(crate::run_dir::AUDIT) => {
                AuditCoverage::Signed
            }
            _ => unsigned("it is not the report the run's signed manifest names: it was changed"),
        },
    }
}

fn parse_manifest(text: &str) -> Option<(Body, Signature)> {
    let mut value: serde_json::Value = serde_json::from_str(text).ok()?;
    let sig = value
        .as_object_mut()
        .and_then(|o| o.remove("signature"))
        .and_then(|s| s.as_str().and_then(unhex))
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
        .map(|b| Signature::from_bytes(&b))?;
    Some((serde_json::from_value(value).ok()?, sig))
}

fn signer(body: &Body) -> Option<VerifyingKey> {
    unhex(&body.public_key)
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .and_then(|b| VerifyingKey::from_bytes(&b).ok())
}

fn signature_holds(body: &Body, sig: &Signature) -> bool {
    signer(body).is_some_and(|pk| pk.verify(&canonical(body), sig).is_ok())
}

/// Why `aet verify` cannot check (exit 4).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("{0} is not a run directory (no ledger.arrow in it)")]
    NoRun(PathBuf),
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// Checks a run directory: the ledger's chain, and the manifest (its signature, the key when
/// `key` is given, and that the ledger and `audit.json` are the ones it names).
pub fn verify(run_dir: &Path, key: Option<&Path>) -> Result<Verification, VerifyError> {
    let ledger = run_dir.join(crate::run_dir::LEDGER);
    if !run_dir.is_dir() || !ledger.exists() {
        return Err(VerifyError::NoRun(run_dir.to_owned()));
    }
    let expected = key.map(read_public).transpose()?;
    let mut v = Verification::default();
    let chain = match chain::verify(&ledger) {
        Ok(c) => {
            v.ok.push(format!(
                "ledger {}: the hash chain holds ({} batches, {} rows)",
                ledger.display(),
                c.batches,
                c.rows
            ));
            Some(c)
        }
        Err(e) => {
            v.problems.push(format!("ledger {}: {e}", ledger.display()));
            None
        }
    };
    let mpath = run_dir.join(crate::run_dir::MANIFEST);
    let text = match fs::read_to_string(&mpath) {
        Ok(t) => t,
        Err(_) => {
            if expected.is_some() {
                v.problems.push(format!(
                    "{} is missing: the run was not signed (aet run --sign KEY), or the manifest \
                     was removed",
                    mpath.display()
                ));
            } else {
                v.ok.push(
                    "no manifest: the run was not signed; the chain shows the ledger is intact, \
                     not who wrote it"
                        .into(),
                );
            }
            v.unsigned = uncovered(run_dir, None);
            return Ok(v);
        }
    };
    if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
        v.problems.push(format!(
            "{}: not JSON ({e}): it was changed",
            mpath.display()
        ));
        return Ok(v);
    }
    let Some((body, sig)) = parse_manifest(&text) else {
        v.problems.push(format!(
            "{}: not an aet manifest (a field is missing or has the wrong type): it was changed",
            mpath.display()
        ));
        return Ok(v);
    };
    match signer(&body) {
        None => v
            .problems
            .push("the manifest's public key is not an Ed25519 key: it was changed".into()),
        Some(pk) => {
            if pk.verify(&canonical(&body), &sig).is_ok() {
                v.ok.push(format!(
                    "manifest {}: the signature holds (public key {})",
                    mpath.display(),
                    body.public_key
                ));
            } else {
                v.problems.push(format!(
                    "manifest {}: the signature does not match its content: the manifest (or its \
                     signature) was changed",
                    mpath.display()
                ));
            }
            if let Some(want) = &expected {
                if want == &pk {
                    v.ok.push("signed by the expected key".into());
                } else {
                    v.problems.push(format!(
                        "signed by another key ({}) than the one given ({})",
                        body.public_key,
                        crate::util::hex(want.as_bytes())
                    ));
                }
            }
        }
    }
    if let Some(c) = &chain {
        if chain::hex(&c.final_hash) == body.ledger_final_hash {
            v.ok.push("the ledger is the one the manifest names".into());
        } else {
            v.problems.push(format!(
                "the ledger's final hash {} is not the manifest's {}: the ledger was replaced",
                chain::hex(&c.final_hash),
                body.ledger_final_hash
            ));
        }
    }
    for a in body.audit.iter().chain(&body.audit_html) {
        let p = run_dir.join(&a.path);
        match sha256_file(&p) {
            Ok(h) if h == a.sha256 => {
                v.ok.push(format!("{} is the one the manifest names", a.path))
            }
            Ok(h) => v.problems.push(format!(
                "{}: sha256 {h}, the manifest says {}: it was changed",
                p.display(),
                a.sha256
            )),
            Err(e) => v.problems.push(format!("{}: {e}", p.display())),
        }
    }
    v.unsigned = uncovered(run_dir, Some(&body));
    Ok(v)
}

/// The files of a run directory that the check covers: the ledger, and with a manifest, the
/// manifest and the report it names.
fn uncovered(run_dir: &Path, body: Option<&Body>) -> Vec<String> {
    let mut covered = vec![std::ffi::OsString::from(crate::run_dir::LEDGER)];
    if let Some(b) = body {
        covered.push(crate::run_dir::MANIFEST.into());
        covered.extend(
            b.audit
                .iter()
                .chain(&b.audit_html)
                .map(|a| a.path.clone().into()),
        );
    }
    let mut names: Vec<_> = fs::read_dir(run_dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|n| !covered.contains(n))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let p = run_dir.join(&n);
            if n == crate::run_dir::AUDIT {
                format!(
                    "{} is not signed: its verdict and findings are nobody's word (re-audit the \
                     ledger: aet audit {} --policy POLICY)",
                    p.display(),
                    run_dir.display()
                )
            } else {
                format!("{} is not signed", p.display())
            }
        })
        .collect()
}
