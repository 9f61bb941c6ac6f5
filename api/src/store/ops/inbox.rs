//! The inbox: messages put in a thread, numbered in order, each with the mode it resolves to
//! (the sender's, else the thread's `on_busy`, else `queue`) against the turn the thread is in
//! or about to start — a `reject` that finds one is refused; whom a new message wakes when the
//! thread is a session's; and reading them after a seq.

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    CheckpointState, Control, EnqueueResponse, HandoffOrigin, InboxMessage, MessageMode,
    RunningTurn, ThreadStatus,
};

use crate::store::codec::{corrupt, decode_state, encode, time, to_i64, to_u64};
use crate::store::conn::{Conn, query, query_as, rsq};
use crate::store::{StoreError, StoreResult};

use super::sessions::agent_replicas;
use super::threads::not_purged;

/// What an enqueue's update returns: the new inbox seq, the labels that say whether the thread
/// is a session's, and its stored owner; and where the thread stands (its status, cursor and
/// head version, the mode of a message sent without one).
#[derive(sqlx::FromRow)]
pub(crate) struct Enqueued {
    pub(crate) inbox_seq: i64,
    pub(crate) pool: Option<String>,
    pub(crate) agent: Option<String>,
    pub(crate) session: Option<String>,
    pub(crate) session_replicas: i64,
    pub(crate) session_replica: i64,
    pub(crate) status: String,
    pub(crate) inbox_cursor: i64,
    pub(crate) version: i64,
    pub(crate) on_busy: Option<String>,
}

impl rsq::FromRow for Enqueued {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Enqueued {
            inbox_seq: row.get("inbox_seq")?,
            pool: row.get("pool")?,
            agent: row.get("agent")?,
            session: row.get("session")?,
            session_replicas: row.get("session_replicas")?,
            session_replica: row.get("session_replica")?,
            status: row.get("status")?,
            inbox_cursor: row.get("inbox_cursor")?,
            version: row.get("version")?,
            on_busy: row.get("on_busy")?,
        })
    }
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

#[derive(sqlx::FromRow)]
pub(crate) struct InboxRow {
    pub(crate) seq: i64,
    pub(crate) content: String,
    pub(crate) dedupe_key: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) origin: Option<String>,
    pub(crate) control: Option<String>,
    pub(crate) mode: String,
    pub(crate) sender: Option<String>,
    pub(crate) to_turn: Option<i64>,
}

impl rsq::FromRow for InboxRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(InboxRow {
            seq: row.get("seq")?,
            content: row.get("content")?,
            dedupe_key: row.get("dedupe_key")?,
            created_at: row.get("created_at")?,
            origin: row.get("origin")?,
            control: row.get("control")?,
            mode: row.get("mode")?,
            sender: row.get("sender")?,
            to_turn: row.get("to_turn")?,
        })
    }
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
            control: self
                .control
                .map(|c| Control::parse(&c).ok_or_else(|| corrupt("inbox control", &c)))
                .transpose()?,
            to_turn: self.to_turn.map(to_u64),
            mode: MessageMode::parse(&self.mode)
                .ok_or_else(|| corrupt("inbox mode", &self.mode))?,
            by: self.sender,
        })
    }
}

/// A message to put in an inbox: its text and where it comes from, and what it asks to do if
/// the thread is busy.
pub(super) struct NewMessage<'a> {
    /// The text (a control's note for people).
    pub(super) content: &'a str,
    /// The dedupe key (the caller checked it is new on the thread).
    pub(super) dedupe_key: Option<&'a str>,
    /// The handed-over task it is (or, for a cancel, the task it is aimed at).
    pub(super) origin: Option<&'a HandoffOrigin>,
    /// An instruction to the runner instead of work for the model (always mode `queue`).
    pub(super) control: Option<Control>,
    /// The mode its sender asked for; `None`: the thread's `on_busy`, else `queue`.
    pub(super) mode: Option<MessageMode>,
    /// Who sent it (a cancel's sender).
    pub(super) sender: Option<&'a str>,
    /// Whether a `reject` refuses it while the thread is busy (409 `busy`, its sender told).
    /// A message nobody could be told of a refusal for (a trigger's fire, whose overlap policy
    /// already decided) is queued instead.
    pub(super) refusable: bool,
}

impl<'a> NewMessage<'a> {
    /// Work for the model with this text, sent with `mode`, refused when busy if it resolves to
    /// `reject` and `refusable`.
    pub(super) fn work(content: &'a str, mode: Option<MessageMode>, refusable: bool) -> Self {
        NewMessage {
            content,
            dedupe_key: None,
            origin: None,
            control: None,
            mode,
            sender: None,
            refusable,
        }
    }
}

/// A message put in an inbox.
pub(super) struct Inserted {
    /// The answer to its sender: its seq, the mode it was stored with, the turn it found.
    pub(super) response: EnqueueResponse,
    /// Whom to wake when the thread is a session's.
    pub(super) session: Option<SessionOf>,
    /// The turn it found, when that turn waits on people or collaborators (status `waiting`):
    /// what an interrupt of it settles.
    pub(super) waiting: Option<u64>,
}

/// Whom a committed write wakes: threads (their inbox long-polls, their turns' waits on people
/// and collaborators, their event streams) and the replicas serving sessions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wake {
    /// Threads whose waiters to wake.
    pub threads: Vec<ThreadId>,
    /// Sessions whose owning replica to wake.
    pub sessions: Vec<SessionOf>,
}

impl Wake {
    /// Adds a thread (once) and, when it is a session's, its replica.
    pub(crate) fn add(&mut self, thread: ThreadId, session: Option<SessionOf>) {
        if !self.threads.contains(&thread) {
            self.threads.push(thread);
        }
        if let Some(s) = session
            && !self.sessions.contains(&s)
        {
            self.sessions.push(s);
        }
    }

    /// Adds everything `other` wakes.
    pub(crate) fn extend(&mut self, other: Wake) {
        for thread in other.threads {
            self.add(thread, None);
        }
        for s in other.sessions {
            if !self.sessions.contains(&s) {
                self.sessions.push(s);
            }
        }
    }
}

/// Whether a thread's stored status is a turn's (`in_turn`, or `waiting` on people or
/// collaborators).
pub(super) fn in_turn(status: &str) -> bool {
    status == ThreadStatus::InTurn.as_str() || status == ThreadStatus::Waiting.as_str()
}

/// The turn a thread is in or about to start, as its row and latest state say — what a message
/// arriving now would find. In a turn (`in_turn` or `waiting`): that turn and the message it
/// answers. Else, when work waits after the cursor (`pending`: the first message for the model
/// not taken yet): the next turn, which answers it. Else none.
fn running_turn(
    status: &str,
    inbox_cursor: u64,
    state: Option<&CheckpointState>,
    pending: Option<u64>,
) -> Option<RunningTurn> {
    let turn_seq = state.map_or(0, |s| s.turn_seq);
    if in_turn(status) {
        return Some(RunningTurn {
            turn_seq,
            seq: state.map_or(inbox_cursor, CheckpointState::turn_input),
        });
    }
    pending.map(|seq| RunningTurn {
        turn_seq: turn_seq + 1,
        seq,
    })
}

/// The latest version's state of a thread (`None` before its first version).
pub(super) async fn latest_state<C: Conn>(
    c: &mut C,
    id: ThreadId,
    version: i64,
) -> StoreResult<Option<CheckpointState>> {
    if version == 0 {
        return Ok(None);
    }
    let state: Option<(String,)> =
        query_as("SELECT state FROM versions WHERE thread_id = $1 AND version = $2")
            .bind(id.to_string())
            .bind(version)
            .fetch_optional(&mut *c)
            .await?;
    state.map(|(s,)| decode_state(&s)).transpose()
}

/// Where a thread stands for a message arriving now (see [`running_turn`]): its stored
/// `status`, `inbox_cursor` and head `version`; `last` is its last inbox seq before that message.
pub(super) async fn thread_turn<C: Conn>(
    c: &mut C,
    id: ThreadId,
    (status, inbox_cursor, version): (&str, i64, i64),
    last: i64,
) -> StoreResult<Option<RunningTurn>> {
    let in_turn = in_turn(status);
    let waits = last > inbox_cursor;
    if !in_turn && !waits {
        return Ok(None);
    }
    let state = latest_state(c, id, version).await?;
    let pending = if in_turn {
        None
    } else {
        // Messages after the cursor that the runner took out of order (a steer, an interrupt)
        // are few: the first untaken one for the model is within that many more.
        let taken = state.as_ref().map_or(0, |s| s.inbox_taken.len());
        let seqs: Vec<(i64,)> = query_as("SELECT seq FROM inbox WHERE thread_id = $1 AND seq > $2 AND seq <= $3 AND control IS NULL ORDER BY seq LIMIT $4")
            .bind(id.to_string())
            .bind(inbox_cursor)
            .bind(last)
            .bind(i64::try_from(taken).unwrap_or(i64::MAX).saturating_add(1))
            .fetch_all(&mut *c)
            .await?;
        seqs.into_iter()
            .map(|(seq,)| to_u64(seq))
            .find(|&seq| !state.as_ref().is_some_and(|s| s.taken(seq)))
    };
    Ok(running_turn(
        status,
        to_u64(inbox_cursor),
        state.as_ref(),
        pending,
    ))
}

/// Adds a message after the thread's last (the caller checked its dedupe key is new), with the
/// mode it resolves to: the one asked for, else the thread's `on_busy`, else `queue` (a control
/// is always `queue`). A `reject` that finds the thread in a turn or about to start one is
/// refused (`StoreError::Busy`: the caller's transaction rolls back, nothing is stored) when the
/// message is refusable, and queued otherwise; a `reject` that finds no turn is stored as
/// `queue`. The answer names the turn it found, if any.
pub(super) async fn insert_inbox<C: Conn>(
    c: &mut C,
    id: ThreadId,
    m: &NewMessage<'_>,
    now: i64,
) -> StoreResult<Inserted> {
    let next: Enqueued = query_as("UPDATE threads SET inbox_seq = inbox_seq + 1, updated_at = $2 WHERE thread_id = $1 \
        RETURNING inbox_seq, pool, agent, session, session_replicas, session_replica, status, inbox_cursor, version, on_busy")
        .bind(id.to_string())
        .bind(now)
        .fetch_one(&mut *c)
        .await?;
    let running = thread_turn(
        c,
        id,
        (&next.status, next.inbox_cursor, next.version),
        next.inbox_seq - 1,
    )
    .await?;
    let default = next
        .on_busy
        .as_deref()
        .map(|m| MessageMode::parse(m).ok_or_else(|| corrupt("thread on_busy", m)))
        .transpose()?;
    let mode = match (m.control, m.mode.or(default).unwrap_or_default()) {
        (Some(_), _) => MessageMode::Queue,
        (None, MessageMode::Reject) => match running {
            Some(turn) if m.refusable => {
                return Err(StoreError::Busy {
                    thread: id,
                    running: turn,
                    started: in_turn(&next.status),
                });
            }
            _ => MessageMode::Queue,
        },
        (None, mode) => mode,
    };
    query("INSERT INTO inbox (thread_id, seq, content, dedupe_key, created_at, origin, control, mode, sender) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)")
        .bind(id.to_string())
        .bind(next.inbox_seq)
        .bind(m.content)
        .bind(m.dedupe_key)
        .bind(now)
        .bind(m.origin.map(encode).transpose()?)
        .bind(m.control.map(Control::as_str))
        .bind(mode.as_str())
        .bind(m.sender)
        .execute(&mut *c)
        .await?;
    let seq = to_u64(next.inbox_seq);
    let waiting = (next.status == ThreadStatus::Waiting.as_str())
        .then(|| running.map(|r| r.turn_seq))
        .flatten();
    let replicas = match (&next.pool, &next.agent, &next.session) {
        (Some(pool), Some(agent), Some(_)) => agent_replicas(c, pool, agent).await?,
        _ => 1,
    };
    Ok(Inserted {
        response: EnqueueResponse {
            seq,
            duplicate: false,
            mode,
            running,
        },
        session: next.session_of(replicas),
        waiting,
    })
}

pub(crate) async fn inbox_after<C: Conn>(
    c: &mut C,
    id: ThreadId,
    after: u64,
    limit: u32,
) -> StoreResult<Vec<InboxMessage>> {
    // A runner idle on a purged thread long-polls its inbox: told here, it stops.
    not_purged(c, id).await?;
    let rows: Vec<InboxRow> = query_as("SELECT seq, content, dedupe_key, created_at, origin, control, mode, sender, to_turn FROM inbox WHERE thread_id = $1 AND seq > $2 ORDER BY seq LIMIT $3")
        .bind(id.to_string())
        .bind(to_i64(after, "after")?)
        .bind(i64::from(limit))
        .fetch_all(&mut *c)
        .await?;
    rows.into_iter().map(InboxRow::message).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(turn_seq: u64, cursor: u64, turn_message: Option<u64>) -> CheckpointState {
        CheckpointState {
            turn_seq,
            inbox_cursor: cursor,
            turn_message,
            ..Default::default()
        }
    }

    #[test]
    fn a_message_finds_the_turn_running_or_the_one_its_predecessor_starts() {
        let turn = |turn_seq, seq| Some(RunningTurn { turn_seq, seq });
        // In a turn (or waiting in one): that turn and the message it answers — the cursor for
        // an older runner's state.
        for status in ["in_turn", "waiting"] {
            assert_eq!(
                running_turn(status, 4, Some(&state(3, 4, Some(6))), None),
                turn(3, 6)
            );
            assert_eq!(
                running_turn(status, 4, Some(&state(3, 4, None)), None),
                turn(3, 4)
            );
        }
        // Between turns: the next turn when work waits after the cursor, else none.
        assert_eq!(
            running_turn("idle", 4, Some(&state(3, 4, Some(4))), Some(5)),
            turn(4, 5)
        );
        assert_eq!(running_turn("idle", 0, None, Some(1)), turn(1, 1));
        assert_eq!(
            running_turn("idle", 4, Some(&state(3, 4, None)), None),
            None
        );
        assert_eq!(
            running_turn("done", 4, Some(&state(3, 4, None)), None),
            None
        );
    }
}
