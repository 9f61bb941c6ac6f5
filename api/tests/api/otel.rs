//! OpenTelemetry (issue 18): the API's server spans, exported over OTLP/HTTP protobuf to a real
//! receiver that decodes them — names, kinds, attributes, and a caller's `traceparent` joined.

use std::time::Duration;

use ninetrix_api::store::StoreOptions;
use ninetrix_api::{AuthConfig, Config, Secret, Server};
use ninetrix_proto::ThreadId;
use ninetrix_telemetry::receiver::{Kind, ReceivedSpan, Receiver, SpanStatus};
use ninetrix_telemetry::{Settings, Telemetry};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{ADMIN, TestDb, checkpoint, message};

const CLAIM: &str = "POST /v1/runners/threads/{thread_id}/claim";
const CHECKPOINT: &str = "POST /v1/runners/threads/{thread_id}/checkpoints";

/// A caller's trace: the runner's span that made the request.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

struct Http {
    client: reqwest::Client,
    url: String,
}

impl Http {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<Value>,
        traceparent: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        if let Some(tp) = traceparent {
            req = req.header("traceparent", tp);
        }
        let resp = req.send().await.expect("request sent");
        let status = resp.status();
        let bytes = resp.bytes().await.unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_become_server_spans_joined_to_the_callers_trace() {
    let receiver = Receiver::start().await.unwrap();
    let telemetry = Telemetry::start(
        Settings::new(receiver.traces_url(), "ninetrix-api"),
        Vec::new(),
    )
    .unwrap();
    let db = TestDb::new(crate::support::Backend::Sqlite).await.unwrap();
    let mut config = Config::new(
        db.url.clone(),
        AuthConfig::Tokens {
            secret: Secret::new(b"test-secret-for-runner-tokens".to_vec()),
            admin_token: Secret::new(ADMIN.as_bytes().to_vec()),
        },
    );
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.store = StoreOptions {
        max_batch: 64,
        max_connections: 4,
        ..StoreOptions::default()
    };
    config.scheduler_tick = None;
    config.telemetry = Some(telemetry.tracer("ninetrix-api"));
    let server = Server::bind(config).await.unwrap();
    let http = Http {
        client: reqwest::Client::new(),
        url: format!("http://{}", server.local_addr().unwrap()),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));

    let thread = ThreadId::new_v7();
    let post = reqwest::Method::POST;
    let (status, body) = http
        .send(
            post.clone(),
            "/v1/tokens/runner",
            ADMIN,
            Some(json!({"thread_id": thread, "pool": "p", "agent": "a", "replica": 1})),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let token = body["token"].as_str().unwrap().to_string();
    let claim = format!("/v1/runners/threads/{thread}/claim");
    // The first runner's claim carries its trace; a second runner claims without one.
    let traceparent = format!("00-{TRACE_ID}-{PARENT_SPAN}-01");
    let (status, body) = http
        .send(
            post.clone(),
            &claim,
            &token,
            Some(json!({})),
            Some(&traceparent),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let old_epoch = body["epoch"].as_u64().unwrap();
    let (status, body) = http
        .send(post.clone(), &claim, &token, Some(json!({})), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let epoch = body["epoch"].as_u64().unwrap();
    // The first runner writes after losing its claim: fenced. A stale parent is another 409.
    let checkpoints = format!("/v1/runners/threads/{thread}/checkpoints");
    let write = |epoch, parent| checkpoint(epoch, parent, None, vec![message("user", "hi")], 1);
    let (status, body) = http
        .send(
            post.clone(),
            &checkpoints,
            &token,
            Some(write(old_epoch, 0)),
            None,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("fenced"))
    );
    let (status, body) = http
        .send(
            post.clone(),
            &checkpoints,
            &token,
            Some(write(epoch, 7)),
            None,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("version_conflict")),
        "{body}"
    );
    let (status, _) = http
        .send(reqwest::Method::GET, "/v1/no-such-route", ADMIN, None, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let _ = stop.send(());
    serving.await.unwrap().unwrap();
    // Shutdown sends what is queued (the batch would otherwise wait for its next tick).
    tokio::task::spawn_blocking(move || telemetry.shutdown(Duration::from_secs(10)))
        .await
        .unwrap();
    let spans = receiver
        .wait_for(|spans| spans.len() >= 6, Duration::from_secs(10))
        .await
        .unwrap();
    let named =
        |name: &str| -> Vec<&ReceivedSpan> { spans.iter().filter(|s| s.name == name).collect() };

    let mint = named("POST /v1/tokens/runner");
    assert_eq!(mint.len(), 1, "{spans:#?}");
    assert_eq!(
        mint[0].str_attr("ninetrix.thread_id"),
        None,
        "no thread in the route"
    );
    assert_eq!(mint[0].int_attr("http.response.status_code"), Some(201));

    let claims = named(CLAIM);
    assert_eq!(claims.len(), 2, "{spans:#?}");
    let joined = claims
        .iter()
        .find(|s| s.trace_id == TRACE_ID)
        .expect("the claim with a traceparent is in the caller's trace");
    assert_eq!(joined.parent_span_id.as_deref(), Some(PARENT_SPAN));
    assert_eq!(joined.kind, Kind::Server);
    assert_eq!(joined.str_attr("http.request.method"), Some("POST"));
    assert_eq!(
        joined.str_attr("http.route"),
        Some("/v1/runners/threads/{thread_id}/claim")
    );
    assert_eq!(joined.str_attr("url.path"), Some(claim.as_str()));
    assert_eq!(joined.int_attr("http.response.status_code"), Some(200));
    assert_eq!(
        joined.str_attr("ninetrix.thread_id"),
        Some(thread.to_string().as_str())
    );
    assert_eq!(joined.str_attr("error.type"), None);
    assert_eq!(joined.status, SpanStatus::Unset);
    assert_eq!(
        joined.resource.get("service.name").and_then(|v| v.as_str()),
        Some("ninetrix-api")
    );
    assert_eq!(joined.scope, "ninetrix-api");
    let root = claims.iter().find(|s| s.trace_id != TRACE_ID).unwrap();
    assert_eq!(
        root.parent_span_id, None,
        "no traceparent: a trace of its own"
    );

    let writes = named(CHECKPOINT);
    assert_eq!(writes.len(), 2, "{spans:#?}");
    for write in &writes {
        assert_eq!(write.kind, Kind::Server);
        assert_eq!(write.int_attr("http.response.status_code"), Some(409));
        assert_eq!(
            write.status,
            SpanStatus::Unset,
            "a 4xx is not a server error"
        );
        assert_eq!(write.str_attr("error.type"), None);
    }
    let fenced: Vec<Option<bool>> = writes
        .iter()
        .map(|s| s.bool_attr("ninetrix.fenced"))
        .collect();
    assert_eq!(fenced, [Some(true), None], "only the fenced write says so");

    let unmatched = named("GET");
    assert_eq!(unmatched.len(), 1, "{spans:#?}");
    assert_eq!(unmatched[0].str_attr("http.route"), None);
    assert_eq!(
        unmatched[0].int_attr("http.response.status_code"),
        Some(404)
    );
}
