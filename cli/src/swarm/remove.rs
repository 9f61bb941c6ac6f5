//! `ninetrix down` for a pool on Swarm: the triggers first (nothing fires into a pool going
//! down), with `--purge` the pool's threads while its API still runs, then the agents' services
//! (each task gets its stop grace period to checkpoint), the sidecar MCP servers' services, the
//! API service, the pool's secrets and
//! its network. Thread data stays in the API's volume (SQLite) or database unless `--purge`,
//! which also removes this node's volumes of the pool and the pool file. Every step runs even if
//! an earlier one failed; the failures are reported together.

use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListNetworksOptions, ListSecretsOptions, ListServicesOptions,
    ListVolumesOptions,
};
use ninetrix_proto::api::TriggerSet;

use crate::deploy::DownSettings;
use crate::deploy::failures::Failures;
use crate::objects::COMPONENT;
use crate::objects::SWARM_POOL;
use crate::pool::state::LockedState;
use crate::swarm::pool_filter;
use crate::ui::progress::Progress;

/// Takes the Swarm pool down (see the module's doc): `--purge` as on one host; `-t` bounds the
/// wait for each service's tasks to stop.
pub(crate) async fn down(
    docker: &Docker,
    home: &std::path::Path,
    pool: &str,
    locked: LockedState,
    args: &DownSettings,
    progress: &Progress,
    failures: &mut Failures,
) {
    let (purge, stop_secs) = (args.purge, args.timeout);
    let swarm = locked.state.swarm.clone();
    let api = swarm
        .as_ref()
        .map(|s| super::api_of(home, pool, s))
        .transpose();
    let api = failures.check("the pool's API", api).flatten();
    if let Some(api) = &api {
        match api.set_triggers(pool, &TriggerSet::default()).await {
            Ok(applied) => {
                for name in &applied.removed {
                    progress.step("Trigger", name, "Removed");
                }
            }
            Err(e) => eprintln!(
                "warning: the triggers of pool {pool} were not removed ({e:#}); its API service is removed next, so nothing fires"
            ),
        }
    }
    // The agents first (each task checkpoints as it stops), then — with `--purge` — the threads,
    // which no runner can re-create any more, then the API.
    remove_services(docker, pool, "runner", stop_secs, progress, failures).await;
    // The sidecar MCP servers, once no runner calls them.
    remove_services(docker, pool, "mcp", stop_secs, progress, failures).await;
    let threads_gone = match (&api, purge) {
        (_, false) => true,
        (Some(api), true) => purge_threads(api, pool, progress, failures).await,
        (None, true) => false,
    };
    remove_services(docker, pool, "api", stop_secs, progress, failures).await;
    // Secrets and the network, once nothing uses them.
    match docker
        .list_secrets(Some(ListSecretsOptions {
            filters: Some(pool_filter(pool, &[(COMPONENT, "secret")])),
        }))
        .await
    {
        Ok(secrets) => {
            let n = secrets.len();
            for secret in secrets {
                if let Some(id) = secret.id
                    && let Err(e) = docker.delete_secret(&id).await
                {
                    failures.record(format!("secret {id}: {e}"));
                }
            }
            if n > 0 {
                progress.step("Secrets", &format!("{n} of pool {pool}"), "Removed");
            }
        }
        Err(e) => failures.record(format!("secrets of pool {pool}: {e}")),
    }
    let network = crate::objects::swarm::network_name(pool);
    if let Ok(found) = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some([("name".to_string(), vec![network.clone()])].into()),
        }))
        .await
    {
        for n in found.iter().filter(|n| n.name.as_deref() == Some(&network)) {
            let id = n.id.clone().unwrap_or_default();
            // Task endpoints leave the overlay a moment after their containers.
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                match docker.remove_network(&id).await {
                    Ok(()) => {
                        progress.step("Network", &network, "Removed");
                        break;
                    }
                    Err(e) if Instant::now() > deadline => {
                        failures.record(format!("network {network}: {e}"));
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
                }
            }
        }
    }
    if purge {
        remove_volumes(docker, pool, progress, failures).await;
        if threads_gone {
            failures.check("pool file", locked.delete());
            progress.step("Pool", pool, "Purged");
        } else {
            failures.record(format!(
                "the threads of pool {pool} could not all be deleted, so its pool file is kept; `ninetrix up --swarm` then `ninetrix down --purge -p {pool}` finishes"
            ));
        }
    }
}

/// Removes the pool's services of `component` and waits (the grace period and 30 s more) until
/// their tasks' containers on this node are gone.
async fn remove_services(
    docker: &Docker,
    pool: &str,
    component: &str,
    stop_secs: i32,
    progress: &Progress,
    failures: &mut Failures,
) {
    let services = match docker
        .list_services(Some(ListServicesOptions {
            filters: Some(pool_filter(pool, &[(COMPONENT, component)])),
            ..ListServicesOptions::default()
        }))
        .await
    {
        Ok(s) => s,
        Err(e) => {
            failures.record(format!("services of pool {pool}: {e}"));
            return;
        }
    };
    for service in &services {
        let name = service
            .spec
            .as_ref()
            .and_then(|s| s.name.clone())
            .unwrap_or_default();
        match docker.delete_service(&name).await {
            Ok(()) => progress.step("Service", &name, "Removed"),
            Err(e) => failures.record(format!("service {name}: {e}")),
        }
    }
    // Their tasks' containers stop (SIGTERM, then the grace period) before the next part; Swarm
    // then removes them (given a moment: a stopped one left over is not a failure).
    let listed = |all: bool| {
        docker.list_containers(Some(
            ListContainersOptionsBuilder::default()
                .all(all)
                .filters(&pool_filter(pool, &[(COMPONENT, component)]))
                .build(),
        ))
    };
    let grace = u64::try_from(stop_secs).unwrap_or(30) + 30;
    let deadline = Instant::now() + Duration::from_secs(grace);
    while let Ok(left) = listed(false).await {
        if left.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            failures.record(format!(
                "{} {component} container(s) of pool {pool} were still running after {grace}s",
                left.len(),
            ));
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Stopped ones Swarm left behind (a finished job's, seen on Engine 20.10) go too.
    for c in listed(true).await.unwrap_or_default() {
        if let Some(id) = c.id {
            let _ = docker
                .remove_container(
                    &id,
                    Some(
                        bollard::query_parameters::RemoveContainerOptionsBuilder::default()
                            .force(true)
                            .v(true)
                            .build(),
                    ),
                )
                .await;
        }
    }
}

/// Deletes every thread the pool's API records for the pool, then its memories. Whether all are
/// gone.
async fn purge_threads(
    api: &crate::pool::local_api::Api,
    pool: &str,
    progress: &Progress,
    failures: &mut Failures,
) -> bool {
    let mut purged = 0usize;
    loop {
        let threads = match api.pool_threads(pool, 0).await {
            Ok(t) => t,
            Err(e) => {
                failures.record(format!("listing the threads of pool {pool}: {e:#}"));
                return false;
            }
        };
        if threads.is_empty() {
            break;
        }
        for t in threads {
            if let Err(e) = api.purge(t.thread_id).await {
                failures.record(format!("thread {}: {e:#}", t.thread_id));
                return false;
            }
            purged += 1;
        }
    }
    progress.step("Threads", &format!("{purged} of pool {pool}"), "Deleted");
    match api.purge_memories(pool).await {
        Ok(n) => {
            progress.step("Memories", &format!("{n} files of pool {pool}"), "Deleted");
            true
        }
        Err(e) => {
            failures.record(format!("memories of pool {pool}: {e:#}"));
            false
        }
    }
}

/// Removes this node's volumes of the pool (workspaces, the SQLite API's data). Volumes on other
/// nodes are named in the warning (Swarm has no cluster-wide volume list).
async fn remove_volumes(docker: &Docker, pool: &str, progress: &Progress, failures: &mut Failures) {
    let volumes = match docker
        .list_volumes(Some(ListVolumesOptions {
            filters: Some(pool_filter(pool, &[])),
        }))
        .await
    {
        Ok(v) => v.volumes.unwrap_or_default(),
        Err(e) => {
            failures.record(format!("volumes of pool {pool}: {e}"));
            return;
        }
    };
    for v in volumes {
        match docker
            .remove_volume(
                &v.name,
                None::<bollard::query_parameters::RemoveVolumeOptions>,
            )
            .await
        {
            Ok(()) => progress.step("Volume", &v.name, "Removed"),
            Err(e) => failures.record(format!("volume {}: {e}", v.name)),
        }
    }
    let nodes = docker
        .list_nodes(None::<bollard::query_parameters::ListNodesOptions>)
        .await
        .map_or(1, |n| n.len());
    if nodes > 1 {
        eprintln!(
            "note: volumes of pool {pool} on the swarm's other nodes stay; remove them there (`docker volume ls --filter label={SWARM_POOL}={pool}`)"
        );
    }
}
