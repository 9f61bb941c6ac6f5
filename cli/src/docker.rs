//! The Docker Engine connection: connect through `DOCKER_HOST` or the local socket, negotiate the
//! API version (Debian's 20.10 engine stops at 1.41), and turn connection failures into errors
//! that say what to do; finding a pool's containers by label; and the Docker actions more than
//! one command takes (the pool network, stopping and removing a container, uploading secrets).

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context as _, anyhow};
use bollard::Docker;
use bollard::models::ContainerSummary;
use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::ListContainersOptionsBuilder;
use bollard::query_parameters::{
    RemoveContainerOptionsBuilder, StopContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};

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

/// The pool's network (a bridge labelled with the pool), created if missing.
pub(crate) async fn ensure_network(docker: &Docker, pool: &str) -> anyhow::Result<String> {
    let net = crate::pool::spec::network_name(pool);
    match docker.inspect_network(&net, None).await {
        Ok(_) => return Ok(net),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e).context("cannot inspect the pool network"),
    }
    let labels: HashMap<String, String> =
        [(crate::pool::spec::POOL.to_string(), pool.to_string())].into();
    docker
        .create_network(NetworkCreateRequest {
            name: net.clone(),
            driver: Some("bridge".into()),
            labels: Some(labels),
            ..NetworkCreateRequest::default()
        })
        .await
        .with_context(|| format!("cannot create network {net}"))?;
    Ok(net)
}

/// Stops a container (SIGTERM, then SIGKILL after `stop_secs`: a runner checkpoints and exits
/// in between) and removes it; a container already gone is not an error.
pub(crate) async fn stop_and_remove(
    docker: &Docker,
    id: &str,
    stop_secs: i32,
) -> anyhow::Result<()> {
    let _ = docker
        .stop_container(
            id,
            Some(StopContainerOptionsBuilder::default().t(stop_secs).build()),
        )
        .await;
    match docker
        .remove_container(
            id,
            Some(RemoveContainerOptionsBuilder::default().force(true).build()),
        )
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove container {id}")),
    }
}

/// Uploads an agent's secrets and its runner token to `/run/secrets/` (0400) of a created,
/// not yet started container.
pub(crate) async fn upload_secrets(
    docker: &Docker,
    id: &str,
    secrets: &BTreeMap<String, String>,
    token: &str,
) -> anyhow::Result<()> {
    let mut files: Vec<(&str, &str)> = secrets
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    files.push(("AGENTFILE_RUNNER_TOKEN", token));
    docker
        .upload_to_container(
            id,
            Some(UploadToContainerOptionsBuilder::default().path("/").build()),
            bollard::body_full(crate::pool::local_api::secrets_tar(&files)?.into()),
        )
        .await?;
    Ok(())
}

/// The pool's containers (all states), found by label.
pub(crate) async fn pool_containers(
    docker: &Docker,
    pool: Option<&str>,
) -> anyhow::Result<Vec<ContainerSummary>> {
    let label = match pool {
        Some(p) => format!("{}={p}", crate::pool::spec::POOL),
        None => crate::pool::spec::POOL.to_string(),
    };
    let filters: HashMap<&str, Vec<String>> = [("label", vec![label])].into_iter().collect();
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    docker
        .list_containers(Some(options))
        .await
        .context("cannot list containers")
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
