//! The typed client against a real `ninetrix api` server (in process, SQLite in a temp dir, real
//! HTTP on a loopback port): every route once through its typed method, and the failures a caller
//! must be able to tell apart.

use std::time::Duration;

use futures_util::StreamExt as _;
use ninetrix_api::{AuthConfig, Config, Secret, Server};
use ninetrix_client::{
    Client, ClientError, ErrorCode, MemoryOf, MemoryQuery, ThreadQuery, Token, http_client,
};
use ninetrix_proto::api::{
    CancelRequest, CheckpointRequest, CheckpointState, ClaimRequest, CommitIntent, CommitOutcome,
    CommitRequest, Control, EnqueueRequest, EventsRequest, HandoffRequest, HandoffStatus,
    MemoryCommand, MemoryOpRequest, MemoryScope, MessageMode, RunnerTokenRequest, RunningTurn,
    ThreadStatus, ToolCallCompletion, ToolCallIntent, ToolCallStatus,
};
use ninetrix_proto::events::{Decoded, Ready, TraceEvent};
use ninetrix_proto::{Message, Role, ThreadId};

const ADMIN: &str = "client-test-admin-token-0123456789";

struct Api {
    url: String,
    _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Api {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn start() -> Api {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("api.db").display());
    let mut config = Config::new(
        url,
        AuthConfig::Tokens {
            secret: Secret::new(b"client-test-secret".to_vec()),
            admin_token: Secret::new(ADMIN.as_bytes().to_vec()),
        },
    );
    config.listen = "127.0.0.1:0".parse().unwrap();
    let server = Server::bind(config).await.expect("the server starts");
    let url = format!("http://{}", server.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = server
            .run(async move {
                let _ = stopped.await;
            })
            .await;
    });
    Api {
        url,
        _dir: dir,
        stop: Some(stop),
    }
}

fn admin(api: &Api) -> Client {
    Client::new(http_client(), &api.url, Some(Token::new(ADMIN)))
}

fn state(turn_seq: u64, status: ThreadStatus) -> CheckpointState {
    CheckpointState {
        turn_seq,
        turn_start_history_len: 1,
        status,
        inbox_cursor: 1,
        usage: Default::default(),
        handoff: None,
        attempt: None,
        context: None,
        ..Default::default()
    }
}

#[tokio::test]
async fn every_route_answers_its_typed_method() {
    let api = start().await;
    let admin = admin(&api);
    admin.healthz().await.unwrap();
    admin.readyz().await.unwrap();
    assert!(admin.openapi().await.unwrap()["paths"].is_object());

    // Admin: mint a runner token; the runner claims with it.
    let thread = ThreadId::new_v7();
    let minted = admin
        .mint_runner_token(&RunnerTokenRequest {
            thread_id: thread,
            pool: Some("p".into()),
            agent: Some("a".into()),
            replica: Some(1),
        })
        .await
        .unwrap();
    assert_eq!(minted.thread_id, thread);
    let runner = Client::new(http_client(), &api.url, Some(Token::new(minted.token)));
    let claim = runner
        .claim(thread, &ClaimRequest::default())
        .await
        .unwrap();
    assert_eq!((claim.epoch, claim.boot_count), (1, 1));
    assert_eq!(runner.latest(thread).await.unwrap(), None);

    // Inbox, then a checkpoint that takes the message.
    let queued = admin
        .enqueue(
            thread,
            &EnqueueRequest {
                content: "hello".into(),
                dedupe_key: Some("k1".into()),
                control: None,
                mode: None,
            },
        )
        .await
        .unwrap();
    assert_eq!((queued.seq, queued.duplicate), (1, false));
    let again = admin
        .enqueue(
            thread,
            &EnqueueRequest {
                content: "hello".into(),
                dedupe_key: Some("k1".into()),
                control: None,
                mode: None,
            },
        )
        .await
        .unwrap();
    assert_eq!((again.seq, again.duplicate), (1, true));
    let inbox = runner
        .inbox(thread, 0, Duration::from_secs(1), 10)
        .await
        .unwrap();
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].content, "hello");
    let created = runner
        .append_checkpoint(
            thread,
            &CheckpointRequest {
                epoch: claim.epoch,
                parent_version: 0,
                truncate_to: None,
                append: vec![Message::text(Role::User, "hello")],
                state: state(1, ThreadStatus::InTurn),
            },
        )
        .await
        .unwrap();
    assert_eq!((created.version, created.history_len), (1, 1));
    let latest = runner.latest(thread).await.unwrap().unwrap();
    assert_eq!(latest.version, 1);
    assert_eq!(latest.history.len(), 1);

    // The thread is in turn 1 (message 1): a `reject` is refused `busy`, the turn named; a
    // steer is stored to join it.
    let busy = admin
        .enqueue(
            thread,
            &EnqueueRequest {
                content: "now?".into(),
                dedupe_key: None,
                control: None,
                mode: Some(MessageMode::Reject),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(busy.code(), Some(&ErrorCode::Busy), "{busy}");
    assert_eq!(
        busy.running(),
        Some(RunningTurn {
            turn_seq: 1,
            seq: 1
        })
    );
    assert!(!busy.is_transient());
    let steer = admin
        .enqueue(
            thread,
            &EnqueueRequest {
                content: "also this".into(),
                dedupe_key: None,
                control: None,
                mode: Some(MessageMode::Steer),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (steer.seq, steer.mode, steer.running),
        (
            2,
            MessageMode::Steer,
            Some(RunningTurn {
                turn_seq: 1,
                seq: 1
            })
        )
    );
    // A cancel of it, once per key.
    let request = CancelRequest {
        by: Some("alice".into()),
        reason: Some("wrong file".into()),
        dedupe_key: Some("c1".into()),
    };
    let cancel = admin.cancel(thread, &request).await.unwrap();
    assert_eq!(
        (cancel.seq, cancel.duplicate, cancel.running),
        (
            3,
            false,
            Some(RunningTurn {
                turn_seq: 1,
                seq: 1
            })
        )
    );
    let again = admin.cancel(thread, &request).await.unwrap();
    assert_eq!((again.seq, again.duplicate), (3, true));
    let inbox = runner
        .inbox(thread, 1, Duration::from_secs(1), 10)
        .await
        .unwrap();
    assert_eq!(
        inbox
            .iter()
            .map(|m| (m.seq, m.mode, m.control, m.by.as_deref()))
            .collect::<Vec<_>>(),
        vec![
            (2, MessageMode::Steer, None, None),
            (3, MessageMode::Queue, Some(Control::Cancel), Some("alice")),
        ]
    );

    // The ledger.
    let intent = ToolCallIntent {
        epoch: claim.epoch,
        key: "key-1".into(),
        turn_seq: 1,
        tool: "file_write".into(),
        args: serde_json::json!({"path": "a"}),
        effect: ninetrix_proto::effects::Effect::Write,
    };
    let record = runner.record_intent(thread, &intent).await.unwrap();
    assert_eq!(record.status, ToolCallStatus::Intent);
    let done = runner
        .complete_tool_call(
            thread,
            "key-1",
            &ToolCallCompletion {
                epoch: claim.epoch,
                ok: true,
                result: "written".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(done.status, ToolCallStatus::Completed);
    assert_eq!(admin.tool_calls(thread).await.unwrap().len(), 1);

    // One durable step: a version, an intent and an outcome in one commit.
    let committed = runner
        .commit(
            thread,
            &CommitRequest {
                epoch: claim.epoch,
                parent_version: 1,
                truncate_to: None,
                append: vec![Message::text(Role::Assistant, "calling")],
                state: state(1, ThreadStatus::InTurn),
                intents: vec![CommitIntent {
                    key: "key-2".into(),
                    turn_seq: 1,
                    tool: "file_write".into(),
                    args: serde_json::json!({"path": "b"}),
                    effect: ninetrix_proto::effects::Effect::Write,
                }],
                outcomes: vec![CommitOutcome {
                    key: "key-1".into(),
                    ok: true,
                    result: "written".into(),
                }],
                events: Vec::new(),
                approvals: Vec::new(),
                handoff_reply: None,
                turn_end: None,
            },
        )
        .await
        .unwrap();
    assert_eq!((committed.version, committed.history_len), (2, 2));
    assert_eq!(
        committed
            .records
            .iter()
            .map(|r| (r.key.as_str(), r.status))
            .collect::<Vec<_>>(),
        [("key-2", ToolCallStatus::Intent)]
    );
    assert_eq!(admin.tool_calls(thread).await.unwrap().len(), 2);

    // Events: appended typed, read back typed, paged and streamed.
    let at = "2026-01-01T00:00:00Z".parse().unwrap();
    let events: Vec<_> = (0..3)
        .map(|i| {
            TraceEvent::Ready(Ready {
                epoch: i,
                resuming: false,
            })
            .to_new_event(at)
        })
        .collect();
    let appended = runner
        .append_events(
            thread,
            &EventsRequest {
                epoch: claim.epoch,
                events,
            },
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(appended.last_seq, 3);
    let all = admin.events_after(thread, 0).await.unwrap();
    assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(
        all[2].decode(),
        Decoded::Known(TraceEvent::Ready(Ready {
            epoch: 2,
            resuming: false,
        }))
    );
    assert_eq!(admin.events_after(thread, 2).await.unwrap().len(), 1);
    let page = admin.events_page(thread, 0, Some(2)).await.unwrap();
    assert_eq!(page.len(), 2);
    let stream = admin.event_stream(thread, 1).await.unwrap();
    let streamed: Vec<u64> = stream
        .take(2)
        .map(|e| e.unwrap().seq)
        .collect::<Vec<_>>()
        .await;
    assert_eq!(streamed, [2, 3]);

    // Listing and reading.
    let summary = admin.thread(thread).await.unwrap().unwrap();
    assert_eq!(summary.version, 2);
    assert_eq!(summary.labels.agent.as_deref(), Some("a"));
    let listed = admin
        .list_threads(&ThreadQuery {
            pool: Some("p".into()),
            status: Some(ThreadStatus::InTurn),
            ..ThreadQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(admin.versions(thread).await.unwrap().len(), 2);
    assert_eq!(admin.version(thread, 1).await.unwrap().history.len(), 1);

    // Handoffs: `a` may hand work to `b` (as `up` records it); the same call again re-attaches.
    admin.set_replicas("p", "a", 1, &[], None).await.unwrap();
    admin
        .set_replicas("p", "a", 1, &["b".to_string()], None)
        .await
        .unwrap();
    admin.set_replicas("p", "b", 1, &[], None).await.unwrap();
    let request = HandoffRequest {
        epoch: claim.epoch,
        turn_seq: 1,
        key: "key-9".into(),
        call_id: "call-9".into(),
        agent: "b".into(),
        task: "sum 2 and 2".into(),
        context: None,
        via: Vec::new(),
        timeout_secs: 60,
        budget_usd: None,
    };
    let filed = runner.open_handoff(thread, &request).await.unwrap();
    assert_eq!(filed.status, HandoffStatus::Pending);
    assert_eq!(filed.delivery_key, "handoff:key-9");
    let again = runner.open_handoff(thread, &request).await.unwrap();
    assert_eq!(again.target_thread_id, filed.target_thread_id);
    let turn = runner
        .turn_handoffs(thread, 1, 0, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(turn.len(), 1);
    let listed = admin
        .list_handoffs(Some("p"), Some(thread), None)
        .await
        .unwrap();
    assert_eq!(listed, turn);
    let err = runner
        .open_handoff(
            thread,
            &HandoffRequest {
                key: "key-10".into(),
                agent: "c".into(),
                ..request
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::NotCollaborator));

    // Memory: a runner's command once per op key, then the admin's listing, read, edit,
    // deletion and purge.
    let create = MemoryOpRequest {
        epoch: claim.epoch,
        scope: MemoryScope::Agent,
        op_key: "mem-1".into(),
        op: MemoryCommand::Create {
            path: "/memories/notes.md".into(),
            file_text: "hello\n".into(),
        },
    };
    let done = runner.memory_op(thread, &create).await.unwrap();
    assert_eq!(
        (done.is_error, done.replayed),
        (false, false),
        "{}",
        done.content
    );
    assert!(runner.memory_op(thread, &create).await.unwrap().replayed);
    let memory = MemoryOf {
        pool: "p".into(),
        agent: "a".into(),
        session: None,
    };
    let listed = admin
        .list_memories(&MemoryQuery {
            pool: "p".into(),
            ..MemoryQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
        ["/memories/notes.md"]
    );
    let file = admin
        .memory_file(&memory, "/memories/notes.md")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(file.content, "hello\n");
    let written = admin
        .put_memory_file(&memory, "/memories/other.md", "x")
        .await
        .unwrap();
    assert_eq!(written.size, 1);
    assert_eq!(
        admin
            .delete_memory_file(&memory, "/memories/other.md")
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        admin
            .memory_file(&memory, "/memories/other.md")
            .await
            .unwrap(),
        None
    );
    let limit = admin
        .put_memory_file(&memory, "/memories/big", &"x".repeat(200 * 1024))
        .await
        .unwrap_err();
    assert_eq!(limit.code(), Some(&ErrorCode::MemoryLimit), "{limit}");
    assert_eq!(admin.purge_memories("p", None).await.unwrap(), 1);

    // Purge: the thread is gone for good (410 `purged`), a second purge says there is nothing
    // left.
    assert!(admin.purge(thread).await.unwrap());
    let gone = admin.thread(thread).await.unwrap_err();
    assert_eq!(gone.code(), Some(&ErrorCode::Purged), "{gone}");
    assert!(!admin.purge(thread).await.unwrap());
}

#[tokio::test]
async fn refusals_carry_their_typed_code() {
    let api = start().await;
    let admin = admin(&api);
    let thread = ThreadId::new_v7();

    // A wrong admin token is an auth refusal at once, not "no data".
    let wrong = Client::new(http_client(), &api.url, Some(Token::new("nope")));
    let err = wrong
        .list_threads(&ThreadQuery::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::Unauthorized));
    assert!(err.is_auth() && !err.is_transient());
    let err = wrong.thread(thread).await.unwrap_err();
    assert!(err.is_auth(), "{err}");

    // A stale epoch is fenced; a wrong parent is a version conflict.
    let first = admin.claim(thread, &ClaimRequest::default()).await.unwrap();
    admin.claim(thread, &ClaimRequest::default()).await.unwrap();
    let request = CheckpointRequest {
        epoch: first.epoch,
        parent_version: 0,
        truncate_to: None,
        append: Vec::new(),
        state: state(0, ThreadStatus::Idle),
    };
    let err = admin.append_checkpoint(thread, &request).await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::Fenced));
    let err = admin
        .append_checkpoint(
            thread,
            &CheckpointRequest {
                epoch: first.epoch + 1,
                parent_version: 7,
                ..request
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::VersionConflict));

    // An unknown thread reads as None where absence is an answer, and as not_found elsewhere.
    let missing = ThreadId::new_v7();
    assert_eq!(admin.thread(missing).await.unwrap(), None);
    let err = admin.versions(missing).await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::NotFound));
}

#[tokio::test]
async fn an_api_that_is_not_there_is_unreachable_and_transient() {
    // Bind a port, then free it: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = Client::new(
        http_client(),
        &format!("http://127.0.0.1:{port}/"),
        Some(Token::new(ADMIN)),
    )
    .with_timeout(Duration::from_secs(5));
    let err = client.healthz().await.unwrap_err();
    match &err {
        ClientError::Unreachable { url, reason } => {
            assert_eq!(url, &format!("http://127.0.0.1:{port}"));
            assert!(
                reason.to_lowercase().contains("refused"),
                "the cause names the refusal: {reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(err.is_transient());
    assert!(format!("{:?}", Token::new("s3cret")).contains("redacted"));
    assert!(
        !format!("{client:?}").contains(ADMIN),
        "Debug hides the token"
    );
}
