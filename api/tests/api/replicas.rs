//! Replica threads: the API keeps the thread of each replica of a pool's agent, so a runner that
//! knows only its replica number (a Swarm task's slot) finds its thread. The same thread ever
//! after, one per replica even when many first calls race, a single-host pool's labelled thread
//! adopted, a new thread after a purge, and only the agent's own token (or the admin's) may ask.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{ADMIN, Backend, TestApi, both_backends};

async fn agent_token(api: &TestApi, pool: &str, agent: &str) -> String {
    let (status, body) = api
        .admin(
            Method::POST,
            "/v1/tokens/agent",
            Some(json!({"pool": pool, "agent": agent})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["token"].as_str().unwrap().to_string()
}

async fn replica(api: &TestApi, token: &str, path: &str) -> (StatusCode, Value) {
    api.call(
        Method::POST,
        format!("/v1/runners/pools/{path}"),
        Some(token),
        None,
    )
    .await
}

async fn a_replica_keeps_its_thread_and_a_purge_gives_it_a_new_one(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let token = agent_token(&api, "fleet", "bot").await;
    let (status, first) = replica(&api, &token, "fleet/agents/bot/replicas/1").await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(
        (&first["replica"], &first["created"]),
        (&json!(1), &json!(true))
    );
    let thread = first["thread_id"].as_str().unwrap().to_string();
    // The same thread ever after, with a runner token that works on it.
    let (status, again) = replica(&api, &token, "fleet/agents/bot/replicas/1").await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["thread_id"], json!(thread));
    assert_eq!(again["created"], json!(false));
    let runner = again["token"].as_str().unwrap();
    let (status, body) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{thread}/claim"),
            Some(runner),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Labelled with pool, agent and replica.
    let (_, summary) = api
        .admin(Method::GET, format!("/v1/threads/{thread}"), None)
        .await;
    assert_eq!(
        (&summary["pool"], &summary["agent"], &summary["replica"]),
        (&json!("fleet"), &json!("bot"), &json!(1)),
        "{summary}"
    );
    // Another replica, another thread.
    let (status, second) = replica(&api, &token, "fleet/agents/bot/replicas/2").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_ne!(second["thread_id"], json!(thread));
    // A purge is final: the replica gets a new thread.
    let (status, _) = api
        .admin(Method::DELETE, format!("/v1/threads/{thread}"), None)
        .await;
    assert!(status.is_success(), "{status}");
    let (status, fresh) = replica(&api, &token, "fleet/agents/bot/replicas/1").await;
    assert_eq!(status, StatusCode::CREATED, "{fresh}");
    assert_ne!(fresh["thread_id"], json!(thread));
    let (status, same) = replica(&api, &token, "fleet/agents/bot/replicas/1").await;
    assert_eq!(
        (status, &same["thread_id"]),
        (StatusCode::OK, &fresh["thread_id"])
    );
    api.stop().await;
}

async fn racing_first_calls_agree_on_one_thread(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let token = agent_token(&api, "fleet", "bot").await;
    for n in 1..=5u32 {
        let path = format!("fleet/agents/bot/replicas/{n}");
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let (api, token, path) = (&api, token.clone(), path.clone());
                async move { replica(api, &token, &path).await }
            })
            .collect();
        let answers = futures_util::future::join_all(calls).await;
        let mut threads: Vec<&Value> = answers.iter().map(|(_, b)| &b["thread_id"]).collect();
        threads.dedup();
        assert_eq!(threads.len(), 1, "replica {n}: {answers:?}");
        let created = answers
            .iter()
            .filter(|(s, _)| *s == StatusCode::CREATED)
            .count();
        assert_eq!(created, 1, "replica {n}: made once: {answers:?}");
    }
    // Five threads in all: no orphan from a race that lost.
    let (_, threads) = api
        .admin(Method::GET, "/v1/threads?pool=fleet&agent=bot", None)
        .await;
    assert_eq!(threads.as_array().unwrap().len(), 5, "{threads}");
    api.stop().await;
}

async fn a_single_host_replica_thread_is_adopted(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    // What `ninetrix up` on one host does: a thread of its own, labelled at token mint.
    let thread = ninetrix_proto::ThreadId::new_v7();
    let (status, body) = api
        .admin(
            Method::POST,
            "/v1/tokens/runner",
            Some(json!({"thread_id": thread, "pool": "fleet", "agent": "bot", "replica": 2})),
        )
        .await;
    assert!(status.is_success(), "{body}");
    let token = agent_token(&api, "fleet", "bot").await;
    let (status, adopted) = replica(&api, &token, "fleet/agents/bot/replicas/2").await;
    assert_eq!(status, StatusCode::OK, "{adopted}");
    assert_eq!(adopted["thread_id"], json!(thread.to_string()));
    assert_eq!(adopted["created"], json!(false));
    api.stop().await;
}

/// Issue 33: a runner relabelled its own thread as another pool's replica before that replica's
/// first lookup, which then adopted it — and the old token kept reading the replica's
/// conversation. Labels are fixed: the claim is refused and the lookup makes a thread of its own.
async fn a_relabelled_thread_is_never_adopted(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let thread = ninetrix_proto::ThreadId::new_v7();
    let (status, minted) = api
        .mint(thread, json!({"pool": "other", "agent": "x", "replica": 1}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{minted}");
    let attacker = minted["token"].as_str().unwrap().to_string();
    let (status, err) = api
        .call(
            Method::POST,
            format!("/v1/runners/threads/{thread}/claim"),
            Some(&attacker),
            Some(json!({"pool": "fleet", "agent": "bot", "replica": 3})),
        )
        .await;
    assert_eq!(
        (status, &err["code"]),
        (StatusCode::CONFLICT, &json!("labels_fixed")),
        "{err}"
    );
    // Nor by minting: the admin's mint is refused too once the thread has labels.
    let (status, err) = api
        .mint(
            thread,
            json!({"pool": "fleet", "agent": "bot", "replica": 3}),
        )
        .await;
    assert_eq!(
        (status, &err["code"]),
        (StatusCode::CONFLICT, &json!("labels_fixed"))
    );
    let token = agent_token(&api, "fleet", "bot").await;
    let (status, made) = replica(&api, &token, "fleet/agents/bot/replicas/3").await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_ne!(made["thread_id"], json!(thread.to_string()));
    let replica_thread = made["thread_id"].as_str().unwrap();
    let (status, _) = api
        .call(
            Method::GET,
            format!("/v1/runners/threads/{replica_thread}/inbox?after=0"),
            Some(&attacker),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    api.stop().await;
}

async fn only_the_agents_token_may_ask(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let other = agent_token(&api, "fleet", "other").await;
    let (status, body) = replica(&api, &other, "fleet/agents/bot/replicas/1").await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::FORBIDDEN, &json!("forbidden"))
    );
    let (status, _) = replica(&api, "nxs1.forged", "fleet/agents/bot/replicas/1").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = replica(&api, ADMIN, "fleet/agents/bot/replicas/0").await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_path")),
        "{body}"
    );
    let (status, body) = replica(&api, ADMIN, "fleet/agents/bot/replicas/1001").await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_path")),
        "{body}"
    );
    let (status, body) = replica(&api, ADMIN, "fleet/agents/bot/replicas/two").await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_path")),
        "{body}"
    );
    let (status, body) = replica(&api, ADMIN, "fleet/agents/bot/replicas/1").await;
    assert_eq!(status, StatusCode::CREATED, "the admin may: {body}");
    api.stop().await;
}

both_backends!(
    a_replica_keeps_its_thread_and_a_purge_gives_it_a_new_one,
    racing_first_calls_agree_on_one_thread,
    a_single_host_replica_thread_is_adopted,
    a_relabelled_thread_is_never_adopted,
    only_the_agents_token_may_ask,
);
