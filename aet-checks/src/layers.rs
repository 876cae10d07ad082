//! The floors of a crate's files: each top-level module of a crate is on a floor, and a file
//! may name (`crate::`, `super::`, `self::` paths, grouped `use` included) only modules on its
//! own floor or below; and no files name each other in a circle. Each crate's test
//! `layers_point_one_way` calls [`assert_floors`] with its floors; unit tests (`#[cfg(test)]
//! mod tests` and `tests.rs` files) sit above every floor and are not checked.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// A source file: its module path (`["engine", "tree"]` for `src/engine/tree.rs`, `[]` for
/// `lib.rs`) and its path relative to `src/`.
struct File {
    module: Vec<String>,
    rel: String,
    text: String,
}

/// Checks the crate whose manifest is in `manifest_dir` (pass `env!("CARGO_MANIFEST_DIR")`):
/// `floors` lists its top-level modules from the bottom floor up. Panics naming every import
/// that goes up a floor, every module without a floor and every circle of files.
pub fn assert_floors(manifest_dir: &str, floors: &[&[&str]]) {
    let problems = problems(&Path::new(manifest_dir).join("src"), floors);
    assert!(
        problems.is_empty(),
        "{manifest_dir}: the files' floors are broken:\n{}",
        problems.join("\n")
    );
}

/// What is wrong with the floors of the crate whose sources are in `src`.
pub fn problems(src: &Path, floors: &[&[&str]]) -> Vec<String> {
    let mut files = Vec::new();
    walk(src, src, &mut files);
    let floor_of: BTreeMap<&str, usize> = floors
        .iter()
        .enumerate()
        .flat_map(|(i, f)| f.iter().map(move |m| (*m, i)))
        .collect();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    let mut problems = Vec::new();
    let mut edges: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    let root = files.iter().position(|f| f.module.is_empty());
    let root_items = root
        .map(|r| items(&code(&files[r].text)))
        .unwrap_or_default();
    for (i, f) in files.iter().enumerate() {
        if f.rel.ends_with("tests.rs") {
            continue;
        }
        let text = code(&f.text);
        let Some(top) = f.module.first() else {
            // The crate root: what it declares of its own is below every floor; its imports
            // of its modules count for circles.
            for path in paths(&text, &[])
                .into_iter()
                .chain(root_uses(&text, &modules))
            {
                let used = resolve(&path, &modules);
                if let Some(j) = files.iter().position(|g| g.module == used)
                    && j != i
                {
                    edges.entry(i).or_default().insert(j);
                }
            }
            continue;
        };
        let Some(&floor) = floor_of.get(top.as_str()) else {
            problems.push(format!("{}: module {top} is on no floor", f.rel));
            continue;
        };
        for path in paths(&text, &f.module) {
            let used = resolve(&path, &modules);
            let Some(used_top) = used.first() else {
                // An item the crate root defines is on the bottom floor; one it re-exports
                // must be named where it is defined.
                if path.first().is_some_and(|n| root_items.contains(n)) {
                    if let Some(r) = root {
                        edges.entry(i).or_default().insert(r);
                    }
                } else {
                    problems.push(format!(
                        "{}: names crate::{} through the crate root (name the module that defines it)",
                        f.rel,
                        path.join("::")
                    ));
                }
                continue;
            };
            match floor_of.get(used_top.as_str()) {
                Some(&u) if u > floor => problems.push(format!(
                    "{}: uses crate::{} on a higher floor ({used_top} is on floor {}, {top} on {})",
                    f.rel,
                    path.join("::"),
                    u + 1,
                    floor + 1
                )),
                Some(_) => {}
                None => problems.push(format!(
                    "{}: uses crate::{}, which is no module",
                    f.rel,
                    path.join("::")
                )),
            }
            if let Some(j) = files.iter().position(|g| g.module == used)
                && j != i
            {
                edges.entry(i).or_default().insert(j);
            }
        }
    }
    for circle in circles(files.len(), &edges) {
        let mut names: Vec<&str> = circle.iter().map(|&i| files[i].rel.as_str()).collect();
        names.sort_unstable();
        problems.push(format!("a circle of files: {}", names.join(" ↔ ")));
    }
    problems
}

/// The names of the items a file defines at its top level (`fn`, `struct`, `const`, ...).
fn items(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in code.lines() {
        if line.starts_with(char::is_whitespace) {
            continue;
        }
        let mut words = line.split(|c: char| {
            c.is_whitespace() || c == '(' || c == '<' || c == ':' || c == '{' || c == ';'
        });
        let words: Vec<&str> = words.by_ref().filter(|w| !w.is_empty()).collect();
        for (k, w) in words.iter().enumerate() {
            if matches!(
                *w,
                "fn" | "struct" | "enum" | "const" | "static" | "type" | "trait" | "union"
            ) && let Some(name) = words.get(k + 1)
            {
                out.insert((*name).to_owned());
                break;
            }
        }
    }
    out
}

/// The crate root's imports of its own modules by their bare names (`use build::{A, B};`), which
/// its code uses; its re-exports (`pub use`) are for other crates and not counted.
fn root_uses(code: &str, modules: &BTreeSet<Vec<String>>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for stmt in code.split(';') {
        let Some(rest) = stmt.trim_start().strip_prefix("use ") else {
            continue;
        };
        let head: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if modules.contains(&vec![head.clone()]) {
            expand(rest, &[], &mut out);
        }
    }
    out
}

fn walk(src: &Path, dir: &Path, out: &mut Vec<File>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(src, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(src).expect("below src").to_string_lossy();
            let mut module: Vec<String> = rel
                .trim_end_matches(".rs")
                .split('/')
                .map(str::to_owned)
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            out.push(File {
                module,
                rel: rel.into_owned(),
                text,
            });
        }
    }
}

/// A file's code: line comments removed, its unit test modules (`#[cfg(test)] mod NAME { ... }`)
/// cut.
fn code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    let mut depth: Option<i64> = None;
    while let Some(line) = lines.next() {
        let line = line.split("//").next().unwrap_or("");
        if let Some(d) = depth.as_mut() {
            *d += braces(line);
            if *d <= 0 {
                depth = None;
            }
            continue;
        }
        if line.trim_start().starts_with("#[cfg(test)]")
            && let Some(next) = lines.peek()
            && is_inline_mod(next)
        {
            let next = lines.next().unwrap_or("");
            let d = braces(next.split("//").next().unwrap_or(""));
            depth = (d > 0).then_some(d);
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Whether a line opens an inline module (`mod x {`, `pub(super) mod x {`).
fn is_inline_mod(line: &str) -> bool {
    let t = line.trim();
    t.ends_with('{') && t.split_whitespace().any(|w| w == "mod")
}

/// Opening braces less closing ones.
fn braces(line: &str) -> i64 {
    line.chars()
        .map(|c| match c {
            '{' => 1,
            '}' => -1,
            _ => 0,
        })
        .sum()
}

/// The absolute module paths a file at `module` names: each `crate::a::b`, `super::a`,
/// `self::a`, grouped paths expanded.
fn paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for head in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(head) {
            // Whole words only: `mycrate::` is not `crate::`.
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            if head == "self::" && at >= 2 && &code[at - 2..at] == "::" {
                continue; // `super::self::` is not a head
            }
            let mut base: Vec<String> = match head {
                "crate::" => Vec::new(),
                "super::" => module[..module.len().saturating_sub(1)].to_vec(),
                _ => module.to_vec(),
            };
            if head == "super::" && at >= 2 && &code[at - 2..at] == "::" {
                continue; // counted with the `super::` before it
            }
            let mut rest = &code[at + head.len()..];
            if head == "super::" {
                while let Some(r) = rest.strip_prefix("super::") {
                    base.pop();
                    rest = r;
                }
            }
            expand(rest, &base, &mut out);
        }
    }
    out
}

/// The paths of `text` (what follows a `prefix::`): `a::b` or a group `{a::b, c}`.
fn expand(text: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut end = group.len();
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        expand(&group[start..i], &path, out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            if group[start..end].trim().is_empty() {
                return;
            }
            expand(&group[start..end], &path, out);
            return;
        }
        let word: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if word.is_empty() || word == "self" {
            break;
        }
        rest = &rest[word.len()..];
        path.push(word);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    if path.len() > prefix.len() || !prefix.is_empty() {
        out.push(path);
    }
}

/// The module file `path` is in: its longest prefix that is a module of the crate.
fn resolve(path: &[String], modules: &BTreeSet<Vec<String>>) -> Vec<String> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
        .unwrap_or_default()
}

/// The circles of a graph (its strongly connected components of more than one node), by
/// Tarjan's algorithm.
fn circles(n: usize, edges: &BTreeMap<usize, BTreeSet<usize>>) -> Vec<Vec<usize>> {
    struct State<'a> {
        edges: &'a BTreeMap<usize, BTreeSet<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on: Vec<bool>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on[v] = true;
        let next: Vec<usize> = s.edges.get(&v).into_iter().flatten().copied().collect();
        for w in next {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(i) if s.on[w] => s.low[v] = s.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on: vec![false; n],
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_of(files: &[(&str, &str)]) -> tempfile_free::Dir {
        tempfile_free::Dir::new(files)
    }

    /// A throwaway source tree (this crate has no dependencies but `toml`).
    mod tempfile_free {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new(files: &[(&str, &str)]) -> Self {
                let dir = std::env::temp_dir().join(format!(
                    "aet-checks-{}-{}",
                    std::process::id(),
                    files.len() + files.iter().map(|f| f.1.len()).sum::<usize>()
                ));
                let _ = std::fs::remove_dir_all(&dir);
                for (rel, text) in files {
                    let p = dir.join(rel);
                    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                    std::fs::write(p, text).unwrap();
                }
                Self(dir)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn paths_are_read_whole_grouped_and_relative() {
        let m = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let got = paths(
            "use crate::{a::b, c::{d, e}, f};\nlet x = crate::g::h();\nuse super::super::k;\nuse self::l::M;\nmycrate::z",
            &m(&["p", "q"]),
        );
        let want: Vec<Vec<String>> = vec![
            m(&["a", "b"]),
            m(&["c", "d"]),
            m(&["c", "e"]),
            m(&["f"]),
            m(&["g", "h"]),
            m(&["k"]),
            m(&["p", "q", "l", "M"]),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn an_import_up_a_floor_and_a_circle_are_refused() {
        let dir = crate_of(&[
            ("src/lib.rs", "pub mod low;\npub mod high;\n"),
            ("src/low.rs", "use crate::high::H;\n"),
            ("src/high/mod.rs", "pub mod a;\npub mod b;\n"),
            ("src/high/a.rs", "use super::b::B;\n"),
            (
                "src/high/b.rs",
                "use crate::high::a::A;\n#[cfg(test)]\npub(super) mod tests {\n    use crate::Root;\n}\nuse crate::low::L;\n",
            ),
        ]);
        let p = problems(&dir.0.join("src"), &[&["low"], &["high"]]);
        assert_eq!(p.len(), 2, "{p:#?}");
        assert!(
            p[0].starts_with("low.rs: uses crate::high::H on a higher floor"),
            "{p:#?}"
        );
        assert_eq!(p[1], "a circle of files: high/a.rs ↔ high/b.rs");
        // On their floors and without the circle, nothing is wrong.
        let dir = crate_of(&[
            ("src/lib.rs", "pub mod low;\npub mod high;\n"),
            ("src/low.rs", "pub struct L;\n"),
            ("src/high.rs", "use crate::low::L; // crate::nothing\n"),
        ]);
        assert_eq!(
            problems(&dir.0.join("src"), &[&["low"], &["high"]]),
            Vec::<String>::new()
        );
        assert_eq!(
            problems(&dir.0.join("src"), &[&["low"]]),
            vec!["high.rs: module high is on no floor".to_owned()]
        );
        // What the root defines is below every floor; what it re-exports is named where it is
        // defined; the root's own imports of its modules make circles too.
        let dir = crate_of(&[
            (
                "src/lib.rs",
                "pub mod low;\npub mod high;\npub use low::L;\nuse high::H;\npub struct Root;\n",
            ),
            ("src/low.rs", "use crate::Root;\npub struct L;\n"),
            ("src/high.rs", "use crate::{L, Root};\npub struct H;\n"),
        ]);
        assert_eq!(
            problems(&dir.0.join("src"), &[&["low"], &["high"]]),
            vec![
                "high.rs: names crate::L through the crate root (name the module that defines it)"
                    .to_owned(),
                "a circle of files: high.rs ↔ lib.rs".to_owned()
            ]
        );
    }
}
