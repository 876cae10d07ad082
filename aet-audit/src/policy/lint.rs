//! What a rule's pattern can match, read from its syntax: warnings at load for rules that can
//! match their kind of input only by an unlikely chance (a rule that can never match is refused
//! by the compiler, in `super`).

use regex_syntax::hir::{Class, Hir, HirKind};

use super::Target;

/// Whether every match of `hir` holds a whitespace character.
fn needs_whitespace(hir: &Hir) -> bool {
    match hir.kind() {
        HirKind::Literal(l) => l.0.iter().any(|b| b.is_ascii_whitespace()),
        HirKind::Class(Class::Unicode(c)) => {
            !c.ranges().is_empty() && c.ranges().iter().all(|r| all_space(r.start(), r.end()))
        }
        HirKind::Class(Class::Bytes(c)) => {
            !c.ranges().is_empty()
                && c.ranges()
                    .iter()
                    .all(|r| all_space(char::from(r.start()), char::from(r.end())))
        }
        HirKind::Repetition(r) => r.min >= 1 && needs_whitespace(&r.sub),
        HirKind::Capture(c) => needs_whitespace(&c.sub),
        HirKind::Concat(hs) => hs.iter().any(needs_whitespace),
        HirKind::Alternation(hs) => hs.iter().all(needs_whitespace),
        HirKind::Empty | HirKind::Look(_) => false,
    }
}

/// Is every character from `a` to `b` whitespace?
fn all_space(a: char, b: char) -> bool {
    (a..=b).all(char::is_whitespace)
}

/// A warning for a rule whose pattern, for its target, is unlikely to match: a path pattern
/// every match of which holds whitespace reads like a command line (the seed's
/// `import\s+solver\.oracle`): paths seldom hold spaces.
pub(super) fn unlikely(target: Target, pattern: &str) -> Option<String> {
    if target != Target::Path {
        return None;
    }
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    needs_whitespace(&hir).then(|| {
        "every match of this path pattern holds whitespace, which paths seldom do: to match \
         command lines, write `{ text = '...' }` (paths, what processes ran, the transcripts' \
         commands) or `{ argv = '...' }` (what processes ran)"
            .to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_patterns_that_need_whitespace_are_warned_of() {
        for p in [
            r"import\s+solver\.oracle",
            "cat answers",
            r"(a|b)\s",
            r"x[ \t]+y",
        ] {
            assert!(unlikely(Target::Path, p).is_some(), "{p}");
        }
        for p in [
            r"answers/key\.txt",
            r"a\s*b",
            r"(a\s|b)",
            r"[^\s]+",
            r"\S",
            r".",
        ] {
            assert!(unlikely(Target::Path, p).is_none(), "{p}");
        }
        assert!(unlikely(Target::Text, r"import\s+x").is_none());
        assert!(unlikely(Target::Argv, r"import\s+x").is_none());
    }
}
