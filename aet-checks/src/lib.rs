//! The workspace's checks of itself, for tests only (every crate has it as a dev-dependency):
//!
//! - [`docgen`]: the generated parts of the docs, and the guide's code tour;
//! - [`layers`]: the floors of a crate's files;
//! - [`links`]: the README's and the docs' links, and the commands the README shows.
pub mod docgen;
pub mod layers;
pub mod links;
