//! One durable step of a turn (`POST /v1/runners/threads/{id}/commit`): a checkpoint, ledger
//! intents and outcomes, requests to people and handoff replies in one transaction.

use serde::{Deserialize, Serialize};

use super::int;
use super::*;
use crate::effects::Effect;
use crate::message::Message;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// A ledger intent inside a [`CommitRequest`]: a [`ToolCallIntent`] without its own epoch (the
/// commit's epoch records it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CommitIntent {
    /// The ledger key (docs/design.md §6.5): 1 to 128 characters.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub key: String,
    /// The turn the call belongs to.
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub turn_seq: u64,
    /// The tool's name.
    pub tool: String,
    /// Its arguments: a JSON object.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub args: serde_json::Value,
    /// Its effect class.
    pub effect: Effect,
}

/// A ledger outcome inside a [`CommitRequest`]: a [`ToolCallCompletion`] for `key`, without its
/// own epoch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CommitOutcome {
    /// The ledger key: 1 to 128 characters, recorded earlier or among this commit's intents.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub key: String,
    /// Whether the tool succeeded.
    pub ok: bool,
    /// Its result (or error text), as given to the model.
    pub result: String,
}

/// Most items in each list of one commit or checkpoint (`append`, `intents`, `outcomes`,
/// `approvals`; events have their own limit of 1,000): one request is one transaction, so a huge
/// one would hold every other writer of the store behind it. More is `422 too_many`.
pub const MAX_LIST_ITEMS: usize = 1000;

/// `POST /v1/runners/threads/{id}/commit`: everything one durable step of a turn needs, in one
/// transaction — a checkpoint version (as [`CheckpointRequest`]; its `state` carries the inbox
/// cursor), the ledger intents of the calls about to run, and the outcomes of calls that ran.
/// Fenced and chained like a checkpoint; if any part is refused, nothing is written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CommitRequest {
    /// The writer's epoch (from its claim). Past the stored range it can only be stale (409 `fenced`).
    #[serde(deserialize_with = "int::any")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub epoch: u64,
    /// The version this one follows (0 for the first).
    #[serde(deserialize_with = "int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub parent_version: u64,
    /// Cut the history to this many messages before appending (history repair).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int::stored_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub truncate_to: Option<u64>,
    /// Messages to append (at most 1,000).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 1000))]
    pub append: Vec<Message>,
    /// The small state after this version (with the inbox cursor).
    pub state: CheckpointState,
    /// Ledger intents to record, in order. A key already in the ledger keeps its record (which
    /// comes back in `records`); nothing is overwritten. At most 1,000.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 1000))]
    pub intents: Vec<CommitIntent>,
    /// Outcomes to record, after the intents. The first outcome of a key wins: the same one again
    /// is harmless, a different one is 409 `already_completed`. At most 1,000.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 1000))]
    pub outcomes: Vec<CommitOutcome>,
    /// Trace events stored with this step, in order, after those already stored — in the same
    /// transaction, so an event that rides on a commit (a turn's `turn_completed` on its final
    /// one) is stored exactly when the step is, and costs no write of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<NewEvent>,
    /// Requests to a person stored with this step (the model response whose gated calls they
    /// are): one per gated call, keyed by the call's ledger key. A key that already has a
    /// request keeps it; an ID another request has is 409 `key_reused`. At most 1,000.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 1000))]
    pub approvals: Vec<NewApproval>,
    /// The reply to the handoff whose task this turn did, stored with the step that ends the
    /// turn: the caller's waiting call gets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_reply: Option<HandoffReply>,
    /// On the commit that ends a turn: the turn's end, with the workspace's snapshot. The API
    /// keeps it so the turn can be forked from, rewound to and diffed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_end: Option<TurnEnd>,
}

/// The answer to a commit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CommitResponse {
    /// The new version.
    pub version: u64,
    /// The history length after it.
    pub history_len: u64,
    /// The ledger record of each intent, in the request's order, as stored when the commit
    /// ended: `intent` by this epoch for a new key; for a key already in the ledger, the record
    /// found (a `completed` one is to be replayed, not executed again).
    pub records: Vec<ToolCallRecord>,
}
