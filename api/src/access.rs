//! Who may call a route, decided before anything else of the request is read.
//!
//! Each handler names its access rule as its first extractor: [`Admin`] (or [`AdminVia`] where
//! a write records whether the console made it), [`ThreadCaller`] (or
//! [`LabelledThreadCaller`] where a rule needs the runner token's labels), [`ApproverCaller`],
//! [`AgentCaller`] or [`A2aCaller`] (whose refusals are JSON-RPC errors, as an A2A client reads
//! them). axum runs the extractors that read the request head in
//! order and the body's last, so a token is authenticated (401) and authorised (403) before the
//! path's other parameters, the query or the body are looked at: a runner token on another
//! thread's route learns nothing about what that route expects (no 400/415/422 naming fields).

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{ErrorCode, ThreadLabels};

use crate::auth::{Authenticator, Caller};
use crate::error::ApiError;

/// The admin token (or insecure-dev mode): every admin route.
pub(crate) struct Admin;

impl<S> FromRequestParts<S> for Admin
where
    S: Send + Sync,
    Arc<Authenticator>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Caller::from_request_parts(parts, state)
            .await?
            .require_admin()?;
        Ok(Admin)
    }
}

/// The admin, by its token or signed in to the web console (whose writes carry
/// `X-Ninetrix-Console: 1`, as `Caller` checks): which of the two, for the name a write is
/// recorded under when it gives none (`admin`, `console`).
pub(crate) struct AdminVia {
    /// Signed in by the console's cookie (no bearer token sent).
    pub console: bool,
}

impl AdminVia {
    /// The name a write is recorded under when it gives none.
    pub(crate) fn role(&self) -> &'static str {
        if self.console { "console" } else { "admin" }
    }
}

impl<S> FromRequestParts<S> for AdminVia
where
    S: Send + Sync,
    Arc<Authenticator>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Caller::from_request_parts(parts, state)
            .await?
            .require_admin()?;
        // A bearer token, when sent, is used instead of the cookie.
        let console = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .is_none()
            && crate::auth::console_token(&parts.headers, &parts.method)?.is_some();
        Ok(AdminVia { console })
    }
}

/// The admin or the runner of the route's `{thread_id}`: the thread's ID, checked.
pub(crate) struct ThreadCaller(pub ThreadId);

impl<S> FromRequestParts<S> for ThreadCaller
where
    S: Send + Sync,
    Arc<Authenticator>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let LabelledThreadCaller { id, .. } =
            LabelledThreadCaller::from_request_parts(parts, state).await?;
        Ok(ThreadCaller(id))
    }
}

/// The route's `{thread_id}`, parsed.
async fn thread_param<S: Send + Sync>(parts: &mut Parts, state: &S) -> Result<ThreadId, ApiError> {
    let raw = path_param(parts, state, "thread_id").await?;
    raw.parse::<ThreadId>().map_err(|e| ApiError::BadRequest {
        code: ErrorCode::InvalidPath,
        message: format!(
            "thread_id {raw:?} is not a UUID ({e}); IDs are UUIDs such as 01936f5e-7c1a-7d3e-9f4b-2a6c8e0d1f35"
        ),
    })
}

/// The admin or the runner of the route's `{thread_id}`, with the labels a rule about the caller
/// must trust: the runner token's (fixed when its thread was created), never the request's.
pub(crate) struct LabelledThreadCaller {
    /// The route's thread, checked.
    pub id: ThreadId,
    /// The runner token's labels; `None` for the admin, whose rules read the thread's own.
    pub token_labels: Option<ThreadLabels>,
}

impl<S> FromRequestParts<S> for LabelledThreadCaller
where
    S: Send + Sync,
    Arc<Authenticator>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let id = thread_param(parts, state).await?;
        caller.require_thread(id)?;
        let token_labels = match caller {
            Caller::Runner { labels, .. } => Some(labels),
            _ => None,
        };
        Ok(LabelledThreadCaller { id, token_labels })
    }
}

/// The admin or an approver: for an approver, the one pool whose requests it may see.
pub(crate) struct ApproverCaller {
    /// `None` for the admin; the approver's pool otherwise.
    pub pool: Option<String>,
    /// `None` for the admin; the approver's name (recorded as who decided) otherwise.
    pub name: Option<String>,
}

impl<S> FromRequestParts<S> for ApproverCaller
where
    S: Send + Sync,
    Arc<Authenticator>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let pool = caller.require_approver()?.map(str::to_string);
        let name = match caller {
            Caller::Approver { name, .. } => Some(name),
            _ => None,
        };
        Ok(ApproverCaller { pool, name })
    }
}

/// The admin or the agent token of the route's `{pool}` and `{agent}`.
pub(crate) struct AgentCaller;

impl<S> FromRequestParts<S> for AgentCaller
where
    S: Send + Sync,
    Arc<Authenticator>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let pool = path_param(parts, state, "pool").await?;
        let agent = path_param(parts, state, "agent").await?;
        caller.require_agent(&pool, &agent)?;
        Ok(AgentCaller)
    }
}

/// The admin or an A2A token of the route's `{pool}`: the name its calls are recorded under
/// (`a2a:<token name>`, `a2a:admin`). Refused as A2A clients read refusals: `401`/`403` with a
/// JSON-RPC error body (`-32600`, saying what token the endpoint takes).
pub(crate) struct A2aCaller {
    /// `a2a:<token name>`.
    pub by: String,
}

impl<S> FromRequestParts<S> for A2aCaller
where
    S: Send + Sync,
    Arc<Authenticator>: FromRef<S>,
{
    type Rejection = axum::response::Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        use axum::response::IntoResponse as _;
        let refused = |e: ApiError| {
            let (status, _, message) = e.parts();
            let error = crate::a2a_rules::RpcError::new(
                a2a::error_code::INVALID_REQUEST,
                match status {
                    axum::http::StatusCode::UNAUTHORIZED => format!(
                        "{message}: send `Authorization: Bearer TOKEN` with an A2A token of the pool (`ninetrix a2a token -p POOL --name NAME`) or the admin token"
                    ),
                    _ => message,
                },
            );
            (
                status,
                axum::Json(crate::a2a_rules::error_body(a2a::JsonRpcId::Null, &error)),
            )
                .into_response()
        };
        let caller = Caller::from_request_parts(parts, state)
            .await
            .map_err(refused)?;
        let pool = path_param(parts, state, "pool")
            .await
            .map_err(|e| e.into_response())?;
        let by = caller.require_a2a(&pool).map_err(refused)?;
        Ok(A2aCaller { by })
    }
}

/// The percent-decoded path parameter `name` of the matched route.
async fn path_param<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    name: &str,
) -> Result<String, ApiError> {
    let params = RawPathParams::from_request_parts(parts, state)
        .await
        .map_err(|e| ApiError::BadRequest {
            code: ErrorCode::InvalidPath,
            message: e.to_string(),
        })?;
    params
        .iter()
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
        .ok_or_else(|| ApiError::BadRequest {
            code: ErrorCode::InvalidPath,
            message: format!("the route has no {name} parameter"),
        })
}
