//! How values are stored and read back, for every table: integers as BIGINT (`to_i64`,
//! `to_u64`), times as Unix milliseconds (`time`), IDs and JSON as text (`parse_id`, `encode`,
//! `decode_state`, `decode_messages`), a thread's labels from its columns, and the error for
//! stored data that does not read back (`corrupt`).

use chrono::{DateTime, TimeZone, Utc};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{CheckpointState, ErrorCode, ThreadLabels};
use ninetrix_proto::message::Message;

use super::{StoreError, StoreResult};

/// A thread's labels from its columns (a replica past `u32` reads as none).
pub(crate) fn labels(
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
