//! Handoffs: one call's task handed to a collaborator's session (once per call), the reply its
//! commit records, and the listings; the checks on a request and where a handoff stands.

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    ErrorCode, Handoff, HandoffOrigin, HandoffReply, HandoffRequest, HandoffStatus, ThreadLabels,
};

use crate::store::checks::MAX_KEY_LEN;
use crate::store::codec::{corrupt, encode, parse_id, time, to_i64, to_u64};
use crate::store::conn::{AssertSqlSafe, Conn, query, query_as, rsq};
use crate::store::{HandoffFilter, StoreError, StoreResult};

use super::approvals::MAX_APPROVAL_SECS;
use super::inbox::{NewMessage, insert_inbox};
use super::sessions::open_session;
use super::threads::{PURGED, fenced_thread, not_purged};

/// A row of `handoffs`.
#[derive(sqlx::FromRow)]
pub(crate) struct HandoffRow {
    pub(crate) thread_id: String,
    pub(crate) key: String,
    pub(crate) pool: String,
    pub(crate) from_agent: String,
    pub(crate) epoch: i64,
    pub(crate) turn_seq: i64,
    pub(crate) call_id: String,
    pub(crate) agent: String,
    pub(crate) session: String,
    pub(crate) target_thread_id: String,
    pub(crate) inbox_seq: i64,
    pub(crate) task: String,
    pub(crate) context: Option<String>,
    pub(crate) chain: String,
    pub(crate) status: String,
    pub(crate) reply: Option<String>,
    pub(crate) cost_nano_usd: i64,
    pub(crate) created_at: i64,
    pub(crate) expires_at: i64,
    pub(crate) replied_at: Option<i64>,
}

impl rsq::FromRow for HandoffRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(HandoffRow {
            thread_id: row.get("thread_id")?,
            key: row.get("key")?,
            pool: row.get("pool")?,
            from_agent: row.get("from_agent")?,
            epoch: row.get("epoch")?,
            turn_seq: row.get("turn_seq")?,
            call_id: row.get("call_id")?,
            agent: row.get("agent")?,
            session: row.get("session")?,
            target_thread_id: row.get("target_thread_id")?,
            inbox_seq: row.get("inbox_seq")?,
            task: row.get("task")?,
            context: row.get("context")?,
            chain: row.get("chain")?,
            status: row.get("status")?,
            reply: row.get("reply")?,
            cost_nano_usd: row.get("cost_nano_usd")?,
            created_at: row.get("created_at")?,
            expires_at: row.get("expires_at")?,
            replied_at: row.get("replied_at")?,
        })
    }
}

/// The columns every handoff read selects.
pub(crate) const HANDOFF_COLUMNS: &str = "thread_id, key, pool, from_agent, epoch, turn_seq, call_id, agent, session, target_thread_id, inbox_seq, task, context, chain, status, reply, cost_nano_usd, created_at, expires_at, replied_at";

/// Where a handoff stands at `now`: what was recorded, except that one without a reply by its
/// expiry — still pending at `now`, or answered only after it — timed out.
pub(crate) fn handoff_status(
    stored: HandoffStatus,
    expires_at: i64,
    replied_at: Option<i64>,
    now: i64,
) -> HandoffStatus {
    match (stored, replied_at) {
        (HandoffStatus::Pending, _) if now >= expires_at => HandoffStatus::TimedOut,
        (HandoffStatus::Replied | HandoffStatus::Failed, Some(at)) if at > expires_at => {
            HandoffStatus::TimedOut
        }
        _ => stored,
    }
}

/// US dollars as stored (nano-dollars; negative and non-finite amounts are 0).
pub(crate) fn nano_usd(usd: f64) -> i64 {
    if usd.is_finite() && usd > 0.0 {
        (usd * 1e9).round().min(i64::MAX as f64) as i64
    } else {
        0
    }
}

impl HandoffRow {
    /// The record as it stands at `now` (see [`handoff_status`]).
    pub(crate) fn handoff(self, now: i64) -> StoreResult<Handoff> {
        let stored = HandoffStatus::parse(&self.status)
            .ok_or_else(|| corrupt("handoff status", &self.status))?;
        Ok(Handoff {
            delivery_key: ninetrix_proto::handoffs::delivery_key(&self.key),
            thread_id: parse_id(&self.thread_id)?,
            pool: self.pool,
            from_agent: self.from_agent,
            epoch: to_u64(self.epoch),
            turn_seq: to_u64(self.turn_seq),
            key: self.key,
            call_id: self.call_id,
            agent: self.agent,
            session: self.session,
            target_thread_id: parse_id(&self.target_thread_id)?,
            inbox_seq: to_u64(self.inbox_seq),
            task: self.task,
            context: self.context,
            chain: serde_json::from_str(&self.chain)
                .map_err(|e| corrupt("handoff chain", &e.to_string()))?,
            status: handoff_status(stored, self.expires_at, self.replied_at, now),
            reply: self.reply,
            cost_usd: self.cost_nano_usd as f64 / 1e9,
            created_at: time(self.created_at),
            expires_at: time(self.expires_at),
            replied_at: self.replied_at.map(time),
        })
    }
}

/// What a handoff request must satisfy before anything is written (422 otherwise).
pub(crate) fn check_handoff(req: &HandoffRequest) -> StoreResult<()> {
    let invalid = |code: ErrorCode, message: String| StoreError::Invalid { code, message };
    ninetrix_proto::handoffs::check_key(&req.key).map_err(|m| invalid(ErrorCode::InvalidKey, m))?;
    if req.call_id.is_empty() || req.call_id.chars().count() > MAX_KEY_LEN {
        return Err(invalid(
            ErrorCode::InvalidKey,
            format!("a call_id must be 1 to {MAX_KEY_LEN} characters"),
        ));
    }
    let name_ok =
        |n: &str| (1..=63).contains(&n.chars().count()) && !n.chars().any(char::is_control);
    if !name_ok(&req.agent) {
        return Err(invalid(
            ErrorCode::InvalidBody,
            "agent must have 1 to 63 characters".into(),
        ));
    }
    if req.via.len() >= ninetrix_proto::handoffs::MAX_CHAIN_LEN
        || !req.via.iter().all(|n| name_ok(n))
    {
        return Err(invalid(
            ErrorCode::InvalidBody,
            format!(
                "via must hold at most {} agent names",
                ninetrix_proto::handoffs::MAX_CHAIN_LEN - 1
            ),
        ));
    }
    if req.timeout_secs == 0 || req.timeout_secs > MAX_APPROVAL_SECS {
        return Err(invalid(
            ErrorCode::OutOfRange,
            format!("timeout_secs must be 1 to {MAX_APPROVAL_SECS}"),
        ));
    }
    if req.budget_usd.is_some_and(|b| !b.is_finite() || b < 0.0) {
        return Err(invalid(
            ErrorCode::OutOfRange,
            "budget_usd must be a non-negative number".into(),
        ));
    }
    Ok(())
}

/// Stores the reply of the handoff whose task `target` did (the first reply stands), and
/// returns the caller's thread to wake. A reply that names no handoff of this thread is
/// refused, so a confused runner cannot answer another conversation's call.
pub(super) async fn record_handoff_reply<C: Conn>(
    c: &mut C,
    target: ThreadId,
    reply: &HandoffReply,
    now: i64,
) -> StoreResult<Option<ThreadId>> {
    let sql = format!("SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE target_thread_id = $1");
    let row: Option<HandoffRow> = query_as(AssertSqlSafe(sql))
        .bind(target.to_string())
        .fetch_optional(&mut *c)
        .await?;
    let Some(row) =
        row.filter(|r| ninetrix_proto::handoffs::delivery_key(&r.key) == reply.delivery_key)
    else {
        return Err(StoreError::UnknownHandoff(reply.delivery_key.clone()));
    };
    let caller = parse_id(&row.thread_id)?;
    if row.status != HandoffStatus::Pending.as_str() {
        return Ok(Some(caller));
    }
    let status = if reply.ok {
        HandoffStatus::Replied
    } else {
        HandoffStatus::Failed
    };
    query("UPDATE handoffs SET status = $3, reply = $4, cost_nano_usd = $5, replied_at = $6 WHERE thread_id = $1 AND key = $2")
        .bind(row.thread_id.clone())
        .bind(row.key.clone())
        .bind(status.as_str())
        .bind(reply.text.clone())
        .bind(nano_usd(reply.cost_usd))
        .bind(now)
        .execute(&mut *c)
        .await?;
    Ok(Some(caller))
}

async fn handoff_row<C: Conn>(
    c: &mut C,
    caller: ThreadId,
    key: &str,
) -> StoreResult<Option<HandoffRow>> {
    let sql = format!("SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE thread_id = $1 AND key = $2");
    query_as(AssertSqlSafe(sql))
        .bind(caller.to_string())
        .bind(key)
        .fetch_optional(&mut *c)
        .await
}

/// Hands one call's task to a collaborator, once: fenced by the caller's epoch; the
/// collaborator must be one of the caller's agent's (as `up` recorded them) — the agent
/// and pool of `as_labels` (the runner token's), or the thread's for the admin; its session
/// for this call is opened, the task filed in its inbox under the delivery key, and the
/// link stored — or, for a call that already did all that, the handoff found (`false`).
/// Returns the (pool, agent) whose replicas to wake as well.
pub(crate) async fn open_handoff<C: Conn>(
    c: &mut C,
    caller: ThreadId,
    req: &HandoffRequest,
    as_labels: Option<&ThreadLabels>,
    now: i64,
) -> StoreResult<(Handoff, bool)> {
    check_handoff(req)?;
    let thread = fenced_thread(c, caller, req.epoch).await?;
    if let Some(row) = handoff_row(c, caller, &req.key).await? {
        // The collaborator's session was purged: the handoff can never be answered.
        let target = parse_id(&row.target_thread_id)?;
        let status: Option<(String,)> = query_as("SELECT status FROM threads WHERE thread_id = $1")
            .bind(target.to_string())
            .fetch_optional(&mut *c)
            .await?;
        if status.is_none_or(|(s,)| s == PURGED) {
            return Err(StoreError::Purged(target));
        }
        return Ok((row.handoff(now)?, false));
    }
    let (pool, from_agent) = match as_labels {
        Some(token) => (token.pool.clone(), token.agent.clone()),
        None => (thread.pool.clone(), thread.agent.clone()),
    };
    let (Some(pool), Some(from_agent)) = (pool, from_agent) else {
        return Err(StoreError::NotCollaborator(
            "this thread has no pool and agent labels: only an agent run by `ninetrix up` hands work to collaborators".into(),
        ));
    };
    let mut chain = req.via.clone();
    chain.push(from_agent.clone());
    let collaborators: Option<(String,)> =
        query_as("SELECT collaborators FROM agents WHERE pool = $1 AND agent = $2")
            .bind(pool.clone())
            .bind(from_agent.clone())
            .fetch_optional(&mut *c)
            .await?;
    let allowed: Vec<String> = match collaborators {
        Some((json,)) => serde_json::from_str(&json)
            .map_err(|e| corrupt("agent collaborators", &e.to_string()))?,
        None => Vec::new(),
    };
    let target: Option<(i64,)> =
        query_as("SELECT replicas FROM agents WHERE pool = $1 AND agent = $2")
            .bind(pool.clone())
            .bind(req.agent.clone())
            .fetch_optional(&mut *c)
            .await?;
    if !allowed.contains(&req.agent) || target.is_none() {
        return Err(StoreError::NotCollaborator(if target.is_none() {
            format!(
                "pool `{pool}` runs no agent `{}` (as `ninetrix up` last recorded it)",
                req.agent
            )
        } else {
            format!(
                "`{}` is not one of `{from_agent}`'s collaborators in pool `{pool}` (as `ninetrix up` last recorded them)",
                req.agent
            )
        }));
    }
    let session_key = ninetrix_proto::handoffs::session_key(caller, &req.key);
    let (session, _) = open_session(c, &pool, &req.agent, &session_key, now).await?;
    let origin = HandoffOrigin {
        delivery_key: ninetrix_proto::handoffs::delivery_key(&req.key),
        from_agent: from_agent.clone(),
        from_thread: caller,
        chain: chain.clone(),
        budget_usd: req.budget_usd,
    };
    let content =
        ninetrix_proto::handoffs::task_message(&from_agent, &req.task, req.context.as_deref());
    // The session is new (one per call): no turn runs there, so the task finds none to
    // refuse, join or interrupt, and wakes only the agent's replicas (the route does that).
    let task = NewMessage {
        dedupe_key: Some(&origin.delivery_key),
        origin: Some(&origin),
        ..NewMessage::work(&content, None, false)
    };
    let enqueued = insert_inbox(c, session.thread_id, &task, now)
        .await?
        .response;
    let timeout_ms = to_i64(req.timeout_secs.saturating_mul(1000), "timeout_secs")?;
    query(
        "INSERT INTO handoffs (thread_id, key, pool, from_agent, epoch, turn_seq, call_id, agent, session, target_thread_id, inbox_seq, task, context, chain, status, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 'pending', $15, $16)",
    )
    .bind(caller.to_string())
    .bind(req.key.clone())
    .bind(pool.clone())
    .bind(from_agent.clone())
    .bind(to_i64(req.epoch, "epoch")?)
    .bind(to_i64(req.turn_seq, "turn_seq")?)
    .bind(req.call_id.clone())
    .bind(req.agent.clone())
    .bind(session_key)
    .bind(session.thread_id.to_string())
    .bind(to_i64(enqueued.seq, "inbox_seq")?)
    .bind(req.task.clone())
    .bind(req.context.clone())
    .bind(encode(&chain)?)
    .bind(now)
    .bind(now.saturating_add(timeout_ms))
    .execute(&mut *c)
    .await?;
    let row = handoff_row(c, caller, &req.key)
        .await?
        .ok_or(StoreError::NotFound("handoff"))?;
    Ok((row.handoff(now)?, true))
}

/// The handoffs one turn of a thread made, oldest first, as they stand at `now`.
pub(crate) async fn turn_handoffs<C: Conn>(
    c: &mut C,
    id: ThreadId,
    turn_seq: u64,
    now: i64,
) -> StoreResult<Vec<Handoff>> {
    not_purged(c, id).await?;
    let sql = format!(
        "SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE thread_id = $1 AND turn_seq = $2 ORDER BY created_at, key"
    );
    let rows: Vec<HandoffRow> = query_as(AssertSqlSafe(sql))
        .bind(id.to_string())
        .bind(to_i64(turn_seq, "turn_seq")?)
        .fetch_all(&mut *c)
        .await?;
    rows.into_iter().map(|r| r.handoff(now)).collect()
}

/// Handoffs matching the filter, oldest first, as they stand at `now`.
pub(crate) async fn list_handoffs<C: Conn>(
    c: &mut C,
    f: &HandoffFilter,
    now: i64,
) -> StoreResult<Vec<Handoff>> {
    let sql = format!(
        "SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE ($1 IS NULL OR pool = $1) AND ($2 IS NULL OR thread_id = $2) \
         AND ($3 IS NULL OR target_thread_id = $3) ORDER BY created_at, thread_id, key LIMIT $4 OFFSET $5"
    );
    let rows: Vec<HandoffRow> = query_as(AssertSqlSafe(sql))
        .bind(f.pool.as_deref())
        .bind(f.thread.map(|t| t.to_string()))
        .bind(f.target.map(|t| t.to_string()))
        .bind(i64::from(f.limit))
        .bind(i64::from(f.offset))
        .fetch_all(&mut *c)
        .await?;
    rows.into_iter().map(|r| r.handoff(now)).collect()
}
