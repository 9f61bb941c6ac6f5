//! `ninetrix up` on one host: plan, then apply. Validate the agentfile and read the host secrets (nothing
//! starts if one is missing), take the pool lock, build the images, ensure the API and the
//! network (found by label, created once), reconcile the MCP servers' sidecars, observe the
//! pool's containers, [`plan`](crate::pool::plan::plan) the Docker actions, [`apply`] them, and wait
//! for every (re)started durable runner to be `ready`. The pool's triggers (schedules and
//! webhooks, each webhook's secret read from the host with the agents' secrets) are registered
//! with the API as one set after the replica counts, so a trigger deleted from the agentfile is
//! removed. `--dry-run` prints the plan instead and changes nothing: no image build, no API, no
//! network, no pool state written (the trigger changes are listed if the API answers).

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::time::Duration;

use bollard::Docker;
use ninetrix_agentfile::{AgentSpec, Agentfile};
use ninetrix_proto::api::TriggerSet;
use ninetrix_proto::triggers::TriggerSpec;

use crate::deploy::{Only, UpSettings};
use crate::pool::apply::{self, Target};
use crate::pool::broker::{self, Broker};
use crate::pool::image::{self, Image};
use crate::pool::local_api::{self, Api};
use crate::pool::observed::observe;
use crate::pool::plan::{self, Desired, Options};
use crate::pool::sidecar::{self, Sidecars};
use crate::pool::spec::{self, Config};
use crate::pool::state;
use crate::pool::triggers::{registrations, trigger_changes, trigger_steps};
use crate::ui::progress::Progress;

/// Runs `ninetrix up` on one host, for the whole pool or (`reset`) for one replica: then no
/// sidecar, trigger or other container is touched. `on_swarm` says, under the pool lock, whether
/// a pool whose state says Swarm still has services there (then it is refused).
pub(crate) async fn up(
    args: &UpSettings,
    only: Option<&Only>,
    on_swarm: impl AsyncFnOnce(&Docker, &str) -> bool,
) -> anyhow::Result<ExitCode> {
    let parsed = crate::pool::load(&args.file)?;
    let af = parsed.agentfile;
    let pool = crate::pool::resolve::pool_of(&af, args.pool.as_deref(), &args.file)?;
    // Secrets first: nothing starts if one is missing.
    let HostValues {
        secrets,
        sidecar_secrets,
        triggers,
    } = HostValues::read(&af, only)?;
    let docker = crate::docker::connect().await?;
    // The runtimes next: an agent that asked for a sandbox runs in one or not at all.
    let chosen = af
        .agents
        .iter()
        .filter(|a| only.is_none_or(|o| o.agent == a.name));
    crate::pool::runtimes::check(&docker, chosen).await?;
    let home = crate::home::agentfile_home()?;
    let options = Options {
        force_recreate: args.force_recreate,
        remove_orphans: args.remove_orphans,
    };
    if args.dry_run {
        return dry_run(
            &docker,
            &af,
            &pool,
            &home,
            &secrets,
            &sidecar_secrets,
            options,
        )
        .await;
    }
    let mut locked = lock(&docker, &home, &pool, on_swarm).await?;
    let progress = Progress::new(args.json);
    let binary = image::this_binary()?;
    let (runner_image, images) = build_images(&docker, &af, &binary, &progress).await?;
    let api = Api::ensure(&docker, &home, &runner_image).await?;
    progress.step("API", api.local.as_deref().unwrap_or(&api.url), "Ready");
    let network = crate::pool::engine::ensure_network(&docker, &pool, api.local.as_deref()).await?;
    for repair in &network.repairs {
        progress.step("Network", &network.name, repair);
    }
    api.join(&docker, &network.id).await?;
    progress.step(
        "Network",
        &network.name,
        if network.created { "Created" } else { "Ready" },
    );
    // MCP sidecars before the agents that use them, so a runner finds its servers at boot.
    let mut sidecars = Vec::new();
    for (wanted, values) in sidecar_secrets {
        let img = image::agent_image(&docker, &wanted.base, &binary).await?;
        sidecars.push((wanted, img, values));
    }
    let sidecar_count = sidecars.len();
    if only.is_none() {
        Sidecars {
            docker: &docker,
            pool: &pool,
            network: &network.id,
            stop_timeout: args.timeout,
        }
        .apply(&sidecars, args.force_recreate, &progress)
        .await?;
    }

    // Each restricted agent's way out and the job broker, before the replicas.
    let site = crate::pool::egress::Site {
        docker: &docker,
        pool: &pool,
        pool_network: &network.id,
        api: &api,
        image: &runner_image,
    };
    let egress = ways_out(&site, &af, only, &images, args.force_recreate, &progress).await?;

    let desired = desired(&af, &secrets, &api.container_url, |agent| {
        images.get(agent).map(|i| i.id.clone())
    });
    record(&mut locked.state, &args.file, &api);
    // A purged replica thread is replaced by the replica's new one (the plan then recreates its
    // container on it): one rule for every backend.
    for line in renew_purged(&api, &pool, &af, &mut locked.state, only).await? {
        eprintln!("{line}");
    }
    let observed = observe(&docker, &pool).await?;
    let mut plan = plan::plan(&desired, &observed, &locked.state, &[], options);
    if let Some(only) = only {
        plan = plan.only(&only.agent, only.replica);
    }
    let target = Target {
        docker: &docker,
        api: &api,
        pool: &pool,
        network: &network.id,
        agents: af.agents.iter().map(|a| (a.name.as_str(), a)).collect(),
        images: &images,
        configs: desired
            .iter()
            .map(|d| (d.agent.as_str(), &d.config))
            .collect(),
        secrets: &secrets,
        stop_timeout: args.timeout,
        egress: &egress,
    };
    // The pool's whole set of triggers, always (none for `reset`'s one replica).
    let triggers = only.is_none().then_some(&triggers);
    register(&api, &pool, &af, triggers, &progress).await?;
    let applied = apply::apply(&target, &plan, &mut locked, &progress).await;
    locked.save()?;
    let started = applied?;

    let failures = crate::pool::ready::wait_ready(
        &docker,
        &api,
        &started,
        Duration::from_secs(args.wait_timeout),
        &progress,
    )
    .await?;
    if failures > 0 {
        eprintln!(
            "{failures} runner(s) did not become ready; `ninetrix ps -p {pool}` shows each one's state and reason, `ninetrix logs -p {pool}` their logs"
        );
        return Ok(ExitCode::from(crate::EXIT_FAILURE));
    }
    if let Some(only) = only {
        let thread = locked
            .state
            .agents
            .get(&only.agent)
            .and_then(|r| r.get(&only.replica))
            .map(|r| r.thread_id.to_string())
            .unwrap_or_default();
        outln!(
            "{}-{} of pool {pool} is up on thread {thread}",
            only.agent,
            only.replica
        );
        return Ok(ExitCode::SUCCESS);
    }
    if !args.json {
        say_up(&pool, &af, sidecar_count, &api, &home);
    }
    Ok(ExitCode::SUCCESS)
}

/// The pool lock first: a second `up` (or a `down`) of this pool waits here, then finds what
/// the first made, so nothing — image, API, network, container — is created twice. A pool whose
/// state says Swarm is refused while `on_swarm` finds its services there.
async fn lock(
    docker: &Docker,
    home: &std::path::Path,
    pool: &str,
    on_swarm: impl AsyncFnOnce(&Docker, &str) -> bool,
) -> anyhow::Result<state::LockedState> {
    let mut locked = state::lock(home, pool)?;
    if locked.state.swarm.is_some() {
        if on_swarm(docker, pool).await {
            anyhow::bail!(
                "pool `{pool}` runs on Docker Swarm; `ninetrix up --swarm` updates it (or `ninetrix down -p {pool}` takes it off the swarm first)"
            );
        }
        // It ran on Swarm once and was taken down: its threads are in that API's data, not in
        // this host's API, so it starts afresh here.
        locked.state.swarm = None;
        locked.state.agents.clear();
    }
    Ok(locked)
}

/// What `up` reads from the host before it changes anything (a missing secret fails it first).
struct HostValues {
    /// Each agent's secret values, by agent.
    secrets: BTreeMap<String, BTreeMap<String, String>>,
    /// Each sidecar MCP server with its secret values (none for `reset`'s one replica).
    sidecar_secrets: Vec<(sidecar::Wanted, BTreeMap<String, String>)>,
    /// The triggers to register (none for `reset`'s one replica).
    triggers: TriggerSet,
}

impl HostValues {
    /// Reads them.
    fn read(af: &Agentfile, only: Option<&Only>) -> anyhow::Result<HostValues> {
        let mut secrets = BTreeMap::new();
        for agent in &af.agents {
            secrets.insert(agent.name.clone(), spec::host_secrets(agent)?);
        }
        let mut sidecar_secrets = Vec::new();
        for wanted in sidecar::Wanted::of(af)
            .into_iter()
            .filter(|_| only.is_none())
        {
            let values = wanted.host_secrets()?;
            sidecar_secrets.push((wanted, values));
        }
        let triggers = match only {
            None => registrations(&af.triggers)?,
            Some(_) => TriggerSet::default(),
        };
        Ok(HostValues {
            secrets,
            sidecar_secrets,
            triggers,
        })
    }
}

/// The runner image (built if this binary has not been built into one yet) and each agent's
/// image (its `runtime.image` plus the binary, else the runner image).
async fn build_images(
    docker: &Docker,
    af: &Agentfile,
    binary: &image::Binary,
    progress: &Progress,
) -> anyhow::Result<(Image, HashMap<String, Image>)> {
    let (runner_image, built) = image::runner_image(docker, binary).await?;
    progress.step(
        "Image",
        &runner_image.tag,
        if built { "Built" } else { "Up to date" },
    );
    let mut images: HashMap<String, Image> = HashMap::new();
    for agent in &af.agents {
        let img = match &agent.runtime.image {
            Some(base) => image::agent_image(docker, base, binary).await?,
            None => runner_image.clone(),
        };
        images.insert(agent.name.clone(), img);
    }
    Ok((runner_image, images))
}

/// What the pool state records of this `up`: the agentfile (its path and digest) and an
/// external API's URL.
fn record(state: &mut state::PoolState, file: &std::path::Path, api: &Api) {
    state.agentfile = std::path::absolute(file).ok();
    state.agentfile_hash = std::fs::read(file).ok().map(|b| {
        use sha2::Digest as _;
        sha2::Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    });
    // Only an external API's URL is worth recording: the local one's is read from its container.
    state.api_url = api.local.is_none().then(|| api.url.clone());
}

/// Tells the API the replica counts, then (unless `None`) the pool's triggers.
async fn register(
    api: &Api,
    pool: &str,
    af: &Agentfile,
    triggers: Option<&TriggerSet>,
    progress: &Progress,
) -> anyhow::Result<()> {
    // The replica counts first: sessions move to (or away from) replicas as the count says, and
    // a replica that is about to go hands its sessions over at its next write (it is fenced).
    for agent in af.agents.iter().filter(|a| a.execution.durability) {
        api.set_replicas(
            pool,
            &agent.name,
            agent.execution.replicas,
            &agent.collaborators,
            Some(&agent.card_info()),
        )
        .await?;
    }
    // The pool's whole set of triggers: an agentfile whose triggers were all deleted removes
    // them. A fire before the replicas are up waits in its session's inbox.
    if let Some(triggers) = triggers {
        let changed = api.set_triggers(pool, triggers).await?;
        for (name, status) in trigger_steps(&changed) {
            progress.step("Trigger", name, status);
        }
    }
    Ok(())
}

/// The closing lines of a whole pool's `up`: what is up, and where the console is.
fn say_up(pool: &str, af: &Agentfile, sidecar_count: usize, api: &Api, home: &std::path::Path) {
    let sidecars = match sidecar_count {
        0 => String::new(),
        1 => " and 1 MCP sidecar".to_string(),
        n => format!(" and {n} MCP sidecars"),
    };
    outln!(
        "pool {pool} is up: {} container(s){sidecars}; `ninetrix ps -p {pool}` lists them",
        af.agents.iter().map(|a| a.execution.replicas).sum::<u32>()
    );
    let token_at = match &api.local {
        Some(_) => format!(
            "the one in {}",
            home.join("api").join("admin-token").display()
        ),
        None => "AGENTFILE_ADMIN_TOKEN's".to_string(),
    };
    outln!(
        "console: {}/console (sign in with the admin token: {token_at})",
        api.url.trim_end_matches('/')
    );
}

/// Replaces the purged threads of the pool's durable replicas (of `only`'s replica alone, when
/// given) in the pool state with each replica's new thread from the API's replica mapping —
/// which is what a Swarm or Kubernetes runner gets for a purged thread — and returns a line per
/// replacement. The plan then recreates those containers on their new threads.
async fn renew_purged(
    api: &Api,
    pool: &str,
    af: &Agentfile,
    state: &mut state::PoolState,
    only: Option<&Only>,
) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    for agent in af.agents.iter().filter(|a| a.execution.durability) {
        let Some(replicas) = state.agents.get_mut(&agent.name) else {
            continue;
        };
        for (n, record) in replicas.iter_mut() {
            if only.is_some_and(|o| o.agent != agent.name || o.replica != *n)
                || !api.is_purged(record.thread_id).await?
            {
                continue;
            }
            let new = api.replica_thread(pool, &agent.name, *n).await?;
            lines.push(renewed_line(&agent.name, *n, record.thread_id, new));
            record.thread_id = new;
            record.container_id = None;
            record.config_hash = None;
        }
    }
    Ok(lines)
}

/// The line `up` prints for a replica whose purged thread it replaced.
pub(crate) fn renewed_line(
    agent: &str,
    replica: u32,
    old: ninetrix_proto::ThreadId,
    new: ninetrix_proto::ThreadId,
) -> String {
    format!(
        "{agent}-{replica}: its thread {old} was purged; it starts a new conversation on thread \
         {new}"
    )
}

/// What the agentfile wants, with each agent's configuration digest on the image `image_id`
/// names (`None`: not built yet).
fn desired(
    af: &Agentfile,
    secrets: &BTreeMap<String, BTreeMap<String, String>>,
    api_url: &str,
    image_id: impl Fn(&str) -> Option<String>,
) -> Vec<Desired> {
    let none = BTreeMap::new();
    af.agents
        .iter()
        .map(|agent| {
            let secrets = secrets.get(&agent.name).unwrap_or(&none);
            let id = image_id(&agent.name);
            let config = Config::of(agent, id.as_deref().unwrap_or(""), api_url, secrets);
            Desired {
                agent: agent.name.clone(),
                replicas: agent.execution.replicas,
                durable: agent.execution.durability,
                config,
            }
        })
        .collect()
}

/// What the replicas need before they start: each restricted agent's internal network and
/// egress proxy (they start on that network; `reset`'s one replica: its agent's alone, nothing
/// pruned), then the job broker (pool/broker.rs), which `reset` leaves alone (a runner that
/// starts before it retries its job tools until it answers). Each restricted agent's network.
async fn ways_out(
    site: &crate::pool::egress::Site<'_>,
    af: &Agentfile,
    only: Option<&Only>,
    images: &HashMap<String, Image>,
    force: bool,
    progress: &Progress,
) -> anyhow::Result<BTreeMap<String, String>> {
    let agents: Vec<&AgentSpec> = af
        .agents
        .iter()
        .filter(|a| only.is_none_or(|o| o.agent == a.name))
        .collect();
    let egress = crate::pool::egress::ensure(site, &agents, only.is_none(), progress).await?;
    if only.is_some() {
        return Ok(egress);
    }
    let tags: HashMap<String, String> = images
        .iter()
        .map(|(agent, img)| (agent.clone(), img.tag.clone()))
        .collect();
    let inputs = broker::Inputs {
        pool: site.pool,
        pool_network: site.pool_network,
        egress: &egress,
        images: &tags,
        api_url: &site.api.container_url,
        api_local: site.api.local.is_some(),
    };
    // A job image of its own must be in the engine before a runner asks for a job in it.
    for agent in af.agents.iter().filter(|a| a.has_job_tools()) {
        if let Some(image) = &agent.runtime.jobs.image {
            crate::pool::image::ensure_local(site.docker, image, "runtime.jobs.image").await?;
        }
    }
    let wanted = wanted_broker(af, &inputs);
    let broker_site = broker::Site {
        docker: site.docker,
        pool: site.pool,
        pool_network: site.pool_network,
        image: site.image,
    };
    broker::ensure(&broker_site, wanted.as_ref(), force, progress).await?;
    Ok(egress)
}

/// The job broker `af` wants (`None`: no agent has the job tools).
fn wanted_broker(af: &Agentfile, inputs: &broker::Inputs<'_>) -> Option<Broker> {
    Some(Broker {
        config: broker::config(af, inputs)?,
        api_url: inputs.api_url.to_string(),
        socket: broker::socket_source(std::env::var("DOCKER_HOST").ok().as_deref()),
    })
}

/// The `up --dry-run` line of the job broker, against the networks and runner image that exist
/// now (a network or image not made yet stands in as `unmade <name>`: the broker shows as
/// (re)created).
async fn planned_broker(
    docker: &Docker,
    af: &Agentfile,
    pool: &str,
    tags: &HashMap<String, String>,
    runner_id: Option<&str>,
    options: Options,
) -> anyhow::Result<Option<String>> {
    let networks = crate::pool::engine::pool_networks(docker, pool).await?;
    let id_of = |name: String| {
        networks
            .iter()
            .find(|n| n.name == name)
            .map_or_else(|| format!("unmade {name}"), |n| n.id.clone())
    };
    let pool_network = id_of(crate::objects::network_name(pool));
    let egress: BTreeMap<String, String> = af
        .agents
        .iter()
        .filter(|a| a.network.restricted())
        .map(|a| {
            (
                a.name.clone(),
                id_of(crate::pool::egress::name(pool, &a.name)),
            )
        })
        .collect();
    let inputs = broker::Inputs {
        pool,
        pool_network: &pool_network,
        egress: &egress,
        images: tags,
        api_url: &local_api::planned_container_url(),
        api_local: std::env::var("AGENTFILE_API_URL").is_ok_and(|u| u.is_empty())
            || std::env::var_os("AGENTFILE_API_URL").is_none(),
    };
    let wanted = wanted_broker(af, &inputs);
    let digest = wanted
        .as_ref()
        .map(|b| b.digest(runner_id.unwrap_or("unbuilt runner image")));
    let seen = broker::observe(docker, pool).await?;
    Ok(
        broker::decide(digest.as_deref(), seen.as_ref(), options.force_recreate)
            .line(&crate::jobs::config::container_name(pool)),
    )
}

/// `up --dry-run`: the plan against the images that exist now, printed one line per op with its
/// cause. Reads Docker and the pool state; writes nothing.
async fn dry_run(
    docker: &Docker,
    af: &Agentfile,
    pool: &str,
    home: &std::path::Path,
    secrets: &BTreeMap<String, BTreeMap<String, String>>,
    sidecars: &[(sidecar::Wanted, BTreeMap<String, String>)],
    options: Options,
) -> anyhow::Result<ExitCode> {
    let binary = image::this_binary()?;
    // The MCP sidecars first, as `up` reconciles them first; an unbuilt image changes the
    // digest, so its sidecar shows as (re)created.
    let mut sidecar_lines = Vec::new();
    let mut digests = Vec::new();
    for (wanted, values) in sidecars {
        let tag = image::agent_tag(&wanted.base, &binary);
        let id = match image::existing(docker, &tag).await? {
            Some(img) => img.id,
            None => {
                sidecar_lines.push(format!("build {tag}: image would be built"));
                format!("unbuilt {tag}")
            }
        };
        digests.push((wanted.server.clone(), wanted.digest(&id, values)));
    }
    let seen = sidecar::observe(docker, pool).await?;
    sidecar_lines.extend(
        sidecar::plan(&digests, &seen, options.force_recreate)
            .iter()
            .filter(|a| !matches!(a, sidecar::Action::Keep(_)))
            .map(ToString::to_string),
    );
    let mut tags: HashMap<String, String> = HashMap::new();
    for agent in &af.agents {
        let tag = match &agent.runtime.image {
            Some(base) => image::agent_tag(base, &binary),
            None => image::runner_tag(&binary),
        };
        tags.insert(agent.name.clone(), tag);
    }
    let mut ids: HashMap<String, String> = HashMap::new();
    let mut unbuilt: Vec<String> = Vec::new();
    let runner = image::runner_tag(&binary);
    for tag in std::iter::once(&runner).chain(tags.values()) {
        if ids.contains_key(tag) || unbuilt.contains(tag) {
            continue;
        }
        match image::existing(docker, tag).await? {
            Some(img) => {
                ids.insert(img.tag, img.id);
            }
            None => unbuilt.push(tag.clone()),
        }
    }
    unbuilt.sort();
    let desired: Vec<Desired> =
        desired(af, secrets, &local_api::planned_container_url(), |agent| {
            tags.get(agent).and_then(|t| ids.get(t)).cloned()
        })
        .into_iter()
        .map(|mut d| {
            if let Some(tag) = tags.get(&d.agent).filter(|t| !ids.contains_key(*t)) {
                d.config = d.config.with_unbuilt_image(tag);
            }
            d
        })
        .collect();
    // The job broker, as `up` keeps it before the replicas.
    sidecar_lines.extend(
        planned_broker(
            docker,
            af,
            pool,
            &tags,
            ids.get(&runner).map(String::as_str),
            options,
        )
        .await?,
    );
    let state = state::read(home, pool)?;
    let observed = observe(docker, pool).await?;
    let plan = plan::plan(&desired, &observed, &state, &unbuilt, options);
    let trigger_lines = planned_triggers(home, pool, &af.triggers).await;
    let mut text: String = sidecar_lines.iter().map(|l| format!("{l}\n")).collect();
    text.push_str(&plan.to_string());
    text.extend(trigger_lines.iter().map(|l| format!("{l}\n")));
    crate::output::text(&text);
    eprintln!(
        "dry run: {} change(s) planned for pool {pool}; nothing was changed",
        plan.ops.len() + sidecar_lines.len() + trigger_lines.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// The trigger lines of `up --dry-run`, against the API the pool uses if it answers now (a dry
/// run starts nothing). When it does not, the lines cannot be known: a note on stderr says so
/// (only when the agentfile has triggers: an API that is not running fires none).
async fn planned_triggers(
    home: &std::path::Path,
    pool: &str,
    desired: &[TriggerSpec],
) -> Vec<String> {
    let registered = match Api::existing(home).await {
        Ok(api) => api.triggers(pool).await,
        Err(e) => Err(e),
    };
    match registered {
        Ok(registered) => trigger_changes(desired, &registered),
        Err(e) => {
            if !desired.is_empty() {
                eprintln!(
                    "dry run: the trigger changes are not shown: the checkpoint API does not \
                     answer ({e:#}); `ninetrix up` registers the agentfile's {} trigger(s)",
                    desired.len()
                );
            }
            Vec::new()
        }
    }
}
