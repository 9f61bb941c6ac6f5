//! The tool-call ledger: intents recorded before a call runs and outcomes after (the first
//! outcome stands), keyed per thread; and reading them back.

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{ToolCallCompletion, ToolCallIntent, ToolCallRecord, ToolCallStatus};
use ninetrix_proto::effects::Effect;

use crate::store::checks::{check_args, check_key};
use crate::store::codec::{corrupt, encode, time, to_i64, to_u64};
use crate::store::conn::{AssertSqlSafe, Conn, query, query_as, rsq};
use crate::store::{StoreError, StoreResult};

use super::threads::{fenced_thread, fork_origin, not_purged};

/// The deepest chain of forks a ledger read follows.
const MAX_FORK_DEPTH: usize = 10_000;

#[derive(sqlx::FromRow)]
pub(crate) struct ToolCallRow {
    pub(crate) key: String,
    pub(crate) turn_seq: i64,
    pub(crate) tool: String,
    pub(crate) args: String,
    pub(crate) effect: String,
    pub(crate) status: String,
    pub(crate) result: Option<String>,
    pub(crate) intent_epoch: i64,
    pub(crate) completed_epoch: Option<i64>,
    pub(crate) created_at: i64,
    pub(crate) completed_at: Option<i64>,
}

impl rsq::FromRow for ToolCallRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(ToolCallRow {
            key: row.get("key")?,
            turn_seq: row.get("turn_seq")?,
            tool: row.get("tool")?,
            args: row.get("args")?,
            effect: row.get("effect")?,
            status: row.get("status")?,
            result: row.get("result")?,
            intent_epoch: row.get("intent_epoch")?,
            completed_epoch: row.get("completed_epoch")?,
            created_at: row.get("created_at")?,
            completed_at: row.get("completed_at")?,
        })
    }
}

impl ToolCallRow {
    pub(crate) fn record(self) -> StoreResult<ToolCallRecord> {
        Ok(ToolCallRecord {
            key: self.key,
            turn_seq: to_u64(self.turn_seq),
            tool: self.tool,
            args: serde_json::from_str(&self.args)
                .map_err(|e| corrupt("tool args", &e.to_string()))?,
            effect: Effect::parse(&self.effect)
                .ok_or_else(|| corrupt("tool effect", &self.effect))?,
            status: match self.status.as_str() {
                "intent" => ToolCallStatus::Intent,
                "completed" => ToolCallStatus::Completed,
                "failed" => ToolCallStatus::Failed,
                other => return Err(corrupt("tool call status", other)),
            },
            result: self.result,
            intent_epoch: to_u64(self.intent_epoch),
            completed_epoch: self.completed_epoch.map(to_u64),
            created_at: time(self.created_at),
            completed_at: self.completed_at.map(time),
        })
    }
}

/// The fields of a ledger intent, borrowed from a [`ToolCallIntent`](ninetrix_proto::api::ToolCallIntent)
/// or a commit's [`CommitIntent`](ninetrix_proto::api::CommitIntent).
pub(crate) struct IntentWrite<'a> {
    pub(crate) key: &'a str,
    pub(crate) turn_seq: u64,
    pub(crate) tool: &'a str,
    pub(crate) args: &'a serde_json::Value,
    pub(crate) effect: Effect,
}

/// The ledger columns every ledger read selects.
pub(crate) const TOOL_CALL_COLUMNS: &str = "key, turn_seq, tool, args, effect, status, result, intent_epoch, completed_epoch, created_at, completed_at";

pub(super) async fn tool_call_row<C: Conn>(
    c: &mut C,
    id: ThreadId,
    key: &str,
) -> StoreResult<Option<ToolCallRecord>> {
    let sql =
        format!("SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE thread_id = $1 AND key = $2");
    let row: Option<ToolCallRow> = query_as(AssertSqlSafe(sql))
        .bind(id.to_string())
        .bind(key)
        .fetch_optional(&mut *c)
        .await?;
    row.map(ToolCallRow::record).transpose()
}

pub(crate) async fn record_intent<C: Conn>(
    c: &mut C,
    id: ThreadId,
    intent: &ToolCallIntent,
    now: i64,
) -> StoreResult<(ToolCallRecord, bool)> {
    check_key("key", &intent.key)?;
    check_args("args", &intent.args)?;
    fenced_thread(c, id, intent.epoch).await?;
    let fields = IntentWrite {
        key: &intent.key,
        turn_seq: intent.turn_seq,
        tool: &intent.tool,
        args: &intent.args,
        effect: intent.effect,
    };
    insert_intent(c, id, intent.epoch, &fields, now).await
}

/// Inserts an intent unless its key is in the ledger; returns the stored record and
/// whether it is new. The caller has fenced the thread in this transaction.
pub(super) async fn insert_intent<C: Conn>(
    c: &mut C,
    id: ThreadId,
    epoch: u64,
    intent: &IntentWrite<'_>,
    now: i64,
) -> StoreResult<(ToolCallRecord, bool)> {
    let inserted = query(
        "INSERT INTO tool_calls (thread_id, key, turn_seq, tool, args, effect, status, intent_epoch, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, 'intent', $7, $8) ON CONFLICT (thread_id, key) DO NOTHING",
    )
    .bind(id.to_string())
    .bind(intent.key)
    .bind(to_i64(intent.turn_seq, "turn_seq")?)
    .bind(intent.tool)
    .bind(encode(intent.args)?)
    .bind(intent.effect.as_str())
    .bind(to_i64(epoch, "epoch")?)
    .bind(now)
    .execute(&mut *c)
    .await?
    .rows_affected()
        == 1;
    let record = tool_call_row(c, id, intent.key)
        .await?
        .ok_or(StoreError::NotFound("tool call"))?;
    // The key is derived from the turn, tool and arguments, so a different call under a
    // stored key is a client bug: refused, never silently answered with the old record.
    if !inserted
        && (record.turn_seq != intent.turn_seq
            || record.tool != intent.tool
            || &record.args != intent.args)
    {
        return Err(StoreError::KeyReused(format!(
            "ledger key {} is stored for another call (turn {}, tool `{}`): this intent has another tool, turn or arguments; the stored record is unchanged",
            intent.key, record.turn_seq, record.tool
        )));
    }
    Ok((record, inserted))
}

pub(crate) async fn complete_tool_call<C: Conn>(
    c: &mut C,
    id: ThreadId,
    key: &str,
    done: &ToolCallCompletion,
    now: i64,
) -> StoreResult<ToolCallRecord> {
    check_key("key", key)?;
    fenced_thread(c, id, done.epoch).await?;
    record_outcome(c, id, key, done.epoch, done.ok, &done.result, now).await
}

/// Records an outcome (the first one wins; the same one again is harmless). The caller
/// has fenced the thread in this transaction.
pub(super) async fn record_outcome<C: Conn>(
    c: &mut C,
    id: ThreadId,
    key: &str,
    epoch: u64,
    ok: bool,
    result: &str,
    now: i64,
) -> StoreResult<ToolCallRecord> {
    let existing = tool_call_row(c, id, key)
        .await?
        .ok_or(StoreError::NotFound("tool call"))?;
    let status = if ok { "completed" } else { "failed" };
    match existing.status {
        ninetrix_proto::api::ToolCallStatus::Intent => {
            query("UPDATE tool_calls SET status = $3, result = $4, completed_epoch = $5, completed_at = $6 WHERE thread_id = $1 AND key = $2")
                .bind(id.to_string())
                .bind(key)
                .bind(status)
                .bind(result)
                .bind(to_i64(epoch, "epoch")?)
                .bind(now)
                .execute(&mut *c)
                .await?;
            tool_call_row(c, id, key)
                .await?
                .ok_or(StoreError::NotFound("tool call"))
        }
        recorded => {
            let same_ok = matches!(recorded, ninetrix_proto::api::ToolCallStatus::Completed) == ok;
            if same_ok && existing.result.as_deref() == Some(result) {
                Ok(existing)
            } else {
                Err(StoreError::AlreadyCompleted {
                    key: key.to_string(),
                })
            }
        }
    }
}

/// The ledger records of turn `turn_seq` of a thread, oldest first. A fork's turns up to the one
/// it was forked at ran in its parent: their records are the parent's (recursively), so a replay
/// finds what already happened.
pub(crate) async fn turn_tool_calls<C: Conn>(
    c: &mut C,
    id: ThreadId,
    turn_seq: u64,
) -> StoreResult<Vec<ToolCallRecord>> {
    not_purged(c, id).await?;
    let turn = to_i64(turn_seq, "turn_seq")?;
    let mut at = id.to_string();
    for _ in 0..MAX_FORK_DEPTH {
        match fork_origin(c, &at).await? {
            Some((parent, fork_turn)) if turn <= fork_turn => at = parent,
            _ => break,
        }
    }
    let sql = format!(
        "SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE thread_id = $1 AND turn_seq = $2 ORDER BY created_at, key"
    );
    let rows: Vec<ToolCallRow> = query_as(AssertSqlSafe(sql))
        .bind(at)
        .bind(turn)
        .fetch_all(&mut *c)
        .await?;
    rows.into_iter().map(ToolCallRow::record).collect()
}

/// A thread's own ledger, oldest first.
pub(crate) async fn tool_calls<C: Conn>(
    c: &mut C,
    id: ThreadId,
) -> StoreResult<Vec<ToolCallRecord>> {
    own_tool_calls(c, &id.to_string(), i64::MAX).await
}

async fn own_tool_calls<C: Conn>(
    c: &mut C,
    thread: &str,
    up_to_turn: i64,
) -> StoreResult<Vec<ToolCallRecord>> {
    let sql = format!(
        "SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE thread_id = $1 AND turn_seq <= $2 ORDER BY created_at, key"
    );
    let rows: Vec<ToolCallRow> = query_as(AssertSqlSafe(sql))
        .bind(thread)
        .bind(up_to_turn)
        .fetch_all(&mut *c)
        .await?;
    rows.into_iter().map(ToolCallRow::record).collect()
}

/// A thread's ledger as the admin lists it: for a fork, the records of the turns it shares with
/// its parent (the parent's, recursively) first, then its own.
pub(crate) async fn listed_tool_calls<C: Conn>(
    c: &mut C,
    id: ThreadId,
) -> StoreResult<Vec<ToolCallRecord>> {
    let mut parts = vec![own_tool_calls(c, &id.to_string(), i64::MAX).await?];
    let (mut at, mut limit) = (id.to_string(), i64::MAX);
    for _ in 0..MAX_FORK_DEPTH {
        let Some((parent, fork_turn)) = fork_origin(c, &at).await? else {
            break;
        };
        limit = limit.min(fork_turn);
        parts.push(own_tool_calls(c, &parent, limit).await?);
        at = parent;
    }
    Ok(parts.into_iter().rev().flatten().collect())
}
