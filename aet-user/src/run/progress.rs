//! The live status of a run on stderr: one line a terminal keeps rewriting, or JSON lines for a
//! harness.

use std::{io::Write as _, path::Path, time::Duration};

use serde::Serialize;

use aet_kernel::cgroup;

use aet_monitor::consumer::Progress;

/// How `aet run` shows its progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    /// Nothing.
    None,
    /// One line on stderr, rewritten in place (for a terminal).
    Line,
    /// A JSON object per line on stderr.
    Json,
}

/// How often the status is refreshed.
pub const INTERVAL: Duration = Duration::from_millis(250);

/// One status, as `--progress json` prints it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Status {
    pub elapsed_s: f64,
    /// Processes alive in the run's cgroup and its descendants.
    pub processes: usize,
    /// Rows recorded so far.
    pub events: u64,
    /// Events lost so far.
    pub lost: u64,
    /// Successful opens for reading, and for writing.
    pub reads: u64,
    pub writes: u64,
    /// Successful execs.
    pub execs: u64,
}

impl Status {
    pub fn new(elapsed: Duration, processes: usize, p: Progress) -> Self {
        Self {
            elapsed_s: (elapsed.as_secs_f64() * 10.0).round() / 10.0,
            processes,
            events: p.events,
            lost: p.lost,
            reads: p.reads,
            writes: p.writes,
            execs: p.execs,
        }
    }

    /// The terminal line.
    pub fn line(&self) -> String {
        format!(
            "aet: {:.1} s · {} process{} · {} events · {} lost · {} read · {} written",
            self.elapsed_s,
            self.processes,
            if self.processes == 1 { "" } else { "es" },
            self.events,
            self.lost,
            self.reads,
            self.writes,
        )
    }
}

/// Processes in a cgroup and its descendants (0 once it is gone).
pub fn processes(path: &Path) -> usize {
    let mut n = cgroup::procs(path).map_or(0, |p| p.len());
    if let Ok(dir) = std::fs::read_dir(path) {
        for e in dir.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                n += processes(&e.path());
            }
        }
    }
    n
}

/// Writes statuses to stderr in one mode, and clears a terminal line before anything else is
/// printed.
pub struct Reporter {
    mode: ProgressMode,
    shown: bool,
}

impl Reporter {
    pub fn new(mode: ProgressMode) -> Self {
        Self { mode, shown: false }
    }

    pub fn active(&self) -> bool {
        self.mode != ProgressMode::None
    }

    pub fn show(&mut self, status: &Status) {
        let mut err = std::io::stderr().lock();
        match self.mode {
            ProgressMode::None => {}
            ProgressMode::Line => {
                let _ = write!(err, "\r\x1b[2K{}", status.line());
                let _ = err.flush();
                self.shown = true;
            }
            ProgressMode::Json => {
                if let Ok(text) = serde_json::to_string(status) {
                    let _ = writeln!(err, "{text}");
                }
            }
        }
    }

    /// Removes the terminal line, if one is shown.
    pub fn clear(&mut self) {
        if self.shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.shown = false;
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_reads_as_a_line_and_as_json() {
        let s = Status::new(
            Duration::from_millis(3_249),
            1,
            Progress {
                events: 1200,
                lost: 0,
                reads: 17,
                writes: 2,
                execs: 3,
            },
        );
        assert_eq!(
            s.line(),
            "aet: 3.2 s · 1 process · 1200 events · 0 lost · 17 read · 2 written"
        );
        let v: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(v["elapsed_s"], 3.2);
        assert_eq!(v["processes"], 1);
        assert_eq!(v["events"], 1200);
        assert_eq!(v["lost"], 0);
        assert_eq!(v["reads"], 17);
        assert_eq!(v["writes"], 2);
        assert_eq!(v["execs"], 3);
    }
}
