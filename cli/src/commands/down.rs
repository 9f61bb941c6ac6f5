//! `ninetrix down`: stop (SIGTERM; runners checkpoint and exit 0) and remove a pool's containers
//! in parallel, then its network. Pool state and thread data stay (like Compose keeps volumes)
//! unless `--purge`, which also deletes the threads in the API, the workspace volumes and the
//! pool file. `--api` also removes the local API container (it serves every pool).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use bollard::query_parameters::RemoveContainerOptionsBuilder;
use clap::Args;

use crate::cli::pool_name;
use crate::docker::{label, name, pool_containers};
use crate::pool::image;
use crate::pool::local_api::{Api, local_name};
use crate::pool::resolve::Fallback;
use crate::pool::spec;
use crate::pool::spec::DEFAULT_STOP_SECS;
use crate::pool::state;
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
    /// Also delete the pool state, the threads' data in the API and the workspace volumes.
    #[arg(long)]
    pub purge: bool,
    /// Also remove the local API container (it serves every pool).
    #[arg(long)]
    pub api: bool,
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
    let progress = Progress::new(false);
    if let Some(pool) = &pool {
        let containers = pool_containers(&docker, Some(pool)).await?;
        let removals = containers.iter().map(|c| {
            let docker = &docker;
            async move {
                crate::docker::stop_and_remove(
                    docker,
                    c.id.as_deref().unwrap_or_default(),
                    args.timeout,
                )
                .await?;
                anyhow::Ok((
                    name(c),
                    label(c, spec::AGENT).unwrap_or_default().to_string(),
                ))
            }
        });
        for done in futures_util::future::join_all(removals).await {
            let (n, _) = done?;
            progress.step("Container", &n, "Removed");
        }
        let net = spec::network_name(pool);
        // The local API is attached to every pool's network; detach it first.
        let _ = docker
            .disconnect_network(
                &net,
                bollard::models::NetworkDisconnectRequest {
                    container: local_name(),
                    force: Some(true),
                },
            )
            .await;
        match docker.remove_network(&net).await {
            Ok(()) => progress.step("Network", &net, "Removed"),
            Err(e) if crate::docker::is_not_found(&e) => {}
            Err(e) => return Err(e).with_context(|| format!("cannot remove network {net}")),
        }
        if args.purge {
            let home = crate::home::agentfile_home()?;
            let locked = state::lock(&home, pool)?;
            let threads: Vec<_> = locked
                .state
                .agents
                .iter()
                .flat_map(|(agent, r)| r.iter().map(move |(n, s)| (agent.clone(), *n, s.thread_id)))
                .collect();
            if !threads.is_empty() {
                let (img, _) = image::runner_image(&docker, &image::this_binary()?).await?;
                let api = Api::ensure(&docker, &home, &img).await?;
                for (agent, n, thread) in &threads {
                    api.purge(*thread).await?;
                    let volume = spec::volume_name(pool, agent, *n);
                    let _ = docker
                        .remove_volume(
                            &volume,
                            None::<bollard::query_parameters::RemoveVolumeOptions>,
                        )
                        .await;
                }
            }
            locked.delete()?;
            progress.step(
                "Pool",
                pool,
                &format!("Purged ({} thread(s))", threads.len()),
            );
        }
    }
    if args.api {
        let n = local_name();
        match docker
            .remove_container(
                &n,
                Some(RemoveContainerOptionsBuilder::default().force(true).build()),
            )
            .await
        {
            Ok(()) => progress.step("Container", &n, "Removed"),
            Err(e) if crate::docker::is_not_found(&e) => {}
            Err(e) => return Err(e).context("cannot remove the local API container"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
