//! tracefs: where the kernel lists its tracepoints. aya resolves a tracepoint's id under
//! `/sys/kernel/tracing`, which a fresh machine may not have mounted; aet mounts it when it can.

use std::{io, path::Path};

/// The tracefs mount point aet uses.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// Errors making tracefs available.
#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    /// tracefs is not mounted and mounting it failed.
    #[error("tracefs is not mounted at {TRACEFS} and mounting it failed: {0}")]
    Mount(#[source] io::Error),
}

/// Is tracefs mounted (does it list events)?
pub fn is_mounted() -> bool {
    Path::new(TRACEFS).join("events").is_dir()
}

/// Mounts tracefs at [`TRACEFS`] unless it is already there. Returns whether it mounted it.
pub fn ensure_mounted() -> Result<bool, TracefsError> {
    if is_mounted() {
        return Ok(false);
    }
    nix::mount::mount(
        Some("tracefs"),
        TRACEFS,
        Some("tracefs"),
        nix::mount::MsFlags::MS_NOSUID
            | nix::mount::MsFlags::MS_NODEV
            | nix::mount::MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| TracefsError::Mount(io::Error::from(e)))?;
    Ok(true)
}

/// Does the kernel have this tracepoint (`category/name`)?
pub fn has_tracepoint(category: &str, name: &str) -> bool {
    Path::new(TRACEFS)
        .join("events")
        .join(category)
        .join(name)
        .is_dir()
}

/// Where a field of a tracepoint's record lies (from its `format` file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub offset: u32,
    pub size: u32,
}

/// The fields of a tracepoint's record, by name, as its `format` file gives them.
pub fn fields(category: &str, name: &str) -> io::Result<Vec<(String, Field)>> {
    let path = Path::new(TRACEFS)
        .join("events")
        .join(category)
        .join(name)
        .join("format");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    Ok(parse_format(&text))
}

/// Parses a `format` file's `field:TYPE NAME;\toffset:N;\tsize:M;` lines. An array's name is
/// given without its length (`comm` for `char comm[16]`).
pub fn parse_format(text: &str) -> Vec<(String, Field)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut decl = None;
        let (mut offset, mut size) = (None, None);
        for part in line.trim().split(';') {
            let part = part.trim();
            if let Some(d) = part.strip_prefix("field:") {
                decl = Some(d);
            } else if let Some(o) = part.strip_prefix("offset:") {
                offset = o.parse().ok();
            } else if let Some(s) = part.strip_prefix("size:") {
                size = s.parse().ok();
            }
        }
        let (Some(decl), Some(offset), Some(size)) = (decl, offset, size) else {
            continue;
        };
        let Some(name) = decl.split_whitespace().last() else {
            continue;
        };
        let name = name.split('[').next().unwrap_or(name);
        out.push((name.to_owned(), Field { offset, size }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_file_gives_each_field_its_offset_and_size() {
        let text = "name: task_newtask\nID: 150\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
            \tfield:pid_t pid;\toffset:8;\tsize:4;\tsigned:1;\n\
            \tfield:char comm[16];\toffset:12;\tsize:16;\tsigned:0;\n\
            \tfield:__data_loc char[] filename;\toffset:28;\tsize:4;\tsigned:0;\n\
            \tfield:u64 clone_flags;\toffset:32;\tsize:8;\tsigned:0;\n\n\
            print fmt: \"pid=%d\", REC->pid\n";
        let f = parse_format(text);
        let get = |n: &str| f.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        assert_eq!(get("pid"), Some(Field { offset: 8, size: 4 }));
        assert_eq!(
            get("comm"),
            Some(Field {
                offset: 12,
                size: 16
            })
        );
        assert_eq!(
            get("filename"),
            Some(Field {
                offset: 28,
                size: 4
            })
        );
        assert_eq!(
            get("clone_flags"),
            Some(Field {
                offset: 32,
                size: 8
            })
        );
        assert_eq!(get("common_pid"), Some(Field { offset: 4, size: 4 }));
        assert_eq!(get("missing"), None);
    }
}
