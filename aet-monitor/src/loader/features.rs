//! What the running kernel offers aet's programs, found in its BTF before anything is loaded:
//! a kernel that lacks a feature the programs cannot do without is refused at once, in one line
//! naming each missing feature and the oldest kernel that has it; one without `bpf_rdonly_cast`
//! gets the object that reads kernel memory through the helper, and one without the loop and
//! task helpers of 5.11-5.17 the legacy object.

use aet_kernel::btf::KernelBtf;

/// A kernel function the programs call, and the first kernel release that has it.
pub struct Feature {
    /// The function's name in the kernel's BTF.
    pub func: &'static str,
    /// The oldest mainline release that has it.
    pub since: &'static str,
    /// What the programs use it for.
    pub why: &'static str,
}

/// The helpers no variant of the programs can do without.
pub const REQUIRED: &[Feature] = &[Feature {
    func: "bpf_ringbuf_output",
    since: "5.8",
    why: "the ring buffer the records travel through",
}];

/// The helpers the legacy object does without (bounded loops, the registers found from the
/// task's stack): a kernel lacking any of them gets it.
pub const MODERN: &[Feature] = &[
    Feature {
        func: "bpf_get_current_task_btf",
        since: "5.11",
        why: "the current task's registers",
    },
    Feature {
        func: "bpf_task_pt_regs",
        since: "5.15",
        why: "a syscall's arguments at its exit",
    },
    Feature {
        func: "bpf_loop",
        since: "5.17",
        why: "the path walk and the message loops",
    },
    Feature {
        func: "bpf_for_each_map_elem",
        since: "5.13",
        why: "the flush of a process's open files",
    },
];

/// The kfunc that makes a plain address a read-only BTF pointer (6.2): without it the programs
/// read kernel memory through `bpf_probe_read_kernel`, a helper call per read.
pub const RDONLY_CAST: Feature = Feature {
    func: "bpf_rdonly_cast",
    since: "6.2",
    why: "kernel reads as single checked loads",
};

/// Which object the kernel gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Kernel memory read through BTF pointers (`bpf_rdonly_cast`).
    Btf,
    /// Kernel memory read through `bpf_probe_read_kernel`.
    HelperReads,
    /// Helper reads, bounded loops, registers from the task's stack (5.10-5.16).
    Legacy,
}

impl Variant {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Btf => "BTF pointers (bpf_rdonly_cast)",
            Self::HelperReads => {
                "helper reads (bpf_probe_read_kernel; this kernel has no bpf_rdonly_cast)"
            }
            Self::Legacy => {
                "helper reads and bounded loops (the legacy object: this kernel lacks a helper \
                 of 5.11-5.17)"
            }
        }
    }
}

/// Set to kernel function names (comma-separated): aet sees this kernel without them, for the
/// tests of the refusal and of the helper-reads object on a kernel that has the kfunc. The
/// daemon a run starts inherits it. Never set it for a real run.
pub const LACKS_ENV: &str = "AET_DEBUG_KERNEL_LACKS";

/// Whether the kernel's BTF has function `func` (and [`LACKS_ENV`] does not name it).
fn has(btf: &KernelBtf, func: &str) -> bool {
    let pretend = std::env::var(LACKS_ENV).unwrap_or_default();
    !pretend.split(',').any(|f| f.trim() == func) && btf.func_id(func).is_ok()
}

/// The features of [`REQUIRED`] this kernel lacks.
pub fn missing(btf: &KernelBtf) -> Vec<&'static Feature> {
    REQUIRED.iter().filter(|f| !has(btf, f.func)).collect()
}

/// The object variant this kernel takes.
pub fn variant(btf: &KernelBtf) -> Variant {
    if MODERN.iter().any(|f| !has(btf, f.func)) {
        Variant::Legacy
    } else if has(btf, RDONLY_CAST.func) {
        Variant::Btf
    } else {
        Variant::HelperReads
    }
}

/// The one line that refuses a kernel lacking `missing`.
pub fn refusal(release: &str, missing: &[&Feature]) -> String {
    let list: Vec<String> = missing
        .iter()
        .map(|f| format!("{} (Linux {}+, for {})", f.func, f.since, f.why))
        .collect();
    format!(
        "this kernel ({release}) cannot run aet's programs: it lacks {}; aet records on Linux \
         5.8 and later (tested: 5.10, 6.1, 6.12, 6.18, 7.2)",
        list.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // The kfunc test's stand-in kernel: it has `bpf_rdonly_cast` and none of the helpers.
    use crate::loader::kfunc::tests::fixture;

    /// A kernel without the helpers is refused in one line naming each, with the release that
    /// has it.
    #[test]
    fn a_kernel_without_the_helpers_is_refused_in_one_line_naming_each() {
        let btf = fixture();
        let missing = missing(&btf);
        assert_eq!(missing.len(), REQUIRED.len());
        let line = refusal("5.10.0-32-cloud-amd64", &missing);
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(line.starts_with("this kernel (5.10.0-32-cloud-amd64) cannot run aet's programs"));
        assert!(line.contains("bpf_ringbuf_output (Linux 5.8+"), "{line}");
    }

    /// A kernel with `bpf_rdonly_cast` but none of the loop and task helpers gets the legacy
    /// object.
    #[test]
    fn a_kernel_without_the_loop_helpers_gets_the_legacy_object() {
        assert_eq!(variant(&fixture()), Variant::Legacy);
    }

    /// This machine's kernel has every helper (aet records here).
    #[test]
    fn this_kernel_has_every_helper() {
        let Ok(btf) = KernelBtf::load() else {
            println!("skipped: this machine has no kernel BTF");
            return;
        };
        let missing: Vec<&str> = missing(&btf).iter().map(|f| f.func).collect();
        assert!(missing.is_empty(), "missing: {missing:?}");
    }
}
