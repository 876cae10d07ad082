//! How a process reached the file of a finding: by naming its path, or through an fd that came
//! from somewhere (the ledger's `fd_origin` values, and the fds a command starts with).

use serde::{Deserialize, Serialize};

/// How a process reached a file (`reached` of a finding in `audit.json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reached {
    /// It named the file's path.
    Path,
    /// Through an fd the command started with.
    Inherited,
    /// Through an fd received over a socket.
    Received,
    /// Through an fd copied from another process.
    Copied,
    /// Through an fd a fanotify event carried.
    Fanotify,
    /// Through an fd no recorded open, arrival or start explains.
    Unknown,
}

impl Reached {
    /// The ways an fd arrives that the ledger's `fd_origin` column names, by the kernel side's
    /// codes (`aet_common::fd_origin`), whose names are the column's values.
    const ARRIVALS: [(u64, Reached); 3] = [
        (aet_common::fd_origin::RECEIVED, Reached::Received),
        (aet_common::fd_origin::COPIED, Reached::Copied),
        (aet_common::fd_origin::FANOTIFY, Reached::Fanotify),
    ];

    /// The name in reports (the serde name).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Path => "path",
            Self::Inherited => "inherited",
            Self::Received => "received",
            Self::Copied => "copied",
            Self::Fanotify => "fanotify",
            Self::Unknown => "unknown",
        }
    }

    /// An fd row's origin, from its `fd_origin` value.
    pub fn from_fd_origin(value: Option<&[u8]>) -> Self {
        Self::ARRIVALS
            .iter()
            .find(|(code, _)| aet_common::fd_origin::name(*code).map(str::as_bytes) == value)
            .map_or(Self::Unknown, |(_, r)| *r)
    }

    /// How the fd reached the process, in words.
    pub const fn text(self) -> &'static str {
        match self {
            Self::Path => "by its path",
            Self::Inherited => "inherited at start",
            Self::Received => "received over a socket",
            Self::Copied => "copied from another process",
            Self::Fanotify => "handed over by fanotify",
            Self::Unknown => "of unknown origin",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fd_origin_of_the_ledger_is_a_way_of_reaching_a_file() {
        for code in 0..16 {
            if let Some(name) = aet_common::fd_origin::name(code) {
                let r = Reached::from_fd_origin(Some(name.as_bytes()));
                assert_eq!(r.name(), name, "fd_origin {code}");
                let json = serde_json::to_string(&r).unwrap();
                assert_eq!(json, format!("\"{name}\""));
            }
        }
        assert_eq!(Reached::from_fd_origin(None), Reached::Unknown);
        assert_eq!(Reached::from_fd_origin(Some(b"nonsense")), Reached::Unknown);
    }
}
