//! `ninetrix runner` (hidden): the in-container runtime. Exit codes: 0 done, stopped or fenced;
//! 1 runtime failure (Docker restarts it); 2 configuration error.

use std::process::ExitCode;

use tokio_util::sync::CancellationToken;

use super::api::init_logging;

/// Runs the runner until it stops.
pub(crate) fn run() -> anyhow::Result<ExitCode> {
    init_logging();
    let config = match ninetrix_runner::config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(crate::EXIT_USAGE));
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let exit = runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        let on_signal = shutdown.clone();
        tokio::spawn(async move {
            ninetrix_api::shutdown_signal().await;
            tracing::info!("stop requested: finishing the current step");
            on_signal.cancel();
        });
        ninetrix_runner::run(config, shutdown).await
    });
    Ok(ExitCode::from(exit.code()))
}
