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

/// Runs the runner until it stops. Without `AGENTFILE_THREAD_ID` but with `AGENTFILE_REPLICA`
/// (a Swarm task knows only its slot) or `AGENTFILE_POD_NAME` (a StatefulSet pod, its ordinal),
/// the thread and its runner token are asked of the API first ([`ninetrix_runner::replica`]).
pub(crate) fn run() -> anyhow::Result<ExitCode> {
    init_runner_logging();
    let code = super::until_signal(|shutdown| async move {
        let secrets = std::path::Path::new("/run/secrets");
        let mut vars: std::collections::HashMap<String, String> = std::env::vars().collect();
        match ninetrix_runner::replica::lookup(&vars, secrets) {
            Err(e) => {
                eprintln!("error: {e}");
                return crate::EXIT_USAGE;
            }
            Ok(None) => {}
            Ok(Some(lookup)) => {
                let patience = match ninetrix_runner::config::api_patience(&vars) {
                    Ok(p) => p,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return crate::EXIT_USAGE;
                    }
                };
                let http = ninetrix_client::http_client();
                match ninetrix_runner::replica::resolve(&lookup, &http, patience, &shutdown).await {
                    Ok(thread) => {
                        tracing::info!(thread_id = %thread.thread_id, replica = thread.replica, created = thread.created, "serving replica {}'s thread", thread.replica);
                        vars.insert("AGENTFILE_THREAD_ID".into(), thread.thread_id.to_string());
                        vars.insert("AGENTFILE_RUNNER_TOKEN".into(), thread.token);
                        vars.insert("AGENTFILE_REPLICA".into(), thread.replica.to_string());
                    }
                    Err(ninetrix_runner::replica::ReplicaError::Stopped) => return 0,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return crate::EXIT_FAILURE;
                    }
                }
            }
        }
        let mut config = match ninetrix_runner::config::from_vars(&vars, secrets) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return crate::EXIT_USAGE;
            }
        };
        // OpenTelemetry (issue 18): the standard OTEL_* variables (headers also from the secret
        // file); no endpoint, nothing is built. A bad variable is a configuration error naming
        // it.
        let otel = match otel_settings(&config) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("error: {e}");
                return crate::EXIT_USAGE;
            }
        };
        let exporter = otel.map(ninetrix_runner::telemetry::Otlp::start);
        config.telemetry = exporter.clone();
        let exit = ninetrix_runner::run(config, shutdown).await;
        if let Some(exporter) = exporter {
            // What is queued goes out now, within a bound: an unreachable collector never holds
            // the exit up for long.
            exporter.flush(std::time::Duration::from_secs(2)).await;
            let dropped = exporter.dropped();
            if dropped > 0 {
                tracing::warn!("{dropped} OpenTelemetry span(s) were dropped");
            }
        }
        exit.code()
    })?;
    Ok(ExitCode::from(code))
}

/// The span exporter the OTEL_* variables ask for (`None`: no endpoint), with the runner's
/// resource: `service.name` (`OTEL_SERVICE_NAME`, else the agent's name), `ninetrix.agent`,
/// `ninetrix.pool`, `ninetrix.replica`.
fn otel_settings(
    config: &ninetrix_runner::Config,
) -> Result<Option<ninetrix_runner::telemetry::Otlp>, ninetrix_telemetry::TelemetryError> {
    use ninetrix_telemetry::KeyValue;
    let agent = &config.spec.name;
    let Some(settings) = ninetrix_telemetry::Settings::resolve(
        |name| std::env::var(name).ok(),
        Some(std::path::Path::new(ninetrix_telemetry::SECRETS_DIR)),
        agent,
    )?
    else {
        return Ok(None);
    };
    tracing::info!(endpoint = %settings.endpoint, "exporting OpenTelemetry spans");
    let mut resource = vec![KeyValue::new("ninetrix.agent", agent.clone())];
    if let Some(pool) = &config.pool {
        resource.push(KeyValue::new("ninetrix.pool", pool.clone()));
    }
    if let Some(replica) = config.replica {
        resource.push(KeyValue::new("ninetrix.replica", i64::from(replica)));
    }
    ninetrix_runner::telemetry::Otlp::from_settings(&settings, resource).map(Some)
}
