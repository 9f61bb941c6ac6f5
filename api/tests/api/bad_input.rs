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
        (
            format!("/v1/runners/threads/{thread}/inbox?after=0&wait="),
            token.clone(),
        ),
        (
            format!("/v1/runners/threads/{thread}/handoffs?turn_seq=1&wait="),
            token.clone(),
        ),
        (
            format!("/v1/runners/threads/{thread}/approvals?turn_seq=1&wait="),
            token.clone(),
        ),
        (
            "/v1/runners/pools/p/agents/a/sessions?replica=1&wait=".to_string(),
            agent,
        ),
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

/// Bytes over a plain socket to the server: the answer's status and JSON body.
async fn send_bytes(api: &TestApi, request: &[u8]) -> (u16, Value, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = api.url.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer).to_string();
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let json = answer
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json, answer)
}

/// What the HTTP layer refuses before any route sees the request — a request line or header it
/// cannot parse, a target too long, a head too large — is `{code, message}` JSON like every
/// other refusal (issue 33: these were bare, empty-bodied 400/414/431 answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_layers_refusals_are_json() {
    let api = TestApi::start(Backend::Sqlite).await.unwrap();
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(70_000));
    let many_headers = format!(
        "GET /v1/threads HTTP/1.1\r\nHost: t\r\n{}\r\n",
        (0..200)
            .map(|i| format!("X-H{i}: v\r\n"))
            .collect::<String>()
    );
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (
            b"GET /v1/threads HTTP/1.1\r\nHost: t\r\nno colon here\r\n\r\n".to_vec(),
            400,
            "malformed_request",
        ),
        (
            b"GET /v1/thr eads HTTP/1.1\r\nHost: t\r\n\r\n".to_vec(),
            400,
            "malformed_request",
        ),
        (
            b"POST /v1/sessions HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n".to_vec(),
            400,
            "malformed_request",
        ),
        (long_target.into_bytes(), 414, "too_large"),
        (many_headers.into_bytes(), 431, "too_large"),
    ];
    let mut failures = Vec::new();
    for (request, status, code) in cases {
        let (got, body, answer) = send_bytes(&api, &request).await;
        if got != status || body["code"] != code || !body["message"].is_string() {
            failures.push(format!("want {status} {code}, got {answer:.300}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // A well-formed request on the same server is untouched, pipelined ones included.
    let (status, body, answer) = send_bytes(
        &api,
        format!(
            "GET /v1/threads HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {ADMIN}\r\n\r\n\
             GET /v1/threads HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {ADMIN}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(body.is_null(), "two answers, one after the other: {answer}");
    assert_eq!(answer.matches("HTTP/1.1 200 OK").count(), 2, "{answer}");
    api.stop().await;
}

/// One request over a plain socket, the path sent byte for byte (an HTTP client would resolve
/// `%2E%2E` as a dot segment before sending): the status and the JSON body.
async fn over_socket(api: &TestApi, method: &str, path: &str, body: &str) -> (u16, Value) {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {ADMIN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, json, _) = send_bytes(api, request.as_bytes()).await;
    (status, json)
}

/// Names are names, not free text (issue 33): a pool or agent in a path (after percent-decoding)
/// or a body follows the agentfile's rule — no `..`, `/`, upper case or control characters —
/// and a session key or an approver's name holds no control, bidirectional-control or
/// line-separator character. Each refusal names the field and echoes the value escaped and short.
async fn names_are_not_free_text(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let mut failures = Vec::new();
    for path in [
        "/v1/pools/%2E%2E/agents/a",
        "/v1/pools/a%2Fb/agents/a",
        "/v1/pools/Shop/agents/a",
        "/v1/pools/p/agents/%1B%5B2J",
        "/v1/pools/p/agents/a%E2%80%AEb",
    ] {
        let (status, body) = over_socket(&api, "PUT", path, r#"{"replicas": 1}"#).await;
        if status != 400 || body["code"] != "invalid_path" {
            failures.push(format!("PUT {path}: {status} {body}"));
        }
    }
    for (method, path) in [
        ("PUT", "/v1/pools/%2E%2E/triggers"),
        ("PUT", "/v1/pools/%2e%2e%2fx/triggers"),
        ("POST", "/v1/hooks/%2E%2E/gh"),
        ("POST", "/v1/hooks/p/..%2Fgh"),
    ] {
        let (status, body) = over_socket(&api, method, path, r#"{"triggers": []}"#).await;
        if status != 400 || body["code"] != "invalid_path" {
            failures.push(format!("{method} {path}: {status} {body}"));
        }
    }
    for (path, body) in [
        (
            "/v1/sessions",
            json!({"pool": "..", "agent": "a", "key": "k"}),
        ),
        (
            "/v1/sessions",
            json!({"pool": "p", "agent": "A", "key": "k"}),
        ),
        (
            "/v1/sessions",
            json!({"pool": "p", "agent": "a", "key": "admin\u{202E}fdp.exe"}),
        ),
        (
            "/v1/sessions",
            json!({"pool": "p", "agent": "a", "key": "one\u{2028}two"}),
        ),
        ("/v1/tokens/agent", json!({"pool": "p/q", "agent": "a"})),
        (
            "/v1/tokens/approver",
            json!({"pool": "p", "name": "\u{1b}[2Jroot"}),
        ),
        (
            "/v1/tokens/approver",
            json!({"pool": "p", "name": "eve\u{2066}"}),
        ),
        (
            "/v1/tokens/approver",
            json!({"pool": "../p", "name": "eve"}),
        ),
    ] {
        let (status, answer) = api.admin(Method::POST, path, Some(body.clone())).await;
        let message = answer["message"].as_str().unwrap_or("");
        if status != StatusCode::UNPROCESSABLE_ENTITY
            || message.contains('\u{1b}')
            || message.contains('\u{202E}')
        {
            failures.push(format!("POST {path} {body}: {status} {answer}"));
        }
    }
    // What the CLI writes is taken.
    let (status, body) = api
        .admin(
            Method::POST,
            "/v1/sessions",
            Some(json!({"pool": "shop-1", "agent": "bot_2", "key": "customer 42 / eu — Zoë"})),
        )
        .await;
    if !status.is_success() {
        failures.push(format!("a valid session: {status} {body}"));
    }
    let (status, body) = api
        .admin(
            Method::POST,
            "/v1/tokens/approver",
            Some(json!({"pool": "shop-1", "name": "Ana María"})),
        )
        .await;
    if status != StatusCode::CREATED {
        failures.push(format!("a valid approver: {status} {body}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    api.stop().await;
}

crate::support::both_backends!(
    last_event_id_out_of_range_is_invalid_header,
    a_wait_past_the_bound_is_refused,
    names_are_not_free_text,
);
