//! What Docker has for a pool's agents (not its MCP sidecars, job broker or jobs), read into the plain [`Observed`]
//! values `plan` compares: labels parsed, and for containers that are not running, their restart count and exit code.

use bollard::Docker;
use bollard::models::{ContainerSummary, ContainerSummaryStateEnum};

use crate::docker::label;
use crate::pool::engine::pool_containers;
use crate::pool::plan::Observed;
use crate::pool::spec::{Config, Liveness, Slot};

/// The slot a container's labels name.
pub(crate) fn slot(c: &ContainerSummary) -> Option<Slot> {
    if label(c, crate::objects::RUN) == Some("true")
        || label(c, crate::objects::REPLICA) == Some("run")
    {
        return Some(Slot::Run);
    }
    label(c, crate::objects::REPLICA)
        .and_then(|r| r.parse().ok())
        .map(Slot::Replica)
}

/// Whether `plan` sees a listed container of the pool: its agents' replicas and runs, not the
/// containers reconciled on their own — MCP sidecars and egress proxies (pool/sidecar.rs), the
/// job broker (pool/broker.rs) — nor background jobs' containers, which carry the pool and agent
/// labels but are the broker's: never a replica, never restarted by `up`, never an orphan.
pub(crate) fn planned(c: &ContainerSummary) -> bool {
    !crate::pool::sidecar::is_sidecar(c)
        && !crate::pool::jobs::is_job(c)
        && !crate::pool::jobs::is_broker(c)
}

/// The pool's containers, as `plan` sees them.
pub(crate) async fn observe(docker: &Docker, pool: &str) -> anyhow::Result<Vec<Observed>> {
    let mut out = Vec::new();
    for c in pool_containers(docker, Some(pool)).await? {
        if !planned(&c) {
            continue;
        }
        let id = c.id.clone().unwrap_or_default();
        // A paused container counts as running: `up` leaves it as it is.
        let running = matches!(
            c.state,
            Some(ContainerSummaryStateEnum::RUNNING | ContainerSummaryStateEnum::PAUSED)
        );
        let restarting = c.state == Some(ContainerSummaryStateEnum::RESTARTING);
        // Only stopped containers need inspecting: their restarts decide "gave up".
        let liveness = if running || restarting {
            Liveness {
                running,
                restarting,
                ..Liveness::default()
            }
        } else {
            match docker.inspect_container(&id, None).await {
                Ok(info) => Liveness::of(&info),
                Err(e) if crate::docker::is_not_found(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        out.push(Observed {
            agent: label(&c, crate::objects::AGENT)
                .unwrap_or_default()
                .to_string(),
            slot: slot(&c),
            thread: label(&c, crate::objects::THREAD).and_then(|t| t.parse().ok()),
            config: label(&c, crate::objects::PARTS).and_then(Config::from_label),
            durable: label(&c, crate::objects::DURABLE) == Some("true"),
            never_started: c.state == Some(ContainerSummaryStateEnum::CREATED),
            liveness,
            id,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::{AGENT, JOB_BROKER_ROLE, JOB_ROLE, POOL, REPLICA, ROLE};

    fn listed(labels: &[(&str, &str)]) -> ContainerSummary {
        ContainerSummary {
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ContainerSummary::default()
        }
    }

    #[test]
    fn a_job_container_or_the_broker_is_never_a_replica_in_the_plan() {
        let replica = listed(&[(POOL, "p"), (AGENT, "a"), (REPLICA, "1")]);
        assert!(planned(&replica));
        assert_eq!(slot(&replica), Some(Slot::Replica(1)));
        let job = listed(&[
            (POOL, "p"),
            (AGENT, "a"),
            (ROLE, JOB_ROLE),
            (ninetrix_proto::jobs::labels::REPLICA, "1"),
        ]);
        assert!(!planned(&job), "a job is the broker's, not up's");
        assert_eq!(slot(&job), None, "its replica label is the job's own");
        let broker = listed(&[(POOL, "p"), (ROLE, JOB_BROKER_ROLE)]);
        assert!(!planned(&broker), "reconciled on its own, never an orphan");
    }
}
