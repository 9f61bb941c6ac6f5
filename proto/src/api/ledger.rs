//! The tool-call ledger (`/v1/runners/threads/{id}/tool-calls`): intents, outcomes and the
//! records they make.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::int;
use crate::effects::Effect;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// Where a ledger entry stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    /// Recorded before executing; no outcome yet.
    Intent,
    /// Executed; the result is stored.
    Completed,
    /// Executed and failed; the error is stored.
    Failed,
}

/// `POST /v1/runners/threads/{id}/tool-calls`: record the intent to run a tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ToolCallIntent {
    /// The writer's epoch. Past the stored range it can only be stale (409 `fenced`).
    #[serde(deserialize_with = "int::any")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub epoch: u64,
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

/// `PUT /v1/runners/threads/{id}/tool-calls/{key}`: record the outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ToolCallCompletion {
    /// The writer's epoch. Past the stored range it can only be stale (409 `fenced`).
    #[serde(deserialize_with = "int::any")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub epoch: u64,
    /// Whether the tool succeeded.
    pub ok: bool,
    /// Its result (or error text), as given to the model.
    pub result: String,
}

/// One ledger entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ToolCallRecord {
    /// The ledger key.
    pub key: String,
    /// The turn.
    pub turn_seq: u64,
    /// The tool.
    pub tool: String,
    /// Its arguments.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub args: serde_json::Value,
    /// Its effect class.
    pub effect: Effect,
    /// Where it stands.
    pub status: ToolCallStatus,
    /// The outcome, once recorded.
    pub result: Option<String>,
    /// The epoch that recorded the intent.
    pub intent_epoch: u64,
    /// The epoch that recorded the outcome.
    pub completed_epoch: Option<u64>,
    /// When the intent was recorded.
    pub created_at: DateTime<Utc>,
    /// When the outcome was recorded.
    pub completed_at: Option<DateTime<Utc>>,
}
