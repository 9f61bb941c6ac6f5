//! Container specs for agent replicas (docs/design.md §3): names, labels, env, restart policy, limits,
//! the workspace volume, and the configuration digest that decides whether `up` keeps or
//! recreates a container. Secrets never enter any of these; the digest sees only a hash of their
//! values. Also the one definition of "gave up" and of reading an agent's secrets on the host,
//! and the OpenTelemetry variables `up` passes on ([`Telemetry`]).

use std::collections::{BTreeMap, HashMap};

use crate::hardening;
use crate::objects::{AGENT, DURABLE, HASH, PARTS, POOL, REPLICA, RUN, THREAD, VERSION};
use crate::objects::{container_name, run_container_name, volume_name};
use crate::pool::egress_env;
use bollard::models::{
    ContainerCreateBody, HealthConfig, HostConfig, Mount, MountType, MountVolumeOptions,
    NetworkingConfig, RestartPolicy, RestartPolicyNameEnum,
};
use ninetrix_agentfile::AgentSpec;
use ninetrix_proto::ThreadId;
use ninetrix_proto::boots::Created;
use ninetrix_runner::launch::{self, Instance, Launch, Replica as LaunchReplica};
use sha2::{Digest, Sha256};

/// How many policy restarts a durable agent gets before it "gave up".
pub(crate) const MAX_RESTARTS: i64 = 3;
/// Seconds a container gets to checkpoint and exit before SIGKILL, unless `-t/--timeout` says
/// otherwise (also Docker's own `docker stop` default for the container).
pub(crate) const STOP_TIMEOUT: i64 = DEFAULT_STOP_SECS as i64;
/// Seconds a stopping container gets to checkpoint and exit before SIGKILL: the default of
/// `-t/--timeout` on `up`, `down` and `run`.
pub(crate) const DEFAULT_STOP_SECS: i32 = 30;

/// What Docker says about a container's process, as far as the restart rules care.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Liveness {
    /// The process runs.
    pub(crate) running: bool,
    /// Docker is about to restart it (between two runs).
    pub(crate) restarting: bool,
    /// Policy restarts so far (reset by `docker start`).
    pub(crate) restarts: i64,
    /// The last exit code, if it ever exited.
    pub(crate) exit_code: Option<i64>,
}

impl Liveness {
    /// From `docker inspect`.
    pub(crate) fn of(info: &bollard::models::ContainerInspectResponse) -> Self {
        let st = info.state.clone().unwrap_or_default();
        Self {
            running: st.running.unwrap_or(false),
            restarting: st.restarting.unwrap_or(false),
            restarts: info.restart_count.unwrap_or(0),
            exit_code: st.exit_code,
        }
    }

    /// The one definition of "gave up": a durable agent whose process is down, whose last exit
    /// was a failure, and which used its whole restart budget, so Docker will not restart it.
    pub(crate) fn gave_up(&self, durable: bool) -> bool {
        durable
            && !self.running
            && !self.restarting
            && self.exit_code.is_some_and(|c| c != 0)
            && self.restarts >= MAX_RESTARTS
    }
}

/// A secret missing on the host.
#[derive(Debug, thiserror::Error)]
#[error(
    "secret {name} (needed by {needed_by}) is not set on this host; export {name}=… and try again (nothing was started)"
)]
pub(crate) struct MissingSecret {
    /// The secret's name.
    pub(crate) name: String,
    /// Who needs it: "agent `a`", "MCP server `s`".
    pub(crate) needed_by: String,
}

/// Reads an agent's secrets from the host environment (an empty value counts as missing), plus
/// the OpenTelemetry header variables set on the host ([`Telemetry::secrets`]): they are
/// uploaded with the agent's secrets (`/run/secrets/<NAME>`), never passed as environment.
pub(crate) fn host_secrets(spec: &AgentSpec) -> Result<BTreeMap<String, String>, MissingSecret> {
    let mut values = host_values(&spec.secrets, &format!("agent `{}`", spec.name))?;
    for (name, value) in Telemetry::from_host().secrets {
        values.entry(name).or_insert(value);
    }
    Ok(values)
}

/// The OpenTelemetry variables set in `up`'s environment that every agent container gets: the
/// non-secret ones (endpoints, protocol, timeout, sampler, resource attributes, service name,
/// `OTEL_SDK_DISABLED`, the batch and span limit settings) as environment, the headers as
/// secrets. Nothing is added: the runner names its own service and resource.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Telemetry {
    /// The non-secret variables, by name.
    pub(crate) env: BTreeMap<String, String>,
    /// The header variables (secrets), by name.
    pub(crate) secrets: BTreeMap<String, String>,
}

impl Telemetry {
    /// From the host environment.
    pub(crate) fn from_host() -> Self {
        Self::from_vars(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    }

    /// From these variables (an empty value counts as unset).
    pub(crate) fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut telemetry = Self::default();
        for (name, value) in vars {
            if value.is_empty() {
                continue;
            }
            if ninetrix_telemetry::vars::SECRET.contains(&name.as_str()) {
                telemetry.secrets.insert(name, value);
            } else if ninetrix_telemetry::passed_to_containers(&name) {
                telemetry.env.insert(name, value);
            }
        }
        telemetry
    }

    /// Whether a secret name is one of the header variables.
    fn is_secret(name: &str) -> bool {
        ninetrix_telemetry::vars::SECRET.contains(&name)
    }

    /// The digest part: the names and values of the variables, the secrets' values hashed
    /// first. `None` when nothing is set, so a pool without telemetry keeps its digests.
    pub(crate) fn digest(&self) -> Option<String> {
        if self.env.is_empty() && self.secrets.is_empty() {
            return None;
        }
        let mut h = Sha256::new();
        for (k, v) in &self.env {
            h.update(k.as_bytes());
            h.update([0]);
            h.update(v.as_bytes());
            h.update([0]);
        }
        h.update([1]);
        for (k, v) in &self.secrets {
            h.update(k.as_bytes());
            h.update([0]);
            h.update(Sha256::digest(v.as_bytes()));
        }
        Some(short(&h.finalize()))
    }
}

/// Reads the secrets `names` from the host environment for `needed_by` (an empty value counts
/// as missing).
pub(crate) fn host_values(
    names: &[String],
    needed_by: &str,
) -> Result<BTreeMap<String, String>, MissingSecret> {
    names
        .iter()
        .map(|name| match std::env::var(name) {
            Ok(v) if !v.is_empty() => Ok((name.clone(), v)),
            _ => Err(MissingSecret {
                name: name.clone(),
                needed_by: needed_by.to_string(),
            }),
        })
        .collect()
}

/// A container's configuration digest by part: one short hash per field of the resolved spec
/// (`metadata.instructions`, `runtime.model`, `tools`, …), plus `image` (its ID), `api_url` and
/// `secret values`. Comparing two says which parts changed; the values themselves never appear.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub(crate) struct Config {
    parts: BTreeMap<String, String>,
}

/// 12 hex digits of SHA-256: enough to tell versions of one field apart.
fn short(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Config {
    /// The digest of a replica of `spec` (its replica count excluded: scaling recreates nothing)
    /// on `image_id`, talking to `api_url`, with these secret values, and the OpenTelemetry
    /// variables of the host environment (part `telemetry`, present only when one is set).
    pub(crate) fn of(
        spec: &AgentSpec,
        image_id: &str,
        api_url: &str,
        secrets: &BTreeMap<String, String>,
    ) -> Self {
        Self::with_telemetry(
            spec,
            image_id,
            api_url,
            secrets,
            &Telemetry::from_host().env,
        )
    }

    /// [`Config::of`] with the non-secret OpenTelemetry variables given; the header secrets are
    /// taken from `secrets` (where [`host_secrets`] put them).
    pub(crate) fn with_telemetry(
        spec: &AgentSpec,
        image_id: &str,
        api_url: &str,
        secrets: &BTreeMap<String, String>,
        telemetry_env: &BTreeMap<String, String>,
    ) -> Self {
        let declared = |name: &str| spec.secrets.iter().any(|s| s == name);
        let telemetry = Telemetry {
            env: telemetry_env.clone(),
            secrets: secrets
                .iter()
                .filter(|(k, _)| Telemetry::is_secret(k) && !declared(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        let mut spec = spec.clone();
        spec.execution.replicas = 1;
        let mut parts = BTreeMap::new();
        if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(&spec) {
            for (key, value) in fields {
                match value {
                    serde_json::Value::Object(inner) => {
                        for (sub, v) in inner {
                            parts.insert(format!("{key}.{sub}"), short(v.to_string().as_bytes()));
                        }
                    }
                    v => {
                        parts.insert(key, short(v.to_string().as_bytes()));
                    }
                }
            }
        }
        parts.insert("image".into(), short(image_id.as_bytes()));
        parts.insert("api_url".into(), short(api_url.as_bytes()));
        let mut values = Sha256::new();
        for (k, v) in secrets {
            // The telemetry headers are digested in their own part.
            if telemetry.secrets.contains_key(k) {
                continue;
            }
            values.update(k.as_bytes());
            values.update([0]);
            values.update(Sha256::digest(v.as_bytes()));
        }
        parts.insert("secret values".into(), short(&values.finalize()));
        if let Some(digest) = telemetry.digest() {
            parts.insert("telemetry".into(), digest);
        }
        Self { parts }
    }

    /// A digest from its parts (tests build configurations without an agent spec).
    #[cfg(test)]
    pub(crate) fn from_parts<'a>(parts: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self {
            parts: parts
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// The whole digest (the `config-hash` label).
    pub(crate) fn hash(&self) -> String {
        let mut h = Sha256::new();
        for (k, v) in &self.parts {
            h.update(k.as_bytes());
            h.update([0]);
            h.update(v.as_bytes());
            h.update([0]);
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The parts that differ between `self` and `other` (present on one side only included),
    /// in name order.
    pub(crate) fn changed(&self, other: &Config) -> Vec<String> {
        let mut keys: Vec<&String> = self.parts.keys().chain(other.parts.keys()).collect();
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .filter(|k| self.parts.get(*k) != other.parts.get(*k))
            .cloned()
            .collect()
    }

    /// The label form (compact JSON).
    pub(crate) fn to_label(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads the label form; `None` if it is not one.
    pub(crate) fn from_label(label: &str) -> Option<Self> {
        serde_json::from_str(label).ok()
    }

    /// A digest that matches nothing real: stands for an image that does not exist yet (`up
    /// --dry-run` does not build it), so every container on it shows as changed in `image`.
    pub(crate) fn with_unbuilt_image(mut self, tag: &str) -> Self {
        self.parts.insert("image".into(), format!("unbuilt {tag}"));
        self
    }
}

/// An agent's `runtime.resources` as Docker counts them: CPUs in billionths, memory in bytes
/// (one host and Swarm alike).
pub(crate) fn limits(spec: &AgentSpec) -> (Option<i64>, Option<i64>) {
    let r = &spec.runtime.resources;
    (
        r.cpu.map(|c| (c * 1e9) as i64),
        r.memory_bytes.and_then(|m| i64::try_from(m).ok()),
    )
}

/// Where a container sits in its pool: a numbered replica that `up` keeps, or a one-shot
/// `ninetrix run` job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Replica `n` (1-based): a stable name, hostname `<agent>-<n>` and a workspace volume.
    Replica(u32),
    /// A `ninetrix run`: a unique name, hostname `<agent>-run`, a throwaway workspace, and the
    /// `run` label so `up` leaves it alone.
    Run,
}

/// Everything a replica container needs.
pub(crate) struct Replica<'a> {
    /// The pool.
    pub(crate) pool: &'a str,
    /// The resolved agent spec (for a run: with the run's task).
    pub(crate) spec: &'a AgentSpec,
    /// Replica or run.
    pub(crate) slot: Slot,
    /// The thread its runner works on.
    pub(crate) thread: ThreadId,
    /// The image tag.
    pub(crate) image: &'a str,
    /// The API URL as seen from containers.
    pub(crate) api_url: &'a str,
    /// The pool network's ID (a name can be ambiguous when an older ninetrix left duplicates).
    pub(crate) network: &'a str,
    /// Its configuration digest (labels).
    pub(crate) config: &'a Config,
    /// Why this container is created (`AGENTFILE_CREATED`, in the runner's `boot` events:
    /// `trace` tells a recreate from a pool back after `down` by it).
    pub(crate) created: Created,
    /// For an agent with `network.egress`: its internal network, instead of `network`, and the
    /// proxy settings (pool/egress_env.rs).
    pub(crate) egress: Option<egress_env::Link<'a>>,
}

impl Replica<'_> {
    /// The container's name.
    pub(crate) fn name(&self) -> String {
        match self.slot {
            Slot::Replica(n) => container_name(self.pool, &self.spec.name, n),
            Slot::Run => run_container_name(self.pool, &self.spec.name, self.thread),
        }
    }

    /// What the runner is told (the launch contract): its thread, given (one host knows it),
    /// a new instance ID for each container (Docker restarting it keeps its environment, so a
    /// crash restart is told from a new container; not part of the digest), and its health file
    /// in the pool's health volume.
    fn launch(&self, replica: u32, name: &str) -> Launch {
        Launch {
            api_url: Some(self.api_url.to_string()),
            thread: Some(self.thread),
            pool: Some(self.pool.to_string()),
            agent: Some(self.spec.name.clone()),
            replica: Some(LaunchReplica::Number(replica)),
            spec: Some(serde_json::to_string(self.spec).unwrap_or_default()),
            workspace: Some(launch::WORKSPACE.to_string()),
            instance: Some(Instance::Id(uuid::Uuid::now_v7().to_string())),
            created: Some(self.created),
            health_file: Some(crate::pool::health::file_of(name)),
            // The pool's job broker, for an agent with the job tools (a `ninetrix run`
            // container has a throwaway workspace no job could mount: none).
            jobs_url: (self.spec.has_job_tools() && self.slot != Slot::Run)
                .then(|| crate::jobs::config::url(self.pool)),
        }
    }

    /// The create body, with the OpenTelemetry variables of the host environment.
    pub(crate) fn body(&self) -> ContainerCreateBody {
        self.body_with(&Telemetry::from_host().env)
    }

    /// The create body, passing `telemetry_env` (non-secret `OTEL_*` variables) to the runner.
    pub(crate) fn body_with(
        &self,
        telemetry_env: &BTreeMap<String, String>,
    ) -> ContainerCreateBody {
        let s = self.spec;
        let (replica_label, replica_env, hostname) = match self.slot {
            Slot::Replica(n) => (n.to_string(), n, format!("{}-{n}", s.name)),
            Slot::Run => ("run".to_string(), 0, format!("{}-run", s.name)),
        };
        let mut labels: HashMap<String, String> = [
            (POOL, self.pool.to_string()),
            (AGENT, s.name.clone()),
            (REPLICA, replica_label),
            (THREAD, self.thread.to_string()),
            (HASH, self.config.hash()),
            (PARTS, self.config.to_label()),
            (DURABLE, s.execution.durability.to_string()),
            (VERSION, crate::objects::VERSION_VALUE.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if self.slot == Slot::Run {
            labels.insert(RUN.into(), "true".into());
        }
        let name = self.name();
        let mut env = self.launch(replica_env, &name).to_lines();
        // Before the agent's own `env:`, which wins over the host's.
        env.extend(telemetry_env.iter().map(|(k, v)| format!("{k}={v}")));
        env.push(format!("HOME={}", crate::hardening::HOME));
        if let Some(link) = &self.egress {
            let direct =
                crate::pool::jobs::direct_hosts(s, self.pool, self.api_url, link.api_local);
            env.extend(egress_env::runner_env(&direct));
        }
        env.extend(s.env.iter().map(|(k, v)| format!("{k}={v}")));
        let restart = if s.execution.durability {
            RestartPolicy {
                name: Some(RestartPolicyNameEnum::ON_FAILURE),
                maximum_retry_count: Some(MAX_RESTARTS),
            }
        } else {
            RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }
        };
        // Every container of the pool reports its health into the pool's health volume, which
        // `ps` reads in one request (pool/health.rs); no Docker healthcheck runs.
        // Every container of the pool reports its health into the pool's health volume, which
        // `ps` reads in one request (pool/health.rs); no Docker healthcheck runs.
        let health = crate::pool::health::volume_mount(self.pool);
        let mut mounts = vec![health];
        match self.slot {
            Slot::Replica(n) => mounts.push(Mount {
                target: Some("/workspace".into()),
                source: Some(volume_name(self.pool, &s.name, n)),
                typ: Some(MountType::VOLUME),
                // Labels apply when Docker creates the volume (first use); `down --purge` finds
                // the pool's volumes by them. Not part of the digest: nothing is recreated.
                volume_options: Some(MountVolumeOptions {
                    labels: Some(
                        [
                            (POOL.to_string(), self.pool.to_string()),
                            (AGENT.to_string(), s.name.clone()),
                            (REPLICA.to_string(), n.to_string()),
                        ]
                        .into(),
                    ),
                    ..MountVolumeOptions::default()
                }),
                ..Mount::default()
            }),
            // A throwaway workspace, removed with the container (the root is read-only).
            Slot::Run => mounts.push(Mount {
                target: Some("/workspace".into()),
                typ: Some(MountType::VOLUME),
                ..Mount::default()
            }),
        }
        let mut host_config = HostConfig {
            init: Some(true),
            restart_policy: Some(restart),
            nano_cpus: limits(s).0,
            memory: limits(s).1,
            network_mode: Some(
                self.egress
                    .map_or(self.network, |link| link.network)
                    .to_string(),
            ),
            extra_hosts: Some(vec!["host.docker.internal:host-gateway".into()]),
            mounts: Some(mounts),
            ..HostConfig::default()
        };
        hardening::apply(
            &mut host_config,
            &s.security,
            s.runtime.isolation.as_deref(),
            (POOL, self.pool),
        );
        ContainerCreateBody {
            image: Some(self.image.to_string()),
            cmd: Some(vec!["runner".into()]),
            hostname: Some(hostname),
            user: Some(hardening::user(&s.security)),
            env: Some(env),
            labels: Some(labels),
            stop_timeout: Some(STOP_TIMEOUT),
            host_config: Some(host_config),
            // A base image's own HEALTHCHECK would run `docker exec` per container and interval.
            healthcheck: Some(HealthConfig {
                test: Some(vec!["NONE".into()]),
                ..HealthConfig::default()
            }),
            networking_config: Some(NetworkingConfig::default()),
            ..ContainerCreateBody::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(yaml_agent: &str) -> AgentSpec {
        let text = format!("name: p\nagents:\n  a:\n{yaml_agent}");
        ninetrix_agentfile::parse("agentfile.yaml", &text)
            .unwrap()
            .agentfile
            .agents
            .remove(0)
    }

    #[test]
    fn gave_up_needs_a_durable_agent_down_after_a_failure_and_its_whole_budget() {
        let down = |code, restarts| Liveness {
            running: false,
            restarting: false,
            restarts,
            exit_code: Some(code),
        };
        assert!(down(137, 3).gave_up(true));
        assert!(!down(137, 3).gave_up(false), "a batch job never gives up");
        assert!(!down(137, 2).gave_up(true), "budget left");
        assert!(
            !down(0, 3).gave_up(true),
            "a clean exit is a stop, not a give-up"
        );
        let restarting = Liveness {
            restarting: true,
            ..down(137, 3)
        };
        assert!(!restarting.gave_up(true));
    }

    #[test]
    fn the_digest_names_the_changed_field_ignores_replicas_and_hides_secret_values() {
        let base = "    runtime: { provider: scripted, script: [\"hi\"] }\n";
        let one = agent(&format!("{base}    metadata: {{ instructions: one }}\n"));
        let two = agent(&format!("{base}    metadata: {{ instructions: two }}\n"));
        let scaled = agent(&format!(
            "{base}    metadata: {{ instructions: one }}\n    execution: {{ replicas: 3 }}\n"
        ));
        let secrets: BTreeMap<String, String> =
            [("KEY".to_string(), "hunter2-secret".to_string())].into();
        let c1 = Config::of(&one, "img", "http://api", &secrets);
        assert_eq!(
            Config::of(&two, "img", "http://api", &secrets).changed(&c1),
            ["metadata.instructions"]
        );
        assert!(
            Config::of(&scaled, "img", "http://api", &secrets)
                .changed(&c1)
                .is_empty()
        );
        let other_value: BTreeMap<String, String> =
            [("KEY".to_string(), "another".to_string())].into();
        assert_eq!(
            Config::of(&one, "img2", "http://api", &other_value).changed(&c1),
            ["image", "secret values"]
        );
        let label = c1.to_label();
        assert!(!label.contains("hunter2"), "{label}");
        assert_eq!(Config::from_label(&label), Some(c1.clone()));
        assert_ne!(
            c1.hash(),
            Config::of(&two, "img", "http://api", &secrets).hash()
        );
    }

    #[test]
    fn telemetry_variables_go_to_env_and_headers_to_secrets_never_to_env_labels_or_digest_text() {
        let vars = |endpoint: &str, headers: &str| {
            Telemetry::from_vars(
                [
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
                    ("OTEL_EXPORTER_OTLP_HEADERS", headers),
                    ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", "0.5"),
                    ("OTEL_BSP_MAX_QUEUE_SIZE", "4096"),
                    ("OTEL_SERVICE_NAME", ""),
                    ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:4318"),
                    ("HOME", "/root"),
                ]
                .map(|(k, v)| (k.to_string(), v.to_string())),
            )
        };
        let t = vars("http://jaeger:4318", "authorization=Bearer%20hunter2");
        assert_eq!(
            t.env.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "OTEL_BSP_MAX_QUEUE_SIZE",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "OTEL_TRACES_SAMPLER",
                "OTEL_TRACES_SAMPLER_ARG"
            ],
            "an empty OTEL_SERVICE_NAME is unset: the runner names itself"
        );
        assert_eq!(
            t.secrets.keys().map(String::as_str).collect::<Vec<_>>(),
            ["OTEL_EXPORTER_OTLP_HEADERS"]
        );

        let spec =
            agent("    runtime: { provider: scripted, script: [\"hi\"] }\n    secrets: [KEY]\n");
        let secrets_with = |t: &Telemetry| {
            let mut s: BTreeMap<String, String> =
                [("KEY".to_string(), "k-value".to_string())].into();
            s.extend(t.secrets.clone());
            s
        };
        let config = |t: &Telemetry| {
            Config::with_telemetry(&spec, "img", "http://api", &secrets_with(t), &t.env)
        };
        let base = config(&t);
        let label = base.to_label();
        assert!(label.contains("\"telemetry\""), "{label}");
        assert!(
            !label.contains("hunter2") && !label.contains("jaeger"),
            "{label}"
        );
        let other_header = vars("http://jaeger:4318", "authorization=Bearer%20other");
        assert_eq!(config(&other_header).changed(&base), ["telemetry"]);
        let other_endpoint = vars("http://tempo:4318", "authorization=Bearer%20hunter2");
        assert_eq!(config(&other_endpoint).changed(&base), ["telemetry"]);
        // Without any variable the digest is what it was before telemetry existed.
        let none = Telemetry::default();
        let without =
            Config::with_telemetry(&spec, "img", "http://api", &secrets_with(&none), &none.env);
        assert!(
            !without.to_label().contains("telemetry"),
            "{}",
            without.to_label()
        );
        assert_eq!(
            base.changed(&Config::with_telemetry(
                &spec,
                "img",
                "http://api",
                &secrets_with(&none),
                &none.env
            )),
            ["telemetry"],
            "the headers are not in `secret values`"
        );

        let thread = ThreadId::new_v7();
        let body = Replica {
            pool: "p",
            spec: &spec,
            slot: Slot::Replica(1),
            thread,
            image: "img",
            api_url: "http://api",
            network: "n",
            config: &base,
            created: Created::New,
            egress: None,
        }
        .body_with(&t.env);
        let env = body.env.unwrap();
        assert!(env.contains(&"OTEL_EXPORTER_OTLP_ENDPOINT=http://jaeger:4318".to_string()));
        assert!(env.contains(&"OTEL_TRACES_SAMPLER_ARG=0.5".to_string()));
        assert!(
            env.iter()
                .all(|e| !e.contains("hunter2") && !e.starts_with("OTEL_EXPORTER_OTLP_HEADERS")),
            "{env:?}"
        );
        let labels = body.labels.unwrap();
        assert!(
            labels.values().all(|v| !v.contains("hunter2")),
            "{labels:?}"
        );
    }

    #[test]
    fn each_container_says_which_one_it_is_and_why_up_created_it() {
        let spec = agent("    runtime: { provider: scripted, script: [\"hi\"] }\n");
        let config = Config::default();
        let thread = ThreadId::new_v7();
        let env = |created| {
            Replica {
                pool: "p",
                spec: &spec,
                slot: Slot::Replica(1),
                thread,
                image: "img",
                api_url: "http://api",
                network: "n",
                config: &config,
                created,
                egress: None,
            }
            .body_with(&BTreeMap::new())
            .env
            .unwrap()
        };
        let var = |env: &[String], name: &str| {
            env.iter()
                .find_map(|e| e.strip_prefix(&format!("{name}=")).map(str::to_string))
        };
        let (new, recreated) = (env(Created::New), env(Created::Recreate));
        assert_eq!(var(&new, "AGENTFILE_CREATED").as_deref(), Some("new"));
        assert_eq!(
            var(&recreated, "AGENTFILE_CREATED").as_deref(),
            Some("recreate")
        );
        let (a, b) = (
            var(&new, "AGENTFILE_INSTANCE").unwrap(),
            var(&recreated, "AGENTFILE_INSTANCE").unwrap(),
        );
        assert_ne!(a, b, "every container is a new instance");
    }

    #[test]
    fn the_runner_reads_back_what_one_host_launches_it_with() {
        let spec = agent("    runtime: { provider: scripted, script: [\"hi\"] }\n");
        let config = Config::default();
        let thread = ThreadId::new_v7();
        for (slot, number) in [(Slot::Replica(2), 2), (Slot::Run, 0)] {
            let replica = Replica {
                pool: "p",
                spec: &spec,
                slot,
                thread,
                image: "img",
                api_url: "http://api:8080",
                network: "n",
                config: &config,
                created: Created::Recreate,
                egress: None,
            };
            let env =
                launch::platform::from_lines(&replica.body_with(&BTreeMap::new()).env.unwrap());
            let read = Launch::from_vars(&env).unwrap();
            let Some(Instance::Id(instance)) = read.instance.clone() else {
                panic!("no instance: {read:?}");
            };
            let wanted = Launch {
                instance: Some(Instance::Id(instance)),
                ..replica.launch(number, &replica.name())
            };
            assert_eq!(read, wanted);
            // And the runner's whole configuration accepts it.
            let mut env = env;
            env.insert(launch::var::RUNNER_TOKEN.into(), "nxr2.t".into());
            let runner =
                ninetrix_runner::config::from_vars(&env, std::path::Path::new("/nonexistent"))
                    .unwrap();
            assert_eq!(runner.thread_id, thread);
            assert_eq!(runner.replica, Some(number));
            assert_eq!(runner.spec.name, "a");
        }
    }

    #[test]
    fn a_run_container_is_named_labelled_and_mounted_as_a_run() {
        let spec = agent("    runtime: { provider: scripted, script: [\"hi\"] }\n");
        let config = Config::default();
        let thread = ThreadId::new_v7();
        let replica = |slot| Replica {
            pool: "p",
            spec: &spec,
            slot,
            thread,
            image: "img",
            api_url: "http://api",
            network: "0123456789ab",
            config: &config,
            created: Created::New,
            egress: None,
        };
        let run = replica(Slot::Run).body();
        let labels = run.labels.clone().unwrap();
        assert_eq!(labels[RUN], "true");
        assert_eq!(labels[REPLICA], "run");
        assert_eq!(run.hostname.as_deref(), Some("a-run"));
        let health_mount = |body: &ContainerCreateBody| {
            let mounts = body.host_config.clone().unwrap().mounts.unwrap();
            assert_eq!(mounts[0].target.as_deref(), Some("/run/ninetrix/pool"));
            assert_eq!(mounts[0].source.as_deref(), Some("ninetrix-p-status"));
            mounts
                .iter()
                .map(|m| (m.target.clone().unwrap(), m.source.is_some()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            health_mount(&run),
            [
                ("/run/ninetrix/pool".to_string(), true),
                ("/workspace".to_string(), false),
                ("/run/secrets".to_string(), false)
            ],
            "a run's workspace and secrets are anonymous volumes, removed with it"
        );
        let name = replica(Slot::Run).name();
        assert!(
            run.env
                .clone()
                .unwrap()
                .contains(&format!("AGENTFILE_HEALTH_FILE=/run/ninetrix/pool/{name}"))
        );
        assert_eq!(
            run.healthcheck.clone().unwrap().test,
            Some(vec!["NONE".to_string()]),
            "no Docker healthcheck, not even a base image's"
        );
        assert!(replica(Slot::Run).name().starts_with("ninetrix-p-a-run-"));
        let two = replica(Slot::Replica(2)).body();
        assert_eq!(two.hostname.as_deref(), Some("a-2"));
        assert!(!two.labels.clone().unwrap().contains_key(RUN));
        assert_eq!(health_mount(&two).len(), 3);
        assert!(
            two.env
                .clone()
                .unwrap()
                .contains(&"AGENTFILE_HEALTH_FILE=/run/ninetrix/pool/ninetrix-p-a-2".to_string())
        );
        let mounts = two.host_config.unwrap().mounts.unwrap();
        let mounts = &mounts[1..];
        assert_eq!(
            mounts[0].source.as_deref(),
            Some(volume_name("p", "a", 2).as_str())
        );
        assert_eq!(volume_name("p", "a", 2), "ninetrix-p-a-2-workspace");
        let volume_labels = mounts[0]
            .volume_options
            .as_ref()
            .and_then(|o| o.labels.clone())
            .unwrap();
        assert_eq!(volume_labels[POOL], "p");
        assert_eq!(volume_labels[REPLICA], "2");
        let host = replica(Slot::Replica(2)).body().host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("0123456789ab"));
    }

    #[test]
    fn a_runner_with_the_job_tools_is_told_the_broker_and_reaches_it_past_the_proxy() {
        let mut spec = agent(
            "    runtime: { provider: openai, model: gpt-4o }\n    \
             network: { egress: [\"*.github.com\"] }\n",
        );
        let config = Config::default();
        let thread = ThreadId::new_v7();
        let env = |spec: &AgentSpec, slot| {
            let body = Replica {
                pool: "p",
                spec,
                slot,
                thread,
                image: "img",
                api_url: "http://ninetrix-api:8080",
                network: "n",
                config: &config,
                created: Created::New,
                egress: Some(egress_env::Link {
                    network: "inner",
                    api_local: true,
                }),
            }
            .body_with(&BTreeMap::new());
            body.env.unwrap()
        };
        let var = |env: &[String], name: &str| {
            env.iter()
                .find_map(|e| e.strip_prefix(&format!("{name}=")).map(str::to_string))
        };
        let plain = env(&spec, Slot::Replica(1));
        assert_eq!(var(&plain, launch::var::JOBS_URL), None);
        assert_eq!(
            var(&plain, "NO_PROXY").as_deref(),
            Some("localhost,127.0.0.1,ninetrix-api")
        );
        crate::pool::jobs::tests::with_job_tools(&mut spec);
        let with_jobs = env(&spec, Slot::Replica(1));
        assert_eq!(
            var(&with_jobs, launch::var::JOBS_URL).as_deref(),
            Some("http://ninetrix-p-jobs:7480")
        );
        assert_eq!(
            var(&with_jobs, "NO_PROXY").as_deref(),
            Some("localhost,127.0.0.1,ninetrix-api,ninetrix-p-jobs")
        );
        let read = Launch::from_vars(&launch::platform::from_lines(&with_jobs)).unwrap();
        assert_eq!(
            read.jobs_url.as_deref(),
            Some("http://ninetrix-p-jobs:7480")
        );
        assert_eq!(
            var(&env(&spec, Slot::Run), launch::var::JOBS_URL),
            None,
            "a `ninetrix run` has no workspace a job could mount"
        );
    }
}
