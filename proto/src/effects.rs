//! Tool-call effect classes as they cross the wire: the class of a call (`read`, `idempotent`,
//! `write`) that the ledger records, a commit's intents carry and the trace events show; where
//! that class came from; and the `_meta` key an MCP call carries its ledger key under.
//!
//! The effect class decides what happens when a crash leaves a call without a recorded outcome:
//! `read` and `idempotent` tools run again, `write` tools are never silently re-run. The
//! agentfile (`ninetrix-agentfile`) decides which class each tool has; this module only names
//! the classes.

use serde::{Deserialize, Serialize};

/// The `_meta` key of a `tools/call` request that carries the ledger key, so a server that
/// honours it can deduplicate a call it already performed.
pub const IDEMPOTENCY_META_KEY: &str = "dev.ninetrix/idempotency-key";

/// Whether a tool may be re-run after a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Only reads: safe to re-run.
    Read,
    /// Mutates, but running it twice has the effect of running it once.
    Idempotent,
    /// Mutates; a second run would repeat the side effect. The default for mutating tools.
    Write,
}

impl Effect {
    /// The name used in agentfiles.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Read => "read",
            Effect::Idempotent => "idempotent",
            Effect::Write => "write",
        }
    }

    /// Parses an agentfile name.
    pub fn parse(name: &str) -> Option<Effect> {
        match name {
            "read" => Some(Effect::Read),
            "idempotent" => Some(Effect::Idempotent),
            "write" => Some(Effect::Write),
            _ => None,
        }
    }
}

/// Where a tool's effect class came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EffectSource {
    /// The agent's tool entry (`effect:`).
    Agentfile,
    /// The server's entry in `mcp_servers` (`effect:`).
    Server,
    /// A trusted server's annotations (`readOnlyHint`, `idempotentHint`).
    Annotations,
    /// Nothing said otherwise: an MCP tool is a `write`.
    Default,
}

impl EffectSource {
    /// How `validate` and `trace` say it.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectSource::Agentfile => "agentfile",
            EffectSource::Server => "mcp_servers",
            EffectSource::Annotations => "annotations",
            EffectSource::Default => "default",
        }
    }
}
