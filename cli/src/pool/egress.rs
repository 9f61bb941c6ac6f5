//! The egress proxies of a pool on one host. For each agent with `network.egress`, `up` keeps:
//!
//! - an internal network `ninetrix-<pool>-<agent>-egress` (Docker's `--internal`: no route
//!   out), which the agent's replicas join instead of the pool network; the local API and the
//!   agent's MCP sidecars join it too, so they are reached directly;
//! - a proxy container `ninetrix-<pool>-<agent>-egress` (`ninetrix egress-proxy`, the runner
//!   image), on the pool network and, as `egress-proxy`, on the internal one: the agent's only
//!   way out, allowing [`ninetrix_agentfile::network::allow_list`]'s hosts. It reports into the
//!   pool's health volume, so `ps` shows what it allowed and refused, and logs one JSON line per
//!   connection (`ninetrix logs`).
//!
//! The runners get `HTTP(S)_PROXY` pointing at it and `NO_PROXY` for what is on the network
//! (pool/egress_env.rs); tool processes inherit those (runner/src/tools/sandbox.rs). Pure parts
//! ([`rules`], [`Proxy::body`]) are tested without Docker; [`ensure`] applies.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context as _;
use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, HealthConfig, HostConfig, NetworkCreateRequest, RestartPolicy,
    RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectNetworkOptions, ListNetworksOptions,
};
use ninetrix_agentfile::AgentSpec;
use ninetrix_agentfile::mcp::{self, McpTransport};
use ninetrix_agentfile::network::{Allowed, allow_list};
use ninetrix_agentfile::security::Security;

use crate::docker::is_not_found;
use crate::hardening;
use crate::objects::{AGENT, DURABLE, EGRESS, HASH, POOL, ROLE, VERSION};
use crate::pool::egress_env::{ALIAS, PORT};
use crate::pool::image::Image;
use crate::pool::local_api::Api;
use crate::ui::progress::Progress;

/// The role label of an egress network.
const NETWORK_ROLE: &str = "egress";

/// `ninetrix-<pool>-<agent>-egress`: the agent's internal network, and its proxy's container.
pub(crate) fn name(pool: &str, agent: &str) -> String {
    format!("ninetrix-{pool}-{agent}-egress")
}

/// The allow-list of `spec`'s proxy: its own rules and what it needs, plus the checkpoint API
/// when it is not a container on the network (`api_local` false) and the OpenTelemetry
/// endpoints the runners export to (`otel`: the `OTEL_EXPORTER_OTLP*_ENDPOINT` values `up`
/// passes them).
pub(crate) fn rules(
    spec: &AgentSpec,
    api_url: &str,
    api_local: bool,
    otel: &[String],
) -> Vec<Allowed> {
    let mut also: Vec<(&str, &str)> = Vec::new();
    if !api_local {
        also.push((api_url, "the checkpoint API"));
    }
    also.extend(
        otel.iter()
            .map(|endpoint| (endpoint.as_str(), "the OpenTelemetry collector")),
    );
    allow_list(spec, &also)
}

/// The OTLP endpoints among the telemetry variables the runners get.
fn otel_endpoints(telemetry: &crate::pool::spec::Telemetry) -> Vec<String> {
    telemetry
        .env
        .iter()
        .filter(|(k, _)| k.starts_with("OTEL_EXPORTER_OTLP") && k.ends_with("_ENDPOINT"))
        .map(|(_, v)| v.clone())
        .collect()
}

/// One agent's proxy.
pub(crate) struct Proxy<'a> {
    /// The pool.
    pub(crate) pool: &'a str,
    /// The agent it serves.
    pub(crate) agent: &'a str,
    /// What it allows.
    pub(crate) rules: Vec<Allowed>,
}

impl Proxy<'_> {
    /// Its container's name (also its internal network's).
    pub(crate) fn name(&self) -> String {
        name(self.pool, self.agent)
    }

    /// The proxy's arguments (the image's entrypoint is the binary).
    fn cmd(&self) -> Vec<String> {
        let name = self.name();
        let mut cmd = vec![
            "egress-proxy".to_string(),
            "--listen".to_string(),
            format!("0.0.0.0:{PORT}"),
            "--health-file".to_string(),
            crate::pool::health::file_of(&name),
            "--status-file".to_string(),
            format!("{}.egress", crate::pool::health::file_of(&name)),
        ];
        for a in &self.rules {
            cmd.push("--allow".into());
            cmd.push(a.rule.to_string());
        }
        cmd
    }

    /// The configuration digest: the image and the arguments.
    pub(crate) fn digest(&self, image_id: &str) -> String {
        crate::objects::config_digest(image_id, self.cmd().iter().map(String::as_str))
    }

    /// The create body: the runner image serving the proxy on the pool network (`network`),
    /// hardened, restarted unless stopped, reporting into the pool's health volume.
    pub(crate) fn body(&self, image: &str, network: &str, digest: &str) -> ContainerCreateBody {
        let labels: HashMap<String, String> = [
            (POOL, self.pool.to_string()),
            (AGENT, format!("egress:{}", self.agent)),
            (EGRESS, self.agent.to_string()),
            (DURABLE, "true".to_string()),
            (HASH, digest.to_string()),
            (VERSION, crate::objects::VERSION_VALUE.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let health = crate::pool::health::volume_mount(self.pool);
        let security = Security::default();
        let mut host_config = HostConfig {
            init: Some(true),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::UNLESS_STOPPED),
                maximum_retry_count: None,
            }),
            network_mode: Some(network.to_string()),
            // An API or model server on the host is reached as on the pool network.
            extra_hosts: Some(vec!["host.docker.internal:host-gateway".into()]),
            mounts: Some(vec![health]),
            ..HostConfig::default()
        };
        hardening::apply(&mut host_config, &security, None, (POOL, self.pool));
        ContainerCreateBody {
            image: Some(image.to_string()),
            cmd: Some(self.cmd()),
            hostname: Some(ALIAS.into()),
            user: Some(hardening::user(&security)),
            env: Some(vec![format!("HOME={}", hardening::HOME)]),
            labels: Some(labels),
            host_config: Some(host_config),
            // Its own report says how it is; no Docker healthcheck runs.
            healthcheck: Some(HealthConfig {
                test: Some(vec!["NONE".into()]),
                ..HealthConfig::default()
            }),
            ..ContainerCreateBody::default()
        }
    }
}

/// Where the proxies go: the engine, the pool and its network, the API, the runner image.
pub(crate) struct Site<'a> {
    /// The engine.
    pub(crate) docker: &'a Docker,
    /// The pool.
    pub(crate) pool: &'a str,
    /// The pool network's ID (the proxies' way out).
    pub(crate) pool_network: &'a str,
    /// The checkpoint API (joined to each internal network when it is the local container).
    pub(crate) api: &'a Api,
    /// The runner image, which serves the proxy.
    pub(crate) image: &'a Image,
}

/// Keeps the internal network and the proxy of each of `agents` with `network.egress`, and —
/// with `prune`, when `agents` is the whole pool — removes those of agents that no longer have
/// it. Returns each restricted agent's network ID.
pub(crate) async fn ensure(
    site: &Site<'_>,
    agents: &[&AgentSpec],
    prune: bool,
    progress: &Progress,
) -> anyhow::Result<BTreeMap<String, String>> {
    let Site {
        docker,
        pool,
        pool_network,
        api,
        image,
    } = *site;
    // The same variables the runners are given (pool/spec.rs), so what they export to is allowed.
    let otel = otel_endpoints(&crate::pool::spec::Telemetry::from_host());
    let mut networks = BTreeMap::new();
    for spec in agents.iter().filter(|a| a.network.restricted()) {
        let name = name(pool, &spec.name);
        let network = ensure_network(docker, pool, &spec.name, &name).await?;
        api.join(docker, &network).await?;
        for (server, s) in &spec.mcp_servers {
            if matches!(s.transport, McpTransport::Sidecar { .. }) {
                let container = crate::objects::sidecar_container_name(pool, server);
                crate::docker::connect_network(
                    docker,
                    &network,
                    &container,
                    &mcp::sidecar_host(server),
                )
                .await?;
            }
        }
        let proxy = Proxy {
            pool,
            agent: &spec.name,
            rules: rules(spec, &api.container_url, api.local.is_some(), &otel),
        };
        let state = ensure_proxy(docker, &proxy, image, pool_network, &network).await?;
        progress.step("Egress", &name, state);
        networks.insert(spec.name.clone(), network);
    }
    if prune {
        remove_unwanted(docker, pool, &networks, progress).await;
    }
    Ok(networks)
}

/// The internal network `name`, created if missing; its ID.
async fn ensure_network(
    docker: &Docker,
    pool: &str,
    agent: &str,
    name: &str,
) -> anyhow::Result<String> {
    match docker
        .inspect_network(name, None::<InspectNetworkOptions>)
        .await
    {
        Ok(n) => return n.id.context("a network without an ID"),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e).with_context(|| format!("cannot inspect network {name}")),
    }
    let labels: HashMap<String, String> = [
        (POOL.to_string(), pool.to_string()),
        (ROLE.to_string(), NETWORK_ROLE.to_string()),
        (EGRESS.to_string(), agent.to_string()),
    ]
    .into();
    let created = docker
        .create_network(NetworkCreateRequest {
            name: name.to_string(),
            driver: Some("bridge".into()),
            internal: Some(true),
            labels: Some(labels),
            ..NetworkCreateRequest::default()
        })
        .await
        .with_context(|| format!("cannot create the internal network {name}"))?;
    Ok(created.id)
}

/// The proxy running with its current configuration: created (or recreated when its digest
/// changed), joined to the internal network as [`ALIAS`], started. What was done.
async fn ensure_proxy(
    docker: &Docker,
    proxy: &Proxy<'_>,
    image: &Image,
    pool_network: &str,
    network: &str,
) -> anyhow::Result<&'static str> {
    let name = proxy.name();
    let digest = proxy.digest(&image.id);
    let state = match docker.inspect_container(&name, None).await {
        Ok(info) => {
            let same = info
                .config
                .as_ref()
                .and_then(|c| c.labels.as_ref())
                .and_then(|l| l.get(HASH))
                == Some(&digest);
            let running = info.state.as_ref().and_then(|s| s.running) == Some(true);
            if same && running {
                return Ok("Running");
            }
            crate::docker::stop_and_remove(docker, &name, 2).await?;
            "Recreated"
        }
        Err(e) if is_not_found(&e) => "Created",
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {name}")),
    };
    docker
        .create_container(
            Some(CreateContainerOptionsBuilder::default().name(&name).build()),
            proxy.body(&image.tag, pool_network, &digest),
        )
        .await
        .with_context(|| format!("cannot create the egress proxy {name}"))?;
    crate::docker::connect_network(docker, network, &name, ALIAS).await?;
    docker
        .start_container(&name, None)
        .await
        .with_context(|| format!("cannot start the egress proxy {name}"))?;
    Ok(state)
}

/// Removes the proxies and internal networks of the pool's agents that are not in `wanted`
/// (their agent lost `network.egress` or left the agentfile). Best effort: what cannot be
/// removed is said and left for `down`.
async fn remove_unwanted(
    docker: &Docker,
    pool: &str,
    wanted: &BTreeMap<String, String>,
    progress: &Progress,
) {
    let filters: HashMap<String, Vec<String>> =
        [("label".to_string(), vec![EGRESS.to_string()])].into();
    let Ok(containers) = crate::pool::engine::pool_containers(docker, Some(pool)).await else {
        return;
    };
    for c in containers {
        let Some(agent) = crate::docker::label(&c, EGRESS) else {
            continue;
        };
        if wanted.contains_key(agent) {
            continue;
        }
        let id = c.id.clone().unwrap_or_default();
        let name = name(pool, agent);
        match crate::docker::stop_and_remove(docker, &id, 2).await {
            Ok(()) => progress.step("Egress", &name, "Removed"),
            Err(e) => progress.step("Egress", &name, &format!("not removed: {e:#}")),
        }
    }
    let Ok(networks) = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some(filters),
        }))
        .await
    else {
        return;
    };
    for n in networks {
        let labels = n.labels.unwrap_or_default();
        let (Some(p), Some(agent)) = (labels.get(POOL), labels.get(EGRESS)) else {
            continue;
        };
        if p != pool || wanted.contains_key(agent) {
            continue;
        }
        if let Some(id) = n.id {
            let _ = docker.remove_network(&id).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(yaml: &str) -> AgentSpec {
        ninetrix_agentfile::parse("agentfile.yaml", yaml)
            .unwrap()
            .agentfile
            .agents
            .remove(0)
    }

    const RESTRICTED: &str = "mcp_servers:\n  lines: { image: img, command: [srv] }\nagents:\n  \
        worker:\n    runtime: { provider: openai, model: gpt-4o }\n    \
        tools: [\"mcp://lines\"]\n    network: { egress: [\"*.github.com\"] }\n";

    #[test]
    fn a_restricted_runner_uses_the_proxy_and_reaches_the_api_and_its_sidecars_directly() {
        use crate::pool::egress_env::{direct_hosts, runner_env};
        let spec = agent(RESTRICTED);
        let direct = direct_hosts(&spec, "http://ninetrix-api:8080", true);
        assert_eq!(direct, ["ninetrix-api", "mcp-lines"]);
        let env = runner_env(&direct);
        assert!(env.contains(&"HTTPS_PROXY=http://egress-proxy:3128".to_string()));
        assert!(env.contains(&"NO_PROXY=localhost,127.0.0.1,ninetrix-api,mcp-lines".to_string()));
        assert!(
            direct_hosts(&spec, "http://host.docker.internal:8080", false)
                .iter()
                .all(|h| h != "host.docker.internal"),
            "an API outside the network goes through the proxy"
        );
    }

    #[test]
    fn the_proxy_allows_the_agents_rules_its_model_and_an_api_outside_the_network() {
        let spec = agent(RESTRICTED);
        let shown = |list: Vec<Allowed>| -> Vec<String> {
            list.into_iter().map(|a| a.rule.to_string()).collect()
        };
        assert_eq!(
            shown(rules(&spec, "http://ninetrix-api:8080", true, &[])),
            ["*.github.com", "api.openai.com:443"]
        );
        assert_eq!(
            shown(rules(
                &spec,
                "http://host.docker.internal:41234",
                false,
                &["http://jaeger:4318".to_string()]
            )),
            [
                "*.github.com",
                "api.openai.com:443",
                "host.docker.internal:41234",
                "jaeger:4318"
            ]
        );
        let proxy = Proxy {
            pool: "shop",
            agent: "worker",
            rules: rules(&spec, "http://ninetrix-api:8080", true, &[]),
        };
        let body = proxy.body("img:1", "netid", &proxy.digest("sha256:1"));
        let cmd = body.cmd.unwrap();
        assert_eq!(&cmd[..3], ["egress-proxy", "--listen", "0.0.0.0:3128"]);
        assert!(cmd.windows(2).any(|w| w == ["--allow", "*.github.com"]));
        let labels = body.labels.unwrap();
        assert_eq!(labels[EGRESS], "worker");
        assert_eq!(labels[AGENT], "egress:worker");
        assert_eq!(body.user.as_deref(), Some("65532:65532"));
        let hc = body.host_config.unwrap();
        assert_eq!(
            hc.network_mode.as_deref(),
            Some("netid"),
            "on the pool network"
        );
        assert_eq!(hc.readonly_rootfs, Some(true), "hardened");
        assert!(hc.extra_hosts.unwrap()[0].starts_with("host.docker.internal"));
        assert_ne!(proxy.digest("sha256:1"), proxy.digest("sha256:2"));
    }
}
