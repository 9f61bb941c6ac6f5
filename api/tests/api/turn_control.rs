//! Steer, interrupt, cancel, the API's side: each message's mode (the sender's, the
//! agent's `on_message_while_busy` as its last claim stated it, else `queue`) resolved against
//! the turn the thread is in or about to start — a `reject` refused `busy` while one runs; an
//! interrupt of a waiting turn and a cancel settling what the turn waited for (its requests to
//! people, its handoffs, and the collaborators' turns on those tasks), once per dedupe key.

use std::time::Duration;

use ninetrix_proto::{ApprovalId, ThreadId};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{ADMIN, Backend, TestApi, both_backends, message};

/// Sends a message to the thread as the admin: the answer.
async fn send(api: &TestApi, thread: ThreadId, body: Value) -> (StatusCode, Value) {
    api.admin(
        Method::POST,
        format!("/v1/threads/{thread}/messages"),
        Some(body),
    )
    .await
}

/// Cancels the thread's turn as the admin: the answer.
async fn cancel(api: &TestApi, thread: ThreadId, body: Value) -> (StatusCode, Value) {
    api.admin(
        Method::POST,
        format!("/v1/threads/{thread}/cancel"),
        Some(body),
    )
    .await
}

/// The thread's inbox as its runner reads it.
async fn inbox(api: &TestApi, thread: ThreadId) -> Vec<Value> {
    let token = api.token_of(thread).await;
    let (status, body) = api
        .call(
            Method::GET,
            format!("/v1/runners/threads/{thread}/inbox?after=0"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array().unwrap().clone()
}

/// Claims the thread with its runner token, stating `on_busy` (`None`: states none).
async fn claim_with(api: &TestApi, thread: ThreadId, token: &str, on_busy: Option<&str>) -> u64 {
    let body = match on_busy {
        Some(mode) => json!({"on_message_while_busy": mode}),
        None => json!({}),
    };
    let (status, claimed) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{thread}/claim"),
            Some(token),
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    claimed["epoch"].as_u64().unwrap()
}

/// Commits version `parent + 1` of the thread with this state (and the rest of `extra`, e.g.
/// requests to people): the new version.
async fn commit(
    api: &TestApi,
    thread: ThreadId,
    token: &str,
    epoch: u64,
    parent: u64,
    state: Value,
    extra: Value,
) -> Value {
    let mut body = json!({"epoch": epoch, "parent_version": parent, "append": [message("user", &format!("v{parent}"))],
        "state": state, "intents": [], "outcomes": []});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, answer) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{thread}/commit"),
            Some(token),
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    answer
}

/// A state of turn `turn_seq` answering inbox message `seq` (taken: the cursor is on it).
fn state(status: &str, turn_seq: u64, seq: u64) -> Value {
    json!({"turn_seq": turn_seq, "turn_start_history_len": 1, "status": status, "inbox_cursor": seq,
           "turn_message": seq})
}

/// A pending request to a person of turn `turn_seq` (an hour to decide).
fn approval(id: ApprovalId, key: &str, turn_seq: u64) -> Value {
    json!({"id": id, "key": key, "call_id": format!("call-{key}"), "turn_seq": turn_seq, "kind": "approval",
           "tool": "file_write", "args": {"path": "out.txt"}, "args_hash": "ab12", "timeout_secs": 3600})
}

async fn a_message_takes_the_senders_mode_else_the_agents_else_queue(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let thread = ThreadId::new_v7();
    let token = api.runner_token(thread).await;
    claim_with(&api, thread, &token, None).await;
    // No mode, no agent default: queue. The first message finds nothing running; the second
    // finds the turn the first is about to start.
    let (status, first) = send(&api, thread, json!({"content": "one"})).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(
        (&first["mode"], &first.get("running")),
        (&json!("queue"), &None)
    );
    let (_, second) = send(&api, thread, json!({"content": "two"})).await;
    assert_eq!(
        (&second["mode"], &second["running"]),
        (&json!("queue"), &json!({"turn_seq": 1, "seq": 1}))
    );
    // The agent's default, as its runner's claim states it; the sender's mode wins.
    claim_with(&api, thread, &token, Some("steer")).await;
    let (_, third) = send(
        &api,
        thread,
        json!({"content": "three", "dedupe_key": "k3"}),
    )
    .await;
    assert_eq!(third["mode"], json!("steer"));
    let (_, fourth) = send(
        &api,
        thread,
        json!({"content": "four", "mode": "interrupt"}),
    )
    .await;
    assert_eq!(fourth["mode"], json!("interrupt"));
    // A claim stating nothing keeps the default; one stating another replaces it.
    claim_with(&api, thread, &token, None).await;
    let (_, fifth) = send(&api, thread, json!({"content": "five"})).await;
    assert_eq!(fifth["mode"], json!("steer"));
    claim_with(&api, thread, &token, Some("queue")).await;
    let (_, sixth) = send(&api, thread, json!({"content": "six"})).await;
    assert_eq!(sixth["mode"], json!("queue"));
    // A repeated dedupe key answers the stored message with its mode, whatever the retry asks.
    let (status, again) = send(
        &api,
        thread,
        json!({"content": "three", "dedupe_key": "k3", "mode": "reject"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(
        (&again["seq"], &again["duplicate"], &again["mode"]),
        (&json!(3), &json!(true), &json!("steer"))
    );
    // A control is always queued; a cancel is not a message.
    let (_, compact) = send(
        &api,
        thread,
        json!({"content": "", "control": "compact", "mode": "steer"}),
    )
    .await;
    assert_eq!(compact["mode"], json!("queue"));
    let (status, refused) = send(&api, thread, json!({"content": "", "control": "cancel"})).await;
    assert_eq!(
        (status, &refused["code"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("invalid_body")),
        "{refused}"
    );
    assert!(
        refused["message"].as_str().unwrap().contains("/cancel"),
        "{refused}"
    );
    // The runner reads each message's mode.
    let stored = inbox(&api, thread).await;
    assert_eq!(
        stored
            .iter()
            .map(|m| m["mode"].as_str().unwrap())
            .collect::<Vec<_>>(),
        [
            "queue",
            "queue",
            "steer",
            "interrupt",
            "steer",
            "queue",
            "queue"
        ]
    );
    api.stop().await;
}

async fn a_reject_is_refused_while_a_turn_runs_and_queued_otherwise(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let thread = ThreadId::new_v7();
    let token = api.runner_token(thread).await;
    let epoch = claim_with(&api, thread, &token, Some("reject")).await;
    // Nothing runs: a reject is stored, as `queue`.
    let (status, first) = send(&api, thread, json!({"content": "one"})).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["mode"], json!("queue"));
    // The runner takes it: turn 1 runs.
    commit(
        &api,
        thread,
        &token,
        epoch,
        0,
        state("in_turn", 1, 1),
        json!({}),
    )
    .await;
    for body in [
        json!({"content": "two"}),
        json!({"content": "two", "mode": "reject", "dedupe_key": "k2"}),
    ] {
        let (status, busy) = send(&api, thread, body).await;
        assert_eq!(
            (status, &busy["code"], &busy["running"]),
            (
                StatusCode::CONFLICT,
                &json!("busy"),
                &json!({"turn_seq": 1, "seq": 1})
            ),
            "{busy}"
        );
        let text = busy["message"].as_str().unwrap();
        assert!(
            text.contains(&format!("thread {thread} is in turn 1 (message 1)"))
                && text.contains("queue")
                && text.contains("steer")
                && text.contains("interrupt"),
            "{text}"
        );
    }
    let (_, summary) = api
        .admin(Method::GET, format!("/v1/threads/{thread}"), None)
        .await;
    assert_eq!(summary["inbox_seq"], json!(1), "nothing was stored");
    // The sender's own mode wins over the agent's reject.
    let (status, queued) = send(&api, thread, json!({"content": "two", "mode": "queue"})).await;
    assert_eq!(status, StatusCode::CREATED, "{queued}");
    assert_eq!(
        (&queued["seq"], &queued["running"]),
        (&json!(2), &json!({"turn_seq": 1, "seq": 1}))
    );
    // Turn 1 ends; message 2 waits for turn 2, which is about to start: still busy.
    commit(
        &api,
        thread,
        &token,
        epoch,
        1,
        state("idle", 1, 1),
        json!({}),
    )
    .await;
    let (status, busy) = send(&api, thread, json!({"content": "three"})).await;
    assert_eq!(
        (status, &busy["running"]),
        (StatusCode::CONFLICT, &json!({"turn_seq": 2, "seq": 2})),
        "{busy}"
    );
    assert!(
        busy["message"]
            .as_str()
            .unwrap()
            .contains("about to start turn 2 (message 2)"),
        "{busy}"
    );
    // Turn 2 ends with nothing waiting: a reject is stored as `queue`.
    commit(
        &api,
        thread,
        &token,
        epoch,
        2,
        state("idle", 2, 2),
        json!({}),
    )
    .await;
    let (status, stored) = send(
        &api,
        thread,
        json!({"content": "three", "mode": "reject", "dedupe_key": "k2"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{stored}");
    assert_eq!(
        (&stored["seq"], &stored["mode"], stored.get("running")),
        (&json!(3), &json!("queue"), None)
    );
    api.stop().await;
}

/// Records pool `p`'s agents as `up` does: `a` hands work to `b`, `b` to `c`.
async fn agents(api: &TestApi) {
    for (agent, collaborators) in [("a", json!(["b"])), ("b", json!(["c"])), ("c", json!([]))] {
        let (status, body) = api
            .admin(
                Method::PUT,
                format!("/v1/pools/p/agents/{agent}"),
                Some(json!({"replicas": 1, "collaborators": collaborators})),
            )
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }
}

/// Hands a task of turn `turn_seq` to `agent`: the handoff.
async fn hand_over(
    api: &TestApi,
    thread: ThreadId,
    token: &str,
    epoch: u64,
    key: &str,
    agent: &str,
) -> Value {
    let (status, filed) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{thread}/handoffs"),
            Some(token),
            Some(
                json!({"epoch": epoch, "turn_seq": 1, "key": key, "call_id": format!("call-{key}"),
                        "agent": agent, "task": "sum 2 and 2", "timeout_secs": 3600}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{filed}");
    filed
}

/// A chain of waiting turns: `a`'s thread in turn 1 (message 1) waits on a person and on `b`;
/// `b`'s session thread, in the turn answering that task, waits on a person and on `c`.
/// Returns (a's thread and token, b's thread and token, c's thread, the two requests' IDs).
async fn chain(
    api: &TestApi,
) -> (
    ThreadId,
    String,
    ThreadId,
    String,
    ThreadId,
    [ApprovalId; 2],
) {
    agents(api).await;
    let a = ThreadId::new_v7();
    let a_token = api.runner_token(a).await;
    let a_epoch = claim_with(api, a, &a_token, None).await;
    send(api, a, json!({"content": "write the report"})).await;
    let ids = [ApprovalId::new_v7(), ApprovalId::new_v7()];
    commit(
        api,
        a,
        &a_token,
        a_epoch,
        0,
        state("waiting", 1, 1),
        json!({"approvals": [approval(ids[0], "ka", 1)]}),
    )
    .await;
    let to_b = hand_over(api, a, &a_token, a_epoch, "k1", "b").await;
    let b: ThreadId = to_b["target_thread_id"].as_str().unwrap().parse().unwrap();
    let b_token = api.token_of(b).await;
    let b_epoch = claim_with(api, b, &b_token, None).await;
    let task = &inbox(api, b).await[0];
    let mut b_state = state("waiting", 1, 1);
    b_state["handoff"] = task["handoff"].clone();
    commit(
        api,
        b,
        &b_token,
        b_epoch,
        0,
        b_state,
        json!({"approvals": [approval(ids[1], "kb", 1)]}),
    )
    .await;
    let to_c = hand_over(api, b, &b_token, b_epoch, "k2", "c").await;
    let c: ThreadId = to_c["target_thread_id"].as_str().unwrap().parse().unwrap();
    (a, a_token, b, b_token, c, ids)
}

/// Every handoff of pool `p`, by (caller's agent, status).
async fn handoffs(api: &TestApi) -> Vec<(String, String, Value)> {
    let (_, listed) = api.admin(Method::GET, "/v1/handoffs?pool=p", None).await;
    listed
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["from_agent"].as_str().unwrap().to_string(),
                h["status"].as_str().unwrap().to_string(),
                h["reply"].clone(),
            )
        })
        .collect()
}

async fn a_cancel_settles_the_turn_and_follows_its_handoffs(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (a, a_token, b, b_token, c, ids) = chain(&api).await;
    // a's turn waits on its person; b's runner waits on its inbox: both are woken.
    let approvals_poll = {
        let url = format!(
            "{}/v1/runners/threads/{a}/approvals?turn_seq=1&settled=0&wait=30",
            api.url
        );
        let (client, token) = (api.client.clone(), a_token.clone());
        tokio::spawn(async move {
            let resp = client.get(url).bearer_auth(token).send().await.unwrap();
            resp.json::<Vec<Value>>().await.unwrap()
        })
    };
    let inbox_poll = {
        let url = format!("{}/v1/runners/threads/{b}/inbox?after=1&wait=30", api.url);
        let (client, token) = (api.client.clone(), b_token.clone());
        tokio::spawn(async move {
            let resp = client.get(url).bearer_auth(token).send().await.unwrap();
            resp.json::<Vec<Value>>().await.unwrap()
        })
    };
    let (status, cancelled) = cancel(
        &api,
        a,
        json!({"by": "alice", "reason": "wrong report", "dedupe_key": "stop-1"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{cancelled}");
    assert_eq!(
        cancelled,
        json!({"seq": 2, "duplicate": false, "running": {"turn_seq": 1, "seq": 1},
               "approvals_cancelled": 2, "handoffs_cancelled": 2})
    );
    let woken = tokio::time::timeout(Duration::from_secs(20), approvals_poll)
        .await
        .expect("the cancel wakes the turn waiting on its person")
        .unwrap();
    assert_eq!(
        (
            &woken[0]["status"],
            &woken[0]["decided_by"],
            &woken[0]["reason"]
        ),
        (&json!("cancelled"), &json!("alice"), &json!("wrong report"))
    );
    let woken = tokio::time::timeout(Duration::from_secs(20), inbox_poll)
        .await
        .expect("the cancel wakes the collaborator's runner")
        .unwrap();
    assert_eq!(woken.len(), 1, "{woken:?}");
    // a's inbox holds the cancel, sent by alice, with the reason.
    let a_inbox = inbox(&api, a).await;
    assert_eq!(
        (
            &a_inbox[1]["seq"],
            &a_inbox[1]["control"],
            &a_inbox[1]["by"],
            &a_inbox[1]["content"],
            &a_inbox[1]["mode"]
        ),
        (
            &json!(2),
            &json!("cancel"),
            &json!("alice"),
            &json!("wrong report"),
            &json!("queue")
        )
    );
    // Each request to a person is cancelled, with its event on its thread.
    for (id, thread) in [(ids[0], a), (ids[1], b)] {
        let (_, request) = api
            .admin(Method::GET, format!("/v1/approvals/{id}"), None)
            .await;
        assert_eq!(request["status"], json!("cancelled"), "{request}");
        let (_, events) = api
            .admin(Method::GET, format!("/v1/threads/{thread}/events"), None)
            .await;
        assert!(
            events
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["type"] == json!("approval_decided")
                    && e["data"]["status"] == json!("cancelled")),
            "{events}"
        );
    }
    let (_, decided) = api
        .admin(
            Method::POST,
            format!("/v1/approvals/{}/decision", ids[0]),
            Some(json!({"decision": "approve"})),
        )
        .await;
    assert_eq!(
        decided["code"],
        json!("already_decided"),
        "nobody decides a cancelled request: {decided}"
    );
    // Both handoffs are cancelled; each collaborator got a cancel aimed at its task.
    assert_eq!(
        handoffs(&api).await,
        [
            ("a".into(), "cancelled".into(), Value::Null),
            ("b".into(), "cancelled".into(), Value::Null)
        ]
    );
    for (thread, by) in [(b, "alice (via a)"), (c, "alice (via b)")] {
        let messages = inbox(&api, thread).await;
        assert_eq!(messages.len(), 2, "{messages:?}");
        let (task, stop) = (&messages[0], &messages[1]);
        assert_eq!(
            (&stop["control"], &stop["by"], &stop["handoff"]),
            (&json!("cancel"), &json!(by), &task["handoff"]),
            "{thread}"
        );
        assert!(task["handoff"]["delivery_key"].is_string());
    }
    // The same cancel again (a retry): the first, nothing new.
    let (status, again) = cancel(
        &api,
        a,
        json!({"by": "alice", "reason": "wrong report", "dedupe_key": "stop-1"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(
        (
            &again["seq"],
            &again["duplicate"],
            &again["handoffs_cancelled"]
        ),
        (&json!(2), &json!(true), &json!(0))
    );
    for (thread, seq) in [(a, 2), (b, 2), (c, 2)] {
        let (_, summary) = api
            .admin(Method::GET, format!("/v1/threads/{thread}"), None)
            .await;
        assert_eq!(summary["inbox_seq"], json!(seq), "{thread}");
    }
    // The key names a cancel: a message under it is another payload.
    let (status, reused) = send(&api, a, json!({"content": "hello", "dedupe_key": "stop-1"})).await;
    assert_eq!(
        (status, &reused["code"]),
        (StatusCode::CONFLICT, &json!("key_reused"))
    );
    // b's runner ends its turn replying to the cancelled handoff: the commit stands, the reply
    // is not taken, the handoff stays cancelled.
    let b_epoch = claim_with(&api, b, &b_token, None).await;
    let mut done = state("idle", 1, 2);
    done["turn_message"] = json!(1);
    commit(
        &api,
        b,
        &b_token,
        b_epoch,
        1,
        done,
        json!({"handoff_reply": {"delivery_key": "handoff:k1", "ok": true, "text": "4", "cost_usd": 0.1}}),
    )
    .await;
    assert_eq!(handoffs(&api).await[0].1, "cancelled");
    assert_eq!(handoffs(&api).await[0].2, Value::Null);
    // Nothing to cancel on an unknown or purged thread.
    let (status, _) = cancel(&api, ThreadId::new_v7(), json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = api
        .admin(Method::DELETE, format!("/v1/threads/{c}"), None)
        .await;
    assert!(status.is_success());
    let (status, gone) = cancel(&api, c, json!({})).await;
    assert_eq!(
        (status, &gone["code"]),
        (StatusCode::GONE, &json!("purged"))
    );
    // Refused before anything is read: a `by` or `reason` too long, a bad key.
    for body in [
        json!({"by": ""}),
        json!({"by": "x".repeat(65)}),
        json!({"reason": "x".repeat(2001)}),
        json!({"dedupe_key": ""}),
    ] {
        let (status, err) = cancel(&api, a, body.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {err}");
    }
    api.stop().await;
}

async fn an_interrupt_of_a_waiting_turn_cancels_what_it_waits_for(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (a, _, b, _, c, ids) = chain(&api).await;
    let (status, sent) = send(
        &api,
        a,
        json!({"content": "forget it, do this instead", "mode": "interrupt"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{sent}");
    assert_eq!(
        (&sent["seq"], &sent["mode"], &sent["running"]),
        (
            &json!(2),
            &json!("interrupt"),
            &json!({"turn_seq": 1, "seq": 1})
        )
    );
    let (_, request) = api
        .admin(Method::GET, format!("/v1/approvals/{}", ids[0]), None)
        .await;
    assert_eq!(
        (&request["status"], &request["decided_by"]),
        (&json!("cancelled"), &json!("interrupt by message 2"))
    );
    let (_, request) = api
        .admin(Method::GET, format!("/v1/approvals/{}", ids[1]), None)
        .await;
    assert_eq!(request["status"], json!("cancelled"));
    assert!(
        handoffs(&api)
            .await
            .iter()
            .all(|(_, status, _)| status == "cancelled")
    );
    for thread in [b, c] {
        let messages = inbox(&api, thread).await;
        assert_eq!(messages[1]["control"], json!("cancel"), "{thread}");
    }
    // A steer settles nothing: the turn goes on.
    let (_, steer) = send(&api, b, json!({"content": "hurry", "mode": "steer"})).await;
    assert_eq!(steer["mode"], json!("steer"));
    api.stop().await;
}

/// The web console cancels as `console` (with its header, like its other writes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_cancels_as_console() {
    let api = TestApi::start(Backend::Sqlite).await.unwrap();
    let thread = ThreadId::new_v7();
    send(&api, thread, json!({"content": "hello"})).await;
    let resp = api
        .client
        .post(format!("{}/console/session", api.url))
        .json(&json!({"token": ADMIN}))
        .send()
        .await
        .unwrap();
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    let cookie = set.split(';').next().unwrap().to_string();
    let post = |header: bool| {
        let mut req = api
            .client
            .post(format!("{}/v1/threads/{thread}/cancel", api.url))
            .header("cookie", cookie.clone())
            .json(&json!({}));
        if header {
            req = req.header("x-ninetrix-console", "1");
        }
        req.send()
    };
    assert_eq!(post(false).await.unwrap().status(), StatusCode::FORBIDDEN);
    let resp = post(true).await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["running"], json!({"turn_seq": 1, "seq": 1}));
    let (_, by_admin) = cancel(&api, thread, json!({})).await;
    let messages = inbox(&api, thread).await;
    assert_eq!(
        (&messages[1]["by"], &messages[2]["by"], &by_admin["seq"]),
        (&json!("console"), &json!("admin"), &json!(3))
    );
    api.stop().await;
}

both_backends!(
    a_message_takes_the_senders_mode_else_the_agents_else_queue,
    a_reject_is_refused_while_a_turn_runs_and_queued_otherwise,
    a_cancel_settles_the_turn_and_follows_its_handoffs,
    an_interrupt_of_a_waiting_turn_cancels_what_it_waits_for,
);
