//! Runner routes (`/v1/runners/threads/{thread_id}/…`): what a runner calls for its own thread.
//! The admin token may call them too.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    CheckpointCreated, CheckpointRequest, ClaimRequest, ClaimResponse, CommitRequest,
    CommitResponse, ErrorBody, ErrorCode, EventsAppended, EventsRequest, InboxMessage,
    MAX_STORED_INT, ThreadLabels, ThreadState, ToolCallCompletion, ToolCallIntent, ToolCallRecord,
};
use ninetrix_proto::deltas::{Delta, DeltaBatch, MAX_DELTA_CHARS};
use serde::Deserialize;

use crate::access::{LabelledThreadCaller, ThreadCaller};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, page_limit, seq_cursor};
use crate::routes::wait::{Look, long_poll, wait_for};
use crate::state::App;
use crate::store::StoreError;

/// Most inbox messages one poll returns.
const MAX_INBOX_BATCH: u32 = 100;

/// Claim the thread: a new epoch for every later write, one more boot counted. The labels only
/// restate the thread's (fixed when it was created, carried by the runner token): a claim never
/// changes them.
#[utoipa::path(post, path = "/v1/runners/threads/{thread_id}/claim", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    request_body = ClaimRequest,
    responses((status = 200, body = ClaimResponse, description = "claimed: the new epoch fences off earlier runners (the thread is created when new)"),
        (status = 409, body = ErrorBody, description = "`labels_fixed`: a pool, agent or replica other than the thread's (labels never change); `session_mismatch`: the labels name a session the thread is not"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values; `invalid_text`: U+0000 in a text field (the message names it)"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn claim(
    LabelledThreadCaller { id, token_labels }: LabelledThreadCaller,
    State(app): State<App>,
    ApiJson(claim): ApiJson<ClaimRequest>,
) -> Result<axum::Json<ClaimResponse>, ApiError> {
    // A runner's claim is checked against its token before the store checks it against the
    // thread: both say the same, and neither changes.
    if let Some(token) = &token_labels {
        let labels = claim.labels();
        crate::labels::restates(token, &labels).map_err(|changed| changed.refused(id))?;
        if let Some(key) = &labels.session
            && token.session.as_deref() != Some(key.as_str())
        {
            return Err(StoreError::SessionMismatch {
                thread: id,
                key: key.clone(),
            }
            .into());
        }
    }
    let stating = if token_labels.is_some() {
        crate::labels::Stating::Claim
    } else {
        crate::labels::Stating::Mint
    };
    let (claim, freed) = app.store.claim(id, claim, stating).await?;
    tracing::info!(thread_id = %id, epoch = claim.epoch, boot_count = claim.boot_count, "thread claimed");
    // The older epoch's model leases are free: the requests waiting on them look again.
    for key in &freed {
        app.leases.freed(key);
    }
    Ok(axum::Json(claim))
}

/// Who the thread is: its labels (pool, agent, replica, session key) as they were stored when
/// it was created (they never change). What a pool's job broker asks with a runner's own token
/// to learn which agent, pool and workspace that runner's requests are for, so it trusts no
/// label a request states.
#[utoipa::path(get, path = "/v1/runners/threads/{thread_id}/identity", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    responses((status = 200, body = ThreadLabels, description = "the thread's labels, as stored when it was created"), (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn identity(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
) -> Result<axum::Json<ThreadLabels>, ApiError> {
    match app.store.thread(id).await? {
        Some(thread) => Ok(axum::Json(thread.labels)),
        None => Err(ApiError::NotFound(format!("thread {id} not found"))),
    }
}

/// The assembled state at the latest checkpoint: full history and small state. 404 before the
/// first checkpoint.
#[utoipa::path(get, path = "/v1/runners/threads/{thread_id}/latest", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    responses((status = 200, body = ThreadState, description = "the thread's state at its latest checkpoint"), (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn latest(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
) -> Result<Response, ApiError> {
    // The store assembles the document from the JSON it stored; it is sent as it is, without
    // decoding megabytes of history into messages and encoding them again.
    match app.store.latest_json(id).await? {
        Some(json) => Ok((
            [(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static("application/json"),
            )],
            json,
        )
            .into_response()),
        None => Err(ApiError::NotFound(format!(
            "thread {id} has no checkpoint yet"
        ))),
    }
}

/// Append one checkpoint version. Fenced (409 `fenced`) for a stale epoch; 409
/// `version_conflict` when `parent_version` is not the latest version.
#[utoipa::path(post, path = "/v1/runners/threads/{thread_id}/checkpoints", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    request_body = CheckpointRequest,
    responses((status = 201, body = CheckpointCreated, description = "stored: the new version"),
        (status = 409, body = ErrorBody, description = "`fenced`: another runner claimed the thread; `version_conflict`: `parent_version` is not the latest"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values; `too_many`: more than 1,000 messages in `append`; `invalid_text`: U+0000 in a text field (the message names it); `invalid_history`: messages no provider accepts (a tool result for a call the history does not make, a duplicate message ID, a message without blocks)"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread"), (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn append_checkpoint(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiJson(request): ApiJson<CheckpointRequest>,
) -> Result<(StatusCode, axum::Json<CheckpointCreated>), ApiError> {
    let created = app.store.append_checkpoint(id, request).await?;
    Ok((StatusCode::CREATED, axum::Json(created)))
}

/// One durable step of a turn in one transaction: a checkpoint version (its state carries the
/// inbox cursor), the ledger intents of the calls about to run and the outcomes of calls that
/// ran, and the trace events that ride on the step (they reach event-stream readers when it is
/// stored). Fenced and chained like a checkpoint; if any part is refused, nothing is written.
#[utoipa::path(post, path = "/v1/runners/threads/{thread_id}/commit", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    request_body = CommitRequest,
    responses((status = 201, body = CommitResponse, description = "committed: the new version and the ledger record of each intent"),
        (status = 409, body = ErrorBody, description = "`fenced`: another runner claimed the thread; `version_conflict`: `parent_version` is not the latest; `already_completed`: another outcome is recorded for a key; `key_reused`: the key is stored with a different payload, or an approval ID is another request's"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values; `too_many`: more than 1,000 `append`, `intents`, `outcomes` or `approvals` (the message names the field); `out_of_range`: a negative `handoff_reply.cost_usd`; `invalid_text`: U+0000 in a text field (the message names it); `invalid_history`: messages no provider accepts (a tool result for a call the history does not make, a duplicate message ID, a message without blocks)"),
        (status = 404, body = ErrorBody, description = "no such thread, an outcome for a key not in the ledger, or a handoff reply for no handoff of this thread"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn commit(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiJson(request): ApiJson<CommitRequest>,
) -> Result<(StatusCode, axum::Json<CommitResponse>), ApiError> {
    let with_events = !request.events.is_empty();
    let (committed, caller) = app.store.commit(id, request).await?;
    if with_events {
        app.hub.notify(id);
    }
    // A reply to a handoff wakes the caller's turn waiting for it.
    if let Some(caller) = caller {
        app.hub.notify(caller);
    }
    Ok((StatusCode::CREATED, axum::Json(committed)))
}

/// Query of the turn ledger.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct TurnQuery {
    /// The turn whose ledger records to return.
    #[param(maximum = 9223372036854775807_i64)]
    turn_seq: u64,
}

/// The ledger records of one turn, oldest first: what a runner resuming that turn decides each
/// call by (replay a recorded outcome, report a `write` left without one as unknown, or run it).
#[utoipa::path(get, path = "/v1/runners/threads/{thread_id}/tool-calls", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"), TurnQuery),
    responses((status = 200, body = Vec<ToolCallRecord>, description = "the ledger records of the turn"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: a missing or out-of-range `turn_seq`, an unknown parameter; `invalid_path`: a malformed path"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn turn_tool_calls(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiQuery(query): ApiQuery<TurnQuery>,
) -> Result<axum::Json<Vec<ToolCallRecord>>, ApiError> {
    let turn = seq_cursor(query.turn_seq).map_err(|_| ApiError::BadRequest {
        code: ErrorCode::InvalidQuery,
        message: format!(
            "turn_seq {} is larger than {MAX_STORED_INT}",
            query.turn_seq
        ),
    })?;
    Ok(axum::Json(app.store.turn_tool_calls(id, turn).await?))
}

/// Record the intent to run a tool call before running it. If the key is already in the ledger
/// the existing record comes back (200) so a completed call can be replayed; a new one is 201.
#[utoipa::path(post, path = "/v1/runners/threads/{thread_id}/tool-calls", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    request_body = ToolCallIntent,
    responses((status = 201, body = ToolCallRecord, description = "recorded"), (status = 200, body = ToolCallRecord, description = "already in the ledger"),
        (status = 404, body = ErrorBody, description = "no such thread"),
        (status = 409, body = ErrorBody, description = "`fenced`: another runner claimed the thread; `key_reused`: the key is stored with a different payload"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values; `invalid_key`: an empty or too long key; `invalid_text`: U+0000 in a text field (the message names it)"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn record_intent(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiJson(intent): ApiJson<ToolCallIntent>,
) -> Result<Response, ApiError> {
    let (record, created) = app.store.record_intent(id, intent).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(record)).into_response())
}

/// Record the outcome of a tool call. Repeating the same outcome is harmless (200); a different
/// outcome for a completed call is 409 `already_completed`.
#[utoipa::path(put, path = "/v1/runners/threads/{thread_id}/tool-calls/{key}", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"),
        ("key" = String, Path, description = "The ledger key", min_length = 1, max_length = 128)),
    request_body = ToolCallCompletion,
    responses((status = 200, body = ToolCallRecord, description = "the record with its outcome"),
        (status = 400, body = ErrorBody, description = "`invalid_path`: a malformed thread ID or key; `invalid_text`: a key with U+0000"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread, or no such key in its ledger"),
        (status = 409, body = ErrorBody, description = "`fenced`: another runner claimed the thread; `already_completed`: another outcome is recorded for the key"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values; `invalid_text`: U+0000 in a text field (the message names it)"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn complete_tool_call(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiPath((_, key)): ApiPath<(ThreadId, String)>,
    ApiJson(done): ApiJson<ToolCallCompletion>,
) -> Result<axum::Json<ToolCallRecord>, ApiError> {
    Ok(axum::Json(
        app.store.complete_tool_call(id, key, done).await?,
    ))
}

/// Query of the inbox long-poll.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct InboxQuery {
    /// Return messages with a seq greater than this (the runner's cursor; 0 when left out).
    #[serde(default)]
    #[param(maximum = 9223372036854775807_i64)]
    after: u64,
    /// Wait up to this many seconds for a message, 0 to 3600 (held at most the server's
    /// `--max-wait`).
    #[serde(default)]
    #[param(maximum = 3600)]
    wait: u64,
    /// At most this many messages: 1 to 100 (100 when left out).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<u32>,
}

/// Inbox messages after the cursor, oldest first. With `wait`, holds the request open until a
/// message arrives or the wait ends (then an empty list).
#[utoipa::path(get, path = "/v1/runners/threads/{thread_id}/inbox", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"), InboxQuery),
    responses((status = 200, body = Vec<InboxMessage>, description = "the messages after `after` (after waiting, when asked, for one)"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: an out-of-range `after`, `wait` or `limit`, an unknown parameter; `invalid_path`: a malformed path"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn inbox(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiQuery(query): ApiQuery<InboxQuery>,
) -> Result<axum::Json<Vec<InboxMessage>>, ApiError> {
    let limit = page_limit(query.limit, MAX_INBOX_BATCH, MAX_INBOX_BATCH)?;
    let after = seq_cursor(query.after)?;
    // Any wait up to the bound is accepted (and capped); one past it is a malformed query.
    let wait = wait_for(query.wait)?;
    let messages = long_poll(&app, app.hub.subscribe(id), wait, || async {
        let messages = app.store.inbox_after(id, after, limit).await?;
        Ok(if messages.is_empty() {
            Look::NotYet {
                answer: messages,
                wake: None,
            }
        } else {
            Look::Ready(messages)
        })
    })
    .await?;
    Ok(axum::Json(messages))
}

/// Append a batch of trace events (fenced like every runner write).
#[utoipa::path(post, path = "/v1/runners/threads/{thread_id}/events", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    request_body = EventsRequest,
    responses((status = 201, body = EventsAppended, description = "stored: the events' seqs"), (status = 404, body = ErrorBody, description = "no such thread"),
        (status = 409, body = ErrorBody, description = "`fenced`: another runner claimed the thread"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values; `invalid_text`: U+0000 in a text field (the message names it)"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn append_events(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiJson(request): ApiJson<EventsRequest>,
) -> Result<(StatusCode, axum::Json<EventsAppended>), ApiError> {
    let last_seq = app.store.append_events(id, request).await?;
    app.hub.notify(id);
    Ok((StatusCode::CREATED, axum::Json(EventsAppended { last_seq })))
}

/// Publish text the model is streaming (`DeltaBatch`) to the thread's watchers — `GET
/// /v1/threads/{id}/events/stream?deltas=true` — and nowhere else: deltas are not stored, not
/// fenced (they carry the epoch; watchers show the newest) and dropped when nobody watches.
#[utoipa::path(post, path = "/v1/runners/threads/{thread_id}/deltas", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    request_body = DeltaBatch,
    responses((status = 202, description = "handed to the watchers there are (none is fine)"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values, `text` over 65,536 characters"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn publish_deltas(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiJson(batch): ApiJson<DeltaBatch>,
) -> Result<StatusCode, ApiError> {
    if batch.text.chars().count() > MAX_DELTA_CHARS {
        return Err(ApiError::Rejected {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: ErrorCode::InvalidBody,
            message: format!(
                "`text` carries at most {MAX_DELTA_CHARS} characters; send smaller batches"
            ),
        });
    }
    // Handed to the watchers first, as the batch arrives: a look at the store before it would
    // let the runner's next commit (sent meanwhile) reach watchers ahead of its text. A purged
    // thread has no watchers (its stream ended), so nothing of it is shown.
    app.hub.publish_delta(Delta {
        thread_id: id,
        batch,
        at: chrono::Utc::now(),
    });
    // A purged thread's runner is told so (410), like on its other routes.
    app.store.thread(id).await?;
    Ok(StatusCode::ACCEPTED)
}
