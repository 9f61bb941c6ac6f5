//! `ninetrix trace`: a thread's story, from its events.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cli::pool_name;

/// Arguments of `ninetrix trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The agentfile (for the pool name); `-f` follows here, so name it with --file or
    /// `ninetrix -f FILE trace`.
    #[arg(long = "file", default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// The thread.
    #[arg(long, value_name = "ID", conflicts_with = "agent")]
    pub thread_id: Option<String>,
    /// The agent (with --replica).
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// The replica.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub replica: u32,
    /// Keep printing new events.
    #[arg(short, long)]
    pub follow: bool,
    /// A stray argument, kept only to explain `trace -f FILE`.
    #[arg(hide = true, value_name = "STRAY")]
    pub stray: Option<String>,
    /// The events as JSON lines.
    #[arg(long)]
    pub json: bool,
}

/// Runs `ninetrix trace` (the work is in `diag`, which the typed event model replaces).
pub(crate) async fn run(args: &TraceArgs) -> anyhow::Result<ExitCode> {
    super::diag::trace(args).await
}
