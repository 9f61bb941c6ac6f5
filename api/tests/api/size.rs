//! Storage grows with the conversation, not with its square: a 1,000-turn thread with about 2 KB
//! of new messages per turn stays under 5 MB on SQLite (a size assertion, not a timing one).

use ninetrix_api::store::{Store, StoreOptions};
use ninetrix_proto::api::{CheckpointRequest, CheckpointState, ClaimRequest, ThreadStatus};
use ninetrix_proto::{Message, Role, ThreadId};

use crate::support::{Backend, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_turns_of_two_kilobytes_stay_under_five_megabytes() {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let store = Store::open(&db.url, &StoreOptions::default())
        .await
        .unwrap();
    let thread = ThreadId::new_v7();
    let epoch = store
        .claim(
            thread,
            ClaimRequest::default(),
            ninetrix_api::labels::Stating::Claim,
        )
        .await
        .unwrap()
        .0
        .epoch;
    let mut payload_bytes = 0usize;
    let mut version = 0;
    for turn in 0..1000u64 {
        // One turn: the user's input, then the assistant's answer: ~1 KB each.
        for (role, text) in [
            (Role::User, format!("question {turn}: {}", "q".repeat(1000))),
            (
                Role::Assistant,
                format!("answer {turn}: {}", "a".repeat(1000)),
            ),
        ] {
            let message = Message::text(role, text);
            payload_bytes += serde_json::to_string(&message).unwrap().len();
            let created = store
                .append_checkpoint(
                    thread,
                    CheckpointRequest {
                        epoch,
                        parent_version: version,
                        truncate_to: None,
                        append: vec![message],
                        state: CheckpointState {
                            turn_seq: turn,
                            turn_start_history_len: 2 * turn + 1,
                            status: ThreadStatus::InTurn,
                            ..CheckpointState::default()
                        },
                    },
                )
                .await
                .unwrap();
            version = created.version;
        }
    }
    assert_eq!(
        store.latest(thread).await.unwrap().unwrap().history.len(),
        2000
    );
    store.close().await;
    let bytes: u64 = std::fs::read_dir(db.dir.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    eprintln!("1,000 turns: {payload_bytes} bytes of messages, {bytes} bytes on disk");
    assert!(
        bytes < 5_000_000,
        "{bytes} bytes on disk for {payload_bytes} bytes of messages"
    );
    assert!(
        bytes as f64 <= 1.75 * payload_bytes as f64,
        "{bytes} bytes on disk for {payload_bytes} bytes of messages"
    );
}
