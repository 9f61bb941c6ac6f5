//! `ninetrix runner` (hidden): the in-container runtime. Exit codes: 0 done, stopped or fenced;
//! 1 runtime failure (Docker restarts it); 2 configuration error.

use std::process::ExitCode;

/// Short lines for container logs: Docker adds the time; the level and the message suffice.
fn init_runner_logging() {
    init_logging("info");
}

/// [`init_runner_logging`] with `default` as the filter when `RUST_LOG` is unset.
pub(crate) fn init_logging(default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .without_time()
        .with_ansi(false)
        .with_writer(std::io::stderr);
    let _ = if std::env::var("NINETRIX_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Runs the runner until it stops.
pub(crate) fn run() -> anyhow::Result<ExitCode> {
    init_runner_logging();
    let config = match ninetrix_runner::config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(crate::EXIT_USAGE));
        }
    };
    let exit = super::until_signal(|shutdown| ninetrix_runner::run(config, shutdown))?;
    Ok(ExitCode::from(exit.code()))
}
