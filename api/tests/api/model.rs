//! Property test: random sequences of appends and truncations, written through two stores on one
//! database (as two API replicas), assemble to exactly the history a reference model computes — for
//! `latest` after every version (served from one store's cache of assembled histories, which must
//! notice the other's writes) and for every past version.

use ninetrix_api::store::{Store, StoreOptions};
use ninetrix_proto::api::{CheckpointRequest, CheckpointState, ClaimRequest};
use ninetrix_proto::{Message, Role, ThreadId};
use proptest::prelude::*;

use crate::support::{Backend, TestDb};

#[derive(Clone, Debug)]
enum Op {
    Append(u8),
    /// Truncate to `fraction` of the current length (0–100 %), then append some.
    Repair(u8, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..4).prop_map(Op::Append),
        1 => (0u8..=100, 0u8..3).prop_map(|(f, n)| Op::Repair(f, n)),
    ]
}

fn check(backend: Backend, cases: Vec<Vec<Op>>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let Some(db) = TestDb::new(backend).await else {
            return;
        };
        let store = Store::open(&db.url, &StoreOptions::default())
            .await
            .unwrap();
        // A second store on the same database, as another API replica: its writes must show in
        // the first one's `latest`, whose cached history does not know about them.
        let other = Store::open(&db.url, &StoreOptions::default())
            .await
            .unwrap();
        for ops in cases {
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
            let mut model: Vec<Message> = Vec::new();
            let mut versions: Vec<Vec<Message>> = Vec::new();
            for (i, op) in ops.iter().enumerate() {
                let (truncate_to, n) = match *op {
                    Op::Append(n) => (None, n),
                    Op::Repair(f, n) => (Some(model.len() as u64 * u64::from(f) / 100), n),
                };
                if let Some(t) = truncate_to {
                    model.truncate(t as usize);
                }
                let append: Vec<Message> = (0..n)
                    .map(|j| Message::text(Role::User, format!("v{i} m{j}")))
                    .collect();
                model.extend(append.iter().cloned());
                let writer = if i % 3 == 2 { &other } else { &store };
                let created = writer
                    .append_checkpoint(
                        thread,
                        CheckpointRequest {
                            epoch,
                            parent_version: i as u64,
                            truncate_to,
                            append,
                            state: CheckpointState {
                                turn_seq: i as u64,
                                ..CheckpointState::default()
                            },
                        },
                    )
                    .await
                    .unwrap();
                assert_eq!(created.history_len, model.len() as u64);
                versions.push(model.clone());
                let latest = store.latest(thread).await.unwrap().unwrap();
                assert_eq!(latest.history, model, "latest after version {}", i + 1);
            }
            let latest = store.latest(thread).await.unwrap();
            match latest {
                None => assert!(ops.is_empty()),
                Some(state) => assert_eq!(state.history, model),
            }
            for (i, expected) in versions.iter().enumerate() {
                let detail = store.version(thread, i as u64 + 1).await.unwrap().unwrap();
                assert_eq!(&detail.history, expected, "version {}", i + 1);
            }
        }
        store.close().await;
        other.close().await;
    });
}

fn cases() -> impl Strategy<Value = Vec<Vec<Op>>> {
    proptest::collection::vec(proptest::collection::vec(op(), 0..25), 8)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn sqlite_assembly_matches_the_model(cases in cases()) {
        check(Backend::Sqlite, cases);
    }
}

/// The same on Postgres, when there is one (asked once, before the cases run).
#[test]
fn postgres_assembly_matches_the_model() {
    if crate::support::postgres_url().is_none() {
        return;
    }
    proptest!(ProptestConfig { cases: 6, ..ProptestConfig::default() }, |(cases in cases())| {
        check(Backend::Postgres, cases);
    });
}
