//! Requests to people: stored with a commit, listed, decided once, expired by the clock, waited
//! for by the runner's long-poll, and seen only by the callers allowed to.

use std::time::Duration;

use ninetrix_proto::{ApprovalId, ThreadId};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Backend, TestApi, both_backends, checkpoint, message};

/// A thread of pool `p` whose first commit stores the given requests (each `(key, kind,
/// timeout_secs)`); returns the thread, its runner token, the epoch and the requests' IDs.
async fn waiting_thread(
    api: &TestApi,
    requests: &[(&str, &str, u64)],
) -> (ThreadId, String, u64, Vec<ApprovalId>) {
    let thread = ThreadId::new_v7();
    let token = api.runner_token(thread).await;
    let epoch = api.claim(thread, &token).await;
    let ids: Vec<ApprovalId> = requests.iter().map(|_| ApprovalId::new_v7()).collect();
    let mut body = checkpoint(epoch, 0, None, vec![message("user", "q")], 1);
    body["state"]["status"] = "waiting".into();
    body["approvals"] = requests
        .iter()
        .zip(&ids)
        .map(|((key, kind, timeout), id)| {
            json!({"id": id, "key": key, "call_id": format!("call-{key}"), "turn_seq": 1, "kind": kind,
                   "tool": if *kind == "question" { "ask_human" } else { "file_write" },
                   "args": {"path": "out.txt", "api_key": "***"}, "args_hash": "ab12", "timeout_secs": timeout})
        })
        .collect();
    let (status, answer) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{thread}/commit"),
            Some(&token),
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    (thread, token, epoch, ids)
}

async fn decide(api: &TestApi, token: &str, id: ApprovalId, body: Value) -> (StatusCode, Value) {
    api.call(
        Method::POST,
        format!("/v1/approvals/{id}/decision"),
        Some(token),
        Some(body),
    )
    .await
}

async fn turn(api: &TestApi, thread: ThreadId, token: &str, query: &str) -> Vec<Value> {
    let (status, body) = api
        .call(
            Method::GET,
            format!("/v1/runners/threads/{thread}/approvals?turn_seq=1{query}"),
            Some(token),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array().unwrap().clone()
}

async fn decided_once(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let admin = crate::support::ADMIN;
    let (thread, token, epoch, ids) =
        waiting_thread(&api, &[("k1", "approval", 3600), ("k2", "question", 3600)]).await;
    let stored = turn(&api, thread, &token, "").await;
    assert_eq!(stored.len(), 2);
    let first = &stored[0];
    assert_eq!(first["id"], json!(ids[0]));
    assert_eq!(
        (
            &first["status"],
            &first["pool"],
            &first["agent"],
            &first["epoch"]
        ),
        (&json!("pending"), &json!("p"), &json!("a"), &json!(epoch))
    );
    assert_eq!(
        first["args"]["api_key"], "***",
        "stored as the runner masked it"
    );
    // Listed as pending.
    let (_, listed) = api.admin(Method::GET, "/v1/approvals?pool=p", None).await;
    let listed: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["thread_id"] == json!(thread))
        .collect();
    assert_eq!(listed.len(), 2);

    // Approve: recorded, with an event on the thread.
    let (status, approved) = decide(
        &api,
        admin,
        ids[0],
        json!({"decision": "approve", "by": "alice"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(
        (&approved["status"], &approved["decided_by"]),
        (&json!("approved"), &json!("alice"))
    );
    // The same decision again changes nothing.
    let (status, again) = decide(
        &api,
        admin,
        ids[0],
        json!({"decision": "approve", "by": "bob"}),
    )
    .await;
    assert_eq!(
        (status, &again["decided_by"]),
        (StatusCode::OK, &json!("alice"))
    );
    // A different one is 409 with the decision that stands.
    let (status, conflict) = decide(
        &api,
        admin,
        ids[0],
        json!({"decision": "reject", "reason": "too risky"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(conflict["code"], "already_decided");
    assert_eq!(conflict["approval"]["status"], "approved");
    assert!(
        conflict["message"].as_str().unwrap().contains("alice"),
        "{conflict}"
    );

    // A question is answered, not approved; a rejection needs a reason.
    let (status, wrong) = decide(&api, admin, ids[1], json!({"decision": "approve"})).await;
    assert_eq!(
        (status, &wrong["code"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("invalid_decision"))
    );
    let (status, wrong) = decide(&api, admin, ids[1], json!({"decision": "reject"})).await;
    assert_eq!(
        (status, &wrong["code"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("invalid_decision"))
    );
    let (status, answered) = decide(
        &api,
        admin,
        ids[1],
        json!({"decision": "answer", "answer": "blue"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answered}");
    assert_eq!(
        (&answered["status"], &answered["answer"]),
        (&json!("answered"), &json!("blue"))
    );
    // Another answer is a different decision.
    let (status, _) = decide(
        &api,
        admin,
        ids[1],
        json!({"decision": "answer", "answer": "red"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);

    // The decisions are on the thread's trace, once each.
    let (_, events) = api
        .admin(Method::GET, format!("/v1/threads/{thread}/events"), None)
        .await;
    let decided: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "approval_decided")
        .collect();
    assert_eq!(decided.len(), 2, "{events}");
    assert_eq!(decided[0]["data"]["by"], "alice");
    assert_eq!(decided[0]["epoch"], json!(epoch));
    // Nothing is pending any more.
    let (_, pending) = api
        .admin(
            Method::GET,
            format!("/v1/approvals?thread_id={thread}"),
            None,
        )
        .await;
    assert_eq!(pending, json!([]));
    api.stop().await;
}

async fn expiry_counts_as_rejection_and_is_recorded_once(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, _, ids) = waiting_thread(&api, &[("k1", "approval", 1)]).await;
    // Poll (with a deadline) until the clock has passed the expiry.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let stored = turn(&api, thread, &token, "").await;
        if stored[0]["status"] == "expired" {
            assert!(stored[0]["decided_at"].is_string());
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never expired: {stored:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, pending) = api
        .admin(
            Method::GET,
            format!("/v1/approvals?thread_id={thread}"),
            None,
        )
        .await;
    assert_eq!(pending, json!([]), "an expired request is not pending");
    let (_, expired) = api
        .admin(
            Method::GET,
            format!("/v1/approvals?thread_id={thread}&status=expired"),
            None,
        )
        .await;
    assert_eq!(expired.as_array().unwrap().len(), 1);
    let (status, late) = decide(
        &api,
        crate::support::ADMIN,
        ids[0],
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(
        (status, &late["code"], &late["approval"]["status"]),
        (
            StatusCode::CONFLICT,
            &json!("approval_expired"),
            &json!("expired")
        )
    );
    api.stop().await;
}

async fn the_long_poll_wakes_on_a_decision(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, _, ids) =
        waiting_thread(&api, &[("k1", "approval", 3600), ("k2", "approval", 3600)]).await;
    // Nothing settled yet: a poll that knows that waits.
    let url = format!(
        "{}/v1/runners/threads/{thread}/approvals?turn_seq=1&settled=0&wait=30",
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
    let (status, _) = decide(
        &api,
        crate::support::ADMIN,
        ids[1],
        json!({"decision": "reject", "reason": "no"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let woken = tokio::time::timeout(Duration::from_secs(20), poll)
        .await
        .expect("the decision wakes the poll")
        .unwrap();
    let statuses: Vec<&Value> = woken.iter().map(|a| &a["status"]).collect();
    assert_eq!(statuses, [&json!("pending"), &json!("rejected")]);
    // A poll that already knows one settled returns at once when none is pending.
    decide(
        &api,
        crate::support::ADMIN,
        ids[0],
        json!({"decision": "approve"}),
    )
    .await;
    let all = turn(&api, thread, &token, "&settled=1&wait=30").await;
    assert!(all.iter().all(|a| a["status"] != "pending"));
    api.stop().await;
}

async fn approver_tokens_see_and_decide_their_pool_only(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, _, ids) =
        waiting_thread(&api, &[("k1", "approval", 3600), ("k2", "approval", 3600)]).await;
    let mint = |pool: &str| {
        api.admin(
            Method::POST,
            "/v1/tokens/approver",
            Some(json!({"pool": pool, "name": "carol", "ttl_secs": 600})),
        )
    };
    let (status, ours) = mint("p").await;
    assert_eq!(status, StatusCode::CREATED, "{ours}");
    let ours = ours["token"].as_str().unwrap().to_string();
    let (_, theirs) = mint("q").await;
    let theirs = theirs["token"].as_str().unwrap().to_string();

    // Another pool's approver: the request is absent, its pool forbidden.
    let (status, _) = api
        .call(
            Method::GET,
            format!("/v1/approvals/{}", ids[0]),
            Some(&theirs),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = decide(&api, &theirs, ids[0], json!({"decision": "approve"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = api
        .call(Method::GET, "/v1/approvals?pool=p", Some(&theirs), None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, seen) = api
        .call(Method::GET, "/v1/approvals", Some(&theirs), None)
        .await;
    assert!(
        !seen
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["thread_id"] == json!(thread))
    );

    // The runner of the thread never decides.
    let (status, _) = decide(&api, &token, ids[0], json!({"decision": "approve"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Our approver decides, recorded by its own name; it cannot claim another.
    let (status, body) = decide(
        &api,
        &ours,
        ids[0],
        json!({"decision": "approve", "by": "mallory"}),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("invalid_decision"))
    );
    let (status, body) = decide(&api, &ours, ids[0], json!({"decision": "approve"})).await;
    assert_eq!(
        (status, &body["decided_by"]),
        (StatusCode::OK, &json!("carol"))
    );
    // It may not touch anything else.
    let (status, _) = api
        .call(
            Method::GET,
            format!("/v1/threads/{thread}/events"),
            Some(&ours),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // A bad ttl is refused.
    let (status, _) = api
        .admin(
            Method::POST,
            "/v1/tokens/approver",
            Some(json!({"pool": "p", "name": "x", "ttl_secs": 5})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    api.stop().await;
}

async fn a_call_keeps_its_first_request_and_purge_removes_them(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, epoch, ids) = waiting_thread(&api, &[("k1", "approval", 3600)]).await;
    // A later commit asking again for the same call (a new ID) keeps the first request.
    let mut body = checkpoint(epoch, 1, None, vec![message("assistant", "a")], 2);
    body["approvals"] = json!([{"id": ApprovalId::new_v7(), "key": "k1", "call_id": "call-k1", "turn_seq": 1,
        "kind": "approval", "tool": "file_write", "args": {}, "args_hash": "cd", "timeout_secs": 60}]);
    let (status, answer) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{thread}/commit"),
            Some(&token),
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let stored = turn(&api, thread, &token, "").await;
    assert_eq!(
        (stored.len(), &stored[0]["id"], &stored[0]["args_hash"]),
        (1, &json!(ids[0]), &json!("ab12"))
    );
    // A request with a bad timeout is refused with the commit.
    let mut body = checkpoint(epoch, 2, None, vec![], 2);
    body["approvals"] = json!([{"id": ApprovalId::new_v7(), "key": "k9", "call_id": "c", "turn_seq": 1,
        "kind": "approval", "tool": "t", "args": {}, "args_hash": "cd", "timeout_secs": 0}]);
    let (status, _) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{thread}/commit"),
            Some(&token),
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = api
        .admin(Method::DELETE, format!("/v1/threads/{thread}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = api
        .admin(Method::GET, format!("/v1/approvals/{}", ids[0]), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "purged with its thread");
    api.stop().await;
}

both_backends!(
    decided_once,
    expiry_counts_as_rejection_and_is_recorded_once,
    the_long_poll_wakes_on_a_decision,
    approver_tokens_see_and_decide_their_pool_only,
    a_call_keeps_its_first_request_and_purge_removes_them,
);
