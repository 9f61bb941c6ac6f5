//! Handoffs between agents (`/v1/runners/threads/{id}/handoffs`): where a task came from, the
//! request, its status and the reply that ends it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use super::AgentName;
#[cfg(doc)]
use super::CommitRequest;
use super::int;
use crate::ids::ThreadId;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// Where a handed-over task came from: stored with the task in the collaborator's inbox and kept
/// in its checkpoint state while it works on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HandoffOrigin {
    /// The handoff (`handoff:<ledger key>`): what the reply names.
    pub delivery_key: String,
    /// The agent that asked.
    pub from_agent: String,
    /// The thread whose turn waits for the reply.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub from_thread: ThreadId,
    /// The agents from the first caller to the one that asked, inclusive.
    pub chain: Vec<String>,
    /// What the caller's turn may still spend (US dollars), if it has a budget: the delegated
    /// turn stops when it would spend more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
}

/// `POST /v1/runners/threads/{id}/handoffs`: hand one call's task to a collaborator — file it in
/// the collaborator's session for this call (created now), deduplicated by the call's ledger
/// key, so a repeat returns the handoff already made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HandoffRequest {
    /// The caller's epoch (from its claim). Past the stored range it can only be stale (409 `fenced`).
    #[serde(deserialize_with = "int::any")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub epoch: u64,
    /// The caller's turn.
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub turn_seq: u64,
    /// The call's ledger key: 1 to 64 characters, no control characters or `:`.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 64,
            pattern = "^[^:\\u0000-\\u001F\\u007F-\\u009F]+$"
        )
    )]
    pub key: String,
    /// The provider's ID of the call: 1 to 128 characters.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub call_id: String,
    /// The collaborator: an agent of the caller's pool.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")
    )]
    pub agent: String,
    /// The task.
    pub task: String,
    /// Context for the task, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The agents that handed work down to the caller's turn, from the first (none for a turn
    /// nobody handed over): at most 63. The handoff's chain is these and the caller's agent.
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = Vec<AgentName>, max_items = 63)
    )]
    pub via: Vec<String>,
    /// Seconds the caller waits for the reply: 1 to 31,536,000. A reply later than that does
    /// not count (the handoff reads `timed_out`).
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31536000))]
    pub timeout_secs: u64,
    /// What the caller's turn may still spend (US dollars), if it has a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub budget_usd: Option<f64>,
}

/// Where a handoff stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum HandoffStatus {
    /// The collaborator is working on it (or has not started).
    Pending,
    /// The collaborator's turn ended with a reply: the call's result.
    Replied,
    /// The collaborator's turn ended without doing the task (its budget, its round limit, its
    /// model failing): the call's error result.
    Failed,
    /// No reply came within the caller's `transfer_timeout`: the call failed.
    TimedOut,
    /// The caller's turn was cancelled while it waited; the collaborator's turn on the task
    /// is cancelled too (a cancel was put in its inbox in the same transaction).
    Cancelled,
}

impl HandoffStatus {
    /// The name used in the API and in storage.
    pub fn as_str(self) -> &'static str {
        match self {
            HandoffStatus::Pending => "pending",
            HandoffStatus::Replied => "replied",
            HandoffStatus::Failed => "failed",
            HandoffStatus::TimedOut => "timed_out",
            HandoffStatus::Cancelled => "cancelled",
        }
    }

    /// Parses the stored name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "pending" => HandoffStatus::Pending,
            "replied" => HandoffStatus::Replied,
            "failed" => HandoffStatus::Failed,
            "timed_out" => HandoffStatus::TimedOut,
            "cancelled" => HandoffStatus::Cancelled,
            _ => return None,
        })
    }

    /// Whether the caller's call has its answer.
    pub fn is_settled(self) -> bool {
        self != HandoffStatus::Pending
    }
}

/// A handoff, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Handoff {
    /// `handoff:<ledger key>`: the inbox dedupe key of the task.
    pub delivery_key: String,
    /// The caller's thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// The pool.
    pub pool: String,
    /// The calling agent.
    pub from_agent: String,
    /// The epoch of the caller's runner that filed it (a later one that asks again
    /// re-attaches to it).
    pub epoch: u64,
    /// The caller's turn.
    pub turn_seq: u64,
    /// The call's ledger key.
    pub key: String,
    /// The provider's ID of the call.
    pub call_id: String,
    /// The collaborator.
    pub agent: String,
    /// The collaborator's session that does the task.
    pub session: String,
    /// That session's thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub target_thread_id: ThreadId,
    /// The task's seq in that thread's inbox.
    pub inbox_seq: u64,
    /// The task.
    pub task: String,
    /// Its context.
    pub context: Option<String>,
    /// The agents from the first caller to the calling one, inclusive.
    pub chain: Vec<String>,
    /// Where it stands (`timed_out` once `expires_at` passed without a reply).
    pub status: HandoffStatus,
    /// The collaborator's reply (for `failed`, why it gave up).
    pub reply: Option<String>,
    /// What the collaborator's turn spent (US dollars), its own collaborators included.
    pub cost_usd: f64,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// When the caller stops waiting.
    pub expires_at: DateTime<Utc>,
    /// When the reply was stored (also for a reply that came too late).
    pub replied_at: Option<DateTime<Utc>>,
}

/// The reply to a handoff, in the [`CommitRequest`] that ends the collaborator's turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HandoffReply {
    /// The handoff (from the task's [`HandoffOrigin`]).
    pub delivery_key: String,
    /// Whether the turn did the task (`false`: it stopped short; `text` says why).
    pub ok: bool,
    /// The turn's reply.
    pub text: String,
    /// What the turn spent (US dollars), its own collaborators included.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub cost_usd: f64,
}
