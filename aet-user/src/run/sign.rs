//! The signed manifest of a run directory (`aet run --sign KEY`; `aet verify` checks it).

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// Writes the run's signed manifest: the ledger's chain, the reports, the policy and spec the
/// run was given, and aet's own binary and eBPF object, hashed and signed with `key`.
pub fn sign(
    run_dir: &Path,
    key: &ed25519_dalek::SigningKey,
    policy: Option<&Path>,
    spec: Option<&Path>,
    verdict: Option<String>,
) -> anyhow::Result<PathBuf> {
    use aet_ledger::manifest::{FileHash, sha256_file};
    let hashed = |p: &Path| -> anyhow::Result<FileHash> {
        Ok(FileHash {
            path: p.display().to_string(),
            sha256: sha256_file(p).with_context(|| format!("hashing {}", p.display()))?,
        })
    };
    let ledger = run_dir.join(aet_ledger::run_dir::LEDGER);
    let chain = aet_ledger::chain::verify(&ledger)?;
    let meta = aet_ledger::reader::Ledger::open(&ledger)?.meta()?;
    let exe = std::env::current_exe()?;
    // A report of the run, named relative to the run directory, when there is one.
    let report = |name: &str| -> anyhow::Result<Option<FileHash>> {
        let p = run_dir.join(name);
        if !p.is_file() {
            return Ok(None);
        }
        Ok(Some(FileHash {
            path: name.into(),
            sha256: sha256_file(&p).with_context(|| format!("hashing {}", p.display()))?,
        }))
    };
    let body = aet_ledger::manifest::Body {
        format: String::new(),
        version: 1,
        aet_version: crate::version::RELEASE.into(),
        ledger: aet_ledger::run_dir::LEDGER.into(),
        ledger_final_hash: aet_ledger::chain::hex(&chain.final_hash),
        ledger_batches: chain.batches,
        ledger_rows: chain.rows,
        policy: policy.map(hashed).transpose()?,
        sandbox_spec: spec.map(hashed).transpose()?,
        aet_binary: hashed(&exe)?,
        ebpf_object_sha256: aet_ledger::manifest::sha256(aet_monitor::loader::ebpf_object()),
        kernel_release: meta.kernel_release.clone(),
        events_lost: meta.events_lost,
        complete: meta.complete,
        incomplete_reasons: meta.incomplete.texts(),
        verdict,
        audit: report(aet_ledger::run_dir::AUDIT)?,
        audit_html: report(aet_ledger::run_dir::AUDIT_HTML)?,
        public_key: String::new(),
    };
    Ok(aet_ledger::manifest::write(run_dir, body, key)?)
}
