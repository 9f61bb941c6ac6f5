//! `GET /v1/runners/threads/{id}/identity`: a thread's labels as stored when it was created,
//! asked with its own runner token (a replica's, or the one a session's thread comes with) or
//! the admin's — what a pool's job broker learns a caller's agent from. Another thread's token
//! is refused; an unknown thread is 404, a purged one 410.

use ninetrix_client::{Client, ClientError, ErrorCode, Token};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::ThreadLabels;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::support::{ADMIN, Backend, TestApi, both_backends};

fn client(api: &TestApi, token: &str) -> Client {
    Client::new(api.client.clone(), &api.url, Some(Token::new(token)))
}

fn code(e: &ClientError) -> (u16, ErrorCode) {
    match e {
        ClientError::Api { status, code, .. } => (*status, code.clone()),
        other => panic!("not an API refusal: {other}"),
    }
}

async fn a_thread_tells_its_own_runner_who_it_is(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    // A replica's thread: labels from the mint that created it.
    let thread = ThreadId::new_v7();
    let (status, minted) = api
        .mint(
            thread,
            json!({"pool": "shop", "agent": "bot", "replica": 2}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{minted}");
    let token = minted["token"].as_str().unwrap().to_string();
    let labels = client(&api, &token).thread_identity(thread).await.unwrap();
    assert_eq!(
        labels,
        ThreadLabels {
            pool: Some("shop".into()),
            agent: Some("bot".into()),
            replica: Some(2),
            session: None,
        }
    );
    // The admin reads the same.
    assert_eq!(
        client(&api, ADMIN).thread_identity(thread).await.unwrap(),
        labels
    );
    // A claim restating nothing changes nothing.
    api.claim(thread, &token).await;
    assert_eq!(
        client(&api, &token).thread_identity(thread).await.unwrap(),
        labels
    );

    // A session's thread, with the token its replica is handed for it.
    let (status, _) = api
        .admin(
            Method::PUT,
            "/v1/pools/shop/agents/bot",
            Some(json!({"replicas": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, session) = api
        .admin(
            Method::POST,
            "/v1/sessions",
            Some(json!({"pool": "shop", "agent": "bot", "key": "customer 7"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{session}");
    let session_thread: ThreadId = session["thread_id"].as_str().unwrap().parse().unwrap();
    let (status, body) = api
        .admin(
            Method::POST,
            format!("/v1/threads/{session_thread}/messages"),
            Some(json!({"content": "hi"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, agent) = api
        .admin(
            Method::POST,
            "/v1/tokens/agent",
            Some(json!({"pool": "shop", "agent": "bot"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    let (status, work) = api
        .call(
            Method::GET,
            "/v1/runners/pools/shop/agents/bot/sessions?replica=1",
            agent["token"].as_str(),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{work}");
    let served = work
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["thread_id"] == json!(session_thread))
        .expect("the session has work");
    let session_token = served["token"].as_str().unwrap();
    let labels = client(&api, session_token)
        .thread_identity(session_thread)
        .await
        .unwrap();
    assert_eq!(
        (
            labels.pool.as_deref(),
            labels.agent.as_deref(),
            labels.replica,
            labels.session.as_deref()
        ),
        (Some("shop"), Some("bot"), None, Some("customer 7"))
    );

    // Another thread's token, a garbage token: refused.
    let e = client(&api, session_token)
        .thread_identity(thread)
        .await
        .unwrap_err();
    assert_eq!(code(&e), (403, ErrorCode::Forbidden), "{e}");
    let e = client(&api, "garbage")
        .thread_identity(thread)
        .await
        .unwrap_err();
    assert_eq!(code(&e), (401, ErrorCode::Unauthorized), "{e}");

    // Unknown: 404; purged: 410.
    let e = client(&api, ADMIN)
        .thread_identity(ThreadId::new_v7())
        .await
        .unwrap_err();
    assert_eq!(code(&e), (404, ErrorCode::NotFound), "{e}");
    let (status, _) = api
        .admin(Method::DELETE, format!("/v1/threads/{thread}"), None)
        .await;
    assert!(status.is_success(), "{status}");
    for token in [token.as_str(), ADMIN] {
        let e = client(&api, token)
            .thread_identity(thread)
            .await
            .unwrap_err();
        assert_eq!(code(&e), (410, ErrorCode::Purged), "{e}");
    }
    api.stop().await;
}

both_backends!(a_thread_tells_its_own_runner_who_it_is);
