//! Programs by content: the SHA-256 of each executed file and each file mapped executable,
//! taken from the file the process has, once per file identity (device, inode, change time).
//!
//! Where the hash comes from, in order:
//! 1. The process's own file while it lives: `/proc/PID/exe` for an exec, and
//!    `/proc/PID/map_files/START-END` for a mapping. These open the very file object the process
//!    runs or mapped, even if its path was since replaced; the file's device and inode must be
//!    the row's.
//! 2. Once the process has ended (or exec'd again): the file at the row's path, only if it is
//!    the same file (device and inode) with the change time the kernel saw at the exec (an exec
//!    record carries it), or, for a mapping, a change time no later than the row: then its
//!    bytes are the bytes the process had.
//!
//! A file's change time comes from the file system's coarse clock (a jiffy): a change made in
//! the same tick as the exec, after it, would keep the time and pass as unchanged. A running
//! executable cannot be opened for writing (`ETXTBSY`), so step 1 of an exec is exact.
//!
//! Otherwise the row says why no hash was taken. One cache serves every run of a monitor (a
//! daemon hashes `/usr/bin/python3` once), keyed by identity: a file rewritten in place has a
//! new change time, so a new hash.

use std::{
    collections::HashMap,
    ffi::OsStr,
    fs::File,
    io::Read as _,
    os::unix::{ffi::OsStrExt as _, fs::MetadataExt as _},
    path::Path,
    sync::{Arc, Mutex, OnceLock},
};

use sha2::{Digest as _, Sha256};

/// A file's identity: device (as `stat` reports it), inode, change time (ns), size.
type Identity = (u64, u64, i64, u64);

/// The hash (lowercase hex) or why there is none.
pub type Hashed = Result<Arc<str>, Arc<str>>;

/// Where the process holds the file.
#[derive(Clone, Copy, Debug)]
pub enum Held {
    /// Its executable (`/proc/PID/exe`), with the change time (ns) and size the kernel saw at
    /// the exec (`None` when the record has none).
    Exe { at_exec: Option<(i64, u64)> },
    /// A mapping at `addr`, `len` bytes (`/proc/PID/map_files/START-END`).
    Mapping { addr: u64, len: u64 },
}

fn cache() -> &'static Mutex<HashMap<Identity, Arc<str>>> {
    static CACHE: OnceLock<Mutex<HashMap<Identity, Arc<str>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Most identities the cache keeps (a long-lived daemon's); past it, it starts again.
const CACHE_MAX: usize = 1 << 16;

/// The hash of the file `pid` holds as `held`, whose identity the row gives as `(dev, ino)`,
/// at `path` (as aet's own view names it), for a row made at `row_wall_ns`.
pub fn hash(
    pid: u32,
    held: Held,
    dev: u64,
    ino: u64,
    path: Option<&[u8]>,
    row_wall_ns: i64,
) -> Hashed {
    let link = match held {
        Held::Exe { .. } => format!("/proc/{pid}/exe"),
        Held::Mapping { addr, len } => {
            let end = (addr + len + 4095) & !4095;
            format!("/proc/{pid}/map_files/{addr:x}-{end:x}")
        }
    };
    // 1. The process's own file.
    // The change time (and size) the file must have: the exec's, or for a mapping a time no
    // later than the row.
    let unchanged = |m: &std::fs::Metadata| match held {
        Held::Exe {
            at_exec: Some((ct, size)),
        } => ctime(m) == ct && m.len() == size,
        _ => ctime(m) <= row_wall_ns,
    };
    // A stat of the link first: most rows are of a file already hashed, found by its identity
    // without opening it.
    if let Ok(m) = std::fs::metadata(&link)
        && m.is_file()
        && m.dev() == dev
        && m.ino() == ino
        && unchanged(&m)
    {
        if let Some(h) = lock().get(&(dev, ino, ctime(&m), m.len())) {
            return Ok(h.clone());
        }
        // The file the stat named, or nothing (`open_identified` checks it is that file).
        if let Ok(f) = aet_ledger::safe_open::open_identified(Path::new(&link), dev, ino)
            && let Ok(m) = f.metadata()
            && unchanged(&m)
        {
            return hashed(f, (dev, ino, ctime(&m), m.len()));
        }
    }
    // 2. The file at its path, if it is the same one, unchanged since before the row.
    let Some(path) = path else {
        return Err("the process had ended and the row names no path".into());
    };
    let p = Path::new(OsStr::from_bytes(path));
    // The agent controls what its path holds now, and every directory on the way: the path is
    // opened only as far as naming a file (`O_PATH`, which reaches no driver), and only the
    // same regular file is read.
    let f = match aet_ledger::safe_open::open_identified(p, dev, ino) {
        Ok(f) => f,
        Err(aet_ledger::safe_open::NotOpened::Other { dev: d, ino: i }) => {
            return Err(format!(
                "the process had ended and {} is another file now (inode {i} on {d}, not {ino} \
                 on {dev})",
                p.display(),
            )
            .into());
        }
        Err(e) => {
            return Err(format!(
                "the process had ended and its file cannot be opened at {}: {e}",
                p.display()
            )
            .into());
        }
    };
    let m = f
        .metadata()
        .map_err(|e| -> Arc<str> { format!("{}: {e}", p.display()).into() })?;
    let ct = ctime(&m);
    if !unchanged(&m) {
        return Err(format!(
            "the process had ended and {} changed after the row (change time {}.{:09}, {} \
             bytes)",
            p.display(),
            ct.div_euclid(1_000_000_000),
            ct.rem_euclid(1_000_000_000),
            m.len()
        )
        .into());
    }
    hashed(f, (dev, ino, ct, m.len()))
}

fn ctime(m: &std::fs::Metadata) -> i64 {
    m.ctime() * 1_000_000_000 + m.ctime_nsec()
}

/// The cached hash of `id`, or the hash of `f` (whose identity is `id`), cached.
fn hashed(mut f: File, id: Identity) -> Hashed {
    if let Some(h) = lock().get(&id) {
        return Ok(h.clone());
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                total += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("the file could not be read: {e}").into()),
        }
    }
    // Changed while it was read: the bytes are not one version of the file.
    if total != id.3 || f.metadata().map(|m| ctime(&m)).ok() != Some(id.2) {
        return Err("the file changed while it was read".into());
    }
    let hex: Arc<str> = hex(&hasher.finalize()).into();
    let mut c = lock();
    if c.len() >= CACHE_MAX {
        c.clear();
    }
    c.insert(id, hex.clone());
    Ok(hex)
}

fn lock() -> std::sync::MutexGuard<'static, HashMap<Identity, Arc<str>>> {
    cache().lock().unwrap_or_else(|p| p.into_inner())
}

fn hex(b: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(bytes: &[u8]) -> String {
        hex(&Sha256::digest(bytes))
    }

    fn now_ns() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64
    }

    /// A live process: its executable is hashed through `/proc/PID/exe`, whatever its path
    /// now holds.
    #[test]
    fn a_live_process_s_executable_is_hashed_from_the_process() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let m = std::fs::metadata("/proc/self/exe").unwrap();
        let h = hash(
            std::process::id(),
            Held::Exe { at_exec: None },
            m.dev(),
            m.ino(),
            None,
            now_ns(),
        )
        .unwrap();
        assert_eq!(&*h, sha(&exe));
    }

    /// An ended process: the file at its path stands for it only when it is the same file,
    /// unchanged since before the row; otherwise the reason is given.
    #[test]
    fn the_file_at_the_path_counts_only_when_unchanged_since_the_row() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("prog");
        std::fs::write(&p, b"version one").unwrap();
        let m = std::fs::metadata(&p).unwrap();
        let path = p.as_os_str().as_bytes();
        // Not this process's exe: step 1 does not apply (pid 0 has no /proc entry).
        let later = now_ns() + 1_000_000_000;
        let h = hash(
            0,
            Held::Exe { at_exec: None },
            m.dev(),
            m.ino(),
            Some(path),
            later,
        )
        .unwrap();
        assert_eq!(&*h, sha(b"version one"));
        // Changed after the row: refused, with why.
        let before = ctime(&m) - 1_000_000_000;
        let e = hash(
            0,
            Held::Exe { at_exec: None },
            m.dev(),
            m.ino(),
            Some(path),
            before,
        )
        .unwrap_err();
        assert!(e.contains("changed after the row"), "{e}");
        // An exec's exact change time: that file, and no other version of it.
        let ct = ctime(&m);
        let exact = Held::Exe {
            at_exec: Some((ct, m.len())),
        };
        assert!(hash(0, exact, m.dev(), m.ino(), Some(path), before).is_ok());
        for other in [(ct - 1, m.len()), (ct, m.len() + 1)] {
            let other = Held::Exe {
                at_exec: Some(other),
            };
            let e = hash(0, other, m.dev(), m.ino(), Some(path), later).unwrap_err();
            assert!(e.contains("changed after the row"), "{e}");
        }
        // Another file at the path.
        let e = hash(
            0,
            Held::Exe { at_exec: None },
            m.dev(),
            m.ino() + 1,
            Some(path),
            later,
        )
        .unwrap_err();
        assert!(e.contains("is another file now"), "{e}");
        // A FIFO put at the path: refused at once, never opened for reading (it would block);
        // it may even have the removed file's inode number.
        std::fs::remove_file(&p).unwrap();
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = hash(
            0,
            Held::Exe { at_exec: None },
            m.dev(),
            m.ino(),
            Some(path),
            later,
        )
        .unwrap_err();
        assert!(
            e.contains("is another file now") || e.contains("not a regular file (a FIFO)"),
            "{e}"
        );
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, b"version one").unwrap();
        // Gone.
        std::fs::remove_file(&p).unwrap();
        let e = hash(
            0,
            Held::Exe { at_exec: None },
            m.dev(),
            m.ino(),
            Some(path),
            later,
        )
        .unwrap_err();
        assert!(e.contains("cannot be opened"), "{e}");
    }

    /// A file rewritten in place (same inode) gets a new change time, so a new hash.
    #[test]
    fn a_file_rewritten_in_place_is_hashed_again() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("prog");
        let path = p.as_os_str().as_bytes().to_vec();
        std::fs::write(&p, b"first").unwrap();
        let m1 = std::fs::metadata(&p).unwrap();
        let h1 = hash(
            0,
            Held::Exe { at_exec: None },
            m1.dev(),
            m1.ino(),
            Some(&path),
            now_ns() + 1_000_000_000,
        );
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::write(&p, b"second").unwrap();
        let m2 = std::fs::metadata(&p).unwrap();
        assert_eq!(m1.ino(), m2.ino());
        let h2 = hash(
            0,
            Held::Exe { at_exec: None },
            m2.dev(),
            m2.ino(),
            Some(&path),
            now_ns() + 1_000_000_000,
        );
        assert_eq!(&*h1.unwrap(), sha(b"first"));
        assert_eq!(&*h2.unwrap(), sha(b"second"));
    }
}
