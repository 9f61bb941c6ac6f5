//! Remote A2A collaborators through the real driver, against a real A2A server: the official
//! Python SDK's (`tests/a2a/remote_agent.py`), started per test as a child process on
//! 127.0.0.1 and killed at the end. The scripted model calls `ask_crm`; the tests read what the
//! model got back, the events, and the server's own count of the tasks it made (`/stats`).
//! These run on the real clock (the server is real I/O); every wait has a deadline. Skipped,
//! saying why, without the SDK — unless `NINETRIX_REQUIRE_A2A_SDK=1`.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};

use ninetrix_proto::api::ThreadStatus;
use ninetrix_testkit::Need;

use super::*;
use crate::snapshots::faults::held;

/// The bearer secret's value: it must reach the server and nothing else.
const TOKEN: &str = "tok-9f3a1c-never-logged";

/// The remote agent, running.
struct RemoteAgent {
    child: Child,
    port: u16,
}

impl RemoteAgent {
    /// Starts `tests/a2a/remote_agent.py` with `env`, and waits (at most 30 s) for the port it
    /// prints once it serves. `None` (the test skips) without the SDK.
    fn start(env: &[(&str, &str)]) -> Option<RemoteAgent> {
        let python = ninetrix_testkit::require(Need::A2aSdk)?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/a2a/remote_agent.py");
        let mut child = Command::new(python)
            .arg(script)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 starts");
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the remote agent printed its port within 30 s");
        let port = line.trim().parse().expect("the first line is the port");
        Some(RemoteAgent { child, port })
    }

    /// The URL of its card.
    fn card(&self) -> String {
        format!("http://127.0.0.1:{}/.well-known/agent-card.json", self.port)
    }

    /// Its `/stats`: tasks made, by messageId, and the Authorization headers it saw.
    async fn stats(&self) -> serde_json::Value {
        reqwest::get(format!("http://127.0.0.1:{}/stats", self.port))
            .await
            .expect("stats answer")
            .json()
            .await
            .expect("stats are JSON")
    }
}

impl Drop for RemoteAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Agent `a`, whose model asks the remote agent `crm` (at `card`) each of `tasks` in one
/// response, then says "Done."; the calls carry secret `CRM_TOKEN`.
fn asking(card: &str, tasks: &[&str], timeout: &str, workspace: &Path) -> Config {
    let calls: String = tasks
        .iter()
        .map(|t| format!("            - name: ask_crm\n              args: {{ task: \"{t}\" }}\n"))
        .collect();
    let spec = agent(&format!(
        "    runtime:
      provider: scripted
      script:
        - tool_calls:
{calls}        - text: Done.
    collaborators:
      - {{ name: crm, a2a: \"{card}\", secret: CRM_TOKEN }}
    transfer_timeout: {timeout}
    execution: {{ durability: true }}
"
    ));
    let mut config = config(spec, workspace);
    config
        .secrets
        .insert("CRM_TOKEN".into(), SecretValue::new(TOKEN));
    config
}

/// The results the model got, in order: (text, is_error).
async fn results(store: &TestStore) -> Vec<(String, bool)> {
    store
        .thread()
        .await
        .history
        .iter()
        .flat_map(|m| &m.blocks)
        .filter_map(|b| match b {
            ninetrix_proto::Block::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

/// Polls `check` every 50 ms until it holds, for at most [`DEADLINE`].
async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_remote_reply_reaches_the_model_and_the_secret_only_the_remote() {
    let Some(remote) = RemoteAgent::start(&[("A2A_TOKEN", TOKEN)]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = TestStore::new();
    let config = asking(&remote.card(), &["find Ada"], "1m", dir.path());
    let driver = Driver::start(&store, &config);
    store.send("go");
    store.until_event("turn_completed", 1).await;
    assert_eq!(
        results(&store).await,
        [("echo: find Ada".to_string(), false)]
    );
    let thread = store.thread().await;
    assert_eq!(thread.state.status, ThreadStatus::Idle);
    assert_eq!(thread.history.last().unwrap().text_content(), "Done.");
    // The trace: sent (with the remote task) and settled, no session or thread of the pool.
    let sent = store.events_of("handoff_sent");
    assert_eq!(sent.len(), 1, "{:?}", store.event_kinds());
    assert_eq!(sent[0]["agent"], "crm");
    assert_eq!(sent[0]["a2a"]["card"], remote.card().as_str());
    let task_id = sent[0]["a2a"]["task_id"].as_str().expect("a task ID");
    assert!(sent[0].get("thread_id").is_none());
    let settled = store.events_of("handoff_settled");
    assert_eq!(settled[0]["status"], "replied");
    assert_eq!(settled[0]["a2a"]["task_id"], task_id);
    assert_eq!(settled[0]["a2a"]["state"], "TASK_STATE_COMPLETED");
    // The message ID is the ledger key's: one task for it.
    let stats = remote.stats().await;
    assert_eq!(stats["tasks"], 1);
    let ids: Vec<&String> = stats["by_message_id"].as_object().unwrap().keys().collect();
    assert!(ids[0].starts_with("ninetrix-"), "{ids:?}");
    assert_eq!(sent[0]["delivery_key"], ids[0].as_str());
    // The secret went to the server, and nowhere else: no event, no history, no ledger.
    let auth = stats["auth"].as_array().unwrap();
    assert!(!auth.is_empty());
    assert!(
        auth.iter().all(|a| a == &format!("Bearer {TOKEN}")),
        "{auth:?}"
    );
    let events = serde_json::to_string(&store.shared.events.lock().unwrap().clone()).unwrap();
    assert!(!events.contains(TOKEN), "the secret is in an event");
    let stored = serde_json::to_string(&store.thread().await).unwrap();
    let ledger = serde_json::to_string(&store.turn_ledger(1).await.unwrap()).unwrap();
    assert!(!stored.contains(TOKEN) && !ledger.contains(TOKEN));
    assert!(ledger.contains("echo: find Ada"), "the outcome is recorded");
    driver.shutdown.cancel();
    assert_eq!(driver.exit().await, Exit::Ok);
}

#[tokio::test]
async fn failed_and_input_required_tasks_and_a_wrong_secret_are_error_results() {
    let Some(remote) = RemoteAgent::start(&[("A2A_TOKEN", TOKEN)]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = TestStore::new();
    let config = asking(
        &remote.card(),
        &["fail now", "need input about Ada"],
        "1m",
        dir.path(),
    );
    let driver = Driver::start(&store, &config);
    store.send("go");
    store.until_event("turn_completed", 1).await;
    let r = results(&store).await;
    assert_eq!(r.len(), 2);
    assert!(r.iter().all(|(_, is_error)| *is_error), "{r:?}");
    assert!(
        r[0].0.contains("ended task") && r[0].0.contains("FAILED: cannot do: fail now"),
        "{}",
        r[0].0
    );
    assert!(
        r[1].0
            .starts_with("Not done: the remote agent asks: which customer?"),
        "{}",
        r[1].0
    );
    let settled = store.events_of("handoff_settled");
    assert!(
        settled.iter().all(|s| s["status"] == "failed"),
        "{settled:?}"
    );
    driver.shutdown.cancel();
    assert_eq!(driver.exit().await, Exit::Ok);

    // A secret the server refuses: the call fails, naming the status, and is not retried.
    let dir = tempfile::tempdir().unwrap();
    let store = TestStore::new();
    let mut config = asking(&remote.card(), &["find Ada"], "1m", dir.path());
    config
        .secrets
        .insert("CRM_TOKEN".into(), SecretValue::new("wrong"));
    let driver = Driver::start(&store, &config);
    store.send("go");
    store.until_event("turn_completed", 1).await;
    let r = results(&store).await;
    assert!(r[0].1 && r[0].0.contains("HTTP 401"), "{r:?}");
    assert!(
        !r[0].0.contains("wrong"),
        "the secret is not repeated: {}",
        r[0].0
    );
    driver.shutdown.cancel();
    assert_eq!(driver.exit().await, Exit::Ok);
}

#[tokio::test]
async fn a_task_not_done_within_transfer_timeout_is_timed_out() {
    let Some(remote) = RemoteAgent::start(&[("A2A_DELAY", "60")]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = TestStore::new();
    let config = asking(&remote.card(), &["slow one"], "2s", dir.path());
    let driver = Driver::start(&store, &config);
    store.send("go");
    store.until_event("turn_completed", 1).await;
    let r = results(&store).await;
    assert!(r[0].1, "{r:?}");
    assert!(
        r[0].0
            .starts_with("Not done: the remote agent `crm` did not finish within 2s"),
        "{}",
        r[0].0
    );
    assert!(r[0].0.contains("timed out"));
    let settled = store.events_of("handoff_settled");
    assert_eq!(settled[0]["status"], "timed_out");
    assert_eq!(settled[0]["a2a"]["state"], "TASK_STATE_WORKING");
    driver.shutdown.cancel();
    assert_eq!(driver.exit().await, Exit::Ok);
}

/// A runner killed at `point` of its one call, and the next one that boots on the same store:
/// the call is answered once, from the one remote task its message made.
async fn killed_at(point: &'static str) {
    let Some(remote) = RemoteAgent::start(&[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = TestStore::new();
    let config = asking(&remote.card(), &["find Ada"], "1m", dir.path());
    held::hold(dir.path(), point);
    let first = Driver::start(&store, &config);
    store.send("go");
    until(point, || held::reached(dir.path(), point)).await;
    let tasks_at_crash = remote.stats().await["tasks"].clone();
    let thread = store.thread().await;
    assert_eq!(thread.state.status, ThreadStatus::Waiting, "{point}");
    first.kill().await;
    assert_eq!(
        tasks_at_crash,
        if point == crate::a2a::BEFORE_SEND {
            0
        } else {
            1
        },
        "{point}"
    );

    let second = Driver::start(&store, &config);
    store.until_event("turn_completed", 1).await;
    assert_eq!(
        results(&store).await,
        [("echo: find Ada".to_string(), false)],
        "{point}"
    );
    let stats = remote.stats().await;
    assert_eq!(
        stats["tasks"], 1,
        "{point}: one remote task in all: {stats}"
    );
    let per_message: Vec<&serde_json::Value> = stats["by_message_id"]
        .as_object()
        .unwrap()
        .values()
        .collect();
    assert_eq!(per_message, [&serde_json::json!(1)], "{point}");
    let sent = store.events_of("handoff_sent");
    assert_eq!(
        sent.last().unwrap()["reattached"],
        true,
        "{point}: the second runner resent the stored intent's message"
    );
    second.shutdown.cancel();
    assert_eq!(second.exit().await, Exit::Ok);
}

#[tokio::test]
async fn a_runner_killed_after_the_send_follows_the_same_remote_task_on_resume() {
    killed_at(crate::a2a::AFTER_SEND).await;
}

#[tokio::test]
async fn a_runner_killed_before_the_send_sends_once_on_resume() {
    killed_at(crate::a2a::BEFORE_SEND).await;
}
