//! Replays (issue 42), each one transaction: the scratch thread that re-runs recorded turns of
//! another against a candidate agent, and what one turn of a thread recorded (the tool oracle a
//! replay answers from and what its report compares against).
//!
//! A replay shares its source's history up to the end of the live turn before the first replayed
//! one (`threads.base_*`, as a fork does: nothing is copied), but it is no fork (`fork_parent`
//! stays NULL, no note about undone effects, no event on the source): the source is not written
//! at all. Its labels are the source's pool and agent only, so no pool runner serves it and no
//! message, trigger or invoke reaches it; its inbox holds the replayed turns' inputs, one message
//! per turn, seq 1..=n in order.

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    Approval, ApprovalKind, CheckpointState, ErrorCode, PersonDecision, RecordedTurn,
    ReplayCreated, ReplayOrigin, ReplayRequest, TurnEnd, Usage,
};
use ninetrix_proto::events::{Decoded, ReplayStarted, TraceEvent};
use ninetrix_proto::message::{Message, Role};
use ninetrix_proto::replay::{LedgerCall, pair_calls};
use ninetrix_proto::snapshots::SnapshotRef;

use crate::fork_rules::{ended_turns_text, turn_live};
use crate::store::codec::{corrupt, decode_messages, decode_state, encode, time, to_i64, to_u64};
use crate::store::conn::{Conn, query, query_as};
use crate::store::{StoreError, StoreResult};

use super::approvals::turn_approvals;
use super::checkpoints::{VersionWrite, append_version};
use super::events::{EventRow, insert_events};
use super::history::{self, Segment};
use super::inbox::{NewMessage, insert_inbox};
use super::ledger::turn_tool_calls;
use super::threads::{PURGED, fork_origin};
use super::turns::{TurnRow, chain_turns, live_thread, record_turn_end};

/// The deepest chain of forks a record follows to the thread that ran a turn.
const MAX_FORK_DEPTH: usize = 10_000;

/// The dedupe key of the inbox message that replays recorded turn `n`.
pub(crate) fn replay_dedupe_key(n: u64) -> String {
    format!("replay-turn-{n}")
}

/// The IDs of `thread`'s current history (what says which ended turns are live).
async fn current_ids<C: Conn>(
    c: &mut C,
    thread: &str,
    version: i64,
    len: i64,
) -> StoreResult<Vec<Option<String>>> {
    if version == 0 {
        return Ok(Vec::new());
    }
    let segments = history::segments(c, thread, version, len, true).await?;
    history::message_ids(c, &segments).await
}

/// The thread that ran turn `n` of `thread`: a fork's turns up to its fork point ran in its
/// parent (recursively).
async fn ran_in<C: Conn>(c: &mut C, thread: &str, n: i64) -> StoreResult<String> {
    let mut at = thread.to_string();
    for _ in 0..MAX_FORK_DEPTH {
        match fork_origin(c, &at).await? {
            Some((parent, fork_turn)) if n <= fork_turn => at = parent,
            _ => return Ok(at),
        }
    }
    Err(corrupt(
        "fork chain",
        &format!("{thread} is more than {MAX_FORK_DEPTH} forks deep"),
    ))
}

/// The `turns` row of turn `n` as the thread that ran it wrote it (a fork's own row for its
/// forked turn ends with the fork's note; the parent's is the turn as it happened), else `row`.
async fn ran_row<C: Conn>(c: &mut C, thread: &str, row: &TurnRow) -> StoreResult<TurnRow> {
    let ran = ran_in(c, thread, row.turn_seq).await?;
    if ran == row.thread_id {
        return Ok(row.clone());
    }
    let own = chain_turns(c, &ran).await?;
    Ok(own
        .into_iter()
        .find(|t| t.turn_seq == row.turn_seq && t.thread_id == ran)
        .unwrap_or_else(|| row.clone()))
}

/// The messages of an ended turn: its history as of the version that ended it, from the turn's
/// input on. The state stored with that version says where the turn started
/// (`turn_start_history_len` is the length just after its input was added; a compaction made at
/// the turn's start goes before the input and moves it along), so the input is the message just
/// before it — when that is a user message (a failed turn whose input was never stored starts at
/// the anchor).
async fn turn_messages<C: Conn>(c: &mut C, row: &TurnRow) -> StoreResult<Vec<Message>> {
    let state = row.state(c).await?;
    let len = row.history_len;
    let anchor = i64::try_from(state.turn_start_history_len)
        .unwrap_or(len)
        .min(len);
    let start = (anchor - 1).max(0);
    let segments: Vec<Segment> = history::segments(c, &row.thread_id, row.version, len, false)
        .await?
        .into_iter()
        .filter(|s| s.to > start)
        .map(|s| Segment {
            from: s.from.max(start),
            ..s
        })
        .collect();
    let mut messages = decode_messages(history::bodies(c, &segments).await?)?;
    if anchor >= 1 && messages.first().is_some_and(|m| m.role != Role::User) {
        messages.remove(0);
    }
    Ok(messages)
}

/// A turn's input: the text of its first message when that is the user's.
fn input_of(messages: &[Message]) -> String {
    messages
        .first()
        .filter(|m| m.role == Role::User)
        .map(Message::text_content)
        .unwrap_or_default()
}

/// What a replay thread's row says it replays.
#[derive(sqlx::FromRow)]
struct ReplayRow {
    thread_id: String,
    replay_from: i64,
    replay_to: i64,
    replay_candidate: String,
    replay_turns: String,
    base_len: Option<i64>,
}

impl crate::store::conn::rsq::FromRow for ReplayRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(ReplayRow {
            thread_id: row.get("thread_id")?,
            replay_from: row.get("replay_from")?,
            replay_to: row.get("replay_to")?,
            replay_candidate: row.get("replay_candidate")?,
            replay_turns: row.get("replay_turns")?,
            base_len: row.get("base_len")?,
        })
    }
}

/// The live replay of `source` made under `key`, if any.
async fn replay_by_key<C: Conn>(
    c: &mut C,
    source: ThreadId,
    key: &str,
) -> StoreResult<Option<ReplayRow>> {
    query_as(
        "SELECT thread_id, replay_from, replay_to, replay_candidate, replay_turns, base_len FROM threads \
         WHERE replay_source = $1 AND replay_key = $2 AND status <> 'purged'",
    )
    .bind(source.to_string())
    .bind(key)
    .fetch_optional(&mut *c)
    .await
}

/// The answer for a replay made before under the same key: the same request finds it
/// (`existing: true`); another range or candidate under that key is refused.
async fn existing<C: Conn>(
    c: &mut C,
    source: ThreadId,
    req: &ReplayRequest,
    row: ReplayRow,
) -> StoreResult<ReplayCreated> {
    let same = to_u64(row.replay_from) == req.from_turn
        && to_u64(row.replay_to) == req.to_turn
        && row.replay_candidate == req.candidate;
    if !same {
        return Err(StoreError::KeyReused(format!(
            "key {:?} of thread {source} names replay {} of turns {}..={} against {:?}; nothing was made: replay under another key",
            req.key, row.thread_id, row.replay_from, row.replay_to, row.replay_candidate
        )));
    }
    let turns: Vec<u64> = serde_json::from_str(&row.replay_turns)
        .map_err(|e| corrupt("replay turns", &e.to_string()))?;
    let state: Option<(String,)> =
        query_as("SELECT state FROM versions WHERE thread_id = $1 AND version = 1")
            .bind(row.thread_id.as_str())
            .fetch_optional(&mut *c)
            .await?;
    let (snapshot, base_turn) = match state {
        Some((s,)) => {
            let state = decode_state(&s)?;
            (state.workspace, state.turn_seq)
        }
        None => (None, 0),
    };
    Ok(ReplayCreated {
        replay: crate::store::codec::parse_id(&row.thread_id)?,
        origin: ReplayOrigin {
            source,
            from_turn: req.from_turn,
            to_turn: req.to_turn,
            candidate: req.candidate.clone(),
        },
        turns,
        existing: true,
        base_turn,
        history_len: to_u64(row.base_len.unwrap_or(0)),
        snapshot,
    })
}

/// The rest of a new replay, after its row: its first version (the base turn's end as a fresh
/// idle state), its own row for the base turn (holding its reference on the snapshot) and its
/// inbox (one message per replayed turn, in order). Returns its history's length and snapshot.
async fn fill_replay<C: Conn>(
    c: &mut C,
    id: ThreadId,
    base: Option<&TurnRow>,
    base_len: i64,
    inputs: &[(u64, String)],
    now: i64,
) -> StoreResult<(u64, Option<SnapshotRef>)> {
    let snapshot: Option<SnapshotRef> = match base {
        Some(b) => b.snapshot()?,
        None => None,
    };
    let context = match base {
        Some(b) => b.state(c).await?.context,
        None => None,
    };
    let base_turn = base.map_or(0, |b| to_u64(b.turn_seq));
    let state = CheckpointState::idle_at(base_turn, to_u64(base_len), context, snapshot.clone());
    let row = live_thread(c, id, true).await?;
    let write = VersionWrite {
        epoch: 0,
        parent_version: 0,
        truncate_to: None,
        append: &[],
        state: &state,
    };
    let created = append_version(c, id, &row, &write, now).await?;
    if let Some(b) = base {
        // Its own row for the base turn: it holds the replay's reference on the snapshot its
        // runner restores, so the source's `keep_turns` (or purge) cannot drop those files.
        let end = TurnEnd {
            turn_seq: base_turn,
            snapshot: snapshot.clone(),
            snapshot_skipped: None,
            keep_turns: None,
        };
        let last = b.last_message_id.clone();
        record_turn_end(
            c,
            id,
            &row,
            &end,
            (base_turn, created.version, created.history_len, last),
            now,
        )
        .await?;
    }
    for (n, input) in inputs {
        let key = replay_dedupe_key(*n);
        let message = NewMessage {
            content: input,
            dedupe_key: Some(&key),
            origin: None,
            control: None,
            mode: None,
            sender: None,
            refusable: false,
        };
        insert_inbox(c, id, &message, now).await?;
    }
    Ok((created.history_len, snapshot))
}

/// `POST /v1/threads/{id}/replays` (the route checked the fields). Writes the replay thread, its
/// first version, its base turn's row (holding its reference on the snapshot), its inbox and its
/// `replay_started` event — and nothing on the source. `crash` is called before the commit
/// (`replay_before_commit`).
pub(crate) async fn create_replay<C: Conn>(
    c: &mut C,
    source: ThreadId,
    req: &ReplayRequest,
    now: i64,
    crash: fn(&str),
) -> StoreResult<ReplayCreated> {
    // Locked (never written): the turns read below are one consistent view of the source.
    let thread = live_thread(c, source, true).await?;
    if thread.pool.is_none() || thread.agent.is_none() {
        return Err(StoreError::Invalid {
            code: ErrorCode::UnlabelledThread,
            message: format!(
                "thread {source} has no pool and agent labels, and a replay runs as its agent: replay a thread that `ninetrix up` or POST /v1/sessions made"
            ),
        });
    }
    if let Some(row) = replay_by_key(c, source, &req.key).await? {
        return existing(c, source, req, row).await;
    }
    let (from, to) = (
        to_i64(req.from_turn, "from_turn")?,
        to_i64(req.to_turn, "to_turn")?,
    );
    let ids = current_ids(c, &thread.thread_id, thread.version, thread.history_len).await?;
    let live: Vec<TurnRow> = chain_turns(c, &thread.thread_id)
        .await?
        .into_iter()
        .filter(|t| turn_live(to_u64(t.history_len), t.last_message_id.as_deref(), &ids))
        .collect();
    let replayed: Vec<&TurnRow> = live
        .iter()
        .filter(|t| (from..=to).contains(&t.turn_seq))
        .collect();
    let Some(first) = replayed.first() else {
        let ended: Vec<u64> = live.iter().map(|t| to_u64(t.turn_seq)).collect();
        return Err(StoreError::Absent(format!(
            "thread {source} ended no turn in {from}..={to} on its current branch: {}; pick turns it ended (GET /v1/threads/{source}/turns lists them)",
            ended_turns_text(&ended)
        )));
    };
    let base = live.iter().rev().find(|t| t.turn_seq < first.turn_seq);
    let mut inputs = Vec::with_capacity(replayed.len());
    for t in &replayed {
        let row = ran_row(c, &thread.thread_id, t).await?;
        inputs.push((to_u64(t.turn_seq), input_of(&turn_messages(c, &row).await?)));
    }
    let turns: Vec<u64> = inputs.iter().map(|(n, _)| *n).collect();
    let (pool, agent) = (thread.pool.clone(), thread.agent.clone());
    let id = ThreadId::new_v7();
    let (base_thread, base_version, base_len) = match base {
        Some(b) => (Some(b.thread_id.clone()), Some(b.version), b.history_len),
        None => (None, None, 0),
    };
    let made = query(
        "INSERT INTO threads (thread_id, pool, agent, created_at, updated_at, history_len, base_thread, base_version, base_len, \
         replay_source, replay_from, replay_to, replay_candidate, replay_key, replay_turns) \
         VALUES ($1, $2, $3, $4, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) ON CONFLICT DO NOTHING",
    )
    .bind(id.to_string())
    .bind(pool.clone())
    .bind(agent.clone())
    .bind(now)
    .bind(base_len)
    .bind(base_thread)
    .bind(base_version)
    .bind(base.map(|_| base_len))
    .bind(source.to_string())
    .bind(from)
    .bind(to)
    .bind(req.candidate.as_str())
    .bind(req.key.as_str())
    .bind(encode(&turns)?)
    .execute(&mut *c)
    .await?;
    if made.rows_affected() == 0 {
        // Another request made it meanwhile (Postgres waited for its commit).
        return match replay_by_key(c, source, &req.key).await? {
            Some(row) => existing(c, source, req, row).await,
            None => Err(corrupt("replay", "its key is taken by no live replay")),
        };
    }
    let (history_len, snapshot) = fill_replay(c, id, base, base_len, &inputs, now).await?;
    let origin = ReplayOrigin {
        source,
        from_turn: req.from_turn,
        to_turn: req.to_turn,
        candidate: req.candidate.clone(),
    };
    let started = TraceEvent::ReplayStarted(ReplayStarted {
        source,
        from_turn: req.from_turn,
        to_turn: req.to_turn,
        turns: turns.len() as u64,
        candidate: req.candidate.clone(),
    })
    .to_new_event(time(now));
    let event_seq: (i64,) = query_as("SELECT event_seq FROM threads WHERE thread_id = $1")
        .bind(id.to_string())
        .fetch_one(&mut *c)
        .await?;
    insert_events(c, id, event_seq.0, 0, &[started], now).await?;
    crash("replay_before_commit");
    Ok(ReplayCreated {
        replay: id,
        origin,
        turns,
        existing: false,
        base_turn: base.map_or(0, |b| to_u64(b.turn_seq)),
        history_len,
        snapshot,
    })
}

/// The `turn_started`/`turn_resumed`, `llm_call` and `turn_completed` events of `thread`, in
/// order, decoded (what a record reads a turn's cost, latency and model from).
async fn turn_events<C: Conn>(c: &mut C, thread: &str) -> StoreResult<Vec<TraceEvent>> {
    let rows: Vec<EventRow> = query_as(
        "SELECT seq, kind, data, epoch, created_at FROM events WHERE thread_id = $1 \
         AND kind IN ('turn_started', 'turn_resumed', 'llm_call', 'turn_completed') ORDER BY seq",
    )
    .bind(thread)
    .fetch_all(&mut *c)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        if let Decoded::Known(e) = row.event()?.decode() {
            out.push(e);
        }
    }
    Ok(out)
}

/// What the events say of turn `n`: its last `turn_completed` (ok, usage, latency) and the model
/// of its last `llm_call` (one made while turn `n` was the turn started or resumed last).
fn turn_outcome(events: &[TraceEvent], n: u64) -> (bool, Usage, Option<u64>, Option<String>) {
    let (mut ok, mut usage, mut latency, mut model) = (false, Usage::default(), None, None);
    let mut current = None;
    for e in events {
        match e {
            TraceEvent::TurnStarted(s) => current = Some(s.turn_seq),
            TraceEvent::TurnResumed(r) => current = Some(r.turn_seq),
            TraceEvent::LlmCall(call) if current == Some(n) => model = Some(call.model.clone()),
            TraceEvent::TurnCompleted(done) if done.turn_seq == n => {
                ok = done.ok;
                usage = done.usage.clone();
                latency = Some(done.duration_ms.max(0.0).round() as u64);
            }
            _ => {}
        }
    }
    (ok, usage, latency, model)
}

/// A person's decision as a recorded call carries it.
fn decision(a: &Approval) -> PersonDecision {
    PersonDecision {
        kind: a.kind,
        status: a.status,
        by: a.decided_by.clone(),
    }
}

/// `GET /v1/threads/{id}/turns/{n}/record`: turn `n` of the thread as it happened (a fork's
/// inherited turn as its parent ran it; a turn a rewind left, with `live: false`).
pub(crate) async fn recorded_turn<C: Conn>(
    c: &mut C,
    id: ThreadId,
    n: u64,
    now: i64,
) -> StoreResult<RecordedTurn> {
    let thread = live_thread(c, id, false).await?;
    let turns = chain_turns(c, &thread.thread_id).await?;
    let Some(listed) = turns.iter().find(|t| to_u64(t.turn_seq) == n) else {
        let ended: Vec<u64> = turns.iter().map(|t| to_u64(t.turn_seq)).collect();
        return Err(StoreError::Absent(format!(
            "thread {id} did not end a turn {n}: {}; a turn is recorded once it ended",
            ended_turns_text(&ended)
        )));
    };
    let ids = current_ids(c, &thread.thread_id, thread.version, thread.history_len).await?;
    let live = turn_live(
        to_u64(listed.history_len),
        listed.last_message_id.as_deref(),
        &ids,
    );
    let row = ran_row(c, &thread.thread_id, listed).await?;
    let messages = turn_messages(c, &row).await?;
    let ran: ThreadId = crate::store::codec::parse_id(&row.thread_id)?;
    let status: Option<(String,)> = query_as("SELECT status FROM threads WHERE thread_id = $1")
        .bind(row.thread_id.as_str())
        .fetch_optional(&mut *c)
        .await?;
    // A purged parent keeps the messages its forks share, not its ledger, requests or events.
    let ran_live = status.is_some_and(|(s,)| s != PURGED);
    let (records, approvals, events) = if ran_live {
        (
            turn_tool_calls(c, ran, n).await?,
            turn_approvals(c, ran, n, now).await?,
            turn_events(c, &row.thread_id).await?,
        )
    } else {
        (Vec::new(), Vec::new(), Vec::new())
    };
    let ledger: Vec<LedgerCall> = records
        .iter()
        .map(|r| LedgerCall {
            tool: r.tool.clone(),
            args: r.args.clone(),
            effect: r.effect,
            person: approvals
                .iter()
                .find(|a| a.kind == ApprovalKind::Approval && a.key == r.key)
                .map(decision),
        })
        .collect();
    let people: Vec<(String, serde_json::Value, PersonDecision)> = approvals
        .iter()
        .filter(|a| a.kind != ApprovalKind::Budget)
        .filter(|a| !records.iter().any(|r| r.key == a.key))
        .map(|a| (a.tool.clone(), a.args.clone(), decision(a)))
        .collect();
    let calls = pair_calls(&messages, &ledger, &people);
    let answer = messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)
        .map(Message::text_content)
        .unwrap_or_default();
    let (ok, usage, latency_ms, model) = turn_outcome(&events, n);
    Ok(RecordedTurn {
        turn_seq: n,
        live,
        input: input_of(&messages),
        messages,
        calls,
        answer,
        ok,
        usage,
        latency_ms,
        model,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::events::{LlmCall, TurnCompleted, TurnStarted};

    fn started(n: u64) -> TraceEvent {
        TraceEvent::TurnStarted(TurnStarted {
            turn_seq: n,
            seq: n,
            input: String::new(),
        })
    }

    fn call(model: &str) -> TraceEvent {
        TraceEvent::LlmCall(LlmCall {
            model: model.into(),
            input_tokens: 1,
            output_tokens: 1,
            cost_usd: 0.0,
            latency_ms: 1,
            stop_reason: "stop".into(),
            tool_calls: 0,
        })
    }

    fn completed(n: u64, ms: f64) -> TraceEvent {
        TraceEvent::TurnCompleted(TurnCompleted {
            turn_seq: n,
            seq: n,
            ok: true,
            reply: String::new(),
            usage: Usage {
                input_tokens: n,
                output_tokens: 2 * n,
                cost_usd: 0.5,
            },
            duration_ms: ms,
            stopped_by: None,
        })
    }

    #[test]
    fn a_turns_outcome_is_its_own_completion_and_its_last_model() {
        let events = vec![
            started(1),
            call("m1"),
            completed(1, 10.4),
            started(2),
            call("m2a"),
            call("m2b"),
            completed(2, 20.6),
            started(3),
            call("m3"),
        ];
        let (ok, usage, latency, model) = turn_outcome(&events, 2);
        assert!(ok);
        assert_eq!(usage.input_tokens, 2);
        assert_eq!(latency, Some(21));
        assert_eq!(model.as_deref(), Some("m2b"));
        let (ok, _, latency, model) = turn_outcome(&events, 3);
        assert!(!ok, "turn 3 never completed");
        assert_eq!(latency, None);
        assert_eq!(model.as_deref(), Some("m3"));
    }

    #[test]
    fn the_input_is_the_first_message_only_when_it_is_the_users() {
        assert_eq!(input_of(&[Message::text(Role::User, "hello")]), "hello");
        assert_eq!(input_of(&[Message::text(Role::Assistant, "hi")]), "");
        assert_eq!(input_of(&[]), "");
    }
}
