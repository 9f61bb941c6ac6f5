//! Checkpoints: appending a version (its messages, its state) to a thread, and reading them back
//! — the version chain, one version with its history, and the latest state assembled as JSON
//! from the stored JSON (with the cached history of `latest`).

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{
    CheckpointCreated, CheckpointRequest, CheckpointState, CommitRequest, ErrorCode, VersionDetail,
    VersionSummary,
};
use ninetrix_proto::message::Message;

use crate::store::checks::{OpenCalls, check_count, check_messages, check_results, needs_tail};
use crate::store::codec::{corrupt, decode_messages, decode_state, encode, time, to_i64, to_u64};
use crate::store::conn::{Conn, query, query_as, rsq};
use crate::store::latest::LatestCache;
use crate::store::{StoreError, StoreResult, latest};

use super::history;
use super::threads::{SELECT_THREAD, ThreadRow, fenced_thread, live};

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

impl rsq::FromRow for VersionRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(VersionRow {
            version: row.get("version")?,
            parent_version: row.get("parent_version")?,
            epoch: row.get("epoch")?,
            truncate_to: row.get("truncate_to")?,
            appended: row.get("appended")?,
            history_len: row.get("history_len")?,
            state: row.get("state")?,
            created_at: row.get("created_at")?,
        })
    }
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

pub(crate) async fn append_checkpoint<C: Conn>(
    c: &mut C,
    id: ThreadId,
    req: &CheckpointRequest,
    now: i64,
) -> StoreResult<CheckpointCreated> {
    check_count("append", req.append.len())?;
    check_messages(&req.append)?;
    let thread = fenced_thread(c, id, req.epoch).await?;
    append_version(c, id, &thread, &VersionWrite::from(req), now).await
}

/// Appends a version to `thread` (read and fenced by the caller, in this transaction).
pub(super) async fn append_version<C: Conn>(
    c: &mut C,
    id: ThreadId,
    thread: &ThreadRow,
    req: &VersionWrite<'_>,
    now: i64,
) -> StoreResult<CheckpointCreated> {
    let head = to_u64(thread.version);
    if req.parent_version != head {
        return Err(StoreError::VersionConflict {
            given: req.parent_version,
            head,
        });
    }
    let old_len = to_u64(thread.history_len);
    let version = head + 1;
    let version_i = to_i64(version, "version")?;
    let mut len = old_len;
    if let Some(cut) = req.truncate_to {
        if cut > old_len {
            return Err(StoreError::Invalid {
                code: ErrorCode::InvalidTruncate,
                message: format!(
                    "truncate_to {cut} is longer than the history ({old_len} messages)"
                ),
            });
        }
        query("UPDATE messages SET superseded_by = $2 WHERE thread_id = $1 AND superseded_by IS NULL AND position >= $3")
            .bind(id.to_string())
            .bind(version_i)
            .bind(to_i64(cut, "truncate_to")?)
            .execute(&mut *c)
            .await?;
        len = cut;
    }
    // What providers refuse: a result for a call the history does not leave open, a
    // message ID the live history already has (the caller checked the shape).
    let open = if needs_tail(req.append) {
        open_calls(c, id, to_i64(len, "history_len")?).await?
    } else {
        OpenCalls::default()
    };
    check_results(open, req.append)?;
    for (i, message) in req.append.iter().enumerate() {
        let seen: Option<(i64,)> = query_as("SELECT position FROM messages WHERE thread_id = $1 AND message_id = $2 AND superseded_by IS NULL")
            .bind(id.to_string())
            .bind(message.id.to_string())
            .fetch_optional(&mut *c)
            .await?;
        if let Some((at,)) = seen {
            return Err(StoreError::Invalid {
                code: ErrorCode::InvalidHistory,
                message: format!(
                    "`append[{i}].id` {} is already message {at} of the history: every message has its own ID",
                    message.id
                ),
            });
        }
    }
    for message in req.append {
        query("INSERT INTO messages (thread_id, version, position, body, message_id) VALUES ($1, $2, $3, $4, $5)")
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
            message: format!(
                "turn_start_history_len {} is past the end of the history ({len} messages)",
                req.state.turn_start_history_len
            ),
        });
    }
    query(
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
    query("UPDATE threads SET version = $2, history_len = $3, status = $4, updated_at = $5, inbox_cursor = $6, context = $7 WHERE thread_id = $1")
        .bind(id.to_string())
        .bind(version_i)
        .bind(to_i64(len, "history_len")?)
        .bind(req.state.status.as_str())
        .bind(now)
        .bind(to_i64(req.state.inbox_cursor, "inbox_cursor")?)
        .bind(req.state.context.as_ref().map(encode).transpose()?)
        .execute(&mut *c)
        .await?;
    Ok(CheckpointCreated {
        version,
        history_len: len,
    })
}

/// The calls the live history before `len` leaves open (see [`OpenCalls`]): its tail
/// read backwards to the last message that is not a tool message. Only the thread's own rows
/// are read: a fork's shared prefix ends at a turn's end, where no call is open (forks are made
/// only there), so a tail that reaches the prefix has nothing open before it.
async fn open_calls<C: Conn>(c: &mut C, id: ThreadId, len: i64) -> StoreResult<OpenCalls> {
    let mut tail: Vec<ninetrix_proto::message::Message> = Vec::new();
    let mut before = len;
    'pages: loop {
        let rows: Vec<(i64, String)> = query_as("SELECT position, body FROM messages WHERE thread_id = $1 AND superseded_by IS NULL AND position < $2 ORDER BY position DESC LIMIT 32")
            .bind(id.to_string())
            .bind(before)
            .fetch_all(&mut *c)
            .await?;
        if rows.is_empty() {
            break;
        }
        for (position, body) in rows {
            let message: ninetrix_proto::message::Message =
                serde_json::from_str(&body).map_err(|e| corrupt("message", &e.to_string()))?;
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

/// The latest state as a JSON document (a `ThreadState`), spliced from the stored JSON
/// of the state and of each message without decoding them.
pub(crate) async fn latest_json<C: Conn>(
    c: &mut C,
    id: ThreadId,
    cache: &LatestCache,
) -> StoreResult<Option<String>> {
    let thread: Option<ThreadRow> = query_as(SELECT_THREAD)
        .bind(id.to_string())
        .fetch_optional(&mut *c)
        .await?;
    let Some(thread) = thread
        .map(|t| live(id, t))
        .transpose()?
        .filter(|t| t.version > 0)
    else {
        return Ok(None);
    };
    let head = thread.version;
    // Versions are never changed once written, so the state of `head` and the messages
    // appended up to `head` read the same whatever is committed meanwhile.
    let (state,): (String,) =
        query_as("SELECT state FROM versions WHERE thread_id = $1 AND version = $2")
            .bind(id.to_string())
            .bind(head)
            .fetch_one(&mut *c)
            .await?;
    let history = match cache
        .get(id, thread.created_at)
        .filter(|e| e.version <= head)
    {
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
    Ok(Some(splice_state(
        id,
        to_u64(head),
        to_u64(thread.epoch),
        &state,
        history.history.text(),
    )))
}

/// The cached history extended to `head` by the versions since — each one's cut (a
/// repair) and then its messages — or `None` when the rows do not fit it (then the
/// history is rebuilt).
async fn extend_history<C: Conn>(
    c: &mut C,
    id: ThreadId,
    hit: latest::Cached,
    head: i64,
    len: i64,
) -> StoreResult<Option<latest::Cached>> {
    let cuts: Vec<(i64, i64)> = query_as("SELECT version, truncate_to FROM versions WHERE thread_id = $1 AND version > $2 AND version <= $3 AND truncate_to IS NOT NULL")
        .bind(id.to_string())
        .bind(hit.version)
        .bind(head)
        .fetch_all(&mut *c)
        .await?;
    // Every message of the versions since sits at or after the cached length, or after
    // the shortest cut among them.
    let cached_len = i64::try_from(hit.history.len()).unwrap_or(i64::MAX);
    let from = cuts.iter().map(|c| c.1).fold(cached_len, i64::min);
    let rows: Vec<(i64, i64, String)> = query_as("SELECT version, position, body FROM messages WHERE thread_id = $1 AND position >= $4 AND version > $2 AND version <= $3")
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
        return Err(corrupt(
            "history",
            &format!(
                "{} messages up to version {head}, expected {len}",
                history.len()
            ),
        ));
    }
    Ok(Some(latest::Cached {
        created_at: hit.created_at,
        version: head,
        history: std::sync::Arc::new(history),
    }))
}

/// The live history read whole: the rows of each segment (a fork's shared prefix first, see
/// `history`) in position order straight off an index (SQLite's primary key, Postgres' partial
/// index of live rows), appended as they arrive. (An ordered aggregate would sort megabytes of
/// JSON.)
async fn live_history<C: Conn>(
    c: &mut C,
    id: ThreadId,
    created_at: i64,
    head: i64,
    len: i64,
) -> StoreResult<latest::Cached> {
    let mut history = latest::Joined::default();
    let segments = history::segments(c, &id.to_string(), head, len, true).await?;
    history::for_each_row(c, &segments, history::Column::Body, |body| {
        history.push(body.as_deref().unwrap_or_default())
    })
    .await?;
    if i64::try_from(history.len()).ok() != Some(len) {
        return Err(corrupt(
            "history",
            &format!("{} live messages, expected {len}", history.len()),
        ));
    }
    Ok(latest::Cached {
        created_at,
        version: head,
        history: std::sync::Arc::new(history),
    })
}

pub(crate) async fn versions<C: Conn>(c: &mut C, id: ThreadId) -> StoreResult<Vec<VersionSummary>> {
    let rows: Vec<VersionRow> = query_as(
        "SELECT version, parent_version, epoch, truncate_to, appended, history_len, state, created_at FROM versions WHERE thread_id = $1 ORDER BY version",
    )
    .bind(id.to_string())
    .fetch_all(&mut *c)
    .await?;
    rows.into_iter().map(VersionRow::summary).collect()
}

pub(crate) async fn version<C: Conn>(
    c: &mut C,
    id: ThreadId,
    version: u64,
) -> StoreResult<Option<VersionDetail>> {
    let v = to_i64(version, "version")?;
    let row: Option<VersionRow> = query_as(
        "SELECT version, parent_version, epoch, truncate_to, appended, history_len, state, created_at FROM versions WHERE thread_id = $1 AND version = $2",
    )
    .bind(id.to_string())
    .bind(v)
    .fetch_optional(&mut *c)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let segments = history::segments(c, &id.to_string(), v, row.history_len, false).await?;
    let history = decode_messages(history::bodies(c, &segments).await?)?;
    Ok(Some(VersionDetail {
        summary: row.summary()?,
        history,
    }))
}
