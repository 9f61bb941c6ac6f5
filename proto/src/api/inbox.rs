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
    /// (A cancel has its own route, `POST /v1/threads/{id}/cancel`.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<Control>,
    /// What the message does if the thread is in a turn when it arrives. Absent: the agent's
    /// `execution.on_message_while_busy` (as its runner stated it when it claimed the thread),
    /// `queue` before any runner has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<MessageMode>,
}

/// What a message does when it arrives while its thread is in a turn
/// (`execution.on_message_while_busy`, or the sender's choice).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum MessageMode {
    /// Waits in the inbox until the running turn ends, then starts the next turn (in inbox
    /// order).
    #[default]
    Queue,
    /// Joins the running turn at its next safe boundary (after the current tool batch, before
    /// the next model round) as a user message of that turn; if the turn ends first, it starts
    /// the next turn. Applied once either way.
    Steer,
    /// Ends the running turn `interrupted` (the model call in flight is abandoned, tools that
    /// run finish, calls not run are answered "interrupted before it ran") and starts the next
    /// turn.
    Interrupt,
    /// Refused (409 `busy`, naming the running turn) while a turn runs; queued otherwise.
    Reject,
}

impl MessageMode {
    /// Every mode, in the order the docs list them.
    pub const ALL: [MessageMode; 4] = [
        MessageMode::Queue,
        MessageMode::Steer,
        MessageMode::Interrupt,
        MessageMode::Reject,
    ];

    /// The wire and agentfile name.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageMode::Queue => "queue",
            MessageMode::Steer => "steer",
            MessageMode::Interrupt => "interrupt",
            MessageMode::Reject => "reject",
        }
    }

    /// The mode of a wire or agentfile name.
    pub fn parse(s: &str) -> Option<MessageMode> {
        MessageMode::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// Whether a message of this mode is meant for the turn running when it arrives (a steer,
    /// an interrupt): the runner watches for it while a turn runs.
    pub fn urgent(self) -> bool {
        matches!(self, MessageMode::Steer | MessageMode::Interrupt)
    }
}

/// `POST /v1/threads/{id}/cancel`: end the thread's running turn `cancelled`. Stored in the
/// inbox (as a `cancel` control) before anything acts on it; in the same transaction the turn's
/// pending requests to people are settled `cancelled`, and its pending handoffs too, each
/// collaborator's thread getting a cancel of its own (recursively, once per handoff).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Who cancels (shown as `cancelled by NAME`). 1 to 64 characters; absent: the caller's
    /// role (`admin`, `console`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 64))]
    pub by: Option<String>,
    /// Why, for people (in the trace). At most 2,000 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 2000))]
    pub reason: Option<String>,
    /// A key that makes retries safe: a repeated key returns the original cancel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub dedupe_key: Option<String>,
}

/// The answer to a cancel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CancelResponse {
    /// The cancel's seq in the thread's inbox (its turn ends with `turn_completed` naming it).
    pub seq: u64,
    /// True when the dedupe key was seen before and nothing new was stored.
    pub duplicate: bool,
    /// The turn the thread was in when the cancel was stored (`None`: none was running, and
    /// the cancel will find nothing to stop unless a turn starts before the runner takes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<RunningTurn>,
    /// Requests to people settled `cancelled` by this cancel.
    #[serde(default)]
    pub approvals_cancelled: u64,
    /// Handoffs to collaborators marked `cancelled` (this thread's and, recursively, its
    /// collaborators').
    #[serde(default)]
    pub handoffs_cancelled: u64,
}

/// The turn a thread is in (or about to start: a message waits after its cursor), as the API
/// stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RunningTurn {
    /// The turn's number in its thread.
    pub turn_seq: u64,
    /// The inbox seq of the message it answers.
    pub seq: u64,
}

/// An instruction to a thread's runner, queued in its inbox like a message and carried out
/// between turns, once (the inbox cursor moves in the same commit as its effect).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Control {
    /// Compact the history now, as the agent's `runtime.context` says (`ninetrix compact`).
    Compact,
    /// End the running turn `cancelled` (`ninetrix cancel`; `POST /v1/threads/{id}/cancel`):
    /// the turn of the earliest message not yet answered. Found with no such turn, it does
    /// nothing (and says so).
    Cancel,
    /// Go back to the end of the message's `to_turn` — the conversation and, when that turn has
    /// a snapshot, the workspace (`ninetrix rewind`; queued only by `POST
    /// /v1/threads/{id}/rewind`, which checks the turn first).
    Rewind,
}

impl Control {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Control::Compact => "compact",
            Control::Cancel => "cancel",
            Control::Rewind => "rewind",
        }
    }

    /// The control of a wire name.
    pub fn parse(s: &str) -> Option<Control> {
        match s {
            "compact" => Some(Control::Compact),
            "cancel" => Some(Control::Cancel),
            "rewind" => Some(Control::Rewind),
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
    /// The mode it was stored with (the request's, or the agent's default); `reject` is stored
    /// as `queue` (it was accepted because no turn ran).
    #[serde(default)]
    pub mode: MessageMode,
    /// The turn the thread was in when the message was stored, if any: a queued message waits
    /// for it, a steer joins it, an interrupt ends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<RunningTurn>,
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
    /// What it does if it finds a turn running (never `reject`: a refused message is not
    /// stored).
    #[serde(default)]
    pub mode: MessageMode,
    /// Who sent a cancel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The turn a `rewind` control goes back to.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int::stored_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub to_turn: Option<u64>,
}

impl InboxMessage {
    /// Whether it is meant for the turn running when it arrives — a steer, an interrupt, a
    /// cancel — so the runner acts on it during that turn instead of after it.
    pub fn urgent(&self) -> bool {
        self.mode.urgent() || self.control == Some(Control::Cancel)
    }
}
