//! `ninetrix trace`: a thread's story, from its events.

use std::process::ExitCode;

use crate::cli::TraceArgs;

/// Runs `ninetrix trace` (the work is in `diag`, which the typed event model replaces).
pub(crate) async fn run(args: &TraceArgs) -> anyhow::Result<ExitCode> {
    super::diag::trace(args).await
}
