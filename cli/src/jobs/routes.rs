//! The broker's HTTP routes (axum): every `/v1/jobs` route authenticates its caller first
//! ([`Authed`]: the bearer token and the thread it is for, confirmed by the checkpoint API,
//! then `caller::authorise`), then acts only on that thread's jobs. Bodies and answers are the
//! `ninetrix_proto::jobs` types; every refusal is a `JobError`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::{get, post};
use axum::{Json, Router};
use ninetrix_proto::ThreadId;
use ninetrix_proto::jobs::{
    CreateJob, JobId, JobOutput, JobState, JobView, MAX_WAIT_SECS, OutputQuery, REPLICA_HEADER,
    THREAD_HEADER, WaitJob, labels,
};

use super::caller::{Caller, authorise};
use super::engine;
use super::error::BrokerError;
use super::output::slice;
use super::spec;
use super::state::Broker;
use super::view::view;

type Shared = Arc<Broker>;

/// How often a wait looks at its job again.
const WAIT_POLL: Duration = Duration::from_millis(500);

/// Every route.
pub(crate) fn router(broker: Shared) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/jobs", post(create).get(list))
        .route("/v1/jobs/{id}", get(one))
        .route("/v1/jobs/{id}/start", post(start))
        .route("/v1/jobs/{id}/output", get(output))
        .route("/v1/jobs/{id}/wait", post(wait))
        .route("/v1/jobs/{id}/kill", post(kill))
        .fallback(|| async {
            BrokerError::NotFound("no such route; the broker serves /v1/jobs".into())
        })
        .with_state(broker)
}

/// A request's caller, authenticated and authorised.
pub(crate) struct Authed(pub Caller);

fn header<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts.headers.get(name).and_then(|v| v.to_str().ok())
}

impl FromRequestParts<Shared> for Authed {
    type Rejection = BrokerError;

    async fn from_request_parts(parts: &mut Parts, broker: &Shared) -> Result<Self, BrokerError> {
        let token = header(parts, "authorization")
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                BrokerError::Unauthorized(
                    "no bearer token; send `Authorization: Bearer <the thread's runner token>`"
                        .into(),
                )
            })?;
        let thread: ThreadId = header(parts, THREAD_HEADER)
            .and_then(|t| t.trim().parse().ok())
            .ok_or_else(|| {
                BrokerError::Unauthorized(format!(
                    "no {THREAD_HEADER} header naming the thread the token is for (a UUID)"
                ))
            })?;
        let labels = broker.identities.labels(token, thread).await?;
        let caller = authorise(
            &broker.config,
            thread,
            &labels,
            header(parts, REPLICA_HEADER),
        )?;
        Ok(Authed(caller))
    }
}

fn job_id(path: Result<Path<String>, PathRejection>) -> Result<JobId, BrokerError> {
    let Path(text) = path.map_err(|e| BrokerError::Invalid(e.body_text()))?;
    text.parse()
        .map_err(|e: ninetrix_proto::jobs::ParseJobIdError| BrokerError::Invalid(e.to_string()))
}

async fn healthz() -> StatusCode {
    StatusCode::OK
}

/// The job of `name` when its container exists: another thread's is refused.
async fn existing(
    broker: &Broker,
    caller: &Caller,
    id: &JobId,
) -> Result<Option<JobView>, BrokerError> {
    let pool = &broker.config.pool;
    let Some(facts) = engine::inspect(&broker.docker, &id.container(pool)).await? else {
        return Ok(None);
    };
    if !engine::is_job_of(&facts, pool, caller.thread) {
        return Err(BrokerError::Forbidden(format!(
            "the container of job {id} belongs to another thread; use another key"
        )));
    }
    view(&facts).map(Some).ok_or_else(|| {
        BrokerError::Unavailable(format!("the container of job {id} has no job labels"))
    })
}

async fn create(
    Authed(caller): Authed,
    State(broker): State<Shared>,
    body: Result<Json<CreateJob>, JsonRejection>,
) -> Result<(StatusCode, Json<JobView>), BrokerError> {
    let Json(request) = body.map_err(|e| BrokerError::Invalid(e.body_text()))?;
    spec::check(&request)?;
    let pool = &broker.config.pool;
    let jobs = broker.config.agents.get(&caller.agent).ok_or_else(|| {
        BrokerError::Forbidden(format!(
            "agent {} has no job tools in pool {pool}",
            caller.agent
        ))
    })?;
    let timeout = spec::timeout_secs(&request, jobs)?;
    let id = JobId::of(caller.thread, &request.key);
    if let Some(view) = existing(&broker, &caller, &id).await? {
        return Ok((StatusCode::OK, Json(view)));
    }
    let name = id.container(pool);
    let made = {
        let _one_at_a_time = broker.creating.lock().await;
        if let Some(view) = existing(&broker, &caller, &id).await? {
            return Ok((StatusCode::OK, Json(view)));
        }
        let active = engine::active(&broker.docker, pool, &caller.agent).await?;
        let max = jobs.max_concurrent as usize;
        if active >= max {
            return Err(BrokerError::TooManyJobs(format!(
                "{active} of {max} jobs of agent {} run; wait for one (job_wait) or kill one \
                 (job_kill)",
                caller.agent
            )));
        }
        let deadline =
            chrono::Utc::now().timestamp() + i64::try_from(timeout).unwrap_or(i64::MAX / 2);
        let body = spec::body(pool, jobs, &caller, &id, &request, deadline);
        engine::create(&broker.docker, &name, body).await?
    };
    let view = existing(&broker, &caller, &id).await?.ok_or_else(|| {
        BrokerError::Unavailable(format!(
            "job {id} vanished right after its creation; try again"
        ))
    })?;
    if made {
        tracing::info!(event = "job_created", job = %id, agent = %caller.agent, thread = %caller.thread,
            replica = caller.replica, container = %name, deadline = %view.deadline, "job created");
    }
    let status = if made {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view)))
}

async fn start(
    Authed(caller): Authed,
    State(broker): State<Shared>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<JobView>, BrokerError> {
    let id = job_id(path)?;
    let pool = &broker.config.pool;
    let (_, view) = engine::job(&broker.docker, pool, caller.thread, &id).await?;
    if view.state != JobState::Created {
        return Ok(Json(view));
    }
    engine::start(&broker.docker, &id.container(pool)).await?;
    tracing::info!(event = "job_started", job = %id, agent = %caller.agent, thread = %caller.thread,
        container = %id.container(pool), "job started");
    let (_, view) = engine::job(&broker.docker, pool, caller.thread, &id).await?;
    Ok(Json(view))
}

async fn list(
    Authed(caller): Authed,
    State(broker): State<Shared>,
) -> Result<Json<Vec<JobView>>, BrokerError> {
    let pool = &broker.config.pool;
    let thread = caller.thread.to_string();
    let listed = engine::list(&broker.docker, pool, &[(labels::THREAD, &thread)], &[]).await?;
    let mut views = Vec::with_capacity(listed.len());
    for c in listed {
        let Some(id) = crate::docker::label(&c, labels::ID).and_then(|id| id.parse::<JobId>().ok())
        else {
            continue;
        };
        match engine::job(&broker.docker, pool, caller.thread, &id).await {
            Ok((_, view)) => views.push(view),
            // Removed since it was listed.
            Err(BrokerError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    // Oldest first, by the creation time the inspect gives to the nanosecond (a listing's is
    // in whole seconds).
    views.sort_by_key(|v| {
        (
            chrono::DateTime::parse_from_rfc3339(&v.created_at).ok(),
            v.id.clone(),
        )
    });
    Ok(Json(views))
}

async fn one(
    Authed(caller): Authed,
    State(broker): State<Shared>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<JobView>, BrokerError> {
    let id = job_id(path)?;
    let (_, view) = engine::job(&broker.docker, &broker.config.pool, caller.thread, &id).await?;
    Ok(Json(view))
}

async fn output(
    Authed(caller): Authed,
    State(broker): State<Shared>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<OutputQuery>, QueryRejection>,
) -> Result<Json<JobOutput>, BrokerError> {
    let id = job_id(path)?;
    let Query(query) = query.map_err(|e| BrokerError::Invalid(e.body_text()))?;
    let pool = &broker.config.pool;
    let (_, view) = engine::job(&broker.docker, pool, caller.thread, &id).await?;
    let log = engine::logs(&broker.docker, &id.container(pool)).await?;
    let piece = slice(
        &log,
        query.since,
        query.tail,
        view.state == JobState::Exited,
    );
    Ok(Json(JobOutput {
        job: view,
        text: piece.text,
        from: piece.from,
        next: piece.next,
        cut: piece.cut,
    }))
}

async fn wait(
    Authed(caller): Authed,
    State(broker): State<Shared>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Json<WaitJob>, JsonRejection>,
) -> Result<Json<JobView>, BrokerError> {
    let id = job_id(path)?;
    let Json(request) = body.map_err(|e| BrokerError::Invalid(e.body_text()))?;
    let until = Instant::now() + Duration::from_secs(request.timeout_secs.min(MAX_WAIT_SECS));
    let pool = &broker.config.pool;
    loop {
        let (_, view) = engine::job(&broker.docker, pool, caller.thread, &id).await?;
        let left = until.saturating_duration_since(Instant::now());
        if view.state == JobState::Exited || left.is_zero() {
            return Ok(Json(view));
        }
        tokio::select! {
            () = broker.shutdown.cancelled() => return Ok(Json(view)),
            () = tokio::time::sleep(WAIT_POLL.min(left)) => {}
        }
    }
}

async fn kill(
    Authed(caller): Authed,
    State(broker): State<Shared>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<JobView>, BrokerError> {
    let id = job_id(path)?;
    let pool = &broker.config.pool;
    let (_, view) = engine::job(&broker.docker, pool, caller.thread, &id).await?;
    if view.state == JobState::Running {
        engine::stop(&broker.docker, &id.container(pool)).await?;
        tracing::info!(event = "job_killed", job = %id, agent = %caller.agent, thread = %caller.thread,
            container = %id.container(pool), "job stopped");
        let (_, view) = engine::job(&broker.docker, pool, caller.thread, &id).await?;
        return Ok(Json(view));
    }
    Ok(Json(view))
}
