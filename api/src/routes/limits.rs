//! Pool-wide model limits and budgets over HTTP (issue 38): a runner's lease before each model
//! call (`POST /v1/runners/threads/{thread_id}/model-leases`, held in its limiter's queue up to
//! `wait_ms`), its renewal while the call runs and its release when it ends (with what it used,
//! cost, or a provider's 429); and what a thread, its agent and its pool have spent
//! (`GET /v1/threads/{thread_id}/spend`, admin). The rules are `limit_rules`', the storage
//! `store/ops/limits.rs`', the waiting `lease_queue`'s.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{TimeZone, Utc};
use ninetrix_proto::api::{
    ErrorBody, ErrorCode, LeaseRelease, LeaseRenewed, LeaseRequest, LeaseResponse, SlotWait, Spend,
};
use ninetrix_proto::{LeaseId, ThreadId};
use serde::Deserialize;
use tokio::time::Instant;

use crate::access::{Admin, LabelledThreadCaller, ThreadCaller};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::faults::crash;
use crate::lease_queue::Place;
use crate::limit_rules::{self, LimiterKey};
use crate::state::App;
use crate::store::{LeaseOutcome, StoreError};

/// How often the head of a queue looks again on its own when another API process may free its
/// limiter (Postgres): their releases do not wake this one.
const RECHECK_ACROSS_REPLICAS: Duration = Duration::from_millis(250);

fn unprocessable(message: String) -> ApiError {
    ApiError::Rejected {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        code: ErrorCode::InvalidBody,
        message,
    }
}

/// A permit for one model call against the pool-wide limiter the request names (scoped by the
/// thread's pool label): `granted` (release it when the call ends, renew it while it runs),
/// `wait` (no slot within `wait_ms`, which the request is held for at most — and at most the
/// server's `--max-wait`; ask again), or `over_budget` (a budget of the thread, its agent's day or
/// its pool's day has no room: do not call the model). Budgets are checked before limits, so a
/// spent budget never waits. Requests of one limiter wait in arrival order in each API process.
#[utoipa::path(post, path = "/v1/runners/threads/{thread_id}/model-leases", tag = "runner",
    operation_id = "lease_model",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread")),
    request_body = LeaseRequest,
    responses((status = 200, body = LeaseResponse, description = "`granted`, `wait` (why, and when to ask again) or `over_budget` (which budget, and by how much)"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 409, body = ErrorBody, description = "`fenced`: another runner claimed the thread (its epoch is newer)"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values, a limiter or provider name that is empty, too long or holds a control character, a budget that is negative, a `timezone` the IANA database does not name (the message names the field); `out_of_range`: a number the store cannot hold; `invalid_text`: U+0000 in a text field"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn lease(
    LabelledThreadCaller { id, token_labels }: LabelledThreadCaller,
    State(app): State<App>,
    ApiJson(request): ApiJson<LeaseRequest>,
) -> Result<axum::Json<LeaseResponse>, ApiError> {
    limit_rules::check_request(&request).map_err(unprocessable)?;
    // The queue is the limiter's in the thread's pool: the runner token carries the thread's
    // labels; the admin's request reads them.
    let pool = match token_labels {
        Some(labels) => labels.pool,
        None => {
            app.store
                .thread(id)
                .await?
                .ok_or_else(|| ApiError::NotFound(format!("thread {id} not found")))?
                .labels
                .pool
        }
    };
    let key = LimiterKey {
        pool: pool.unwrap_or_default(),
        limiter: request.limiter.clone(),
    };
    let answer = lease_in_turn(&app, id, &request, key).await?;
    Ok(axum::Json(answer))
}

/// Waits in the limiter's queue (see `lease_queue`) until this request's look at the store
/// grants a lease or finds a budget spent, or its wait ends. A request that finds nobody of its
/// queue waiting looks at once, whatever its place.
async fn lease_in_turn(
    app: &App,
    id: ThreadId,
    request: &LeaseRequest,
    key: LimiterKey,
) -> Result<LeaseResponse, ApiError> {
    let deadline = Instant::now() + Duration::from_millis(request.wait_ms).min(app.max_wait);
    let place = app.leases.join(key);
    let mut first = true;
    loop {
        let head = place.is_head();
        // Anyone but the head looks at the store only on arrival, and only while nobody of the
        // queue waits for room.
        let looks = head || (first && !place.blocked());
        if !looks && first {
            // A spent budget never waits its turn, nor a stale epoch or a purged thread.
            if let Some(spent) = app.store.lease_refusal(id, request.clone()).await? {
                return Ok(LeaseResponse::OverBudget { spent });
            }
        }
        if !looks {
            let head_changed = place.head_changed();
            tokio::pin!(head_changed);
            head_changed.as_mut().enable();
            if place.is_head() {
                continue;
            }
            if Instant::now() < deadline {
                tokio::select! {
                    () = head_changed => continue,
                    () = tokio::time::sleep_until(deadline) => {}
                    () = app.shutdown.cancelled() => {}
                }
            }
            return behind(app, id, request, &place).await;
        }
        first = false;
        // Enabled before the look, so a release committed meanwhile still wakes this request.
        let freed = place.freed();
        tokio::pin!(freed);
        freed.as_mut().enable();
        let (wait, until) = match attempt(app, id, request).await? {
            LeaseOutcome::Wait { wait, until } => (wait, until),
            done => return Ok(answer(app, done)),
        };
        place.note_wait(&wait, until);
        let now = Instant::now();
        if now >= deadline {
            return Ok(waiting(wait, until));
        }
        if !head {
            // No room: it waits its turn behind the requests that came before it.
            continue;
        }
        let mut wake = deadline.min(instant_at(until));
        if app.store.recheck_every().is_some() {
            wake = wake.min(now + RECHECK_ACROSS_REPLICAS);
        }
        tokio::select! {
            () = freed => {}
            () = tokio::time::sleep_until(wake) => {}
            () = app.shutdown.cancelled() => return Ok(waiting(wait, until)),
        }
    }
}

/// The answer of a request whose wait ended before its turn: the reason the head of its queue
/// waits (or, when the head has not looked yet, a look of its own).
async fn behind(
    app: &App,
    id: ThreadId,
    request: &LeaseRequest,
    place: &Place<'_>,
) -> Result<LeaseResponse, ApiError> {
    match place.last_wait() {
        Some((wait, until)) => Ok(waiting(wait, until)),
        None => Ok(answer(app, attempt(app, id, request).await?)),
    }
}

/// One look at the store: the lease transaction, with the kill points around a grant's commit.
async fn attempt(
    app: &App,
    id: ThreadId,
    request: &LeaseRequest,
) -> Result<LeaseOutcome, ApiError> {
    let outcome = app
        .store
        .lease(id, request.clone(), ttl_ms(app), crash)
        .await?;
    if matches!(outcome, LeaseOutcome::Granted { .. }) {
        crash("lease_after_commit");
    }
    Ok(outcome)
}

/// The lease time in milliseconds.
fn ttl_ms(app: &App) -> i64 {
    i64::try_from(app.lease_ttl.as_millis()).unwrap_or(i64::MAX)
}

/// The answer for an outcome.
fn answer(app: &App, outcome: LeaseOutcome) -> LeaseResponse {
    match outcome {
        LeaseOutcome::Granted { lease, expires_at } => LeaseResponse::Granted {
            lease_id: lease,
            expires_at: time(expires_at),
            ttl_ms: u64::try_from(ttl_ms(app)).unwrap_or(0),
        },
        LeaseOutcome::Wait { wait, until } => waiting(wait, until),
        LeaseOutcome::OverBudget(spent) => LeaseResponse::OverBudget { spent },
    }
}

/// A `wait` answer: ask again by `until` (Unix ms) at the latest.
fn waiting(wait: SlotWait, until: i64) -> LeaseResponse {
    let left = until.saturating_sub(Utc::now().timestamp_millis()).max(1);
    LeaseResponse::Wait {
        wait,
        retry_in_ms: u64::try_from(left).unwrap_or(1),
    }
}

/// The instant of this process's clock at Unix ms `at` (at least a millisecond from now).
fn instant_at(at: i64) -> Instant {
    let left = at.saturating_sub(Utc::now().timestamp_millis()).max(1);
    Instant::now() + Duration::from_millis(u64::try_from(left).unwrap_or(1))
}

fn time(ms: i64) -> chrono::DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

/// Extend a live lease by the lease time (renew it every third of `ttl_ms` while the call
/// runs). A lease that expired, was released, or belongs to an older epoch is 404: the runner
/// goes on without it.
#[utoipa::path(post, path = "/v1/runners/threads/{thread_id}/model-leases/{lease_id}/renew", tag = "runner",
    operation_id = "renew_model_lease",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"),
        ("lease_id" = uuid::Uuid, Path, description = "The lease")),
    responses((status = 200, body = LeaseRenewed, description = "renewed: its new expiry"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread, or the lease is not live (expired, released, or an older epoch's)"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn renew(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiPath((_, lease)): ApiPath<(ThreadId, LeaseId)>,
) -> Result<axum::Json<LeaseRenewed>, ApiError> {
    match app.store.renew_lease(id, lease, ttl_ms(&app)).await {
        Ok(expires_at) => Ok(axum::Json(LeaseRenewed {
            expires_at: time(expires_at),
        })),
        Err(StoreError::NotFound("live lease")) => Err(ApiError::NotFound(format!(
            "lease {lease} is not live: it expired, was released, or belongs to an older epoch; go on without it"
        ))),
        Err(e) => Err(e.into()),
    }
}

/// The call ended: what it used (tokens, for the window), what it cost (added to the thread's,
/// its agent's and its pool's spend) and whether the provider refused it as over its rate limit
/// (every call of the limiter then waits `retry_after_ms`). Once: a second release of the lease
/// changes nothing. A lease that expired, or that a newer epoch's claim freed, still records
/// what its call used.
#[utoipa::path(post, path = "/v1/runners/threads/{thread_id}/model-leases/{lease_id}/release", tag = "runner",
    operation_id = "release_model_lease",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"),
        ("lease_id" = uuid::Uuid, Path, description = "The lease")),
    request_body = LeaseRelease,
    responses((status = 204, description = "released (now, or before: nothing changed)"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread, or no such lease of it (never granted, or ended more than an hour ago)"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"),
        (status = 422, body = ErrorBody, description = "`invalid_body`: wrong types, unknown or missing fields, out-of-range values, a `cost_usd` that is negative or above 1,000,000; `out_of_range`: a number the store cannot hold"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: neither the admin token nor the runner token of this thread")),
    security(("bearer" = [])))]
pub(crate) async fn release(
    ThreadCaller(id): ThreadCaller,
    State(app): State<App>,
    ApiPath((_, lease)): ApiPath<(ThreadId, LeaseId)>,
    ApiJson(release): ApiJson<LeaseRelease>,
) -> Result<StatusCode, ApiError> {
    limit_rules::check_release(&release).map_err(unprocessable)?;
    let rate_limited = release.rate_limited.clone();
    match app.store.release_lease(id, lease, release, crash).await {
        Ok(Some(key)) => {
            crash("release_after_commit");
            if let Some(limited) = rate_limited {
                tracing::info!(thread_id = %id, limiter = %key.limiter, retry_after_ms = limited.retry_after_ms, "the provider rate-limited the pool: every call of the limiter backs off");
            }
            app.leases.freed(&key);
            Ok(StatusCode::NO_CONTENT)
        }
        Ok(None) => Ok(StatusCode::NO_CONTENT),
        Err(StoreError::NotFound("lease")) => Err(ApiError::NotFound(format!(
            "thread {id} has no lease {lease}: it was never granted, or it ended more than an hour ago"
        ))),
        Err(e) => Err(e.into()),
    }
}

/// Query of a thread's spend.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpendQuery {
    /// The IANA time zone whose calendar day "today" is (`UTC` when left out), as the agent's
    /// `governance.timezone`.
    #[param(min_length = 1, max_length = 64)]
    timezone: Option<String>,
}

/// What a thread's model calls cost, ever, and what its agent and its pool spent today (the
/// calendar day of `timezone`): the numbers its budgets are checked against (raises aside).
#[utoipa::path(get, path = "/v1/threads/{thread_id}/spend", tag = "admin",
    operation_id = "thread_spend",
    params(("thread_id" = uuid::Uuid, Path, description = "The thread"), SpendQuery),
    responses((status = 200, body = Spend, description = "the thread's, its agent's and its pool's spend"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: a `timezone` the IANA database does not name, an unknown parameter; `invalid_path`: a malformed thread ID"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such thread"),
        (status = 410, body = ErrorBody, description = "`purged`: the thread was purged; its ID is never used again"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn spend(
    _: Admin,
    State(app): State<App>,
    ApiPath(id): ApiPath<ThreadId>,
    ApiQuery(q): ApiQuery<SpendQuery>,
) -> Result<axum::Json<Spend>, ApiError> {
    let zone = limit_rules::zone("timezone", q.timezone.as_deref().unwrap_or("UTC")).map_err(
        |message| ApiError::BadRequest {
            code: ErrorCode::InvalidQuery,
            message,
        },
    )?;
    match app.store.spend(id, zone).await {
        Ok(spend) => Ok(axum::Json(spend)),
        Err(StoreError::NotFound(_)) => Err(ApiError::NotFound(format!("thread {id} not found"))),
        Err(e) => Err(e.into()),
    }
}
