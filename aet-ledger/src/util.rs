//! Small helpers every part of aet shares: errno names, clocks, how paths and argument vectors
//! are shown and split. One copy each.

/// A path glob compiled as every pattern of aet's files is: `*` and `?` stay within a path
/// component (`**` crosses them), `\` escapes the next character.
pub fn path_glob(pattern: &str) -> Result<globset::Glob, globset::Error> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
}

/// The globs an allow-list's entry stands for: a pattern with glob characters is itself; a path
/// without any is itself and everything below it.
pub fn path_prefix_globs(p: &str) -> Vec<String> {
    let base = p.trim_end_matches('/');
    if p.contains(['*', '?', '[', '{']) {
        return vec![base.to_owned()];
    }
    vec![
        if base.is_empty() {
            "/".into()
        } else {
            base.into()
        },
        format!("{base}/**"),
    ]
}

/// The symbolic name of an errno value (`ENOENT`), or `E<n>` for one the platform does not name.
pub fn errno_name(errno: i32) -> &'static str {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        (0..256)
            .map(|n| {
                let e = nix::errno::Errno::from_raw(n);
                let s = format!("{e:?}");
                let s = if s == "UnknownErrno" {
                    format!("E{n}")
                } else {
                    s
                };
                &*Box::leak(s.into_boxed_str())
            })
            .collect()
    });
    match usize::try_from(errno) {
        Ok(n) if n < names.len() => names[n],
        _ => "EUNKNOWN",
    }
}

/// Wall-clock now, ns since the epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Converts kernel boot-time stamps (`bpf_ktime_get_boot_ns()`) to wall-clock time.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    offset_ns: i64,
}

impl WallClock {
    /// Measures `CLOCK_REALTIME - CLOCK_BOOTTIME` now.
    pub fn now() -> Self {
        use nix::time::{ClockId, clock_gettime};
        let ns = |c| {
            clock_gettime(c)
                .map(|t| t.tv_sec() * 1_000_000_000 + t.tv_nsec())
                .unwrap_or(0)
        };
        let boot = ns(ClockId::CLOCK_BOOTTIME);
        let real = ns(ClockId::CLOCK_REALTIME);
        Self {
            offset_ns: real - boot,
        }
    }

    /// A clock with a fixed offset (tests).
    pub const fn with_offset(offset_ns: i64) -> Self {
        Self { offset_ns }
    }

    /// Wall-clock ns for a `bpf_ktime_get_boot_ns()` stamp.
    pub fn wall(&self, boot_ns: u64) -> i64 {
        boot_ns as i64 + self.offset_ns
    }
}

/// Escapes control characters so a path with a newline stays on one line.
pub fn escape_path(p: &str) -> String {
    p.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Joins arguments for display, quoting those that need it.
pub fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Splits a NUL-separated argument vector into arguments (a trailing NUL ends the last one).
pub fn split_argv(argv: &[u8]) -> impl Iterator<Item = &[u8]> {
    let trimmed = argv.strip_suffix(&[0]).unwrap_or(argv);
    trimmed
        .split(|&b| b == 0)
        .filter(move |_| !trimmed.is_empty())
}

/// Bytes as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Is the absolute path `p` `dir` or below it (by components: `/ab` is not below `/a`)?
pub fn path_under(p: &[u8], dir: &[u8]) -> bool {
    dir == b"/" || p == dir || p.starts_with(dir) && p.get(dir.len()) == Some(&b'/')
}

/// The bytes of a hex string (either case); `None` when it is not hex.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The parent directory of an absolute path, as text (`None` for `/`).
pub fn parent_dir(p: &str) -> Option<&str> {
    let t = p.trim_end_matches('/');
    let i = t.rfind('/')?;
    Some(if i == 0 { "/" } else { &t[..i] })
}

/// The pseudo file systems: a walk from above never enters them; a draft allows them whole.
pub const PSEUDO_FS: &[&str] = &["/proc", "/sys", "/dev"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_names() {
        assert_eq!(errno_name(2), "ENOENT");
        assert_eq!(errno_name(13), "EACCES");
        assert_eq!(errno_name(36), "ENAMETOOLONG");
        assert_eq!(errno_name(-1), "EUNKNOWN");
    }

    #[test]
    fn shell_words_quotes_what_needs_it() {
        let a = vec![
            "sh".into(),
            "-c".into(),
            "cat x | wc -l".into(),
            "it's".into(),
        ];
        assert_eq!(shell_words(&a), r"sh -c 'cat x | wc -l' 'it'\''s'");
    }

    #[test]
    fn escape_keeps_paths_on_one_line() {
        assert_eq!(escape_path("/a\nb"), r"/a\nb");
    }

    #[test]
    fn argv_splits_on_nul() {
        let v: Vec<&[u8]> = split_argv(b"sh\0-c\0\0x\0").collect();
        assert_eq!(v, [&b"sh"[..], b"-c", b"", b"x"]);
        assert_eq!(split_argv(b"").count(), 0);
        assert_eq!(hex(b"\x00\xff/"), "00ff2f");
    }
}
