//! Control of a running turn (docs/runner.md, "Steer, interrupt, cancel") with the runner as a
//! process against a real `ninetrix api` and a slow local stand-in for OpenAI's Chat
//! Completions (the real streaming wire format): a steer joins the running turn at its next
//! round; an interrupt abandons a model stream, or stops a running `write` after
//! `execution.interrupt_grace` with its outcome recorded unknown; `reject` is refused while a
//! turn runs; a cancel ends a turn waiting for a person, settling the request `cancelled`. And
//! the control kill points (docs/durability.md, "Steers, interrupts and cancels"): SIGKILL of the
//! runner just before and just after the commit that ends an interrupted turn, and as a steer
//! arrives while the turn's last commit is in flight; SIGKILL of the API just before and just
//! after a cancel's commit. Every history produced is checked against both providers' rules.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ninetrix_proto::Role;
use ninetrix_proto::api::{
    ApprovalStatus, CancelRequest, EnqueueRequest, ErrorCode, MessageMode, ThreadStatus,
};
use ninetrix_proto::events::{StoppedBy, TraceEvent, TurnCompleted};
use serde_json::{Value, json};
use support::openai::{chunk, end, hanging_stream, stream_response, tool_call_response};
use support::{Gate, Hold, Runner, Setup, setup};

/// What the stand-in saw.
#[derive(Default)]
struct Seen {
    /// Requests received.
    requests: AtomicU64,
    /// Streams the runner dropped before their end (an abandoned model call).
    abandoned: AtomicU64,
    /// Requests whose last user message was `slow: …`.
    slow: AtomicU64,
    /// Wakes the test when a slow stream has started.
    streaming: tokio::sync::Notify,
}

/// Counts a stream the client dropped before its end.
struct Abandoned(Arc<Seen>, bool);

impl Drop for Abandoned {
    fn drop(&mut self) {
        if !self.1 {
            self.0.abandoned.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A fake OpenAI: `sleep: N` calls the `sleep` tool for N seconds, `write: CMD` calls `shell`
/// with CMD, `slow: …` streams one piece and then nothing until the client goes away; after a
/// tool result, or for anything else, it answers `Saw: ` and every user message of the request
/// since the last answer, joined by ` | ` — so a test reads what the model read.
async fn stand_in(seen: Arc<Seen>) -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |body: String| {
            let seen = seen.clone();
            async move { answer(seen, &body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn answer(seen: Arc<Seen>, body: &str) -> axum::response::Response {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    let request: Value = serde_json::from_str(body).unwrap();
    let messages = request["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    let content = last["content"].as_str().unwrap_or_default();
    let call = |name: &str, args: Value| tool_call_response(messages.len(), name, &args);
    if last["role"] == "user" {
        if let Some(secs) = content.strip_prefix("sleep: ") {
            let secs: f64 = secs.trim().parse().unwrap();
            return call("sleep", json!({"seconds": secs}));
        }
        if let Some(cmd) = content.strip_prefix("write: ") {
            return call("shell", json!({"command": cmd}));
        }
        if content.starts_with("slow: ") {
            seen.slow.fetch_add(1, Ordering::SeqCst);
            seen.streaming.notify_one();
            return hanging_stream(Abandoned(seen.clone(), false));
        }
    }
    let since = messages
        .iter()
        .rposition(|m| m["role"] == "assistant" && m["tool_calls"].is_null())
        .map_or(0, |i| i + 1);
    let users: Vec<&str> = messages[since..]
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    let text = format!("Saw: {}", users.join(" | "));
    stream_response(
        [
            chunk(json!({"role": "assistant", "content": text}), None),
            chunk(json!({}), Some("stop")),
            end(50, 5),
        ]
        .concat(),
    )
}

/// A durable agent on the stand-in with `sleep` and `shell`, a 1 s interrupt grace.
fn spec(base_url: &str) -> Value {
    json!({
        "name": "worker",
        "metadata": {"name": null, "description": null, "role": "test agent", "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "openai", "via": null, "model": "fake", "base_url": base_url, "api_key_secret": "FAKE_OPENAI_KEY",
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 60, "image": null,
                    "resources": {"cpu": null, "memory_bytes": null}, "script": []},
        "tools": [{"name": "sleep", "effect": "read", "effect_pinned": false},
                  {"name": "shell", "effect": "write", "effect_pinned": false}],
        "execution": {"durability": true, "replicas": 1, "max_turns": 10, "task": null, "resume": "truncate",
                      "interrupt_grace_secs": 1},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": ["FAKE_OPENAI_KEY"]
    })
}

/// An API, a thread, the stand-in and the agent's spec on it.
async fn world() -> (Setup, Arc<Seen>, Value) {
    let seen = Arc::new(Seen::default());
    let spec = spec(&stand_in(seen.clone()).await);
    (setup(), seen, spec)
}

/// A runner whose requests go through a gate holding the first commit whose body has `body`
/// (`stored`: the API stores it first, then the answer is held); the future resolves once it
/// is held.
async fn gated_runner(
    s: &Setup,
    spec: &Value,
    body: &'static str,
    stored: bool,
) -> (Runner, impl Future<Output = ()> + use<>) {
    let gate = Gate::start(&s.api.url).await;
    let held = gate.arm(Hold {
        method: "POST",
        path_contains: "/commit",
        body_contains: vec![body],
        forward_first: stored,
        lose_answer: false,
    });
    let runner = runner(&gate.url, s, spec);
    let held = async move {
        tokio::time::timeout(Duration::from_secs(30), held)
            .await
            .expect("the gate held the commit");
    };
    (runner, held)
}

fn runner(url: &str, s: &Setup, spec: &Value) -> Runner {
    Runner::start_with_env(
        url,
        s.thread,
        spec,
        &s.workspace,
        &[("FAKE_OPENAI_KEY", "sk-fake")],
    )
}

/// Sends `content` with `mode`; its inbox seq.
async fn send(s: &Setup, content: &str, mode: MessageMode) -> u64 {
    let request = EnqueueRequest {
        content: content.into(),
        dedupe_key: Some(format!("k-{content}")),
        control: None,
        mode: Some(mode),
    };
    s.admin
        .client
        .enqueue(s.thread, &request)
        .await
        .unwrap()
        .seq
}

/// Waits until an event `pick` accepts is stored.
async fn until<T>(s: &Setup, what: &str, pick: impl Fn(&TraceEvent) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(found) = s.admin.trace(s.thread).await.iter().find_map(&pick) {
            return found;
        }
        assert!(Instant::now() < deadline, "{what} never came");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The `turn_completed` events of the thread.
async fn completed(s: &Setup) -> Vec<TurnCompleted> {
    s.admin.turns(s.thread).await
}

/// Waits until the turn's first model round is stored (its tool then runs).
async fn first_round(s: &Setup) {
    until(s, "the first round", |e| {
        matches!(e, TraceEvent::LlmCall(_)).then_some(())
    })
    .await;
}

/// The stored history is valid for both providers, and holds each of `inputs` exactly once.
async fn check_history(s: &Setup, inputs: &[&str]) {
    let latest = s.admin.latest(s.thread).await;
    ninetrix_runner::history::validate(&latest.history).unwrap();
    for input in inputs {
        let n = latest
            .history
            .iter()
            .filter(|m| m.role == Role::User && m.text_content() == *input)
            .count();
        assert_eq!(
            n, 1,
            "{input:?} is in the history once: {:?}",
            latest.history
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_joins_the_running_turn_at_its_next_round() {
    let (s, _, spec) = world().await;
    let _runner = runner(&s.api.url, &s, &spec);
    let first = send(&s, "sleep: 2", MessageMode::Queue).await;
    first_round(&s).await;
    let steer = send(&s, "and also the weather", MessageMode::Steer).await;
    let done = s
        .admin
        .wait_turn(s.thread, first, Duration::from_secs(60))
        .await;
    assert!(done.ok, "{done:?}");
    assert_eq!(
        done.reply, "Saw: sleep: 2 | and also the weather",
        "the model read the steer in the same turn"
    );
    let steered = until(&s, "steered", |e| match e {
        TraceEvent::Steered(t) => Some(t.clone()),
        _ => None,
    })
    .await;
    assert_eq!((steered.seq, steered.turn_seq), (steer, done.turn_seq));
    s.admin
        .wait_done(s.thread, steer, Duration::from_secs(10))
        .await;
    assert_eq!(
        completed(&s).await.len(),
        1,
        "the steer started no turn of its own"
    );
    check_history(&s, &["sleep: 2", "and also the weather"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_abandons_the_model_stream_and_starts_the_next_turn() {
    let (s, seen, spec) = world().await;
    let _runner = runner(&s.api.url, &s, &spec);
    let streaming = seen.streaming.notified();
    let first = send(&s, "slow: think hard", MessageMode::Queue).await;
    tokio::time::timeout(Duration::from_secs(30), streaming)
        .await
        .expect("the stream started");
    let interrupt = send(&s, "stop, do this", MessageMode::Interrupt).await;
    let stopped = s
        .admin
        .wait_turn(s.thread, first, Duration::from_secs(30))
        .await;
    assert_eq!(
        stopped.stopped_by,
        Some(StoppedBy::Interrupted { seq: interrupt })
    );
    assert!(!stopped.ok);
    let next = s
        .admin
        .wait_turn(s.thread, interrupt, Duration::from_secs(30))
        .await;
    assert_eq!(
        next.reply, "Saw: stop, do this",
        "the interrupted input never answered stays out"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.abandoned.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the stream was never dropped");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    check_history(&s, &["stop, do this"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_write_past_its_grace_has_its_outcome_recorded_unknown_and_never_runs_again()
{
    let (s, _, spec) = world().await;
    let mut first_runner = runner(&s.api.url, &s, &spec);
    let first = send(
        &s,
        "write: echo started >> out.txt; sleep 30; echo done >> out.txt",
        MessageMode::Queue,
    )
    .await;
    // The write has started once its first line is in the file.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(s.workspace.join("out.txt")).is_ok_and(|t| t.contains("started"))
    {
        assert!(Instant::now() < deadline, "the write never started");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let interrupt = send(&s, "never mind", MessageMode::Interrupt).await;
    let stopped = s
        .admin
        .wait_turn(s.thread, first, Duration::from_secs(30))
        .await;
    assert_eq!(
        stopped.stopped_by,
        Some(StoppedBy::Interrupted { seq: interrupt })
    );
    s.admin
        .wait_turn(s.thread, interrupt, Duration::from_secs(30))
        .await;
    let ledger: Vec<_> = s
        .admin
        .client
        .tool_calls(s.thread)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.turn_seq == stopped.turn_seq)
        .collect();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    let record = &ledger[0];
    assert!(
        record
            .result
            .as_deref()
            .is_some_and(|r| r.contains("outcome is unknown")),
        "{record:?}"
    );
    // A restarted runner runs nothing again.
    first_runner.kill();
    let _second = runner(&s.api.url, &s, &spec);
    s.admin.send(s.thread, "hello", "after-restart").await;
    s.admin
        .wait_done(s.thread, interrupt + 1, Duration::from_secs(30))
        .await;
    let out = std::fs::read_to_string(s.workspace.join("out.txt")).unwrap();
    assert_eq!(
        out, "started\n",
        "the stopped write was killed and never repeated"
    );
    check_history(&s, &["never mind", "hello"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reject_message_is_refused_while_a_turn_runs_and_queued_otherwise() {
    let (s, _, spec) = world().await;
    let _runner = runner(&s.api.url, &s, &spec);
    let first = send(&s, "sleep: 3", MessageMode::Queue).await;
    first_round(&s).await;
    let request = EnqueueRequest {
        content: "are you there".into(),
        dedupe_key: None,
        control: None,
        mode: Some(MessageMode::Reject),
    };
    let refused = s
        .admin
        .client
        .enqueue(s.thread, &request)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(&ErrorCode::Busy), "{refused}");
    assert!(
        refused.to_string().contains(&format!("message {first}")),
        "{refused}"
    );
    s.admin
        .wait_done(s.thread, first, Duration::from_secs(30))
        .await;
    let queued = s.admin.client.enqueue(s.thread, &request).await.unwrap();
    assert_eq!(queued.mode, MessageMode::Queue, "idle: accepted");
    s.admin
        .wait_turn(s.thread, queued.seq, Duration::from_secs(30))
        .await;
}

/// SIGKILLs the runner just before (`after` false) or just after the commit that ends an
/// interrupted turn: the turn is stopped once — never run again — and the interrupt starts one
/// turn.
async fn killed_as_the_interrupt_takes_effect(after: bool) {
    let (s, seen, spec) = world().await;
    let (mut first_runner, held) = gated_runner(&s, &spec, "\"stopped_by\"", after).await;
    let streaming = seen.streaming.notified();
    let first = send(&s, "slow: think hard", MessageMode::Queue).await;
    tokio::time::timeout(Duration::from_secs(30), streaming)
        .await
        .unwrap();
    let interrupt = send(&s, "stop, do this", MessageMode::Interrupt).await;
    held.await;
    first_runner.kill();
    let _second = runner(&s.api.url, &s, &spec);
    let next = s
        .admin
        .wait_turn(s.thread, interrupt, Duration::from_secs(30))
        .await;
    assert!(next.ok, "{next:?}");
    let turns = completed(&s).await;
    let stopped: Vec<_> = turns.iter().filter(|t| t.seq == first).collect();
    assert_eq!(stopped.len(), 1, "stopped once: {turns:?}");
    assert_eq!(
        stopped[0].stopped_by,
        Some(StoppedBy::Interrupted { seq: interrupt })
    );
    assert_eq!(
        seen.slow.load(Ordering::SeqCst),
        1,
        "the interrupted round is never asked again"
    );
    assert_eq!(turns.iter().filter(|t| t.seq == interrupt).count(), 1);
    check_history(&s, &["stop, do this"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_just_before_the_interrupted_turn_is_stored() {
    killed_as_the_interrupt_takes_effect(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_just_after_the_interrupted_turn_is_stored() {
    killed_as_the_interrupt_takes_effect(true).await;
}

/// A steer sent while the turn's last commit is in flight (held by the gate; `stored`: the API
/// stored it and its answer is lost with the runner): applied exactly once, in exactly one turn.
async fn a_steer_as_the_turn_ends(stored: bool) {
    let (s, _, spec) = world().await;
    let (mut first_runner, held) = gated_runner(&s, &spec, "\"turn_completed\"", stored).await;
    let first = send(&s, "hello", MessageMode::Queue).await;
    held.await;
    let steer = send(&s, "one more thing", MessageMode::Steer).await;
    first_runner.kill();
    let _second = runner(&s.api.url, &s, &spec);
    s.admin
        .wait_done(s.thread, steer, Duration::from_secs(30))
        .await;
    let turns = completed(&s).await;
    let answered: Vec<&str> = turns.iter().map(|t| t.reply.as_str()).collect();
    if stored {
        // The turn had ended: the steer is the next turn's message.
        assert!(answered.contains(&"Saw: one more thing"), "{turns:?}");
        assert_eq!(turns.iter().filter(|t| t.seq == steer).count(), 1);
    } else {
        // The turn resumed and the steer joined its last round.
        assert_eq!(answered, ["Saw: hello | one more thing"], "{turns:?}");
        assert_eq!(turns[0].seq, first);
    }
    check_history(&s, &["hello", "one more thing"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_as_the_turns_last_commit_is_lost_joins_the_resumed_turn_once() {
    a_steer_as_the_turn_ends(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_as_the_turns_last_commit_is_stored_starts_the_next_turn_once() {
    a_steer_as_the_turn_ends(true).await;
}

/// The appender's agent with every `write` gated: its turn waits for a person.
fn gated() -> Value {
    let mut spec = support::appender_spec();
    spec["governance"]["human_approval"] = json!({
        "enabled": true, "actions": [], "effects": ["write"], "timeout_secs": 3600
    });
    spec["runtime"]["script"] = json!([
        {"text": "Appending.", "tool_calls": [{"name": "file_write", "args": {"path": "log.txt", "content": "line\n", "mode": "append"}}]},
        {"text": "Done.", "tool_calls": []}
    ]);
    spec
}

/// A cancel of a turn waiting for a person: the request is settled `cancelled` with the cancel
/// (nobody can approve it any more), the turn ends `cancelled by ana`, the write never runs.
/// `crash`: the API is SIGKILLed at the cancel's kill point and restarted on the same database.
async fn cancel_while_waiting_for_a_person(crash: Option<&str>) {
    let s = setup();
    let spec = gated();
    let mut api = None;
    let api_url = match crash {
        None => s.api.url.clone(),
        Some(point) => {
            // An API of its own, armed at the kill point, on a database the test keeps.
            let db = format!("sqlite://{}", s.dir.path().join("crash.db").display());
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap();
            let listen = port.to_string();
            let armed = ninetrix_e2e::ApiProcess::start_with_env(
                &listen,
                &["--database", &db, "--insecure-dev"],
                &[("NINETRIX_API_CRASH_AT", point)],
            );
            let url = armed.url.clone();
            api = Some((armed, listen, db));
            url
        }
    };
    let admin = support::Admin::new(&api_url);
    let _runner = Runner::start(&api_url, s.thread, &spec, &s.workspace);
    let first = admin.send(s.thread, "go", "go").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let t = admin.client.thread(s.thread).await.ok().flatten();
        if t.is_some_and(|t| t.status == ThreadStatus::Waiting) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the turn never waited for a person"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let request = CancelRequest {
        by: Some("ana".into()),
        reason: Some("wrong file".into()),
        dedupe_key: Some("cancel-1".into()),
    };
    let mut back = None;
    let admin = match api.take() {
        None => {
            let answer = admin.client.cancel(s.thread, &request).await.unwrap();
            assert_eq!(answer.approvals_cancelled, 1, "{answer:?}");
            admin
        }
        Some((armed, listen, db)) => {
            // The API dies at the kill point; the sender retries with the same key once it is
            // back, and gets one cancel either way.
            assert!(admin.client.cancel(s.thread, &request).await.is_err());
            drop(armed);
            let restarted =
                ninetrix_e2e::ApiProcess::start_on(&listen, &["--database", &db, "--insecure-dev"]);
            let admin = support::Admin::new(&restarted.url);
            let answer = admin.client.cancel(s.thread, &request).await.unwrap();
            assert_eq!(
                answer.duplicate,
                crash == Some("cancel_after_commit"),
                "{answer:?}"
            );
            back = Some(restarted);
            admin
        }
    };
    let done = admin
        .wait_turn(s.thread, first, Duration::from_secs(60))
        .await;
    assert!(
        matches!(&done.stopped_by, Some(StoppedBy::Cancelled { by, .. }) if by == "ana"),
        "{done:?}"
    );
    let approvals = admin
        .client
        .list_approvals(&ninetrix_client::ApprovalQuery {
            thread: Some(s.thread),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0].status, ApprovalStatus::Cancelled);
    assert!(
        !s.workspace.join("log.txt").exists(),
        "the gated write never ran"
    );
    let latest = admin.latest(s.thread).await;
    ninetrix_runner::history::validate(&latest.history).unwrap();
    assert_eq!(latest.state.status, ThreadStatus::Idle);
    let cancels = admin
        .turns(s.thread)
        .await
        .into_iter()
        .filter(|t| matches!(t.stopped_by, Some(StoppedBy::Cancelled { .. })))
        .count();
    assert_eq!(cancels, 1, "cancelled once");
    drop(back);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_ends_a_turn_waiting_for_a_person_and_settles_the_request_cancelled() {
    cancel_while_waiting_for_a_person(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_api_just_before_a_cancel_is_stored() {
    cancel_while_waiting_for_a_person(Some("cancel_before_commit")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_api_just_after_a_cancel_is_stored() {
    cancel_while_waiting_for_a_person(Some("cancel_after_commit")).await;
}
