//! Whether a ledger's record is complete, as a reader sees it: what its metadata says, plus what
//! reading it found (its form, a damaged tail, a doctored footer, the rows). The summary and the
//! audit both decide with [`assess`], so they agree.

use crate::{
    incomplete::{Incomplete, Reasons, Unverified},
    metadata::LedgerMeta,
    reader::Form,
};

/// What reading a ledger's rows found that bears on its completeness.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed {
    /// Rows of kind `io_uring`.
    pub io_uring_rows: u64,
    /// Processes with rows but no recorded start (no fork or exec seen), the first one aside.
    pub unseen_starts: u64,
}

/// Why a ledger's record is incomplete, as a reader sees it: what the ledger says, plus what
/// reading it found. The summary and the audit both decide with this, so they agree. Empty when
/// the record is complete.
pub fn assess(
    m: &LedgerMeta,
    form: Form,
    damaged_tail: Option<&str>,
    doctored: Option<&str>,
    seen: Observed,
) -> Reasons {
    if let Some(error) = doctored {
        // What the footer said (complete, nothing lost) is not the file aet wrote: none of it
        // counts, and the run is never clean.
        let mut r = Reasons::default();
        r.push(Incomplete::Doctored {
            error: error.to_owned(),
        });
        if let Some(e) = damaged_tail {
            r.push(Incomplete::DamagedTail {
                error: e.to_owned(),
            });
        }
        return r;
    }
    let mut r = m.incomplete.clone();
    if form == Form::Unfinished {
        r.push(Incomplete::Unfinished);
    }
    if let Some(e) = damaged_tail {
        r.push(Incomplete::DamagedTail {
            error: e.to_owned(),
        });
    }
    let lost = m.events_lost.unwrap_or(0);
    if lost > 0 {
        r.push(Incomplete::EventsLost {
            lost,
            by_reason: m.events_lost_by_reason.clone(),
        });
    }
    if seen.io_uring_rows > 0 {
        r.push(Incomplete::IoUring {
            records: seen.io_uring_rows,
            submitted: m
                .kernel_counters
                .get("io_uring_submitted")
                .copied()
                .unwrap_or(0),
        });
    }
    // `aet run` made the run's cgroup empty and started its command in it: a process with no
    // recorded start there came in from outside later (a container runtime's `runc init`
    // joining its container to the run), recorded from the moment it came in. Only work
    // `aet monitor` attached to can have been running before the record began.
    if seen.unseen_starts > 0 && m.command.is_empty() {
        r.push(Incomplete::AlreadyRunning {
            processes: seen.unseen_starts,
        });
    }
    if m.sandbox.as_ref().is_some_and(|s| !s.verified) {
        r.push(Incomplete::NotVerified {
            what: Unverified::Sandbox,
        });
    }
    if m.identity.as_ref().is_some_and(|i| !i.verified) {
        r.push(Incomplete::NotVerified {
            what: Unverified::Identity,
        });
    }
    // A finished ledger must say it is complete, and lose nothing, to be complete.
    if r.is_empty() && !(m.complete && m.events_lost == Some(0)) {
        r.push(Incomplete::NotStatedComplete);
    }
    r
}
