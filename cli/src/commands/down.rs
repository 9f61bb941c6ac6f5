//! `ninetrix down`: its arguments; the pool's backend takes the pool down (one host:
//! [`crate::pool::down`], Docker Swarm: [`crate::swarm::remove`]), then `--api` removes this
//! home's local API container. Every step runs even when an earlier one failed; the failures are
//! reported together at the end and make the exit status 1.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cli::pool_name;
use crate::deploy::DownSettings;
use crate::deploy::failures::Failures;
use crate::pool::resolve::Fallback;
use crate::pool::spec::DEFAULT_STOP_SECS;
use crate::ui::progress::Progress;

/// Arguments of `ninetrix down`.
#[derive(Debug, Args)]
pub struct DownArgs {
    /// The agentfile (for the pool name).
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Seconds each runner gets to checkpoint and exit before it is killed.
    #[arg(short = 't', long = "timeout", default_value_t = DEFAULT_STOP_SECS, value_name = "SECS")]
    pub timeout: i32,
    /// Also delete the pool state, every thread of the pool in the API, the workspace volumes
    /// and the background jobs' containers (their output).
    #[arg(long)]
    pub purge: bool,
    /// Leave the pool's running background jobs running (and the networks they are on). By
    /// default they are stopped (SIGTERM, killed after 10 s) and their containers kept with their
    /// output (`ninetrix logs --agent A --job NAME`) until `down --purge`. Not with --purge,
    /// which removes every job.
    #[arg(long, conflicts_with = "purge")]
    pub keep_jobs: bool,
    /// Also remove this home's local API container (it serves every pool of the home).
    #[arg(long)]
    pub api: bool,
    /// With --api: also remove the API's data volume (every thread of every pool of the home).
    #[arg(long, requires = "api")]
    pub volumes: bool,
}

impl DownArgs {
    /// What is asked of the backend.
    pub(crate) fn settings(&self) -> DownSettings {
        DownSettings {
            timeout: self.timeout,
            purge: self.purge,
            api: self.api,
            keep_jobs: self.keep_jobs,
        }
    }
}

/// Runs `ninetrix down`.
pub(crate) async fn run(args: &DownArgs) -> anyhow::Result<ExitCode> {
    let docker = crate::docker::connect().await?;
    let pool = crate::pool::resolve::resolve(&args.file, args.pool.as_deref(), Fallback::Nothing)?;
    if pool.is_none() && !args.api {
        anyhow::bail!(
            "{} does not exist; pass -f FILE or -p POOL",
            args.file.display()
        );
    }
    let home = crate::home::agentfile_home()?;
    let progress = Progress::new(false);
    let mut failures = Failures::default();
    if let Some(pool) = &pool {
        crate::backend::down(
            &docker,
            &home,
            pool,
            &args.settings(),
            &progress,
            &mut failures,
        )
        .await?;
    }
    if args.api {
        crate::pool::down::remove_api(&docker, &home, args.volumes, &progress, &mut failures).await;
    }
    match failures.report() {
        None => Ok(ExitCode::SUCCESS),
        Some(report) => {
            eprintln!("{report}");
            Ok(ExitCode::from(crate::EXIT_FAILURE))
        }
    }
}
