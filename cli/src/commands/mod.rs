//! One module per command. Each returns the process exit code, or an error for `main` to print.

mod api;
mod init;
mod runner;
mod validate;

use std::process::ExitCode;

use crate::cli::{Cli, Command};

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate(args) => validate::run(&args),
        Command::Init(args) => init::run(&args),
        Command::Api(args) => api::run(&args),
        Command::Runner => runner::run(),
    }
}
