//! The stage's side of the barrier (`--mode shadow|enforce`): inside the agent's view, walk the
//! granted trees, leave out the files a cheat pattern or a protected identity names, make the
//! rules, and (under enforce) load them into a Landlock ruleset that the stage applies to itself
//! once its privileges are dropped, so that the command and everything it starts inherit it.
//! The types are `aet_ledger::barrier`'s; the audit's model of the rules is `aet_audit::policy::barrier`.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    os::unix::{ffi::OsStrExt as _, fs::MetadataExt as _},
    path::{Path, PathBuf},
};

use landlock::{
    ABI, Access as _, AccessFs, BitFlags, CompatLevel, Compatible as _, PathBeneath, PathFd,
    Ruleset, RulesetAttr as _, RulesetCreated, RulesetCreatedAttr as _, RulesetStatus, Scope,
};
use regex::bytes::RegexSet;

use aet_ledger::barrier::{
    BarrierMode, BarrierPlan, BarrierReport, BarrierRule, Excluded, MIN_ABI, Rights,
};
use aet_ledger::ppath::PPath;

/// The ABI whose rights the ruleset handles (file rights of ABI 5, scopes of ABI 6).
const HANDLED: ABI = ABI::V6;

/// The kernel's Landlock ABI: 0 when Landlock is not built in or not enabled.
pub fn kernel_abi() -> i32 {
    // Fault injection for the tests of the refusal (this machine's kernel has what they lack).
    if let Some(v) = std::env::var("AET_DEBUG_LANDLOCK_ABI")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return v;
    }
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_ulong = 1;
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns the ABI version.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    i32::try_from(v).unwrap_or(0).max(0)
}

/// Why this kernel cannot enforce a barrier, if it cannot.
pub fn cannot_enforce() -> Option<String> {
    match kernel_abi() {
        0 => Some(
            "this kernel has no Landlock (not built in, or not in the lsm= list at boot): \
             --mode enforce cannot build its barrier"
                .into(),
        ),
        n if n < MIN_ABI => Some(format!(
            "this kernel's Landlock ABI is {n}; --mode enforce needs ABI {MIN_ABI} (Linux 6.12) \
             to keep the agent's signals and abstract unix sockets inside the run"
        )),
        _ => None,
    }
}

/// A barrier built inside the view, not yet applied.
pub struct Built {
    pub report: BarrierReport,
    ruleset: Option<RulesetCreated>,
}

fn to_landlock(r: Rights, is_dir: bool) -> BitFlags<AccessFs> {
    let mut a = BitFlags::EMPTY;
    if r.has(Rights::READ_FILE) {
        a |= AccessFs::ReadFile | AccessFs::IoctlDev;
    }
    if r.has(Rights::READ_DIR) {
        a |= AccessFs::ReadDir;
    }
    if r.has(Rights::WRITE_FILE) {
        a |= AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    }
    if r.has(Rights::MAKE) {
        a |= AccessFs::MakeChar
            | AccessFs::MakeDir
            | AccessFs::MakeReg
            | AccessFs::MakeSock
            | AccessFs::MakeFifo
            | AccessFs::MakeBlock
            | AccessFs::MakeSym
            | AccessFs::Refer;
    }
    if r.has(Rights::REMOVE) {
        a |= AccessFs::RemoveDir | AccessFs::RemoveFile | AccessFs::Refer;
    }
    if r.has(Rights::EXEC) {
        a |= AccessFs::Execute;
    }
    let all = AccessFs::from_all(HANDLED);
    if is_dir {
        a & all
    } else {
        a & AccessFs::from_file(HANDLED)
    }
}

/// Rights that mean something on a file that is not a directory.
fn file_rights(r: Rights) -> Rights {
    Rights(r.0 & (Rights::READ_FILE | Rights::WRITE_FILE | Rights::EXEC))
}

/// Pseudo file systems the walk does not enter (their entries are not files a policy names).
fn pseudo_fs(p: &Path) -> bool {
    const MAGIC: [i64; 9] = [
        0x9fa0,      // proc
        0x6265_6572, // sysfs
        0x0027_e0eb, // cgroup
        0x6367_7270, // cgroup2
        0x6462_6720, // debugfs
        0x7472_6163, // tracefs
        0x7363_6673, // securityfs
        0xcafe_4a11, // bpf
        0x1cd1,      // devpts
    ];
    nix::sys::statfs::statfs(p)
        .map(|s| MAGIC.contains(&{ s.filesystem_type().0 }))
        .unwrap_or(false)
}

struct Walker<'a> {
    plan: &'a BarrierPlan,
    cheats: RegexSet,
    ids: BTreeMap<(u64, u64), &'a str>,
    walked: u64,
    /// Left-out paths found under each walked root.
    found: BTreeMap<PathBuf, String>,
    /// Files a cheat pattern left out that have other hard links: left out by identity too.
    cheat_ids: BTreeMap<(u64, u64), String>,
    walked_roots: BTreeSet<PathBuf>,
}

impl Walker<'_> {
    fn excluded(&self, p: &Path, id: Option<(u64, u64)>) -> Option<String> {
        let m = self.cheats.matches(p.as_os_str().as_bytes());
        if let Some(i) = m.iter().next() {
            return Some(self.plan.cheats[i].rule.clone());
        }
        id.and_then(|k| {
            self.ids
                .get(&k)
                .map(|s| (*s).to_owned())
                .or_else(|| self.cheat_ids.get(&k).cloned())
        })
    }

    /// What else reaches a left-out entry: Landlock grants a symlink's target through the
    /// target's own directory, so a left-out link leaves its target out too (and the target's
    /// own target, to the end of the chain); a file with other hard links is left out under
    /// every name (its identity is added, and the walk is made again: see [`build`]).
    fn leave_out_aliases(&mut self, p: &Path, rule: &str) {
        let Ok(m) = fs::symlink_metadata(p) else {
            return;
        };
        if m.file_type().is_symlink() {
            if let Ok(target) = fs::canonicalize(p) {
                self.found
                    .entry(target)
                    .or_insert_with(|| format!("{rule} (the target of the link {})", p.display()));
            }
        } else if m.is_file() && m.nlink() > 1 {
            let id = (m.dev(), m.ino());
            if !self.ids.contains_key(&id) && !self.cheat_ids.contains_key(&id) {
                self.cheat_ids.insert(id, rule.to_owned());
            }
        }
    }

    /// Walks `root` (a directory), noting every left-out entry below it.
    fn walk(&mut self, root: &Path) -> Result<(), String> {
        if self.walked_roots.iter().any(|r| root.starts_with(r)) {
            return Ok(());
        }
        self.walked_roots.insert(root.to_owned());
        let mut stack = vec![root.to_owned()];
        while let Some(dir) = stack.pop() {
            // What cannot be examined is left out whole (its files may be cheats): never
            // granted unseen.
            let entries = match fs::read_dir(&dir).and_then(|rd| rd.collect::<Result<Vec<_>, _>>())
            {
                Ok(e) => e,
                Err(e) if dir == root => {
                    return Err(format!("cannot walk {}: {e}", dir.display()));
                }
                Err(e) => {
                    self.found
                        .insert(dir.clone(), format!("(cannot be walked: {e})"));
                    continue;
                }
            };
            for e in entries {
                self.walked += 1;
                if self.walked > self.plan.walk_limit {
                    return Err(format!(
                        "the barrier's walk of the granted trees passed {} entries (at {}): \
                         grant narrower directories",
                        self.plan.walk_limit,
                        dir.display()
                    ));
                }
                let p = e.path();
                let meta = if self.ids.is_empty() && self.cheat_ids.is_empty() {
                    None
                } else {
                    match e.metadata() {
                        Ok(m) => Some(m),
                        Err(err) => {
                            self.found.insert(p, format!("(cannot be examined: {err})"));
                            continue;
                        }
                    }
                };
                if let Some(rule) = self.excluded(&p, meta.as_ref().map(|m| (m.dev(), m.ino()))) {
                    self.leave_out_aliases(&p, &rule);
                    self.found.insert(p, rule);
                    continue;
                }
                let Ok(ft) = e.file_type() else {
                    self.found.insert(p, "(cannot be examined)".into());
                    continue;
                };
                if ft.is_dir() && !pseudo_fs(&p) {
                    stack.push(p);
                }
            }
        }
        Ok(())
    }
}

/// Builds the barrier inside the view: walks, makes the rules and, under enforce, the Landlock
/// ruleset (as root, before privileges are dropped: the walk must see everything).
pub fn build(plan: &BarrierPlan) -> Result<Built, String> {
    let abi = kernel_abi();
    if plan.enforce
        && let Some(why) = cannot_enforce()
    {
        return Err(why);
    }
    let cheats = RegexSet::new(plan.cheats.iter().map(|c| c.pattern.as_str()))
        .map_err(|e| format!("cheat patterns: {e}"))?;
    let mut w = Walker {
        plan,
        cheats,
        ids: plan
            .protected
            .iter()
            .map(|p| ((p.dev, p.ino), p.rule.as_str()))
            .collect(),
        walked: 0,
        found: BTreeMap::new(),
        cheat_ids: BTreeMap::new(),
        walked_roots: BTreeSet::new(),
    };
    let mut report = BarrierReport {
        mode: if plan.enforce {
            BarrierMode::Enforce
        } else {
            BarrierMode::Shadow
        },
        abi,
        rules: Vec::new(),
        excluded: Vec::new(),
        partial_dirs: Vec::new(),
        missing: Vec::new(),
        walked: 0,
        enforced: None,
        scoped: Vec::new(),
    };
    let mut grants = plan.grants.clone();
    if grants.iter().any(|g| g.rights.has(Rights::EXEC)) {
        grants.extend(loaders());
    }
    // Resolve each grant in the view (a symlink grants its target, as Landlock does) and walk
    // (when something is to be left out: listing a directory shows names, never contents, so
    // grants of listing alone are not walked).
    let exclusions = !plan.cheats.is_empty() || !plan.protected.is_empty();
    let mut resolved = Vec::new();
    for g in &grants {
        match fs::canonicalize(g.path.as_path()) {
            Ok(p) => {
                let is_dir = fs::metadata(&p).is_ok_and(|m| m.is_dir());
                resolved.push((g, p, is_dir));
            }
            Err(_) => report.missing.push(g.entry.clone()),
        }
    }
    let walk_all = |w: &mut Walker<'_>| -> Result<(), String> {
        for (g, p, is_dir) in &resolved {
            let list_only = g.rights.0 & !Rights::READ_DIR == 0;
            if *is_dir && exclusions && !list_only && !pseudo_fs(p) {
                w.walk(p)?;
            }
        }
        Ok(())
    };
    walk_all(&mut w)?;
    // Hard links of a left-out file found late: walk again with their identities, so that a
    // name met before the left-out one is left out too.
    if !w.cheat_ids.is_empty() {
        w.walked_roots.clear();
        w.walked = 0;
        walk_all(&mut w)?;
    }
    let mut partial: BTreeSet<PathBuf> = BTreeSet::new();
    for (g, p, is_dir) in &resolved {
        if g.rights.0 & !Rights::READ_DIR == 0 {
            report.rules.push(BarrierRule {
                path: PPath(p.clone()),
                rights: g.rights,
                entry: g.entry.clone(),
            });
            continue;
        }
        let id = fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
        if let Some(rule) = w.excluded(p, id).or_else(|| {
            w.found
                .iter()
                .find(|(x, _)| p.starts_with(x))
                .map(|(_, r)| r.clone())
        }) {
            // The grant itself is left out (or lies inside something left out).
            w.found.entry(p.clone()).or_insert(rule);
            continue;
        }
        let below: Vec<&PathBuf> = w
            .found
            .keys()
            .filter(|x| x.starts_with(p) && *x != p)
            .collect();
        if !is_dir || below.is_empty() {
            let rights = if *is_dir {
                g.rights
            } else {
                file_rights(g.rights)
            };
            if rights.0 != 0 {
                report.rules.push(BarrierRule {
                    path: PPath(p.clone()),
                    rights,
                    entry: g.entry.clone(),
                });
            }
            continue;
        }
        // Something below is left out: the directories on the way are listed, not granted;
        // every other entry beside them is granted whole.
        let mut ancestors: BTreeSet<PathBuf> = BTreeSet::new();
        for x in &below {
            let mut a = x.parent();
            while let Some(d) = a {
                if !d.starts_with(p) {
                    break;
                }
                ancestors.insert(d.to_owned());
                a = d.parent();
            }
        }
        // A directory left out whole is not a way to something left out.
        ancestors.retain(|a| !w.found.contains_key(a));
        if g.rights.has(Rights::READ_DIR) {
            report.rules.push(BarrierRule {
                path: PPath(p.clone()),
                rights: Rights(Rights::READ_DIR),
                entry: g.entry.clone(),
            });
        }
        for a in &ancestors {
            let Ok(rd) = fs::read_dir(a) else { continue };
            for e in rd.flatten() {
                let c = e.path();
                // A link needs no rule (Landlock checks the file it leads to), and a rule on
                // one would grant its target wherever that is, left out or not.
                if w.found.contains_key(&c)
                    || ancestors.contains(&c)
                    || e.file_type().is_ok_and(|t| t.is_symlink())
                {
                    continue;
                }
                let dir = e.file_type().is_ok_and(|t| t.is_dir());
                let rights = if dir { g.rights } else { file_rights(g.rights) };
                if rights.0 != 0 {
                    report.rules.push(BarrierRule {
                        path: PPath(c),
                        rights,
                        entry: g.entry.clone(),
                    });
                }
            }
        }
        partial.extend(ancestors);
    }
    report.excluded = w
        .found
        .iter()
        .map(|(p, r)| Excluded {
            path: PPath(p.clone()),
            rule: r.clone(),
        })
        .collect();
    report.partial_dirs = partial.into_iter().map(PPath).collect();
    report.walked = w.walked;
    let ruleset = if plan.enforce {
        Some(ruleset(&report.rules)?)
    } else {
        None
    };
    Ok(Built { report, ruleset })
}

/// The dynamic loaders of the view: the kernel executes the one a program names (PT_INTERP), so
/// a program that may run needs it too.
fn loaders() -> Vec<aet_ledger::barrier::Grant> {
    let mut out = Vec::new();
    for d in [
        "/lib64",
        "/lib",
        "/lib32",
        "/libx32",
        "/usr/lib64",
        "/usr/lib",
    ] {
        let Ok(rd) = fs::read_dir(d) else { continue };
        for e in rd.flatten() {
            let name = e.file_name();
            let n = name.as_bytes();
            if n.starts_with(b"ld-linux") || n.starts_with(b"ld-musl") || n == b"ld.so" {
                out.push(aet_ledger::barrier::Grant {
                    entry:
                        "aet: the dynamic loader (the kernel executes it for every dynamic program)"
                            .into(),
                    path: PPath(e.path()),
                    rights: Rights::EXECUTE,
                });
            }
        }
    }
    out
}

fn ruleset(rules: &[BarrierRule]) -> Result<RulesetCreated, String> {
    let err = |what: &str, e: &dyn std::fmt::Display| format!("Landlock: {what}: {e}");
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(HANDLED))
        .map_err(|e| err("handled rights", &e))?
        .scope(Scope::from_all(HANDLED))
        .map_err(|e| err("scopes", &e))?
        .create()
        .map_err(|e| err("creating the ruleset", &e))?;
    for r in rules {
        let fd = PathFd::new(r.path.as_path())
            .map_err(|e| err(&format!("opening {}", r.path.0.display()), &e))?;
        let is_dir = fs::metadata(r.path.as_path()).is_ok_and(|m| m.is_dir());
        rs = rs
            .add_rule(PathBeneath::new(fd, to_landlock(r.rights, is_dir)))
            .map_err(|e| err(&format!("the rule on {}", r.path.0.display()), &e))?;
    }
    Ok(rs)
}

impl Built {
    /// Applies the ruleset to this process (and so to everything it runs); no_new_privs must be
    /// set already. Fails unless Landlock says it is fully enforced.
    pub fn apply(mut self) -> Result<BarrierReport, String> {
        if let Some(rs) = self.ruleset.take() {
            let st = rs
                .restrict_self()
                .map_err(|e| format!("Landlock: restricting the stage: {e}"))?;
            if st.ruleset != RulesetStatus::FullyEnforced {
                return Err(format!(
                    "Landlock enforces the barrier only partly ({:?})",
                    st.ruleset
                ));
            }
            self.report.enforced = Some("fully enforced".into());
            self.report.scoped = vec!["signals".into(), "abstract unix sockets".into()];
        }
        Ok(self.report)
    }
}
