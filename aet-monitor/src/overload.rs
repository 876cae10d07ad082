//! Backpressure: when a run's unread records pass a high-water mark of its share of the ring
//! buffer, its cgroup is frozen (`cgroup.freeze`) until the consumer has read them down to a
//! low-water mark, then thawed. The run is slowed instead of losing events; how often and how
//! long it was frozen goes into its ledger. Events that are still lost are counted as ever.
//!
//! aet never leaves a cgroup frozen: while one is frozen a marker file names it, and the guard
//! of the aet that froze it (or of the daemon) thaws every cgroup so named when that aet dies
//! (`kernel::cgroup::thaw_marked`).

use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::loader::Scope;
use aet_ledger::metadata::OverloadRecord;

/// What a run does when the record cannot keep up.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum OnOverload {
    /// Freeze the run's cgroup until the record has caught up (lossless, slower).
    #[default]
    Freeze,
    /// Let the kernel drop what does not fit, and count it (the run is then incomplete).
    Drop,
}

impl OnOverload {
    pub fn name(self) -> &'static str {
        match self {
            Self::Freeze => "freeze",
            Self::Drop => "drop",
        }
    }
}

/// Set to hold every freeze at least this many milliseconds (fault injection for the tests that
/// kill aet during a freeze). Never set it for a real run.
pub const HOLD_ENV: &str = "AET_DEBUG_FREEZE_HOLD_MS";

/// Marker files' name prefix in a marker directory.
pub use aet_kernel::cgroup::FREEZE_MARKER_PREFIX as MARKER_PREFIX;

/// A run's freezer.
#[derive(Debug)]
pub struct Freezer {
    asked: OnOverload,
    /// The run's `cgroup.freeze`, when the run can be frozen.
    file: Option<PathBuf>,
    /// The file that names the cgroup while it is frozen, for the guard.
    marker: Option<PathBuf>,
    since: Option<Instant>,
    hold: Duration,
    freezes: u64,
    total: Duration,
    longest: Duration,
    note: Option<String>,
}

/// The unread share of its quota above which a run is frozen, and below which it is thawed.
/// An eighth: between the crossing and the freeze taking hold (the consumer notices every 256
/// records; tasks stop at their next return to user space) a storm on 2 cores with a slow
/// consumer overran the rest of the quota: 415 and 608 `quota_full` losses with the mark at a
/// half, 7 with it at a quarter, none in 4 runs at an eighth (tests/overload.rs).
pub const HIGH_WATER: (u64, u64) = (1, 8);
pub const LOW_WATER: (u64, u64) = (1, 16);

impl Freezer {
    /// A freezer for a run of `scope` that asked for `asked`; `marker_dir` holds the marker
    /// files its guard reads.
    pub fn new(asked: OnOverload, scope: &Scope, marker_dir: Option<&Path>, slot: u32) -> Self {
        let mut f = Self {
            asked,
            file: None,
            marker: None,
            since: None,
            hold: std::env::var(HOLD_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_millis)
                .unwrap_or_default(),
            freezes: 0,
            total: Duration::ZERO,
            longest: Duration::ZERO,
            note: None,
        };
        if asked == OnOverload::Drop {
            return f;
        }
        match scope {
            Scope::Cgroup { path, .. } => {
                let file = path.join("cgroup.freeze");
                if file.exists() {
                    f.file = Some(file);
                    f.marker = marker_dir.map(|d| d.join(format!("{MARKER_PREFIX}{slot}")));
                } else {
                    f.note = Some(format!(
                        "{} has no cgroup.freeze (a cgroup v2 feature of Linux 5.2): overload drops events and counts them",
                        path.display()
                    ));
                }
            }
            Scope::Uid(uid) => {
                f.note = Some(format!(
                    "the scope is uid {uid}, not a cgroup aet can freeze: overload drops events and counts them"
                ));
            }
            Scope::Pid(pid) => {
                f.note = Some(format!(
                    "the scope is the process tree of {pid}, not a cgroup aet can freeze: overload drops events and counts them"
                ));
            }
        }
        f
    }

    /// What the run uses: `freeze` only when it can.
    pub fn effective(&self) -> OnOverload {
        if self.file.is_some() {
            OnOverload::Freeze
        } else {
            OnOverload::Drop
        }
    }

    /// Does the run freeze on overload?
    pub fn active(&self) -> bool {
        self.file.is_some()
    }

    /// Is the run frozen now?
    pub fn frozen(&self) -> bool {
        self.since.is_some()
    }

    /// Freezes or thaws the run for `unread` bytes of its records not read yet, of a `quota`.
    pub fn check(&mut self, unread: u64, quota: u64) {
        if self.file.is_none() {
            return;
        }
        match self.since {
            None if unread > quota / HIGH_WATER.1 * HIGH_WATER.0 => self.freeze(),
            Some(t) if unread < quota / LOW_WATER.1 * LOW_WATER.0 && t.elapsed() >= self.hold => {
                self.thaw()
            }
            _ => {}
        }
    }

    fn freeze(&mut self) {
        let Some(file) = &self.file else { return };
        // A cgroup someone else froze (`docker pause`) is theirs to thaw: leave it alone.
        match fs::read_to_string(file) {
            Ok(v) if v.trim() == "0" => {}
            Ok(_) => return,
            Err(e) => {
                self.give_up(format!("cannot read {}: {e}", file.display()));
                return;
            }
        }
        // The marker first: a guard that finds it thaws the cgroup if aet dies from here on.
        if let Some(m) = &self.marker
            && let Err(e) = fs::write(m, file.as_os_str().as_encoded_bytes())
        {
            self.give_up(format!("cannot write {}: {e}", m.display()));
            return;
        }
        if let Err(e) = fs::write(file, b"1") {
            let why = format!("cannot freeze {}: {e}", file.display());
            if let Some(m) = &self.marker {
                let _ = fs::remove_file(m);
            }
            self.give_up(why);
            return;
        }
        self.freezes += 1;
        self.since = Some(Instant::now());
    }

    /// Thaws the run if it is frozen (at the end of the run too).
    pub fn thaw(&mut self) {
        let Some(t) = self.since.take() else { return };
        if let Some(file) = &self.file
            && let Err(e) = fs::write(file, b"0")
            && file.exists()
        {
            self.note = Some(format!("cannot thaw {}: {e}", file.display()));
        }
        if let Some(m) = &self.marker {
            let _ = fs::remove_file(m);
        }
        let d = t.elapsed();
        self.total += d;
        self.longest = self.longest.max(d);
    }

    /// Freezing failed: the run drops from now on, and says why.
    fn give_up(&mut self, why: String) {
        self.note = Some(format!(
            "{why}: overload drops events and counts them from then on"
        ));
        self.file = None;
    }

    /// What the ledger says about it.
    pub fn record(&self) -> OverloadRecord {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let since = self.since.map(|t| t.elapsed()).unwrap_or_default();
        OverloadRecord {
            asked: self.asked.name().into(),
            used: self.effective().name().into(),
            freezes: self.freezes,
            frozen_ms: ms(self.total + since),
            longest_ms: ms(self.longest.max(since)),
            note: self.note.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cgroup_like(dir: &Path) -> Scope {
        fs::write(dir.join("cgroup.freeze"), "0\n").unwrap();
        Scope::Cgroup {
            path: dir.to_owned(),
            id: 1,
            level: 1,
        }
    }

    #[test]
    fn freezes_above_the_high_mark_and_thaws_below_the_low_one() {
        let d = tempfile::tempdir().unwrap();
        let markers = tempfile::tempdir().unwrap();
        let scope = cgroup_like(d.path());
        let mut f = Freezer::new(OnOverload::Freeze, &scope, Some(markers.path()), 3);
        assert!(f.active());
        let freeze = d.path().join("cgroup.freeze");
        let quota = 1000;
        let high = quota / HIGH_WATER.1 * HIGH_WATER.0;
        let low = quota / LOW_WATER.1 * LOW_WATER.0;
        assert!(low < high && high < quota);
        f.check(high, quota);
        assert!(!f.frozen());
        f.check(high + 1, quota);
        assert!(f.frozen());
        assert_eq!(fs::read_to_string(&freeze).unwrap(), "1");
        // The marker names the cgroup while it is frozen.
        let marker = markers.path().join("frozen-3");
        assert_eq!(
            fs::read(&marker).unwrap(),
            freeze.as_os_str().as_encoded_bytes()
        );
        f.check(low, quota);
        assert!(f.frozen(), "still at the low mark");
        f.check(low - 1, quota);
        assert!(!f.frozen());
        assert_eq!(fs::read_to_string(&freeze).unwrap(), "0");
        assert!(!marker.exists());
        let r = f.record();
        assert_eq!(
            (r.asked.as_str(), r.used.as_str(), r.freezes),
            ("freeze", "freeze", 1)
        );
    }

    #[test]
    fn a_cgroup_someone_else_froze_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let scope = cgroup_like(d.path());
        fs::write(d.path().join("cgroup.freeze"), "1\n").unwrap();
        let mut f = Freezer::new(OnOverload::Freeze, &scope, None, 0);
        f.check(900, 1000);
        assert!(!f.frozen());
        assert_eq!(f.record().freezes, 0);
    }

    #[test]
    fn scopes_that_are_not_cgroups_drop_and_say_so() {
        for scope in [Scope::Uid(1000), Scope::Pid(1)] {
            let f = Freezer::new(OnOverload::Freeze, &scope, None, 0);
            let r = f.record();
            assert_eq!((r.asked.as_str(), r.used.as_str()), ("freeze", "drop"));
            assert!(r.note.unwrap().contains("not a cgroup"));
        }
        let d = tempfile::tempdir().unwrap();
        let f = Freezer::new(OnOverload::Drop, &cgroup_like(d.path()), None, 0);
        assert_eq!(f.record().used, "drop");
        assert!(f.record().note.is_none());
    }

    #[test]
    fn a_guard_thaws_what_the_markers_name() {
        let d = tempfile::tempdir().unwrap();
        let markers = tempfile::tempdir().unwrap();
        let scope = cgroup_like(d.path());
        let mut f = Freezer::new(OnOverload::Freeze, &scope, Some(markers.path()), 7);
        f.check(999, 1000);
        assert!(f.frozen());
        // aet dies here: its guard thaws.
        std::mem::forget(f);
        assert_eq!(aet_kernel::cgroup::thaw_marked(markers.path()), 1);
        assert_eq!(
            fs::read_to_string(d.path().join("cgroup.freeze")).unwrap(),
            "0"
        );
        assert_eq!(fs::read_dir(markers.path()).unwrap().count(), 0);
    }
}
