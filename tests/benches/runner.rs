//! Runner benchmark: idle RSS, the static binary's size, and one turn's durability overhead (the
//! checkpoint, ledger and event writes of a scripted turn, whose model answers instantly, so the
//! whole turn time is overhead) against a 1 s model call.
//!
//! Run: `cargo build --release -p ninetrix-cli && cargo bench -p ninetrix-e2e --bench runner`

use std::time::{Duration, Instant};

use ninetrix_client::Client;
use ninetrix_e2e::{ApiProcess, ninetrix_bin};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::EnqueueRequest;
use ninetrix_proto::events::{Decoded, TraceEvent};
use serde_json::{Value, json};

const TURNS: u64 = 100;

fn spec() -> Value {
    json!({
        "name": "bench",
        "metadata": {"name": null, "description": null, "role": null, "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "scripted", "via": null, "model": "scripted", "base_url": null, "api_key_secret": null,
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": null,
                    "resources": {"cpu": null, "memory_bytes": null},
                    "script": [
                        {"text": "Appending.", "tool_calls": [{"name": "file_write", "args": {"path": "log.txt", "content": "line\n", "mode": "append"}}]},
                        {"text": "Done.", "tool_calls": []}
                    ]},
        "tools": [{"name": "file_write", "effect": "idempotent", "effect_pinned": false}],
        "execution": {"durability": true, "replicas": 1, "max_turns": 10, "task": null, "resume": "truncate"},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": []
    })
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

fn main() {
    let bin = ninetrix_bin();
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
        let thread = ThreadId::new_v7();
        let mut runner = std::process::Command::new(&bin)
            .arg("runner")
            .env("AGENTFILE_API_URL", &api.url)
            .env("AGENTFILE_RUNNER_TOKEN", "x")
            .env("AGENTFILE_THREAD_ID", thread.to_string())
            .env("AGENTFILE_AGENT_SPEC", spec().to_string())
            .env("AGENTFILE_WORKSPACE", &ws)
            .env("RUST_LOG", "warn")
            .spawn()
            .unwrap();
        let client = Client::new(ninetrix_client::http_client(), &api.url, None);
        let events = |after: u64| {
            let client = client.clone();
            async move { client.events_page(thread, after, None).await.unwrap_or_default() }
        };
        // Idle RSS once it is ready.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !events(0)
            .await
            .iter()
            .any(|e| matches!(e.decode(), Decoded::Known(TraceEvent::Ready(_))))
        {
            assert!(Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let idle_rss = rss_kib(runner.id());

        // Turns, one after another: message in, turn_completed out.
        let mut durations = Vec::new();
        let mut inside = Vec::new();
        let mut seen = 0;
        for i in 1..=TURNS {
            let started = Instant::now();
            let message = EnqueueRequest {
                content: format!("turn {i}"),
                dedupe_key: None,
            };
            client.enqueue(thread, &message).await.unwrap();
            'wait: loop {
                for e in events(seen).await {
                    seen = e.seq;
                    if let Decoded::Known(TraceEvent::TurnCompleted(done)) = e.decode()
                        && done.seq == i
                    {
                        inside.push(done.duration_ms);
                        break 'wait;
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            durations.push(started.elapsed());
        }
        let busy_rss = rss_kib(runner.id());
        let _ = runner.kill();
        let _ = runner.wait();
        durations.sort();
        let p50 = durations[durations.len() / 2];
        let p99 = durations[durations.len() * 99 / 100];
        let size = std::fs::metadata(&bin).unwrap().len();
        inside.sort_by(f64::total_cmp);
        let inside_p50 = inside[inside.len() / 2];
        println!("| measurement | value |");
        println!("|---|---:|");
        println!("| `ninetrix` static binary (= the runner image: FROM scratch + binary) | {:.1} MB |", size as f64 / 1e6);
        println!("| runner RSS, idle (claimed, inbox long-poll open) | {:.1} MB |", idle_rss as f64 / 1024.0);
        println!("| runner RSS after {TURNS} turns | {:.1} MB |", busy_rss as f64 / 1024.0);
        println!("| one scripted turn, message sent → turn_completed stored (p50) | {:.1} ms |", p50.as_secs_f64() * 1e3);
        println!("| same, p99 | {:.1} ms |", p99.as_secs_f64() * 1e3);
        println!("| one scripted turn inside the runner: input taken → final checkpoint (p50) | {inside_p50:.1} ms |");
        println!("| durability overhead vs a 1 s model call, inside the runner (p50) | {:.2} % |", inside_p50 / 10.0);
        println!("| same, end to end incl. enqueue, inbox wake-up and event flush (p50) | {:.2} % |", p50.as_secs_f64() * 100.0);
        println!("\nwrites per turn: 5 checkpoints (input, model response, tool result, model response, final), 2 ledger writes, 1–2 event batches; the model and the tool take ~0 ms here");
    });
}
