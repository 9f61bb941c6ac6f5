//! The inbox: messages put in a thread (once per dedupe key), numbered in order; whom a new
//! message wakes when the thread is a session's; and reading them after a seq.

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    Control, EnqueueRequest, EnqueueResponse, HandoffOrigin, InboxMessage, ThreadLabels,
};

use crate::store::checks::check_key;
use crate::store::codec::{corrupt, encode, time, to_i64, to_u64};
use crate::store::conn::{Conn, query, query_as, rsq};
use crate::store::{StoreError, StoreResult};

use super::sessions::agent_replicas;
use super::threads::{ensure_thread, not_purged};

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

impl rsq::FromRow for Enqueued {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Enqueued {
            inbox_seq: row.get("inbox_seq")?,
            pool: row.get("pool")?,
            agent: row.get("agent")?,
            session: row.get("session")?,
            session_replicas: row.get("session_replicas")?,
            session_replica: row.get("session_replica")?,
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
            mode: Default::default(),
            by: None,
        })
    }
}

/// Puts a message in the inbox; also returns the session's agent and owner when the
/// thread is a session's and the message is new, so its replica can be woken.
pub(crate) async fn enqueue<C: Conn>(
    c: &mut C,
    id: ThreadId,
    req: &EnqueueRequest,
    now: i64,
) -> StoreResult<(EnqueueResponse, Option<SessionOf>)> {
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
        let stored: Option<(i64, String, Option<String>)> = query_as(
            "SELECT seq, content, control FROM inbox WHERE thread_id = $1 AND dedupe_key = $2",
        )
        .bind(id.to_string())
        .bind(key)
        .fetch_optional(&mut *c)
        .await?;
        match stored {
            Some((seq, content, control))
                if content == req.content
                    && control.as_deref() == req.control.map(Control::as_str) =>
            {
                return Ok((
                    EnqueueResponse {
                        seq: to_u64(seq),
                        duplicate: true,
                        mode: Default::default(),
                        running: None,
                    },
                    None,
                ));
            }
            Some((seq, _, _)) => {
                return Err(StoreError::KeyReused(format!(
                    "dedupe_key {key:?} is stored with other content (message {seq}); the stored message is unchanged: send new content under a new key"
                )));
            }
            None => {}
        }
    }
    let origin = None;
    let (content, key) = (&req.content, req.dedupe_key.as_deref());
    insert_inbox(c, id, content, key, origin, req.control, now).await
}

/// Adds a message after the thread's last (the caller checked its dedupe key is new);
/// also returns whom to wake when the thread is a session's.
pub(super) async fn insert_inbox<C: Conn>(
    c: &mut C,
    id: ThreadId,
    content: &str,
    dedupe_key: Option<&str>,
    origin: Option<&HandoffOrigin>,
    control: Option<Control>,
    now: i64,
) -> StoreResult<(EnqueueResponse, Option<SessionOf>)> {
    let next: Enqueued = query_as("UPDATE threads SET inbox_seq = inbox_seq + 1, updated_at = $2 WHERE thread_id = $1 RETURNING inbox_seq, pool, agent, session, session_replicas, session_replica")
        .bind(id.to_string())
        .bind(now)
        .fetch_one(&mut *c)
        .await?;
    query("INSERT INTO inbox (thread_id, seq, content, dedupe_key, created_at, origin, control) VALUES ($1, $2, $3, $4, $5, $6, $7)")
        .bind(id.to_string())
        .bind(next.inbox_seq)
        .bind(content)
        .bind(dedupe_key)
        .bind(now)
        .bind(origin.map(encode).transpose()?)
        .bind(control.map(Control::as_str))
        .execute(&mut *c)
        .await?;
    let seq = to_u64(next.inbox_seq);
    let replicas = match (&next.pool, &next.agent, &next.session) {
        (Some(pool), Some(agent), Some(_)) => agent_replicas(c, pool, agent).await?,
        _ => 1,
    };
    Ok((
        EnqueueResponse {
            seq,
            duplicate: false,
            mode: Default::default(),
            running: None,
        },
        next.session_of(replicas),
    ))
}

pub(crate) async fn inbox_after<C: Conn>(
    c: &mut C,
    id: ThreadId,
    after: u64,
    limit: u32,
) -> StoreResult<Vec<InboxMessage>> {
    // A runner idle on a purged thread long-polls its inbox: told here, it stops.
    not_purged(c, id).await?;
    let rows: Vec<InboxRow> = query_as("SELECT seq, content, dedupe_key, created_at, origin, control FROM inbox WHERE thread_id = $1 AND seq > $2 ORDER BY seq LIMIT $3")
        .bind(id.to_string())
        .bind(to_i64(after, "after")?)
        .bind(i64::from(limit))
        .fetch_all(&mut *c)
        .await?;
    rows.into_iter().map(InboxRow::message).collect()
}
