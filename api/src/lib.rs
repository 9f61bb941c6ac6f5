//! The ninetrix checkpoint API (docs/design.md §6–8): threads, claims and fencing, append-only
//! checkpoints, the tool-call ledger, the inbox and trace events, over HTTP, stored in SQLite or
//! Postgres.
//!
//! This crate owns the HTTP surface (`routes`), the A2A server's rules (`a2a_rules`, pure) and its
//! push notifications (`a2a_push`), authentication (`auth`) and who may call each
//! route (`access`), the error mapping
//! (`error`), the state handlers share (`state`), storage (`store`), the trigger scheduler
//! (`scheduler`), webhook signatures (`hooks`), what a webhook
//! stranger may cost (`hook_guard`), trigger rules (`trigger_rules`), the rules of pool-wide
//! model limits and budgets (`limit_rules`) and the in-process queue of lease requests waiting
//! on a limiter (`lease_queue`), and the
//! OpenTelemetry server spans (`telemetry`). The CLI's `ninetrix api` command only parses flags, builds a
//! [`Config`] and runs a [`Server`].

mod a2a_push;
pub mod a2a_rules;
mod access;
pub mod auth;
mod console;
pub mod console_sessions;
pub mod error;
mod extract;
pub mod faults;
mod fork_rules;
mod hook_guard;
mod hooks;
mod hub;
pub mod labels;
mod lease_queue;
mod limit_rules;
mod listener;
pub mod memory_rules;
mod names;
mod routes;
pub mod scheduler;
mod secret;
pub mod server;
mod state;
pub mod store;
pub mod telemetry;
mod trigger_rules;

pub use auth::{AuthConfig, Secret};
pub use routes::openapi;
pub use server::{Config, ServeError, Server, shutdown_signal};
