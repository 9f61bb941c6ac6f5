//! What `ninetrix ps` shows of a pool on Swarm: one row per replica slot — its newest task, the
//! node it runs on, how often Swarm replaced it after a failure, its health and its thread.

use bollard::models::TaskState;

use crate::pool::condition::Condition;
use crate::pool::status::{Row, StatusSettings};

/// The tasks of the pools on Swarm (`-p`'s, or every pool of this home that `up --swarm` made),
/// one row per replica slot: its newest task, the node it runs on, how often Swarm replaced it
/// after a failure, its health (a task on this node), and its thread.
pub(crate) async fn rows(
    docker: &bollard::Docker,
    home: &std::path::Path,
    settings: &StatusSettings,
) -> anyhow::Result<Vec<Row>> {
    let pools = match &settings.pool {
        Some(p) => vec![p.clone()],
        None => crate::pool::state::pools(home),
    };
    let mut rows = Vec::new();
    for pool in pools {
        let state = crate::pool::state::read(home, &pool)?;
        // A pool on one host is the host's to list.
        if state.swarm.is_none() {
            continue;
        }
        let slots = match crate::swarm::observe::slots(docker, &pool, None).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("warning: cannot read the tasks of pool {pool} on Swarm: {e:#}");
                continue;
            }
        };
        for view in slots {
            let facts = view.facts();
            let cond = Condition::of(&facts);
            let finished_job = !view.durable && view.state == Some(TaskState::COMPLETE);
            if finished_job && !settings.all {
                continue;
            }
            // Swarm's word for the state, as `docker service ps` prints it.
            let word = view.state.map_or_else(String::new, |s| s.to_string());
            let status = match (&cond, &word[..], &view.error) {
                (_, "running", _) => cond.status("Up"),
                (Condition::GaveUp { .. }, state, _) => cond.status(state),
                (_, state, Some(err)) => format!("{state}: {err}"),
                (_, state, None) => state.to_string(),
            };
            rows.push(Row {
                pool: Some(pool.clone()),
                agent: Some(view.agent.clone()),
                replica: Some(view.slot),
                container: view.task_name(),
                thread_id: state
                    .agents
                    .get(&view.agent)
                    .and_then(|r| r.get(&view.slot))
                    .map(|r| r.thread_id.to_string()),
                state: Some(word.clone()),
                status,
                health: cond.health(),
                reason: cond.reason(),
                answers: cond.answers(),
                restarts: view.restarts,
                exit_code: view.exit_code,
                oom_killed: false,
                gave_up: matches!(cond, Condition::GaveUp { .. }),
                durable: view.durable,
                node: view.node.clone(),
                context: facts
                    .context
                    .as_ref()
                    .map(crate::pool::status::ContextShown::from),
                spent_usd: None,
                job: None,
                security: None,
            });
        }
    }
    Ok(rows)
}
