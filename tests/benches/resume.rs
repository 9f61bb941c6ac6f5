//! Crash → resume: SIGKILL of a runner in the middle of a turn (during a tool call), restarted at
//! once (as a process, so Docker's back-off is not included), until its first model request
//! after boot — over 30 crashes, on a thread of 10 turns and on one of 1,000 turns (2 KB each:
//! `latest` must not make a long thread slow to resume). Also the time to `boot` (claimed).
//!
//! Run: `cargo build --release -p ninetrix-cli && cargo bench -p ninetrix-e2e --bench resume`

use std::time::{Duration, Instant};

use chrono::Utc;
use ninetrix_client::Client;
use ninetrix_e2e::{ApiProcess, ninetrix_bin};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{CheckpointState, CommitRequest, EnqueueRequest, ThreadStatus};
use ninetrix_proto::events::{Decoded, TraceEvent};
use ninetrix_proto::{Message, Role};
use serde_json::{Value, json};

const CRASHES: usize = 30;
/// Bytes of each seeded answer (a turn of about 2 KB with its question).
const ANSWER_BYTES: usize = 1_900;

fn spec() -> Value {
    json!({
        "name": "resume",
        "metadata": {"name": null, "description": null, "role": null, "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "scripted", "via": null, "model": "scripted", "base_url": null, "api_key_secret": null,
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": null,
                    "resources": {"cpu": null, "memory_bytes": null},
                    "script": [
                        {"text": "Working.", "tool_calls": [
                            {"name": "file_write", "args": {"path": "log.txt", "content": "line\n", "mode": "append"}},
                            {"name": "sleep", "args": {"seconds": 0.4}}]},
                        {"text": "Done.", "tool_calls": []}
                    ]},
        "tools": [{"name": "file_write", "effect": "idempotent", "effect_pinned": false}, {"name": "sleep", "effect": "read", "effect_pinned": false}],
        "execution": {"durability": true, "replicas": 1, "max_turns": 10, "task": null, "resume": "truncate"},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": []
    })
}

fn start(api: &str, thread: ThreadId, ws: &std::path::Path) -> std::process::Child {
    std::process::Command::new(ninetrix_bin())
        .arg("runner")
        .env("AGENTFILE_API_URL", api)
        .env("AGENTFILE_RUNNER_TOKEN", "x")
        .env("AGENTFILE_THREAD_ID", thread.to_string())
        .env("AGENTFILE_AGENT_SPEC", spec().to_string())
        .env("AGENTFILE_WORKSPACE", ws)
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap()
}

/// Gives `thread` `turns` finished turns of history (one commit each), as an earlier runner would
/// have left them.
async fn seed(client: &Client, thread: ThreadId, turns: u64) {
    let epoch = client
        .claim(thread, &Default::default())
        .await
        .unwrap()
        .epoch;
    for t in 1..=turns {
        let request = CommitRequest {
            epoch,
            parent_version: t - 1,
            truncate_to: None,
            append: vec![
                Message::text(Role::User, format!("question {t}")),
                Message::text(Role::Assistant, "a".repeat(ANSWER_BYTES)),
            ],
            state: CheckpointState {
                turn_seq: t,
                turn_start_history_len: 2 * t - 1,
                status: ThreadStatus::Idle,
                inbox_cursor: 0,
                usage: Default::default(),
                handoff: None,
                attempt: None,
                context: None,
            },
            intents: Vec::new(),
            outcomes: Vec::new(),
            events: Vec::new(),
            approvals: Vec::new(),
            handoff_reply: None,
        };
        client.commit(thread, &request).await.unwrap();
    }
}

/// Times from the kill to `boot` and to the first model request of the resumed turn, in ms.
async fn crashes(
    api: &str,
    client: &Client,
    history: u64,
    ws: &std::path::Path,
) -> (Vec<f64>, Vec<f64>) {
    let thread = ThreadId::new_v7();
    seed(client, thread, history).await;
    let mut seen = 0u64;
    let events = |after: u64| {
        let client = client.clone();
        async move { client.events_page(thread, after, None).await.unwrap() }
    };
    let mut runner = start(api, thread, ws);
    let (mut to_boot, mut to_model) = (Vec::new(), Vec::new());
    for i in 1..=CRASHES {
        let message = EnqueueRequest {
            content: format!("turn {i}"),
            dedupe_key: None,
            control: None,
        };
        client.enqueue(thread, &message).await.unwrap();
        // Wait until the sleep is running (the append was executed and its events flushed).
        let deadline = Instant::now() + Duration::from_secs(30);
        'mid: loop {
            for e in events(seen).await {
                seen = e.seq;
                if let Decoded::Known(TraceEvent::ToolCall(call)) = e.decode()
                    && call.name == "file_write"
                {
                    break 'mid;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the turn never reached its sleep"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = runner.kill();
        let killed = Utc::now();
        let _ = runner.wait();
        runner = start(api, thread, ws);
        let mut boot = None;
        let deadline = Instant::now() + Duration::from_secs(30);
        'resumed: loop {
            for e in events(seen).await {
                seen = e.seq;
                match e.decode() {
                    Decoded::Known(TraceEvent::Boot(_)) => boot = Some(e.at()),
                    Decoded::Known(TraceEvent::LlmCall(_)) if boot.is_some() => {
                        to_model
                            .push((e.at() - killed).num_microseconds().unwrap() as f64 / 1000.0);
                        break 'resumed;
                    }
                    _ => {}
                }
            }
            assert!(
                Instant::now() < deadline,
                "the resumed turn never called the model"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        to_boot.push((boot.unwrap() - killed).num_microseconds().unwrap() as f64 / 1000.0);
        // Let the turn finish before the next one.
        'done: loop {
            for e in events(seen).await {
                seen = e.seq;
                if let Decoded::Known(TraceEvent::TurnCompleted(_)) = e.decode() {
                    break 'done;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let _ = runner.kill();
    let _ = runner.wait();
    (to_boot, to_model)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}", dir.path().join("api.db").display());
        let api = ApiProcess::start(&["--database", &db, "--insecure-dev"]);
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let client = Client::new(ninetrix_client::http_client(), &api.url, None);
        let p = |v: &mut Vec<f64>, q: f64| {
            v.sort_by(f64::total_cmp);
            v[((v.len() - 1) as f64 * q).round() as usize]
        };
        println!("| SIGKILL mid-tool → (process restarted at once) | history | p50 ms | p95 ms |");
        println!("|---|---:|---:|---:|");
        let mut medians = Vec::new();
        for history in [10, 1_000] {
            let (mut to_boot, mut to_model) = crashes(&api.url, &client, history, &ws).await;
            println!(
                "| runner claimed its thread (`boot`) | {history} turns | {:.1} | {:.1} |",
                p(&mut to_boot, 0.5),
                p(&mut to_boot, 0.95)
            );
            println!(
                "| first model request of the resumed turn | {history} turns | {:.1} | {:.1} |",
                p(&mut to_model, 0.5),
                p(&mut to_model, 0.95)
            );
            medians.push(p(&mut to_model, 0.5));
        }
        println!(
            "\n{CRASHES} crashes per thread; times from the kill (host clock) to the runner's own event time. \
             1,000 turns / 10 turns, first model request p50: {:.2}×",
            medians[1] / medians[0]
        );
    });
}
