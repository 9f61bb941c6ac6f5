//! The store's behaviour over HTTP, run on both backends: claims and fencing, the version chain,
//! truncation and assembly, the ledger, the inbox, events and their stream, purge.

use std::time::Duration;

use futures_util::StreamExt as _;
use ninetrix_proto::ThreadId;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Backend, TestApi, both_backends, checkpoint, claimed, message};

both_backends!(
    claim_bumps_the_epoch_and_counts_boots,
    stale_epochs_are_fenced_on_every_write,
    versions_form_one_chain_and_conflicts_are_refused,
    concurrent_writers_with_one_parent_get_exactly_one_version,
    truncation_assembles_the_repaired_history,
    the_ledger_records_intent_then_outcome_and_replays,
    the_inbox_is_ordered_deduplicated_and_long_polls,
    events_stream_resumes_after_last_event_id,
    purge_deletes_everything,
);

async fn claim_bumps_the_epoch_and_counts_boots(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let thread = ThreadId::new_v7();
    let (status, minted) = api
        .mint(
            thread,
            json!({"pool": "research", "agent": "researcher", "replica": 2}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{minted}");
    let token = minted["token"].as_str().unwrap().to_string();
    for boot in 1..=3u64 {
        let (status, body) = api
            .call(
                Method::POST,
                &format!("/v1/runners/threads/{thread}/claim"),
                Some(&token),
                Some(json!({"pool": "research", "agent": "researcher", "replica": 2})),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, json!({"epoch": boot, "boot_count": boot}));
    }
    let (_, summary) = api
        .admin(Method::GET, &format!("/v1/threads/{thread}"), None)
        .await;
    assert_eq!(
        (summary["epoch"].as_u64(), summary["boot_count"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(
        (
            summary["pool"].as_str(),
            summary["agent"].as_str(),
            summary["replica"].as_u64()
        ),
        (Some("research"), Some("researcher"), Some(2))
    );
    // Labels are fixed: a claim (by its runner or the admin) or a mint with another pool, agent
    // or replica is refused and counts no boot.
    for labels in [
        json!({"pool": "other"}),
        json!({"agent": "someone-else"}),
        json!({"pool": "research", "agent": "researcher", "replica": 3}),
    ] {
        let path = format!("/v1/runners/threads/{thread}/claim");
        for who in [Some(token.as_str()), Some(crate::support::ADMIN)] {
            let (status, body) = api
                .call(Method::POST, &path, who, Some(labels.clone()))
                .await;
            assert_eq!(
                (status, &body["code"]),
                (StatusCode::CONFLICT, &json!("labels_fixed")),
                "{labels}: {body}"
            );
        }
        let (status, body) = api.mint(thread, labels.clone()).await;
        assert_eq!(
            (status, &body["code"]),
            (StatusCode::CONFLICT, &json!("labels_fixed")),
            "{body}"
        );
    }
    // A claim on a thread nobody minted a token for creates it (admin may do everything).
    let fresh = ThreadId::new_v7();
    let (status, body) = api
        .admin(
            Method::POST,
            &format!("/v1/runners/threads/{fresh}/claim"),
            Some(json!({})),
        )
        .await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"epoch": 1, "boot_count": 1}))
    );
    // Filters.
    let (_, listed) = api
        .admin(
            Method::GET,
            "/v1/threads?pool=research&agent=researcher",
            None,
        )
        .await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["thread_id"], json!(thread));
    let (_, idle) = api
        .admin(Method::GET, "/v1/threads?status=idle", None)
        .await;
    assert_eq!(idle.as_array().unwrap().len(), 2);
    api.stop().await;
}

async fn stale_epochs_are_fenced_on_every_write(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, old) = claimed(&api).await;
    let new = api.claim(thread, &token).await;
    assert_eq!(new, old + 1);
    let base = format!("/v1/runners/threads/{thread}");
    let writes = |epoch: u64| {
        vec![
            (
                Method::POST,
                format!("{base}/checkpoints"),
                checkpoint(epoch, 0, None, vec![message("user", "hi")], 1),
            ),
            (
                Method::POST,
                format!("{base}/tool-calls"),
                json!({"epoch": epoch, "key": "k1", "turn_seq": 1, "tool": "file_write", "args": {}, "effect": "write"}),
            ),
            (
                Method::POST,
                format!("{base}/events"),
                json!({"epoch": epoch, "events": [{"type": "boot", "data": {}}]}),
            ),
        ]
    };
    for (method, path, body) in writes(old) {
        let (status, body) = api.call(method, &path, Some(&token), Some(body)).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::CONFLICT, Some("fenced")),
            "{path}: {body}"
        );
    }
    for (method, path, body) in writes(new) {
        let (status, body) = api.call(method, &path, Some(&token), Some(body)).await;
        assert!(status.is_success(), "{path}: {status} {body}");
    }
    let (status, body) = api
        .call(
            Method::PUT,
            &format!("{base}/tool-calls/k1"),
            Some(&token),
            Some(json!({"epoch": old, "ok": true, "result": "x"})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("fenced"))
    );
    // Nothing from the stale epoch was stored.
    let (_, versions) = api
        .admin(
            Method::GET,
            &format!("/v1/threads/{thread}/checkpoints"),
            None,
        )
        .await;
    assert_eq!(
        versions
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["epoch"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [new]
    );
    api.stop().await;
}

async fn versions_form_one_chain_and_conflicts_are_refused(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, epoch) = claimed(&api).await;
    let path = format!("/v1/runners/threads/{thread}/checkpoints");
    let (status, _) = api
        .call(
            Method::GET,
            &format!("/v1/runners/threads/{thread}/latest"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no checkpoint yet");
    for parent in 0..5u64 {
        let (status, body) = api
            .call(
                Method::POST,
                &path,
                Some(&token),
                Some(checkpoint(
                    epoch,
                    parent,
                    None,
                    vec![message("user", &format!("m{parent}"))],
                    parent + 1,
                )),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(
            body,
            json!({"version": parent + 1, "history_len": parent + 1})
        );
    }
    for stale_parent in [0, 3, 4, 9] {
        let (status, body) = api
            .call(
                Method::POST,
                &path,
                Some(&token),
                Some(checkpoint(epoch, stale_parent, None, vec![], 5)),
            )
            .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::CONFLICT, Some("version_conflict")),
            "{body}"
        );
    }
    let (_, versions) = api
        .admin(
            Method::GET,
            &format!("/v1/threads/{thread}/checkpoints"),
            None,
        )
        .await;
    let chain: Vec<(u64, u64)> = versions
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_u64().unwrap(),
                v["parent_version"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(chain, [(1, 0), (2, 1), (3, 2), (4, 3), (5, 4)]);
    let (status, latest) = api
        .call(
            Method::GET,
            &format!("/v1/runners/threads/{thread}/latest"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(latest["version"], 5);
    let texts: Vec<&str> = latest["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["blocks"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["m0", "m1", "m2", "m3", "m4"]);
    assert_eq!(latest["state"]["status"], "in_turn");
    api.stop().await;
}

async fn concurrent_writers_with_one_parent_get_exactly_one_version(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, epoch) = claimed(&api).await;
    let path = format!("/v1/runners/threads/{thread}/checkpoints");
    let attempts = (0..8).map(|i| {
        let api = &api;
        let path = path.clone();
        let token = token.clone();
        async move {
            api.call(
                Method::POST,
                &path,
                Some(&token),
                Some(checkpoint(
                    epoch,
                    0,
                    None,
                    vec![message("user", &format!("w{i}"))],
                    1,
                )),
            )
            .await
        }
    });
    let results = futures_util::future::join_all(attempts).await;
    let won = results
        .iter()
        .filter(|(s, _)| *s == StatusCode::CREATED)
        .count();
    let lost = results
        .iter()
        .filter(|(s, b)| *s == StatusCode::CONFLICT && b["code"] == "version_conflict")
        .count();
    assert_eq!((won, lost), (1, 7), "{results:?}");
    let (_, versions) = api
        .admin(
            Method::GET,
            &format!("/v1/threads/{thread}/checkpoints"),
            None,
        )
        .await;
    assert_eq!(versions.as_array().unwrap().len(), 1);
    api.stop().await;
}

async fn truncation_assembles_the_repaired_history(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, epoch) = claimed(&api).await;
    let path = format!("/v1/runners/threads/{thread}/checkpoints");
    let append = vec![
        message("user", "question"),
        message("assistant", "calling a tool"),
        message("assistant", "orphan?"),
    ];
    assert_eq!(
        api.call(
            Method::POST,
            &path,
            Some(&token),
            Some(checkpoint(epoch, 0, None, append, 3))
        )
        .await
        .0,
        StatusCode::CREATED
    );
    // Repair: cut back to the anchor (1) and append a new answer.
    let (status, body) = api
        .call(
            Method::POST,
            &path,
            Some(&token),
            Some(checkpoint(
                epoch,
                1,
                Some(1),
                vec![message("assistant", "answer")],
                2,
            )),
        )
        .await;
    assert_eq!(
        (status, body),
        (StatusCode::CREATED, json!({"version": 2, "history_len": 2}))
    );
    let (_, latest) = api
        .call(
            Method::GET,
            &format!("/v1/runners/threads/{thread}/latest"),
            Some(&token),
            None,
        )
        .await;
    let texts = |v: &Value| {
        v["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["blocks"][0]["text"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(texts(&latest), ["question", "answer"]);
    // Each version still shows the history as it was.
    let (_, v1) = api
        .admin(
            Method::GET,
            &format!("/v1/threads/{thread}/checkpoints/1"),
            None,
        )
        .await;
    assert_eq!(texts(&v1), ["question", "calling a tool", "orphan?"]);
    let (_, v2) = api
        .admin(
            Method::GET,
            &format!("/v1/threads/{thread}/checkpoints/2"),
            None,
        )
        .await;
    assert_eq!(
        (texts(&v2), v2["truncate_to"].as_u64()),
        (vec!["question".to_string(), "answer".to_string()], Some(1))
    );
    let (status, _) = api
        .admin(
            Method::GET,
            &format!("/v1/threads/{thread}/checkpoints/9"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Truncating past the end is refused.
    let (status, body) = api
        .call(
            Method::POST,
            &path,
            Some(&token),
            Some(checkpoint(epoch, 2, Some(5), vec![], 0)),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_truncate"))
    );
    api.stop().await;
}

async fn the_ledger_records_intent_then_outcome_and_replays(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, epoch) = claimed(&api).await;
    let base = format!("/v1/runners/threads/{thread}/tool-calls");
    let intent = json!({"epoch": epoch, "key": "a1b2", "turn_seq": 3, "tool": "file_write", "args": {"path": "x"}, "effect": "write"});
    let (status, rec) = api
        .call(Method::POST, &base, Some(&token), Some(intent.clone()))
        .await;
    assert_eq!(
        (status, rec["status"].as_str(), rec["result"].clone()),
        (StatusCode::CREATED, Some("intent"), Value::Null)
    );
    // A retried intent returns the existing record.
    let (status, rec) = api
        .call(Method::POST, &base, Some(&token), Some(intent.clone()))
        .await;
    assert_eq!(
        (status, rec["status"].as_str()),
        (StatusCode::OK, Some("intent"))
    );
    let done = json!({"epoch": epoch, "ok": true, "result": "wrote 5 bytes"});
    let (status, rec) = api
        .call(
            Method::PUT,
            &format!("{base}/a1b2"),
            Some(&token),
            Some(done.clone()),
        )
        .await;
    assert_eq!(
        (status, rec["status"].as_str(), rec["result"].as_str()),
        (StatusCode::OK, Some("completed"), Some("wrote 5 bytes"))
    );
    // Retrying the completion is harmless; a different outcome is refused.
    assert_eq!(
        api.call(
            Method::PUT,
            &format!("{base}/a1b2"),
            Some(&token),
            Some(done)
        )
        .await
        .0,
        StatusCode::OK
    );
    let (status, body) = api
        .call(
            Method::PUT,
            &format!("{base}/a1b2"),
            Some(&token),
            Some(json!({"epoch": epoch, "ok": false, "result": "boom"})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("already_completed"))
    );
    // After a crash, a new epoch asking again sees the completed record: replay, do not execute.
    let epoch2 = api.claim(thread, &token).await;
    let mut again = intent;
    again["epoch"] = epoch2.into();
    let (status, rec) = api
        .call(Method::POST, &base, Some(&token), Some(again))
        .await;
    assert_eq!(
        (
            status,
            rec["status"].as_str(),
            rec["result"].as_str(),
            rec["intent_epoch"].as_u64()
        ),
        (
            StatusCode::OK,
            Some("completed"),
            Some("wrote 5 bytes"),
            Some(epoch)
        )
    );
    let (status, _) = api
        .call(
            Method::PUT,
            &format!("{base}/unknown"),
            Some(&token),
            Some(json!({"epoch": epoch2, "ok": true, "result": ""})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, ledger) = api
        .admin(
            Method::GET,
            &format!("/v1/threads/{thread}/tool-calls"),
            None,
        )
        .await;
    assert_eq!(ledger.as_array().unwrap().len(), 1);
    api.stop().await;
}

async fn the_inbox_is_ordered_deduplicated_and_long_polls(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, _) = claimed(&api).await;
    let send = |content: &str, key: Option<&str>| {
        let mut body = json!({"content": content});
        if let Some(k) = key {
            body["dedupe_key"] = k.into();
        }
        api.admin(
            Method::POST,
            format!("/v1/threads/{thread}/messages"),
            Some(body),
        )
    };
    // Each answer says the mode the message was stored with and the turn it found: none for
    // the first, the turn the first is about to start for the next ones.
    let waiting = json!({"turn_seq": 1, "seq": 1});
    assert_eq!(
        send("one", Some("k1")).await,
        (
            StatusCode::CREATED,
            json!({"seq": 1, "duplicate": false, "mode": "queue"})
        )
    );
    assert_eq!(
        send("two", None).await,
        (
            StatusCode::CREATED,
            json!({"seq": 2, "duplicate": false, "mode": "queue", "running": waiting})
        )
    );
    assert_eq!(
        send("one", Some("k1")).await,
        (
            StatusCode::OK,
            json!({"seq": 1, "duplicate": true, "mode": "queue"})
        )
    );
    // The same key with other content is not a retry: refused, the first message kept.
    let (status, body) = send("one again", Some("k1")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("key_reused")),
        "{body}"
    );
    assert_eq!(
        send("three", Some("k3")).await,
        (
            StatusCode::CREATED,
            json!({"seq": 3, "duplicate": false, "mode": "queue", "running": waiting})
        )
    );
    let inbox = format!("/v1/runners/threads/{thread}/inbox");
    let (_, msgs) = api
        .call(Method::GET, &format!("{inbox}?after=1"), Some(&token), None)
        .await;
    let got: Vec<(u64, &str)> = msgs
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["seq"].as_u64().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(got, [(2, "two"), (3, "three")]);
    // A short wait with nothing new returns an empty list.
    let (status, empty) = api
        .call(
            Method::GET,
            &format!("{inbox}?after=3&wait=1"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!((status, empty), (StatusCode::OK, json!([])));
    // A long-poll wakes up when a message arrives.
    let poll = api.call(
        Method::GET,
        &format!("{inbox}?after=3&wait=30"),
        Some(&token),
        None,
    );
    let sender = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        send("four", None).await
    };
    let started = std::time::Instant::now();
    let ((status, woke), sent) = tokio::join!(poll, sender);
    assert_eq!(sent.0, StatusCode::CREATED);
    assert_eq!(status, StatusCode::OK);
    assert_eq!(woke[0]["seq"], 4, "{woke}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the poll returned because of the message, not the wait"
    );
    api.stop().await;
}

/// Reads SSE frames from a response until `n` events arrived; returns their (id, type) pairs and
/// whether a keep-alive comment was seen.
async fn read_events(resp: reqwest::Response, n: usize) -> (Vec<(u64, String)>, bool) {
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    let mut events = Vec::new();
    let mut keep_alive = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while events.len() < n {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("events arrive in time")
            .expect("stream open")
            .unwrap();
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let (mut id, mut kind) = (None, String::new());
            for line in frame.lines() {
                if line.starts_with(':') {
                    keep_alive = true;
                } else if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().parse().ok();
                } else if let Some(v) = line.strip_prefix("event:") {
                    kind = v.trim().to_string();
                }
            }
            if let Some(id) = id {
                events.push((id, kind));
            }
        }
    }
    (events, keep_alive)
}

async fn events_stream_resumes_after_last_event_id(backend: Backend) {
    let Some(api) =
        TestApi::start_with(backend, |c| c.keep_alive = Duration::from_millis(100)).await
    else {
        return;
    };
    let (thread, token, epoch) = claimed(&api).await;
    let post = |kinds: &[&str]| {
        let events: Vec<Value> = kinds
            .iter()
            .map(|k| json!({"type": k, "data": {"k": k}}))
            .collect();
        api.call(
            Method::POST,
            format!("/v1/runners/threads/{thread}/events"),
            Some(&token),
            Some(json!({"epoch": epoch, "events": events})),
        )
    };
    assert_eq!(
        post(&["boot", "ready", "turn_started"]).await,
        (StatusCode::CREATED, json!({"last_seq": 3}))
    );
    let (_, listed) = api
        .admin(
            Method::GET,
            &format!("/v1/threads/{thread}/events?after=1"),
            None,
        )
        .await;
    assert_eq!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [2, 3]
    );

    let stream_url = format!("{}/v1/threads/{thread}/events/stream", api.url);
    let open = |last: Option<u64>| {
        let mut req = api
            .client
            .get(&stream_url)
            .bearer_auth(crate::support::ADMIN);
        if let Some(last) = last {
            req = req.header("Last-Event-ID", last.to_string());
        }
        req.send()
    };
    let resp = open(Some(1)).await.unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let reader = tokio::spawn(read_events(resp, 3));
    tokio::time::sleep(Duration::from_millis(300)).await;
    post(&["turn_completed"]).await;
    let (events, keep_alive) = reader.await.unwrap();
    assert_eq!(
        events,
        [
            (2, "ready".to_string()),
            (3, "turn_started".to_string()),
            (4, "turn_completed".to_string())
        ]
    );
    assert!(
        keep_alive,
        "a keep-alive comment arrives while the stream is idle"
    );
    // Reconnect after 4: only what came later, no duplicate.
    post(&["tool_executed", "turn_completed"]).await;
    let (events, _) = read_events(open(Some(4)).await.unwrap(), 2).await;
    assert_eq!(
        events,
        [
            (5, "tool_executed".to_string()),
            (6, "turn_completed".to_string())
        ]
    );
    api.stop().await;
}

async fn purge_deletes_everything(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, epoch) = claimed(&api).await;
    let base = format!("/v1/runners/threads/{thread}");
    api.call(
        Method::POST,
        &format!("{base}/checkpoints"),
        Some(&token),
        Some(checkpoint(epoch, 0, None, vec![message("user", "x")], 1)),
    )
    .await;
    api.call(Method::POST, &format!("{base}/tool-calls"), Some(&token), Some(json!({"epoch": epoch, "key": "k", "turn_seq": 1, "tool": "t", "args": {}, "effect": "read"}))).await;
    api.admin(
        Method::POST,
        &format!("/v1/threads/{thread}/messages"),
        Some(json!({"content": "hi"})),
    )
    .await;
    let other = claimed(&api).await.0;
    assert_eq!(
        api.admin(Method::DELETE, &format!("/v1/threads/{thread}"), None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    // A purged thread stays purged: every read and write of it is 410 `purged`, its runner
    // token is refused, and nothing re-creates it (not a claim, a message or a new token).
    let gone = |(status, body): (StatusCode, Value)| {
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::GONE, Some("purged")),
            "{body}"
        )
    };
    for path in [
        format!("/v1/threads/{thread}"),
        format!("/v1/threads/{thread}/checkpoints"),
        format!("/v1/threads/{thread}/tool-calls"),
        format!("/v1/threads/{thread}/events"),
    ] {
        gone(api.admin(Method::GET, &path, None).await);
    }
    gone(
        api.call(Method::GET, &format!("{base}/latest"), Some(&token), None)
            .await,
    );
    // An idle runner long-polling its inbox is told too, so it stops.
    gone(
        api.call(Method::GET, &format!("{base}/inbox"), Some(&token), None)
            .await,
    );
    gone(
        api.call(
            Method::POST,
            &format!("{base}/claim"),
            Some(&token),
            Some(json!({})),
        )
        .await,
    );
    gone(
        api.call(
            Method::POST,
            &format!("{base}/checkpoints"),
            Some(&token),
            Some(checkpoint(epoch, 0, None, vec![message("user", "x")], 1)),
        )
        .await,
    );
    gone(
        api.admin(
            Method::POST,
            &format!("/v1/threads/{thread}/messages"),
            Some(json!({"content": "again"})),
        )
        .await,
    );
    gone(
        api.admin(
            Method::POST,
            "/v1/tokens/runner",
            Some(json!({"thread_id": thread})),
        )
        .await,
    );
    gone(
        api.admin(Method::DELETE, &format!("/v1/threads/{thread}"), None)
            .await,
    );
    let (_, listed) = api.admin(Method::GET, "/v1/threads", None).await;
    assert!(
        !listed.to_string().contains(&thread.to_string()),
        "a purged thread is not listed: {listed}"
    );
    // Other threads are untouched.
    assert_eq!(
        api.admin(Method::GET, &format!("/v1/threads/{other}"), None)
            .await
            .0,
        StatusCode::OK
    );
    api.stop().await;
}
