//! The decoys in the view: each bound read-only at its path after everything else.

use std::{
    fs,
    path::{Path, PathBuf},
};

use super::{BuildError, Check, Expect, Mount, Op, View, covering, ids, norm};

impl View {
    /// The decoys, each bound read-only at its path after everything else. Where a read-only
    /// bind covers the path, something must already be there to bind over (nothing can be
    /// created in a read-only bind); a writable bind is refused by the spec's checks.
    pub(super) fn decoys(
        &mut self,
        decoys: &[(String, PathBuf, PathBuf)],
    ) -> Result<(), BuildError> {
        for (entry, dst, src) in decoys {
            let dst = norm(dst);
            let fail = |message: String| BuildError::Decoy {
                entry: entry.clone(),
                message,
            };
            if let Some(l) = self
                .grants
                .iter()
                .find(|m| matches!(m.op, Op::Symlink(_)) && dst.starts_with(&m.dst))
            {
                return Err(fail(format!(
                    "lies under {}, a symbolic link in the view: name the path it points to",
                    l.dst.display()
                )));
            }
            match covering(&self.grants, &dst).map(|m| &m.op) {
                Some(Op::RoBind(from)) | Some(Op::Bind(from)) => {
                    let rel = dst
                        .strip_prefix(
                            covering(&self.grants, &dst).map_or(Path::new("/"), |m| &m.dst),
                        )
                        .unwrap_or(Path::new(""));
                    let host = from.join(rel);
                    let want_dir = src.is_dir();
                    match fs::metadata(&host) {
                        Ok(m) if m.is_dir() == want_dir => {}
                        _ => {
                            return Err(fail(format!(
                                "lies in the bind of {}, where no {} exists at {} to plant it                                  over (nothing can be created in a read-only bind): put it at a                                  path no bind covers, such as /grader/...",
                                from.display(),
                                if want_dir { "directory" } else { "file" },
                                host.display()
                            )));
                        }
                    }
                }
                _ => {}
            }
            let (dev, ino) = ids(src, entry)?;
            self.decoys.push(Mount {
                dst: dst.clone(),
                op: Op::RoBind(src.clone()),
                rank: 6,
            });
            self.checks.push(Check {
                entry: entry.clone(),
                path: dst.into(),
                expect: Expect::ReadOnly { dev, ino },
            });
        }
        Ok(())
    }
}
