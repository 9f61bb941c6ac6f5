//! What a message does to a thread's turn: the admin's enqueue (a dedupe key answered
//! once; the mode resolved against the turn the thread is in by `insert_inbox`), an interrupt of
//! a turn that waits, and the cancel. A stopped turn will never use what it waited for, so each
//! stop settles it in the same transaction: the turn's pending requests to people `cancelled`
//! (each with its `approval_decided` event), its pending handoffs `cancelled`, and for each of
//! those a cancel in the collaborator's thread aimed at the task (it carries the task's origin,
//! so that runner stops only the turn answering it) — recursively into the collaborator's own
//! handoffs, at most [`MAX_CASCADE_DEPTH`] deep, each handoff once.

use std::collections::{HashSet, VecDeque};

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    CancelRequest, CancelResponse, Control, EnqueueRequest, EnqueueResponse, ErrorCode,
    HandoffOrigin, HandoffStatus, MessageMode, ThreadLabels,
};

use crate::store::checks::check_key;
use crate::store::codec::{corrupt, parse_id, to_i64, to_u64};
use crate::store::conn::{AssertSqlSafe, Conn, for_write, query, query_as};
use crate::store::{StoreError, StoreResult};

use super::approvals::cancel_turn_approvals;
use super::handoffs::{HANDOFF_COLUMNS, HandoffRow};
use super::inbox::{NewMessage, Wake, in_turn, insert_inbox, latest_state};
use super::threads::{PURGED, SELECT_THREAD, ThreadRow, ensure_thread, live};

/// How many handoffs deep a stop follows collaborators' threads.
const MAX_CASCADE_DEPTH: usize = 32;
/// Most characters of a cancel's `by`.
const MAX_BY_LEN: usize = 64;
/// Most characters of a cancel's `reason`.
const MAX_REASON_LEN: usize = 2000;

/// Puts a message in the inbox (creating the thread if new), once per dedupe key: a key seen
/// before with the same content and control answers the stored message (its mode as stored),
/// another payload is `key_reused`. The message's mode is resolved and a `reject` that finds
/// the thread busy refused (see `insert_inbox`); an interrupt of a waiting turn settles what it
/// waited for. A cancel has its own route (it settles more and names who sent it): refused here.
/// Returns whom to wake.
pub(crate) async fn enqueue<C: Conn>(
    c: &mut C,
    id: ThreadId,
    req: &EnqueueRequest,
    now: i64,
) -> StoreResult<(EnqueueResponse, Wake)> {
    if req.control == Some(Control::Cancel) {
        return Err(StoreError::Invalid {
            code: ErrorCode::InvalidBody,
            message: format!(
                "a cancel is not sent as a message: use POST /v1/threads/{id}/cancel (`ninetrix cancel`), which also settles what the turn waits for and records who cancelled"
            ),
        });
    }
    if req.control == Some(Control::Rewind) {
        return Err(StoreError::Invalid {
            code: ErrorCode::InvalidBody,
            message: format!(
                "a rewind is not sent as a message: use POST /v1/threads/{id}/rewind (`ninetrix rewind`), which checks the turn and that the thread is idle first"
            ),
        });
    }
    if let Some(key) = &req.dedupe_key {
        check_key("dedupe_key", key)?;
    }
    ensure_thread(
        c,
        id,
        &ThreadLabels::default(),
        crate::labels::Stating::Claim,
        now,
    )
    .await?;
    if let Some(key) = &req.dedupe_key {
        let stored: Option<(i64, String, Option<String>, String)> = query_as(
            "SELECT seq, content, control, mode FROM inbox WHERE thread_id = $1 AND dedupe_key = $2",
        )
        .bind(id.to_string())
        .bind(key)
        .fetch_optional(&mut *c)
        .await?;
        match stored {
            Some((seq, content, control, mode))
                if content == req.content
                    && control.as_deref() == req.control.map(Control::as_str) =>
            {
                let mode = MessageMode::parse(&mode).ok_or_else(|| corrupt("inbox mode", &mode))?;
                return Ok((
                    EnqueueResponse {
                        seq: to_u64(seq),
                        duplicate: true,
                        mode,
                        running: None,
                    },
                    Wake::default(),
                ));
            }
            Some((seq, ..)) => {
                return Err(StoreError::KeyReused(format!(
                    "dedupe_key {key:?} is stored with other content (message {seq}); the stored message is unchanged: send new content under a new key"
                )));
            }
            None => {}
        }
    }
    let message = NewMessage {
        dedupe_key: req.dedupe_key.as_deref(),
        control: req.control,
        ..NewMessage::work(&req.content, req.mode, true)
    };
    deliver(c, id, &message, now).await
}

/// Puts a message in the inbox (the caller checked its dedupe key is new) with its mode resolved
/// (see `insert_inbox`); an interrupt that finds the turn waiting on people or collaborators
/// settles what it waited for (the interrupted turn never uses their answers). Returns whom to
/// wake.
pub(super) async fn deliver<C: Conn>(
    c: &mut C,
    id: ThreadId,
    m: &NewMessage<'_>,
    now: i64,
) -> StoreResult<(EnqueueResponse, Wake)> {
    let inserted = insert_inbox(c, id, m, now).await?;
    let mut wake = Wake::default();
    wake.add(id, inserted.session);
    if inserted.response.mode == MessageMode::Interrupt
        && let Some(turn) = inserted.waiting
    {
        let by = format!("interrupt by message {}", inserted.response.seq);
        let mut stop = Stopping::new(&by, None, now);
        stop.approvals(c, id, turn, &by).await?;
        stop.handoffs(c, id, Some(turn)).await?;
        wake.extend(stop.wake);
    }
    Ok((inserted.response, wake))
}

/// What a cancel request must satisfy before anything is read (422 otherwise); `by` is the
/// name it will be recorded under.
fn check_cancel(req: &CancelRequest, by: &str) -> StoreResult<()> {
    let invalid = |message: String| StoreError::Invalid {
        code: ErrorCode::InvalidBody,
        message,
    };
    if by.is_empty() || by.chars().count() > MAX_BY_LEN {
        return Err(invalid(format!(
            "`by` must have 1 to {MAX_BY_LEN} characters"
        )));
    }
    if req
        .reason
        .as_deref()
        .is_some_and(|r| r.chars().count() > MAX_REASON_LEN)
    {
        return Err(invalid(format!(
            "`reason` has at most {MAX_REASON_LEN} characters"
        )));
    }
    if let Some(key) = &req.dedupe_key {
        check_key("dedupe_key", key)?;
    }
    Ok(())
}

/// Cancels the thread's turn, in one transaction: a `cancel` control in its inbox (`content`
/// the reason, sent by `by`), its current turn's pending requests to people settled
/// `cancelled`, and every handoff it has pending marked `cancelled` with the cascade into the
/// collaborators' threads. A dedupe key seen before on the thread answers that cancel and does
/// nothing more (another message under the key is `key_reused`). Returns the answer and whom to
/// wake.
pub(crate) async fn cancel<C: Conn>(
    c: &mut C,
    id: ThreadId,
    req: &CancelRequest,
    by: &str,
    now: i64,
    crash: fn(&str),
) -> StoreResult<(CancelResponse, Wake)> {
    check_cancel(req, by)?;
    let row: Option<ThreadRow> = query_as(for_write::<C>(SELECT_THREAD))
        .bind(id.to_string())
        .fetch_optional(&mut *c)
        .await?;
    let row = live(id, row.ok_or(StoreError::NotFound("thread"))?)?;
    if let Some(key) = &req.dedupe_key {
        let stored: Option<(i64, Option<String>)> =
            query_as("SELECT seq, control FROM inbox WHERE thread_id = $1 AND dedupe_key = $2")
                .bind(id.to_string())
                .bind(key)
                .fetch_optional(&mut *c)
                .await?;
        match stored {
            Some((seq, Some(control))) if control == Control::Cancel.as_str() => {
                return Ok((
                    CancelResponse {
                        seq: to_u64(seq),
                        duplicate: true,
                        running: None,
                        approvals_cancelled: 0,
                        handoffs_cancelled: 0,
                    },
                    Wake::default(),
                ));
            }
            Some((seq, _)) => {
                return Err(StoreError::KeyReused(format!(
                    "dedupe_key {key:?} is stored with another message (message {seq}), not a cancel; the stored message is unchanged: cancel under a new key"
                )));
            }
            None => {}
        }
    }
    let reason = req.reason.as_deref();
    let message = NewMessage {
        content: reason.unwrap_or(""),
        dedupe_key: req.dedupe_key.as_deref(),
        origin: None,
        control: Some(Control::Cancel),
        mode: None,
        sender: Some(by),
        refusable: false,
    };
    let inserted = insert_inbox(c, id, &message, now).await?;
    let mut stop = Stopping::new(by, reason, now);
    stop.wake.add(id, inserted.session);
    if in_turn(&row.status)
        && let Some(state) = latest_state(c, id, row.version).await?
    {
        stop.approvals(c, id, state.turn_seq, by).await?;
    }
    stop.handoffs(c, id, None).await?;
    crash("cancel_before_commit");
    Ok((
        CancelResponse {
            seq: inserted.response.seq,
            duplicate: false,
            running: inserted.response.running,
            approvals_cancelled: stop.approvals,
            handoffs_cancelled: stop.handoffs,
        },
        stop.wake,
    ))
}

/// One stop's settling: who stopped the turn and why, and what it settled so far.
struct Stopping<'a> {
    by: &'a str,
    reason: Option<&'a str>,
    now: i64,
    /// Requests to people settled `cancelled`.
    approvals: u64,
    /// Handoffs marked `cancelled`.
    handoffs: u64,
    /// The handoffs (caller's thread, key) already followed.
    seen: HashSet<(String, String)>,
    wake: Wake,
}

impl<'a> Stopping<'a> {
    fn new(by: &'a str, reason: Option<&'a str>, now: i64) -> Self {
        Stopping {
            by,
            reason,
            now,
            approvals: 0,
            handoffs: 0,
            seen: HashSet::new(),
            wake: Wake::default(),
        }
    }

    /// Settles the pending requests to people of turn `turn_seq` of thread `id` (whose row the
    /// transaction holds), recorded as decided by `by`.
    async fn approvals<C: Conn>(
        &mut self,
        c: &mut C,
        id: ThreadId,
        turn_seq: u64,
        by: &str,
    ) -> StoreResult<()> {
        let settled = cancel_turn_approvals(c, id, turn_seq, by, self.reason, self.now).await?;
        if settled > 0 {
            self.approvals += settled;
            self.wake.add(id, None);
        }
        Ok(())
    }

    /// Marks `cancelled` the pending handoffs thread `id` made (of turn `turn` only, when
    /// given), and follows each into its collaborator's thread: a cancel aimed at the task, the
    /// pending requests to people of the turn answering it, and that thread's own pending
    /// handoffs — breadth first, at most [`MAX_CASCADE_DEPTH`] deep, each handoff once. A
    /// handoff already settled (a reply that just came, a deadline passed) is left as it is.
    async fn handoffs<C: Conn>(
        &mut self,
        c: &mut C,
        id: ThreadId,
        turn: Option<u64>,
    ) -> StoreResult<()> {
        let mut queue = VecDeque::from([(id, turn, 0usize)]);
        while let Some((thread, turn, depth)) = queue.pop_front() {
            let sql = format!(
                "SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE thread_id = $1 AND status = 'pending' AND expires_at > $2 \
                 AND ($3 IS NULL OR turn_seq = $3) ORDER BY created_at, key"
            );
            let rows: Vec<HandoffRow> = query_as(AssertSqlSafe(sql))
                .bind(thread.to_string())
                .bind(self.now)
                .bind(turn.map(|t| to_i64(t, "turn_seq")).transpose()?)
                .fetch_all(&mut *c)
                .await?;
            for row in rows {
                if !self.seen.insert((row.thread_id.clone(), row.key.clone())) {
                    continue;
                }
                if let Some(target) = self.cancel_handoff(c, thread, &row).await?
                    && depth + 1 < MAX_CASCADE_DEPTH
                {
                    queue.push_back((target, None, depth + 1));
                }
            }
        }
        Ok(())
    }

    /// Marks one handoff of `caller` `cancelled` and cancels the collaborator's turn on its
    /// task; returns the collaborator's thread to follow, or `None` when the handoff was
    /// settled meanwhile or that thread is gone.
    async fn cancel_handoff<C: Conn>(
        &mut self,
        c: &mut C,
        caller: ThreadId,
        row: &HandoffRow,
    ) -> StoreResult<Option<ThreadId>> {
        let target = parse_id(&row.target_thread_id)?;
        // The collaborator's row first, then the handoff's: the order its reply takes (its
        // commit holds its thread, then writes the reply), so on Postgres the two wait for each
        // other in turn, never in a circle.
        let target_row: Option<ThreadRow> = query_as(for_write::<C>(SELECT_THREAD))
            .bind(target.to_string())
            .fetch_optional(&mut *c)
            .await?;
        let marked = query(
            "UPDATE handoffs SET status = $3 WHERE thread_id = $1 AND key = $2 AND status = 'pending'",
        )
        .bind(row.thread_id.clone())
        .bind(row.key.clone())
        .bind(HandoffStatus::Cancelled.as_str())
        .execute(&mut *c)
        .await?
        .rows_affected();
        if marked == 0 {
            return Ok(None);
        }
        self.handoffs += 1;
        // The caller's turn may be waiting on it.
        self.wake.add(caller, None);
        let Some(target_row) = target_row.filter(|r| r.status != PURGED) else {
            return Ok(None);
        };
        let origin: Option<(Option<String>,)> =
            query_as("SELECT origin FROM inbox WHERE thread_id = $1 AND seq = $2")
                .bind(target.to_string())
                .bind(row.inbox_seq)
                .fetch_optional(&mut *c)
                .await?;
        let origin: Option<HandoffOrigin> = origin
            .and_then(|(o,)| o)
            .map(|o| serde_json::from_str(&o).map_err(|e| corrupt("inbox origin", &e.to_string())))
            .transpose()?;
        let sender = format!("{} (via {})", self.by, row.from_agent);
        let message = NewMessage {
            content: self.reason.unwrap_or(""),
            dedupe_key: None,
            origin: origin.as_ref(),
            control: Some(Control::Cancel),
            mode: None,
            sender: Some(&sender),
            refusable: false,
        };
        let inserted = insert_inbox(c, target, &message, self.now).await?;
        self.wake.add(target, inserted.session);
        // The collaborator's turn answering this task waits on people: settled too.
        if in_turn(&target_row.status)
            && let Some(state) = latest_state(c, target, target_row.version).await?
            && origin.is_some()
            && state.handoff.as_ref().map(|h| &h.delivery_key)
                == origin.as_ref().map(|o| &o.delivery_key)
        {
            self.approvals(c, target, state.turn_seq, &sender).await?;
        }
        Ok(Some(target))
    }
}
