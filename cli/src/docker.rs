//! The Docker Engine connection: connect through `DOCKER_HOST` or the local socket, negotiate the
//! API version (Debian's 20.10 engine stops at 1.41), and turn connection failures into errors
//! that say what to do; and the Docker actions more than one command takes, whatever the pool:
//! choosing among duplicate networks (pure), removing a network past stale endpoints, stopping and
//! removing a container, reading a listed container's labels and name. (A pool's own objects,
//! found by its label, are `pool::engine`'s.)

use std::time::Duration;

use anyhow::{Context as _, anyhow};
use bollard::Docker;
use bollard::models::ContainerSummary;
use bollard::models::NetworkDisconnectRequest;
use bollard::query_parameters::{RemoveContainerOptionsBuilder, StopContainerOptionsBuilder};

/// Connects and negotiates the API version.
pub(crate) async fn connect() -> anyhow::Result<Docker> {
    let target =
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    let hint = || {
        anyhow!(
            "Docker is not reachable at {target}: is the daemon running? Start it (e.g. `dockerd` or \
             `systemctl start docker`), or point DOCKER_HOST at a running engine"
        )
    };
    let docker = Docker::connect_with_defaults().map_err(|e| anyhow!("{}: {e}", hint()))?;
    let docker = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        docker.negotiate_version(),
    )
    .await
    .map_err(|_| hint())?
    .map_err(|_| hint())?;
    docker.ping().await.map_err(|_| hint())?;
    let version = docker
        .version()
        .await
        .context("cannot read the Docker Engine version")?;
    let api = version.api_version.unwrap_or_default();
    let numeric: f64 = api.parse().unwrap_or(0.0);
    if numeric > 0.0 && numeric < 1.41 {
        anyhow::bail!(
            "the Docker Engine at {target} speaks API {api}; ninetrix needs 1.41 or newer (Docker 20.10+)"
        );
    }
    Ok(docker)
}

/// Whether an error is Docker's 404.
pub(crate) fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// A pool network as Docker lists it, reduced to what the duplicate choice needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NetworkCandidate {
    /// The network ID (everything after the choice addresses the network by it).
    pub(crate) id: String,
    /// Its name (`ninetrix-<pool>`; duplicates share it).
    pub(crate) name: String,
    /// When Docker created it (RFC 3339; compared as instants).
    pub(crate) created: String,
    /// How many containers are attached to it.
    pub(crate) containers: usize,
    /// The names of its endpoints (the attached containers').
    pub(crate) endpoints: Vec<String>,
}

/// Which of a pool's networks to keep and which to remove (duplicates left by an older ninetrix,
/// or by two `up`s that raced before the pool lock came first): keep the one with the most
/// containers; among equals (e.g. none has any), the oldest; the ID breaks a remaining tie so the
/// choice never depends on listing order. `None` when there is no network.
pub(crate) fn choose_network(
    candidates: &[NetworkCandidate],
) -> Option<(&NetworkCandidate, Vec<&NetworkCandidate>)> {
    let instant = |c: &NetworkCandidate| {
        chrono::DateTime::parse_from_rfc3339(&c.created)
            .map(|t| t.timestamp_nanos_opt().unwrap_or(i64::MAX))
            .unwrap_or(i64::MAX)
    };
    let keep = candidates.iter().min_by(|a, b| {
        b.containers
            .cmp(&a.containers)
            .then_with(|| instant(a).cmp(&instant(b)))
            .then_with(|| a.id.cmp(&b.id))
    })?;
    let rest = candidates.iter().filter(|c| c.id != keep.id).collect();
    Some((keep, rest))
}

/// Connects `container` to `network` under `alias`; one already connected is fine.
pub(crate) async fn connect_network(
    docker: &Docker,
    network: &str,
    container: &str,
    alias: &str,
) -> anyhow::Result<()> {
    let request = bollard::models::NetworkConnectRequest {
        container: container.to_string(),
        endpoint_config: Some(bollard::models::EndpointSettings {
            aliases: Some(vec![alias.to_string()]),
            ..bollard::models::EndpointSettings::default()
        }),
    };
    match docker.connect_network(network, request).await {
        Ok(()) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 403 | 409,
            ..
        }) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError { message, .. })
            if message.contains("already exists") =>
        {
            Ok(())
        }
        Err(e) => {
            Err(e).with_context(|| format!("cannot connect {container} to network {network}"))
        }
    }
}

/// The first 12 characters of a Docker ID, as `docker` prints them.
pub(crate) fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// Why a network still stands after [`remove_network`] tried everything.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NetworkRemoval {
    /// Docker keeps endpoints of containers that no longer exist (Docker 20.10 after many
    /// parallel removals): only a daemon restart drops them.
    #[error(
        "network {id} still has active endpoints after force-disconnecting every endpoint it \
         lists and {tries} tries (stale endpoints left by Docker); remove it with `sudo systemctl \
         restart docker && docker network rm {id}`"
    )]
    StaleEndpoints {
        /// The network's ID.
        id: String,
        /// How many removals were tried.
        tries: u32,
    },
    /// Any other refusal.
    #[error("cannot remove network {id}: {message}")]
    Other {
        /// The network's ID.
        id: String,
        /// Docker's message.
        message: String,
    },
}

/// Removes a network (already gone is success). Endpoints that block it are force-disconnected
/// by *name* — every endpoint `inspect` lists, plus `names` (the containers the caller just
/// removed: Docker 20.10 can keep an endpoint of a removed container that `inspect` no longer
/// shows, and a forced disconnect finds it by name only) — and the removal is retried with a
/// short backoff.
pub(crate) async fn remove_network(
    docker: &Docker,
    id: &str,
    names: &[String],
) -> Result<(), NetworkRemoval> {
    const TRIES: u32 = 6;
    let mut delay = Duration::from_millis(100);
    for attempt in 1..=TRIES {
        let message = match docker.remove_network(id).await {
            Ok(()) => return Ok(()),
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError { message, .. }) => message,
            Err(e) => e.to_string(),
        };
        if !message.contains("active endpoints") {
            return Err(NetworkRemoval::Other {
                id: id.to_string(),
                message,
            });
        }
        if attempt == TRIES {
            break;
        }
        let mut endpoints: Vec<String> = match docker.inspect_network(id, None).await {
            Ok(n) => n
                .containers
                .unwrap_or_default()
                .into_iter()
                .map(|(cid, ep)| ep.name.unwrap_or(cid))
                .collect(),
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(_) => Vec::new(),
        };
        endpoints.extend(names.iter().cloned());
        endpoints.sort();
        endpoints.dedup();
        for endpoint in endpoints {
            let _ = docker
                .disconnect_network(
                    id,
                    NetworkDisconnectRequest {
                        container: endpoint,
                        force: Some(true),
                    },
                )
                .await;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
    Err(NetworkRemoval::StaleEndpoints {
        id: id.to_string(),
        tries: TRIES,
    })
}

/// Stops a container (SIGTERM, then SIGKILL after `stop_secs`: a runner checkpoints and exits
/// in between) and removes it; a container already gone is not an error.
pub(crate) async fn stop_and_remove(
    docker: &Docker,
    id: &str,
    stop_secs: i32,
) -> anyhow::Result<()> {
    let stopped = docker
        .stop_container(
            id,
            Some(StopContainerOptionsBuilder::default().t(stop_secs).build()),
        )
        .await;
    // A stopped container is removed without force: a forced removal runs the network cleanup
    // again beside the daemon's own one after the exit, which on Docker 20.10 can leave the
    // network with a stale endpoint count. Force only when the stop did not work.
    let force = match stopped {
        Ok(()) => false,
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(_) => true,
    };
    let first = docker
        .remove_container(
            id,
            Some(
                // `v`: with its anonymous volumes (`/run/secrets`), so no secret outlives it.
                RemoveContainerOptionsBuilder::default()
                    .force(force)
                    .v(true)
                    .build(),
            ),
        )
        .await;
    let result = match first {
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) if !force => {
            docker
                .remove_container(
                    id,
                    Some(
                        RemoveContainerOptionsBuilder::default()
                            .force(true)
                            .v(true)
                            .build(),
                    ),
                )
                .await
        }
        other => other,
    };
    match result {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove container {id}")),
    }
}

/// A label of a listed container.
pub(crate) fn label<'a>(c: &'a ContainerSummary, key: &str) -> Option<&'a str> {
    c.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// A listed container's name without the leading slash.
pub(crate) fn name(c: &ContainerSummary) -> String {
    c.names
        .as_ref()
        .and_then(|n| n.first())
        .map(|n| n.trim_start_matches('/').to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(id: &str, created: &str, containers: usize) -> NetworkCandidate {
        NetworkCandidate {
            id: id.into(),
            name: "ninetrix-p".into(),
            created: created.into(),
            containers,
            endpoints: (0..containers).map(|i| format!("c{i}")).collect(),
        }
    }

    #[test]
    fn a_duplicate_network_choice_keeps_the_used_one_else_the_oldest() {
        assert!(choose_network(&[]).is_none());
        let only = [net("a", "2024-01-01T00:00:00Z", 0)];
        let (keep, rest) = choose_network(&only).unwrap();
        assert_eq!((keep.id.as_str(), rest.len()), ("a", 0));
        // The one with containers wins over an older empty one.
        let nets = [
            net("old", "2024-01-01T00:00:00Z", 0),
            net("used", "2024-01-02T00:00:00Z", 3),
            net("new", "2024-01-03T00:00:00Z", 0),
        ];
        let (keep, rest) = choose_network(&nets).unwrap();
        assert_eq!(keep.id, "used");
        let mut gone: Vec<&str> = rest.iter().map(|c| c.id.as_str()).collect();
        gone.sort();
        assert_eq!(gone, ["new", "old"]);
        // None used: the oldest, compared as instants (not as text: the offsets differ).
        let nets = [
            net("b", "2024-01-01T10:00:00.5+02:00", 0),
            net("a", "2024-01-01T09:00:00Z", 0),
        ];
        assert_eq!(choose_network(&nets).unwrap().0.id, "b");
        // Same instant: the ID decides, whatever the order.
        let nets = [
            net("y", "2024-01-01T00:00:00Z", 0),
            net("x", "2024-01-01T00:00:00Z", 0),
        ];
        assert_eq!(choose_network(&nets).unwrap().0.id, "x");
    }

    #[test]
    fn a_network_left_by_stale_endpoints_names_the_command_that_removes_it() {
        let e = NetworkRemoval::StaleEndpoints {
            id: "abc".into(),
            tries: 6,
        };
        assert!(
            e.to_string()
                .contains("sudo systemctl restart docker && docker network rm abc")
        );
    }
}
