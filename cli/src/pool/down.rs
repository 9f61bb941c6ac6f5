//! `ninetrix down` of a pool on one host: stop (SIGTERM; runners checkpoint and exit 0) and remove a pool's containers
//! with bounded parallelism, then its networks (found by label, duplicates too; stale endpoints
//! force-disconnected). Pool state and thread data stay (like Compose keeps volumes) unless
//! `--purge`, which also deletes every thread the API records for the pool, every workspace
//! volume of the pool and the pool file. `--api` also removes this home's local API container
//! (it serves every pool of the home); `--api --volumes` its data volume too. Before its
//! containers stop, the pool's triggers are removed from the API (if it runs), so nothing fires
//! into a pool being taken down.
//!
//! Background jobs' containers (pool/jobs.rs) are stopped, not removed — their output stays for
//! `logs --job` — unless `--keep-jobs` leaves the running ones running (and their networks), or
//! `--purge` removes them all. The job broker goes with the other containers.
//!
//! Every step runs even when an earlier one failed; the failures are reported together at the
//! end and make the exit status 1, so one stuck network never leaves volumes, threads or the API
//! behind.

use std::collections::{BTreeSet, HashMap};

use bollard::Docker;
use bollard::models::ContainerSummary;
use bollard::query_parameters::{ListVolumesOptions, RemoveContainerOptionsBuilder};
use futures_util::StreamExt as _;
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::TriggerSet;

use crate::deploy::DownSettings;
use crate::deploy::failures::Failures;
use crate::docker::{is_not_found, label, name, short_id};
use crate::pool::engine::{pool_containers, pool_networks};
use crate::pool::image;
use crate::pool::local_api::{Api, data_volume, local_name};
use crate::pool::state;
use crate::ui::progress::Progress;

/// How many containers are stopped and removed at once.
const PARALLEL_REMOVALS: usize = 16;

/// The workspace volumes of `pool` among `volumes` (name, pool label): those labelled with the
/// pool, and — for volumes made before volumes were labelled — unlabelled ones named
/// `ninetrix-<pool>-…-workspace`, unless a longer known pool's prefix claims the name (pool
/// `a`'s prefix `ninetrix-a-` also matches pool `a-b`'s volumes).
pub(crate) fn pool_volumes(
    pool: &str,
    volumes: &[(String, Option<String>)],
    known_pools: &BTreeSet<String>,
) -> Vec<String> {
    let prefix = format!("ninetrix-{pool}-");
    volumes
        .iter()
        .filter(|(name, labelled)| match labelled {
            Some(p) => p == pool,
            None => {
                name.starts_with(&prefix)
                    && name.ends_with("-workspace")
                    && !known_pools.iter().any(|other| {
                        other.len() > pool.len() && name.starts_with(&format!("ninetrix-{other}-"))
                    })
            }
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// The pool's containers on this engine, if the pool exists at all (a pool file,
/// a container or a network); else `None`, with the reason in `failures` unless `--api` was
/// given (`down --api` of a pool that is gone already is no failure).
pub(crate) async fn found(
    docker: &Docker,
    home: &std::path::Path,
    pool: &str,
    settings: &DownSettings,
    failures: &mut Failures,
) -> anyhow::Result<Option<Vec<ContainerSummary>>> {
    let containers = pool_containers(docker, Some(pool)).await?;
    let networks = pool_networks(docker, pool).await?;
    if !state::exists(home, pool) && containers.is_empty() && networks.is_empty() {
        let mut known: BTreeSet<String> = state::pools(home).into_iter().collect();
        for c in pool_containers(docker, None).await.unwrap_or_default() {
            if let Some(p) = label(&c, crate::objects::POOL) {
                known.insert(p.to_string());
            }
        }
        let known: Vec<String> = known.into_iter().collect();
        let gone = no_pool(pool, &state::pools_dir(home), &known);
        if settings.api {
            // The API is what `down --api` is for: a pool that is gone already is no failure.
            eprintln!("{gone}; nothing of it to take down");
        } else {
            failures.record(gone);
        }
        return Ok(None);
    }
    Ok(Some(containers))
}

/// A pool on one host, locked for `down`, with the containers [`found`] found.
pub(crate) struct Locked {
    /// Its state, locked.
    pub(crate) state: state::LockedState,
    /// Its containers.
    pub(crate) containers: Vec<ContainerSummary>,
}

/// `down` of a pool on one host, under its lock (see the module's doc).
pub(crate) async fn down(
    docker: &Docker,
    home: &std::path::Path,
    pool: &str,
    Locked {
        state: locked,
        containers,
    }: Locked,
    args: &DownSettings,
    progress: &Progress,
    failures: &mut Failures,
) -> anyhow::Result<()> {
    // The triggers before the containers: nothing fires into a pool being taken down.
    remove_triggers(home, pool, progress).await;

    // Background jobs are the broker's containers, not replicas: stopped, kept or removed on
    // their own terms (pool/jobs.rs); the broker goes with the other containers.
    let (job_containers, containers): (Vec<_>, Vec<_>) =
        containers.into_iter().partition(crate::pool::jobs::is_job);
    let mut removals = futures_util::stream::iter(containers.iter().map(|c| async move {
        let n = name(c);
        let r = crate::docker::stop_and_remove(
            docker,
            c.id.as_deref().unwrap_or_default(),
            args.timeout,
        )
        .await;
        (n, r)
    }))
    .buffer_unordered(PARALLEL_REMOVALS);
    let mut removed_names = Vec::new();
    while let Some((n, r)) = removals.next().await {
        if failures.check(&format!("container {n}"), r).is_some() {
            progress.step("Container", &n, "Removed");
        }
        removed_names.push(n);
    }
    drop(removals);
    let kept = take_down_jobs(docker, &job_containers, args, progress, failures).await;
    removed_names.extend(
        job_containers
            .iter()
            .map(name)
            .filter(|n| !kept.contains(n)),
    );

    // The networks (duplicates too), re-listed: a container removal detaches its endpoint.
    let local = local_name(home);
    let networks = match pool_networks(docker, pool).await {
        Ok(n) => n,
        Err(e) => {
            failures.record(format!("networks of pool {pool}: {e:#}"));
            Vec::new()
        }
    };
    for net in &networks {
        // A job left running keeps its network (the next `up` finds it by label).
        let running_jobs: Vec<&str> = net
            .endpoints
            .iter()
            .map(String::as_str)
            .filter(|e| kept.iter().any(|k| k == e))
            .collect();
        if !running_jobs.is_empty() {
            progress.step(
                "Network",
                &net.name,
                &format!("Kept (--keep-jobs: {} run on it)", running_jobs.join(", ")),
            );
            continue;
        }
        // The local API is attached to every pool's network; detach it first.
        let _ = docker
            .disconnect_network(
                &net.id,
                bollard::models::NetworkDisconnectRequest {
                    container: local.clone(),
                    force: Some(true),
                },
            )
            .await;
        match crate::docker::remove_network(docker, &net.id, &removed_names).await {
            Ok(()) => progress.step("Network", &net.name, "Removed"),
            Err(e) => failures.record(format!("network {} ({}): {e}", net.name, short_id(&net.id))),
        }
    }

    // Secrets volumes left by containers removed without `-v` (`docker rm -f`): secrets only,
    // which the next `up` uploads again.
    remove_secret_volumes(docker, pool, progress).await;

    if args.purge {
        let threads_gone =
            purge_threads(docker, home, pool, &locked.state, progress, failures).await;
        remove_volumes(docker, home, pool, progress, failures).await;
        if threads_gone {
            failures.check("pool file", locked.delete());
            progress.step("Pool", pool, "Purged");
        } else {
            failures.record(format!(
                "the pool file of {pool} is kept so that `ninetrix down --purge -p {pool}` can \
                 finish deleting its threads"
            ));
        }
    }
    Ok(())
}

/// Stops the pool's running jobs (Docker stop, 10 s), or with `--purge` removes every job's
/// container, or with `--keep-jobs` leaves the running ones. Returns the names of the job
/// containers left running.
async fn take_down_jobs(
    docker: &Docker,
    jobs: &[ContainerSummary],
    args: &DownSettings,
    progress: &Progress,
    failures: &mut Failures,
) -> Vec<String> {
    use crate::pool::jobs::{JobFate, Listed, fate};
    let mut kept = Vec::new();
    let mut work = Vec::new();
    for c in jobs {
        let Some(job) = Listed::of(c) else { continue };
        match fate(job.running(), args.keep_jobs, args.purge) {
            JobFate::Keep if job.running() => {
                progress.step("Job", &job.shown_name(), "Kept running (--keep-jobs)");
                kept.push(job.container.clone());
            }
            JobFate::Keep => {}
            f => work.push((job, f)),
        }
    }
    let mut done = futures_util::stream::iter(work.into_iter().map(|(job, f)| async move {
        let r = match f {
            JobFate::Remove => {
                crate::docker::stop_and_remove(docker, &job.container_id, JOB_STOP_SECS).await
            }
            _ => docker
                .stop_container(
                    &job.container_id,
                    Some(
                        bollard::query_parameters::StopContainerOptionsBuilder::default()
                            .t(JOB_STOP_SECS)
                            .build(),
                    ),
                )
                .await
                .or_else(|e| if is_not_found(&e) { Ok(()) } else { Err(e) })
                .map_err(anyhow::Error::from),
        };
        (job, f, r)
    }))
    .buffer_unordered(PARALLEL_REMOVALS);
    while let Some((job, f, r)) = done.next().await {
        let what = format!("job {} ({})", job.job.name, job.container);
        if failures.check(&what, r).is_some() {
            let said = if f == JobFate::Remove {
                "Removed"
            } else {
                "Stopped (its output stays: `ninetrix logs --job`)"
            };
            progress.step("Job", &job.shown_name(), said);
        }
    }
    kept
}

/// Seconds a background job gets to exit before it is killed by `down`.
const JOB_STOP_SECS: i32 = 10;

/// What `down` says of a pool that has no state, container or network.
pub(crate) fn no_pool(pool: &str, pools_dir: &std::path::Path, known: &[String]) -> String {
    format!(
        "no pool `{pool}`: no state in {} and no container or network labelled with it (pools: \
         {})",
        pools_dir.display(),
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        }
    )
}

/// Removes the pool's triggers (registers an empty set with the API the pool uses, if it runs
/// now: nothing is started for this) and prints a line per trigger removed. Best-effort: a
/// failure is a warning and never fails `down`.
async fn remove_triggers(home: &std::path::Path, pool: &str, progress: &Progress) {
    let removed = match Api::existing(home).await {
        Ok(api) => api.set_triggers(pool, &TriggerSet::default()).await,
        Err(e) => Err(e),
    };
    match removed {
        Ok(applied) => {
            for name in &applied.removed {
                progress.step("Trigger", name, "Removed");
            }
        }
        Err(e) => eprintln!("warning: {}", triggers_kept(pool, &e)),
    }
}

/// The warning when the triggers of `pool` could not be removed.
fn triggers_kept(pool: &str, e: &anyhow::Error) -> String {
    format!(
        "the triggers of pool {pool} (if it has any) were not removed: {e:#}; they stay \
         registered and, while the API runs, fire into their sessions' inboxes — run `ninetrix \
         down -p {pool}` again with the API running to remove them"
    )
}

/// Deletes every thread the API records for the pool (all replicas, `ninetrix run` jobs, past
/// batch containers), page by page until the listing is empty, then the pool file's own
/// threads (older APIs may not have their labels), then the pool's memories (`DELETE
/// /v1/memories?pool=`, one transaction). Whether every thread and the memories are gone.
async fn purge_threads(
    docker: &Docker,
    home: &std::path::Path,
    pool: &str,
    pool_state: &state::PoolState,
    progress: &Progress,
    failures: &mut Failures,
) -> bool {
    let api = match image::this_binary() {
        Ok(binary) => match image::runner_image(docker, &binary).await {
            Ok((img, _)) => Api::ensure(docker, home, &img).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    let Some(api) = failures.check("the checkpoint API (to delete the pool's threads)", api) else {
        return false;
    };
    let mut purged = 0usize;
    let mut failed: BTreeSet<ThreadId> = BTreeSet::new();
    loop {
        // Deleted threads leave the listing; the ones that failed stay at its front.
        let offset = u32::try_from(failed.len()).unwrap_or(u32::MAX);
        let page = match api.pool_threads(pool, offset).await {
            Ok(p) => p,
            Err(e) => {
                failures.record(format!("threads of pool {pool}: {e:#}"));
                return false;
            }
        };
        if page.is_empty() {
            break;
        }
        let mut progressed = false;
        for t in page {
            if failed.contains(&t.thread_id) {
                continue;
            }
            match api.purge(t.thread_id).await {
                Ok(()) => {
                    purged += 1;
                    progressed = true;
                }
                Err(e) => {
                    failures.record(format!("thread {}: {e:#}", t.thread_id));
                    failed.insert(t.thread_id);
                    progressed = true;
                }
            }
        }
        if !progressed {
            break;
        }
    }
    for replicas in pool_state.agents.values() {
        for r in replicas.values() {
            if failed.contains(&r.thread_id) {
                continue;
            }
            if let Err(e) = api.purge(r.thread_id).await {
                failures.record(format!("thread {}: {e:#}", r.thread_id));
                failed.insert(r.thread_id);
            }
        }
    }
    progress.step("Threads", pool, &format!("Deleted ({purged})"));
    let memories = match api.purge_memories(pool).await {
        Ok(n) => {
            progress.step("Memories", pool, &format!("Deleted ({n} files)"));
            true
        }
        Err(e) => {
            failures.record(format!("memories of pool {pool}: {e:#}"));
            false
        }
    };
    failed.is_empty() && memories
}

/// Removes the pool's secrets volumes that no container uses any more (best effort: one still
/// in use belongs to a container `down` could not remove, which is reported already).
async fn remove_secret_volumes(docker: &Docker, pool: &str, progress: &Progress) {
    let filters: HashMap<String, Vec<String>> = [(
        "label".to_string(),
        vec![
            format!("{}={pool}", crate::objects::POOL),
            format!(
                "{}={}",
                crate::objects::ROLE,
                crate::hardening::SECRETS_ROLE
            ),
        ],
    )]
    .into();
    let Ok(listed) = docker
        .list_volumes(Some(ListVolumesOptions {
            filters: Some(filters),
        }))
        .await
    else {
        return;
    };
    for v in listed.volumes.unwrap_or_default() {
        if docker
            .remove_volume(
                &v.name,
                None::<bollard::query_parameters::RemoveVolumeOptions>,
            )
            .await
            .is_ok()
        {
            progress.step("Volume", &v.name, "Removed (secrets)");
        }
    }
}

/// Removes the pool's workspace volumes (see [`pool_volumes`]).
async fn remove_volumes(
    docker: &Docker,
    home: &std::path::Path,
    pool: &str,
    progress: &Progress,
    failures: &mut Failures,
) {
    let listed = match docker.list_volumes(None::<ListVolumesOptions>).await {
        Ok(l) => l.volumes.unwrap_or_default(),
        Err(e) => {
            failures.record(format!("volumes of pool {pool}: cannot list volumes: {e}"));
            return;
        }
    };
    let volumes: Vec<(String, Option<String>)> = listed
        .into_iter()
        .map(|v| (v.name, v.labels.get(crate::objects::POOL).cloned()))
        .collect();
    let mut known: BTreeSet<String> = state::pools(home).into_iter().collect();
    known.extend(volumes.iter().filter_map(|(_, p)| p.clone()));
    for c in pool_containers(docker, None).await.unwrap_or_default() {
        if let Some(p) = label(&c, crate::objects::POOL) {
            known.insert(p.to_string());
        }
    }
    for v in pool_volumes(pool, &volumes, &known) {
        match docker
            .remove_volume(&v, None::<bollard::query_parameters::RemoveVolumeOptions>)
            .await
        {
            Ok(()) => progress.step("Volume", &v, "Removed"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => failures.record(format!("volume {v}: {e}")),
        }
    }
}

/// Removes this home's local API container and, with `--volumes`, its data volume.
pub(crate) async fn remove_api(
    docker: &Docker,
    home: &std::path::Path,
    volumes: bool,
    progress: &Progress,
    failures: &mut Failures,
) {
    let n = local_name(home);
    match docker
        .remove_container(
            &n,
            Some(
                RemoveContainerOptionsBuilder::default()
                    .force(true)
                    .v(true)
                    .build(),
            ),
        )
        .await
    {
        Ok(()) => progress.step("Container", &n, "Removed"),
        Err(e) if is_not_found(&e) => {}
        Err(e) => failures.record(format!("the local API container {n}: {e}")),
    }
    if volumes {
        let v = data_volume(home);
        match docker
            .remove_volume(&v, None::<bollard::query_parameters::RemoveVolumeOptions>)
            .await
        {
            Ok(()) => progress.step("Volume", &v, "Removed"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => failures.record(format!("the API's data volume {v}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_that_stay_registered_are_a_warning_that_says_how_to_remove_them() {
        let warning = triggers_kept("shop", &anyhow::anyhow!("the API is not running"));
        assert!(
            warning.starts_with("the triggers of pool shop (if it has any) were not removed: the API is not running;"),
            "{warning}"
        );
        assert!(warning.contains("`ninetrix down -p shop`"), "{warning}");
    }

    #[test]
    fn a_pools_volumes_are_its_labelled_ones_and_its_old_unlabelled_ones() {
        let v = |n: &str, p: Option<&str>| (n.to_string(), p.map(str::to_string));
        let volumes = vec![
            v("ninetrix-a-w-1-workspace", Some("a")),
            v("custom-name", Some("a")),
            v("ninetrix-a-w-2-workspace", None),
            v("ninetrix-a-b-w-1-workspace", None),
            v("ninetrix-a-x-1-workspace", Some("a-x")),
            v("ninetrix-a-notes", None),
            v("ninetrix-api-data", None),
            v("other", None),
        ];
        let known: BTreeSet<String> = ["a", "a-b", "a-x"].map(String::from).into();
        assert_eq!(
            pool_volumes("a", &volumes, &known),
            vec![
                "ninetrix-a-w-1-workspace".to_string(),
                "custom-name".into(),
                "ninetrix-a-w-2-workspace".into(),
            ]
        );
        assert_eq!(
            pool_volumes("a-b", &volumes, &known),
            vec!["ninetrix-a-b-w-1-workspace".to_string()]
        );
    }
}
