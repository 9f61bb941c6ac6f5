//! The command-line grammar (clap derive). Flags follow Docker Compose where the concept is the
//! same: `-f/--file` names the agentfile, `-p/--pool` the pool.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Run AI agents as Docker containers that survive crashes.
#[derive(Debug, Parser)]
#[command(name = "ninetrix", version, about, propagate_version = true)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check an agentfile and summarise its pool, or report every error with its location.
    Validate(ValidateArgs),
    /// Write a commented starter agentfile.
    Init(InitArgs),
}

/// Arguments of `ninetrix validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The agentfile.
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool name, overriding the agentfile's `name:`.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Print the result as JSON on stdout (the resolved agents, or the errors).
    #[arg(long)]
    pub json: bool,
}

/// The providers `init` can write a starter for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InitProvider {
    /// An offline, scripted model: runs with no API key.
    Scripted,
    /// Anthropic's Claude (needs ANTHROPIC_API_KEY).
    Anthropic,
    /// OpenAI (needs OPENAI_API_KEY).
    Openai,
    /// A local Ollama server on the host, through the OpenAI protocol.
    Ollama,
}

/// Arguments of `ninetrix init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Where to write the agentfile.
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool name (default: derived from the directory name).
    #[arg(short, long, value_name = "NAME", value_parser = pool_name)]
    pub name: Option<String>,
    /// The starter agent's provider.
    #[arg(long, value_enum, default_value_t = InitProvider::Scripted)]
    pub provider: InitProvider,
    /// Overwrite the file if it exists.
    #[arg(long)]
    pub force: bool,
}

fn pool_name(value: &str) -> Result<String, String> {
    if ninetrix_proto::agentfile::names::is_valid_name(value) {
        Ok(value.to_string())
    } else {
        Err(format!(
            "pool names use lower-case letters, digits, `-` and `_`, start with a letter or digit, \
             and have at most {} characters",
            ninetrix_proto::agentfile::names::MAX_NAME_LEN
        ))
    }
}
