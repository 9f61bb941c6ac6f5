//! The checkpoint API over real HTTP, on SQLite always and on Postgres when configured.

mod a2a;
mod approvals;
mod attack;
mod auth_matrix;
mod bad_input;
mod bounds;
mod commit;
mod conformance;
mod console;
mod deltas;
mod fork_model;
mod forks;
mod handoffs;
mod identity;
mod limits;
mod memory;
mod model;
mod openapi_contract;
mod otel;
mod replays;
mod replicas;
mod sessions;
mod size;
mod support;
mod triggers;
mod turn_control;
