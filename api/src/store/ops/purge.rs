//! The purge: every row of a thread deleted but its tombstone (so its ID is never used again) —
//! except the messages other threads' histories share (a fork's prefix is its base's rows), kept
//! until the last thread leaning on them is purged too (a replay leans on its source's as a fork
//! does, so purging a source leaves its replays readable). A purge also removes the thread's eval
//! memberships, and a purged replay's key, so the same key makes a new replay.

use ninetrix_proto::ThreadId;

use crate::store::StoreResult;
use crate::store::conn::{AssertSqlSafe, Conn, for_write, query, query_as};

use super::threads::{PURGED, SELECT_THREAD, ThreadRow};
use super::turns::delete_turns;

/// The deepest chain of forks a purge follows.
const MAX_DEPTH: usize = 10_000;

/// What a purge found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purge {
    /// The thread's rows are gone now; its tombstone stays.
    Done,
    /// It was purged before.
    Already,
    /// No such thread.
    NotFound,
}

/// Deletes everything of the thread and leaves its row as a tombstone (status `purged`, no
/// labels, its epoch kept; its base kept, for the forks whose prefix goes through it), so its ID
/// is never used again. Its turns' snapshots are released. Its messages stay while a live thread's
/// history shares them (see [`needed`]); the messages of purged bases nothing needs any more go
/// with it. The row is locked first: on Postgres a write in flight commits before the rows go,
/// and every write after finds the tombstone.
pub(crate) async fn purge<C: Conn>(
    c: &mut C,
    id: ThreadId,
    now: i64,
    crash: fn(&str),
) -> StoreResult<Purge> {
    let row: Option<ThreadRow> = query_as(for_write::<C>(SELECT_THREAD))
        .bind(id.to_string())
        .fetch_optional(&mut *c)
        .await?;
    let row = match row {
        None => return Ok(Purge::NotFound),
        Some(r) if r.status == PURGED => return Ok(Purge::Already),
        Some(r) => r,
    };
    delete_turns(c, &id.to_string(), row.pool.as_deref().unwrap_or_default()).await?;
    super::a2a::purge_tasks(c, &id.to_string()).await?;
    for table in [
        "versions",
        "tool_calls",
        "approvals",
        "handoffs",
        "inbox",
        "events",
        "memory_ops",
        "model_leases",
        "eval_members",
    ] {
        let sql = format!("DELETE FROM {table} WHERE thread_id = $1");
        query(AssertSqlSafe(sql))
            .bind(id.to_string())
            .execute(&mut *c)
            .await?;
    }
    query(concat!(
        "UPDATE threads SET status = '", purged!(), "', pool = NULL, agent = NULL, replica = NULL, session = NULL, version = 0, ",
        "history_len = 0, inbox_seq = 0, inbox_cursor = 0, event_seq = 0, context = NULL, on_busy = NULL, spent_nanos = 0, replay_key = NULL, updated_at = $2 WHERE thread_id = $1"
    ))
    .bind(id.to_string())
    .bind(now)
    .execute(&mut *c)
    .await?;
    // Its messages, then those of each purged base above it, while nothing needs them.
    let mut at = Some(id.to_string());
    for _ in 0..MAX_DEPTH {
        let Some(thread) = at.take() else { break };
        if needed(c, &thread).await? {
            break;
        }
        query("DELETE FROM messages WHERE thread_id = $1")
            .bind(thread.as_str())
            .execute(&mut *c)
            .await?;
        let base: Option<(Option<String>,)> =
            query_as("SELECT base_thread FROM threads WHERE thread_id = $1")
                .bind(thread.as_str())
                .fetch_optional(&mut *c)
                .await?;
        at = base.and_then(|(b,)| b);
    }
    crash("purge_before_commit");
    Ok(Purge::Done)
}

/// Whether `thread`'s messages are part of a history still read: it is live, or a thread whose
/// prefix goes through it (its forks' forks included) is.
async fn needed<C: Conn>(c: &mut C, thread: &str) -> StoreResult<bool> {
    let mut queue = vec![thread.to_string()];
    let mut seen = 0usize;
    while let Some(t) = queue.pop() {
        let status: Option<(String,)> = query_as("SELECT status FROM threads WHERE thread_id = $1")
            .bind(t.as_str())
            .fetch_optional(&mut *c)
            .await?;
        if status.is_some_and(|(s,)| s != PURGED) {
            return Ok(true);
        }
        let leaning: Vec<(String,)> =
            query_as("SELECT thread_id FROM threads WHERE base_thread = $1")
                .bind(t.as_str())
                .fetch_all(&mut *c)
                .await?;
        queue.extend(leaning.into_iter().map(|(l,)| l));
        seen += 1;
        if seen > MAX_DEPTH {
            return Ok(true);
        }
    }
    Ok(false)
}
