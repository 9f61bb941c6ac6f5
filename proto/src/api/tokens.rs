//! Minting tokens (`/v1/tokens/{runner,agent,approver}`): the requests and the minted tokens,
//! whose `Debug` never shows the secret.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::int;
use super::*;
use crate::ids::ThreadId;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// `POST /v1/tokens/runner`: mint a runner token for one thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RunnerTokenRequest {
    /// The thread the token is for (created if new).
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// The pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The replica number (from 1).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int::u32_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u64>, maximum = 4294967295_i64))]
    pub replica: Option<u32>,
}

impl RunnerTokenRequest {
    /// The labels it carries.
    pub fn labels(&self) -> ThreadLabels {
        ThreadLabels {
            pool: self.pool.clone(),
            agent: self.agent.clone(),
            replica: self.replica,
            session: None,
        }
    }
}

/// A minted runner token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RunnerTokenResponse {
    /// The thread it is bound to.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// The bearer token.
    pub token: String,
}

impl std::fmt::Debug for RunnerTokenResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerTokenResponse")
            .field("thread_id", &self.thread_id)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// `POST /v1/tokens/agent`: mint the token an agent's replicas find their sessions' work with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AgentTokenRequest {
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
}

/// A minted agent token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct AgentTokenResponse {
    /// The pool.
    pub pool: String,
    /// The agent.
    pub agent: String,
    /// The bearer token.
    pub token: String,
}

impl std::fmt::Debug for AgentTokenResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentTokenResponse")
            .field("pool", &self.pool)
            .field("agent", &self.agent)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// `POST /v1/tokens/approver`: mint a token that may list and decide one pool's requests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ApproverTokenRequest {
    /// The pool: a pool name (`[a-z0-9][a-z0-9_-]*`, at most 48 characters, as in the agentfile).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")
    )]
    pub pool: String,
    /// Who holds it (recorded as `decided_by`): 1 to 200 characters, none of them a control,
    /// bidirectional-control or line-separator character (`text::is_unsafe_char`).
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]+$"
        )
    )]
    pub name: String,
    /// Seconds until it expires: 60 to 31,536,000 (30 days when left out).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int::stored_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 60, maximum = 31536000))]
    pub ttl_secs: Option<u64>,
}

/// A minted approver token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ApproverTokenResponse {
    /// The pool it may decide for.
    pub pool: String,
    /// Who holds it.
    pub name: String,
    /// When it stops working.
    pub expires_at: DateTime<Utc>,
    /// The bearer token.
    pub token: String,
}

impl std::fmt::Debug for ApproverTokenResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApproverTokenResponse")
            .field("pool", &self.pool)
            .field("name", &self.name)
            .field("expires_at", &self.expires_at)
            .field("token", &"<redacted>")
            .finish()
    }
}
