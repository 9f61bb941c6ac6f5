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
    /// An instruction to the runner instead of work for the model (`content` is then a note
    /// for people, and may be empty): it is carried out between turns, in inbox order, once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<Control>,
}

/// An instruction to a thread's runner, queued in its inbox like a message and carried out
/// between turns, once (the inbox cursor moves in the same commit as its effect).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Control {
    /// Compact the history now, as the agent's `runtime.context` says (`ninetrix compact`).
    Compact,
}

impl Control {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Control::Compact => "compact",
        }
    }

    /// The control of a wire name.
    pub fn parse(s: &str) -> Option<Control> {
        match s {
            "compact" => Some(Control::Compact),
            _ => None,
        }
    }
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
    /// An instruction to the runner instead of work for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<Control>,
}
