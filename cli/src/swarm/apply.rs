//! Carries out a Swarm [`Plan`] (`ninetrix up --swarm`): each op in its order, with the I/O the
//! plan leaves to its execution — the images built before the first op, each service's secrets
//! created just before it (the agents' with the token the API mints, so after the API answers),
//! the API waited for and told the replica counts and triggers right after its service, the
//! sidecars waited for before the first agent, the replicas' threads recorded in the pool state.
//! A create or update is sent as an upsert (created if missing, else updated), and its progress
//! word compares what `up` sets in the spec Swarm has with the one sent.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use base64::Engine as _;
use bollard::Docker;
use bollard::models::{NetworkCreateRequest, SecretSpec, ServiceSpec, TaskState};
use bollard::query_parameters::{
    InspectServiceOptions, ListSecretsOptions, ListServicesOptions, ListTasksOptions,
    UpdateServiceOptions,
};
use ninetrix_agentfile::Agentfile;
use ninetrix_proto::api::TriggerSet;

use crate::deploy::UpSettings;
use crate::objects::COMPONENT;
use crate::pool::image::{self, Binary};
use crate::pool::local_api::{Api, secret_file};
use crate::pool::sidecar::Wanted;
use crate::pool::spec::Telemetry;
use crate::pool::state::{LockedState, ReplicaState, SwarmPool};
use crate::swarm::plan::{Desired, Observed, Op, Plan, Role};
use crate::swarm::pool_filter;
use crate::swarm::spec::{self as sw, AgentService, ApiStore, Secret, SidecarService, api_service};
use crate::ui::progress::Progress;

/// Everything `up --swarm` checked and read before planning, and the pool lock.
pub(crate) struct Deploy<'a> {
    /// The engine (a swarm manager).
    pub(crate) docker: &'a Docker,
    /// `up`'s switches.
    pub(crate) args: &'a UpSettings,
    /// The agentfile.
    pub(crate) af: &'a Agentfile,
    /// The pool.
    pub(crate) pool: &'a str,
    /// `$AGENTFILE_HOME`.
    pub(crate) home: &'a Path,
    /// This manager's node ID (sidecars are pinned to it: their images are built here).
    pub(crate) node: &'a str,
    /// The API's store.
    pub(crate) store: &'a ApiStore,
    /// The triggers to register.
    pub(crate) triggers: &'a TriggerSet,
    /// Each agent's secret values, from the host.
    pub(crate) host_secrets: &'a BTreeMap<String, BTreeMap<String, String>>,
    /// The sidecar MCP servers.
    pub(crate) sidecars: &'a [Wanted],
    /// Each sidecar's secret values, by server.
    pub(crate) sidecar_values: &'a BTreeMap<String, BTreeMap<String, String>>,
    /// This binary, if hashed (see `deploy::up`).
    pub(crate) binary: Option<Binary>,
    /// Where the steps are told.
    pub(crate) progress: &'a Progress,
    /// The pool's state, locked.
    pub(crate) locked: LockedState,
}

/// What the ops so far made, for the ops after them.
#[derive(Default)]
struct Made {
    /// The runner image's tag and each agent's own image, by agent.
    runner_image: String,
    images: HashMap<String, String>,
    /// The overlay network's ID.
    network: Option<String>,
    /// The API's port, naming key and client, once its service is up.
    api: Option<(u16, [u8; 32], Api)>,
    /// The sidecar services made, and whether they were waited for.
    sidecars: Vec<String>,
    sidecars_waited: bool,
    /// The durable agents' services and their replica counts, waited for at the end.
    started: Vec<(String, u32)>,
}

impl Deploy<'_> {
    /// Carries out `plan` (see the module's doc); the exit code `up` ends with.
    pub(crate) async fn apply(mut self, plan: &Plan, seen: &Observed) -> anyhow::Result<ExitCode> {
        let (docker, pool, progress) = (self.docker, self.pool, self.progress);
        let mut made = self.images().await?;
        made.network = seen.network.clone();
        let mut secrets = PoolSecrets::of(pool, seen);
        for op in &plan.ops {
            match op {
                Op::CreateNetwork { name } => {
                    made.network = Some(create_network(docker, pool, name).await?);
                }
                Op::Create { service } | Op::Update { service, .. } => match &service.role {
                    Role::Api => {
                        progress.step(
                            "Network",
                            &crate::objects::swarm::network_name(pool),
                            "Ready",
                        );
                        self.api(&mut secrets, &mut made).await?;
                    }
                    Role::Sidecar(server) => {
                        self.sidecar(server, service, &mut secrets, &mut made)
                            .await?;
                    }
                    Role::Agent(agent) => {
                        self.sidecars_running(&mut made).await?;
                        self.agent(agent, service, &mut secrets, &mut made).await?;
                    }
                },
                Op::RemoveSidecar { name, id } => {
                    docker
                        .delete_service(id)
                        .await
                        .with_context(|| format!("cannot remove the sidecar service {name}"))?;
                    progress.step("Sidecar", name, "Removed");
                }
                Op::RemoveOrphan { name, .. } => {
                    self.sidecars_running(&mut made).await?;
                    docker.delete_service(name).await?;
                    progress.step("Service", name, "Removed");
                }
                Op::ReportOrphan { name, agent } => {
                    self.sidecars_running(&mut made).await?;
                    eprintln!(
                        "service {name} runs agent `{agent}`, which is no longer in the agentfile; `ninetrix up --swarm --remove-orphans` removes it"
                    );
                }
                Op::PruneSecrets { .. } => {
                    self.sidecars_running(&mut made).await?;
                    self.locked.save()?;
                    // Listed again: the updates above may have left more unused.
                    prune_secrets(docker, pool).await?;
                }
            }
        }
        self.finish(&made).await
    }

    /// The images: a registry reference every node can pull, or the ones built here (then the
    /// swarm's other nodes need them too: `docker save | docker load`, or --image).
    async fn images(&self) -> anyhow::Result<Made> {
        let mut made = Made::default();
        match (&self.args.image, &self.binary) {
            (Some(reference), _) => made.runner_image = reference.clone(),
            (None, Some(binary)) => {
                let (img, built) = image::runner_image(self.docker, binary).await?;
                self.progress.step(
                    "Image",
                    &img.tag,
                    if built { "Built" } else { "Up to date" },
                );
                for agent in &self.af.agents {
                    if let Some(base) = &agent.runtime.image {
                        let own = image::agent_image(self.docker, base, binary).await?;
                        made.images.insert(agent.name.clone(), own.tag);
                    }
                }
                made.runner_image = img.tag;
            }
            (None, None) => unreachable!("the binary is hashed unless --image is given"),
        }
        Ok(made)
    }

    /// The API: its secrets, its service, its port (kept across `up`s), waited for; then what
    /// it must know before the runners ask it: replica counts (sessions), triggers.
    async fn api(&mut self, secrets: &mut PoolSecrets, made: &mut Made) -> anyhow::Result<()> {
        let (docker, pool, args, home) = (self.docker, self.pool, self.args, self.home);
        let network = made.network.clone().context("the network is made first")?;
        let api_secret = secret_file(&home.join("api").join("secret"))?;
        let admin_path = home.join("api").join("admin-token");
        let admin_token = secret_file(&admin_path)?;
        let key = sw::naming_key(&api_secret, &admin_token);
        let port = match &self.locked.state.swarm {
            Some(s) => s.api_port,
            None => api_port()?,
        };
        let telemetry = Telemetry::from_host();
        let api_secrets = sw::api_secrets(
            &key,
            pool,
            &api_secret,
            &admin_token,
            args.api_database.as_deref(),
        );
        let api_secrets = secrets.ensure(docker, api_secrets).await?;
        let api_spec = api_service(
            pool,
            &made.runner_image,
            self.store,
            &api_secrets,
            &network,
            port,
            &telemetry.env,
        );
        let status = upsert(docker, api_spec, args.force_recreate).await?;
        self.progress.step(
            "API",
            &crate::objects::swarm::api_service_name(pool),
            status,
        );
        let swarm_state = SwarmPool {
            api_port: port,
            database: match self.store {
                ApiStore::Sqlite { .. } => "sqlite".into(),
                ApiStore::Postgres { .. } => "postgres".into(),
            },
        };
        self.locked.state.swarm = Some(swarm_state.clone());
        self.locked.state.agentfile = std::path::absolute(&args.file).ok();
        self.locked.save()?;
        let api = super::api_of(home, pool, &swarm_state)?;
        api.ready(docker, Duration::from_secs(args.wait_timeout.max(30)))
            .await
            .with_context(|| {
                format!(
                    "the pool's API service {} did not answer on port {port}; `docker service ps {}` shows why",
                    crate::objects::swarm::api_service_name(pool),
                    crate::objects::swarm::api_service_name(pool)
                )
            })?;
        for agent in self.af.agents.iter().filter(|a| a.execution.durability) {
            api.set_replicas(
                pool,
                &agent.name,
                agent.execution.replicas,
                &agent.collaborators,
                Some(&agent.card_info()),
            )
            .await?;
        }
        let changed = api.set_triggers(pool, self.triggers).await?;
        for (name, status) in crate::pool::triggers::trigger_steps(&changed) {
            self.progress.step("Trigger", name, status);
        }
        made.api = Some((port, key, api));
        Ok(())
    }

    /// A sidecar MCP server, before the agents that call it (a runner that finds one not
    /// answering yet retries): its image, its secrets, its service.
    async fn sidecar(
        &self,
        server: &str,
        service: &Desired,
        secrets: &mut PoolSecrets,
        made: &mut Made,
    ) -> anyhow::Result<()> {
        let (docker, pool) = (self.docker, self.pool);
        let wanted = self
            .sidecars
            .iter()
            .find(|w| w.server == server)
            .context("a planned sidecar is declared")?;
        let binary = self.binary.as_ref().context("sidecars need this binary")?;
        let (_, key, _) = made.api.as_ref().context("the API is made first")?;
        let network = made
            .network
            .as_deref()
            .context("the network is made first")?;
        let built = image::agent_image(docker, &wanted.base, binary).await?;
        let values = &self.sidecar_values[&wanted.server];
        let wanted_secrets = sw::sidecar_secrets(key, pool, &wanted.server, values);
        let secrets = secrets.ensure(docker, wanted_secrets).await?;
        let spec = SidecarService {
            pool,
            wanted,
            image: &built.tag,
            digest: &wanted.digest(&built.id, values),
            node: self.node,
            network,
            secrets: &secrets,
        }
        .spec();
        let status = upsert(docker, spec, self.args.force_recreate).await?;
        self.progress.step("Sidecar", &service.name, status);
        made.sidecars.push(service.name.clone());
        Ok(())
    }

    /// Once, before the first agent: the sidecars running, so the runners find their tools at
    /// once (a runner that finds a server down retries at its next turn).
    async fn sidecars_running(&self, made: &mut Made) -> anyhow::Result<()> {
        if std::mem::replace(&mut made.sidecars_waited, true) {
            return Ok(());
        }
        let tasks: Vec<(String, u32)> = made.sidecars.iter().map(|n| (n.clone(), 1)).collect();
        let late = wait_running(
            self.docker,
            &tasks,
            Duration::from_secs(self.args.wait_timeout),
            self.progress,
        )
        .await?;
        if late > 0 {
            eprintln!(
                "warning: {late} MCP sidecar(s) did not start running; the agents that use them get an error from their tools until they do (`docker service ps` shows why)"
            );
        }
        Ok(())
    }

    /// An agent: its secrets (a durable agent's tasks ask the API for their replica's thread
    /// with the agent's token; a batch job's run without the API), its service, and its
    /// replicas' threads as the API keeps them (for `invoke`, `trace`, `ps`).
    async fn agent(
        &mut self,
        name: &str,
        service: &Desired,
        secrets: &mut PoolSecrets,
        made: &mut Made,
    ) -> anyhow::Result<()> {
        let (docker, pool) = (self.docker, self.pool);
        let agent = self
            .af
            .agents
            .iter()
            .find(|a| a.name == name)
            .context("a planned agent is in the agentfile")?;
        let (_, key, api) = made.api.as_ref().context("the API is made first")?;
        let network = made
            .network
            .as_deref()
            .context("the network is made first")?;
        let token = if agent.execution.durability {
            Some(api.agent_token(pool, &agent.name).await?)
        } else {
            None
        };
        let wanted = sw::agent_secrets(
            key,
            pool,
            &agent.name,
            &self.host_secrets[&agent.name],
            token.as_deref(),
        );
        let secrets = secrets.ensure(docker, wanted).await?;
        let image = made
            .images
            .get(&agent.name)
            .cloned()
            .unwrap_or_else(|| made.runner_image.clone());
        let telemetry = Telemetry::from_host();
        let spec = AgentService {
            pool,
            spec: agent,
            image: &image,
            network,
            secrets: &secrets,
            telemetry_env: &telemetry.env,
        }
        .spec();
        let status = upsert(docker, spec, self.args.force_recreate).await?;
        self.progress.step("Service", &service.name, status);
        if agent.execution.durability {
            made.started
                .push((service.name.clone(), agent.execution.replicas));
        }
        let mut replicas = BTreeMap::new();
        for n in (1..=agent.execution.replicas).filter(|_| agent.execution.durability) {
            let thread = api
                .client()
                .replica_thread(pool, &agent.name, n)
                .await
                .map_err(|e| api.explain(e, "asking for a replica's thread"))?;
            replicas.insert(
                n,
                ReplicaState {
                    thread_id: thread.thread_id,
                    container_id: None,
                    config_hash: None,
                },
            );
        }
        self.locked
            .state
            .agents
            .insert(agent.name.clone(), replicas);
        Ok(())
    }

    /// Waits for every durable agent's tasks; the summary line.
    async fn finish(&self, made: &Made) -> anyhow::Result<ExitCode> {
        let pool = self.pool;
        let failures = wait_running(
            self.docker,
            &made.started,
            Duration::from_secs(self.args.wait_timeout),
            self.progress,
        )
        .await?;
        if failures > 0 {
            eprintln!(
                "{failures} replica(s) did not start running; `ninetrix ps -p {pool}` shows each task's state and error"
            );
            return Ok(ExitCode::from(crate::EXIT_FAILURE));
        }
        if !self.args.json {
            let port = made.api.as_ref().map_or(0, |(port, _, _)| *port);
            outln!(
                "pool {pool} is up on Swarm: {} agent service(s){}, its API on port {port}; `ninetrix ps -p {pool}` lists the tasks",
                self.af.agents.len(),
                match self.sidecars.len() {
                    0 => String::new(),
                    n => format!(" and {n} MCP sidecar(s)"),
                }
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// The port the pool's API publishes: `NINETRIX_SWARM_API_PORT`, else a free one on this host
/// (kept in the pool state from then on).
fn api_port() -> anyhow::Result<u16> {
    if let Ok(p) = std::env::var("NINETRIX_SWARM_API_PORT")
        && !p.is_empty()
    {
        return p
            .parse()
            .with_context(|| format!("NINETRIX_SWARM_API_PORT `{p}` is not a port number"));
    }
    let listener = std::net::TcpListener::bind("0.0.0.0:0")
        .context("cannot find a free port for the pool's API")?;
    Ok(listener.local_addr()?.port())
}

/// The pool's attachable overlay network, created; its ID.
async fn create_network(docker: &Docker, pool: &str, name: &str) -> anyhow::Result<String> {
    let created = docker
        .create_network(NetworkCreateRequest {
            name: name.to_string(),
            driver: Some("overlay".into()),
            attachable: Some(true),
            labels: Some(sw::labels(pool, "network")),
            ..NetworkCreateRequest::default()
        })
        .await
        .with_context(|| format!("cannot create the overlay network {name}"))?;
    Ok(created.id)
}

/// The pool's Swarm secrets by name (listed once per `up`), creating the ones wanted that do not
/// exist yet.
struct PoolSecrets {
    pool: String,
    ids: HashMap<String, String>,
}

impl PoolSecrets {
    /// The secrets `up` observed.
    fn of(pool: &str, observed: &Observed) -> PoolSecrets {
        PoolSecrets {
            pool: pool.to_string(),
            ids: observed.secrets.iter().cloned().collect(),
        }
    }

    /// Each wanted secret with its ID, made now if it does not exist.
    async fn ensure(
        &mut self,
        docker: &Docker,
        wanted: Vec<Secret>,
    ) -> anyhow::Result<Vec<(Secret, String)>> {
        let mut out = Vec::new();
        for secret in wanted {
            let id = match self.ids.get(&secret.name) {
                Some(id) => id.clone(),
                None => {
                    let id = docker
                        .create_secret(SecretSpec {
                            name: Some(secret.name.clone()),
                            labels: Some(secret.labels(&self.pool)),
                            data: Some(
                                base64::engine::general_purpose::STANDARD.encode(&secret.value),
                            ),
                            ..SecretSpec::default()
                        })
                        .await
                        .with_context(|| {
                            format!(
                                "cannot create the Swarm secret for {} (named {})",
                                secret.target, secret.name
                            )
                        })?
                        .id;
                    self.ids.insert(secret.name.clone(), id.clone());
                    id
                }
            };
            out.push((secret, id));
        }
        Ok(out)
    }
}

/// Creates the service, or updates it to `spec` (Swarm replaces only the tasks whose spec
/// changed); `force` replaces every task. The progress word.
async fn upsert(
    docker: &Docker,
    mut spec: ServiceSpec,
    force: bool,
) -> anyhow::Result<&'static str> {
    let name = spec.name.clone().unwrap_or_default();
    match docker
        .inspect_service(&name, None::<InspectServiceOptions>)
        .await
    {
        Ok(current) => {
            let version = current
                .version
                .and_then(|v| v.index)
                .context("the service has no version")?;
            let was = current.spec.clone().unwrap_or_default();
            let previous_force = was
                .task_template
                .as_ref()
                .and_then(|t| t.force_update)
                .unwrap_or(0);
            if let Some(task) = spec.task_template.as_mut() {
                task.force_update = Some(previous_force + u64::from(force));
            }
            let unchanged = !force && same_spec(&was, &spec);
            docker
                .update_service(
                    &name,
                    spec,
                    UpdateServiceOptions {
                        version: i32::try_from(version).unwrap_or(i32::MAX),
                        ..UpdateServiceOptions::default()
                    },
                    None,
                )
                .await
                .with_context(|| format!("cannot update service {name}"))?;
            Ok(if unchanged { "Unchanged" } else { "Updated" })
        }
        Err(e) if crate::docker::is_not_found(&e) => {
            docker
                .create_service(spec, None)
                .await
                .with_context(|| format!("cannot create service {name}"))?;
            Ok("Created")
        }
        Err(e) => Err(e).with_context(|| format!("cannot inspect service {name}")),
    }
}

/// Whether the parts `up` sets are the same in both specs, for the progress word (Swarm fills in
/// defaults of its own, so whole specs never compare equal; the update is sent either way, and
/// Swarm replaces only tasks whose spec changed).
fn same_spec(current: &ServiceSpec, wanted: &ServiceSpec) -> bool {
    let task = |s: &ServiceSpec| {
        s.task_template.as_ref().map(|t| {
            let c = t.container_spec.clone().unwrap_or_default();
            let limits = t.resources.as_ref().and_then(|r| r.limits.clone());
            // Swarm answers an unlimited restart count as 0.
            let restart = t
                .restart_policy
                .as_ref()
                .map(|r| (r.condition, r.max_attempts.filter(|n| *n != 0)));
            // Swarm answers an empty list as none.
            let listed = |v: Option<Vec<String>>| v.filter(|v| !v.is_empty());
            (
                (c.image, c.args, listed(c.env)),
                // A sidecar's configuration digest (a rebuilt image under the same tag).
                c.labels.and_then(|l| l.get(crate::objects::HASH).cloned()),
                c.secrets
                    .map(|s| {
                        s.into_iter()
                            .filter_map(|s| s.secret_name)
                            .collect::<Vec<_>>()
                    })
                    .filter(|s| !s.is_empty()),
                c.mounts.map(|m| {
                    m.into_iter()
                        .map(|m| (m.target, m.source))
                        .collect::<Vec<_>>()
                }),
                // …and no limits as an empty `Resources`.
                limits
                    .map(|l| (l.nano_cpus, l.memory_bytes))
                    .filter(|l| *l != (None, None)),
                restart,
            )
        })
    };
    let replicas = |s: &ServiceSpec| {
        s.mode.as_ref().map(|m| {
            (
                m.replicated.as_ref().and_then(|r| r.replicas),
                m.replicated_job.as_ref().and_then(|j| j.total_completions),
            )
        })
    };
    task(current) == task(wanted) && replicas(current) == replicas(wanted)
}

/// Removes the pool's secrets that no service of the pool uses any more (a changed value made a
/// new one). A secret still in use elsewhere stays.
async fn prune_secrets(docker: &Docker, pool: &str) -> anyhow::Result<()> {
    let services = docker
        .list_services(Some(ListServicesOptions {
            filters: Some(pool_filter(pool, &[])),
            ..ListServicesOptions::default()
        }))
        .await?;
    let used: Vec<String> = services
        .iter()
        .filter_map(|s| {
            s.spec
                .as_ref()?
                .task_template
                .as_ref()?
                .container_spec
                .as_ref()
        })
        .flat_map(|c| c.secrets.clone().unwrap_or_default())
        .filter_map(|s| s.secret_id)
        .collect();
    let secrets = docker
        .list_secrets(Some(ListSecretsOptions {
            filters: Some(pool_filter(pool, &[(COMPONENT, "secret")])),
        }))
        .await?;
    for secret in secrets {
        let Some(id) = secret.id else { continue };
        if !used.contains(&id) {
            // In use by a task still shutting down: left for the next `up` or `down`.
            let _ = docker.delete_secret(&id).await;
        }
    }
    Ok(())
}

/// Waits until each service (by name) runs its `replicas` tasks, one per slot; the number of
/// slots that did not get there in time.
async fn wait_running(
    docker: &Docker,
    services: &[(String, u32)],
    timeout: Duration,
    progress: &Progress,
) -> anyhow::Result<usize> {
    let deadline = Instant::now() + timeout;
    let mut failures = 0;
    for (service, replicas) in services {
        loop {
            let tasks = docker
                .list_tasks(Some(ListTasksOptions {
                    filters: Some(
                        [
                            ("service".to_string(), vec![service.clone()]),
                            ("desired-state".to_string(), vec!["running".to_string()]),
                        ]
                        .into(),
                    ),
                }))
                .await?;
            let running: std::collections::BTreeSet<i64> = tasks
                .iter()
                .filter(|t| t.status.as_ref().and_then(|s| s.state) == Some(TaskState::RUNNING))
                .filter_map(|t| t.slot)
                .collect();
            let up = running.len() as u32;
            if up >= *replicas {
                progress.step("Service", service, "Running");
                break;
            }
            if Instant::now() >= deadline {
                failures += (*replicas - up) as usize;
                progress.fail(
                    "Service",
                    service,
                    &format!("{up} of {replicas} task(s) running"),
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Ok(failures)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{
        ServiceSpecMode, ServiceSpecModeReplicated, TaskSpec, TaskSpecContainerSpec,
    };

    fn spec(image: &str, replicas: i64) -> ServiceSpec {
        ServiceSpec {
            task_template: Some(TaskSpec {
                container_spec: Some(TaskSpecContainerSpec {
                    image: Some(image.into()),
                    ..TaskSpecContainerSpec::default()
                }),
                ..TaskSpec::default()
            }),
            mode: Some(ServiceSpecMode {
                replicated: Some(ServiceSpecModeReplicated {
                    replicas: Some(replicas),
                }),
                ..ServiceSpecMode::default()
            }),
            ..ServiceSpec::default()
        }
    }

    #[test]
    fn a_spec_is_unchanged_only_when_what_up_sets_is_the_same() {
        assert!(same_spec(&spec("a", 2), &spec("a", 2)));
        assert!(!same_spec(&spec("a", 2), &spec("b", 2)), "image");
        assert!(!same_spec(&spec("a", 2), &spec("a", 3)), "replicas");
    }

    /// What `up` sends and what Swarm answers for it differ in form only: an empty list is
    /// none, no limits are an empty `Resources`, an unlimited restart count is 0. (Before this,
    /// a sidecar and the API were "Updated" by every `up`.)
    #[test]
    fn swarm_s_way_of_saying_nothing_is_the_same_spec() {
        use bollard::models::{
            Limit, TaskSpecResources, TaskSpecRestartPolicy, TaskSpecRestartPolicyConditionEnum,
        };
        let mut sent = spec("a", 1);
        let mut answered = spec("a", 1);
        let (s, a) = (
            sent.task_template.as_mut().unwrap(),
            answered.task_template.as_mut().unwrap(),
        );
        s.container_spec.as_mut().unwrap().env = Some(vec![]);
        s.container_spec.as_mut().unwrap().secrets = Some(vec![]);
        s.restart_policy = Some(TaskSpecRestartPolicy {
            condition: Some(TaskSpecRestartPolicyConditionEnum::ANY),
            ..TaskSpecRestartPolicy::default()
        });
        a.resources = Some(TaskSpecResources {
            limits: Some(Limit::default()),
            ..TaskSpecResources::default()
        });
        a.restart_policy = Some(TaskSpecRestartPolicy {
            condition: Some(TaskSpecRestartPolicyConditionEnum::ANY),
            max_attempts: Some(0),
            ..TaskSpecRestartPolicy::default()
        });
        assert!(same_spec(&answered, &sent));
        let mut budget = answered.clone();
        if let Some(t) = budget.task_template.as_mut() {
            t.restart_policy.as_mut().unwrap().max_attempts = Some(3);
        }
        assert!(!same_spec(&budget, &sent), "a real restart budget differs");
    }
}
