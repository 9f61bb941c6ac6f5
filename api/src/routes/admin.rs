//! Admin routes (`/v1/threads…`, `/v1/tokens/runner`): reading threads, putting work in an
//! inbox, cancelling a turn, following events, purging, and minting runner tokens. Admin token
//! only (the web console signed in with it too).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    CancelRequest, CancelResponse, EnqueueRequest, EnqueueResponse, ErrorBody, ErrorCode, Event,
    MAX_STORED_INT, RunnerTokenRequest, RunnerTokenResponse, ThreadStatus, ThreadSummary,
    ToolCallRecord, VersionDetail, VersionSummary,
};
use ninetrix_proto::deltas::Delta;
use serde::Deserialize;

use crate::access::{Admin, AdminVia};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, page_limit, seq_cursor};
use crate::faults::crash;
use crate::state::App;
use crate::store::checks::event_kind_ok;
use crate::store::{Purge, StoreError, ThreadFilter};

/// Most threads one listing returns.
const MAX_THREADS_PAGE: u32 = 1000;
/// Most events one listing returns.
const MAX_EVENTS_PAGE: u32 = 1000;

/// Query of the thread listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ThreadsQuery {
    /// Only threads of this pool.
    pool: Option<String>,
    /// Only threads of this agent.
    agent: Option<String>,
    /// Only threads in this status.
    #[param(value_type = Option<ThreadStatus>)]
    status: Option<String>,
    /// At most this many: 1 to 1000 (100 when left out).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// Skip this many (0 to 2^32−1).
    #[param(value_type = Option<u64>, maximum = 4294967295_i64)]
    offset: Option<u32>,
}

/// List threads, filtered by pool, agent and status.
#[utoipa::path(get, path = "/v1/threads", tag = "admin", params(ThreadsQuery),
    responses((status = 200, body = Vec<ThreadSummary>, description = "the threads that match, one page"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: an unknown status or parameter, a malformed or out-of-range `limit` or `offset`; `invalid_text`: a name with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn list_threads(
    _: Admin,
    State(app): State<App>,
    ApiQuery(q): ApiQuery<ThreadsQuery>,
) -> Result<axum::Json<Vec<ThreadSummary>>, ApiError> {
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(ThreadStatus::parse(s).ok_or_else(|| ApiError::BadRequest {
            code: ErrorCode::InvalidQuery,
            message: format!("unknown status `{s}`; use idle, in_turn, waiting, done or failed"),
        })?),
    };
    let filter = ThreadFilter {
        pool: q.pool,
        agent: q.agent,
        status,
        sessions: false,
        session: None,
        limit: page_limit(q.limit, 100, MAX_THREADS_PAGE)?,
        offset: q.offset.unwrap_or(0),
    };
    Ok(axum::Json(app.store.list_threads(filter).await?))
}

async fn existing(app: &App, id: ThreadId) -> Result<ThreadSummary, ApiError> {
    app.store
        .thread(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("thread {id} not found")))
}

/// One thread.
#[utoipa::path(get, path = "/v1/threads/{thread_id}", tag = "admin",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    responses((status = 200, body = ThreadSummary, description = "the thread"), (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn thread(
    _: Admin,
    State(app): State<App>,
    ApiPath(id): ApiPath<ThreadId>,
) -> Result<axum::Json<ThreadSummary>, ApiError> {
    Ok(axum::Json(existing(&app, id).await?))
}

/// Delete everything stored for a thread: versions, messages, ledger, inbox, events.
#[utoipa::path(delete, path = "/v1/threads/{thread_id}", tag = "admin",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    responses((status = 204, description = "purged: its checkpoints, ledger, inbox and events are gone"), (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn purge(
    _: Admin,
    State(app): State<App>,
    ApiPath(id): ApiPath<ThreadId>,
) -> Result<StatusCode, ApiError> {
    match app.store.purge(id, crash).await? {
        Purge::Done => {
            crash("purge_after_commit");
            app.hub.remove(id);
            // Its model leases are gone with it: requests waiting on a slot look again.
            app.leases.freed_all();
            tracing::info!(thread_id = %id, "thread purged");
            Ok(StatusCode::NO_CONTENT)
        }
        Purge::Already => Err(StoreError::Purged(id).into()),
        Purge::NotFound => Err(ApiError::NotFound(format!("thread {id} not found"))),
    }
}

/// The thread's version chain, oldest first.
#[utoipa::path(get, path = "/v1/threads/{thread_id}/checkpoints", tag = "admin",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    responses((status = 200, body = Vec<VersionSummary>, description = "the versions of the thread's chain"), (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn versions(
    _: Admin,
    State(app): State<App>,
    ApiPath(id): ApiPath<ThreadId>,
) -> Result<axum::Json<Vec<VersionSummary>>, ApiError> {
    existing(&app, id).await?;
    Ok(axum::Json(app.store.versions(id).await?))
}

/// One version, with the history as it was at that version.
#[utoipa::path(get, path = "/v1/threads/{thread_id}/checkpoints/{version}", tag = "admin",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"),
        ("version" = u64, Path, description = "The version", maximum = 9223372036854775807_i64)),
    responses((status = 200, body = VersionDetail, description = "the checkpoint of this version"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread, or no such version of it"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn version(
    _: Admin,
    State(app): State<App>,
    ApiPath((id, version)): ApiPath<(ThreadId, u64)>,
) -> Result<axum::Json<VersionDetail>, ApiError> {
    if version > MAX_STORED_INT {
        return Err(ApiError::BadRequest {
            code: ErrorCode::InvalidPath,
            message: format!("version {version} is larger than {MAX_STORED_INT}"),
        });
    }
    app.store
        .version(id, version)
        .await?
        .map(axum::Json)
        .ok_or_else(|| ApiError::NotFound(format!("thread {id} has no version {version}")))
}

/// The thread's tool-call ledger.
#[utoipa::path(get, path = "/v1/threads/{thread_id}/tool-calls", tag = "admin",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    responses((status = 200, body = Vec<ToolCallRecord>, description = "the thread's tool-call ledger"), (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn tool_calls(
    _: Admin,
    State(app): State<App>,
    ApiPath(id): ApiPath<ThreadId>,
) -> Result<axum::Json<Vec<ToolCallRecord>>, ApiError> {
    existing(&app, id).await?;
    Ok(axum::Json(app.store.tool_calls(id).await?))
}

/// Put a message in the thread's inbox (the thread is created if new). With a `dedupe_key`
/// seen before, nothing is added and the original seq comes back (200, `duplicate: true`, the
/// mode it was stored with). Its `mode` (else the agent's `on_message_while_busy`, else `queue`)
/// says what it does if the thread is in a turn, or about to start one: wait (`queue`), join the
/// turn (`steer`), stop it (`interrupt`: a turn waiting on people or collaborators has their
/// requests and handoffs cancelled at once), or be refused (`reject`: 409 `busy` naming the
/// turn, nothing stored; queued when no turn runs). The answer names the turn it found.
#[utoipa::path(post, path = "/v1/threads/{thread_id}/messages", tag = "admin",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    request_body = EnqueueRequest,
    responses((status = 201, body = EnqueueResponse, description = "queued in the thread's inbox, with the mode it was stored with and the turn it found"),
        (status = 200, body = EnqueueResponse, description = "duplicate: a message with this `dedupe_key` is already queued, nothing added"),
        (status = 409, body = ErrorBody, description = "`key_reused`: the key is stored with a different payload; `busy`: mode `reject` (the message's or the agent's) and the thread is in a turn or about to start one — `running` names it, nothing was stored"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values, or `control: cancel` (a cancel has its own route, POST /v1/threads/{thread_id}/cancel); `invalid_text`: U+0000 in a text field (the message names it)"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn enqueue(
    _: Admin,
    State(app): State<App>,
    ApiPath(id): ApiPath<ThreadId>,
    ApiJson(request): ApiJson<EnqueueRequest>,
) -> Result<Response, ApiError> {
    let (response, wake) = app.store.enqueue(id, request).await?;
    if !response.duplicate {
        app.hub.wake(&wake);
    }
    let status = if response.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, axum::Json(response)).into_response())
}

/// Cancel the thread's turn (`ninetrix cancel`): a `cancel` is put in its inbox — the runner
/// ends the running turn `cancelled` at once (the turn of the earliest message not yet
/// answered) — and in the same
/// transaction the turn's pending requests to people are settled `cancelled` (each with its
/// `approval_decided` event) and the thread's pending handoffs marked `cancelled`, each
/// collaborator's thread getting a cancel aimed at its task, recursively (at most 32 handoffs
/// deep, each once). `by` defaults to `admin` (`console` from the web console). With a
/// `dedupe_key` seen before on the thread, the first cancel comes back (200, `duplicate: true`)
/// and nothing more is done.
#[utoipa::path(post, path = "/v1/threads/{thread_id}/cancel", tag = "admin", operation_id = "cancel_turn",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    request_body = CancelRequest,
    responses((status = 201, body = CancelResponse, description = "the cancel is stored; the turn it found and what it settled"),
        (status = 200, body = CancelResponse, description = "duplicate: a cancel with this `dedupe_key` was stored before, nothing more done"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 409, body = ErrorBody, description = "`key_reused`: the `dedupe_key` is stored with a message that is not a cancel"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown fields, a `by` or `reason` too long; `invalid_key`: a malformed `dedupe_key`; `invalid_text`: U+0000 in a text field (the message names it)"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token (nor the console signed in with it)")),
    security(("bearer" = [])))]
pub(crate) async fn cancel(
    via: AdminVia,
    State(app): State<App>,
    ApiPath(id): ApiPath<ThreadId>,
    ApiJson(request): ApiJson<CancelRequest>,
) -> Result<Response, ApiError> {
    let by = request.by.clone().unwrap_or_else(|| via.role().to_string());
    let (response, wake) = app.store.cancel(id, request, by.clone(), crash).await?;
    if response.duplicate {
        return Ok((StatusCode::OK, axum::Json(response)).into_response());
    }
    crash("cancel_after_commit");
    tracing::info!(thread_id = %id, seq = response.seq, by = %by, running = ?response.running,
        approvals = response.approvals_cancelled, handoffs = response.handoffs_cancelled, "turn cancel stored");
    app.hub.wake(&wake);
    Ok((StatusCode::CREATED, axum::Json(response)).into_response())
}

/// Query of the event listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    /// Events with a seq greater than this (0 when left out).
    #[serde(default)]
    #[param(maximum = 9223372036854775807_i64)]
    after: u64,
    /// At most this many: 1 to 1000 (1000 when left out).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// The thread's trace events, oldest first.
#[utoipa::path(get, path = "/v1/threads/{thread_id}/events", tag = "admin",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"), EventsQuery),
    responses((status = 200, body = Vec<Event>, description = "the thread's events after `after`, one page"), (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn events(
    _: Admin,
    State(app): State<App>,
    ApiPath(id): ApiPath<ThreadId>,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<axum::Json<Vec<Event>>, ApiError> {
    let after = seq_cursor(q.after)?;
    let limit = page_limit(q.limit, MAX_EVENTS_PAGE, MAX_EVENTS_PAGE)?;
    existing(&app, id).await?;
    Ok(axum::Json(app.store.events_after(id, after, limit).await?))
}

/// Query of the event stream.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct StreamQuery {
    /// Start after this seq (the `Last-Event-ID` header wins when both are given).
    #[serde(default)]
    #[param(maximum = 9223372036854775807_i64)]
    after: u64,
    /// Also send the text the model is streaming, as `event: delta` (no `id:`: deltas are not
    /// stored, so a reconnection does not replay them).
    #[serde(default)]
    deltas: bool,
}

/// The thread's events as Server-Sent Events: `id:` is the event seq, `event:` its type, `data:`
/// the event as JSON. Reconnect with `Last-Event-ID` to resume with no gap and no duplicate.
/// With `deltas=true`, the reply text the model is streaming comes too, as `event: delta` with no
/// `id:` (a `Delta`; ephemeral, best effort). Keep-alive comments are sent while idle; the stream
/// ends when the thread is purged.
#[utoipa::path(get, path = "/v1/threads/{thread_id}/events/stream", tag = "admin",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"), StreamQuery,
        ("Last-Event-ID" = Option<u64>, Header, nullable = false, description = "Resume after this seq: a whole number from 0 to 9223372036854775807 (not `null`, not empty)",
            minimum = 0, maximum = 9223372036854775807_i64)),
    responses((status = 200, content_type = "text/event-stream", description = "the event stream"),
        (status = 400, body = ErrorBody, description = "`invalid_header`: a `Last-Event-ID` that is not an event seq (0 to 9223372036854775807); `invalid_query`, `invalid_path`: a malformed parameter"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread"), (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn stream(
    _: Admin,
    State(app): State<App>,
    ApiPath(id): ApiPath<ThreadId>,
    ApiQuery(q): ApiQuery<StreamQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let after = seq_cursor(q.after)?;
    let after = match headers.get("last-event-id") {
        None => after,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .filter(|&seq| seq <= MAX_STORED_INT)
            .ok_or(ApiError::BadRequest {
                code: ErrorCode::InvalidHeader,
                message: format!(
                    "Last-Event-ID must be an event seq (a whole number from 0 to {MAX_STORED_INT})"
                ),
            })?,
    };
    existing(&app, id).await?;
    let keep_alive = KeepAlive::new().interval(app.keep_alive);
    // Watching starts before the first read, so no delta between the two is missed.
    let deltas = q.deltas.then(|| app.hub.watch_deltas(id));
    Ok(Sse::new(event_stream(app, id, after, deltas))
        .keep_alive(keep_alive)
        .into_response())
}

/// Cursor of one SSE connection.
struct Cursor {
    app: App,
    id: ThreadId,
    last: u64,
    buffer: VecDeque<Event>,
    /// The thread's deltas, when asked for.
    deltas: Option<tokio::sync::broadcast::Receiver<Delta>>,
}

/// The next delta, or never when the stream has none (or its channel closed).
async fn next_delta(rx: &mut Option<tokio::sync::broadcast::Receiver<Delta>>) -> Delta {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let Some(r) = rx.as_mut() else {
            return std::future::pending().await;
        };
        match r.recv().await {
            Ok(d) => return d,
            // Fell behind: the skipped deltas are gone; the watcher sees the gap by offsets.
            Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => *rx = None,
        }
    }
}

fn delta_event(d: &Delta) -> SseEvent {
    SseEvent::default()
        .event("delta")
        .json_data(d)
        .unwrap_or_else(|_| SseEvent::default().comment("unencodable delta"))
}

fn event_stream(
    app: App,
    id: ThreadId,
    after: u64,
    deltas: Option<tokio::sync::broadcast::Receiver<Delta>>,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let cursor = Cursor {
        app,
        id,
        last: after,
        buffer: VecDeque::new(),
        deltas,
    };
    futures_util::stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(event) = c.buffer.pop_front() {
                c.last = event.seq;
                let sse = SseEvent::default()
                    .id(event.seq.to_string())
                    // Rows stored before types were checked may hold a line break, which an
                    // SSE field cannot carry: those go out as `unknown` (the data has the type).
                    .event(if event_kind_ok(&event.kind) {
                        event.kind.as_str()
                    } else {
                        "unknown"
                    })
                    .json_data(&event)
                    .unwrap_or_else(|_| SseEvent::default().comment("unencodable event"));
                return Some((Ok(sse), c));
            }
            let notify = c.app.hub.subscribe(c.id);
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match c.app.store.events_after(c.id, c.last, 256).await {
                Ok(events) if !events.is_empty() => {
                    c.buffer.extend(events);
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(thread_id = %c.id, error = %e, "event stream read failed; closing the stream");
                    return None;
                }
            }
            // Purged threads end the stream.
            if !matches!(c.app.store.thread(c.id).await, Ok(Some(_))) {
                return None;
            }
            // On Postgres, re-check every second: another API replica's writes do not notify us.
            let recheck = c.app.store.recheck_every();
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep(recheck.unwrap_or(Duration::MAX)), if recheck.is_some() => {}
                () = c.app.shutdown.cancelled() => return None,
                d = next_delta(&mut c.deltas) => return Some((Ok(delta_event(&d)), c)),
            }
        }
    })
}

/// Mint the runner token of a thread, creating the thread with these labels when new. A thread's
/// labels are fixed when it is created (a thread made without any — by an enqueue — takes them
/// from its first mint); the token carries them, so a runner cannot pose as another pool's agent.
#[utoipa::path(post, path = "/v1/tokens/runner", tag = "admin",
    request_body = RunnerTokenRequest,
    responses((status = 201, body = RunnerTokenResponse, description = "the runner token of the thread (the thread is created with these labels when new)"),
        (status = 409, body = ErrorBody, description = "`labels_fixed`: the thread exists with other labels (they never change)"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values; `invalid_text`: U+0000 in a text field (the message names it)"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn mint_runner_token(
    _: Admin,
    State(app): State<App>,
    ApiJson(request): ApiJson<RunnerTokenRequest>,
) -> Result<(StatusCode, axum::Json<RunnerTokenResponse>), ApiError> {
    let labels = app
        .store
        .ensure_thread(request.thread_id, request.labels())
        .await?;
    let token = app.auth.runner_token(request.thread_id, &labels);
    Ok((
        StatusCode::CREATED,
        axum::Json(RunnerTokenResponse {
            thread_id: request.thread_id,
            token,
        }),
    ))
}
