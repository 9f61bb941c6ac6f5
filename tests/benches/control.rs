//! Control of a running turn: how long an interrupt and a cancel take to end a turn whose model
//! call is streaming (from the API's acknowledgement of the control to the stored
//! `turn_completed` that names it, and to the stream's connection being dropped), and how long
//! a steer takes to reach the model (from its acknowledgement to the model request that carries
//! it, the turn's tool having finished). One runner process against a `ninetrix api` (SQLite)
//! and a local OpenAI stand-in (the real streaming wire format) that streams one piece and then
//! nothing until it is dropped.
//!
//! Run: `cargo build --release -p ninetrix-cli && cargo bench -p ninetrix-e2e --bench control`

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use ninetrix_client::Client;
use ninetrix_e2e::{ApiProcess, ninetrix_bin};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{CancelRequest, EnqueueRequest, MessageMode};
use ninetrix_proto::events::{Decoded, TraceEvent};
use serde_json::{Value, json};
use tokio::sync::watch;

const ROUNDS: usize = 30;

/// What the stand-in saw, counted.
struct Seen {
    /// Slow streams started.
    started: watch::Sender<u64>,
    /// Slow streams dropped by the runner before their end.
    dropped: watch::Sender<u64>,
    /// Requests whose last message is a steer.
    steered: watch::Sender<u64>,
}

impl Seen {
    fn new() -> Seen {
        Seen {
            started: watch::channel(0).0,
            dropped: watch::channel(0).0,
            steered: watch::channel(0).0,
        }
    }
}

/// Counts one more.
fn bump(count: &watch::Sender<u64>) {
    count.send_modify(|n| *n += 1);
}

/// Waits until `count` passes `past`.
async fn past(count: &watch::Sender<u64>, past: u64) {
    count.subscribe().wait_for(|n| *n > past).await.unwrap();
}

struct Guard(Arc<Seen>);

impl Drop for Guard {
    fn drop(&mut self) {
        bump(&self.0.dropped);
    }
}

fn sse(delta: Value, finish: Option<&str>) -> String {
    let body = json!({"id": "c", "object": "chat.completion.chunk", "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {body}\n\n")
}

fn done() -> String {
    let usage = json!({"id": "c", "object": "chat.completion.chunk", "model": "fake", "choices": [],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}});
    format!("data: {usage}\n\ndata: [DONE]\n\n")
}

fn response(body: String) -> axum::response::Response {
    axum::response::Response::builder()
        .header("content-type", "text/event-stream")
        .body(axum::body::Body::from(body))
        .unwrap()
}

/// `slow …` streams forever; `tool …` calls `sleep` for 0.2 s; a request that ends with a
/// steer (it joined the turn after the tool's result) is counted; anything else is answered at
/// once.
async fn answer(seen: Arc<Seen>, body: String) -> axum::response::Response {
    let request: Value = serde_json::from_str(&body).unwrap();
    let messages = request["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    let content = last["content"].as_str().unwrap_or_default();
    if last["role"] == "user" && content.starts_with("steer") {
        bump(&seen.steered);
    }
    if last["role"] == "user" && content.starts_with("slow") {
        bump(&seen.started);
        let first = sse(json!({"role": "assistant", "content": "Thinking"}), None);
        let guard = Guard(seen.clone());
        let stream = futures_util::stream::once(async move { Ok::<_, std::io::Error>(first) })
            .chain(futures_util::stream::once(async move {
                let _guard = guard;
                std::future::pending::<()>().await;
                Ok(String::new())
            }));
        return axum::response::Response::builder()
            .header("content-type", "text/event-stream")
            .body(axum::body::Body::from_stream(stream))
            .unwrap();
    }
    if last["role"] == "user" && content.starts_with("tool") {
        let call = json!({"tool_calls": [{"index": 0, "id": format!("c{}", messages.len()), "type": "function",
            "function": {"name": "sleep", "arguments": "{\"seconds\":0.2}"}}]});
        return response(
            [
                sse(json!({"role": "assistant", "content": null}), None),
                sse(call, None),
                sse(json!({}), Some("tool_calls")),
                done(),
            ]
            .concat(),
        );
    }
    response(
        [
            sse(json!({"role": "assistant", "content": "ok"}), None),
            sse(json!({}), Some("stop")),
            done(),
        ]
        .concat(),
    )
}

fn spec(base_url: &str) -> Value {
    json!({
        "name": "bench",
        "metadata": {"name": null, "description": null, "role": null, "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "openai", "via": null, "model": "fake", "base_url": base_url, "api_key_secret": null,
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": null,
                    "resources": {"cpu": null, "memory_bytes": null}, "script": []},
        "tools": [{"name": "sleep", "effect": "read", "effect_pinned": false}],
        "execution": {"durability": true, "replicas": 1, "max_turns": 10, "task": null, "resume": "truncate"},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": []
    })
}

/// Waits until the thread has stored the `turn_completed` of inbox `seq`.
async fn completed(client: &Client, thread: ThreadId, seq: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = client.events_after(thread, 0).await.unwrap();
        if events.iter().any(
            |e| matches!(e.decode(), Decoded::Known(TraceEvent::TurnCompleted(t)) if t.seq == seq),
        ) {
            return;
        }
        assert!(Instant::now() < deadline, "turn {seq} never completed");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn send(client: &Client, thread: ThreadId, content: &str, mode: MessageMode) -> u64 {
    let request = EnqueueRequest {
        content: content.into(),
        dedupe_key: None,
        control: None,
        mode: Some(mode),
    };
    client.enqueue(thread, &request).await.unwrap().seq
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn report(what: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    println!(
        "| {what} | {:.1} | {:.1} | {:.1} |",
        percentile(&ms, 0.5),
        percentile(&ms, 0.95),
        ms[ms.len() - 1]
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let api = ApiProcess::start(&["--database", &db, "--insecure-dev"]);
    let client = Client::new(ninetrix_client::http_client(), &api.url, None);
    let seen = Arc::new(Seen::new());
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post({
            let seen = seen.clone();
            move |body: String| answer(seen.clone(), body)
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let model = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let thread = ThreadId::new_v7();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut runner = std::process::Command::new(ninetrix_bin())
        .arg("runner")
        .env("AGENTFILE_API_URL", &api.url)
        .env("AGENTFILE_RUNNER_TOKEN", "x")
        .env("AGENTFILE_THREAD_ID", thread.to_string())
        .env("AGENTFILE_AGENT_SPEC", spec(&model).to_string())
        .env("AGENTFILE_WORKSPACE", &ws)
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();

    let (mut ended, mut dropped, mut cancelled, mut steered) = (vec![], vec![], vec![], vec![]);
    for i in 0..ROUNDS {
        // An interrupt of a streaming model call.
        let (started, dropped_so_far) = (*seen.started.borrow(), *seen.dropped.borrow());
        let slow = send(&client, thread, &format!("slow {i}"), MessageMode::Queue).await;
        past(&seen.started, started).await;
        let t0 = Instant::now();
        let next = send(
            &client,
            thread,
            &format!("next {i}"),
            MessageMode::Interrupt,
        )
        .await;
        past(&seen.dropped, dropped_so_far).await;
        dropped.push(t0.elapsed().as_secs_f64() * 1000.0);
        completed(&client, thread, slow).await;
        ended.push(t0.elapsed().as_secs_f64() * 1000.0);
        completed(&client, thread, next).await;

        // A cancel of a streaming model call.
        let started = *seen.started.borrow();
        let slow = send(&client, thread, &format!("slow c{i}"), MessageMode::Queue).await;
        past(&seen.started, started).await;
        let t0 = Instant::now();
        client
            .cancel(
                thread,
                &CancelRequest {
                    by: Some("bench".into()),
                    reason: None,
                    dedupe_key: None,
                },
            )
            .await
            .unwrap();
        completed(&client, thread, slow).await;
        cancelled.push(t0.elapsed().as_secs_f64() * 1000.0);

        // A steer while a 0.2 s tool runs: from its acknowledgement to the model request that
        // carries it (the tool's remaining time included).
        let carried = *seen.steered.borrow();
        let turn = send(&client, thread, &format!("tool {i}"), MessageMode::Queue).await;
        // Sent 50 ms into the turn: the tool is running.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t0 = Instant::now();
        send(&client, thread, &format!("steer {i}"), MessageMode::Steer).await;
        past(&seen.steered, carried).await;
        steered.push(t0.elapsed().as_secs_f64() * 1000.0);
        completed(&client, thread, turn).await;
    }
    println!("| control | p50 ms | p95 ms | max ms |");
    println!("|---|---:|---:|---:|");
    report("interrupt → the model stream dropped", dropped);
    report("interrupt → the turn's end stored", ended);
    report("cancel → the turn's end stored", cancelled);
    report(
        "steer → the model request that carries it (≤ 0.2 s tool left)",
        steered,
    );
    println!(
        "streams dropped: {} of {}",
        *seen.dropped.borrow(),
        2 * ROUNDS
    );
    runner.kill().ok();
    runner.wait().ok();
}
