//! Shared types of ninetrix, used by the CLI, the checkpoint API and the runner.
//!
//! This crate owns the agentfile (its schema, parsing and validation), the provider-neutral
//! message model, the ID newtypes, the checkpoint API's wire types and the runner's trace events. It must stay free of I/O runtimes: no tokio, axum or sqlx,
//! so every other crate can depend on it cheaply.

pub mod agentfile;
pub mod api;
pub mod boots;
pub mod deltas;
pub mod events;
pub mod handoffs;
pub mod ids;
pub mod message;
pub mod sessions;
pub mod suggest;
pub mod text;
pub mod triggers;

pub use ids::{ApprovalId, MessageId, ParseIdError, ThreadId};
pub use message::{Block, Message, Role};
