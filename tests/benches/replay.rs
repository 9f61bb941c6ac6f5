//! Replay (issue 42), against a real `ninetrix api` on SQLite: a scripted agent's 100-turn
//! conversation (each turn one `file_write` and one `file_read`, then an answer) is recorded by a
//! runner process, then replayed with `ninetrix replay --thread … --json` against the same
//! agentfile — three fresh replays, each a scratch thread whose runner runs in the `replay`
//! process and answers every call from the recording. It prints the wall time of each replay
//! (from the command's start to its report: making the replay, reading the 100 recorded turns,
//! the 100 turns, reading them back and comparing), and per turn.
//!
//! Run: `cargo build --release -p ninetrix-cli && cargo bench -p ninetrix-e2e --bench replay`

use std::time::{Duration, Instant};

use ninetrix_client::Client;
use ninetrix_e2e::{ApiProcess, ninetrix_bin};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::EnqueueRequest;
use ninetrix_proto::replay::ReplayReport;

const TURNS: usize = 100;
const REPLAYS: usize = 3;

/// The agentfile: turn *i* writes `f<i>.txt`, reads it back, and answers.
fn agentfile() -> String {
    let mut script = String::new();
    for i in 1..=TURNS {
        script.push_str(&format!(
            "        - {{ text: \"Writing {i}.\", tool_calls: [{{ name: file_write, args: {{ path: f{i}.txt, content: \"turn {i}\" }} }}] }}\n\
             \x20       - {{ text: \"Reading {i}.\", tool_calls: [{{ name: file_read, args: {{ path: f{i}.txt }} }}] }}\n\
             \x20       - {{ text: \"Done with {i}.\" }}\n"
        ));
    }
    format!(
        "name: bench\nagents:\n  writer:\n    runtime:\n      provider: scripted\n      script:\n{script}    tools: [file_write, file_read]\n"
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(bench());
}

async fn bench() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let api = ApiProcess::start(&["--database", &db, "--insecure-dev"]);
    let client = Client::new(ninetrix_client::http_client(), &api.url, None);
    let text = agentfile();
    let file = dir.path().join("agentfile.yaml");
    std::fs::write(&file, &text).unwrap();
    let parsed = ninetrix_agentfile::parse("agentfile.yaml", &text).unwrap();
    let spec = serde_json::to_value(&parsed.agentfile.agents[0]).unwrap();
    let ws = dir.path().join("workspace");
    std::fs::create_dir_all(&ws).unwrap();
    let thread = ThreadId::new_v7();
    let mut runner = std::process::Command::new(ninetrix_bin())
        .arg("runner")
        .env("AGENTFILE_API_URL", &api.url)
        .env("AGENTFILE_RUNNER_TOKEN", "x")
        .env("AGENTFILE_THREAD_ID", thread.to_string())
        .env("AGENTFILE_POOL", "bench")
        .env("AGENTFILE_REPLICA", "1")
        .env("AGENTFILE_AGENT_SPEC", spec.to_string())
        .env("AGENTFILE_WORKSPACE", &ws)
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();
    let recording = Instant::now();
    for i in 1..=TURNS {
        client
            .enqueue(
                thread,
                &EnqueueRequest {
                    content: format!("turn {i}, please"),
                    dedupe_key: None,
                    control: None,
                    mode: None,
                },
            )
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let ended = client.turns(thread).await.map_or(0, |t| t.turns.len());
        if ended == TURNS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the recording did not end: {ended} turns"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "recorded {TURNS} turns (2 tool calls each) in {:.1} s",
        recording.elapsed().as_secs_f64()
    );
    let _ = runner.kill();
    let _ = runner.wait();
    let mut times = Vec::new();
    for k in 0..REPLAYS {
        let home = dir.path().join(format!("home-{k}"));
        let started = Instant::now();
        let out = std::process::Command::new(ninetrix_bin())
            .args(["replay", "--agent", "writer", "--thread"])
            .arg(thread.to_string())
            .arg("-f")
            .arg(&file)
            .args(["--json", "--fresh"])
            .env("AGENTFILE_API_URL", &api.url)
            .env("AGENTFILE_ADMIN_TOKEN", "insecure-dev")
            .env("AGENTFILE_HOME", &home)
            .output()
            .unwrap();
        let secs = started.elapsed().as_secs_f64();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: ReplayReport = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report.turns.len(), TURNS);
        assert_eq!(report.divergent_turns, 0);
        assert_eq!((report.calls_run, report.calls_not_run), (0, 0));
        println!(
            "replay {}: {TURNS} turns in {secs:.2} s ({:.1} ms per turn), 0 divergent, 0 calls run",
            k + 1,
            secs * 1000.0 / TURNS as f64
        );
        times.push(secs);
    }
    println!(
        "replay of {TURNS} turns: median {:.2} s of {REPLAYS}",
        median(times)
    );
}
