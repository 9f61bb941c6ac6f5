//! The commit: one durable step of a runner — a version, ledger intents and outcomes, requests
//! to people, events, a handoff's reply and a turn's end (with its workspace snapshot) —
//! checked first, then written in one transaction.

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{CommitRequest, CommitResponse, ErrorCode};

use crate::store::checks::{check_args, check_count, check_events, check_key, check_messages};
use crate::store::conn::Conn;
use crate::store::{StoreError, StoreResult};

use super::approvals::{check_approvals, insert_approval};
use super::checkpoints::{VersionWrite, append_version};
use super::events::insert_events;
use super::handoffs::record_handoff_reply;
use super::ledger::{IntentWrite, insert_intent, record_outcome, tool_call_row};
use super::threads::fenced_thread;
use super::turns::record_turn_end;

/// The most turns `turn_end.keep_turns` may keep (its schema's maximum).
const MAX_KEEP_TURNS: u32 = 1_000_000;

/// The longest `turn_end.snapshot_skipped` (its schema's maximum).
const MAX_SKIPPED: usize = 1_000;

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
    if let Some(keep) = req.turn_end.as_ref().and_then(|end| end.keep_turns)
        && !(1..=MAX_KEEP_TURNS).contains(&keep)
    {
        return Err(StoreError::Invalid {
            code: ErrorCode::InvalidBody,
            message: format!(
                "`turn_end.keep_turns` is {keep}; it is 1 to {MAX_KEEP_TURNS} (the turn that ends keeps its snapshot); leave it out to keep every snapshot"
            ),
        });
    }
    if let Some(why) = req
        .turn_end
        .as_ref()
        .and_then(|end| end.snapshot_skipped.as_deref())
        && why.chars().count() > MAX_SKIPPED
    {
        return Err(StoreError::Invalid {
            code: ErrorCode::InvalidBody,
            message: format!(
                "`turn_end.snapshot_skipped` is {} characters; it is at most {MAX_SKIPPED}",
                why.chars().count()
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

/// One durable step: a version, the ledger intents, then the outcomes, in the caller's
/// one transaction. Any refusal returns an error, so the transaction writes nothing.
/// Also returns the thread of the caller whose handoff this commit answered, to wake.
pub(crate) async fn commit<C: Conn>(
    c: &mut C,
    id: ThreadId,
    req: &CommitRequest,
    now: i64,
) -> StoreResult<(CommitResponse, Option<ThreadId>)> {
    check_commit(req)?;
    check_approvals(&req.approvals)?;
    let thread = fenced_thread(c, id, req.epoch).await?;
    let created = append_version(c, id, &thread, &VersionWrite::from(req), now).await?;
    if let Some(end) = &req.turn_end {
        let last = req.append.last().map(|m| m.id.to_string());
        let at = (
            req.state.turn_seq,
            created.version,
            created.history_len,
            last,
        );
        record_turn_end(c, id, &thread, end, at, now).await?;
    }
    let mut keys = Vec::with_capacity(req.intents.len());
    for intent in &req.intents {
        let fields = IntentWrite {
            key: &intent.key,
            turn_seq: intent.turn_seq,
            tool: &intent.tool,
            args: &intent.args,
            effect: intent.effect,
        };
        insert_intent(c, id, req.epoch, &fields, now).await?;
        keys.push(intent.key.as_str());
    }
    for outcome in &req.outcomes {
        record_outcome(
            c,
            id,
            &outcome.key,
            req.epoch,
            outcome.ok,
            &outcome.result,
            now,
        )
        .await?;
    }
    let labels = (
        thread.pool.as_deref().unwrap_or_default(),
        thread.agent.as_deref().unwrap_or_default(),
    );
    for approval in &req.approvals {
        insert_approval(c, id, req.epoch, labels, approval, now).await?;
    }
    // The records as they stand at the end (an intent completed by this same commit
    // shows its outcome).
    let mut records = Vec::with_capacity(keys.len());
    for key in keys {
        records.push(
            tool_call_row(c, id, key)
                .await?
                .ok_or(StoreError::NotFound("tool call"))?,
        );
    }
    insert_events(c, id, thread.event_seq, req.epoch, &req.events, now).await?;
    let caller = match &req.handoff_reply {
        Some(reply) => record_handoff_reply(c, id, reply, now).await?,
        None => None,
    };
    Ok((
        CommitResponse {
            version: created.version,
            history_len: created.history_len,
            records,
        },
        caller,
    ))
}
