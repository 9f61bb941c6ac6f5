//! Shared types of ninetrix, used by the CLI, the checkpoint API and the runner.
//!
//! This crate owns what crosses HTTP or the trace: the provider-neutral message model, the ID
//! newtypes, the checkpoint API's wire types (`api`, one module per resource), tool-call effect
//! classes, background jobs between a runner and its job broker (`jobs`), workspace snapshots (`snapshots`: content-addressed trees, built and diffed), the runner's trace events and streamed deltas, signed webhook notifications (`notify`: the signature and retry schedule the runner's and the API's share), and the protocol rules both sides of a
//! route must agree on — session keys and their placement, handoff keys, and triggers (the
//! registered spec, its schedules and templates). The agentfile language (parsing, validation,
//! the resolved spec) is `ninetrix-agentfile`, which depends on this crate, never the reverse.
//! It must stay free of I/O runtimes: no tokio, axum or sqlx, so every other crate can depend on
//! it cheaply.

pub mod api;
pub mod boots;
pub mod context;
pub mod deltas;
pub mod effects;
pub mod events;
pub mod handoffs;
pub mod ids;
pub mod jobs;
pub mod message;
pub mod notify;
pub mod replay;
pub mod sessions;
pub mod snapshots;
pub mod suggest;
pub mod text;
pub mod triggers;

pub use ids::{ApprovalId, LeaseId, MessageId, ParseIdError, ThreadId};
pub use message::{Block, Message, Role};
