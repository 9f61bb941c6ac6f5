//! Long conversations against a model with a hard context limit, as processes against a real
//! `ninetrix api`: a local stand-in for OpenAI's Chat Completions (the real streaming wire
//! format) that refuses any request over its window the way OpenAI does (400
//! `context_length_exceeded`), and otherwise reads a file in the first round of every turn (a
//! 3 KB tool result) and answers at length in the second. One thread is driven through
//! `NINETRIX_COMPACTION_TURNS` turns (default 2,000) and `NINETRIX_COMPACTION_SESSIONS`
//! sessions (default 200) through one replica: no turn fails, every request the model received
//! fitted its window, the thread compacted, and the store kept every message.
//!
//! Plus the kill points of a compaction (docs/durability.md): SIGKILL while the summary is being
//! written, just before its commit is stored and just after — each time the turn completes once,
//! with one compaction of those turns, and the history stays valid.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ninetrix_e2e::env_or;
use ninetrix_proto::events::{Decoded, TraceEvent};
use ninetrix_proto::{Role, ThreadId};
use serde_json::{Value, json};
use support::openai::{chunk, end, stream_response};
use support::{Gate, Hold, Runner, Setup, setup};

/// The model's window, in tokens (a token per four characters of the request).
const WINDOW: u64 = 6_000;

/// What the stand-in saw.
#[derive(Default)]
struct Seen {
    /// Requests answered.
    answered: AtomicU64,
    /// Requests refused as too long.
    refused: AtomicU64,
    /// The largest request answered, in tokens.
    largest: AtomicU64,
    /// Summaries written.
    summaries: AtomicU64,
    /// Summary requests held (the kill-point test holds them).
    hold_summaries: std::sync::atomic::AtomicBool,
    /// Requests that carried a message the model refused ("poison") other than as the input
    /// being refused.
    poison_resent: AtomicU64,
}

/// A fake OpenAI with a hard context limit of [`WINDOW`] tokens.
async fn limited_openai(seen: Arc<Seen>, held: Arc<tokio::sync::Notify>) -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |body: String| {
            let (seen, held) = (seen.clone(), held.clone());
            async move { answer(&seen, &held, &body).await }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

async fn answer(seen: &Seen, held: &tokio::sync::Notify, body: &str) -> axum::response::Response {
    let tokens = body.len() as u64 / 4;
    if tokens > WINDOW {
        seen.refused.fetch_add(1, Ordering::SeqCst);
        let message = format!(
            "This model's maximum context length is {WINDOW} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages."
        );
        return axum::response::Response::builder()
            .status(400)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(
                json!({"error": {"message": message, "type": "invalid_request_error",
                    "param": "messages", "code": "context_length_exceeded"}})
                .to_string(),
            ))
            .unwrap();
    }
    seen.answered.fetch_add(1, Ordering::SeqCst);
    seen.largest.fetch_max(tokens, Ordering::SeqCst);
    let request: Value = serde_json::from_str(body).unwrap();
    let messages = request["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    let text = |t: &str| {
        [
            chunk(json!({"role": "assistant", "content": t}), None),
            chunk(json!({}), Some("stop")),
            end(tokens, 20),
        ]
        .concat()
    };
    let content = last["content"].as_str().unwrap_or_default();
    if body.contains("poison") && !content.contains("poison") {
        seen.poison_resent.fetch_add(1, Ordering::SeqCst);
    }
    if content.contains("poison") && !content.contains("Summarize the conversation above") {
        return axum::response::Response::builder()
            .status(400)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(
                json!({"error": {"message": "Invalid content.", "type": "invalid_request_error"}})
                    .to_string(),
            ))
            .unwrap();
    }
    if content.contains("Summarize the conversation above") {
        if seen.hold_summaries.load(Ordering::SeqCst) {
            held.notify_one();
            std::future::pending::<()>().await;
        }
        seen.summaries.fetch_add(1, Ordering::SeqCst);
        let inputs = messages.iter().filter(|m| m["role"] == "user").count();
        return stream_response(text(&format!(
            "The user sent {inputs} questions; each was answered after reading notes.txt."
        )));
    }
    if last["role"] == "tool" {
        // A long answer: every turn adds about 1,000 tokens, whatever the tool read.
        let answer = format!(
            "Read it. The answer is 42. {}",
            "And more detail. ".repeat(170)
        );
        return stream_response(text(&answer));
    }
    let call = json!({"tool_calls": [{"index": 0, "id": format!("call_{}", messages.len()),
        "type": "function", "function": {"name": "file_read", "arguments": "{\"path\":\"notes.txt\"}"}}]});
    stream_response(
        [
            chunk(json!({"role": "assistant", "content": null}), None),
            chunk(call, None),
            chunk(json!({}), Some("tool_calls")),
            end(tokens, 15),
        ]
        .concat(),
    )
}

/// A durable agent on the stand-in, compacting at 80 % of its window and keeping 2 turns.
fn spec(base_url: &str) -> Value {
    json!({
        "name": "reader",
        "metadata": {"name": null, "description": null, "role": "test agent", "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "openai", "via": null, "model": "fake-6k", "base_url": base_url, "api_key_secret": "FAKE_OPENAI_KEY",
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": null,
                    "resources": {"cpu": null, "memory_bytes": null}, "script": [],
                    "context": {"window": WINDOW, "window_source": "agentfile", "compact_at": 0.8,
                                "keep_recent": {"turns": 2}, "strategy": "summarize", "model": null}},
        "tools": [{"name": "file_read", "effect": "read", "effect_pinned": false}],
        "execution": {"durability": true, "replicas": 1, "max_turns": 10, "task": null, "resume": "truncate", "max_concurrent_sessions": 4},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": ["FAKE_OPENAI_KEY"]
    })
}

/// A workspace with the 3 KB file every turn reads (sessions read from workspaces of their own,
/// where the read fails: the answers are long enough on their own).
fn workspace(s: &Setup, name: &str) -> std::path::PathBuf {
    let dir = s.dir.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "a line of notes\n".repeat(192)).unwrap();
    dir
}

fn runner(s: &Setup, thread: ThreadId, spec: &Value, ws: &std::path::Path) -> Runner {
    Runner::start_with_env(
        &s.api.url,
        thread,
        spec,
        ws,
        &[("FAKE_OPENAI_KEY", "sk-fake")],
    )
}

/// The thread's turns: (ok, reply) of every `turn_completed`, and its `compacted` events.
async fn story(s: &Setup, thread: ThreadId) -> (Vec<(bool, String)>, usize) {
    let mut turns = Vec::new();
    let mut compactions = 0;
    let mut after = 0;
    loop {
        let page = s.admin.client.events_after(thread, after).await.unwrap();
        let Some(last) = page.last() else { break };
        after = last.seq;
        for e in &page {
            match e.decode() {
                Decoded::Known(TraceEvent::TurnCompleted(t)) => turns.push((t.ok, t.reply)),
                Decoded::Known(TraceEvent::Compacted(_)) => compactions += 1,
                _ => {}
            }
        }
    }
    (turns, compactions)
}

/// What must hold of a thread after `sent` turns: every turn answered and stored, a valid
/// history, compactions made, and the provider never sent more than its window.
async fn check_thread(s: &Setup, thread: ThreadId, sent: usize, what: &str) -> usize {
    let latest = s.admin.latest(thread).await;
    let h = &latest.history;
    if let Err(v) = ninetrix_runner::history::validate(h) {
        panic!("{what}: invalid history: {v}");
    }
    let inputs = h.iter().filter(|m| m.role == Role::User).count();
    assert_eq!(inputs, sent, "{what}: the store keeps every input");
    let (turns, compactions) = story(s, thread).await;
    assert_eq!(turns.len(), sent, "{what}: one turn_completed per message");
    let failed: Vec<&(bool, String)> = turns.iter().filter(|(ok, _)| !ok).collect();
    assert!(failed.is_empty(), "{what}: failed turns: {failed:?}");
    let stored = h.iter().filter(|m| m.compaction().is_some()).count();
    assert_eq!(
        stored, compactions,
        "{what}: one record per compacted event"
    );
    let context = latest.state.context.expect("the context use is stored");
    assert!(context.input_tokens <= WINDOW && context.window == Some(WINDOW));
    compactions
}

/// Queues `question i` for every `i` of `range` in the thread's inbox; the last one's seq.
async fn queue(s: &Setup, range: std::ops::Range<usize>) -> u64 {
    let mut last = 0;
    for i in range {
        last = s
            .admin
            .send(s.thread, &format!("question {i}"), &format!("q{i}"))
            .await;
    }
    last
}

/// Sends `question i` for every `i` of `range`, each once the one before is done.
async fn one_by_one(s: &Setup, range: std::ops::Range<usize>) {
    for i in range {
        let seq = queue(s, i..i + 1).await;
        s.admin
            .wait_done(s.thread, seq, Duration::from_secs(30))
            .await;
    }
}

async fn wait_idle(s: &Setup, thread: ThreadId, seq: u64, timeout: Duration) {
    s.admin.wait_done(thread, seq, timeout).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_of_thousands_of_turns_and_hundreds_of_sessions_never_outgrow_the_window() {
    let s = setup();
    let seen = Arc::new(Seen::default());
    let url = limited_openai(seen.clone(), Arc::new(tokio::sync::Notify::new())).await;
    let spec = spec(&url);
    let turns: usize = env_or("NINETRIX_COMPACTION_TURNS", 2000);
    let sessions: usize = env_or("NINETRIX_COMPACTION_SESSIONS", 200);
    let per_session: usize = 8;

    // One thread, thousands of turns.
    let ws = workspace(&s, "thread");
    let _runner = runner(&s, s.thread, &spec, &ws);
    let started = Instant::now();
    let last = queue(&s, 0..turns).await;
    wait_idle(&s, s.thread, last, Duration::from_secs(900)).await;
    let took = started.elapsed();
    let compactions = check_thread(&s, s.thread, turns, "the long thread").await;
    assert!(
        compactions as f64 >= turns as f64 / 10.0,
        "{compactions} compactions in {turns} turns"
    );
    eprintln!(
        "{turns} turns in {:.1} s ({:.1} ms a turn), {compactions} compactions, largest request {} of {WINDOW} tokens, {} refused",
        took.as_secs_f64(),
        took.as_secs_f64() * 1000.0 / turns as f64,
        seen.largest.load(Ordering::SeqCst),
        seen.refused.load(Ordering::SeqCst)
    );

    // Hundreds of sessions through one replica, each long enough to compact.
    let replica_ws = workspace(&s, "replica-1");
    let _replica = Runner::start_with_env(
        &s.api.url,
        ThreadId::new_v7(),
        &spec,
        &replica_ws,
        &[
            ("AGENTFILE_POOL", "long"),
            ("AGENTFILE_REPLICA", "1"),
            ("AGENTFILE_AGENT_TOKEN", "insecure-dev"),
            ("FAKE_OPENAI_KEY", "sk-fake"),
        ],
    );
    let mut threads = Vec::new();
    for i in 0..sessions {
        let key = format!("user-{i}");
        let thread = s
            .admin
            .client
            .open_session("long", "reader", &key)
            .await
            .unwrap()
            .thread_id;
        threads.push(thread);
    }
    for n in 0..per_session {
        for (i, thread) in threads.iter().enumerate() {
            s.admin
                .send(*thread, &format!("user-{i} asks {n}"), &format!("{i}-{n}"))
                .await;
        }
    }
    for (i, thread) in threads.iter().enumerate() {
        wait_idle(&s, *thread, per_session as u64, Duration::from_secs(600)).await;
        let compactions = check_thread(&s, *thread, per_session, &format!("session {i}")).await;
        assert!(
            compactions >= 1,
            "session {i} never compacted: {:?}",
            s.admin.latest(*thread).await.state.context
        );
    }
    assert_eq!(
        seen.refused.load(Ordering::SeqCst),
        0,
        "the runner compacts before the model refuses"
    );
    assert!(seen.largest.load(Ordering::SeqCst) <= WINDOW);
}

/// The model refuses a request once when the runner does not know the window: the runner
/// compacts and retries, and the turn succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_round_is_compacted_and_retried_when_the_window_is_unknown() {
    let s = setup();
    let seen = Arc::new(Seen::default());
    let url = limited_openai(seen.clone(), Arc::new(tokio::sync::Notify::new())).await;
    let mut spec = spec(&url);
    spec["runtime"]["context"]["window"] = Value::Null;
    spec["runtime"]["context"]["window_source"] = Value::Null;
    let ws = workspace(&s, "thread");
    let _runner = runner(&s, s.thread, &spec, &ws);
    let last = queue(&s, 0..20).await;
    wait_idle(&s, s.thread, last, Duration::from_secs(120)).await;
    let latest = s.admin.latest(s.thread).await;
    assert!(ninetrix_runner::history::validate(&latest.history).is_ok());
    let (turns, compactions) = story(&s, s.thread).await;
    assert_eq!(turns.len(), 20);
    assert!(turns.iter().all(|(ok, _)| *ok), "{turns:?}");
    assert!(
        seen.refused.load(Ordering::SeqCst) >= 1,
        "the model refused"
    );
    assert!(compactions >= 1);
    assert!(
        latest.history.iter().any(|m| m
            .compaction()
            .is_some_and(|c| c.reason == ninetrix_proto::context::CompactionReason::Overflow)),
        "the compaction says why"
    );
}

/// Kills the runner at one step of its first compaction (`summary`: while the summary is being
/// written; `before`/`after`: just before or after the commit that stores it) and restarts it:
/// every message is answered once, the compactions never cover the same turns twice, and a
/// summary is written again only when it was never stored.
async fn killed_while_compacting(at: &str) {
    let s = setup();
    let seen = Arc::new(Seen::default());
    let held = Arc::new(tokio::sync::Notify::new());
    let url = limited_openai(seen.clone(), held.clone()).await;
    let spec = spec(&url);
    let ws = workspace(&s, "thread");
    let gate = Gate::start(&s.api.url).await;
    let reached: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = if at == "summary" {
        seen.hold_summaries.store(true, Ordering::SeqCst);
        let held = held.clone();
        Box::pin(async move { held.notified().await })
    } else {
        Box::pin(gate.arm(Hold {
            method: "POST",
            path_contains: "/commit",
            body_contains: vec!["\"type\":\"compaction\""],
            forward_first: at == "after",
            lose_answer: false,
        }))
    };
    let mut first = Runner::start_with_env(
        &gate.url,
        s.thread,
        &spec,
        &ws,
        &[("FAKE_OPENAI_KEY", "sk-fake")],
    );
    const MESSAGES: usize = 10;
    let last = queue(&s, 0..MESSAGES).await;
    tokio::time::timeout(Duration::from_secs(60), reached)
        .await
        .unwrap_or_else(|_| panic!("the runner never reached the compaction's {at}"));
    first.kill();
    let summaries_before = seen.summaries.load(Ordering::SeqCst);
    seen.hold_summaries.store(false, Ordering::SeqCst);
    let _second = runner(&s, s.thread, &spec, &ws);
    s.admin
        .wait_done(s.thread, last, Duration::from_secs(60))
        .await;
    let latest = s.admin.latest(s.thread).await;
    assert!(ninetrix_runner::history::validate(&latest.history).is_ok());
    let records: Vec<_> = latest
        .history
        .iter()
        .filter_map(|m| m.compaction())
        .collect();
    assert!(!records.is_empty(), "{at}: the thread compacted");
    for pair in records.windows(2) {
        assert_eq!(
            pair[1].from, pair[0].to,
            "{at}: each compaction starts where the last ended, none covers turns twice"
        );
    }
    let (turns, _) = story(&s, s.thread).await;
    assert_eq!(turns.len(), MESSAGES, "{at}: each message answered once");
    assert!(turns.iter().all(|(ok, _)| *ok), "{at}: {turns:?}");
    // Written before the kill: none while it was being written; one, lost, just before its
    // commit; one, stored, just after.
    let (written, lost) = match at {
        "summary" => (0, 0),
        "before" => (1, 1),
        _ => (1, 0),
    };
    assert_eq!(
        (summaries_before, seen.summaries.load(Ordering::SeqCst)),
        (written, records.len() as u64 + lost),
        "{at}: a summary is written again only when it was never stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_the_summary_is_written() {
    killed_while_compacting("summary").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_just_before_the_compaction_is_stored() {
    killed_while_compacting("before").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_just_after_the_compaction_is_stored() {
    killed_while_compacting("after").await;
}

/// `ninetrix compact`'s request (an inbox instruction): carried out between turns, once, with
/// the inbox cursor moved in the compaction's commit; a second request with nothing new to
/// compact says so, and the next turn sees the summary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requested_compaction_runs_between_turns_once() {
    let s = setup();
    let seen = Arc::new(Seen::default());
    let url = limited_openai(seen.clone(), Arc::new(tokio::sync::Notify::new())).await;
    let mut spec = spec(&url);
    // A window the conversation never nears: only the request compacts.
    spec["runtime"]["context"]["window"] = json!(1_000_000);
    let ws = workspace(&s, "thread");
    let _runner = runner(&s, s.thread, &spec, &ws);
    one_by_one(&s, 0..4).await;
    let compact = |key: &'static str| {
        let admin = s.admin.clone();
        async move {
            let request = ninetrix_proto::api::EnqueueRequest {
                content: "ninetrix compact".into(),
                dedupe_key: Some(key.into()),
                control: Some(ninetrix_proto::api::Control::Compact),
                mode: None,
            };
            admin.client.enqueue(s.thread, &request).await.unwrap().seq
        }
    };
    let seq = compact("c1").await;
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(30))
        .await;
    let latest = s.admin.latest(s.thread).await;
    let records: Vec<_> = latest
        .history
        .iter()
        .filter_map(|m| m.compaction())
        .collect();
    assert_eq!(records.len(), 1);
    assert_eq!(
        (records[0].reason, records[0].turns),
        (ninetrix_proto::context::CompactionReason::Requested, [1, 2]),
        "the turns before the two kept ones"
    );
    assert_eq!(latest.state.inbox_cursor, seq, "the cursor moved with it");
    assert_eq!(seen.summaries.load(Ordering::SeqCst), 1);
    let again = compact("c2").await;
    s.admin
        .wait_done(s.thread, again, Duration::from_secs(30))
        .await;
    let (_, compactions) = story(&s, s.thread).await;
    assert_eq!(compactions, 1, "nothing new to compact");
    let events = s.admin.client.events_after(s.thread, 0).await.unwrap();
    assert!(events.iter().any(|e| matches!(
        e.decode(),
        Decoded::Known(TraceEvent::CompactionSkipped(k)) if k.why.contains("nothing to compact")
    )));
    // The next turn is answered with the summary in view.
    let seq = s.admin.send(s.thread, "after", "after").await;
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(30))
        .await;
    let (turns, _) = story(&s, s.thread).await;
    assert_eq!(turns.len(), 5, "two requests are no turns");
    assert!(turns.iter().all(|(ok, _)| *ok));
}

/// An input the model refuses, on a turn that compacted first (which stored the input with the
/// compaction): the turn fails, and no later request carries the refused input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_input_after_its_turns_compaction_is_never_sent_again() {
    let s = setup();
    let seen = Arc::new(Seen::default());
    let url = limited_openai(seen.clone(), Arc::new(tokio::sync::Notify::new())).await;
    let spec = spec(&url);
    let ws = workspace(&s, "thread");
    let _runner = runner(&s, s.thread, &spec, &ws);
    one_by_one(&s, 0..4).await;
    let before = seen.summaries.load(Ordering::SeqCst);
    let seq = s.admin.send(s.thread, "poison", "poison").await;
    let done = s
        .admin
        .wait_turn(s.thread, seq, Duration::from_secs(30))
        .await;
    assert!(!done.ok, "{done:?}");
    assert!(
        seen.summaries.load(Ordering::SeqCst) > before,
        "the turn compacted before the refusal (else this test tests nothing)"
    );
    one_by_one(&s, 4..7).await;
    let (turns, _) = story(&s, s.thread).await;
    assert_eq!(turns.len(), 8);
    assert!(turns[5..].iter().all(|(ok, _)| *ok), "{turns:?}");
    assert_eq!(
        seen.poison_resent.load(Ordering::SeqCst),
        0,
        "the refused input was sent with a later turn"
    );
    let latest = s.admin.latest(s.thread).await;
    assert!(ninetrix_runner::history::validate(&latest.history).is_ok());
}
