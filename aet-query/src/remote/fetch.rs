//! Shipped runs brought from the bucket into a local directory, each file checked against the
//! SHA-256 its `shipped.json` gives.
use std::{
    collections::{BTreeMap, BTreeSet},
    io::Write as _,
    path::{Path, PathBuf},
};

use futures::{StreamExt as _, TryStreamExt as _};
use object_store::ObjectStoreExt as _;
use sha2::{Digest as _, Sha256};

use super::{Location, RemoteError, SHIPPED, ShippedIndex, ship::read_index};

/// One shipped run, downloaded.
#[derive(Clone, Debug)]
pub struct FetchedRun {
    /// Its name (the last component of its prefix).
    pub name: String,
    /// `s3://BUCKET/PREFIX/RUN`.
    pub url: String,
    /// Where it was downloaded.
    pub dir: PathBuf,
    /// Its `shipped.json`.
    pub index: ShippedIndex,
    /// Objects whose bytes are not the ones shipped (size or SHA-256), by URL.
    pub changed: Vec<String>,
    /// Files of the index that are not in the bucket, by URL.
    pub missing: Vec<String>,
    /// Objects under the run that the index does not list (downloaded too), by URL.
    pub extra: Vec<String>,
}

impl FetchedRun {
    /// Whether every object is the one shipped, and no other is there.
    pub fn intact(&self) -> bool {
        self.changed.is_empty() && self.missing.is_empty() && self.extra.is_empty()
    }

    /// What is wrong with the run in the bucket, one line per object.
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        out.extend(
            self.changed
                .iter()
                .map(|u| format!("{u}: not the bytes that were shipped (its SHA-256 differs)")),
        );
        out.extend(
            self.missing
                .iter()
                .map(|u| format!("{u}: shipped, but no longer in the bucket")),
        );
        out.extend(self.extra.iter().map(|u| {
            format!("{u}: added after the run was shipped ({SHIPPED} lists no such file)")
        }));
        out
    }
}

/// What a fetch found.
#[derive(Clone, Debug, Default)]
pub struct Fetched {
    /// The shipped runs, downloaded (in name order).
    pub runs: Vec<FetchedRun>,
    /// Prefixes holding a ledger but no `shipped.json` (a shipping that did not finish), by
    /// URL: not downloaded.
    pub unshipped: Vec<String>,
}

/// Downloads every shipped run at or under `url` (a run's own prefix, or any prefix above many)
/// into `into` (`into/N/RUN`). Listing the prefix finds them: a run is the prefix of a
/// `shipped.json`.
pub fn fetch(url: &str, into: &Path) -> Result<Fetched, RemoteError> {
    let root = Location::open(url)?;
    let rt = super::runtime()?;
    rt.block_on(async {
        let objects: Vec<object_store::ObjectMeta> = root
            .store
            .list(Some(&root.path()))
            .try_collect()
            .await
            .map_err(|e| root.request_error(&root.prefix, &e))?;
        let keys: BTreeSet<String> = objects.iter().map(|m| m.location.to_string()).collect();
        let runs: BTreeSet<String> = keys
            .iter()
            .filter_map(|k| k.strip_suffix(SHIPPED))
            .filter(|p| p.is_empty() || p.ends_with('/'))
            .map(|p| p.trim_end_matches('/').to_owned())
            .collect();
        let run_of = |key: &str| {
            runs.iter()
                .filter(|r| r.is_empty() || key.starts_with(&format!("{r}/")))
                .max_by_key(|r| r.len())
                .cloned()
        };
        let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut unshipped = BTreeSet::new();
        for k in &keys {
            match run_of(k) {
                Some(r) => members.entry(r).or_default().push(k.clone()),
                None if k.ends_with(&format!("/{}", aet_ledger::run_dir::LEDGER))
                    || k == aet_ledger::run_dir::LEDGER =>
                {
                    let below = k
                        .strip_prefix(&root.prefix)
                        .unwrap_or(k)
                        .trim_start_matches('/');
                    let first = below.split('/').next().unwrap_or("");
                    let top = if first == aet_ledger::run_dir::LEDGER {
                        root.url()
                    } else {
                        root.join(first).url()
                    };
                    unshipped.insert(top);
                }
                None => {}
            }
        }
        if runs.is_empty() && unshipped.is_empty() {
            return Err(RemoteError::Empty(root.url()));
        }
        let jobs = members.into_iter().enumerate().map(|(i, (prefix, keys))| {
            let loc = Location {
                prefix,
                ..root.clone()
            };
            let dir = into.join(i.to_string());
            async move { fetch_run(loc, keys, dir).await }
        });
        let mut fetched: Vec<FetchedRun> = futures::stream::iter(jobs)
            .buffer_unordered(8)
            .try_collect()
            .await?;
        fetched.sort_by(|a, b| a.name.cmp(&b.name).then(a.url.cmp(&b.url)));
        Ok(Fetched {
            runs: fetched,
            unshipped: unshipped.into_iter().collect(),
        })
    })
}

/// Downloads one run (its objects `keys`) into `parent/RUN`.
async fn fetch_run(
    run: Location,
    keys: Vec<String>,
    parent: PathBuf,
) -> Result<FetchedRun, RemoteError> {
    let index = read_index(&run)
        .await?
        .ok_or_else(|| RemoteError::Request {
            url: run.url(),
            message: format!("{SHIPPED} disappeared while the run was read"),
        })?;
    let name = run
        .prefix
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or(&index.run)
        .to_owned();
    // The bucket names the run's directory: one plain name, never a way out of `parent`.
    if !safe_name(&name) || name.contains('/') {
        return Err(RemoteError::Request {
            url: run.url(),
            message: format!("names the run {name:?}, which cannot be a directory's name"),
        });
    }
    let dir = parent.join(&name);
    let base = if run.prefix.is_empty() {
        String::new()
    } else {
        format!("{}/", run.prefix)
    };
    let listed: BTreeSet<String> = keys
        .iter()
        .filter_map(|k| k.strip_prefix(&base))
        .map(str::to_owned)
        .filter(|k| k != SHIPPED)
        .collect();
    let indexed: BTreeSet<&str> = index.files.iter().map(|f| f.name.as_str()).collect();
    let mut out = FetchedRun {
        name,
        url: run.url(),
        dir: dir.clone(),
        changed: Vec::new(),
        missing: Vec::new(),
        extra: Vec::new(),
        index: index.clone(),
    };
    for f in &index.files {
        if !safe_name(&f.name) {
            return Err(RemoteError::Request {
                url: run.join(SHIPPED).url(),
                message: format!("names the file {:?}, which is outside the run", f.name),
            });
        }
        if !listed.contains(&f.name) {
            out.missing.push(run.join(&f.name).url());
            continue;
        }
        let (bytes, sha) = download(&run, &f.name, &dir.join(&f.name)).await?;
        if bytes != f.bytes || sha != f.sha256 {
            out.changed.push(run.join(&f.name).url());
        }
    }
    for extra in listed.iter().filter(|k| !indexed.contains(k.as_str())) {
        if safe_name(extra) {
            download(&run, extra, &dir.join(extra)).await?;
        }
        out.extra.push(run.join(extra).url());
    }
    Ok(out)
}

/// A relative name that stays inside the run.
fn safe_name(n: &str) -> bool {
    !n.is_empty()
        && !n.starts_with('/')
        && n.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Streams `run/name` into `to`; returns its size and SHA-256.
async fn download(run: &Location, name: &str, to: &Path) -> Result<(u64, String), RemoteError> {
    let at = run.object(name);
    let local = |e: std::io::Error| RemoteError::Local {
        path: to.display().to_string(),
        message: e.to_string(),
    };
    if let Some(p) = to.parent() {
        std::fs::create_dir_all(p).map_err(local)?;
    }
    let got = run
        .store
        .get(&at)
        .await
        .map_err(|e| run.request_error(at.as_ref(), &e))?;
    let mut stream = got.into_stream();
    let mut f = std::io::BufWriter::new(std::fs::File::create(to).map_err(local)?);
    let mut sha = Sha256::new();
    let mut total = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| run.request_error(at.as_ref(), &e))?;
        sha.update(&chunk);
        total += chunk.len() as u64;
        f.write_all(&chunk).map_err(local)?;
    }
    f.flush().map_err(local)?;
    Ok((total, aet_ledger::util::hex(&sha.finalize())))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_shipped_name_stays_inside_its_run() {
        for ok in ["ledger.arrow", "sub/x.json"] {
            assert!(super::safe_name(ok), "{ok}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./x"] {
            assert!(!super::safe_name(bad), "{bad}");
        }
    }
}
