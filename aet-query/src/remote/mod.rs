//! Runs in S3-compatible object storage (AWS S3, MinIO, Ceph RGW, R2, moto): shipped there at
//! their end ([`ship()`]) and read back from there ([`fetch()`]) by `aet query`, `aet audit`,
//! `aet ledger summary` and `aet verify`.
//!
//! A shipped run is the objects `URL/RUN/NAME`, one per file of its directory, and last
//! `URL/RUN/shipped.json` ([`SHIPPED`]): the name, size and SHA-256 of every file. Each object
//! is written whole (one PUT, or a multipart upload completed only when every part is in) and
//! `shipped.json` is written after all of them, so a reader that finds it finds the whole run; a
//! run without it was not completely shipped and is reported, never read.
//!
//! Credentials come the standard way: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (and
//! `AWS_SESSION_TOKEN`), else the profile `AWS_PROFILE` (default `default`) of the shared files
//! `~/.aws/credentials` and `~/.aws/config` (or `AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`),
//! else web identity, the container's or the instance's role (object_store's chain). The
//! endpoint is `AWS_ENDPOINT_URL` (or the profile's `endpoint_url`); an `http://` endpoint is
//! allowed as given. No message of aet's names a credential.

mod fetch;
mod ship;

use std::{sync::Arc, time::Duration};

use object_store::{
    ClientOptions, ObjectStore, RetryConfig,
    aws::{AmazonS3Builder, AmazonS3ConfigKey},
    path::Path as ObjectPath,
};

pub use fetch::{Fetched, FetchedRun, fetch};
pub use ship::{ShipOptions, Shipped, exists_under, ship, upload_file, upload_tree};

/// The object a shipped run is complete with, written last.
pub const SHIPPED: &str = "shipped.json";

/// Why talking to the bucket failed.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// Not an `s3://BUCKET/PREFIX` URL.
    #[error("{0}: not an object-storage URL (expected s3://BUCKET/PREFIX)")]
    Url(String),
    /// The store could not be configured (a bad endpoint or region, an unreadable profile).
    #[error("{url}: {message}")]
    Config { url: String, message: String },
    /// A request failed (after its retries).
    #[error("{url}: {message}")]
    Request { url: String, message: String },
    /// A local file could not be read or written.
    #[error("{path}: {message}")]
    Local { path: String, message: String },
    /// The run is already in the bucket, with other contents.
    #[error(
        "{0} already holds a shipped run with other contents: a shipped run is never \
         overwritten"
    )]
    Exists(String),
    /// The run directory cannot be shipped as it is.
    #[error("{path}: {message}")]
    NotShippable { path: String, message: String },
    /// Nothing shipped under a prefix.
    #[error("{0}: no shipped run there (no {SHIPPED} under it)")]
    Empty(String),
    /// The async runtime could not start.
    #[error("starting the object-storage client: {0}")]
    Runtime(std::io::Error),
}

/// A bucket and a prefix in it, with a client for the bucket.
#[derive(Clone, Debug)]
pub struct Location {
    /// `s3://BUCKET`, without a trailing slash.
    bucket_url: String,
    /// The prefix (no leading or trailing slash; empty for the bucket's root).
    prefix: String,
    store: Arc<dyn ObjectStore>,
    /// The instance metadata service's address when it is the only place credentials can come
    /// from (no keys in the environment or the profile, no web identity, no container role).
    imds_only: Option<String>,
}

impl Location {
    /// The bucket and prefix `url` names, with a client configured from the environment and
    /// the shared AWS files. Nothing is asked of the server yet.
    pub fn open(url: &str) -> Result<Self, RemoteError> {
        let rest = url
            .strip_prefix("s3://")
            .or_else(|| url.strip_prefix("s3a://"))
            .ok_or_else(|| RemoteError::Url(url.to_owned()))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let prefix = prefix.trim_matches('/');
        if bucket.is_empty()
            || prefix.split('/').any(|c| c == "." || c == "..")
            || prefix.contains("//")
        {
            return Err(RemoteError::Url(url.to_owned()));
        }
        let bucket_url = format!("s3://{bucket}");
        let config = |message: String| RemoteError::Config {
            url: bucket_url.clone(),
            message,
        };
        let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
        let profile = profile::load().map_err(config)?;
        let has_env_keys = std::env::var_os("AWS_ACCESS_KEY_ID").is_some();
        if !has_env_keys {
            if let Some(k) = &profile.access_key_id {
                b = b.with_access_key_id(k);
            }
            if let Some(k) = &profile.secret_access_key {
                b = b.with_secret_access_key(k);
            }
            if let Some(t) = &profile.session_token {
                b = b.with_token(t);
            }
        }
        let env_region = ["AWS_REGION", "AWS_DEFAULT_REGION"]
            .iter()
            .any(|k| std::env::var_os(k).is_some());
        match (&profile.region, env_region) {
            (Some(r), false) => b = b.with_region(r),
            (None, false) => b = b.with_region("us-east-1"),
            _ => {}
        }
        let env_endpoint = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
            .iter()
            .find_map(|k| std::env::var(k).ok());
        if env_endpoint.is_none()
            && let Some(e) = &profile.endpoint_url
        {
            b = b.with_endpoint(e);
        }
        let endpoint = env_endpoint.or(profile.endpoint_url.clone());
        // Set on the client options below: `with_client_options` replaces them whole, so a
        // builder-level `with_allow_http` before it would be lost.
        let allow_http = endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("http://"));
        let retry_timeout = std::env::var("AET_S3_RETRY_SECS")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| (0.0..=3600.0).contains(s))
            .map_or(Duration::from_secs(60), Duration::from_secs_f64);
        b = b
            .with_retry(RetryConfig {
                max_retries: 8,
                retry_timeout,
                ..Default::default()
            })
            .with_client_options(
                ClientOptions::new()
                    .with_connect_timeout(Duration::from_secs(10))
                    .with_timeout(Duration::from_secs(120))
                    .with_allow_http(allow_http),
            )
            .with_config(AmazonS3ConfigKey::Checksum, "sha256");
        let store = b.build().map_err(|e| config(redact(&e.to_string())))?;
        let given = has_env_keys
            || profile.access_key_id.is_some()
            || [
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            ]
            .iter()
            .any(|k| std::env::var_os(k).is_some());
        let imds_only = (!given).then(|| {
            std::env::var("AWS_METADATA_ENDPOINT")
                .unwrap_or_else(|_| "http://169.254.169.254".into())
                .trim_end_matches('/')
                .to_owned()
        });
        Ok(Self {
            bucket_url,
            prefix: prefix.to_owned(),
            store: Arc::new(store),
            imds_only,
        })
    }

    /// The location `name` under this one.
    pub fn join(&self, name: &str) -> Self {
        let name = name.trim_matches('/');
        Self {
            bucket_url: self.bucket_url.clone(),
            prefix: if self.prefix.is_empty() {
                name.to_owned()
            } else {
                format!("{}/{name}", self.prefix)
            },
            store: self.store.clone(),
            imds_only: self.imds_only.clone(),
        }
    }

    /// `s3://BUCKET/PREFIX`.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            self.bucket_url.clone()
        } else {
            format!("{}/{}", self.bucket_url, self.prefix)
        }
    }

    /// The object `name` under the prefix.
    fn object(&self, name: &str) -> ObjectPath {
        ObjectPath::from(self.join(name).prefix)
    }

    /// The object the prefix itself names.
    fn path(&self) -> ObjectPath {
        ObjectPath::from(self.prefix.as_str())
    }

    fn request_error(&self, what: &str, e: &object_store::Error) -> RemoteError {
        let mut message = redact(&error_chain(e));
        // The instance metadata service is the last place credentials are looked for: a
        // failure there on a machine that is not a cloud instance means none were given.
        if self
            .imds_only
            .as_deref()
            .is_some_and(|m| message.contains(m))
        {
            message = format!(
                "no credentials were found (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the \
                 profile {} of ~/.aws/credentials and ~/.aws/config, web identity, the \
                 container's role), and the instance metadata service, tried last, did not \
                 give any: {message}",
                std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into())
            );
        }
        RemoteError::Request {
            url: format!("{}/{}", self.bucket_url, what.trim_start_matches('/')),
            message,
        }
    }
}

/// An error with its sources (object_store's Display leaves the HTTP cause in them).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// A message with every credential of the environment and the profile replaced: whatever a
/// client library puts in an error, aet prints no secret.
fn redact(message: &str) -> String {
    let profile = profile::load().unwrap_or_default();
    let secrets: Vec<String> = ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .chain(profile.secret_access_key)
        .chain(profile.session_token)
        .collect();
    redact_with(message, &secrets)
}

fn redact_with(message: &str, secrets: &[String]) -> String {
    let mut out = message.to_owned();
    for s in secrets.iter().filter(|s| s.len() >= 4) {
        out = out.replace(s.as_str(), "[redacted]");
    }
    out
}

/// A runtime for the client (its HTTP connections and its timers).
fn runtime() -> Result<tokio::runtime::Runtime, RemoteError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .map_err(RemoteError::Runtime)
}

/// What `shipped.json` holds.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShippedIndex {
    /// `aet-shipped/1`.
    pub format: String,
    /// The run's name (its directory's).
    pub run: String,
    /// The aet that shipped it.
    pub aet_version: String,
    /// When it was shipped (seconds since the epoch).
    pub shipped_unix: u64,
    /// Every file of the run, by name relative to the run.
    pub files: Vec<ShippedFile>,
}

/// One file of a shipped run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShippedFile {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
}

/// The index's format.
pub const FORMAT: &str = "aet-shipped/1";

mod profile {
    //! The shared AWS files' profile (`AWS_PROFILE`, default `default`).
    use std::path::PathBuf;

    #[derive(Clone, Debug, Default)]
    pub struct Profile {
        pub access_key_id: Option<String>,
        pub secret_access_key: Option<String>,
        pub session_token: Option<String>,
        pub region: Option<String>,
        pub endpoint_url: Option<String>,
    }

    fn home_file(var: &str, rel: &str) -> Option<PathBuf> {
        std::env::var_os(var)
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rel)))
    }

    /// The profile's keys, region and endpoint from whichever of the files exist. A file that
    /// exists but cannot be parsed is an error (naming the file, never its contents); a profile
    /// named by `AWS_PROFILE` that neither file has is one too.
    pub fn load() -> Result<Profile, String> {
        let name = std::env::var("AWS_PROFILE").ok();
        let wanted = name.clone().unwrap_or_else(|| "default".into());
        let mut p = Profile::default();
        let mut found = false;
        let files = [
            (
                home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"),
                false,
            ),
            (home_file("AWS_CONFIG_FILE", ".aws/config"), true),
        ];
        for (file, is_config) in files {
            let Some(file) = file.filter(|f| f.is_file()) else {
                continue;
            };
            let ini = ini::Ini::load_from_file(&file)
                .map_err(|e| format!("{}: not a valid AWS file: {}", file.display(), kind(&e)))?;
            let section = if is_config && wanted != "default" {
                format!("profile {wanted}")
            } else {
                wanted.clone()
            };
            let Some(s) = ini.section(Some(section.as_str())) else {
                continue;
            };
            found = true;
            let get = |k: &str| s.get(k).map(str::to_owned);
            p.access_key_id = p.access_key_id.or(get("aws_access_key_id"));
            p.secret_access_key = p.secret_access_key.or(get("aws_secret_access_key"));
            p.session_token = p.session_token.or(get("aws_session_token"));
            p.region = p.region.or(get("region"));
            p.endpoint_url = p.endpoint_url.or(get("endpoint_url"));
        }
        if !found && let Some(n) = name {
            return Err(format!(
                "AWS_PROFILE={n}: no such profile in the shared credentials or config file"
            ));
        }
        Ok(p)
    }

    /// An INI error without the line it quotes (which may hold a key).
    fn kind(e: &ini::Error) -> String {
        match e {
            ini::Error::Io(e) => e.to_string(),
            ini::Error::Parse(p) => format!("line {}", p.line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_bucket_and_a_prefix() {
        let l = Location::open("s3://bucket/a/b/").unwrap();
        assert_eq!(l.url(), "s3://bucket/a/b");
        assert_eq!(l.join("run1").url(), "s3://bucket/a/b/run1");
        assert_eq!(l.object(SHIPPED).as_ref(), "a/b/shipped.json");
        let root = Location::open("s3://bucket").unwrap();
        assert_eq!(root.url(), "s3://bucket");
        assert_eq!(root.join("r").url(), "s3://bucket/r");
        for bad in ["s3://", "s3:///x", "gs://b/x", "s3://b/../x", "s3://b/a//c"] {
            let e = Location::open(bad).unwrap_err();
            assert!(matches!(e, RemoteError::Url(_)), "{bad}: {e}");
            assert!(e.to_string().contains("s3://BUCKET/PREFIX"), "{e}");
        }
    }

    #[test]
    fn an_error_names_no_secret() {
        let m = redact_with(
            "signature failed for token tok-canary-123 at host",
            &["tok-canary-123".into(), "".into()],
        );
        assert_eq!(m, "signature failed for token [redacted] at host");
    }
}
