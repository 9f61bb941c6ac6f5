//! Outages the runner rides out without burning Docker's restart budget, and the failures it
//! names: on real Docker, the checkpoint API stopped for longer than the old 60 s patience and a
//! model that refuses connections for 90 s — the container keeps running (RestartCount 0), its
//! health in `ninetrix ps` turns `unhealthy` with the reason, and every queued message is answered once
//! the dependency is back, with an `outage` event. As runner processes: a refused API key ends
//! the turn with a reply naming the secret, and a resumed long turn is `ready` at once.

mod support;

use std::time::{Duration, Instant};

use ninetrix_e2e::ApiProcess;
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::ThreadStatus;
use ninetrix_proto::events::{Decoded, TraceEvent};
use serde_json::{Value, json};
use support::docker::{Pool, docker, inspect, text, wait_for};
use support::openai::{answer_stream, error_response, stream_response};
use support::{Admin, Gate, Hold, Runner};

/// A container's health as `ninetrix ps --json` shows it: its verdict and the runner's reason.
fn health(pool: &Pool, container: &str) -> (String, String) {
    let out = pool.ninetrix(&["ps", "-p", &pool.name, "--json"]);
    assert!(out.status.success(), "ps failed:\n{}", text(&out));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let row = rows
        .iter()
        .find(|r| r["container"] == container)
        .unwrap_or_else(|| panic!("ps lists {container}: {rows:#?}"));
    let status = row["health"].as_str().unwrap_or("none").to_string();
    let output = row["reason"].as_str().unwrap_or("").trim().to_string();
    (status, output)
}

fn restarts(container: &str) -> i64 {
    inspect(container)["RestartCount"].as_i64().unwrap_or(-1)
}

fn running(container: &str) -> bool {
    inspect(container)["State"]["Running"] == true
}

fn invoke_no_wait(pool: &Pool, agent: &str, message: &str, id: &str) {
    let out = pool.invoke(agent, message, &["--id", id, "--no-wait"]);
    assert!(
        out.status.success(),
        "invoke --no-wait failed: {}",
        text(&out)
    );
}

/// `turn_completed` events by inbox seq.
fn completed(events: &[Value]) -> Vec<(u64, bool, String)> {
    events
        .iter()
        .filter(|e| e["type"] == "turn_completed")
        .map(|e| {
            (
                e["data"]["seq"].as_u64().unwrap_or(0),
                e["data"]["ok"] == true,
                e["data"]["reply"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

const WORKER: &str = "agents:
  worker:
    runtime:
      provider: scripted
      script:
        - text: Working on it.
          tool_calls:
            - { name: sleep, args: { seconds: 3 } }
        - text: Done.
    tools: [sleep]
";

/// The API container is stopped mid-turn for longer than the old patience (60 s): the runner
/// keeps running and retrying, `ps` shows it unhealthy: `checkpoint API unreachable`, and once the API
/// is back answers every queued message exactly once, with RestartCount still 0.
#[test]
fn an_api_outage_longer_than_the_old_patience_is_ridden_out() {
    let pool = Pool::new("apiout");
    pool.write(WORKER);
    pool.up(&[]);
    let name = pool.container("worker", 1);
    for i in 1..=3 {
        invoke_no_wait(&pool, "worker", &format!("message {i}"), &format!("m{i}"));
    }
    wait_for("the first turn to start", Duration::from_secs(30), || {
        pool.events("worker")
            .iter()
            .any(|e| e["type"] == "turn_started")
    });
    let api = pool.api_container().expect("the pool's API container");
    docker(&["stop", "-t", "2", &api]);
    assert_eq!(inspect(&api)["State"]["Running"], false, "the API is down");

    // Down for 75 s: the runner never exits, and `ps` says why.
    let down = Instant::now();
    let mut seen_unhealthy = None;
    while down.elapsed() < Duration::from_secs(75) {
        assert!(
            running(&name),
            "the runner stopped during the outage: {}\n{}",
            inspect(&name)["State"],
            docker(&["logs", "--tail", "20", &name])
        );
        assert_eq!(restarts(&name), 0, "the outage burned a restart");
        let (status, output) = health(&pool, &name);
        if status == "unhealthy" && output.contains("checkpoint API unreachable") {
            seen_unhealthy = Some(output);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let output = seen_unhealthy.unwrap_or_else(|| {
        panic!(
            "ps never showed the runner unhealthy with the reason: {:?}",
            health(&pool, &name)
        )
    });
    assert!(
        output.ends_with(":8080)"),
        "the API's URL is named: {output}"
    );

    docker(&["start", &api]);
    wait_for(
        "every queued message to be answered",
        Duration::from_secs(150),
        || completed(&pool.events("worker")).len() >= 3,
    );
    let events = pool.events("worker");
    let done = completed(&events);
    for seq in 1..=3 {
        let turns: Vec<_> = done.iter().filter(|(s, _, _)| *s == seq).collect();
        assert_eq!(turns.len(), 1, "message {seq} answered once: {done:?}");
        assert!(turns[0].1, "message {seq} answered ok: {turns:?}");
    }
    assert_eq!(restarts(&name), 0, "no restart after the outage either");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "outage" && e["data"]["dependency"] == "api"),
        "an outage event was recorded: {events:#?}"
    );
    wait_for(
        "the runner to be healthy again",
        Duration::from_secs(40),
        || health(&pool, &name).0 == "healthy",
    );
}

/// A model that refuses connections for 90 s, then answers: the turn waits it out (no restart),
/// `ps` says `unhealthy: model unreachable: connection refused at … (runtime.base_url)`
/// meanwhile, and the reply arrives once it listens.
#[test]
fn a_model_refusing_connections_for_90_s_is_waited_out() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let pool = Pool::new("modelout");
    let agent = |base_url: &str| {
        format!(
            "agents:\n  talker:\n    runtime:\n      provider: openai\n      model: gpt-4o-mini\n      base_url: {base_url}\n      api_key_secret: TEST_SECRET\n"
        )
    };
    // A first `up` creates the pool's network; the model's address is on its gateway.
    pool.write(&agent("http://127.0.0.1:9/v1"));
    pool.up(&[]);
    let gateway = docker(&[
        "network",
        "inspect",
        &format!("ninetrix-{}", pool.name),
        "--format",
        "{{range .IPAM.Config}}{{.Gateway}}{{end}}",
    ]);
    let gateway: std::net::Ipv4Addr = gateway
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the pool network's gateway: {gateway:?}"));
    // The port is bound but not listening: connections are refused until `listen`.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((gateway, 0).into()).unwrap();
    let addr = socket.local_addr().unwrap();
    let base_url = format!("http://{addr}/v1");
    pool.write(&agent(&base_url));
    pool.up(&[]);
    let name = pool.container("talker", 1);

    let asked = Instant::now();
    invoke_no_wait(&pool, "talker", "are you there?", "q1");
    wait_for(
        "ps to show the runner unhealthy with the reason",
        Duration::from_secs(85),
        || {
            let (status, output) = health(&pool, &name);
            status == "unhealthy"
                && output.contains(&format!("connection refused at {base_url}"))
                && output.contains("(runtime.base_url)")
        },
    );
    assert!(running(&name));
    assert_eq!(restarts(&name), 0);

    let remaining = Duration::from_secs(90).saturating_sub(asked.elapsed());
    std::thread::sleep(remaining); // the outage's length is the test's input, not a wait for state
    assert!(running(&name), "still running after 90 s of refusals");
    assert_eq!(restarts(&name), 0);
    let _serving = rt.enter();
    let listener = socket.listen(64).unwrap();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|| async { stream_response(answer_stream("The model is back.")) }),
    );
    rt.spawn(async move { axum::serve(listener, app).await.unwrap() });

    wait_for("the reply", Duration::from_secs(100), || {
        completed(&pool.events("talker"))
            .iter()
            .any(|(seq, ok, reply)| *seq == 1 && *ok && reply == "The model is back.")
    });
    assert_eq!(restarts(&name), 0);
    let events = pool.events("talker");
    let outage = events
        .iter()
        .find(|e| e["type"] == "outage" && e["data"]["dependency"] == "model")
        .unwrap_or_else(|| panic!("no model outage event: {events:#?}"));
    assert!(
        outage["data"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("connection refused")),
        "{outage}"
    );
    assert!(outage["data"]["duration_ms"].as_u64().unwrap_or(0) >= 60_000);
}

/// A fake OpenAI that refuses every key with a 401.
async fn refusing_openai() -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|| async { error_response(401, "Incorrect API key provided") }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn openai_spec(base_url: &str) -> Value {
    json!({
        "name": "talker",
        "metadata": {"name": null, "description": null, "role": "test agent", "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "openai", "via": null, "model": "gpt-4o-mini", "base_url": base_url, "api_key_secret": "FAKE_OPENAI_KEY",
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": null,
                    "resources": {"cpu": null, "memory_bytes": null}, "script": []},
        "tools": [],
        "execution": {"durability": true, "replicas": 1, "max_turns": 10, "task": null, "resume": "truncate"},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": ["FAKE_OPENAI_KEY"]
    })
}

fn api() -> (tempfile::TempDir, ApiProcess, Admin) {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("api.db").display());
    let api = ApiProcess::start(&["--database", &db, "--insecure-dev"]);
    let admin = Admin::new(&api.url);
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    (dir, api, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_ends_the_turn_with_a_reply_naming_the_secret() {
    let (dir, api, admin) = api();
    let model = refusing_openai().await;
    let thread = ThreadId::new_v7();
    let seq = admin.send(thread, "hello", "k1").await;
    let mut runner = Runner::start_with_env(
        &api.url,
        thread,
        &openai_spec(&model),
        &dir.path().join("ws"),
        &[("FAKE_OPENAI_KEY", "sk-wrong-key-123")],
    );
    let done = admin.wait_turn(thread, seq, Duration::from_secs(30)).await;
    assert!(!done.ok);
    assert_eq!(
        done.reply,
        "The model could not be called: the model provider refused the API key: HTTP 401: Incorrect API key provided — check the secret FAKE_OPENAI_KEY (runtime.api_key_secret)"
    );
    assert!(!done.reply.contains("sk-wrong-key-123"));
    // Not a fault a restart fixes: the runner serves on.
    assert!(runner.child.try_wait().unwrap().is_none());
    // The cause is said once: no separate error event repeats it.
    let events = admin.client.events_after(thread, 0).await.unwrap();
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.decode(), Decoded::Known(TraceEvent::Error(_)))),
        "{events:?}"
    );
    runner.kill();
}

/// A fake OpenAI that refuses the first `refusals` requests with a 400 and answers the others
/// with a stream saying "fine"; it keeps every request body.
async fn refusing_then_answering_openai(
    refusals: usize,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let kept = seen.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |body: axum::Json<Value>| {
            let seen = kept.clone();
            async move {
                let n = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(body.0);
                    seen.len()
                };
                if n <= refusals {
                    error_response(400, "This model's maximum context length is 128000 tokens")
                } else {
                    stream_response(answer_stream("fine"))
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

/// `ninetrix health` on a runner's status file: (healthy, its line).
fn judged(health_file: &std::path::Path) -> (bool, String) {
    let out = std::process::Command::new(ninetrix_e2e::ninetrix_bin())
        .arg("health")
        .env("AGENTFILE_HEALTH_FILE", health_file)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_turns_are_not_fed_to_the_model_and_three_in_a_row_are_unhealthy() {
    let (dir, api, admin) = api();
    let (model, seen) = refusing_then_answering_openai(3).await;
    let thread = ThreadId::new_v7();
    let ws = dir.path().join("ws");
    let health_file = ws.with_file_name(format!("health-{thread}"));
    let mut runner = Runner::start_with_env(
        &api.url,
        thread,
        &openai_spec(&model),
        &ws,
        &[("FAKE_OPENAI_KEY", "sk-test")],
    );
    // The runner claims the thread (with its labels) before anything is sent to it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while judged(&health_file) != (true, "serving".to_string()) {
        assert!(
            Instant::now() < deadline,
            "the runner did not start: {:?}",
            judged(&health_file)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (n, text) in ["one", "two", "three"].into_iter().enumerate() {
        let seq = admin.send(thread, text, &format!("k{n}")).await;
        let done = admin.wait_turn(thread, seq, Duration::from_secs(30)).await;
        assert!(!done.ok, "{done:?}");
        assert!(
            done.reply.contains("maximum context length"),
            "the caller hears why: {}",
            done.reply
        );
        // The health file follows the turn's end (written before the next message is taken).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (healthy, line) = judged(&health_file);
            if healthy == (n < 2) {
                if n == 2 {
                    // The refusal is the provider's "too long": with nothing before the turn
                    // to compact, the turn fails saying so (docs/runner.md, "Long
                    // conversations").
                    assert!(
                        line.starts_with(
                            "last 3 turns failed: The model refused the input as longer than its \
                             context window (the input is longer than the model's context window: \
                             HTTP 400: This model's maximum context length is 128000 tokens)"
                        ),
                        "{line}"
                    );
                }
                break;
            }
            assert!(
                Instant::now() < deadline,
                "after {} failed turns: {line}",
                n + 1
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let seq = admin.send(thread, "four", "k3").await;
    let done = admin.wait_turn(thread, seq, Duration::from_secs(30)).await;
    assert!(done.ok && done.reply == "fine", "{done:?}");
    // What the model was sent: the failures nowhere, the unanswered inputs not piled up.
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 4);
    let last = requests[3]["messages"].as_array().unwrap();
    assert!(
        !last.iter().any(|m| m["role"] == "assistant"),
        "no failure is sent as the model's words: {last:#?}"
    );
    let users: Vec<&Value> = last.iter().filter(|m| m["role"] == "user").collect();
    assert_eq!(users.len(), 1, "{last:#?}");
    assert_eq!(users[0]["content"], "four");
    let latest = admin.latest(thread).await;
    assert_eq!(
        latest.history.len(),
        2,
        "the thread holds the one exchange: {:?}",
        latest.history
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !judged(&health_file).0 {
        assert!(
            Instant::now() < deadline,
            "a turn that succeeds ends the run: {:?}",
            judged(&health_file)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    runner.kill();
}

const SLEEPER: &str = r#"[
    {"text": "Waiting.", "tool_calls": [{"name": "sleep", "args": {"seconds": 6}}]},
    {"text": "Done.", "tool_calls": []}
]"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_long_turn_is_ready_at_once() {
    let (dir, api, admin) = api();
    let mut spec = support::appender_spec();
    spec["runtime"]["script"] = serde_json::from_str(SLEEPER).unwrap();
    spec["tools"] = json!([{"name": "sleep", "effect": "read", "effect_pinned": false}]);
    let ws = dir.path().join("ws");
    let thread = ThreadId::new_v7();
    let gate = Gate::start(&api.url).await;
    let seq = admin.send(thread, "wait a bit", "k1").await;
    // Killed just after the response asking for the sleep is stored: the turn is interrupted.
    let held = gate.arm(Hold {
        method: "POST",
        path_contains: "/commit",
        body_contains: vec!["\"name\":\"sleep\""],
        forward_first: true,
        lose_answer: false,
    });
    let mut first = Runner::start(&gate.url, thread, &spec, &ws);
    tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("the runner reached the sleep");
    first.kill();

    let _second = Runner::start(&api.url, thread, &spec, &ws);
    // `ready` of the second epoch arrives while the resumed turn still runs (its sleep is 6 s).
    let deadline = Instant::now() + Duration::from_secs(20);
    let ready = loop {
        let events = admin.client.events_after(thread, 0).await.unwrap();
        let ready = events.iter().find_map(|e| match e.decode() {
            Decoded::Known(TraceEvent::Ready(r)) if r.epoch == 2 => Some((e.seq, r)),
            _ => None,
        });
        if let Some(r) = ready {
            break r;
        }
        assert!(Instant::now() < deadline, "no ready from the second runner");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert!(ready.1.resuming, "{ready:?}");
    let state = admin.latest(thread).await.state;
    assert_eq!(
        state.status,
        ThreadStatus::InTurn,
        "ready came before the resumed turn ended"
    );
    let done = admin.wait_turn(thread, seq, Duration::from_secs(30)).await;
    assert!(done.ok, "{done:?}");
    let events = admin.client.events_after(thread, 0).await.unwrap();
    let completed_at = events
        .iter()
        .find(|e| matches!(e.decode(), Decoded::Known(TraceEvent::TurnCompleted(_))))
        .map(|e| e.seq)
        .unwrap();
    assert!(ready.0 < completed_at);
}
