//! Property test of shared-prefix histories: random threads that end turns with random appends
//! and cuts (a cut below a fork's fork point too), forked — and forks forked — at random ended
//! turns, read exactly what a reference model of plain vectors says: `latest` of every thread
//! after every step, and every past version of every thread at the end.

use ninetrix_api::store::{Store, StoreOptions};
use ninetrix_proto::api::{
    CheckpointState, ClaimRequest, CommitRequest, ForkRequest, ThreadStatus, TurnEnd,
};
use ninetrix_proto::{Message, Role, ThreadId};
use proptest::prelude::*;
use std::collections::BTreeMap;

use crate::support::{Backend, TestDb};

#[derive(Clone, Debug)]
enum Op {
    /// Thread `pick` ends a turn, appending `n` messages.
    Append(u8, u8),
    /// Thread `pick` cuts its history to `fraction` % of it, appends `n` and ends a turn.
    Cut(u8, u8, u8),
    /// Thread `pick` is forked at one of its ended turns (`which`).
    Fork(u8, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u8>(), 0u8..4).prop_map(|(p, n)| Op::Append(p, n)),
        1 => (any::<u8>(), 0u8..=100, 0u8..3).prop_map(|(p, f, n)| Op::Cut(p, f, n)),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(p, w)| Op::Fork(p, w)),
    ]
}

/// The model of one thread.
struct Model {
    id: ThreadId,
    epoch: u64,
    history: Vec<Message>,
    /// The history as of each version (index 0 is version 1).
    versions: Vec<Vec<Message>>,
    /// The history at the end of each turn of its turn list.
    turns: BTreeMap<u64, Vec<Message>>,
    turn_seq: u64,
}

async fn end_turn(store: &Store, m: &mut Model, truncate_to: Option<u64>, append: Vec<Message>) {
    if let Some(t) = truncate_to {
        m.history.truncate(t as usize);
    }
    m.history.extend(append.iter().cloned());
    m.turn_seq += 1;
    let request = CommitRequest {
        epoch: m.epoch,
        parent_version: m.versions.len() as u64,
        truncate_to,
        append,
        state: CheckpointState {
            turn_seq: m.turn_seq,
            status: ThreadStatus::Idle,
            ..CheckpointState::default()
        },
        intents: Vec::new(),
        outcomes: Vec::new(),
        events: Vec::new(),
        approvals: Vec::new(),
        handoff_reply: None,
        turn_end: Some(TurnEnd {
            turn_seq: m.turn_seq,
            snapshot: None,
            snapshot_skipped: None,
            keep_turns: None,
        }),
    };
    let (done, _) = store.commit(m.id, request).await.unwrap();
    assert_eq!(done.history_len, m.history.len() as u64);
    m.versions.push(m.history.clone());
    m.turns.insert(m.turn_seq, m.history.clone());
}

async fn claim(store: &Store, id: ThreadId) -> u64 {
    store
        .claim(
            id,
            ClaimRequest::default(),
            ninetrix_api::labels::Stating::Claim,
        )
        .await
        .unwrap()
        .0
        .epoch
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
        for (case, ops) in cases.into_iter().enumerate() {
            let (root, _) = store
                .open_session("p".into(), "a".into(), format!("case-{case}"))
                .await
                .unwrap();
            let id = root.thread_id;
            let mut threads = vec![Model {
                id,
                epoch: claim(&store, id).await,
                history: Vec::new(),
                versions: Vec::new(),
                turns: BTreeMap::new(),
                turn_seq: 0,
            }];
            for (i, op) in ops.iter().enumerate() {
                let text = |j| Message::text(Role::User, format!("c{case} s{i} m{j}"));
                match *op {
                    Op::Append(pick, n) => {
                        let n_threads = threads.len();
                        let m = &mut threads[pick as usize % n_threads];
                        end_turn(&store, m, None, (0..n).map(text).collect()).await;
                    }
                    Op::Cut(pick, fraction, n) => {
                        let n_threads = threads.len();
                        let m = &mut threads[pick as usize % n_threads];
                        let to = m.history.len() as u64 * u64::from(fraction) / 100;
                        end_turn(&store, m, Some(to), (0..n).map(text).collect()).await;
                    }
                    Op::Fork(pick, which) => {
                        let parent = &threads[pick as usize % threads.len()];
                        let Some((&at, history)) = parent
                            .turns
                            .iter()
                            .nth(which as usize % parent.turns.len().max(1))
                        else {
                            continue;
                        };
                        let (fork, _) = store
                            .fork(
                                parent.id,
                                ForkRequest {
                                    at_turn: at,
                                    session: None,
                                },
                            )
                            .await
                            .unwrap();
                        assert_eq!(
                            fork.history_len,
                            history.len() as u64,
                            "no effects: no note"
                        );
                        let mut turns: BTreeMap<u64, Vec<Message>> = parent
                            .turns
                            .range(..=at)
                            .map(|(k, v)| (*k, v.clone()))
                            .collect();
                        turns.insert(at, history.clone());
                        let model = Model {
                            id: fork.thread_id,
                            epoch: claim(&store, fork.thread_id).await,
                            history: history.clone(),
                            versions: vec![history.clone()],
                            turns,
                            turn_seq: at,
                        };
                        threads.push(model);
                    }
                }
                for m in &threads {
                    let latest = store.latest(m.id).await.unwrap();
                    let read = latest.map(|s| s.history).unwrap_or_default();
                    assert_eq!(read, m.history, "latest of {} after step {i}", m.id);
                }
            }
            for m in &threads {
                for (v, expected) in m.versions.iter().enumerate() {
                    let detail = store.version(m.id, v as u64 + 1).await.unwrap().unwrap();
                    assert_eq!(&detail.history, expected, "{} version {}", m.id, v + 1);
                    assert_eq!(detail.summary.history_len, expected.len() as u64);
                }
                for (turn, expected) in &m.turns {
                    let point = store.turn_point(m.id, *turn).await.unwrap();
                    assert_eq!(&point.history, expected, "{} turn {turn}", m.id);
                }
            }
        }
        store.close().await;
    });
}

fn cases() -> impl Strategy<Value = Vec<Vec<Op>>> {
    proptest::collection::vec(proptest::collection::vec(op(), 0..30), 4)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn sqlite_forked_histories_match_the_model(cases in cases()) {
        check(Backend::Sqlite, cases);
    }
}

/// The same on Postgres, when there is one (asked once, before the cases run).
#[test]
fn postgres_forked_histories_match_the_model() {
    if crate::support::postgres_url().is_none() {
        return;
    }
    proptest!(ProptestConfig { cases: 4, ..ProptestConfig::default() }, |(cases in cases())| {
        check(Backend::Postgres, cases);
    });
}
