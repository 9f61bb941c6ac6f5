//! A pool that shares its provider (docs/runner.md, "Limits, budgets and fallback"), with
//! runners as processes against a real `ninetrix api` and local stand-ins for the providers
//! that speak their real streaming wire formats (OpenAI's Chat Completions, Anthropic's
//! Messages):
//! - 50 replicas and 200 sessions on one stand-in that enforces 10 calls in flight and 600
//!   requests a minute with 429s: no turn fails, and the stand-in never refuses a call (it never
//!   saw more than its limit); the pool's rate is printed (BENCHMARKS.md: ≥ 90 % of the limit's);
//! - a killed runner's permit comes back after the lease time, and at once when it restarts;
//! - budgets beyond a run hold across restarts and replicas (a day's budget is the agent's, not
//!   a process's), a session's budget is its own, and `ask_human` raises one through an
//!   approval;
//! - a primary that starts refusing connections mid-run: the next calls are answered by the
//!   Anthropic fallback, traced, and the history stays valid for both providers.

mod support;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ninetrix_proto::api::{ApprovalKind, ApprovalStatus, DecisionRequest, ThreadStatus, Verdict};
use ninetrix_proto::events::TraceEvent;
use ninetrix_proto::{Role, ThreadId};
use serde_json::{Value, json};
use support::openai::{chunk, end, hanging_stream, stream_response};
use support::{Admin, Runner};

const POOL: &str = "shared";
const KEY: (&str, &str) = ("FAKE_OPENAI_KEY", "sk-fake-limits");

/// What a stand-in enforces and what it saw.
#[derive(Default)]
struct Provider {
    /// Most calls in flight it accepts (0: no limit).
    max_in_flight: u64,
    /// Most calls it accepts in any 60 s (0: no limit).
    rpm: usize,
    /// How long each answer takes.
    latency: Duration,
    /// Prompt tokens each answer reports (its price for the budget tests).
    prompt_tokens: u64,
    in_flight: AtomicU64,
    most_in_flight: AtomicU64,
    /// Start times of the calls it accepted.
    accepted: Mutex<VecDeque<Instant>>,
    accepted_total: AtomicU64,
    refused_in_flight: AtomicU64,
    refused_rpm: AtomicU64,
    /// Requests whose last user message began `hang`, by content: the first of each hangs until
    /// the client goes away.
    hung: Mutex<HashMap<String, u64>>,
    first: Mutex<Option<Instant>>,
    last: Mutex<Option<Instant>>,
}

/// One call in flight at the stand-in; counted out when its answer has been produced or the
/// client went away.
struct InFlight(Arc<Provider>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Provider {
    /// Admits a call or says why not (the 429's `retry-after`, in seconds).
    fn admit(self: &Arc<Self>) -> Result<InFlight, u64> {
        let now = Instant::now();
        let mut accepted = self.accepted.lock().unwrap();
        while accepted
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            accepted.pop_front();
        }
        if self.max_in_flight > 0 && self.in_flight.load(Ordering::SeqCst) >= self.max_in_flight {
            self.refused_in_flight.fetch_add(1, Ordering::SeqCst);
            return Err(1);
        }
        if self.rpm > 0 && accepted.len() >= self.rpm {
            self.refused_rpm.fetch_add(1, Ordering::SeqCst);
            let oldest = *accepted.front().unwrap();
            let wait = Duration::from_secs(60).saturating_sub(now.duration_since(oldest));
            return Err(wait.as_secs() + 1);
        }
        accepted.push_back(now);
        drop(accepted);
        let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(n, Ordering::SeqCst);
        self.accepted_total.fetch_add(1, Ordering::SeqCst);
        self.first.lock().unwrap().get_or_insert(now);
        *self.last.lock().unwrap() = Some(now);
        Ok(InFlight(self.clone()))
    }
}

/// A fake OpenAI enforcing `provider`'s limits: a refused call is a 429 with `retry-after`;
/// an accepted one answers `Saw: <last user message>` after the latency; `hang…` (the first time
/// for each content) streams one piece and then nothing until the client goes away.
async fn openai_stand_in(provider: Arc<Provider>) -> (String, tokio::task::JoinHandle<()>) {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |body: String| {
            let provider = provider.clone();
            async move { openai_answer(provider, &body).await }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, server)
}

async fn openai_answer(provider: Arc<Provider>, body: &str) -> axum::response::Response {
    let slot = match provider.admit() {
        Ok(slot) => slot,
        Err(retry_after) => {
            return axum::response::Response::builder()
                .status(429)
                .header("content-type", "application/json")
                .header("retry-after", retry_after.to_string())
                .body(axum::body::Body::from(
                    json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}})
                        .to_string(),
                ))
                .unwrap();
        }
    };
    let request: Value = serde_json::from_str(body).unwrap();
    let messages = request["messages"].as_array().unwrap();
    let last = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    if last.starts_with("hang") {
        let first_time = {
            let mut hung = provider.hung.lock().unwrap();
            let n = hung.entry(last.clone()).or_default();
            *n += 1;
            *n == 1
        };
        if first_time {
            return hanging_stream(slot);
        }
    }
    tokio::time::sleep(provider.latency).await;
    drop(slot);
    let text = format!("Saw: {last}");
    stream_response(
        [
            chunk(json!({"role": "assistant", "content": text}), None),
            chunk(json!({}), Some("stop")),
            end(provider.prompt_tokens.max(1), 3),
        ]
        .concat(),
    )
}

/// A durable agent on the OpenAI stand-in at `base_url`, with `runtime`/`governance` keys
/// merged in.
fn spec(name: &str, base_url: &str, runtime: Value, governance: Value) -> Value {
    let mut spec = json!({
        "name": name,
        "metadata": {"name": null, "description": null, "role": "test agent", "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "openai", "via": null, "model": "gpt-4o-mini", "base_url": base_url, "api_key_secret": KEY.0,
                    "temperature": 0.2, "max_tokens": 256, "tool_timeout_secs": 30, "image": null,
                    "resources": {"cpu": null, "memory_bytes": null}, "script": []},
        "tools": [{"name": "file_write", "effect": "idempotent", "effect_pinned": false}],
        "execution": {"durability": true, "replicas": 1, "max_turns": 10, "task": null, "resume": "truncate"},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": [KEY.0]
    });
    for (k, v) in runtime.as_object().unwrap() {
        spec["runtime"][k] = v.clone();
    }
    for (k, v) in governance.as_object().unwrap() {
        spec["governance"][k] = v.clone();
    }
    spec
}

/// A replica process of `spec`'s agent in `dir`: its own thread, and the sessions it owns.
fn replica(api: &str, dir: &std::path::Path, spec: &Value, n: u32, thread: ThreadId) -> Runner {
    let workspace = dir.join(format!("{}-{n}", spec["name"].as_str().unwrap()));
    std::fs::create_dir_all(&workspace).unwrap();
    let n = n.to_string();
    Runner::start_with_env(
        api,
        thread,
        spec,
        &workspace,
        &[
            ("AGENTFILE_POOL", POOL),
            ("AGENTFILE_REPLICA", n.as_str()),
            ("AGENTFILE_AGENT_TOKEN", "insecure-dev"),
            KEY,
        ],
    )
}

/// A `ninetrix api` on SQLite in `dir`, with `args`.
fn api(dir: &std::path::Path, args: &[&str]) -> ninetrix_e2e::ApiProcess {
    let db = format!("sqlite://{}", dir.join("api.db").display());
    let mut all = vec!["--database", db.as_str(), "--insecure-dev"];
    all.extend_from_slice(args);
    ninetrix_e2e::ApiProcess::start(&all)
}

/// Waits until `thread` has taken `count` messages and is idle.
async fn wait_idle(admin: &Admin, thread: ThreadId, count: u64, deadline: Instant) {
    loop {
        let state = admin
            .client
            .latest(thread)
            .await
            .ok()
            .flatten()
            .map(|l| l.state);
        if state
            .as_ref()
            .is_some_and(|s| s.inbox_cursor >= count && s.status == ThreadStatus::Idle)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "thread {thread} did not take {count} messages in time: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_replicas_and_two_hundred_sessions_share_one_providers_limit() {
    const AGENTS: u32 = 5;
    const REPLICAS: u32 = 10;
    const SESSIONS_PER_AGENT: u32 = 40;
    const MESSAGES: u64 = 3;
    let provider = Arc::new(Provider {
        max_in_flight: 10,
        rpm: 600,
        latency: Duration::from_millis(500),
        ..Provider::default()
    });
    let (base_url, _server) = openai_stand_in(provider.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let api = api(dir.path(), &[]);
    let admin = Admin::new(&api.url);
    let limits = json!({"limits": {"max_in_flight": 10, "requests_per_minute": 600}});
    let mut runners = Vec::new();
    let mut threads = Vec::new();
    for a in 1..=AGENTS {
        let name = format!("agent-{a}");
        let spec = spec(&name, &base_url, limits.clone(), json!({}));
        admin
            .client
            .set_replicas(POOL, &name, REPLICAS, &[], None)
            .await
            .unwrap();
        for n in 1..=REPLICAS {
            let thread = ThreadId::new_v7();
            runners.push(replica(&api.url, dir.path(), &spec, n, thread));
            threads.push(thread);
        }
        for k in 0..SESSIONS_PER_AGENT {
            let key = format!("customer-{a}-{k}");
            let session = admin.client.open_session(POOL, &name, &key).await.unwrap();
            threads.push(session.thread_id);
        }
    }
    assert_eq!(threads.len(), 250);
    let started = Instant::now();
    for m in 0..MESSAGES {
        for (i, thread) in threads.iter().enumerate() {
            admin
                .send(*thread, &format!("message {m} to {i}"), &format!("{i}-{m}"))
                .await;
        }
    }
    // While the pool works, some runner must say it waits for a slot (what `ps` shows).
    let health_files = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("health-"))
            })
            .collect::<Vec<_>>()
    };
    let mut saw_waiting = false;
    let mut saw_sessions_waiting = false;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if !(saw_waiting && saw_sessions_waiting) {
            for report in health_files()
                .iter()
                .filter_map(|p| std::fs::read_to_string(p).ok())
            {
                // The replica's own call, and its sessions' calls beside its own activity.
                saw_waiting |= report.contains("\"wait\":\"waiting for a model slot (openai: ");
                saw_sessions_waiting |= report.contains("\"sessions_waiting\":\"")
                    && report.contains("waiting for a model slot (openai: ");
            }
        }
        let done = provider.accepted_total.load(Ordering::SeqCst);
        if done >= threads.len() as u64 * MESSAGES {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pool made {done} calls of {} in 300 s",
            threads.len() as u64 * MESSAGES
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for thread in &threads {
        wait_idle(&admin, *thread, MESSAGES, deadline).await;
    }
    let elapsed = started.elapsed();
    // No turn failed: every message has its answer.
    for thread in &threads {
        let turns = admin.turns(*thread).await;
        assert_eq!(turns.len() as u64, MESSAGES, "thread {thread}: {turns:?}");
        for t in &turns {
            assert!(t.ok && t.reply.starts_with("Saw: message"), "{t:?}");
        }
        let history = admin.latest(*thread).await.history;
        assert_eq!(
            history.iter().filter(|m| m.role == Role::Assistant).count() as u64,
            MESSAGES
        );
    }
    // The stand-in never saw more than its limit: it never had to refuse a call.
    let calls = provider.accepted_total.load(Ordering::SeqCst);
    assert_eq!(calls, threads.len() as u64 * MESSAGES, "one call per turn");
    assert!(provider.most_in_flight.load(Ordering::SeqCst) <= 10);
    assert_eq!(
        provider.refused_in_flight.load(Ordering::SeqCst),
        0,
        "calls the stand-in refused as over 10 in flight"
    );
    assert_eq!(
        provider.refused_rpm.load(Ordering::SeqCst),
        0,
        "calls the stand-in refused as over 600 in a minute"
    );
    // Throughput, measured and printed (BENCHMARKS.md records it; a speed is never asserted in
    // a test): the limit's rate is min(600/min, 10 in flight / 0.5 s) = 10 calls/s.
    let first = provider.first.lock().unwrap().unwrap();
    let last = provider.last.lock().unwrap().unwrap();
    let span = (last - first + provider.latency).as_secs_f64();
    let rate = calls as f64 / span;
    eprintln!(
        "{calls} calls in {span:.1} s ({rate:.2}/s; limit 10/s), {:.1} s from the first message to the last answer",
        elapsed.as_secs_f64()
    );
    assert!(
        saw_waiting,
        "no runner said it was waiting for a model slot"
    );
    assert!(
        saw_sessions_waiting,
        "no replica said its sessions were waiting for a model slot"
    );
    drop(runners);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_runners_permit_comes_back_after_the_lease_time_or_at_its_restart() {
    let provider = Arc::new(Provider {
        max_in_flight: 1,
        latency: Duration::from_millis(50),
        ..Provider::default()
    });
    let (base_url, _server) = openai_stand_in(provider.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let api = api(dir.path(), &["--model-lease-ttl", "3"]);
    let admin = Admin::new(&api.url);
    let spec = spec(
        "solo",
        &base_url,
        json!({"limits": {"max_in_flight": 1}}),
        json!({}),
    );
    let (a, b) = (ThreadId::new_v7(), ThreadId::new_v7());
    let mut runner_a = replica(&api.url, dir.path(), &spec, 1, a);
    let _runner_b = replica(&api.url, dir.path(), &spec, 2, b);
    // A's call holds the one slot, and A is killed mid-call (no restart).
    admin.send(a, "hang please", "a-1").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while provider.hung.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "A's call never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let granted = Instant::now();
    runner_a.kill();
    // B's call waits for A's lease to expire (3 s), then runs.
    let seq = admin.send(b, "hello", "b-1").await;
    let done = admin.wait_turn(b, seq, Duration::from_secs(30)).await;
    assert!(done.ok, "{done:?}");
    let waited = granted.elapsed();
    assert!(
        waited >= Duration::from_millis(2500),
        "B ran {waited:?} after A's grant: the dead runner's lease did not hold its slot"
    );
    assert!(
        waited < Duration::from_secs(15),
        "B waited {waited:?}: the lease did not expire"
    );
    assert!(provider.most_in_flight.load(Ordering::SeqCst) <= 1);

    // Again with a lease time far beyond the test: A restarted on its thread re-claims it,
    // which frees its old epoch's lease at once, and finishes the interrupted turn.
    drop(api);
    let dir = tempfile::tempdir().unwrap();
    let api = crate::api(dir.path(), &["--model-lease-ttl", "600"]);
    let admin = Admin::new(&api.url);
    let a = ThreadId::new_v7();
    let mut runner_a = replica(&api.url, dir.path(), &spec, 1, a);
    let seq = admin.send(a, "hang again", "a-2").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !provider.hung.lock().unwrap().contains_key("hang again") {
        assert!(Instant::now() < deadline, "A's call never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    runner_a.kill();
    let restarted = Instant::now();
    let _runner_a = replica(&api.url, dir.path(), &spec, 1, a);
    let done = admin.wait_turn(a, seq, Duration::from_secs(60)).await;
    assert!(done.ok && done.reply == "Saw: hang again", "{done:?}");
    assert!(
        restarted.elapsed() < Duration::from_secs(60),
        "the restart's claim did not free the old lease ({:?})",
        restarted.elapsed()
    );
}

/// A fixed-offset zone where it is about noon now, so a test's day cannot end under it.
fn noon_zone() -> String {
    use chrono::Timelike as _;
    let hour = chrono::Utc::now().hour() as i32;
    // Etc/GMT-N is N hours ahead of UTC.
    let ahead = (12 - hour).clamp(-12, 14);
    match ahead {
        0 => "Etc/GMT".into(),
        n if n > 0 => format!("Etc/GMT-{n}"),
        n => format!("Etc/GMT+{}", -n),
    }
}

/// Sends `content` to `thread` and waits for its turn.
async fn turn(
    admin: &Admin,
    thread: ThreadId,
    content: &str,
) -> ninetrix_proto::events::TurnCompleted {
    let seq = admin.send(thread, content, content).await;
    admin.wait_turn(thread, seq, Duration::from_secs(60)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_hold_across_restarts_replicas_and_sessions() {
    // Each call reports 1,000,000 prompt tokens of gpt-4o-mini: $0.15.
    let provider = Arc::new(Provider {
        latency: Duration::from_millis(10),
        prompt_tokens: 1_000_000,
        ..Provider::default()
    });
    let (base_url, _server) = openai_stand_in(provider.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let api = api(dir.path(), &[]);
    let admin = Admin::new(&api.url);
    let zone = noon_zone();
    let calls = || provider.accepted_total.load(Ordering::SeqCst);

    // The agent's day: $0.40 over two replicas and a restart.
    let daily = spec(
        "daily",
        &base_url,
        json!({}),
        json!({"max_budget_per_day": 0.40, "timezone": zone}),
    );
    admin
        .client
        .set_replicas(POOL, "daily", 2, &[], None)
        .await
        .unwrap();
    let (one, two) = (ThreadId::new_v7(), ThreadId::new_v7());
    let mut replica_one = replica(&api.url, dir.path(), &daily, 1, one);
    let _replica_two = replica(&api.url, dir.path(), &daily, 2, two);
    assert!(turn(&admin, one, "d1").await.ok);
    assert!(turn(&admin, one, "d2").await.ok);
    replica_one.kill();
    let _replica_one = replica(&api.url, dir.path(), &daily, 1, one);
    assert!(turn(&admin, two, "d3").await.ok, "$0.30 of $0.40 spent");
    assert_eq!(calls(), 3);
    let stopped = turn(&admin, one, "d4").await;
    assert!(!stopped.ok, "{stopped:?}");
    assert!(
        stopped.reply.contains("governance.max_budget_per_day"),
        "{}",
        stopped.reply
    );
    assert_eq!(calls(), 3, "a spent budget makes no model call");
    let spend = admin.client.spend(one, Some(&zone)).await.unwrap();
    assert!((spend.agent_today_usd - 0.45).abs() < 1e-4, "{spend:?}");
    assert!((spend.thread_usd - 0.30).abs() < 1e-4, "{spend:?}");
    let exceeded = admin.trace(one).await.into_iter().find_map(|e| match e {
        TraceEvent::BudgetExceeded(b) => Some(b),
        _ => None,
    });
    let exceeded = exceeded.expect("a budget_exceeded event");
    assert!(matches!(
        exceeded.scope,
        Some(ninetrix_proto::api::BudgetScope::AgentDay { .. })
    ));

    // A session's budget is its own: $0.20 per session.
    let chatty = spec(
        "chatty",
        &base_url,
        json!({}),
        json!({"max_budget_per_session": 0.20}),
    );
    admin
        .client
        .set_replicas(POOL, "chatty", 1, &[], None)
        .await
        .unwrap();
    let _chatty = replica(&api.url, dir.path(), &chatty, 1, ThreadId::new_v7());
    let first = admin
        .client
        .open_session(POOL, "chatty", "ann")
        .await
        .unwrap()
        .thread_id;
    let second = admin
        .client
        .open_session(POOL, "chatty", "bob")
        .await
        .unwrap()
        .thread_id;
    assert!(turn(&admin, first, "s1").await.ok);
    assert!(turn(&admin, first, "s2").await.ok, "$0.15 of $0.20 spent");
    let over = turn(&admin, first, "s3").await;
    assert!(
        !over.ok && over.reply.contains("governance.max_budget_per_session"),
        "{over:?}"
    );
    assert!(
        turn(&admin, second, "s4").await.ok,
        "another session has its own"
    );

    // ask_human: the turn asks a person to raise the budget, and goes on when approved.
    let asker = spec(
        "asker",
        &base_url,
        json!({}),
        json!({"max_budget_per_session": 0.10, "on_budget_exceeded": "ask_human"}),
    );
    admin
        .client
        .set_replicas(POOL, "asker", 1, &[], None)
        .await
        .unwrap();
    let thread = ThreadId::new_v7();
    let _asker = replica(&api.url, dir.path(), &asker, 1, thread);
    assert!(turn(&admin, thread, "a1").await.ok);
    let before = calls();
    let seq = admin.send(thread, "a2", "a2").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let request = loop {
        let pending = admin
            .client
            .list_approvals(&Default::default())
            .await
            .unwrap()
            .into_iter()
            .find(|a| a.thread_id == thread && a.status == ApprovalStatus::Pending);
        if let Some(a) = pending {
            break a;
        }
        assert!(Instant::now() < deadline, "no budget request was filed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(request.kind, ApprovalKind::Budget);
    let raise = request.raise.clone().expect("the raise asked for");
    assert!((raise.amount_usd - 0.10).abs() < 1e-9, "{raise:?}");
    assert_eq!(calls(), before, "no call while it waits");
    admin
        .client
        .decide_approval(
            request.id,
            &DecisionRequest {
                decision: Verdict::Approve,
                by: Some("alice".into()),
                reason: None,
                answer: None,
            },
        )
        .await
        .unwrap();
    let done = admin.wait_turn(thread, seq, Duration::from_secs(30)).await;
    assert!(done.ok && done.reply == "Saw: a2", "{done:?}");
    assert_eq!(calls(), before + 1);
}

/// A fake Anthropic Messages server: answers `Saw: <last user text>` as `claude-haiku-4-5`
/// and keeps every request body.
async fn anthropic_stand_in(bodies: Arc<Mutex<Vec<Value>>>) -> String {
    let app = axum::Router::new().route(
        "/v1/messages",
        axum::routing::post(move |body: String| {
            let bodies = bodies.clone();
            async move {
                let request: Value = serde_json::from_str(&body).unwrap();
                let last = request["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .rev()
                    .find(|m| m["role"] == "user")
                    .map(|m| match &m["content"] {
                        Value::String(s) => s.clone(),
                        Value::Array(blocks) => blocks
                            .iter()
                            .filter_map(|b| b["text"].as_str())
                            .collect::<Vec<_>>()
                            .join(""),
                        _ => String::new(),
                    })
                    .unwrap_or_default();
                bodies.lock().unwrap().push(request);
                let text = serde_json::to_string(&format!("Saw: {last}")).unwrap();
                let sse = [
                    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-haiku-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":40,\"output_tokens\":1}}}\n\n".to_string(),
                    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n".to_string(),
                    format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{text}}}}}\n\n"),
                    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n".to_string(),
                    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":4}}\n\n".to_string(),
                    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".to_string(),
                ]
                .concat();
                axum::response::Response::builder()
                    .status(200)
                    .header("content-type", "text/event-stream")
                    .body(axum::body::Body::from(sse))
                    .unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// An OpenAI stand-in whose first answer calls `file_write` (so the history has a tool call and
/// its result), then answers `Saw: …`; it can be shut down (its port then refuses connections).
async fn primary() -> (String, tokio::task::JoinHandle<()>) {
    let calls = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |body: String| {
            let calls = calls.clone();
            async move {
                let request: Value = serde_json::from_str(&body).unwrap();
                let messages = request["messages"].as_array().unwrap();
                let last = messages.last().unwrap();
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    let call = json!({"tool_calls": [{"index": 0, "id": "call_abc.1:x", "type": "function",
                        "function": {"name": "file_write", "arguments": json!({"path": "notes.md", "content": "hi"}).to_string()}}]});
                    return stream_response(
                        [
                            chunk(json!({"role": "assistant", "content": null}), None),
                            chunk(call, None),
                            chunk(json!({}), Some("tool_calls")),
                            end(50, 10),
                        ]
                        .concat(),
                    );
                }
                let text = if last["role"] == "tool" {
                    "Written.".to_string()
                } else {
                    format!("Saw: {}", last["content"].as_str().unwrap_or_default())
                };
                stream_response(
                    [
                        chunk(json!({"role": "assistant", "content": text}), None),
                        chunk(json!({}), Some("stop")),
                        end(50, 5),
                    ]
                    .concat(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_that_refuses_connections_mid_run_falls_back_to_anthropic() {
    let (primary_url, primary_server) = primary().await;
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let fallback_url = anthropic_stand_in(bodies.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let api = api(dir.path(), &[]);
    let admin = Admin::new(&api.url);
    let mut agent = spec(
        "steady",
        &primary_url,
        json!({
            "fallback": [{"provider": "anthropic", "model": "claude-haiku-4-5", "base_url": fallback_url,
                          "api_key_secret": "FAKE_ANTHROPIC_KEY"}],
            "fallback_after_secs": 1
        }),
        json!({}),
    );
    agent["secrets"] = json!([KEY.0, "FAKE_ANTHROPIC_KEY"]);
    let thread = ThreadId::new_v7();
    let workspace = dir.path().join("steady");
    std::fs::create_dir_all(&workspace).unwrap();
    let _runner = Runner::start_with_env(
        &api.url,
        thread,
        &agent,
        &workspace,
        &[KEY, ("FAKE_ANTHROPIC_KEY", "sk-ant-fake")],
    );
    let first = turn(&admin, thread, "write the notes").await;
    assert!(first.ok && first.reply == "Written.", "{first:?}");
    assert!(bodies.lock().unwrap().is_empty(), "the primary answered");
    // The primary goes away: its port refuses connections.
    primary_server.abort();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(
        primary_url
            .trim_start_matches("http://")
            .trim_end_matches("/v1"),
    )
    .is_ok()
    {
        assert!(
            Instant::now() < deadline,
            "the primary still accepts connections"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = turn(&admin, thread, "still there?").await;
    assert!(
        second.ok && second.reply == "Saw: still there?",
        "{second:?}"
    );
    let trace = admin.trace(thread).await;
    let fallback = trace
        .iter()
        .find_map(|e| match e {
            TraceEvent::ModelFallback(f) => Some(f.clone()),
            _ => None,
        })
        .expect("a model_fallback event");
    assert_eq!(fallback.from, "openai/gpt-4o-mini");
    assert_eq!(fallback.to, "anthropic/claude-haiku-4-5");
    assert!(
        fallback.reason.contains("connection refused"),
        "{fallback:?}"
    );
    let answered_by: Vec<String> = trace
        .iter()
        .filter_map(|e| match e {
            TraceEvent::LlmCall(c) => Some(c.model.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        answered_by.last().map(String::as_str),
        Some("claude-haiku-4-5"),
        "{answered_by:?}"
    );
    // The fallback read the whole conversation, the OpenAI tool call included, in its own form.
    let sent = bodies.lock().unwrap().last().unwrap()["messages"].to_string();
    assert!(
        sent.contains("tool_use") && sent.contains("tool_result"),
        "{sent}"
    );
    assert!(
        sent.contains("write the notes") && sent.contains("still there?"),
        "{sent}"
    );
    let history = admin.latest(thread).await.history;
    ninetrix_runner::history::validate(&history).unwrap();
}
