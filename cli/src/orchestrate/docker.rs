//! The Docker Engine connection: connect through `DOCKER_HOST` or the local socket, negotiate the
//! API version (Debian's 20.10 engine stops at 1.41), and turn connection failures into errors
//! that say what to do.

use anyhow::{Context as _, anyhow};
use bollard::Docker;

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
