//! Bad input gets the right status and `{code, message}` JSON; storage failures become a generic
//! 500 whose cause is not sent.

use ninetrix_proto::ThreadId;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{ADMIN, Backend, TestApi, checkpoint, message};

async fn raw(
    api: &TestApi,
    method: Method,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> (StatusCode, Value) {
    let mut req = api
        .client
        .request(method, format!("{}{path}", api.url))
        .bearer_auth(ADMIN)
        .body(body.to_string());
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let value: Value = resp.json().await.expect("errors are JSON");
    assert!(
        value["code"].is_string() && value["message"].is_string(),
        "{value}"
    );
    (status, value)
}

/// (name, method, path, content type, body, expected status, expected code)
type Case = (
    &'static str,
    Method,
    String,
    Option<&'static str>,
    String,
    StatusCode,
    &'static str,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_class_of_bad_input_gets_its_status() {
    let api = TestApi::start_with(Backend::Sqlite, |c| c.body_limit = 64 * 1024)
        .await
        .unwrap();
    let thread = ThreadId::new_v7();
    let epoch = api.claim(thread, ADMIN).await;
    let cp = format!("/v1/runners/threads/{thread}/checkpoints");
    let json = Some("application/json");
    let cases: Vec<Case> = vec![
        ("bad JSON", Method::POST, cp.clone(), json, "{\"epoch\": ".into(), StatusCode::BAD_REQUEST, "bad_json"),
        ("wrong type", Method::POST, cp.clone(), json, json!({"epoch": "one", "parent_version": 0, "state": {}}).to_string(), StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
        ("unknown field", Method::POST, cp.clone(), json, { let mut b = checkpoint(epoch, 0, None, vec![], 0); b["extra"] = 1.into(); b.to_string() }, StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
        ("missing field", Method::POST, cp.clone(), json, json!({"epoch": epoch}).to_string(), StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
        ("no content type", Method::POST, cp.clone(), None, checkpoint(epoch, 0, None, vec![], 0).to_string(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
        ("body over the limit", Method::POST, cp.clone(), json, checkpoint(epoch, 0, None, vec![message("user", &"x".repeat(100 * 1024))], 1).to_string(), StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
        ("bad UUID", Method::GET, "/v1/threads/not-a-uuid".into(), None, String::new(), StatusCode::BAD_REQUEST, "invalid_path"),
        ("bad version number", Method::GET, format!("/v1/threads/{thread}/checkpoints/latest"), None, String::new(), StatusCode::BAD_REQUEST, "invalid_path"),
        ("bad query", Method::GET, format!("/v1/runners/threads/{thread}/inbox?after=abc"), None, String::new(), StatusCode::BAD_REQUEST, "invalid_query"),
        ("unknown query key", Method::GET, format!("/v1/runners/threads/{thread}/inbox?afterr=1"), None, String::new(), StatusCode::BAD_REQUEST, "invalid_query"),
        ("bad status filter", Method::GET, "/v1/threads?status=sleeping".into(), None, String::new(), StatusCode::BAD_REQUEST, "invalid_query"),
        ("unknown route", Method::GET, "/v2/everything".into(), None, String::new(), StatusCode::NOT_FOUND, "not_found"),
        ("wrong method", Method::PATCH, cp.clone(), json, "{}".into(), StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        ("huge number", Method::POST, cp.clone(), json, checkpoint(u64::MAX, 0, None, vec![], 0).to_string(), StatusCode::CONFLICT, "fenced"),
        ("empty ledger key", Method::POST, format!("/v1/runners/threads/{thread}/tool-calls"), json, json!({"epoch": epoch, "key": "", "turn_seq": 1, "tool": "t", "args": {}, "effect": "read"}).to_string(), StatusCode::UNPROCESSABLE_ENTITY, "invalid_key"),
        ("bad effect", Method::POST, format!("/v1/runners/threads/{thread}/tool-calls"), json, json!({"epoch": epoch, "key": "k", "turn_seq": 1, "tool": "t", "args": {}, "effect": "maybe"}).to_string(), StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
        ("bad Last-Event-ID", Method::GET, format!("/v1/threads/{thread}/events/stream"), None, String::new(), StatusCode::BAD_REQUEST, "invalid_header"),
    ];
    let mut failures = Vec::new();
    for (name, method, path, ct, body, status, code) in cases {
        let (got, value) = if name == "bad Last-Event-ID" {
            let resp = api
                .client
                .get(format!("{}{path}", api.url))
                .bearer_auth(ADMIN)
                .header("Last-Event-ID", "yesterday")
                .send()
                .await
                .unwrap();
            (resp.status(), resp.json::<Value>().await.unwrap())
        } else {
            raw(&api, method, &path, ct, &body).await
        };
        if got != status || value["code"] != code {
            failures.push(format!("{name}: want {status} {code}, got {got} {value}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The server is still fine.
    assert_eq!(
        api.call(Method::GET, "/healthz", None, None).await.0,
        StatusCode::OK
    );
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_failures_are_a_generic_500() {
    let api = TestApi::start(Backend::Sqlite).await.unwrap();
    let thread = ThreadId::new_v7();
    let epoch = api.claim(thread, ADMIN).await;
    // Break the database under the server.
    let mut side = <sqlx::SqliteConnection as sqlx::Connection>::connect(&api.db.url)
        .await
        .unwrap();
    sqlx::query("DROP TABLE events")
        .execute(&mut side)
        .await
        .unwrap();
    let (status, body) = api
        .admin(
            Method::POST,
            &format!("/v1/runners/threads/{thread}/events"),
            Some(json!({"epoch": epoch, "events": [{"type": "boot"}]})),
        )
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["code"], "internal");
    let text = body.to_string();
    assert!(
        !text.contains("events") && !text.contains("table") && !text.to_lowercase().contains("sql"),
        "{text}"
    );
    // Other writes still work: the failed one rolled back alone.
    let (status, _) = api
        .admin(
            Method::POST,
            &format!("/v1/runners/threads/{thread}/checkpoints"),
            Some(checkpoint(epoch, 0, None, vec![], 0)),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    api.stop().await;
}

/// `Last-Event-ID` is an event seq the store can hold (0 to `MAX_STORED_INT`): anything else —
/// one past the largest, past `u64`, negative, not a number — is `400 invalid_header`, never a
/// stream that resumes after a seq no event can have (and so stays silent).
async fn last_event_id_out_of_range_is_invalid_header(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let thread = ThreadId::new_v7();
    api.claim(thread, ADMIN).await;
    let stream = |last_event_id: String| {
        api.client
            .get(format!("{}/v1/threads/{thread}/events/stream", api.url))
            .bearer_auth(ADMIN)
            .header("Last-Event-ID", last_event_id)
            .send()
    };
    let max = ninetrix_proto::api::MAX_STORED_INT;
    let mut failures = Vec::new();
    for bad in [
        (max + 1).to_string(),
        u64::MAX.to_string(),
        format!("{}0", u64::MAX),
        "-1".into(),
        "1.5".into(),
        "yesterday".into(),
        "null".into(),
        String::new(),
    ] {
        let resp = stream(bad.clone()).await.unwrap();
        let status = resp.status();
        let content_type = resp.headers().get("content-type").cloned();
        if status != StatusCode::BAD_REQUEST {
            failures.push(format!("Last-Event-ID {bad:?}: {status} {content_type:?}"));
            continue;
        }
        let body: Value = resp.json().await.expect("errors are JSON");
        if body["code"] != "invalid_header" || !body["message"].is_string() {
            failures.push(format!("Last-Event-ID {bad:?}: {body}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The largest seq the store can hold is a cursor like any other: the stream starts.
    for good in [max.to_string(), "0".into()] {
        let resp = stream(good.clone()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "Last-Event-ID {good:?}");
        assert_eq!(
            resp.headers()["content-type"],
            "text/event-stream",
            "Last-Event-ID {good:?}"
        );
        drop(resp);
    }
    api.stop().await;
}

/// Every long-poll's `wait` is 0 to `MAX_WAIT_SECS` (3600): one past it is `400 invalid_query`
/// naming the bound, not a request held open until the server's own cap (issue 33: `wait =
/// 9223372036854775806` was taken). The document states the same bound.
async fn a_wait_past_the_bound_is_refused(backend: Backend) {
    let Some(api) = TestApi::start_with(backend, |c| c.max_wait = std::time::Duration::ZERO).await
    else {
        return;
    };
    let thread = ThreadId::new_v7();
    let token = api.runner_token(thread).await;
    api.claim(thread, &token).await;
    let (_, agent) = api
        .admin(
            Method::POST,
            "/v1/tokens/agent",
            Some(json!({"pool": "p", "agent": "a"})),
        )
        .await;
    let agent = agent["token"].as_str().unwrap().to_string();
    let max = ninetrix_proto::api::MAX_WAIT_SECS;
    let routes = [
        (format!("/v1/runners/threads/{thread}/inbox?after=0&wait="), token.clone()),
        (
            format!("/v1/runners/threads/{thread}/handoffs?turn_seq=1&wait="),
            token.clone(),
        ),
        (
            format!("/v1/runners/threads/{thread}/approvals?turn_seq=1&wait="),
            token.clone(),
        ),
        ("/v1/runners/pools/p/agents/a/sessions?replica=1&wait=".to_string(), agent),
    ];
    let mut failures = Vec::new();
    for (path, who) in &routes {
        for (wait, want) in [
            (max, StatusCode::OK),
            (max + 1, StatusCode::BAD_REQUEST),
            (9_223_372_036_854_775_806, StatusCode::BAD_REQUEST),
        ] {
            let (status, body) = api
                .call(Method::GET, format!("{path}{wait}"), Some(who), None)
                .await;
            let named = want == StatusCode::OK
                || (body["code"] == "invalid_query"
                    && body["message"].as_str().unwrap_or("").contains("3600"));
            if status != want || !named {
                failures.push(format!("{path}{wait}: {status} {body}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let (_, doc) = api.call(Method::GET, "/openapi.json", None, None).await;
    let mut bounds = Vec::new();
    for (_, item) in doc["paths"].as_object().unwrap() {
        for (_, op) in item.as_object().unwrap() {
            for p in op["parameters"].as_array().into_iter().flatten() {
                if p["name"] == "wait" {
                    bounds.push(p["schema"]["maximum"].clone());
                }
            }
        }
    }
    assert_eq!(bounds, vec![json!(max); 4], "every `wait` states the bound");
    api.stop().await;
}

crate::support::both_backends!(
    last_event_id_out_of_range_is_invalid_header,
    a_wait_past_the_bound_is_refused,
);
