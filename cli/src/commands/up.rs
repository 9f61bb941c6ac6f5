//! `ninetrix up`: plan, then apply. Validate the agentfile and read the host secrets (nothing
//! starts if one is missing), take the pool lock, build the images, ensure the API and the
//! network (found by label, created once), reconcile the MCP servers' sidecars, observe the
//! pool's containers, [`plan`](crate::pool::plan::plan) the Docker actions, [`apply`] them, and wait
//! for every (re)started durable runner to be `ready`. The pool's triggers (schedules and
//! webhooks, each webhook's secret read from the host with the agents' secrets) are registered
//! with the API as one set after the replica counts, so a trigger deleted from the agentfile is
//! removed. `--dry-run` prints the plan instead and changes nothing: no image build, no API, no
//! network, no pool state written (the trigger changes are listed if the API answers).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bollard::Docker;
use clap::Args;
use ninetrix_agentfile::Agentfile;
use ninetrix_proto::api::{Trigger, TriggerRegistration, TriggerSet, TriggersApplied};
use ninetrix_proto::triggers::TriggerSpec;

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
    /// Print the plan (one line per Docker action and trigger change, with its cause) and change
    /// nothing.
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
    /// Run the pool on Docker Swarm: one service per agent and the pool's own checkpoint API as
    /// a service (this engine must be a swarm manager). See docs/deployment.md.
    #[arg(long)]
    pub swarm: bool,
    /// With --swarm: the image every node runs (a registry reference, pushed beforehand) instead
    /// of the one `up` builds on this node.
    #[arg(long, value_name = "REF", requires = "swarm")]
    pub image: Option<String>,
    /// With --swarm: the Postgres URL of the pool's API (kept as a Swarm secret); without it the
    /// API runs on SQLite, one replica pinned to this node.
    #[arg(
        long,
        env = "NINETRIX_API_DATABASE_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub api_database: Option<String>,
    /// With --swarm: how many replicas of the API run (more than 1 needs --api-database).
    #[arg(long, default_value_t = 1, value_name = "N", requires = "swarm")]
    pub api_replicas: u32,
}

/// One replica that `reset` brings up on its new thread, leaving the rest of the pool as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Only {
    /// The agent.
    pub(crate) agent: String,
    /// The replica.
    pub(crate) replica: u32,
}

/// Runs `ninetrix up`.
pub(crate) async fn run(args: &UpArgs) -> anyhow::Result<ExitCode> {
    run_with(args, None).await
}

/// Runs `ninetrix up`, for the whole pool or (`reset`) for one replica: then no sidecar, trigger
/// or other container is touched.
pub(crate) async fn run_with(args: &UpArgs, only: Option<&Only>) -> anyhow::Result<ExitCode> {
    if args.swarm {
        return crate::swarm::deploy::up(args).await;
    }
    let parsed = crate::pool::load(&args.file)?;
    let af = parsed.agentfile;
    let pool = crate::pool::resolve::pool_of(&af, args.pool.as_deref(), &args.file)?;
    // Secrets first: nothing starts if one is missing.
    let mut secrets = BTreeMap::new();
    for agent in &af.agents {
        secrets.insert(agent.name.clone(), spec::host_secrets(agent)?);
    }
    let mut sidecar_secrets = Vec::new();
    for wanted in sidecar::Wanted::of(&af)
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
    if locked.state.swarm.is_some() {
        if crate::swarm::has_services(&docker, &pool).await {
            anyhow::bail!(
                "pool `{pool}` runs on Docker Swarm; `ninetrix up --swarm` updates it (or `ninetrix down -p {pool}` takes it off the swarm first)"
            );
        }
        // It ran on Swarm once and was taken down: its threads are in that API's data, not in
        // this host's API, so it starts afresh here.
        locked.state.swarm = None;
        locked.state.agents.clear();
    }
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
    // The pool's whole set of triggers, always: an agentfile whose triggers were all deleted
    // removes them. A fire before the replicas are up waits in its session's inbox.
    if only.is_none() {
        let changed = api.set_triggers(&pool, &triggers).await?;
        for (name, status) in trigger_steps(&changed) {
            progress.step("Trigger", name, status);
        }
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
    Ok(ExitCode::SUCCESS)
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

/// The pool's triggers as `up` registers them, each webhook with its secret's value read from
/// the host environment as agents' secrets are (a missing one fails `up` before anything starts,
/// naming the trigger).
pub(crate) fn registrations(triggers: &[TriggerSpec]) -> anyhow::Result<TriggerSet> {
    let mut set = TriggerSet::default();
    for trigger in triggers {
        let secret = match trigger.webhook() {
            Some(w) => {
                let needed_by = format!("trigger `{}`", trigger.name);
                let mut values = spec::host_values(std::slice::from_ref(&w.secret), &needed_by)?;
                values.remove(&w.secret)
            }
            None => None,
        };
        set.triggers.push(TriggerRegistration {
            spec: trigger.clone(),
            secret,
        });
    }
    Ok(set)
}

/// The progress lines of a registration: one per trigger created, updated or removed (nothing
/// for an unchanged one).
pub(crate) fn trigger_steps(applied: &TriggersApplied) -> Vec<(&str, &'static str)> {
    let mut steps = Vec::new();
    for (names, status) in [
        (&applied.created, "Created"),
        (&applied.updated, "Updated"),
        (&applied.removed, "Removed"),
    ] {
        steps.extend(names.iter().map(|n| (n.as_str(), status)));
    }
    steps
}

/// `up --dry-run`'s trigger lines: what registering `desired` would change against the triggers
/// the API holds (`registered`), by name and spec. A changed webhook secret cannot be seen (the
/// API never returns it), so nothing is said about secrets.
pub(crate) fn trigger_changes(desired: &[TriggerSpec], registered: &[Trigger]) -> Vec<String> {
    let mut lines = Vec::new();
    for want in desired {
        match registered.iter().find(|t| t.spec.name == want.name) {
            None => lines.push(format!(
                "create trigger {}: new {} for agent {}",
                want.name,
                want.kind_name(),
                want.agent
            )),
            Some(have) if have.spec != *want => lines.push(format!(
                "update trigger {}: changed ({})",
                want.name,
                spec_diff(&have.spec, want).join(", ")
            )),
            Some(_) => {}
        }
    }
    for have in registered {
        if !desired.iter().any(|d| d.name == have.spec.name) {
            lines.push(format!(
                "remove trigger {}: no longer in the agentfile",
                have.spec.name
            ));
        }
    }
    lines
}

/// The fields that differ between two specs of one trigger: `agent`, `session`, `type`, or the
/// kind's own fields (`cron`, `message`, `overlap`…).
fn spec_diff(old: &TriggerSpec, new: &TriggerSpec) -> Vec<String> {
    let mut fields = Vec::new();
    if old.agent != new.agent {
        fields.push("agent".to_string());
    }
    if old.session != new.session {
        fields.push("session".to_string());
    }
    if old.kind_name() != new.kind_name() {
        fields.push("type".to_string());
    } else {
        let as_map = |spec: &TriggerSpec| match serde_json::to_value(&spec.kind) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        let (a, b) = (as_map(old), as_map(new));
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        fields.extend(
            keys.into_iter()
                .filter(|k| a.get(*k) != b.get(*k))
                .map(|k| agentfile_key(k).to_string()),
        );
    }
    if fields.is_empty() {
        fields.push("spec".to_string());
    }
    fields
}

/// A spec field by the agentfile key that sets it (`every_secs` is `every`).
fn agentfile_key(field: &str) -> &str {
    match field {
        "every_secs" => "every",
        "catch_up_window_secs" => "catch_up_window",
        "tolerance_secs" => "tolerance",
        "rate_limit_per_minute" => "rate_limit",
        "max_body_bytes" => "max_body",
        other => other,
    }
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

#[cfg(test)]
mod tests {
    use chrono::{TimeZone as _, Utc};
    use ninetrix_proto::triggers::schedule::{CatchUp, Overlap};
    use ninetrix_proto::triggers::{
        ScheduleTrigger, SignatureScheme, TriggerKind, TriggerSession, WebhookTrigger,
    };

    use super::*;

    fn schedule(name: &str, cron: &str) -> TriggerSpec {
        TriggerSpec {
            name: name.into(),
            agent: "writer".into(),
            session: TriggerSession::default_for(name),
            kind: TriggerKind::Schedule(ScheduleTrigger {
                cron: Some(cron.into()),
                every_secs: None,
                timezone: "UTC".into(),
                message: "Write the daily report".into(),
                overlap: Overlap::Skip,
                catch_up: CatchUp::Last,
                catch_up_window_secs: 3_600,
            }),
        }
    }

    fn webhook(name: &str, secret: &str) -> TriggerSpec {
        TriggerSpec {
            name: name.into(),
            agent: "triage".into(),
            session: TriggerSession::New,
            kind: TriggerKind::Webhook(WebhookTrigger {
                path: name.into(),
                message: "New issue: {{ issue.title }}".into(),
                secret: secret.into(),
                signature: SignatureScheme::Github,
                tolerance_secs: 300,
                rate_limit_per_minute: 60,
                max_body_bytes: 1 << 20,
            }),
        }
    }

    fn registered(spec: TriggerSpec) -> Trigger {
        let at = Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0).unwrap();
        Trigger {
            pool: "shop".into(),
            hook_path: None,
            spec,
            next_fire_at: None,
            buffered_at: None,
            last: None,
            created_at: at,
            updated_at: at,
        }
    }

    #[test]
    fn a_webhooks_secret_comes_from_the_host_and_a_missing_one_names_the_trigger() {
        let set =
            registrations(&[schedule("nightly", "0 9 * * *"), webhook("gh", "PATH")]).unwrap();
        assert_eq!(set.triggers.len(), 2);
        assert_eq!(set.triggers[0].secret, None, "a schedule has no secret");
        assert_eq!(set.triggers[1].secret, std::env::var("PATH").ok());
        let unset = "NINETRIX_TEST_SECRET_THAT_IS_NEVER_SET_7F3A";
        let err = registrations(&[webhook("gh-issues", unset)]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(unset)
                && text.contains("trigger `gh-issues`")
                && text.contains("nothing was started"),
            "{text}"
        );
        assert!(registrations(&[]).unwrap().triggers.is_empty());
    }

    #[test]
    fn progress_names_each_trigger_that_changed_and_none_that_did_not() {
        let applied = TriggersApplied {
            created: vec!["a".into()],
            updated: vec!["b".into()],
            unchanged: vec!["c".into()],
            removed: vec!["d".into(), "e".into()],
        };
        assert_eq!(
            trigger_steps(&applied),
            [
                ("a", "Created"),
                ("b", "Updated"),
                ("d", "Removed"),
                ("e", "Removed")
            ]
        );
        assert!(trigger_steps(&TriggersApplied::default()).is_empty());
    }

    #[test]
    fn a_dry_run_lists_the_triggers_it_would_create_update_and_remove() {
        let mut moved = schedule("moved", "0 9 * * *");
        moved.agent = "editor".into();
        let desired = [
            schedule("nightly", "0 9 * * *"),
            schedule("weekly", "0 9 * * 1"),
            webhook("gh", "GH_SECRET"),
            moved,
        ];
        let have = [
            registered(schedule("nightly", "0 9 * * *")),
            registered(schedule("weekly", "0 8 * * 1")),
            registered(schedule("moved", "0 9 * * *")),
            registered(schedule("old", "0 0 * * *")),
        ];
        assert_eq!(
            trigger_changes(&desired, &have),
            [
                "update trigger weekly: changed (cron)",
                "create trigger gh: new webhook for agent triage",
                "update trigger moved: changed (agent)",
                "remove trigger old: no longer in the agentfile",
            ]
        );
        let mut faster = schedule("poll", "0 9 * * *");
        if let TriggerKind::Schedule(s) = &mut faster.kind {
            (s.cron, s.every_secs, s.catch_up_window_secs) = (None, Some(300), 60);
        }
        assert_eq!(
            trigger_changes(&[faster], &[registered(schedule("poll", "0 9 * * *"))]),
            ["update trigger poll: changed (catch_up_window, cron, every)"]
        );
        let mut other = webhook("gh", "GH_SECRET");
        other.session = TriggerSession::Key("gh".into());
        assert_eq!(
            trigger_changes(&[other], &[registered(schedule("gh", "0 9 * * *"))]),
            ["update trigger gh: changed (agent, session, type)"]
        );
        assert!(
            trigger_changes(&[webhook("gh", "A")], &[registered(webhook("gh", "A"))]).is_empty()
        );
        assert!(trigger_changes(&[], &[]).is_empty());
    }
}
