//! Forks and rewinds (issue 41), each one transaction.
//!
//! A fork is a new session of the parent's agent whose history is the parent's up to the end of
//! one of its turns, shared in the store (`threads.base_*`, see `history`), with the turn's
//! state and workspace snapshot, a system note naming the parent's later effects it does not
//! undo, and a `turns` row of its own for the forked turn (holding its reference on the snapshot,
//! so the parent's `keep_turns` cannot drop the files the fork restores). A rewind is queued in
//! the inbox as a `rewind` control for the runner to carry out between turns.

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    CheckpointState, Control, ErrorCode, ForkOrigin, ForkRequest, ForkResponse, GoneBack,
    RewindQueued, RewindRequest, TurnEnd, undone_note,
};
use ninetrix_proto::events::{ForkCreated, Forked, TraceEvent};
use ninetrix_proto::message::{Message, Role};

use crate::fork_rules::fork_session_key;
use crate::store::checks::check_key;
use crate::store::codec::{time, to_i64, to_u64};
use crate::store::conn::{Conn, query, query_as};
use crate::store::{StoreError, StoreResult};

use super::checkpoints::{VersionWrite, append_version};
use super::events::insert_events;
use super::inbox::{NewMessage, Wake, in_turn, insert_inbox, thread_turn};
use super::ledger::tool_calls;
use super::sessions::insert_session;
use super::turns::{TurnRow, find_turn, live_thread, record_turn_end};

/// The refusal of a fork or a rewind to a turn whose files cannot be restored (fail-closed): its
/// snapshot was dropped, or never taken though its agent takes them. `None`: the turn can be
/// gone back to.
fn unrestorable(thread: ThreadId, turn: &TurnRow, n: u64) -> Option<StoreError> {
    let why = if turn.dropped() {
        "was dropped (`execution.snapshots.keep_turns`)".to_string()
    } else {
        format!("was not taken: {}", turn.skipped()?)
    };
    Some(StoreError::SnapshotDropped(format!(
        "the workspace snapshot of turn {n} of thread {thread} {why}: its files cannot be restored, so nothing was done; pick another turn (GET /v1/threads/{thread}/turns lists those with a snapshot)"
    )))
}

/// `POST /v1/threads/{id}/fork`. Returns the answer and the threads whose events changed.
pub(crate) async fn fork<C: Conn>(
    c: &mut C,
    parent: ThreadId,
    req: &ForkRequest,
    now: i64,
) -> StoreResult<(ForkResponse, Vec<ThreadId>)> {
    let thread = live_thread(c, parent, true).await?;
    let (Some(pool), Some(agent)) = (thread.pool.clone(), thread.agent.clone()) else {
        return Err(StoreError::Invalid {
            code: ErrorCode::UnlabelledThread,
            message: format!(
                "thread {parent} has no pool and agent labels, and a fork is a session of its agent: fork a thread that `ninetrix up` or POST /v1/sessions made"
            ),
        });
    };
    let (turn, _) = find_turn(c, parent, req.at_turn).await?;
    if let Some(refused) = unrestorable(parent, &turn, req.at_turn) {
        return Err(refused);
    }
    let snapshot = turn.snapshot()?;
    let id = ThreadId::new_v7();
    let key = req.session.clone().unwrap_or_else(|| fork_session_key(id));
    ninetrix_proto::sessions::check_key(&key).map_err(|e| StoreError::Invalid {
        code: ErrorCode::InvalidBody,
        message: format!("`session`: {e}"),
    })?;
    let taken: Option<(String,)> =
        query_as("SELECT thread_id FROM threads WHERE pool = $1 AND agent = $2 AND session = $3")
            .bind(pool.as_str())
            .bind(agent.as_str())
            .bind(key.as_str())
            .fetch_optional(&mut *c)
            .await?;
    if let Some((other,)) = taken {
        return Err(StoreError::KeyReused(format!(
            "session `{key}` of agent `{agent}` (pool `{pool}`) is thread {other}: give the fork a session key the agent does not use yet"
        )));
    }
    if !insert_session(c, id, &pool, &agent, &key, now).await? {
        return Err(StoreError::KeyReused(format!(
            "session `{key}` of agent `{agent}` (pool `{pool}`) was opened meanwhile: give the fork another session key"
        )));
    }
    query(
        "UPDATE threads SET fork_parent = $2, fork_turn = $3, base_thread = $4, base_version = $5, base_len = $6, history_len = $6 WHERE thread_id = $1",
    )
    .bind(id.to_string())
    .bind(parent.to_string())
    .bind(to_i64(req.at_turn, "at_turn")?)
    .bind(turn.thread_id.as_str())
    .bind(turn.version)
    .bind(turn.history_len)
    .execute(&mut *c)
    .await?;
    let records = tool_calls(c, parent).await?;
    let undone = ninetrix_proto::api::undone_after(&records, req.at_turn, snapshot.is_some());
    let how = GoneBack::Fork {
        parent,
        at_turn: req.at_turn,
    };
    let append: Vec<Message> = undone_note(how, snapshot.is_some(), &undone)
        .map(|note| Message::text(Role::System, note))
        .into_iter()
        .collect();
    let end = turn.state(c).await?;
    let history_len = to_u64(turn.history_len) + append.len() as u64;
    let state = CheckpointState::idle_at(end.turn_seq, history_len, end.context, snapshot.clone());
    let row = live_thread(c, id, true).await?;
    let write = VersionWrite {
        epoch: 0,
        parent_version: 0,
        truncate_to: None,
        append: &append,
        state: &state,
    };
    let created = append_version(c, id, &row, &write, now).await?;
    // The fork's own row for the forked turn: its list, rewinds and diffs see it as its own, and
    // it holds the fork's reference on the snapshot.
    let last = append
        .last()
        .map(|m| m.id.to_string())
        .or(turn.last_message_id.clone());
    let end = TurnEnd {
        turn_seq: req.at_turn,
        snapshot: snapshot.clone(),
        snapshot_skipped: None,
        keep_turns: None,
    };
    record_turn_end(
        c,
        id,
        &row,
        &end,
        (req.at_turn, created.version, created.history_len, last),
        now,
    )
    .await?;
    let forked = TraceEvent::Forked(Forked {
        parent,
        at_turn: req.at_turn,
        history_len: created.history_len,
        snapshot: snapshot.clone(),
        undone: undone.len() as u64,
    })
    .to_new_event(time(now));
    insert_events(c, id, 0, 0, &[forked], now).await?;
    let created_event = TraceEvent::ForkCreated(ForkCreated {
        thread_id: id,
        at_turn: req.at_turn,
        session: key.clone(),
    })
    .to_new_event(time(now));
    insert_events(
        c,
        parent,
        thread.event_seq,
        to_u64(thread.epoch),
        &[created_event],
        now,
    )
    .await?;
    Ok((
        ForkResponse {
            thread_id: id,
            session: key,
            forked_from: ForkOrigin {
                parent,
                at_turn: req.at_turn,
            },
            history_len: created.history_len,
            snapshot,
            undone,
        },
        vec![parent, id],
    ))
}

/// `POST /v1/threads/{id}/rewind`: queues a `rewind` control to the end of an ended turn of the
/// thread, once per dedupe key. Refused while a turn runs or messages wait (409 `busy`), for a
/// turn that did not end (404) or whose snapshot was dropped (409 `snapshot_dropped`).
pub(crate) async fn rewind<C: Conn>(
    c: &mut C,
    id: ThreadId,
    req: &RewindRequest,
    now: i64,
) -> StoreResult<(RewindQueued, Wake)> {
    if let Some(key) = &req.dedupe_key {
        check_key("dedupe_key", key)?;
    }
    let thread = live_thread(c, id, true).await?;
    let content = format!("ninetrix rewind to turn {}", req.to_turn);
    if let Some(key) = &req.dedupe_key {
        let stored: Option<(i64, String, Option<String>)> = query_as(
            "SELECT seq, content, control FROM inbox WHERE thread_id = $1 AND dedupe_key = $2",
        )
        .bind(id.to_string())
        .bind(key)
        .fetch_optional(&mut *c)
        .await?;
        match stored {
            Some((seq, stored, control))
                if stored == content && control.as_deref() == Some(Control::Rewind.as_str()) =>
            {
                let (turn, _) = find_turn(c, id, req.to_turn).await?;
                return Ok((
                    RewindQueued {
                        seq: to_u64(seq),
                        duplicate: true,
                        from_turn: from_turn(c, id, thread.version).await?,
                        to_turn: req.to_turn,
                        snapshot: turn.snapshot()?,
                    },
                    Wake::default(),
                ));
            }
            Some((seq, ..)) => {
                return Err(StoreError::KeyReused(format!(
                    "dedupe_key {key:?} is stored with another message (message {seq}); the stored message is unchanged: rewind under a new key"
                )));
            }
            None => {}
        }
    }
    let (status, cursor, version, last) = (
        thread.status.as_str(),
        thread.inbox_cursor,
        thread.version,
        thread.inbox_seq,
    );
    if let Some(running) = thread_turn(c, id, (status, cursor, version), last).await? {
        return Err(StoreError::RewindBusy {
            thread: id,
            running,
            started: in_turn(status),
        });
    }
    let (turn, _) = find_turn(c, id, req.to_turn).await?;
    if let Some(refused) = unrestorable(id, &turn, req.to_turn) {
        return Err(refused);
    }
    let message = NewMessage {
        content: &content,
        dedupe_key: req.dedupe_key.as_deref(),
        origin: None,
        control: Some(Control::Rewind),
        mode: None,
        sender: None,
        refusable: false,
    };
    let inserted = insert_inbox(c, id, &message, now).await?;
    query("UPDATE inbox SET to_turn = $3 WHERE thread_id = $1 AND seq = $2")
        .bind(id.to_string())
        .bind(to_i64(inserted.response.seq, "seq")?)
        .bind(to_i64(req.to_turn, "to_turn")?)
        .execute(&mut *c)
        .await?;
    let mut wake = Wake::default();
    wake.add(id, inserted.session);
    Ok((
        RewindQueued {
            seq: inserted.response.seq,
            duplicate: false,
            from_turn: from_turn(c, id, version).await?,
            to_turn: req.to_turn,
            snapshot: turn.snapshot()?,
        },
        wake,
    ))
}

/// The turns the thread started so far (its head state's `turn_seq`).
async fn from_turn<C: Conn>(c: &mut C, id: ThreadId, version: i64) -> StoreResult<u64> {
    Ok(super::inbox::latest_state(c, id, version)
        .await?
        .map_or(0, |s| s.turn_seq))
}
