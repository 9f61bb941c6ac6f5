//! The I/O half of `ninetrix up`: carries out a [`Plan`] against Docker and the checkpoint API,
//! and keeps the pool state in step. It decides nothing. Every thread is recorded before its
//! container exists, and every container ID as soon as the container exists, so a failed op never
//! loses the IDs of containers that did start.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context as _;
use bollard::Docker;
use bollard::query_parameters::CreateContainerOptionsBuilder;
use futures_util::StreamExt as _;
use ninetrix_agentfile::AgentSpec;
use ninetrix_proto::ThreadId;
use ninetrix_proto::boots::Created;

use crate::docker::stop_and_remove;
use crate::pool::engine::upload_secrets;
use crate::pool::image::Image;
use crate::pool::local_api::Api;
use crate::pool::plan::{Note, Op, Plan, RemoveCause, Thread};
use crate::pool::spec::{Config, Replica, Slot};
use crate::pool::state::{LockedState, ReplicaState};
use crate::ui::progress::Progress;

/// What a container needs that the plan does not carry: per agent, its spec, image, digest and
/// secrets.
pub(crate) struct Target<'a> {
    /// The engine.
    pub(crate) docker: &'a Docker,
    /// The checkpoint API (runner tokens, event seqs).
    pub(crate) api: &'a Api,
    /// The pool.
    pub(crate) pool: &'a str,
    /// The pool network's ID.
    pub(crate) network: &'a str,
    /// Agent specs by name.
    pub(crate) agents: HashMap<&'a str, &'a AgentSpec>,
    /// Images by agent.
    pub(crate) images: &'a HashMap<String, Image>,
    /// Configuration digests by agent.
    pub(crate) configs: HashMap<&'a str, &'a Config>,
    /// Host secrets by agent.
    pub(crate) secrets: &'a BTreeMap<String, BTreeMap<String, String>>,
    /// Seconds a container gets to checkpoint and exit when it is replaced or removed.
    pub(crate) stop_timeout: i32,
    /// The internal network of each agent with `network.egress` (pool/egress.rs).
    pub(crate) egress: &'a BTreeMap<String, String>,
}

/// A durable container that was (re)started, for the readiness wait.
pub(crate) struct Started {
    /// Its name.
    pub(crate) name: String,
    /// Docker's ID.
    pub(crate) id: String,
    /// Its thread.
    pub(crate) thread: ThreadId,
    /// The thread's last event seq before the start: `ready` must come after it.
    pub(crate) baseline: u64,
}

/// One container to create (replacing `old`), its thread already decided and recorded.
struct Job<'a> {
    spec: &'a AgentSpec,
    replica: u32,
    thread: ThreadId,
    old: Option<&'a str>,
}

/// What creating one container did: its ID if it came to exist, and the outcome.
struct Outcome<'a> {
    job: &'a Job<'a>,
    id: Option<String>,
    result: anyhow::Result<u64>,
}

/// Carries out `plan`: removals, notes, starts, then creations (several at a time). Saves the
/// pool state after every container that came to exist. Returns the durable containers started;
/// on failure, the first error (after recording everything that did happen).
pub(crate) async fn apply(
    t: &Target<'_>,
    plan: &Plan,
    locked: &mut LockedState,
    progress: &Progress,
) -> anyhow::Result<Vec<Started>> {
    let mut started = Vec::new();
    for note in &plan.notes {
        note_progress(t, note, locked, progress);
    }
    for op in &plan.ops {
        match op {
            Op::BuildImage { .. } | Op::Create { .. } | Op::Recreate { .. } => {}
            Op::Remove {
                name,
                id,
                agent,
                replica,
                cause,
            } => {
                stop_and_remove(t.docker, id, t.stop_timeout).await?;
                let shown = replica.map_or_else(
                    || name.clone(),
                    |n| crate::objects::container_name(t.pool, agent, n),
                );
                match cause {
                    RemoveCause::Orphan => {
                        locked.state.agents.remove(agent);
                        progress.step("Container", &shown, "Removed (orphan)");
                    }
                    RemoveCause::ScaledDown => {
                        if let (Some(n), Some(r)) = (replica, locked.state.agents.get_mut(agent)) {
                            r.remove(n);
                        }
                        progress.step("Container", &shown, "Removed");
                    }
                    RemoveCause::Duplicate => {
                        progress.step("Container", &shown, "Removed (duplicate)")
                    }
                }
            }
            Op::Start {
                agent,
                replica,
                id,
                thread,
                ..
            } => {
                let name = crate::objects::container_name(t.pool, agent, *replica);
                let thread = thread.context("a pool container has no thread label")?;
                let baseline = t.api.event_seq(thread).await?;
                t.docker
                    .start_container(id, None)
                    .await
                    .with_context(|| format!("cannot start {name}"))?;
                progress.step("Container", &name, "Started");
                started.push(Started {
                    name,
                    id: id.clone(),
                    thread,
                    baseline,
                });
            }
        }
    }
    let jobs = jobs(t, plan, locked)?;
    // Every thread is on disk before its container exists.
    locked.save()?;
    for job in &jobs {
        let doing = if job.old.is_some() {
            "Recreating"
        } else {
            "Creating"
        };
        progress.working("Container", &name(t, job), doing);
    }
    let mut creations =
        futures_util::stream::iter(jobs.iter().map(|job| create(t, job))).buffer_unordered(8);
    let mut first_error = None;
    while let Some(outcome) = creations.next().await {
        let job = outcome.job;
        let name = name(t, job);
        if let Some(id) = &outcome.id {
            let entry = locked
                .state
                .agents
                .entry(job.spec.name.clone())
                .or_default()
                .entry(job.replica)
                .or_insert(ReplicaState {
                    thread_id: job.thread,
                    container_id: None,
                    config_hash: None,
                });
            entry.container_id = Some(id.clone());
            entry.config_hash = t.configs.get(job.spec.name.as_str()).map(|c| c.hash());
            locked.save()?;
        }
        match (outcome.result, outcome.id) {
            (Ok(baseline), Some(id)) => {
                let done = if job.old.is_some() {
                    "Recreated"
                } else {
                    "Created"
                };
                progress.step("Container", &name, done);
                if job.spec.execution.durability {
                    started.push(Started {
                        name,
                        id,
                        thread: job.thread,
                        baseline,
                    });
                }
            }
            (Ok(_), None) => {}
            (Err(e), _) => {
                progress.fail("Container", &name, &format!("{e:#}"));
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(started),
    }
}

/// Shows a note, and records a kept container's ID if the state lacks it.
fn note_progress(t: &Target<'_>, note: &Note, locked: &mut LockedState, progress: &Progress) {
    match note {
        Note::Keep {
            agent,
            replica,
            id,
            running,
            ..
        } => {
            let name = crate::objects::container_name(t.pool, agent, *replica);
            let status = if *running {
                "Running"
            } else {
                "Exited (batch: not re-run)"
            };
            progress.step("Container", &name, status);
            if let Some(entry) = locked
                .state
                .agents
                .get_mut(agent)
                .and_then(|m| m.get_mut(replica))
                && entry.container_id.is_none()
            {
                entry.container_id = Some(id.clone());
                entry.config_hash = t.configs.get(agent.as_str()).map(|c| c.hash());
            }
        }
        Note::Orphan { name } => progress.fail(
            "Container",
            name,
            "Orphan: its agent is not in the agentfile (remove it with --remove-orphans)",
        ),
    }
}

/// The creations of the plan, each with its thread decided and recorded in the state: a reused
/// thread as it is, a fresh one minted now (a batch job gets a new thread per run).
fn jobs<'a>(
    t: &Target<'a>,
    plan: &'a Plan,
    locked: &mut LockedState,
) -> anyhow::Result<Vec<Job<'a>>> {
    let mut jobs = Vec::new();
    for op in &plan.ops {
        let (agent, replica, thread, old) = match op {
            Op::Create {
                agent,
                replica,
                thread,
            } => (agent, *replica, *thread, None),
            Op::Recreate {
                agent,
                replica,
                old,
                thread,
                ..
            } => (agent, *replica, *thread, Some(old.as_str())),
            _ => continue,
        };
        let spec = *t
            .agents
            .get(agent.as_str())
            .with_context(|| format!("the plan names an agent `{agent}` the agentfile lacks"))?;
        let thread = match thread {
            Thread::Reuse(id) => id,
            Thread::Fresh => ThreadId::new_v7(),
        };
        let replicas = locked.state.agents.entry(agent.clone()).or_default();
        let entry = replicas.entry(replica).or_insert(ReplicaState {
            thread_id: thread,
            container_id: None,
            config_hash: None,
        });
        if entry.thread_id != thread {
            *entry = ReplicaState {
                thread_id: thread,
                container_id: None,
                config_hash: None,
            };
        }
        jobs.push(Job {
            spec,
            replica,
            thread,
            old,
        });
    }
    Ok(jobs)
}

fn name(t: &Target<'_>, job: &Job<'_>) -> String {
    crate::objects::container_name(t.pool, &job.spec.name, job.replica)
}

/// Creates one replica container: remove the old one, mint the runner token, create, upload the
/// secrets, start. The ID is returned whenever the container came to exist, even if a later
/// step failed; the result carries the thread's event seq before the start.
async fn create<'j>(t: &Target<'_>, job: &'j Job<'j>) -> Outcome<'j> {
    let mut id = None;
    let result = create_steps(t, job, &mut id).await;
    Outcome { job, id, result }
}

async fn create_steps(
    t: &Target<'_>,
    job: &Job<'_>,
    id: &mut Option<String>,
) -> anyhow::Result<u64> {
    if let Some(old) = job.old {
        stop_and_remove(t.docker, old, t.stop_timeout).await?;
    }
    let agent = job.spec.name.as_str();
    let token = t
        .api
        .runner_token(job.thread, t.pool, agent, job.replica)
        .await?;
    let image = t
        .images
        .get(agent)
        .with_context(|| format!("no image for agent `{agent}`"))?;
    let config = t
        .configs
        .get(agent)
        .with_context(|| format!("no configuration digest for agent `{agent}`"))?;
    let replica = Replica {
        pool: t.pool,
        spec: job.spec,
        slot: Slot::Replica(job.replica),
        thread: job.thread,
        image: &image.tag,
        api_url: &t.api.container_url,
        network: t.network,
        config,
        created: if job.old.is_some() {
            Created::Recreate
        } else {
            Created::New
        },
        egress: t
            .egress
            .get(agent)
            .map(|network| crate::pool::egress_env::Link {
                network,
                api_local: t.api.local.is_some(),
            }),
    };
    let cname = replica.name();
    let created = t
        .docker
        .create_container(
            Some(CreateContainerOptionsBuilder::default().name(&cname).build()),
            replica.body(),
        )
        .await
        .map_err(|e| match e {
            bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            } => anyhow::anyhow!(
                "the container name {cname} is already in use by a container ninetrix does not manage; remove or rename it"
            ),
            e => anyhow::anyhow!("cannot create {cname}: {e}"),
        })?;
    *id = Some(created.id.clone());
    let mut secrets = t.secrets.get(agent).cloned().unwrap_or_default();
    if job.spec.execution.durability {
        // With it the replica also serves the agent's sessions it owns.
        let agent_token = t.api.agent_token(t.pool, agent).await?;
        secrets.insert(
            ninetrix_runner::launch::var::AGENT_TOKEN.to_string(),
            agent_token,
        );
    }
    upload_secrets(t.docker, &created.id, &secrets, Some(&token))
        .await
        .with_context(|| format!("cannot upload the secrets of {cname}"))?;
    let baseline = t.api.event_seq(job.thread).await?;
    t.docker
        .start_container(&created.id, None)
        .await
        .with_context(|| format!("cannot start {cname}"))?;
    Ok(baseline)
}
