//! Sessions (`/v1/sessions`, `/v1/pools/{pool}/agents/{agent}`, `/v1/tokens/agent`, and the
//! replicas' `/v1/runners/pools/{pool}/agents/{agent}/sessions`): many conversations per agent.
//! Also each replica's own thread by its number (`…/replicas/{replica}`), the other thing a
//! replica asks with the agent's token.
//!
//! A session is a thread labelled with its key, created on first use and the same ever after; the
//! admin (the CLI's `invoke --session`) opens it and then uses the thread's ordinary routes. Which
//! replica serves it is [`ninetrix_proto::sessions::owner`] of its key and the agent's replica
//! count, which `up` records here. A replica finds its sessions' work with the agent's token —
//! each session with the runner token of its thread, which it claims and serves like its own.

use axum::extract::State;
use axum::http::StatusCode;
use ninetrix_proto::api::{
    AgentReplicas, AgentTokenRequest, AgentTokenResponse, ErrorBody, ErrorCode, ReplicaThread,
    SessionRequest, SessionWork, ThreadSummary,
};
use ninetrix_proto::{ThreadId, sessions};
use serde::Deserialize;

use crate::access::{Admin, AgentCaller};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, page_limit};
use crate::routes::wait::{Look, long_poll, wait_for};
use crate::state::App;
use crate::store::ThreadFilter;

/// Most sessions one listing returns.
const MAX_SESSIONS_PAGE: u32 = 1000;

fn unprocessable(message: String) -> ApiError {
    ApiError::Rejected {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        code: ErrorCode::InvalidBody,
        message,
    }
}

/// A pool or agent name in a body (422): the agentfile's rule (`crate::names`).
fn check_name(what: &str, name: &str) -> Result<(), ApiError> {
    crate::names::check(what, name).map_err(unprocessable)
}

/// A pool or agent name in the path (400 `invalid_path`), after percent-decoding: the same rule,
/// so `..`, `/` or a control character never reach a name.
fn check_path_name(what: &str, name: &str) -> Result<(), ApiError> {
    crate::names::check_path(what, name)
}

/// Open a session: the thread of session `key` of the agent, created on first use (201; a new
/// UUID v7 labelled with pool, agent and key) and the same ever after (200). Put messages in it
/// with `POST /v1/threads/{thread_id}/messages`.
#[utoipa::path(post, path = "/v1/sessions", tag = "admin", operation_id = "open_session",
    request_body = SessionRequest,
    responses((status = 201, body = ThreadSummary, description = "created"), (status = 200, body = ThreadSummary, description = "the existing session"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values; `invalid_text`: U+0000 in a text field (the message names it)"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn open(
    _: Admin,
    State(app): State<App>,
    ApiJson(request): ApiJson<SessionRequest>,
) -> Result<(StatusCode, axum::Json<ThreadSummary>), ApiError> {
    check_name("pool", &request.pool)?;
    check_name("agent", &request.agent)?;
    sessions::check_key(&request.key).map_err(|e| unprocessable(e.to_string()))?;
    let (thread, created) = app
        .store
        .open_session(request.pool, request.agent, request.key)
        .await?;
    if created {
        tracing::info!(thread_id = %thread.thread_id, "session opened");
    }
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(thread)))
}

/// Most replicas an agent may have a thread for (as `PUT /v1/pools/{pool}/agents/{agent}`).
const MAX_REPLICA: u32 = 1000;

/// The thread of replica `replica` of the agent, with its runner token: what a runner that knows
/// only its replica number (a Swarm task's slot) claims and serves. Made on first use (201) —
/// or adopted: the newest live thread labelled with pool, agent and replica, as a single-host
/// `ninetrix up` makes them — and the same ever after (200). A purged thread is replaced by a
/// new one (201): a purge is final, so the replica starts a new conversation.
#[utoipa::path(post, path = "/v1/runners/pools/{pool}/agents/{agent}/replicas/{replica}", tag = "runner",
    operation_id = "replica_thread",
    params(("pool" = String, Path, description = "The pool (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$"),
        ("agent" = String, Path, description = "The agent (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$"),
        ("replica" = u32, Path, description = "The replica number", minimum = 1, maximum = 1000)),
    responses((status = 201, body = ReplicaThread, description = "a thread made for the replica now (its first boot, or its first since its thread was purged)"),
        (status = 200, body = ReplicaThread, description = "the replica's thread"),
        (status = 400, body = ErrorBody, description = "`invalid_path`: a malformed pool or agent name, or a replica outside 1 to 1000; `invalid_text`: a name with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the agent token of this pool and agent")),
    security(("bearer" = [])))]
pub(crate) async fn replica_thread(
    _: AgentCaller,
    State(app): State<App>,
    ApiPath((pool, agent, replica)): ApiPath<(String, String, u32)>,
) -> Result<(StatusCode, axum::Json<ReplicaThread>), ApiError> {
    check_path_name("pool", &pool)?;
    check_path_name("agent", &agent)?;
    if !(1..=MAX_REPLICA).contains(&replica) {
        return Err(ApiError::BadRequest {
            code: ErrorCode::InvalidPath,
            message: format!("replica must be 1 to {MAX_REPLICA}, not {replica}"),
        });
    }
    let (thread, created) = app
        .store
        .replica_thread(pool.clone(), agent.clone(), replica, crate::faults::crash)
        .await?;
    if created {
        crate::faults::crash("replica_thread_after_commit");
        tracing::info!(thread_id = %thread.thread_id, %pool, %agent, replica, "replica thread made");
    }
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        axum::Json(ReplicaThread {
            token: app.auth.runner_token(thread.thread_id, &thread.labels),
            thread_id: thread.thread_id,
            replica,
            created,
        }),
    ))
}

/// Query of the session listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct SessionsQuery {
    /// Only sessions of this pool.
    pool: Option<String>,
    /// Only sessions of this agent.
    agent: Option<String>,
    /// Only the session with this key.
    key: Option<String>,
    /// At most this many: 1 to 1000 (100 when left out).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// Skip this many (0 to 2^32−1).
    #[param(value_type = Option<u64>, maximum = 4294967295_i64)]
    offset: Option<u32>,
}

/// List sessions (their threads, with the `session` label), by pool, agent and key; opens none.
#[utoipa::path(get, path = "/v1/sessions", tag = "admin", operation_id = "list_sessions", params(SessionsQuery),
    responses((status = 200, body = Vec<ThreadSummary>, description = "the session threads that match, one page"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: a malformed `limit` or `offset`, an unknown parameter; `invalid_text`: a name or key with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn list(
    _: Admin,
    State(app): State<App>,
    ApiQuery(q): ApiQuery<SessionsQuery>,
) -> Result<axum::Json<Vec<ThreadSummary>>, ApiError> {
    let filter = ThreadFilter {
        pool: q.pool,
        agent: q.agent,
        status: None,
        sessions: true,
        session: q.key,
        limit: page_limit(q.limit, 100, MAX_SESSIONS_PAGE)?,
        offset: q.offset.unwrap_or(0),
    };
    Ok(axum::Json(app.store.list_threads(filter).await?))
}

/// Record how many replicas the agent runs (`up` does, before it starts or removes any) — what its
/// sessions are spread over — which agents it may hand work to (`collaborators`), and what its A2A
/// card says (`card`; without one, no card is served for the agent). The replicas waiting for work are woken, so moved sessions are taken
/// over at once.
#[utoipa::path(put, path = "/v1/pools/{pool}/agents/{agent}", tag = "admin",
    params(("pool" = String, Path, description = "The pool (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$"),
        ("agent" = String, Path, description = "The agent (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")),
    request_body = AgentReplicas,
    responses((status = 204, description = "recorded"),
        (status = 400, body = ErrorBody, description = "`bad_json`: the body is not JSON; `invalid_path`: a malformed pool or agent name; `invalid_text`: a name with U+0000"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values, a card out of its bounds (the field named: `card.skills[2].id`)"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn set_replicas(
    _: Admin,
    State(app): State<App>,
    ApiPath((pool, agent)): ApiPath<(String, String)>,
    ApiJson(request): ApiJson<AgentReplicas>,
) -> Result<StatusCode, ApiError> {
    check_path_name("pool", &pool)?;
    check_path_name("agent", &agent)?;
    if !(1..=1000).contains(&request.replicas) {
        return Err(unprocessable(format!(
            "replicas must be 1 to 1000, not {}",
            request.replicas
        )));
    }
    let named = |c: &String| ninetrix_agentfile::names::is_valid_name(c);
    if request.collaborators.len() > 64 || !request.collaborators.iter().all(named) {
        return Err(unprocessable(format!(
            "collaborators must be at most 64 agent names ({})",
            crate::names::rule()
        )));
    }
    if let Some(card) = &request.card {
        crate::a2a_rules::check_card(card).map_err(unprocessable)?;
    }
    app.store
        .set_replicas(
            pool.clone(),
            agent.clone(),
            request.replicas,
            request.collaborators,
            request.card,
        )
        .await?;
    app.hub.notify_agent(&pool, &agent);
    Ok(StatusCode::NO_CONTENT)
}

/// Mint the agent token its replicas find their sessions' work with (`up` passes it to each
/// replica as a secret).
#[utoipa::path(post, path = "/v1/tokens/agent", tag = "admin",
    request_body = AgentTokenRequest,
    responses((status = 201, body = AgentTokenResponse, description = "the agent token of the pool's agent"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values; `invalid_text`: U+0000 in a text field (the message names it)"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn mint_agent_token(
    _: Admin,
    State(app): State<App>,
    ApiJson(request): ApiJson<AgentTokenRequest>,
) -> Result<(StatusCode, axum::Json<AgentTokenResponse>), ApiError> {
    check_name("pool", &request.pool)?;
    check_name("agent", &request.agent)?;
    let token = app.auth.agent_token(&request.pool, &request.agent);
    Ok((
        StatusCode::CREATED,
        axum::Json(AgentTokenResponse {
            pool: request.pool,
            agent: request.agent,
            token,
        }),
    ))
}

/// Query of a replica's work long-poll.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct WorkQuery {
    /// The asking replica (from 1).
    #[param(minimum = 1, maximum = 1000)]
    replica: u32,
    /// The sessions' threads it is serving now, comma-separated UUIDs: left out of the answer.
    #[serde(default)]
    #[param(
        pattern = "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(,[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})*)?$"
    )]
    active: Option<String>,
    /// Wait up to this many seconds, 0 to 3600 (held at most the server's `--max-wait`), while
    /// it has no other work.
    #[serde(default)]
    #[param(maximum = 3600)]
    wait: u64,
}

/// The sessions of the agent that replica `replica` owns now (by their keys and the agent's
/// recorded replica count; 1 when none is recorded) and that have work — messages after their
/// cursor, or a turn in progress — other than those it says it serves (`active`), oldest first,
/// each with the runner token of its thread. With `wait`, held until there is some, the replica
/// count changes, or the wait ends.
#[utoipa::path(get, path = "/v1/runners/pools/{pool}/agents/{agent}/sessions", tag = "runner",
    params(("pool" = String, Path, description = "The pool (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$"),
        ("agent" = String, Path, description = "The agent (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$"), WorkQuery),
    responses((status = 200, body = Vec<SessionWork>, description = "the sessions with work for this replica (after waiting, when asked, for some)"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: a missing or out-of-range `replica` or `wait`, a malformed `active`, an unknown parameter; `invalid_path`: a malformed pool or agent name; `invalid_text`: a name with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the agent token of this pool and agent")),
    security(("bearer" = [])))]
pub(crate) async fn work(
    _: AgentCaller,
    State(app): State<App>,
    ApiPath((pool, agent)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<WorkQuery>,
) -> Result<axum::Json<Vec<SessionWork>>, ApiError> {
    check_path_name("pool", &pool)?;
    check_path_name("agent", &agent)?;
    let bad = |message: String| ApiError::BadRequest {
        code: ErrorCode::InvalidQuery,
        message,
    };
    if !(1..=1000).contains(&q.replica) {
        return Err(bad(format!("replica must be 1 to 1000, not {}", q.replica)));
    }
    let active: Vec<ThreadId> = q
        .active
        .as_deref()
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<ThreadId>().map_err(|e| bad(e.to_string())))
        .collect::<Result<_, _>>()?;
    let wait = wait_for(q.wait)?;
    let notify = app.hub.subscribe_replica(&pool, &agent, q.replica);
    let work = long_poll(&app, notify, wait, || async {
        let replicas = app
            .store
            .replicas(pool.clone(), agent.clone())
            .await?
            .unwrap_or(1);
        let work: Vec<SessionWork> = app
            .store
            .session_work(pool.clone(), agent.clone(), replicas, q.replica)
            .await?
            .into_iter()
            .filter(|(t, _)| !active.contains(&t.thread_id))
            .filter_map(|(t, cursor)| {
                Some(SessionWork {
                    token: app.auth.runner_token(t.thread_id, &t.labels),
                    thread_id: t.thread_id,
                    key: t.labels.session?,
                    status: t.status,
                    inbox_seq: t.inbox_seq,
                    inbox_cursor: cursor,
                })
            })
            .collect();
        Ok(if work.is_empty() {
            Look::NotYet {
                answer: work,
                wake: None,
            }
        } else {
            Look::Ready(work)
        })
    })
    .await?;
    Ok(axum::Json(work))
}
