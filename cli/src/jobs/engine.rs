//! The broker's Docker calls on job containers: inspect, count, create, start, list, read logs,
//! stop. Each failure is a [`BrokerError`] (404 for a container that is not there, 503 for
//! Docker failing); which job a caller may see is decided here from the container's labels — a
//! job of another thread is answered as absent, so a caller learns nothing of it.

use std::collections::HashMap;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, ContainerSummary};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, LogsOptionsBuilder,
    StopContainerOptionsBuilder,
};
use futures_util::StreamExt as _;
use ninetrix_proto::ThreadId;
use ninetrix_proto::jobs::{JobId, JobView, labels};

use super::error::BrokerError;
use super::view::{Facts, view};
use crate::objects;

/// The seconds between SIGTERM and SIGKILL when a job is stopped.
pub(crate) const STOP_SECS: i32 = 10;

/// Whether an error is Docker's 409 (a name taken, or a container in the way).
fn is_conflict(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 409,
            ..
        }
    )
}

/// What Docker says of the container `name`; `None` when there is none.
pub(crate) async fn inspect(docker: &Docker, name: &str) -> Result<Option<Facts>, BrokerError> {
    match docker.inspect_container(name, None).await {
        Ok(inspect) => Ok(Some(Facts::of(&inspect))),
        Err(e) if crate::docker::is_not_found(&e) => Ok(None),
        Err(e) => Err(BrokerError::docker(&format!("inspect {name}"), &e)),
    }
}

/// Whether `facts` are a job container of `pool` started by `thread`.
pub(crate) fn is_job_of(facts: &Facts, pool: &str, thread: ThreadId) -> bool {
    facts.label(objects::POOL) == Some(pool)
        && facts.label(objects::ROLE) == Some(objects::JOB_ROLE)
        && facts.label(labels::THREAD) == Some(thread.to_string().as_str())
}

/// The view of job `id` of `thread`: 404 when there is none, or when it is another thread's.
pub(crate) async fn job(
    docker: &Docker,
    pool: &str,
    thread: ThreadId,
    id: &JobId,
) -> Result<(Facts, JobView), BrokerError> {
    let missing = || {
        BrokerError::NotFound(format!(
            "no job {id} of thread {thread}; list them with GET /v1/jobs"
        ))
    };
    let facts = inspect(docker, &id.container(pool))
        .await?
        .ok_or_else(missing)?;
    if !is_job_of(&facts, pool, thread) {
        return Err(missing());
    }
    let view = view(&facts).ok_or_else(missing)?;
    Ok((facts, view))
}

fn filters(pool: &str, more: &[(&str, &str)], status: &[&str]) -> HashMap<String, Vec<String>> {
    let mut labels = vec![
        format!("{}={pool}", objects::POOL),
        format!("{}={}", objects::ROLE, objects::JOB_ROLE),
    ];
    labels.extend(more.iter().map(|(k, v)| format!("{k}={v}")));
    let mut filters: HashMap<String, Vec<String>> = [("label".to_string(), labels)].into();
    if !status.is_empty() {
        filters.insert(
            "status".into(),
            status.iter().map(|s| (*s).to_string()).collect(),
        );
    }
    filters
}

/// The pool's job containers with these labels and (when any is named) these states.
pub(crate) async fn list(
    docker: &Docker,
    pool: &str,
    more: &[(&str, &str)],
    status: &[&str],
) -> Result<Vec<ContainerSummary>, BrokerError> {
    docker
        .list_containers(Some(
            ListContainersOptionsBuilder::default()
                .all(true)
                .filters(&filters(pool, more, status))
                .build(),
        ))
        .await
        .map_err(|e| BrokerError::docker("list the job containers", &e))
}

/// How many of `agent`'s jobs exist unstarted or run.
pub(crate) async fn active(docker: &Docker, pool: &str, agent: &str) -> Result<usize, BrokerError> {
    Ok(list(
        docker,
        pool,
        &[(objects::AGENT, agent)],
        &["created", "running"],
    )
    .await?
    .len())
}

/// Creates the container `name`; `false` when one of that name existed already (a concurrent
/// create won).
pub(crate) async fn create(
    docker: &Docker,
    name: &str,
    body: ContainerCreateBody,
) -> Result<bool, BrokerError> {
    let options = CreateContainerOptionsBuilder::default().name(name).build();
    match docker.create_container(Some(options), body).await {
        Ok(_) => Ok(true),
        Err(e) if is_conflict(&e) => Ok(false),
        Err(e) => Err(BrokerError::docker(&format!("create {name}"), &e)),
    }
}

/// Starts the container `name` (one already running is fine).
pub(crate) async fn start(docker: &Docker, name: &str) -> Result<(), BrokerError> {
    match docker.start_container(name, None).await {
        Ok(()) => Ok(()),
        Err(e) if crate::docker::is_not_found(&e) => {
            Err(BrokerError::NotFound(format!("container {name} is gone")))
        }
        Err(e) => Err(BrokerError::docker(&format!("start {name}"), &e)),
    }
}

/// Stops the container `name`: SIGTERM, SIGKILL after [`STOP_SECS`] (a stopped one is fine).
pub(crate) async fn stop(docker: &Docker, name: &str) -> Result<(), BrokerError> {
    let options = StopContainerOptionsBuilder::default().t(STOP_SECS).build();
    match docker.stop_container(name, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if crate::docker::is_not_found(&e) => {
            Err(BrokerError::NotFound(format!("container {name} is gone")))
        }
        Err(e) => Err(BrokerError::docker(&format!("stop {name}"), &e)),
    }
}

/// The container's whole output, stdout and stderr as Docker keeps them, without timestamps.
pub(crate) async fn logs(docker: &Docker, name: &str) -> Result<Vec<u8>, BrokerError> {
    let options = LogsOptionsBuilder::default()
        .stdout(true)
        .stderr(true)
        .timestamps(false)
        .follow(false)
        .tail("all")
        .build();
    let mut stream = docker.logs(name, Some(options));
    let mut out = Vec::new();
    while let Some(frame) = stream.next().await {
        match frame {
            Ok(frame) => out.extend_from_slice(&frame.into_bytes()),
            Err(e) => {
                return Err(BrokerError::docker(
                    &format!("read the output of {name}"),
                    &e,
                ));
            }
        }
    }
    Ok(out)
}
