//! Ended turns (issue 41): the `turns` row the commit that ends a turn writes (its version, the
//! history's length and last message then, the workspace's snapshot and the reference it holds),
//! the snapshots `keep_turns` drops, and the reads built on them — a thread's turn list (a
//! fork's shared turns included), the history and state at a turn's end (what a rewind goes back
//! to), and the files a turn changed.

use std::collections::{BTreeMap, HashMap, HashSet};

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    CheckpointState, ErrorCode, ForkChild, ForkOrigin, TurnDiff, TurnEnd, TurnList, TurnPoint,
    TurnSummary,
};
use ninetrix_proto::snapshots::{Node, ObjectId, SnapshotRef, diff};

use crate::fork_rules::{EndedTurn, MAX_DIFF_CHANGES, diff_base, ended_turns_text, turn_live};
use crate::store::codec::{corrupt, decode_messages, decode_state, parse_id, time, to_i64, to_u64};
use crate::store::conn::{Conn, for_write, query, query_as, rsq};
use crate::store::{StoreError, StoreResult};

use super::history;
use super::ledger::tool_calls;
use super::objects::{add_ref, is_node, load_node, pool_of, release, sweep};
use super::threads::{SELECT_THREAD, ThreadRow, fork_origin, live};

/// The deepest chain of forks a turn list follows.
const MAX_FORK_DEPTH: usize = 10_000;

/// A row of `turns`.
#[derive(Clone, Debug, sqlx::FromRow)]
pub(crate) struct TurnRow {
    pub(crate) thread_id: String,
    pub(crate) turn_seq: i64,
    pub(crate) version: i64,
    pub(crate) history_len: i64,
    pub(crate) last_message_id: Option<String>,
    pub(crate) snapshot_root: Option<String>,
    pub(crate) snapshot_files: Option<i64>,
    pub(crate) snapshot_bytes: Option<i64>,
    pub(crate) snapshot_dropped: i64,
    pub(crate) snapshot_skipped: Option<String>,
    pub(crate) ended_at: i64,
}

impl rsq::FromRow for TurnRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(TurnRow {
            thread_id: row.get("thread_id")?,
            turn_seq: row.get("turn_seq")?,
            version: row.get("version")?,
            history_len: row.get("history_len")?,
            last_message_id: row.get("last_message_id")?,
            snapshot_root: row.get("snapshot_root")?,
            snapshot_files: row.get("snapshot_files")?,
            snapshot_bytes: row.get("snapshot_bytes")?,
            snapshot_dropped: row.get("snapshot_dropped")?,
            snapshot_skipped: row.get("snapshot_skipped")?,
            ended_at: row.get("ended_at")?,
        })
    }
}

const TURN_COLUMNS: &str = "thread_id, turn_seq, version, history_len, last_message_id, snapshot_root, snapshot_files, snapshot_bytes, snapshot_dropped, snapshot_skipped, ended_at";

impl TurnRow {
    /// Its snapshot while kept.
    pub(crate) fn snapshot(&self) -> StoreResult<Option<SnapshotRef>> {
        if self.snapshot_dropped != 0 {
            return Ok(None);
        }
        self.snapshot_root
            .as_deref()
            .map(|root| {
                Ok(SnapshotRef {
                    root: root
                        .parse()
                        .map_err(|e: String| corrupt("snapshot root", &e))?,
                    files: to_u64(self.snapshot_files.unwrap_or(0)),
                    bytes: to_u64(self.snapshot_bytes.unwrap_or(0)),
                })
            })
            .transpose()
    }

    pub(crate) fn dropped(&self) -> bool {
        self.snapshot_dropped != 0
    }

    /// Why it has no snapshot though its agent takes them.
    pub(crate) fn skipped(&self) -> Option<&str> {
        self.snapshot_skipped.as_deref()
    }

    fn ended(&self) -> EndedTurn {
        EndedTurn {
            turn_seq: to_u64(self.turn_seq),
            history_len: to_u64(self.history_len),
            last_message_id: self.last_message_id.clone(),
            has_snapshot: self.snapshot_root.is_some() && !self.dropped(),
        }
    }

    /// The message IDs of the history at its end.
    pub(crate) async fn history_ids<C: Conn>(&self, c: &mut C) -> StoreResult<Vec<Option<String>>> {
        let segments =
            history::segments(c, &self.thread_id, self.version, self.history_len, false).await?;
        history::message_ids(c, &segments).await
    }

    /// The state stored with the version that ended it.
    pub(crate) async fn state<C: Conn>(&self, c: &mut C) -> StoreResult<CheckpointState> {
        let (state,): (String,) =
            query_as("SELECT state FROM versions WHERE thread_id = $1 AND version = $2")
                .bind(self.thread_id.as_str())
                .bind(self.version)
                .fetch_one(&mut *c)
                .await?;
        decode_state(&state)
    }
}

/// The message ID at position `at` of `thread`'s history as of `version` (`len` long).
pub(super) async fn message_id_at<C: Conn>(
    c: &mut C,
    thread: &str,
    version: i64,
    len: i64,
    at: i64,
) -> StoreResult<Option<String>> {
    let segments: Vec<history::Segment> = history::segments(c, thread, version, len, false)
        .await?
        .into_iter()
        .filter(|s| s.from <= at && at < s.to)
        .map(|s| history::Segment {
            from: at,
            to: at + 1,
            ..s
        })
        .collect();
    Ok(history::message_ids(c, &segments).await?.pop().flatten())
}

/// Records a turn's end, in the commit's transaction (`version` is the commit's, `history_len`
/// the history's then): its `turn_seq` must be the state's; its snapshot's root a node of the
/// thread's pool (409 `missing_objects`). The row holds one reference to the root (a replaced
/// row's is released); with `keep_turns`, older turns' snapshots are dropped.
pub(super) async fn record_turn_end<C: Conn>(
    c: &mut C,
    id: ThreadId,
    thread: &ThreadRow,
    end: &TurnEnd,
    (state_turn, version, history_len, last_message_id): (u64, u64, u64, Option<String>),
    now: i64,
) -> StoreResult<()> {
    if end.turn_seq != state_turn {
        return Err(StoreError::Invalid {
            code: ErrorCode::InvalidState,
            message: format!(
                "`turn_end.turn_seq` is {} but the state's `turn_seq` is {state_turn}: the commit that ends a turn ends the state's turn",
                end.turn_seq
            ),
        });
    }
    let pool = thread.pool.clone().unwrap_or_default();
    if let Some(snapshot) = &end.snapshot
        && !is_node(c, &pool, &snapshot.root).await?
    {
        return Err(StoreError::MissingObjects(
            crate::fork_rules::missing_message(
                "`turn_end.snapshot`",
                std::slice::from_ref(&snapshot.root),
            ),
        ));
    }
    let turn = to_i64(end.turn_seq, "turn_end.turn_seq")?;
    let last = match last_message_id {
        Some(last) => Some(last),
        None if history_len > 0 => {
            let len = to_i64(history_len, "history_len")?;
            message_id_at(
                c,
                &id.to_string(),
                to_i64(version, "version")?,
                len,
                len - 1,
            )
            .await?
        }
        None => None,
    };
    let old = turn_row(c, &id.to_string(), turn, true).await?;
    query(
        "INSERT INTO turns (thread_id, turn_seq, version, history_len, last_message_id, snapshot_root, snapshot_files, snapshot_bytes, snapshot_dropped, snapshot_skipped, ended_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $10, $9) ON CONFLICT (thread_id, turn_seq) DO UPDATE SET version = excluded.version, \
         history_len = excluded.history_len, last_message_id = excluded.last_message_id, snapshot_root = excluded.snapshot_root, \
         snapshot_files = excluded.snapshot_files, snapshot_bytes = excluded.snapshot_bytes, snapshot_dropped = 0, \
         snapshot_skipped = excluded.snapshot_skipped, ended_at = excluded.ended_at",
    )
    .bind(id.to_string())
    .bind(turn)
    .bind(to_i64(version, "version")?)
    .bind(to_i64(history_len, "history_len")?)
    .bind(last)
    .bind(end.snapshot.as_ref().map(|s| s.root.as_str()))
    .bind(end.snapshot.as_ref().map(|s| to_i64(s.files, "files")).transpose()?)
    .bind(end.snapshot.as_ref().map(|s| to_i64(s.bytes, "bytes")).transpose()?)
    .bind(now)
    .bind(
        end.snapshot_skipped
            .as_deref()
            .filter(|_| end.snapshot.is_none()),
    )
    .execute(&mut *c)
    .await?;
    if let Some(snapshot) = &end.snapshot {
        add_ref(c, &pool, &snapshot.root).await?;
    }
    if let Some(old) = old.and_then(|o| o.snapshot().transpose()) {
        release(c, &pool, vec![old?.root]).await?;
    }
    if let Some(keep) = end.keep_turns {
        let upto = turn - i64::from(keep);
        if upto >= 0 {
            drop_snapshots(c, &id.to_string(), &pool, upto).await?;
        }
        sweep(c, &pool, now).await?;
    }
    Ok(())
}

/// Drops the snapshots of `thread`'s turns up to `upto` (their references released).
async fn drop_snapshots<C: Conn>(
    c: &mut C,
    thread: &str,
    pool: &str,
    upto: i64,
) -> StoreResult<()> {
    let roots: Vec<(String,)> = query_as(for_write::<C>(
        "SELECT snapshot_root FROM turns WHERE thread_id = $1 AND turn_seq <= $2 AND snapshot_dropped = 0 AND snapshot_root IS NOT NULL",
    ))
    .bind(thread)
    .bind(upto)
    .fetch_all(&mut *c)
    .await?;
    if roots.is_empty() {
        return Ok(());
    }
    query("UPDATE turns SET snapshot_dropped = 1 WHERE thread_id = $1 AND turn_seq <= $2 AND snapshot_dropped = 0 AND snapshot_root IS NOT NULL")
        .bind(thread)
        .bind(upto)
        .execute(&mut *c)
        .await?;
    let mut ids = Vec::with_capacity(roots.len());
    for (root,) in roots {
        ids.push(
            root.parse()
                .map_err(|e: String| corrupt("snapshot root", &e))?,
        );
    }
    release(c, pool, ids).await
}

/// Deletes `thread`'s turns, releasing their snapshots (a purge).
pub(super) async fn delete_turns<C: Conn>(c: &mut C, thread: &str, pool: &str) -> StoreResult<()> {
    drop_snapshots(c, thread, pool, i64::MAX).await?;
    query("DELETE FROM turns WHERE thread_id = $1")
        .bind(thread)
        .execute(&mut *c)
        .await?;
    Ok(())
}

async fn turn_row<C: Conn>(
    c: &mut C,
    thread: &str,
    turn: i64,
    lock: bool,
) -> StoreResult<Option<TurnRow>> {
    let sql = format!("SELECT {TURN_COLUMNS} FROM turns WHERE thread_id = $1 AND turn_seq = $2");
    let sql = if lock {
        for_write::<C>(&sql)
    } else {
        crate::store::conn::AssertSqlSafe(sql)
    };
    query_as(sql)
        .bind(thread)
        .bind(turn)
        .fetch_optional(&mut *c)
        .await
}

/// Every ended turn of `thread`, by turn: its own, and for a fork its parent's up to the fork's
/// turn (recursively; a thread's own row wins over an ancestor's of the same turn).
pub(super) async fn chain_turns<C: Conn>(c: &mut C, thread: &str) -> StoreResult<Vec<TurnRow>> {
    let mut out: BTreeMap<i64, TurnRow> = BTreeMap::new();
    let (mut at, mut limit) = (thread.to_string(), i64::MAX);
    for _ in 0..MAX_FORK_DEPTH {
        let rows: Vec<TurnRow> = query_as(crate::store::conn::AssertSqlSafe(format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE thread_id = $1 AND turn_seq <= $2 ORDER BY turn_seq"
        )))
        .bind(at.as_str())
        .bind(limit)
        .fetch_all(&mut *c)
        .await?;
        for row in rows {
            out.entry(row.turn_seq).or_insert(row);
        }
        match fork_origin(c, &at).await? {
            Some((parent, turn)) => {
                (at, limit) = (parent, limit.min(turn));
            }
            None => return Ok(out.into_values().collect()),
        }
    }
    Err(corrupt(
        "fork chain",
        &format!("{thread} is more than {MAX_FORK_DEPTH} forks deep"),
    ))
}

/// Turn `n` of `thread`'s list, or 404 naming the turns that did end.
pub(super) async fn find_turn<C: Conn>(
    c: &mut C,
    thread: ThreadId,
    n: u64,
) -> StoreResult<(TurnRow, Vec<TurnRow>)> {
    let turns = chain_turns(c, &thread.to_string()).await?;
    match turns.iter().find(|t| to_u64(t.turn_seq) == n) {
        Some(t) => Ok((t.clone(), turns)),
        None => {
            let ended: Vec<u64> = turns.iter().map(|t| to_u64(t.turn_seq)).collect();
            Err(StoreError::Absent(format!(
                "thread {thread} did not end a turn {n}: {}",
                ended_turns_text(&ended)
            )))
        }
    }
}

/// The live thread row.
pub(super) async fn live_thread<C: Conn>(
    c: &mut C,
    id: ThreadId,
    lock: bool,
) -> StoreResult<ThreadRow> {
    let sql = if lock {
        for_write::<C>(SELECT_THREAD)
    } else {
        crate::store::conn::AssertSqlSafe(SELECT_THREAD.to_string())
    };
    let row: Option<ThreadRow> = query_as(sql)
        .bind(id.to_string())
        .fetch_optional(&mut *c)
        .await?;
    live(id, row.ok_or(StoreError::NotFound("thread"))?)
}

/// `GET /v1/threads/{id}/turns`.
pub(crate) async fn turns<C: Conn>(c: &mut C, id: ThreadId) -> StoreResult<TurnList> {
    let thread = live_thread(c, id, false).await?;
    let rows = chain_turns(c, &id.to_string()).await?;
    let ids = if thread.version > 0 {
        let segments =
            history::segments(c, &id.to_string(), thread.version, thread.history_len, true).await?;
        history::message_ids(c, &segments).await?
    } else {
        Vec::new()
    };
    let mut list = Vec::with_capacity(rows.len());
    for row in rows {
        list.push(TurnSummary {
            turn_seq: to_u64(row.turn_seq),
            thread_id: parse_id(&row.thread_id)?,
            version: to_u64(row.version),
            history_len: to_u64(row.history_len),
            live: turn_live(
                to_u64(row.history_len),
                row.last_message_id.as_deref(),
                &ids,
            ),
            snapshot: row.snapshot()?,
            snapshot_dropped: row.dropped(),
            snapshot_skipped: row.snapshot_skipped.clone(),
            ended_at: time(row.ended_at),
        });
    }
    let forks: Vec<(String, Option<i64>, Option<String>)> = query_as(
        "SELECT thread_id, fork_turn, session FROM threads WHERE fork_parent = $1 AND status <> 'purged' ORDER BY created_at, thread_id",
    )
    .bind(id.to_string())
    .fetch_all(&mut *c)
    .await?;
    let mut children = Vec::with_capacity(forks.len());
    for (child, turn, session) in forks {
        children.push(ForkChild {
            thread_id: parse_id(&child)?,
            at_turn: to_u64(turn.unwrap_or(0)),
            session,
        });
    }
    Ok(TurnList {
        turns: list,
        forked_from: match (thread.fork_parent, thread.fork_turn) {
            (Some(parent), Some(turn)) => Some(ForkOrigin {
                parent: parse_id(&parent)?,
                at_turn: to_u64(turn),
            }),
            _ => None,
        },
        forks: children,
    })
}

/// `GET /v1/runners/threads/{id}/turns/{n}`: the history and state at the end of turn `n`, its
/// snapshot, and this thread's later effects going back does not undo.
pub(crate) async fn turn_point<C: Conn>(c: &mut C, id: ThreadId, n: u64) -> StoreResult<TurnPoint> {
    live_thread(c, id, false).await?;
    let (turn, _) = find_turn(c, id, n).await?;
    let segments =
        history::segments(c, &turn.thread_id, turn.version, turn.history_len, false).await?;
    let history = decode_messages(history::bodies(c, &segments).await?)?;
    let state = turn.state(c).await?;
    let snapshot = turn.snapshot()?;
    let records = tool_calls(c, id).await?;
    Ok(TurnPoint {
        turn_seq: n,
        history,
        state,
        undone: ninetrix_proto::api::undone_after(&records, n, snapshot.is_some()),
        snapshot_dropped: turn.dropped(),
        snapshot_skipped: turn.snapshot_skipped.clone(),
        snapshot,
    })
}

/// `GET /v1/threads/{id}/turns/{n}/diff`: the files turn `n` changed, against the nearest earlier
/// turn on its history that has a snapshot.
pub(crate) async fn turn_diff<C: Conn>(c: &mut C, id: ThreadId, n: u64) -> StoreResult<TurnDiff> {
    live_thread(c, id, false).await?;
    let pool = pool_of(c, id).await?;
    let (turn, turns) = find_turn(c, id, n).await?;
    let Some(snapshot) = turn.snapshot()? else {
        let why = if turn.dropped() {
            "its snapshot was dropped (`execution.snapshots.keep_turns`)"
        } else {
            "no snapshot was taken at its end (`execution.snapshots` off, or past its limits)"
        };
        return Err(StoreError::Absent(format!(
            "turn {n} of thread {id} has no snapshot to diff: {why}"
        )));
    };
    let ids = turn.history_ids(c).await?;
    let ended: Vec<EndedTurn> = turns.iter().map(TurnRow::ended).collect();
    let against = diff_base(n, &ended, &ids);
    let before = match against {
        Some(t) => turns
            .iter()
            .find(|r| to_u64(r.turn_seq) == t)
            .map(TurnRow::snapshot)
            .transpose()?
            .flatten()
            .map(|s| s.root),
        None => None,
    };
    let nodes = diff_nodes(c, &pool, before.as_ref(), &snapshot.root).await?;
    let mut load = |id: &ObjectId| {
        nodes
            .get(id)
            .cloned()
            .ok_or_else(|| corrupt("snapshot", &format!("node {id} is not stored")))
    };
    let mut changes = diff(before.as_ref(), &snapshot.root, &mut load)?;
    let truncated = changes.len() > MAX_DIFF_CHANGES;
    changes.truncate(MAX_DIFF_CHANGES);
    Ok(TurnDiff {
        turn_seq: n,
        against,
        snapshot,
        changes,
        truncated,
    })
}

/// The nodes `snapshots::diff` reads to compare `before` with `after`: level by level, as it
/// walks, skipping the subtrees both share.
async fn diff_nodes<C: Conn>(
    c: &mut C,
    pool: &str,
    before: Option<&ObjectId>,
    after: &ObjectId,
) -> StoreResult<HashMap<ObjectId, Node>> {
    let mut nodes = HashMap::new();
    if before == Some(after) {
        return Ok(nodes);
    }
    let mut a: Vec<ObjectId> = before.into_iter().cloned().collect();
    let mut b: Vec<ObjectId> = vec![after.clone()];
    while !a.is_empty() || !b.is_empty() {
        let in_a: HashSet<ObjectId> = a.iter().cloned().collect();
        let in_b: HashSet<ObjectId> = b.iter().cloned().collect();
        let (mut next_a, mut next_b) = (Vec::new(), Vec::new());
        for (side, other, next) in [(&a, &in_b, &mut next_a), (&b, &in_a, &mut next_b)] {
            for id in side {
                if other.contains(id) {
                    continue;
                }
                if !nodes.contains_key(id) {
                    let n = load_node(c, pool, id).await?;
                    nodes.insert(id.clone(), n);
                }
                if let Some(Node::Branch(children)) = nodes.get(id) {
                    next.extend(children.iter().map(|ch| ch.id.clone()));
                }
            }
        }
        (a, b) = (next_a, next_b);
    }
    Ok(nodes)
}
