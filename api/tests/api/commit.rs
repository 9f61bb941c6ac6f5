//! `POST …/commit` on both backends: one durable step (a version, ledger intents and outcomes, the
//! inbox cursor in the state) is written whole or not at all.

use ninetrix_client::{Client, ClientError, ErrorCode, Token};
use ninetrix_proto::api::{
    CheckpointState, CommitIntent, CommitOutcome, CommitRequest, EventsRequest, NewEvent,
    ThreadStatus, ToolCallStatus,
};
use ninetrix_proto::effects::Effect;
use ninetrix_proto::{Message, Role, ThreadId};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{
    ADMIN, Backend, TestApi, both_backends, calling, calling_json, message, result_json, result_of,
};

both_backends!(
    a_commit_writes_the_version_the_ledger_and_the_cursor_together,
    a_refused_commit_writes_no_message_no_ledger_row_and_no_cursor,
    resent_intents_return_the_recorded_records_untouched,
    the_first_outcome_wins_across_commits,
    racing_commits_on_one_parent_leave_exactly_one_step,
    a_runner_reads_the_ledger_of_one_turn,
    events_on_a_commit_follow_those_stored_and_reach_the_stream_with_it,
);

/// The admin's typed client (the ledger listing is an admin route).
fn admin(api: &TestApi) -> Client {
    Client::new(api.client.clone(), &api.url, Some(Token::new(ADMIN)))
}

/// A thread, its runner token, its epoch, and a typed client with that token.
async fn setup(api: &TestApi) -> (ThreadId, String, u64, Client) {
    let thread = ThreadId::new_v7();
    let token = api.runner_token(thread).await;
    let epoch = api.claim(thread, &token).await;
    let client = Client::new(
        api.client.clone(),
        &api.url,
        Some(Token::new(token.clone())),
    );
    (thread, token, epoch, client)
}

fn state(turn_seq: u64, turn_start: u64, cursor: u64) -> CheckpointState {
    CheckpointState {
        turn_seq,
        turn_start_history_len: turn_start,
        status: ThreadStatus::InTurn,
        inbox_cursor: cursor,
        usage: Default::default(),
        handoff: None,
        attempt: None,
        context: None,
        ..Default::default()
    }
}

fn intent(key: &str, path: &str) -> CommitIntent {
    CommitIntent {
        key: key.into(),
        turn_seq: 1,
        tool: "file_write".into(),
        args: json!({"path": path}),
        effect: Effect::Write,
    }
}

fn outcome(key: &str, ok: bool, result: &str) -> CommitOutcome {
    CommitOutcome {
        key: key.into(),
        ok,
        result: result.into(),
    }
}

fn step(epoch: u64, parent: u64, append: Vec<Message>, state: CheckpointState) -> CommitRequest {
    CommitRequest {
        epoch,
        parent_version: parent,
        truncate_to: None,
        append,
        state,
        intents: Vec::new(),
        outcomes: Vec::new(),
        events: Vec::new(),
        approvals: Vec::new(),
        handoff_reply: None,
        turn_end: None,
    }
}

/// What a refused commit must leave as it was: the version chain, the live history, the state
/// (with its cursor) and the ledger.
async fn snapshot(api: &TestApi, thread: ThreadId) -> (Value, Value, Value, Value) {
    let (_, versions) = api
        .admin(
            Method::GET,
            format!("/v1/threads/{thread}/checkpoints"),
            None,
        )
        .await;
    let (_, latest) = api
        .admin(
            Method::GET,
            format!("/v1/runners/threads/{thread}/latest"),
            None,
        )
        .await;
    let (_, ledger) = api
        .admin(
            Method::GET,
            format!("/v1/threads/{thread}/tool-calls"),
            None,
        )
        .await;
    let (_, events) = api
        .admin(Method::GET, format!("/v1/threads/{thread}/events"), None)
        .await;
    (versions, latest, ledger, events)
}

async fn enqueue(api: &TestApi, thread: ThreadId, content: &str) -> u64 {
    let (status, body) = api
        .admin(
            Method::POST,
            format!("/v1/threads/{thread}/messages"),
            Some(json!({"content": content})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["seq"].as_u64().unwrap()
}

async fn a_commit_writes_the_version_the_ledger_and_the_cursor_together(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, _, epoch, client) = setup(&api).await;
    let first = enqueue(&api, thread, "write two files").await;
    let second = enqueue(&api, thread, "and then stop").await;

    // The model's response with the intents of the two writes it asks for, and the input taken
    // from the inbox (cursor 1): one commit.
    let mut model_round = step(
        epoch,
        0,
        vec![
            Message::text(Role::User, "write two files"),
            calling(&["c1", "c2"]),
        ],
        state(1, 1, first),
    );
    model_round.intents = vec![intent("w1", "a.txt"), intent("w2", "b.txt")];
    let done = client.commit(thread, &model_round).await.unwrap();
    assert_eq!((done.version, done.history_len), (1, 2));
    let got: Vec<(&str, ToolCallStatus, u64, Option<&str>)> = done
        .records
        .iter()
        .map(|r| {
            (
                r.key.as_str(),
                r.status,
                r.intent_epoch,
                r.result.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("w1", ToolCallStatus::Intent, epoch, None),
            ("w2", ToolCallStatus::Intent, epoch, None)
        ]
    );
    let latest = client.latest(thread).await.unwrap().unwrap();
    assert_eq!(latest.state.inbox_cursor, first);
    // The cursor is what the runner resumes from: the second message is still ahead of it.
    let ahead = client
        .inbox(
            thread,
            latest.state.inbox_cursor,
            std::time::Duration::ZERO,
            10,
        )
        .await
        .unwrap();
    assert_eq!(
        ahead.iter().map(|m| m.seq).collect::<Vec<_>>(),
        [second],
        "only the message after the cursor is still to take"
    );

    // The first write's outcome with its tool result message: the next commit.
    let mut tool_round = step(
        epoch,
        1,
        vec![result_of("c1", "wrote a.txt")],
        state(1, 1, first),
    );
    tool_round.outcomes = vec![outcome("w1", true, "wrote a.txt")];
    let done = client.commit(thread, &tool_round).await.unwrap();
    assert_eq!((done.version, done.history_len), (2, 3));
    assert!(done.records.is_empty(), "records answer intents only");

    // An intent and its outcome in one commit (a call whose result rides on the same write).
    let mut both = step(
        epoch,
        2,
        vec![result_of("c2", "wrote b.txt")],
        state(1, 1, second),
    );
    both.intents = vec![intent("r1", "c.txt")];
    both.outcomes = vec![outcome("w2", false, "disk full"), outcome("r1", true, "ok")];
    let done = client.commit(thread, &both).await.unwrap();
    assert_eq!(done.version, 3);
    assert_eq!(
        (done.records[0].key.as_str(), done.records[0].status),
        ("r1", ToolCallStatus::Completed),
        "the records are as stored when the commit ended"
    );

    let ledger = admin(&api).tool_calls(thread).await.unwrap();
    let mut got: Vec<(String, ToolCallStatus, Option<String>, Option<u64>)> = ledger
        .into_iter()
        .map(|r| (r.key, r.status, r.result, r.completed_epoch))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        [
            (
                "r1".into(),
                ToolCallStatus::Completed,
                Some("ok".into()),
                Some(epoch)
            ),
            (
                "w1".into(),
                ToolCallStatus::Completed,
                Some("wrote a.txt".into()),
                Some(epoch)
            ),
            (
                "w2".into(),
                ToolCallStatus::Failed,
                Some("disk full".into()),
                Some(epoch)
            ),
        ]
    );
    let latest = client.latest(thread).await.unwrap().unwrap();
    assert_eq!((latest.version, latest.state.inbox_cursor), (3, second));
    assert_eq!(latest.history.len(), 4);
    api.stop().await;
}

async fn a_refused_commit_writes_no_message_no_ledger_row_and_no_cursor(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, old_epoch, _) = setup(&api).await;
    let epoch = api.claim(thread, &token).await;
    let path = format!("/v1/runners/threads/{thread}/commit");
    // Version 1 with a completed call `done` and an open one `open`.
    let mut first = json!({
        "epoch": epoch, "parent_version": 0,
        "append": [message("user", "q"), calling_json(&["c1", "c2"])],
        "state": {"turn_seq": 1, "turn_start_history_len": 1, "status": "in_turn", "inbox_cursor": 1},
        "intents": [
            {"key": "done", "turn_seq": 1, "tool": "t", "args": {}, "effect": "write"},
            {"key": "open", "turn_seq": 1, "tool": "t", "args": {}, "effect": "write"}
        ],
    });
    let (status, body) = api
        .call(Method::POST, &path, Some(&token), Some(first.clone()))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    first["parent_version"] = 1.into();
    first["append"] = json!([result_json("c1", "r")]);
    first["intents"] = json!([]);
    first["outcomes"] = json!([{"key": "done", "ok": true, "result": "r"}]);
    let (status, body) = api
        .call(Method::POST, &path, Some(&token), Some(first))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let before = snapshot(&api, thread).await;

    // Each refused commit would append a message, advance the cursor, add an intent `new` and
    // complete `open` — if any of it were written.
    let good = || {
        json!({
            "epoch": epoch, "parent_version": 2,
            "append": [result_json("c2", "should not be stored")],
            "state": {"turn_seq": 1, "turn_start_history_len": 1, "status": "in_turn", "inbox_cursor": 9},
            "intents": [{"key": "new", "turn_seq": 1, "tool": "t", "args": {}, "effect": "write"}],
            "outcomes": [{"key": "open", "ok": true, "result": "x"}],
            "events": [{"type": "turn_completed", "data": {"seq": 9}}],
        })
    };
    let with = |f: &dyn Fn(&mut Value)| {
        let mut b = good();
        f(&mut b);
        b
    };
    let cases: Vec<(&str, Value, StatusCode, &str)> = vec![
        (
            "stale epoch",
            with(&|b| b["epoch"] = old_epoch.into()),
            StatusCode::CONFLICT,
            "fenced",
        ),
        (
            "stale parent",
            with(&|b| b["parent_version"] = 1.into()),
            StatusCode::CONFLICT,
            "version_conflict",
        ),
        (
            "parent from the future",
            with(&|b| b["parent_version"] = 7.into()),
            StatusCode::CONFLICT,
            "version_conflict",
        ),
        (
            "another outcome for a completed call",
            with(&|b| {
                b["outcomes"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"key": "done", "ok": false, "result": "other"}))
            }),
            StatusCode::CONFLICT,
            "already_completed",
        ),
        (
            "an outcome for a key not in the ledger",
            with(&|b| b["outcomes"] = json!([{"key": "nope", "ok": true, "result": ""}])),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "an empty intent key",
            with(&|b| b["intents"][0]["key"] = "".into()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_key",
        ),
        (
            "an outcome key too long",
            with(&|b| b["outcomes"][0]["key"] = "k".repeat(129).into()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_key",
        ),
        (
            "an event without a type",
            with(&|b| b["events"][0]["type"] = "".into()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_event",
        ),
        (
            "truncation past the end",
            with(&|b| b["truncate_to"] = 9.into()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_truncate",
        ),
        (
            "a state past the history",
            with(&|b| b["state"]["turn_start_history_len"] = 50.into()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_state",
        ),
        (
            "an unknown field",
            with(&|b| b["cursor"] = 3.into()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
        ),
    ];
    for (what, body, want_status, want_code) in cases {
        let (status, answer) = api
            .call(Method::POST, &path, Some(&token), Some(body))
            .await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (want_status, Some(want_code)),
            "{what}: {answer}"
        );
        assert_eq!(
            snapshot(&api, thread).await,
            before,
            "{what}: a refused commit changed the thread"
        );
    }
    // The same commit, valid, is accepted as a whole.
    let (status, answer) = api
        .call(Method::POST, &path, Some(&token), Some(good()))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let (_, _, ledger, events) = snapshot(&api, thread).await;
    assert_eq!(ledger.as_array().unwrap().len(), 3);
    let kinds: Vec<_> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].clone())
        .collect();
    assert_eq!(kinds, [json!("turn_completed")], "{events}");
    api.stop().await;
}

async fn resent_intents_return_the_recorded_records_untouched(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, token, epoch, client) = setup(&api).await;
    let mut model_round = step(epoch, 0, vec![calling(&["c1", "c2"])], state(1, 0, 0));
    model_round.intents = vec![intent("w1", "a.txt"), intent("w2", "b.txt")];
    client.commit(thread, &model_round).await.unwrap();
    let mut tool_round = step(epoch, 1, vec![result_of("c1", "wrote a")], state(1, 0, 0));
    tool_round.outcomes = vec![outcome("w1", true, "wrote a")];
    client.commit(thread, &tool_round).await.unwrap();

    // A new runner (after a crash) repeats the model round: the same calls (the same keys, as
    // keys are derived from the turn, tool and arguments) and a new one.
    let epoch2 = api.claim(thread, &token).await;
    let mut again = step(
        epoch2,
        2,
        vec![Message::text(Role::Assistant, "calls again")],
        state(1, 0, 0),
    );
    again.intents = vec![
        intent("w1", "a.txt"),
        intent("w2", "b.txt"),
        intent("w3", "c.txt"),
    ];
    let done = client.commit(thread, &again).await.unwrap();
    let got: Vec<(&str, ToolCallStatus, Option<&str>, u64, Value)> = done
        .records
        .iter()
        .map(|r| {
            (
                r.key.as_str(),
                r.status,
                r.result.as_deref(),
                r.intent_epoch,
                r.args.clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            // Completed: replay the result, do not run it again.
            (
                "w1",
                ToolCallStatus::Completed,
                Some("wrote a"),
                epoch,
                json!({"path": "a.txt"})
            ),
            // Left open by the earlier epoch: the ambiguity rule applies (its intent_epoch says so).
            (
                "w2",
                ToolCallStatus::Intent,
                None,
                epoch,
                json!({"path": "b.txt"})
            ),
            // New: this epoch's intent.
            (
                "w3",
                ToolCallStatus::Intent,
                None,
                epoch2,
                json!({"path": "c.txt"})
            ),
        ]
    );
    assert_eq!(admin(&api).tool_calls(thread).await.unwrap().len(), 3);

    // A stored key sent with other arguments (or another tool) is a client bug: 409
    // `key_reused`, and nothing of the commit is written.
    for (tool_changed, reused) in [
        (false, intent("w1", "changed.txt")),
        (true, {
            let mut i = intent("w3", "c.txt");
            i.tool = "other_tool".into();
            i
        }),
    ] {
        let mut reuse = step(
            epoch2,
            3,
            vec![Message::text(Role::Assistant, "x")],
            state(1, 0, 0),
        );
        reuse.intents = vec![intent("w4", "d.txt"), reused];
        let err = client.commit(thread, &reuse).await.unwrap_err();
        assert!(
            matches!(
                &err,
                ClientError::Api {
                    status: 409,
                    code: ErrorCode::KeyReused,
                    ..
                }
            ),
            "tool changed: {tool_changed}: {err:?}"
        );
    }
    let ledger = admin(&api).tool_calls(thread).await.unwrap();
    assert_eq!(ledger.len(), 3, "w4 of the refused commits is not written");
    assert_eq!(
        ledger[0].args,
        json!({"path": "a.txt"}),
        "the stored record is unchanged"
    );
    assert_eq!(client.latest(thread).await.unwrap().unwrap().version, 3);
    api.stop().await;
}

async fn the_first_outcome_wins_across_commits(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, _, epoch, client) = setup(&api).await;
    let mut model_round = step(epoch, 0, vec![], state(1, 0, 0));
    model_round.intents = vec![intent("w1", "a.txt")];
    client.commit(thread, &model_round).await.unwrap();
    let mut first = step(epoch, 1, vec![], state(1, 0, 0));
    first.outcomes = vec![outcome("w1", true, "first")];
    client.commit(thread, &first).await.unwrap();

    // The same outcome again (a retried step) is harmless.
    let mut same = step(epoch, 2, vec![], state(1, 0, 0));
    same.outcomes = vec![outcome("w1", true, "first")];
    assert_eq!(client.commit(thread, &same).await.unwrap().version, 3);
    // Another one is refused, and its version is not written.
    for (ok, result) in [(true, "second"), (false, "first")] {
        let mut other = step(
            epoch,
            3,
            vec![Message::text(Role::User, "x")],
            state(1, 0, 0),
        );
        other.outcomes = vec![outcome("w1", ok, result)];
        let err = client.commit(thread, &other).await.unwrap_err();
        assert!(
            matches!(
                &err,
                ClientError::Api {
                    code: ErrorCode::AlreadyCompleted,
                    ..
                }
            ),
            "{err}"
        );
    }
    let latest = client.latest(thread).await.unwrap().unwrap();
    assert_eq!((latest.version, latest.history.len()), (3, 0));
    let ledger = admin(&api).tool_calls(thread).await.unwrap();
    assert_eq!(ledger[0].result.as_deref(), Some("first"));
    api.stop().await;
}

async fn racing_commits_on_one_parent_leave_exactly_one_step(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, _, epoch, client) = setup(&api).await;
    let attempts = (0..8).map(|i| {
        let client = client.clone();
        async move {
            let mut body = step(
                epoch,
                0,
                vec![Message::text(Role::Assistant, format!("w{i}"))],
                state(1, 0, i),
            );
            body.intents = vec![intent(&format!("k{i}"), "x")];
            (i, client.commit(thread, &body).await)
        }
    });
    let results = futures_util::future::join_all(attempts).await;
    let winners: Vec<u64> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for (_, r) in &results {
        if let Err(e) = r {
            assert_eq!(e.code(), Some(&ErrorCode::VersionConflict), "{e}");
        }
    }
    let ledger = admin(&api).tool_calls(thread).await.unwrap();
    assert_eq!(
        ledger.iter().map(|r| r.key.clone()).collect::<Vec<_>>(),
        [format!("k{}", winners[0])],
        "only the winner's intents are in the ledger"
    );
    let latest = client.latest(thread).await.unwrap().unwrap();
    assert_eq!(latest.state.inbox_cursor, winners[0]);
    api.stop().await;
}

/// `GET …/tool-calls?turn_seq=N` (runner route): the records of turn N only, oldest first — what
/// a runner resuming turn N decides its calls by.
async fn a_runner_reads_the_ledger_of_one_turn(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, _, epoch, client) = setup(&api).await;
    let mut first = step(epoch, 0, vec![], state(1, 0, 0));
    first.intents = vec![intent("t1a", "a"), intent("t1b", "b")];
    first.outcomes = vec![outcome("t1a", true, "done a")];
    client.commit(thread, &first).await.unwrap();
    let mut second = step(epoch, 1, vec![], state(2, 0, 0));
    second.intents = vec![CommitIntent {
        turn_seq: 2,
        ..intent("t2", "c")
    }];
    client.commit(thread, &second).await.unwrap();

    let turn1 = client.turn_tool_calls(thread, 1).await.unwrap();
    let got: Vec<(&str, ToolCallStatus)> =
        turn1.iter().map(|r| (r.key.as_str(), r.status)).collect();
    assert_eq!(
        got,
        [
            ("t1a", ToolCallStatus::Completed),
            ("t1b", ToolCallStatus::Intent)
        ]
    );
    let turn2 = client.turn_tool_calls(thread, 2).await.unwrap();
    assert_eq!(
        turn2.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["t2"]
    );
    assert!(client.turn_tool_calls(thread, 3).await.unwrap().is_empty());
    // A turn past what the store can hold is a bad query, not an empty answer.
    let (status, body) = api
        .admin(
            Method::GET,
            format!("/v1/runners/threads/{thread}/tool-calls?turn_seq=9223372036854775808"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("turn_seq"),
        "{body}"
    );
    api.stop().await;
}

/// Events that ride on a commit are stored in its transaction, numbered after those already
/// stored, and wake a reader of the thread's event stream — the reply a caller waits for costs the
/// runner no write of its own.
async fn events_on_a_commit_follow_those_stored_and_reach_the_stream_with_it(backend: Backend) {
    use futures_util::StreamExt as _;
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let (thread, _, epoch, client) = setup(&api).await;
    let event = |kind: &str, n: u64| NewEvent {
        kind: kind.into(),
        data: json!({ "n": n }),
    };
    let sent = client
        .append_events(
            thread,
            &EventsRequest {
                epoch,
                events: vec![event("boot", 1), event("ready", 2)],
            },
            std::time::Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(sent.last_seq, 2);
    let admin = admin(&api);
    let mut stream = Box::pin(admin.event_stream(thread, 2).await.unwrap());
    let mut turn = step(
        epoch,
        0,
        vec![
            Message::text(Role::User, "q"),
            Message::text(Role::Assistant, "a"),
        ],
        state(1, 0, 0),
    );
    turn.events = vec![event("checkpoint", 3), event("turn_completed", 4)];
    client.commit(thread, &turn).await.unwrap();
    for want in [(3, "checkpoint"), (4, "turn_completed")] {
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .expect("the commit's events reach the stream")
            .unwrap()
            .unwrap();
        assert_eq!((got.seq, got.kind.as_str()), want);
        assert_eq!(got.data["n"], json!(want.0));
    }
    let all = admin.events_after(thread, 0).await.unwrap();
    let seqs: Vec<_> = all.iter().map(|e| (e.seq, e.epoch)).collect();
    assert_eq!(seqs, [(1, epoch), (2, epoch), (3, epoch), (4, epoch)]);
    api.stop().await;
}
