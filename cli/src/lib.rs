//! The ninetrix command line.
//!
//! This crate owns argument parsing, the commands and their output. `main` maps outcomes to exit
//! codes: 0 success, 1 failure (the command ran and said why), 2 usage errors (clap's).

#[macro_use]
mod output;
mod backend;
pub mod cli;
pub mod commands;
mod deploy;
mod docker;
mod egress;
mod hardening;
mod home;
mod jobs;
mod k8s;
mod objects;
mod pool;
mod swarm;
mod ui;

use std::process::ExitCode;

pub use cli::Cli;

/// Exit code for a command that ran and failed.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code for bad usage (unknown flags, bad values).
pub const EXIT_USAGE: u8 = 2;

/// Runs the CLI with the process's arguments and returns its exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::parse_args() {
        Ok(cli) => cli,
        Err(err) => {
            // Prints help/version to stdout (exit 0) or the usage error to stderr (exit 2).
            let _ = err.print();
            return ExitCode::from(if err.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    match commands::run(cli) {
        Ok(code) => code,
        Err(err) => {
            let style = ui::style::Style::stderr();
            eprintln!("{} {err:#}", style.error("error:"));
            ExitCode::from(EXIT_FAILURE)
        }
    }
}
