//! Defaults shared with the public Ninetrix where the concept is the same: what the resolved
//! spec holds when the agentfile leaves a key out, and the limits the decoder checks them against.

/// `runtime.provider` when absent (as in Ninetrix).
pub const PROVIDER: &str = "anthropic";
/// `runtime.model` for Anthropic when absent (as in Ninetrix).
pub const ANTHROPIC_MODEL: &str = "claude-sonnet-4-6";
/// `runtime.temperature`.
pub const TEMPERATURE: f64 = 0.2;
/// `runtime.max_tokens`.
pub const MAX_TOKENS: u32 = 8192;
/// `runtime.tool_timeout` in seconds.
pub const TOOL_TIMEOUT_SECS: u32 = 30;
/// `execution.max_turns`.
pub const MAX_TURNS: u32 = 20;
/// Most replicas of one agent. A pool's containers share one Linux bridge, which takes at
/// most 1,024 ports (one per container, the local API's included); issue 12 measured 500.
pub const MAX_REPLICAS: u32 = 1000;
/// `execution.max_concurrent_sessions`: sessions one replica serves at once.
pub const MAX_CONCURRENT_SESSIONS: u32 = 16;
/// `execution.max_delegation_depth`: handoffs in one chain.
pub const MAX_DELEGATION_DEPTH: u32 = 4;
/// The largest `execution.max_delegation_depth`.
pub const MAX_DELEGATION_DEPTH_LIMIT: u32 = 32;
/// `execution.interrupt_grace` in seconds: how long a tool call that runs when its turn is
/// interrupted or cancelled may take to finish before it is stopped.
pub const INTERRUPT_GRACE_SECS: u64 = 10;

/// `execution.snapshots.max_bytes` when unset: 512 MiB of files in one snapshot.
pub const SNAPSHOT_MAX_BYTES: u64 = 512 * 1024 * 1024;

/// `execution.snapshots.max_files` when unset.
pub const SNAPSHOT_MAX_FILES: u64 = 20_000;

/// `execution.snapshots.keep_turns` when unset: the snapshots of the last 100 turns.
pub const SNAPSHOT_KEEP_TURNS: u32 = 100;
/// The longest `execution.interrupt_grace`: 10 minutes.
pub const MAX_INTERRUPT_GRACE_SECS: u64 = 600;
/// `transfer_timeout` in seconds (as in Ninetrix).
pub const TRANSFER_TIMEOUT_SECS: u64 = 300;
/// The longest `transfer_timeout`: 7 days.
pub const MAX_TRANSFER_TIMEOUT_SECS: u64 = 7 * 86_400;
/// `runtime.fallback_after` in seconds: how long a model may keep failing before the next of
/// `runtime.fallback` is tried.
pub const FALLBACK_AFTER_SECS: u64 = 30;
/// The shortest `runtime.fallback_after`: 1 second.
pub const MIN_FALLBACK_AFTER_SECS: u64 = 1;
/// The longest `runtime.fallback_after`: 1 hour.
pub const MAX_FALLBACK_AFTER_SECS: u64 = 3600;
/// `runtime.jobs.max_concurrent`: jobs of one agent running at once.
pub const JOBS_MAX_CONCURRENT: u32 = 4;
/// The largest `runtime.jobs.max_concurrent`.
pub const MAX_JOBS_MAX_CONCURRENT: u32 = 64;
/// `runtime.jobs.default_timeout` in seconds: 1 hour.
pub const JOBS_DEFAULT_TIMEOUT_SECS: u64 = 3600;
/// The longest job timeout: 7 days.
pub const MAX_JOB_TIMEOUT_SECS: u64 = 7 * 86_400;
