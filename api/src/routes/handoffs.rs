//! Handoffs between agents (`/v1/runners/threads/{id}/handoffs`, `/v1/handoffs`): a runner's call
//! of `ask_<agent>` files its task in a session of the collaborator dedicated to that call —
//! once, whatever the retries — and then sleeps on the long-poll until the collaborator's final
//! commit stores the reply (`CommitRequest.handoff_reply`) or the caller's `transfer_timeout`
//! passes.
//!
//! Who may do what: a runner token only its own thread's handoffs (it hands work only to its
//! agent's collaborators, as `up` recorded them — the agent and pool its token carries, which no
//! request can change); the admin token everything, and the listing
//! (what `ninetrix trace --follow-handoffs` follows).

use axum::extract::State;
use axum::http::StatusCode;
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{ErrorBody, ErrorCode, Handoff, HandoffRequest, HandoffStatus};
use serde::Deserialize;

use crate::access::{Admin, LabelledThreadCaller, ThreadCaller};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiQuery, page_limit};
use crate::routes::wait::{TurnWaitQuery, turn_settled};
use crate::state::App;
use crate::store::HandoffFilter;

/// Most handoffs one listing returns.
const MAX_HANDOFFS_PAGE: u32 = 1000;

/// Hand one call's task to a collaborator: the collaborator's session for this call (key
/// `handoff:<thread>:<ledger key>`) is opened and the task filed in it under the delivery key
/// `handoff:<ledger key>` (201). The same call again returns the handoff it made (200), so a
/// restarted caller re-attaches instead of delegating twice.
#[utoipa::path(post, path = "/v1/runners/threads/{thread_id}/handoffs", tag = "runner", operation_id = "open_handoff",
    params(("thread_id" = uuid::Uuid, Path, description = "The caller's thread")),
    request_body = HandoffRequest,
    responses((status = 201, body = Handoff, description = "handed over now"), (status = 200, body = Handoff, description = "this call's handoff, made before"),
        (status = 409, body = ErrorBody, description = "`fenced`: another runner claimed the thread"),
        (status = 403, body = ErrorBody, description = "`not_collaborator`: the caller's agent may not hand work to this one (as `ninetrix up` recorded the pool), or not this caller's thread"),
        (status = 422, body = ErrorBody, description = "a malformed request"),
        (status = 404, body = ErrorBody, description = "no such thread"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged (its ID is never used again), or the collaborator's session of this call was (the message names it): the handoff can never be answered"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token")),
    security(("bearer" = [])))]
pub(crate) async fn open(
    LabelledThreadCaller { id, token_labels }: LabelledThreadCaller,
    State(app): State<App>,
    ApiJson(request): ApiJson<HandoffRequest>,
) -> Result<(StatusCode, axum::Json<Handoff>), ApiError> {
    let (handoff, created) = app.store.open_handoff(id, request, token_labels).await?;
    if created {
        tracing::info!(
            thread_id = %id,
            agent = %handoff.agent,
            target = %handoff.target_thread_id,
            "handoff filed"
        );
    }
    // Woken either way: a repeat may be a caller that lost the first answer.
    app.hub.notify_agent(&handoff.pool, &handoff.agent);
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(handoff)))
}

/// The handoffs one turn of the runner's thread made, oldest first, as they stand. With `wait`,
/// holds the request open until more of them are settled than `settled`, none is pending, or the
/// wait ends — a turn waiting for collaborators costs no CPU. A handoff without a reply by its
/// `expires_at` reads `timed_out`.
#[utoipa::path(get, path = "/v1/runners/threads/{thread_id}/handoffs", tag = "runner", operation_id = "turn_handoffs",
    params(("thread_id" = uuid::Uuid, Path, description = "The caller's thread"), TurnWaitQuery),
    responses((status = 200, body = Vec<Handoff>, description = "the turn's handoffs (after waiting, when asked, for one to be settled)"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: a missing or out-of-range `turn_seq`, `wait` or `settled`, an unknown parameter; `invalid_path`: a malformed path"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn turn(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiQuery(q): ApiQuery<TurnWaitQuery>,
) -> Result<axum::Json<Vec<Handoff>>, ApiError> {
    let store = &app.store;
    let handoffs = turn_settled(
        &app,
        id,
        &q,
        |turn| async move { Ok(store.turn_handoffs(id, turn).await?) },
        |h: &Handoff| (h.status == HandoffStatus::Pending).then_some(h.expires_at),
    )
    .await?;
    Ok(axum::Json(handoffs))
}

/// Query of the handoff listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct HandoffsQuery {
    /// Only this pool.
    pool: Option<String>,
    /// Only those this (caller's) thread made.
    #[param(value_type = Option<uuid::Uuid>)]
    thread_id: Option<String>,
    /// Only the one delivered to this collaborator's session thread.
    #[param(value_type = Option<uuid::Uuid>)]
    target_thread_id: Option<String>,
    /// At most this many: 1 to 1000 (100 when left out).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// Skip this many (0 to 2^32−1).
    #[param(value_type = Option<u64>, maximum = 4294967295_i64)]
    offset: Option<u32>,
}

/// List handoffs, oldest first: who handed what to whom, the session that did it and the reply.
#[utoipa::path(get, path = "/v1/handoffs", tag = "admin", operation_id = "list_handoffs", params(HandoffsQuery),
    responses((status = 200, body = Vec<Handoff>, description = "the handoffs that match, one page"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: a malformed thread ID, `limit` or `offset`, an unknown parameter; `invalid_text`: a name with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn list(
    _: Admin,
    State(app): State<App>,
    ApiQuery(q): ApiQuery<HandoffsQuery>,
) -> Result<axum::Json<Vec<Handoff>>, ApiError> {
    let thread = |what: &str, v: Option<String>| {
        v.map(|t| {
            t.parse::<ThreadId>().map_err(|_| ApiError::BadRequest {
                code: ErrorCode::InvalidQuery,
                message: format!("{what} `{t}` is not a UUID"),
            })
        })
        .transpose()
    };
    let filter = HandoffFilter {
        pool: q.pool,
        thread: thread("thread_id", q.thread_id)?,
        target: thread("target_thread_id", q.target_thread_id)?,
        limit: page_limit(q.limit, 100, MAX_HANDOFFS_PAGE)?,
        offset: q.offset.unwrap_or(0),
    };
    Ok(axum::Json(app.store.list_handoffs(filter).await?))
}
