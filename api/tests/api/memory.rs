//! Memories: a runner's command is applied once per op key (the same key again answers the first
//! result), fenced by its epoch, on its own thread's agent's memory (or its session's) — never
//! another pool's; limits are results the model sees and typed errors for the admin; the admin
//! lists, reads, edits, deletes and purges; concurrent commands on one memory lose nothing.

use ninetrix_proto::ThreadId;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Backend, TestApi, both_backends};

/// A claimed thread of pool `pool`, agent `agent`, replica `replica`: (thread, token, epoch).
async fn thread_of(
    api: &TestApi,
    pool: &str,
    agent: &str,
    replica: u32,
) -> (ThreadId, String, u64) {
    let thread = ThreadId::new_v7();
    let (status, body) = api
        .mint(
            thread,
            json!({"pool": pool, "agent": agent, "replica": replica}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let token = body["token"].as_str().unwrap().to_string();
    let epoch = api.claim(thread, &token).await;
    (thread, token, epoch)
}

/// The thread of session `key` of agent `a` in pool `p`, claimed: (thread, token, epoch).
async fn session(api: &TestApi, key: &str) -> (ThreadId, String, u64) {
    let (status, body) = api
        .admin(
            Method::POST,
            "/v1/sessions",
            Some(json!({"pool": "p", "agent": "a", "key": key})),
        )
        .await;
    assert!(status.is_success(), "{body}");
    let thread: ThreadId = body["thread_id"].as_str().unwrap().parse().unwrap();
    let token = api.token_of(thread).await;
    let epoch = api.claim(thread, &token).await;
    (thread, token, epoch)
}

/// Sends one memory command as the thread's runner.
async fn op(
    api: &TestApi,
    (thread, token, epoch): &(ThreadId, String, u64),
    scope: &str,
    key: &str,
    command: Value,
) -> (StatusCode, Value) {
    api.call(
        Method::POST,
        format!("/v1/runners/threads/{thread}/memory"),
        Some(token),
        Some(json!({"epoch": epoch, "scope": scope, "op_key": key, "op": command})),
    )
    .await
}

/// The content the model sees of a successful command.
async fn ok(
    api: &TestApi,
    t: &(ThreadId, String, u64),
    scope: &str,
    key: &str,
    command: Value,
) -> String {
    let (status, body) = op(api, t, scope, key, command).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["is_error"], false, "{body}");
    body["content"].as_str().unwrap().to_string()
}

fn view(path: &str) -> Value {
    json!({"command": "view", "path": path})
}

async fn a_command_is_applied_once_per_op_key(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let t = thread_of(&api, "p", "a", 1).await;
    ok(
        &api,
        &t,
        "agent",
        "k1",
        json!({"command": "create", "path": "/memories/notes.md", "file_text": "one\n"}),
    )
    .await;
    let insert = json!({"command": "insert", "path": "/memories/notes.md", "insert_line": 1, "insert_text": "two"});
    let (status, first) = op(&api, &t, "agent", "k2", insert.clone()).await;
    assert_eq!(
        (status, &first["replayed"]),
        (StatusCode::OK, &json!(false)),
        "{first}"
    );
    // The runner repeats the call after a crash: the first answer, nothing applied again.
    let (status, again) = op(&api, &t, "agent", "k2", insert).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["replayed"], true);
    assert_eq!(again["content"], first["content"]);
    let seen = ok(&api, &t, "agent", "v1", view("/memories/notes.md")).await;
    assert_eq!(
        seen,
        "Here's the content of /memories/notes.md with line numbers:\n     1\tone\n     2\ttwo\n"
    );
    // A key names one call: another command under it is refused, and changes nothing.
    let (status, body) = op(
        &api,
        &t,
        "agent",
        "k2",
        json!({"command": "delete", "path": "/memories/notes.md"}),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &json!("key_reused")),
        "{body}"
    );
    // A failed command is recorded too: its answer is replayed, not run again.
    let missing = json!({"command": "delete", "path": "/memories/none"});
    let (_, failed) = op(&api, &t, "agent", "k3", missing.clone()).await;
    assert_eq!(failed["is_error"], true, "{failed}");
    assert_eq!(
        failed["content"],
        "Error: The path /memories/none does not exist"
    );
    ok(
        &api,
        &t,
        "agent",
        "k4",
        json!({"command": "create", "path": "/memories/none", "file_text": "x"}),
    )
    .await;
    let (_, replayed) = op(&api, &t, "agent", "k3", missing).await;
    assert_eq!(
        (&replayed["replayed"], &replayed["is_error"]),
        (&json!(true), &json!(true))
    );
    // A stale epoch changes nothing.
    let (thread, token, epoch) = t.clone();
    let newer = api.claim(thread, &token).await;
    assert!(newer > epoch);
    let (status, body) = op(
        &api,
        &t,
        "agent",
        "k5",
        json!({"command": "delete", "path": "/memories/notes.md"}),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &json!("fenced")),
        "{body}"
    );
    let current = (thread, token, newer);
    assert!(
        ok(&api, &current, "agent", "v2", view("/memories"))
            .await
            .contains("/memories/notes.md")
    );
    api.stop().await;
}

async fn agent_memory_is_shared_and_session_memory_is_each_sessions_own(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (r1, r2) = (
        thread_of(&api, "p", "a", 1).await,
        thread_of(&api, "p", "a", 2).await,
    );
    let other_agent = thread_of(&api, "p", "b", 1).await;
    let other_pool = thread_of(&api, "q", "a", 1).await;
    ok(
        &api,
        &r1,
        "agent",
        "c1",
        json!({"command": "create", "path": "/memories/shared.md", "file_text": "hello"}),
    )
    .await;
    assert!(
        ok(&api, &r2, "agent", "v", view("/memories/shared.md"))
            .await
            .contains("hello"),
        "every replica of the agent shares its memory"
    );
    for t in [&other_agent, &other_pool] {
        let (_, body) = op(&api, t, "agent", "v", view("/memories/shared.md")).await;
        assert_eq!(
            body["is_error"], true,
            "another agent's or pool's memory: {body}"
        );
    }
    let (s1, s2) = (session(&api, "alice").await, session(&api, "bob").await);
    ok(
        &api,
        &s1,
        "session",
        "c2",
        json!({"command": "create", "path": "/memories/mine.md", "file_text": "alice's"}),
    )
    .await;
    let (_, body) = op(&api, &s2, "session", "v", view("/memories/mine.md")).await;
    assert_eq!(
        body["is_error"], true,
        "bob's session does not see alice's: {body}"
    );
    let (_, body) = op(&api, &s1, "agent", "v", view("/memories/mine.md")).await;
    assert_eq!(
        body["is_error"], true,
        "the session's memory is not the agent's: {body}"
    );
    assert!(
        ok(&api, &s2, "agent", "v", view("/memories/shared.md"))
            .await
            .contains("hello"),
        "sessions share the agent's memory"
    );
    // A replica's own thread (not a session) keeps its session memory under its thread ID.
    ok(
        &api,
        &r1,
        "session",
        "c3",
        json!({"command": "create", "path": "/memories/r1.md", "file_text": "r1"}),
    )
    .await;
    let (status, list) = api
        .admin(
            Method::GET,
            "/v1/memories?pool=p&agent=a&scope=session",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let listed: Vec<(String, String)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["session"].as_str().unwrap().to_string(),
                f["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut want = vec![
        ("alice".to_string(), "/memories/mine.md".to_string()),
        (r1.0.to_string(), "/memories/r1.md".to_string()),
    ];
    want.sort();
    assert_eq!(listed, want);
    // A thread without a pool and agent has no memory.
    let bare = ThreadId::new_v7();
    let (status, minted) = api.mint(bare, json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{minted}");
    let token = minted["token"].as_str().unwrap().to_string();
    let epoch = api.claim(bare, &token).await;
    let (status, body) = op(&api, &(bare, token, epoch), "agent", "v", view("/memories")).await;
    assert_eq!(
        (status, &body["code"]),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!("unlabelled_thread")
        ),
        "{body}"
    );
    api.stop().await;
}

async fn limits_are_results_for_the_model_and_typed_errors_for_people(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let t = thread_of(&api, "p", "a", 1).await;
    let big = "x".repeat(100 * 1024 + 1);
    let (status, body) = op(
        &api,
        &t,
        "agent",
        "big",
        json!({"command": "create", "path": "/memories/big", "file_text": big}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["is_error"], true);
    assert!(
        body["content"]
            .as_str()
            .unwrap()
            .contains("at most 102400 bytes"),
        "{body}"
    );
    let (status, body) = op(
        &api,
        &t,
        "agent",
        "bad",
        json!({"command": "create", "path": "/etc/passwd", "file_text": "x"}),
    )
    .await;
    assert_eq!((status, &body["is_error"]), (StatusCode::OK, &json!(true)));
    assert!(
        body["content"]
            .as_str()
            .unwrap()
            .contains("not under /memories")
    );
    let (status, body) = api
        .admin(
            Method::PUT,
            "/v1/memories/file?pool=p&agent=a&path=/memories/big",
            Some(json!({"content": "y".repeat(100 * 1024 + 1)})),
        )
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("memory_limit")),
        "{body}"
    );
    // Ten files of 100 KiB fit; the eleventh passes 1 MiB.
    for i in 0..10 {
        let (status, body) = api
            .admin(
                Method::PUT,
                format!("/v1/memories/file?pool=p&agent=a&path=/memories/f{i}"),
                Some(json!({"content": "y".repeat(100 * 1024)})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (_, body) = op(
        &api,
        &t,
        "agent",
        "more",
        json!({"command": "create", "path": "/memories/more", "file_text": "z".repeat(30 * 1024)}),
    )
    .await;
    assert_eq!(body["is_error"], true);
    assert!(
        body["content"].as_str().unwrap().contains("1 MiB"),
        "{body}"
    );
    api.stop().await;
}

async fn people_list_read_edit_delete_and_purge(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let put = |pool: &'static str, agent: &'static str, path: &'static str, text: &'static str| {
        let api = &api;
        async move {
            api.admin(
                Method::PUT,
                format!("/v1/memories/file?pool={pool}&agent={agent}&path={path}"),
                Some(json!({"content": text})),
            )
            .await
        }
    };
    let (status, file) = put("p", "a", "/memories/d/one.md", "1").await;
    assert_eq!(status, StatusCode::OK, "{file}");
    assert_eq!(
        (&file["path"], &file["size"], &file["scope"]),
        (&json!("/memories/d/one.md"), &json!(1), &json!("agent"))
    );
    assert!(
        put("p", "a", "/memories/d/two.md", "22")
            .await
            .0
            .is_success()
    );
    assert!(put("p", "b", "/memories/b.md", "b").await.0.is_success());
    assert!(put("q", "a", "/memories/q.md", "q").await.0.is_success());
    let (status, body) = put("p", "a", "/memories/d", "x").await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &json!("memory_conflict")),
        "{body}"
    );
    let (status, body) = put("p", "a", "/memories/../x", "x").await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_query")),
        "{body}"
    );
    let (status, body) = api
        .admin(
            Method::GET,
            "/v1/memories?pool=p&agent=a&scope=session&session=k&path=x",
            None,
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "an unknown parameter: {body}"
    );
    let (_, list) = api.admin(Method::GET, "/v1/memories?pool=p", None).await;
    let paths: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["/memories/d/one.md", "/memories/d/two.md", "/memories/b.md"]
    );
    let (status, file) = api
        .admin(
            Method::GET,
            "/v1/memories/file?pool=p&agent=a&path=/memories/d/two.md",
            None,
        )
        .await;
    assert_eq!(
        (status, &file["content"]),
        (StatusCode::OK, &json!("22")),
        "{file}"
    );
    let (status, body) = api
        .admin(
            Method::GET,
            "/v1/memories/file?pool=p&agent=a&path=/memories/none",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("/memories/none"),
        "{body}"
    );
    let (status, body) = api
        .admin(
            Method::GET,
            "/v1/memories/file?pool=p&agent=a&path=/memories",
            None,
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "the memory directory itself: {body}"
    );
    let (status, body) = api
        .admin(
            Method::GET,
            "/v1/memories/file?pool=p&agent=a&session=&path=/memories/x",
            None,
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "an empty session key: {body}"
    );
    // A session's file: `session` names it.
    let (status, body) = api
        .admin(
            Method::PUT,
            "/v1/memories/file?pool=p&agent=a&session=k&path=/memories/s.md",
            Some(json!({"content": "mine"})),
        )
        .await;
    assert_eq!(
        (status, &body["scope"], &body["session"]),
        (StatusCode::OK, &json!("session"), &json!("k")),
        "{body}"
    );
    let (status, body) = api
        .admin(
            Method::POST,
            format!("/v1/runners/threads/{}/memory", ThreadId::new_v7()),
            Some(json!({"epoch": 1, "op_key": "a:b", "op": view("/memories")})),
        )
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("invalid_key")),
        "{body}"
    );
    let (status, gone) = api
        .admin(
            Method::DELETE,
            "/v1/memories/file?pool=p&agent=a&path=/memories/d",
            None,
        )
        .await;
    assert_eq!(
        (status, &gone["files"]),
        (StatusCode::OK, &json!(2)),
        "{gone}"
    );
    let (status, _) = api
        .admin(
            Method::DELETE,
            "/v1/memories/file?pool=p&agent=a&path=/memories/d",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // `down --purge`: every memory of the pool, no other pool's.
    let t = thread_of(&api, "p", "b", 1).await;
    ok(
        &api,
        &t,
        "session",
        "s",
        json!({"command": "create", "path": "/memories/s", "file_text": "s"}),
    )
    .await;
    let (status, purged) = api.admin(Method::DELETE, "/v1/memories?pool=p", None).await;
    assert_eq!(
        (status, &purged["files"]),
        (StatusCode::OK, &json!(3)),
        "{purged}"
    );
    let (_, left) = api.admin(Method::GET, "/v1/memories?pool=p", None).await;
    assert_eq!(left, json!([]));
    let (_, left) = api.admin(Method::GET, "/v1/memories?pool=q", None).await;
    assert_eq!(left.as_array().unwrap().len(), 1);
    api.stop().await;
}

async fn concurrent_commands_on_one_memory_lose_nothing(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (r1, r2) = (
        thread_of(&api, "p", "a", 1).await,
        thread_of(&api, "p", "a", 2).await,
    );
    ok(
        &api,
        &r1,
        "agent",
        "init",
        json!({"command": "create", "path": "/memories/log", "file_text": ""}),
    )
    .await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let t = if i % 2 == 0 { r1.clone() } else { r2.clone() };
        let api = &api;
        tasks.push(async move {
            ok(
                api,
                &t,
                "agent",
                &format!("line-{i}"),
                json!({"command": "insert", "path": "/memories/log", "insert_line": 0, "insert_text": format!("line {i}")}),
            )
            .await
        });
    }
    futures_util::future::join_all(tasks).await;
    let (_, file) = api
        .admin(
            Method::GET,
            "/v1/memories/file?pool=p&agent=a&path=/memories/log",
            None,
        )
        .await;
    let mut lines: Vec<&str> = file["content"].as_str().unwrap().lines().collect();
    lines.sort_unstable();
    let mut want: Vec<String> = (0..16).map(|i| format!("line {i}")).collect();
    want.sort_unstable();
    assert_eq!(lines, want);
    api.stop().await;
}

both_backends!(
    a_command_is_applied_once_per_op_key,
    agent_memory_is_shared_and_session_memory_is_each_sessions_own,
    limits_are_results_for_the_model_and_typed_errors_for_people,
    people_list_read_edit_delete_and_purge,
    concurrent_commands_on_one_memory_lose_nothing,
);
