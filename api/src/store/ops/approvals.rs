//! Requests to people: stored by a commit, decided once by a person (or expired), each decision
//! an `approval_decided` event of its thread; the checks on a decision, and the listings. A
//! request of kind `budget` carries the raise it asks for (`approvals.raise_*`); approved, the
//! raise counts for its scope (`store/ops/limits.rs` sums them).

use ninetrix_proto::api::{
    Approval, ApprovalKind, ApprovalStatus, BudgetRaise, BudgetScope, DecisionRequest, ErrorCode,
    NewApproval, NewEvent, Verdict,
};
use ninetrix_proto::events::{ApprovalDecided, TraceEvent};
use ninetrix_proto::{ApprovalId, ThreadId};

use crate::store::checks::{MAX_KEY_LEN, check_key};
use crate::store::codec::{corrupt, encode, labels, parse_id, time, to_i64, to_u64};
use crate::store::conn::{AssertSqlSafe, Conn, for_write, query, query_as, rsq};
use crate::store::{ApprovalFilter, StoreError, StoreResult};

use super::events::insert_events;
use super::threads::{SELECT_THREAD, ThreadRow, not_purged};

/// A row of `approvals` joined with its thread's labels.
#[derive(sqlx::FromRow)]
pub(crate) struct ApprovalRow {
    pub(crate) id: String,
    pub(crate) thread_id: String,
    pub(crate) pool: Option<String>,
    pub(crate) agent: Option<String>,
    pub(crate) replica: Option<i64>,
    pub(crate) session: Option<String>,
    pub(crate) key: String,
    pub(crate) call_id: String,
    pub(crate) epoch: i64,
    pub(crate) turn_seq: i64,
    pub(crate) kind: String,
    pub(crate) tool: String,
    pub(crate) args: String,
    pub(crate) args_hash: String,
    pub(crate) status: String,
    pub(crate) requested_at: i64,
    pub(crate) expires_at: i64,
    pub(crate) decided_at: Option<i64>,
    pub(crate) decided_by: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) answer: Option<String>,
    pub(crate) raise_scope: Option<String>,
    pub(crate) raise_day: Option<String>,
    pub(crate) raise_nanos: Option<i64>,
}

impl rsq::FromRow for ApprovalRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(ApprovalRow {
            id: row.get("id")?,
            thread_id: row.get("thread_id")?,
            pool: row.get("pool")?,
            agent: row.get("agent")?,
            replica: row.get("replica")?,
            session: row.get("session")?,
            key: row.get("key")?,
            call_id: row.get("call_id")?,
            epoch: row.get("epoch")?,
            turn_seq: row.get("turn_seq")?,
            kind: row.get("kind")?,
            tool: row.get("tool")?,
            args: row.get("args")?,
            args_hash: row.get("args_hash")?,
            status: row.get("status")?,
            requested_at: row.get("requested_at")?,
            expires_at: row.get("expires_at")?,
            decided_at: row.get("decided_at")?,
            decided_by: row.get("decided_by")?,
            reason: row.get("reason")?,
            answer: row.get("answer")?,
            raise_scope: row.get("raise_scope")?,
            raise_day: row.get("raise_day")?,
            raise_nanos: row.get("raise_nanos")?,
        })
    }
}

/// The columns every approval read selects (`a`: approvals, `t`: threads).
pub(crate) const APPROVAL_COLUMNS: &str = "a.id, a.thread_id, t.pool, t.agent, t.replica, t.session, a.key, a.call_id, a.epoch, a.turn_seq, a.kind, a.tool, a.args, a.args_hash, a.status, a.requested_at, a.expires_at, a.decided_at, a.decided_by, a.reason, a.answer, a.raise_scope, a.raise_day, a.raise_nanos";

/// Where a request stands at `now`: what was recorded, except that a pending one past its expiry
/// is expired (from its expiry on).
pub(crate) fn effective_status(
    stored: ApprovalStatus,
    expires_at: i64,
    now: i64,
) -> ApprovalStatus {
    if stored == ApprovalStatus::Pending && now >= expires_at {
        ApprovalStatus::Expired
    } else {
        stored
    }
}

impl ApprovalRow {
    /// The record as it stands at `now` (see [`effective_status`]).
    pub(crate) fn approval(self, now: i64) -> StoreResult<Approval> {
        let stored = ApprovalStatus::parse(&self.status)
            .ok_or_else(|| corrupt("approval status", &self.status))?;
        let status = effective_status(stored, self.expires_at, now);
        let decided_at = match (stored, status) {
            (ApprovalStatus::Pending, ApprovalStatus::Expired) => Some(self.expires_at),
            _ => self.decided_at,
        };
        Ok(Approval {
            id: self
                .id
                .parse()
                .map_err(|_| corrupt("approval id", &self.id))?,
            thread_id: parse_id(&self.thread_id)?,
            labels: labels(self.pool, self.agent, self.replica, self.session),
            epoch: to_u64(self.epoch),
            turn_seq: to_u64(self.turn_seq),
            key: self.key,
            call_id: self.call_id,
            kind: ApprovalKind::parse(&self.kind)
                .ok_or_else(|| corrupt("approval kind", &self.kind))?,
            tool: self.tool,
            args: serde_json::from_str(&self.args)
                .map_err(|e| corrupt("approval args", &e.to_string()))?,
            args_hash: self.args_hash,
            status,
            requested_at: time(self.requested_at),
            expires_at: time(self.expires_at),
            decided_at: decided_at.map(time),
            decided_by: self.decided_by,
            reason: self.reason,
            answer: self.answer,
            raise: raise_of(self.raise_scope, self.raise_day, self.raise_nanos)?,
        })
    }
}

/// A budget approval's raise from its columns (`None` for every other kind).
fn raise_of(
    scope: Option<String>,
    day: Option<String>,
    nanos: Option<i64>,
) -> StoreResult<Option<BudgetRaise>> {
    let (Some(scope), Some(nanos)) = (scope, nanos) else {
        return Ok(None);
    };
    let scope = match (scope.as_str(), day) {
        (SESSION, _) => BudgetScope::Session,
        (AGENT_DAY, Some(day)) => BudgetScope::AgentDay { day },
        (POOL_DAY, Some(day)) => BudgetScope::PoolDay { day },
        _ => return Err(corrupt("approval raise scope", &scope)),
    };
    Ok(Some(BudgetRaise {
        scope,
        amount_usd: crate::limit_rules::usd(nanos),
    }))
}

/// How a raise's scope is stored (`approvals.raise_scope`).
pub(crate) const SESSION: &str = "session";
/// See [`SESSION`].
pub(crate) const AGENT_DAY: &str = "agent_day";
/// See [`SESSION`].
pub(crate) const POOL_DAY: &str = "pool_day";

/// A raise's stored scope and day.
fn raise_columns(raise: &BudgetRaise) -> (&'static str, Option<&str>) {
    match &raise.scope {
        BudgetScope::Session => (SESSION, None),
        BudgetScope::AgentDay { day } => (AGENT_DAY, Some(day)),
        BudgetScope::PoolDay { day } => (POOL_DAY, Some(day)),
    }
}

/// What a decision did.
#[derive(Debug)]
pub enum Decided {
    /// Recorded now.
    Recorded(Approval),
    /// The same decision was already recorded: nothing changed.
    Repeated(Approval),
    /// A different decision was recorded first (409 `already_decided`).
    Conflict(Approval),
    /// The request expired before this decision (409 `approval_expired`); the expiry is now
    /// recorded.
    Expired(Approval),
}

/// Longest rejection or approval reason, in characters.
pub(crate) const MAX_REASON_LEN: usize = 4000;

/// Longest answer to a question, in characters.
pub(crate) const MAX_ANSWER_LEN: usize = 100_000;

/// Longest `by`, in characters.
pub(crate) const MAX_BY_LEN: usize = 200;

/// Longest time a request may stand: a year.
pub(crate) const MAX_APPROVAL_SECS: u64 = 365 * 24 * 3600;

fn invalid_decision(message: String) -> StoreError {
    StoreError::Invalid {
        code: ErrorCode::InvalidDecision,
        message,
    }
}

/// Checks a decision against the kind of request it decides, before anything is read or
/// written: approvals are approved or rejected, questions answered or rejected; a rejection
/// needs a reason, an answer its text; lengths are bounded.
pub(crate) fn check_decision(kind: ApprovalKind, d: &DecisionRequest) -> StoreResult<()> {
    match (kind, d.decision) {
        (ApprovalKind::Approval, Verdict::Answer) => {
            return Err(invalid_decision("this request is an approval of a tool call: approve or reject it (answer is for ask_human questions)".into()));
        }
        (ApprovalKind::Budget, Verdict::Answer) => {
            return Err(invalid_decision("this request asks to raise a budget: approve or reject it (answer is for ask_human questions)".into()));
        }
        (ApprovalKind::Question, Verdict::Approve) => {
            return Err(invalid_decision(
                "this request is a question: answer it (or reject it with a reason)".into(),
            ));
        }
        _ => {}
    }
    let reason = d.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
    if d.decision == Verdict::Reject && reason.is_none() {
        return Err(invalid_decision(
            "a rejection needs a reason: the model is told it".into(),
        ));
    }
    if d.decision == Verdict::Answer && d.answer.as_deref().is_none_or(|a| a.trim().is_empty()) {
        return Err(invalid_decision("an answer needs its text".into()));
    }
    if d.decision != Verdict::Answer && d.answer.is_some() {
        return Err(invalid_decision("only an answer carries `answer`".into()));
    }
    if d.reason
        .as_deref()
        .is_some_and(|r| r.chars().count() > MAX_REASON_LEN)
    {
        return Err(invalid_decision(format!(
            "a reason has at most {MAX_REASON_LEN} characters"
        )));
    }
    if d.answer
        .as_deref()
        .is_some_and(|a| a.chars().count() > MAX_ANSWER_LEN)
    {
        return Err(invalid_decision(format!(
            "an answer has at most {MAX_ANSWER_LEN} characters"
        )));
    }
    if d.by
        .as_deref()
        .is_some_and(|b| b.trim().is_empty() || b.chars().count() > MAX_BY_LEN)
    {
        return Err(invalid_decision(format!(
            "`by` has 1 to {MAX_BY_LEN} characters"
        )));
    }
    Ok(())
}

/// Whether a decision repeats the one recorded (`recorded` is settled): the same verdict, for an
/// answer the same text, and for a rejection the same reason (another reason is another
/// decision: `409 already_decided`, never silently dropped).
pub(crate) fn same_decision(recorded: &Approval, d: &DecisionRequest) -> bool {
    let reason = d.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
    recorded.status == d.decision.status()
        && (d.decision != Verdict::Answer || recorded.answer == d.answer)
        && (d.decision != Verdict::Reject || recorded.reason.as_deref() == reason)
}

/// The `approval_decided` event of a recorded decision, stamped `now`.
pub(crate) fn decided_event(a: &Approval, now: i64) -> NewEvent {
    let answer = a.answer.as_deref().map(|t| {
        let mut p: String = t.chars().take(200).collect();
        if t.chars().count() > 200 {
            p.push('…');
        }
        p
    });
    TraceEvent::ApprovalDecided(ApprovalDecided {
        id: a.id,
        kind: a.kind,
        tool: a.tool.clone(),
        status: a.status,
        by: a.decided_by.clone().unwrap_or_default(),
        reason: a.reason.clone(),
        answer,
    })
    .to_new_event(time(now))
}

/// Checks a commit's requests to people before anything is written: keys and lengths, and a
/// budget request's raise (required for kind `budget`, refused for the others).
pub(crate) fn check_approvals(approvals: &[NewApproval]) -> StoreResult<()> {
    for (i, a) in approvals.iter().enumerate() {
        check_key("approvals[].key", &a.key)?;
        let bad = |message: String| StoreError::Invalid {
            code: ErrorCode::InvalidBody,
            message,
        };
        if a.call_id.is_empty() || a.call_id.chars().count() > MAX_KEY_LEN {
            return Err(bad(format!(
                "an approval's call_id must have 1 to {MAX_KEY_LEN} characters"
            )));
        }
        if a.args_hash.is_empty() || a.args_hash.chars().count() > MAX_KEY_LEN {
            return Err(bad(format!(
                "an approval's args_hash must have 1 to {MAX_KEY_LEN} characters"
            )));
        }
        if a.timeout_secs == 0 || a.timeout_secs > MAX_APPROVAL_SECS {
            return Err(StoreError::Invalid {
                code: ErrorCode::OutOfRange,
                message: format!("an approval's timeout_secs must be 1 to {MAX_APPROVAL_SECS}"),
            });
        }
        match (&a.kind, &a.raise) {
            (ApprovalKind::Budget, None) => {
                return Err(bad(format!(
                    "`approvals[{i}].raise` is required for a request of kind budget: the raise it asks for ({{scope, day?, amount_usd}})"
                )));
            }
            (ApprovalKind::Budget, Some(raise)) => {
                crate::limit_rules::check_raise(&format!("approvals[{i}].raise"), raise)
                    .map_err(bad)?;
            }
            (kind, Some(_)) => {
                return Err(bad(format!(
                    "`approvals[{i}].raise` is only for a request of kind budget, not {}",
                    kind.as_str()
                )));
            }
            (_, None) => {}
        }
    }
    Ok(())
}

/// Stores a request to a person unless its call (ledger key) already has one; an ID
/// another call's request has is refused (`key_reused`). A budget request's raise is stored with
/// the pool and agent of the thread that asks (`labels`), which its day scopes sum by.
pub(super) async fn insert_approval<C: Conn>(
    c: &mut C,
    id: ThreadId,
    epoch: u64,
    labels: (&str, &str),
    a: &NewApproval,
    now: i64,
) -> StoreResult<()> {
    let timeout_ms = to_i64(a.timeout_secs.saturating_mul(1000), "timeout_secs")?;
    let raise = a.raise.as_ref().map(raise_columns);
    let inserted = query(
        "INSERT INTO approvals (id, thread_id, key, call_id, epoch, turn_seq, kind, tool, args, args_hash, status, requested_at, expires_at, \
         raise_scope, raise_day, raise_nanos, raise_pool, raise_agent) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', $11, $12, $13, $14, $15, $16, $17) ON CONFLICT DO NOTHING",
    )
    .bind(a.id.to_string())
    .bind(id.to_string())
    .bind(&a.key)
    .bind(&a.call_id)
    .bind(to_i64(epoch, "epoch")?)
    .bind(to_i64(a.turn_seq, "turn_seq")?)
    .bind(a.kind.as_str())
    .bind(&a.tool)
    .bind(encode(&a.args)?)
    .bind(&a.args_hash)
    .bind(now)
    .bind(now.saturating_add(timeout_ms))
    .bind(raise.map(|(scope, _)| scope))
    .bind(raise.and_then(|(_, day)| day))
    .bind(
        a.raise
            .as_ref()
            .map(|r| crate::limit_rules::nanos(r.amount_usd)),
    )
    .bind(raise.map(|_| labels.0))
    .bind(raise.map(|_| labels.1))
    .execute(&mut *c)
    .await?
    .rows_affected();
    if inserted == 0 {
        // Kept: the request this call (thread and key) already has. Refused: an ID that
        // is another call's request — the commit would be answered 201 and the request
        // never stored.
        let owner: Option<(String, String)> =
            query_as("SELECT thread_id, key FROM approvals WHERE id = $1")
                .bind(a.id.to_string())
                .fetch_optional(&mut *c)
                .await?;
        if owner.is_some_and(|(t, k)| t != id.to_string() || k != a.key) {
            return Err(StoreError::KeyReused(format!(
                "approval ID {} is another request's; nothing was written: give each request its own ID",
                a.id
            )));
        }
    }
    Ok(())
}

async fn approval_row<C: Conn>(
    c: &mut C,
    approval: ApprovalId,
) -> StoreResult<Option<ApprovalRow>> {
    let sql = format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals a JOIN threads t ON t.thread_id = a.thread_id WHERE a.id = $1"
    );
    query_as(AssertSqlSafe(sql))
        .bind(approval.to_string())
        .fetch_optional(&mut *c)
        .await
}

/// Records a person's decision, once: the first decision stands (the same one again
/// changes nothing), and a request past its expiry is recorded expired instead. A
/// recorded decision adds an `approval_decided` event to the thread (at its current
/// epoch), so `trace` shows it even while no runner holds the thread. `decided_by` is the
/// name recorded; `pool` (an approver's) must be the request's pool.
pub(crate) async fn decide<C: Conn>(
    c: &mut C,
    approval: ApprovalId,
    d: &DecisionRequest,
    by: &str,
    pool: Option<&str>,
    now: i64,
) -> StoreResult<(ThreadId, Decided)> {
    let row = approval_row(c, approval)
        .await?
        .ok_or(StoreError::NotFound("approval"))?;
    if pool.is_some() && row.pool.as_deref() != pool {
        // An approver of another pool learns nothing about this one.
        return Err(StoreError::NotFound("approval"));
    }
    let thread_id = parse_id(&row.thread_id)?;
    // Serialise with the thread's runner writes (Postgres: the row lock).
    let thread: ThreadRow = query_as(for_write::<C>(SELECT_THREAD))
        .bind(thread_id.to_string())
        .fetch_optional(&mut *c)
        .await?
        .ok_or(StoreError::NotFound("thread"))?;
    let row = approval_row(c, approval)
        .await?
        .ok_or(StoreError::NotFound("approval"))?;
    let current = row.approval(now)?;
    check_decision(current.kind, d)?;
    match current.status {
        ApprovalStatus::Pending => {}
        ApprovalStatus::Expired => {
            query("UPDATE approvals SET status = 'expired', decided_at = expires_at WHERE id = $1 AND status = 'pending'")
                .bind(approval.to_string())
                .execute(&mut *c)
                .await?;
            return Ok((thread_id, Decided::Expired(current)));
        }
        _ if same_decision(&current, d) => return Ok((thread_id, Decided::Repeated(current))),
        _ => return Ok((thread_id, Decided::Conflict(current))),
    }
    let reason = d.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
    query("UPDATE approvals SET status = $2, decided_at = $3, decided_by = $4, reason = $5, answer = $6 WHERE id = $1")
        .bind(approval.to_string())
        .bind(d.decision.status().as_str())
        .bind(now)
        .bind(by)
        .bind(reason)
        .bind(d.answer.as_deref())
        .execute(&mut *c)
        .await?;
    let decided = approval_row(c, approval)
        .await?
        .ok_or(StoreError::NotFound("approval"))?
        .approval(now)?;
    let event = decided_event(&decided, now);
    insert_events(
        c,
        thread_id,
        thread.event_seq,
        to_u64(thread.epoch),
        std::slice::from_ref(&event),
        now,
    )
    .await?;
    Ok((thread_id, Decided::Recorded(decided)))
}

/// Settles `cancelled` the requests to people of turn `turn_seq` of thread `id` that are still
/// pending (undecided, not past their expiry): the turn that asked was stopped and will never
/// use their answers. Each gets an `approval_decided` event of the thread (at its current
/// epoch), as a decision does, recorded as decided by `by` with `reason`. The caller holds the
/// thread's row. Returns how many it settled.
pub(super) async fn cancel_turn_approvals<C: Conn>(
    c: &mut C,
    id: ThreadId,
    turn_seq: u64,
    by: &str,
    reason: Option<&str>,
    now: i64,
) -> StoreResult<u64> {
    let sql = format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals a JOIN threads t ON t.thread_id = a.thread_id \
         WHERE a.thread_id = $1 AND a.turn_seq = $2 AND a.status = 'pending' AND a.expires_at > $3 ORDER BY a.requested_at, a.id"
    );
    let rows: Vec<ApprovalRow> = query_as(AssertSqlSafe(sql))
        .bind(id.to_string())
        .bind(to_i64(turn_seq, "turn_seq")?)
        .bind(now)
        .fetch_all(&mut *c)
        .await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let mut events = Vec::with_capacity(rows.len());
    for row in rows {
        let mut cancelled = row.approval(now)?;
        query("UPDATE approvals SET status = $2, decided_at = $3, decided_by = $4, reason = $5 WHERE id = $1 AND status = 'pending'")
            .bind(cancelled.id.to_string())
            .bind(ApprovalStatus::Cancelled.as_str())
            .bind(now)
            .bind(by)
            .bind(reason)
            .execute(&mut *c)
            .await?;
        cancelled.status = ApprovalStatus::Cancelled;
        cancelled.decided_at = Some(time(now));
        cancelled.decided_by = Some(by.to_string());
        cancelled.reason = reason.map(str::to_string);
        events.push(decided_event(&cancelled, now));
    }
    let (event_seq, epoch): (i64, i64) =
        query_as("SELECT event_seq, epoch FROM threads WHERE thread_id = $1")
            .bind(id.to_string())
            .fetch_one(&mut *c)
            .await?;
    insert_events(c, id, event_seq, to_u64(epoch), &events, now).await?;
    Ok(events.len() as u64)
}

/// The requests to people of one turn of a thread, oldest first, as they stand at `now`.
pub(crate) async fn turn_approvals<C: Conn>(
    c: &mut C,
    id: ThreadId,
    turn_seq: u64,
    now: i64,
) -> StoreResult<Vec<Approval>> {
    not_purged(c, id).await?;
    let sql = format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals a JOIN threads t ON t.thread_id = a.thread_id WHERE a.thread_id = $1 AND a.turn_seq = $2 ORDER BY a.requested_at, a.id"
    );
    let rows: Vec<ApprovalRow> = query_as(AssertSqlSafe(sql))
        .bind(id.to_string())
        .bind(to_i64(turn_seq, "turn_seq")?)
        .fetch_all(&mut *c)
        .await?;
    rows.into_iter().map(|r| r.approval(now)).collect()
}

/// One request to a person, as it stands at `now`.
pub(crate) async fn approval<C: Conn>(
    c: &mut C,
    id: ApprovalId,
    now: i64,
) -> StoreResult<Option<Approval>> {
    let sql = format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals a JOIN threads t ON t.thread_id = a.thread_id WHERE a.id = $1"
    );
    let row: Option<ApprovalRow> = query_as(AssertSqlSafe(sql))
        .bind(id.to_string())
        .fetch_optional(&mut *c)
        .await?;
    row.map(|r| r.approval(now)).transpose()
}

/// Requests to people matching the filter, oldest first, as they stand at `now`. A
/// `pending` filter leaves out those past their expiry; `expired` takes them in.
pub(crate) async fn list_approvals<C: Conn>(
    c: &mut C,
    f: &ApprovalFilter,
    now: i64,
) -> StoreResult<Vec<Approval>> {
    let sql = format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals a JOIN threads t ON t.thread_id = a.thread_id \
         WHERE ($1 IS NULL OR t.pool = $1) AND ($2 IS NULL OR t.agent = $2) AND ($3 IS NULL OR a.thread_id = $3) \
         AND ($4 IS NULL OR ($4 = 'pending' AND a.status = 'pending' AND a.expires_at > $5) \
              OR ($4 = 'expired' AND (a.status = 'expired' OR (a.status = 'pending' AND a.expires_at <= $5))) \
              OR ($4 <> 'pending' AND $4 <> 'expired' AND a.status = $4)) \
         ORDER BY a.requested_at, a.id LIMIT $6 OFFSET $7"
    );
    let rows: Vec<ApprovalRow> = query_as(AssertSqlSafe(sql))
        .bind(f.pool.as_deref())
        .bind(f.agent.as_deref())
        .bind(f.thread.map(|t| t.to_string()))
        .bind(f.status.map(|s| s.as_str()))
        .bind(now)
        .bind(i64::from(f.limit))
        .bind(i64::from(f.offset))
        .fetch_all(&mut *c)
        .await?;
    rows.into_iter().map(|r| r.approval(now)).collect()
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use ninetrix_proto::api::ThreadLabels;

    use super::*;

    fn decision(decision: Verdict, reason: Option<&str>, answer: Option<&str>) -> DecisionRequest {
        DecisionRequest {
            decision,
            reason: reason.map(str::to_string),
            answer: answer.map(str::to_string),
            by: None,
        }
    }

    #[test]
    fn a_pending_request_expires_at_its_expiry_and_a_decided_one_never_does() {
        use ApprovalStatus::*;
        assert_eq!(effective_status(Pending, 100, 99), Pending);
        assert_eq!(effective_status(Pending, 100, 100), Expired);
        for decided in [Approved, Rejected, Answered, Expired] {
            assert_eq!(effective_status(decided, 100, 1_000), decided);
        }
    }

    #[test]
    fn decisions_must_fit_the_request() {
        use ApprovalKind::*;
        let ok = [
            (Approval, decision(Verdict::Approve, None, None)),
            (Approval, decision(Verdict::Reject, Some("no"), None)),
            (Question, decision(Verdict::Answer, None, Some("blue"))),
            (Question, decision(Verdict::Reject, Some("later"), None)),
        ];
        for (kind, d) in ok {
            assert!(check_decision(kind, &d).is_ok(), "{kind:?} {d:?}");
        }
        let refused = [
            (Approval, decision(Verdict::Answer, None, Some("x"))),
            (Question, decision(Verdict::Approve, None, None)),
            (Approval, decision(Verdict::Reject, None, None)),
            (Approval, decision(Verdict::Reject, Some("  "), None)),
            (Question, decision(Verdict::Answer, None, Some(" "))),
            (Approval, decision(Verdict::Approve, None, Some("x"))),
            (
                Approval,
                decision(Verdict::Reject, Some(&"r".repeat(4001)), None),
            ),
        ];
        for (kind, d) in refused {
            let Err(StoreError::Invalid { code, .. }) = check_decision(kind, &d) else {
                panic!("{kind:?} {d:?} accepted");
            };
            assert_eq!(code, ErrorCode::InvalidDecision);
        }
    }

    #[test]
    fn the_same_decision_repeats_and_another_answer_does_not() {
        let now = Utc::now();
        let recorded = Approval {
            id: ninetrix_proto::ApprovalId::new_v7(),
            thread_id: ThreadId::new_v7(),
            labels: ThreadLabels::default(),
            epoch: 1,
            turn_seq: 1,
            key: "k".into(),
            call_id: "c".into(),
            kind: ApprovalKind::Question,
            tool: "ask_human".into(),
            args: serde_json::json!({}),
            args_hash: "h".into(),
            status: ApprovalStatus::Answered,
            requested_at: now,
            expires_at: now,
            decided_at: Some(now),
            decided_by: Some("alice".into()),
            reason: None,
            answer: Some("blue".into()),
            raise: None,
        };
        assert!(same_decision(
            &recorded,
            &decision(Verdict::Answer, None, Some("blue"))
        ));
        assert!(!same_decision(
            &recorded,
            &decision(Verdict::Answer, None, Some("red"))
        ));
        assert!(!same_decision(
            &recorded,
            &decision(Verdict::Reject, Some("no"), None)
        ));
    }
}
