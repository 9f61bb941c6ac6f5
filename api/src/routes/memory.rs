//! Memories (`/v1/runners/threads/{id}/memory`, `/v1/memories`): the runner's `memory` tool runs
//! one command per call here, and people list, read, edit and delete the files (`ninetrix memory`,
//! the console), and `down --purge` deletes a pool's.
//!
//! Whose memory a runner's command touches is its thread's: the pool, agent and session are the
//! labels the thread was created with (what its runner token carries), never the request's — so a
//! runner of pool A cannot reach pool B's memory, nor one session another's. The admin names the
//! memory in the query.

use axum::extract::State;
use axum::http::StatusCode;
use ninetrix_proto::api::{
    ErrorBody, ErrorCode, MAX_STORED_INT, MEMORY_ROOT, MemoriesDeleted, MemoryCommand, MemoryFile,
    MemoryFileContent, MemoryFilePath, MemoryOpRequest, MemoryOpResult, MemoryScope, MemoryWrite,
    check_op_key, memory_path,
};
use serde::Deserialize;

use crate::access::{Admin, ThreadCaller};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiQuery, page_limit};
use crate::memory_rules::Refusal;
use crate::state::App;
use crate::store::{MemoryFilter, MemorySpace};

/// Most memory files one listing returns.
const MAX_MEMORIES_PAGE: u32 = 1000;

/// Run one command of the runner's `memory` tool on the thread's agent's (or session's) memory.
/// A command that changes the memory is applied once per `op_key`: the same key again answers
/// the first result (`replayed`) and changes nothing — what makes a call the runner repeats after
/// a crash safe. A command that fails (a bad path, a missing file, `old_str` not once, a limit)
/// is a 200 with `is_error`: its text is for the model.
#[utoipa::path(post, path = "/v1/runners/threads/{thread_id}/memory", tag = "runner", operation_id = "memory_op",
    params(("thread_id" = uuid::Uuid, Path, description = "The caller's thread")),
    request_body = MemoryOpRequest,
    responses((status = 200, body = MemoryOpResult, description = "the command's result (`is_error`: it failed and changed nothing)"),
        (status = 409, body = ErrorBody, description = "`fenced`: another runner claimed the thread; `key_reused`: the `op_key` was used for another command"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: a malformed command; `invalid_key`: an `op_key` that is not 1 to 64 characters without control characters or `:`; `unlabelled_thread`: the thread has no pool and agent; `out_of_range`: a `view` with an epoch past 9223372036854775807"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn op(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiJson(request): ApiJson<MemoryOpRequest>,
) -> Result<axum::Json<MemoryOpResult>, ApiError> {
    check_op_key(&request.op_key).map_err(|message| ApiError::Rejected {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        code: ErrorCode::InvalidKey,
        message,
    })?;
    let result = if request.op.reads_only() {
        // A view is not fenced, so nothing else refuses an epoch no claim can give (a write's
        // is simply stale: 409 `fenced`).
        if request.epoch > MAX_STORED_INT {
            return Err(ApiError::Rejected {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                code: ErrorCode::OutOfRange,
                message: format!(
                    "epoch {} is larger than {MAX_STORED_INT}: no claim gives it",
                    request.epoch
                ),
            });
        }
        app.store.memory_view(id, request).await?
    } else {
        let command = request.op.name();
        let result = app.store.memory_op(id, request).await?;
        if !result.replayed && !result.is_error {
            tracing::info!(thread_id = %id, command, "memory changed");
        }
        result
    };
    Ok(axum::Json(result))
}

/// Query of the memory listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct MemoriesQuery {
    /// The pool (a name as in the agentfile).
    #[param(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")]
    pool: String,
    /// Only this agent's (a name as in the agentfile).
    #[param(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")]
    agent: Option<String>,
    /// Only this scope's (`agent` or `session`).
    #[param(value_type = Option<MemoryScope>)]
    scope: Option<MemoryScope>,
    /// Only this session's (scope `session`; a thread that is not a session's: its ID): 1 to
    /// 200 characters, none of them a control, bidirectional-control or line-separator character.
    #[param(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]+$"
    )]
    session: Option<String>,
    /// At most this many: 1 to 1000 (1000 when left out).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// Skip this many (0 to 2^32−1).
    #[param(value_type = Option<u64>, maximum = 4294967295_i64)]
    offset: Option<u32>,
}

/// A session key in the query (400 `invalid_query`): the rule of `POST /v1/sessions`.
fn check_session(key: &str) -> Result<(), ApiError> {
    ninetrix_proto::sessions::check_key(key).map_err(|e| ApiError::BadRequest {
        code: ErrorCode::InvalidQuery,
        message: format!("`session`: {e}"),
    })
}

/// A pool or agent name in the query (400 `invalid_query`).
fn check_name(what: &str, name: &str) -> Result<(), ApiError> {
    crate::names::check(what, name).map_err(|message| ApiError::BadRequest {
        code: ErrorCode::InvalidQuery,
        message: format!("the {message}"),
    })
}

/// List memory files (path, size, last write; not their content), by agent, scope, session and
/// path.
#[utoipa::path(get, path = "/v1/memories", tag = "admin", operation_id = "list_memories", params(MemoriesQuery),
    responses((status = 200, body = Vec<MemoryFile>, description = "the memory files that match, one page"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: a missing `pool`, a malformed name, scope, `limit` or `offset`, an unknown parameter; `invalid_text`: a value with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn list(
    _: Admin,
    State(app): State<App>,
    ApiQuery(q): ApiQuery<MemoriesQuery>,
) -> Result<axum::Json<Vec<MemoryFile>>, ApiError> {
    check_name("pool", &q.pool)?;
    if let Some(agent) = &q.agent {
        check_name("agent", agent)?;
    }
    if let Some(key) = &q.session {
        check_session(key)?;
    }
    let filter = MemoryFilter {
        pool: q.pool,
        agent: q.agent,
        scope: q.scope,
        session: q.session,
        limit: page_limit(q.limit, MAX_MEMORIES_PAGE, MAX_MEMORIES_PAGE)?,
        offset: q.offset.unwrap_or(0),
    };
    Ok(axum::Json(app.store.list_memories(filter).await?))
}

/// Query that names one memory file.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct MemoryFileQuery {
    /// The pool (a name as in the agentfile).
    #[param(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")]
    pool: String,
    /// The agent (a name as in the agentfile).
    #[param(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")]
    agent: String,
    /// A session's memory (scope `session`): its key — for a thread that is not a session's, its
    /// ID. Left out: the agent's own memory (scope `agent`).
    #[param(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]+$"
    )]
    session: Option<String>,
    /// The file (a directory, for a deletion) under `/memories`: `/memories/NAME/…`.
    #[param(value_type = MemoryFilePath, inline)]
    path: String,
}

impl MemoryFileQuery {
    /// The memory and the canonical path, or a 400 naming what is wrong.
    fn target(self) -> Result<(MemorySpace, String), ApiError> {
        check_name("pool", &self.pool)?;
        check_name("agent", &self.agent)?;
        let (scope, session) = match self.session {
            Some(key) => {
                check_session(&key)?;
                (MemoryScope::Session, key)
            }
            None => (MemoryScope::Agent, String::new()),
        };
        let path = memory_path(&self.path).map_err(|e| ApiError::BadRequest {
            code: ErrorCode::InvalidQuery,
            message: e.0,
        })?;
        if path == MEMORY_ROOT {
            return Err(ApiError::BadRequest {
                code: ErrorCode::InvalidQuery,
                message: format!(
                    "`path` {MEMORY_ROOT} is the memory directory itself: name a file or directory under it (`DELETE /v1/memories` deletes whole memories)"
                ),
            });
        }
        Ok((
            MemorySpace {
                pool: self.pool,
                agent: self.agent,
                scope,
                session,
            },
            path,
        ))
    }
}

/// Who a memory is, for messages: `agent a's memory in pool p` (or session k's).
fn whose(space: &MemorySpace) -> String {
    match space.scope {
        MemoryScope::Agent => format!("agent {}'s memory in pool {}", space.agent, space.pool),
        MemoryScope::Session => format!(
            "the memory of session {:?} of agent {} in pool {}",
            space.session, space.agent, space.pool
        ),
    }
}

/// A refused admin edit as the error it answers.
fn refused(refusal: Refusal, text: String, space: &MemorySpace) -> ApiError {
    let text = text.strip_prefix("Error: ").unwrap_or(&text).to_string();
    match refusal {
        Refusal::NotFound => ApiError::NotFound(format!("{text} (in {})", whose(space))),
        Refusal::Limit => ApiError::Rejected {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: ErrorCode::MemoryLimit,
            message: text,
        },
        Refusal::Path => ApiError::BadRequest {
            code: ErrorCode::InvalidQuery,
            message: text,
        },
        Refusal::Edit => ApiError::Rejected {
            status: StatusCode::CONFLICT,
            code: ErrorCode::MemoryConflict,
            message: text,
        },
    }
}

/// One memory file with its content.
#[utoipa::path(get, path = "/v1/memories/file", tag = "admin", operation_id = "memory_file", params(MemoryFileQuery),
    responses((status = 200, body = MemoryFileContent, description = "the file"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such file in that memory"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: a missing or malformed name, session or path; `invalid_text`: a value with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn get_file(
    _: Admin,
    State(app): State<App>,
    ApiQuery(q): ApiQuery<MemoryFileQuery>,
) -> Result<axum::Json<MemoryFileContent>, ApiError> {
    let (space, path) = q.target()?;
    match app.store.memory_file(space.clone(), path.clone()).await? {
        Some(file) => Ok(axum::Json(file)),
        None => Err(ApiError::NotFound(format!(
            "no memory file {path} in {} (`ninetrix memory ls` lists them)",
            whose(&space)
        ))),
    }
}

/// Create or overwrite a memory file (a person's edit; it needs no op key).
#[utoipa::path(put, path = "/v1/memories/file", tag = "admin", operation_id = "put_memory_file", params(MemoryFileQuery),
    request_body = MemoryWrite,
    responses((status = 200, body = MemoryFile, description = "written"),
        (status = 409, body = ErrorBody, description = "`memory_conflict`: the path is a directory, or a file is where a directory of it would be"),
        (status = 422, body = ErrorBody, description = "`memory_limit`: the file over 100 KiB, or the memory over 1 MiB or 1,000 files; `invalid_body`: a malformed body"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: a missing or malformed name, session or path (`/memories` itself is a directory); `invalid_text`: a value with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn put_file(
    _: Admin,
    State(app): State<App>,
    ApiQuery(q): ApiQuery<MemoryFileQuery>,
    ApiJson(write): ApiJson<MemoryWrite>,
) -> Result<axum::Json<MemoryFile>, ApiError> {
    let (space, path) = q.target()?;
    let command = MemoryCommand::Create {
        path: path.clone(),
        file_text: write.content,
    };
    let outcome = app.store.edit_memory(space.clone(), command).await?;
    if let Some(refusal) = outcome.refusal {
        return Err(refused(refusal, outcome.text, &space));
    }
    match app.store.memory_file(space.clone(), path.clone()).await? {
        Some(file) => Ok(axum::Json(file.file)),
        // Deleted again between the write and this read.
        None => Err(ApiError::NotFound(format!(
            "memory file {path} was deleted just after it was written"
        ))),
    }
}

/// Delete a memory file, or a directory with every file under it.
#[utoipa::path(delete, path = "/v1/memories/file", tag = "admin", operation_id = "delete_memory_file", params(MemoryFileQuery),
    responses((status = 200, body = MemoriesDeleted, description = "deleted"),
        (status = 404, body = ErrorBody, description = "`not_found`: nothing at that path in that memory"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: a missing or malformed name, session or path (`/memories` itself is not deleted: `DELETE /v1/memories` is); `invalid_text`: a value with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn delete_file(
    _: Admin,
    State(app): State<App>,
    ApiQuery(q): ApiQuery<MemoryFileQuery>,
) -> Result<axum::Json<MemoriesDeleted>, ApiError> {
    let (space, path) = q.target()?;
    let outcome = app
        .store
        .edit_memory(space.clone(), MemoryCommand::Delete { path })
        .await?;
    if let Some(refusal) = outcome.refusal {
        return Err(refused(refusal, outcome.text, &space));
    }
    Ok(axum::Json(MemoriesDeleted {
        files: outcome.changes.len() as u64,
    }))
}

/// Query of the deletion of a pool's memories.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct PurgeMemoriesQuery {
    /// The pool (a name as in the agentfile).
    #[param(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")]
    pool: String,
    /// Only this agent's (every scope and session of it).
    #[param(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")]
    agent: Option<String>,
}

/// Delete every memory of a pool (or of one agent of it) — every scope and session — in one
/// transaction (`ninetrix down --purge` does).
#[utoipa::path(delete, path = "/v1/memories", tag = "admin", operation_id = "purge_memories", params(PurgeMemoriesQuery),
    responses((status = 200, body = MemoriesDeleted, description = "deleted (possibly none)"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: a missing `pool`, a malformed name, an unknown parameter; `invalid_text`: a value with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn purge(
    _: Admin,
    State(app): State<App>,
    ApiQuery(q): ApiQuery<PurgeMemoriesQuery>,
) -> Result<axum::Json<MemoriesDeleted>, ApiError> {
    check_name("pool", &q.pool)?;
    if let Some(agent) = &q.agent {
        check_name("agent", agent)?;
    }
    let files = app.store.purge_memories(q.pool.clone(), q.agent).await?;
    tracing::info!(pool = %q.pool, files, "memories purged");
    Ok(axum::Json(MemoriesDeleted { files }))
}
