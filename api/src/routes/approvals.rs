//! Requests to people (`/v1/approvals…`, `/v1/tokens/approver`, and the runner's
//! `/v1/runners/threads/{id}/approvals`): listing them, deciding them once, minting approver
//! tokens, and the long-poll a waiting runner sleeps on until its requests are settled.
//!
//! Who may do what: the admin token everything; an approver token lists and decides its own
//! pool's requests (another pool's look absent); a runner token only reads its own thread's
//! requests through the runner route — it never decides.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ninetrix_proto::api::{
    Approval, ApprovalStatus, ApproverTokenRequest, ApproverTokenResponse, DecisionConflict,
    DecisionRequest, ErrorBody, ErrorCode,
};
use ninetrix_proto::{ApprovalId, ThreadId};
use serde::Deserialize;

use crate::access::{Admin, ApproverCaller, ThreadCaller};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, page_limit};
use crate::routes::wait::{TurnWaitQuery, turn_settled};
use crate::state::App;
use crate::store::{ApprovalFilter, Decided};

/// Most requests one listing returns.
const MAX_APPROVALS_PAGE: u32 = 1000;
/// How long an approver token lasts when the request does not say.
/// How long a token minted for a person or a caller of a pool (approver, A2A) lasts when the
/// request does not say: 30 days.
const DEFAULT_POOL_TOKEN_TTL_SECS: u64 = 30 * 24 * 3600;

/// The checks of a request for a pool-scoped token (approver or A2A: a pool name, a holder's name,
/// a TTL of 60 s to a year, 30 days when left out) and when the token expires; `422
/// invalid_body` naming the field otherwise.
pub(super) fn pool_token_expiry(
    pool: &str,
    name: &str,
    ttl_secs: Option<u64>,
) -> Result<chrono::DateTime<chrono::Utc>, ApiError> {
    let invalid = |message: String| ApiError::Rejected {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        code: ErrorCode::InvalidBody,
        message,
    };
    crate::names::check("pool", pool).map_err(invalid)?;
    crate::names::check_person("name", name, 200).map_err(invalid)?;
    let ttl = ttl_secs.unwrap_or(DEFAULT_POOL_TOKEN_TTL_SECS);
    if !(60..=365 * 24 * 3600).contains(&ttl) {
        return Err(invalid(format!(
            "ttl_secs {ttl} is out of range: 60 to 31536000"
        )));
    }
    Ok(chrono::Utc::now() + chrono::Duration::seconds(ttl as i64))
}

/// The statuses the listing filters by: its documentation only (the handler reads the text, so an
/// unknown one gets a 400 that lists these).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum StatusFilter {
    Pending,
    Approved,
    Rejected,
    Answered,
    Expired,
    Cancelled,
    All,
}

/// Query of the approval listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalsQuery {
    /// Only this pool (an approver token sees its own pool only).
    pool: Option<String>,
    /// Only this agent.
    agent: Option<String>,
    /// Only this thread.
    #[param(value_type = Option<uuid::Uuid>)]
    thread_id: Option<String>,
    /// Only requests standing so; `pending` (undecided and not expired) when left out, `all`
    /// for every status.
    #[param(value_type = Option<StatusFilter>, inline)]
    status: Option<String>,
    /// At most this many: 1 to 1000 (100 when left out).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// Skip this many (0 to 2^32−1).
    #[param(value_type = Option<u64>, maximum = 4294967295_i64)]
    offset: Option<u32>,
}

/// List requests to people, oldest first: pending ones by default.
#[utoipa::path(get, path = "/v1/approvals", tag = "approvals", operation_id = "list_approvals", params(ApprovalsQuery),
    responses((status = 200, body = Vec<Approval>, description = "the requests that match (an approver sees its pool's only)"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: an unknown status or parameter, a malformed thread ID or `limit`; `invalid_text`: a name with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor an approver token")),
    security(("bearer" = [])))]
pub(crate) async fn list(
    approver: ApproverCaller,
    State(app): State<App>,
    ApiQuery(q): ApiQuery<ApprovalsQuery>,
) -> Result<axum::Json<Vec<Approval>>, ApiError> {
    let pool = match (approver.pool, q.pool) {
        (Some(own), Some(asked)) if own != asked => {
            return Err(ApiError::Forbidden(
                "this approver token is for another pool",
            ));
        }
        (Some(own), _) => Some(own),
        (None, asked) => asked,
    };
    let status = match q.status.as_deref() {
        None => Some(ApprovalStatus::Pending),
        Some("all") => None,
        Some(s) => Some(ApprovalStatus::parse(s).ok_or_else(|| ApiError::BadRequest {
            code: ErrorCode::InvalidQuery,
            message: format!(
                "unknown status `{s}`; use pending, approved, rejected, answered, expired, cancelled or all"
            ),
        })?),
    };
    let thread = match q.thread_id.as_deref() {
        None => None,
        Some(t) => Some(t.parse::<ThreadId>().map_err(|e| ApiError::BadRequest {
            code: ErrorCode::InvalidQuery,
            message: e.to_string(),
        })?),
    };
    let filter = ApprovalFilter {
        pool,
        agent: q.agent,
        thread,
        status,
        limit: page_limit(q.limit, 100, MAX_APPROVALS_PAGE)?,
        offset: q.offset.unwrap_or(0),
    };
    Ok(axum::Json(app.store.list_approvals(filter).await?))
}

/// The request `id` if the caller may see it (an approver of another pool gets 404).
async fn visible(app: &App, own_pool: Option<&str>, id: ApprovalId) -> Result<Approval, ApiError> {
    app.store
        .approval(id)
        .await?
        .filter(|a| own_pool.is_none_or(|p| a.labels.pool.as_deref() == Some(p)))
        .ok_or_else(|| ApiError::NotFound(format!("approval {id} not found")))
}

/// One request to a person.
#[utoipa::path(get, path = "/v1/approvals/{approval_id}", tag = "approvals",
    params(("approval_id" = uuid::Uuid, Path, description = "The request")),
    responses((status = 200, body = Approval, description = "the request"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such request (or, for an approver, none in its pool)"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor an approver token")),
    security(("bearer" = [])))]
pub(crate) async fn get(
    approver: ApproverCaller,
    State(app): State<App>,
    ApiPath(id): ApiPath<ApprovalId>,
) -> Result<axum::Json<Approval>, ApiError> {
    Ok(axum::Json(
        visible(&app, approver.pool.as_deref(), id).await?,
    ))
}

/// Decide a request: approve or reject a gated call, answer (or reject) a question. Recorded
/// once: the same decision again is 200 with the record; a different one is 409
/// `already_decided` with the decision that stands; a request past its expiry is 409
/// `approval_expired` (it counts as rejected). The runner holding the thread is woken.
#[utoipa::path(post, path = "/v1/approvals/{approval_id}/decision", tag = "approvals",
    params(("approval_id" = uuid::Uuid, Path, description = "The request")),
    request_body = DecisionRequest,
    responses((status = 200, body = Approval, description = "decided (now, or the same decision before)"),
        (status = 409, body = DecisionConflict, description = "`already_decided` (another decision stands) or `approval_expired`"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such request (or, for an approver, none in its pool)"),
        (status = 422, body = ErrorBody, description = "`invalid_decision`: a decision that does not fit the request; `invalid_body`: a malformed body"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor an approver token")),
    security(("bearer" = [])))]
pub(crate) async fn decide(
    approver: ApproverCaller,
    State(app): State<App>,
    ApiPath(id): ApiPath<ApprovalId>,
    ApiJson(decision): ApiJson<DecisionRequest>,
) -> Result<Response, ApiError> {
    let pool = approver.pool;
    let by = match &approver.name {
        Some(name) => {
            if decision.by.as_deref().is_some_and(|by| by != name) {
                return Err(ApiError::Rejected {
                    status: StatusCode::UNPROCESSABLE_ENTITY,
                    code: ErrorCode::InvalidDecision,
                    message: format!("this approver token decides as `{name}`; leave `by` out"),
                });
            }
            name.clone()
        }
        None => decision.by.clone().unwrap_or_else(|| "admin".to_string()),
    };
    let (thread, decided) = app.store.decide(id, decision, by, pool).await?;
    match decided {
        Decided::Recorded(approval) => {
            tracing::info!(approval_id = %id, thread_id = %thread, status = approval.status.as_str(), "approval decided");
            app.hub.notify(thread);
            Ok(axum::Json(approval).into_response())
        }
        Decided::Repeated(approval) => Ok(axum::Json(approval).into_response()),
        Decided::Conflict(approval) => Ok(conflict(
            ErrorCode::AlreadyDecided,
            format!(
                "approval {id} was already {}{}{}",
                approval.status.as_str(),
                approval
                    .decided_by
                    .as_deref()
                    .map(|b| format!(" by {b}"))
                    .unwrap_or_default(),
                approval
                    .reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ),
            approval,
        )),
        Decided::Expired(approval) => {
            app.hub.notify(thread);
            Ok(conflict(
                ErrorCode::ApprovalExpired,
                format!(
                    "approval {id} expired at {} undecided; it counts as rejected and the call will not run",
                    approval
                        .expires_at
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                ),
                approval,
            ))
        }
    }
}

fn conflict(code: ErrorCode, message: String, approval: Approval) -> Response {
    (
        StatusCode::CONFLICT,
        axum::Json(DecisionConflict {
            code,
            message,
            approval,
        }),
    )
        .into_response()
}

/// Mint an approver token: it lists and decides the requests of one pool, and is recorded by
/// its name as who decided. Stateless (signed with the server's secret): it works until it
/// expires or the secret changes.
#[utoipa::path(post, path = "/v1/tokens/approver", tag = "admin",
    request_body = ApproverTokenRequest,
    responses((status = 201, body = ApproverTokenResponse, description = "an approver token for the pool"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values; `invalid_text`: U+0000 in a text field (the message names it)"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn mint_approver_token(
    _: Admin,
    State(app): State<App>,
    ApiJson(request): ApiJson<ApproverTokenRequest>,
) -> Result<(StatusCode, axum::Json<ApproverTokenResponse>), ApiError> {
    let expires_at = pool_token_expiry(&request.pool, &request.name, request.ttl_secs)?;
    let token = app
        .auth
        .approver_token(&request.pool, &request.name, expires_at.timestamp());
    tracing::info!(pool = %request.pool, name = %request.name, "approver token minted");
    Ok((
        StatusCode::CREATED,
        axum::Json(ApproverTokenResponse {
            pool: request.pool,
            name: request.name,
            expires_at,
            token,
        }),
    ))
}

/// The requests to people of one turn of the runner's thread, oldest first, as they stand. With
/// `wait`, holds the request open until more of them are settled than `settled`, none is
/// pending, or the wait ends — a waiting turn costs no CPU. A request past its expiry reads as
/// `expired`.
#[utoipa::path(get, path = "/v1/runners/threads/{thread_id}/approvals", tag = "runner", operation_id = "turn_approvals",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"), TurnWaitQuery),
    responses((status = 200, body = Vec<Approval>, description = "the turn's requests to people (after waiting, when asked, for one to be settled)"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: a missing or out-of-range `turn_seq`, `wait` or `settled`, an unknown parameter; `invalid_path`: a malformed path"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"), (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn turn(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiQuery(q): ApiQuery<TurnWaitQuery>,
) -> Result<axum::Json<Vec<Approval>>, ApiError> {
    let store = &app.store;
    let approvals = turn_settled(
        &app,
        id,
        &q,
        |turn| async move { Ok(store.turn_approvals(id, turn).await?) },
        |a: &Approval| (a.status == ApprovalStatus::Pending).then_some(a.expires_at),
    )
    .await?;
    Ok(axum::Json(approvals))
}
