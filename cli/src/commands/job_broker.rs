//! `ninetrix job-broker --listen ADDR` (hidden): the pool's job broker (issue 40), the one
//! process that starts background jobs in sibling containers for the pool's runners, which
//! never hold the Docker socket; see [`crate::jobs`]. It reads `AGENTFILE_JOBS_CONFIG` and
//! `AGENTFILE_API_URL`, serves until SIGINT/SIGTERM, and its reaper stops jobs past their
//! deadline.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

/// `ninetrix job-broker` arguments.
#[derive(Args, Debug, Clone)]
pub struct JobBrokerArgs {
    /// Where to serve the broker's routes.
    #[arg(long, value_name = "ADDR", default_value_t = SocketAddr::from(([0, 0, 0, 0], crate::jobs::config::PORT)))]
    pub listen: SocketAddr,
}

/// Serves until SIGINT/SIGTERM.
pub(crate) fn run(args: &JobBrokerArgs) -> anyhow::Result<ExitCode> {
    super::runner::init_logging("info");
    let settings = crate::jobs::settings::read(|name| std::env::var(name).ok())?;
    let listen = args.listen;
    super::until_signal(|shutdown| async move {
        let docker = crate::docker::connect().await?;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        let agents: Vec<&str> = settings.config.agents.keys().map(String::as_str).collect();
        tracing::info!(
            listen = %listen,
            pool = %settings.config.pool,
            agents = %agents.join(" "),
            api = %settings.api_url,
            "job broker serving"
        );
        crate::jobs::serve(listener, settings, docker, shutdown)
            .await
            .context("the job broker stopped serving")?;
        Ok(ExitCode::SUCCESS)
    })?
}
