//! The job broker of a pool on one host (issue 40): when an agent of the pool has the job tools,
//! `up` keeps one container `ninetrix-<pool>-jobs` (the runner image running the hidden
//! `ninetrix job-broker --listen 0.0.0.0:7480`) that creates background-job containers for the
//! pool's runners. It is the only container of a pool that holds the Docker socket; runners never
//! do — they ask it over HTTP with their own token (`AGENTFILE_JOBS_URL`).
//!
//! It sits on the pool network (as its container name, the host of
//! [`crate::jobs::config::url`]) and on the internal network of each restricted agent with jobs,
//! so those runners reach it directly (pool/jobs.rs puts it in their `NO_PROXY`). Its
//! configuration ([`config`], pure: `AGENTFILE_JOBS_CONFIG`) says per agent which image and
//! network its jobs get and their limits. A digest of everything it is created with is its
//! `config-hash` label: a changed configuration recreates it, an unchanged running one is kept
//! ([`decide`], pure). Recreating it never touches running jobs: they are containers of their
//! own, and the broker finds them again by label. [`ensure`] does the Docker calls.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::Context as _;
use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, HealthConfig, HostConfig, Mount, MountType, RestartPolicy,
    RestartPolicyNameEnum,
};
use bollard::query_parameters::CreateContainerOptionsBuilder;
use ninetrix_agentfile::Agentfile;
use ninetrix_agentfile::security::{Security, User};

use crate::docker::is_not_found;
use crate::hardening;
use crate::jobs::config::{AgentJobs, BrokerConfig, CONFIG_VAR, PORT, container_name};
use crate::objects::{HASH, JOB_BROKER_ROLE, POOL, ROLE, VERSION};
use crate::ui::progress::Progress;

/// Where the Docker socket is inside the broker (and on a host whose `DOCKER_HOST` is not a
/// unix socket).
pub(crate) const SOCKET: &str = "/var/run/docker.sock";

/// What the broker's configuration is made from, besides the agentfile.
pub(crate) struct Inputs<'a> {
    /// The pool.
    pub(crate) pool: &'a str,
    /// The pool network (the ID `up` uses).
    pub(crate) pool_network: &'a str,
    /// The internal network of each agent with `network.egress` (pool/egress.rs).
    pub(crate) egress: &'a BTreeMap<String, String>,
    /// Each agent's runner image tag.
    pub(crate) images: &'a HashMap<String, String>,
    /// The checkpoint API as containers reach it.
    pub(crate) api_url: &'a str,
    /// Whether that API is the local container (reached directly from an internal network).
    pub(crate) api_local: bool,
}

/// The broker's configuration for `af`'s agents with the job tools; `None` when none has them
/// (the pool then has no broker).
pub(crate) fn config(af: &Agentfile, inputs: &Inputs<'_>) -> Option<BrokerConfig> {
    let agents: BTreeMap<String, AgentJobs> = af
        .agents
        .iter()
        .filter(|a| a.has_job_tools())
        .map(|a| {
            let jobs = &a.runtime.jobs;
            let internal = inputs.egress.get(&a.name);
            // A restricted agent's jobs are as restricted as its runners: its internal network,
            // the proxy its runners use.
            let env = match internal {
                Some(_) => crate::pool::egress_env::runner_env(&crate::pool::jobs::direct_hosts(
                    a,
                    inputs.pool,
                    inputs.api_url,
                    inputs.api_local,
                )),
                None => Vec::new(),
            };
            let image = jobs
                .image
                .clone()
                .or_else(|| inputs.images.get(&a.name).cloned())
                .unwrap_or_default();
            let agent = AgentJobs {
                image,
                network: internal
                    .map_or(inputs.pool_network, String::as_str)
                    .to_string(),
                env,
                max_concurrent: jobs.max_concurrent,
                default_timeout_secs: jobs.default_timeout_secs,
                cpus: jobs.resources.cpu,
                memory_bytes: jobs.resources.memory_bytes,
                replicas: a.execution.replicas,
                security: a.security.clone(),
                isolation: a.runtime.isolation.clone(),
            };
            (a.name.clone(), agent)
        })
        .collect();
    (!agents.is_empty()).then(|| BrokerConfig {
        pool: inputs.pool.to_string(),
        agents,
    })
}

/// The host path of the Docker socket to bind-mount: `DOCKER_HOST`'s when it is a unix socket
/// (a rootless engine's, say), else the engine's default. A bind's source is a path on the
/// engine's host, which is this host for a unix socket; for `tcp://` or `ssh://` the engine's own
/// default is the best guess.
pub(crate) fn socket_source(docker_host: Option<&str>) -> String {
    docker_host
        .and_then(|h| h.strip_prefix("unix://"))
        .filter(|p| p.starts_with('/'))
        .unwrap_or(SOCKET)
        .to_string()
}

/// The pool's broker, as `up` wants it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Broker {
    /// Its configuration.
    pub(crate) config: BrokerConfig,
    /// The checkpoint API as containers reach it (the broker asks it who a runner's token is).
    pub(crate) api_url: String,
    /// The host path of the Docker socket ([`socket_source`]).
    pub(crate) socket: String,
}

impl Broker {
    /// Its container's name (and host name on the pool's networks).
    pub(crate) fn name(&self) -> String {
        container_name(&self.config.pool)
    }

    /// Its arguments (the image's entrypoint is the binary).
    fn cmd() -> Vec<String> {
        vec![
            "job-broker".into(),
            "--listen".into(),
            format!("0.0.0.0:{PORT}"),
        ]
    }

    /// Its environment: the configuration, the API, the socket. No secret: it authenticates
    /// runners by asking the API about their own tokens.
    fn env(&self) -> Vec<String> {
        vec![
            format!(
                "{CONFIG_VAR}={}",
                serde_json::to_string(&self.config).unwrap_or_default()
            ),
            format!("{}={}", ninetrix_runner::launch::var::API_URL, self.api_url),
            format!("DOCKER_HOST=unix://{SOCKET}"),
            format!("HOME={}", hardening::HOME),
        ]
    }

    /// The internal networks it joins besides the pool's: those of its restricted agents.
    pub(crate) fn extra_networks(&self, pool_network: &str) -> Vec<String> {
        let set: BTreeSet<&str> = self
            .config
            .agents
            .values()
            .map(|a| a.network.as_str())
            .filter(|n| *n != pool_network)
            .collect();
        set.into_iter().map(str::to_string).collect()
    }

    /// The configuration digest: the image, the arguments, the environment and the socket.
    pub(crate) fn digest(&self, image_id: &str) -> String {
        let (cmd, env) = (Self::cmd(), self.env());
        let parts = cmd.iter().chain(&env).chain(std::iter::once(&self.socket));
        crate::objects::config_digest(image_id, parts.map(String::as_str))
    }

    /// The create body: the runner image serving the broker on the pool network (`network`),
    /// the Docker socket bind-mounted, hardened, restarted unless stopped.
    pub(crate) fn body(&self, image: &str, network: &str, digest: &str) -> ContainerCreateBody {
        let pool = self.config.pool.as_str();
        let labels: HashMap<String, String> = [
            (POOL, pool.to_string()),
            (ROLE, JOB_BROKER_ROLE.to_string()),
            (HASH, digest.to_string()),
            (VERSION, crate::objects::VERSION_VALUE.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        // Hardened like the pool's containers but as uid 0: the Docker socket is root's (mode
        // 660, root:docker), and root without capabilities can use a socket it owns and nothing
        // more. The socket is the one way into the engine a pool container has; runners never
        // get it.
        let security = Security {
            user: User { uid: 0, gid: 0 },
            ..Security::default()
        };
        let mut host_config = HostConfig {
            init: Some(true),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::UNLESS_STOPPED),
                maximum_retry_count: None,
            }),
            network_mode: Some(network.to_string()),
            // An API on the host is reached as on the pool network.
            extra_hosts: Some(vec!["host.docker.internal:host-gateway".into()]),
            mounts: Some(vec![Mount {
                target: Some(SOCKET.into()),
                source: Some(self.socket.clone()),
                typ: Some(MountType::BIND),
                ..Mount::default()
            }]),
            ..HostConfig::default()
        };
        hardening::apply(&mut host_config, &security, None, (POOL, pool));
        ContainerCreateBody {
            image: Some(image.to_string()),
            cmd: Some(Self::cmd()),
            hostname: Some(self.name()),
            user: Some(hardening::user(&security)),
            env: Some(self.env()),
            labels: Some(labels),
            host_config: Some(host_config),
            healthcheck: Some(HealthConfig {
                test: Some(vec!["NONE".into()]),
                ..HealthConfig::default()
            }),
            ..ContainerCreateBody::default()
        }
    }
}

/// The broker container Docker has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    /// Docker's ID.
    pub(crate) id: String,
    /// Its `config-hash` label.
    pub(crate) digest: Option<String>,
    /// Whether it runs.
    pub(crate) running: bool,
}

/// What `up` does with the broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// The pool wants none and has none.
    Nothing,
    /// Missing: create it.
    Create,
    /// Its configuration changed (or `--force-recreate`, or it is stopped): replace it.
    Recreate {
        /// The old container.
        id: String,
        /// Why.
        why: &'static str,
    },
    /// Unchanged and running.
    Keep,
    /// No agent has the job tools any more: remove it.
    Remove {
        /// The container.
        id: String,
    },
}

/// Decides what `up` does with the broker: `wanted` its digest if the pool wants one, `seen` the
/// container Docker has. Pure.
pub(crate) fn decide(wanted: Option<&str>, seen: Option<&Seen>, force: bool) -> Action {
    match (wanted, seen) {
        (None, None) => Action::Nothing,
        (None, Some(s)) => Action::Remove { id: s.id.clone() },
        (Some(_), None) => Action::Create,
        (Some(digest), Some(s)) => {
            let why = if force {
                "--force-recreate"
            } else if s.digest.as_deref() != Some(digest) {
                "config changed (image, agents' job settings, networks or API)"
            } else if !s.running {
                "stopped"
            } else {
                return Action::Keep;
            };
            Action::Recreate {
                id: s.id.clone(),
                why,
            }
        }
    }
}

impl Action {
    /// The `up --dry-run` line of `name` (none when there is nothing to do or it stays).
    pub(crate) fn line(&self, name: &str) -> Option<String> {
        match self {
            Action::Nothing | Action::Keep => None,
            Action::Create => Some(format!(
                "create {name}: missing (the job broker: an agent has the job tools)"
            )),
            Action::Recreate { why, .. } => Some(format!("recreate {name}: {why}")),
            Action::Remove { .. } => Some(format!(
                "remove {name}: no agent has the job tools any more"
            )),
        }
    }
}

/// The broker container of `pool`, if Docker has one.
pub(crate) async fn observe(docker: &Docker, pool: &str) -> anyhow::Result<Option<Seen>> {
    let name = container_name(pool);
    match docker.inspect_container(&name, None).await {
        Ok(info) => Ok(Some(Seen {
            id: info.id.clone().unwrap_or(name),
            digest: info
                .config
                .as_ref()
                .and_then(|c| c.labels.as_ref())
                .and_then(|l| l.get(HASH))
                .cloned(),
            running: info.state.as_ref().and_then(|s| s.running) == Some(true),
        })),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot inspect {name}")),
    }
}

/// Where the broker goes: the engine, the pool network and the runner image that serves it.
pub(crate) struct Site<'a> {
    /// The engine.
    pub(crate) docker: &'a Docker,
    /// The pool.
    pub(crate) pool: &'a str,
    /// The pool network's ID.
    pub(crate) pool_network: &'a str,
    /// The runner image (its tag and ID).
    pub(crate) image: &'a crate::pool::image::Image,
}

/// Keeps the pool's broker as `wanted` says (`None`: the pool has none, and one left from
/// earlier is removed): created, recreated when its digest changed, kept when not, joined to its
/// restricted agents' internal networks, started.
pub(crate) async fn ensure(
    site: &Site<'_>,
    wanted: Option<&Broker>,
    force: bool,
    progress: &Progress,
) -> anyhow::Result<()> {
    let Site {
        docker,
        pool,
        pool_network,
        image,
    } = *site;
    let name = container_name(pool);
    let digest = wanted.map(|b| b.digest(&image.id));
    let seen = observe(docker, pool).await?;
    let action = decide(digest.as_deref(), seen.as_ref(), force);
    let broker = match (&action, wanted) {
        (Action::Nothing, _) => return Ok(()),
        (Action::Keep, Some(broker)) => {
            // Its networks are in its digest; joining again is a no-op.
            for network in broker.extra_networks(pool_network) {
                crate::docker::connect_network(docker, &network, &name, &name).await?;
            }
            progress.step("Jobs", &name, "Running");
            return Ok(());
        }
        (Action::Remove { id }, _) => {
            crate::docker::stop_and_remove(docker, id, 10).await?;
            progress.step("Jobs", &name, "Removed (no agent has the job tools)");
            return Ok(());
        }
        (Action::Recreate { id, .. }, Some(broker)) => {
            crate::docker::stop_and_remove(docker, id, 10).await?;
            broker
        }
        (_, Some(broker)) => broker,
        (_, None) => return Ok(()),
    };
    let digest = digest.unwrap_or_default();
    docker
        .create_container(
            Some(CreateContainerOptionsBuilder::default().name(&name).build()),
            broker.body(&image.tag, pool_network, &digest),
        )
        .await
        .with_context(|| format!("cannot create the job broker {name}"))?;
    for network in broker.extra_networks(pool_network) {
        crate::docker::connect_network(docker, &network, &name, &name).await?;
    }
    docker
        .start_container(&name, None)
        .await
        .with_context(|| format!("cannot start the job broker {name}"))?;
    let done = if matches!(action, Action::Create) {
        "Started"
    } else {
        "Recreated"
    };
    progress.step("Jobs", &name, done);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "agents:\n  open:\n    runtime: { provider: openai, model: gpt-4o }\n    \
        execution: { replicas: 2 }\n  fenced:\n    runtime: { provider: openai, model: gpt-4o }\n    \
        network: { egress: [\"*.github.com\"] }\n  plain:\n    \
        runtime: { provider: scripted, script: [hi] }\n";

    /// The agentfile with the job tools given to `jobs_for`, and `open`'s `runtime.jobs` set
    /// (in code, so the test does not depend on the decoder of `runtime.jobs`).
    fn agentfile(jobs_for: &[&str]) -> Agentfile {
        let mut af = ninetrix_agentfile::parse("agentfile.yaml", FILE)
            .unwrap()
            .agentfile;
        for a in af.agents.iter_mut() {
            if jobs_for.contains(&a.name.as_str()) {
                crate::pool::jobs::tests::with_job_tools(a);
            }
        }
        let open = af.agents.iter_mut().find(|a| a.name == "open").unwrap();
        open.runtime.jobs.image = Some("node:22".into());
        open.runtime.jobs.max_concurrent = 2;
        open.runtime.jobs.default_timeout_secs = 600;
        open.runtime.jobs.resources.cpu = Some(1.5);
        open.runtime.jobs.resources.memory_bytes = Some(1 << 30);
        af
    }

    fn inputs<'a>(
        egress: &'a BTreeMap<String, String>,
        images: &'a HashMap<String, String>,
    ) -> Inputs<'a> {
        Inputs {
            pool: "shop",
            pool_network: "poolnet",
            egress,
            images,
            api_url: "http://ninetrix-api:8080",
            api_local: true,
        }
    }

    #[test]
    fn only_agents_with_job_tools_are_configured_with_their_image_network_and_limits() {
        let egress: BTreeMap<String, String> = [("fenced".into(), "fencednet".into())].into();
        let images: HashMap<String, String> = [
            ("open".into(), "ninetrix/runner:1".into()),
            ("fenced".into(), "ninetrix/agent:2".into()),
            ("plain".into(), "ninetrix/runner:1".into()),
        ]
        .into();
        assert_eq!(config(&agentfile(&[]), &inputs(&egress, &images)), None);
        let c = config(&agentfile(&["open", "fenced"]), &inputs(&egress, &images)).unwrap();
        assert_eq!(c.pool, "shop");
        assert_eq!(c.agents.keys().collect::<Vec<_>>(), ["fenced", "open"]);
        let open = &c.agents["open"];
        assert_eq!(open.image, "node:22");
        assert_eq!(open.network, "poolnet");
        assert!(
            open.env.is_empty(),
            "an unrestricted agent's jobs get no proxy"
        );
        assert_eq!(
            (
                open.max_concurrent,
                open.default_timeout_secs,
                open.replicas
            ),
            (2, 600, 2)
        );
        assert_eq!((open.cpus, open.memory_bytes), (Some(1.5), Some(1 << 30)));
        let fenced = &c.agents["fenced"];
        assert_eq!(fenced.image, "ninetrix/agent:2", "the agent's own image");
        assert_eq!(fenced.network, "fencednet", "its internal network");
        assert!(
            fenced
                .env
                .contains(&"HTTPS_PROXY=http://egress-proxy:3128".to_string())
        );
        assert!(
            fenced
                .env
                .iter()
                .any(|e| e.starts_with("NO_PROXY=") && e.contains("ninetrix-shop-jobs")),
            "{:?}",
            fenced.env
        );
        assert_eq!(fenced.security, Security::default());
    }

    #[test]
    fn the_broker_holds_the_socket_as_root_without_capabilities_on_the_pool_network() {
        let egress: BTreeMap<String, String> = [("fenced".into(), "fencednet".into())].into();
        let images: HashMap<String, String> = [("open".into(), "img".into())].into();
        let broker = Broker {
            config: config(&agentfile(&["open", "fenced"]), &inputs(&egress, &images)).unwrap(),
            api_url: "http://ninetrix-api:8080".into(),
            socket: socket_source(Some("unix:///run/user/1000/docker.sock")),
        };
        assert_eq!(broker.name(), "ninetrix-shop-jobs");
        assert_eq!(broker.extra_networks("poolnet"), ["fencednet"]);
        let body = broker.body("ninetrix/runner:1", "poolnet", &broker.digest("sha256:1"));
        assert_eq!(
            body.cmd.as_deref().unwrap(),
            ["job-broker", "--listen", "0.0.0.0:7480"]
        );
        assert_eq!(body.user.as_deref(), Some("0:0"));
        assert_eq!(body.hostname.as_deref(), Some("ninetrix-shop-jobs"));
        let env = body.env.unwrap();
        let json = env
            .iter()
            .find_map(|e| e.strip_prefix("AGENTFILE_JOBS_CONFIG="))
            .unwrap();
        let back: BrokerConfig = serde_json::from_str(json).unwrap();
        assert_eq!(back, broker.config, "the broker reads what up wrote");
        assert!(env.contains(&"AGENTFILE_API_URL=http://ninetrix-api:8080".to_string()));
        let labels = body.labels.unwrap();
        assert_eq!(labels[ROLE], JOB_BROKER_ROLE);
        assert_eq!(labels[POOL], "shop");
        assert!(!labels.contains_key(crate::objects::AGENT), "not an agent");
        let hc = body.host_config.unwrap();
        assert_eq!(hc.cap_drop.as_deref(), Some(&["ALL".to_string()][..]));
        assert_eq!(hc.cap_add, None);
        assert_eq!(hc.readonly_rootfs, Some(true));
        assert_eq!(
            hc.security_opt.as_deref(),
            Some(&["no-new-privileges".to_string()][..])
        );
        assert_eq!(hc.network_mode.as_deref(), Some("poolnet"));
        assert_eq!(
            hc.restart_policy.unwrap().name,
            Some(RestartPolicyNameEnum::UNLESS_STOPPED)
        );
        let socket = &hc.mounts.unwrap()[0];
        assert_eq!(socket.source.as_deref(), Some("/run/user/1000/docker.sock"));
        assert_eq!(socket.target.as_deref(), Some(SOCKET));
        assert_eq!(socket.typ, Some(MountType::BIND));
        // A changed image or configuration is a new digest.
        assert_ne!(broker.digest("sha256:1"), broker.digest("sha256:2"));
        let mut scaled = broker.clone();
        scaled.config.agents.get_mut("open").unwrap().replicas = 3;
        assert_ne!(broker.digest("sha256:1"), scaled.digest("sha256:1"));
    }

    #[test]
    fn the_socket_is_docker_hosts_unix_socket_else_the_default() {
        assert_eq!(socket_source(None), SOCKET);
        assert_eq!(
            socket_source(Some("unix:///var/run/docker.sock")),
            "/var/run/docker.sock"
        );
        assert_eq!(socket_source(Some("tcp://10.0.0.1:2375")), SOCKET);
        assert_eq!(socket_source(Some("ssh://me@host")), SOCKET);
    }

    #[test]
    fn the_broker_is_created_kept_recreated_and_removed_as_the_agentfile_says() {
        let seen = |digest: &str, running| Seen {
            id: "b1".into(),
            digest: Some(digest.into()),
            running,
        };
        assert_eq!(decide(None, None, false), Action::Nothing);
        assert_eq!(decide(Some("d"), None, false), Action::Create);
        assert_eq!(
            decide(Some("d"), Some(&seen("d", true)), false),
            Action::Keep
        );
        assert!(matches!(
            decide(Some("d"), Some(&seen("old", true)), false),
            Action::Recreate { why, .. } if why.starts_with("config changed")
        ));
        assert!(matches!(
            decide(Some("d"), Some(&seen("d", false)), false),
            Action::Recreate { why: "stopped", .. }
        ));
        assert!(matches!(
            decide(Some("d"), Some(&seen("d", true)), true),
            Action::Recreate {
                why: "--force-recreate",
                ..
            }
        ));
        assert_eq!(
            decide(None, Some(&seen("d", true)), false),
            Action::Remove { id: "b1".into() }
        );
        let name = "ninetrix-shop-jobs";
        assert_eq!(Action::Keep.line(name), None);
        assert_eq!(
            Action::Create.line(name).unwrap(),
            "create ninetrix-shop-jobs: missing (the job broker: an agent has the job tools)"
        );
        assert_eq!(
            Action::Remove { id: "b1".into() }.line(name).unwrap(),
            "remove ninetrix-shop-jobs: no agent has the job tools any more"
        );
    }
}
