//! Sessions: a key opens the same thread ever after; the work feed gives each replica exactly the
//! sessions it owns (rendezvous hashing over the recorded replica count) that have work, each
//! with the runner token of its thread, and wakes when a message reaches one.

use std::time::Duration;

use ninetrix_proto::{ThreadId, sessions};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{ADMIN, Backend, TestApi, both_backends, checkpoint, message};

async fn open(api: &TestApi, agent: &str, key: &str) -> (StatusCode, Value) {
    api.admin(
        Method::POST,
        "/v1/sessions",
        Some(json!({"pool": "shop", "agent": agent, "key": key})),
    )
    .await
}

async fn enqueue(api: &TestApi, thread: &Value, text: &str) {
    let (status, body) = api
        .admin(
            Method::POST,
            format!("/v1/threads/{}/messages", thread.as_str().unwrap()),
            Some(json!({"content": text})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

async fn agent_token(api: &TestApi, agent: &str) -> String {
    let (status, body) = api
        .admin(
            Method::POST,
            "/v1/tokens/agent",
            Some(json!({"pool": "shop", "agent": agent})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["token"].as_str().unwrap().to_string()
}

async fn work(api: &TestApi, token: &str, query: &str) -> Vec<Value> {
    let (status, body) = api
        .call(
            Method::GET,
            format!("/v1/runners/pools/shop/agents/bot/sessions?{query}"),
            Some(token),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array().unwrap().clone()
}

async fn a_key_opens_the_same_thread_ever_after(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (status, first) = open(&api, "bot", "customer 42 / eu").await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(
        (&first["pool"], &first["agent"], &first["session"]),
        (&json!("shop"), &json!("bot"), &json!("customer 42 / eu"))
    );
    let id: ThreadId = first["thread_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        id.as_uuid().get_version_num(),
        7,
        "a session's thread is a UUID v7"
    );
    let (status, again) = open(&api, "bot", "customer 42 / eu").await;
    assert_eq!(
        (status, &again["thread_id"]),
        (StatusCode::OK, &first["thread_id"])
    );
    // Another key, or the same key of another agent, is another conversation.
    let (_, other) = open(&api, "bot", "customer 43").await;
    let (_, elsewhere) = open(&api, "helper", "customer 42 / eu").await;
    assert_ne!(other["thread_id"], first["thread_id"]);
    assert_ne!(elsewhere["thread_id"], first["thread_id"]);
    // A claim never moves a thread into or out of a session: one that names another session is
    // refused, and so is a mint or claim with the labels of a plain replica thread.
    let (status, body) = api
        .mint(id, json!({"pool": "p", "agent": "a", "replica": 1}))
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &json!("labels_fixed")),
        "{body}"
    );
    let token = api.token_of(id).await;
    api.claim(id, &token).await;
    let (status, body) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{id}/claim"),
            Some(&token),
            Some(json!({"session": "customer 43"})),
        )
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &json!("session_mismatch"))
    );
    let (status, _) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{id}/claim"),
            Some(&token),
            Some(json!({"session": "customer 42 / eu"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, listed) = api
        .admin(Method::GET, "/v1/sessions?pool=shop&agent=bot", None)
        .await;
    let keys: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["session"])
        .collect();
    assert_eq!(keys.len(), 2, "{listed}");
    assert!(keys.contains(&&json!("customer 42 / eu")));
    // A plain thread is no session.
    api.runner_token(ThreadId::new_v7()).await;
    let (_, all) = api.admin(Method::GET, "/v1/sessions", None).await;
    assert!(
        all.as_array()
            .unwrap()
            .iter()
            .all(|t| t["session"].is_string())
    );
    // Bad keys and names are refused, saying why.
    for (agent, key) in [
        ("bot", ""),
        ("bot", "line\nbreak"),
        ("bot", &"k".repeat(201)),
        ("", "k"),
    ] {
        let (status, body) = open(&api, agent, key).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{agent:?} {key:?}"
        );
        assert!(body["message"].as_str().unwrap().len() > 10);
    }
    api.stop().await;
}

async fn each_replica_gets_exactly_the_sessions_it_owns_with_work(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (status, _) = api
        .admin(
            Method::PUT,
            "/v1/pools/shop/agents/bot",
            Some(json!({"replicas": 3})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let mut threads = Vec::new();
    for i in 0..30 {
        let key = format!("c{i}");
        let (_, t) = open(&api, "bot", &key).await;
        if i < 24 {
            enqueue(&api, &t["thread_id"], "hello").await;
        }
        threads.push((key, t["thread_id"].clone()));
    }
    let token = agent_token(&api, "bot").await;
    let mut seen = Vec::new();
    for replica in 1..=3u32 {
        for w in work(&api, &token, &format!("replica={replica}")).await {
            let key = w["key"].as_str().unwrap().to_string();
            assert_eq!(sessions::owner(&key, 3), replica, "{key}");
            assert_eq!(
                (w["inbox_seq"].as_u64(), w["inbox_cursor"].as_u64()),
                (Some(1), Some(0))
            );
            seen.push((key, w));
        }
    }
    assert_eq!(seen.len(), 24, "every session with a message, once");

    // The token that comes with it serves the session's thread, and only that one.
    let (key, w) = &seen[0];
    let thread: ThreadId = w["thread_id"].as_str().unwrap().parse().unwrap();
    let session_token = w["token"].as_str().unwrap();
    let epoch = api.claim(thread, session_token).await;
    let other = threads.iter().find(|(k, _)| k != key).unwrap();
    let (status, _) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{}/claim", other.1.as_str().unwrap()),
            Some(session_token),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Served (the cursor reaches the message, the thread idle): no work any more.
    let owner = sessions::owner(key, 3);
    let mut done = checkpoint(
        epoch,
        0,
        None,
        vec![message("user", "hello"), message("assistant", "hi")],
        2,
    );
    done["state"]["inbox_cursor"] = 1.into();
    done["state"]["status"] = "idle".into();
    let (status, body) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{thread}/commit"),
            Some(session_token),
            Some(done),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let left = work(&api, &token, &format!("replica={owner}")).await;
    assert!(left.iter().all(|w| w["key"] != json!(key)));
    // Those it says it serves are left out.
    let active: Vec<&str> = left
        .iter()
        .map(|w| w["thread_id"].as_str().unwrap())
        .collect();
    let none = work(
        &api,
        &token,
        &format!("replica={owner}&active={}", active.join(",")),
    )
    .await;
    assert!(none.is_empty());

    // Scaling to 4: the sessions the new replica now owns move to it, and only those.
    api.admin(
        Method::PUT,
        "/v1/pools/shop/agents/bot",
        Some(json!({"replicas": 4})),
    )
    .await;
    for w in work(&api, &token, "replica=4").await {
        let key = w["key"].as_str().unwrap();
        assert_eq!(sessions::owner(key, 4), 4);
    }
    api.stop().await;
}

async fn the_work_feed_waits_for_a_message_to_one_of_its_sessions(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let token = agent_token(&api, "bot").await;
    let (_, t) = open(&api, "bot", "solo").await;
    // One replica (nothing recorded): it owns everything, and nothing has work yet.
    assert!(work(&api, &token, "replica=1").await.is_empty());
    let url = format!(
        "{}/v1/runners/pools/shop/agents/bot/sessions?replica=1&wait=30",
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
    enqueue(&api, &t["thread_id"], "wake up").await;
    let woken = tokio::time::timeout(Duration::from_secs(20), poll)
        .await
        .expect("the message wakes the feed")
        .unwrap();
    assert_eq!(woken.len(), 1);
    assert_eq!(woken[0]["key"], "solo");
    // Another agent's token sees none of it.
    let other = agent_token(&api, "helper").await;
    let (status, _) = api
        .call(
            Method::GET,
            "/v1/runners/pools/shop/agents/bot/sessions?replica=1",
            Some(&other),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // A malformed active list is a clear 400.
    let (status, body) = api
        .call(
            Method::GET,
            "/v1/runners/pools/shop/agents/bot/sessions?replica=1&active=nope",
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_query"))
    );
    api.stop().await;
}

/// Fifty first opens of one key at once (five keys): one thread each, one `201`, the rest `200`
/// — on Postgres the losers of the race used to hit the unique index and answer 500.
async fn concurrent_first_opens_of_one_key_agree_on_one_thread(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    for round in 0..5 {
        let key = format!("racing-{round}");
        let answers =
            futures_util::future::join_all((0..50).map(|_| open(&api, "bot", &key))).await;
        let statuses: Vec<StatusCode> = answers.iter().map(|(s, _)| *s).collect();
        assert!(
            statuses
                .iter()
                .all(|s| *s == StatusCode::OK || *s == StatusCode::CREATED),
            "{statuses:?}"
        );
        assert_eq!(
            statuses
                .iter()
                .filter(|s| **s == StatusCode::CREATED)
                .count(),
            1,
            "{statuses:?}"
        );
        let ids: std::collections::BTreeSet<&str> = answers
            .iter()
            .map(|(_, b)| b["thread_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), 1, "{ids:?}");
    }
    let (status, listed) = api.admin(Method::GET, "/v1/sessions?agent=bot", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed.as_array().unwrap().len(), 5, "{listed}");
    api.stop().await;
}

/// Every replica's work, as a set of keys.
async fn shares(
    api: &TestApi,
    token: &str,
    replicas: u32,
) -> Vec<std::collections::BTreeSet<String>> {
    let mut all = Vec::new();
    for r in 1..=replicas {
        all.push(
            work(api, token, &format!("replica={r}"))
                .await
                .iter()
                .map(|w| w["key"].as_str().unwrap().to_string())
                .collect(),
        );
    }
    all
}

/// What each replica should get: the keys with work it owns.
fn expected(keys: &[String], replicas: u32) -> Vec<std::collections::BTreeSet<String>> {
    (1..=replicas)
        .map(|r| {
            keys.iter()
                .filter(|k| sessions::owner(k, replicas) == r)
                .cloned()
                .collect()
        })
        .collect()
}

/// The owners stored with the sessions follow every replica count, up and down — and rows whose
/// stored owner is of another count (as a database from before the column has them) are still
/// answered right, and stored at the next count recorded.
async fn stored_owners_follow_the_replica_count(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let token = agent_token(&api, "bot").await;
    let set = |n: u32| {
        let api = &api;
        async move {
            let (status, _) = api
                .admin(
                    Method::PUT,
                    "/v1/pools/shop/agents/bot",
                    Some(json!({"replicas": n})),
                )
                .await;
            assert_eq!(status, StatusCode::NO_CONTENT);
        }
    };
    set(3).await;
    let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    for k in &keys {
        let (_, t) = open(&api, "bot", k).await;
        enqueue(&api, &t["thread_id"], "hello").await;
    }
    for n in [3, 5, 6, 2, 2, 7, 1] {
        set(n).await;
        assert_eq!(
            shares(&api, &token, n).await,
            expected(&keys, n),
            "{n} replicas"
        );
    }
    // As a database migrated from before stored owners: every row of another count.
    let forget = "UPDATE threads SET session_replicas = 0, session_replica = 0";
    match backend {
        Backend::Sqlite => {
            let mut c = <sqlx::SqliteConnection as sqlx::Connection>::connect(&api.db.url)
                .await
                .unwrap();
            sqlx::query(forget).execute(&mut c).await.unwrap();
        }
        Backend::Postgres => {
            let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&api.db.url)
                .await
                .unwrap();
            sqlx::query(forget).execute(&mut c).await.unwrap();
        }
    }
    set(4).await;
    assert_eq!(shares(&api, &token, 4).await, expected(&keys, 4));
    let forget_some = "UPDATE threads SET session_replicas = 9 WHERE session IN ('k1', 'k2', 'k3')";
    match backend {
        Backend::Sqlite => {
            let mut c = <sqlx::SqliteConnection as sqlx::Connection>::connect(&api.db.url)
                .await
                .unwrap();
            sqlx::query(forget_some).execute(&mut c).await.unwrap();
        }
        Backend::Postgres => {
            let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&api.db.url)
                .await
                .unwrap();
            sqlx::query(forget_some).execute(&mut c).await.unwrap();
        }
    }
    assert_eq!(
        shares(&api, &token, 4).await,
        expected(&keys, 4),
        "computed when read"
    );
    api.stop().await;
}

both_backends!(
    concurrent_first_opens_of_one_key_agree_on_one_thread,
    stored_owners_follow_the_replica_count,
    a_key_opens_the_same_thread_ever_after,
    each_replica_gets_exactly_the_sessions_it_owns_with_work,
    the_work_feed_waits_for_a_message_to_one_of_its_sessions,
);
