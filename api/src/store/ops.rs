//! The store's queries, written once and expanded for each backend (`sql_ops!`), plus the row
//! types and conversions they share. Placeholders are `$n` (SQLite accepts them too), integers are
//! BIGINT, JSON is text and times are Unix milliseconds, so the same text runs on both.

use chrono::{DateTime, TimeZone, Utc};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    Approval, ApprovalKind, ApprovalStatus, CheckpointRequest, CheckpointState, CommitRequest,
    DecisionRequest, ErrorCode, Event, Handoff, HandoffRequest, HandoffStatus, InboxMessage,
    NewApproval, NewEvent, ThreadLabels, ThreadStatus, ThreadSummary, ToolCallRecord,
    ToolCallStatus, Verdict, VersionSummary,
};
use ninetrix_proto::effects::Effect;
use ninetrix_proto::events::{ApprovalDecided, TraceEvent};
use ninetrix_proto::message::Message;

pub(crate) use super::checks::*;
use super::{StoreError, StoreResult};

/// The columns every read of `threads` selects, as a literal (for `concat!`).
macro_rules! thread_columns {
    () => {
        "thread_id, pool, agent, replica, session, epoch, boot_count, version, history_len, status, inbox_seq, inbox_cursor, event_seq, created_at, updated_at"
    };
}

/// The status of a purged thread's row, as a literal (for `concat!`): the tombstone that keeps
/// its ID from being used again.
macro_rules! purged {
    () => {
        "purged"
    };
}

/// The status of a purged thread's row (see [`purged!`]).
pub(crate) const PURGED: &str = purged!();

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
        })
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct VersionRow {
    pub(crate) version: i64,
    pub(crate) parent_version: i64,
    pub(crate) epoch: i64,
    pub(crate) truncate_to: Option<i64>,
    pub(crate) appended: i64,
    pub(crate) history_len: i64,
    pub(crate) state: String,
    pub(crate) created_at: i64,
}

impl VersionRow {
    pub(crate) fn summary(self) -> StoreResult<VersionSummary> {
        Ok(VersionSummary {
            version: to_u64(self.version),
            parent_version: to_u64(self.parent_version),
            epoch: to_u64(self.epoch),
            truncate_to: self.truncate_to.map(to_u64),
            appended: to_u64(self.appended),
            history_len: to_u64(self.history_len),
            state: decode_state(&self.state)?,
            created_at: time(self.created_at),
        })
    }
}

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

/// What an enqueue's update returns: the new inbox seq, the labels that say whether the thread
/// is a session's, and its stored owner.
#[derive(sqlx::FromRow)]
pub(crate) struct Enqueued {
    pub(crate) inbox_seq: i64,
    pub(crate) pool: Option<String>,
    pub(crate) agent: Option<String>,
    pub(crate) session: Option<String>,
    pub(crate) session_replicas: i64,
    pub(crate) session_replica: i64,
}

/// The agent a session belongs to, and the replica that owns it (`None` when the stored owner
/// was computed for another replica count than the agent's now): whom new work wakes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionOf {
    /// The pool.
    pub pool: String,
    /// The agent.
    pub agent: String,
    /// The owning replica, when known.
    pub replica: Option<u32>,
}

impl Enqueued {
    /// Whom to wake when the thread is a session's, given the agent's replica count now.
    pub(crate) fn session_of(self, replicas: u32) -> Option<SessionOf> {
        let owner = (self.session_replicas == i64::from(replicas))
            .then(|| u32::try_from(self.session_replica).ok())
            .flatten();
        match (self.pool, self.agent, self.session) {
            (Some(pool), Some(agent), Some(_)) => Some(SessionOf {
                pool,
                agent,
                replica: owner,
            }),
            _ => None,
        }
    }
}

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
}

/// The columns every approval read selects (`a`: approvals, `t`: threads).
pub(crate) const APPROVAL_COLUMNS: &str = "a.id, a.thread_id, t.pool, t.agent, t.replica, t.session, a.key, a.call_id, a.epoch, a.turn_seq, a.kind, a.tool, a.args, a.args_hash, a.status, a.requested_at, a.expires_at, a.decided_at, a.decided_by, a.reason, a.answer";

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
        })
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

/// Checks a commit's requests to people before anything is written.
pub(crate) fn check_approvals(approvals: &[NewApproval]) -> StoreResult<()> {
    for a in approvals {
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
    }
    Ok(())
}

#[derive(sqlx::FromRow)]
pub(crate) struct InboxRow {
    pub(crate) seq: i64,
    pub(crate) content: String,
    pub(crate) dedupe_key: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) origin: Option<String>,
}

impl InboxRow {
    pub(crate) fn message(self) -> StoreResult<InboxMessage> {
        Ok(InboxMessage {
            seq: to_u64(self.seq),
            content: self.content,
            dedupe_key: self.dedupe_key,
            created_at: time(self.created_at),
            handoff: self
                .origin
                .map(|o| {
                    serde_json::from_str(&o).map_err(|e| corrupt("inbox origin", &e.to_string()))
                })
                .transpose()?,
        })
    }
}

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

#[derive(sqlx::FromRow)]
pub(crate) struct EventRow {
    pub(crate) seq: i64,
    pub(crate) kind: String,
    pub(crate) data: String,
    pub(crate) epoch: i64,
    pub(crate) created_at: i64,
}

impl EventRow {
    pub(crate) fn event(self) -> StoreResult<Event> {
        Ok(Event {
            seq: to_u64(self.seq),
            kind: self.kind,
            data: serde_json::from_str(&self.data)
                .map_err(|e| corrupt("event data", &e.to_string()))?,
            epoch: to_u64(self.epoch),
            created_at: time(self.created_at),
        })
    }
}

/// A thread's labels from its columns (a replica past `u32` reads as none).
fn labels(
    pool: Option<String>,
    agent: Option<String>,
    replica: Option<i64>,
    session: Option<String>,
) -> ThreadLabels {
    ThreadLabels {
        pool,
        agent,
        replica: replica.and_then(|r| u32::try_from(r).ok()),
        session,
    }
}

pub(crate) fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A client-supplied number as a database integer.
pub(crate) fn to_i64(v: u64, what: &str) -> StoreResult<i64> {
    i64::try_from(v).map_err(|_| StoreError::Invalid {
        code: ErrorCode::OutOfRange,
        message: format!("{what} {v} is too large"),
    })
}

pub(crate) fn time(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

pub(crate) fn corrupt(what: &str, detail: &str) -> StoreError {
    StoreError::Corrupt(format!("{what}: {detail}").into())
}

pub(crate) fn parse_id(text: &str) -> StoreResult<ThreadId> {
    text.parse().map_err(|_| corrupt("thread id", text))
}

pub(crate) fn decode_state(text: &str) -> StoreResult<CheckpointState> {
    serde_json::from_str(text).map_err(|e| corrupt("checkpoint state", &e.to_string()))
}

pub(crate) fn encode<T: serde::Serialize>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Invalid {
        code: ErrorCode::Unencodable,
        message: e.to_string(),
    })
}

pub(crate) fn decode_messages(bodies: Vec<String>) -> StoreResult<Vec<Message>> {
    bodies
        .iter()
        .map(|b| serde_json::from_str(b).map_err(|e| corrupt("message", &e.to_string())))
        .collect()
}

/// Builds the JSON of a `ThreadState` from JSON the store wrote itself (the state and each
/// message were serialised by `encode`), so no value needs decoding.
/// `history` is the messages' JSON already joined with commas.
pub(crate) fn splice_state(
    id: ThreadId,
    version: u64,
    epoch: u64,
    state: &str,
    history: &str,
) -> String {
    format!(
        "{{\"thread_id\":\"{id}\",\"version\":{version},\"epoch\":{epoch},\"state\":{state},\"history\":[{history}]}}"
    )
}

/// Runs one of the SQLite writer's operations (built from `rsq`, so it never waits) on this thread.
pub(crate) fn rsq_run<T>(op: impl std::future::Future<Output = StoreResult<T>>) -> StoreResult<T> {
    super::rsq::run_now(op).unwrap_or_else(|| {
        Err(StoreError::Database(
            "a SQLite write waited on the writer thread".into(),
        ))
    })
}

/// Every key, argument list, event and message of a commit, checked before anything is read
/// or written.
pub(crate) fn check_commit(req: &CommitRequest) -> StoreResult<()> {
    check_count("append", req.append.len())?;
    check_count("intents", req.intents.len())?;
    check_count("outcomes", req.outcomes.len())?;
    check_count("approvals", req.approvals.len())?;
    if let Some(reply) = &req.handoff_reply
        && !(reply.cost_usd.is_finite() && reply.cost_usd >= 0.0)
    {
        return Err(StoreError::Invalid {
            code: ErrorCode::OutOfRange,
            message: format!(
                "`handoff_reply.cost_usd` must be a non-negative number, not {}",
                reply.cost_usd
            ),
        });
    }
    for (i, intent) in req.intents.iter().enumerate() {
        check_key(&format!("intents[{i}].key"), &intent.key)?;
        check_args(&format!("intents[{i}].args"), &intent.args)?;
    }
    for (i, outcome) in req.outcomes.iter().enumerate() {
        check_key(&format!("outcomes[{i}].key"), &outcome.key)?;
    }
    check_events("events", &req.events)?;
    check_messages(&req.append)
}

/// The version part of a checkpoint or of a commit, borrowed from either request.
pub(crate) struct VersionWrite<'a> {
    pub(crate) epoch: u64,
    pub(crate) parent_version: u64,
    pub(crate) truncate_to: Option<u64>,
    pub(crate) append: &'a [Message],
    pub(crate) state: &'a CheckpointState,
}

impl<'a> From<&'a CheckpointRequest> for VersionWrite<'a> {
    fn from(r: &'a CheckpointRequest) -> Self {
        VersionWrite {
            epoch: r.epoch,
            parent_version: r.parent_version,
            truncate_to: r.truncate_to,
            append: &r.append,
            state: &r.state,
        }
    }
}

impl<'a> From<&'a CommitRequest> for VersionWrite<'a> {
    fn from(r: &'a CommitRequest) -> Self {
        VersionWrite {
            epoch: r.epoch,
            parent_version: r.parent_version,
            truncate_to: r.truncate_to,
            append: &r.append,
            state: &r.state,
        }
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

/// The queries, written once. `writes` expands the write operations for a connection type `$conn`
/// whose query functions live in the module `q` at the expansion site (`sqlx` for Postgres, the
/// rusqlite adapter `rsq` for SQLite's writer thread); `$lock` is appended to the thread-row read
/// that starts every write (" FOR UPDATE" on Postgres; SQLite's writer already holds the
/// database's write lock). `reads` expands the reads for an sqlx connection.
macro_rules! sql_ops {
    (writes $conn:ty, $lock:literal) => {
        use ninetrix_proto::{ApprovalId, ThreadId};
        use ninetrix_proto::api::{
            ApprovalStatus, CheckpointCreated, ThreadSummary, CheckpointRequest, ClaimResponse, CommitRequest,
            CommitResponse, DecisionRequest, EnqueueRequest, EnqueueResponse, ErrorCode,
            EventsRequest, Handoff, HandoffOrigin, HandoffReply, HandoffRequest, HandoffStatus,
            NewApproval, ThreadLabels, ToolCallCompletion, ToolCallIntent, ToolCallRecord,
        };

        use $crate::store::ops::*;
        use $crate::store::{StoreError, StoreResult};

        type Conn = $conn;

        const SELECT_THREAD_FOR_WRITE: &str = concat!(
            "SELECT ", thread_columns!(), " FROM threads WHERE thread_id = $1",
            $lock
        );

        /// Creates the thread if new, with the labels given (`labels.session` is never stored
        /// here: only `open_session` sets it), and returns the thread's labels. An existing
        /// thread keeps its labels: the ones given must restate them (409 `labels_fixed`) — but
        /// for a mint on a thread that has none yet (`labels::settle`).
        pub(crate) async fn ensure_thread(c: &mut Conn, id: ThreadId, labels: &ThreadLabels, stating: $crate::labels::Stating, now: i64) -> StoreResult<ThreadLabels> {
            // A purged thread keeps its row as a tombstone, so it is never created again.
            q::query(
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
            let row: ThreadRow = q::query_as(SELECT_THREAD_FOR_WRITE).bind(id.to_string()).fetch_one(&mut *c).await?;
            if row.status == PURGED {
                return Err(StoreError::Purged(id));
            }
            let stored = super::labels(row.pool, row.agent, row.replica, row.session);
            let settled = $crate::labels::settle(&stored, labels, stating).map_err(|changed| changed.refused(id))?;
            if settled != stored {
                q::query("UPDATE threads SET pool = $2, agent = $3, replica = $4 WHERE thread_id = $1")
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
        /// mint may; a runner token's claim only restates them.
        pub(crate) async fn claim(c: &mut Conn, id: ThreadId, labels: &ThreadLabels, stating: $crate::labels::Stating, now: i64) -> StoreResult<ClaimResponse> {
            let stored = ensure_thread(c, id, labels, stating, now).await?;
            if let Some(key) = &labels.session
                && stored.session.as_deref() != Some(key.as_str())
            {
                return Err(StoreError::SessionMismatch { thread: id, key: key.clone() });
            }
            let (epoch, boot_count): (i64, i64) = q::query_as(
                "UPDATE threads SET epoch = epoch + 1, boot_count = boot_count + 1, updated_at = $2 WHERE thread_id = $1 RETURNING epoch, boot_count",
            )
            .bind(id.to_string())
            .bind(now)
            .fetch_one(&mut *c)
            .await?;
            Ok(ClaimResponse { epoch: to_u64(epoch), boot_count: to_u64(boot_count) })
        }

        /// Reads the thread for a write and checks the writer's epoch.
        async fn fenced_thread(c: &mut Conn, id: ThreadId, epoch: u64) -> StoreResult<ThreadRow> {
            let row: Option<ThreadRow> = q::query_as(SELECT_THREAD_FOR_WRITE).bind(id.to_string()).fetch_optional(&mut *c).await?;
            let row = live(id, row.ok_or(StoreError::NotFound("thread"))?)?;
            if to_u64(row.epoch) != epoch {
                return Err(StoreError::Fenced { given: epoch, current: to_u64(row.epoch) });
            }
            Ok(row)
        }

        pub(crate) async fn append_checkpoint(c: &mut Conn, id: ThreadId, req: &CheckpointRequest, now: i64) -> StoreResult<CheckpointCreated> {
            check_count("append", req.append.len())?;
            check_messages(&req.append)?;
            let thread = fenced_thread(c, id, req.epoch).await?;
            append_version(c, id, &thread, &VersionWrite::from(req), now).await
        }

        /// Appends a version to `thread` (read and fenced by the caller, in this transaction).
        async fn append_version(c: &mut Conn, id: ThreadId, thread: &ThreadRow, req: &VersionWrite<'_>, now: i64) -> StoreResult<CheckpointCreated> {
            let head = to_u64(thread.version);
            if req.parent_version != head {
                return Err(StoreError::VersionConflict { given: req.parent_version, head });
            }
            let old_len = to_u64(thread.history_len);
            let version = head + 1;
            let version_i = to_i64(version, "version")?;
            let mut len = old_len;
            if let Some(cut) = req.truncate_to {
                if cut > old_len {
                    return Err(StoreError::Invalid {
                        code: ErrorCode::InvalidTruncate,
                        message: format!("truncate_to {cut} is longer than the history ({old_len} messages)"),
                    });
                }
                q::query("UPDATE messages SET superseded_by = $2 WHERE thread_id = $1 AND superseded_by IS NULL AND position >= $3")
                    .bind(id.to_string())
                    .bind(version_i)
                    .bind(to_i64(cut, "truncate_to")?)
                    .execute(&mut *c)
                    .await?;
                len = cut;
            }
            // What providers refuse: a result for a call the history does not leave open, a
            // message ID the live history already has (the caller checked the shape).
            let open = if needs_tail(req.append) { open_calls(c, id, to_i64(len, "history_len")?).await? } else { OpenCalls::default() };
            check_results(open, req.append)?;
            for (i, message) in req.append.iter().enumerate() {
                let seen: Option<(i64,)> = q::query_as("SELECT position FROM messages WHERE thread_id = $1 AND message_id = $2 AND superseded_by IS NULL")
                    .bind(id.to_string())
                    .bind(message.id.to_string())
                    .fetch_optional(&mut *c)
                    .await?;
                if let Some((at,)) = seen {
                    return Err(StoreError::Invalid {
                        code: ErrorCode::InvalidHistory,
                        message: format!("`append[{i}].id` {} is already message {at} of the history: every message has its own ID", message.id),
                    });
                }
            }
            for message in req.append {
                q::query("INSERT INTO messages (thread_id, version, position, body, message_id) VALUES ($1, $2, $3, $4, $5)")
                    .bind(id.to_string())
                    .bind(version_i)
                    .bind(to_i64(len, "position")?)
                    .bind(encode(message)?)
                    .bind(message.id.to_string())
                    .execute(&mut *c)
                    .await?;
                len += 1;
            }
            if req.state.turn_start_history_len > len {
                return Err(StoreError::Invalid {
                    code: ErrorCode::InvalidState,
                    message: format!("turn_start_history_len {} is past the end of the history ({len} messages)", req.state.turn_start_history_len),
                });
            }
            q::query(
                "INSERT INTO versions (thread_id, version, parent_version, epoch, truncate_to, appended, history_len, state, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(id.to_string())
            .bind(version_i)
            .bind(to_i64(head, "parent_version")?)
            .bind(to_i64(req.epoch, "epoch")?)
            .bind(req.truncate_to.map(|t| to_i64(t, "truncate_to")).transpose()?)
            .bind(req.append.len() as i64)
            .bind(to_i64(len, "history_len")?)
            .bind(encode(req.state)?)
            .bind(now)
            .execute(&mut *c)
            .await?;
            q::query("UPDATE threads SET version = $2, history_len = $3, status = $4, updated_at = $5, inbox_cursor = $6 WHERE thread_id = $1")
                .bind(id.to_string())
                .bind(version_i)
                .bind(to_i64(len, "history_len")?)
                .bind(req.state.status.as_str())
                .bind(now)
                .bind(to_i64(req.state.inbox_cursor, "inbox_cursor")?)
                .execute(&mut *c)
                .await?;
            Ok(CheckpointCreated { version, history_len: len })
        }

        async fn tool_call_row(c: &mut Conn, id: ThreadId, key: &str) -> StoreResult<Option<ToolCallRecord>> {
            let sql = format!("SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE thread_id = $1 AND key = $2");
            let row: Option<ToolCallRow> = q::query_as(q::AssertSqlSafe(sql)).bind(id.to_string()).bind(key).fetch_optional(&mut *c).await?;
            row.map(ToolCallRow::record).transpose()
        }

        /// The calls the live history before `len` leaves open (see [`OpenCalls`]): its tail
        /// read backwards to the last message that is not a tool message.
        async fn open_calls(c: &mut Conn, id: ThreadId, len: i64) -> StoreResult<OpenCalls> {
            let mut tail: Vec<ninetrix_proto::message::Message> = Vec::new();
            let mut before = len;
            'pages: loop {
                let rows: Vec<(i64, String)> = q::query_as("SELECT position, body FROM messages WHERE thread_id = $1 AND superseded_by IS NULL AND position < $2 ORDER BY position DESC LIMIT 32")
                    .bind(id.to_string())
                    .bind(before)
                    .fetch_all(&mut *c)
                    .await?;
                if rows.is_empty() {
                    break;
                }
                for (position, body) in rows {
                    let message: ninetrix_proto::message::Message = serde_json::from_str(&body).map_err(|e| corrupt("message", &e.to_string()))?;
                    before = position;
                    let last = message.role != ninetrix_proto::message::Role::Tool;
                    tail.push(message);
                    if last {
                        break 'pages;
                    }
                }
            }
            tail.reverse();
            Ok(OpenCalls::of_tail(&tail))
        }

        pub(crate) async fn record_intent(c: &mut Conn, id: ThreadId, intent: &ToolCallIntent, now: i64) -> StoreResult<(ToolCallRecord, bool)> {
            check_key("key", &intent.key)?;
            check_args("args", &intent.args)?;
            fenced_thread(c, id, intent.epoch).await?;
            let fields = IntentWrite { key: &intent.key, turn_seq: intent.turn_seq, tool: &intent.tool, args: &intent.args, effect: intent.effect };
            insert_intent(c, id, intent.epoch, &fields, now).await
        }

        /// Inserts an intent unless its key is in the ledger; returns the stored record and
        /// whether it is new. The caller has fenced the thread in this transaction.
        async fn insert_intent(c: &mut Conn, id: ThreadId, epoch: u64, intent: &IntentWrite<'_>, now: i64) -> StoreResult<(ToolCallRecord, bool)> {
            let inserted = q::query(
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
            let record = tool_call_row(c, id, intent.key).await?.ok_or(StoreError::NotFound("tool call"))?;
            // The key is derived from the turn, tool and arguments, so a different call under a
            // stored key is a client bug: refused, never silently answered with the old record.
            if !inserted && (record.turn_seq != intent.turn_seq || record.tool != intent.tool || &record.args != intent.args) {
                return Err(StoreError::KeyReused(format!(
                    "ledger key {} is stored for another call (turn {}, tool `{}`): this intent has another tool, turn or arguments; the stored record is unchanged",
                    intent.key, record.turn_seq, record.tool
                )));
            }
            Ok((record, inserted))
        }

        pub(crate) async fn complete_tool_call(c: &mut Conn, id: ThreadId, key: &str, done: &ToolCallCompletion, now: i64) -> StoreResult<ToolCallRecord> {
            check_key("key", key)?;
            fenced_thread(c, id, done.epoch).await?;
            record_outcome(c, id, key, done.epoch, done.ok, &done.result, now).await
        }

        /// Records an outcome (the first one wins; the same one again is harmless). The caller
        /// has fenced the thread in this transaction.
        async fn record_outcome(c: &mut Conn, id: ThreadId, key: &str, epoch: u64, ok: bool, result: &str, now: i64) -> StoreResult<ToolCallRecord> {
            let existing = tool_call_row(c, id, key).await?.ok_or(StoreError::NotFound("tool call"))?;
            let status = if ok { "completed" } else { "failed" };
            match existing.status {
                ninetrix_proto::api::ToolCallStatus::Intent => {
                    q::query("UPDATE tool_calls SET status = $3, result = $4, completed_epoch = $5, completed_at = $6 WHERE thread_id = $1 AND key = $2")
                        .bind(id.to_string())
                        .bind(key)
                        .bind(status)
                        .bind(result)
                        .bind(to_i64(epoch, "epoch")?)
                        .bind(now)
                        .execute(&mut *c)
                        .await?;
                    tool_call_row(c, id, key).await?.ok_or(StoreError::NotFound("tool call"))
                }
                recorded => {
                    let same_ok = matches!(recorded, ninetrix_proto::api::ToolCallStatus::Completed) == ok;
                    if same_ok && existing.result.as_deref() == Some(result) {
                        Ok(existing)
                    } else {
                        Err(StoreError::AlreadyCompleted { key: key.to_string() })
                    }
                }
            }
        }

        /// One durable step: a version, the ledger intents, then the outcomes, in the caller's
        /// one transaction. Any refusal returns an error, so the transaction writes nothing.
        /// Also returns the thread of the caller whose handoff this commit answered, to wake.
        pub(crate) async fn commit(c: &mut Conn, id: ThreadId, req: &CommitRequest, now: i64) -> StoreResult<(CommitResponse, Option<ThreadId>)> {
            check_commit(req)?;
            check_approvals(&req.approvals)?;
            let thread = fenced_thread(c, id, req.epoch).await?;
            let created = append_version(c, id, &thread, &VersionWrite::from(req), now).await?;
            let mut keys = Vec::with_capacity(req.intents.len());
            for intent in &req.intents {
                let fields = IntentWrite { key: &intent.key, turn_seq: intent.turn_seq, tool: &intent.tool, args: &intent.args, effect: intent.effect };
                insert_intent(c, id, req.epoch, &fields, now).await?;
                keys.push(intent.key.as_str());
            }
            for outcome in &req.outcomes {
                record_outcome(c, id, &outcome.key, req.epoch, outcome.ok, &outcome.result, now).await?;
            }
            for approval in &req.approvals {
                insert_approval(c, id, req.epoch, approval, now).await?;
            }
            // The records as they stand at the end (an intent completed by this same commit
            // shows its outcome).
            let mut records = Vec::with_capacity(keys.len());
            for key in keys {
                records.push(tool_call_row(c, id, key).await?.ok_or(StoreError::NotFound("tool call"))?);
            }
            insert_events(c, id, thread.event_seq, req.epoch, &req.events, now).await?;
            let caller = match &req.handoff_reply {
                Some(reply) => record_handoff_reply(c, id, reply, now).await?,
                None => None,
            };
            Ok((CommitResponse { version: created.version, history_len: created.history_len, records }, caller))
        }

        /// Stores the reply of the handoff whose task `target` did (the first reply stands), and
        /// returns the caller's thread to wake. A reply that names no handoff of this thread is
        /// refused, so a confused runner cannot answer another conversation's call.
        async fn record_handoff_reply(c: &mut Conn, target: ThreadId, reply: &HandoffReply, now: i64) -> StoreResult<Option<ThreadId>> {
            let sql = format!("SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE target_thread_id = $1");
            let row: Option<HandoffRow> = q::query_as(q::AssertSqlSafe(sql)).bind(target.to_string()).fetch_optional(&mut *c).await?;
            let Some(row) = row.filter(|r| ninetrix_proto::handoffs::delivery_key(&r.key) == reply.delivery_key) else {
                return Err(StoreError::UnknownHandoff(reply.delivery_key.clone()));
            };
            let caller = parse_id(&row.thread_id)?;
            if row.status != HandoffStatus::Pending.as_str() {
                return Ok(Some(caller));
            }
            let status = if reply.ok { HandoffStatus::Replied } else { HandoffStatus::Failed };
            q::query("UPDATE handoffs SET status = $3, reply = $4, cost_nano_usd = $5, replied_at = $6 WHERE thread_id = $1 AND key = $2")
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

        async fn handoff_row(c: &mut Conn, caller: ThreadId, key: &str) -> StoreResult<Option<HandoffRow>> {
            let sql = format!("SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE thread_id = $1 AND key = $2");
            Ok(q::query_as(q::AssertSqlSafe(sql)).bind(caller.to_string()).bind(key).fetch_optional(&mut *c).await?)
        }

        /// Hands one call's task to a collaborator, once: fenced by the caller's epoch; the
        /// collaborator must be one of the caller's agent's (as `up` recorded them) — the agent
        /// and pool of `as_labels` (the runner token's), or the thread's for the admin; its session
        /// for this call is opened, the task filed in its inbox under the delivery key, and the
        /// link stored — or, for a call that already did all that, the handoff found (`false`).
        /// Returns the (pool, agent) whose replicas to wake as well.
        pub(crate) async fn open_handoff(c: &mut Conn, caller: ThreadId, req: &HandoffRequest, as_labels: Option<&ThreadLabels>, now: i64) -> StoreResult<(Handoff, bool)> {
            check_handoff(req)?;
            let thread = fenced_thread(c, caller, req.epoch).await?;
            if let Some(row) = handoff_row(c, caller, &req.key).await? {
                // The collaborator's session was purged: the handoff can never be answered.
                let target = parse_id(&row.target_thread_id)?;
                let status: Option<(String,)> = q::query_as("SELECT status FROM threads WHERE thread_id = $1")
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
            let collaborators: Option<(String,)> = q::query_as("SELECT collaborators FROM agents WHERE pool = $1 AND agent = $2")
                .bind(pool.clone())
                .bind(from_agent.clone())
                .fetch_optional(&mut *c)
                .await?;
            let allowed: Vec<String> = match collaborators {
                Some((json,)) => serde_json::from_str(&json).map_err(|e| corrupt("agent collaborators", &e.to_string()))?,
                None => Vec::new(),
            };
            let target: Option<(i64,)> = q::query_as("SELECT replicas FROM agents WHERE pool = $1 AND agent = $2")
                .bind(pool.clone())
                .bind(req.agent.clone())
                .fetch_optional(&mut *c)
                .await?;
            if !allowed.contains(&req.agent) || target.is_none() {
                return Err(StoreError::NotCollaborator(if target.is_none() {
                    format!("pool `{pool}` runs no agent `{}` (as `ninetrix up` last recorded it)", req.agent)
                } else {
                    format!("`{}` is not one of `{from_agent}`'s collaborators in pool `{pool}` (as `ninetrix up` last recorded them)", req.agent)
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
            let content = ninetrix_proto::handoffs::task_message(&from_agent, &req.task, req.context.as_deref());
            let (enqueued, _) = insert_inbox(c, session.thread_id, &content, Some(&origin.delivery_key), Some(&origin), now).await?;
            let timeout_ms = to_i64(req.timeout_secs.saturating_mul(1000), "timeout_secs")?;
            q::query(
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
            let row = handoff_row(c, caller, &req.key).await?.ok_or(StoreError::NotFound("handoff"))?;
            Ok((row.handoff(now)?, true))
        }

        /// The thread of session `key` of (pool, agent): created on first use (a new UUID v7,
        /// labelled with the three), the same ever after. `true` when created now.
        pub(crate) async fn open_session(c: &mut Conn, pool: &str, agent: &str, key: &str, now: i64) -> StoreResult<(ThreadSummary, bool)> {
            let found: Option<ThreadRow> = q::query_as(concat!("SELECT ", thread_columns!(), " FROM threads WHERE pool = $1 AND agent = $2 AND session = $3", $lock))
                .bind(pool)
                .bind(agent)
                .bind(key)
                .fetch_optional(&mut *c)
                .await?;
            if let Some(row) = found {
                return Ok((row.summary()?, false));
            }
            // Concurrent first opens of one key race to this insert: on Postgres the losers wait
            // for the winner's commit on the unique index `threads_by_session`, insert nothing,
            // and read the winner's thread (a new statement sees it), instead of failing.
            let id = ThreadId::new_v7();
            let replicas = agent_replicas(c, pool, agent).await?;
            let inserted = q::query(
                "INSERT INTO threads (thread_id, pool, agent, session, session_replicas, session_replica, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT DO NOTHING",
            )
            .bind(id.to_string())
            .bind(pool)
            .bind(agent)
            .bind(key)
            .bind(i64::from(replicas))
            .bind(i64::from(ninetrix_proto::sessions::owner(key, replicas)))
            .bind(now)
            .execute(&mut *c)
            .await?
            .rows_affected()
                == 1;
            let row: ThreadRow = q::query_as(concat!("SELECT ", thread_columns!(), " FROM threads WHERE pool = $1 AND agent = $2 AND session = $3", $lock))
                .bind(pool)
                .bind(agent)
                .bind(key)
                .fetch_optional(&mut *c)
                .await?
                .ok_or(StoreError::NotFound("session"))?;
            Ok((row.summary()?, inserted))
        }

        /// How many replicas (pool, agent) runs as `up` last recorded it (1 when never).
        async fn agent_replicas(c: &mut Conn, pool: &str, agent: &str) -> StoreResult<u32> {
            let row: Option<(i64,)> = q::query_as("SELECT replicas FROM agents WHERE pool = $1 AND agent = $2")
                .bind(pool)
                .bind(agent)
                .fetch_optional(&mut *c)
                .await?;
            Ok(row.and_then(|(n,)| u32::try_from(n).ok()).unwrap_or(1).max(1))
        }

        /// The thread the API keeps for replica `replica` of (pool, agent), its row locked.
        async fn replica_mapping(c: &mut Conn, pool: &str, agent: &str, replica: i64) -> StoreResult<Option<String>> {
            let row: Option<(String,)> = q::query_as(concat!("SELECT thread_id FROM replica_threads WHERE pool = $1 AND agent = $2 AND replica = $3", $lock))
                .bind(pool)
                .bind(agent)
                .bind(replica)
                .fetch_optional(&mut *c)
                .await?;
            Ok(row.map(|(id,)| id))
        }

        /// The thread of replica `replica` of (pool, agent), and whether it was made now. On
        /// first use it adopts the newest live thread labelled with the three (one that a
        /// single-host `up` started, so a pool moved onto a cluster keeps its conversations), or
        /// makes a new one; the same ever after. A purged thread is replaced by a new one: a
        /// purge is final, and the replica starts over. Concurrent first calls agree: the
        /// mapping row is inserted before any thread, and only its winner's thread is made.
        pub(crate) async fn replica_thread(c: &mut Conn, pool: &str, agent: &str, replica: u32, now: i64, crash: fn(&str)) -> StoreResult<(ThreadSummary, bool)> {
            let replica_i64 = i64::from(replica);
            let mut made = None;
            let current = match replica_mapping(c, pool, agent, replica_i64).await? {
                Some(id) => id,
                None => {
                    let adopted: Option<(String,)> = q::query_as(
                        "SELECT thread_id FROM threads WHERE pool = $1 AND agent = $2 AND replica = $3 AND session IS NULL \
                         AND status <> 'purged' ORDER BY created_at DESC, thread_id DESC LIMIT 1",
                    )
                    .bind(pool)
                    .bind(agent)
                    .bind(replica_i64)
                    .fetch_optional(&mut *c)
                    .await?;
                    let candidate = match adopted {
                        Some((id,)) => id,
                        None => {
                            let id = ThreadId::new_v7().to_string();
                            made = Some(id.clone());
                            id
                        }
                    };
                    q::query("INSERT INTO replica_threads (pool, agent, replica, thread_id, created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING")
                        .bind(pool)
                        .bind(agent)
                        .bind(replica_i64)
                        .bind(&candidate)
                        .bind(now)
                        .execute(&mut *c)
                        .await?;
                    let id = replica_mapping(c, pool, agent, replica_i64).await?.ok_or(StoreError::NotFound("replica thread"))?;
                    if made.as_deref() != Some(id.as_str()) {
                        made = None;
                    }
                    id
                }
            };
            let status: Option<(String,)> = q::query_as("SELECT status FROM threads WHERE thread_id = $1")
                .bind(&current)
                .fetch_optional(&mut *c)
                .await?;
            let current = if status.as_ref().is_some_and(|(s,)| s == PURGED) {
                let id = ThreadId::new_v7().to_string();
                let moved = q::query("UPDATE replica_threads SET thread_id = $4, created_at = $5 WHERE pool = $1 AND agent = $2 AND replica = $3 AND thread_id = $6")
                    .bind(pool)
                    .bind(agent)
                    .bind(replica_i64)
                    .bind(&id)
                    .bind(now)
                    .bind(&current)
                    .execute(&mut *c)
                    .await?
                    .rows_affected();
                if moved == 1 {
                    made = Some(id.clone());
                    id
                } else {
                    replica_mapping(c, pool, agent, replica_i64).await?.ok_or(StoreError::NotFound("replica thread"))?
                }
            } else {
                current
            };
            if made.as_deref() == Some(current.as_str()) || status.is_none() {
                q::query("INSERT INTO threads (thread_id, pool, agent, replica, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (thread_id) DO NOTHING")
                    .bind(&current)
                    .bind(pool)
                    .bind(agent)
                    .bind(replica_i64)
                    .bind(now)
                    .execute(&mut *c)
                    .await?;
            }
            let row: ThreadRow = q::query_as(SELECT_THREAD_FOR_WRITE).bind(&current).fetch_one(&mut *c).await?;
            let created = made.as_deref() == Some(current.as_str());
            if created {
                crash("replica_thread_before_commit");
            }
            Ok((row.summary()?, created))
        }

        /// Records how many replicas (pool, agent) runs — what its sessions are spread over — and
        /// which agents it may hand work to.
        pub(crate) async fn set_replicas(c: &mut Conn, pool: &str, agent: &str, replicas: u32, collaborators: &[String], now: i64) -> StoreResult<()> {
            q::query(
                "INSERT INTO agents (pool, agent, replicas, collaborators, updated_at) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (pool, agent) DO UPDATE SET replicas = excluded.replicas, collaborators = excluded.collaborators, updated_at = excluded.updated_at",
            )
            .bind(pool)
            .bind(agent)
            .bind(i64::from(replicas))
            .bind(encode(&collaborators)?)
            .bind(now)
            .execute(&mut *c)
            .await?;
            store_session_owners(c, pool, agent, replicas).await
        }

        /// Stores the owner of every session of (pool, agent) whose stored owner was computed for
        /// another replica count than `replicas` (all of them when the count changed; none when
        /// `up` records the same count again). Each owner follows from the stored one where it
        /// can (`sessions::owner_after`: one score per added replica).
        async fn store_session_owners(c: &mut Conn, pool: &str, agent: &str, replicas: u32) -> StoreResult<()> {
            let n = i64::from(replicas);
            let stale: Vec<(String, String, i64, i64)> = q::query_as(
                "SELECT thread_id, session, session_replicas, session_replica FROM threads WHERE pool = $1 AND agent = $2 \
                 AND session IS NOT NULL AND (session_replicas < $3 OR session_replicas > $3)",
            )
            .bind(pool)
            .bind(agent)
            .bind(n)
            .fetch_all(&mut *c)
            .await?;
            if stale.is_empty() {
                return Ok(());
            }
            // The new owner of each, grouped: one statement per owner and 500 rows, naming the
            // rows read (a session opened meanwhile keeps the count it was opened with, and is
            // computed when read until the next count is recorded).
            let mut by_owner: std::collections::BTreeMap<u32, Vec<&str>> = std::collections::BTreeMap::new();
            for (id, key, from_replicas, from_owner) in &stale {
                let from = u32::try_from(*from_replicas).ok().zip(u32::try_from(*from_owner).ok());
                by_owner.entry(ninetrix_proto::sessions::owner_after(key, from, replicas)).or_default().push(id);
            }
            for (owner, ids) in by_owner {
                for chunk in ids.chunks(500) {
                    let marks: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 3)).collect();
                    let sql = format!("UPDATE threads SET session_replicas = $1, session_replica = $2 WHERE thread_id IN ({})", marks.join(", "));
                    let mut update = q::query(q::AssertSqlSafe(sql)).bind(n).bind(i64::from(owner));
                    for id in chunk {
                        update = update.bind(*id);
                    }
                    update.execute(&mut *c).await?;
                }
            }
            Ok(())
        }

        /// Stores a request to a person unless its call (ledger key) already has one; an ID
        /// another call's request has is refused (`key_reused`).
        async fn insert_approval(c: &mut Conn, id: ThreadId, epoch: u64, a: &NewApproval, now: i64) -> StoreResult<()> {
            let timeout_ms = to_i64(a.timeout_secs.saturating_mul(1000), "timeout_secs")?;
            let inserted = q::query(
                "INSERT INTO approvals (id, thread_id, key, call_id, epoch, turn_seq, kind, tool, args, args_hash, status, requested_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', $11, $12) ON CONFLICT DO NOTHING",
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
            .execute(&mut *c)
            .await?
            .rows_affected();
            if inserted == 0 {
                // Kept: the request this call (thread and key) already has. Refused: an ID that
                // is another call's request — the commit would be answered 201 and the request
                // never stored.
                let owner: Option<(String, String)> = q::query_as("SELECT thread_id, key FROM approvals WHERE id = $1")
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

        async fn approval_row(c: &mut Conn, approval: ApprovalId) -> StoreResult<Option<ApprovalRow>> {
            let sql = format!("SELECT {APPROVAL_COLUMNS} FROM approvals a JOIN threads t ON t.thread_id = a.thread_id WHERE a.id = $1");
            Ok(q::query_as(q::AssertSqlSafe(sql)).bind(approval.to_string()).fetch_optional(&mut *c).await?)
        }

        /// Records a person's decision, once: the first decision stands (the same one again
        /// changes nothing), and a request past its expiry is recorded expired instead. A
        /// recorded decision adds an `approval_decided` event to the thread (at its current
        /// epoch), so `trace` shows it even while no runner holds the thread. `decided_by` is the
        /// name recorded; `pool` (an approver's) must be the request's pool.
        pub(crate) async fn decide(c: &mut Conn, approval: ApprovalId, d: &DecisionRequest, by: &str, pool: Option<&str>, now: i64) -> StoreResult<(ThreadId, Decided)> {
            let row = approval_row(c, approval).await?.ok_or(StoreError::NotFound("approval"))?;
            if pool.is_some() && row.pool.as_deref() != pool {
                // An approver of another pool learns nothing about this one.
                return Err(StoreError::NotFound("approval"));
            }
            let thread_id = parse_id(&row.thread_id)?;
            // Serialise with the thread's runner writes (Postgres: the row lock).
            let thread: ThreadRow = q::query_as(SELECT_THREAD_FOR_WRITE).bind(thread_id.to_string()).fetch_optional(&mut *c).await?.ok_or(StoreError::NotFound("thread"))?;
            let row = approval_row(c, approval).await?.ok_or(StoreError::NotFound("approval"))?;
            let current = row.approval(now)?;
            check_decision(current.kind, d)?;
            match current.status {
                ApprovalStatus::Pending => {}
                ApprovalStatus::Expired => {
                    q::query("UPDATE approvals SET status = 'expired', decided_at = expires_at WHERE id = $1 AND status = 'pending'")
                        .bind(approval.to_string())
                        .execute(&mut *c)
                        .await?;
                    return Ok((thread_id, Decided::Expired(current)));
                }
                _ if same_decision(&current, d) => return Ok((thread_id, Decided::Repeated(current))),
                _ => return Ok((thread_id, Decided::Conflict(current))),
            }
            let reason = d.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
            q::query("UPDATE approvals SET status = $2, decided_at = $3, decided_by = $4, reason = $5, answer = $6 WHERE id = $1")
                .bind(approval.to_string())
                .bind(d.decision.status().as_str())
                .bind(now)
                .bind(by)
                .bind(reason)
                .bind(d.answer.as_deref())
                .execute(&mut *c)
                .await?;
            let decided = approval_row(c, approval).await?.ok_or(StoreError::NotFound("approval"))?.approval(now)?;
            let event = decided_event(&decided, now);
            insert_events(c, thread_id, thread.event_seq, to_u64(thread.epoch), std::slice::from_ref(&event), now).await?;
            Ok((thread_id, Decided::Recorded(decided)))
        }

        /// Puts a message in the inbox; also returns the session's agent and owner when the
        /// thread is a session's and the message is new, so its replica can be woken.
        pub(crate) async fn enqueue(c: &mut Conn, id: ThreadId, req: &EnqueueRequest, now: i64) -> StoreResult<(EnqueueResponse, Option<SessionOf>)> {
            if let Some(key) = &req.dedupe_key {
                check_key("dedupe_key", key)?;
            }
            ensure_thread(c, id, &ThreadLabels::default(), $crate::labels::Stating::Claim, now).await?;
            if let Some(key) = &req.dedupe_key {
                let stored: Option<(i64, String)> = q::query_as("SELECT seq, content FROM inbox WHERE thread_id = $1 AND dedupe_key = $2")
                    .bind(id.to_string())
                    .bind(key)
                    .fetch_optional(&mut *c)
                    .await?;
                match stored {
                    Some((seq, content)) if content == req.content => {
                        return Ok((EnqueueResponse { seq: to_u64(seq), duplicate: true }, None));
                    }
                    Some((seq, _)) => {
                        return Err(StoreError::KeyReused(format!(
                            "dedupe_key {key:?} is stored with other content (message {seq}); the stored message is unchanged: send new content under a new key"
                        )));
                    }
                    None => {}
                }
            }
            insert_inbox(c, id, &req.content, req.dedupe_key.as_deref(), None, now).await
        }

        /// Adds a message after the thread's last (the caller checked its dedupe key is new);
        /// also returns whom to wake when the thread is a session's.
        async fn insert_inbox(c: &mut Conn, id: ThreadId, content: &str, dedupe_key: Option<&str>, origin: Option<&HandoffOrigin>, now: i64) -> StoreResult<(EnqueueResponse, Option<SessionOf>)> {
            let next: Enqueued = q::query_as("UPDATE threads SET inbox_seq = inbox_seq + 1, updated_at = $2 WHERE thread_id = $1 RETURNING inbox_seq, pool, agent, session, session_replicas, session_replica")
                .bind(id.to_string())
                .bind(now)
                .fetch_one(&mut *c)
                .await?;
            q::query("INSERT INTO inbox (thread_id, seq, content, dedupe_key, created_at, origin) VALUES ($1, $2, $3, $4, $5, $6)")
                .bind(id.to_string())
                .bind(next.inbox_seq)
                .bind(content)
                .bind(dedupe_key)
                .bind(now)
                .bind(origin.map(encode).transpose()?)
                .execute(&mut *c)
                .await?;
            let seq = to_u64(next.inbox_seq);
            let replicas = match (&next.pool, &next.agent, &next.session) {
                (Some(pool), Some(agent), Some(_)) => agent_replicas(c, pool, agent).await?,
                _ => 1,
            };
            Ok((EnqueueResponse { seq, duplicate: false }, next.session_of(replicas)))
        }

        pub(crate) async fn append_events(c: &mut Conn, id: ThreadId, req: &EventsRequest, now: i64) -> StoreResult<u64> {
            check_events("events", &req.events)?;
            let thread = fenced_thread(c, id, req.epoch).await?;
            insert_events(c, id, thread.event_seq, req.epoch, &req.events, now).await
        }

        /// Stores `events` after the thread's last event (`event_seq`); returns the new last seq.
        /// The caller has fenced the writer and checked the events ([`check_events`]).
        async fn insert_events(c: &mut Conn, id: ThreadId, event_seq: i64, epoch: u64, events: &[NewEvent], now: i64) -> StoreResult<u64> {
            let mut seq = event_seq;
            for e in events {
                seq += 1;
                q::query("INSERT INTO events (thread_id, seq, kind, data, epoch, created_at) VALUES ($1, $2, $3, $4, $5, $6)")
                    .bind(id.to_string())
                    .bind(seq)
                    .bind(&e.kind)
                    .bind(encode(&e.data)?)
                    .bind(to_i64(epoch, "epoch")?)
                    .bind(now)
                    .execute(&mut *c)
                    .await?;
            }
            if seq != event_seq {
                q::query("UPDATE threads SET event_seq = $2, updated_at = $3 WHERE thread_id = $1")
                    .bind(id.to_string())
                    .bind(seq)
                    .bind(now)
                    .execute(&mut *c)
                    .await?;
            }
            Ok(to_u64(seq))
        }

        /// Deletes everything of the thread and leaves its row as a tombstone (status
        /// `purged`, no labels, its epoch kept), so its ID is never used again. The row is
        /// locked first: on Postgres a write in flight commits before the rows go, and every
        /// write after finds the tombstone.
        pub(crate) async fn purge(c: &mut Conn, id: ThreadId, now: i64, crash: fn(&str)) -> StoreResult<Purge> {
            let row: Option<ThreadRow> = q::query_as(SELECT_THREAD_FOR_WRITE).bind(id.to_string()).fetch_optional(&mut *c).await?;
            match row {
                None => return Ok(Purge::NotFound),
                Some(r) if r.status == PURGED => return Ok(Purge::Already),
                Some(_) => {}
            }
            for table in ["messages", "versions", "tool_calls", "approvals", "handoffs", "inbox", "events"] {
                let sql = format!("DELETE FROM {table} WHERE thread_id = $1");
                q::query(q::AssertSqlSafe(sql)).bind(id.to_string()).execute(&mut *c).await?;
            }
            q::query(concat!(
                "UPDATE threads SET status = '", purged!(), "', pool = NULL, agent = NULL, replica = NULL, session = NULL, version = 0, ",
                "history_len = 0, inbox_seq = 0, inbox_cursor = 0, event_seq = 0, updated_at = $2 WHERE thread_id = $1"
            ))
            .bind(id.to_string())
            .bind(now)
            .execute(&mut *c)
            .await?;
            crash("purge_before_commit");
            Ok(Purge::Done)
        }

    };
    (reads $conn:ty, $begin:literal) => {
        use ninetrix_proto::{ApprovalId, ThreadId};
        use ninetrix_proto::api::{Approval, Event, Handoff, InboxMessage, ThreadSummary, ToolCallRecord, VersionDetail, VersionSummary};

        use $crate::store::ops::*;
        use $crate::store::latest::{self, LatestCache};

        /// Starts a read transaction on `c`: every statement in it reads one snapshot (SQLite's
        /// deferred transaction in WAL mode; Postgres' REPEATABLE READ), so what a read
        /// assembles from several rows (a thread row, its state, its messages) is never torn
        /// by a commit between them.
        pub(crate) async fn snapshot(c: &mut ReadConn) -> StoreResult<sqlx::Transaction<'_, <ReadConn as sqlx::Connection>::Database>> {
            Ok(sqlx::Connection::begin_with(c, $begin).await?)
        }
        use $crate::store::{ApprovalFilter, HandoffFilter, StoreError, StoreResult, ThreadFilter};

        /// The sessions of (pool, agent) that replica `replica` of `replicas` owns and that have
        /// work (messages after their cursor, or a turn in progress: `in_turn`, `waiting`),
        /// oldest first, each with its stored cursor. One range of the partial index
        /// `threads_session_work` — the replica's own sessions with work, whatever the number of
        /// sessions — plus the rows whose stored owner was computed for another count (none,
        /// unless a session was opened while the count changed), whose owner is computed here.
        pub(crate) async fn session_work(c: &mut ReadConn, pool: &str, agent: &str, replicas: u32, replica: u32) -> StoreResult<Vec<(ThreadSummary, u64)>> {
            const WORK: &str = concat!(
                "SELECT ", thread_columns!(), " FROM threads WHERE pool = $1 AND agent = $2 AND session IS NOT NULL \
                 AND (inbox_seq > inbox_cursor OR status IN ('in_turn', 'waiting')) AND "
            );
            let own: Vec<ThreadRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!("{WORK}session_replicas = $3 AND session_replica = $4")))
                .bind(pool)
                .bind(agent)
                .bind(i64::from(replicas))
                .bind(i64::from(replica))
                .fetch_all(&mut *c)
                .await?;
            let mut rows = own;
            for stale in ["session_replicas < $3", "session_replicas > $3"] {
                let found: Vec<ThreadRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!("{WORK}{stale}")))
                    .bind(pool)
                    .bind(agent)
                    .bind(i64::from(replicas))
                    .fetch_all(&mut *c)
                    .await?;
                rows.extend(found.into_iter().filter(|r| {
                    r.session.as_deref().is_some_and(|key| ninetrix_proto::sessions::owner(key, replicas) == replica)
                }));
            }
            rows.sort_by(|a, b| (a.updated_at, &a.thread_id).cmp(&(b.updated_at, &b.thread_id)));
            rows.into_iter()
                .map(|r| {
                    let cursor = to_u64(r.inbox_cursor);
                    r.summary().map(|s| (s, cursor))
                })
                .collect()
        }

        /// How many replicas (pool, agent) runs, as `up` last recorded it.
        pub(crate) async fn replicas(c: &mut ReadConn, pool: &str, agent: &str) -> StoreResult<Option<u32>> {
            let row: Option<(i64,)> = sqlx::query_as("SELECT replicas FROM agents WHERE pool = $1 AND agent = $2")
                .bind(pool)
                .bind(agent)
                .fetch_optional(&mut *c)
                .await?;
            Ok(row.and_then(|(n,)| u32::try_from(n).ok()))
        }

        /// The requests to people of one turn of a thread, oldest first, as they stand at `now`.
        pub(crate) async fn turn_approvals(c: &mut ReadConn, id: ThreadId, turn_seq: u64, now: i64) -> StoreResult<Vec<Approval>> {
            not_purged(c, id).await?;
            let sql = format!("SELECT {APPROVAL_COLUMNS} FROM approvals a JOIN threads t ON t.thread_id = a.thread_id WHERE a.thread_id = $1 AND a.turn_seq = $2 ORDER BY a.requested_at, a.id");
            let rows: Vec<ApprovalRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(id.to_string())
                .bind(to_i64(turn_seq, "turn_seq")?)
                .fetch_all(&mut *c)
                .await?;
            rows.into_iter().map(|r| r.approval(now)).collect()
        }

        /// One request to a person, as it stands at `now`.
        pub(crate) async fn approval(c: &mut ReadConn, id: ApprovalId, now: i64) -> StoreResult<Option<Approval>> {
            let sql = format!("SELECT {APPROVAL_COLUMNS} FROM approvals a JOIN threads t ON t.thread_id = a.thread_id WHERE a.id = $1");
            let row: Option<ApprovalRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(id.to_string()).fetch_optional(&mut *c).await?;
            row.map(|r| r.approval(now)).transpose()
        }

        /// Requests to people matching the filter, oldest first, as they stand at `now`. A
        /// `pending` filter leaves out those past their expiry; `expired` takes them in.
        pub(crate) async fn list_approvals(c: &mut ReadConn, f: &ApprovalFilter, now: i64) -> StoreResult<Vec<Approval>> {
            let sql = format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals a JOIN threads t ON t.thread_id = a.thread_id \
                 WHERE ($1 IS NULL OR t.pool = $1) AND ($2 IS NULL OR t.agent = $2) AND ($3 IS NULL OR a.thread_id = $3) \
                 AND ($4 IS NULL OR ($4 = 'pending' AND a.status = 'pending' AND a.expires_at > $5) \
                      OR ($4 = 'expired' AND (a.status = 'expired' OR (a.status = 'pending' AND a.expires_at <= $5))) \
                      OR ($4 <> 'pending' AND $4 <> 'expired' AND a.status = $4)) \
                 ORDER BY a.requested_at, a.id LIMIT $6 OFFSET $7"
            );
            let rows: Vec<ApprovalRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
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

        type ReadConn = $conn;

        const SELECT_THREAD: &str = concat!("SELECT ", thread_columns!(), " FROM threads WHERE thread_id = $1");

        /// The latest state as a JSON document (a `ThreadState`), spliced from the stored JSON
        /// of the state and of each message without decoding them.
        pub(crate) async fn latest_json(c: &mut ReadConn, id: ThreadId, cache: &LatestCache) -> StoreResult<Option<String>> {
            let thread: Option<ThreadRow> = sqlx::query_as(SELECT_THREAD).bind(id.to_string()).fetch_optional(&mut *c).await?;
            let Some(thread) = thread.map(|t| live(id, t)).transpose()?.filter(|t| t.version > 0) else { return Ok(None) };
            let head = thread.version;
            // Versions are never changed once written, so the state of `head` and the messages
            // appended up to `head` read the same whatever is committed meanwhile.
            let (state,): (String,) = sqlx::query_as("SELECT state FROM versions WHERE thread_id = $1 AND version = $2")
                .bind(id.to_string())
                .bind(head)
                .fetch_one(&mut *c)
                .await?;
            let history = match cache.get(id, thread.created_at).filter(|e| e.version <= head) {
                Some(hit) if hit.version == head => Some(hit),
                Some(hit) => {
                    let extended = extend_history(c, id, hit, head, thread.history_len).await?;
                    if let Some(e) = &extended {
                        cache.put(id, e.clone());
                    }
                    extended
                }
                None => None,
            };
            let history = match history {
                Some(h) => h,
                None => {
                    let h = live_history(c, id, thread.created_at, head, thread.history_len).await?;
                    cache.put(id, h.clone());
                    h
                }
            };
            Ok(Some(splice_state(id, to_u64(head), to_u64(thread.epoch), &state, history.history.text())))
        }

        /// The cached history extended to `head` by the versions since — each one's cut (a
        /// repair) and then its messages — or `None` when the rows do not fit it (then the
        /// history is rebuilt).
        async fn extend_history(c: &mut ReadConn, id: ThreadId, hit: latest::Cached, head: i64, len: i64) -> StoreResult<Option<latest::Cached>> {
            let cuts: Vec<(i64, i64)> = sqlx::query_as("SELECT version, truncate_to FROM versions WHERE thread_id = $1 AND version > $2 AND version <= $3 AND truncate_to IS NOT NULL")
                .bind(id.to_string())
                .bind(hit.version)
                .bind(head)
                .fetch_all(&mut *c)
                .await?;
            // Every message of the versions since sits at or after the cached length, or after
            // the shortest cut among them.
            let cached_len = i64::try_from(hit.history.len()).unwrap_or(i64::MAX);
            let from = cuts.iter().map(|c| c.1).fold(cached_len, i64::min);
            let rows: Vec<(i64, i64, String)> = sqlx::query_as("SELECT version, position, body FROM messages WHERE thread_id = $1 AND position >= $4 AND version > $2 AND version <= $3")
                .bind(id.to_string())
                .bind(hit.version)
                .bind(head)
                .bind(from)
                .fetch_all(&mut *c)
                .await?;
            let history = match hit.history.extend(&cuts, rows) {
                Ok(h) => h,
                Err(why) => {
                    tracing::warn!(thread_id = %id, "the cached history does not extend ({why}); reading it whole");
                    return Ok(None);
                }
            };
            if i64::try_from(history.len()).ok() != Some(len) {
                return Err(corrupt("history", &format!("{} messages up to version {head}, expected {len}", history.len())));
            }
            Ok(Some(latest::Cached { created_at: hit.created_at, version: head, history: std::sync::Arc::new(history) }))
        }

        /// The live history read whole: rows in position order straight off an index (SQLite's
        /// primary key, Postgres' partial index of live rows), appended as they arrive. (An
        /// ordered aggregate would sort megabytes of JSON.)
        async fn live_history(c: &mut ReadConn, id: ThreadId, created_at: i64, head: i64, len: i64) -> StoreResult<latest::Cached> {
            let mut history = latest::Joined::default();
            let mut rows = sqlx::query_scalar::<_, String>("SELECT body FROM messages WHERE thread_id = $1 AND superseded_by IS NULL ORDER BY position")
                .bind(id.to_string())
                .fetch(&mut *c);
            while let Some(body) = futures_util::TryStreamExt::try_next(&mut rows).await? {
                history.push(&body);
            }
            if i64::try_from(history.len()).ok() != Some(len) {
                return Err(corrupt("history", &format!("{} live messages, expected {len}", history.len())));
            }
            Ok(latest::Cached { created_at, version: head, history: std::sync::Arc::new(history) })
        }

        /// `Purged` for a purged thread (its tombstone), so a runner that reads one learns it.
        pub(crate) async fn not_purged(c: &mut ReadConn, id: ThreadId) -> StoreResult<()> {
            let status: Option<(String,)> = sqlx::query_as("SELECT status FROM threads WHERE thread_id = $1").bind(id.to_string()).fetch_optional(&mut *c).await?;
            if status.is_some_and(|(s,)| s == PURGED) {
                return Err(StoreError::Purged(id));
            }
            Ok(())
        }

        pub(crate) async fn inbox_after(c: &mut ReadConn, id: ThreadId, after: u64, limit: u32) -> StoreResult<Vec<InboxMessage>> {
            // A runner idle on a purged thread long-polls its inbox: told here, it stops.
            not_purged(c, id).await?;
            let rows: Vec<InboxRow> = sqlx::query_as("SELECT seq, content, dedupe_key, created_at, origin FROM inbox WHERE thread_id = $1 AND seq > $2 ORDER BY seq LIMIT $3")
                .bind(id.to_string())
                .bind(to_i64(after, "after")?)
                .bind(i64::from(limit))
                .fetch_all(&mut *c)
                .await?;
            rows.into_iter().map(InboxRow::message).collect()
        }

        /// The handoffs one turn of a thread made, oldest first, as they stand at `now`.
        pub(crate) async fn turn_handoffs(c: &mut ReadConn, id: ThreadId, turn_seq: u64, now: i64) -> StoreResult<Vec<Handoff>> {
            not_purged(c, id).await?;
            let sql = format!("SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE thread_id = $1 AND turn_seq = $2 ORDER BY created_at, key");
            let rows: Vec<HandoffRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(id.to_string())
                .bind(to_i64(turn_seq, "turn_seq")?)
                .fetch_all(&mut *c)
                .await?;
            rows.into_iter().map(|r| r.handoff(now)).collect()
        }

        /// Handoffs matching the filter, oldest first, as they stand at `now`.
        pub(crate) async fn list_handoffs(c: &mut ReadConn, f: &HandoffFilter, now: i64) -> StoreResult<Vec<Handoff>> {
            let sql = format!(
                "SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE ($1 IS NULL OR pool = $1) AND ($2 IS NULL OR thread_id = $2) \
                 AND ($3 IS NULL OR target_thread_id = $3) ORDER BY created_at, thread_id, key LIMIT $4 OFFSET $5"
            );
            let rows: Vec<HandoffRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(f.pool.as_deref())
                .bind(f.thread.map(|t| t.to_string()))
                .bind(f.target.map(|t| t.to_string()))
                .bind(i64::from(f.limit))
                .bind(i64::from(f.offset))
                .fetch_all(&mut *c)
                .await?;
            rows.into_iter().map(|r| r.handoff(now)).collect()
        }

        pub(crate) async fn events_after(c: &mut ReadConn, id: ThreadId, after: u64, limit: u32) -> StoreResult<Vec<Event>> {
            let rows: Vec<EventRow> = sqlx::query_as("SELECT seq, kind, data, epoch, created_at FROM events WHERE thread_id = $1 AND seq > $2 ORDER BY seq LIMIT $3")
                .bind(id.to_string())
                .bind(to_i64(after, "after")?)
                .bind(i64::from(limit))
                .fetch_all(&mut *c)
                .await?;
            rows.into_iter().map(EventRow::event).collect()
        }

        pub(crate) async fn list_threads(c: &mut ReadConn, f: &ThreadFilter) -> StoreResult<Vec<ThreadSummary>> {
            let rows: Vec<ThreadRow> = sqlx::query_as(
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

        pub(crate) async fn thread(c: &mut ReadConn, id: ThreadId) -> StoreResult<Option<ThreadSummary>> {
            let row: Option<ThreadRow> = sqlx::query_as(SELECT_THREAD).bind(id.to_string()).fetch_optional(&mut *c).await?;
            row.map(|r| live(id, r)?.summary()).transpose()
        }

        pub(crate) async fn versions(c: &mut ReadConn, id: ThreadId) -> StoreResult<Vec<VersionSummary>> {
            let rows: Vec<VersionRow> = sqlx::query_as(
                "SELECT version, parent_version, epoch, truncate_to, appended, history_len, state, created_at FROM versions WHERE thread_id = $1 ORDER BY version",
            )
            .bind(id.to_string())
            .fetch_all(&mut *c)
            .await?;
            rows.into_iter().map(VersionRow::summary).collect()
        }

        pub(crate) async fn version(c: &mut ReadConn, id: ThreadId, version: u64) -> StoreResult<Option<VersionDetail>> {
            let v = to_i64(version, "version")?;
            let row: Option<VersionRow> = sqlx::query_as(
                "SELECT version, parent_version, epoch, truncate_to, appended, history_len, state, created_at FROM versions WHERE thread_id = $1 AND version = $2",
            )
            .bind(id.to_string())
            .bind(v)
            .fetch_optional(&mut *c)
            .await?;
            let Some(row) = row else { return Ok(None) };
            let bodies: Vec<(String,)> = sqlx::query_as(
                "SELECT body FROM messages WHERE thread_id = $1 AND version <= $2 AND (superseded_by IS NULL OR superseded_by > $2) ORDER BY position",
            )
            .bind(id.to_string())
            .bind(v)
            .fetch_all(&mut *c)
            .await?;
            let history = decode_messages(bodies.into_iter().map(|(b,)| b).collect())?;
            Ok(Some(VersionDetail { summary: row.summary()?, history }))
        }

        pub(crate) async fn turn_tool_calls(c: &mut ReadConn, id: ThreadId, turn_seq: u64) -> StoreResult<Vec<ToolCallRecord>> {
            not_purged(c, id).await?;
            let sql = format!("SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE thread_id = $1 AND turn_seq = $2 ORDER BY created_at, key");
            let rows: Vec<ToolCallRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(id.to_string())
                .bind(to_i64(turn_seq, "turn_seq")?)
                .fetch_all(&mut *c)
                .await?;
            rows.into_iter().map(ToolCallRow::record).collect()
        }

        pub(crate) async fn tool_calls(c: &mut ReadConn, id: ThreadId) -> StoreResult<Vec<ToolCallRecord>> {
            let sql = format!("SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE thread_id = $1 ORDER BY created_at, key");
            let rows: Vec<ToolCallRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(id.to_string()).fetch_all(&mut *c).await?;
            rows.into_iter().map(ToolCallRow::record).collect()
        }
    };
}

pub(crate) mod sqlite {
    //! The reads for SQLite (sqlx's pool of reader connections).
    sql_ops!(reads sqlx::SqliteConnection, "BEGIN");
    crate::store::triggers::trigger_ops!(reads);
}

pub(crate) mod sqlite_writer {
    //! The writes for SQLite, run on the writer thread's rusqlite connection.
    use crate::store::rsq as q;
    sql_ops!(writes rusqlite::Connection, "");
    crate::store::triggers::trigger_ops!(writes "");
}

pub(crate) mod postgres {
    //! The queries for Postgres.
    use sqlx as q;
    sql_ops!(writes sqlx::PgConnection, " FOR UPDATE");
    crate::store::triggers::trigger_ops!(writes " FOR UPDATE");

    mod reads {
        sql_ops!(reads sqlx::PgConnection, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY");
        crate::store::triggers::trigger_ops!(reads);
    }
    pub(crate) use reads::*;
}

#[cfg(test)]
mod tests {
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
