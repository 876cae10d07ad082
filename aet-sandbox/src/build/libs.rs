//! The stage binary's own library directories: what its `$ORIGIN`-relative run path names.
//!
//! A binary installed from the wheel finds its bundled libraries (libseccomp) through an
//! `RPATH`/`RUNPATH` of `$ORIGIN/../aet.libs`. Inside the sandbox the binary is bound at
//! [`super::STAGE_BIN`], so `$ORIGIN` is that file's directory: each such directory is bound
//! read-only at the place the loader will look for it, under `/.aet`, and leaves the view with
//! the binary before the agent's command starts.

use std::path::{Component, Path, PathBuf};

use object::{
    Endianness,
    elf::{DT_RPATH, DT_RUNPATH, FileHeader64},
    read::elf::{Dyn as _, FileHeader as _},
};

/// Where the stage's own files live in the view; nothing the stage binds leaves it.
pub const STAGE_ROOT: &str = "/.aet";

/// A directory of the stage binary's own libraries: on the host, and where the loader looks in
/// the view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibDir {
    /// The directory on the host (next to the real binary).
    pub host: PathBuf,
    /// Where the binary bound at `stage_bin` looks for it.
    pub view: PathBuf,
}

/// The `$ORIGIN`-relative entries of the ELF file's `DT_RUNPATH` and `DT_RPATH`, in order
/// (an entry without `$ORIGIN` names a host path the view already has or lacks like any other
/// library directory). Not an ELF file, or one without a dynamic section: none.
pub fn origin_entries(elf: &[u8]) -> Vec<String> {
    let Ok(header) = FileHeader64::<Endianness>::parse(elf) else {
        return Vec::new();
    };
    let Ok(endian) = header.endian() else {
        return Vec::new();
    };
    let Ok(sections) = header.sections(endian, elf) else {
        return Vec::new();
    };
    let Ok(Some((dynamic, link))) = sections.dynamic(endian, elf) else {
        return Vec::new();
    };
    let Ok(strings) = sections.strings(endian, elf, link) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for d in dynamic {
        let tag = d.tag32(endian).map(|t| t as i64);
        if tag != Some(DT_RUNPATH) && tag != Some(DT_RPATH) {
            continue;
        }
        let Ok(s) = d.string(endian, strings) else {
            continue;
        };
        for entry in String::from_utf8_lossy(s).split(':') {
            if entry.starts_with("$ORIGIN") || entry.starts_with("${ORIGIN}") {
                out.push(entry.to_owned());
            }
        }
    }
    out
}

/// The library directories of the binary at `host_bin` (read from the file) that must be bound
/// for it to start at `stage_bin` in the view: each `$ORIGIN` entry whose host directory exists,
/// placed relative to `stage_bin`. An entry that would land outside [`STAGE_ROOT`] (more `..`
/// than the stage's layout has), or on the binary or another entry, is left out: the loader's
/// own error then says what is missing.
pub fn lib_dirs(host_bin: &Path, stage_bin: &Path) -> Vec<LibDir> {
    let Ok(real) = std::fs::canonicalize(host_bin) else {
        return Vec::new();
    };
    let Ok(elf) = std::fs::read(&real) else {
        return Vec::new();
    };
    let (Some(host_origin), Some(view_origin)) = (real.parent(), stage_bin.parent()) else {
        return Vec::new();
    };
    let mut out: Vec<LibDir> = Vec::new();
    for entry in origin_entries(&elf) {
        let rest = entry
            .trim_start_matches("${ORIGIN}")
            .trim_start_matches("$ORIGIN")
            .trim_start_matches('/');
        let (Some(host), Some(view)) = (
            lexical_join(host_origin, rest),
            lexical_join(view_origin, rest),
        ) else {
            continue;
        };
        let inside = view.starts_with(STAGE_ROOT) && view != Path::new(STAGE_ROOT);
        let clashes = stage_bin.starts_with(&view)
            || out
                .iter()
                .any(|d| d.view.starts_with(&view) || view.starts_with(&d.view));
        if inside && !clashes && host.is_dir() {
            out.push(LibDir { host, view });
        }
    }
    out
}

/// `base` joined with `rest`, `.` and `..` resolved by name (no symbolic link followed); `None`
/// when `..` would climb above the root.
fn lexical_join(base: &Path, rest: &str) -> Option<PathBuf> {
    let mut p = base.to_path_buf();
    for c in Path::new(rest).components() {
        match c {
            Component::Normal(n) => p.push(n),
            Component::ParentDir => {
                if !p.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_entry_lands_under_the_stage_root() {
        let bin = Path::new("/.aet/bin/aet");
        assert_eq!(
            lexical_join(bin.parent().unwrap(), "../aet.libs"),
            Some(PathBuf::from("/.aet/aet.libs"))
        );
        assert_eq!(lexical_join(Path::new("/"), ".."), None);
    }

    #[test]
    fn this_test_binary_has_no_origin_entries_and_needs_no_binds() {
        let exe = std::env::current_exe().unwrap();
        assert!(origin_entries(&std::fs::read(&exe).unwrap()).is_empty());
        assert!(lib_dirs(&exe, Path::new("/.aet/bin/aet")).is_empty());
        assert!(origin_entries(b"not an ELF file").is_empty());
    }

    /// A real ELF file linked with the run path the wheel's binary has (and two entries that
    /// must be left out: one climbing out of the stage's directory, one with no directory).
    #[test]
    fn a_wheel_layout_binds_its_bundled_libraries_beside_the_stage() {
        let d = tempfile::tempdir().unwrap();
        let scripts = d.path().join("aet.scripts");
        std::fs::create_dir_all(d.path().join("aet.libs")).unwrap();
        std::fs::create_dir_all(&scripts).unwrap();
        let bin = scripts.join("aet");
        let src = d.path().join("main.c");
        std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
        let cc = std::process::Command::new("cc")
            .arg(&src)
            .arg("-o")
            .arg(&bin)
            .arg("-Wl,--disable-new-dtags,-rpath,$ORIGIN/../aet.libs:$ORIGIN/../../up:$ORIGIN/none:/usr/lib")
            .status()
            .expect("cc (gcc builds the workspace's C crates) runs");
        assert!(cc.success());
        let elf = std::fs::read(&bin).unwrap();
        assert_eq!(
            origin_entries(&elf),
            ["$ORIGIN/../aet.libs", "$ORIGIN/../../up", "$ORIGIN/none"]
        );
        assert_eq!(
            lib_dirs(&bin, Path::new("/.aet/bin/aet")),
            [LibDir {
                host: std::fs::canonicalize(d.path()).unwrap().join("aet.libs"),
                view: "/.aet/aet.libs".into(),
            }]
        );
        // The same binary bound one level higher would find its libraries outside the stage's
        // directory: nothing is bound there.
        assert!(lib_dirs(&bin, Path::new("/.aet/aet")).is_empty());
    }
}
