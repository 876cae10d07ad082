//! A finished run directory sent to `URL/RUN/`, `shipped.json` last.
use std::{
    io::Read as _,
    path::{Path, PathBuf},
    time::Instant,
};

use object_store::{ObjectStoreExt as _, PutPayload, WriteMultipart};
use sha2::{Digest as _, Sha256};

use super::{FORMAT, Location, RemoteError, SHIPPED, ShippedFile, ShippedIndex};

/// How a run is uploaded.
#[derive(Clone, Debug)]
pub struct ShipOptions {
    /// A file larger than this goes up as a multipart upload of parts this size (at least
    /// 5 MiB, S3's smallest part).
    pub part_bytes: usize,
    /// Parts of one file in flight at once.
    pub concurrency: usize,
}

impl Default for ShipOptions {
    /// 16 MiB parts, four at once; `AET_S3_PART_MB` sets the part size.
    fn default() -> Self {
        let mb = std::env::var("AET_S3_PART_MB")
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
            .unwrap_or(16)
            .clamp(5, 4096);
        Self {
            part_bytes: mb << 20,
            concurrency: 4,
        }
    }
}

/// What shipping did.
#[derive(Clone, Debug)]
pub struct Shipped {
    /// `s3://BUCKET/PREFIX/RUN`.
    pub url: String,
    /// The index written last.
    pub index: ShippedIndex,
    /// Bytes uploaded (0 when the same run was already there).
    pub bytes: u64,
    /// Seconds the upload took.
    pub seconds: f64,
    /// The bucket already held this very run (same files, same hashes): nothing was sent.
    pub already: bool,
}

/// Ships the finished run directory `dir` to `dest/RUN` (RUN: the directory's name): every file
/// (multipart above [`ShipOptions::part_bytes`]), then `shipped.json`. A run already shipped
/// with the same contents is left as it is; with other contents it is an error.
pub fn ship(dir: &Path, dest: &str, opts: &ShipOptions) -> Result<Shipped, RemoteError> {
    let local = |path: &Path, message: String| RemoteError::NotShippable {
        path: path.display().to_string(),
        message,
    };
    let dir = std::fs::canonicalize(dir).map_err(|e| local(dir, e.to_string()))?;
    if !dir.join(aet_ledger::run_dir::LEDGER).is_file() {
        return Err(local(
            &dir,
            format!("not a run directory (no {})", aet_ledger::run_dir::LEDGER),
        ));
    }
    if dir.join(aet_ledger::run_dir::CONTROL).exists() {
        return Err(local(
            &dir,
            format!(
                "the run is still going (its {} file is there; if its aet died, remove it): a \
                 run is shipped once finished",
                aet_ledger::run_dir::CONTROL
            ),
        ));
    }
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| local(&dir, "the run directory's name is not UTF-8".into()))?
        .to_owned();
    let mut files = Vec::new();
    list_files(&dir, &dir, &mut files)?;
    // The ledger first: the rest of the run says things about it.
    files.sort_by_key(|(rel, _)| (rel != aet_ledger::run_dir::LEDGER, rel.clone()));
    let mut index = ShippedIndex {
        format: FORMAT.into(),
        run: name.clone(),
        aet_version: aet_ledger::version::get().into(),
        shipped_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        files: Vec::new(),
    };
    for (rel, path) in &files {
        let (bytes, sha256) = hash_file(path)?;
        index.files.push(ShippedFile {
            name: rel.clone(),
            bytes,
            sha256,
        });
    }
    let run = Location::open(dest)?.join(&name);
    let rt = super::runtime()?;
    rt.block_on(async {
        let start = Instant::now();
        if let Some(there) = read_index(&run).await? {
            if there.files == index.files {
                return Ok(Shipped {
                    url: run.url(),
                    index: there,
                    bytes: 0,
                    seconds: start.elapsed().as_secs_f64(),
                    already: true,
                });
            }
            return Err(RemoteError::Exists(run.url()));
        }
        let mut sent = 0;
        for ((rel, path), f) in files.iter().zip(&index.files) {
            let sha = put_file(&run, rel, path, opts).await?;
            if sha != f.sha256 {
                return Err(local(
                    path,
                    "changed while it was being shipped: the run is not finished".into(),
                ));
            }
            sent += f.bytes;
        }
        let text = serde_json::to_vec_pretty(&index).expect("the index serializes");
        sent += text.len() as u64;
        run.store
            .put(&run.object(SHIPPED), PutPayload::from(text))
            .await
            .map_err(|e| run.request_error(run.object(SHIPPED).as_ref(), &e))?;
        Ok(Shipped {
            url: run.url(),
            index,
            bytes: sent,
            seconds: start.elapsed().as_secs_f64(),
            already: false,
        })
    })
}

/// Uploads one local file to `dest` (a full object URL), whole or not at all.
pub fn upload_file(local: &Path, dest: &str, opts: &ShipOptions) -> Result<(), RemoteError> {
    let loc = Location::open(dest)?;
    if loc.prefix.is_empty() {
        return Err(RemoteError::Url(format!("{dest} (names no object)")));
    }
    let rt = super::runtime()?;
    let parent = Location {
        prefix: String::new(),
        ..loc.clone()
    };
    rt.block_on(put_file(&parent, &loc.prefix, local, opts))?;
    Ok(())
}

/// Uploads every file under the local directory `dir` to `dest/RELATIVE_PATH`.
pub fn upload_tree(dir: &Path, dest: &str, opts: &ShipOptions) -> Result<(), RemoteError> {
    let loc = Location::open(dest)?;
    let mut files = Vec::new();
    list_files(dir, dir, &mut files)?;
    files.sort();
    let rt = super::runtime()?;
    rt.block_on(async {
        for (rel, path) in &files {
            put_file(&loc, rel, path, opts).await?;
        }
        Ok(())
    })
}

/// The prefix's objects whose names start with `under` (a listing; for refusing to overwrite).
pub fn exists_under(dest: &str, under: &str) -> Result<Option<String>, RemoteError> {
    use futures::StreamExt as _;
    let loc = Location::open(dest)?.join(under);
    let rt = super::runtime()?;
    rt.block_on(async {
        let mut s = loc.store.list(Some(&loc.path()));
        match s.next().await {
            Some(Ok(m)) => Ok(Some(format!("{}/{}", loc.bucket_url, m.location))),
            Some(Err(e)) => Err(loc.request_error(&loc.prefix, &e)),
            None => Ok(None),
        }
    })
}

/// The run's `shipped.json`, if it is there.
pub(super) async fn read_index(run: &Location) -> Result<Option<ShippedIndex>, RemoteError> {
    let at = run.object(SHIPPED);
    let got = match run.store.get(&at).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(run.request_error(at.as_ref(), &e)),
    };
    let bytes = got
        .bytes()
        .await
        .map_err(|e| run.request_error(at.as_ref(), &e))?;
    let index: ShippedIndex = serde_json::from_slice(&bytes).map_err(|e| RemoteError::Request {
        url: format!("{}/{at}", run.bucket_url),
        message: format!("not an aet {SHIPPED}: {e}"),
    })?;
    if index.format != FORMAT {
        return Err(RemoteError::Request {
            url: format!("{}/{at}", run.bucket_url),
            message: format!("format {:?}: this aet reads {FORMAT}", index.format),
        });
    }
    Ok(Some(index))
}

/// Uploads `path` to `loc/rel`; returns the SHA-256 of what was sent.
async fn put_file(
    loc: &Location,
    rel: &str,
    path: &Path,
    opts: &ShipOptions,
) -> Result<String, RemoteError> {
    let read_err = |e: std::io::Error| RemoteError::Local {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let at = loc.object(rel);
    let req = |e: object_store::Error| loc.request_error(at.as_ref(), &e);
    let mut f = open_no_follow(path).map_err(read_err)?;
    let size = f.metadata().map_err(read_err)?.len();
    let mut sha = Sha256::new();
    if size <= opts.part_bytes as u64 {
        let mut buf = Vec::with_capacity(size as usize);
        f.read_to_end(&mut buf).map_err(read_err)?;
        sha.update(&buf);
        loc.store
            .put(&at, PutPayload::from(buf))
            .await
            .map_err(req)?;
        return Ok(aet_ledger::util::hex(&sha.finalize()));
    }
    // Parts go up as they are read; the object appears only when the upload is completed.
    let upload = loc.store.put_multipart(&at).await.map_err(req)?;
    let mut w = WriteMultipart::new_with_chunk_size(upload, opts.part_bytes);
    let mut buf = vec![0u8; 1 << 20];
    let sent: Result<(), RemoteError> = async {
        loop {
            let n = f.read(&mut buf).map_err(read_err)?;
            if n == 0 {
                break Ok(());
            }
            sha.update(&buf[..n]);
            w.wait_for_capacity(opts.concurrency).await.map_err(req)?;
            w.write(&buf[..n]);
        }
    }
    .await;
    match sent {
        Ok(()) => {
            w.finish().await.map_err(req)?;
            Ok(aet_ledger::util::hex(&sha.finalize()))
        }
        Err(e) => {
            // Best effort: the server may be the reason it failed.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), w.abort()).await;
            Err(e)
        }
    }
}

/// The regular files under `dir` (relative names with `/`), `control` left out; anything else
/// (a symlink, a socket, a name that is not UTF-8) is an error, not a file silently left out.
fn list_files(
    root: &Path,
    dir: &Path,
    out: &mut Vec<(String, PathBuf)>,
) -> Result<(), RemoteError> {
    let err = |p: &Path, message: String| RemoteError::NotShippable {
        path: p.display().to_string(),
        message,
    };
    let rd = std::fs::read_dir(dir).map_err(|e| err(dir, e.to_string()))?;
    for entry in rd {
        let entry = entry.map_err(|e| err(dir, e.to_string()))?;
        let path = entry.path();
        let ty = entry.file_type().map_err(|e| err(&path, e.to_string()))?;
        let rel = path
            .strip_prefix(root)
            .expect("under the root")
            .to_str()
            .ok_or_else(|| {
                err(
                    &path,
                    "a name that is not UTF-8 cannot be an object's".into(),
                )
            })?
            .to_owned();
        if ty.is_dir() {
            list_files(root, &path, out)?;
        } else if ty.is_file() {
            out.push((rel, path));
        } else {
            return Err(err(
                &path,
                "neither a file nor a directory: not shipped, so the run is not".into(),
            ));
        }
    }
    Ok(())
}

/// Opens a file the listing found regular, refusing a symbolic link swapped in since: what is
/// shipped is the run's own bytes, never a file a link points at.
fn open_no_follow(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// A file's size and SHA-256.
fn hash_file(path: &Path) -> Result<(u64, String), RemoteError> {
    let err = |e: std::io::Error| RemoteError::Local {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let mut f = open_no_follow(path).map_err(err)?;
    let mut sha = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(err)?;
        if n == 0 {
            break;
        }
        total += n as u64;
        sha.update(&buf[..n]);
    }
    Ok((total, aet_ledger::util::hex(&sha.finalize())))
}
