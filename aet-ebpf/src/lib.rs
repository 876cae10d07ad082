//! Empty on purpose: the programs live in the `aet` binary target (`src/main.rs`). This library
//! target exists so that `aet-user` can name this crate as a build dependency and be rebuilt when
//! it changes.
#![no_std]
