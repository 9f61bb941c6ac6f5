//! `ninetrix up --swarm`: makes a pool's Swarm objects what the agentfile says. Checks first
//! (secrets on the host, the engine a swarm manager, the pool not running on this engine alone,
//! the API's store), then observes the swarm ([`observe`]), states what the agentfile wants
//! ([`wanted`]) and plans ([`super::plan`]); `--dry-run` prints that plan, else
//! [`super::apply`] carries it out: the image, the overlay network, the API's secrets and service
//! (waited for), the replica counts and triggers, each sidecar MCP server's secrets and service
//! (and the removal of sidecars no longer declared), each agent's secrets and service (created,
//! or updated: Swarm replaces only the tasks whose spec changed, one at a time, each stopped
//! before its replacement starts), the pool state, secrets no service uses any more, and a wait
//! until every durable agent's tasks run.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::bail;
use bollard::Docker;
use bollard::models::{ServiceSpec, ServiceSpecMode};
use bollard::query_parameters::{
    InspectServiceOptions, ListNetworksOptions, ListSecretsOptions, ListServicesOptions,
};
use ninetrix_agentfile::Agentfile;

use crate::deploy::UpSettings;
use crate::objects::COMPONENT;
use crate::pool::image;
use crate::pool::state;
use crate::swarm::apply::Deploy;
use crate::swarm::plan::{self, Component, Desired, Mode, Observed, Role, Service, Wanted};
use crate::swarm::pool_filter;
use crate::swarm::spec::{self as sw, ApiStore, api_store};
use crate::ui::progress::Progress;

/// Runs `ninetrix up --swarm`.
pub(crate) async fn up(args: &UpSettings) -> anyhow::Result<ExitCode> {
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
    if let Some(refusal) = sw::runtime_refusal(&af)
        .or_else(|| sw::egress_refusal(&af))
        .or_else(|| sw::jobs_refusal(&af))
    {
        anyhow::bail!("{refusal}");
    }
    if let Some(clash) = sw::name_clash(&af, &pool) {
        bail!("{clash}");
    }
    let triggers = crate::pool::triggers::registrations(&af.triggers)?;
    let docker = crate::docker::connect().await?;
    let node = super::manager_node(&docker).await?;
    // SQLite stays on the node its file is on: the one the API service is pinned to already.
    let pinned = pinned_node(&docker, &crate::objects::swarm::api_service_name(&pool)).await;
    let store = api_store(
        args.api_database.as_deref(),
        args.api_replicas,
        pinned.as_deref().unwrap_or(&node),
    )?;
    let home = crate::home::agentfile_home()?;
    let options = plan::Options {
        force_recreate: args.force_recreate,
        remove_orphans: args.remove_orphans,
    };
    // This binary, hashed once: it goes into the runner image and every sidecar image (not
    // needed when every node runs `--image` and there is no sidecar).
    let binary = match (&args.image, sidecars.is_empty()) {
        (Some(_), true) => None,
        _ => Some(image::this_binary()?),
    };
    let wanted = wanted(&af, &pool, &store, args.image.as_deref(), binary.as_ref());
    if args.dry_run {
        let seen = observe(&docker, &pool).await?;
        outln!(
            "{}",
            plan::plan(&wanted, &seen, options).to_string().trim_end()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let locked = state::lock(&home, &pool)?;
    let on_engine = crate::pool::observed::observe(&docker, &pool).await?;
    if !on_engine.is_empty() {
        bail!(
            "pool `{pool}` runs on this Docker Engine alone ({} container(s)); `ninetrix down -p {pool}` first (its threads are kept in the local API, not the pool's API on Swarm)",
            on_engine.len()
        );
    }
    let seen = observe(&docker, &pool).await?;
    let plan = plan::plan(&wanted, &seen, options);
    let progress = Progress::new(args.json);
    Deploy {
        docker: &docker,
        args,
        af: &af,
        pool: &pool,
        home: &home,
        node: &node,
        store: &store,
        triggers: &triggers,
        host_secrets: &host_secrets,
        sidecars: &sidecars,
        sidecar_values: &sidecar_values,
        binary,
        progress: &progress,
        locked,
    }
    .apply(&plan, &seen)
    .await
}

/// What the agentfile wants of the swarm: the API's service, each sidecar's, each agent's, with
/// the image each runs (`--image` for the API and every agent, else the images `up` builds from
/// this binary).
pub(crate) fn wanted(
    af: &Agentfile,
    pool: &str,
    store: &ApiStore,
    image: Option<&str>,
    binary: Option<&image::Binary>,
) -> Wanted {
    let runner = || match (image, binary) {
        (Some(reference), _) => reference.to_string(),
        (None, Some(binary)) => image::runner_tag(binary),
        (None, None) => unreachable!("the binary is hashed unless --image is given"),
    };
    let mut services = vec![Desired {
        name: crate::objects::swarm::api_service_name(pool),
        role: Role::Api,
        image: runner(),
        mode: Mode::Replicated(match store {
            ApiStore::Sqlite { .. } => 1,
            ApiStore::Postgres { replicas } => *replicas,
        }),
    }];
    for wanted in crate::pool::sidecar::Wanted::of(af) {
        services.push(Desired {
            name: crate::objects::swarm::sidecar_service_name(pool, &wanted.server),
            image: binary.map_or_else(String::new, |b| image::agent_tag(&wanted.base, b)),
            role: Role::Sidecar(wanted.server),
            mode: Mode::Replicated(1),
        });
    }
    for agent in &af.agents {
        let image = match (&agent.runtime.image, image, binary) {
            (Some(base), None, Some(binary)) => image::agent_tag(base, binary),
            _ => runner(),
        };
        let n = agent.execution.replicas;
        services.push(Desired {
            name: crate::objects::swarm::service_name(pool, &agent.name),
            role: Role::Agent(agent.name.clone()),
            image,
            mode: if agent.execution.durability {
                Mode::Replicated(n)
            } else {
                Mode::Job(n)
            },
        });
    }
    Wanted {
        network: crate::objects::swarm::network_name(pool),
        services,
    }
}

/// What the swarm has of the pool: its overlay network (a network of that name that is not an
/// overlay is refused), its services and its secrets. Reads only.
pub(crate) async fn observe(docker: &Docker, pool: &str) -> anyhow::Result<Observed> {
    let services = docker
        .list_services(Some(ListServicesOptions {
            filters: Some(pool_filter(pool, &[])),
            ..ListServicesOptions::default()
        }))
        .await?
        .into_iter()
        .map(|s| {
            let spec = s.spec.unwrap_or_default();
            let label = |key: &str| spec.labels.as_ref().and_then(|l| l.get(key)).cloned();
            let container = spec
                .task_template
                .as_ref()
                .and_then(|t| t.container_spec.clone())
                .unwrap_or_default();
            Service {
                id: s.id.unwrap_or_default(),
                component: Component::parse(label(COMPONENT).as_deref()),
                agent: label(crate::objects::AGENT).unwrap_or_default(),
                image: container.image,
                mode: mode_of(&spec),
                secrets: container
                    .secrets
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|s| s.secret_id)
                    .collect(),
                name: spec.name.unwrap_or_default(),
            }
        })
        .collect();
    let secrets = docker
        .list_secrets(Some(ListSecretsOptions {
            filters: Some(pool_filter(pool, &[(COMPONENT, "secret")])),
        }))
        .await?
        .into_iter()
        .filter_map(|s| Some((s.spec?.name?, s.id?)))
        .collect();
    Ok(Observed {
        network: network(docker, pool).await?,
        services,
        secrets,
    })
}

/// A service's tasks, as its spec says.
fn mode_of(spec: &ServiceSpec) -> Option<Mode> {
    let count = |n: Option<i64>| n.and_then(|n| u32::try_from(n).ok());
    match spec.mode.as_ref()? {
        ServiceSpecMode {
            replicated: Some(r),
            ..
        } => count(r.replicas).map(Mode::Replicated),
        ServiceSpecMode {
            replicated_job: Some(j),
            ..
        } => count(j.total_completions).map(Mode::Job),
        _ => None,
    }
}

/// The pool's overlay network's ID, if it exists (found by name); a network of that name that
/// is not an overlay is refused.
async fn network(docker: &Docker, pool: &str) -> anyhow::Result<Option<String>> {
    let name = crate::objects::swarm::network_name(pool);
    let found = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some([("name".to_string(), vec![name.clone()])].into()),
        }))
        .await?;
    let Some(n) = found.iter().find(|n| n.name.as_deref() == Some(&name)) else {
        return Ok(None);
    };
    if n.driver.as_deref() != Some("overlay") {
        bail!(
            "a network named {name} exists but is not an overlay network (driver {}); remove it (`docker network rm {name}`)",
            n.driver.as_deref().unwrap_or("?")
        );
    }
    Ok(Some(n.id.clone().unwrap_or(name)))
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
