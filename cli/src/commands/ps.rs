//! `ninetrix ps`: the pools' replicas, found by label (so it works from any directory), as each
//! backend reports them (`pool/status.rs` for one host: Docker's status Compose-style with the
//! health verdict and the runner's reason, restarts, exit code, OOM, "gave up"; `swarm/status.rs`
//! for Swarm: one row per replica slot). A durable agent that is not running is listed without
//! `-a`: that is exactly what `ps` is for. Finished batch jobs need `-a`. Background jobs are
//! listed under their agent as `job:<name>` (running ones always, finished ones with `-a`;
//! `--json`: entries with a `job` object), and the pool's job broker as `jobs:broker`. A pool on
//! Swarm is listed by task, in its own table before the containers.

use std::process::ExitCode;

use clap::Args;

use crate::backend::Backend;
use crate::cli::pool_name;
use crate::pool::status::{Row, StatusSettings};

/// Arguments of `ninetrix ps`.
#[derive(Debug, Args)]
pub struct PsArgs {
    /// Only this pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Also finished batch agents, `ninetrix run` containers and finished background jobs
    /// (durable agents that stopped and running background jobs are always listed).
    #[arg(short, long)]
    pub all: bool,
    /// As JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `ninetrix ps`.
pub(crate) async fn run(args: &PsArgs) -> anyhow::Result<ExitCode> {
    let docker = crate::docker::connect().await?;
    let home = crate::home::agentfile_home()?;
    let settings = StatusSettings {
        pool: args.pool.clone(),
        all: args.all,
    };
    if let Some(pool) = &args.pool
        && let Some(message) = crate::pool::status::unknown_pool(&docker, &home, pool).await?
    {
        eprintln!("{message}");
        return Ok(ExitCode::from(crate::EXIT_FAILURE));
    }
    let mut rows = Backend::Host.rows(&docker, &home, &settings).await?;
    let swarm_rows = Backend::Swarm.rows(&docker, &home, &settings).await?;
    let on_swarm_only = args.pool.is_some() && !swarm_rows.is_empty();
    // An agent's jobs after its replicas, oldest first.
    let created = |r: &Row| r.job.as_ref().map(|j| j.created.clone());
    rows.sort_by(|a, b| {
        (
            &a.pool,
            &a.agent,
            a.job.is_some(),
            a.replica,
            created(a),
            &a.container,
        )
            .cmp(&(
                &b.pool,
                &b.agent,
                b.job.is_some(),
                b.replica,
                created(b),
                &b.container,
            ))
    });
    if args.json {
        spend(&home, &mut rows).await;
        rows.extend(swarm_rows);
        outln!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    if !swarm_rows.is_empty() {
        let header = [
            "TASK", "AGENT", "REPLICA", "NODE", "THREAD", "RESTARTS", "EXIT", "STATUS",
        ];
        let cells: Vec<[String; 8]> = swarm_rows.iter().map(Row::swarm_cells).collect();
        crate::output::text(&crate::ui::table::table(header, &cells));
        if on_swarm_only || rows.is_empty() {
            return Ok(ExitCode::SUCCESS);
        }
        outln!();
    }
    let header = [
        "CONTAINER",
        "AGENT",
        "REPLICA",
        "THREAD",
        "RESTARTS",
        "EXIT",
        "STATUS",
    ];
    let cells: Vec<[String; 7]> = rows.iter().map(Row::cells).collect();
    crate::output::text(&crate::ui::table::table(header, &cells));
    Ok(ExitCode::SUCCESS)
}

/// Fills each host row's `spent_usd` from the local checkpoint API, one listing per pool. Best
/// effort: `ps` works without the API, so a pool whose API cannot be asked keeps `None` (and
/// says why on stderr).
async fn spend(home: &std::path::Path, rows: &mut [Row]) {
    let pools: std::collections::BTreeSet<String> =
        rows.iter().filter_map(|r| r.pool.clone()).collect();
    if pools.is_empty() {
        return;
    }
    let api = match crate::pool::local_api::Api::existing(home).await {
        Ok(api) => api,
        Err(e) => {
            eprintln!("note: no spend shown: {e:#}");
            return;
        }
    };
    for pool in pools {
        match api.spend_by_thread(&pool).await {
            Ok(spend) => {
                // A job's thread is its replica's: its spend is counted there.
                for row in rows
                    .iter_mut()
                    .filter(|r| r.pool.as_deref() == Some(&pool) && r.job.is_none())
                {
                    row.spent_usd = row.thread_id.as_ref().and_then(|t| spend.get(t).copied());
                }
            }
            Err(e) => eprintln!("note: no spend shown for pool {pool}: {e:#}"),
        }
    }
}
