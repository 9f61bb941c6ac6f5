//! Triggers (issue 17): `up` registers a pool's set (`PUT /v1/pools/{pool}/triggers`), the admin
//! lists them, reads a trigger's history and runs one now; webhook senders deliver to
//! `POST /v1/hooks/{pool}/{path}` with no token — the signature under the trigger's secret is the
//! authentication. Schedules fire in the API's scheduler (`crate::scheduler`).
//!
//! A delivery is checked in this order (issue 33: a stranger without the secret must cost
//! little): the trigger exists (404); deliveries in flight from the sender's address (429
//! `too_many_in_flight`); a JSON `Content-Type` (415); `Content-Length` within `max_body` (413);
//! the signature headers by themselves (401) — all before the body is read; then the body,
//! bounded in size and in time (413, 408), and the signature over it (401). Those refusals are
//! sampled into the history (`hook_guard::RefusalSampler`), not written one by one. Only then a
//! rate-limit token (429, with `Retry-After`), the body against the templates (422), and the
//! message put in its session once per delivery for the trigger (202, or 200 for a duplicate).

use std::time::Instant;

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use ninetrix_proto::api::{
    ErrorBody, ErrorCode, FireRequest, HookAccepted, Trigger, TriggerEvent, TriggerOutcome,
    TriggerReason, TriggerSet, TriggerSource, TriggersApplied,
};
use ninetrix_proto::triggers::WebhookTrigger;
use serde::Deserialize;

use crate::access::Admin;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, page_limit};
use crate::faults::crash;
use crate::hook_guard::{BodyError, Peer, media_type_ok, read_body};
use crate::hooks::Scheme;
use crate::state::App;
use crate::store::{Fired, HookDelivery, body_digest_key};
use crate::trigger_rules::{self, Admit};
use ninetrix_proto::triggers::template::clip;

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

/// A trigger name or webhook path from the path, after percent-decoding (the trigger rule:
/// `a-z`, `0-9`, `-`, at most 63; 400 `invalid_path`). Pool names are `names::check_path`'s.
fn check_trigger_path(what: &str, name: &str) -> Result<(), ApiError> {
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

/// The 401 `bad_signature` for a delivery whose signature headers or signature fail.
fn bad_signature(e: &impl std::fmt::Display) -> ApiError {
    ApiError::Rejected {
        status: StatusCode::UNAUTHORIZED,
        code: ErrorCode::BadSignature,
        message: e.to_string(),
    }
}

fn wake(app: &App, fired: Option<&Fired>) {
    if let Some(f) = fired {
        app.hub.notify(f.thread_id);
        app.hub.notify_agent(&f.pool, &f.agent);
        app.hub.wake(&f.wake);
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
    crate::names::check_path("pool", &pool)?;
    trigger_rules::check_set(&set, app.body_limit).map_err(invalid)?;
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
    crate::names::check_path("pool", &pool)?;
    check_trigger_path("trigger", &name)?;
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
    crate::names::check_path("pool", &pool)?;
    check_trigger_path("trigger", &name)?;
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
/// once per delivery id (`X-GitHub-Delivery` / `webhook-id`) for the trigger, and for GitHub
/// once per body within the trigger's tolerance. No bearer token: the signature is the
/// authentication. Refusals before the signature is verified are cheap: no durable write each
/// (one per trigger per minute is recorded, with the count it stands for) and no rate-limit token.
#[utoipa::path(post, path = "/v1/hooks/{pool}/{path}", tag = "hooks",
    params(("pool" = String, Path, description = "The pool (a name as in the agentfile)", min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$"),
        ("path" = String, Path, description = "The webhook trigger's path", min_length = 1, max_length = 63, pattern = "^[a-z0-9][a-z0-9-]*$")),
    request_body(content = Object, content_type = "application/json", description = "The sender's JSON payload, exactly as signed (`Content-Type: application/json` or `application/*+json`)"),
    responses((status = 202, body = HookAccepted, description = "accepted: the message is queued in the session"),
        (status = 200, body = HookAccepted, description = "a delivery seen before (its id, or for GitHub its body within the tolerance): nothing added"),
        (status = 401, body = ErrorBody, description = "`bad_signature`: missing, malformed, wrong or (Standard Webhooks) stale signature; a delivery id longer than 120 characters or with a space or control character"),
        (status = 404, body = ErrorBody, description = "no webhook trigger at this path"),
        (status = 408, body = ErrorBody, description = "`request_timeout`: the whole body did not arrive within the webhook body deadline (`--hook-body-timeout`)"),
        (status = 413, body = ErrorBody, description = "`too_large`: the body is larger than the trigger's `max_body`"),
        (status = 415, body = ErrorBody, description = "`unsupported_media_type`: a `Content-Type` that is not JSON"),
        (status = 422, body = ErrorBody, description = "`template_failed`: the body is not JSON or lacks a field the templates use"),
        (status = 429, body = ErrorBody, description = "`rate_limited`: over the trigger's `rate_limit`; `too_many_in_flight`: too many deliveries in flight from this address (`--hook-requests-per-peer`); `Retry-After` says when to retry")))]
pub(crate) async fn deliver(
    State(app): State<App>,
    ApiPath((pool, path)): ApiPath<(String, String)>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    crate::names::check_path("pool", &pool)?;
    check_trigger_path("path", &path)?;
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
    let refusals = Refusals {
        app: &app,
        pool: &pool,
        name: &name,
        claimed: crate::hooks::claimed_delivery_id(&headers),
    };

    // 1. Deliveries in flight from this address: a sender trickling bodies holds at most this many.
    let _pass = match peer {
        Some(Extension(Peer(ip))) => match app.hook_peers.enter(ip) {
            Some(pass) => Some(pass),
            None => return Ok(refusals.too_many_in_flight(ip).await),
        },
        None => None,
    };
    // 2. What the head shows: a JSON body, of at most `max_body`, signed.
    let scheme = trigger_rules::scheme(webhook.signature);
    let declared = match check_head(&headers, &webhook, target.secret.as_bytes(), scheme) {
        Ok(declared) => declared,
        Err(refusal) => return Ok(refusals.unproven(refusal).await),
    };
    // 3. The body, bounded in size and in time.
    let limit = webhook.max_body_bytes;
    let bytes = match read_body(body, declared, limit, app.hook_body_timeout).await {
        Ok(bytes) => bytes,
        Err(e) => {
            let refusal = body_refusal(e, limit, app.hook_body_timeout);
            return Ok(refusals.unproven(refusal).await);
        }
    };
    // 4. The signature over it.
    let verified = match crate::hooks::verify(
        &headers,
        &bytes,
        target.secret.as_bytes(),
        scheme,
        Utc::now().timestamp(),
        webhook.tolerance_secs,
    ) {
        Ok(v) => v,
        Err(e) => {
            let refusal = Refusal {
                reason: trigger_rules::signature_reason(&e),
                detail: e.to_string(),
                error: bad_signature(&e),
                close: false,
            };
            return Ok(refusals.unproven(refusal).await);
        }
    };
    // 5. Only now a token of the trigger's rate: junk cannot spend it.
    if let Admit::Refuse { first, retry_after } =
        app.hook_limits
            .admit(&pool, &name, webhook.rate_limit_per_minute, Instant::now())
    {
        let per_minute = webhook.rate_limit_per_minute;
        let delivery_id = verified.delivery_id.clone();
        return Ok(refusals
            .rate_limited(first, retry_after, per_minute, delivery_id)
            .await);
    }
    let rendered = match trigger_rules::render_body(&spec, &bytes) {
        Ok(r) => r,
        Err(message) => {
            let delivery_id = verified.delivery_id.clone();
            return Err(refusals.template_failed(message, delivery_id).await);
        }
    };
    let delivery = HookDelivery {
        delivery_id: verified.delivery_id.clone(),
        body_digest: (verified.scheme == Scheme::GitHub).then(|| body_digest_key(&bytes)),
        digest_window_ms: i64::try_from(webhook.tolerance_secs.saturating_mul(1000))
            .unwrap_or(i64::MAX),
    };
    drop(bytes);
    let (event, fired) = app
        .store
        .deliver_hook(
            pool.clone(),
            name.clone(),
            delivery,
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

/// A refusal of a delivery before its signature is verified over its body.
struct Refusal {
    /// Why, as the history records it.
    reason: TriggerReason,
    /// More for the history.
    detail: String,
    /// What the sender is answered.
    error: ApiError,
    /// Whether the connection closes after the answer (the body was not read whole).
    close: bool,
}

/// How one delivery's refusals are answered and recorded in its trigger's history.
struct Refusals<'a> {
    app: &'a App,
    pool: &'a str,
    name: &'a str,
    /// The delivery id the headers claim (not yet proven).
    claimed: Option<String>,
}

impl Refusals<'_> {
    /// Records a refused delivery in the trigger's history (a failure to is logged).
    async fn record(
        &self,
        reason: TriggerReason,
        delivery_id: Option<String>,
        detail: String,
        refusals: Option<u64>,
    ) {
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
            refusals,
        };
        let (pool, name) = (self.pool.to_string(), self.name.to_string());
        if let Err(e) = self.app.store.note_trigger(pool, name, event).await {
            tracing::warn!(error = %e, "cannot record a refused webhook delivery");
        }
    }

    /// A refusal of a delivery that has not proven it holds the secret: counted, and written to
    /// the history at most once a minute per trigger (with the count it stands for).
    async fn unproven(&self, refusal: Refusal) -> Response {
        let sampled = self
            .app
            .hook_refusals
            .refuse(self.pool, self.name, Instant::now());
        if let Some(refusals) = sampled {
            self.record(
                refusal.reason,
                self.claimed.clone(),
                refusal.detail,
                Some(refusals),
            )
            .await;
        }
        let response = refusal.error.into_response();
        if refusal.close {
            closing(response)
        } else {
            response
        }
    }

    /// The refusal of a delivery from an address that has as many in flight as it may.
    async fn too_many_in_flight(&self, ip: std::net::IpAddr) -> Response {
        let limit = self.app.hook_peers.limit();
        let error = ApiError::Rejected {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: ErrorCode::TooManyInFlight,
            message: format!(
                "this address already has {limit} webhook deliveries in flight, as many \
                 as the server takes at once (--hook-requests-per-peer); retry when one \
                 has been answered"
            ),
        };
        let refusal = Refusal {
            reason: TriggerReason::PeerLimit,
            detail: format!("{limit} deliveries in flight from {ip}"),
            error,
            close: true,
        };
        let mut response = self.unproven(refusal).await;
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(1));
        response
    }

    /// The refusal of a verified body the templates cannot render: recorded, and answered with
    /// what failed (clipped: it may echo the body).
    async fn template_failed(&self, message: String, delivery_id: Option<String>) -> ApiError {
        let message = clip(&message, MAX_ECHOED_CHARS);
        self.record(TriggerReason::Template, delivery_id, message.clone(), None)
            .await;
        template_failed(message)
    }

    /// The refusal of a verified delivery over the trigger's rate: the first of a burst is
    /// recorded.
    async fn rate_limited(
        &self,
        first: bool,
        retry_after: std::time::Duration,
        per_minute: u32,
        delivery_id: Option<String>,
    ) -> Response {
        if first {
            self.record(
                TriggerReason::RateLimited,
                delivery_id,
                format!(
                    "over {per_minute} deliveries a minute; later ones in this burst are refused unrecorded"
                ),
                None,
            )
            .await;
        }
        let secs = retry_after.as_secs().max(1);
        let mut response = ApiError::Rejected {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: ErrorCode::RateLimited,
            message: format!(
                "this webhook takes {per_minute} deliveries a minute (`rate_limit`); retry in {secs} s"
            ),
        }
        .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        response
    }
}

/// The refusal of a body that is larger than `limit` bytes.
fn too_large(limit: u64) -> ApiError {
    ApiError::Rejected {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: ErrorCode::TooLarge,
        message: format!(
            "the body is larger than this webhook's limit of {limit} bytes (`max_body`)"
        ),
    }
}

/// What the head of a delivery shows, checked before its body is read: a JSON `Content-Type`, a
/// `Content-Length` (returned, when declared) within `max_body`, and the signature headers.
fn check_head(
    headers: &HeaderMap,
    webhook: &WebhookTrigger,
    secret: &[u8],
    scheme: Option<Scheme>,
) -> Result<Option<u64>, Refusal> {
    if !media_type_ok(headers) {
        let given = headers
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let shown = given
            .as_deref()
            .map_or("no `Content-Type`".to_owned(), |v| {
                format!("`Content-Type: {}`", clip(v, 100))
            });
        let error = ApiError::Rejected {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code: ErrorCode::UnsupportedMediaType,
            message: format!(
                "a webhook delivery is JSON, sent with `Content-Type: application/json`; this one \
                 has {shown} (for GitHub, set the webhook's content type to application/json)"
            ),
        };
        return Err(Refusal {
            reason: TriggerReason::ContentType,
            detail: shown,
            error,
            close: true,
        });
    }
    let limit = webhook.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(length) = declared.filter(|n| *n > limit) {
        return Err(Refusal {
            reason: TriggerReason::TooLarge,
            detail: format!("Content-Length {length} > {limit}"),
            error: too_large(limit),
            close: true,
        });
    }
    if let Err(e) = crate::hooks::check_headers(headers, secret, scheme) {
        return Err(Refusal {
            reason: trigger_rules::signature_reason(&e),
            detail: e.to_string(),
            error: bad_signature(&e),
            close: true,
        });
    }
    Ok(declared)
}

/// The refusal of a body that was not read: larger than `limit`, or not whole within `timeout`.
fn body_refusal(e: BodyError, limit: u64, timeout: std::time::Duration) -> Refusal {
    match e {
        BodyError::TooLarge(_) => Refusal {
            reason: TriggerReason::TooLarge,
            detail: format!("more than {limit} bytes"),
            error: too_large(limit),
            close: true,
        },
        e @ (BodyError::Timeout(_) | BodyError::Failed(_)) => {
            let error = ApiError::Rejected {
                status: StatusCode::REQUEST_TIMEOUT,
                code: ErrorCode::RequestTimeout,
                message: format!(
                    "{e}: a webhook body must arrive whole within {} s of its head \
                     (--hook-body-timeout); send the delivery again",
                    timeout.as_secs_f64()
                ),
            };
            Refusal {
                reason: TriggerReason::BodyTimeout,
                detail: e.to_string(),
                error,
                close: true,
            }
        }
    }
}

/// The most characters of a refusal's message that echo the sender's body.
const MAX_ECHOED_CHARS: usize = 1000;

/// `response` with `Connection: close`: its request's body was not read (or not all of it), and
/// what is left of it must not be read as the next request.
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}
