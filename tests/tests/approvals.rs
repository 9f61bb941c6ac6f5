//! Requests to people with the runner as a process against a real `ninetrix api`: a gated write
//! waits (thread `waiting`, health `waiting for approval`), runs once when approved — also when
//! the runner is SIGKILLed while waiting, or between the decision and the write, and when the
//! decision is posted while no runner is up — never when rejected or expired, and an
//! `ask_human` question's answer becomes the call's result. Two requests of one response are
//! decided in opposite order. A signed notification reaches `notify_url`.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ninetrix_client::ApprovalQuery;
use ninetrix_proto::api::{
    Approval, ApprovalKind, ApprovalStatus, DecisionRequest, ThreadStatus, Verdict,
};
use ninetrix_proto::{ApprovalId, Block};
use serde_json::{Value, json};
use support::{Gate, Hold, Runner, Setup, appender_spec, lines, setup};

/// The appender with every `write` gated (requests stand `timeout_secs`), and `script` as its
/// model's answers.
fn gated_spec(timeout_secs: u64, script: Option<Value>) -> Value {
    let mut spec = appender_spec();
    spec["governance"]["human_approval"] = json!({
        "enabled": true, "actions": [], "effects": ["write"], "timeout_secs": timeout_secs
    });
    spec["tools"] = json!([
        {"name": "file_write", "effect": "idempotent", "effect_pinned": false},
        {"name": "ask_human", "effect": "read", "effect_pinned": false}
    ]);
    if let Some(script) = script {
        spec["runtime"]["script"] = script;
    }
    spec
}

/// The thread's requests standing so (`None`: all).
async fn requests(s: &Setup, status: Option<ApprovalStatus>) -> Vec<Approval> {
    let query = ApprovalQuery {
        thread: Some(s.thread),
        status,
        ..ApprovalQuery::default()
    };
    s.admin.client.list_approvals(&query).await.unwrap()
}

/// The thread's status as the API lists it.
async fn status(s: &Setup) -> ThreadStatus {
    s.admin
        .client
        .thread(s.thread)
        .await
        .unwrap()
        .unwrap()
        .status
}

/// Waits until the thread has `n` pending requests; returns them.
async fn pending(s: &Setup, n: usize) -> Vec<Approval> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = requests(s, Some(ApprovalStatus::Pending)).await;
        if found.len() == n {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{n} pending requests did not appear: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn decide(s: &Setup, id: ApprovalId, decision: Verdict, text: Option<&str>) -> Approval {
    let request = DecisionRequest {
        decision,
        reason: (decision != Verdict::Answer).then(|| text.unwrap_or("ok").to_string()),
        answer: (decision == Verdict::Answer).then(|| text.unwrap_or_default().to_string()),
        by: Some("tester".into()),
    };
    s.admin.client.decide_approval(id, &request).await.unwrap()
}

/// The types of the thread's stored events.
async fn kinds(s: &Setup) -> Vec<String> {
    s.admin
        .client
        .events_after(s.thread, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

/// The tool results of the thread's history, in order.
async fn results(s: &Setup) -> Vec<(String, bool)> {
    s.admin
        .latest(s.thread)
        .await
        .history
        .iter()
        .flat_map(|m| m.blocks.clone())
        .filter_map(|b| match b {
            Block::ToolResult {
                content, is_error, ..
            } => Some((content, is_error)),
            _ => None,
        })
        .collect()
}

/// The health line the runner writes.
fn health(s: &Setup) -> String {
    let path = s.workspace.with_file_name(format!("health-{}", s.thread));
    let report = std::fs::read_to_string(path).unwrap_or_default();
    serde_json::from_str::<ninetrix_runner::health::HealthReport>(&report)
        .map(|r| ninetrix_runner::health::judge(&r, chrono::Utc::now().timestamp_millis()).1)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_write_runs_once_across_a_kill_while_waiting_and_a_decision_made_while_down() {
    let s = setup();
    let spec = gated_spec(3600, None);
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    let mut runner = Runner::start(&s.api.url, s.thread, &spec, &s.workspace);
    let request = pending(&s, 1).await.remove(0);
    assert_eq!(
        (request.kind, request.tool.as_str()),
        (ApprovalKind::Approval, "file_write")
    );
    assert_eq!(status(&s).await, ThreadStatus::Waiting);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !health(&s).contains("waiting for approval") {
        assert!(Instant::now() < deadline, "health: {}", health(&s));
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(lines(&s.workspace), 0, "nothing runs before the decision");

    // SIGKILL while waiting; the person decides while no runner is up.
    runner.kill();
    decide(&s, request.id, Verdict::Approve, None).await;
    let _runner = Runner::start(&s.api.url, s.thread, &spec, &s.workspace);
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(30))
        .await;
    assert_eq!(lines(&s.workspace), 1, "the approved write ran once");
    let again = pending(&s, 0).await;
    assert!(again.is_empty(), "the restart asked nobody again");
    let kinds = kinds(&s).await;
    for kind in ["approval_requested", "approval_decided", "turn_completed"] {
        assert_eq!(
            kinds.iter().filter(|k| *k == kind).count(),
            1,
            "{kind} in {kinds:?}"
        );
    }
}

/// The runner is killed after the decision, with the commit that stores "settled" (and the
/// write's intent) held at the gate: unsent, or stored with its answer lost.
async fn kill_between_decision_and_write(forward_first: bool) -> (Setup, usize) {
    let s = setup();
    let spec = gated_spec(3600, None);
    let gate = Gate::start(&s.api.url).await;
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    let mut runner = Runner::start(&gate.url, s.thread, &spec, &s.workspace);
    let request = pending(&s, 1).await.remove(0);
    let held = gate.arm(Hold {
        method: "POST",
        path_contains: "/commit",
        body_contains: vec!["\"status\":\"in_turn\"", "\"intents\":[{"],
        forward_first,
        lose_answer: false,
    });
    decide(&s, request.id, Verdict::Approve, None).await;
    tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("the settling commit reaches the gate");
    runner.kill();
    assert_eq!(lines(&s.workspace), 0);
    let _runner = Runner::start(&s.api.url, s.thread, &spec, &s.workspace);
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(30))
        .await;
    let written = lines(&s.workspace);
    (s, written)
}

/// The runner is killed at the commit that stores the request (with the model's response): before
/// it is stored, or after (its answer lost). Either way one request ends up pending, and once
/// approved the write runs once.
async fn kill_at_the_request(forward_first: bool) {
    let s = setup();
    let spec = gated_spec(3600, None);
    let gate = Gate::start(&s.api.url).await;
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    let held = gate.arm(Hold {
        method: "POST",
        path_contains: "/commit",
        body_contains: vec!["\"approvals\":[{"],
        forward_first,
        lose_answer: false,
    });
    let mut runner = Runner::start(&gate.url, s.thread, &spec, &s.workspace);
    tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("the request's commit reaches the gate");
    runner.kill();
    let stored = requests(&s, None).await;
    assert_eq!(stored.len(), usize::from(forward_first));
    let _runner = Runner::start(&s.api.url, s.thread, &spec, &s.workspace);
    let request = pending(&s, 1).await.remove(0);
    if let Some(first) = stored.first() {
        assert_eq!(
            request.id, first.id,
            "the stored request is waited for again"
        );
    }
    decide(&s, request.id, Verdict::Approve, None).await;
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(30))
        .await;
    assert_eq!(lines(&s.workspace), 1);
    let all = requests(&s, None).await;
    assert_eq!(all.len(), 1, "one request: {all:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_before_the_request_is_stored_asks_once_after_the_restart() {
    kill_at_the_request(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_just_after_the_request_is_stored_waits_for_the_same_request() {
    kill_at_the_request(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_the_decision_and_the_write_runs_it_once() {
    let (s, written) = kill_between_decision_and_write(false).await;
    assert_eq!(written, 1);
    assert!(pending(&s, 0).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_after_the_approved_writes_intent_is_stored_never_runs_it_twice() {
    // The intent is stored, the write may or may not have run: the ledger's rule answers the
    // model "outcome unknown" rather than run it again (docs/durability.md).
    let (s, written) = kill_between_decision_and_write(true).await;
    assert!(written <= 1);
    let (text, is_error) = results(&s).await.remove(0);
    assert!(is_error && text.contains("unknown"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_write_never_runs_and_the_model_is_told_why() {
    let s = setup();
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    let _runner = Runner::start(&s.api.url, s.thread, &gated_spec(3600, None), &s.workspace);
    let request = pending(&s, 1).await.remove(0);
    decide(&s, request.id, Verdict::Reject, Some("not on a Friday")).await;
    let done = s
        .admin
        .wait_turn(s.thread, seq, Duration::from_secs(30))
        .await;
    assert!(done.ok, "the turn goes on to the model's answer");
    assert_eq!(lines(&s.workspace), 0);
    let (text, is_error) = results(&s).await.remove(0);
    assert!(
        is_error && text.contains("tester rejected") && text.contains("not on a Friday"),
        "{text}"
    );
    let tool_calls = s.admin.client.tool_calls(s.thread).await.unwrap();
    assert!(tool_calls.is_empty(), "no ledger intent: {tool_calls:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_request_is_a_rejection_the_runner_notices_by_itself() {
    let s = setup();
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    let _runner = Runner::start(&s.api.url, s.thread, &gated_spec(1, None), &s.workspace);
    let done = s
        .admin
        .wait_turn(s.thread, seq, Duration::from_secs(30))
        .await;
    assert!(done.ok);
    assert_eq!(
        lines(&s.workspace),
        0,
        "an expired request is never executed"
    );
    let (text, is_error) = results(&s).await.remove(0);
    assert!(is_error && text.contains("expired"), "{text}");
    let kinds = kinds(&s).await;
    assert_eq!(
        kinds.iter().filter(|k| *k == "approval_expired").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(requests(&s, Some(ApprovalStatus::Expired)).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_requests_of_one_response_are_decided_in_opposite_order() {
    let s = setup();
    let script = json!([
        {"text": "Two writes.", "tool_calls": [
            {"name": "file_write", "args": {"path": "log.txt", "content": "first\n", "mode": "append"}},
            {"name": "file_write", "args": {"path": "log.txt", "content": "second\n", "mode": "append"}}
        ]},
        {"text": "Done.", "tool_calls": []}
    ]);
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    let _runner = Runner::start(
        &s.api.url,
        s.thread,
        &gated_spec(3600, Some(script)),
        &s.workspace,
    );
    let requests = pending(&s, 2).await;
    let first = requests
        .iter()
        .find(|r| r.args["content"] == "first\n")
        .unwrap();
    let second = requests
        .iter()
        .find(|r| r.args["content"] == "second\n")
        .unwrap();
    // The second is approved first: nothing runs while the first still waits.
    decide(&s, second.id, Verdict::Approve, None).await;
    let still = pending(&s, 1).await;
    assert_eq!(still[0].id, first.id);
    assert_eq!(status(&s).await, ThreadStatus::Waiting);
    assert_eq!(
        lines(&s.workspace),
        0,
        "ungated or approved calls wait for the rest"
    );
    decide(&s, first.id, Verdict::Reject, Some("only one")).await;
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(30))
        .await;
    let log = std::fs::read_to_string(s.workspace.join("log.txt")).unwrap();
    assert_eq!(log, "second\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answered_question_is_the_calls_result_and_a_notification_is_signed() {
    let s = setup();
    // A receiver for notify_url that records each delivery.
    let seen: Arc<Mutex<Vec<(String, String, String)>>> = Arc::default();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post({
            let seen = seen.clone();
            move |headers: axum::http::HeaderMap, body: String| {
                let seen = seen.clone();
                async move {
                    let h = |n: &str| {
                        headers
                            .get(n)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_string()
                    };
                    let signed = format!(
                        "{}|{}",
                        h("x-ninetrix-signature"),
                        h("x-ninetrix-timestamp")
                    );
                    seen.lock()
                        .unwrap()
                        .push((signed, h("x-ninetrix-delivery"), body));
                    // The first delivery fails, so the retry is exercised.
                    if seen.lock().unwrap().len() == 1 {
                        axum::http::StatusCode::SERVICE_UNAVAILABLE
                    } else {
                        axum::http::StatusCode::OK
                    }
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let script = json!([
        {"text": "Asking.", "tool_calls": [{"name": "ask_human", "args": {"question": "Which colour?"}}]},
        {"text": "Done.", "tool_calls": []}
    ]);
    let mut spec = gated_spec(3600, Some(script));
    spec["governance"]["human_approval"]["notify_url"] = hook.into();
    spec["governance"]["human_approval"]["notify_secret"] = "HOOK_SECRET".into();
    spec["secrets"] = json!(["HOOK_SECRET"]);
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    let _runner = Runner::start_with_env(
        &s.api.url,
        s.thread,
        &spec,
        &s.workspace,
        &[("HOOK_SECRET", "whsec-test-1234")],
    );
    let question = pending(&s, 1).await.remove(0);
    assert_eq!(question.kind, ApprovalKind::Question);
    assert_eq!(question.args["question"], "Which colour?");
    // Delivered (after one failed attempt), signed over "<timestamp>.<body>".
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.lock().unwrap().len() < 2 {
        assert!(Instant::now() < deadline, "no retried delivery");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (signed, delivery, body) = seen.lock().unwrap()[1].clone();
    let (signature, timestamp) = signed.split_once('|').unwrap();
    assert_eq!(delivery, question.id.to_string());
    assert_eq!(
        signature,
        ninetrix_runner::notify::signature(
            b"whsec-test-1234",
            timestamp.parse().unwrap(),
            body.as_bytes()
        )
    );
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["id"], json!(question.id));
    assert_eq!(
        body["decide"]["accept"],
        format!("ninetrix answer {} TEXT", question.id)
    );
    assert!(!body.to_string().contains("whsec-test-1234"));

    decide(&s, question.id, Verdict::Answer, Some("Blue, please.")).await;
    let done = s
        .admin
        .wait_turn(s.thread, seq, Duration::from_secs(30))
        .await;
    assert!(done.ok);
    assert_eq!(
        results(&s).await,
        [("Blue, please.".to_string(), false)],
        "the answer is the result"
    );
    let kinds = kinds(&s).await;
    assert!(
        kinds.iter().filter(|k| *k == "approval_notified").count() >= 2,
        "each attempt recorded: {kinds:?}"
    );
    drop(s.dir);
}
