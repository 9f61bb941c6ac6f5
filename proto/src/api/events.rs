//! Trace events as a runner sends them and as the API stores them
//! (`/v1/runners/threads/{id}/events`, `/v1/threads/{id}/events`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::int;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// A trace event as a runner sends it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewEvent {
    /// The event's type, e.g. `boot`, `turn_completed`: 1 to 64 of `a-z`, `0-9`, `_`, `.` and
    /// `-`, starting with a letter (what a [`TraceEvent`](crate::events::TraceEvent) is called;
    /// types this build does not know are kept, for newer runners).
    #[serde(rename = "type")]
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 64, pattern = "^[a-z][a-z0-9_.-]{0,63}$")
    )]
    pub kind: String,
    /// Its data: a JSON object (`{}` when left out).
    #[serde(default = "empty_object")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub data: serde_json::Value,
}

/// `{}`: what a left-out object means.
fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// `POST /v1/runners/threads/{id}/events`: a batch of events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EventsRequest {
    /// The writer's epoch. Past the stored range it can only be stale (409 `fenced`).
    #[serde(deserialize_with = "int::any")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub epoch: u64,
    /// The events, in order.
    pub events: Vec<NewEvent>,
}

/// The answer to an events batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EventsAppended {
    /// The seq of the last event stored (0 if the batch was empty).
    pub last_seq: u64,
}

/// A stored trace event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Event {
    /// Monotonic per thread, from 1: the SSE `id:`.
    pub seq: u64,
    /// The event's type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its data.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub data: serde_json::Value,
    /// The epoch of the runner that sent it.
    pub epoch: u64,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
}
