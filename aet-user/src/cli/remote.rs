//! `s3://` arguments: the runs they name, downloaded into a temporary directory and checked
//! against their `shipped.json`, for the commands that read local runs (`aet query`, `aet
//! ledger summary|export`, `aet audit`, `aet verify`); and objects written there (`aet query -o`,
//! `aet ledger export --parquet`). See `aet_query::remote`.
#![cfg_attr(not(feature = "query"), allow(dead_code, unused_imports))]
use std::path::{Path, PathBuf};

/// Whether an argument names object storage.
pub fn is_url(p: &Path) -> bool {
    p.to_str()
        .is_some_and(|s| s.starts_with("s3://") || s.starts_with("s3a://"))
}

/// Arguments with their `s3://` ones replaced by the runs downloaded from there.
pub struct Localized {
    /// Local paths, in the order given (a URL's runs in name order).
    pub paths: Vec<PathBuf>,
    /// What was left out and why: a run changed in the bucket, a prefix whose shipping did not
    /// finish.
    pub problems: Vec<String>,
    /// Runs (or prefixes) left out.
    pub left_out: usize,
    /// The downloads (removed when this is dropped).
    _tmp: Option<tempfile::TempDir>,
}

#[cfg(not(feature = "query"))]
pub fn localize(args: &[PathBuf]) -> anyhow::Result<Localized> {
    if let Some(u) = args.iter().find(|a| is_url(a)) {
        anyhow::bail!("{}: {}", u.display(), NO_REMOTE);
    }
    Ok(Localized {
        paths: args.to_vec(),
        problems: Vec::new(),
        left_out: 0,
        _tmp: None,
    })
}

/// Said by an aet built without the `query` feature, which holds the object-storage client.
#[cfg(not(feature = "query"))]
pub const NO_REMOTE: &str = "this aet was built without object storage (the `query` feature: \
     `cargo xtask demo` leaves it out to build fast); `cargo xtask build` builds the whole aet";

#[cfg(feature = "query")]
pub fn localize(args: &[PathBuf]) -> anyhow::Result<Localized> {
    let mut out = Localized {
        paths: Vec::new(),
        problems: Vec::new(),
        left_out: 0,
        _tmp: None,
    };
    for (i, a) in args.iter().enumerate() {
        if !is_url(a) {
            out.paths.push(a.clone());
            continue;
        }
        let url = a.to_str().expect("a URL is UTF-8");
        if out._tmp.is_none() {
            out._tmp = Some(tempfile::Builder::new().prefix("aet-s3-").tempdir()?);
        }
        let into = out
            ._tmp
            .as_ref()
            .expect("made above")
            .path()
            .join(i.to_string());
        let fetched = aet_query::remote::fetch(url, &into)?;
        for u in fetched.unshipped {
            out.left_out += 1;
            out.problems.push(format!(
                "{u}: holds a ledger but no {} (its shipping did not finish; `aet ship` it \
                 again): left out",
                aet_query::remote::SHIPPED
            ));
        }
        for r in fetched.runs {
            if r.intact() {
                out.paths.push(r.dir);
            } else {
                out.left_out += 1;
                for p in r.problems() {
                    out.problems
                        .push(format!("{p}: the run {} is left out", r.url));
                }
            }
        }
    }
    Ok(out)
}

/// One run downloaded from the bucket.
pub struct OneRun {
    /// Its directory (removed when this is dropped).
    pub dir: PathBuf,
    /// `s3://BUCKET/PREFIX/RUN`.
    pub url: String,
    /// What differs from what was shipped, one line per object (empty: intact).
    pub problems: Vec<String>,
    _tmp: tempfile::TempDir,
}

/// The one run `url` names, downloaded (an error when it names none or several). `intact`:
/// a run changed in the bucket is an error naming each object; otherwise the caller reads
/// [`OneRun::problems`] itself (`aet verify`).
#[cfg(feature = "query")]
pub fn one_run(url: &str, intact: bool) -> anyhow::Result<OneRun> {
    let tmp = tempfile::Builder::new().prefix("aet-s3-").tempdir()?;
    let mut fetched = aet_query::remote::fetch(url, tmp.path())?;
    if fetched.runs.len() != 1 {
        let mut names: Vec<String> = fetched.runs.iter().map(|r| r.url.clone()).collect();
        names.extend(
            fetched
                .unshipped
                .iter()
                .map(|u| format!("{u} (not completely shipped)")),
        );
        anyhow::bail!(
            "{url}: names {} runs, not one ({}): give one run's prefix",
            names.len(),
            names.join(", ")
        );
    }
    let run = fetched.runs.remove(0);
    let problems = run.problems();
    if intact && !problems.is_empty() {
        anyhow::bail!(
            "{}: the run in the bucket is not the one shipped: {}",
            run.url,
            problems.join("; ")
        );
    }
    Ok(OneRun {
        dir: run.dir,
        url: run.url,
        problems,
        _tmp: tmp,
    })
}

#[cfg(not(feature = "query"))]
pub fn one_run(url: &str, _: bool) -> anyhow::Result<OneRun> {
    anyhow::bail!("{url}: {NO_REMOTE}")
}

/// Uploads a finished local file to the object `url`.
#[cfg(feature = "query")]
pub fn upload(local: &Path, url: &str) -> anyhow::Result<()> {
    aet_query::remote::upload_file(local, url, &Default::default())?;
    Ok(())
}

#[cfg(not(feature = "query"))]
pub fn upload(_: &Path, url: &str) -> anyhow::Result<()> {
    anyhow::bail!("{url}: {NO_REMOTE}")
}

/// Refuses to write where an object is already there (`URL/under/…`).
#[cfg(feature = "query")]
pub fn refuse_existing(url: &str, under: &str) -> anyhow::Result<()> {
    if let Some(o) = aet_query::remote::exists_under(url, under)? {
        anyhow::bail!("{o} is there already: a partition is never overwritten");
    }
    Ok(())
}

#[cfg(not(feature = "query"))]
pub fn refuse_existing(url: &str, _: &str) -> anyhow::Result<()> {
    anyhow::bail!("{url}: {NO_REMOTE}")
}

/// Uploads every file under `dir` to `url/RELATIVE_PATH`.
#[cfg(feature = "query")]
pub fn upload_tree(dir: &Path, url: &str) -> anyhow::Result<()> {
    aet_query::remote::upload_tree(dir, url, &Default::default())?;
    Ok(())
}

#[cfg(not(feature = "query"))]
pub fn upload_tree(_: &Path, url: &str) -> anyhow::Result<()> {
    anyhow::bail!("{url}: {NO_REMOTE}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_object_storage_urls_are_urls() {
        assert!(is_url("s3://b/x".as_ref()));
        assert!(is_url("s3a://b".as_ref()));
        assert!(!is_url("runs/s3://b".as_ref()));
        assert!(!is_url("/tmp/x".as_ref()));
    }
}
