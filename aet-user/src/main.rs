//! The `aet` binary: a thin wrapper over `aet::cli::main`.
fn main() -> std::process::ExitCode {
    aet::cli::main()
}
