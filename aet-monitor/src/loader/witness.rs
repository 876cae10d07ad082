//! Where the classic programs' witnesses are attached.
//!
//! A classic tracepoint's program is skipped while anything on its CPU holds the kernel's
//! per-CPU BPF mark (`bpf_prog_active`): another BPF user's `bpf()` map call preempted on that
//! CPU (a kernel that preempts kernel code: `preempt=full`, PREEMPT_RT, low-latency builds)
//! leaves it there for every task that runs in its place. Since 6.7 the kernel counts such a
//! skip in the program's `recursion_misses`, which the record already treats as lost events
//! (`skipped`); before 6.7 it counts it nowhere, and a run would say `complete` with rows
//! missing. There each record-building classic program gets a witness (`aet-ebpf`'s
//! `probes::witness`): a raw tracepoint program on the same tracepoint, which the kernel runs
//! regardless of that mark, and which counts a lost event (`program_skipped`) for the run whose
//! event the classic program did not see.
//!
//! The witness relies on what kernels before 6.7 do: a tracepoint's probes run one after the
//! other, with preemption off, in the order they were attached, so the classic program and its
//! witness run back to back on one CPU for one task. Later kernels run a syscall tracepoint's
//! raw programs preemptibly (7.x), where a task could move to another CPU between the two; they
//! count the skips themselves, and get no witness.

/// `on` or `off`: attach the witnesses or not, whatever the kernel (for tests; the default
/// decides by the kernel's release, [`wanted`]).
pub const WITNESS_ENV: &str = "AET_DEBUG_WITNESS";

/// The first release whose kernel counts a classic tracepoint program's skipped runs.
const COUNTS_SKIPS_FROM: (u32, u32) = (6, 7);

/// Whether the witnesses are attached on a kernel of this release (`uname -r`), or as
/// [`WITNESS_ENV`] says. A release that cannot be read gets them: a witness costs a little on
/// every event, a skip nobody counts costs the record.
pub fn wanted(release: &str) -> bool {
    match std::env::var(WITNESS_ENV).as_deref() {
        Ok("on") => return true,
        Ok("off") => return false,
        _ => {}
    }
    release_before(release, COUNTS_SKIPS_FROM).unwrap_or(true)
}

/// Whether `release` (`6.1.0-28-cloud-amd64`, `7.2.1+deb14-amd64`) is before `major.minor`;
/// `None` if it does not start with two numbers.
fn release_before(release: &str, (major, minor): (u32, u32)) -> Option<bool> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let a: u32 = parts.next()?.parse().ok()?;
    let b: u32 = parts.next()?.parse().ok()?;
    Some((a, b) < (major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_before_6_7_get_witnesses_and_later_ones_do_not() {
        for (release, before) in [
            ("5.10.0-33-cloud-amd64", true),
            ("5.14.0-503.11.1.el9_5.x86_64+rt", true),
            ("6.1.0-28-cloud-amd64", true),
            ("6.6.63", true),
            ("6.7.0", false),
            ("6.12.43+deb13-rt-amd64", false),
            ("6.18.44-fc-v1300", false),
            ("7.2.1+deb14-cloud-amd64", false),
        ] {
            assert_eq!(
                release_before(release, COUNTS_SKIPS_FROM),
                Some(before),
                "{release}"
            );
        }
        assert_eq!(release_before("unknown", COUNTS_SKIPS_FROM), None);
    }
}
