//! Sessions and replicas: the thread of a session key (created on first use, owned by one
//! replica of its agent), the thread of each replica, the replica count `up` records (and the
//! owners it moves), and the sessions with work for one replica.

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::ThreadSummary;

use crate::store::codec::{encode, to_u64};
use crate::store::conn::{AssertSqlSafe, Conn, for_write, query, query_as};
use crate::store::{StoreError, StoreResult};

use super::threads::{PURGED, SELECT_THREAD, ThreadRow};

/// The thread of session `key` of (pool, agent): created on first use (a new UUID v7,
/// labelled with the three), the same ever after. `true` when created now.
pub(crate) async fn open_session<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: &str,
    key: &str,
    now: i64,
) -> StoreResult<(ThreadSummary, bool)> {
    let found: Option<ThreadRow> = query_as(for_write::<C>(concat!(
        "SELECT ",
        thread_columns!(),
        " FROM threads WHERE pool = $1 AND agent = $2 AND session = $3"
    )))
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
    let inserted = insert_session(c, ThreadId::new_v7(), pool, agent, key, now).await?;
    let row: ThreadRow = query_as(for_write::<C>(concat!(
        "SELECT ",
        thread_columns!(),
        " FROM threads WHERE pool = $1 AND agent = $2 AND session = $3"
    )))
    .bind(pool)
    .bind(agent)
    .bind(key)
    .fetch_optional(&mut *c)
    .await?
    .ok_or(StoreError::NotFound("session"))?;
    Ok((row.summary()?, inserted))
}

/// Inserts thread `id` as session `key` of (pool, agent), with the replica that owns it, unless
/// the key has a thread already; `true` when inserted.
pub(super) async fn insert_session<C: Conn>(
    c: &mut C,
    id: ThreadId,
    pool: &str,
    agent: &str,
    key: &str,
    now: i64,
) -> StoreResult<bool> {
    let replicas = agent_replicas(c, pool, agent).await?;
    Ok(query(
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
        == 1)
}

/// How many replicas (pool, agent) runs as `up` last recorded it (1 when never).
pub(super) async fn agent_replicas<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: &str,
) -> StoreResult<u32> {
    let row: Option<(i64,)> =
        query_as("SELECT replicas FROM agents WHERE pool = $1 AND agent = $2")
            .bind(pool)
            .bind(agent)
            .fetch_optional(&mut *c)
            .await?;
    Ok(row
        .and_then(|(n,)| u32::try_from(n).ok())
        .unwrap_or(1)
        .max(1))
}

/// The thread the API keeps for replica `replica` of (pool, agent), its row locked.
async fn replica_mapping<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: &str,
    replica: i64,
) -> StoreResult<Option<String>> {
    let row: Option<(String,)> = query_as(for_write::<C>(
        "SELECT thread_id FROM replica_threads WHERE pool = $1 AND agent = $2 AND replica = $3",
    ))
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
pub(crate) async fn replica_thread<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: &str,
    replica: u32,
    now: i64,
    crash: fn(&str),
) -> StoreResult<(ThreadSummary, bool)> {
    let replica_i64 = i64::from(replica);
    let mut made = None;
    let current = match replica_mapping(c, pool, agent, replica_i64).await? {
        Some(id) => id,
        None => {
            let adopted: Option<(String,)> = query_as(
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
            query("INSERT INTO replica_threads (pool, agent, replica, thread_id, created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING")
                .bind(pool)
                .bind(agent)
                .bind(replica_i64)
                .bind(&candidate)
                .bind(now)
                .execute(&mut *c)
                .await?;
            let id = replica_mapping(c, pool, agent, replica_i64)
                .await?
                .ok_or(StoreError::NotFound("replica thread"))?;
            if made.as_deref() != Some(id.as_str()) {
                made = None;
            }
            id
        }
    };
    let status: Option<(String,)> = query_as("SELECT status FROM threads WHERE thread_id = $1")
        .bind(&current)
        .fetch_optional(&mut *c)
        .await?;
    let current = if status.as_ref().is_some_and(|(s,)| s == PURGED) {
        let id = ThreadId::new_v7().to_string();
        let moved = query("UPDATE replica_threads SET thread_id = $4, created_at = $5 WHERE pool = $1 AND agent = $2 AND replica = $3 AND thread_id = $6")
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
            replica_mapping(c, pool, agent, replica_i64)
                .await?
                .ok_or(StoreError::NotFound("replica thread"))?
        }
    } else {
        current
    };
    if made.as_deref() == Some(current.as_str()) || status.is_none() {
        query("INSERT INTO threads (thread_id, pool, agent, replica, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (thread_id) DO NOTHING")
            .bind(&current)
            .bind(pool)
            .bind(agent)
            .bind(replica_i64)
            .bind(now)
            .execute(&mut *c)
            .await?;
    }
    let row: ThreadRow = query_as(for_write::<C>(SELECT_THREAD))
        .bind(&current)
        .fetch_one(&mut *c)
        .await?;
    let created = made.as_deref() == Some(current.as_str());
    if created {
        crash("replica_thread_before_commit");
    }
    Ok((row.summary()?, created))
}

/// Records how many replicas (pool, agent) runs — what its sessions are spread over — which
/// agents it may hand work to, and what its A2A card says (`None`: no card is served).
pub(crate) async fn set_replicas<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: &str,
    replicas: u32,
    collaborators: &[String],
    card: Option<&ninetrix_proto::api::AgentCardInfo>,
    now: i64,
) -> StoreResult<()> {
    query(
        "INSERT INTO agents (pool, agent, replicas, collaborators, card, updated_at) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (pool, agent) DO UPDATE SET replicas = excluded.replicas, collaborators = excluded.collaborators, card = excluded.card, updated_at = excluded.updated_at",
    )
    .bind(pool)
    .bind(agent)
    .bind(i64::from(replicas))
    .bind(encode(&collaborators)?)
    .bind(card.map(encode).transpose()?)
    .bind(now)
    .execute(&mut *c)
    .await?;
    store_session_owners(c, pool, agent, replicas).await
}

/// Stores the owner of every session of (pool, agent) whose stored owner was computed for
/// another replica count than `replicas` (all of them when the count changed; none when
/// `up` records the same count again). Each owner follows from the stored one where it
/// can (`sessions::owner_after`: one score per added replica).
async fn store_session_owners<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: &str,
    replicas: u32,
) -> StoreResult<()> {
    let n = i64::from(replicas);
    let stale: Vec<(String, String, i64, i64)> = query_as(
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
    let mut by_owner: std::collections::BTreeMap<u32, Vec<&str>> =
        std::collections::BTreeMap::new();
    for (id, key, from_replicas, from_owner) in &stale {
        let from = u32::try_from(*from_replicas)
            .ok()
            .zip(u32::try_from(*from_owner).ok());
        by_owner
            .entry(ninetrix_proto::sessions::owner_after(key, from, replicas))
            .or_default()
            .push(id);
    }
    for (owner, ids) in by_owner {
        for chunk in ids.chunks(500) {
            let marks: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 3)).collect();
            let sql = format!(
                "UPDATE threads SET session_replicas = $1, session_replica = $2 WHERE thread_id IN ({})",
                marks.join(", ")
            );
            let mut update = query(AssertSqlSafe(sql)).bind(n).bind(i64::from(owner));
            for id in chunk {
                update = update.bind(*id);
            }
            update.execute(&mut *c).await?;
        }
    }
    Ok(())
}

/// The sessions of (pool, agent) that replica `replica` of `replicas` owns and that have
/// work (messages after their cursor, or a turn in progress: `in_turn`, `waiting`),
/// oldest first, each with its stored cursor. One range of the partial index
/// `threads_session_work` — the replica's own sessions with work, whatever the number of
/// sessions — plus the rows whose stored owner was computed for another count (none,
/// unless a session was opened while the count changed), whose owner is computed here.
pub(crate) async fn session_work<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: &str,
    replicas: u32,
    replica: u32,
) -> StoreResult<Vec<(ThreadSummary, u64)>> {
    const WORK: &str = concat!(
        "SELECT ",
        thread_columns!(),
        " FROM threads WHERE pool = $1 AND agent = $2 AND session IS NOT NULL \
         AND (inbox_seq > inbox_cursor OR status IN ('in_turn', 'waiting')) AND "
    );
    let own: Vec<ThreadRow> = query_as(AssertSqlSafe(format!(
        "{WORK}session_replicas = $3 AND session_replica = $4"
    )))
    .bind(pool)
    .bind(agent)
    .bind(i64::from(replicas))
    .bind(i64::from(replica))
    .fetch_all(&mut *c)
    .await?;
    let mut rows = own;
    for stale in ["session_replicas < $3", "session_replicas > $3"] {
        let found: Vec<ThreadRow> = query_as(AssertSqlSafe(format!("{WORK}{stale}")))
            .bind(pool)
            .bind(agent)
            .bind(i64::from(replicas))
            .fetch_all(&mut *c)
            .await?;
        rows.extend(found.into_iter().filter(|r| {
            r.session
                .as_deref()
                .is_some_and(|key| ninetrix_proto::sessions::owner(key, replicas) == replica)
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
pub(crate) async fn replicas<C: Conn>(
    c: &mut C,
    pool: &str,
    agent: &str,
) -> StoreResult<Option<u32>> {
    let row: Option<(i64,)> =
        query_as("SELECT replicas FROM agents WHERE pool = $1 AND agent = $2")
            .bind(pool)
            .bind(agent)
            .fetch_optional(&mut *c)
            .await?;
    Ok(row.and_then(|(n,)| u32::try_from(n).ok()))
}
