//! Threads: a thread's row (its labels, epoch, head version and counters, where a fork came
//! from, what a replay replays), created on first use and claimed by a runner (a new epoch fences the previous one); the
//! fencing read every runner write starts with; and listing.

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    ClaimRequest, ClaimResponse, ForkOrigin, MessageMode, ReplayOrigin, ThreadLabels, ThreadStatus,
    ThreadSummary,
};

use crate::store::codec::{corrupt, labels, parse_id, time, to_u64};
use crate::store::conn::{Conn, for_write, query, query_as, rsq};
use crate::store::{StoreError, StoreResult, ThreadFilter};

/// The status of a purged thread's row (see [`purged!`]).
pub(crate) const PURGED: &str = purged!();

/// The row of a thread that may be used: a tombstone is [`StoreError::Purged`].
pub(crate) fn live(id: ThreadId, row: ThreadRow) -> StoreResult<ThreadRow> {
    if row.status == PURGED {
        Err(StoreError::Purged(id))
    } else {
        Ok(row)
    }
}

/// A row of `threads`.
#[derive(sqlx::FromRow)]
pub(crate) struct ThreadRow {
    pub(crate) thread_id: String,
    pub(crate) pool: Option<String>,
    pub(crate) agent: Option<String>,
    pub(crate) replica: Option<i64>,
    pub(crate) session: Option<String>,
    pub(crate) epoch: i64,
    pub(crate) boot_count: i64,
    pub(crate) version: i64,
    pub(crate) history_len: i64,
    pub(crate) status: String,
    pub(crate) inbox_seq: i64,
    pub(crate) inbox_cursor: i64,
    pub(crate) event_seq: i64,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    /// The latest version's context use, as JSON.
    pub(crate) context: Option<String>,
    /// What its model calls cost, ever, in nano-dollars.
    pub(crate) spent_nanos: i64,
    /// The thread it was forked from, for a fork.
    pub(crate) fork_parent: Option<String>,
    /// The parent's turn it was forked at.
    pub(crate) fork_turn: Option<i64>,
    /// The recorded thread, for a replay.
    pub(crate) replay_source: Option<String>,
    /// The first turn it replays.
    pub(crate) replay_from: Option<i64>,
    /// The last turn it replays.
    pub(crate) replay_to: Option<i64>,
    /// What it replays them against.
    pub(crate) replay_candidate: Option<String>,
}

impl rsq::FromRow for ThreadRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(ThreadRow {
            thread_id: row.get("thread_id")?,
            pool: row.get("pool")?,
            agent: row.get("agent")?,
            replica: row.get("replica")?,
            session: row.get("session")?,
            epoch: row.get("epoch")?,
            boot_count: row.get("boot_count")?,
            version: row.get("version")?,
            history_len: row.get("history_len")?,
            status: row.get("status")?,
            inbox_seq: row.get("inbox_seq")?,
            inbox_cursor: row.get("inbox_cursor")?,
            event_seq: row.get("event_seq")?,
            created_at: row.get("created_at")?,
            updated_at: row.get("updated_at")?,
            context: row.get("context")?,
            spent_nanos: row.get("spent_nanos")?,
            fork_parent: row.get("fork_parent")?,
            fork_turn: row.get("fork_turn")?,
            replay_source: row.get("replay_source")?,
            replay_from: row.get("replay_from")?,
            replay_to: row.get("replay_to")?,
            replay_candidate: row.get("replay_candidate")?,
        })
    }
}

impl ThreadRow {
    pub(crate) fn summary(self) -> StoreResult<ThreadSummary> {
        Ok(ThreadSummary {
            thread_id: parse_id(&self.thread_id)?,
            labels: labels(self.pool, self.agent, self.replica, self.session),
            status: ThreadStatus::parse(&self.status)
                .ok_or_else(|| corrupt("thread status", &self.status))?,
            epoch: to_u64(self.epoch),
            boot_count: to_u64(self.boot_count),
            version: to_u64(self.version),
            history_len: to_u64(self.history_len),
            inbox_seq: to_u64(self.inbox_seq),
            event_seq: to_u64(self.event_seq),
            created_at: time(self.created_at),
            updated_at: time(self.updated_at),
            context: self
                .context
                .map(|c| {
                    serde_json::from_str(&c).map_err(|e| corrupt("thread context", &e.to_string()))
                })
                .transpose()?,
            spent_usd: crate::limit_rules::usd(self.spent_nanos),
            forked_from: match (self.fork_parent, self.fork_turn) {
                (Some(parent), Some(turn)) => Some(ForkOrigin {
                    parent: parse_id(&parent)?,
                    at_turn: to_u64(turn),
                }),
                _ => None,
            },
            replay_of: match (self.replay_source, self.replay_from, self.replay_to) {
                (Some(source), Some(from), Some(to)) => Some(ReplayOrigin {
                    source: parse_id(&source)?,
                    from_turn: to_u64(from),
                    to_turn: to_u64(to),
                    candidate: self.replay_candidate.unwrap_or_default(),
                }),
                _ => None,
            },
        })
    }
}

/// Creates the thread if new, with the labels given (`labels.session` is never stored
/// here: only `open_session` sets it), and returns the thread's labels. An existing
/// thread keeps its labels: the ones given must restate them (409 `labels_fixed`) — but
/// for a mint on a thread that has none yet (`labels::settle`).
pub(crate) async fn ensure_thread<C: Conn>(
    c: &mut C,
    id: ThreadId,
    labels: &ThreadLabels,
    stating: crate::labels::Stating,
    now: i64,
) -> StoreResult<ThreadLabels> {
    // A purged thread keeps its row as a tombstone, so it is never created again.
    query(
        "INSERT INTO threads (thread_id, pool, agent, replica, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5) \
         ON CONFLICT (thread_id) DO NOTHING",
    )
    .bind(id.to_string())
    .bind(labels.pool.clone())
    .bind(labels.agent.clone())
    .bind(labels.replica.map(i64::from))
    .bind(now)
    .execute(&mut *c)
    .await?;
    // The row is locked: a purge waits for this write, or this write for the purge.
    let row: ThreadRow = query_as(for_write::<C>(SELECT_THREAD))
        .bind(id.to_string())
        .fetch_one(&mut *c)
        .await?;
    if row.status == PURGED {
        return Err(StoreError::Purged(id));
    }
    let stored = crate::store::codec::labels(row.pool, row.agent, row.replica, row.session);
    let settled =
        crate::labels::settle(&stored, labels, stating).map_err(|changed| changed.refused(id))?;
    if settled != stored {
        query("UPDATE threads SET pool = $2, agent = $3, replica = $4 WHERE thread_id = $1")
            .bind(id.to_string())
            .bind(settled.pool.clone())
            .bind(settled.agent.clone())
            .bind(settled.replica.map(i64::from))
            .execute(&mut *c)
            .await?;
    }
    Ok(settled)
}

/// Claims the thread. `stating` says who gives the labels: the admin's claim (or an
/// insecure-dev runner's, which is the admin) may label a thread that has none yet, as a
/// mint may; a runner token's claim only restates them. The claim's
/// `on_message_while_busy`, when given, replaces the thread's (the mode of a message sent
/// without one).
pub(crate) async fn claim<C: Conn>(
    c: &mut C,
    id: ThreadId,
    request: &ClaimRequest,
    stating: crate::labels::Stating,
    now: i64,
) -> StoreResult<ClaimResponse> {
    let labels = &request.labels();
    let stored = ensure_thread(c, id, labels, stating, now).await?;
    if let Some(key) = &labels.session
        && stored.session.as_deref() != Some(key.as_str())
    {
        return Err(StoreError::SessionMismatch {
            thread: id,
            key: key.clone(),
        });
    }
    let (epoch, boot_count): (i64, i64) = query_as(
        "UPDATE threads SET epoch = epoch + 1, boot_count = boot_count + 1, updated_at = $2, on_busy = COALESCE($3, on_busy) \
         WHERE thread_id = $1 RETURNING epoch, boot_count",
    )
    .bind(id.to_string())
    .bind(now)
    .bind(request.on_message_while_busy.map(MessageMode::as_str))
    .fetch_one(&mut *c)
    .await?;
    Ok(ClaimResponse {
        epoch: to_u64(epoch),
        boot_count: to_u64(boot_count),
    })
}

/// Reads the thread for a write and checks the writer's epoch.
pub(super) async fn fenced_thread<C: Conn>(
    c: &mut C,
    id: ThreadId,
    epoch: u64,
) -> StoreResult<ThreadRow> {
    let row: Option<ThreadRow> = query_as(for_write::<C>(SELECT_THREAD))
        .bind(id.to_string())
        .fetch_optional(&mut *c)
        .await?;
    let row = live(id, row.ok_or(StoreError::NotFound("thread"))?)?;
    if to_u64(row.epoch) != epoch {
        return Err(StoreError::Fenced {
            given: epoch,
            current: to_u64(row.epoch),
        });
    }
    Ok(row)
}

/// A thread's fork origin (the parent and its turn), for a fork.
pub(super) async fn fork_origin<C: Conn>(
    c: &mut C,
    thread: &str,
) -> StoreResult<Option<(String, i64)>> {
    let row: Option<(Option<String>, Option<i64>)> =
        query_as("SELECT fork_parent, fork_turn FROM threads WHERE thread_id = $1")
            .bind(thread)
            .fetch_optional(&mut *c)
            .await?;
    Ok(match row {
        Some((Some(p), Some(t))) => Some((p, t)),
        _ => None,
    })
}

pub(super) const SELECT_THREAD: &str = concat!(
    "SELECT ",
    thread_columns!(),
    " FROM threads WHERE thread_id = $1"
);

/// `Purged` for a purged thread (its tombstone), so a runner that reads one learns it.
pub(crate) async fn not_purged<C: Conn>(c: &mut C, id: ThreadId) -> StoreResult<()> {
    let status: Option<(String,)> = query_as("SELECT status FROM threads WHERE thread_id = $1")
        .bind(id.to_string())
        .fetch_optional(&mut *c)
        .await?;
    if status.is_some_and(|(s,)| s == PURGED) {
        return Err(StoreError::Purged(id));
    }
    Ok(())
}

pub(crate) async fn list_threads<C: Conn>(
    c: &mut C,
    f: &ThreadFilter,
) -> StoreResult<Vec<ThreadSummary>> {
    let rows: Vec<ThreadRow> = query_as(
        concat!("SELECT ", thread_columns!(), " FROM threads \
         WHERE status <> '", purged!(), "' AND ($1 IS NULL OR pool = $1) AND ($2 IS NULL OR agent = $2) AND ($3 IS NULL OR status = $3) \
         AND ($6 = 0 OR session IS NOT NULL) AND ($7 IS NULL OR session = $7) \
         ORDER BY pool, agent, replica, session, created_at, thread_id LIMIT $4 OFFSET $5"),
    )
    .bind(f.pool.as_deref())
    .bind(f.agent.as_deref())
    .bind(f.status.map(|s| s.as_str()))
    .bind(i64::from(f.limit))
    .bind(i64::from(f.offset))
    .bind(i64::from(f.sessions))
    .bind(f.session.as_deref())
    .fetch_all(&mut *c)
    .await?;
    rows.into_iter().map(ThreadRow::summary).collect()
}

pub(crate) async fn thread<C: Conn>(c: &mut C, id: ThreadId) -> StoreResult<Option<ThreadSummary>> {
    let row: Option<ThreadRow> = query_as(SELECT_THREAD)
        .bind(id.to_string())
        .fetch_optional(&mut *c)
        .await?;
    row.map(|r| live(id, r)?.summary()).transpose()
}
