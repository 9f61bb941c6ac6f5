//! `ninetrix up`: its arguments; the pool's backend (one host, or Docker Swarm with `--swarm`)
//! plans and applies ([`crate::pool::up`], [`crate::swarm::deploy`]).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cli::pool_name;
use crate::deploy::UpSettings;
use crate::pool::spec::DEFAULT_STOP_SECS;

/// Arguments of `ninetrix up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// The agentfile.
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool name, overriding the agentfile's `name:`.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Recreate every container, even unchanged ones.
    #[arg(long)]
    pub force_recreate: bool,
    /// Remove containers of agents that are no longer in the agentfile.
    #[arg(long)]
    pub remove_orphans: bool,
    /// Print the plan (one line per Docker action and trigger change, with its cause) and change
    /// nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Seconds a replaced or removed container gets to checkpoint and exit before it is killed.
    #[arg(short = 't', long = "timeout", default_value_t = DEFAULT_STOP_SECS, value_name = "SECS")]
    pub timeout: i32,
    /// Seconds to wait for every durable runner to be ready.
    #[arg(long, default_value_t = 60, value_name = "S")]
    pub wait_timeout: u64,
    /// Progress as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Run the pool on Docker Swarm: one service per agent and the pool's own checkpoint API as
    /// a service (this engine must be a swarm manager). See docs/deployment.md.
    #[arg(long)]
    pub swarm: bool,
    /// With --swarm: the image every node runs (a registry reference, pushed beforehand) instead
    /// of the one `up` builds on this node.
    #[arg(long, value_name = "REF", requires = "swarm")]
    pub image: Option<String>,
    /// With --swarm: the Postgres URL of the pool's API (kept as a Swarm secret); without it the
    /// API runs on SQLite, one replica pinned to this node.
    #[arg(
        long,
        env = "NINETRIX_API_DATABASE_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub api_database: Option<String>,
    /// With --swarm: how many replicas of the API run (more than 1 needs --api-database).
    #[arg(long, default_value_t = 1, value_name = "N", requires = "swarm")]
    pub api_replicas: u32,
}

impl UpArgs {
    /// What is asked of the backend.
    pub(crate) fn settings(&self) -> UpSettings {
        UpSettings {
            file: self.file.clone(),
            pool: self.pool.clone(),
            force_recreate: self.force_recreate,
            remove_orphans: self.remove_orphans,
            dry_run: self.dry_run,
            timeout: self.timeout,
            wait_timeout: self.wait_timeout,
            json: self.json,
            swarm: self.swarm,
            image: self.image.clone(),
            api_database: self.api_database.clone(),
            api_replicas: self.api_replicas,
        }
    }
}

/// Runs `ninetrix up` on the backend `--swarm` names.
pub(crate) async fn run(args: &UpArgs) -> anyhow::Result<ExitCode> {
    crate::backend::Backend::chosen(args.swarm)
        .up(&args.settings(), None)
        .await
}
