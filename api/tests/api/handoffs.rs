//! Handoffs between agents: a call's task is filed once in a session of the collaborator that is
//! its own (the same call again re-attaches), only to the caller agent's collaborators, fenced by
//! the caller's epoch; the collaborator's final commit stores the reply and wakes the caller's
//! long-poll; no reply by the deadline reads `timed_out`, and stays so.

use std::time::Duration;

use ninetrix_proto::ThreadId;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Backend, TestApi, both_backends, checkpoint, message};

/// Records pool `p`'s agents as `up` does: `a` may hand work to `b`; `b` to nobody.
async fn agents(api: &TestApi) {
    for (agent, collaborators) in [("a", json!(["b"])), ("b", json!([]))] {
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

/// A claimed thread of agent `a` (pool `p`): (thread, token, epoch).
async fn caller(api: &TestApi) -> (ThreadId, String, u64) {
    let thread = ThreadId::new_v7();
    let token = api.runner_token(thread).await;
    let epoch = api.claim(thread, &token).await;
    (thread, token, epoch)
}

fn request(epoch: u64, key: &str, agent: &str, timeout_secs: u64) -> Value {
    json!({"epoch": epoch, "turn_seq": 1, "key": key, "call_id": format!("call-{key}"), "agent": agent,
           "task": "sum 2 and 2", "context": "for the report", "timeout_secs": timeout_secs,
           "budget_usd": 0.5})
}

async fn hand_over(
    api: &TestApi,
    thread: ThreadId,
    token: &str,
    body: Value,
) -> (StatusCode, Value) {
    api.call(
        Method::POST,
        format!("/v1/runners/threads/{thread}/handoffs"),
        Some(token),
        Some(body),
    )
    .await
}

/// Claims the collaborator's session thread (with a runner token minted for it) and commits its
/// turn's end with `reply`.
async fn reply(
    api: &TestApi,
    target: &str,
    delivery_key: &str,
    text: &str,
    ok: bool,
) -> (StatusCode, Value) {
    let target: ThreadId = target.parse().unwrap();
    let token = api.token_of(target).await;
    let epoch = api.claim(target, &token).await;
    let mut body = checkpoint(
        epoch,
        0,
        None,
        vec![message("user", "task"), message("assistant", text)],
        2,
    );
    body["state"]["status"] = "idle".into();
    body["state"]["inbox_cursor"] = 1.into();
    body["handoff_reply"] =
        json!({"delivery_key": delivery_key, "ok": ok, "text": text, "cost_usd": 0.25});
    api.call(
        Method::POST,
        format!("/v1/runners/threads/{target}/commit"),
        Some(&token),
        Some(body),
    )
    .await
}

async fn turn(api: &TestApi, thread: ThreadId, token: &str, query: &str) -> Vec<Value> {
    let (status, body) = api
        .call(
            Method::GET,
            format!("/v1/runners/threads/{thread}/handoffs?turn_seq=1{query}"),
            Some(token),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array().unwrap().clone()
}

async fn a_handoff_is_filed_once_in_a_session_of_its_own(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    agents(&api).await;
    let (thread, token, epoch) = caller(&api).await;
    let (status, filed) = hand_over(&api, thread, &token, request(epoch, "k1", "b", 300)).await;
    assert_eq!(status, StatusCode::CREATED, "{filed}");
    assert_eq!(
        filed["chain"],
        json!(["a"]),
        "the caller's agent ends the chain"
    );
    assert_eq!(
        (
            &filed["status"],
            &filed["delivery_key"],
            &filed["agent"],
            &filed["from_agent"],
            &filed["epoch"]
        ),
        (
            &json!("pending"),
            &json!("handoff:k1"),
            &json!("b"),
            &json!("a"),
            &json!(epoch)
        )
    );
    assert_eq!(filed["session"], json!(format!("handoff:{thread}:k1")));
    // The same call again (a restarted caller): the same handoff, no second task.
    let (status, again) = hand_over(&api, thread, &token, request(epoch, "k1", "b", 300)).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again, filed);
    // The task is in the session's inbox once, with where it came from.
    let target = filed["target_thread_id"].as_str().unwrap();
    let (status, summary) = api
        .admin(Method::GET, format!("/v1/threads/{target}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (
            &summary["pool"],
            &summary["agent"],
            &summary["session"],
            &summary["inbox_seq"]
        ),
        (&json!("p"), &json!("b"), &filed["session"], &json!(1))
    );
    let target_id: ThreadId = target.parse().unwrap();
    let target_token = api.token_of(target_id).await;
    let (status, inbox) = api
        .call(
            Method::GET,
            format!("/v1/runners/threads/{target}/inbox?after=0"),
            Some(&target_token),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{inbox}");
    let inbox = inbox.as_array().unwrap();
    assert_eq!(inbox.len(), 1);
    assert_eq!(
        inbox[0]["content"],
        json!("Task from agent `a`:\nsum 2 and 2\n\nContext:\nfor the report")
    );
    assert_eq!(inbox[0]["dedupe_key"], json!("handoff:k1"));
    assert_eq!(
        inbox[0]["handoff"],
        json!({"delivery_key": "handoff:k1", "from_agent": "a", "from_thread": thread, "chain": ["a"], "budget_usd": 0.5})
    );
    // Another call is another session.
    let (_, other) = hand_over(&api, thread, &token, request(epoch, "k2", "b", 300)).await;
    assert_ne!(other["target_thread_id"], filed["target_thread_id"]);
    assert_eq!(turn(&api, thread, &token, "").await.len(), 2);
    // The admin lists them, by caller or by target.
    let (_, by_target) = api
        .admin(
            Method::GET,
            format!("/v1/handoffs?target_thread_id={target}"),
            None,
        )
        .await;
    assert_eq!(by_target.as_array().unwrap(), &vec![filed.clone()]);
    let (_, by_caller) = api
        .admin(
            Method::GET,
            format!("/v1/handoffs?thread_id={thread}&pool=p"),
            None,
        )
        .await;
    assert_eq!(by_caller.as_array().unwrap().len(), 2);
    api.stop().await;
}

async fn the_reply_wakes_the_caller_and_the_first_one_stands(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    agents(&api).await;
    let (thread, token, epoch) = caller(&api).await;
    let (_, filed) = hand_over(&api, thread, &token, request(epoch, "k1", "b", 300)).await;
    let url = format!(
        "{}/v1/runners/threads/{thread}/handoffs?turn_seq=1&settled=0&wait=30",
        api.url
    );
    let poll = {
        let client = api.client.clone();
        let token = token.clone();
        tokio::spawn(async move {
            let resp = client.get(url).bearer_auth(token).send().await.unwrap();
            resp.json::<Vec<Value>>().await.unwrap()
        })
    };
    let target = filed["target_thread_id"].as_str().unwrap();
    let (status, body) = reply(&api, target, "handoff:k1", "4", true).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let woken = tokio::time::timeout(Duration::from_secs(20), poll)
        .await
        .expect("the reply wakes the caller")
        .unwrap();
    assert_eq!(
        (
            &woken[0]["status"],
            &woken[0]["reply"],
            &woken[0]["cost_usd"]
        ),
        (&json!("replied"), &json!("4"), &json!(0.25))
    );
    assert!(woken[0]["replied_at"].is_string());
    // A stale or confused second reply changes nothing.
    let target_id: ThreadId = target.parse().unwrap();
    let token2 = api.token_of(target_id).await;
    let epoch2 = api.claim(target_id, &token2).await;
    let mut body = checkpoint(epoch2, 1, None, vec![message("user", "again")], 3);
    body["state"]["status"] = "idle".into();
    body["handoff_reply"] =
        json!({"delivery_key": "handoff:k1", "ok": false, "text": "other", "cost_usd": 1.0});
    let (status, _) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{target}/commit"),
            Some(&token2),
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let now = turn(&api, thread, &token, "").await;
    assert_eq!(
        (&now[0]["status"], &now[0]["reply"]),
        (&json!("replied"), &json!("4"))
    );
    // A reply that names no handoff of the thread is refused, with nothing written.
    let mut body = checkpoint(epoch2, 2, None, vec![message("user", "x")], 4);
    body["handoff_reply"] =
        json!({"delivery_key": "handoff:nope", "ok": true, "text": "x", "cost_usd": 0.0});
    let (status, err) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{target}/commit"),
            Some(&token2),
            Some(body),
        )
        .await;
    assert_eq!(
        (status, &err["code"]),
        (StatusCode::NOT_FOUND, &json!("not_found")),
        "{err}"
    );
    let (_, summary) = api
        .admin(Method::GET, format!("/v1/threads/{target}"), None)
        .await;
    assert_eq!(
        summary["version"],
        json!(2),
        "the refused commit wrote nothing"
    );
    api.stop().await;
}

async fn a_failed_turn_fails_the_call(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    agents(&api).await;
    let (thread, token, epoch) = caller(&api).await;
    let (_, filed) = hand_over(&api, thread, &token, request(epoch, "k1", "b", 300)).await;
    let (status, _) = reply(
        &api,
        filed["target_thread_id"].as_str().unwrap(),
        "handoff:k1",
        "Stopped after 3 model rounds",
        false,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let now = turn(&api, thread, &token, "").await;
    assert_eq!(
        (&now[0]["status"], &now[0]["reply"]),
        (&json!("failed"), &json!("Stopped after 3 model rounds"))
    );
    api.stop().await;
}

async fn no_reply_by_the_deadline_times_out_and_a_late_one_does_not_count(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    agents(&api).await;
    let (thread, token, epoch) = caller(&api).await;
    let (_, filed) = hand_over(&api, thread, &token, request(epoch, "k1", "b", 1)).await;
    // The long-poll wakes at the deadline by itself.
    let woken = tokio::time::timeout(
        Duration::from_secs(20),
        turn(&api, thread, &token, "&settled=0&wait=30"),
    )
    .await
    .expect("the deadline wakes the poll");
    assert_eq!(woken[0]["status"], json!("timed_out"));
    let (status, _) = reply(
        &api,
        filed["target_thread_id"].as_str().unwrap(),
        "handoff:k1",
        "late",
        true,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the collaborator's commit still stands"
    );
    let now = turn(&api, thread, &token, "").await;
    assert_eq!(
        (&now[0]["status"], &now[0]["reply"]),
        (&json!("timed_out"), &json!("late"))
    );
    api.stop().await;
}

async fn only_collaborators_and_only_the_current_epoch(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    agents(&api).await;
    let (thread, token, epoch) = caller(&api).await;
    // Not one of a's collaborators, or not an agent of the pool at all.
    for agent in ["a", "c"] {
        let (status, err) = hand_over(&api, thread, &token, request(epoch, "k1", agent, 60)).await;
        assert_eq!(
            (status, &err["code"]),
            (StatusCode::FORBIDDEN, &json!("not_collaborator")),
            "{err}"
        );
        assert!(
            err["message"]
                .as_str()
                .unwrap()
                .contains(&format!("`{agent}`")),
            "{err}"
        );
    }
    // `up` recorded new collaborators: now allowed.
    let (status, _) = api
        .admin(
            Method::PUT,
            "/v1/pools/p/agents/c",
            Some(json!({"replicas": 2})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    api.admin(
        Method::PUT,
        "/v1/pools/p/agents/a",
        Some(json!({"replicas": 1, "collaborators": ["b", "c"]})),
    )
    .await;
    let (status, _) = hand_over(&api, thread, &token, request(epoch, "k1", "c", 60)).await;
    assert_eq!(status, StatusCode::CREATED);
    // Malformed: an empty name on the way, a key with `:`, no time to wait.
    let mut bad = request(epoch, "k2", "b", 60);
    bad["via"] = json!([""]);
    for (body, code) in [
        (bad, "invalid_body"),
        (request(epoch, "k:2", "b", 60), "invalid_key"),
        (request(epoch, "k3", "b", 0), "out_of_range"),
    ] {
        let (status, err) = hand_over(&api, thread, &token, body).await;
        assert_eq!(
            (status, &err["code"]),
            (StatusCode::UNPROCESSABLE_ENTITY, &json!(code)),
            "{err}"
        );
    }
    // A stale copy of the caller is fenced, even for a call it filed itself.
    let newer = api.claim(thread, &token).await;
    assert!(newer > epoch);
    let (status, err) = hand_over(&api, thread, &token, request(epoch, "k1", "c", 60)).await;
    assert_eq!(
        (status, &err["code"]),
        (StatusCode::CONFLICT, &json!("fenced")),
        "{err}"
    );
    // Purge takes the thread's handoffs with it.
    let (status, _) = api
        .admin(Method::DELETE, format!("/v1/threads/{thread}"), None)
        .await;
    assert!(status.is_success());
    let (_, left) = api
        .admin(
            Method::GET,
            format!("/v1/handoffs?thread_id={thread}"),
            None,
        )
        .await;
    assert_eq!(left, json!([]));
    api.stop().await;
}

/// Issue 33: a runner of another pool posed as pool `p`'s agent `a` by claiming with its labels,
/// then handed tasks to `a`'s collaborator and read the replies. Labels are fixed and the rule
/// reads the token's: the claim is refused, and the handoff stays forbidden.
async fn a_runner_cannot_pose_as_another_pools_agent(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    agents(&api).await;
    let thread = ThreadId::new_v7();
    let (status, minted) = api
        .mint(thread, json!({"pool": "q", "agent": "x", "replica": 1}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{minted}");
    let token = minted["token"].as_str().unwrap().to_string();
    let epoch = api.claim(thread, &token).await;
    let (status, err) = hand_over(&api, thread, &token, request(epoch, "k1", "b", 60)).await;
    assert_eq!(
        (status, &err["code"]),
        (StatusCode::FORBIDDEN, &json!("not_collaborator")),
        "{err}"
    );
    let (status, err) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{thread}/claim"),
            Some(&token),
            Some(json!({"pool": "p", "agent": "a", "replica": 1})),
        )
        .await;
    assert_eq!(
        (status, &err["code"]),
        (StatusCode::CONFLICT, &json!("labels_fixed")),
        "{err}"
    );
    assert!(
        err["message"].as_str().unwrap().contains("\"q\""),
        "the refusal names the thread's own pool: {err}"
    );
    let epoch = api.claim(thread, &token).await;
    let (status, err) = hand_over(&api, thread, &token, request(epoch, "k2", "b", 60)).await;
    assert_eq!(
        (status, &err["code"]),
        (StatusCode::FORBIDDEN, &json!("not_collaborator")),
        "{err}"
    );
    let (_, summary) = api
        .admin(Method::GET, format!("/v1/threads/{thread}"), None)
        .await;
    assert_eq!(
        (&summary["pool"], &summary["agent"]),
        (&json!("q"), &json!("x"))
    );
    let (_, sessions) = api
        .admin(Method::GET, "/v1/sessions?pool=p&agent=b", None)
        .await;
    assert_eq!(sessions, json!([]), "no task reached b");
    api.stop().await;
}

both_backends!(
    a_runner_cannot_pose_as_another_pools_agent,
    a_handoff_is_filed_once_in_a_session_of_its_own,
    the_reply_wakes_the_caller_and_the_first_one_stands,
    a_failed_turn_fails_the_call,
    no_reply_by_the_deadline_times_out_and_a_late_one_does_not_count,
    only_collaborators_and_only_the_current_epoch,
);
