//! What the backends (one host in `pool/`, Docker Swarm in `swarm/`) share and the commands hand
//! them: `up`'s and `down`'s settings as plain values (the clap arguments stay with their
//! commands), the failures a `down` collects, and the log lines of `logs`. It depends on no
//! other module of the crate, so the commands, the backend seam and both backends can use it.

pub(crate) mod failures;
pub(crate) mod logs;

use std::path::PathBuf;

/// What `ninetrix up` was asked for (its arguments, as plain values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UpSettings {
    /// The agentfile.
    pub(crate) file: PathBuf,
    /// The pool name, overriding the agentfile's `name:`.
    pub(crate) pool: Option<String>,
    /// Recreate every container (task), even unchanged ones.
    pub(crate) force_recreate: bool,
    /// Remove containers (services) of agents no longer in the agentfile.
    pub(crate) remove_orphans: bool,
    /// Print the plan and change nothing.
    pub(crate) dry_run: bool,
    /// Seconds a replaced or removed container gets to checkpoint and exit.
    pub(crate) timeout: i32,
    /// Seconds to wait for every durable runner.
    pub(crate) wait_timeout: u64,
    /// Progress as JSON lines.
    pub(crate) json: bool,
    /// Run the pool on Docker Swarm.
    pub(crate) swarm: bool,
    /// With `swarm`: the image every node runs.
    pub(crate) image: Option<String>,
    /// With `swarm`: the Postgres URL of the pool's API.
    pub(crate) api_database: Option<String>,
    /// With `swarm`: how many replicas of the API run.
    pub(crate) api_replicas: u32,
}

/// One replica that `reset` brings up on its new thread, leaving the rest of the pool as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Only {
    /// The agent.
    pub(crate) agent: String,
    /// The replica.
    pub(crate) replica: u32,
}

/// What `ninetrix down` of one pool was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DownSettings {
    /// Seconds each runner gets to checkpoint and exit before it is killed.
    pub(crate) timeout: i32,
    /// Also delete the pool state, every thread of the pool and its volumes.
    pub(crate) purge: bool,
    /// `--api` was given (a pool that is gone already is then no failure).
    pub(crate) api: bool,
    /// Leave the pool's running background jobs running (one host; not with `purge`).
    pub(crate) keep_jobs: bool,
}
