//! Fork, rewind and workspace snapshots (issue 41), against a real `ninetrix api` on SQLite:
//!
//! - **Snapshot per turn**: a runner whose workspace holds 10,000 files of 1 KB, and whose every
//!   turn overwrites one of them; each turn's `snapshot_taken` says how long the snapshot took and
//!   what it uploaded (the first turn, which uploads everything, apart), and the database file's
//!   growth over the later turns is measured.
//! - **Fork time** of a 1,000-turn thread (2 KB per turn): `POST …/fork` at its last turn and at
//!   its middle, 20 times each, and the bytes the forks add to the database file.
//!
//! Database sizes are read with the API stopped by SIGTERM, which checkpoints and truncates its
//! write-ahead log, then started again on the same address and file (the runner rides it out).
//!
//! Run: `cargo build --release -p ninetrix-cli && cargo bench -p ninetrix-e2e --bench forks`

use std::time::{Duration, Instant};

use ninetrix_client::Client;
use ninetrix_e2e::{ApiProcess, ninetrix_bin};
use ninetrix_proto::api::{
    CheckpointState, ClaimRequest, CommitRequest, EnqueueRequest, ForkRequest, ThreadStatus,
    TurnEnd,
};
use ninetrix_proto::events::{Decoded, TraceEvent};
use ninetrix_proto::{Message, Role, ThreadId};
use serde_json::{Value, json};

const FILES: usize = 10_000;
const FILE_BYTES: usize = 1_000;
const TURNS: u64 = 20;
const FORK_TURNS: u64 = 1_000;
const FORKS: usize = 20;

/// Turn *i* overwrites `files/f<i>.txt` with 1 KB of new text.
fn spec() -> Value {
    let script: Vec<Value> = (1..=TURNS)
        .flat_map(|i| {
            [
                json!({"text": "Editing.", "tool_calls": [{"name": "file_write", "args": {
                    "path": format!("files/f{i:05}.txt"), "content": format!("{i}").repeat(FILE_BYTES / 2)}}]}),
                json!({"text": "Edited.", "tool_calls": []}),
            ]
        })
        .collect();
    json!({
        "name": "editor",
        "metadata": {"name": null, "description": null, "role": null, "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "scripted", "via": null, "model": "scripted", "base_url": null, "api_key_secret": null,
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": null,
                    "resources": {"cpu": null, "memory_bytes": null}, "script": script},
        "tools": [{"name": "file_write", "effect": "idempotent", "effect_pinned": false}],
        "execution": {"durability": true, "replicas": 1, "max_turns": 10, "task": null, "resume": "truncate"},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": []
    })
}

/// The API on one address and database file.
struct Api {
    listen: String,
    db: String,
    process: ApiProcess,
}

impl Api {
    fn start(dir: &std::path::Path) -> Api {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let listen = format!("127.0.0.1:{port}");
        let db = format!("sqlite://{}", dir.join("api.db").display());
        let process = ApiProcess::start_on(&listen, &["--database", &db, "--insecure-dev"]);
        Api {
            listen,
            db,
            process,
        }
    }

    /// The database file's bytes with nothing in its write-ahead log: the API stopped by SIGTERM
    /// (which checkpoints and truncates the log) and started again.
    fn settled_bytes(&mut self, dir: &std::path::Path) -> u64 {
        ninetrix_e2e::signal(self.process.child.id(), "-TERM");
        let _ = self.process.child.wait();
        let bytes = std::fs::metadata(dir.join("api.db")).unwrap().len();
        let wal = std::fs::metadata(dir.join("api.db-wal")).map_or(0, |m| m.len());
        assert_eq!(wal, 0, "the write-ahead log is truncated at shutdown");
        self.process =
            ApiProcess::start_on(&self.listen, &["--database", &self.db, "--insecure-dev"]);
        bytes
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn snapshots(api: &mut Api, client: &Client, dir: &std::path::Path) {
    let ws = dir.join("workspace");
    std::fs::create_dir_all(ws.join("files")).unwrap();
    for i in 0..FILES {
        std::fs::write(
            ws.join("files").join(format!("f{i:05}.txt")),
            format!("{i:08}").repeat(FILE_BYTES / 8),
        )
        .unwrap();
    }
    let thread = ThreadId::new_v7();
    let mut runner = std::process::Command::new(ninetrix_bin())
        .arg("runner")
        .env("AGENTFILE_API_URL", &api.process.url)
        .env("AGENTFILE_RUNNER_TOKEN", "x")
        .env("AGENTFILE_THREAD_ID", thread.to_string())
        .env("AGENTFILE_POOL", "bench")
        .env("AGENTFILE_AGENT_SPEC", spec().to_string())
        .env("AGENTFILE_WORKSPACE", &ws)
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();
    let mut taken = Vec::new();
    let mut after_first = 0;
    let mut seen = 0;
    for i in 1..=TURNS {
        if i == 2 {
            after_first = api.settled_bytes(dir);
        }
        client
            .enqueue(
                thread,
                &EnqueueRequest {
                    content: format!("edit {i}"),
                    dedupe_key: None,
                    control: None,
                    mode: None,
                },
            )
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(300);
        'turn: loop {
            for e in client.events_page(thread, seen, None).await.unwrap() {
                seen = e.seq;
                match e.decode() {
                    Decoded::Known(TraceEvent::SnapshotTaken(s)) => taken.push(s),
                    Decoded::Known(TraceEvent::SnapshotSkipped(s)) => {
                        panic!("turn {i}: no snapshot: {}", s.why)
                    }
                    Decoded::Known(TraceEvent::TurnCompleted(_)) => break 'turn,
                    _ => {}
                }
            }
            assert!(Instant::now() < deadline, "turn {i} did not complete");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let last = api.settled_bytes(dir);
    let _ = runner.kill();
    let _ = runner.wait();
    let first = &taken[0];
    println!(
        "snapshot, first turn ({} files, {} bytes): {} ms, {} objects / {} bytes uploaded",
        first.snapshot.files,
        first.snapshot.bytes,
        first.ms,
        first.uploaded_objects,
        first.uploaded_bytes,
    );
    let rest = &taken[1..];
    println!(
        "snapshot, later turns (one file of {FILE_BYTES} bytes changed each; median of {}): {:.0} ms, {:.0} files hashed, {:.0} objects / {:.0} bytes uploaded; the database file grew {} bytes over those {} turns (their messages, versions and events included)",
        rest.len(),
        median(rest.iter().map(|s| s.ms as f64).collect()),
        median(rest.iter().map(|s| s.hashed_files as f64).collect()),
        median(rest.iter().map(|s| s.uploaded_objects as f64).collect()),
        median(rest.iter().map(|s| s.uploaded_bytes as f64).collect()),
        last.saturating_sub(after_first),
        rest.len(),
    );
}

async fn fork_time(api: &mut Api, client: &Client, dir: &std::path::Path) {
    let thread = ThreadId::new_v7();
    let epoch = client
        .claim(
            thread,
            &ClaimRequest {
                pool: Some("bench".into()),
                agent: Some("editor".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .epoch;
    let mut len = 0;
    for t in 1..=FORK_TURNS {
        len += 2;
        let request = CommitRequest {
            epoch,
            parent_version: t - 1,
            truncate_to: None,
            append: vec![
                Message::text(Role::User, format!("question {t}")),
                Message::text(Role::Assistant, "a".repeat(1_900)),
            ],
            state: CheckpointState {
                turn_seq: t,
                turn_start_history_len: len - 1,
                status: ThreadStatus::Idle,
                ..Default::default()
            },
            intents: Vec::new(),
            outcomes: Vec::new(),
            events: Vec::new(),
            approvals: Vec::new(),
            handoff_reply: None,
            turn_end: Some(TurnEnd {
                turn_seq: t,
                snapshot: None,
                snapshot_skipped: None,
                keep_turns: None,
            }),
        };
        client.commit(thread, &request).await.unwrap();
    }
    for at in [FORK_TURNS, FORK_TURNS / 2] {
        let mut ms = Vec::new();
        let before = api.settled_bytes(dir);
        for _ in 0..FORKS {
            let started = Instant::now();
            let fork = client
                .fork(
                    thread,
                    &ForkRequest {
                        at_turn: at,
                        session: None,
                    },
                )
                .await
                .unwrap();
            ms.push(started.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(fork.history_len, 2 * at);
        }
        println!(
            "fork of a {FORK_TURNS}-turn thread at turn {at}: median {:.1} ms, max {:.1} ms over {FORKS}; the database file grew {} bytes for the {FORKS} forks",
            median(ms.clone()),
            ms.iter().copied().fold(0.0, f64::max),
            api.settled_bytes(dir).saturating_sub(before)
        );
    }
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let mut api = Api::start(dir.path());
    let client = Client::new(ninetrix_client::http_client(), &api.process.url, None);
    snapshots(&mut api, &client, dir.path()).await;
    // The forks on a database of their own, so its sizes are theirs.
    let forks = tempfile::tempdir().unwrap();
    let mut api = Api::start(forks.path());
    let client = Client::new(ninetrix_client::http_client(), &api.process.url, None);
    fork_time(&mut api, &client, forks.path()).await;
}
