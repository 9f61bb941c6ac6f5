//! Runner benchmark: idle RSS, the static binary's size, and one turn's durability overhead (the
//! three commits and the event write of a scripted one-write-tool turn, whose model answers
//! instantly, so the whole turn time is overhead) against a 1 s model call; end to end, the reply
//! is seen on the thread's event stream, as `ninetrix invoke` waits for it. The floor, measured in
//! the same run: three commits of the same shape over HTTP to the same API, one after another.
//!
//! Run: `cargo build --release -p ninetrix-cli && cargo bench -p ninetrix-e2e --bench runner`

use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use ninetrix_client::Client;
use ninetrix_e2e::{ApiProcess, ninetrix_bin};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    CheckpointState, CommitIntent, CommitOutcome, CommitRequest, EnqueueRequest, ThreadStatus,
};
use ninetrix_proto::effects::Effect;
use ninetrix_proto::events::{Decoded, TraceEvent};
use ninetrix_proto::{Block, Message, Role};
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

/// The three commits of one scripted one-write-tool turn, as the runner sends them.
fn floor_steps(epoch: u64, version: u64, turn: u64) -> Vec<CommitRequest> {
    let key = format!("floor-{turn}");
    let state = |status| CheckpointState {
        turn_seq: turn,
        turn_start_history_len: 4 * turn - 3,
        status,
        inbox_cursor: turn,
        usage: Default::default(),
        handoff: None,
        attempt: None,
        context: None,
        ..Default::default()
    };
    let call = Message::new(
        Role::Assistant,
        vec![
            Block::Text {
                text: "Appending.".into(),
            },
            Block::ToolCall {
                id: format!("c{turn}"),
                name: "file_write".into(),
                args: json!({"path": "log.txt", "content": "line\n", "mode": "append"}),
            },
        ],
    );
    let step = |parent, append, status| CommitRequest {
        epoch,
        parent_version: parent,
        truncate_to: None,
        append,
        state: state(status),
        intents: Vec::new(),
        outcomes: Vec::new(),
        events: Vec::new(),
        approvals: Vec::new(),
        handoff_reply: None,
        turn_end: None,
    };
    let mut first = step(
        version,
        vec![Message::text(Role::User, format!("turn {turn}")), call],
        ThreadStatus::InTurn,
    );
    first.intents = vec![CommitIntent {
        key: key.clone(),
        turn_seq: turn,
        tool: "file_write".into(),
        args: json!({"path": "log.txt", "content": "line\n", "mode": "append"}),
        effect: Effect::Write,
    }];
    let mut second = step(
        version + 1,
        vec![Message::new(
            Role::Tool,
            vec![Block::ToolResult {
                call_id: format!("c{turn}"),
                content: "appended 5 bytes to log.txt".into(),
                is_error: false,
            }],
        )],
        ThreadStatus::InTurn,
    );
    second.outcomes = vec![CommitOutcome {
        key,
        ok: true,
        result: "appended 5 bytes to log.txt".into(),
    }];
    let third = step(
        version + 2,
        vec![Message::text(Role::Assistant, "Done.")],
        ThreadStatus::Idle,
    );
    vec![first, second, third]
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

        // Turns, one after another: message in, turn_completed out (on the SSE stream).
        let mut durations = Vec::new();
        let mut inside = Vec::new();
        let mut seen = events(0).await.last().map_or(0, |e| e.seq);
        for i in 1..=TURNS {
            let mut stream = Box::pin(client.event_stream(thread, seen).await.unwrap());
            let started = Instant::now();
            let message = EnqueueRequest {
                content: format!("turn {i}"),
                dedupe_key: None,
                control: None, mode: None,
            };
            client.enqueue(thread, &message).await.unwrap();
            while let Some(e) = stream.next().await {
                let e = e.unwrap();
                seen = e.seq;
                if let Decoded::Known(TraceEvent::TurnCompleted(done)) = e.decode()
                    && done.seq == i
                {
                    inside.push(done.duration_ms);
                    break;
                }
            }
            durations.push(started.elapsed());
        }
        // The floor: the turn's three commits alone (response + intent, outcome + result, final
        // answer), over HTTP to the same API, on a thread of their own.
        let floor_thread = ThreadId::new_v7();
        let epoch = client.claim(floor_thread, &Default::default()).await.unwrap().epoch;
        let mut floor = Vec::new();
        let mut floor_two = Vec::new();
        let mut version = 0;
        for turn in 1..=TURNS {
            let started = Instant::now();
            for (n, step) in floor_steps(epoch, version, turn).into_iter().enumerate() {
                if n == 2 {
                    floor_two.push(started.elapsed());
                }
                version = client.commit(floor_thread, &step).await.unwrap().version;
            }
            floor.push(started.elapsed());
        }
        // The tool's own work in the same run: append a line to a file in the workspace and
        // fsync it, as `file_write` in append mode does.
        let mut appends = Vec::new();
        for _ in 0..TURNS {
            use std::io::Write as _;
            let started = Instant::now();
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(ws.join("floor.txt"))
                .unwrap();
            f.write_all(b"line\n").unwrap();
            f.sync_all().unwrap();
            appends.push(started.elapsed());
        }
        appends.sort();
        let append_p50 = appends[appends.len() / 2].as_secs_f64() * 1e3;
        let busy_rss = rss_kib(runner.id());
        let _ = runner.kill();
        let _ = runner.wait();
        durations.sort();
        let p50 = durations[durations.len() / 2];
        let p99 = durations[durations.len() * 99 / 100];
        let size = std::fs::metadata(&bin).unwrap().len();
        inside.sort_by(f64::total_cmp);
        let inside_p50 = inside[inside.len() / 2];
        floor.sort();
        let floor_p50 = floor[floor.len() / 2].as_secs_f64() * 1e3;
        floor_two.sort();
        let floor_two_p50 = floor_two[floor_two.len() / 2].as_secs_f64() * 1e3;
        println!("| measurement | value |");
        println!("|---|---:|");
        println!("| `ninetrix` static binary (= the runner image: FROM scratch + binary) | {:.1} MB |", size as f64 / 1e6);
        println!("| runner RSS, idle (claimed, inbox long-poll open) | {:.1} MB |", idle_rss as f64 / 1024.0);
        println!("| runner RSS after {TURNS} turns | {:.1} MB |", busy_rss as f64 / 1024.0);
        println!("| one scripted turn, message sent → reply seen on the event stream (p50) | {:.1} ms |", p50.as_secs_f64() * 1e3);
        println!("| same, p99 | {:.1} ms |", p99.as_secs_f64() * 1e3);
        println!("| one scripted turn inside the runner: input taken → final commit sent (p50; `turn_completed.duration_ms`, which rides on that commit) | {inside_p50:.1} ms |");
        println!("| floor: the turn's first 2 commits alone over HTTP, same API, same run (p50) | {floor_two_p50:.1} ms |");
        println!("| floor: all 3 commits alone over HTTP, same API, same run (p50) | {floor_p50:.1} ms |");
        println!("| floor: the tool's append + fsync alone, same workspace, same run (p50) | {append_p50:.2} ms |");
        println!("| durability overhead vs a 1 s model call, inside the runner (p50) | {:.2} % |", inside_p50 / 10.0);
        println!("| same, end to end incl. enqueue and inbox wake-up (p50) | {:.2} % |", p50.as_secs_f64() * 100.0);
        println!("\ndurable writes per turn: 3 commits (first response + input + the write's intent; the write's outcome + result; final answer + idle), the turn's events riding on them (turn_completed on the last); the model takes ~0 ms, the append its own fsync");
    });
}
