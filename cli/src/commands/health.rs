//! `ninetrix health` (hidden): the local API container's Docker healthcheck, answered by the
//! binary itself (the image has no shell), and a manual check of a runner (`docker exec <c>
//! /ninetrix health`; `ps` reads the runners' reports itself, pool/health.rs). Prints one line
//! and exits 0 when healthy, 1 when not.
//!
//! Without `--url` it judges the runner's status file (`AGENTFILE_HEALTH_FILE`, default
//! `/run/ninetrix/health`); with `--url` it GETs the URL (the API's `/readyz`) and wants a 2xx.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use ninetrix_runner::health;

/// `ninetrix health` arguments.
#[derive(Args, Debug, Clone)]
pub struct HealthArgs {
    /// Check this URL instead of the runner's report: healthy when it answers 2xx.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
}

/// How long `--url` waits for an answer (Docker's own timeout is longer).
const URL_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs the check.
pub(crate) fn run(args: &HealthArgs) -> anyhow::Result<ExitCode> {
    let (healthy, line) = match &args.url {
        Some(url) => super::block_on_value(check_url(url))?,
        None => {
            let path = health::path_from_env();
            match health::read(&path) {
                Ok(report) => health::judge(&report, chrono::Utc::now().timestamp_millis()),
                Err(e) => (false, e.to_string()),
            }
        }
    };
    println!("{line}");
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::EXIT_FAILURE)
    })
}

async fn check_url(url: &str) -> (bool, String) {
    let client = ninetrix_client::http_client();
    match client.get(url).timeout(URL_TIMEOUT).send().await {
        Ok(resp) if resp.status().is_success() => (
            true,
            format!("ok: {url} answered {}", resp.status().as_u16()),
        ),
        Ok(resp) => (
            false,
            format!("{url} answered HTTP {}", resp.status().as_u16()),
        ),
        Err(e) => {
            let mut why = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                why = cause.to_string();
                source = cause.source();
            }
            (false, format!("{url} is not reachable: {why}"))
        }
    }
}
