//! The checkpoint API's request and response types (docs/design.md §7), shared by the server, the runner
//! and the CLI so the two sides cannot drift apart.
//!
//! Every request type rejects unknown fields. Times are RFC 3339 in UTC. No type here holds a
//! secret value.

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

mod a2a;
mod approvals;
mod commits;
mod errors;
mod events;
mod forks;
mod handoffs;
mod inbox;
pub(crate) mod int;
mod ledger;
mod limits;
mod memory;
mod replays;
mod sessions;
mod threads;
mod tokens;
mod triggers;

pub use a2a::*;
pub use approvals::*;
pub use commits::*;
pub use errors::*;
pub use events::*;
pub use forks::*;
pub use handoffs::*;
pub use inbox::*;
pub use ledger::*;
pub use limits::*;
pub use memory::*;
pub use replays::*;
pub use sessions::*;
pub use threads::*;
pub use tokens::*;
pub use triggers::*;

/// The largest integer the API stores: counters, epochs and versions are 64-bit signed in the
/// database, so requests may not go past this.
pub const MAX_STORED_INT: u64 = i64::MAX as u64;

/// The longest `wait` a long-poll takes, in seconds (an hour). A server holds a request at most
/// its `--max-wait` (60 s by default, at most this); a larger `wait` is a malformed query, not a
/// request to hold a connection for ever.
pub const MAX_WAIT_SECS: u64 = 3600;

/// An agent's name in a list (its schema only): an agent name as in the agentfile.
#[cfg(feature = "openapi")]
struct AgentName;

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for AgentName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .min_length(Some(1))
            .max_length(Some(48))
            .pattern(Some("^[a-z0-9][a-z0-9_-]*$"))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl ToSchema for AgentName {}
