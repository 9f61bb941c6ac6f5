//! Replays (issue 42), admin only: `POST /v1/threads/{id}/replays` makes (or finds again) the
//! scratch thread that re-runs recorded turns of a thread against a candidate agent, in one
//! transaction that writes nothing on the source; `GET /v1/threads/{id}/turns/{n}/record` is one
//! turn of any thread as it happened (the tool oracle a replay answers from and what its report
//! compares against).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    ErrorBody, ErrorCode, MAX_CANDIDATE_CHARS, MAX_STORED_INT, RecordedTurn, ReplayCreated,
    ReplayRequest,
};

use crate::access::Admin;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::faults::crash;
use crate::state::App;

/// The longest replay key (characters).
pub(crate) const MAX_KEY_CHARS: usize = 128;

/// A refusal of the body's field `field`: 400 `invalid_body`, saying what it must be.
pub(crate) fn bad_field(field: &str, why: String) -> ApiError {
    ApiError::BadRequest {
        code: ErrorCode::InvalidBody,
        message: format!("`{field}` {why}"),
    }
}

/// Checks a key (1 to 128 characters, no control characters).
pub(crate) fn check_key(field: &str, key: &str) -> Result<(), ApiError> {
    let n = key.chars().count();
    if n == 0 || n > MAX_KEY_CHARS {
        return Err(bad_field(
            field,
            format!("is {n} characters; it must be 1 to {MAX_KEY_CHARS}"),
        ));
    }
    if let Some(c) = ninetrix_proto::text::first_unsafe(key) {
        return Err(bad_field(
            field,
            format!(
                "contains {:?} (U+{:04X}); use printable characters",
                c, c as u32
            ),
        ));
    }
    Ok(())
}

/// Checks a candidate's description (at most 200 characters, no control characters).
pub(crate) fn check_candidate(field: &str, text: &str) -> Result<(), ApiError> {
    let n = text.chars().count();
    if n > MAX_CANDIDATE_CHARS {
        return Err(bad_field(
            field,
            format!("is {n} characters; it may be at most {MAX_CANDIDATE_CHARS}"),
        ));
    }
    if let Some(c) = ninetrix_proto::text::first_unsafe(text) {
        return Err(bad_field(
            field,
            format!(
                "contains {:?} (U+{:04X}); describe the candidate on one line of printable characters",
                c, c as u32
            ),
        ));
    }
    Ok(())
}

/// Checks a replay request's fields.
fn check_request(req: &ReplayRequest) -> Result<(), ApiError> {
    if req.from_turn == 0 {
        return Err(bad_field(
            "from_turn",
            "is 0; turns count from 1".to_string(),
        ));
    }
    if req.from_turn > req.to_turn {
        return Err(bad_field(
            "from_turn",
            format!(
                "({}) is after `to_turn` ({}): give a range first..=last",
                req.from_turn, req.to_turn
            ),
        ));
    }
    check_key("key", &req.key)?;
    check_candidate("candidate", &req.candidate)
}

/// Make the replay of turns `from_turn..=to_turn` of the thread: a scratch thread of the same
/// pool and agent (no replica, no session: no runner of the pool serves it, no message reaches
/// it) whose history is this one's up to the end of the live turn before the first replayed one
/// (shared, not copied) and whose inbox holds the replayed turns' inputs, one message per turn,
/// in order. Nothing is written to this thread. The same key finds the replay made before.
#[utoipa::path(post, path = "/v1/threads/{thread_id}/replays", tag = "admin",
    params(("thread_id" = uuid::Uuid, Path, description = "The recorded thread")),
    request_body = ReplayRequest,
    responses((status = 201, body = ReplayCreated, description = "the replay, made now"),
        (status = 200, body = ReplayCreated, description = "the replay made before with this key (`existing: true`), nothing written"),
        (status = 400, body = ErrorBody, description = "`invalid_body`: `from_turn` 0 or after `to_turn`, a key not 1 to 128 characters, a candidate over 200 characters or with control characters (the message names the field)"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread, or it ended no turn in the range on its current branch (the message names the turns it ended)"),
        (status = 409, body = ErrorBody, description = "`key_reused`: the key names a replay of another range or candidate"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown fields; `unlabelled_thread`: the thread has no pool and agent"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn create_replay(
    _: Admin,
    State(app): State<App>,
    ApiPath(id): ApiPath<ThreadId>,
    ApiJson(request): ApiJson<ReplayRequest>,
) -> Result<Response, ApiError> {
    check_request(&request)?;
    let created = app.store.create_replay(id, request, crash).await?;
    if created.existing {
        return Ok((StatusCode::OK, axum::Json(created)).into_response());
    }
    crash("replay_after_commit");
    app.hub.notify(created.replay);
    tracing::info!(thread_id = %id, replay = %created.replay, turns = created.turns.len(), "replay made");
    Ok((StatusCode::CREATED, axum::Json(created)).into_response())
}

/// Turn `turn` of the thread as it happened: its input, its messages, its tool calls each with
/// the result the model got, the ledger's effect class and a person's decision, its answer, what
/// it spent, how long it took and the model that answered. A fork's inherited turn is read from
/// the thread that ran it; a turn a rewind left has `live: false`.
#[utoipa::path(get, path = "/v1/threads/{thread_id}/turns/{turn}/record", tag = "admin",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"),
        ("turn" = u64, Path, description = "The turn", maximum = 9223372036854775807_i64)),
    responses((status = 200, body = RecordedTurn, description = "the turn as recorded"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread, or the turn did not end (the message names the turns that did)"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn record_turn(
    _: Admin,
    State(app): State<App>,
    ApiPath((id, turn)): ApiPath<(ThreadId, u64)>,
) -> Result<axum::Json<RecordedTurn>, ApiError> {
    if turn > MAX_STORED_INT {
        return Err(ApiError::BadRequest {
            code: ErrorCode::InvalidPath,
            message: format!("turn {turn} is larger than {MAX_STORED_INT}"),
        });
    }
    Ok(axum::Json(app.store.recorded_turn(id, turn).await?))
}
