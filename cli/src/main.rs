//! The `ninetrix` executable: everything lives in the library so tests can reach it.

fn main() -> std::process::ExitCode {
    ninetrix_cli::main()
}
