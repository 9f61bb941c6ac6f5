//! Every route × every kind of caller → the expected status.

use ninetrix_proto::{ApprovalId, ThreadId};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{ADMIN, Backend, TestApi, checkpoint, message};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Nobody,
    Garbage,
    Admin,
    RunnerOfThisThread,
    RunnerOfAnotherThread,
    /// The runner of another pool's thread that tried to relabel its thread as this thread's
    /// pool, agent and replica (refused: labels are fixed), then calls this thread's routes.
    RelabelledRunner,
    /// An approver token of the thread's pool.
    ApproverOfThisPool,
    /// An approver token of another pool.
    ApproverOfAnotherPool,
    /// The agent token of the thread's agent (pool `p`, agent `a`).
    AgentOfThisAgent,
    /// The agent token of another agent.
    AgentOfAnotherAgent,
    /// An A2A token of the thread's pool.
    A2aOfThisPool,
    /// An A2A token of another pool.
    A2aOfAnotherPool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    Runner,
    Admin,
    /// The admin or an approver: an approver of another pool does not see the request (404).
    Approvals,
    /// A listing for the admin or an approver (another pool's approver sees its own, empty).
    ApprovalList,
    /// The admin or the agent's own token: a replica finding its sessions' work or its thread.
    AgentWork,
    /// The admin or an A2A token of the pool: the A2A endpoint (its refusals are JSON-RPC).
    A2a,
    Public,
}

/// The object the object routes name (the SHA-256 of `x`).
const OBJECT: &str = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881";

struct Route {
    method: Method,
    path: &'static str,
    access: Access,
    ok: StatusCode,
    body: fn(u64) -> Option<Value>,
}

fn routes() -> Vec<Route> {
    use Access::*;
    let none: fn(u64) -> Option<Value> = |_| None;
    vec![
        Route {
            method: Method::POST,
            path: "/v1/runners/threads/{t}/claim",
            access: Runner,
            ok: StatusCode::OK,
            body: |_| Some(json!({})),
        },
        Route {
            method: Method::GET,
            path: "/v1/runners/threads/{t}/latest",
            access: Runner,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/runners/threads/{t}/identity",
            access: Runner,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/runners/threads/{t}/checkpoints",
            access: Runner,
            ok: StatusCode::CREATED,
            body: |e| Some(checkpoint(e, 1, None, vec![message("assistant", "a")], 2)),
        },
        Route {
            method: Method::POST,
            path: "/v1/runners/threads/{t}/commit",
            access: Runner,
            ok: StatusCode::CREATED,
            body: |e| {
                let mut body = checkpoint(e, 1, None, vec![message("assistant", "a")], 2);
                body["intents"] = json!([{"key": "c1", "turn_seq": 1, "tool": "t", "args": {}, "effect": "write"}]);
                body["outcomes"] = json!([{"key": "k", "ok": true, "result": "r"}]);
                Some(body)
            },
        },
        Route {
            method: Method::GET,
            path: "/v1/runners/threads/{t}/tool-calls?turn_seq=1",
            access: Runner,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/runners/threads/{t}/tool-calls",
            access: Runner,
            ok: StatusCode::CREATED,
            body: |e| {
                Some(
                    json!({"epoch": e, "key": "new", "turn_seq": 1, "tool": "t", "args": {}, "effect": "read"}),
                )
            },
        },
        Route {
            method: Method::PUT,
            path: "/v1/runners/threads/{t}/tool-calls/k",
            access: Runner,
            ok: StatusCode::OK,
            body: |e| Some(json!({"epoch": e, "ok": true, "result": "r"})),
        },
        Route {
            method: Method::GET,
            path: "/v1/runners/threads/{t}/inbox",
            access: Runner,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/runners/threads/{t}/events",
            access: Runner,
            ok: StatusCode::CREATED,
            body: |e| Some(json!({"epoch": e, "events": [{"type": "x"}]})),
        },
        Route {
            method: Method::GET,
            path: "/v1/runners/threads/{t}/approvals?turn_seq=1",
            access: Runner,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/runners/threads/{t}/handoffs",
            access: Runner,
            ok: StatusCode::CREATED,
            body: |e| {
                Some(
                    json!({"epoch": e, "turn_seq": 1, "key": "h1", "call_id": "c9", "agent": "b",
                            "task": "t", "timeout_secs": 60}),
                )
            },
        },
        Route {
            method: Method::GET,
            path: "/v1/runners/threads/{t}/handoffs?turn_seq=1",
            access: Runner,
            ok: StatusCode::OK,
            body: none,
        },
        // Going back (issue 41): the thread has ended no turn, so the turn routes answer 404
        // and a rewind finds its waiting message (409 busy) — past the access check all the
        // same; an object upload sent as JSON is 415 once the caller may make it.
        Route {
            method: Method::GET,
            path: "/v1/runners/threads/{t}/turns/1",
            access: Runner,
            ok: StatusCode::NOT_FOUND,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/runners/threads/{t}/objects/missing",
            access: Runner,
            ok: StatusCode::OK,
            body: |_| Some(json!({"ids": [OBJECT]})),
        },
        Route {
            method: Method::PUT,
            path: "/v1/runners/threads/{t}/objects/2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881?kind=blob",
            access: Runner,
            ok: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            body: |_| Some(json!({})),
        },
        Route {
            method: Method::GET,
            path: "/v1/runners/threads/{t}/objects/2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881",
            access: Runner,
            ok: StatusCode::NOT_FOUND,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/threads/{t}/turns",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/threads/{t}/turns/1/diff",
            access: Admin,
            ok: StatusCode::NOT_FOUND,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/threads/{t}/fork",
            access: Admin,
            ok: StatusCode::NOT_FOUND,
            body: |_| Some(json!({"at_turn": 1})),
        },
        Route {
            method: Method::POST,
            path: "/v1/threads/{t}/replays",
            access: Admin,
            ok: StatusCode::NOT_FOUND,
            body: |_| Some(json!({"from_turn": 1, "to_turn": 1, "key": "k", "candidate": "c"})),
        },
        Route {
            method: Method::GET,
            path: "/v1/threads/{t}/turns/1/record",
            access: Admin,
            ok: StatusCode::NOT_FOUND,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/evals",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/evals/s",
            access: Admin,
            ok: StatusCode::NOT_FOUND,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/evals/s/members",
            access: Admin,
            ok: StatusCode::NOT_FOUND,
            body: |_| Some(json!({"thread": "01936f5e-7c1a-7d3e-9f4b-2a6c8e0d1f35"})),
        },
        Route {
            method: Method::DELETE,
            path: "/v1/evals/s/members/9",
            access: Admin,
            ok: StatusCode::NOT_FOUND,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/evals/s/runs",
            access: Admin,
            ok: StatusCode::CREATED,
            body: |_| Some(json!({"key": "r", "candidate": "c", "cases": [], "passed": true})),
        },
        Route {
            method: Method::POST,
            path: "/v1/threads/{t}/rewind",
            access: Admin,
            ok: StatusCode::CONFLICT,
            body: |_| Some(json!({"to_turn": 1})),
        },
        Route {
            method: Method::POST,
            path: "/v1/runners/threads/{t}/deltas",
            access: Runner,
            ok: StatusCode::ACCEPTED,
            body: |e| {
                Some(json!({"epoch": e, "turn_seq": 1, "round": 1, "offset": 0, "text": "Hel"}))
            },
        },
        Route {
            method: Method::POST,
            path: "/v1/runners/threads/{t}/model-leases",
            access: Runner,
            ok: StatusCode::OK,
            body: |e| {
                Some(
                    json!({"epoch": e, "limiter": "openai@api.openai.com#0123456789ab", "provider": "openai",
                    "limits": {"max_in_flight": 100}}),
                )
            },
        },
        Route {
            method: Method::POST,
            path: "/v1/runners/threads/{t}/model-leases/{l}/renew",
            access: Runner,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/runners/threads/{t}/model-leases/{l}/release",
            access: Runner,
            ok: StatusCode::NO_CONTENT,
            body: |_| Some(json!({"input_tokens": 10, "cost_usd": 0.01})),
        },
        Route {
            method: Method::GET,
            path: "/v1/threads/{t}/spend?timezone=Europe/Paris",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/runners/threads/{t}/memory",
            access: Runner,
            ok: StatusCode::OK,
            body: |e| {
                Some(json!({"epoch": e, "op_key": "m1",
                    "op": {"command": "create", "path": "/memories/new.md", "file_text": "x"}}))
            },
        },
        Route {
            method: Method::GET,
            path: "/v1/memories?pool=p",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::DELETE,
            path: "/v1/memories?pool=p",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/memories/file?pool=p&agent=a&path=/memories/m.md",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::PUT,
            path: "/v1/memories/file?pool=p&agent=a&path=/memories/m.md",
            access: Admin,
            ok: StatusCode::OK,
            body: |_| Some(json!({"content": "edited"})),
        },
        Route {
            method: Method::DELETE,
            path: "/v1/memories/file?pool=p&agent=a&path=/memories/m.md",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/handoffs",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::PUT,
            path: "/v1/pools/p/triggers",
            access: Admin,
            ok: StatusCode::OK,
            body: |_| Some(triggers()),
        },
        Route {
            method: Method::GET,
            path: "/v1/triggers",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/pools/p/triggers/nightly/history",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/pools/p/triggers/nightly/fire",
            access: Admin,
            ok: StatusCode::CREATED,
            body: |_| Some(json!({})),
        },
        // No token is the authentication of a webhook, whoever sends one: an unsigned delivery
        // is refused for everybody alike.
        Route {
            method: Method::POST,
            path: "/v1/hooks/p/gh",
            access: Public,
            ok: StatusCode::UNAUTHORIZED,
            body: |_| Some(json!({"action": "opened"})),
        },
        Route {
            method: Method::GET,
            path: "/v1/approvals",
            access: ApprovalList,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/approvals/{a}",
            access: Approvals,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/approvals/{a}/decision",
            access: Approvals,
            ok: StatusCode::OK,
            body: |_| Some(json!({"decision": "approve"})),
        },
        Route {
            method: Method::POST,
            path: "/v1/tokens/approver",
            access: Admin,
            ok: StatusCode::CREATED,
            body: |_| Some(json!({"pool": "p", "name": "n"})),
        },
        Route {
            method: Method::POST,
            path: "/v1/sessions",
            access: Admin,
            ok: StatusCode::CREATED,
            body: |_| {
                Some(json!({"pool": "p", "agent": "a", "key": ThreadId::new_v7().to_string()}))
            },
        },
        Route {
            method: Method::GET,
            path: "/v1/sessions",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::PUT,
            path: "/v1/pools/p/agents/a",
            access: Admin,
            ok: StatusCode::NO_CONTENT,
            body: |_| Some(json!({"replicas": 2})),
        },
        Route {
            method: Method::POST,
            path: "/v1/tokens/agent",
            access: Admin,
            ok: StatusCode::CREATED,
            body: |_| Some(json!({"pool": "p", "agent": "a"})),
        },
        Route {
            method: Method::GET,
            path: "/v1/runners/pools/p/agents/a/sessions?replica=1",
            access: AgentWork,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/runners/pools/p/agents/a/replicas/1",
            access: AgentWork,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/threads",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/threads/{t}",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::DELETE,
            path: "/v1/threads/{t}",
            access: Admin,
            ok: StatusCode::NO_CONTENT,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/threads/{t}/checkpoints",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/threads/{t}/checkpoints/1",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/threads/{t}/tool-calls",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/threads/{t}/messages",
            access: Admin,
            ok: StatusCode::CREATED,
            body: |_| Some(json!({"content": "hi"})),
        },
        Route {
            method: Method::POST,
            path: "/v1/threads/{t}/cancel",
            access: Admin,
            ok: StatusCode::CREATED,
            body: |_| Some(json!({"reason": "stop"})),
        },
        Route {
            method: Method::GET,
            path: "/v1/threads/{t}/events",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/v1/threads/{t}/events/stream",
            access: Admin,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/tokens/runner",
            access: Admin,
            ok: StatusCode::CREATED,
            body: |_| Some(json!({"thread_id": ThreadId::new_v7()})),
        },
        Route {
            method: Method::GET,
            path: "/healthz",
            access: Public,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::GET,
            path: "/readyz",
            access: Public,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/v1/tokens/a2a",
            access: Admin,
            ok: StatusCode::CREATED,
            body: |_| Some(json!({"pool": "p", "name": "n"})),
        },
        Route {
            method: Method::GET,
            path: "/a2a/p/a/.well-known/agent-card.json",
            access: Public,
            ok: StatusCode::OK,
            body: none,
        },
        Route {
            method: Method::POST,
            path: "/a2a/p/a",
            access: A2a,
            ok: StatusCode::OK,
            body: |_| Some(json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})),
        },
        Route {
            method: Method::GET,
            path: "/openapi.json",
            access: Public,
            ok: StatusCode::OK,
            body: none,
        },
    ]
}

fn expected(route: &Route, who: Who) -> StatusCode {
    match (route.access, who) {
        (Access::Public, _) => route.ok,
        (_, Who::Nobody | Who::Garbage) => StatusCode::UNAUTHORIZED,
        (_, Who::Admin) => route.ok,
        (Access::Runner, Who::RunnerOfThisThread) => route.ok,
        (Access::Approvals | Access::ApprovalList, Who::ApproverOfThisPool) => route.ok,
        (Access::ApprovalList, Who::ApproverOfAnotherPool) => route.ok,
        (Access::Approvals, Who::ApproverOfAnotherPool) => StatusCode::NOT_FOUND,
        (Access::AgentWork, Who::AgentOfThisAgent) => route.ok,
        (Access::A2a, Who::A2aOfThisPool) => route.ok,
        // An A2A token calls the A2A endpoint of its pool's agents, nothing else; the endpoint
        // takes no other token.
        (_, Who::A2aOfThisPool | Who::A2aOfAnotherPool)
        | (
            Access::A2a,
            Who::RunnerOfThisThread
            | Who::RunnerOfAnotherThread
            | Who::RelabelledRunner
            | Who::ApproverOfThisPool
            | Who::ApproverOfAnotherPool
            | Who::AgentOfThisAgent
            | Who::AgentOfAnotherAgent,
        ) => StatusCode::FORBIDDEN,
        (
            Access::AgentWork,
            Who::AgentOfAnotherAgent
            | Who::RunnerOfThisThread
            | Who::RunnerOfAnotherThread
            | Who::RelabelledRunner
            | Who::ApproverOfThisPool
            | Who::ApproverOfAnotherPool,
        )
        | (
            Access::Runner | Access::Admin | Access::Approvals | Access::ApprovalList,
            Who::AgentOfThisAgent | Who::AgentOfAnotherAgent,
        ) => StatusCode::FORBIDDEN,
        (
            Access::Runner | Access::Admin,
            Who::RunnerOfAnotherThread
            | Who::RelabelledRunner
            | Who::ApproverOfThisPool
            | Who::ApproverOfAnotherPool,
        )
        | (
            Access::Approvals | Access::ApprovalList,
            Who::RunnerOfThisThread | Who::RunnerOfAnotherThread | Who::RelabelledRunner,
        )
        | (Access::Admin, Who::RunnerOfThisThread) => StatusCode::FORBIDDEN,
    }
}

/// A thread of pool `p` with one checkpoint (storing one pending request to a person), one
/// ledger intent (`k`), one event, one inbox message and one model lease; its agent `a` may hand
/// work to `b`. Pool `p`'s triggers: a schedule `nightly` and a webhook `gh`.
fn triggers() -> Value {
    json!({"triggers": [
        {"spec": {"name": "nightly", "agent": "a", "session": {"key": "trigger:nightly"},
            "kind": {"type": "schedule", "cron": "0 3 1 1 *", "timezone": "UTC", "message": "go",
                     "overlap": "skip", "catch_up": "last", "catch_up_window_secs": 3600}}},
        {"spec": {"name": "gh", "agent": "a", "session": "new",
            "kind": {"type": "webhook", "path": "gh", "message": "{{ action }}", "secret": "GH_SECRET",
                     "signature": "github", "tolerance_secs": 300, "rate_limit_per_minute": 10000,
                     "max_body_bytes": 65536}},
         "secret": "s3cret"}
    ]})
}

async fn prepare(api: &TestApi) -> (ThreadId, String, u64, ApprovalId, String) {
    let (status, body) = api
        .admin(Method::PUT, "/v1/pools/p/triggers", Some(triggers()))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Agent `a` is served over A2A (it has a card).
    for (agent, collaborators, card) in [
        ("a", json!(["b"]), json!({})),
        ("b", json!([]), Value::Null),
    ] {
        let (status, _) = api
            .admin(
                Method::PUT,
                format!("/v1/pools/p/agents/{agent}"),
                Some(json!({"replicas": 1, "collaborators": collaborators, "card": card})),
            )
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
    }
    // Replica 1 of `a` has its thread already (made by the first preparation): every allowed
    // caller gets it (200).
    let (status, body) = api
        .admin(
            Method::POST,
            "/v1/runners/pools/p/agents/a/replicas/1",
            None,
        )
        .await;
    assert!(status.is_success(), "{body}");
    // A memory file of agent `a` for the memory routes to read, edit and delete.
    let (status, body) = api
        .admin(
            Method::PUT,
            "/v1/memories/file?pool=p&agent=a&path=/memories/m.md",
            Some(json!({"content": "remembered"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let thread = ThreadId::new_v7();
    let token = api.runner_token(thread).await;
    let epoch = api.claim(thread, &token).await;
    let base = format!("/v1/runners/threads/{thread}");
    let approval = ApprovalId::new_v7();
    let mut first = checkpoint(epoch, 0, None, vec![message("user", "q")], 1);
    first["approvals"] = json!([{"id": approval, "key": "gated", "call_id": "c1", "turn_seq": 1, "kind": "approval",
        "tool": "t", "args": {}, "args_hash": "h", "timeout_secs": 3600}]);
    let setup = [
        (format!("{base}/commit"), first),
        (
            format!("{base}/tool-calls"),
            json!({"epoch": epoch, "key": "k", "turn_seq": 1, "tool": "t", "args": {}, "effect": "read"}),
        ),
        (
            format!("{base}/events"),
            json!({"epoch": epoch, "events": [{"type": "boot"}]}),
        ),
    ];
    for (path, body) in setup {
        assert!(
            api.admin(Method::POST, &path, Some(body))
                .await
                .0
                .is_success()
        );
    }
    let (status, lease) = api
        .admin(
            Method::POST,
            format!("{base}/model-leases"),
            Some(json!({"epoch": epoch, "limiter": "openai@api.openai.com#0123456789ab", "provider": "openai"})),
        )
        .await;
    assert_eq!(
        (status, &lease["status"]),
        (StatusCode::OK, &json!("granted")),
        "{lease}"
    );
    let lease = lease["lease_id"].as_str().unwrap().to_string();
    (thread, token, epoch, approval, lease)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_for_every_caller() {
    let api = TestApi::start(Backend::Sqlite).await.unwrap();
    let other_token = api.runner_token(ThreadId::new_v7()).await;
    // A runner of pool `q`, which will try to take pool `p`'s labels before each call.
    let relabelled_thread = ThreadId::new_v7();
    let (status, minted) = api
        .mint(
            relabelled_thread,
            json!({"pool": "q", "agent": "x", "replica": 1}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{minted}");
    let relabelled = minted["token"].as_str().unwrap().to_string();
    let approver = |pool: &'static str| {
        let api = &api;
        async move {
            let (status, body) = api
                .admin(
                    Method::POST,
                    "/v1/tokens/approver",
                    Some(json!({"pool": pool, "name": "approver"})),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
            body["token"].as_str().unwrap().to_string()
        }
    };
    let (this_pool, other_pool) = (approver("p").await, approver("q").await);
    let agent_token = |agent: &'static str| {
        let api = &api;
        async move {
            let (status, body) = api
                .admin(
                    Method::POST,
                    "/v1/tokens/agent",
                    Some(json!({"pool": "p", "agent": agent})),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
            body["token"].as_str().unwrap().to_string()
        }
    };
    let (this_agent, other_agent) = (agent_token("a").await, agent_token("b").await);
    let a2a_token = |pool: &'static str| {
        let api = &api;
        async move {
            let (status, body) = api
                .admin(
                    Method::POST,
                    "/v1/tokens/a2a",
                    Some(json!({"pool": pool, "name": "partner"})),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
            body["token"].as_str().unwrap().to_string()
        }
    };
    let (this_a2a, other_a2a) = (a2a_token("p").await, a2a_token("q").await);
    let mut failures = Vec::new();
    for route in routes() {
        for who in [
            Who::Nobody,
            Who::Garbage,
            Who::Admin,
            Who::RunnerOfThisThread,
            Who::RunnerOfAnotherThread,
            Who::RelabelledRunner,
            Who::ApproverOfThisPool,
            Who::ApproverOfAnotherPool,
            Who::AgentOfThisAgent,
            Who::AgentOfAnotherAgent,
            Who::A2aOfThisPool,
            Who::A2aOfAnotherPool,
        ] {
            let (thread, token, epoch, approval, lease) = prepare(&api).await;
            let auth = match who {
                Who::Nobody => None,
                Who::Garbage => Some("garbage".to_string()),
                Who::Admin => Some(ADMIN.to_string()),
                Who::RunnerOfThisThread => Some(token),
                Who::RunnerOfAnotherThread => Some(other_token.clone()),
                Who::RelabelledRunner => {
                    let (status, body) = api
                        .call(
                            Method::POST,
                            format!("/v1/runners/threads/{relabelled_thread}/claim"),
                            Some(&relabelled),
                            Some(json!({"pool": "p", "agent": "a", "replica": 1})),
                        )
                        .await;
                    assert_eq!(
                        (status, &body["code"]),
                        (StatusCode::CONFLICT, &json!("labels_fixed")),
                        "{body}"
                    );
                    Some(relabelled.clone())
                }
                Who::ApproverOfThisPool => Some(this_pool.clone()),
                Who::ApproverOfAnotherPool => Some(other_pool.clone()),
                Who::AgentOfThisAgent => Some(this_agent.clone()),
                Who::AgentOfAnotherAgent => Some(other_agent.clone()),
                Who::A2aOfThisPool => Some(this_a2a.clone()),
                Who::A2aOfAnotherPool => Some(other_a2a.clone()),
            };
            let path = route
                .path
                .replace("{t}", &thread.to_string())
                .replace("{a}", &approval.to_string())
                .replace("{l}", &lease);
            let mut req = api
                .client
                .request(route.method.clone(), format!("{}{path}", api.url));
            if let Some(auth) = &auth {
                req = req.bearer_auth(auth);
            }
            if let Some(body) = (route.body)(epoch) {
                req = req.json(&body);
            }
            // Headers only: the event stream never ends.
            let resp = req.send().await.unwrap();
            let status = resp.status();
            let want = expected(&route, who);
            if status != want {
                let body = if route.path.ends_with("stream") && status.is_success() {
                    String::new()
                } else {
                    resp.text().await.unwrap_or_default()
                };
                failures.push(format!(
                    "{} {} as {who:?}: got {status}, want {want} {body}",
                    route.method, route.path
                ));
            } else if !status.is_success() {
                let body: Value = resp.json().await.expect("errors are JSON");
                // The A2A endpoint refuses as JSON-RPC, every other route with `{code, message}`.
                let rpc = route.access == Access::A2a
                    && body["jsonrpc"] == "2.0"
                    && body["error"]["code"].is_i64();
                assert!(
                    rpc || (body["code"].is_string() && body["message"].is_string()),
                    "{body}"
                );
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_lists_every_route() {
    let doc = serde_json::to_value(ninetrix_api::openapi()).unwrap();
    let mut documented: Vec<String> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .map(move |m| format!("{} {path}", m.to_uppercase()))
        })
        .collect();
    documented.sort();
    let mut routed: Vec<String> = routes()
        .iter()
        .map(|r| {
            let path = r
                .path
                .split('?')
                .next()
                .unwrap()
                .replace("{t}", "{thread_id}")
                .replace("{a}", "{approval_id}")
                .replace("{l}", "{lease_id}")
                .replace("pools/p/agents/a", "pools/{pool}/agents/{agent}")
                .replace("tool-calls/k", "tool-calls/{key}")
                .replace("checkpoints/1", "checkpoints/{version}")
                .replace("pools/p/triggers", "pools/{pool}/triggers")
                .replace("triggers/nightly", "triggers/{name}")
                .replace("hooks/p/gh", "hooks/{pool}/{path}")
                .replace("replicas/1", "replicas/{replica}")
                .replace(OBJECT, "{object}")
                .replace("turns/1", "turns/{turn}")
                .replace("members/9", "members/{id}")
                .replace("evals/s", "evals/{suite}")
                .replace("a2a/p/a", "a2a/{pool}/{agent}");
            format!("{} {path}", r.method)
        })
        .collect();
    routed.sort();
    assert_eq!(documented, routed);
    // Served as JSON at /openapi.json too.
    let api = TestApi::start(Backend::Sqlite).await.unwrap();
    let (status, served) = api.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(
        (status, served["paths"].as_object().unwrap().len()),
        (StatusCode::OK, doc["paths"].as_object().unwrap().len())
    );
    assert!(served["components"]["securitySchemes"]["bearer"].is_object());
    api.stop().await;
}
