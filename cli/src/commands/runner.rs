//! `ninetrix runner` (hidden): the in-container runtime. Exit codes: 0 done, stopped, fenced, or
//! its thread purged; 1 runtime failure (Docker restarts it); 2 configuration error. A runner
//! whose thread came from the API's replica mapping (Swarm, Kubernetes) and was purged asks the
//! mapping again and serves the replica's new thread; one given its thread stops, naming the
//! command that gives its replica a new one ([`purged_next`]).

use std::process::ExitCode;

use ninetrix_runner::launch::var;

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
        let base: std::collections::HashMap<String, String> = std::env::vars().collect();
        loop {
            let mut vars = base.clone();
            let looked_up = match ninetrix_runner::replica::lookup(&vars, secrets) {
                Err(e) => {
                    eprintln!("error: {e}");
                    return crate::EXIT_USAGE;
                }
                Ok(None) => false,
                Ok(Some(lookup)) => {
                    let patience = match ninetrix_runner::config::api_patience(&vars) {
                        Ok(p) => p,
                        Err(e) => {
                            eprintln!("error: {e}");
                            return crate::EXIT_USAGE;
                        }
                    };
                    let http = ninetrix_client::http_client();
                    match ninetrix_runner::replica::resolve(&lookup, &http, patience, &shutdown)
                        .await
                    {
                        Ok(thread) => {
                            tracing::info!(thread_id = %thread.thread_id, replica = thread.replica, created = thread.created, "serving replica {}'s thread", thread.replica);
                            vars.insert(var::THREAD_ID.into(), thread.thread_id.to_string());
                            vars.insert(var::RUNNER_TOKEN.into(), thread.token);
                            vars.insert(var::REPLICA.into(), thread.replica.to_string());
                        }
                        Err(ninetrix_runner::replica::ReplicaError::Stopped) => return 0,
                        Err(e) => {
                            eprintln!("error: {e}");
                            return crate::EXIT_FAILURE;
                        }
                    }
                    true
                }
            };
            let exit = serve(&vars, secrets, &shutdown).await;
            if let ninetrix_runner::Exit::Config(e) = &exit {
                eprintln!("error: {e}");
            }
            match purged_next(&exit, looked_up, &vars, shutdown.is_cancelled()) {
                AfterPurge::TakeNew(line) => tracing::warn!("{line}"),
                AfterPurge::Stop(line) => {
                    eprintln!("error: {line}");
                    return exit.code();
                }
                AfterPurge::NotPurged => return exit.code(),
            }
        }
    })?;
    Ok(ExitCode::from(code))
}

/// Serves the thread `vars` name until the runner stops (or its configuration is refused: exit
/// code 2, as [`ninetrix_runner::Exit::code`] never is).
async fn serve(
    vars: &std::collections::HashMap<String, String>,
    secrets: &std::path::Path,
    shutdown: &tokio_util::sync::CancellationToken,
) -> ninetrix_runner::Exit {
    let mut config = match ninetrix_runner::config::from_vars(vars, secrets) {
        Ok(c) => c,
        Err(e) => return ninetrix_runner::Exit::Config(e.to_string()),
    };
    // OpenTelemetry (issue 18): the standard OTEL_* variables (headers also from the secret
    // file); no endpoint, nothing is built. A bad variable is a configuration error naming it.
    let otel = match otel_settings(&config) {
        Ok(o) => o,
        Err(e) => return ninetrix_runner::Exit::Config(e.to_string()),
    };
    let exporter = otel.map(ninetrix_runner::telemetry::Otlp::start);
    config.telemetry = exporter.clone();
    let exit = ninetrix_runner::run(config, shutdown.clone()).await;
    if let Some(exporter) = exporter {
        // What is queued goes out now, within a bound: an unreachable collector never holds
        // the exit up for long.
        exporter.flush(std::time::Duration::from_secs(2)).await;
        let dropped = exporter.dropped();
        if dropped > 0 {
            tracing::warn!("{dropped} OpenTelemetry span(s) were dropped");
        }
    }
    exit
}

/// What a runner does after its run ended.
#[derive(Debug, PartialEq, Eq)]
enum AfterPurge {
    /// Its thread was not purged: the exit stands.
    NotPurged,
    /// Its thread came from the API's replica mapping, which replaces a purged thread: ask
    /// again and serve the new one (the line says so).
    TakeNew(String),
    /// Its thread was given (`AGENTFILE_THREAD_ID`, a container `ninetrix up` made): stop,
    /// saying what gives the replica a new thread.
    Stop(String),
}

/// The decision after a run: one rule for every backend — a purged replica thread is replaced
/// by a new one. Where the runner cannot do that itself, the line names the command that does.
fn purged_next(
    exit: &ninetrix_runner::Exit,
    looked_up: bool,
    vars: &std::collections::HashMap<String, String>,
    stopping: bool,
) -> AfterPurge {
    let ninetrix_runner::Exit::Purged(what) = exit else {
        return AfterPurge::NotPurged;
    };
    let replica = vars.get(var::REPLICA);
    if looked_up && !stopping {
        return AfterPurge::TakeNew(format!(
            "{what}: asking the checkpoint API for replica {}'s new thread",
            replica.map_or("?", String::as_str)
        ));
    }
    let (Some(pool), Some(agent), Some(replica)) =
        (vars.get(var::POOL), vars.get(var::AGENT), replica)
    else {
        return AfterPurge::Stop(format!(
            "{what}: its conversation is deleted and its ID is never used again; start the \
             runner with a new AGENTFILE_THREAD_ID"
        ));
    };
    AfterPurge::Stop(format!(
        "{what}: its conversation is deleted and its ID is never used again, so this container \
         stops (exit 0: no restart); `ninetrix up -p {pool}` (or `ninetrix reset -p {pool} \
         --agent {agent} --replica {replica}`) starts {agent}-{replica} on a new thread"
    ))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_purged_replica_thread_is_replaced_where_the_mapping_gave_it_and_named_where_not() {
        let purged = ninetrix_runner::Exit::Purged("thread 0190 was purged".into());
        let replica = vars(&[
            ("AGENTFILE_POOL", "shop"),
            ("AGENTFILE_AGENT", "writer"),
            ("AGENTFILE_REPLICA", "2"),
        ]);
        assert_eq!(
            purged_next(&purged, true, &replica, false),
            AfterPurge::TakeNew(
                "thread 0190 was purged: asking the checkpoint API for replica 2's new thread"
                    .into()
            )
        );
        let AfterPurge::Stop(line) = purged_next(&purged, false, &replica, false) else {
            panic!("a container given its thread stops");
        };
        assert!(
            line.contains("exit 0: no restart")
                && line.contains("`ninetrix up -p shop`")
                && line.contains("`ninetrix reset -p shop --agent writer --replica 2`")
                && line.contains("writer-2 on a new thread"),
            "{line}"
        );
        assert!(
            matches!(
                purged_next(&purged, true, &replica, true),
                AfterPurge::Stop(_)
            ),
            "a runner told to stop does not take a new thread"
        );
        let AfterPurge::Stop(plain) = purged_next(&purged, false, &vars(&[]), false) else {
            panic!("a plain process stops");
        };
        assert!(plain.contains("a new AGENTFILE_THREAD_ID"), "{plain}");
        for exit in [
            ninetrix_runner::Exit::Ok,
            ninetrix_runner::Exit::Failure("x".into()),
            ninetrix_runner::Exit::Config("x".into()),
        ] {
            assert_eq!(
                purged_next(&exit, true, &replica, false),
                AfterPurge::NotPurged
            );
        }
    }
}
