//! `ninetrix trace` of crashed turns, end to end on real processes: a runner talking to a local
//! fake of OpenAI's streaming Chat Completions API (it fails the first call with a 500, so the
//! turn starts with a retry; it asks for a write, a tool the agent does not have, and a sleep),
//! killed just after the write's outcome is stored, then restarted. The trace must tell the whole story
//! as readable lines — the retry, the unknown tool, the replayed write after a `truncate` repair,
//! the pending call of a `complete` resume — and contain no raw JSON.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ninetrix_e2e::{ApiProcess, ninetrix_bin};
use ninetrix_proto::ThreadId;
use serde_json::{Value, json};
use support::openai::{answer_stream, chunk, end};
use support::{Admin, Gate, Hold, Runner, lines};

/// A fake OpenAI: the first request of each thread's runner fails with a 500; a request whose
/// last message is the user's gets three tool calls; one after tool results gets the answer.
async fn fake_openai() -> String {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new()
        .route(
            "/v1/chat/completions",
            axum::routing::post(
                |axum::extract::State(calls): axum::extract::State<Arc<AtomicUsize>>,
                 axum::Json(body): axum::Json<Value>| async move {
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        return axum::response::Response::builder()
                            .status(500)
                            .header("content-type", "application/json")
                            .body(axum::body::Body::from(
                                r#"{"error":{"message":"upstream overloaded"}}"#,
                            ))
                            .unwrap();
                    }
                    let last_role = body["messages"]
                        .as_array()
                        .and_then(|m| m.last())
                        .map(|m| m["role"].as_str().unwrap_or("").to_string())
                        .unwrap_or_default();
                    let stream = if last_role == "user" {
                        tool_calls_stream()
                    } else {
                        answer_stream("All done.")
                    };
                    axum::response::Response::builder()
                        .status(200)
                        .header("content-type", "text/event-stream")
                        .body(axum::body::Body::from(stream))
                        .unwrap()
                },
            ),
        )
        .with_state(calls);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn tool_calls_stream() -> String {
    let call = |index: u64, id: &str, name: &str, args: Value| {
        chunk(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                "function": {"name": name, "arguments": args.to_string()}}]}),
            None,
        )
    };
    [
        chunk(json!({"role": "assistant", "content": "Working."}), None),
        call(
            0,
            "call_w",
            "file_write",
            json!({"path": "log.txt", "content": "line\n", "mode": "append"}),
        ),
        call(1, "call_x", "rm_rf", json!({"path": "/"})),
        call(2, "call_s", "sleep", json!({"seconds": 0.2})),
        chunk(json!({}), Some("tool_calls")),
        end(40, 12),
    ]
    .concat()
}

fn spec(base_url: &str, resume: &str) -> Value {
    json!({
        "name": "worker",
        "metadata": {"name": null, "description": null, "role": "test agent", "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "openai", "via": null, "model": "gpt-4o-mini", "base_url": base_url, "api_key_secret": "FAKE_OPENAI_KEY",
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": null,
                    "resources": {"cpu": null, "memory_bytes": null}, "script": []},
        "tools": [{"name": "file_write", "effect": "idempotent", "effect_pinned": false},
                  {"name": "sleep", "effect": "read", "effect_pinned": false}],
        "execution": {"durability": true, "replicas": 1, "max_turns": 10, "task": null, "resume": resume},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": ["FAKE_OPENAI_KEY"]
    })
}

/// A runner process "in" container `c1`, as `ninetrix up` made it: the restarted one is the same
/// container started again (what Docker's restart policy does), so its boot is a crash restart.
fn runner(api_url: &str, thread: ThreadId, spec: &Value, ws: &std::path::Path) -> Runner {
    let env = [
        ("FAKE_OPENAI_KEY", "sk-fake-not-a-real-key"),
        ("AGENTFILE_INSTANCE", "c1"),
        ("AGENTFILE_CREATED", "new"),
    ];
    Runner::start_with_env(api_url, thread, spec, ws, &env)
}

/// Runs a turn that is killed just after the write's outcome is stored, restarts the runner, and
/// returns `ninetrix trace` of the thread.
async fn crashed_turn(resume: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let api = ApiProcess::start(&["--database", &db, "--insecure-dev"]);
    let admin = Admin::new(&api.url);
    let model = fake_openai().await;
    let spec = spec(&model, resume);
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let thread = ThreadId::new_v7();
    let gate = Gate::start(&api.url).await;
    let seq = admin.send(thread, "clean up", "k1").await;
    // The kill lands just after the write's outcome is stored, before the rest of the calls are.
    let held = gate.arm(Hold {
        method: "POST",
        path_contains: "/commit",
        body_contains: vec!["\"outcomes\":[{"],
        forward_first: true,
        lose_answer: false,
    });
    let mut first = runner(&gate.url, thread, &spec, &ws);
    tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("the runner stored the write's outcome");
    first.kill();
    let _second = runner(&api.url, thread, &spec, &ws);
    let done = admin.wait_turn(thread, seq, Duration::from_secs(30)).await;
    assert!(done.ok, "{done:?}");
    assert_eq!(lines(&ws), 1, "the write happened once");
    let out = std::process::Command::new(ninetrix_bin())
        .args(["trace", "--thread-id", &thread.to_string()])
        .env("AGENTFILE_API_URL", &api.url)
        .env("AGENTFILE_ADMIN_TOKEN", "insecure-dev")
        .env("AGENTFILE_HOME", dir.path())
        .env("COLUMNS", "200")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "trace failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Tool arguments are shown as the call's JSON; no event is printed raw.
    for raw in [
        "\"at\"",
        "\"pending_calls\"",
        "\"dropped\"",
        "\"error\"",
        "\"data\"",
    ] {
        assert!(
            !stdout.contains(raw),
            "raw event JSON ({raw}) in the trace:\n{stdout}"
        );
    }
    assert!(
        !stdout.contains("sk-fake-not-a-real-key"),
        "no secret in the trace"
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_of_a_truncated_turn_shows_retry_unknown_tool_and_replay() {
    let trace = crashed_turn("truncate").await;
    for expected in [
        "boot · epoch 1 · first",
        "model call failed (attempt 1)",
        "HTTP 500",
        "tool file_write",
        "· executed ·",
        "tool rm_rf · no such tool · the agent has: file_write, sleep",
        "boot · epoch 2 · crash restart · history repaired",
        "repair (truncate): cut to 1 messages, dropped 2: assistant (call_w, call_x, call_s), tool (call_w)",
        "turn 1 resumed · message 1",
        "· replayed ·",
        "tool sleep",
        "done in",
        "All done.",
    ] {
        assert!(
            trace.contains(expected),
            "`{expected}` is not in the trace:\n{trace}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_of_a_completed_turn_shows_the_resumed_calls() {
    let trace = crashed_turn("complete").await;
    for expected in [
        "boot · epoch 2 · crash restart",
        "resume: the interrupted message keeps its answered calls; 2 still to run: call_x, call_s",
        "turn 1 resumed · message 1",
        "tool sleep",
        "All done.",
    ] {
        assert!(
            trace.contains(expected),
            "`{expected}` is not in the trace:\n{trace}"
        );
    }
    assert!(
        !trace.contains("replayed"),
        "nothing is re-run with resume: complete:\n{trace}"
    );
}

#[test]
fn a_refused_admin_token_is_reported_at_once_with_where_it_comes_from() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let secret = dir.path().join("secret");
    let admin = dir.path().join("admin");
    std::fs::write(&secret, "a-secret-for-runner-tokens-0123456789").unwrap();
    std::fs::write(&admin, "the-right-admin-token-0123456789").unwrap();
    let api = ApiProcess::start(&[
        "--database",
        &db,
        "--secret-file",
        secret.to_str().unwrap(),
        "--admin-token-file",
        admin.to_str().unwrap(),
    ]);
    let out = std::process::Command::new(ninetrix_bin())
        .args(["trace", "--thread-id", &ThreadId::new_v7().to_string()])
        .env("AGENTFILE_API_URL", &api.url)
        .env("AGENTFILE_ADMIN_TOKEN", "a-wrong-token")
        .env("AGENTFILE_HOME", dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("refused the admin token") && stderr.contains("AGENTFILE_ADMIN_TOKEN"),
        "the error names the refused token and its source: {stderr}"
    );
    assert!(
        !stderr.contains("a-wrong-token"),
        "the token itself is never printed: {stderr}"
    );
}
