//! Sessions (`POST /v1/sessions`), the agents they are spread over
//! (`PUT /v1/pools/{pool}/agents/{agent}`), the thread of one replica
//! (`/v1/runners/pools/{pool}/agents/{agent}/replicas/{n}`) and the work a session has.

use serde::{Deserialize, Serialize};

use super::int;
use super::*;
use crate::ids::ThreadId;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// `POST /v1/sessions`: the session `key` of agent `agent` in pool `pool` — its thread is created
/// on first use and the same ever after.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionRequest {
    /// The pool: a pool name (`[a-z0-9][a-z0-9_-]*`, at most 48 characters, as in the agentfile).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")
    )]
    pub pool: String,
    /// The agent: an agent name (`[a-z0-9][a-z0-9_-]*`, at most 48 characters, as in the agentfile).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")
    )]
    pub agent: String,
    /// The session key: 1 to 200 characters, none of them a control, bidirectional-control or
    /// line-separator character (`text::is_unsafe_char`).
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]+$"
        )
    )]
    pub key: String,
}

/// `PUT /v1/pools/{pool}/agents/{agent}`: how many replicas the agent runs now (what sessions
/// are spread over), and the agents it may hand work to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AgentReplicas {
    /// 1 to 1000.
    #[serde(deserialize_with = "int::u32_req")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000))]
    pub replicas: u32,
    /// Its collaborators (agents of the same pool), at most 64; none when left out.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<AgentName>, max_items = 64))]
    pub collaborators: Vec<String>,
    /// What its A2A agent card says (from the agentfile); no card is served when left out.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::limits::object_opt"
    )]
    pub card: Option<super::AgentCardInfo>,
}

/// The thread of one replica of a pool's agent, as the API keeps it (`POST
/// /v1/runners/pools/{pool}/agents/{agent}/replicas/{replica}`): what a runner that knows only
/// its replica number (a Swarm task's slot, a pod's ordinal) claims and serves.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ReplicaThread {
    /// The replica's thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// The replica number (1-based).
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000))]
    pub replica: u32,
    /// Whether the thread was made by this request: the replica's first boot, or its first
    /// after its thread was purged.
    pub created: bool,
    /// The runner token of the thread.
    pub token: String,
}

impl std::fmt::Debug for ReplicaThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaThread")
            .field("thread_id", &self.thread_id)
            .field("replica", &self.replica)
            .field("created", &self.created)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// A session with work for its owner: messages after its cursor, or a turn in progress.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SessionWork {
    /// The session's thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// The session key.
    pub key: String,
    /// Where the thread stands.
    pub status: ThreadStatus,
    /// The last inbox seq.
    pub inbox_seq: u64,
    /// The last inbox seq applied (the stored cursor).
    pub inbox_cursor: u64,
    /// The runner token of the session's thread: what the owner claims and serves it with.
    pub token: String,
}

impl std::fmt::Debug for SessionWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWork")
            .field("thread_id", &self.thread_id)
            .field("key", &self.key)
            .field("status", &self.status)
            .field("inbox_seq", &self.inbox_seq)
            .field("inbox_cursor", &self.inbox_cursor)
            .field("token", &"<redacted>")
            .finish()
    }
}
