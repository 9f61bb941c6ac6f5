//! Crash → resume: SIGKILL of a runner in the middle of a turn (during a tool call), restarted at
//! once (as a process, so Docker's back-off is not included), until its first model request
//! after boot — over 30 crashes, on a thread of 10 turns, one of 1,000 turns (2 KB each:
//! `latest` must not make a long thread slow to resume) and one of 2,000 turns compacted every
//! 10 turns (a summary of 1.5 KB each: what a long-lived thread looks like). Also the time to
//! `boot` (claimed), and the cost of a compaction's commit and the bytes it stores.
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

/// Bytes of each seeded compaction's summary.
const SUMMARY_BYTES: usize = 1_500;

/// A compaction record covering `from..to` (turns `first..=last`) with a summary of
/// [`SUMMARY_BYTES`].
fn compaction(from: u64, to: u64, first: u64, last: u64) -> Message {
    Message::new(
        Role::System,
        vec![ninetrix_proto::Block::Compaction(
            ninetrix_proto::context::Compaction {
                strategy: ninetrix_proto::context::Strategy::Summarize,
                reason: ninetrix_proto::context::CompactionReason::Threshold,
                from,
                to,
                turns: [first, last],
                summary: Some("s".repeat(SUMMARY_BYTES)),
                native: None,
                model: Some("scripted".into()),
                tokens_before: 100_000,
                tokens_after: 5_000,
                cleared: 0,
                at_version: 0,
            },
        )],
    )
}

/// Gives `thread` `turns` finished turns of history (one commit each), as an earlier runner would
/// have left them; with `compact_every`, a compaction record before every that many turns'
/// input, covering all but the last two turns. Returns each compaction commit's time in ms.
async fn seed(
    client: &Client,
    thread: ThreadId,
    turns: u64,
    compact_every: Option<u64>,
) -> Vec<f64> {
    let epoch = client
        .claim(thread, &Default::default())
        .await
        .unwrap()
        .epoch;
    let (mut len, mut covered, mut starts) = (0u64, 0u64, Vec::new());
    let mut timings = Vec::new();
    for t in 1..=turns {
        let mut append = Vec::new();
        let compacting = compact_every.is_some_and(|n| t > 2 && t % n == 0);
        if compacting {
            // Everything before the last two turns.
            let to: u64 = starts[starts.len() - 2];
            append.push(compaction(covered, to, 1, t - 3));
            covered = to;
            len += 1;
        }
        starts.push(len);
        append.push(Message::text(Role::User, format!("question {t}")));
        append.push(Message::text(Role::Assistant, "a".repeat(ANSWER_BYTES)));
        len += 2;
        let request = CommitRequest {
            epoch,
            parent_version: t - 1,
            truncate_to: None,
            append,
            state: CheckpointState {
                turn_seq: t,
                turn_start_history_len: len - 1,
                status: ThreadStatus::Idle,
                inbox_cursor: 0,
                usage: Default::default(),
                handoff: None,
                attempt: None,
                context: None,
                ..Default::default()
            },
            intents: Vec::new(),
            outcomes: Vec::new(),
            events: Vec::new(),
            approvals: Vec::new(),
            handoff_reply: None,
            turn_end: None,
        };
        let started = Instant::now();
        client.commit(thread, &request).await.unwrap();
        if compacting {
            timings.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    timings
}

/// Times from the kill to `boot` and to the first model request of the resumed turn, in ms.
async fn crashes(
    api: &str,
    client: &Client,
    history: u64,
    compact_every: Option<u64>,
    ws: &std::path::Path,
) -> (Vec<f64>, Vec<f64>) {
    let thread = ThreadId::new_v7();
    seed(client, thread, history, compact_every).await;
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
            mode: None,
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
        for (history, compact_every) in [(10, None), (1_000, None), (2_000, Some(10))] {
            let (mut to_boot, mut to_model) =
                crashes(&api.url, &client, history, compact_every, &ws).await;
            let history = match compact_every {
                Some(n) => format!("{history} (compacted every {n})"),
                None => history.to_string(),
            };
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
             First model request p50, 1,000 turns / 10 turns: {:.2}×; 2,000 compacted / 10: {:.2}×",
            medians[1] / medians[0],
            medians[2] / medians[0]
        );
        // A compaction's commit: on a thread of 2,000 turns, one record of a 1.5 KB summary
        // with the next turn; the record as the API stores it (its message JSON).
        let thread = ThreadId::new_v7();
        let mut timings = seed(&client, thread, 2_000, Some(10)).await;
        let plain = ThreadId::new_v7();
        let started = Instant::now();
        seed(&client, plain, 200, None).await;
        let turn_ms = started.elapsed().as_secs_f64() * 1000.0 / 200.0;
        let record = serde_json::to_string(&compaction(0, 100, 1, 50)).unwrap().len();
        println!(
            "\n| compaction commit (record + the next turn) | p50 ms | p95 ms | a plain turn commit, mean ms | bytes stored per compaction (the record's JSON) |"
        );
        println!("|---|---:|---:|---:|---:|");
        println!(
            "| on a 2,000-turn thread, {} compactions | {:.2} | {:.2} | {turn_ms:.2} | {record} |",
            timings.len(),
            p(&mut timings, 0.5),
            p(&mut timings, 0.95),
        );
    });
}
