//! A thread's inbox (`/v1/threads/{id}/messages`): work put in and the messages a runner reads.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::*;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// `POST /v1/threads/{id}/messages`: put work in a thread's inbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    /// The message text.
    pub content: String,
    /// A key that makes retries safe: a repeated key returns the original seq. 1 to 128
    /// characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub dedupe_key: Option<String>,
}

/// The answer to an enqueue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EnqueueResponse {
    /// The message's seq in the thread's inbox.
    pub seq: u64,
    /// True when the dedupe key was seen before and no new message was added.
    pub duplicate: bool,
}

/// One inbox message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct InboxMessage {
    /// Monotonic per thread, from 1.
    pub seq: u64,
    /// The message text.
    pub content: String,
    /// The dedupe key it was sent with.
    pub dedupe_key: Option<String>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// For a task another agent handed over: who, and the chain it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffOrigin>,
}
