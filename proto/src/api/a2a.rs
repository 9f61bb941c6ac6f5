//! What the API keeps and mints for A2A (issue 43, docs/a2a.md): the agent card's parts that come
//! from the agentfile (recorded by `up` with the agent's replicas), and A2A tokens. The A2A wire
//! types themselves (tasks, messages, the card, JSON-RPC) are the official `a2a-lf` crate's.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

use super::int;

/// Most skills one agent card lists.
pub const MAX_SKILLS: usize = 32;
/// Most characters of a display name: the card's, a skill's.
pub const CARD_NAME_CHARS: usize = 200;
/// Most characters of a description: the card's, a skill's.
pub const CARD_TEXT_CHARS: usize = 4000;
/// Most characters of a skill's ID.
pub const SKILL_ID_CHARS: usize = 64;
/// Most tags of a skill, and most characters of each.
pub const SKILL_TAGS: (usize, usize) = (16, 64);
/// Most example requests of a skill, and most characters of each.
pub const SKILL_EXAMPLES: (usize, usize) = (8, 1000);

/// Whether `id` is a skill ID: `[a-z0-9][a-z0-9_-]*`, 1 to [`SKILL_ID_CHARS`] characters. The
/// agentfile's check and the API's are this one.
pub fn is_skill_id(id: &str) -> bool {
    let mut chars = id.chars();
    id.len() <= SKILL_ID_CHARS
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// What an agent's A2A card says about it, from the agentfile: its display name, description and
/// skills. `up` records it with the agent's replicas; the API serves the card only for agents
/// recorded so.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AgentCardInfo {
    /// `metadata.name`, if set (the card's `name` is then this; otherwise the agent's key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub display_name: Option<String>,
    /// `metadata.description` (or its goal), if set: at most 4,000 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 4000))]
    pub description: Option<String>,
    /// Its skills (`skills:`), at most 32; one skill named after the agent when the agentfile
    /// lists none.
    #[serde(default, deserialize_with = "skills")]
    #[cfg_attr(feature = "openapi", schema(max_items = 32))]
    pub skills: Vec<SkillInfo>,
}

/// Skills, each read only from a JSON object (serde would also read one from an array of its
/// fields, which the schema refuses).
fn skills<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<SkillInfo>, D::Error> {
    Vec::<serde_json::Value>::deserialize(d)?
        .into_iter()
        .map(|v| super::limits::object(v).map_err(serde::de::Error::custom))
        .collect()
}

/// One skill on an agent card (`skills:` of an agent in the agentfile).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SkillInfo {
    /// Unique within the agent: 1 to 64 characters `[a-z0-9][a-z0-9_-]*`.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 64, pattern = "^[a-z0-9][a-z0-9_-]*$")
    )]
    pub id: String,
    /// A name for people: 1 to 200 characters.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub name: String,
    /// What it does: at most 4,000 characters.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 4000))]
    pub description: String,
    /// Keywords, at most 16 of at most 64 characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 16))]
    pub tags: Vec<String>,
    /// Example requests, at most 8 of at most 1,000 characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 8))]
    pub examples: Vec<String>,
}

/// `POST /v1/tokens/a2a`: mint a token that may call one pool's agents over A2A (its cards'
/// JSON-RPC endpoints), like an approver token. The admin token works there too.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct A2aTokenRequest {
    /// The pool: a pool name (`[a-z0-9][a-z0-9_-]*`, at most 48 characters, as in the agentfile).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 48, pattern = "^[a-z0-9][a-z0-9_-]*$")
    )]
    pub pool: String,
    /// Who holds it (the tasks it sends say so, and a cancel is recorded as `a2a:<name>`): 1 to
    /// 200 characters, none of them a control, bidirectional-control or line-separator character.
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

/// A minted A2A token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct A2aTokenResponse {
    /// The pool whose agents it may call.
    pub pool: String,
    /// Who holds it.
    pub name: String,
    /// When it stops working.
    pub expires_at: DateTime<Utc>,
    /// The bearer token.
    pub token: String,
}

impl std::fmt::Debug for A2aTokenResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("A2aTokenResponse")
            .field("pool", &self.pool)
            .field("name", &self.name)
            .field("expires_at", &self.expires_at)
            .field("token", &"<redacted>")
            .finish()
    }
}
