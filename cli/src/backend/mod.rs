//! Where a pool runs, as the one seam the commands use: [`Backend::Host`] (one Docker Engine,
//! [`crate::pool`]) or [`Backend::Swarm`] (Docker Swarm, [`crate::swarm`]), chosen by `up
//! --swarm` and recorded in the pool state. Each operation a command needs — `up` (plan and
//! apply), `down`, `ps`'s rows, `logs`, a replica's name, facts and thread, the pool's API, restarting a reset
//! replica, whether the pool is down — is one method here that hands the work to its backend, so
//! no command branches on the pool state's `swarm`, and neither backend knows the commands.

pub(crate) mod view;

use std::path::Path;
use std::process::ExitCode;

use bollard::Docker;
use ninetrix_proto::ThreadId;

use crate::deploy::failures::Failures;
use crate::deploy::logs::LogsSettings;
use crate::deploy::{DownSettings, Only, UpSettings};
use crate::pool::condition::Facts;
use crate::pool::local_api::Api;
use crate::pool::state::{self, PoolState};
use crate::pool::status::{Row, StatusSettings};
use crate::ui::progress::Progress;
use view::PoolView;

/// Where a pool runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// One Docker Engine: a container per replica, this home's API.
    Host,
    /// Docker Swarm: a service per agent, the pool's own API service.
    Swarm,
}

impl Backend {
    /// The backend `up` was asked for (`--swarm`).
    pub(crate) fn chosen(swarm: bool) -> Backend {
        if swarm { Backend::Swarm } else { Backend::Host }
    }

    /// The backend a pool's state records.
    pub(crate) fn of(state: &PoolState) -> Backend {
        Backend::chosen(state.swarm.is_some())
    }

    /// The backend of a pool by name, from its state (a pool without state is on this host).
    pub(crate) fn read(home: &Path, pool: &str) -> anyhow::Result<Backend> {
        Ok(Backend::of(&state::read(home, pool)?))
    }

    /// `ninetrix up` (or, for `reset`, of one replica only): plan, then apply — or print the
    /// plan with `--dry-run`.
    pub(crate) async fn up(
        self,
        settings: &UpSettings,
        only: Option<&Only>,
    ) -> anyhow::Result<ExitCode> {
        match self {
            Backend::Swarm => crate::swarm::deploy::up(settings).await,
            Backend::Host => {
                // A pool whose state says Swarm, checked under the pool lock: refused while it
                // still has services there.
                let on_swarm = async |docker: &Docker, pool: &str| {
                    crate::swarm::has_services(docker, pool).await
                };
                crate::pool::up::up(settings, only, on_swarm).await
            }
        }
    }

    /// `ninetrix ps`: the rows of this backend's pools (`settings.pool`'s, or all of this home's
    /// that run here).
    pub(crate) async fn rows(
        self,
        docker: &Docker,
        home: &Path,
        settings: &StatusSettings,
    ) -> anyhow::Result<Vec<Row>> {
        match self {
            Backend::Swarm => crate::swarm::status::rows(docker, home, settings).await,
            Backend::Host => crate::pool::status::rows(docker, home, settings).await,
        }
    }

    /// `ninetrix logs` of the pool.
    pub(crate) async fn logs(
        self,
        docker: &Docker,
        pool: &str,
        settings: &LogsSettings,
    ) -> anyhow::Result<ExitCode> {
        match self {
            Backend::Swarm if settings.job.is_some() => anyhow::bail!(
                "pool `{pool}` runs on Docker Swarm, which runs no background jobs (they need \
                 one Docker host for now); `ninetrix logs` without --job shows its services"
            ),
            Backend::Swarm => crate::swarm::logs::run(docker, pool, settings).await,
            Backend::Host => crate::pool::logs::run(docker, pool, settings).await,
        }
    }

    /// The pool's API as this host reaches it.
    pub(crate) async fn api(
        self,
        home: &Path,
        pool: &str,
        state: &PoolState,
    ) -> anyhow::Result<Api> {
        match &state.swarm {
            Some(swarm) => crate::swarm::api_of(home, pool, swarm),
            None => Api::existing(home).await,
        }
    }

    /// What names a replica to the user: its container, or on Swarm its task (`service.n`).
    pub(crate) fn replica_name(self, pool: &str, agent: &str, replica: u32) -> String {
        match self {
            Backend::Swarm => format!(
                "{}.{replica}",
                crate::objects::swarm::service_name(pool, agent)
            ),
            Backend::Host => crate::objects::container_name(pool, agent, replica),
        }
    }

    /// The command that starts the pool again, from anywhere.
    pub(crate) fn up_command(self, pool: &str, agentfile: Option<&Path>) -> String {
        crate::pool::condition::up_command(pool, agentfile)
            + match self {
                Backend::Swarm => " --swarm",
                Backend::Host => "",
            }
    }

    /// A replica's facts (on one host with its runner's health report when `with_health`; on
    /// Swarm the slot's newest task as Swarm sees it); `None` if it does not exist.
    pub(crate) async fn replica_facts(
        self,
        docker: &Docker,
        pool: &str,
        agent: &str,
        replica: u32,
        with_health: bool,
    ) -> anyhow::Result<Option<Facts>> {
        match self {
            Backend::Swarm => Ok(crate::swarm::observe::slot(docker, pool, agent, replica)
                .await?
                .map(|view| view.facts())),
            Backend::Host => {
                let container = crate::objects::container_name(pool, agent, replica);
                crate::pool::condition::of_container(docker, &container, with_health).await
            }
        }
    }

    /// A replica's thread: on one host the pool state's, on Swarm the API's replica mapping.
    pub(crate) async fn replica_thread(
        self,
        view: &PoolView,
        agent: &str,
        replica: u32,
    ) -> anyhow::Result<ThreadId> {
        match self {
            Backend::Swarm => view.api.replica_thread(&view.name, agent, replica).await,
            Backend::Host => view.thread(agent, replica).map_err(|e| {
                anyhow::anyhow!(
                    "{e:#}; `ninetrix up -p {}` starts it on a new thread",
                    view.name
                )
            }),
        }
    }

    /// After `reset` purged a replica's thread: on one host `up` of that replica alone (it
    /// meets the purged thread, takes the replica's new one from the API's mapping, records it
    /// and recreates the container on it); on Swarm the runner takes the new thread from the API
    /// itself at its next step.
    pub(crate) async fn restart_replica(
        self,
        file: &Path,
        pool: &str,
        only: &Only,
        timeout: i32,
        wait_timeout: u64,
    ) -> anyhow::Result<ExitCode> {
        match self {
            Backend::Swarm => {
                outln!(
                    "{}-{} starts over: its runner takes the replica's new thread from the API at \
                     its next step",
                    only.agent,
                    only.replica
                );
                Ok(ExitCode::SUCCESS)
            }
            Backend::Host => {
                let up = UpSettings {
                    file: file.to_path_buf(),
                    pool: Some(pool.to_string()),
                    force_recreate: false,
                    remove_orphans: false,
                    dry_run: false,
                    timeout,
                    wait_timeout,
                    json: false,
                    swarm: false,
                    image: None,
                    api_database: None,
                    api_replicas: 1,
                };
                self.up(&up, Some(only)).await
            }
        }
    }

    /// Whether the pool is known to be down: on one host, Docker answers and has no container
    /// of it; on Swarm it is never known to be (its tasks run on other nodes too).
    pub(crate) async fn is_down(self, docker: &Docker, pool: &str) -> bool {
        match self {
            Backend::Swarm => false,
            // Job containers `down --keep-jobs` left (or stopped ones kept for their output)
            // are no pool that is up.
            Backend::Host => crate::pool::engine::pool_containers(docker, Some(pool))
                .await
                .is_ok_and(|c| c.iter().all(crate::pool::jobs::is_job)),
        }
    }
}

/// `ninetrix down` of one pool: whether it exists at all (a pool file, a container or a
/// network; else the reason is in `failures`), then under its lock its backend's down.
pub(crate) async fn down(
    docker: &Docker,
    home: &Path,
    pool: &str,
    settings: &DownSettings,
    progress: &Progress,
    failures: &mut Failures,
) -> anyhow::Result<()> {
    let Some(containers) = crate::pool::down::found(docker, home, pool, settings, failures).await?
    else {
        return Ok(());
    };
    // The lock: an `up` of this pool in progress finishes first, and none starts meanwhile.
    let locked = state::lock(home, pool)?;
    match Backend::of(&locked.state) {
        Backend::Swarm => {
            crate::swarm::remove::down(docker, home, pool, locked, settings, progress, failures)
                .await;
        }
        Backend::Host => {
            crate::pool::down::down(
                docker,
                home,
                pool,
                crate::pool::down::Locked {
                    state: locked,
                    containers,
                },
                settings,
                progress,
                failures,
            )
            .await?;
        }
    }
    Ok(())
}
