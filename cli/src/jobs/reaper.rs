//! The reaper: every [`PERIOD`] the broker stops the pool's running jobs whose deadline
//! (`ninetrix_proto::jobs::labels::DEADLINE`) has passed — SIGTERM, then SIGKILL after
//! `engine::STOP_SECS` — so a job outlives neither its timeout nor a runner that forgot it.
//! Which ones is a pure decision ([`overdue`]).

use std::sync::Arc;
use std::time::Duration;

use bollard::models::ContainerSummary;
use ninetrix_proto::jobs::labels;

use super::engine;
use super::state::Broker;
use crate::objects;

/// How often the reaper looks.
pub(crate) const PERIOD: Duration = Duration::from_secs(5);

/// The names of the listed containers whose deadline is at or before `now` (Unix seconds). A
/// container without a readable deadline is left alone.
pub(crate) fn overdue(running: &[ContainerSummary], now: i64) -> Vec<String> {
    running
        .iter()
        .filter(|c| {
            crate::docker::label(c, labels::DEADLINE)
                .and_then(|d| d.parse::<i64>().ok())
                .is_some_and(|deadline| deadline <= now)
        })
        .map(crate::docker::name)
        .collect()
}

/// Runs until the broker stops.
pub(crate) async fn run(broker: Arc<Broker>) {
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = broker.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let pool = &broker.config.pool;
        let running = match engine::list(&broker.docker, pool, &[], &["running"]).await {
            Ok(running) => running,
            Err(e) => {
                tracing::warn!(error = %e, "reaper: cannot list the running jobs");
                continue;
            }
        };
        let due = overdue(&running, chrono::Utc::now().timestamp());
        let stops = due.iter().map(|name| {
            let broker = &broker;
            let c = running.iter().find(|c| &crate::docker::name(c) == name);
            let job = c.and_then(|c| crate::docker::label(c, labels::ID)).unwrap_or_default().to_string();
            let agent = c.and_then(|c| crate::docker::label(c, objects::AGENT)).unwrap_or_default().to_string();
            let thread = c.and_then(|c| crate::docker::label(c, labels::THREAD)).unwrap_or_default().to_string();
            async move {
                tracing::info!(event = "job_timed_out", %job, %agent, %thread, container = %name, "job timed out: stopping it");
                if let Err(e) = engine::stop(&broker.docker, name).await {
                    tracing::warn!(%job, container = %name, error = %e, "reaper: cannot stop a timed-out job");
                }
            }
        });
        futures_util::future::join_all(stops).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(name: &str, deadline: Option<&str>) -> ContainerSummary {
        ContainerSummary {
            names: Some(vec![format!("/{name}")]),
            labels: Some(
                deadline
                    .map(|d| (labels::DEADLINE.to_string(), d.to_string()))
                    .into_iter()
                    .collect(),
            ),
            ..ContainerSummary::default()
        }
    }

    #[test]
    fn only_jobs_past_their_deadline_are_stopped() {
        let list = [
            running("past", Some("100")),
            running("now", Some("200")),
            running("later", Some("201")),
            running("unlabelled", None),
            running("garbled", Some("soon")),
        ];
        assert_eq!(overdue(&list, 200), ["past", "now"]);
        assert!(overdue(&list, 50).is_empty());
    }
}
