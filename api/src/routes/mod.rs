//! The router: every route with its OpenAPI description (utoipa), the JSON fallbacks for
//! unknown routes and methods, the body limit, panic catching, and request tracing.

mod a2a;
mod admin;
mod approvals;
mod evals;
mod forks;
mod handoffs;
mod health;
mod limits;
mod memory;
mod replays;
mod runner;
mod sessions;
mod triggers;
mod wait;

use std::sync::OnceLock;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ninetrix_proto::api::{ErrorBody, ErrorCode};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::schema::{AdditionalProperties, Object, Schema, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Content, OpenApi as OpenApiDoc, Ref, RefOr, ResponseBuilder};
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
        (name = "approvals", description = "Requests to people: listed and decided with the admin token or an approver token of the pool, never a runner token"),
        (name = "hooks", description = "Webhook deliveries to triggers: no token, the signature under the trigger's secret authenticates"),
        (name = "a2a", description = "A pool's agents as A2A agents (docs/a2a.md): the public agent card, and the JSON-RPC endpoint (an A2A token of the pool, or the admin token)"),
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
        .routes(routes!(runner::identity))
        .routes(routes!(runner::append_checkpoint))
        .routes(routes!(runner::commit))
        .routes(routes!(runner::record_intent, runner::turn_tool_calls))
        .routes(routes!(runner::complete_tool_call))
        .routes(routes!(runner::inbox))
        .routes(routes!(runner::append_events))
        .routes(routes!(runner::publish_deltas))
        .routes(routes!(limits::lease))
        .routes(routes!(limits::renew))
        .routes(routes!(limits::release))
        .routes(routes!(limits::spend))
        .routes(routes!(admin::list_threads))
        .routes(routes!(admin::thread, admin::purge))
        .routes(routes!(admin::versions))
        .routes(routes!(admin::version))
        .routes(routes!(admin::tool_calls))
        .routes(routes!(admin::enqueue))
        .routes(routes!(admin::cancel))
        .routes(routes!(admin::events))
        .routes(routes!(admin::stream))
        .routes(routes!(admin::mint_runner_token))
        .routes(routes!(approvals::mint_approver_token))
        .routes(routes!(approvals::list))
        .routes(routes!(approvals::get))
        .routes(routes!(approvals::decide))
        .routes(routes!(approvals::turn))
        .routes(routes!(sessions::open, sessions::list))
        .routes(routes!(sessions::set_replicas))
        .routes(routes!(sessions::mint_agent_token))
        .routes(routes!(sessions::work))
        .routes(routes!(sessions::replica_thread))
        .routes(routes!(handoffs::open, handoffs::turn))
        .routes(routes!(handoffs::list))
        .routes(routes!(memory::op))
        .routes(routes!(memory::list, memory::purge))
        .routes(routes!(
            memory::get_file,
            memory::put_file,
            memory::delete_file
        ))
        .routes(routes!(triggers::put))
        .routes(routes!(triggers::list))
        .routes(routes!(triggers::history))
        .routes(routes!(triggers::fire))
        .routes(routes!(triggers::deliver))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::openapi))
        .routes(routes!(replays::create_replay))
        .routes(routes!(replays::record_turn))
        .routes(routes!(evals::list_evals))
        .routes(routes!(evals::get_eval))
        .routes(routes!(evals::add_eval_member))
        .routes(routes!(evals::remove_eval_member))
        .routes(routes!(evals::store_eval_run))
        .routes(routes!(a2a::card))
        .routes(routes!(a2a::rpc))
        .routes(routes!(a2a::mint_a2a_token))
        .merge(forks::routes())
}

/// The OpenAPI document, generated from the route annotations.
pub fn openapi() -> OpenApiDoc {
    let mut api = documented().split_for_parts().1;
    complete(&mut api);
    api
}

/// Adds what every route shares to the generated document (run once the routes are in it, as
/// `#[openapi(modifiers)]` run before):
/// - the errors the extractors answer before a handler runs: 400 for a malformed path or query,
///   400/413/415/422 for a JSON body, 401/403 for a route that needs a token;
/// - flattened structs as one object. utoipa writes serde's `flatten` as `allOf: [$ref Inner,
///   {the other fields}]`; when `Inner` refuses unknown fields (`additionalProperties: false`, as
///   request types do) no object satisfies both halves, so the merged object is what the JSON on
///   the wire is.
fn complete(api: &mut OpenApiDoc) {
    for item in api.paths.paths.values_mut() {
        for operation in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            add_shared_errors(operation);
        }
    }
    if let Some(components) = api.components.as_mut() {
        // A message block is an internally tagged enum that refuses unknown fields; utoipa does
        // not carry `deny_unknown_fields` into the variants of such an enum, so state it here.
        // A memory command is one too.
        for name in ["Block", "MemoryCommand"] {
            if let Some(RefOr::T(Schema::OneOf(tagged))) = components.schemas.get_mut(name) {
                for variant in &mut tagged.items {
                    if let RefOr::T(Schema::Object(variant)) = variant {
                        variant.additional_properties =
                            Some(Box::new(AdditionalProperties::FreeForm(false)));
                    }
                }
            }
        }
        let named = components.schemas.clone();
        for schema in components.schemas.values_mut() {
            if let Some(merged) = merge_all_of(schema, &named) {
                *schema = RefOr::T(Schema::Object(merged));
            }
            // An internally tagged enum of structs (`TriggerKind`) is a `oneOf` whose variants
            // are each such an `allOf` (the struct and its tag): merged the same way.
            // Its structs refuse unknown fields (serde's `deny_unknown_fields` holds in each
            // branch, the tag aside), so each merged branch is closed too.
            if let RefOr::T(Schema::OneOf(one_of)) = schema {
                for variant in &mut one_of.items {
                    let closed = refuses_unknown_fields(variant, &named);
                    if let Some(mut merged) = merge_all_of(variant, &named) {
                        if closed {
                            merged.additional_properties =
                                Some(Box::new(AdditionalProperties::FreeForm(false)));
                        }
                        *variant = RefOr::T(Schema::Object(merged));
                    }
                }
            }
        }
    }
}

fn add_shared_errors(operation: &mut Operation) {
    let params = operation.parameters.as_deref().unwrap_or_default();
    let has = |place: ParameterIn| {
        params
            .iter()
            .any(|p| matches!(p, RefOr::T(p) if p.parameter_in == place))
    };
    let mut errors: Vec<(&str, &str)> = Vec::new();
    if has(ParameterIn::Path) || has(ParameterIn::Query) || has(ParameterIn::Header) {
        errors.push((
            "400",
            "`invalid_path`, `invalid_query` or `invalid_header`: a malformed or out-of-range parameter",
        ));
    }
    if operation.request_body.is_some() {
        errors.extend([
            ("400", "`bad_json`: the body is not JSON; `invalid_path`: a malformed path"),
            ("413", "`too_large`: the body is larger than the server's limit"),
            ("415", "`unsupported_media_type`: the body is not sent as `application/json`"),
            ("422", "`invalid_body` (wrong types, unknown or missing fields, out-of-range values) or a rule of the route"),
        ]);
    }
    if operation.security.as_ref().is_some_and(|s| !s.is_empty()) {
        errors.extend([
            ("401", "`unauthorized`: no valid bearer token"),
            (
                "403",
                "`forbidden`: a runner token on an admin route or on another thread",
            ),
        ]);
    }
    for (status, description) in errors {
        operation
            .responses
            .responses
            .entry(status.to_string())
            .or_insert_with(|| {
                RefOr::T(
                    ResponseBuilder::new()
                        .description(description)
                        .content(
                            "application/json",
                            Content::new(Some(Ref::from_schema_name("ErrorBody"))),
                        )
                        .build(),
                )
            });
    }
}

/// The one object an `allOf` of objects (inline or named) stands for, or `None` for any other
/// schema.
/// Whether an `allOf` names a struct that refuses unknown fields (`additionalProperties: false`).
fn refuses_unknown_fields(
    schema: &RefOr<Schema>,
    named: &std::collections::BTreeMap<String, RefOr<Schema>>,
) -> bool {
    let RefOr::T(Schema::AllOf(all_of)) = schema else {
        return false;
    };
    all_of.items.iter().any(|part| {
        let part = match part {
            RefOr::Ref(r) => r.ref_location.rsplit('/').next().and_then(|n| named.get(n)),
            inline => Some(inline),
        };
        matches!(part, Some(RefOr::T(Schema::Object(o)))
            if matches!(o.additional_properties.as_deref(), Some(AdditionalProperties::FreeForm(false))))
    })
}

fn merge_all_of(
    schema: &RefOr<Schema>,
    named: &std::collections::BTreeMap<String, RefOr<Schema>>,
) -> Option<Object> {
    let RefOr::T(Schema::AllOf(all_of)) = schema else {
        return None;
    };
    let mut merged = Object::with_type(Type::Object);
    merged.description = all_of.description.clone();
    for part in &all_of.items {
        let part = match part {
            RefOr::Ref(r) => named.get(r.ref_location.rsplit('/').next()?)?,
            inline => inline,
        };
        let RefOr::T(Schema::Object(part)) = part else {
            return None;
        };
        merged
            .properties
            .extend(part.properties.iter().map(|(k, v)| (k.clone(), v.clone())));
        merged.required.extend(part.required.iter().cloned());
    }
    Some(merged)
}

pub(crate) fn router(
    app: App,
    body_limit: usize,
    tracer: Option<crate::telemetry::Tracer>,
) -> Router {
    let (router, mut api) = documented().split_for_parts();
    complete(&mut api);
    let _ = OPENAPI_JSON.set(api.to_pretty_json().unwrap_or_else(|_| "{}".into()));
    let router = router
        .merge(crate::console::router())
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
        }));
    // Outermost, so the span sees the answer the client gets (a caught panic's 500 too).
    let router = match tracer {
        Some(tracer) => crate::telemetry::layer(router, tracer),
        None => router,
    };
    router.with_state(app)
}

fn internal_error() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        axum::Json(ErrorBody {
            code: ErrorCode::Internal,
            message: "internal error; the server log has the details".into(),
            running: None,
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
