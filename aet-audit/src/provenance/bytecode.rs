//! Bytecode the interpreter compiled from a source it had just read (`__pycache__/X.*.pyc` after
//! `X.py`) carries the source's provenance, not its writer's: an agent that ran the tests leaves
//! bytecode of files it never changed, which is no finding.

use super::{How, Tracker};
use crate::scanner::Scanner;

impl Tracker {
    /// The source `name` is bytecode of, when `pid` is an interpreter that read it
    /// (`D/__pycache__/X.TAG.pyc`, or its temporary `...pyc.N`, of `D/X.py`).
    pub(super) fn compiled_from(&self, e: &mut Scanner<'_>, pid: u32, name: u32) -> Option<u32> {
        let read = self.sources_read.get(&pid)?;
        let interpreter = e
            .procs
            .get(&pid)
            .and_then(|p| p.exe.as_deref())
            .and_then(|x| x.rsplit('/').next())
            .is_some_and(|n| n.starts_with("python") || n.starts_with("pypy"));
        if !interpreter {
            return None;
        }
        let src = source_of_bytecode(&e.path_bytes[name as usize])?;
        let id = *e.cache.get(src.as_slice())?;
        read.contains(&id).then_some(id)
    }

    /// The source of bytecode producer `q` (compiled, or renamed into place by its compiler).
    pub(super) fn bytecode_source(&self, q: u32) -> Option<u32> {
        let pr = &self.producers[q as usize];
        match pr.how {
            How::Compiled { from } => Some(from),
            How::Renamed { .. } => {
                let o = pr.origin?;
                (self.producers[o as usize].pid == pr.pid)
                    .then(|| self.bytecode_source(o))
                    .flatten()
            }
            _ => None,
        }
    }

    pub(super) fn untouched_bytecode(&self, q: u32) -> bool {
        let mut cur = Some(q);
        let mut guard = 0;
        while let Some(x) = cur {
            guard += 1;
            if guard > 64 {
                return false;
            }
            let pr = &self.producers[x as usize];
            match pr.how {
                // Compiled from a source no phase produced: the source's own bytes.
                How::Compiled { .. } => return pr.origin.is_none(),
                // The interpreter's own rename of its temporary bytecode into place.
                How::Renamed { .. } => {
                    let from = pr.origin.map(|o| &self.producers[o as usize]);
                    if from
                        .is_some_and(|o| o.pid == pr.pid && matches!(o.how, How::Compiled { .. }))
                    {
                        cur = pr.origin;
                    } else {
                        return false;
                    }
                }
                _ => return false,
            }
        }
        false
    }
}

/// The source bytecode is compiled from: `D/X.py` for `D/__pycache__/X.TAG.pyc` (or a
/// temporary `X.TAG.pyc.N`).
pub fn source_of_bytecode(pyc: &[u8]) -> Option<Vec<u8>> {
    let slash = pyc.iter().rposition(|&b| b == b'/')?;
    let (dir, file) = (&pyc[..slash], &pyc[slash + 1..]);
    let d = dir.strip_suffix(b"/__pycache__")?;
    let stem = file
        .split(|&b| b == b'.')
        .next()
        .filter(|s| !s.is_empty())?;
    let temporary = file.windows(5).any(|w| w == b".pyc.")
        && file
            .rsplit(|&b| b == b'.')
            .next()
            .is_some_and(|n| !n.is_empty() && n.iter().all(u8::is_ascii_digit));
    if !(file.ends_with(b".pyc") || temporary) {
        return None;
    }
    let mut src = d.to_vec();
    src.push(b'/');
    src.extend_from_slice(stem);
    src.extend_from_slice(b".py");
    Some(src)
}
