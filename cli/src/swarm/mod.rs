//! A pool on Docker Swarm (`ninetrix up --swarm`, issue 19): the same agentfile as on one host,
//! mapped onto Swarm's own objects. Per pool: an attachable overlay network, the checkpoint API
//! as a service (SQLite pinned to one node with one replica, or Postgres by URL with any number),
//! and one service per agent — replicated with restart `on-failure` and `max_attempts: 3` for a
//! durable agent, a `replicated-job` for a batch agent. Each task's runner knows its replica
//! number from `{{.Task.Slot}}` and asks the API for that replica's thread, so a task replaced
//! on any node keeps its thread; two copies of one slot are fenced by the claim's epoch. Secrets
//! are Swarm secrets, never environment or labels.
//!
//! [`spec`] builds the objects (pure); [`deploy`] observes the swarm and states what the
//! agentfile wants, [`plan`] decides (pure: the ops and their causes, which `up --swarm
//! --dry-run` prints) and [`apply`] makes them so; [`observe`] reads tasks for `ps` and
//! `invoke`; [`logs`] reads the tasks' logs; [`remove`] takes a pool down.

pub(crate) mod apply;
pub(crate) mod deploy;
pub(crate) mod logs;
pub(crate) mod observe;
pub(crate) mod plan;
pub(crate) mod remove;
pub(crate) mod spec;
pub(crate) mod status;

use anyhow::bail;
use bollard::Docker;
use bollard::models::LocalNodeState;
use std::collections::HashMap;

use crate::objects::SWARM_POOL;

/// Filters on the pool's label (and more).
pub(crate) fn pool_filter(pool: &str, more: &[(&str, &str)]) -> HashMap<String, Vec<String>> {
    let mut labels = vec![format!("{SWARM_POOL}={pool}")];
    labels.extend(more.iter().map(|(k, v)| format!("{k}={v}")));
    [("label".to_string(), labels)].into()
}

/// This engine's place in a swarm: its node ID, if it is a manager of an active swarm.
pub(crate) async fn manager_node(docker: &Docker) -> anyhow::Result<String> {
    let info = docker.info().await?;
    let swarm = info.swarm.unwrap_or_default();
    let state = swarm.local_node_state.unwrap_or(LocalNodeState::EMPTY);
    if state != LocalNodeState::ACTIVE {
        bail!(
            "this Docker Engine is not part of a swarm (its swarm state is `{state}`): run `docker swarm init` (or `docker swarm join` as a manager), or point DOCKER_HOST at a swarm manager; without --swarm, `ninetrix up` runs the pool on this engine alone"
        );
    }
    if swarm.control_available != Some(true) {
        bail!(
            "this Docker Engine is a swarm worker, not a manager: services can only be created on a manager; point DOCKER_HOST at one (`docker node ls` on a manager lists them)"
        );
    }
    swarm
        .node_id
        .filter(|id| !id.is_empty())
        .ok_or_else(|| anyhow::anyhow!("the swarm did not say which node this engine is"))
}

/// Whether the pool has services on the swarm this engine manages (`false` when it manages
/// none).
pub(crate) async fn has_services(docker: &Docker, pool: &str) -> bool {
    docker
        .list_services(Some(bollard::query_parameters::ListServicesOptions {
            filters: Some(pool_filter(pool, &[])),
            ..Default::default()
        }))
        .await
        .is_ok_and(|s| !s.is_empty())
}

/// The pool's API, as this host reaches it: the published port on this node, this home's admin
/// token.
pub(crate) fn api_of(
    home: &std::path::Path,
    pool: &str,
    swarm: &crate::pool::state::SwarmPool,
) -> anyhow::Result<crate::pool::local_api::Api> {
    use anyhow::Context as _;
    let admin_path = home.join("api").join("admin-token");
    let admin = std::fs::read_to_string(&admin_path).with_context(|| {
        format!(
            "cannot read the admin token {}; `ninetrix up --swarm` writes it",
            admin_path.display()
        )
    })?;
    Ok(crate::pool::local_api::Api::on_swarm(
        format!("http://127.0.0.1:{}", swarm.api_port),
        admin.trim().to_string(),
        &admin_path,
        &crate::objects::swarm::api_service_name(pool),
    ))
}
