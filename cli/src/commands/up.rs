//! `ninetrix up`: plan, then apply. Validate the agentfile and read the host secrets (nothing
//! starts if one is missing), take the pool lock, build the images, ensure the API and the
//! network (found by label, created once), reconcile the MCP servers' sidecars, observe the
//! pool's containers, [`plan`](crate::pool::plan::plan) the Docker actions, [`apply`] them, and wait
//! for every (re)started durable runner to be `ready`. `--dry-run` prints the plan instead and
//! changes nothing: no image build, no API, no network, no pool state written.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bollard::Docker;
use clap::Args;
use ninetrix_proto::agentfile::Agentfile;

use crate::cli::pool_name;
use crate::pool::apply::{self, Target};
use crate::pool::image::{self, Image};
use crate::pool::local_api::{self, Api};
use crate::pool::observed::observe;
use crate::pool::plan::{self, Desired, Options};
use crate::pool::sidecar::{self, Sidecars};
use crate::pool::spec::DEFAULT_STOP_SECS;
use crate::pool::spec::{self, Config};
use crate::pool::state;
use crate::ui::progress::Progress;

/// Arguments of `ninetrix up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// The agentfile.
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool name, overriding the agentfile's `name:`.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// Recreate every container, even unchanged ones.
    #[arg(long)]
    pub force_recreate: bool,
    /// Remove containers of agents that are no longer in the agentfile.
    #[arg(long)]
    pub remove_orphans: bool,
    /// Print the plan (one line per Docker action, with its cause) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Seconds a replaced or removed container gets to checkpoint and exit before it is killed.
    #[arg(short = 't', long = "timeout", default_value_t = DEFAULT_STOP_SECS, value_name = "SECS")]
    pub timeout: i32,
    /// Seconds to wait for every durable runner to be ready.
    #[arg(long, default_value_t = 60, value_name = "S")]
    pub wait_timeout: u64,
    /// Progress as JSON lines.
    #[arg(long)]
    pub json: bool,
}

/// Runs `ninetrix up`.
pub(crate) async fn run(args: &UpArgs) -> anyhow::Result<ExitCode> {
    let parsed = crate::pool::load(&args.file)?;
    let af = parsed.agentfile;
    let pool = crate::pool::resolve::pool_of(&af, args.pool.as_deref(), &args.file)?;
    // Secrets first: nothing starts if one is missing.
    let mut secrets = BTreeMap::new();
    for agent in &af.agents {
        secrets.insert(agent.name.clone(), spec::host_secrets(agent)?);
    }
    let mut sidecar_secrets = Vec::new();
    for wanted in sidecar::Wanted::of(&af) {
        let values = wanted.host_secrets()?;
        sidecar_secrets.push((wanted, values));
    }
    let docker = crate::docker::connect().await?;
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
    // The pool lock first: a second `up` (or a `down`) of this pool waits here, then finds what
    // the first made, so nothing — image, API, network, container — is created twice.
    let mut locked = state::lock(&home, &pool)?;
    let progress = Progress::new(args.json);
    let binary = image::this_binary()?;
    let (runner_image, built) = image::runner_image(&docker, &binary).await?;
    progress.step(
        "Image",
        &runner_image.tag,
        if built { "Built" } else { "Up to date" },
    );
    let mut images: HashMap<String, Image> = HashMap::new();
    for agent in &af.agents {
        let img = match &agent.runtime.image {
            Some(base) => image::agent_image(&docker, base, &binary).await?,
            None => runner_image.clone(),
        };
        images.insert(agent.name.clone(), img);
    }
    let api = Api::ensure(&docker, &home, &runner_image).await?;
    progress.step("API", api.local.as_deref().unwrap_or(&api.url), "Ready");
    let network = crate::docker::ensure_network(&docker, &pool, api.local.as_deref()).await?;
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
    Sidecars {
        docker: &docker,
        pool: &pool,
        network: &network.id,
        stop_timeout: args.timeout,
    }
    .apply(&sidecars, args.force_recreate, &progress)
    .await?;

    let desired = desired(&af, &secrets, &api.container_url, |agent| {
        images.get(agent).map(|i| i.id.clone())
    });
    locked.state.agentfile = std::path::absolute(&args.file).ok();
    locked.state.agentfile_hash = std::fs::read(&args.file).ok().map(|b| {
        use sha2::Digest as _;
        sha2::Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    });
    // Only an external API's URL is worth recording: the local one's is read from its container.
    locked.state.api_url = api.local.is_none().then(|| api.url.clone());
    let observed = observe(&docker, &pool).await?;
    let plan = plan::plan(&desired, &observed, &locked.state, &[], options);
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
    };
    // The replica counts first: sessions move to (or away from) replicas as the count says, and
    // a replica that is about to go hands its sessions over at its next write (it is fenced).
    for agent in af.agents.iter().filter(|a| a.execution.durability) {
        api.set_replicas(
            &pool,
            &agent.name,
            agent.execution.replicas,
            &agent.collaborators,
        )
        .await?;
    }
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
    if !args.json {
        let sidecars = match sidecar_count {
            0 => String::new(),
            1 => " and 1 MCP sidecar".to_string(),
            n => format!(" and {n} MCP sidecars"),
        };
        outln!(
            "pool {pool} is up: {} container(s){sidecars}; `ninetrix ps -p {pool}` lists them",
            af.agents.iter().map(|a| a.execution.replicas).sum::<u32>()
        );
    }
    Ok(ExitCode::SUCCESS)
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
    let state = state::read(home, pool)?;
    let observed = observe(docker, pool).await?;
    let plan = plan::plan(&desired, &observed, &state, &unbuilt, options);
    let mut text: String = sidecar_lines.iter().map(|l| format!("{l}\n")).collect();
    text.push_str(&plan.to_string());
    crate::output::text(&text);
    eprintln!(
        "dry run: {} change(s) planned for pool {pool}; nothing was changed",
        plan.ops.len() + sidecar_lines.len()
    );
    Ok(ExitCode::SUCCESS)
}
