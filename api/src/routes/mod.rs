//! The router: every route with its OpenAPI description (utoipa), the JSON fallbacks for
//! unknown routes and methods, the body limit, panic catching, and request tracing.

mod admin;
mod health;
mod runner;

use std::sync::OnceLock;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ninetrix_proto::api::{ErrorBody, ErrorCode};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ApiError;
use crate::state::App;

#[derive(OpenApi)]
#[openapi(
    info(title = "ninetrix checkpoint API", description = "Threads, claims and fencing, append-only checkpoints, the tool-call ledger, the inbox and trace events. Errors are `{code, message}` JSON."),
    modifiers(&BearerAuth),
    tags(
        (name = "runner", description = "Called by the runner of a thread (runner token of that thread, or the admin token)"),
        (name = "admin", description = "Called by the CLI and operators (admin token)"),
        (name = "meta", description = "Health and this document (no token)")
    )
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

static OPENAPI_JSON: OnceLock<String> = OnceLock::new();

/// Every route, with its documentation.
fn documented() -> OpenApiRouter<App> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(runner::claim))
        .routes(routes!(runner::latest))
        .routes(routes!(runner::append_checkpoint))
        .routes(routes!(runner::record_intent))
        .routes(routes!(runner::complete_tool_call))
        .routes(routes!(runner::inbox))
        .routes(routes!(runner::append_events))
        .routes(routes!(admin::list_threads))
        .routes(routes!(admin::thread, admin::purge))
        .routes(routes!(admin::versions))
        .routes(routes!(admin::version))
        .routes(routes!(admin::tool_calls))
        .routes(routes!(admin::enqueue))
        .routes(routes!(admin::events))
        .routes(routes!(admin::stream))
        .routes(routes!(admin::mint_runner_token))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::openapi))
}

/// The OpenAPI document, generated from the route annotations.
pub fn openapi() -> utoipa::openapi::OpenApi {
    documented().split_for_parts().1
}

pub(crate) fn router(app: App, body_limit: usize) -> Router {
    let (router, api) = documented().split_for_parts();
    let _ = OPENAPI_JSON.set(api.to_pretty_json().unwrap_or_else(|_| "{}".into()));
    router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(CatchPanicLayer::custom(
            |_panic: Box<dyn std::any::Any + Send>| {
                tracing::error!("a request handler panicked");
                internal_error()
            },
        ))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            let path = req
                .extensions()
                .get::<MatchedPath>()
                .map(MatchedPath::as_str)
                .unwrap_or("unmatched");
            tracing::info_span!("request", method = %req.method(), path)
        }))
        .with_state(app)
}

fn internal_error() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        axum::Json(ErrorBody {
            code: ErrorCode::Internal,
            message: "internal error; the server log has the details".into(),
        }),
    )
        .into_response()
}

async fn not_found(req: Request) -> ApiError {
    ApiError::NotFound(format!(
        "no route for {} {}",
        req.method(),
        req.uri().path()
    ))
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::Rejected {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: ErrorCode::MethodNotAllowed,
        message: format!("{} is not allowed on {}", req.method(), req.uri().path()),
    }
}
