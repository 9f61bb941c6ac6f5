//! Replay mode through the real driver (issue 42): a conversation recorded by the driver (reads,
//! writes, a question answered, a gated shell write approved), its turns built with
//! `ninetrix_proto::replay::pair_calls` from what the store holds, then replayed by a driver in
//! replay mode on a fresh store and a fresh workspace — the same agent, a candidate that writes
//! elsewhere, a differing read with and without live reads, a collaborator's call — and killed at
//! each replay kill point.

use std::sync::Arc;

use ninetrix_proto::api::{PersonDecision, RecordedCall, RecordedTurn};
use ninetrix_proto::effects::Effect as Class;
use ninetrix_proto::replay::{LedgerCall, NOT_RUN, pair_calls};
use ninetrix_proto::{Block, Role};

use super::*;
use crate::recording::{REPLAY_AFTER_TURN, REPLAY_MID_TURN, Replay};
use crate::snapshots::faults::held;

/// Two turns: a read and a write, then a question and a gated shell write that appends to the
/// journal.
const RECORDED: &str = "    runtime:
      provider: scripted
      image: debian:stable-slim
      script:
        - tool_calls:
            - name: file_read
              args: { path: notes.txt }
        - tool_calls:
            - name: file_write
              args: { path: out.txt, mode: append, content: hello }
        - text: One done.
        - tool_calls:
            - name: ask_human
              args: { question: Which colour? }
        - tool_calls:
            - name: shell
              args: { command: echo blue >> journal.txt }
        - text: Two done.
    tools: [file_read, file_write, shell, ask_human]
    governance:
      human_approval: { actions: [shell] }
    execution: { durability: true }
";

const INPUTS: [&str; 2] = ["first", "second"];

/// Polls `check` every 10 ms (of paused time) until it holds, up to the deadline.
async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn read(workspace: &Path, path: &str) -> Option<String> {
    std::fs::read_to_string(workspace.join(path)).ok()
}

/// The conversation recorded by the driver in `workspace`, and its turns as a replay gets them.
async fn record(workspace: &Path) -> Vec<RecordedTurn> {
    std::fs::write(workspace.join("notes.txt"), "remember the milk").unwrap();
    // The shell runs as a real process: on the paused clock, its timeout would fire while the
    // runtime waits for it. The recording runs on real time (its waits are woken by the store,
    // never slept through), the replays on the paused clock again.
    tokio::time::resume();
    let store = TestStore::new();
    let driver = Driver::start(&store, &config(agent(RECORDED), workspace));
    store.send(INPUTS[0]);
    store.until_event("turn_completed", 1).await;
    store.send(INPUTS[1]);
    until("the question", || store.approvals_stored().len() == 1).await;
    store.answer("blue");
    until("the approval request", || {
        store.approvals_stored().len() == 2
    })
    .await;
    store.decide(ApprovalStatus::Approved);
    store.until_event("turn_completed", 2).await;
    driver.shutdown.cancel();
    assert_eq!(driver.exit().await, Exit::Ok);
    tokio::time::pause();
    // The recording did it all for real.
    assert_eq!(read(workspace, "out.txt").as_deref(), Some("hello"));
    assert_eq!(read(workspace, "journal.txt").as_deref(), Some("blue\n"));
    recorded_turns(&store).await
}

/// The turns of `store`'s thread, as the API's turn record builds them: each turn's messages
/// (from its input), its calls paired with its ledger records and its requests to people.
async fn recorded_turns(store: &TestStore) -> Vec<RecordedTurn> {
    let history = store.thread().await.history;
    let starts: Vec<usize> = (0..history.len())
        .filter(|&i| history[i].role == Role::User)
        .collect();
    let approvals = store.approvals_stored();
    let mut turns = Vec::new();
    for (n, &start) in starts.iter().enumerate() {
        let turn_seq = n as u64 + 1;
        let end = starts.get(n + 1).copied().unwrap_or(history.len());
        let messages = history[start..end].to_vec();
        let ledger: Vec<LedgerCall> = store
            .turn_ledger(turn_seq)
            .await
            .unwrap()
            .into_iter()
            .map(|r| LedgerCall {
                tool: r.tool,
                args: r.args,
                effect: r.effect,
                person: None,
            })
            .collect();
        let people: Vec<_> = approvals
            .iter()
            .filter(|a| a.turn_seq == turn_seq)
            .map(|a| {
                let decision = PersonDecision {
                    kind: a.kind,
                    status: a.status,
                    by: a.decided_by.clone(),
                };
                (a.tool.clone(), a.args.clone(), decision)
            })
            .collect();
        turns.push(RecordedTurn {
            turn_seq,
            live: true,
            input: messages[0].text_content(),
            calls: pair_calls(&messages, &ledger, &people),
            answer: last_answer(&messages),
            messages,
            ok: true,
            usage: Default::default(),
            latency_ms: None,
            model: None,
        });
    }
    turns
}

fn last_answer(messages: &[ninetrix_proto::Message]) -> String {
    messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)
        .map(|m| m.text_content())
        .unwrap_or_default()
}

/// `spec` replaying `recorded` in `workspace`.
fn replaying(spec: &str, workspace: &Path, recorded: &[RecordedTurn], live_reads: bool) -> Config {
    let mut config = config(agent(spec), workspace);
    config.replay = Some(Arc::new(Replay {
        recorded: recorded.to_vec(),
        live_reads,
    }));
    config
}

/// A replay's store: a fresh thread whose inbox holds the recorded turns' inputs, in order.
fn replay_store(recorded: &[RecordedTurn]) -> TestStore {
    let store = TestStore::new();
    for turn in recorded {
        store.send(&turn.input);
    }
    store
}

/// Runs `config`'s replay to its end (the driver stops once the inbox is served).
async fn replay(config: &Config, recorded: &[RecordedTurn]) -> TestStore {
    let store = replay_store(recorded);
    assert_eq!(
        Driver::start_until_idle(&store, config).exit().await,
        Exit::Ok
    );
    store
}

/// Each turn's final answer in the store's thread.
async fn answers(store: &TestStore) -> Vec<String> {
    recorded_turns(store)
        .await
        .iter()
        .map(|t| t.answer.clone())
        .collect()
}

/// Every tool result of the store's thread, in order.
async fn results(store: &TestStore) -> Vec<(String, bool)> {
    store
        .thread()
        .await
        .history
        .iter()
        .flat_map(|m| m.blocks.clone())
        .filter_map(|b| match b {
            Block::ToolResult {
                content, is_error, ..
            } => Some((content, is_error)),
            _ => None,
        })
        .collect()
}

/// The `replay_answered` events: (turn, tool, verdict).
fn verdicts(store: &TestStore) -> Vec<(u64, String, String)> {
    store
        .events_of("replay_answered")
        .iter()
        .map(|e| {
            (
                e["turn_seq"].as_u64().unwrap(),
                e["name"].as_str().unwrap().to_string(),
                e["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn all_recorded() -> Vec<(u64, String, String)> {
    [
        (1, "file_read"),
        (1, "file_write"),
        (2, "ask_human"),
        (2, "shell"),
    ]
    .iter()
    .map(|(t, n)| (*t, n.to_string(), "recorded".to_string()))
    .collect()
}

/// Nothing ran in the replay's workspace, nobody was asked, nothing was handed over.
fn nothing_done(store: &TestStore, workspace: &Path) {
    for file in ["out.txt", "journal.txt", "notes.txt"] {
        assert_eq!(
            read(workspace, file),
            None,
            "{file} in the replay workspace"
        );
    }
    assert!(store.approvals_stored().is_empty(), "a request to a person");
    assert_eq!(store.handoffs_opened(), 0, "a handoff");
    let kinds = store.event_kinds();
    for kind in ["tool_call", "approval_requested", "snapshot_taken"] {
        assert!(!kinds.iter().any(|k| k == kind), "{kind} in {kinds:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_same_agent_gets_every_call_from_the_recording_and_nothing_runs() {
    let recording = tempfile::tempdir().unwrap();
    let recorded = record(recording.path()).await;
    let second = &recorded[1].calls;
    assert_eq!(
        second
            .iter()
            .map(|c| (
                c.name.as_str(),
                c.is_error,
                c.person.as_ref().map(|p| p.status)
            ))
            .collect::<Vec<_>>(),
        [
            ("ask_human", false, Some(ApprovalStatus::Answered)),
            ("shell", false, Some(ApprovalStatus::Approved))
        ],
        "the question's answer and the approval are in the recording"
    );
    assert_eq!(second[0].result, "blue");
    let ws = tempfile::tempdir().unwrap();
    let mut config = replaying(RECORDED, ws.path(), &recorded, false);
    // A secret value in a call's arguments is masked in the event that shows them.
    config
        .secrets
        .insert("GREETING".into(), SecretValue::new("hello"));
    let store = replay(&config, &recorded).await;
    nothing_done(&store, ws.path());
    assert_eq!(verdicts(&store), all_recorded());
    let recorded_results: Vec<(String, bool)> = recorded
        .iter()
        .flat_map(|t| &t.calls)
        .map(|c| (c.result.clone(), c.is_error))
        .collect();
    assert_eq!(results(&store).await, recorded_results);
    assert_eq!(answers(&store).await, ["One done.", "Two done."]);
    let answered = &store.events_of("replay_answered")[1];
    assert_eq!(answered["effect"], "write");
    let args = answered["args"].as_str().unwrap();
    assert!(
        args.contains("out.txt") && !args.contains("hello"),
        "{answered}"
    );
    let thread = store.thread().await;
    assert_eq!(thread.state.status, ThreadStatus::Idle);
    assert_eq!(thread.state.inbox_cursor, 2, "both inputs served, once");
}

#[tokio::test(start_paused = true)]
async fn a_candidate_that_writes_elsewhere_is_not_run_and_the_turn_goes_on() {
    let recording = tempfile::tempdir().unwrap();
    let recorded = record(recording.path()).await;
    let ws = tempfile::tempdir().unwrap();
    let candidate = RECORDED.replace("path: out.txt", "path: evil.txt");
    let store = replay(
        &replaying(&candidate, ws.path(), &recorded, true),
        &recorded,
    )
    .await;
    nothing_done(&store, ws.path());
    assert_eq!(read(ws.path(), "evil.txt"), None, "the write was not run");
    let mut want = all_recorded();
    want[1].2 = "not_run".into();
    assert_eq!(verdicts(&store), want);
    let (text, is_error) = &results(&store).await[1];
    assert!(*is_error && text.starts_with(NOT_RUN), "{text}");
    assert_eq!(answers(&store).await, ["One done.", "Two done."]);
}

#[tokio::test(start_paused = true)]
async fn a_differing_read_runs_live_only_with_live_reads() {
    let recording = tempfile::tempdir().unwrap();
    let recorded = record(recording.path()).await;
    let candidate = RECORDED.replace("path: notes.txt", "path: other.txt");

    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("other.txt"), "read live").unwrap();
    let store = replay(
        &replaying(&candidate, ws.path(), &recorded, true),
        &recorded,
    )
    .await;
    let mut want = all_recorded();
    want[0].2 = "live".into();
    assert_eq!(verdicts(&store), want);
    let (text, is_error) = &results(&store).await[0];
    assert!(!is_error && text.contains("read live"), "{text}");
    let ran = store.events_of("tool_call");
    assert_eq!(ran.len(), 1, "only the live read ran: {ran:?}");
    assert_eq!(ran[0]["name"], "file_read");
    assert_eq!(read(ws.path(), "out.txt"), None);

    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("other.txt"), "read live").unwrap();
    let store = replay(
        &replaying(&candidate, ws.path(), &recorded, false),
        &recorded,
    )
    .await;
    want[0].2 = "not_run".into();
    assert_eq!(verdicts(&store), want);
    let (text, is_error) = &results(&store).await[0];
    assert!(*is_error && text.starts_with(NOT_RUN), "{text}");
    assert!(store.events_of("tool_call").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_collaborators_call_gets_the_recorded_reply_and_is_never_handed_over() {
    const HANDING: &str = "    runtime:
      provider: scripted
      script:
        - tool_calls:
            - name: ask_b
              args: { task: sum it }
        - text: It is 42.
    collaborators: [b]
    execution: { durability: true }
  b:
    runtime:
      provider: scripted
      script:
        - text: '42'
";
    let recorded = vec![RecordedTurn {
        turn_seq: 1,
        live: true,
        input: "add them".into(),
        messages: Vec::new(),
        calls: vec![RecordedCall {
            name: "ask_b".into(),
            args: serde_json::json!({"task": "sum it"}),
            result: "42".into(),
            is_error: false,
            effect: Some(Class::Write),
            person: None,
        }],
        answer: "It is 42.".into(),
        ok: true,
        usage: Default::default(),
        latency_ms: None,
        model: None,
    }];
    let ws = tempfile::tempdir().unwrap();
    let store = replay(&replaying(HANDING, ws.path(), &recorded, true), &recorded).await;
    assert_eq!(store.handoffs_opened(), 0, "nothing handed over");
    assert_eq!(
        verdicts(&store),
        [(1, "ask_b".to_string(), "recorded".to_string())]
    );
    assert_eq!(results(&store).await, [("42".to_string(), false)]);
    assert_eq!(answers(&store).await, ["It is 42."]);
    assert!(
        store
            .event_kinds()
            .iter()
            .all(|k| !k.starts_with("handoff"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_replay_killed_at_each_kill_point_is_finished_by_the_next_runner() {
    let recording = tempfile::tempdir().unwrap();
    let recorded = record(recording.path()).await;
    for point in [REPLAY_MID_TURN, REPLAY_AFTER_TURN] {
        let ws = tempfile::tempdir().unwrap();
        let config = replaying(RECORDED, ws.path(), &recorded, false);
        let store = replay_store(&recorded);
        held::hold(ws.path(), point);
        let first = Driver::start_until_idle(&store, &config);
        until(point, || held::reached(ws.path(), point)).await;
        let stored = store.thread().await.state;
        match point {
            REPLAY_MID_TURN => {
                assert_eq!((stored.turn_seq, stored.status), (1, ThreadStatus::InTurn));
            }
            _ => assert_eq!((stored.turn_seq, stored.status), (1, ThreadStatus::Idle)),
        }
        first.kill().await;

        let second = Driver::start_until_idle(&store, &config);
        assert_eq!(second.exit().await, Exit::Ok, "{point}");
        nothing_done(&store, ws.path());
        assert_eq!(answers(&store).await, ["One done.", "Two done."], "{point}");
        let recorded_results: Vec<(String, bool)> = recorded
            .iter()
            .flat_map(|t| &t.calls)
            .map(|c| (c.result.clone(), c.is_error))
            .collect();
        assert_eq!(results(&store).await, recorded_results, "{point}");
        // Every answer the events give is the recording's, each call at least once; a call whose
        // answer the crash lost before it was stored is answered (and said) again.
        let said = verdicts(&store);
        assert!(said.iter().all(|v| v.2 == "recorded"), "{point}: {said:?}");
        let mut distinct = Vec::new();
        for v in said {
            if !distinct.contains(&v) {
                distinct.push(v);
            }
        }
        assert_eq!(distinct, all_recorded(), "{point}");
        let kinds = store.event_kinds();
        let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
        assert_eq!(count("boot"), 2, "{point}: {kinds:?}");
        assert_eq!(count("turn_completed"), 2, "{point}: each turn ends once");
        match point {
            REPLAY_MID_TURN => assert_eq!(count("turn_resumed"), 1, "{kinds:?}"),
            _ => {
                assert_eq!(count("turn_resumed"), 0, "{kinds:?}");
                assert_eq!(count("turn_started"), 2, "turn 1 is not started again");
            }
        }
    }
}
