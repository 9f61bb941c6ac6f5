//! The ninetrix runner: the in-container agent runtime (docs/design.md §5, §6, §10).
//!
//! Configured only by the environment (`config`), it claims its thread, restores and repairs the
//! history, resumes an interrupted turn, then serves its inbox: each message is one turn of model
//! calls (`llm`) and tool calls (builtin `tools`, and the agent's `mcp` servers) recorded in the
//! ledger, checkpointed after every step.
//! The decisions live in the pure `engine`, `history` and `ledger` modules; `driver` does the I/O
//! against a `checkpoints` store (the API over HTTP, or memory for a batch job without one);
//! `process` runs the driver on the runner's own thread and, beside it, the `sessions` it serves.

pub mod a2a;
pub mod backoff;
pub mod checkpoints;
pub mod config;
pub mod context;
pub mod deltas;
pub mod driver;
pub mod engine;
pub mod events;
pub mod health;
pub mod history;
pub mod inbox;
pub mod jobs;
pub mod launch;
pub mod ledger;
pub mod limits;
pub mod llm;
pub mod mcp;
pub mod notify;
pub mod process;
pub mod recording;
pub mod replay;
pub mod replica;
pub mod sessions;
pub mod snapshots;
pub mod telemetry;
pub mod tools;

pub use config::{Config, ConfigError};
pub use driver::Exit;
pub use process::run;
