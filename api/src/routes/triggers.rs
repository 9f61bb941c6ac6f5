//! Triggers (issue 17): `up` registers a pool's set (`PUT /v1/pools/{pool}/triggers`), the admin
//! lists them, reads a trigger's history and runs one now; webhook senders deliver to
//! `POST /v1/hooks/{pool}/{path}` with no token — the signature under the trigger's secret is the
//! authentication. Schedules fire in the API's scheduler (`crate::scheduler`).
//!
//! A delivery is checked in this order: the trigger exists (404), the rate (429, with
//! `Retry-After`; first, so a flood costs no reading and no writing), the body fits `max_body`
//! (413), the signature and timestamp (401), the body against
//! the templates (422); then its message is put in its session once per delivery id (202, or
//! 200 for a delivery id seen before). Every refusal but the 404 is written to the trigger's
//! history (a burst over the rate once).

use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use ninetrix_proto::api::{
    ErrorBody, ErrorCode, FireRequest, HookAccepted, Trigger, TriggerEvent, TriggerOutcome,
    TriggerReason, TriggerSet, TriggerSource, TriggersApplied,
};
use serde::Deserialize;

use crate::access::Admin;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, page_limit};
use crate::faults::crash;
use crate::state::App;
use crate::store::Fired;
use crate::trigger_rules::{self, Admit};

/// Most history entries one page returns.
const MAX_HISTORY_PAGE: u32 = 1000;

fn invalid(message: String) -> ApiError {
    ApiError::Rejected {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        code: ErrorCode::InvalidTrigger,
        message,
    }
}

fn template_failed(message: String) -> ApiError {
    ApiError::Rejected {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        code: ErrorCode::TemplateFailed,
        message,
    }
}

/// A pool name (the agentfile's rule), or a trigger name or webhook path (the trigger rule:
/// `a-z`, `0-9`, `-`, at most 63), from the path after percent-decoding (400 `invalid_path`).
fn check_path(what: &str, name: &str) -> Result<(), ApiError> {
    if what == "pool" {
        return crate::names::check_path(what, name);
    }
    if ninetrix_proto::triggers::spec::is_valid_name(name) {
        Ok(())
    } else {
        Err(ApiError::BadRequest {
            code: ErrorCode::InvalidPath,
            message: format!(
                "the {what} {:?} in the path is not a trigger name: 1 to 63 of a-z, 0-9 and `-`, starting with a letter or digit",
                crate::names::shown(name)
            ),
        })
    }
}

fn wake(app: &App, fired: Option<&Fired>) {
    if let Some(f) = fired {
        app.hub.notify(f.thread_id);
        app.hub.notify_agent(&f.pool, &f.agent);
    }
}

/// Register the pool's triggers: exactly this set (`up` sends it every time). New ones are
/// created with their first fire after now, changed ones updated — a changed schedule rule plans
/// from now on, anything else keeps the next fire time — and those not in the set removed (their
/// history stays). A webhook's secret is stored and never returned.
#[utoipa::path(put, path = "/v1/pools/{pool}/triggers", tag = "admin",
    params(("pool" = String, Path, description = "The pool (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")),
    request_body = TriggerSet,
    responses((status = 200, body = TriggersApplied, description = "what changed"),
        (status = 422, body = ErrorBody, description = "`invalid_trigger`: a schedule, template, secret or limit that cannot be used (the message names the trigger)"),
        (status = 400, body = ErrorBody, description = "`bad_json`: the body is not JSON; `invalid_path`: a malformed pool name; `invalid_text`: a name with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn put(
    _: Admin,
    State(app): State<App>,
    ApiPath(pool): ApiPath<String>,
    ApiJson(set): ApiJson<TriggerSet>,
) -> Result<axum::Json<TriggersApplied>, ApiError> {
    check_path("pool", &pool)?;
    trigger_rules::check_set(&set).map_err(invalid)?;
    let applied = app
        .store
        .put_triggers(pool.clone(), set, Utc::now())
        .await?;
    if applied.created.len() + applied.updated.len() + applied.removed.len() > 0 {
        tracing::info!(%pool, created = ?applied.created, updated = ?applied.updated, removed = ?applied.removed, "triggers registered");
    }
    Ok(axum::Json(applied))
}

/// Query of the trigger listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct TriggersQuery {
    /// Only this pool's.
    pool: Option<String>,
    /// Only the trigger of this name.
    name: Option<String>,
}

/// The registered triggers, by pool and name: each one's spec (a webhook's secret by name
/// only), next fire time, held-back fire and last history entry.
#[utoipa::path(get, path = "/v1/triggers", tag = "admin", operation_id = "list_triggers", params(TriggersQuery),
    responses((status = 200, body = Vec<Trigger>, description = "the triggers that match"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: an unknown parameter; `invalid_text`: a name with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn list(
    _: Admin,
    State(app): State<App>,
    ApiQuery(q): ApiQuery<TriggersQuery>,
) -> Result<axum::Json<Vec<Trigger>>, ApiError> {
    Ok(axum::Json(app.store.list_triggers(q.pool, q.name).await?))
}

/// Query of a trigger's history.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryQuery {
    /// At most this many: 1 to 1000 (100 when left out).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// Only entries before this seq (a page further back).
    #[param(maximum = 9223372036854775807_i64)]
    before: Option<u64>,
}

/// A trigger's history: the newest `limit` entries before `before`, oldest first — fired, caught
/// up, buffered, skipped (why), deduplicated, rejected (why). The last 1,000 entries are kept.
#[utoipa::path(get, path = "/v1/pools/{pool}/triggers/{name}/history", tag = "admin",
    params(("pool" = String, Path, description = "The pool (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$"),
        ("name" = String, Path, description = "The trigger", min_length = 1, max_length = 63, pattern = "^[a-z0-9][a-z0-9-]*$"), HistoryQuery),
    responses((status = 200, body = Vec<TriggerEvent>, description = "the trigger's history, newest first, one page"), (status = 404, body = ErrorBody, description = "no such trigger"),
        (status = 400, body = ErrorBody, description = "`invalid_query`: an out-of-range `limit` or `before`, an unknown parameter; `invalid_path`: a malformed pool or trigger name; `invalid_text`: a name with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn history(
    _: Admin,
    State(app): State<App>,
    ApiPath((pool, name)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<HistoryQuery>,
) -> Result<axum::Json<Vec<TriggerEvent>>, ApiError> {
    check_path("pool", &pool)?;
    check_path("trigger", &name)?;
    let limit = page_limit(q.limit, 100, MAX_HISTORY_PAGE)?;
    match app
        .store
        .trigger_history(pool.clone(), name.clone(), q.before, limit)
        .await?
    {
        Some(events) => Ok(axum::Json(events)),
        None => Err(ApiError::NotFound(format!(
            "pool `{pool}` has no trigger `{name}`"
        ))),
    }
}

/// Run a trigger now: its message put in its session, recorded as a manual fire (overlap rules
/// do not apply: the person asked for it). A webhook trigger renders its templates from `body`
/// (`{}` when left out).
#[utoipa::path(post, path = "/v1/pools/{pool}/triggers/{name}/fire", tag = "admin",
    params(("pool" = String, Path, description = "The pool (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$"),
        ("name" = String, Path, description = "The trigger", min_length = 1, max_length = 63, pattern = "^[a-z0-9][a-z0-9-]*$")),
    request_body = FireRequest,
    responses((status = 201, body = TriggerEvent, description = "fired: the message is queued in the session's inbox"),
        (status = 404, body = ErrorBody, description = "no such trigger"),
        (status = 422, body = ErrorBody, description = "`template_failed`: the body does not fit the webhook's templates"),
        (status = 400, body = ErrorBody, description = "`bad_json`: the body is not JSON; `invalid_path`: a malformed pool or trigger name; `invalid_text`: a name with U+0000"),
        (status = 401, body = ErrorBody, description = "`unauthorized`: no valid bearer token"), (status = 403, body = ErrorBody, description = "`forbidden`: not the admin token")),
    security(("bearer" = [])))]
pub(crate) async fn fire(
    _: Admin,
    State(app): State<App>,
    ApiPath((pool, name)): ApiPath<(String, String)>,
    ApiJson(request): ApiJson<FireRequest>,
) -> Result<(StatusCode, axum::Json<TriggerEvent>), ApiError> {
    check_path("pool", &pool)?;
    check_path("trigger", &name)?;
    let found = app
        .store
        .list_triggers(Some(pool.clone()), Some(name.clone()))
        .await?;
    let trigger = found
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::NotFound(format!("pool `{pool}` has no trigger `{name}`")))?;
    let rendered = match trigger.spec.webhook() {
        None => None,
        Some(_) => {
            let body = request.body.unwrap_or_else(|| serde_json::json!({}));
            let r = trigger_rules::render(&trigger.spec, &body).map_err(template_failed)?;
            Some((r.message, r.session))
        }
    };
    let (event, fired) = app.store.fire_now(pool, name, rendered).await?;
    wake(&app, fired.as_ref());
    Ok((StatusCode::CREATED, axum::Json(event)))
}

/// A webhook delivery: signed with the trigger's secret (GitHub's `X-Hub-Signature-256`, or the
/// Standard Webhooks `webhook-id` / `webhook-timestamp` / `webhook-signature`), its JSON body
/// rendered into the trigger's message and session key, and the message put in that session —
/// once per delivery id (`X-GitHub-Delivery` / `webhook-id`). No bearer token: the signature is
/// the authentication.
#[utoipa::path(post, path = "/v1/hooks/{pool}/{path}", tag = "hooks",
    params(("pool" = String, Path, description = "The pool (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$"),
        ("path" = String, Path, description = "The webhook trigger's path", min_length = 1, max_length = 63, pattern = "^[a-z0-9][a-z0-9-]*$")),
    request_body(content = Object, content_type = "application/json", description = "The sender's JSON payload, exactly as signed"),
    responses((status = 202, body = HookAccepted, description = "accepted: the message is queued in the session"),
        (status = 200, body = HookAccepted, description = "a delivery id seen before: nothing added"),
        (status = 401, body = ErrorBody, description = "`bad_signature`: missing, wrong or (Standard Webhooks) stale signature"),
        (status = 404, body = ErrorBody, description = "no webhook trigger at this path"),
        (status = 413, body = ErrorBody, description = "`too_large`: the body is larger than the trigger's `max_body`"),
        (status = 422, body = ErrorBody, description = "`template_failed`: the body is not JSON or lacks a field the templates use"),
        (status = 429, body = ErrorBody, description = "`rate_limited`: over the trigger's `rate_limit`; `Retry-After` says when to retry")))]
pub(crate) async fn deliver(
    State(app): State<App>,
    ApiPath((pool, path)): ApiPath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path("pool", &pool)?;
    check_path("path", &path)?;
    let target = app
        .store
        .hook_target(pool.clone(), path.clone())
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("pool `{pool}` has no webhook at `{path}`")))?;
    let spec = target.spec;
    let name = spec.name.clone();
    let Some(webhook) = spec.webhook().cloned() else {
        return Err(ApiError::NotFound(format!(
            "pool `{pool}` has no webhook at `{path}`"
        )));
    };
    let reject = |reason: TriggerReason, delivery_id: Option<String>, detail: String| {
        let app = app.clone();
        let (pool, name) = (pool.clone(), name.clone());
        async move {
            let event = TriggerEvent {
                seq: 0,
                at: Utc::now(),
                source: TriggerSource::Webhook,
                outcome: TriggerOutcome::Rejected,
                reason: Some(reason),
                scheduled_at: None,
                delivery_id,
                session: None,
                thread_id: None,
                inbox_seq: None,
                detail: Some(detail),
            };
            if let Err(e) = app.store.note_trigger(pool, name, event).await {
                tracing::warn!(error = %e, "cannot record a refused webhook delivery");
            }
        }
    };
    let claimed = crate::hooks::claimed_delivery_id(&headers);
    let too_large = |limit: u64| ApiError::Rejected {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: ErrorCode::TooLarge,
        message: format!(
            "the body is larger than this webhook's limit of {limit} bytes (`max_body`)"
        ),
    };
    let limit = webhook.max_body_bytes;
    if let Admit::Refuse { first, retry_after } =
        app.hook_limits
            .admit(&pool, &name, webhook.rate_limit_per_minute, Instant::now())
    {
        if first {
            reject(
                TriggerReason::RateLimited,
                claimed.clone(),
                format!(
                    "over {} deliveries a minute; later ones in this burst are refused unrecorded",
                    webhook.rate_limit_per_minute
                ),
            )
            .await;
        }
        let secs = retry_after.as_secs().max(1);
        let mut response = ApiError::Rejected {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: ErrorCode::RateLimited,
            message: format!(
                "this webhook takes {} deliveries a minute (`rate_limit`); retry in {secs} s",
                webhook.rate_limit_per_minute
            ),
        }
        .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        return Ok(response);
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        reject(
            TriggerReason::TooLarge,
            claimed.clone(),
            format!("Content-Length {} > {limit}", declared.unwrap_or(0)),
        )
        .await;
        return Err(too_large(limit));
    }
    let bytes = match axum::body::to_bytes(body, usize::try_from(limit).unwrap_or(usize::MAX)).await
    {
        Ok(b) => b,
        Err(_) => {
            reject(
                TriggerReason::TooLarge,
                claimed.clone(),
                format!("more than {limit} bytes"),
            )
            .await;
            return Err(too_large(limit));
        }
    };
    let verified = match crate::hooks::verify(
        &headers,
        &bytes,
        target.secret.as_bytes(),
        trigger_rules::scheme(webhook.signature),
        Utc::now().timestamp(),
        webhook.tolerance_secs,
    ) {
        Ok(v) => v,
        Err(e) => {
            reject(
                trigger_rules::signature_reason(&e),
                claimed.clone(),
                e.to_string(),
            )
            .await;
            return Err(ApiError::Rejected {
                status: StatusCode::UNAUTHORIZED,
                code: ErrorCode::BadSignature,
                message: e.to_string(),
            });
        }
    };
    let rendered = serde_json::from_slice::<serde_json::Value>(&bytes)
        .map_err(|e| {
            format!("the body is not JSON ({e}); webhooks take `application/json` payloads")
        })
        .and_then(|json| trigger_rules::render(&spec, &json));
    let rendered = match rendered {
        Ok(r) => r,
        Err(message) => {
            reject(
                TriggerReason::Template,
                verified.delivery_id.clone(),
                message.clone(),
            )
            .await;
            return Err(template_failed(message));
        }
    };
    let (event, fired) = app
        .store
        .deliver_hook(
            pool.clone(),
            name.clone(),
            verified.delivery_id.clone(),
            rendered.message,
            rendered.session,
            crash,
        )
        .await?;
    crash("hook_after_commit");
    wake(&app, fired.as_ref());
    let status = if event.outcome == TriggerOutcome::Deduplicated {
        StatusCode::OK
    } else {
        tracing::info!(%pool, trigger = %name, delivery_id = ?verified.delivery_id, scheme = %verified.scheme, "webhook delivered");
        StatusCode::ACCEPTED
    };
    let accepted = HookAccepted {
        trigger: name,
        outcome: event.outcome,
        session: event.session.unwrap_or_default(),
        seq: event.inbox_seq.unwrap_or_default(),
    };
    Ok((status, axum::Json(accepted)).into_response())
}
