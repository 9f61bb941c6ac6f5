//! Replays and evals (issue 42) over HTTP, on both backends: a replay of recorded turns shares
//! its source's history without copying it, holds the replayed inputs in its inbox, leaves the
//! source byte-for-byte untouched and is found again by its key; its refusals; a replay of a
//! fork's inherited turns; the record of a turn (calls, effects, people, usage, latency, model,
//! live) after a rewind; eval suites' members and runs; purges.

use ninetrix_client::{Client, ErrorCode, ThreadQuery, Token};
use ninetrix_proto::api::{
    ApprovalKind, ApprovalStatus, CheckpointState, CommitIntent, CommitOutcome, CommitRequest,
    DecisionRequest, EvalCaseResult, EvalMemberRequest, EvalRunRequest, ForkRequest, NewApproval,
    ReplayRequest, ThreadStatus, TurnEnd, Usage, Verdict,
};
use ninetrix_proto::effects::Effect;
use ninetrix_proto::events::{Decoded, LlmCall, TraceEvent, TurnCompleted, TurnStarted};
use ninetrix_proto::message::Block;
use ninetrix_proto::snapshots::{FileEntry, ObjectId, ObjectKind, SnapshotRef, build};
use ninetrix_proto::{ApprovalId, Message, Role, ThreadId};
use serde_json::json;

use crate::support::{ADMIN, Backend, TestApi, both_backends, count, refusal};

both_backends!(
    a_replay_shares_the_history_queues_the_inputs_and_leaves_the_source_untouched,
    replays_are_refused_with_the_field_or_the_turns_named,
    a_replay_of_a_forks_inherited_turns_reads_them_from_the_parent,
    a_record_has_the_calls_people_cost_and_model_and_says_which_turns_a_rewind_left,
    eval_suites_mark_threads_once_store_runs_once_and_lose_purged_members,
);

fn admin(api: &TestApi) -> Client {
    Client::new(api.client.clone(), &api.url, Some(Token::new(ADMIN)))
}

/// A session's thread as its runner drives it.
struct Runner {
    thread: ThreadId,
    epoch: u64,
    version: u64,
    turn: u64,
    len: u64,
    /// Where the next turn's commit cuts the history first (a rewind's cut).
    cut: Option<u64>,
}

async fn session(c: &Client, key: &str) -> Runner {
    let thread = c.open_session("p", "a", key).await.unwrap().thread_id;
    claimed(c, thread).await
}

async fn claimed(c: &Client, thread: ThreadId) -> Runner {
    let epoch = c.claim(thread, &Default::default()).await.unwrap().epoch;
    let latest = c.latest(thread).await.unwrap();
    Runner {
        thread,
        epoch,
        version: latest.as_ref().map_or(0, |s| s.version),
        turn: latest.as_ref().map_or(0, |s| s.state.turn_seq),
        len: latest.map_or(0, |s| s.history.len() as u64),
        cut: None,
    }
}

fn call(id: &str, name: &str, args: serde_json::Value) -> Message {
    Message::new(
        Role::Assistant,
        vec![Block::ToolCall {
            id: id.into(),
            name: name.into(),
            args,
        }],
    )
}

fn result(id: &str, content: &str, is_error: bool) -> Message {
    Message::new(
        Role::Tool,
        vec![Block::ToolResult {
            call_id: id.into(),
            content: content.into(),
            is_error,
        }],
    )
}

fn event(e: TraceEvent) -> ninetrix_proto::api::NewEvent {
    e.to_new_event(chrono::Utc::now())
}

/// What one recorded turn does besides its read: a gated write a person rejected, or a question
/// a person answered.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Extra {
    None,
    RejectedWrite,
    AnsweredQuestion,
}

/// The next turn of `r`: its input `question N` (after `before`, messages added ahead of it at
/// the turn's start, as a compaction's record is), a `read_file` call with its ledger record and
/// result, `extra`, the answer `answer N`, its events (started, a model call of `model-N`,
/// completed with usage and duration) and, when given, a snapshot. Returns the requests to
/// people it stored.
async fn recorded_turn(
    c: &Client,
    r: &mut Runner,
    extra: Extra,
    before: Vec<Message>,
    snapshot: Option<SnapshotRef>,
) -> Vec<ApprovalId> {
    let n = r.turn + 1;
    let mut append = before;
    append.push(Message::text(Role::User, format!("question {n}")));
    let anchor = r.len + append.len() as u64;
    let read_args = json!({"path": format!("f{n}")});
    append.push(call(&format!("c{n}r"), "read_file", read_args.clone()));
    append.push(result(&format!("c{n}r"), &format!("content {n}"), false));
    let mut approvals = Vec::new();
    match extra {
        Extra::None => {}
        Extra::RejectedWrite => {
            append.push(call(&format!("c{n}w"), "shell", json!({"cmd": "rm -rf x"})));
            append.push(result(&format!("c{n}w"), "rejected by alice: no", true));
            approvals.push(NewApproval {
                id: ApprovalId::new_v7(),
                key: format!("t{n}-shell"),
                call_id: format!("c{n}w"),
                turn_seq: n,
                kind: ApprovalKind::Approval,
                tool: "shell".into(),
                args: json!({"cmd": "rm -rf x"}),
                args_hash: "h".into(),
                timeout_secs: 3600,
                raise: None,
            });
        }
        Extra::AnsweredQuestion => {
            append.push(call(
                &format!("c{n}q"),
                "ask_human",
                json!({"question": "colour?"}),
            ));
            append.push(result(&format!("c{n}q"), "blue", false));
            approvals.push(NewApproval {
                id: ApprovalId::new_v7(),
                key: format!("t{n}-ask"),
                call_id: format!("c{n}q"),
                turn_seq: n,
                kind: ApprovalKind::Question,
                tool: "ask_human".into(),
                args: json!({"question": "colour?"}),
                args_hash: "h".into(),
                timeout_secs: 3600,
                raise: None,
            });
        }
    }
    append.push(Message::text(Role::Assistant, format!("answer {n}")));
    let key = format!("t{n}-read-{}", r.version);
    let request = CommitRequest {
        epoch: r.epoch,
        parent_version: r.version,
        truncate_to: r.cut.take(),
        append: append.clone(),
        state: CheckpointState {
            turn_seq: n,
            turn_start_history_len: anchor,
            status: ThreadStatus::Idle,
            ..Default::default()
        },
        intents: vec![CommitIntent {
            key: key.clone(),
            turn_seq: n,
            tool: "read_file".into(),
            args: read_args,
            effect: Effect::Read,
        }],
        outcomes: vec![CommitOutcome {
            key,
            ok: true,
            result: format!("content {n}"),
        }],
        events: vec![
            event(TraceEvent::TurnStarted(TurnStarted {
                turn_seq: n,
                seq: n,
                input: String::new(),
            })),
            event(TraceEvent::LlmCall(LlmCall {
                model: format!("model-{n}"),
                input_tokens: 10 * n,
                output_tokens: n,
                cost_usd: 0.01,
                latency_ms: 5,
                stop_reason: "stop".into(),
                tool_calls: 1,
            })),
            event(TraceEvent::TurnCompleted(TurnCompleted {
                turn_seq: n,
                seq: n,
                ok: true,
                reply: format!("answer {n}"),
                usage: Usage {
                    input_tokens: 10 * n,
                    output_tokens: n,
                    cost_usd: 0.01 * n as f64,
                },
                duration_ms: 100.0 * n as f64 + 0.6,
                stopped_by: None,
            })),
        ],
        approvals: approvals.clone(),
        handoff_reply: None,
        turn_end: Some(TurnEnd {
            turn_seq: n,
            snapshot,
            snapshot_skipped: None,
            keep_turns: None,
        }),
    };
    let done = c.commit(r.thread, &request).await.unwrap();
    r.version = done.version;
    r.turn = n;
    r.len += append.len() as u64;
    let mut ids = Vec::new();
    for a in approvals {
        let decision = match a.kind {
            ApprovalKind::Question => DecisionRequest {
                decision: Verdict::Answer,
                reason: None,
                answer: Some("blue".into()),
                by: Some("bob".into()),
            },
            _ => DecisionRequest {
                decision: Verdict::Reject,
                reason: Some("no".into()),
                answer: None,
                by: Some("alice".into()),
            },
        };
        c.decide_approval(a.id, &decision).await.unwrap();
        ids.push(a.id);
    }
    ids
}

/// A 5-turn thread: turn 1 with a snapshot, turn 2 with a rejected write, turn 3 with an answered
/// question, turn 4 with a compaction's record ahead of its input.
async fn five_turns(c: &Client, key: &str) -> (Runner, SnapshotRef) {
    let mut r = session(c, key).await;
    let tree = build(vec![FileEntry {
        path: "a.txt".into(),
        mode: 0o644,
        size: 3,
        blob: ObjectId::of(b"one"),
    }]);
    c.put_object(
        r.thread,
        &ObjectId::of(b"one"),
        ObjectKind::Blob,
        b"one".to_vec(),
    )
    .await
    .unwrap();
    for (id, bytes) in &tree.nodes {
        c.put_object(r.thread, id, ObjectKind::Node, bytes.clone())
            .await
            .unwrap();
    }
    recorded_turn(c, &mut r, Extra::None, vec![], Some(tree.snapshot.clone())).await;
    recorded_turn(c, &mut r, Extra::RejectedWrite, vec![], None).await;
    recorded_turn(c, &mut r, Extra::AnsweredQuestion, vec![], None).await;
    let summary = Message::text(Role::System, "summary of turns 1 to 3");
    recorded_turn(c, &mut r, Extra::None, vec![summary], None).await;
    recorded_turn(c, &mut r, Extra::None, vec![], None).await;
    (r, tree.snapshot)
}

fn replay(from_turn: u64, to_turn: u64, key: &str) -> ReplayRequest {
    ReplayRequest {
        from_turn,
        to_turn,
        key: key.into(),
        candidate: "model gpt-x".into(),
    }
}

async fn a_replay_shares_the_history_queues_the_inputs_and_leaves_the_source_untouched(
    backend: Backend,
) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let c = admin(&api);
    let (source, snapshot) = five_turns(&c, "s").await;
    let history = c.latest(source.thread).await.unwrap().unwrap().history;
    let before = c.thread(source.thread).await.unwrap().unwrap();
    let source_events = c.events_after(source.thread, 0).await.unwrap();
    let source_inbox = c
        .inbox(source.thread, 0, std::time::Duration::ZERO, 100)
        .await
        .unwrap();
    let rows = count(&api, "SELECT COUNT(*) FROM messages").await;

    let made = c.replay(source.thread, &replay(2, 4, "k1")).await.unwrap();
    assert!(!made.existing);
    assert_eq!(made.turns, [2, 3, 4]);
    assert_eq!(made.history_len, 4, "turn 1 ended with 4 messages");
    assert_eq!(made.snapshot.as_ref(), Some(&snapshot));
    assert_eq!(
        count(&api, "SELECT COUNT(*) FROM messages").await,
        rows,
        "the history is shared, not copied"
    );
    let latest = c.latest(made.replay).await.unwrap().unwrap();
    assert_eq!(
        latest.history,
        history[..4],
        "the source's at the end of turn 1"
    );
    assert_eq!(latest.state.turn_seq, 1);
    assert_eq!(latest.state.workspace.as_ref(), Some(&snapshot));
    let inbox = c
        .inbox(made.replay, 0, std::time::Duration::ZERO, 100)
        .await
        .unwrap();
    let seen: Vec<(u64, &str, Option<&str>)> = inbox
        .iter()
        .map(|m| (m.seq, m.content.as_str(), m.dedupe_key.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (1, "question 2", Some("replay-turn-2")),
            (2, "question 3", Some("replay-turn-3")),
            (3, "question 4", Some("replay-turn-4")),
        ]
    );
    let summary = c.thread(made.replay).await.unwrap().unwrap();
    assert_eq!(summary.labels.pool.as_deref(), Some("p"));
    assert_eq!(summary.labels.agent.as_deref(), Some("a"));
    assert_eq!(
        (summary.labels.replica, summary.labels.session.as_deref()),
        (None, None)
    );
    assert_eq!(summary.forked_from, None, "a replay is not a fork");
    let origin = summary.replay_of.expect("replay_of");
    assert_eq!(
        (
            origin.source,
            origin.from_turn,
            origin.to_turn,
            origin.candidate.as_str()
        ),
        (source.thread, 2, 4, "model gpt-x")
    );
    let events = c.events_after(made.replay, 0).await.unwrap();
    match events.first().map(|e| e.decode()) {
        Some(Decoded::Known(TraceEvent::ReplayStarted(s))) => {
            assert_eq!(
                (s.source, s.from_turn, s.to_turn, s.turns),
                (source.thread, 2, 4, 3)
            );
        }
        other => panic!("the first event is replay_started, not {other:?}"),
    }
    // Lists of sessions leave it out; the pool's threads (what `down --purge` purges) have it.
    let sessions = c
        .list_sessions(
            &ThreadQuery {
                pool: Some("p".into()),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
    assert!(sessions.iter().all(|t| t.thread_id != made.replay));
    assert!(sessions.iter().any(|t| t.thread_id == source.thread));
    let pool = c
        .list_threads(&ThreadQuery {
            pool: Some("p".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let listed = pool
        .iter()
        .find(|t| t.thread_id == made.replay)
        .expect("listed");
    assert_eq!(
        listed.replay_of.as_ref().map(|o| o.source),
        Some(source.thread)
    );
    // The source: no version, no event, no inbox row, no updated_at change.
    assert_eq!(c.thread(source.thread).await.unwrap().unwrap(), before);
    assert_eq!(
        c.events_after(source.thread, 0).await.unwrap(),
        source_events
    );
    assert_eq!(
        c.inbox(source.thread, 0, std::time::Duration::ZERO, 100)
            .await
            .unwrap(),
        source_inbox
    );

    // The same key: the same replay, nothing written.
    let threads = count(&api, "SELECT COUNT(*) FROM threads").await;
    let again = c.replay(source.thread, &replay(2, 4, "k1")).await.unwrap();
    assert!(again.existing);
    assert_eq!(
        (
            again.replay,
            &again.turns,
            again.history_len,
            &again.snapshot
        ),
        (made.replay, &made.turns, made.history_len, &made.snapshot)
    );
    assert_eq!(count(&api, "SELECT COUNT(*) FROM threads").await, threads);
    assert_eq!(
        c.inbox(made.replay, 0, std::time::Duration::ZERO, 100)
            .await
            .unwrap()
            .len(),
        3
    );
    // The same key for another range is refused.
    let err = c
        .replay(source.thread, &replay(2, 5, "k1"))
        .await
        .unwrap_err();
    let (status, code, message) = refusal(&err);
    assert_eq!((status, code), (409, ErrorCode::KeyReused), "{message}");
    assert!(message.contains(&made.replay.to_string()), "{message}");

    // From the first turn: an empty history, turn 0, no snapshot.
    let whole = c.replay(source.thread, &replay(1, 99, "k2")).await.unwrap();
    assert_eq!(whole.turns, [1, 2, 3, 4, 5]);
    assert_eq!((whole.history_len, whole.snapshot.as_ref()), (0, None));
    let latest = c.latest(whole.replay).await.unwrap().unwrap();
    assert!(latest.history.is_empty());
    assert_eq!(latest.state.turn_seq, 0);
    assert_eq!(c.turns(whole.replay).await.unwrap().turns.len(), 0);

    // A purged source leaves its replays readable; `down --purge` purges replays with the pool.
    assert!(c.purge(source.thread).await.unwrap());
    let latest = c.latest(made.replay).await.unwrap().unwrap();
    assert_eq!(latest.history, history[..4]);
    assert_eq!(
        c.thread(made.replay)
            .await
            .unwrap()
            .unwrap()
            .replay_of
            .map(|o| o.source),
        Some(source.thread)
    );
    assert!(c.purge(made.replay).await.unwrap());
    assert!(!matches!(c.thread(made.replay).await, Ok(Some(_))));
    api.stop().await;
}

async fn replays_are_refused_with_the_field_or_the_turns_named(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let c = admin(&api);
    let (source, _) = five_turns(&c, "r").await;
    let threads = count(&api, "SELECT COUNT(*) FROM threads").await;
    let cases: Vec<(ReplayRequest, &str)> = vec![
        (replay(3, 2, "k"), "from_turn"),
        (replay(0, 2, "k"), "from_turn"),
        (replay(1, 2, ""), "key"),
        (replay(1, 2, &"k".repeat(129)), "key"),
        (
            ReplayRequest {
                candidate: "c".repeat(201),
                ..replay(1, 2, "k")
            },
            "candidate",
        ),
        (
            ReplayRequest {
                candidate: "line\nbreak".into(),
                ..replay(1, 2, "k")
            },
            "candidate",
        ),
    ];
    for (request, field) in cases {
        let err = c.replay(source.thread, &request).await.unwrap_err();
        let (status, code, message) = refusal(&err);
        assert_eq!((status, code), (400, ErrorCode::InvalidBody), "{message}");
        assert!(
            message.contains(&format!("`{field}`")),
            "{field}: {message}"
        );
    }
    let err = c
        .replay(ThreadId::new_v7(), &replay(1, 2, "k"))
        .await
        .unwrap_err();
    assert_eq!(refusal(&err).0, 404);
    let err = c
        .replay(source.thread, &replay(7, 9, "k"))
        .await
        .unwrap_err();
    let (status, _, message) = refusal(&err);
    assert_eq!(status, 404, "{message}");
    assert!(message.contains("1, 2, 3, 4, 5"), "{message}");
    assert_eq!(
        count(&api, "SELECT COUNT(*) FROM threads").await,
        threads,
        "nothing made"
    );
    assert!(c.purge(source.thread).await.unwrap());
    let err = c
        .replay(source.thread, &replay(1, 2, "k"))
        .await
        .unwrap_err();
    assert_eq!(refusal(&err).1, ErrorCode::Purged);
    api.stop().await;
}

async fn a_replay_of_a_forks_inherited_turns_reads_them_from_the_parent(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let c = admin(&api);
    let (source, _) = five_turns(&c, "f").await;
    let fork = c
        .fork(
            source.thread,
            &ForkRequest {
                at_turn: 3,
                session: None,
            },
        )
        .await
        .unwrap();
    let parent_history = c.latest(source.thread).await.unwrap().unwrap().history;
    let made = c.replay(fork.thread_id, &replay(2, 3, "fk")).await.unwrap();
    assert_eq!(made.turns, [2, 3]);
    assert_eq!(made.history_len, 4);
    let latest = c.latest(made.replay).await.unwrap().unwrap();
    assert_eq!(latest.history, parent_history[..4]);
    let inputs: Vec<String> = c
        .inbox(made.replay, 0, std::time::Duration::ZERO, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(inputs, ["question 2", "question 3"]);
    // The fork's own turn 3 (its fork point) is recorded as the parent ran it.
    let record = c.recorded_turn(fork.thread_id, 3).await.unwrap();
    assert_eq!(record.input, "question 3");
    assert!(record.live);
    let names: Vec<&str> = record.calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["read_file", "ask_human"]);
    assert_eq!(record.calls[0].effect, Some(Effect::Read));
    assert_eq!(record.model.as_deref(), Some("model-3"));
    api.stop().await;
}

async fn a_record_has_the_calls_people_cost_and_model_and_says_which_turns_a_rewind_left(
    backend: Backend,
) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let c = admin(&api);
    let (mut r, _) = five_turns(&c, "rec").await;
    let two = c.recorded_turn(r.thread, 2).await.unwrap();
    assert_eq!((two.turn_seq, two.live, two.ok), (2, true, true));
    assert_eq!(two.input, "question 2");
    assert_eq!(two.answer, "answer 2");
    assert_eq!(two.messages.len(), 6);
    assert_eq!(two.calls.len(), 2);
    assert_eq!(
        (
            two.calls[0].name.as_str(),
            two.calls[0].result.as_str(),
            two.calls[0].effect
        ),
        ("read_file", "content 2", Some(Effect::Read))
    );
    let shell = &two.calls[1];
    assert_eq!(
        (shell.name.as_str(), shell.is_error, shell.effect),
        ("shell", true, None)
    );
    let person = shell.person.as_ref().expect("the rejection");
    assert_eq!(
        (person.kind, person.status, person.by.as_deref()),
        (
            ApprovalKind::Approval,
            ApprovalStatus::Rejected,
            Some("alice")
        )
    );
    assert_eq!((two.usage.input_tokens, two.usage.output_tokens), (20, 2));
    assert_eq!(two.latency_ms, Some(201), "200.6 ms rounded");
    assert_eq!(two.model.as_deref(), Some("model-2"));
    let three = c.recorded_turn(r.thread, 3).await.unwrap();
    let ask = &three.calls[1];
    assert_eq!(
        (ask.name.as_str(), ask.result.as_str()),
        ("ask_human", "blue")
    );
    let person = ask.person.as_ref().expect("the answer");
    assert_eq!(
        (person.kind, person.status, person.by.as_deref()),
        (
            ApprovalKind::Question,
            ApprovalStatus::Answered,
            Some("bob")
        )
    );
    // Turn 4 started with a compaction's record ahead of its input: the input is still its first.
    let four = c.recorded_turn(r.thread, 4).await.unwrap();
    assert_eq!(four.input, "question 4");
    assert_eq!(four.messages[0].text_content(), "question 4");
    assert_eq!(four.messages.len(), 4);

    // A rewind to turn 3 and a new turn 4: turn 5 is left (live false), turn 4 is the new one.
    r.len = c.turns(r.thread).await.unwrap().turns[2].history_len;
    r.cut = Some(r.len);
    r.turn = 3;
    recorded_turn(&c, &mut r, Extra::None, vec![], None).await;
    let five = c.recorded_turn(r.thread, 5).await.unwrap();
    assert!(!five.live, "a rewind left turn 5");
    assert_eq!(five.input, "question 5");
    let four = c.recorded_turn(r.thread, 4).await.unwrap();
    assert!(four.live);
    assert_eq!(
        four.messages.len(),
        4,
        "the new turn 4 has no compaction record"
    );
    let made = c.replay(r.thread, &replay(1, 5, "after")).await.unwrap();
    assert_eq!(
        made.turns,
        [1, 2, 3, 4],
        "a turn a rewind left is not replayed"
    );

    let err = c.recorded_turn(r.thread, 9).await.unwrap_err();
    let (status, _, message) = refusal(&err);
    assert_eq!(status, 404);
    assert!(message.contains("1, 2, 3, 4, 5"), "{message}");
    api.stop().await;
}

fn case(thread: ThreadId, replay: ThreadId, passed: bool) -> EvalCaseResult {
    EvalCaseResult {
        thread,
        name: "a/s".into(),
        replay,
        turns: 3,
        divergent_turns: u64::from(!passed),
        failed_checks: if passed {
            vec![]
        } else {
            vec!["turn 2: answer does not contain \"ok\"".into()]
        },
        cost_usd: 0.25,
        passed,
    }
}

async fn eval_suites_mark_threads_once_store_runs_once_and_lose_purged_members(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let c = admin(&api);
    let one = c.open_session("p", "a", "e1").await.unwrap().thread_id;
    let two = c.open_session("p", "a", "e2").await.unwrap().thread_id;
    let member = |thread, from_turn, to_turn| EvalMemberRequest {
        thread,
        from_turn,
        to_turn,
    };
    let first = c
        .add_eval_member("regress", &member(one, None, None))
        .await
        .unwrap();
    let again = c
        .add_eval_member("regress", &member(one, None, None))
        .await
        .unwrap();
    assert_eq!(
        first, again,
        "marking the same thread and range again is a no-op"
    );
    let ranged = c
        .add_eval_member("regress", &member(one, Some(2), Some(3)))
        .await
        .unwrap();
    assert_ne!(ranged.id, first.id);
    assert_eq!(
        c.add_eval_member("regress", &member(one, Some(2), Some(3)))
            .await
            .unwrap()
            .id,
        ranged.id
    );
    let other = c
        .add_eval_member("regress", &member(two, Some(1), None))
        .await
        .unwrap();
    assert_eq!(other.labels.session.as_deref(), Some("e2"));
    for (suite, request, status, code) in [
        ("Bad", member(one, None, None), 400, ErrorCode::InvalidPath),
        (
            "regress",
            member(one, Some(3), Some(2)),
            400,
            ErrorCode::InvalidBody,
        ),
        (
            "regress",
            member(ThreadId::new_v7(), None, None),
            404,
            ErrorCode::NotFound,
        ),
    ] {
        let err = c.add_eval_member(suite, &request).await.unwrap_err();
        let (got, code_got, message) = refusal(&err);
        assert_eq!((got, code_got), (status, code), "{message}");
    }
    let suite = c.eval_suite("regress").await.unwrap();
    let ids: Vec<u64> = suite.members.iter().map(|m| m.id).collect();
    assert_eq!(ids, [first.id, ranged.id, other.id]);
    assert!(suite.last_run.is_none());
    let err = c.eval_suite("nobody-named-it").await.unwrap_err();
    assert_eq!(refusal(&err).0, 404);

    let run = |key: &str, passed: bool| EvalRunRequest {
        key: key.into(),
        candidate: "model gpt-x".into(),
        cases: vec![case(one, ThreadId::new_v7(), passed)],
        passed,
    };
    let stored = c
        .store_eval_run("regress", &run("r1", false))
        .await
        .unwrap();
    assert!(!stored.duplicate);
    let dup = c.store_eval_run("regress", &run("r1", true)).await.unwrap();
    assert_eq!((dup.id, dup.duplicate), (stored.id, true));
    let second = c.store_eval_run("regress", &run("r2", true)).await.unwrap();
    assert_ne!(second.id, stored.id);
    let bad_runs = [
        (run("", true), "key"),
        (
            EvalRunRequest {
                candidate: "x".repeat(201),
                ..run("r3", true)
            },
            "candidate",
        ),
        (
            EvalRunRequest {
                cases: vec![EvalCaseResult {
                    name: "n".repeat(301),
                    ..case(one, one, true)
                }],
                ..run("r3", true)
            },
            "cases[0].name",
        ),
        (
            EvalRunRequest {
                cases: vec![EvalCaseResult {
                    failed_checks: vec!["f".into(); 51],
                    ..case(one, one, true)
                }],
                ..run("r3", true)
            },
            "cases[0].failed_checks",
        ),
    ];
    for (request, field) in bad_runs {
        let err = c.store_eval_run("regress", &request).await.unwrap_err();
        let (status, code, message) = refusal(&err);
        assert_eq!((status, code), (400, ErrorCode::InvalidBody), "{message}");
        assert!(
            message.contains(&format!("`{field}`")),
            "{field}: {message}"
        );
    }
    let suite = c.eval_suite("regress").await.unwrap();
    let last = suite.last_run.expect("a last run");
    assert_eq!((last.id, last.passed), (second.id, true));
    assert_eq!(last.cases[0].thread, one);
    let list = c.eval_suites().await.unwrap();
    let listed = list.suites.iter().find(|s| s.name == "regress").unwrap();
    assert_eq!((listed.members, listed.last_run_passed), (3, Some(true)));
    assert!(listed.last_run_at.is_some());

    assert!(c.remove_eval_member("regress", other.id).await.unwrap());
    assert!(!c.remove_eval_member("regress", other.id).await.unwrap());
    // A purge of a thread removes its memberships; the suite keeps its runs.
    assert!(c.purge(one).await.unwrap());
    let suite = c.eval_suite("regress").await.unwrap();
    assert!(suite.members.is_empty());
    assert!(suite.last_run.is_some());
    // A suite with members only, emptied, is gone from the list.
    c.add_eval_member("only-members", &member(two, None, None))
        .await
        .unwrap();
    let m = c.eval_suite("only-members").await.unwrap().members[0].id;
    assert!(c.remove_eval_member("only-members", m).await.unwrap());
    assert_eq!(
        refusal(&c.eval_suite("only-members").await.unwrap_err()).0,
        404
    );
    let names: Vec<String> = c
        .eval_suites()
        .await
        .unwrap()
        .suites
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["regress"]);
    api.stop().await;
}
