//! OpenTelemetry server spans (issue 18): one span per request, named and attributed as the HTTP
//! semantic conventions say, joined to the caller's trace when the request carries a W3C
//! `traceparent`. Installed by `routes::router` only when a tracer is configured; ending a span
//! hands it to the exporter's bounded queue, so a request never waits on the collector.

use axum::Router;
use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use ninetrix_proto::api::ErrorCode;
use ninetrix_telemetry::opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use ninetrix_telemetry::opentelemetry::trace::{
    FutureExt as _, SpanKind, Status, TraceContextExt as _, Tracer as _,
};
use ninetrix_telemetry::opentelemetry::{Context, KeyValue};
use ninetrix_telemetry::opentelemetry_sdk::propagation::TraceContextPropagator;

pub use ninetrix_telemetry::Tracer;

/// The largest 409 answer read to tell `fenced` from the other conflicts (they are small JSON).
const CONFLICT_BODY_LIMIT: usize = 64 * 1024;

/// Wraps every route of `router` in a server span made with `tracer`.
pub(crate) fn layer<S>(router: Router<S>, tracer: Tracer) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    router.layer(axum::middleware::from_fn_with_state(tracer, trace))
}

/// Reads W3C trace context headers from a request.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

async fn trace(State(tracer): State<Tracer>, req: Request, next: Next) -> Response {
    let parent = TraceContextPropagator::new().extract(&Headers(req.headers()));
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string());
    let name = match &route {
        Some(route) => format!("{method} {route}"),
        None => method.clone(),
    };
    let mut attributes = vec![
        KeyValue::new("http.request.method", method),
        KeyValue::new("url.path", path.clone()),
        KeyValue::new("url.scheme", "http"),
    ];
    if let Some(route) = &route {
        if let Some(thread) = param(route, &path, "thread_id") {
            attributes.push(KeyValue::new("ninetrix.thread_id", thread.to_string()));
        }
        attributes.push(KeyValue::new("http.route", route.clone()));
    }
    let span = tracer
        .span_builder(name)
        .with_kind(SpanKind::Server)
        .with_attributes(attributes)
        .start_with_context(&tracer, &parent);
    let cx = Context::current_with_span(span);
    let response = next.run(req).with_context(cx.clone()).await;
    let status = response.status();
    let span = cx.span();
    span.set_attribute(KeyValue::new(
        "http.response.status_code",
        i64::from(status.as_u16()),
    ));
    let response = if status == StatusCode::CONFLICT {
        let (response, fenced) = is_fenced(response).await;
        if fenced {
            span.set_attribute(KeyValue::new("ninetrix.fenced", true));
        }
        response
    } else {
        response
    };
    if status.is_server_error() {
        span.set_attribute(KeyValue::new("error.type", status.as_u16().to_string()));
        span.set_status(Status::error(
            status.canonical_reason().unwrap_or("server error"),
        ));
    }
    span.end();
    response
}

/// The value of the path parameter `{name}` of `route` in `path`.
fn param<'p>(route: &str, path: &'p str, name: &str) -> Option<&'p str> {
    let at = route.split('/').position(|segment| {
        segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) == Some(name)
    })?;
    path.split('/').nth(at).filter(|v| !v.is_empty())
}

/// Whether a 409 answer is `fenced` (not `version_conflict` or another conflict), and the
/// answer rebuilt from what was read.
async fn is_fenced(response: Response) -> (Response, bool) {
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, CONFLICT_BODY_LIMIT).await {
        Ok(bytes) => {
            let fenced = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .is_some_and(|v| {
                    v.get("code").and_then(serde_json::Value::as_str)
                        == Some(ErrorCode::Fenced.as_str())
                });
            (Response::from_parts(parts, Body::from(bytes)), fenced)
        }
        // Not readable within the limit: nothing is left to send but an empty body.
        Err(_) => (Response::from_parts(parts, Body::empty()), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use axum::routing::get;
    use ninetrix_telemetry::receiver::{Receiver, SpanStatus};
    use ninetrix_telemetry::{Settings, Telemetry};
    use tower::ServiceExt as _;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_error_marks_the_span_and_other_conflicts_are_not_fenced() {
        let receiver = Receiver::start().await.unwrap();
        let telemetry =
            Telemetry::start(Settings::new(receiver.traces_url(), "t"), Vec::new()).unwrap();
        let router = Router::new()
            .route(
                "/boom/{thread_id}",
                get(|| async { StatusCode::SERVICE_UNAVAILABLE }),
            )
            .route(
                "/fenced",
                get(|| async {
                    (
                        StatusCode::CONFLICT,
                        axum::Json(serde_json::json!({"code": "fenced", "message": "m"})),
                    )
                }),
            );
        let router = layer(router, telemetry.tracer("t"));
        let call = |uri: &'static str| {
            let router = router.clone();
            async move {
                let req = Request::get(uri).body(Body::empty()).unwrap();
                let resp = router.oneshot(req).await.unwrap();
                let status = resp.status();
                let body = axum::body::to_bytes(resp.into_body(), 1024).await.unwrap();
                (status, body)
            }
        };
        let (status, _) = call("/boom/t-1").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let (status, body) = call("/fenced").await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&body).unwrap()["code"],
            "fenced",
            "the answer is passed on whole after being read"
        );
        tokio::task::spawn_blocking(move || telemetry.shutdown(Duration::from_secs(10)))
            .await
            .unwrap();
        let spans = receiver
            .wait_for(|s| s.len() >= 2, Duration::from_secs(10))
            .await
            .unwrap();
        let boom = spans
            .iter()
            .find(|s| s.name == "GET /boom/{thread_id}")
            .unwrap();
        assert_eq!(boom.str_attr("error.type"), Some("503"));
        assert!(matches!(boom.status, SpanStatus::Error(_)), "{boom:?}");
        assert_eq!(boom.str_attr("ninetrix.thread_id"), Some("t-1"));
        let fenced = spans.iter().find(|s| s.name == "GET /fenced").unwrap();
        assert_eq!(fenced.bool_attr("ninetrix.fenced"), Some(true));
        assert_eq!(fenced.status, SpanStatus::Unset);
    }

    #[test]
    fn path_parameters_are_found_by_the_route_template() {
        let route = "/v1/runners/threads/{thread_id}/commit";
        assert_eq!(
            param(route, "/v1/runners/threads/0190-ab/commit", "thread_id"),
            Some("0190-ab")
        );
        assert_eq!(param("/v1/threads", "/v1/threads", "thread_id"), None);
        assert_eq!(
            param(
                "/v1/threads/{thread_id}/checkpoints/{version}",
                "/v1/threads/t1/checkpoints/3",
                "version"
            ),
            Some("3")
        );
    }
}
