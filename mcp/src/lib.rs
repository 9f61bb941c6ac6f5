//! MCP for ninetrix (issue 13): [`client`] is how a runner reaches its agent's MCP servers —
//! every call carrying its ledger key, every failure saying whether the call may have happened —
//! and [`bridge`] is `ninetrix mcp-bridge`, which serves a stdio server over streamable HTTP
//! (for sidecar containers and tests) and restarts it when it dies.
//!
//! Both speak MCP through `rmcp`, the official Rust SDK: the 2026-07-28 revision where the other
//! side speaks it, `initialize` (2025-11-25) otherwise.

pub mod bridge;
pub mod client;

pub use ninetrix_proto::effects::IDEMPOTENCY_META_KEY;

/// The key, in a bridge error's `data`, that says what is known about a call that failed:
/// `unknown` (the server may have acted) or `not_run` (it did not).
pub const OUTCOME_META_KEY: &str = "dev.ninetrix/outcome";
