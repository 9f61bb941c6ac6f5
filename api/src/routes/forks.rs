//! Going back in a conversation (issue 41). Admin routes: a thread's ended turns, a fork at one
//! of them, a rewind to one (queued for the runner), the files a turn changed. Runner routes
//! (its own thread's runner token, or the admin): the end of a turn a rewind goes back to, and
//! the content-addressed objects of workspace snapshots, sent as raw bytes.

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    ErrorBody, ErrorCode, ForkRequest, ForkResponse, MAX_STORED_INT, MissingObjectsRequest,
    MissingObjectsResponse, RewindQueued, RewindRequest, TurnDiff, TurnList, TurnPoint,
};
use ninetrix_proto::snapshots::{MAX_OBJECT_BYTES, ObjectId, ObjectKind};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::access::{Admin, ThreadCaller};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, OctetStream};
use crate::state::App;

/// An object's bytes, as sent and answered (`application/octet-stream`).
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
pub(crate) struct ObjectBytes(#[allow(dead_code)] Vec<u8>);

/// The routes of this module; the object upload's body may be as large as an object.
pub(crate) fn routes() -> OpenApiRouter<App> {
    let upload = OpenApiRouter::new()
        .routes(routes!(put_object))
        .layer(DefaultBodyLimit::max(MAX_OBJECT_BYTES as usize));
    OpenApiRouter::new()
        .routes(routes!(turns))
        .routes(routes!(fork))
        .routes(routes!(rewind))
        .routes(routes!(diff))
        .routes(routes!(turn_point))
        .routes(routes!(missing_objects))
        .routes(routes!(get_object))
        .merge(upload)
}

/// A turn from the path, within what the store holds.
fn turn_param(turn: u64) -> Result<u64, ApiError> {
    if turn > MAX_STORED_INT {
        return Err(ApiError::BadRequest {
            code: ErrorCode::InvalidPath,
            message: format!("turn {turn} is larger than {MAX_STORED_INT}"),
        });
    }
    Ok(turn)
}

/// A turn from the body: 1 or more (turns count from 1).
fn turn_field(field: &str, turn: u64) -> Result<u64, ApiError> {
    if turn == 0 {
        return Err(ApiError::Rejected {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: ErrorCode::InvalidBody,
            message: format!(
                "`{field}` is a turn, 1 or more (GET /v1/threads/{{thread_id}}/turns lists them)"
            ),
        });
    }
    Ok(turn)
}

/// An object ID from the path.
fn object_param(raw: &str) -> Result<ObjectId, ApiError> {
    raw.parse().map_err(|message| ApiError::BadRequest {
        code: ErrorCode::InvalidPath,
        message,
    })
}

/// Every turn the thread ended, oldest first — for a fork, its parent's turns up to the fork
/// point too (`thread_id` says whose) — whether each is part of the current history, its
/// workspace snapshot, where the thread was forked from and the forks made from it.
#[utoipa::path(get, path = "/v1/threads/{thread_id}/turns", tag = "admin",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    responses((status = 200, body = TurnList, description = "the thread's ended turns, its origin and its forks"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn turns(
    _: Admin,
    State(app): State<App>,
    ApiPath(id): ApiPath<ThreadId>,
) -> Result<axum::Json<TurnList>, ApiError> {
    Ok(axum::Json(app.store.turns(id).await?))
}

/// Fork the thread at the end of one of its turns: a new session of the same agent whose
/// history is this one's up to there (shared in the store, not copied), with the turn's state and
/// workspace snapshot, and a system note naming the effects of this thread's later turns that the
/// fork does not undo.
#[utoipa::path(post, path = "/v1/threads/{thread_id}/fork", tag = "admin",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread to fork")),
    request_body = ForkRequest,
    responses((status = 201, body = ForkResponse, description = "the fork: its thread, session key, history and snapshot"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread, or `at_turn` did not end (the message names the turns that did)"),
        (status = 409, body = ErrorBody, description = "`snapshot_dropped`: the turn's workspace snapshot was dropped (`keep_turns`), nothing done; `key_reused`: the agent has a session with that key (the message names its thread)"),
        (status = 422, body = ErrorBody, description = "`unlabelled_thread`: the thread has no pool and agent; `invalid_body`: `at_turn` 0, a session key that breaks the rules of session keys"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn fork(
    _: Admin,
    State(app): State<App>,
    ApiPath(id): ApiPath<ThreadId>,
    ApiJson(request): ApiJson<ForkRequest>,
) -> Result<(StatusCode, axum::Json<ForkResponse>), ApiError> {
    turn_field("at_turn", request.at_turn)?;
    let (response, changed) = app.store.fork(id, request).await?;
    for thread in changed {
        app.hub.notify(thread);
    }
    tracing::info!(thread_id = %id, fork = %response.thread_id, at_turn = response.forked_from.at_turn, "thread forked");
    Ok((StatusCode::CREATED, axum::Json(response)))
}

/// Rewind the thread to the end of one of its ended turns: its conversation and, when the turn
/// has a snapshot, its workspace. Queued in its inbox as a `rewind` control, carried out by its
/// runner between turns (`rewound` or `rewind_failed` in its events says how it went). Refused
/// while a turn runs or messages wait.
#[utoipa::path(post, path = "/v1/threads/{thread_id}/rewind", tag = "admin",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    request_body = RewindRequest,
    responses((status = 201, body = RewindQueued, description = "queued for the runner"),
        (status = 200, body = RewindQueued, description = "duplicate: a rewind with this `dedupe_key` was queued before, nothing added"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread, or `to_turn` did not end (the message names the turns that did)"),
        (status = 409, body = ErrorBody, description = "`busy`: a turn runs or messages wait (`running` names the turn), nothing queued; `snapshot_dropped`: the turn's workspace snapshot was dropped; `key_reused`: the `dedupe_key` is stored with another message"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: `to_turn` 0, wrong types, unknown fields; `invalid_key`: a malformed `dedupe_key`"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn rewind(
    _: Admin,
    State(app): State<App>,
    ApiPath(id): ApiPath<ThreadId>,
    ApiJson(request): ApiJson<RewindRequest>,
) -> Result<Response, ApiError> {
    turn_field("to_turn", request.to_turn)?;
    let (queued, wake) = app.store.rewind(id, request).await?;
    if queued.duplicate {
        return Ok((StatusCode::OK, axum::Json(queued)).into_response());
    }
    app.hub.wake(&wake);
    Ok((StatusCode::CREATED, axum::Json(queued)).into_response())
}

/// The files turn `turn` changed: its snapshot against the snapshot of the nearest earlier turn
/// on the same history that has one (every file is added when there is none). At most 10,000
/// changes (`truncated` says when there were more).
#[utoipa::path(get, path = "/v1/threads/{thread_id}/turns/{turn}/diff", tag = "admin",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"),
        ("turn" = u64, Path, description = "The turn", maximum = 9223372036854775807_i64)),
    responses((status = 200, body = TurnDiff, description = "the files that differ, in path order"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread, the turn did not end, or it has no snapshot (dropped, or none taken — the message says which)"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn diff(
    _: Admin,
    State(app): State<App>,
    ApiPath((id, turn)): ApiPath<(ThreadId, u64)>,
) -> Result<axum::Json<TurnDiff>, ApiError> {
    Ok(axum::Json(
        app.store.turn_diff(id, turn_param(turn)?).await?,
    ))
}

/// What a rewind to turn `turn` goes back to: the history and state at its end (from whichever
/// thread of a fork's chain ran it), its workspace snapshot, and the effects of this thread's
/// later turns that going back does not undo, oldest first.
#[utoipa::path(get, path = "/v1/runners/threads/{thread_id}/turns/{turn}", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"),
        ("turn" = u64, Path, description = "The turn", maximum = 9223372036854775807_i64)),
    responses((status = 200, body = TurnPoint, description = "the end of the turn"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread, or the turn did not end (the message names the turns that did)"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn turn_point(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiPath((_, turn)): ApiPath<(ThreadId, u64)>,
) -> Result<axum::Json<TurnPoint>, ApiError> {
    Ok(axum::Json(
        app.store.turn_point(id, turn_param(turn)?).await?,
    ))
}

/// Which of these objects the thread's pool does not store (at most 10,000 IDs), in the order
/// asked: what a snapshot still has to upload.
#[utoipa::path(post, path = "/v1/runners/threads/{thread_id}/objects/missing", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    request_body = MissingObjectsRequest,
    responses((status = 200, body = MissingObjectsResponse, description = "the IDs not stored"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 422, body = ErrorBody, description = "`too_many`: more than 10,000 IDs; `invalid_body`: an ID that is not 64 lowercase hex digits, unknown fields"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn missing_objects(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiJson(request): ApiJson<MissingObjectsRequest>,
) -> Result<axum::Json<MissingObjectsResponse>, ApiError> {
    Ok(axum::Json(
        app.store.missing_objects(id, request.ids).await?,
    ))
}

/// Query of an object upload.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct KindQuery {
    /// What the object is: a file's bytes (`blob`) or a tree node (`node`).
    #[param(inline)]
    kind: ObjectKind,
}

/// Store one object of the thread's pool: its ID is the SHA-256 of the body; a node's files and
/// children must be stored first. Storing one again changes nothing.
#[utoipa::path(put, path = "/v1/runners/threads/{thread_id}/objects/{object}", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"),
        ("object" = String, Path, description = "The object's ID: the lowercase hex SHA-256 of its bytes", pattern = "^[0-9a-f]{64}$"),
        KindQuery),
    request_body(content = ObjectBytes, content_type = "application/octet-stream", description = "The object's bytes (at most 32 MiB); a node is its JSON"),
    responses((status = 204, description = "stored (or stored before)"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 409, body = ErrorBody, description = "`missing_objects`: a node refers to objects the pool does not store (the message names the first)"),
        (status = 413, body = ErrorBody, description = "`too_large`: more than 32 MiB"),
        (status = 415, body = ErrorBody, description = "`unsupported_media_type`: not sent as `application/octet-stream`"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: the body's SHA-256 is not the ID (both named), a node that does not decode or names a path outside the workspace"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn put_object(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiPath((_, object)): ApiPath<(ThreadId, String)>,
    ApiQuery(query): ApiQuery<KindQuery>,
    OctetStream(bytes): OctetStream,
) -> Result<StatusCode, ApiError> {
    let object = object_param(&object)?;
    app.store
        .put_object(id, object, query.kind, bytes.to_vec())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// One object of the thread's pool, as stored.
#[utoipa::path(get, path = "/v1/runners/threads/{thread_id}/objects/{object}", tag = "runner",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"),
        ("object" = String, Path, description = "The object's ID", pattern = "^[0-9a-f]{64}$")),
    responses((status = 200, body = ObjectBytes, content_type = "application/octet-stream", description = "the object's bytes"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread, or the pool does not store the object"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn get_object(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiPath((_, object)): ApiPath<(ThreadId, String)>,
) -> Result<Response, ApiError> {
    let object = object_param(&object)?;
    match app.store.get_object(id, object.clone()).await? {
        Some(bytes) => Ok((
            [(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static("application/octet-stream"),
            )],
            bytes,
        )
            .into_response()),
        None => Err(ApiError::NotFound(format!(
            "object {object} is not stored for this thread's pool"
        ))),
    }
}
