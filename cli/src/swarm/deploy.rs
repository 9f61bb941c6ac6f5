//! `ninetrix up --swarm`: makes a pool's Swarm objects what the agentfile says. Checks first
//! (secrets on the host, the engine a swarm manager, the pool not running on this engine alone,
//! the API's store), then: the image, the overlay network, the API's secrets and service (waited
//! for), the replica counts and triggers, each sidecar MCP server's secrets and service (and the
//! removal of sidecars no longer declared), each agent's secrets and service (created, or updated:
//! Swarm replaces only the tasks whose spec changed, one at a time, each stopped before its
//! replacement starts), the pool state, secrets no service uses any more, and a wait until every
//! durable agent's tasks run.

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use bollard::Docker;
use bollard::models::{NetworkCreateRequest, SecretSpec, ServiceSpec, TaskState};
use bollard::query_parameters::{
    InspectServiceOptions, ListNetworksOptions, ListSecretsOptions, ListServicesOptions,
    ListTasksOptions, UpdateServiceOptions,
};

use crate::commands::up::UpArgs;
use crate::pool::image;
use crate::pool::local_api::secret_file;
use crate::pool::spec::Telemetry;
use crate::pool::state::{self, ReplicaState, SwarmPool};
use crate::swarm::spec::{
    self as sw, AgentService, ApiStore, COMPONENT, POOL, Secret, SidecarService, api_service,
    api_store,
};
use crate::ui::progress::Progress;

/// Filters on the pool's label (and more).
fn pool_filter(pool: &str, more: &[(&str, &str)]) -> HashMap<String, Vec<String>> {
    let mut labels = vec![format!("{POOL}={pool}")];
    labels.extend(more.iter().map(|(k, v)| format!("{k}={v}")));
    [("label".to_string(), labels)].into()
}

/// Runs `ninetrix up --swarm`.
pub(crate) async fn up(args: &UpArgs) -> anyhow::Result<ExitCode> {
    let parsed = crate::pool::load(&args.file)?;
    let af = parsed.agentfile;
    let pool = crate::pool::resolve::pool_of(&af, args.pool.as_deref(), &args.file)?;
    let sidecars = crate::pool::sidecar::Wanted::of(&af);
    // Secrets first: nothing changes if one is missing.
    let mut host_secrets = BTreeMap::new();
    for agent in &af.agents {
        host_secrets.insert(agent.name.clone(), crate::pool::spec::host_secrets(agent)?);
    }
    let mut sidecar_values = BTreeMap::new();
    for wanted in &sidecars {
        sidecar_values.insert(wanted.server.clone(), wanted.host_secrets()?);
    }
    if let Some(clash) = sw::name_clash(&af, &pool) {
        bail!("{clash}");
    }
    let triggers = crate::commands::up::registrations(&af.triggers)?;
    let docker = crate::docker::connect().await?;
    let node = super::manager_node(&docker).await?;
    // SQLite stays on the node its file is on: the one the API service is pinned to already.
    let pinned = pinned_node(&docker, &sw::api_service_name(&pool)).await;
    let store = api_store(
        args.api_database.as_deref(),
        args.api_replicas,
        pinned.as_deref().unwrap_or(&node),
    )?;
    let home = crate::home::agentfile_home()?;
    if args.dry_run {
        return dry_run(&docker, &af, &pool, &store).await;
    }
    let mut locked = state::lock(&home, &pool)?;
    let on_engine = crate::pool::observed::observe(&docker, &pool).await?;
    if !on_engine.is_empty() {
        bail!(
            "pool `{pool}` runs on this Docker Engine alone ({} container(s)); `ninetrix down -p {pool}` first (its threads are kept in the local API, not the pool's API on Swarm)",
            on_engine.len()
        );
    }
    let progress = Progress::new(args.json);
    // The image: a registry reference every node can pull, or the one built here (then the
    // swarm's other nodes need it too: `docker save | docker load`, or --image).
    // This binary, hashed once: it goes into the runner image and every sidecar image.
    let mut binary = None;
    let (runner_image, images) = match &args.image {
        Some(reference) => (reference.clone(), HashMap::new()),
        None => {
            let binary = binary.insert(image::this_binary()?);
            let (img, built) = image::runner_image(&docker, binary).await?;
            progress.step(
                "Image",
                &img.tag,
                if built { "Built" } else { "Up to date" },
            );
            let mut images = HashMap::new();
            for agent in &af.agents {
                if let Some(base) = &agent.runtime.image {
                    let own = image::agent_image(&docker, base, binary).await?;
                    images.insert(agent.name.clone(), own.tag);
                }
            }
            (img.tag, images)
        }
    };
    let network = ensure_network(&docker, &pool).await?;
    progress.step("Network", &sw::network_name(&pool), "Ready");

    // The API: its secrets, its service, its port (kept across `up`s).
    let api_secret = secret_file(&home.join("api").join("secret"))?;
    let admin_path = home.join("api").join("admin-token");
    let admin_token = secret_file(&admin_path)?;
    let key = sw::naming_key(&api_secret, &admin_token);
    let port = match &locked.state.swarm {
        Some(s) => s.api_port,
        None => api_port()?,
    };
    let telemetry = Telemetry::from_host();
    let api_secrets = sw::api_secrets(
        &key,
        &pool,
        &api_secret,
        &admin_token,
        args.api_database.as_deref(),
    );
    let mut pool_secrets = PoolSecrets::list(&docker, &pool).await?;
    let api_secrets = pool_secrets.ensure(&docker, api_secrets).await?;
    let api_spec = api_service(
        &pool,
        &runner_image,
        &store,
        &api_secrets,
        &network,
        port,
        &telemetry.env,
    );
    let status = upsert(&docker, api_spec, args.force_recreate).await?;
    progress.step("API", &sw::api_service_name(&pool), status);
    let swarm_state = SwarmPool {
        api_port: port,
        database: match store {
            ApiStore::Sqlite { .. } => "sqlite".into(),
            ApiStore::Postgres { .. } => "postgres".into(),
        },
    };
    locked.state.swarm = Some(swarm_state.clone());
    locked.state.agentfile = std::path::absolute(&args.file).ok();
    locked.save()?;
    let api = super::api_of(&home, &pool, &swarm_state)?;
    api.ready(&docker, Duration::from_secs(args.wait_timeout.max(30)))
        .await
        .with_context(|| {
            format!(
                "the pool's API service {} did not answer on port {port}; `docker service ps {}` shows why",
                sw::api_service_name(&pool),
                sw::api_service_name(&pool)
            )
        })?;

    // What the API must know before the runners ask it: replica counts (sessions), triggers.
    for agent in af.agents.iter().filter(|a| a.execution.durability) {
        api.set_replicas(
            &pool,
            &agent.name,
            agent.execution.replicas,
            &agent.collaborators,
        )
        .await?;
    }
    let changed = api.set_triggers(&pool, &triggers).await?;
    for (name, status) in crate::commands::up::trigger_steps(&changed) {
        progress.step("Trigger", name, status);
    }

    // The sidecar MCP servers, before the agents that call them (a runner that finds one not
    // answering yet retries).
    let mut sidecar_names = Vec::new();
    if !sidecars.is_empty() {
        let binary = match binary {
            Some(b) => b,
            None => image::this_binary()?,
        };
        for wanted in &sidecars {
            let built = image::agent_image(&docker, &wanted.base, &binary).await?;
            let values = &sidecar_values[&wanted.server];
            let wanted_secrets = sw::sidecar_secrets(&key, &pool, &wanted.server, values);
            let secrets = pool_secrets.ensure(&docker, wanted_secrets).await?;
            let spec = SidecarService {
                pool: &pool,
                wanted,
                image: &built.tag,
                digest: &wanted.digest(&built.id, values),
                node: &node,
                network: &network,
                secrets: &secrets,
            }
            .spec();
            let status = upsert(&docker, spec, args.force_recreate).await?;
            let name = sw::sidecar_service_name(&pool, &wanted.server);
            progress.step("Sidecar", &name, status);
            sidecar_names.push(name);
        }
    }
    remove_other_sidecars(&docker, &pool, &sidecar_names, &progress).await?;
    // Running before the runners boot, so they find their tools at once (a runner that finds a
    // server down retries at its next turn).
    let sidecar_tasks: Vec<(String, u32)> = sidecar_names.iter().map(|n| (n.clone(), 1)).collect();
    let late = wait_running(
        &docker,
        &sidecar_tasks,
        Duration::from_secs(args.wait_timeout),
        &progress,
    )
    .await?;
    if late > 0 {
        eprintln!(
            "warning: {late} MCP sidecar(s) did not start running; the agents that use them get an error from their tools until they do (`docker service ps` shows why)"
        );
    }

    // The agents.
    let mut started = Vec::new();
    for agent in &af.agents {
        // A durable agent's tasks ask the API for their replica's thread with the agent's token
        // (a batch job's run without the API).
        let token = if agent.execution.durability {
            Some(api.agent_token(&pool, &agent.name).await?)
        } else {
            None
        };
        let wanted = sw::agent_secrets(
            &key,
            &pool,
            &agent.name,
            &host_secrets[&agent.name],
            token.as_deref(),
        );
        let secrets = pool_secrets.ensure(&docker, wanted).await?;
        let image = images
            .get(&agent.name)
            .cloned()
            .unwrap_or_else(|| runner_image.clone());
        let spec = AgentService {
            pool: &pool,
            spec: agent,
            image: &image,
            network: &network,
            secrets: &secrets,
            telemetry_env: &telemetry.env,
        }
        .spec();
        let status = upsert(&docker, spec, args.force_recreate).await?;
        progress.step("Service", &sw::service_name(&pool, &agent.name), status);
        if agent.execution.durability {
            started.push((
                sw::service_name(&pool, &agent.name),
                agent.execution.replicas,
            ));
        }
        // The threads, by replica number, as the API keeps them (for `invoke`, `trace`, `ps`).
        let mut replicas = BTreeMap::new();
        for n in (1..=agent.execution.replicas).filter(|_| agent.execution.durability) {
            let thread = api
                .client()
                .replica_thread(&pool, &agent.name, n)
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
        locked.state.agents.insert(agent.name.clone(), replicas);
    }
    orphans(&docker, &pool, &af, args.remove_orphans, &progress).await?;
    locked.save()?;
    prune_secrets(&docker, &pool).await?;

    let failures = wait_running(
        &docker,
        &started,
        Duration::from_secs(args.wait_timeout),
        &progress,
    )
    .await?;
    if failures > 0 {
        eprintln!(
            "{failures} replica(s) did not start running; `ninetrix ps -p {pool}` shows each task's state and error"
        );
        return Ok(ExitCode::from(crate::EXIT_FAILURE));
    }
    if !args.json {
        outln!(
            "pool {pool} is up on Swarm: {} agent service(s){}, its API on port {port}; `ninetrix ps -p {pool}` lists the tasks",
            af.agents.len(),
            match sidecars.len() {
                0 => String::new(),
                n => format!(" and {n} MCP sidecar(s)"),
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `up --swarm --dry-run`: what would be created or updated.
async fn dry_run(
    docker: &Docker,
    af: &ninetrix_agentfile::Agentfile,
    pool: &str,
    store: &ApiStore,
) -> anyhow::Result<ExitCode> {
    let exists = |name: String| async move {
        docker
            .inspect_service(&name, None::<InspectServiceOptions>)
            .await
            .is_ok()
    };
    let verb = |found: bool| if found { "update" } else { "create" };
    let api = sw::api_service_name(pool);
    let found = exists(api.clone()).await;
    let db = match store {
        ApiStore::Sqlite { node } => format!("SQLite, 1 replica pinned to node {node}"),
        ApiStore::Postgres { replicas } => format!("Postgres, {replicas} replica(s)"),
    };
    outln!("{} service {api}: the checkpoint API ({db})", verb(found));
    for wanted in crate::pool::sidecar::Wanted::of(af) {
        let name = sw::sidecar_service_name(pool, &wanted.server);
        let found = exists(name.clone()).await;
        outln!(
            "{} service {name}: MCP server `{}` (sidecar of {})",
            verb(found),
            wanted.server,
            wanted.base
        );
    }
    for agent in &af.agents {
        let name = sw::service_name(pool, &agent.name);
        let found = exists(name.clone()).await;
        let what = if agent.execution.durability {
            format!(
                "{} replica(s), restart on-failure (max 3)",
                agent.execution.replicas
            )
        } else {
            format!("replicated job of {}", agent.execution.replicas)
        };
        outln!("{} service {name}: {what}", verb(found));
    }
    Ok(ExitCode::SUCCESS)
}

/// The node a service is pinned to (`node.id==…`), if it exists and is.
async fn pinned_node(docker: &Docker, service: &str) -> Option<String> {
    let current = docker
        .inspect_service(service, None::<InspectServiceOptions>)
        .await
        .ok()?;
    current
        .spec?
        .task_template?
        .placement?
        .constraints?
        .iter()
        .find_map(|c| c.strip_prefix("node.id==").map(str::to_string))
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

/// The pool's attachable overlay network (found by name, created once); its ID.
async fn ensure_network(docker: &Docker, pool: &str) -> anyhow::Result<String> {
    let name = sw::network_name(pool);
    let found = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some([("name".to_string(), vec![name.clone()])].into()),
        }))
        .await?;
    if let Some(n) = found.iter().find(|n| n.name.as_deref() == Some(&name)) {
        if n.driver.as_deref() != Some("overlay") {
            bail!(
                "a network named {name} exists but is not an overlay network (driver {}); remove it (`docker network rm {name}`)",
                n.driver.as_deref().unwrap_or("?")
            );
        }
        return Ok(n.id.clone().unwrap_or(name));
    }
    let created = docker
        .create_network(NetworkCreateRequest {
            name: name.clone(),
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
    async fn list(docker: &Docker, pool: &str) -> anyhow::Result<PoolSecrets> {
        let ids = docker
            .list_secrets(Some(ListSecretsOptions {
                filters: Some(pool_filter(pool, &[(COMPONENT, "secret")])),
            }))
            .await?
            .into_iter()
            .filter_map(|s| Some((s.spec?.name?, s.id?)))
            .collect();
        Ok(PoolSecrets {
            pool: pool.to_string(),
            ids,
        })
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
                c.labels
                    .and_then(|l| l.get(crate::pool::spec::HASH).cloned()),
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

/// Sidecar services of servers no longer declared (or no longer sidecars): removed, as `up`
/// removes such sidecars on one host — a sidecar is the pool's, not a piece of user state.
async fn remove_other_sidecars(
    docker: &Docker,
    pool: &str,
    keep: &[String],
    progress: &Progress,
) -> anyhow::Result<()> {
    let services = docker
        .list_services(Some(ListServicesOptions {
            filters: Some(pool_filter(pool, &[(COMPONENT, "mcp")])),
            ..ListServicesOptions::default()
        }))
        .await?;
    for service in services {
        let name = service.spec.and_then(|s| s.name).unwrap_or_default();
        if keep.contains(&name) {
            continue;
        }
        let id = service.id.unwrap_or_default();
        docker
            .delete_service(&id)
            .await
            .with_context(|| format!("cannot remove the sidecar service {name}"))?;
        progress.step("Sidecar", &name, "Removed");
    }
    Ok(())
}

/// Services of agents no longer in the agentfile: removed with `--remove-orphans`, else named.
async fn orphans(
    docker: &Docker,
    pool: &str,
    af: &ninetrix_agentfile::Agentfile,
    remove: bool,
    progress: &Progress,
) -> anyhow::Result<()> {
    let services = docker
        .list_services(Some(ListServicesOptions {
            filters: Some(pool_filter(pool, &[(COMPONENT, "runner")])),
            ..ListServicesOptions::default()
        }))
        .await?;
    for service in services {
        let Some(spec) = service.spec else { continue };
        let agent = spec
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::pool::spec::AGENT))
            .cloned()
            .unwrap_or_default();
        if af.agents.iter().any(|a| a.name == agent) {
            continue;
        }
        let name = spec.name.unwrap_or_default();
        if remove {
            docker.delete_service(&name).await?;
            progress.step("Service", &name, "Removed");
        } else {
            eprintln!(
                "service {name} runs agent `{agent}`, which is no longer in the agentfile; `ninetrix up --swarm --remove-orphans` removes it"
            );
        }
    }
    Ok(())
}

/// Removes the pool's secrets that no service of the pool uses any more (a changed value made a
/// new one). A secret still in use elsewhere stays.
pub(crate) async fn prune_secrets(docker: &Docker, pool: &str) -> anyhow::Result<()> {
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
