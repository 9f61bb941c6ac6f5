//! Trace events: appended after a thread's last (by its fenced runner, or by a decision), and
//! read after a seq.

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{Event, EventsRequest, NewEvent};

use crate::store::StoreResult;
use crate::store::checks::check_events;
use crate::store::codec::{corrupt, encode, time, to_i64, to_u64};
use crate::store::conn::{Conn, query, query_as, rsq};

use super::threads::fenced_thread;

#[derive(sqlx::FromRow)]
pub(crate) struct EventRow {
    pub(crate) seq: i64,
    pub(crate) kind: String,
    pub(crate) data: String,
    pub(crate) epoch: i64,
    pub(crate) created_at: i64,
}

impl rsq::FromRow for EventRow {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(EventRow {
            seq: row.get("seq")?,
            kind: row.get("kind")?,
            data: row.get("data")?,
            epoch: row.get("epoch")?,
            created_at: row.get("created_at")?,
        })
    }
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

pub(crate) async fn append_events<C: Conn>(
    c: &mut C,
    id: ThreadId,
    req: &EventsRequest,
    now: i64,
) -> StoreResult<u64> {
    check_events("events", &req.events)?;
    let thread = fenced_thread(c, id, req.epoch).await?;
    insert_events(c, id, thread.event_seq, req.epoch, &req.events, now).await
}

/// Stores `events` after the thread's last event (`event_seq`); returns the new last seq.
/// The caller has fenced the writer and checked the events ([`check_events`]).
pub(super) async fn insert_events<C: Conn>(
    c: &mut C,
    id: ThreadId,
    event_seq: i64,
    epoch: u64,
    events: &[NewEvent],
    now: i64,
) -> StoreResult<u64> {
    let mut seq = event_seq;
    for e in events {
        seq += 1;
        query("INSERT INTO events (thread_id, seq, kind, data, epoch, created_at) VALUES ($1, $2, $3, $4, $5, $6)")
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
        query("UPDATE threads SET event_seq = $2, updated_at = $3 WHERE thread_id = $1")
            .bind(id.to_string())
            .bind(seq)
            .bind(now)
            .execute(&mut *c)
            .await?;
    }
    Ok(to_u64(seq))
}

pub(crate) async fn events_after<C: Conn>(
    c: &mut C,
    id: ThreadId,
    after: u64,
    limit: u32,
) -> StoreResult<Vec<Event>> {
    let rows: Vec<EventRow> = query_as("SELECT seq, kind, data, epoch, created_at FROM events WHERE thread_id = $1 AND seq > $2 ORDER BY seq LIMIT $3")
        .bind(id.to_string())
        .bind(to_i64(after, "after")?)
        .bind(i64::from(limit))
        .fetch_all(&mut *c)
        .await?;
    rows.into_iter().map(EventRow::event).collect()
}
