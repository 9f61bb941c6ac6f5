//! Going back in a conversation (issue 41) over HTTP, on both backends: forks share their
//! parent's rows, forks of forks, the ledger a fork inherits, rewinds and their refusals, the end
//! of a turn, snapshot objects (hashes, missing children, reference counts, pools), purges of
//! threads that forks lean on, and diffs.

use ninetrix_client::{Client, ClientError, ErrorCode, Token};
use ninetrix_proto::api::{
    CheckpointState, CommitIntent, CommitRequest, CommitResponse, Control, EnqueueRequest,
    ForkRequest, RewindRequest, ThreadStatus, TurnEnd,
};
use ninetrix_proto::effects::Effect;
use ninetrix_proto::snapshots::{
    ChangeKind, FileEntry, ObjectId, ObjectKind, SnapshotRef, Tree, build,
};
use ninetrix_proto::{Message, Role, ThreadId};
use serde_json::json;

use crate::support::{ADMIN, Backend, TestApi, both_backends, count, refusal};

both_backends!(
    forks_at_every_turn_read_their_history_and_share_one_copy_of_it,
    a_fork_of_a_fork_reads_through_both_and_inherits_the_ledger,
    a_rewind_is_refused_while_busy_or_for_a_turn_it_cannot_go_back_to,
    a_turn_point_has_the_history_state_and_the_effects_not_undone,
    objects_are_hashed_complete_counted_and_kept_per_pool,
    a_purge_keeps_the_messages_forks_share_until_the_last_of_them_goes,
    a_diff_of_one_changed_file_among_ten_thousand_lists_that_file,
);

fn enqueued(content: &str, control: Option<Control>) -> EnqueueRequest {
    EnqueueRequest {
        content: content.into(),
        dedupe_key: None,
        control,
        mode: None,
    }
}

fn admin(api: &TestApi) -> Client {
    Client::new(api.client.clone(), &api.url, Some(Token::new(ADMIN)))
}

/// A session's thread as its runner drives it.
struct Runner {
    thread: ThreadId,
    epoch: u64,
    version: u64,
    turn: u64,
    history: Vec<Message>,
}

/// A claimed session `key` of agent `a` in `pool`.
async fn session(c: &Client, pool: &str, key: &str) -> Runner {
    let thread = c.open_session(pool, "a", key).await.unwrap().thread_id;
    runner(c, thread).await
}

/// Claims `thread` (a fork) and reads where it stands.
async fn runner(c: &Client, thread: ThreadId) -> Runner {
    let epoch = c.claim(thread, &Default::default()).await.unwrap().epoch;
    let latest = c.latest(thread).await.unwrap();
    Runner {
        thread,
        epoch,
        version: latest.as_ref().map_or(0, |s| s.version),
        turn: latest.as_ref().map_or(0, |s| s.state.turn_seq),
        history: latest.map(|s| s.history).unwrap_or_default(),
    }
}

/// The next turn of `r`, ended with `n` messages (a user message and answers), the ledger
/// intents given and a snapshot.
async fn end_turn(
    c: &Client,
    r: &mut Runner,
    n: usize,
    intents: Vec<(&str, Effect)>,
    snapshot: Option<SnapshotRef>,
    keep_turns: Option<u32>,
) -> Result<CommitResponse, ClientError> {
    end_turn_skipped(c, r, n, intents, snapshot, keep_turns, None).await
}

/// [`end_turn`], saying why the turn has no snapshot (`skipped`).
async fn end_turn_skipped(
    c: &Client,
    r: &mut Runner,
    n: usize,
    intents: Vec<(&str, Effect)>,
    snapshot: Option<SnapshotRef>,
    keep_turns: Option<u32>,
    skipped: Option<&str>,
) -> Result<CommitResponse, ClientError> {
    let turn = r.turn + 1;
    let append: Vec<Message> = (0..n)
        .map(|i| {
            let role = if i == 0 { Role::User } else { Role::Assistant };
            Message::text(role, format!("turn {turn} message {i}"))
        })
        .collect();
    let request = CommitRequest {
        epoch: r.epoch,
        parent_version: r.version,
        truncate_to: None,
        append: append.clone(),
        state: CheckpointState {
            turn_seq: turn,
            status: ThreadStatus::Idle,
            ..Default::default()
        },
        intents: intents
            .iter()
            .enumerate()
            .map(|(i, (tool, effect))| CommitIntent {
                key: format!("t{turn}-{i}"),
                turn_seq: turn,
                tool: (*tool).into(),
                args: json!({"i": i}),
                effect: *effect,
            })
            .collect(),
        outcomes: Vec::new(),
        events: Vec::new(),
        approvals: Vec::new(),
        handoff_reply: None,
        turn_end: Some(TurnEnd {
            turn_seq: turn,
            snapshot,
            snapshot_skipped: skipped.map(str::to_string),
            keep_turns,
        }),
    };
    let done = c.commit(r.thread, &request).await?;
    r.version = done.version;
    r.turn = turn;
    r.history.extend(append);
    Ok(done)
}

fn file(path: &str, content: &str) -> FileEntry {
    FileEntry {
        path: path.into(),
        mode: 0o644,
        size: content.len() as u64,
        blob: ObjectId::of(content.as_bytes()),
    }
}

/// Uploads `blobs` and then the nodes of `tree`, children first.
async fn upload(c: &Client, thread: ThreadId, blobs: &[&str], tree: &Tree) {
    for b in blobs {
        let id = ObjectId::of(b.as_bytes());
        c.put_object(thread, &id, ObjectKind::Blob, b.as_bytes().to_vec())
            .await
            .unwrap();
    }
    let ids: Vec<ObjectId> = tree.nodes.iter().map(|n| n.0.clone()).collect();
    let missing = c.missing_objects(thread, ids).await.unwrap();
    for (id, bytes) in &tree.nodes {
        if missing.contains(id) {
            c.put_object(thread, id, ObjectKind::Node, bytes.clone())
                .await
                .unwrap();
        }
    }
}

async fn forks_at_every_turn_read_their_history_and_share_one_copy_of_it(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let c = admin(&api);
    let mut r = session(&c, "p", "long").await;
    for _ in 0..50 {
        end_turn(&c, &mut r, 2, vec![], None, None).await.unwrap();
    }
    let rows = count(&api, "SELECT COUNT(*) FROM messages").await;
    assert_eq!(rows, 100);
    for n in 1..=50u64 {
        let fork = c
            .fork(
                r.thread,
                &ForkRequest {
                    at_turn: n,
                    session: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(fork.history_len, 2 * n);
        assert!(fork.undone.is_empty() && fork.snapshot.is_none());
        let latest = c.latest(fork.thread_id).await.unwrap().unwrap();
        assert_eq!(
            latest.history,
            r.history[..2 * n as usize],
            "fork at turn {n}"
        );
        assert_eq!(latest.state.turn_seq, n);
        assert_eq!(latest.state.status, ThreadStatus::Idle);
        let v1 = c.version(fork.thread_id, 1).await.unwrap();
        assert_eq!(v1.history, latest.history);
        assert_eq!(v1.summary.history_len, 2 * n);
        let summary = c.thread(fork.thread_id).await.unwrap().unwrap();
        let origin = summary.forked_from.unwrap();
        assert_eq!((origin.parent, origin.at_turn), (r.thread, n));
        assert_eq!(
            summary.labels.session.as_deref(),
            Some(fork.session.as_str())
        );
    }
    assert_eq!(
        count(&api, "SELECT COUNT(*) FROM messages").await,
        rows,
        "fifty forks copied no message"
    );
    let turns = c.turns(r.thread).await.unwrap();
    assert_eq!(turns.turns.len(), 50);
    assert!(
        turns
            .turns
            .iter()
            .all(|t| t.live && t.thread_id == r.thread)
    );
    assert_eq!(turns.forks.len(), 50);
    // A session key the agent uses is refused, naming its thread.
    let taken = turns.forks[0].session.clone().unwrap();
    let err = c
        .fork(
            r.thread,
            &ForkRequest {
                at_turn: 1,
                session: Some(taken),
            },
        )
        .await
        .unwrap_err();
    let (status, code, message) = refusal(&err);
    assert_eq!((status, code), (409, ErrorCode::KeyReused));
    assert!(
        message.contains(&turns.forks[0].thread_id.to_string()),
        "{message}"
    );
    let err = c
        .fork(
            r.thread,
            &ForkRequest {
                at_turn: 51,
                session: None,
            },
        )
        .await
        .unwrap_err();
    let (status, _, message) = refusal(&err);
    assert_eq!(status, 404);
    assert!(message.contains("50 turns, 1 to 50"), "{message}");
}

async fn a_fork_of_a_fork_reads_through_both_and_inherits_the_ledger(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let c = admin(&api);
    let mut root = session(&c, "p", "root").await;
    end_turn(&c, &mut root, 2, vec![], None, None)
        .await
        .unwrap();
    end_turn(&c, &mut root, 2, vec![("shell", Effect::Write)], None, None)
        .await
        .unwrap();
    end_turn(&c, &mut root, 2, vec![], None, None)
        .await
        .unwrap();
    end_turn(
        &c,
        &mut root,
        2,
        vec![("deploy", Effect::Write), ("file_read", Effect::Read)],
        None,
        None,
    )
    .await
    .unwrap();
    // Forked at turn 3: the parent's turn 4 wrote outside the workspace, so a note says so.
    let f1 = c
        .fork(
            root.thread,
            &ForkRequest {
                at_turn: 3,
                session: Some("first".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(f1.history_len, 7, "six shared messages and the note");
    assert_eq!(f1.undone.len(), 1);
    assert_eq!(
        (f1.undone[0].turn_seq, f1.undone[0].tool.as_str()),
        (4, "deploy")
    );
    let mut f1r = runner(&c, f1.thread_id).await;
    assert_eq!(f1r.history[..6], root.history[..6]);
    let note = &f1r.history[6];
    assert_eq!(note.role, Role::System);
    assert!(
        note.text_content().contains("deploy"),
        "{}",
        note.text_content()
    );
    end_turn(&c, &mut f1r, 2, vec![("mail", Effect::Write)], None, None)
        .await
        .unwrap();
    end_turn(&c, &mut f1r, 2, vec![], None, None).await.unwrap();
    assert_eq!(f1r.turn, 5);
    // A fork of the fork at its own turn 4, and one at a turn it shares with the root.
    let f2 = c
        .fork(
            f1.thread_id,
            &ForkRequest {
                at_turn: 4,
                session: None,
            },
        )
        .await
        .unwrap();
    let f2_latest = c.latest(f2.thread_id).await.unwrap().unwrap();
    assert_eq!(f2_latest.history[..9], f1r.history[..9]);
    assert_eq!(f2.undone.len(), 0, "turn 5 of the first fork wrote nothing");
    let f3 = c
        .fork(
            f1.thread_id,
            &ForkRequest {
                at_turn: 2,
                session: None,
            },
        )
        .await
        .unwrap();
    let f3_latest = c.latest(f3.thread_id).await.unwrap().unwrap();
    assert_eq!(f3_latest.history[..4], root.history[..4]);
    // The second fork's turns: the root's 1 to 3 (the first fork's own row for 3), the first
    // fork's 4, and its own row for 4.
    let list = c.turns(f2.thread_id).await.unwrap();
    let whose: Vec<(u64, ThreadId)> = list
        .turns
        .iter()
        .map(|t| (t.turn_seq, t.thread_id))
        .collect();
    assert_eq!(
        whose,
        [
            (1, root.thread),
            (2, root.thread),
            (3, f1.thread_id),
            (4, f2.thread_id)
        ]
    );
    assert!(list.turns.iter().all(|t| t.live), "{list:?}");
    assert_eq!(list.forked_from.unwrap().parent, f1.thread_id);
    let parent_list = c.turns(f1.thread_id).await.unwrap();
    assert_eq!(parent_list.forks.len(), 2);
    // The fork's shared turns answer the root's ledger; its own turns its own.
    let shared = c.turn_tool_calls(f2.thread_id, 2).await.unwrap();
    assert_eq!(shared.len(), 1);
    assert_eq!(shared[0].tool, "shell");
    let own = c.turn_tool_calls(f1.thread_id, 4).await.unwrap();
    assert_eq!(own.len(), 1);
    assert_eq!(own[0].tool, "mail");
    assert!(c.turn_tool_calls(f1.thread_id, 5).await.unwrap().is_empty());
    let listed: Vec<String> = c
        .tool_calls(f1.thread_id)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.tool)
        .collect();
    assert_eq!(
        listed,
        ["shell", "mail"],
        "the root's turn 4 is not the fork's"
    );
    // The events say what happened.
    let events = c.events_page(f1.thread_id, 0, Some(100)).await.unwrap();
    assert_eq!(events[0].kind, "forked");
    let root_events = c.events_page(root.thread, 0, Some(100)).await.unwrap();
    assert!(root_events.iter().any(|e| e.kind == "fork_created"));
}

async fn a_rewind_is_refused_while_busy_or_for_a_turn_it_cannot_go_back_to(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let c = admin(&api);
    let mut r = session(&c, "p", "rw").await;
    let tree = build(vec![file("a.txt", "one")]);
    upload(&c, r.thread, &["one"], &tree).await;
    for _ in 0..4 {
        end_turn(&c, &mut r, 2, vec![], Some(tree.snapshot.clone()), Some(2))
            .await
            .unwrap();
    }
    let list = c.turns(r.thread).await.unwrap();
    let dropped: Vec<bool> = list.turns.iter().map(|t| t.snapshot_dropped).collect();
    assert_eq!(dropped, [true, true, false, false], "keep_turns 2");
    let rewind = |to_turn, key: Option<&str>| RewindRequest {
        to_turn,
        dedupe_key: key.map(str::to_string),
    };
    let err = c.rewind(r.thread, &rewind(9, None)).await.unwrap_err();
    let (status, _, message) = refusal(&err);
    assert_eq!(status, 404);
    assert!(message.contains("1, 2, 3, 4"), "{message}");
    let err = c.rewind(r.thread, &rewind(1, None)).await.unwrap_err();
    assert_eq!(refusal(&err).1, ErrorCode::SnapshotDropped);
    // A turn whose snapshot was skipped (past the limits): its files cannot be restored either,
    // so neither a rewind nor a fork goes back to it (fail-closed); a turn of an agent that takes
    // no snapshots can be gone back to (its files are left as they are).
    let mut s = session(&c, "p", "skipped").await;
    end_turn_skipped(
        &c,
        &mut s,
        2,
        vec![],
        None,
        Some(2),
        Some("20001 files: past execution.snapshots.max_files: 20000"),
    )
    .await
    .unwrap();
    end_turn(&c, &mut s, 2, vec![], None, None).await.unwrap();
    let listed = c.turns(s.thread).await.unwrap();
    assert_eq!(
        listed.turns[0].snapshot_skipped.as_deref(),
        Some("20001 files: past execution.snapshots.max_files: 20000")
    );
    assert_eq!(listed.turns[1].snapshot_skipped, None);
    let err = c.rewind(s.thread, &rewind(1, None)).await.unwrap_err();
    let (status, code, message) = refusal(&err);
    assert_eq!((status, code), (409, ErrorCode::SnapshotDropped));
    assert!(message.contains("was not taken: 20001 files"), "{message}");
    let fork_at = |at_turn| ForkRequest {
        at_turn,
        session: None,
    };
    let err = c.fork(s.thread, &fork_at(1)).await.unwrap_err();
    assert_eq!(refusal(&err).1, ErrorCode::SnapshotDropped);
    assert!(
        c.turn_point(s.thread, 1)
            .await
            .unwrap()
            .snapshot_skipped
            .is_some()
    );
    c.rewind(s.thread, &rewind(2, None)).await.unwrap();
    c.fork(s.thread, &fork_at(2)).await.unwrap();
    // A message waiting for the model: busy, naming the turn it starts.
    c.enqueue(r.thread, &enqueued("hi", None)).await.unwrap();
    let err = c.rewind(r.thread, &rewind(3, None)).await.unwrap_err();
    assert_eq!(refusal(&err).1, ErrorCode::Busy);
    assert_eq!(err.running().map(|t| t.turn_seq), Some(5));
    // In a turn: busy too.
    let mut state = c.latest(r.thread).await.unwrap().unwrap().state;
    state.status = ThreadStatus::InTurn;
    state.turn_seq = 5;
    state.inbox_cursor = 1;
    let step = CommitRequest {
        epoch: r.epoch,
        parent_version: r.version,
        truncate_to: None,
        append: vec![Message::text(Role::User, "hi")],
        state: state.clone(),
        intents: vec![],
        outcomes: vec![],
        events: vec![],
        approvals: vec![],
        handoff_reply: None,
        turn_end: None,
    };
    r.version = c.commit(r.thread, &step).await.unwrap().version;
    let err = c.rewind(r.thread, &rewind(3, None)).await.unwrap_err();
    assert_eq!(refusal(&err).1, ErrorCode::Busy);
    assert_eq!(err.running().map(|t| t.turn_seq), Some(5));
    // The turn ends; now the rewind is queued as a control, once per key.
    state.status = ThreadStatus::Idle;
    let end = CommitRequest {
        parent_version: r.version,
        append: vec![Message::text(Role::Assistant, "hello")],
        state,
        turn_end: Some(TurnEnd {
            turn_seq: 5,
            snapshot: None,
            snapshot_skipped: None,
            keep_turns: None,
        }),
        ..step
    };
    c.commit(r.thread, &end).await.unwrap();
    let queued = c.rewind(r.thread, &rewind(3, Some("k"))).await.unwrap();
    assert!(!queued.duplicate);
    assert_eq!((queued.from_turn, queued.to_turn), (5, 3));
    assert_eq!(queued.snapshot, Some(tree.snapshot.clone()));
    let again = c.rewind(r.thread, &rewind(3, Some("k"))).await.unwrap();
    assert_eq!((again.seq, again.duplicate), (queued.seq, true));
    let inbox = c
        .inbox(r.thread, 1, std::time::Duration::ZERO, 100)
        .await
        .unwrap();
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].control, Some(Control::Rewind));
    assert_eq!(inbox[0].to_turn, Some(3));
    assert_eq!(inbox[0].content, "ninetrix rewind to turn 3");
    // A rewind is never a plain message.
    let err = c
        .enqueue(r.thread, &enqueued("x", Some(Control::Rewind)))
        .await
        .unwrap_err();
    let (status, _, message) = refusal(&err);
    assert_eq!(status, 422);
    assert!(message.contains("/rewind"), "{message}");
}

async fn a_turn_point_has_the_history_state_and_the_effects_not_undone(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let c = admin(&api);
    let mut r = session(&c, "p", "tp").await;
    let tree = build(vec![file("a.txt", "one")]);
    upload(&c, r.thread, &["one"], &tree).await;
    end_turn(&c, &mut r, 2, vec![], None, None).await.unwrap();
    end_turn(&c, &mut r, 3, vec![], Some(tree.snapshot.clone()), None)
        .await
        .unwrap();
    end_turn(
        &c,
        &mut r,
        2,
        vec![
            ("file_write", Effect::Idempotent),
            ("file_read", Effect::Read),
            ("shell", Effect::Write),
        ],
        None,
        None,
    )
    .await
    .unwrap();
    end_turn(
        &c,
        &mut r,
        2,
        vec![("mcp_send", Effect::Idempotent)],
        None,
        None,
    )
    .await
    .unwrap();
    let point = c.turn_point(r.thread, 2).await.unwrap();
    assert_eq!(point.history, r.history[..5]);
    assert_eq!(point.state.turn_seq, 2);
    assert_eq!(point.snapshot, Some(tree.snapshot.clone()));
    let undone: Vec<(u64, &str)> = point
        .undone
        .iter()
        .map(|u| (u.turn_seq, u.tool.as_str()))
        .collect();
    assert_eq!(
        undone,
        [(3, "shell"), (4, "mcp_send")],
        "files restored: file_write undone"
    );
    // Turn 1 has no snapshot: its files stay as they are, so file_write is not undone.
    let point = c.turn_point(r.thread, 1).await.unwrap();
    assert_eq!(point.history, r.history[..2]);
    assert!(point.snapshot.is_none() && !point.snapshot_dropped);
    assert_eq!(point.undone.len(), 3);
    // The thread's own runner token reads it; an unknown turn is 404 naming those that ended.
    let token = api.token_of(r.thread).await;
    let own = Client::new(api.client.clone(), &api.url, Some(Token::new(token)));
    assert_eq!(
        own.turn_point(r.thread, 4).await.unwrap().history,
        r.history
    );
    let err = own.turn_point(r.thread, 7).await.unwrap_err();
    let (status, _, message) = refusal(&err);
    assert_eq!(status, 404);
    assert!(message.contains("1, 2, 3, 4"), "{message}");
    // A turn end must end the state's turn.
    let mut bad = r.turn;
    bad += 5;
    let err = c
        .commit(
            r.thread,
            &CommitRequest {
                epoch: r.epoch,
                parent_version: r.version,
                truncate_to: None,
                append: vec![],
                state: CheckpointState {
                    turn_seq: r.turn + 1,
                    ..Default::default()
                },
                intents: vec![],
                outcomes: vec![],
                events: vec![],
                approvals: vec![],
                handoff_reply: None,
                turn_end: Some(TurnEnd {
                    turn_seq: bad,
                    snapshot: None,
                    snapshot_skipped: None,
                    keep_turns: None,
                }),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(refusal(&err).0, 422);
}

async fn objects_are_hashed_complete_counted_and_kept_per_pool(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let c = admin(&api);
    let mut r = session(&c, "pool-a", "obj").await;
    // The ID must be the bytes' hash: both named.
    let wrong = ObjectId::of(b"something else");
    let err = c
        .put_object(r.thread, &wrong, ObjectKind::Blob, b"data".to_vec())
        .await
        .unwrap_err();
    let (status, _, message) = refusal(&err);
    assert_eq!(status, 422);
    assert!(
        message.contains(wrong.as_str()) && message.contains(ObjectId::of(b"data").as_str()),
        "{message}"
    );
    // A node before its files: 409 naming them.
    let one = build(vec![file("shared.txt", "shared"), file("only1.txt", "one")]);
    let (root, bytes) = one.nodes.last().unwrap();
    let err = c
        .put_object(r.thread, root, ObjectKind::Node, bytes.clone())
        .await
        .unwrap_err();
    let (status, code, message) = refusal(&err);
    assert_eq!((status, code), (409, ErrorCode::MissingObjects));
    assert!(
        message.contains(ObjectId::of(b"shared").as_str()),
        "{message}"
    );
    // A turn end naming a root that is not stored: 409 too, and nothing is written.
    let err = end_turn(&c, &mut r, 1, vec![], Some(one.snapshot.clone()), None)
        .await
        .unwrap_err();
    assert_eq!(refusal(&err).1, ErrorCode::MissingObjects);
    upload(&c, r.thread, &["shared", "one"], &one).await;
    assert!(
        c.missing_objects(r.thread, vec![root.clone()])
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        c.get_object(r.thread, &ObjectId::of(b"one")).await.unwrap(),
        b"one"
    );
    end_turn(&c, &mut r, 1, vec![], Some(one.snapshot.clone()), None)
        .await
        .unwrap();
    let two = build(vec![file("shared.txt", "shared"), file("only2.txt", "two")]);
    upload(&c, r.thread, &["two"], &two).await;
    // Keeping one turn drops turn 1's snapshot: what only it held goes, the shared file stays.
    end_turn(&c, &mut r, 1, vec![], Some(two.snapshot.clone()), Some(1))
        .await
        .unwrap();
    let gone = c
        .missing_objects(
            r.thread,
            vec![
                one.snapshot.root.clone(),
                ObjectId::of(b"one"),
                ObjectId::of(b"shared"),
                ObjectId::of(b"two"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(gone, [one.snapshot.root.clone(), ObjectId::of(b"one")]);
    let refs = count(
        &api,
        &format!(
            "SELECT refs FROM objects WHERE id = '{}'",
            ObjectId::of(b"shared")
        ),
    )
    .await;
    assert_eq!(refs, 1, "held by turn 2's root alone");
    // A fork of a dropped snapshot is refused.
    let err = c
        .fork(
            r.thread,
            &ForkRequest {
                at_turn: 1,
                session: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(refusal(&err).1, ErrorCode::SnapshotDropped);
    // Another pool's runner neither reads pool A's objects nor calls pool A's thread.
    let other = c.open_session("pool-b", "a", "b").await.unwrap().thread_id;
    let token = api.token_of(other).await;
    let b = Client::new(api.client.clone(), &api.url, Some(Token::new(token)));
    let err = b
        .get_object(other, &ObjectId::of(b"two"))
        .await
        .unwrap_err();
    assert_eq!(refusal(&err).0, 404);
    assert_eq!(
        b.missing_objects(other, vec![ObjectId::of(b"two")])
            .await
            .unwrap(),
        [ObjectId::of(b"two")]
    );
    let err = b
        .get_object(r.thread, &ObjectId::of(b"two"))
        .await
        .unwrap_err();
    assert_eq!(refusal(&err).0, 403);
    // At most 10,000 IDs a request.
    let many: Vec<ObjectId> = (0..10_001u32)
        .map(|i| ObjectId::of(&i.to_le_bytes()))
        .collect();
    let err = b.missing_objects(other, many).await.unwrap_err();
    assert_eq!(refusal(&err).1, ErrorCode::TooMany);
}

async fn a_purge_keeps_the_messages_forks_share_until_the_last_of_them_goes(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let c = admin(&api);
    let mut r = session(&c, "p", "purge").await;
    for _ in 0..3 {
        end_turn(&c, &mut r, 2, vec![], None, None).await.unwrap();
    }
    let f1 = c
        .fork(
            r.thread,
            &ForkRequest {
                at_turn: 2,
                session: None,
            },
        )
        .await
        .unwrap();
    let f2 = c
        .fork(
            r.thread,
            &ForkRequest {
                at_turn: 1,
                session: None,
            },
        )
        .await
        .unwrap();
    let own = |t: ThreadId| format!("SELECT COUNT(*) FROM messages WHERE thread_id = '{t}'");
    assert!(c.purge(r.thread).await.unwrap());
    assert_eq!(
        count(&api, &own(r.thread)).await,
        6,
        "the forks still read them"
    );
    assert_eq!(
        count(
            &api,
            &format!(
                "SELECT COUNT(*) FROM versions WHERE thread_id = '{}'",
                r.thread
            )
        )
        .await,
        0
    );
    assert_eq!(
        c.latest(f1.thread_id).await.unwrap().unwrap().history,
        r.history[..4]
    );
    assert!(c.purge(f1.thread_id).await.unwrap());
    assert_eq!(
        count(&api, &own(r.thread)).await,
        6,
        "one fork still reads them"
    );
    assert_eq!(
        c.latest(f2.thread_id).await.unwrap().unwrap().history,
        r.history[..2]
    );
    assert!(c.purge(f2.thread_id).await.unwrap());
    assert_eq!(count(&api, &own(r.thread)).await, 0, "the last fork went");
    assert_eq!(count(&api, "SELECT COUNT(*) FROM messages").await, 0);
}

async fn a_diff_of_one_changed_file_among_ten_thousand_lists_that_file(backend: Backend) {
    let Some(api) = TestApi::start(backend).await else {
        return;
    };
    let c = admin(&api);
    let mut r = session(&c, "p", "diff").await;
    let mut files: Vec<FileEntry> = (0..10_000)
        .map(|i| file(&format!("dir{}/f{i}.txt", i % 7), "same"))
        .collect();
    let before = build(files.clone());
    upload(&c, r.thread, &["same"], &before).await;
    end_turn(&c, &mut r, 2, vec![], Some(before.snapshot.clone()), None)
        .await
        .unwrap();
    end_turn(&c, &mut r, 2, vec![], None, None).await.unwrap();
    files[4321] = file(&files[4321].path.clone(), "changed");
    let after = build(files);
    upload(&c, r.thread, &["changed"], &after).await;
    end_turn(&c, &mut r, 2, vec![], Some(after.snapshot.clone()), None)
        .await
        .unwrap();
    let diff = c.turn_diff(r.thread, 3).await.unwrap();
    assert_eq!(diff.against, Some(1), "turn 2 has no snapshot");
    assert_eq!(diff.changes.len(), 1);
    assert_eq!(diff.changes[0].path, "dir2/f4321.txt");
    assert_eq!(diff.changes[0].kind, ChangeKind::Modified);
    assert!(!diff.truncated);
    let first = c.turn_diff(r.thread, 1).await.unwrap();
    assert_eq!(
        (first.against, first.changes.len(), first.truncated),
        (None, 10_000, false)
    );
    let err = c.turn_diff(r.thread, 2).await.unwrap_err();
    let (status, _, message) = refusal(&err);
    assert_eq!(status, 404);
    assert!(message.contains("no snapshot was taken"), "{message}");
}
