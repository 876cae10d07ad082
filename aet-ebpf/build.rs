//! Rebuild the eBPF object when the linker changes (a new bpf-linker can change the output).
fn main() {
    if let Ok(linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
