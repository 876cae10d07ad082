//! A path as the ledger's metadata and the stage's plan carry it in JSON: whatever its bytes.

use std::{
    ffi::OsString,
    os::unix::ffi::{OsStrExt as _, OsStringExt as _},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A path that survives JSON whatever its bytes: a string when it is UTF-8, else
/// `{"hex": "..."}`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PPath(pub PathBuf);

impl PPath {
    pub fn as_path(&self) -> &Path {
        &self.0
    }
}

impl From<&Path> for PPath {
    fn from(p: &Path) -> Self {
        Self(p.to_owned())
    }
}

impl From<PathBuf> for PPath {
    fn from(p: PathBuf) -> Self {
        Self(p)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum PPathRepr {
    Text(String),
    Hex { hex: String },
}

impl Serialize for PPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.to_str() {
            Some(t) => PPathRepr::Text(t.to_owned()),
            None => PPathRepr::Hex {
                hex: crate::util::hex(self.0.as_os_str().as_bytes()),
            },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for PPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match PPathRepr::deserialize(d)? {
            PPathRepr::Text(t) => Ok(Self(t.into())),
            PPathRepr::Hex { hex } => {
                let bytes = crate::util::unhex(&hex)
                    .ok_or_else(|| serde::de::Error::custom("a hex path that is not hex"))?;
                Ok(Self(OsString::from_vec(bytes).into()))
            }
        }
    }
}
