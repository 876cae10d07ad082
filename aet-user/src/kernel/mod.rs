//! What aet needs from the running kernel: BTF layouts, tracefs, cgroups, /proc.
pub mod bpffs;
pub mod btf;
pub mod cgroup;
pub mod mountinfo;
pub mod procfs;
pub mod tracefs;
