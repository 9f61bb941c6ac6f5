//! Handoffs between agents, as processes against a real `ninetrix api`: a chain lead →
//! researcher → writer, each agent one replica process whose requests go through a gate, killed
//! with SIGKILL at every step of a handoff — on the caller's side before and after the commit that
//! stores its intent, before and after the API files the task, before and after the commit that
//! stores the reply as the call's outcome; on the collaborator's side before its turn's first
//! commit and before and after the commit that carries its reply. Each time: every delegated task
//! is done once (one side effect, one session, one handoff per hop), and the lead's reply holds
//! the chain's answers. And a cancel of the lead while the writer works: every turn of the chain
//! ends `cancelled`, once, and every handoff with it.

mod support;

use std::time::{Duration, Instant};

use ninetrix_proto::api::{HandoffStatus, ThreadStatus};
use ninetrix_proto::{Block, Message, Role, ThreadId};
use serde_json::{Value, json};
use support::{Gate, Hold, Runner, Setup, setup};

const POOL: &str = "team";

/// A durable scripted agent of the pool with these collaborators and this script.
fn spec(name: &str, collaborators: &[&str], script: Value) -> Value {
    let mut tools =
        vec![json!({"name": "file_write", "effect": "idempotent", "effect_pinned": false})];
    tools.extend(collaborators.iter().map(|c| {
        json!({"name": format!("ask_{c}"), "effect": "write", "effect_pinned": true, "handoff": {"agent": c}})
    }));
    json!({
        "name": name,
        "metadata": {"name": null, "description": null, "role": "test agent", "goal": null, "instructions": null, "constraints": []},
        "runtime": {"provider": "scripted", "via": null, "model": "scripted", "base_url": null, "api_key_secret": null,
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": null,
                    "resources": {"cpu": null, "memory_bytes": null}, "script": script},
        "tools": tools,
        "execution": {"durability": true, "replicas": 1, "max_turns": 10, "task": null, "resume": "truncate",
                      "transfer_timeout_secs": 120},
        "governance": {"max_budget_per_run": null}, "env": {}, "secrets": [],
        "collaborators": collaborators,
    })
}

fn step(text: &str, calls: Value) -> Value {
    json!({"text": text, "tool_calls": calls})
}

/// lead asks researcher; researcher asks writer, then notes its work; writer writes.
fn chain() -> [(&'static str, Value); 3] {
    [
        (
            "lead",
            spec(
                "lead",
                &["researcher"],
                json!([
                    step(
                        "Asking.",
                        json!([{"name": "ask_researcher", "args": {"task": "find the answer", "context": "for the report"}}])
                    ),
                    step("lead: done", json!([])),
                ]),
            ),
        ),
        (
            "researcher",
            spec(
                "researcher",
                &["writer"],
                json!([
                    step(
                        "Delegating.",
                        json!([{"name": "ask_writer", "args": {"task": "write it down"}}])
                    ),
                    step(
                        "Noting.",
                        json!([{"name": "file_write", "args": {"path": "log.txt", "content": "researched\n", "mode": "append"}}])
                    ),
                    step("researcher: 42", json!([])),
                ]),
            ),
        ),
        (
            "writer",
            spec(
                "writer",
                &[],
                json!([
                    step(
                        "Writing.",
                        json!([{"name": "file_write", "args": {"path": "log.txt", "content": "written\n", "mode": "append"}}])
                    ),
                    step("writer: the draft", json!([])),
                ]),
            ),
        ),
    ]
}

/// One agent's replica process, with a gate of its own in front of the API.
struct Replica {
    spec: Value,
    thread: ThreadId,
    workspace: std::path::PathBuf,
    gate: Gate,
    process: Runner,
}

impl Replica {
    async fn start(s: &Setup, spec: Value) -> Replica {
        let name = spec["name"].as_str().unwrap().to_string();
        let workspace = s.dir.path().join(&name);
        std::fs::create_dir_all(&workspace).unwrap();
        let gate = Gate::start(&s.api.url).await;
        let thread = ThreadId::new_v7();
        let process = Replica::spawn(&gate, thread, &spec, &workspace);
        Replica {
            spec,
            thread,
            workspace,
            gate,
            process,
        }
    }

    fn spawn(gate: &Gate, thread: ThreadId, spec: &Value, workspace: &std::path::Path) -> Runner {
        Runner::start_with_env(
            &gate.url,
            thread,
            spec,
            workspace,
            &[
                ("AGENTFILE_POOL", POOL),
                ("AGENTFILE_REPLICA", "1"),
                ("AGENTFILE_AGENT_TOKEN", "insecure-dev"),
            ],
        )
    }

    /// SIGKILL, then the same replica again (Docker's restart).
    fn restart(&mut self) {
        self.process.kill();
        self.process = Replica::spawn(&self.gate, self.thread, &self.spec, &self.workspace);
    }

    /// Lines appended to `log.txt` across the sessions this replica served.
    fn side_effects(&self) -> usize {
        let sessions = self.workspace.join("sessions");
        std::fs::read_dir(&sessions)
            .map(|dirs| dirs.flatten().map(|d| support::lines(&d.path())).sum())
            .unwrap_or(0)
    }
}

/// The pool as `up` records it, and the three replicas.
async fn start_chain(s: &Setup) -> Vec<Replica> {
    start_chain_of(s, chain()).await
}

/// [`start_chain`] with these agents.
async fn start_chain_of(s: &Setup, agents: [(&'static str, Value); 3]) -> Vec<Replica> {
    let mut replicas = Vec::new();
    for (name, spec) in agents {
        let collaborators: Vec<String> = spec["collaborators"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect();
        s.admin
            .client
            .set_replicas(POOL, name, 1, &collaborators, None)
            .await
            .unwrap();
        replicas.push(Replica::start(s, spec).await);
    }
    replicas
}

/// The tool results of a history, in order.
fn results(history: &[Message]) -> Vec<(String, bool)> {
    history
        .iter()
        .flat_map(|m| m.blocks.iter())
        .filter_map(|b| match b {
            Block::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

/// Sends the lead its task, waits for the chain to finish, and checks that every delegated task
/// was done once and the answers went up the chain.
async fn run_and_check(s: &Setup, replicas: &[Replica], what: &str) {
    wait_idle(s, replicas[0].thread, 1, what).await;
    check(s, replicas, what).await;
}

async fn wait_idle(s: &Setup, thread: ThreadId, seq: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let latest = s.admin.client.latest(thread).await.ok().flatten();
        if latest
            .as_ref()
            .is_some_and(|l| l.state.inbox_cursor >= seq && l.state.status == ThreadStatus::Idle)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the lead did not finish: {:?}",
            latest.map(|l| l.state)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn check(s: &Setup, replicas: &[Replica], what: &str) {
    let lead = s.admin.latest(replicas[0].thread).await;
    if let Err(v) = ninetrix_runner::history::validate(&lead.history) {
        panic!("{what}: invalid transcript: {v}");
    }
    let last = lead.history.last().unwrap();
    assert_eq!(
        (last.role, last.text_content().as_str()),
        (Role::Assistant, "lead: done"),
        "{what}"
    );
    assert_eq!(
        results(&lead.history),
        [("researcher: 42".to_string(), false)],
        "{what}: the researcher's reply is the call's result"
    );
    // One handoff per hop, each replied; one session per collaborator.
    let handoffs = s
        .admin
        .client
        .list_handoffs(Some(POOL), None, None)
        .await
        .unwrap();
    let hops: Vec<(&str, &str, HandoffStatus)> = handoffs
        .iter()
        .map(|h| (h.from_agent.as_str(), h.agent.as_str(), h.status))
        .collect();
    assert_eq!(
        hops,
        [
            ("lead", "researcher", HandoffStatus::Replied),
            ("researcher", "writer", HandoffStatus::Replied)
        ],
        "{what}"
    );
    assert_eq!(handoffs[0].chain, ["lead"]);
    assert_eq!(handoffs[1].chain, ["lead", "researcher"]);
    let researcher = s.admin.latest(handoffs[0].target_thread_id).await;
    let answers = results(&researcher.history);
    assert_eq!(answers.len(), 2, "{what}: {answers:?}");
    assert_eq!(
        answers[0],
        ("writer: the draft".to_string(), false),
        "{what}: the writer's reply is the researcher's call's result"
    );
    assert!(!answers[1].1, "{what}: the note was written: {answers:?}");
    assert_eq!(
        researcher.history[0].text_content(),
        "Task from agent `lead`:\nfind the answer\n\nContext:\nfor the report"
    );
    for (agent, n) in [("researcher", 1), ("writer", 1)] {
        let sessions = s
            .admin
            .client
            .list_sessions(
                &ninetrix_client::ThreadQuery {
                    pool: Some(POOL.into()),
                    agent: Some(agent.into()),
                    ..Default::default()
                },
                None,
            )
            .await
            .unwrap();
        assert_eq!(sessions.len(), n, "{what}: {agent}'s sessions");
    }
    assert_eq!(
        replicas[1].side_effects(),
        1,
        "{what}: the researcher's note, once"
    );
    assert_eq!(
        replicas[2].side_effects(),
        1,
        "{what}: the writer's draft, once"
    );
}

/// The chain with one kill: `who` (0 lead, 1 researcher, 2 writer) is killed when its gate holds
/// `hold`, and restarted.
async fn chain_with_a_kill(who: usize, hold: Hold, what: &str) {
    let s = setup();
    let mut replicas = start_chain(&s).await;
    let held = replicas[who].gate.arm(hold);
    s.admin
        .send(replicas[0].thread, "what is the answer?", "q1")
        .await;
    tokio::time::timeout(Duration::from_secs(60), held)
        .await
        .unwrap_or_else(|_| panic!("{what}: the gate never saw its request"));
    replicas[who].restart();
    run_and_check(&s, &replicas, what).await;
}

fn hold(
    method: &'static str,
    path: &'static str,
    body: Vec<&'static str>,
    forward_first: bool,
) -> Hold {
    Hold {
        method,
        path_contains: path,
        body_contains: body,
        forward_first,
        lose_answer: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_three_replies_once_without_kills() {
    let s = setup();
    let replicas = start_chain(&s).await;
    s.admin
        .send(replicas[0].thread, "what is the answer?", "q1")
        .await;
    run_and_check(&s, &replicas, "no kill").await;
    // The caller's trace tells the handoff; the collaborator's says where its task came from.
    let kinds: Vec<String> = s
        .admin
        .client
        .events_after(replicas[0].thread, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.kind.clone())
        .collect();
    for kind in ["handoff_sent", "handoff_settled"] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} in {kinds:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caller_killed_at_each_step_of_its_handoff_delegates_once() {
    let intent = vec!["\"tool\":\"ask_researcher\"", "\"status\":\"waiting\""];
    let outcome = vec!["\"outcomes\":[{", "researcher: 42"];
    for (hold, what) in [
        (
            hold("POST", "/commit", intent.clone(), false),
            "lead: before its handoff's intent is stored",
        ),
        (
            hold("POST", "/commit", intent, true),
            "lead: after its handoff's intent is stored",
        ),
        (
            hold("POST", "/handoffs", vec!["researcher"], false),
            "lead: before the API files the task",
        ),
        (
            hold("POST", "/handoffs", vec!["researcher"], true),
            "lead: after the API filed the task",
        ),
        (
            hold("POST", "/commit", outcome.clone(), false),
            "lead: before the reply is stored as the outcome",
        ),
        (
            hold("POST", "/commit", outcome, true),
            "lead: after the reply is stored as the outcome",
        ),
    ] {
        chain_with_a_kill(0, hold, what).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_middle_of_the_chain_killed_at_each_step_does_each_task_once() {
    let reply = vec!["\"handoff_reply\"", "researcher: 42"];
    for (hold, what) in [
        (
            hold(
                "POST",
                "/commit",
                vec!["\"tool\":\"ask_writer\"", "\"status\":\"waiting\""],
                true,
            ),
            "researcher: after its own handoff's intent is stored",
        ),
        (
            hold("POST", "/handoffs", vec!["writer"], true),
            "researcher: after the API filed its task for the writer",
        ),
        (
            hold("POST", "/commit", reply.clone(), false),
            "researcher: before its reply is stored",
        ),
        (
            hold("POST", "/commit", reply, true),
            "researcher: after its reply is stored",
        ),
    ] {
        chain_with_a_kill(1, hold, what).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_collaborator_killed_at_each_step_does_its_task_once() {
    let reply = vec!["\"handoff_reply\"", "writer: the draft"];
    for (hold, what) in [
        (
            hold("POST", "/commit", vec!["Writing."], false),
            "writer: before its turn's first commit",
        ),
        (
            hold("POST", "/commit", reply.clone(), false),
            "writer: before its reply is stored",
        ),
        (
            hold("POST", "/commit", reply, true),
            "writer: after its reply is stored",
        ),
    ] {
        chain_with_a_kill(2, hold, what).await;
    }
}

/// A cancel of the lead while the writer sleeps on its task: the cancel settles both handoffs
/// `cancelled` and cascades to the researcher's and the writer's sessions, whose turns end
/// `cancelled` (the writer's sleep stopped after its grace), as does the lead's — each once —
/// and the researcher never writes its note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_the_lead_cancels_the_whole_chain_once() {
    use ninetrix_proto::api::CancelRequest;
    use ninetrix_proto::events::StoppedBy;
    let s = setup();
    let mut agents = chain();
    agents[2].1["runtime"]["script"] = json!([
        step(
            "Sleeping on it.",
            json!([{"name": "sleep", "args": {"seconds": 60}}])
        ),
        step("writer: the draft", json!([])),
    ]);
    agents[2].1["tools"] = json!([{"name": "sleep", "effect": "read", "effect_pinned": false}]);
    for (_, spec) in &mut agents {
        spec["execution"]["interrupt_grace_secs"] = 1.into();
    }
    let replicas = start_chain_of(&s, agents).await;
    let lead = replicas[0].thread;
    s.admin.send(lead, "what is the answer?", "q1").await;
    // The writer is asleep on its task once its session's thread is in a turn.
    let deadline = Instant::now() + Duration::from_secs(60);
    let writer_thread = loop {
        let handoffs = s
            .admin
            .client
            .list_handoffs(Some(POOL), None, None)
            .await
            .unwrap();
        if let Some(h) = handoffs.iter().find(|h| h.agent == "writer") {
            let t = s.admin.client.thread(h.target_thread_id).await.unwrap();
            if t.is_some_and(|t| t.status == ThreadStatus::InTurn) {
                break h.target_thread_id;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the writer never started its task"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let answer = s
        .admin
        .client
        .cancel(
            lead,
            &CancelRequest {
                by: Some("ana".into()),
                reason: None,
                dedupe_key: Some("c1".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(answer.handoffs_cancelled, 2, "{answer:?}");
    wait_idle(&s, lead, 2, "the cancelled lead").await;
    let handoffs = s
        .admin
        .client
        .list_handoffs(Some(POOL), None, None)
        .await
        .unwrap();
    let researcher_thread = handoffs[0].target_thread_id;
    assert!(
        handoffs
            .iter()
            .all(|h| h.status == HandoffStatus::Cancelled),
        "{handoffs:?}"
    );
    // Each thread of the chain: exactly one turn, ended cancelled.
    for (who, thread) in [
        ("lead", lead),
        ("researcher", researcher_thread),
        ("writer", writer_thread),
    ] {
        let deadline = Instant::now() + Duration::from_secs(60);
        let ended = loop {
            let ended = s.admin.turns(thread).await;
            if !ended.is_empty() || Instant::now() > deadline {
                break ended;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(ended.len(), 1, "{who}: {ended:?}");
        assert!(
            matches!(&ended[0].stopped_by, Some(StoppedBy::Cancelled { .. })),
            "{who}: {:?}",
            ended[0]
        );
        let latest = s.admin.latest(thread).await;
        ninetrix_runner::history::validate(&latest.history)
            .unwrap_or_else(|v| panic!("{who}: {v}"));
    }
    assert_eq!(
        replicas[1].side_effects(),
        0,
        "the researcher never noted anything"
    );
}
