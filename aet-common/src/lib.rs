//! Types shared by aet's eBPF programs (`aet-ebpf`) and its userspace (`aet-user`).
//!
//! Everything here crosses the kernel/user boundary as raw bytes, so every type is `#[repr(C)]`,
//! `Copy`, has no implicit padding, and has its size pinned by a compile-time assertion: a layout
//! change is a compile error on both sides, never a silent misread. Numbers given to event kinds,
//! syscalls, flags and counters are never reused for something else.
//!
//! This crate must never depend on `std` (the eBPF side is `no_std`); the `user` feature adds the
//! `aya::Pod` impls that userspace needs.
#![no_std]

mod config;
mod counters;
mod events;
mod kernel;
pub mod maps;
mod run_slots;
mod syscalls;

pub use config::*;
pub use counters::*;
pub use events::*;
pub use kernel::*;
pub use run_slots::*;
pub use syscalls::*;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data: repr(C), Copy, no padding (sizes asserted above), any bit pattern
    // is valid.
    unsafe impl aya::Pod for super::Config {}
    unsafe impl aya::Pod for super::Offsets {}
    unsafe impl aya::Pod for super::Inflight {}
    unsafe impl aya::Pod for super::EventHeader {}
    unsafe impl aya::Pod for super::FileIo {}
    unsafe impl aya::Pod for super::RunLimit {}
    unsafe impl aya::Pod for super::ScopeIndex {}
}

#[cfg(test)]
mod floors {
    extern crate std;

    /// The floors of this crate's modules, from the bottom up: the records, the configuration,
    /// the counters, the kernel's constants, the run slots and the map names, then the syscall
    /// table over the event kinds. The root re-exports them all for both sides; inside the
    /// crate a module is named by its own path.
    const FLOORS: &[&[&str]] = &[
        &[
            "config",
            "counters",
            "events",
            "kernel",
            "maps",
            "run_slots",
        ],
        &["syscalls"],
    ];

    #[test]
    fn layers_point_one_way() {
        aet_checks::layers::assert_floors(env!("CARGO_MANIFEST_DIR"), FLOORS);
    }
}
