//! The barrier of `aet run --mode shadow|enforce`: what a policy's allow-lists become in the
//! kernel (a Landlock ruleset), in three steps that share these types:
//!
//! 1. [`plan`]: the grants, from the policy's `[allow]` lists (plain paths and `PATH/**` only:
//!    Landlock grants a file or a directory with everything below it), and what must stay out
//!    of them (the `[cheats]` path patterns and the `[protected]` files);
//! 2. the stage, inside the agent's view, walks the granted trees, leaves out every file a cheat
//!    pattern or a protected identity names, and turns each grant into rules: the grant itself
//!    when nothing under it is left out, else its other entries one by one (Landlock only adds
//!    rights, so a left-out file is kept out by granting its siblings instead of its parent).
//!    It reports the rules it made ([`BarrierReport`], kept in the ledger as `aet.barrier`);
//! 3. the audit evaluates accesses against those rules ([`Model`]): under `enforce` a denied
//!    access that the rules deny is **blocked**; under `shadow` an access the rules deny is
//!    **would be blocked**.

use std::collections::BTreeSet;

use aet_ledger::{
    access::Access,
    barrier::{
        BarrierMode, BarrierPlan, BarrierReport, CheatPattern, Grant, ProtectedId, Rights,
        WALK_LIMIT,
    },
    ppath::PPath,
};

use crate::policy::{Policy, Severity, Target};

/// The path a glob names when it is a plain path (its escaped glob characters unescaped), or
/// `None` when it has glob characters.
fn literal(p: &str) -> Option<String> {
    let mut out = String::with_capacity(p.len());
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '*' | '?' | '[' | '{' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// The grants and exclusions of `policy` for `--mode shadow|enforce`. Refuses a policy without
/// `[allow]`, and allow entries Landlock cannot express (globs other than a trailing `/**`),
/// naming each.
pub fn plan(
    policy: &Policy,
    enforce: bool,
    protected: &std::collections::BTreeMap<String, aet_ledger::metadata::ProtectedFile>,
) -> Result<BarrierPlan, String> {
    let Some(allow) = &policy.allow else {
        return Err(format!(
            "{}: --mode shadow and enforce build the barrier from [allow], and this policy has none",
            policy.path.display()
        ));
    };
    let mut grants = Vec::new();
    let mut bad = Vec::new();
    let mut add = |key: &str, rights: Rights, list: &[String]| {
        for (i, p) in list.iter().enumerate() {
            let entry = format!("allow.{key}[{i}] = {p:?}");
            let Some(base) = literal(p.strip_suffix("/**").unwrap_or(p)) else {
                bad.push(entry);
                continue;
            };
            let base = base.trim_end_matches('/');
            let base = if base.is_empty() { "/" } else { base };
            grants.push(Grant {
                entry,
                path: PPath(base.into()),
                rights,
            });
        }
    };
    let list = |k: &str| allow.patterns.get(k).cloned().unwrap_or_default();
    add("read", Rights::READ, &list("read"));
    add("write", Rights::WRITE, &list("write"));
    match allow.exec {
        Some(_) => add("exec", Rights::EXECUTE, &list("exec")),
        None => add("read", Rights::EXECUTE, &list("read")),
    }
    // Listing is a probe: allowed everywhere unless `allow.probe` says where, as in the audit.
    match allow.probe {
        Some(_) => add("probe", Rights(Rights::READ_DIR), &list("probe")),
        None => add(
            "probe (not given: everywhere)",
            Rights(Rights::READ_DIR),
            &["/".to_owned()],
        ),
    }
    if !bad.is_empty() {
        return Err(format!(
            "{}: the barrier grants files and directories (a path, or PATH/**), not globs: {}",
            policy.path.display(),
            bad.join(", ")
        ));
    }
    let reach = Access::Read.bit() | Access::Write.bit() | Access::Exec.bit();
    let cheats = policy
        .rules
        .iter()
        .filter(|r| {
            r.severity == Severity::Cheat && r.target == Target::Path && r.access_mask & reach != 0
        })
        .map(|r| CheatPattern {
            rule: r.name.clone(),
            pattern: r.pattern.clone(),
        })
        .collect();
    let protected = protected
        .iter()
        .map(|(name, f)| ProtectedId {
            rule: format!("protected.{name}"),
            path: f.path.clone(),
            dev: f.dev,
            ino: f.ino,
        })
        .collect();
    Ok(BarrierPlan {
        enforce,
        grants,
        cheats,
        protected,
        walk_limit: WALK_LIMIT,
    })
}

fn parent(p: &[u8]) -> Option<&[u8]> {
    let i = p.iter().rposition(|&b| b == b'/')?;
    Some(if i == 0 { b"/" } else { &p[..i] })
}

/// The barrier's rules, for the audit: what the kernel would answer for a path and an access.
#[derive(Clone, Debug)]
pub struct Model {
    pub mode: BarrierMode,
    rules: Vec<(Vec<u8>, Rights)>,
    partial: BTreeSet<Vec<u8>>,
}

impl Model {
    pub fn new(r: &BarrierReport) -> Self {
        use std::os::unix::ffi::OsStrExt as _;
        let bytes = |p: &PPath| p.as_path().as_os_str().as_bytes().to_vec();
        Self {
            mode: r.mode,
            rules: r.rules.iter().map(|x| (bytes(&x.path), x.rights)).collect(),
            partial: r.partial_dirs.iter().map(bytes).collect(),
        }
    }

    /// The rights at `p`: those of every rule on it or on a directory above it.
    pub fn rights(&self, p: &[u8]) -> Rights {
        Rights(
            self.rules
                .iter()
                .filter(|(r, _)| aet_ledger::util::path_under(p, r))
                .fold(0, |m, (_, x)| m | x.0),
        )
    }

    /// Does the barrier allow this access? `change` is a row that creates, removes or renames
    /// (Landlock checks those on the parent directory). Paths that are not absolute (pipes,
    /// sockets, anonymous inodes) and probes are never blocked.
    pub fn allows(&self, p: &[u8], access: Access, change: bool) -> bool {
        if p.first() != Some(&b'/') {
            return true;
        }
        let r = self.rights(p);
        match access {
            Access::Read => {
                r.has(Rights::READ_FILE) || r.has(Rights::READ_DIR) && self.partial.contains(p)
            }
            Access::List => r.has(Rights::READ_DIR),
            Access::Write if change => {
                parent(p).is_some_and(|d| self.rights(d).0 & (Rights::MAKE | Rights::REMOVE) != 0)
            }
            Access::Write => r.has(Rights::WRITE_FILE),
            Access::Exec => r.has(Rights::EXEC),
            Access::Probe | Access::Connect | Access::Host => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use aet_ledger::barrier::BarrierRule;

    use super::*;

    fn policy(text: &str) -> Policy {
        Policy::parse(text, Path::new("p.toml")).expect("policy")
    }

    #[test]
    fn grants_come_from_the_allow_lists_and_globs_are_refused_by_name() {
        let p = policy(
            "[allow]\nread = [\"/usr\", \"/task/**\"]\nwrite = [\"/task/out/\", '/a\\[1\\]']\n[cheats]\nkey = 'answers/'\n",
        );
        let b = plan(&p, true, &Default::default()).unwrap();
        let g: Vec<(&str, Rights)> = b
            .grants
            .iter()
            .map(|g| (g.path.as_path().to_str().unwrap(), g.rights))
            .collect();
        assert_eq!(
            g,
            [
                ("/usr", Rights::READ),
                ("/task", Rights::READ),
                ("/task/out", Rights::WRITE),
                ("/a[1]", Rights::WRITE),
                ("/usr", Rights::EXECUTE),
                ("/task", Rights::EXECUTE),
                ("/", Rights(Rights::READ_DIR)),
            ]
        );
        assert_eq!(b.cheats[0].rule, "cheats.key");
        let e = plan(
            &policy("[allow]\nread = [\"/usr\", \"/**/task/*.sh\"]\n"),
            true,
            &Default::default(),
        )
        .unwrap_err();
        assert!(e.contains("allow.read[1] = \"/**/task/*.sh\""), "{e}");
        assert!(e.contains("p.toml"), "{e}");
        let e = plan(&policy("[cheats]\nk = 'x'\n"), false, &Default::default()).unwrap_err();
        assert!(e.contains("[allow]"), "{e}");
    }

    #[test]
    fn the_model_answers_as_landlock_does() {
        let rule = |p: &str, r: Rights| BarrierRule {
            path: PPath(p.into()),
            rights: r,
            entry: String::new(),
        };
        let m = Model::new(&BarrierReport {
            mode: BarrierMode::Enforce,
            abi: 7,
            rules: vec![
                rule("/usr", Rights::READ | Rights::EXECUTE),
                // /task holds a left-out file: listed only; its other entries granted.
                rule("/task", Rights(Rights::READ_DIR)),
                rule("/task/src", Rights::READ),
                rule("/task/out", Rights::READ | Rights::WRITE),
            ],
            excluded: vec![],
            partial_dirs: vec![PPath("/task".into())],
            missing: vec![],
            walked: 0,
            enforced: None,
            scoped: vec![],
        });
        assert!(m.allows(b"/usr/bin/sh", Access::Exec, false));
        assert!(m.allows(b"/usr/lib/x.so", Access::Read, false));
        assert!(!m.allows(b"/etc/passwd", Access::Read, false));
        assert!(!m.allows(b"/usr/x", Access::Write, false));
        assert!(m.allows(b"/task", Access::List, false));
        assert!(m.allows(b"/task", Access::Read, false));
        assert!(!m.allows(b"/task/answers.txt", Access::Read, false));
        assert!(m.allows(b"/task/src/a.c", Access::Read, false));
        assert!(m.allows(b"/task/out/r.txt", Access::Write, false));
        assert!(m.allows(b"/task/out/r.txt", Access::Write, true));
        assert!(!m.allows(b"/task/new.txt", Access::Write, true));
        assert!(!m.allows(b"/taskforce", Access::Read, false));
        assert!(m.allows(b"pipe:[12]", Access::Read, false));
        assert!(m.allows(b"/etc/passwd", Access::Probe, false));
    }
}
