//! The `memory` tool through a runner process and a real `ninetrix api` (child process, SQLite):
//! a scripted turn inserts a line into the agent's memory and the file has it; and killed after
//! the API applied the insert but before the turn stored the call's outcome, the restarted runner
//! runs the call again under the same ledger key and the API answers the first result — the line
//! is in the memory once, not twice.

mod support;

use std::time::Duration;

use ninetrix_client::MemoryOf;
use serde_json::{Value, json};
use support::{Gate, Hold, Runner, setup};

/// A durable scripted agent `remembers` whose every turn inserts `seen` at the top of
/// `/memories/log.md` (its agent's memory) and then answers.
fn memory_spec() -> Value {
    let mut spec = support::appender_spec();
    spec["name"] = json!("remembers");
    spec["tools"] = json!([{"name": "memory", "effect": "idempotent", "effect_pinned": false}]);
    spec["runtime"]["script"] = json!([
        {"text": "Remembering.", "tool_calls": [{"name": "memory", "args": {
            "command": "insert", "path": "/memories/log.md", "insert_line": 0, "insert_text": "seen"}}]},
        {"text": "Done.", "tool_calls": []}
    ]);
    spec
}

const POOL: &[(&str, &str)] = &[("AGENTFILE_POOL", "mem")];

fn memory() -> MemoryOf {
    MemoryOf {
        pool: "mem".into(),
        agent: "remembers".into(),
        session: None,
    }
}

/// The memory file's content, as the admin reads it.
async fn log(s: &support::Setup) -> String {
    s.admin
        .client
        .memory_file(&memory(), "/memories/log.md")
        .await
        .unwrap()
        .map(|f| f.content)
        .unwrap_or_default()
}

/// Writes `/memories/log.md` with one line, as the admin.
async fn start_log(s: &support::Setup) {
    s.admin
        .client
        .put_memory_file(&memory(), "/memories/log.md", "start\n")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_call_lands_in_the_agents_memory() {
    let s = setup();
    start_log(&s).await;
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    let _runner = Runner::start_with_env(&s.api.url, s.thread, &memory_spec(), &s.workspace, POOL);
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(30))
        .await;
    assert_eq!(log(&s).await, "seen\nstart\n");
    let latest = s.admin.latest(s.thread).await;
    let result = latest
        .history
        .iter()
        .flat_map(|m| m.blocks.iter())
        .find_map(|b| match b {
            ninetrix_proto::Block::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .expect("the call's result is in the history");
    assert!(
        !result.1
            && result
                .0
                .starts_with("The file /memories/log.md has been edited."),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_api_applied_an_edit_does_not_apply_it_twice() {
    let s = setup();
    start_log(&s).await;
    let gate = Gate::start(&s.api.url).await;
    let seq = s.admin.send(s.thread, "message 0", "k0").await;
    // The commit that carries the insert's result never reaches the API: the insert was applied
    // (its own request went through), its outcome is not stored.
    let held = gate.arm(Hold {
        method: "POST",
        path_contains: "/commit",
        body_contains: vec!["has been edited"],
        forward_first: false,
        lose_answer: false,
    });
    let mut runner =
        Runner::start_with_env(&gate.url, s.thread, &memory_spec(), &s.workspace, POOL);
    tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("the runner never sent the commit with the memory call's result");
    assert_eq!(log(&s).await, "seen\nstart\n", "applied before the kill");
    runner.kill();
    let _restarted =
        Runner::start_with_env(&s.api.url, s.thread, &memory_spec(), &s.workspace, POOL);
    s.admin
        .wait_done(s.thread, seq, Duration::from_secs(30))
        .await;
    assert_eq!(
        log(&s).await,
        "seen\nstart\n",
        "the call run again after the crash was answered from the API's op log"
    );
    let latest = s.admin.latest(s.thread).await;
    let last = latest.history.last().unwrap();
    assert_eq!(last.text_content(), "Done.");
}
