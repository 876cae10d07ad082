//! Generated parts of the docs: sections of a Markdown file between
//! `<!-- generated:NAME -->` and `<!-- end:NAME -->` that are made from the code (the CLI
//! reference from clap, the ledger's column table, ...). Tests check that each matches what the
//! code makes now; `cargo xtask docs` (`AET_BLESS=1`) rewrites them.

use std::path::{Path, PathBuf};

/// With this variable set, [`check`] rewrites a stale section instead of failing.
pub const BLESS_ENV: &str = "AET_BLESS";

/// The docs folder of the workspace.
pub fn docs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs")
}

fn markers(name: &str) -> (String, String) {
    (
        format!("<!-- generated:{name} -->\n"),
        format!("<!-- end:{name} -->"),
    )
}

/// The section `name` of `text`, if it has one.
pub fn section<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let (begin, end) = markers(name);
    let start = text.find(&begin)? + begin.len();
    let len = text[start..].find(&end)?;
    Some(&text[start..start + len])
}

/// `text` with section `name` replaced by `content`.
pub fn replace(text: &str, name: &str, content: &str) -> Option<String> {
    let (begin, end) = markers(name);
    let start = text.find(&begin)? + begin.len();
    let len = text[start..].find(&end)?;
    Some(format!(
        "{}{content}{}",
        &text[..start],
        &text[start + len..]
    ))
}

/// Checks that section `name` of `file` is `content` (rewriting it under [`BLESS_ENV`]). Panics
/// with what to do when it is not: for tests.
pub fn check(file: &Path, name: &str, content: &str) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let found = section(&text, name).unwrap_or_else(|| {
        panic!(
            "{} has no generated section {name} (markers <!-- generated:{name} --> and <!-- end:{name} -->)",
            file.display()
        )
    });
    if found == content {
        return;
    }
    if std::env::var_os(BLESS_ENV).is_some() {
        let new = replace(&text, name, content).expect("the section was found");
        std::fs::write(file, new).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        return;
    }
    let first = found
        .lines()
        .zip(content.lines())
        .position(|(a, b)| a != b)
        .unwrap_or(found.lines().count().min(content.lines().count()));
    panic!(
        "{}: section {name} does not match the code (first difference at its line {}):\n  docs: {:?}\n  code: {:?}\nrun `cargo xtask docs` to regenerate it",
        file.display(),
        first + 1,
        found.lines().nth(first).unwrap_or(""),
        content.lines().nth(first).unwrap_or(""),
    );
}

/// The workspace's root (the folder of its `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The code tour of `docs/architecture.md`: each crate of the workspace (its `description` from its
/// `Cargo.toml`), then each of its source files with the first sentence of its `//!` docs, in
/// the order of the tree. A file without module docs is an error naming it.
pub fn code_tour(root: &Path) -> Result<String, String> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let manifest: toml::Table =
        toml::from_str(&read(&root.join("Cargo.toml"))?).map_err(|e| format!("Cargo.toml: {e}"))?;
    let members = manifest
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(|m| m.as_array())
        .ok_or("Cargo.toml has no workspace.members")?;
    let mut out = String::new();
    let mut undocumented = Vec::new();
    for member in members.iter().filter_map(|m| m.as_str()) {
        let dir = root.join(member);
        let krate: toml::Table = toml::from_str(&read(&dir.join("Cargo.toml"))?)
            .map_err(|e| format!("{member}/Cargo.toml: {e}"))?;
        let description = krate
            .get("package")
            .and_then(|p| p.get("description"))
            .and_then(|d| d.as_str())
            .unwrap_or("");
        out.push_str(&format!("- **{member}/**: {description}\n"));
        let mut files = Vec::new();
        rust_files(&dir, &dir, &mut files);
        files.sort_by_key(|f| tour_order(f));
        for rel in files {
            let text = read(&dir.join(&rel))?;
            match first_sentence(&text) {
                Some(s) => {
                    let depth = rel.matches('/').count().saturating_sub(1);
                    out.push_str(&format!("{}  - `{rel}`: {s}\n", "  ".repeat(depth)));
                }
                None => undocumented.push(format!("{member}/{rel}")),
            }
        }
    }
    if !undocumented.is_empty() {
        return Err(format!(
            "source files without module docs (//!): {}",
            undocumented.join(", ")
        ));
    }
    Ok(out)
}

/// The `.rs` files below `dir` (not `target/`), relative to `base`.
fn rust_files(base: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        if p.is_dir() && name != "target" && name != "fixtures" {
            rust_files(base, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs")
            && let Ok(rel) = p.strip_prefix(base)
        {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

/// A folder's `mod.rs` (or a crate's `lib.rs`/`main.rs`) before the files it lists.
fn tour_order(rel: &str) -> (String, u8, String) {
    let (dir, file) = rel.rsplit_once('/').unwrap_or(("", rel));
    let first = matches!(file, "mod.rs" | "lib.rs" | "main.rs");
    (dir.to_owned(), u8::from(!first), file.to_owned())
}

/// The first sentence of a file's `//!` docs, intra-doc link brackets removed.
fn first_sentence(text: &str) -> Option<String> {
    let mut para = String::new();
    for line in text.lines() {
        let Some(doc) = line.trim_start().strip_prefix("//!") else {
            break;
        };
        let doc = doc.trim();
        if doc.is_empty() {
            if para.is_empty() {
                continue;
            }
            break;
        }
        if !para.is_empty() {
            para.push(' ');
        }
        para.push_str(doc);
    }
    if para.is_empty() {
        return None;
    }
    let end = para
        .match_indices(". ")
        .map(|(i, _)| i + 1)
        .find(|&i| !para[..i].ends_with("e.g.") && !para[..i].ends_with("i.e."))
        .unwrap_or(para.len());
    let mut s = para[..end].to_owned();
    // [`X`] -> `X` (a link to an item, which the guide cannot follow).
    while let Some(i) = s.find("[`") {
        let Some(j) = s[i..].find("`]").map(|j| i + j) else {
            break;
        };
        let inner = s[i + 1..j + 1].to_owned();
        let mut tail = j + 2;
        // [`X`](path) and [`X`][path] keep only `X`.
        if let Some(rest) = s.get(tail..)
            && (rest.starts_with('(') || rest.starts_with('['))
        {
            let close = if rest.starts_with('(') { ')' } else { ']' };
            if let Some(k) = rest.find(close) {
                tail += k + 1;
            }
        }
        s.replace_range(i..tail, &inner);
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sentences_lose_their_link_brackets() {
        let t =
            "//! The monitor: [`Monitor`] and [`slots`](crate::x), e.g. this. More.\n//! Rest.\n";
        assert_eq!(
            first_sentence(t).as_deref(),
            Some("The monitor: `Monitor` and `slots`, e.g. this.")
        );
        assert_eq!(first_sentence("use x;\n"), None);
        assert_eq!(
            first_sentence("//! One line\n//! goes on.\n//!\n//! Next.").as_deref(),
            Some("One line goes on.")
        );
    }

    #[test]
    fn the_guide_s_code_tour_is_the_code_s() {
        let tour = code_tour(&workspace_root()).unwrap_or_else(|e| panic!("{e}"));
        check(&docs_dir().join("architecture.md"), "code-tour", &tour);
    }

    #[test]
    fn sections_are_found_and_replaced() {
        let t = "a\n<!-- generated:x -->\nold\n<!-- end:x -->\nb\n";
        assert_eq!(section(t, "x"), Some("old\n"));
        assert_eq!(
            replace(t, "x", "new\n").unwrap(),
            "a\n<!-- generated:x -->\nnew\n<!-- end:x -->\nb\n"
        );
        assert_eq!(section(t, "y"), None);
    }
}
