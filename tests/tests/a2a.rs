//! A2A (issue 43, docs/a2a.md) end to end, as processes: a real `ninetrix api`, runners as
//! processes on a local stand-in for OpenAI's Chat Completions (the real streaming wire format),
//! and on the other side of every A2A call the official A2A Python SDK (`a2a-sdk` from PyPI):
//!
//! - **The SDK's client against a durable agent** (`tests/a2a/client.py`): the card (name,
//!   description, skills, the JSON-RPC interface, the bearer scheme); a blocking send and its
//!   reply artifact; a stream with the task, its state changes and the reply's text; get and list
//!   of a context (two tasks, one session); the input-required round trip — a question answered,
//!   and a gated write approved, by the next message of the task; a cancel of a running task.
//! - **Durable**: SIGKILL of the runner and of the API while a task runs → the client's `get`
//!   shows the task completing, with one turn; a resent send with the same `messageId` answers
//!   the same task and files nothing.
//! - **A remote agent written with the SDK's server** (`tests/a2a/remote_agent.py`) called by a
//!   runner's `ask_<name>`: the reply reaches the model, and a runner killed right after sending
//!   sends the same message again on resume, which makes no second remote task.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{A2aTokenRequest, ApprovalStatus};
use ninetrix_proto::events::{Decoded, TraceEvent};
use serde_json::{Value, json};
use support::openai::{chunk, end, stream_response, tool_call_response};
use support::{Runner, Setup, setup};

const POOL: &str = "front";
const TURN: Duration = Duration::from_secs(60);

/// The local stand-in for the model, by the last message of the request:
/// - a user message `sleep: N` calls `sleep` for N seconds, `ask: Q` asks a person Q
///   (`ask_human`), `write: F` writes file F (a gated `file_write`), `delegate: T` hands T to the
///   remote agent (`ask_remote`);
/// - a tool result is answered `Done: <result>`;
/// - anything else `Saw: <text>`, streamed a word at a time (the A2A stream's artifact text).
async fn stand_in() -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|body: String| async move { answer(&body) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn answer(body: &str) -> axum::response::Response {
    let request: Value = serde_json::from_str(body).unwrap();
    let messages = request["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    let content = last["content"].as_str().unwrap_or_default();
    let call = |name: &str, args: Value| tool_call_response(messages.len(), name, &args);
    if last["role"] == "user" {
        if let Some(secs) = content.strip_prefix("sleep: ") {
            return call(
                "sleep",
                json!({"seconds": secs.trim().parse::<f64>().unwrap()}),
            );
        }
        if let Some(question) = content.strip_prefix("ask: ") {
            return call("ask_human", json!({"question": question}));
        }
        if let Some(path) = content.strip_prefix("write: ") {
            return call("file_write", json!({"path": path, "content": "written\n"}));
        }
        if let Some(task) = content.strip_prefix("delegate: ") {
            return call("ask_remote", json!({"task": task}));
        }
    }
    let text = if last["role"] == "tool" {
        format!("Done: {content}")
    } else {
        format!("Saw: {content}")
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    for (i, word) in text.split(' ').enumerate() {
        let piece = if i == 0 {
            word.to_string()
        } else {
            format!(" {word}")
        };
        events.push(chunk(json!({"content": piece}), None));
    }
    events.push(chunk(json!({}), Some("stop")));
    events.push(end(50, 5));
    stream_response(events.concat())
}

/// The pool's agentfile: `desk`, served over A2A; `caller`, whose collaborator `remote` is the
/// A2A agent whose card is at `remote_card` (when given).
fn agentfile(model: &str, remote_card: Option<&str>) -> String {
    let caller = remote_card.map_or(String::new(), |card| {
        format!(
            r#"  caller:
    runtime:
      provider: openai
      model: fake
      base_url: {model}
      api_key_secret: FAKE_OPENAI_KEY
    collaborators:
      - name: remote
        a2a: {card}
        secret: REMOTE_TOKEN
    transfer_timeout: 2m
"#
        )
    });
    format!(
        r#"name: {POOL}
agents:
  desk:
    metadata:
      name: Front desk
      description: Answers questions about orders
    skills:
      - id: orders
        name: Order questions
        description: Looks orders up and answers
        tags: [orders, support]
        examples: ["Where is order 42?"]
    runtime:
      provider: openai
      model: fake
      base_url: {model}
      api_key_secret: FAKE_OPENAI_KEY
    tools: [sleep, ask_human, file_write]
    execution:
      interrupt_grace: 1s
    governance:
      human_approval:
        actions: [file_write]
{caller}"#
    )
}

/// The API, the stand-in, one runner per agent (replica 1 of the pool), and an A2A token.
struct Pool {
    s: Setup,
    file: String,
    runners: Vec<(String, Runner)>,
    token: String,
}

impl Pool {
    async fn start(remote_card: Option<&str>) -> Pool {
        let s = setup();
        let model = stand_in().await;
        let file = agentfile(&model, remote_card);
        let mut pool = Pool {
            s,
            file,
            runners: Vec::new(),
            token: String::new(),
        };
        let parsed = ninetrix_agentfile::parse("agentfile.yaml", &pool.file).unwrap();
        for agent in &parsed.agentfile.agents {
            pool.s
                .admin
                .client
                .set_replicas(
                    POOL,
                    &agent.name,
                    1,
                    &agent.collaborators,
                    Some(&agent.card_info()),
                )
                .await
                .unwrap();
            pool.start_runner(&agent.name, &[]);
        }
        pool.token = pool
            .s
            .admin
            .client
            .mint_a2a_token(&A2aTokenRequest {
                pool: POOL.into(),
                name: "partner".into(),
                ttl_secs: None,
            })
            .await
            .unwrap()
            .token;
        pool
    }

    /// Starts (or restarts) the runner of `agent`, with `env` beside the basics.
    fn start_runner(&mut self, agent: &str, env: &[(&str, &str)]) {
        let parsed = ninetrix_agentfile::parse("agentfile.yaml", &self.file).unwrap();
        let spec = parsed
            .agentfile
            .agents
            .iter()
            .find(|a| a.name == agent)
            .unwrap();
        let workspace = self.s.dir.path().join(agent);
        std::fs::create_dir_all(&workspace).unwrap();
        let mut all = vec![
            ("AGENTFILE_POOL", POOL),
            ("AGENTFILE_REPLICA", "1"),
            ("AGENTFILE_AGENT_TOKEN", "insecure-dev"),
            ("FAKE_OPENAI_KEY", "sk-fake"),
            ("REMOTE_TOKEN", "remote-secret-token"),
        ];
        all.extend_from_slice(env);
        let runner = Runner::start_with_env(
            &self.s.api.url,
            ThreadId::new_v7(),
            &serde_json::to_value(spec).unwrap(),
            &workspace,
            &all,
        );
        self.runners.retain(|(name, _)| name != agent);
        self.runners.push((agent.to_string(), runner));
    }

    fn runner(&mut self, agent: &str) -> &mut Runner {
        &mut self.runners.iter_mut().find(|(n, _)| n == agent).unwrap().1
    }

    /// The agent's A2A base URL (its card is under it, as the SDK resolves it).
    fn agent_url(&self, agent: &str) -> String {
        format!("{}/a2a/{POOL}/{agent}", self.s.api.url)
    }

    /// Runs the SDK's client (`tests/a2a/client.py`) with the pool's A2A token: what it printed,
    /// one JSON value per line.
    fn sdk(&self, args: &[&str]) -> Vec<Value> {
        sdk(&self.token, args)
    }

    /// [`Pool::sdk`], for one answer that must not be an error.
    fn sdk_one(&self, args: &[&str]) -> Value {
        let mut out = self.sdk(args);
        assert_eq!(out.len(), 1, "one answer to {args:?}: {out:?}");
        let v = out.remove(0);
        assert!(v.get("error").is_none(), "{args:?} failed: {v}");
        v
    }

    /// `get` of `task` until its state is `state` (deadline [`TURN`]).
    fn wait_state(&self, agent: &str, task: &str, state: &str) -> Value {
        let deadline = Instant::now() + TURN;
        loop {
            let got = self.sdk(&["get", &self.agent_url(agent), task]);
            if let Some(t) = got.first()
                && t["status"]["state"] == state
            {
                return t.clone();
            }
            assert!(
                Instant::now() < deadline,
                "task {task} never reached {state}: {got:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Sends `desk` a two-second task with `message_id` (not waiting for it) and waits until it
    /// reads `WORKING`: its ID.
    fn working(&self, message_id: &str) -> String {
        let url = self.agent_url("desk");
        let args = [
            "send",
            &url,
            "sleep: 2",
            "--message-id",
            message_id,
            "--return-immediately",
        ];
        let sent = self.sdk_one(&args);
        let id = sent["task"]["id"].as_str().unwrap().to_string();
        self.wait_state("desk", &id, "TASK_STATE_WORKING");
        id
    }

    /// Stops the API (SIGKILL) and starts it again on the same address and database.
    fn restart_api(&mut self, env: &[(&str, &str)]) {
        let listen = self.s.api.url.trim_start_matches("http://").to_string();
        let db = format!("sqlite://{}", self.s.dir.path().join("api.db").display());
        let _ = self.s.api.child.kill();
        let _ = self.s.api.child.wait();
        self.s.api = ninetrix_e2e::ApiProcess::start_with_env(
            &listen,
            &["--database", &db, "--insecure-dev"],
            env,
        );
    }

    /// The turns that answered inbox `seq` of `thread` (`turn_completed` events).
    async fn completions(&self, thread: ThreadId, seq: u64) -> usize {
        self.s
            .admin
            .trace(thread)
            .await
            .iter()
            .filter(|e| matches!(e, TraceEvent::TurnCompleted(t) if t.seq == seq))
            .count()
    }
}

/// Runs `tests/a2a/client.py ARGS` with `token`: its JSON lines.
fn sdk(token: &str, args: &[&str]) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("a2a/client.py");
    let out = Command::new(python())
        .arg(&script)
        .args(args)
        .env("A2A_TOKEN", token)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        out.status.success() || lines.iter().any(|l| l.get("error").is_some()),
        "client.py {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    lines
}

fn python() -> String {
    std::env::var("NINETRIX_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Whether the A2A SDK is here (skips the test, or fails it under `NINETRIX_REQUIRE_A2A_SDK=1`).
fn sdk_here() -> bool {
    ninetrix_testkit::require(ninetrix_testkit::Need::A2aSdk).is_some()
}

/// The text of the task's `reply` artifact.
fn reply(task: &Value) -> String {
    task["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| a["parts"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["text"].as_str().map(str::to_string))
        .collect()
}

/// The thread and inbox seq a task names (`metadata.ninetrix`; the SDK renders metadata as a
/// protobuf `Struct`, whose numbers are doubles).
fn located(task: &Value) -> (ThreadId, u64) {
    let n = &task["metadata"]["ninetrix"];
    let seq = n["seq"].as_f64().unwrap();
    (
        n["thread_id"].as_str().unwrap().parse().unwrap(),
        seq as u64,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_client_sends_streams_answers_and_cancels() {
    if !sdk_here() {
        return;
    }
    let p = Pool::start(None).await;
    let url = p.agent_url("desk");

    // The card, through the SDK's resolver (no token needed).
    let card = &sdk("", &["card", &url])[0];
    assert_eq!(card["name"], "Front desk");
    assert_eq!(card["description"], "Answers questions about orders");
    assert_eq!(card["skills"][0]["id"], "orders");
    assert_eq!(card["skills"][0]["tags"], json!(["orders", "support"]));
    assert_eq!(card["supportedInterfaces"][0]["url"], url);
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert_eq!(card["capabilities"]["streaming"], true);
    assert!(card["securitySchemes"]["bearer"].is_object(), "{card}");

    // A blocking send: the task comes back COMPLETED with the reply.
    let sent = p.sdk_one(&["send", &url, "hello there", "--message-id", "m-1"]);
    let task = &sent["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    assert_eq!(reply(task), "Saw: hello there");
    let context = task["contextId"].as_str().unwrap().to_string();
    let first = task["id"].as_str().unwrap().to_string();
    let (thread, seq) = located(task);

    // A stream in the same context: the task, its state changes, the reply's text, the end.
    let streamed = p.sdk(&[
        "send",
        &url,
        "stream me please",
        "--context-id",
        &context,
        "--stream",
    ]);
    assert!(
        streamed.iter().all(|e| e.get("error").is_none()),
        "{streamed:?}"
    );
    assert!(
        streamed[0]["task"].is_object(),
        "first the task: {streamed:?}"
    );
    let states: Vec<&str> = streamed
        .iter()
        .filter_map(|e| e["statusUpdate"]["status"]["state"].as_str())
        .collect();
    assert!(states.contains(&"TASK_STATE_WORKING"), "{states:?}");
    assert_eq!(states.last(), Some(&"TASK_STATE_COMPLETED"), "{states:?}");
    // The reply artifact as a client builds it: appended pieces, then the whole stored reply.
    let mut text = String::new();
    for update in streamed.iter().filter_map(|e| e.get("artifactUpdate")) {
        if update["append"] != true {
            text.clear();
        }
        for part in update["artifact"]["parts"].as_array().into_iter().flatten() {
            text.push_str(part["text"].as_str().unwrap_or_default());
        }
    }
    assert_eq!(text, "Saw: stream me please", "the reply's text, streamed");
    let second = streamed[0]["task"]["id"].as_str().unwrap().to_string();
    let (thread2, _) = located(&streamed[0]["task"]);
    assert_eq!(thread2, thread, "one context, one session thread");

    // get and list.
    let got = p.sdk_one(&["get", &url, &first]);
    assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(located(&got), (thread, seq));
    let listed = p.sdk_one(&["list", &url, "--context-id", &context]);
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [second.as_str(), first.as_str()], "newest first");

    // A question: INPUT_REQUIRED, answered by the next message of the task.
    let asked = p.sdk_one(&["send", &url, "ask: Which colour?", "--context-id", &context]);
    let task = &asked["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    let says = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(says.contains("Which colour?"), "{says}");
    let id = task["id"].as_str().unwrap().to_string();
    let answered = p.sdk_one(&[
        "send",
        &url,
        "blue",
        "--task-id",
        &id,
        "--context-id",
        &context,
    ]);
    assert_eq!(answered["task"]["id"], id.as_str(), "the same task goes on");
    let done = p.wait_state("desk", &id, "TASK_STATE_COMPLETED");
    assert!(reply(&done).contains("blue"), "{done}");

    // A gated write: INPUT_REQUIRED for the approval; `approve` lets it run.
    let gated = p.sdk_one(&["send", &url, "write: out.txt", "--context-id", &context]);
    let task = &gated["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{gated}"
    );
    let id = task["id"].as_str().unwrap().to_string();
    p.sdk_one(&[
        "send",
        &url,
        "approve",
        "--task-id",
        &id,
        "--context-id",
        &context,
    ]);
    p.wait_state("desk", &id, "TASK_STATE_COMPLETED");
    // In the session's workspace, under the replica's (`sessions/<thread>`).
    let session =
        p.s.dir
            .path()
            .join(format!("desk/sessions/{}", located(task).0));
    assert_eq!(
        std::fs::read_to_string(session.join("out.txt")).unwrap(),
        "written\n"
    );
    let decided =
        p.s.admin
            .client
            .list_approvals(&Default::default())
            .await
            .unwrap();
    assert!(
        decided.iter().any(|a| a.status == ApprovalStatus::Approved
            && a.decided_by.as_deref() == Some("a2a:admin")),
        "the approval is recorded as decided over A2A by the caller (the admin: the API runs \
         --insecure-dev; api/tests/api/a2a.rs checks a token holder's name): {decided:?}"
    );

    // A running task, cancelled.
    let running = p.sdk_one(&[
        "send",
        &url,
        "sleep: 60",
        "--context-id",
        &context,
        "--return-immediately",
    ]);
    let id = running["task"]["id"].as_str().unwrap().to_string();
    p.wait_state("desk", &id, "TASK_STATE_WORKING");
    let cancelled = p.sdk_one(&["cancel", &url, &id]);
    assert_eq!(
        cancelled["status"]["state"], "TASK_STATE_CANCELED",
        "{cancelled}"
    );
    // An ended task cannot be cancelled.
    let again = p.sdk(&["cancel", &url, &first]);
    assert!(again[0]["error"].is_object(), "{again:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_survive_sigkill_of_the_runner_and_of_the_api() {
    if !sdk_here() {
        return;
    }
    let mut p = Pool::start(None).await;
    let url = p.agent_url("desk");

    // The runner dies while the task runs; restarted, it finishes the turn, once.
    let id = p.working("k-1");
    p.runner("desk").kill();
    p.start_runner("desk", &[]);
    let done = p.wait_state("desk", &id, "TASK_STATE_COMPLETED");
    let (thread, seq) = located(&done);
    assert_eq!(p.completions(thread, seq).await, 1, "one turn answered it");
    let inbox =
        p.s.admin
            .client
            .thread(thread)
            .await
            .unwrap()
            .unwrap()
            .inbox_seq;
    // The same messageId again: the same task, nothing filed.
    let resent = p.sdk_one(&[
        "send",
        &url,
        "sleep: 2",
        "--message-id",
        "k-1",
        "--return-immediately",
    ]);
    assert_eq!(resent["task"]["id"], id.as_str());
    assert_eq!(resent["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        p.s.admin
            .client
            .thread(thread)
            .await
            .unwrap()
            .unwrap()
            .inbox_seq,
        inbox
    );

    // The API dies while a task runs; restarted, the client follows the task to its end.
    let id = p.working("k-2");
    p.restart_api(&[]);
    let done = p.wait_state("desk", &id, "TASK_STATE_COMPLETED");
    let (thread, seq) = located(&done);
    assert_eq!(p.completions(thread, seq).await, 1);

    // The API dies right after the commit that files a task: the caller sees no answer, sends
    // again with the same messageId and gets the task that was filed — one task, one message.
    p.restart_api(&[("NINETRIX_API_CRASH_AT", "a2a_send_after_commit")]);
    let lost = p.sdk(&[
        "send",
        &url,
        "hello again",
        "--message-id",
        "k-3",
        "--return-immediately",
    ]);
    assert!(
        lost[0]["error"].is_object(),
        "the API died before answering: {lost:?}"
    );
    p.restart_api(&[]);
    let resent = p.sdk_one(&["send", &url, "hello again", "--message-id", "k-3"]);
    let task = &resent["task"];
    let done = p.wait_state("desk", task["id"].as_str().unwrap(), "TASK_STATE_COMPLETED");
    assert_eq!(reply(&done), "Saw: hello again");
    let listed = p.sdk_one(&["list", &url]);
    let with_text = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["id"] == task["id"])
        .count();
    assert_eq!(with_text, 1, "one task for messageId k-3: {listed}");
}

/// `tests/a2a/remote_agent.py`: a remote A2A agent on the SDK's server, on a free loopback port.
struct Remote {
    child: std::process::Child,
    url: String,
}

impl Remote {
    fn start(token: &str) -> Remote {
        use std::io::BufRead as _;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("a2a/remote_agent.py");
        let mut child = Command::new(python())
            .arg(&script)
            .env("A2A_TOKEN", token)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("port: {line:?}"));
        Remote {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The tasks it made for each `messageId`.
    async fn stats(&self) -> Value {
        reqwest::get(format!("{}/stats", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runner_asks_a_remote_sdk_agent_once_through_a_crash() {
    if !sdk_here() {
        return;
    }
    let remote = Remote::start("remote-secret-token");
    let card = format!("{}/.well-known/agent-card.json", remote.url);
    let mut p = Pool::start(Some(&card)).await;
    let thread =
        p.s.admin
            .client
            .open_session(POOL, "caller", "c-1")
            .await
            .unwrap()
            .thread_id;

    // The reply of the remote agent reaches the model.
    let seq =
        p.s.admin
            .send(thread, "delegate: count to three", "d-1")
            .await;
    let done = p.s.admin.wait_turn(thread, seq, TURN).await;
    assert!(done.ok, "{done:?}");
    assert_eq!(done.reply, "Done: echo: count to three");

    // Killed right after sending, the runner sends the same message again on resume: one remote
    // task.
    p.runner("caller").kill();
    p.start_runner("caller", &[("NINETRIX_RUNNER_CRASH_AT", "a2a_after_send")]);
    let seq = p.s.admin.send(thread, "delegate: spell cat", "d-2").await;
    let status = p.runner("caller").wait_exit(TURN);
    assert!(status.is_some(), "the runner stopped at a2a_after_send");
    p.start_runner("caller", &[]);
    let done = p.s.admin.wait_turn(thread, seq, TURN).await;
    assert_eq!(done.reply, "Done: echo: spell cat");
    let stats = remote.stats().await;
    let counts: Vec<u64> = stats["by_message_id"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(counts, [1, 1], "one remote task per call: {stats}");

    // The secret went to the remote agent and nowhere into the thread's events.
    let events = p.s.admin.client.events_after(thread, 0).await.unwrap();
    let text = serde_json::to_string(&events).unwrap();
    assert!(!text.contains("remote-secret-token"));
    let sent = events.iter().any(
        |e| matches!(e.decode(), Decoded::Known(TraceEvent::HandoffSent(h)) if h.agent == "remote"),
    );
    assert!(sent, "the handoff is in the trace");
}
