//! `ninetrix logs`: every container of a pool, Compose-style (`agent-n | line`), stdout and
//! stderr, lines reassembled from Docker's frames, merged by time; `--follow` re-attaches across
//! restarts without repeating lines and prints restart markers. Background jobs' output is not
//! mixed in: `--agent A --job NAME` shows one job's.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cli::pool_name;
use crate::deploy::logs::LogsSettings;

/// Arguments of `ninetrix logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The agentfile (for the pool name); `-f` follows here, so name it with --file or
    /// `ninetrix -f FILE logs`.
    #[arg(long = "file", value_name = "FILE", default_value = "agentfile.yaml")]
    pub file: PathBuf,
    /// The pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Only this agent's containers.
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// Only this background job of --agent: its name (several of one name: the newest) or its
    /// 16-hex ID (`ninetrix ps` lists an agent's jobs as `job:<name>`).
    #[arg(long, value_name = "NAME", requires = "agent")]
    pub job: Option<String>,
    /// Keep following, across restarts.
    #[arg(short, long)]
    pub follow: bool,
    /// A stray argument, kept only to explain `logs -f FILE`.
    #[arg(hide = true, value_name = "STRAY")]
    pub stray: Option<String>,
    /// Only lines since this time (RFC 3339) or for this long (10m, 2h).
    #[arg(long, value_name = "T")]
    pub since: Option<String>,
    /// Lines per container from the end (`all` for everything).
    #[arg(long, default_value = "all", value_name = "N")]
    pub tail: String,
    /// Show timestamps.
    #[arg(short, long)]
    pub timestamps: bool,
    /// No colours.
    #[arg(long)]
    pub no_color: bool,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
}

impl LogsArgs {
    /// What is asked of the backend.
    pub(crate) fn settings(&self) -> LogsSettings {
        LogsSettings {
            agent: self.agent.clone(),
            job: self.job.clone(),
            follow: self.follow,
            since: self.since.clone(),
            tail: self.tail.clone(),
            timestamps: self.timestamps,
            no_color: self.no_color,
            json: self.json,
        }
    }
}

/// Runs `ninetrix logs`: the pool's backend prints them.
pub(crate) async fn run(args: &LogsArgs) -> anyhow::Result<ExitCode> {
    let pool = crate::pool::resolve::pool_name(&args.file, args.pool.as_deref())?;
    let docker = crate::docker::connect().await?;
    crate::backend::Backend::read(&crate::home::agentfile_home()?, &pool)?
        .logs(&docker, &pool, &args.settings())
        .await
}
