//! The Anthropic and OpenAI clients against local fake servers that speak the real SSE wire
//! formats over real HTTP: chunk boundaries anywhere, tool-call argument deltas, 429 with
//! retry-after, 529/overloaded, error events after 200, cut streams, idle streams, fatal 400s.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use ninetrix_proto::events::TraceEvent;
use ninetrix_proto::{Block, Message, Role};
use ninetrix_runner::backoff::Schedule;
use ninetrix_runner::health::Health;
use ninetrix_runner::llm::{Endpoint, Llm, LlmError, LlmRequest, NoAnswer, TextPiece, ToolDef};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// One canned HTTP response.
#[derive(Clone)]
struct Canned {
    status: u16,
    headers: Vec<(&'static str, &'static str)>,
    chunks: Vec<Vec<u8>>,
    /// Keep the connection open and silent after the chunks.
    stall: bool,
}

fn sse(status: u16, text: &str, seed: u64) -> Canned {
    Canned {
        status,
        headers: vec![("content-type", "text/event-stream")],
        chunks: split(text.as_bytes(), seed),
        stall: false,
    }
}

/// Splits bytes at pseudo-random points (mid-line, mid-JSON, mid-UTF-8).
fn split(bytes: &[u8], seed: u64) -> Vec<Vec<u8>> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let n = 1 + (state >> 33) as usize % 40;
        out.push(bytes[i..(i + n).min(bytes.len())].to_vec());
        i += n;
    }
    out
}

#[derive(Clone, Default)]
struct Fake {
    responses: Arc<Mutex<VecDeque<Canned>>>,
    requests: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
}

async fn handle(
    axum::extract::State(fake): axum::extract::State<Fake>,
    headers: HeaderMap,
    body: String,
) -> Response {
    fake.requests
        .lock()
        .unwrap()
        .push((headers, serde_json::from_str(&body).unwrap_or(Value::Null)));
    let canned = fake
        .responses
        .lock()
        .unwrap()
        .pop_front()
        .expect("a canned response for every request");
    let stall = canned.stall;
    let chunks = canned.chunks.into_iter().map(Ok::<_, std::io::Error>);
    let stream = futures_util::stream::iter(chunks).chain(futures_util::stream::unfold(
        stall,
        |stall| async move {
            if stall {
                std::future::pending::<()>().await;
            }
            None
        },
    ));
    let mut resp = Response::builder().status(StatusCode::from_u16(canned.status).unwrap());
    for (k, v) in canned.headers {
        resp = resp.header(k, v);
    }
    resp.body(Body::from_stream(stream)).unwrap()
}

use futures_util::StreamExt as _;

async fn serve(fake: Fake) -> String {
    let app = axum::Router::new()
        .route("/v1/messages", axum::routing::post(handle))
        .route("/v1/chat/completions", axum::routing::post(handle))
        .with_state(fake);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn llm(provider: &str, base_url: &str, idle_secs: u64) -> Llm {
    llm_with(provider, base_url, idle_secs, Health::new(None))
}

fn llm_with(provider: &str, base_url: &str, idle_secs: u64, health: Health) -> Llm {
    let spec = json!({
        "name": "a",
        "metadata": {"name": null, "description": null, "role": null, "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": provider, "via": null, "model": if provider == "anthropic" { "claude-sonnet-4-6" } else { "gpt-4o-mini" },
                    "base_url": base_url, "api_key_secret": "KEY", "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30,
                    "image": null, "resources": {"cpu": null, "memory_bytes": null}, "script": []},
        "tools": [], "execution": {"durability": false, "replicas": 1, "max_turns": 5, "task": null, "resume": "truncate"},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": ["KEY"]
    });
    let vars: HashMap<String, String> = [
        ("AGENTFILE_AGENT_SPEC".to_string(), spec.to_string()),
        (
            "AGENTFILE_THREAD_ID".to_string(),
            ninetrix_proto::ThreadId::new_v7().to_string(),
        ),
        ("KEY".to_string(), "sk-test-key".to_string()),
        (
            "AGENTFILE_STREAM_IDLE_TIMEOUT".to_string(),
            idle_secs.to_string(),
        ),
    ]
    .into_iter()
    .collect();
    let config = ninetrix_runner::config::from_vars(&vars, std::path::Path::new("/nonexistent"))
        .expect("config");
    let mut llm = Llm::new(&config, ninetrix_client::http_client(), health);
    llm.schedule = Schedule {
        first: Duration::from_millis(50),
        cap: Duration::from_millis(50),
    };
    llm
}

fn history() -> Vec<Message> {
    vec![
        Message::text(Role::User, "read it"),
        Message::new(
            Role::Assistant,
            vec![
                Block::Thinking {
                    text: "plan".into(),
                    signature: Some("SIG".into()),
                },
                Block::ToolCall {
                    id: "toolu_1".into(),
                    name: "file_read".into(),
                    args: json!({"path": "a"}),
                },
            ],
        ),
        Message::new(
            Role::Tool,
            vec![Block::ToolResult {
                call_id: "toolu_1".into(),
                content: "contents".into(),
                is_error: false,
            }],
        ),
    ]
}

fn tools() -> Vec<ToolDef> {
    vec![ToolDef {
        name: "file_read".into(),
        description: "read".into(),
        parameters: json!({"type": "object"}),
    }]
}

const ANTHROPIC_STREAM: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-6\",\"content\":[],\"usage\":{\"input_tokens\":120,\"output_tokens\":1}}}\n\n",
    "event: ping\ndata: {\"type\":\"ping\"}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Writing the fïle \"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"now.\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"file_write\",\"input\":{}}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"path\\\": \\\"no\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"tes.md\\\", \\\"content\\\": \\\"hi\\\"}\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":42}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
);

const OPENAI_STREAM: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Két \"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"calls.\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"file_read\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"list_dir\",\"arguments\":\"{\\\"pa\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\":\\\"a.md\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"th\\\":\\\".\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":77,\"completion_tokens\":19,\"total_tokens\":96}}\n\n",
    "data: [DONE]\n\n",
);

fn request<'a>(h: &'a [Message], t: &'a [ToolDef]) -> LlmRequest<'a> {
    LlmRequest {
        stream: None,
        system: Some("You are a tester."),
        history: h,
        tools: t,
        purpose: ninetrix_runner::llm::Purpose::Round { hidden_rounds: 0 },
    }
}

#[tokio::test]
async fn anthropic_streams_assemble_whatever_the_chunking() {
    for seed in 0..12 {
        let fake = Fake::default();
        fake.responses
            .lock()
            .unwrap()
            .push_back(sse(200, ANTHROPIC_STREAM, seed));
        let base = serve(fake.clone()).await;
        let (h, t) = (history(), tools());
        let turn = llm("anthropic", &base, 5)
            .complete(&request(&h, &t), &CancellationToken::new(), |_| {})
            .await
            .unwrap();
        assert_eq!(
            turn.message.blocks,
            vec![
                Block::Text {
                    text: "Writing the fïle now.".into()
                },
                Block::ToolCall {
                    id: "toolu_2".into(),
                    name: "file_write".into(),
                    args: json!({"path": "notes.md", "content": "hi"})
                },
            ]
        );
        assert_eq!(
            (
                turn.usage.input_tokens,
                turn.usage.output_tokens,
                turn.stop_reason.as_str()
            ),
            (120, 42, "tool_use")
        );
        assert!((turn.usage.cost_usd - (120.0 * 3.0 + 42.0 * 15.0) / 1e6).abs() < 1e-12);
        // The request: system on top, tool results leading a user message, thinking sent back
        // with its signature, the key in x-api-key.
        let (headers, body) = fake.requests.lock().unwrap()[0].clone();
        assert_eq!(headers["x-api-key"], "sk-test-key");
        assert_eq!(headers["anthropic-version"], "2023-06-01");
        assert_eq!(body["system"], "You are a tester.");
        assert_eq!(body["stream"], true);
        assert_eq!(
            body["messages"][1]["content"][0],
            json!({"type": "thinking", "thinking": "plan", "signature": "SIG"})
        );
        assert_eq!(body["messages"][2]["role"], "user");
        assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
        assert_eq!(body["messages"][2]["content"][0]["tool_use_id"], "toolu_1");
        assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
    }
}

#[tokio::test]
async fn openai_streams_assemble_interleaved_tool_calls() {
    for seed in 0..12 {
        let fake = Fake::default();
        fake.responses
            .lock()
            .unwrap()
            .push_back(sse(200, OPENAI_STREAM, seed));
        let base = serve(fake.clone()).await;
        let (h, t) = (history(), tools());
        let turn = llm("openai", &format!("{base}/v1"), 5)
            .complete(&request(&h, &t), &CancellationToken::new(), |_| {})
            .await
            .unwrap();
        assert_eq!(
            turn.message.blocks,
            vec![
                Block::Text {
                    text: "Két calls.".into()
                },
                Block::ToolCall {
                    id: "call_a".into(),
                    name: "file_read".into(),
                    args: json!({"path": "a.md"})
                },
                Block::ToolCall {
                    id: "call_b".into(),
                    name: "list_dir".into(),
                    args: json!({"path": "."})
                },
            ]
        );
        assert_eq!(
            (
                turn.usage.input_tokens,
                turn.usage.output_tokens,
                turn.stop_reason.as_str()
            ),
            (77, 19, "tool_calls")
        );
        let (headers, body) = fake.requests.lock().unwrap()[0].clone();
        assert_eq!(headers["authorization"], "Bearer sk-test-key");
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "You are a tester."})
        );
        assert_eq!(
            body["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\"a\"}"
        );
        assert_eq!(
            body["messages"][3],
            json!({"role": "tool", "tool_call_id": "toolu_1", "content": "contents"})
        );
        assert_eq!(body["stream_options"]["include_usage"], true);
    }
}

#[tokio::test]
async fn rate_limits_overload_and_broken_streams_are_retried() {
    let fake = Fake::default();
    {
        let mut r = fake.responses.lock().unwrap();
        r.push_back(Canned { status: 429, headers: vec![("retry-after", "1"), ("content-type", "application/json")], chunks: vec![b"{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow down\"}}".to_vec()], stall: false });
        r.push_back(Canned { status: 529, headers: vec![("content-type", "application/json")], chunks: vec![b"{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}".to_vec()], stall: false });
        // A 200 whose stream reports overload.
        r.push_back(sse(200, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", 1));
        // A stream cut before message_stop.
        let cut = &ANTHROPIC_STREAM[..ANTHROPIC_STREAM.find("event: message_delta").unwrap()];
        r.push_back(sse(200, cut, 2));
        // An idle stream.
        let mut idle = sse(200, &ANTHROPIC_STREAM[..200], 3);
        idle.stall = true;
        r.push_back(idle);
        r.push_back(sse(200, ANTHROPIC_STREAM, 4));
    }
    let base = serve(fake.clone()).await;
    let (h, t) = (history(), tools());
    let started = Instant::now();
    let retries = std::sync::Mutex::new(Vec::new());
    let turn = llm("anthropic", &base, 1)
        .complete(&request(&h, &t), &CancellationToken::new(), |e| {
            if let TraceEvent::LlmRetry(r) = e {
                retries.lock().unwrap().push(r)
            }
        })
        .await
        .unwrap();
    assert_eq!(turn.stop_reason, "tool_use");
    assert_eq!(
        fake.requests.lock().unwrap().len(),
        6,
        "five failures, then success"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "retry-after was honoured"
    );
    // Each retry is reported (it becomes an `llm_retry` line in the trace), in order, with the
    // wait the runner chose: the server's `retry-after` (1 s), capped by the schedule (50 ms).
    let retries = retries.into_inner().unwrap();
    assert_eq!(
        retries.iter().map(|r| r.attempt).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    assert!(retries.iter().all(|r| r.max_attempts.is_none()));
    assert_eq!(retries[0].retry_in_ms, 50);
    assert!(retries[0].reason.contains("429"), "{:?}", retries[0]);
}

#[tokio::test]
async fn a_bad_request_is_not_retried() {
    let fake = Fake::default();
    fake.responses.lock().unwrap().push_back(Canned {
        status: 400,
        headers: vec![],
        chunks: vec![b"{\"error\":{\"message\":\"bad model\"}}".to_vec()],
        stall: false,
    });
    let base = serve(fake.clone()).await;
    let (h, t) = (history(), tools());
    let err = llm("openai", &format!("{base}/v1"), 5)
        .complete(&request(&h, &t), &CancellationToken::new(), |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LlmError::Fatal(m) if m.contains("400") && m.contains("bad model")),
        "{err:?}"
    );
    assert_eq!(fake.requests.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn cancellation_aborts_a_call_at_once() {
    let fake = Fake::default();
    let mut idle = sse(200, &OPENAI_STREAM[..100], 0);
    idle.stall = true;
    fake.responses.lock().unwrap().push_back(idle);
    let base = serve(fake).await;
    let (h, t) = (history(), tools());
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let err = llm("openai", &format!("{base}/v1"), 60)
        .complete(&request(&h, &t), &cancel, |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Cancelled));
    assert!(started.elapsed() < Duration::from_secs(10));
}

fn canned_json(status: u16, body: &str) -> Canned {
    Canned {
        status,
        headers: vec![("content-type", "application/json")],
        chunks: vec![body.as_bytes().to_vec()],
        stall: false,
    }
}

#[tokio::test]
async fn an_outage_is_retried_until_the_model_answers_and_shows_in_the_health() {
    let fake = Fake::default();
    {
        let mut r = fake.responses.lock().unwrap();
        for _ in 0..8 {
            r.push_back(canned_json(
                503,
                "{\"error\":{\"message\":\"upstream down\"}}",
            ));
        }
        r.push_back(sse(200, OPENAI_STREAM, 7));
    }
    let base = format!("{}/v1", serve(fake.clone()).await);
    let (h, t) = (history(), tools());
    let health = Health::new(None);
    let model = llm_with("openai", &base, 5, health.clone());
    let seen = Mutex::new(Vec::new());
    let turn = model
        .complete(&request(&h, &t), &CancellationToken::new(), |e| {
            if let TraceEvent::LlmRetry(r) = e {
                seen.lock()
                    .unwrap()
                    .push((r.attempt, health.report().model));
            }
        })
        .await
        .unwrap();
    assert_eq!(turn.stop_reason, "tool_calls");
    assert_eq!(
        fake.requests.lock().unwrap().len(),
        9,
        "more than the old limit of 6"
    );
    let seen = seen.into_inner().unwrap();
    // A blip is not an outage; the third failure in a row is, with the cause and the key.
    assert_eq!(seen[0].1, None);
    assert_eq!(seen[1].1, None);
    assert_eq!(
        seen[2].1.as_deref(),
        Some(&*format!(
            "model unreachable: HTTP 503: upstream down from {base} (runtime.base_url)"
        ))
    );
    assert_eq!(
        health.report().model,
        None,
        "healthy again once it answered"
    );
}

#[tokio::test]
async fn a_refused_key_names_the_secret() {
    let fake = Fake::default();
    fake.responses.lock().unwrap().push_back(canned_json(
        401,
        "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key\"}}",
    ));
    let base = serve(fake.clone()).await;
    let (h, t) = (history(), tools());
    let err = llm("anthropic", &base, 5)
        .complete(&request(&h, &t), &CancellationToken::new(), |_| {})
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the model provider refused the API key: HTTP 401: invalid x-api-key — check the secret KEY (runtime.api_key_secret)"
    );
    assert_eq!(fake.requests.lock().unwrap().len(), 1, "not retried");
}

#[tokio::test]
async fn an_unknown_model_names_runtime_model() {
    let fake = Fake::default();
    fake.responses.lock().unwrap().push_back(canned_json(
        404,
        "{\"error\":{\"message\":\"The model `gpt-4o-mini` does not exist or you do not have access to it.\",\"type\":\"invalid_request_error\",\"code\":\"model_not_found\"}}",
    ));
    let base = format!("{}/v1", serve(fake.clone()).await);
    let (h, t) = (history(), tools());
    let err = llm("openai", &base, 5)
        .complete(&request(&h, &t), &CancellationToken::new(), |_| {})
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the model provider does not know the model `gpt-4o-mini`: HTTP 404: The model `gpt-4o-mini` does not exist or you do not have access to it. — check runtime.model, or runtime.base_url ({base}) if its path is wrong"
        )
    );
}

fn endpoint(base: &str) -> Endpoint {
    Endpoint {
        base: base.to_string(),
        from_spec: true,
        provider: "openai",
        key_secret: None,
        model: "m".into(),
        place: "runtime".into(),
    }
}

/// A real failed request to `url` through the runner's HTTP client (or `client`).
async fn failed(client: &reqwest::Client, url: &str) -> reqwest::Error {
    client.get(url).send().await.expect_err("the request fails")
}

#[tokio::test]
async fn a_refused_connection_is_named_with_the_url_and_the_key() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let base = format!("http://127.0.0.1:{port}/v1");
    let e = failed(
        &ninetrix_client::http_client(),
        &format!("{base}/chat/completions"),
    )
    .await;
    let cause = ninetrix_runner::llm::classify(&e);
    assert_eq!(cause, NoAnswer::Refused, "{e:?}");
    assert_eq!(
        ninetrix_runner::llm::connect_error_text(&cause, &endpoint(&base)),
        format!("connection refused at {base} (runtime.base_url)")
    );
    let default = Endpoint {
        from_spec: false,
        ..endpoint(&base)
    };
    assert_eq!(
        ninetrix_runner::llm::connect_error_text(&cause, &default),
        format!(
            "connection refused at {base} (the openai default URL; set runtime.base_url to use another)"
        )
    );
}

#[tokio::test]
async fn an_unknown_host_is_a_dns_failure() {
    let base = "http://ninetrix-no-such-host.invalid/v1";
    let e = failed(
        &ninetrix_client::http_client(),
        &format!("{base}/chat/completions"),
    )
    .await;
    let cause = ninetrix_runner::llm::classify(&e);
    assert_eq!(cause, NoAnswer::Dns, "{e:?}");
    assert_eq!(
        ninetrix_runner::llm::connect_error_text(&cause, &endpoint(base)),
        "DNS lookup failed for ninetrix-no-such-host.invalid (runtime.base_url)"
    );
}

#[tokio::test]
async fn tls_to_a_plain_listener_is_a_handshake_failure() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt as _;
        while let Ok((mut sock, _)) = listener.accept().await {
            let _ = sock
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
        }
    });
    let base = format!("https://{addr}/v1");
    let e = failed(
        &ninetrix_client::http_client(),
        &format!("{base}/chat/completions"),
    )
    .await;
    let cause = ninetrix_runner::llm::classify(&e);
    let NoAnswer::Tls(why) = &cause else {
        panic!("not a TLS failure: {cause:?} from {e:?}");
    };
    assert_eq!(
        ninetrix_runner::llm::connect_error_text(&cause, &endpoint(&base)),
        format!("TLS handshake with {addr} failed: {why} (runtime.base_url)")
    );
}

#[tokio::test]
async fn a_silent_server_is_a_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let base = format!("http://{addr}/v1");
    let e = failed(&client, &format!("{base}/chat/completions")).await;
    let cause = ninetrix_runner::llm::classify(&e);
    assert_eq!(cause, NoAnswer::Timeout, "{e:?}");
    assert_eq!(
        ninetrix_runner::llm::connect_error_text(&NoAnswer::ConnectTimeout, &endpoint(&base)),
        format!("timed out connecting to {base} (runtime.base_url)")
    );
}

/// What a stream sink got: the attempts' texts, in order.
fn streamed(mut rx: tokio::sync::mpsc::UnboundedReceiver<TextPiece>) -> Vec<String> {
    let mut attempts: Vec<String> = Vec::new();
    while let Ok(piece) = rx.try_recv() {
        match piece {
            TextPiece::Start => attempts.push(String::new()),
            TextPiece::Text(t) => attempts.last_mut().expect("Start comes first").push_str(&t),
        }
    }
    attempts
}

#[tokio::test]
async fn the_answers_text_streams_as_it_arrives_and_a_retry_starts_it_over() {
    // Anthropic: text deltas, not the tool call's JSON.
    let fake = Fake::default();
    fake.responses
        .lock()
        .unwrap()
        .push_back(sse(200, ANTHROPIC_STREAM, 3));
    let base = serve(fake.clone()).await;
    let (h, t) = (history(), tools());
    let (sink, rx) = tokio::sync::mpsc::unbounded_channel();
    let req = LlmRequest {
        stream: Some(&sink),
        ..request(&h, &t)
    };
    llm("anthropic", &base, 5)
        .complete(&req, &CancellationToken::new(), |_| {})
        .await
        .unwrap();
    assert_eq!(streamed(rx), ["Writing the fïle now."]);
    // OpenAI, after a cut stream: the second attempt streams from its start.
    let fake = Fake::default();
    {
        let mut r = fake.responses.lock().unwrap();
        let cut = &OPENAI_STREAM[..OPENAI_STREAM.find("\"tool_calls\"").unwrap()];
        let cut = &cut[..cut.rfind("data:").unwrap()];
        r.push_back(sse(200, cut, 1));
        r.push_back(sse(200, OPENAI_STREAM, 2));
    }
    let base = serve(fake.clone()).await;
    let (sink, rx) = tokio::sync::mpsc::unbounded_channel();
    let req = LlmRequest {
        stream: Some(&sink),
        ..request(&h, &t)
    };
    llm("openai", &format!("{base}/v1"), 5)
        .complete(&req, &CancellationToken::new(), |_| {})
        .await
        .unwrap();
    assert_eq!(streamed(rx), ["Két calls.", "Két calls."]);
}

// Fallback (`runtime.fallback`): two local fake servers, the primary OpenAI-compatible, the
// fallback Anthropic.

/// Serves `fake` on `addr` (`127.0.0.1:0`: any port); the task's abort drops the listener, so
/// new connections are refused.
async fn serve_on(fake: Fake, addr: &str) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let app = axum::Router::new()
        .route("/v1/messages", axum::routing::post(handle))
        .route("/v1/chat/completions", axum::routing::post(handle))
        .with_state(fake);
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, task)
}

/// An OpenAI-compatible primary at `primary` (its key `KEY`) with an Anthropic fallback at
/// `fallback` (its key `KEY2`), left after `after_secs` of failures. Connections are not kept
/// between calls, so a primary whose listener is gone refuses the next one.
fn chain(primary: &str, fallback: &str, after_secs: u64) -> Llm {
    let spec = json!({
        "name": "a",
        "metadata": {"name": null, "description": null, "role": null, "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "openai", "via": null, "model": "gpt-4o-mini",
                    "base_url": primary, "api_key_secret": "KEY", "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30,
                    "image": null, "resources": {"cpu": null, "memory_bytes": null}, "script": [],
                    "fallback": [{"provider": "anthropic", "model": "claude-sonnet-4-6", "base_url": fallback, "api_key_secret": "KEY2"}],
                    "fallback_after_secs": after_secs},
        "tools": [], "execution": {"durability": false, "replicas": 1, "max_turns": 5, "task": null, "resume": "truncate"},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": ["KEY", "KEY2"]
    });
    let vars: HashMap<String, String> = [
        ("AGENTFILE_AGENT_SPEC", spec.to_string()),
        (
            "AGENTFILE_THREAD_ID",
            ninetrix_proto::ThreadId::new_v7().to_string(),
        ),
        ("KEY", "sk-primary".to_string()),
        ("KEY2", "sk-ant-fallback".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let config = ninetrix_runner::config::from_vars(&vars, std::path::Path::new("/nonexistent"))
        .expect("config");
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut llm = Llm::new(&config, http, Health::new(None));
    llm.schedule = Schedule {
        first: Duration::from_millis(50),
        cap: Duration::from_millis(50),
    };
    llm
}

/// A history an OpenAI-compatible server made: its calls' IDs have dots and colons, which
/// Anthropic refuses as they are.
fn openai_history() -> Vec<Message> {
    vec![
        Message::text(Role::User, "read it"),
        Message::new(
            Role::Assistant,
            vec![Block::ToolCall {
                id: "call.1:file_read".into(),
                name: "file_read".into(),
                args: json!({"path": "a"}),
            }],
        ),
        Message::new(
            Role::Tool,
            vec![Block::ToolResult {
                call_id: "call.1:file_read".into(),
                content: "contents".into(),
                is_error: false,
            }],
        ),
    ]
}

/// Calls `model`, collecting the events it reports.
async fn call(
    model: &Llm,
    h: &[Message],
) -> (
    Result<ninetrix_runner::engine::LlmTurn, LlmError>,
    Vec<TraceEvent>,
) {
    let t = tools();
    let events = Mutex::new(Vec::new());
    let answer = model
        .complete(&request(h, &t), &CancellationToken::new(), |e| {
            events.lock().unwrap().push(e)
        })
        .await;
    (answer, events.into_inner().unwrap())
}

fn fallbacks(events: &[TraceEvent]) -> Vec<ninetrix_proto::events::ModelFallback> {
    events
        .iter()
        .filter_map(|e| match e {
            TraceEvent::ModelFallback(f) => Some(f.clone()),
            _ => None,
        })
        .collect()
}

fn retries(events: &[TraceEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, TraceEvent::LlmRetry(_)))
        .count()
}

#[tokio::test]
async fn a_primary_that_stops_answering_falls_back_and_comes_back_once_it_recovers() {
    let primary = Fake::default();
    primary
        .responses
        .lock()
        .unwrap()
        .push_back(sse(200, OPENAI_STREAM, 1));
    let (addr, server) = serve_on(primary.clone(), "127.0.0.1:0").await;
    let fallback = Fake::default();
    for seed in 0..2 {
        fallback
            .responses
            .lock()
            .unwrap()
            .push_back(sse(200, ANTHROPIC_STREAM, seed));
    }
    let fallback_base = serve(fallback.clone()).await;
    let primary_base = format!("http://{addr}/v1");
    let model = chain(&primary_base, &fallback_base, 1);
    let h = openai_history();

    // The primary answers: nothing about a fallback.
    let (answer, events) = call(&model, &h).await;
    assert_eq!(answer.unwrap().model, "gpt-4o-mini");
    assert!(fallbacks(&events).is_empty());

    // Mid-run, the primary stops listening: its calls are refused.
    server.abort();
    let _ = server.await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    let started = Instant::now();
    let (answer, events) = call(&model, &h).await;
    let turn = answer.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "the primary was retried for fallback_after first"
    );
    assert!(retries(&events) >= 2, "{events:?}");
    assert_eq!(turn.model, "claude-sonnet-4-6", "the model that answered");
    assert!(
        (turn.usage.cost_usd - (120.0 * 3.0 + 42.0 * 15.0) / 1e6).abs() < 1e-12,
        "priced by the model that answered"
    );
    let fell = fallbacks(&events);
    assert_eq!(fell.len(), 1);
    assert_eq!(
        (fell[0].from.as_str(), fell[0].to.as_str()),
        ("openai/gpt-4o-mini", "anthropic/claude-sonnet-4-6")
    );
    assert_eq!(
        fell[0].reason,
        format!("connection refused at {primary_base} (runtime.base_url)")
    );
    assert!(!fell[0].reason.contains("sk-"), "no secret in the reason");
    // The fallback got the OpenAI-made history in its own terms, with its own key.
    let (headers, body) = fallback.requests.lock().unwrap()[0].clone();
    assert_eq!(headers["x-api-key"], "sk-ant-fallback");
    assert_eq!(body["model"], "claude-sonnet-4-6");
    let use_id = body["messages"][1]["content"][0]["id"].as_str().unwrap();
    let result_id = body["messages"][2]["content"][0]["tool_use_id"]
        .as_str()
        .unwrap();
    assert_eq!(use_id, result_id, "the call and its result still match");
    assert!(
        use_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
        "{use_id}"
    );

    // The next call goes straight to the fallback while the primary is skipped.
    let started = Instant::now();
    let (answer, events) = call(&model, &h).await;
    assert_eq!(answer.unwrap().model, "claude-sonnet-4-6");
    assert_eq!(retries(&events), 0, "the primary is not tried: {events:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(
        fallbacks(&events).len(),
        1,
        "each fallback answer is traced"
    );
    assert_eq!(fallback.requests.lock().unwrap().len(), 2);

    // The primary recovers; once the skip time is over it is tried again and answers.
    primary
        .responses
        .lock()
        .unwrap()
        .push_back(sse(200, OPENAI_STREAM, 2));
    let (_, _server) = serve_on(primary.clone(), &addr.to_string()).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (answer, events) = call(&model, &h).await;
    assert_eq!(answer.unwrap().model, "gpt-4o-mini");
    assert!(fallbacks(&events).is_empty());
    assert_eq!(primary.requests.lock().unwrap().len(), 2);
    assert_eq!(fallback.requests.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_request_the_primary_refuses_does_not_fall_back() {
    let primary = Fake::default();
    primary.responses.lock().unwrap().push_back(canned_json(
        400,
        "{\"error\":{\"message\":\"Invalid value for 'temperature'\",\"code\":\"invalid_value\"}}",
    ));
    let primary_base = format!("{}/v1", serve(primary.clone()).await);
    let fallback = Fake::default();
    let fallback_base = serve(fallback.clone()).await;
    let model = chain(&primary_base, &fallback_base, 1);
    let (answer, events) = call(&model, &openai_history()).await;
    let err = answer.unwrap_err();
    assert!(
        matches!(&err, LlmError::Fatal(m) if m.contains("HTTP 400")),
        "{err:?}"
    );
    assert!(fallbacks(&events).is_empty());
    assert!(
        fallback.requests.lock().unwrap().is_empty(),
        "a 4xx that names the request never falls back"
    );
}

#[tokio::test]
async fn a_fallbacks_refused_key_names_its_own_secret() {
    let primary = Fake::default();
    for _ in 0..200 {
        primary.responses.lock().unwrap().push_back(canned_json(
            503,
            "{\"error\":{\"message\":\"upstream down\"}}",
        ));
    }
    let primary_base = format!("{}/v1", serve(primary.clone()).await);
    let fallback = Fake::default();
    fallback.responses.lock().unwrap().push_back(canned_json(
        401,
        "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key\"}}",
    ));
    let fallback_base = serve(fallback.clone()).await;
    let model = chain(&primary_base, &fallback_base, 1);
    let (answer, _) = call(&model, &openai_history()).await;
    assert_eq!(
        answer.unwrap_err().to_string(),
        "the model provider refused the API key: HTTP 401: invalid x-api-key — check the secret \
         KEY2 (runtime.fallback[0].api_key_secret)"
    );
}

#[tokio::test]
async fn a_providers_429_backs_off_the_whole_limiter_through_the_lease() {
    use ninetrix_proto::api::SlotWait;
    use ninetrix_runner::limits::MemoryPermits;
    let fake = Fake::default();
    {
        let mut r = fake.responses.lock().unwrap();
        r.push_back(Canned {
            status: 429,
            headers: vec![("retry-after", "2"), ("content-type", "application/json")],
            chunks: vec![b"{\"error\":{\"message\":\"slow down\"}}".to_vec()],
            stall: false,
        });
        r.push_back(sse(200, OPENAI_STREAM, 5));
    }
    let base = format!("{}/v1", serve(fake.clone()).await);
    let permits = MemoryPermits::new();
    // The model with a pool-wide limit (`runtime.limits`), its calls leasing from `permits`.
    let spec = json!({
        "name": "a",
        "metadata": {"name": null, "description": null, "role": null, "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "openai", "via": null, "model": "gpt-4o-mini", "base_url": base, "api_key_secret": "KEY",
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": null,
                    "resources": {"cpu": null, "memory_bytes": null}, "script": [], "limits": {"max_in_flight": 2}},
        "tools": [], "execution": {"durability": false, "replicas": 1, "max_turns": 5, "task": null, "resume": "truncate"},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": ["KEY"]
    });
    let vars: HashMap<String, String> = [
        ("AGENTFILE_AGENT_SPEC", spec.to_string()),
        (
            "AGENTFILE_THREAD_ID",
            ninetrix_proto::ThreadId::new_v7().to_string(),
        ),
        ("KEY", "sk-test-key".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let config =
        ninetrix_runner::config::from_vars(&vars, std::path::Path::new("/nonexistent")).unwrap();
    let mut model = Llm::new(&config, ninetrix_client::http_client(), Health::new(None))
        .with_permits(std::sync::Arc::new(permits.clone()), 7, None);
    model.schedule = Schedule {
        first: Duration::from_millis(50),
        cap: Duration::from_millis(50),
    };
    let h = history();
    let started = Instant::now();
    let (answer, events) = call(&model, &h).await;
    let turn = answer.unwrap();
    assert_eq!(turn.stop_reason, "tool_calls");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the limiter held the call back for the provider's retry-after"
    );
    // Each attempt leased the model's limiter: named by provider, host and key digest.
    let asked = permits.requests();
    assert!(asked.len() >= 3, "{asked:?}");
    let limiter = &asked[0].limiter;
    assert!(
        limiter.starts_with(&format!(
            "openai@{}#",
            base.trim_start_matches("http://").trim_end_matches("/v1")
        )),
        "{limiter}"
    );
    assert!(!limiter.contains("sk-test-key"));
    assert_eq!(
        (asked[0].epoch, asked[0].limits.max_in_flight),
        (7, Some(2))
    );
    assert!(asked[0].estimated_tokens > 0);
    // The 429 is reported with the provider's retry-after; the answer with what it used.
    let mut released = Vec::new();
    for _ in 0..100 {
        released = permits.releases();
        if released.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(released.len(), 2, "{released:?}");
    assert_eq!(
        released[0].rate_limited.as_ref().map(|r| r.retry_after_ms),
        Some(2_000)
    );
    assert_eq!(
        (released[1].input_tokens, released[1].output_tokens),
        (77, 19)
    );
    assert!((released[1].cost_usd - turn.usage.cost_usd).abs() < 1e-12);
    assert_eq!(permits.in_flight(limiter), 0);
    // The wait for the limiter is traced, with why.
    let waited: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            TraceEvent::ModelWaited(w) => Some(w.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(waited.len(), 1, "{events:?}");
    assert!(matches!(waited[0].wait, SlotWait::RateLimited { .. }));
    assert_eq!(waited[0].provider, "openai");
}
