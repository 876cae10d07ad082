//! A program the kernel's verifier refused, said once and in a paragraph: the program, the
//! kernel release and build, the verifier's own last lines, and the file holding its full log.

use std::path::PathBuf;

/// The verifier refused a program.
#[derive(Debug)]
pub struct Refusal {
    pub program: &'static str,
    /// What the load syscall returned.
    pub error: String,
    /// `uname -r` and `uname -v`.
    pub release: String,
    pub build: String,
    /// The object variant that was refused.
    pub variant: &'static str,
    /// The verifier's last lines (the rejected instruction and why, or the count past the
    /// limit).
    pub last_lines: Vec<String>,
    /// The full log, when it could be written.
    pub log: Option<PathBuf>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "this kernel's verifier refused eBPF program {} ({}).",
            self.program, self.error
        )?;
        writeln!(
            f,
            "  kernel: {} {}; programs reading through {}",
            self.release, self.build, self.variant
        )?;
        writeln!(f, "  the verifier's last lines:")?;
        for l in &self.last_lines {
            writeln!(f, "    {l}")?;
        }
        match &self.log {
            Some(p) => write!(f, "  its full log: {}", p.display()),
            None => write!(f, "  its full log could not be written"),
        }
    }
}

/// The lines of a verifier log that say why it refused: the last lines before the statistics
/// (`verification time`, `stack depth`), and the `processed N insns` line.
pub fn last_lines(log: &str) -> Vec<String> {
    let lines: Vec<&str> = log
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    let stats = |l: &str| {
        l.starts_with("verification time")
            || l.starts_with("stack depth")
            || l.starts_with("processed ")
    };
    let processed = lines.iter().rev().find(|l| l.starts_with("processed "));
    let body: Vec<&str> = lines.iter().copied().filter(|l| !stats(l)).collect();
    let mut out: Vec<String> = body[body.len().saturating_sub(3)..]
        .iter()
        .map(|l| (*l).to_owned())
        .collect();
    if let Some(p) = processed {
        out.push((*p).to_owned());
    }
    out
}

/// Writes the full log where a user can read it: `aet-verifier-PROGRAM-PID[-N].log` in the
/// temporary directory. Always a new file (never through a link or over a file someone else put
/// there: the directory is world-writable and aet runs as root).
pub fn write_log(program: &str, log: &str) -> Option<PathBuf> {
    use std::io::Write as _;
    let pid = std::process::id();
    for n in 0..16 {
        let name = match n {
            0 => format!("aet-verifier-{program}-{pid}.log"),
            n => format!("aet-verifier-{program}-{pid}-{n}.log"),
        };
        let p = std::env::temp_dir().join(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
        {
            Ok(mut f) => return f.write_all(log.as_bytes()).ok().map(|()| p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(_) => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program past the limit: the count line is kept, the statistics are not.
    #[test]
    fn a_program_past_the_limit_shows_the_count() {
        let log = "0: R1=ctx() R10=fp0\n1: (79) r1 = *(u64 *)(r7 +8)\n\
                   2: (85) call bpf_loop#181\n\
                   BPF program is too large. Processed 1000001 insn\n\
                   verification time 4000000 usec\nstack depth 40\n\
                   processed 1000001 insns (limit 1000000) max_states_per_insn 4 total_states 1\n";
        let l = last_lines(log);
        assert_eq!(
            l,
            [
                "1: (79) r1 = *(u64 *)(r7 +8)",
                "2: (85) call bpf_loop#181",
                "BPF program is too large. Processed 1000001 insn",
                "processed 1000001 insns (limit 1000000) max_states_per_insn 4 total_states 1",
            ]
        );
    }

    /// A rejected instruction: it and the verifier's reason are the last lines.
    #[test]
    fn a_rejected_instruction_and_its_reason_are_shown() {
        let log = "66: (0f) r2 += r1\n67: (71) r1 = *(u8 *)(r2 +0)\n\
                   invalid access to map value, value_size=1864 off=3388 size=1\n\
                   R2 max value is outside of the allowed memory range\n\
                   verification time 9941 usec\nstack depth 40\n\
                   processed 61 insns (limit 1000000) max_states_per_insn 0\n";
        let r = Refusal {
            program: "sys_exit",
            error: "Permission denied (os error 13)".into(),
            release: "6.12.117+deb13-cloud-amd64".into(),
            build: "#1 SMP PREEMPT_DYNAMIC Debian 6.12.117-1".into(),
            variant: "BTF pointers",
            last_lines: last_lines(log),
            log: Some("/tmp/aet-verifier-sys_exit-1.log".into()),
        };
        let text = r.to_string();
        assert!(text.starts_with("this kernel's verifier refused eBPF program sys_exit"));
        assert!(text.contains("6.12.117+deb13-cloud-amd64 #1 SMP"));
        assert!(text.contains("    67: (71) r1 = *(u8 *)(r2 +0)\n"));
        assert!(text.contains("    R2 max value is outside of the allowed memory range\n"));
        assert!(text.contains("    processed 61 insns (limit 1000000)"));
        assert!(text.ends_with("its full log: /tmp/aet-verifier-sys_exit-1.log"));
        assert!(!text.contains("verification time"));
        assert!(text.lines().count() <= 10, "{text}");
    }
}
