//! The README's and the docs' links, and the commands the README shows: every relative link names
//! a file of the tree (and, with `#anchor`, a heading of it, as GitHub makes anchors), and every
//! `aet …` line of a fenced block is a command line (its words, for the CLI's own parser).

use std::path::{Path, PathBuf};

/// The Markdown pages whose links are checked: the README and every page under `docs/`.
pub fn pages(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.join("README.md")];
    if let Ok(entries) = std::fs::read_dir(root.join("docs")) {
        let mut docs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        docs.sort();
        out.extend(docs);
    }
    out
}

/// Each `[text](target)` of a Markdown text outside fenced blocks and inline code, in order.
pub fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code spans hold no links.
        let mut plain = String::new();
        for (n, part) in line.split('`').enumerate() {
            if n % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let Some(end) = tail.find(')') else {
                break;
            };
            out.push(tail[..end].trim().to_owned());
            rest = &tail[end..];
        }
    }
    out
}

/// The anchors GitHub gives a page's headings: lower case, punctuation other than `-` and `_`
/// dropped, spaces made `-`; a repeated one gets `-1`, `-2`, …
pub fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(title) = line
            .strip_prefix('#')
            .filter(|_| !fenced)
            .map(|t| t.trim_start_matches('#'))
            .filter(|t| t.starts_with(' '))
        else {
            continue;
        };
        let slug: String = title
            .trim()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                '-' | '_' => Some(c),
                c if c.is_alphanumeric() => Some(c.to_lowercase().next().unwrap_or(c)),
                _ => None,
            })
            .collect();
        let n = out
            .iter()
            .filter(|a| **a == slug || a.strip_prefix(&format!("{slug}-")).is_some_and(is_number))
            .count();
        out.push(if n == 0 { slug } else { format!("{slug}-{n}") });
    }
    out
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// What is wrong with the relative links of `page` (a file under `root`): each a line naming the
/// page, the link and the problem. Web addresses are not fetched.
pub fn broken(root: &Path, page: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(page) else {
        return vec![format!("{}: cannot be read", page.display())];
    };
    let here = page.parent().unwrap_or(root);
    let mut out = Vec::new();
    for link in links(&text) {
        if link.contains("://") || link.starts_with("mailto:") || link.is_empty() {
            continue;
        }
        let (file, anchor) = match link.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (link.as_str(), None),
        };
        let target = if file.is_empty() {
            page.to_path_buf()
        } else {
            here.join(file)
        };
        let shown = page
            .strip_prefix(root)
            .unwrap_or(page)
            .display()
            .to_string();
        if !target.exists() {
            out.push(format!("{shown}: ({link}): no file {}", target.display()));
            continue;
        }
        if let Some(a) = anchor
            && target.extension().is_some_and(|x| x == "md")
        {
            let t = std::fs::read_to_string(&target).unwrap_or_default();
            if !anchors(&t).iter().any(|x| x == a) {
                out.push(format!("{shown}: ({link}): no heading #{a}"));
            }
        }
    }
    out
}

/// The `aet …` command lines of a Markdown text's fenced blocks, as words. In a block that
/// shows a session (some lines start with `$ `) only those lines are commands, the rest is
/// output; a trailing `# comment` is dropped, lines ending in `\\` are joined, and the words are
/// cut at the first redirection, pipe or list operator (what the shell, not aet, reads).
pub fn aet_commands(text: &str) -> Vec<Vec<String>> {
    let mut blocks: Vec<Vec<&str>> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            if fenced {
                blocks.push(Vec::new());
            }
        } else if fenced && let Some(b) = blocks.last_mut() {
            b.push(line.trim());
        }
    }
    let mut out = Vec::new();
    for block in blocks {
        let session = block.iter().any(|l| l.starts_with("$ "));
        let mut pending = String::new();
        for l in block {
            let l = match (session, l.strip_prefix("$ ")) {
                (true, Some(cmd)) => cmd,
                (true, None) if pending.is_empty() => continue,
                _ => l,
            };
            if let Some(cont) = l.strip_suffix('\\') {
                pending.push_str(cont);
                pending.push(' ');
                continue;
            }
            let full = format!("{pending}{l}");
            pending.clear();
            let Some(words) = shlex::split(&full) else {
                continue;
            };
            if words.first().map(String::as_str) != Some("aet") {
                continue;
            }
            let cut = words
                .iter()
                .position(|w| {
                    w.starts_with('#')
                        || matches!(
                            w.as_str(),
                            ">" | ">>" | "<" | "|" | "||" | "&&" | ";" | "2>&1" | "2>" | "&"
                        )
                })
                .unwrap_or(words.len());
            out.push(words[..cut].to_vec());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_githubs() {
        let t = "# Guide\n## Install\n### The packages: a wheel and a Debian package\n## Install\n\
                 ```\n# not a heading\n```\n## `aet run` (issue 35)\n";
        assert_eq!(
            anchors(t),
            [
                "guide",
                "install",
                "the-packages-a-wheel-and-a-debian-package",
                "install-1",
                "aet-run-issue-35"
            ]
        );
    }

    #[test]
    fn links_outside_code_and_commands_inside_fences() {
        let t = "see [a](docs/a.md#x) and `[b](no)`\n```sh\n$ aet run --out r \\\n  -- make > log  # note\n\
                 aet audit: FLAGGED\n```\n```sh\ncargo xtask demo\naet audit r --policy p.toml | less\n```\n";
        assert_eq!(links(t), ["docs/a.md#x"]);
        assert_eq!(
            aet_commands(t),
            [
                vec!["aet", "run", "--out", "r", "--", "make"],
                vec!["aet", "audit", "r", "--policy", "p.toml"],
            ]
        );
    }

    #[test]
    fn every_link_of_the_readme_and_the_docs_resolves() {
        let root = crate::docgen::workspace_root();
        let problems: Vec<String> = pages(&root).iter().flat_map(|p| broken(&root, p)).collect();
        assert!(
            problems.is_empty(),
            "broken links:\n{}",
            problems.join("\n")
        );
    }
}
