//! The transcripts a run directory holds, wherever in it they are.
//!
//! A harness keeps an agent's transcripts where it likes: in `RUN/transcripts/`, directly in the
//! run directory, in a folder named after the agent or the round, or where the agent wrote them
//! itself (Claude Code under its home's `.claude/projects/`, which aet's default home puts in
//! the run directory). The run's own `transcripts/` folder wins when there is one; otherwise
//! every file of the run directory that a format recognises by its content is read, and the
//! rest (aet's own files, anything else) is left alone.

use std::path::{Path, PathBuf};

use super::{Read, files, read, read_files};

/// aet's own files in a run directory: never a transcript, however they look.
const AET_FILES: [&str; 4] = [
    aet_ledger::run_dir::AUDIT,
    aet_ledger::run_dir::MANIFEST,
    aet_ledger::run_dir::CONTROL,
    "shipped.json",
];

/// The transcripts of run directory `run`, and where they were found (the `transcripts/`
/// folder, or the run directory): `None` when it holds none. An error only for a
/// `transcripts/` folder that cannot be read, or that holds no transcript.
pub fn in_run(run: &Path) -> Result<Option<(PathBuf, Read)>, String> {
    if !run.is_dir() {
        return Ok(None);
    }
    let folder = run.join("transcripts");
    if folder.is_dir() {
        return read(&folder, None).map(|r| Some((folder, r)));
    }
    let candidates: Vec<PathBuf> = files(run)?
        .into_iter()
        .filter(|f| {
            f.parent() != Some(run)
                || !f
                    .file_name()
                    .is_some_and(|n| AET_FILES.iter().any(|a| n == *a))
        })
        .collect();
    match read_files(run, candidates, None) {
        // The other files of a run directory were never said to be transcripts: not listed as
        // left out.
        Ok(mut r) if !r.files.is_empty() => {
            r.unrecognized.clear();
            Ok(Some((run.to_owned(), r)))
        }
        // Nothing recognised: the run holds no transcript (not an error here).
        Ok(_) | Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLAUDE: &str = r#"{"type":"assistant","cwd":"/ws","sessionId":"s","message":{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"/ws/answer.txt"}}]}}"#;

    #[test]
    fn transcripts_are_found_wherever_the_run_directory_holds_them() {
        let d = tempfile::tempdir().unwrap();
        let run = d.path();
        // aet's own report, which is JSON, is never read as a transcript.
        std::fs::write(run.join("audit.json"), r#"{"format":"aet.audit"}"#).unwrap();
        std::fs::write(run.join("notes.json"), r#"{"not":"a transcript"}"#).unwrap();
        assert!(in_run(run).unwrap().is_none(), "nothing to find yet");

        std::fs::create_dir_all(run.join("agent_01/round-2")).unwrap();
        std::fs::write(run.join("agent_01/round-2/session.jsonl"), CLAUDE).unwrap();
        std::fs::write(run.join("top.jsonl"), CLAUDE).unwrap();
        let (source, r) = in_run(run).unwrap().expect("found");
        assert_eq!(source, run);
        let found: Vec<_> = r.files.iter().map(|(f, _)| f.clone()).collect();
        assert_eq!(
            found,
            vec![
                run.join("agent_01/round-2/session.jsonl"),
                run.join("top.jsonl")
            ]
        );
        assert_eq!(r.calls.len(), 2);
        assert!(r.calls.iter().all(|c| c.paths == ["/ws/answer.txt"]));
        assert!(
            r.unrecognized.is_empty(),
            "the run's other files are not left-out transcripts"
        );

        // What the agent can leave in its home is not followed: a FIFO would block the audit, a
        // symlink would read a file of the machine.
        let fifo = run.join("agent-home/trap.jsonl");
        std::fs::create_dir_all(fifo.parent().unwrap()).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        std::os::unix::fs::symlink(run.join("top.jsonl"), run.join("agent-home/link.jsonl"))
            .unwrap();
        let (_, r) = in_run(run).unwrap().unwrap();
        assert_eq!(r.files.len(), 2, "{:?}", r.files);

        // A `transcripts/` folder is the run's own word on where they are.
        std::fs::create_dir(run.join("transcripts")).unwrap();
        std::fs::write(run.join("transcripts/only.jsonl"), CLAUDE).unwrap();
        let (source, r) = in_run(run).unwrap().unwrap();
        assert_eq!(source, run.join("transcripts"));
        assert_eq!(r.files.len(), 1);
    }
}
