//! `ninetrix invoke`: a message into an agent's inbox, and (by default) its reply.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cli::pool_name;

/// Arguments of `ninetrix invoke`.
#[derive(Debug, Args)]
pub struct InvokeArgs {
    /// The agentfile (for the pool name).
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// The agent.
    #[arg(long, value_name = "AGENT")]
    pub agent: String,
    /// The replica.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub replica: u32,
    /// The message.
    #[arg(short, long, value_name = "MSG")]
    pub message: String,
    /// A dedupe key: sending again with the same key adds no second message.
    #[arg(long, value_name = "KEY")]
    pub id: Option<String>,
    /// Return once the message is queued (default: wait for the reply).
    #[arg(long, conflicts_with = "wait")]
    pub no_wait: bool,
    /// Wait for the reply (the default).
    #[arg(long)]
    pub wait: bool,
    /// Seconds to wait for the reply (then exit 124; the message stays queued).
    #[arg(long, default_value_t = 300, value_name = "S")]
    pub timeout: u64,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `ninetrix invoke` (the work is in `diag`, which the typed API client replaces).
pub(crate) async fn run(args: &InvokeArgs) -> anyhow::Result<ExitCode> {
    super::diag::invoke(args).await
}
