//! The A2A server (issue 43, docs/a2a.md) over real HTTP: the public card, A2A tokens and where
//! they work, tasks filed in a context's session and deduplicated by `messageId`, their states
//! read from the turn a runner drives (working, waiting on a person, answered over A2A,
//! completed with its reply), a blocking send, a stream with the reply's text, the listing, a
//! cancel, and push notifications delivered to a loopback receiver — signed, once per state, and
//! on after the API restarts. The kill points of a send are `tests/tests/api_process.rs`'s (they
//! abort the process); the official Python SDK's interop is at the end.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ninetrix_proto::ApprovalId;
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::ApprovalKind;
use ninetrix_proto::events::{
    ApprovalRequested, StoppedBy, TraceEvent, TurnCompleted, TurnStarted,
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{ADMIN, Backend, TestApi, both_backends, count, message};

const POOL: &str = "shop";
const AGENT: &str = "clerk";

/// Records the agent with its card and mints an A2A token of the pool for `partner`.
async fn served(api: &TestApi) -> String {
    let card = json!({"display_name": "The clerk", "description": "Sells and refunds",
        "skills": [{"id": "refund", "name": "Refund an order", "description": "Refunds", "tags": ["orders"],
                    "examples": ["refund order 42"]}]});
    let (status, body) = api
        .admin(
            Method::PUT,
            format!("/v1/pools/{POOL}/agents/{AGENT}"),
            Some(json!({"replicas": 1, "card": card})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    mint(api, POOL, "partner").await
}

/// An A2A token of `pool` for `name`.
async fn mint(api: &TestApi, pool: &str, name: &str) -> String {
    let (status, body) = api
        .admin(
            Method::POST,
            "/v1/tokens/a2a",
            Some(json!({"pool": pool, "name": name})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        (body["pool"].as_str(), body["name"].as_str()),
        (Some(pool), Some(name))
    );
    body["token"].as_str().unwrap().to_string()
}

/// A JSON-RPC call to the agent's endpoint: the HTTP status and the body.
async fn rpc(
    api: &TestApi,
    token: Option<&str>,
    method: &str,
    params: Value,
) -> (StatusCode, Value) {
    api.call(
        Method::POST,
        format!("/a2a/{POOL}/{AGENT}"),
        token,
        Some(json!({"jsonrpc": "2.0", "id": "r1", "method": method, "params": params})),
    )
    .await
}

/// The `result` of a call that must succeed.
async fn ok(api: &TestApi, token: &str, method: &str, params: Value) -> Value {
    let (status, body) = rpc(api, Some(token), method, params).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.get("error").is_none(), "{method}: {body}");
    assert_eq!(body["id"], "r1");
    body["result"].clone()
}

/// The JSON-RPC error code of a call that must fail with HTTP 200.
async fn error(api: &TestApi, token: &str, method: &str, params: Value) -> (i64, String) {
    let (status, body) = rpc(api, Some(token), method, params).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let e = &body["error"];
    (
        e["code"].as_i64().unwrap(),
        e["message"].as_str().unwrap().to_string(),
    )
}

/// A user message (A2A 1.0 ProtoJSON).
fn user(id: &str, text: &str, context: Option<&str>, task: Option<&str>) -> Value {
    let mut m = json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]});
    if let Some(c) = context {
        m["contextId"] = json!(c);
    }
    if let Some(t) = task {
        m["taskId"] = json!(t);
    }
    m
}

/// Sends a message and answers at once: the task.
async fn send(api: &TestApi, token: &str, m: Value) -> Value {
    let result = ok(
        api,
        token,
        "SendMessage",
        json!({"message": m, "configuration": {"returnImmediately": true}}),
    )
    .await;
    result["task"].clone()
}

/// The task as `GetTask` reads it.
async fn get(api: &TestApi, token: &str, task: &str) -> Value {
    ok(api, token, "GetTask", json!({"id": task})).await
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap()
}

/// The thread and inbox seq of a task (its metadata).
fn place(task: &Value) -> (ThreadId, u64) {
    let n = &task["metadata"]["ninetrix"];
    (
        n["thread_id"].as_str().unwrap().parse().unwrap(),
        n["seq"].as_u64().unwrap(),
    )
}

/// A runner of a task's thread: its token and epoch, and the version it is at.
struct Runner {
    thread: ThreadId,
    token: String,
    epoch: u64,
    version: u64,
}

async fn runner(api: &TestApi, thread: ThreadId) -> Runner {
    let token = api.token_of(thread).await;
    let epoch = api.claim(thread, &token).await;
    Runner {
        thread,
        token,
        epoch,
        version: 0,
    }
}

fn event(e: TraceEvent) -> Value {
    serde_json::to_value(e.to_new_event(chrono::Utc::now())).unwrap()
}

impl Runner {
    /// Commits one step of turn `turn` answering message `seq` with these events (and `extra`,
    /// e.g. requests to people).
    async fn commit(
        &mut self,
        api: &TestApi,
        status: &str,
        turn: u64,
        seq: u64,
        events: Vec<Value>,
        extra: Value,
    ) {
        let mut body = json!({"epoch": self.epoch, "parent_version": self.version,
            "append": [message("user", &format!("step {}", self.version))],
            "state": {"turn_seq": turn, "turn_start_history_len": 1, "status": status, "inbox_cursor": seq, "turn_message": seq},
            "intents": [], "outcomes": [], "events": events});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (code, answer) = api
            .call(
                Method::POST,
                format!("/v1/runners/threads/{}/commit", self.thread),
                Some(&self.token),
                Some(body),
            )
            .await;
        assert_eq!(code, StatusCode::CREATED, "{answer}");
        self.version += 1;
    }

    async fn start(&mut self, api: &TestApi, turn: u64, seq: u64) {
        let started = event(TraceEvent::TurnStarted(TurnStarted {
            turn_seq: turn,
            seq,
            input: String::new(),
        }));
        self.commit(api, "in_turn", turn, seq, vec![started], json!({}))
            .await;
    }

    async fn complete(
        &mut self,
        api: &TestApi,
        turn: u64,
        seq: u64,
        reply: &str,
        stopped_by: Option<StoppedBy>,
    ) {
        let done = event(TraceEvent::TurnCompleted(TurnCompleted {
            turn_seq: turn,
            seq,
            ok: stopped_by.is_none(),
            reply: reply.into(),
            usage: Default::default(),
            duration_ms: 5.0,
            stopped_by,
        }));
        self.commit(api, "idle", turn, seq, vec![done], json!({}))
            .await;
    }

    /// Asks a person to approve `refund` in turn `turn` (the request and its event).
    async fn ask(&mut self, api: &TestApi, turn: u64, seq: u64) -> ApprovalId {
        let id = ApprovalId::new_v7();
        let asked = event(TraceEvent::ApprovalRequested(ApprovalRequested {
            id,
            kind: ApprovalKind::Approval,
            tool: "refund".into(),
            args: "{\"order\": 42}".into(),
            timeout_secs: 3600,
        }));
        let request = json!({"id": id, "key": format!("k{turn}"), "call_id": "call-1", "turn_seq": turn, "kind": "approval",
            "tool": "refund", "args": {"order": 42}, "args_hash": "ab12", "timeout_secs": 3600});
        self.commit(
            api,
            "waiting",
            turn,
            seq,
            vec![asked],
            json!({"approvals": [request]}),
        )
        .await;
        id
    }
}

async fn the_card_is_public_and_says_who_the_agent_is(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let path = format!("/a2a/{POOL}/{AGENT}/.well-known/agent-card.json");
    let (status, body) = api.call(Method::GET, &path, None, None).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "an agent up did not record: {body}"
    );
    assert_eq!(body["code"], "not_found");
    // Recorded without a card: still not an A2A agent.
    api.admin(
        Method::PUT,
        format!("/v1/pools/{POOL}/agents/{AGENT}"),
        Some(json!({"replicas": 1})),
    )
    .await;
    assert_eq!(
        api.call(Method::GET, &path, None, None).await.0,
        StatusCode::NOT_FOUND
    );
    served(&api).await;
    let (status, card) = api.call(Method::GET, &path, None, None).await;
    assert_eq!(status, StatusCode::OK, "{card}");
    assert_eq!(card["name"], "The clerk");
    assert_eq!(card["description"], "Sells and refunds");
    assert_eq!(card["skills"][0]["id"], "refund");
    assert_eq!(card["skills"][0]["examples"][0], "refund order 42");
    let interface = &card["supportedInterfaces"][0];
    let host = api.url.trim_start_matches("http://");
    assert_eq!(
        interface["url"],
        format!("http://{host}/a2a/{POOL}/{AGENT}")
    );
    assert_eq!(
        (
            interface["protocolBinding"].as_str(),
            interface["protocolVersion"].as_str()
        ),
        (Some("JSONRPC"), Some("1.0"))
    );
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["capabilities"]["pushNotifications"], true);
    assert!(card["securitySchemes"]["bearer"].is_object(), "{card}");
    // A card out of bounds is refused, the field named; nothing changes.
    let bad = json!({"replicas": 1, "card": {"skills": [{"id": "Refund", "name": "x"}]}});
    let (status, body) = api
        .admin(
            Method::PUT,
            format!("/v1/pools/{POOL}/agents/{AGENT}"),
            Some(bad),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("card.skills[0].id"),
        "{body}"
    );
    assert_eq!(
        api.call(Method::GET, &path, None, None).await.1["name"],
        "The clerk"
    );
    api.stop().await;
}

async fn a2a_tokens_call_their_pools_agents_only(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let token = served(&api).await;
    // Its own pool's endpoint: yes.
    let (code, _) = error(
        &api,
        &token,
        "GetTask",
        json!({"id": "01936f5e-7c1a-7d3e-9f4b-2a6c8e0d1f35"}),
    )
    .await;
    assert_eq!(code, -32001);
    // Every other route: 403, saying what it is for.
    for (method, path) in [
        (Method::GET, "/v1/threads"),
        (Method::GET, "/v1/approvals"),
        (Method::POST, "/v1/tokens/a2a"),
    ] {
        let (status, body) = api
            .call(
                method,
                path,
                Some(&token),
                Some(json!({"pool": POOL, "name": "x"})),
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains("A2A endpoints"),
            "{body}"
        );
    }
    // Another pool's agents: 403 as a JSON-RPC error.
    let other = mint(&api, "bank", "partner").await;
    let (status, body) = rpc(&api, Some(&other), "GetTask", json!({"id": "x"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        (body["jsonrpc"].as_str(), body["error"]["code"].as_i64()),
        (Some("2.0"), Some(-32600))
    );
    // No token, a wrong one: 401 with a JSON-RPC error body; a runner token: 403.
    for bad in [None, Some("nxa2a1.e30.AAAA")] {
        let (status, body) = rpc(&api, bad, "GetTask", json!({"id": "x"})).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("A2A token"),
            "{body}"
        );
    }
    let runner = api.runner_token(ThreadId::new_v7()).await;
    assert_eq!(
        rpc(&api, Some(&runner), "GetTask", json!({"id": "x"}))
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    // The admin token is accepted.
    assert_eq!(
        error(&api, ADMIN, "GetTask", json!({"id": "x"})).await.0,
        -32001
    );
    // The card needs no token; lifetimes out of range are refused (expiry itself: auth.rs).
    let (status, _) = api
        .admin(
            Method::POST,
            "/v1/tokens/a2a",
            Some(json!({"pool": POOL, "name": "p", "ttl_secs": 59})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    // JSON-RPC's own refusals: not JSON, not a request, no such method, another version.
    let raw = api
        .client
        .post(format!("{}/a2a/{POOL}/{AGENT}", api.url))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), StatusCode::BAD_REQUEST);
    let body: Value = raw.json().await.unwrap();
    assert_eq!(
        (body["error"]["code"].as_i64(), &body["id"]),
        (Some(-32700), &Value::Null)
    );
    assert_eq!(
        error(&api, &token, "message/bogus", json!({})).await.0,
        -32601
    );
    let (code, message) = error(
        &api,
        &token,
        "SendMessage",
        json!({"message": {"role": "ROLE_USER"}}),
    )
    .await;
    assert_eq!(code, -32602);
    assert!(
        message.contains("messageId") || message.contains("parts"),
        "{message}"
    );
    let versioned = api
        .client
        .post(format!("{}/a2a/{POOL}/{AGENT}", api.url))
        .bearer_auth(&token)
        .header("A2A-Version", "0.3")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}))
        .send()
        .await
        .unwrap();
    let body: Value = versioned.json().await.unwrap();
    assert_eq!(
        (body["error"]["code"].as_i64(), body["id"].as_i64()),
        (Some(-32009), Some(1))
    );
    assert_eq!(
        error(&api, &token, "GetExtendedAgentCard", json!({}))
            .await
            .0,
        -32007
    );
    api.stop().await;
}

async fn a_task_goes_through_its_turn_and_is_answered_over_a2a(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let token = served(&api).await;
    let first = send(
        &api,
        &token,
        user("m-1", "refund order 42", Some("ctx-1"), None),
    )
    .await;
    assert_eq!(state(&first), "TASK_STATE_SUBMITTED");
    assert_eq!(first["contextId"], "ctx-1");
    let task = first["id"].as_str().unwrap().to_string();
    // The same messageId again: the same task, nothing filed.
    let again = send(
        &api,
        &token,
        user("m-1", "refund order 42", Some("ctx-1"), None),
    )
    .await;
    assert_eq!(again["id"], task.as_str());
    let (thread, seq) = place(&first);
    assert_eq!(
        count(
            &api,
            &format!("SELECT COUNT(*) FROM inbox WHERE thread_id = '{thread}'")
        )
        .await,
        1
    );
    assert_eq!(count(&api, "SELECT COUNT(*) FROM a2a_tasks").await, 1);
    // The context is a session of the agent.
    let (_, sessions) = api
        .admin(
            Method::GET,
            format!("/v1/sessions?pool={POOL}&agent={AGENT}&key=a2a:ctx-1"),
            None,
        )
        .await;
    assert_eq!(sessions[0]["thread_id"], thread.to_string());
    // A message naming no context starts one.
    let fresh = send(&api, &token, user("m-2", "hello", None, None)).await;
    assert_ne!(place(&fresh).0, thread);
    assert!(!fresh["contextId"].as_str().unwrap().is_empty());

    let mut r = runner(&api, thread).await;
    r.start(&api, 1, seq).await;
    assert_eq!(state(&get(&api, &token, &task).await), "TASK_STATE_WORKING");
    let approval = r.ask(&api, 1, seq).await;
    let waiting = get(&api, &token, &task).await;
    assert_eq!(state(&waiting), "TASK_STATE_INPUT_REQUIRED");
    let asks = waiting["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        asks.contains("`refund`") && asks.contains("approve"),
        "{asks}"
    );
    // An answer that is neither approve nor reject is refused, naming what to send.
    let (code, message) = error(&api, &token, "SendMessage",
        json!({"message": user("m-3", "maybe", None, Some(&task)), "configuration": {"returnImmediately": true}})).await;
    assert_eq!(code, -32602);
    assert!(message.contains("approve"), "{message}");
    let answered = send(
        &api,
        &token,
        user("m-4", "approve: checked the order", None, Some(&task)),
    )
    .await;
    assert_eq!(state(&answered), "TASK_STATE_WORKING");
    let (_, decided) = api
        .admin(Method::GET, format!("/v1/approvals/{approval}"), None)
        .await;
    assert_eq!(
        (decided["status"].as_str(), decided["decided_by"].as_str()),
        (Some("approved"), Some("a2a:partner"))
    );
    assert_eq!(decided["reason"], "checked the order");
    // The answer resent: nothing more.
    let resent = send(
        &api,
        &token,
        user("m-4", "approve: checked the order", None, Some(&task)),
    )
    .await;
    assert_eq!(state(&resent), "TASK_STATE_WORKING");
    assert_eq!(count(&api, "SELECT COUNT(*) FROM a2a_messages").await, 3);

    r.complete(&api, 1, seq, "Refunded order 42.", None).await;
    let done = get(&api, &token, &task).await;
    assert_eq!(state(&done), "TASK_STATE_COMPLETED");
    assert_eq!(done["artifacts"][0]["artifactId"], format!("{task}-reply"));
    assert_eq!(done["artifacts"][0]["name"], "reply");
    assert_eq!(
        done["artifacts"][0]["parts"][0]["text"],
        "Refunded order 42."
    );
    let history = done["history"].as_array().unwrap();
    assert_eq!(
        history.len(),
        3,
        "the message, the answer, the reply: {done}"
    );
    assert_eq!(history[2]["role"], "ROLE_AGENT");
    assert_eq!(done["metadata"]["ninetrix"]["turn"], 1);
    let short = ok(
        &api,
        &token,
        "GetTask",
        json!({"id": task, "historyLength": 1}),
    )
    .await;
    assert_eq!(short["history"].as_array().unwrap().len(), 1);
    // A message to an ended task is refused, saying to send a new one in its context.
    let (code, message) = error(
        &api,
        &token,
        "SendMessage",
        json!({"message": user("m-5", "and another", None, Some(&task))}),
    )
    .await;
    assert_eq!(code, -32004);
    assert!(
        message.contains("COMPLETED") && message.contains("ctx-1"),
        "{message}"
    );
    // A second task of the context is the next message of the same thread.
    let second = send(
        &api,
        &token,
        user("m-6", "and order 43", Some("ctx-1"), None),
    )
    .await;
    assert_eq!(place(&second), (thread, seq + 1));
    // Files are not taken.
    let (code, _) = error(&api, &token, "SendMessage",
        json!({"message": {"messageId": "m-7", "role": "ROLE_USER", "parts": [{"url": "https://x.example/a.pdf"}]}})).await;
    assert_eq!(code, -32005);
    api.stop().await;
}

async fn a_blocking_send_answers_when_the_turn_ends(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let token = served(&api).await;
    let api = Arc::new(api);
    let sending = {
        let (api, token) = (api.clone(), token.clone());
        tokio::spawn(async move {
            ok(
                &api,
                &token,
                "SendMessage",
                json!({"message": user("b-1", "quick one", Some("ctx-b"), None)}),
            )
            .await
        })
    };
    // The message is filed (the send waits on): drive its turn.
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(&api, "SELECT COUNT(*) FROM a2a_tasks").await == 0 {
        assert!(Instant::now() < deadline, "the message was never filed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, sessions) = api
        .admin(
            Method::GET,
            format!("/v1/sessions?pool={POOL}&key=a2a:ctx-b"),
            None,
        )
        .await;
    let thread: ThreadId = sessions[0]["thread_id"].as_str().unwrap().parse().unwrap();
    let mut r = runner(&api, thread).await;
    r.start(&api, 1, 1).await;
    assert!(
        !sending.is_finished(),
        "a blocking send waits while the turn runs"
    );
    r.complete(&api, 1, 1, "done", None).await;
    let answered = tokio::time::timeout(Duration::from_secs(20), sending)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(state(&answered["task"]), "TASK_STATE_COMPLETED");
    assert_eq!(answered["task"]["artifacts"][0]["parts"][0]["text"], "done");
}

/// Reads SSE `data:` lines of a response as JSON-RPC responses.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    /// The next event's `result`, or `None` when the stream ended.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(at) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..at + 2).collect();
                let data: Vec<&str> = block
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim)
                    .collect();
                if data.is_empty() {
                    continue;
                }
                let response: Value = serde_json::from_str(&data.join("\n")).unwrap();
                assert_eq!(response["jsonrpc"], "2.0");
                return Some(response["result"].clone());
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.response.chunk())
                .await
                .expect("an event within 20 s")
                .unwrap()?;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

async fn a_stream_yields_the_task_its_updates_and_reply_text(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let token = served(&api).await;
    let response = api
        .client
        .post(format!("{}/a2a/{POOL}/{AGENT}", api.url))
        .bearer_auth(&token)
        .json(
            &json!({"jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage",
            "params": {"message": user("s-1", "stream it", Some("ctx-s"), None)}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut events = Events {
        response,
        buffer: String::new(),
    };
    let first = events.next().await.unwrap();
    assert_eq!(state(&first["task"]), "TASK_STATE_SUBMITTED");
    let (thread, seq) = place(&first["task"]);
    let mut r = runner(&api, thread).await;
    r.start(&api, 1, seq).await;
    let working = events.next().await.unwrap();
    assert_eq!(
        working["statusUpdate"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
    for (offset, text) in [(0, "Hel"), (3, "lo")] {
        let (status, body) = api
            .call(Method::POST, format!("/v1/runners/threads/{thread}/deltas"), Some(&r.token),
                Some(json!({"epoch": r.epoch, "turn_seq": 1, "round": 1, "offset": offset, "text": text})))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let piece = events.next().await.unwrap();
        let update = &piece["artifactUpdate"];
        assert_eq!(
            (update["append"].as_bool(), update["lastChunk"].as_bool()),
            (Some(true), Some(false))
        );
        assert_eq!(update["artifact"]["parts"][0]["text"], text);
        assert_eq!(
            update["artifact"]["artifactId"],
            format!("{}-reply", first["task"]["id"].as_str().unwrap())
        );
    }
    r.complete(&api, 1, seq, "Hello", None).await;
    let last = events.next().await.unwrap();
    assert_eq!(last["artifactUpdate"]["lastChunk"], true);
    assert_eq!(
        last["artifactUpdate"]["artifact"]["parts"][0]["text"],
        "Hello"
    );
    let completed = events.next().await.unwrap();
    assert_eq!(
        completed["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert!(
        events.next().await.is_none(),
        "the stream ends at the final state"
    );
    // An ended task cannot be subscribed to.
    let task = first["task"]["id"].as_str().unwrap();
    assert_eq!(
        error(&api, &token, "SubscribeToTask", json!({"id": task}))
            .await
            .0,
        -32004
    );
    api.stop().await;
}

async fn tasks_are_listed_newest_first_filtered_and_paged(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let token = served(&api).await;
    let a = send(&api, &token, user("l-1", "one", Some("ctx-a"), None)).await;
    let b = send(&api, &token, user("l-2", "two", Some("ctx-b"), None)).await;
    let c = send(&api, &token, user("l-3", "three", Some("ctx-a"), None)).await;
    let ids = |page: &Value| -> Vec<String> {
        page["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect()
    };
    let page = ok(&api, &token, "ListTasks", json!({"pageSize": 2})).await;
    assert_eq!(
        ids(&page),
        [c["id"].as_str().unwrap(), b["id"].as_str().unwrap()]
    );
    assert_eq!(page["totalSize"], 3);
    let token2 = page["nextPageToken"].as_str().unwrap();
    assert!(!token2.is_empty());
    let rest = ok(
        &api,
        &token,
        "tasks/list",
        json!({"pageSize": 2, "pageToken": token2}),
    )
    .await;
    assert_eq!(ids(&rest), [a["id"].as_str().unwrap()]);
    assert_eq!(rest["nextPageToken"], "");
    let in_a = ok(&api, &token, "ListTasks", json!({"contextId": "ctx-a"})).await;
    assert_eq!(
        ids(&in_a),
        [c["id"].as_str().unwrap(), a["id"].as_str().unwrap()]
    );
    let mut r = runner(&api, place(&b).0).await;
    r.start(&api, 1, 1).await;
    let working = ok(
        &api,
        &token,
        "ListTasks",
        json!({"status": "TASK_STATE_WORKING"}),
    )
    .await;
    assert_eq!(ids(&working), [b["id"].as_str().unwrap()]);
    assert_eq!(working["totalSize"], 1);
    assert_eq!(
        error(&api, &token, "ListTasks", json!({"pageSize": 101}))
            .await
            .0,
        -32602
    );
    assert_eq!(
        error(&api, &token, "ListTasks", json!({"pageToken": "zzz"}))
            .await
            .0,
        -32602
    );
    // Another agent's tasks are not listed.
    api.admin(
        Method::PUT,
        format!("/v1/pools/{POOL}/agents/other"),
        Some(json!({"replicas": 1, "card": {}})),
    )
    .await;
    let (_, other) = api
        .call(
            Method::POST,
            format!("/a2a/{POOL}/other"),
            Some(&token),
            Some(json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})),
        )
        .await;
    assert_eq!(other["result"]["totalSize"], 0, "{other}");
    api.stop().await;
}

async fn cancel_stops_a_running_task_and_refuses_the_others(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let token = served(&api).await;
    let running = send(&api, &token, user("c-1", "long job", Some("ctx-c"), None)).await;
    let queued = send(&api, &token, user("c-2", "after it", Some("ctx-c"), None)).await;
    let (thread, seq) = place(&running);
    let mut r = runner(&api, thread).await;
    r.start(&api, 1, seq).await;
    let (code, message) = error(&api, &token, "CancelTask", json!({"id": queued["id"]})).await;
    assert_eq!(code, -32002);
    assert!(message.contains("SUBMITTED"), "{message}");
    let api = Arc::new(api);
    let task = running["id"].as_str().unwrap().to_string();
    let cancelling = {
        let (api, token, task) = (api.clone(), token.clone(), task.clone());
        tokio::spawn(async move { ok(&api, &token, "CancelTask", json!({"id": task})).await })
    };
    // The cancel is stored in the thread's inbox, by the token's holder, once.
    let deadline = Instant::now() + Duration::from_secs(20);
    let cancels = format!(
        "SELECT COUNT(*) FROM inbox WHERE thread_id = '{thread}' AND control = 'cancel' AND sender = 'a2a:partner'"
    );
    while count(&api, &cancels).await == 0 {
        assert!(Instant::now() < deadline, "no cancel stored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    r.complete(
        &api,
        1,
        seq,
        "",
        Some(StoppedBy::Cancelled {
            seq: 3,
            by: "a2a:partner".into(),
        }),
    )
    .await;
    let cancelled = tokio::time::timeout(Duration::from_secs(20), cancelling)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(state(&cancelled), "TASK_STATE_CANCELED");
    assert_eq!(count(&api, &cancels).await, 1);
    // An ended task cannot be cancelled.
    assert_eq!(
        error(&api, &token, "CancelTask", json!({"id": task}))
            .await
            .0,
        -32002
    );
}

/// What a loopback webhook receiver got: each request's headers and body.
type Received = Arc<Mutex<Vec<(axum::http::HeaderMap, Vec<u8>)>>>;

/// A webhook receiver on a loopback port: its URL and what it got.
async fn receiver() -> (String, Received) {
    let got: Received = Arc::default();
    let keep = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let keep = keep.clone();
                async move {
                    keep.lock().unwrap().push((headers, body.to_vec()));
                    StatusCode::OK
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, got)
}

/// The states delivered so far, in order, each checked: its token, signature and name.
fn delivered(got: &Received, task: &str) -> Vec<String> {
    got.lock()
        .unwrap()
        .iter()
        .map(|(headers, body)| {
            let h = |n: &str| headers[n].to_str().unwrap().to_string();
            assert_eq!(h("x-a2a-notification-token"), "push-secret");
            assert_eq!(h("authorization"), "Bearer receiver-cred");
            let ts: i64 = h("x-ninetrix-timestamp").parse().unwrap();
            assert_eq!(
                h("x-ninetrix-signature"),
                ninetrix_proto::notify::signature(b"push-secret", ts, body)
            );
            let pushed: Value = serde_json::from_slice(body).unwrap();
            assert_eq!(pushed["task"]["id"], task);
            let state = pushed["task"]["status"]["state"]
                .as_str()
                .unwrap()
                .to_string();
            assert_eq!(h("x-ninetrix-delivery"), format!("{task}:{state}"));
            state
        })
        .collect()
}

/// Waits until `n` pushes arrived.
async fn pushes(got: &Received, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.lock().unwrap().len() < n {
        assert!(
            Instant::now() < deadline,
            "{} pushes, not {n}",
            got.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn pushes_are_signed_once_per_state_and_survive_a_restart(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let token = served(&api).await;
    let (url, got) = receiver().await;
    let config = json!({"url": url, "token": "push-secret", "authentication": {"scheme": "Bearer", "credentials": "receiver-cred"}});
    let result = ok(
        &api,
        &token,
        "SendMessage",
        json!({"message": user("p-1", "push me", Some("ctx-p"), None),
        "configuration": {"returnImmediately": true, "taskPushNotificationConfig": config}}),
    )
    .await;
    let task = result["task"]["id"].as_str().unwrap().to_string();
    pushes(&got, 1).await;
    assert_eq!(delivered(&got, &task), ["TASK_STATE_SUBMITTED"]);
    let listed = ok(
        &api,
        &token,
        "ListTaskPushNotificationConfigs",
        json!({"taskId": task}),
    )
    .await;
    assert_eq!(listed["configs"][0]["url"], url.as_str());
    let (thread, seq) = place(&result["task"]);
    let mut r = runner(&api, thread).await;
    r.start(&api, 1, seq).await;
    pushes(&got, 2).await;
    // The API restarts mid-task; the remaining state is delivered by the new process.
    let api = api.restart().await;
    r.complete(&api, 1, seq, "pushed", None).await;
    pushes(&got, 3).await;
    // The final state is recorded as delivered: nothing more is sent for the task.
    let recorded = "SELECT COUNT(*) FROM a2a_push_configs WHERE last_state = 'TASK_STATE_COMPLETED' AND attempts = 0";
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(&api, recorded).await == 0 {
        assert!(
            Instant::now() < deadline,
            "the final delivery was never recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        delivered(&got, &task),
        [
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED"
        ]
    );
    // The config CRUD.
    let created = ok(
        &api,
        &token,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task, "id": "second", "url": "https://hooks.example.com/a2a"}),
    )
    .await;
    assert_eq!(created["id"], "second");
    let one = ok(
        &api,
        &token,
        "GetTaskPushNotificationConfig",
        json!({"taskId": task, "id": "second"}),
    )
    .await;
    assert_eq!(one["url"], "https://hooks.example.com/a2a");
    ok(
        &api,
        &token,
        "DeleteTaskPushNotificationConfig",
        json!({"taskId": task, "id": "second"}),
    )
    .await;
    assert_eq!(
        error(
            &api,
            &token,
            "GetTaskPushNotificationConfig",
            json!({"taskId": task, "id": "second"})
        )
        .await
        .0,
        -32001
    );
    assert_eq!(
        error(
            &api,
            &token,
            "CreateTaskPushNotificationConfig",
            json!({"taskId": task, "url": "ftp://x"})
        )
        .await
        .0,
        -32602
    );
    api.stop().await;
}

both_backends!(
    the_card_is_public_and_says_who_the_agent_is,
    a2a_tokens_call_their_pools_agents_only,
    a_task_goes_through_its_turn_and_is_answered_over_a2a,
    a_blocking_send_answers_when_the_turn_ends,
    a_stream_yields_the_task_its_updates_and_reply_text,
    tasks_are_listed_newest_first_filtered_and_paged,
    cancel_stops_a_running_task_and_refuses_the_others,
    pushes_are_signed_once_per_state_and_survive_a_restart,
);

/// The official A2A Python SDK's client against the API: it resolves the card, sends a message,
/// reads the task and lists the agent's tasks — through its own JSON-RPC transport, so the wire
/// is what a real client sends and expects. Skipped without the SDK (a failure with
/// `NINETRIX_REQUIRE_A2A_SDK=1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_resolves_sends_gets_and_lists() {
    let Some(python) = ninetrix_testkit::require(ninetrix_testkit::Need::A2aSdk) else {
        return;
    };
    let api = TestApi::start(Backend::Sqlite).await.unwrap();
    let token = served(&api).await;
    let base = format!("{}/a2a/{POOL}/{AGENT}", api.url);
    let output = tokio::process::Command::new(&python)
        .args(["-c", PYTHON_CLIENT, &base])
        .env("A2A_TOKEN", &token)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("python starts");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "the Python client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], format!("card The clerk {base}"));
    let sent: Vec<&str> = lines[1].split(' ').collect();
    assert_eq!(
        (sent[0], sent[2]),
        ("sent", "TASK_STATE_SUBMITTED"),
        "{stdout}"
    );
    assert_eq!(
        lines[2],
        format!("got {} TASK_STATE_SUBMITTED py-ctx", sent[1])
    );
    assert_eq!(lines[3], "listed 1 1");
    // The task is ours: filed in the context's session under the SDK's messageId.
    let task = get(&api, &token, sent[1]).await;
    assert_eq!(task["history"][0]["parts"][0]["text"], "hello from python");
    api.stop().await;
}

/// The Python client's script: argv[1] is the agent's base URL, `A2A_TOKEN` its token.
const PYTHON_CLIENT: &str = r#"
import asyncio, os, sys
import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (GetTaskRequest, ListTasksRequest, Message, Part, Role,
    SendMessageRequest, TaskState)

async def main(base):
    headers = {"Authorization": "Bearer " + os.environ["A2A_TOKEN"]}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        print("card", card.name, card.supported_interfaces[0].url)
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False, polling=True)).create(card)
        message = Message(message_id="py-1", context_id="py-ctx", role=Role.ROLE_USER,
                          parts=[Part(text="hello from python")])
        task = None
        async for event in client.send_message(SendMessageRequest(message=message)):
            task = event.task
        print("sent", task.id, TaskState.Name(task.status.state))
        got = await client.get_task(GetTaskRequest(id=task.id))
        print("got", got.id, TaskState.Name(got.status.state), got.context_id)
        listed = await client.list_tasks(ListTasksRequest())
        print("listed", len(listed.tasks), listed.total_size)

asyncio.run(main(sys.argv[1]))
"#;
