//! `ninetrix invoke`: a message into an agent's inbox, and (by default) its reply.

use std::process::ExitCode;

use crate::cli::InvokeArgs;

/// Runs `ninetrix invoke` (the work is in `diag`, which the typed API client replaces).
pub(crate) async fn run(args: &InvokeArgs) -> anyhow::Result<ExitCode> {
    super::diag::invoke(args).await
}
