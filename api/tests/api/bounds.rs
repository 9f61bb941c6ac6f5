//! Issue 33's bounds and leftovers: a commit's lists have a documented limit (`422 too_many`
//! naming the field); a purged thread's turn reads and deltas answer `410 purged`; a second
//! rejection with another reason, an approval ID of another request and a negative handoff cost
//! are refused; a handoff whose collaborator's session was purged is `410`; a delta's text is
//! limited in characters, as its schema says.

use ninetrix_proto::ThreadId;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Backend, TestApi, both_backends, checkpoint, claimed, message};

/// A first commit of `epoch` with `lists` added (`intents`, `outcomes`, `approvals`, `append`).
fn commit(epoch: u64, lists: Value) -> Value {
    let mut body = checkpoint(epoch, 0, None, vec![], 0);
    for (k, v) in lists.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn intent(i: usize) -> Value {
    json!({"key": format!("k{i}"), "turn_seq": 1, "tool": "t", "args": {}, "effect": "read"})
}

fn approval(id: &str, key: &str) -> Value {
    json!({"id": id, "key": key, "call_id": format!("c-{key}"), "turn_seq": 1, "kind": "approval",
           "tool": "t", "args": {}, "args_hash": "h", "timeout_secs": 600})
}

async fn post_commit(
    api: &TestApi,
    thread: ThreadId,
    token: &str,
    body: Value,
) -> (StatusCode, Value) {
    api.call(
        Method::POST,
        format!("/v1/runners/threads/{thread}/commit"),
        Some(token),
        Some(body),
    )
    .await
}

async fn each_list_of_a_commit_has_a_limit(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let over = 1001;
    let lists = [
        ("intents", json!((0..over).map(intent).collect::<Vec<_>>())),
        (
            "outcomes",
            json!(
                (0..over)
                    .map(|i| json!({"key": format!("k{i}"), "ok": true, "result": "r"}))
                    .collect::<Vec<_>>()
            ),
        ),
        (
            "approvals",
            json!(
                (0..over)
                    .map(|i| approval(&uuid_like(i), &format!("a{i}")))
                    .collect::<Vec<_>>()
            ),
        ),
        (
            "append",
            json!(
                (0..over)
                    .map(|i| message("user", &format!("m{i}")))
                    .collect::<Vec<_>>()
            ),
        ),
    ];
    for (field, items) in lists {
        let (thread, token, epoch) = claimed(&api).await;
        let (status, body) =
            post_commit(&api, thread, &token, commit(epoch, json!({field: items}))).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {body}");
        assert_eq!(body["code"], "too_many", "{body}");
        let text = body["message"].as_str().unwrap();
        assert!(
            text.contains(&format!("`{field}`")) && text.contains("1000"),
            "{text}"
        );
        // Nothing was written.
        let (status, _) = api
            .admin(
                Method::GET,
                format!("/v1/threads/{thread}/checkpoints/1"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    // At the limit, it is taken.
    let (thread, token, epoch) = claimed(&api).await;
    let at = json!((0..1000).map(intent).collect::<Vec<_>>());
    let (status, body) =
        post_commit(&api, thread, &token, commit(epoch, json!({"intents": at}))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["records"].as_array().unwrap().len(), 1000);
    // The checkpoint route's `append` too.
    let (thread, token, epoch) = claimed(&api).await;
    let append = (0..over)
        .map(|i| message("user", &format!("m{i}")))
        .collect();
    let (status, body) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{thread}/checkpoints"),
            Some(&token),
            Some(checkpoint(epoch, 0, None, append, 0)),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("too_many")),
        "{body}"
    );
    api.stop().await;
}

/// A UUID for approval `i`.
fn uuid_like(i: usize) -> String {
    format!("00000000-0000-7000-8000-{i:012}")
}

async fn a_purged_threads_turn_reads_and_deltas_are_410(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, epoch) = claimed(&api).await;
    for what in ["approvals", "handoffs", "tool-calls"] {
        let (status, body) = api
            .call(
                Method::GET,
                format!("/v1/runners/threads/{thread}/{what}?turn_seq=1"),
                Some(&token),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{what} before the purge: {body}");
    }
    let (status, _) = api
        .admin(Method::DELETE, format!("/v1/threads/{thread}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for what in ["approvals", "handoffs", "tool-calls"] {
        for token in [Some(token.as_str()), Some(crate::support::ADMIN)] {
            let (status, body) = api
                .call(
                    Method::GET,
                    format!("/v1/runners/threads/{thread}/{what}?turn_seq=1"),
                    token,
                    None,
                )
                .await;
            assert_eq!(
                (status, body["code"].as_str()),
                (StatusCode::GONE, Some("purged")),
                "{what}: {body}"
            );
        }
    }
    let delta = json!({"epoch": epoch, "turn_seq": 1, "round": 1, "offset": 0, "text": "x"});
    let (status, body) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{thread}/deltas"),
            Some(&token),
            Some(delta),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::GONE, Some("purged")),
        "{body}"
    );
    api.stop().await;
}

async fn decisions_and_approval_ids_are_not_dropped_silently(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, epoch) = claimed(&api).await;
    let id = ThreadId::new_v7().to_string();
    let (status, body) = post_commit(
        &api,
        thread,
        &token,
        commit(epoch, json!({"approvals": [approval(&id, "k1")]})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let decide = |reason: &'static str| {
        let api = &api;
        let id = id.clone();
        async move {
            api.admin(
                Method::POST,
                format!("/v1/approvals/{id}/decision"),
                Some(json!({"decision": "reject", "reason": reason})),
            )
            .await
        }
    };
    assert_eq!(decide("too risky").await.0, StatusCode::OK);
    assert_eq!(
        decide("too risky").await.0,
        StatusCode::OK,
        "the same decision repeats"
    );
    let (status, body) = decide("another reason").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("already_decided")),
        "{body}"
    );
    assert_eq!(
        body["approval"]["reason"], "too risky",
        "the first decision stands"
    );

    // Another thread's commit with the same approval ID: refused, nothing written.
    let (other, other_token, other_epoch) = claimed(&api).await;
    let (status, body) = post_commit(
        &api,
        other,
        &other_token,
        commit(other_epoch, json!({"approvals": [approval(&id, "k2")]})),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("key_reused")),
        "{body}"
    );
    assert!(body["message"].as_str().unwrap().contains(&id));
    let (status, _) = api
        .admin(
            Method::GET,
            format!("/v1/threads/{other}/checkpoints/1"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing written");
    // The same thread repeating its own request (same ID, same key) is fine.
    let (status, body) = post_commit(&api, thread, &token, {
        let mut b = commit(epoch, json!({"approvals": [approval(&id, "k1")]}));
        b["parent_version"] = 1.into();
        b
    })
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    api.stop().await;
}

async fn handoff_costs_and_purged_targets(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    for (agent, collaborators) in [("asker", json!(["doer"])), ("doer", json!([]))] {
        let (status, _) = api
            .admin(
                Method::PUT,
                format!("/v1/pools/p/agents/{agent}"),
                Some(json!({"replicas": 1, "collaborators": collaborators})),
            )
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
    }
    let caller = ThreadId::new_v7();
    let (status, body) = api
        .admin(
            Method::POST,
            "/v1/tokens/runner",
            Some(json!({"thread_id": caller, "pool": "p", "agent": "asker"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let token = body["token"].as_str().unwrap().to_string();
    let epoch = api.claim(caller, &token).await;
    let ask = json!({"epoch": epoch, "turn_seq": 1, "key": "h1", "call_id": "c1", "agent": "doer", "task": "do it", "via": [], "timeout_secs": 600});
    let (status, handoff) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{caller}/handoffs"),
            Some(&token),
            Some(ask.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{handoff}");
    let target: ThreadId = handoff["target_thread_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let (_, minted) = api
        .admin(
            Method::POST,
            "/v1/tokens/runner",
            Some(json!({"thread_id": target})),
        )
        .await;
    let target_token = minted["token"].as_str().unwrap().to_string();
    let target_epoch = api.claim(target, &target_token).await;
    for cost in [-5.0, -0.000_001] {
        let mut body = commit(target_epoch, json!({}));
        body["handoff_reply"] = json!({"delivery_key": handoff["delivery_key"], "ok": true, "text": "done", "cost_usd": cost});
        let (status, answer) = post_commit(&api, target, &target_token, body).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("out_of_range")),
            "{answer}"
        );
        assert!(answer["message"].as_str().unwrap().contains("cost_usd"));
    }
    // The same call again re-attaches while the target lives; once it is purged, 410.
    let (status, _) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{caller}/handoffs"),
            Some(&token),
            Some(ask.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = api
        .admin(Method::DELETE, format!("/v1/threads/{target}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{caller}/handoffs"),
            Some(&token),
            Some(ask),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::GONE, Some("purged")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains(&target.to_string()),
        "{body}"
    );
    api.stop().await;
}

async fn a_deltas_text_is_limited_in_characters(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, epoch) = claimed(&api).await;
    let send = |text: String| {
        let api = &api;
        let token = token.clone();
        async move {
            api.call(
                Method::POST,
                format!("/v1/runners/threads/{thread}/deltas"),
                Some(&token),
                Some(json!({"epoch": epoch, "turn_seq": 1, "round": 1, "offset": 0, "text": text})),
            )
            .await
        }
    };
    // 65,536 two-byte characters (131,072 bytes): within the schema's maxLength.
    assert_eq!(send("é".repeat(65_536)).await.0, StatusCode::ACCEPTED);
    let (status, body) = send("x".repeat(65_537)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("65536 characters"),
        "{body}"
    );
    api.stop().await;
}

both_backends!(
    each_list_of_a_commit_has_a_limit,
    a_purged_threads_turn_reads_and_deltas_are_410,
    decisions_and_approval_ids_are_not_dropped_silently,
    handoff_costs_and_purged_targets,
    a_deltas_text_is_limited_in_characters,
);
