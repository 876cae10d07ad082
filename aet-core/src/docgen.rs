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

#[cfg(test)]
mod tests {
    use super::*;

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
