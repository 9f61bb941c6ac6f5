//! The Swarm objects of a pool, as pure values (no Docker calls): names, labels, the secrets
//! (named by a keyed digest of their value, since a Swarm secret cannot change), the API service
//! and one service per agent — replicated with `on-failure` and `max_attempts: 3` for a durable
//! agent, a `replicated-job` for a batch agent — and one service per sidecar MCP server. Every
//! replica's runner learns its replica number from `{{.Task.Slot}}` and asks the API for that
//! replica's thread, so a task replaced on any node keeps its thread.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{
    EndpointPortConfig, EndpointPortConfigProtocolEnum, EndpointPortConfigPublishModeEnum,
    EndpointSpec, EndpointSpecModeEnum, HealthConfig, Limit, Mount, MountTmpfsOptions, MountType,
    MountVolumeOptions, NetworkAttachmentConfig, ServiceSpec, ServiceSpecMode,
    ServiceSpecModeReplicated, ServiceSpecModeReplicatedJob, ServiceSpecUpdateConfig,
    ServiceSpecUpdateConfigOrderEnum, TaskSpec, TaskSpecContainerSpec, TaskSpecContainerSpecFile,
    TaskSpecContainerSpecPrivileges, TaskSpecContainerSpecSecrets, TaskSpecPlacement,
    TaskSpecResources, TaskSpecRestartPolicy, TaskSpecRestartPolicyConditionEnum,
};
use hmac::{KeyInit as _, Mac as _};
use ninetrix_agentfile::AgentSpec;
use ninetrix_agentfile::security::{Security, User};
use sha2::{Digest as _, Sha256};

use ninetrix_runner::launch::{self, Launch, Replica as LaunchReplica};

use crate::objects::swarm::{
    api_service_name, api_volume_name, service_name, sidecar_service_name, workspace_template,
};
use crate::objects::{AGENT, COMPONENT, DURABLE, SECRET, SWARM_POOL, VERSION};
use crate::pool::spec::{MAX_RESTARTS, STOP_TIMEOUT};

/// The API's port inside its containers.
pub(crate) const API_PORT: u16 = 8080;
/// The name the API answers to on the pool's network (as on one host).
pub(crate) const API_ALIAS: &str = "ninetrix-api";
/// Where each task's runner writes its health report: in the container's own filesystem, read
/// by `ps` and `invoke` through the Engine API for a task on this node (no Docker healthcheck:
/// Swarm replaces an unhealthy task, and a runner waiting out a model outage is unhealthy but
/// must not be killed — it would exit 0 and never come back under `on-failure`).
pub(crate) const HEALTH_NAME: &str = "health";
/// A second in nanoseconds (Swarm's durations).
const SECOND_NS: i64 = 1_000_000_000;

/// The thread ID a batch agent's job tasks run with (nothing is stored under it): a UUID
/// (version 8) from pool and agent, so the job's spec stays the same across `up`s.
pub(crate) fn batch_thread(pool: &str, agent: &str) -> uuid::Uuid {
    let digest = Sha256::digest(format!("ninetrix swarm batch\0{pool}\0{agent}"));
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

/// The key that names secrets: derived from this home's API secret and admin token, so a
/// secret's name (which anyone who can list secrets sees) says nothing about its value without
/// them.
pub(crate) fn naming_key(api_secret: &str, admin_token: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"ninetrix swarm secret names\0");
    h.update(api_secret.as_bytes());
    h.update([0]);
    h.update(admin_token.as_bytes());
    h.finalize().into()
}

/// One Swarm secret a service mounts.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret {
    /// The Swarm object's name: `ninetrix-<pool>-<16 hex>` (a keyed digest of what it is for and
    /// its value: a changed value is a new secret, as Swarm secrets cannot change).
    pub(crate) name: String,
    /// The file name in `/run/secrets/`.
    pub(crate) target: String,
    /// The agent it is for (`None`: the API's).
    pub(crate) agent: Option<String>,
    /// The value.
    pub(crate) value: String,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("target", &self.target)
            .field("agent", &self.agent)
            .field("value", &"<redacted>")
            .finish()
    }
}

impl Secret {
    /// The secret `target` of `agent` (or of the API) in `pool`, named under `key`.
    pub(crate) fn new(
        key: &[u8; 32],
        pool: &str,
        agent: Option<&str>,
        target: &str,
        value: &str,
    ) -> Secret {
        let mut mac = hmac::Hmac::<Sha256>::new_from_slice(key).expect("any key length");
        for part in [pool, agent.unwrap_or(""), target, value] {
            mac.update(part.as_bytes());
            mac.update(&[0]);
        }
        let digest = mac.finalize().into_bytes();
        let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        Secret {
            name: format!("ninetrix-{pool}-{hex}"),
            target: target.to_string(),
            agent: agent.map(str::to_string),
            value: value.to_string(),
        }
    }

    /// Its labels: pool, agent (if any), the file name, component `secret`.
    pub(crate) fn labels(&self, pool: &str) -> HashMap<String, String> {
        let mut l = labels(pool, "secret");
        if let Some(agent) = &self.agent {
            l.insert(AGENT.into(), agent.clone());
        }
        l.insert(SECRET.into(), self.target.clone());
        l
    }

    /// The service's reference to it (needs the secret's ID, known once it exists), readable
    /// by `user` only.
    fn reference(&self, id: &str, user: User) -> TaskSpecContainerSpecSecrets {
        TaskSpecContainerSpecSecrets {
            file: Some(TaskSpecContainerSpecFile {
                name: Some(self.target.clone()),
                uid: Some(user.uid.to_string()),
                gid: Some(user.gid.to_string()),
                mode: Some(0o400),
            }),
            secret_id: Some(id.to_string()),
            secret_name: Some(self.name.clone()),
        }
    }
}

/// The labels every object of the pool has.
pub(crate) fn labels(pool: &str, component: &str) -> HashMap<String, String> {
    [
        (SWARM_POOL.to_string(), pool.to_string()),
        (COMPONENT.to_string(), component.to_string()),
        (
            VERSION.to_string(),
            crate::objects::VERSION_VALUE.to_string(),
        ),
    ]
    .into()
}

/// Where the pool's API keeps its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ApiStore {
    /// SQLite on a volume of node `node` (its ID): one replica, pinned there.
    Sqlite {
        /// The node ID the API is pinned to.
        node: String,
    },
    /// Postgres at the URL in `secret` (never in env or labels); any number of replicas, at most
    /// one per node (each publishes the port on its node).
    Postgres {
        /// The replicas.
        replicas: u32,
    },
}

/// Why the API's settings were refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ApiStoreError {
    /// SQLite with more than one replica.
    #[error(
        "--api-replicas {0} needs Postgres: SQLite is one file on one node, so the API on SQLite runs one replica pinned to this node; pass --api-database postgres://… (or NINETRIX_API_DATABASE_URL) or drop --api-replicas"
    )]
    SqliteReplicas(u32),
    /// A database URL that is neither SQLite nor Postgres.
    #[error(
        "--api-database must be a postgres:// URL (SQLite is the default on Swarm: leave it out); got a URL starting `{0}`"
    )]
    Scheme(String),
    /// Zero replicas.
    #[error("--api-replicas must be at least 1")]
    NoReplicas,
}

/// Decides the API's store from the flags: no URL is SQLite pinned to `this_node` (refused with
/// more than one replica); a `postgres://` URL allows any number of replicas.
pub(crate) fn api_store(
    database: Option<&str>,
    replicas: u32,
    this_node: &str,
) -> Result<ApiStore, ApiStoreError> {
    if replicas == 0 {
        return Err(ApiStoreError::NoReplicas);
    }
    match database {
        None => {
            if replicas > 1 {
                return Err(ApiStoreError::SqliteReplicas(replicas));
            }
            Ok(ApiStore::Sqlite {
                node: this_node.to_string(),
            })
        }
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            Ok(ApiStore::Postgres { replicas })
        }
        Some(url) => Err(ApiStoreError::Scheme(
            url.split("://")
                .next()
                .unwrap_or("")
                .chars()
                .take(12)
                .collect(),
        )),
    }
}

/// The secrets of the API: its token-signing secret, the admin token, and (Postgres) the
/// database URL.
pub(crate) fn api_secrets(
    key: &[u8; 32],
    pool: &str,
    api_secret: &str,
    admin_token: &str,
    database: Option<&str>,
) -> Vec<Secret> {
    let mut out = vec![
        Secret::new(key, pool, None, "api-secret", api_secret),
        Secret::new(key, pool, None, "admin-token", admin_token),
    ];
    if let Some(url) = database {
        out.push(Secret::new(key, pool, None, "database-url", url));
    }
    out
}

/// The API service. `secrets` pairs each secret with its Swarm ID; `port` is published on each
/// node that runs a replica (host mode).
pub(crate) fn api_service(
    pool: &str,
    image: &str,
    store: &ApiStore,
    secrets: &[(Secret, String)],
    network: &str,
    port: u16,
    telemetry_env: &BTreeMap<String, String>,
) -> ServiceSpec {
    let mut args: Vec<String> = [
        "api",
        "--listen",
        "0.0.0.0:8080",
        "--secret-file",
        "/run/secrets/api-secret",
        "--admin-token-file",
        "/run/secrets/admin-token",
    ]
    .map(String::from)
    .into();
    let mut mounts = Vec::new();
    let (replicas, placement) = match store {
        ApiStore::Sqlite { node } => {
            args.extend(["--database".into(), "sqlite:///data/ninetrix.db".into()]);
            mounts.push(Mount {
                target: Some("/data".into()),
                source: Some(api_volume_name(pool)),
                typ: Some(MountType::VOLUME),
                volume_options: Some(MountVolumeOptions {
                    labels: Some(labels(pool, "api")),
                    ..MountVolumeOptions::default()
                }),
                ..Mount::default()
            });
            (
                1,
                TaskSpecPlacement {
                    constraints: Some(vec![format!("node.id=={node}")]),
                    ..TaskSpecPlacement::default()
                },
            )
        }
        ApiStore::Postgres { replicas } => {
            args.extend(["--database-file".into(), "/run/secrets/database-url".into()]);
            (
                *replicas,
                TaskSpecPlacement {
                    max_replicas: Some(1),
                    ..TaskSpecPlacement::default()
                },
            )
        }
    };
    ServiceSpec {
        name: Some(api_service_name(pool)),
        labels: Some(labels(pool, "api")),
        task_template: Some(TaskSpec {
            container_spec: Some(TaskSpecContainerSpec {
                image: Some(image.to_string()),
                args: Some(args),
                env: Some(
                    telemetry_env
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect(),
                ),
                labels: Some(labels(pool, "api")),
                mounts: Some(mounts),
                secrets: Some(
                    secrets
                        .iter()
                        .map(|(s, id)| s.reference(id, User { uid: 0, gid: 0 }))
                        .collect(),
                ),
                stop_grace_period: Some(10 * SECOND_NS),
                init: Some(true),
                health_check: Some(HealthConfig {
                    test: Some(
                        [
                            "CMD",
                            "/ninetrix",
                            "health",
                            "--url",
                            "http://127.0.0.1:8080/readyz",
                        ]
                        .map(String::from)
                        .into(),
                    ),
                    interval: Some(5 * SECOND_NS),
                    timeout: Some(3 * SECOND_NS),
                    retries: Some(3),
                    start_period: Some(30 * SECOND_NS),
                    ..HealthConfig::default()
                }),
                ..TaskSpecContainerSpec::default()
            }),
            // The API always runs: no budget.
            restart_policy: Some(TaskSpecRestartPolicy {
                condition: Some(TaskSpecRestartPolicyConditionEnum::ANY),
                delay: Some(SECOND_NS),
                max_attempts: Some(0),
                window: Some(0),
            }),
            placement: Some(placement),
            networks: Some(vec![NetworkAttachmentConfig {
                target: Some(network.to_string()),
                aliases: Some(vec![API_ALIAS.to_string()]),
                ..NetworkAttachmentConfig::default()
            }]),
            ..TaskSpec::default()
        }),
        mode: Some(ServiceSpecMode {
            replicated: Some(ServiceSpecModeReplicated {
                replicas: Some(i64::from(replicas)),
            }),
            ..ServiceSpecMode::default()
        }),
        // Round-robin DNS, not a virtual IP: the tasks reach the API without IPVS (which not
        // every kernel has), and the published port is in host mode anyway.
        endpoint_spec: Some(EndpointSpec {
            mode: Some(EndpointSpecModeEnum::DNSRR),
            ports: Some(vec![EndpointPortConfig {
                protocol: Some(EndpointPortConfigProtocolEnum::TCP),
                target_port: Some(i64::from(API_PORT)),
                published_port: Some(i64::from(port)),
                publish_mode: Some(EndpointPortConfigPublishModeEnum::HOST),
                ..EndpointPortConfig::default()
            }]),
        }),
        ..ServiceSpec::default()
    }
}

/// An agent's secrets as Swarm secrets: each of its `secrets:` (and the host's OpenTelemetry
/// header variables) by name, plus `AGENTFILE_AGENT_TOKEN` for a durable agent.
pub(crate) fn agent_secrets(
    key: &[u8; 32],
    pool: &str,
    agent: &str,
    values: &BTreeMap<String, String>,
    agent_token: Option<&str>,
) -> Vec<Secret> {
    let mut out: Vec<Secret> = values
        .iter()
        .map(|(name, value)| Secret::new(key, pool, Some(agent), name, value))
        .collect();
    if let Some(token) = agent_token {
        out.push(Secret::new(
            key,
            pool,
            Some(agent),
            launch::var::AGENT_TOKEN,
            token,
        ));
    }
    out
}

/// Everything an agent's service needs besides its spec.
pub(crate) struct AgentService<'a> {
    /// The pool.
    pub(crate) pool: &'a str,
    /// The resolved agent.
    pub(crate) spec: &'a AgentSpec,
    /// The image (a tag on every node, or a registry reference).
    pub(crate) image: &'a str,
    /// The pool's overlay network (its ID).
    pub(crate) network: &'a str,
    /// Its secrets, each with its Swarm ID.
    pub(crate) secrets: &'a [(Secret, String)],
    /// The non-secret OpenTelemetry variables of the host.
    pub(crate) telemetry_env: &'a BTreeMap<String, String>,
}

impl AgentService<'_> {
    /// What the runner is told (the launch contract). A durable agent's task slot is its
    /// replica: the runner asks the API for that replica's thread. A job's tasks have no slot,
    /// so no replica's thread: a batch run records nothing in the API (its answer is in its
    /// logs) and keeps one stable thread ID for its memory. Swarm starts a new task (a new
    /// container) for every restart, so there is no instance to tell a crash restart by.
    fn launch(&self) -> Launch {
        let durable = self.spec.execution.durability;
        Launch {
            api_url: durable.then(|| format!("http://{API_ALIAS}:{API_PORT}")),
            thread: (!durable).then(|| batch_thread(self.pool, &self.spec.name).into()),
            pool: Some(self.pool.to_string()),
            agent: Some(self.spec.name.clone()),
            replica: durable.then_some(LaunchReplica::SwarmSlot),
            spec: Some(serde_json::to_string(self.spec).unwrap_or_default()),
            workspace: Some(launch::WORKSPACE.to_string()),
            instance: None,
            created: None,
            health_file: Some(crate::pool::health::file_of(HEALTH_NAME)),
            jobs_url: None,
        }
    }

    /// The service: replicated (`replicas`, restart `on-failure` with `max_attempts: 3`, each
    /// retry a new task in the same slot) for a durable agent, a `replicated-job` of `replicas`
    /// completions (never restarted) for a batch agent. Updates stop a task before starting its
    /// replacement, so a replaced runner checkpoints first.
    pub(crate) fn spec(&self) -> ServiceSpec {
        let s = self.spec;
        let durable = s.execution.durability;
        let mut env = self.launch().to_lines();
        env.extend(self.telemetry_env.iter().map(|(k, v)| format!("{k}={v}")));
        env.extend(s.env.iter().map(|(k, v)| format!("{k}={v}")));
        let mut container_labels = labels(self.pool, "runner");
        container_labels.insert(AGENT.into(), s.name.clone());
        let mut service_labels = container_labels.clone();
        service_labels.insert(DURABLE.into(), durable.to_string());
        let mounts = vec![Mount {
            target: Some("/workspace".into()),
            source: Some(workspace_template(self.pool, &s.name)),
            typ: Some(MountType::VOLUME),
            volume_options: Some(MountVolumeOptions {
                labels: Some(container_labels.clone()),
                ..MountVolumeOptions::default()
            }),
            ..Mount::default()
        }];
        let restart = if durable {
            TaskSpecRestartPolicy {
                condition: Some(TaskSpecRestartPolicyConditionEnum::ON_FAILURE),
                delay: Some(SECOND_NS),
                max_attempts: Some(MAX_RESTARTS),
                window: Some(0),
            }
        } else {
            TaskSpecRestartPolicy {
                condition: Some(TaskSpecRestartPolicyConditionEnum::NONE),
                ..TaskSpecRestartPolicy::default()
            }
        };
        let replicas = i64::from(s.execution.replicas);
        let mode = if durable {
            ServiceSpecMode {
                replicated: Some(ServiceSpecModeReplicated {
                    replicas: Some(replicas),
                }),
                ..ServiceSpecMode::default()
            }
        } else {
            ServiceSpecMode {
                replicated_job: Some(ServiceSpecModeReplicatedJob {
                    max_concurrent: Some(replicas),
                    total_completions: Some(replicas),
                }),
                ..ServiceSpecMode::default()
            }
        };
        ServiceSpec {
            name: Some(service_name(self.pool, &s.name)),
            labels: Some(service_labels),
            task_template: Some(TaskSpec {
                container_spec: Some(harden(
                    TaskSpecContainerSpec {
                        image: Some(self.image.to_string()),
                        args: Some(vec!["runner".into()]),
                        hostname: Some(format!("{}-{{{{.Task.Slot}}}}", s.name)),
                        env: Some(env),
                        labels: Some(container_labels),
                        mounts: Some(mounts),
                        secrets: Some(
                            self.secrets
                                .iter()
                                .map(|(sec, id)| sec.reference(id, s.security.user))
                                .collect(),
                        ),
                        stop_grace_period: Some(STOP_TIMEOUT * SECOND_NS),
                        init: Some(true),
                        health_check: Some(HealthConfig {
                            test: Some(vec!["NONE".into()]),
                            ..HealthConfig::default()
                        }),
                        ..TaskSpecContainerSpec::default()
                    },
                    &s.security,
                )),
                resources: Some(TaskSpecResources {
                    limits: Some(Limit {
                        nano_cpus: crate::pool::spec::limits(s).0,
                        memory_bytes: crate::pool::spec::limits(s).1,
                        pids: Some(i64::from(s.security.pids_limit)),
                    }),
                    ..TaskSpecResources::default()
                }),
                restart_policy: Some(restart),
                networks: Some(vec![NetworkAttachmentConfig {
                    target: Some(self.network.to_string()),
                    ..NetworkAttachmentConfig::default()
                }]),
                ..TaskSpec::default()
            }),
            mode: Some(mode),
            update_config: durable.then(|| ServiceSpecUpdateConfig {
                parallelism: Some(1),
                order: Some(ServiceSpecUpdateConfigOrderEnum::STOP_FIRST),
                ..ServiceSpecUpdateConfig::default()
            }),
            ..ServiceSpec::default()
        }
    }
}

/// A sidecar MCP server's service: `ninetrix-<pool>-mcp-<server>`, one task that Swarm restarts
/// whatever its exit (one host's `unless-stopped`), on the pool's network under the alias
/// `mcp-<server>` the runners call, its secrets under `/run/secrets` (the bridge hands them to
/// the server process only). The sidecar image (the server's image plus this binary) is built on
/// the node `up` runs on and exists only there, so the task is pinned to that node.
pub(crate) struct SidecarService<'a> {
    /// The pool.
    pub(crate) pool: &'a str,
    /// The server.
    pub(crate) wanted: &'a crate::pool::sidecar::Wanted,
    /// The sidecar image's tag.
    pub(crate) image: &'a str,
    /// Its configuration digest ([`crate::pool::sidecar::Wanted::digest`]: image ID, command,
    /// settings, secret values hashed), a label of its task: a rebuilt image under the same tag,
    /// or a changed secret, changes the task and Swarm replaces it.
    pub(crate) digest: &'a str,
    /// The node the image was built on (its ID).
    pub(crate) node: &'a str,
    /// The pool's overlay network (its ID).
    pub(crate) network: &'a str,
    /// Its secrets, each with its Swarm ID.
    pub(crate) secrets: &'a [(Secret, String)],
}

impl SidecarService<'_> {
    /// The service (see the type's documentation).
    pub(crate) fn spec(&self) -> ServiceSpec {
        use crate::objects::MCP_SERVER;
        use crate::pool::sidecar::agent_label;
        use ninetrix_agentfile::mcp;
        let w = self.wanted;
        let mut container_labels = labels(self.pool, "mcp");
        container_labels.insert(AGENT.into(), agent_label(&w.server));
        container_labels.insert(MCP_SERVER.into(), w.server.clone());
        container_labels.insert(crate::objects::HASH.into(), self.digest.to_string());
        let mut service_labels = container_labels.clone();
        service_labels.insert(DURABLE.into(), "true".into());
        ServiceSpec {
            name: Some(sidecar_service_name(self.pool, &w.server)),
            labels: Some(service_labels),
            task_template: Some(TaskSpec {
                container_spec: Some(harden(
                    TaskSpecContainerSpec {
                        image: Some(self.image.to_string()),
                        args: Some(w.cmd()),
                        hostname: Some(mcp::sidecar_host(&w.server)),
                        env: Some(w.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
                        labels: Some(container_labels),
                        secrets: Some(
                            self.secrets
                                .iter()
                                .map(|(s, id)| s.reference(id, w.security.user))
                                .collect(),
                        ),
                        init: Some(true),
                        // The bridge's own health endpoint, as on one host, but checked every 5 s:
                        // Swarm counts a task with a healthcheck as running only once it is
                        // healthy, and the runners boot after that (an Engine before API 1.44 has
                        // no faster start interval).
                        health_check: Some(HealthConfig {
                            test: Some(crate::pool::sidecar::health_test()),
                            interval: Some(5 * SECOND_NS),
                            timeout: Some(5 * SECOND_NS),
                            start_period: Some(30 * SECOND_NS),
                            retries: Some(3),
                            ..HealthConfig::default()
                        }),
                        ..TaskSpecContainerSpec::default()
                    },
                    &w.security,
                )),
                restart_policy: Some(TaskSpecRestartPolicy {
                    condition: Some(TaskSpecRestartPolicyConditionEnum::ANY),
                    delay: Some(SECOND_NS),
                    ..TaskSpecRestartPolicy::default()
                }),
                placement: Some(TaskSpecPlacement {
                    constraints: Some(vec![format!("node.id=={}", self.node)]),
                    ..TaskSpecPlacement::default()
                }),
                networks: Some(vec![NetworkAttachmentConfig {
                    target: Some(self.network.to_string()),
                    aliases: Some(vec![mcp::sidecar_host(&w.server)]),
                    ..NetworkAttachmentConfig::default()
                }]),
                ..TaskSpec::default()
            }),
            mode: Some(ServiceSpecMode {
                replicated: Some(ServiceSpecModeReplicated { replicas: Some(1) }),
                ..ServiceSpecMode::default()
            }),
            // Round-robin DNS, as the API's: `mcp-<server>` resolves to the task itself, which
            // the runners reach without IPVS.
            endpoint_spec: Some(EndpointSpec {
                mode: Some(EndpointSpecModeEnum::DNSRR),
                ..EndpointSpec::default()
            }),
            ..ServiceSpec::default()
        }
    }
}

/// An agent whose service would have a sidecar's name (agent `mcp-lines` beside the sidecar of
/// server `lines`: both `ninetrix-<pool>-mcp-lines`), said as the error `up --swarm` gives.
/// `cs` hardened as one host hardens its containers (pool/hardening.rs): `security`'s user, no
/// capabilities but those it names, no new privileges, a read-only root, and a tmpfs `/tmp`. (The
/// pids limit is a resource limit of the task; Swarm has no runtime setting: see
/// [`runtime_refusal`].)
fn harden(mut cs: TaskSpecContainerSpec, security: &Security) -> TaskSpecContainerSpec {
    cs.user = Some(security.user.to_string());
    cs.capability_drop = Some(vec!["ALL".into()]);
    cs.capability_add = (!security.capabilities.is_empty()).then(|| security.capabilities.clone());
    cs.read_only = Some(security.read_only_root);
    cs.privileges = Some(TaskSpecContainerSpecPrivileges {
        no_new_privileges: Some(true),
        ..TaskSpecContainerSpecPrivileges::default()
    });
    let env = cs.env.get_or_insert_with(Vec::new);
    if !env.iter().any(|e| e.starts_with("HOME=")) {
        env.push(format!("HOME={}", crate::hardening::HOME));
    }
    cs.mounts.get_or_insert_with(Vec::new).push(Mount {
        target: Some("/tmp".into()),
        typ: Some(MountType::TMPFS),
        tmpfs_options: Some(MountTmpfsOptions {
            mode: Some(0o1777),
            ..MountTmpfsOptions::default()
        }),
        ..Mount::default()
    });
    cs
}

/// Why Swarm cannot confine `af`'s agents' network as asked, if it cannot: the egress proxy
/// runs on one host only so far, and an agent that asked for an allow-list never runs without.
pub(crate) fn egress_refusal(af: &ninetrix_agentfile::Agentfile) -> Option<String> {
    let restricted = ninetrix_agentfile::network::restricted_agents(af);
    (!restricted.is_empty()).then(|| {
        format!(
            "agent(s) {} set `network.egress`, and `up --swarm` does not run egress proxies yet; \
             nothing was deployed. Run the pool on one host (`ninetrix up`), or remove \
             `network.egress` and restrict egress with your own firewall",
            restricted.join(", ")
        )
    })
}

/// Why Swarm cannot run `af`'s background jobs, if it has any: the job broker makes sibling
/// containers through one engine's socket, and a job mounts its replica's workspace volume, so
/// jobs need one Docker host for now; an agent given the job tools never runs without them.
pub(crate) fn jobs_refusal(af: &ninetrix_agentfile::Agentfile) -> Option<String> {
    let with_jobs = crate::pool::jobs::job_agents(af);
    (!with_jobs.is_empty()).then(|| {
        format!(
            "agent(s) {} have the background-job tools (`job_start`, …), and `up --swarm` does \
             not run background jobs: they need one Docker host for now; nothing was deployed. \
             Run the pool on one host (`ninetrix up`), or remove the job tools",
            with_jobs.join(", ")
        )
    })
}

/// Why Swarm cannot run `af`'s agents as asked, if it cannot: a service cannot choose its
/// container runtime, and ninetrix never falls back to the engine's default.
pub(crate) fn runtime_refusal(af: &ninetrix_agentfile::Agentfile) -> Option<String> {
    let asks: Vec<String> = af
        .agents
        .iter()
        .filter_map(|a| {
            Some(format!(
                "agent `{}` asks for `{}`",
                a.name,
                a.runtime.isolation.as_ref()?
            ))
        })
        .collect();
    (!asks.is_empty()).then(|| {
        format!(
            "{} (runtime.isolation), and a Swarm service cannot choose its container runtime \
             (Docker's service API has no such setting); nothing was deployed. Make that runtime \
             every node's default (`\"default-runtime\"` in /etc/docker/daemon.json) and remove \
             `runtime.isolation`, or run the pool on one host (`ninetrix up`) or Kubernetes \
             (`ninetrix k8s render`, which sets runtimeClassName)",
            asks.join(", ")
        )
    })
}

pub(crate) fn name_clash(af: &ninetrix_agentfile::Agentfile, pool: &str) -> Option<String> {
    let sidecars = crate::pool::sidecar::Wanted::of(af);
    af.agents.iter().find_map(|agent| {
        let name = service_name(pool, &agent.name);
        sidecars
            .iter()
            .find(|w| sidecar_service_name(pool, &w.server) == name)
            .map(|w| {
                format!(
                    "agent `{}` and the sidecar of MCP server `{}` would both be the Swarm \
                     service {name}: rename the agent or the server",
                    agent.name, w.server
                )
            })
    })
}

/// A sidecar's secrets as Swarm secrets, owned by `mcp:<server>`.
pub(crate) fn sidecar_secrets(
    key: &[u8; 32],
    pool: &str,
    server: &str,
    values: &BTreeMap<String, String>,
) -> Vec<Secret> {
    let owner = crate::pool::sidecar::agent_label(server);
    values
        .iter()
        .map(|(name, value)| Secret::new(key, pool, Some(&owner), name, value))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agentfile(yaml: &str) -> ninetrix_agentfile::Agentfile {
        ninetrix_agentfile::parse("agentfile.yaml", yaml)
            .unwrap()
            .agentfile
    }

    const FILE: &str = "name: shop\nagents:\n  writer:\n    runtime: {provider: scripted, script: [hi]}\n    secrets: [OPENAI_API_KEY]\n    execution: {replicas: 3}\n  digest:\n    runtime: {provider: scripted, script: [done]}\n    execution: {durability: false, task: sum up}\n";

    fn env_of(spec: &ServiceSpec) -> Vec<String> {
        spec.task_template
            .as_ref()
            .unwrap()
            .container_spec
            .as_ref()
            .unwrap()
            .env
            .clone()
            .unwrap()
    }

    #[test]
    fn a_sidecar_is_one_task_always_restarted_pinned_to_its_image_node_under_its_alias() {
        let af = agentfile(
            "name: shop\nmcp_servers:\n  lines:\n    image: srv:1\n    command: [/srv, --dir, /data]\n    \
             env: {MODE: fast}\n    secrets: [LINES_TOKEN]\nagents:\n  a:\n    \
             runtime: {provider: scripted, script: [hi]}\n    tools: [\"mcp://lines\"]\n",
        );
        let wanted = &crate::pool::sidecar::Wanted::of(&af)[0];
        let key = naming_key("s", "a");
        let values = [("LINES_TOKEN".to_string(), "tok-secret-value".to_string())].into();
        let secrets: Vec<(Secret, String)> = sidecar_secrets(&key, "shop", "lines", &values)
            .into_iter()
            .map(|s| (s, "sid".to_string()))
            .collect();
        let spec = SidecarService {
            pool: "shop",
            wanted,
            image: "ninetrix/agent:x",
            digest: "d1",
            node: "node1",
            network: "net1",
            secrets: &secrets,
        }
        .spec();
        assert_eq!(spec.name.as_deref(), Some("ninetrix-shop-mcp-lines"));
        let task = spec.task_template.as_ref().unwrap();
        let c = task.container_spec.as_ref().unwrap();
        let args = c.args.clone().unwrap();
        assert_eq!(args[0], "mcp-bridge");
        let tail: Vec<&str> = args.iter().map(String::as_str).skip(3).collect();
        assert_eq!(
            tail,
            ["--secret", "LINES_TOKEN", "--", "/srv", "--dir", "/data"]
        );
        assert_eq!(c.env.clone().unwrap(), ["MODE=fast", "HOME=/tmp"]);
        let mounted = &c.secrets.as_ref().unwrap()[0];
        assert_eq!(
            mounted.file.as_ref().unwrap().name.as_deref(),
            Some("LINES_TOKEN")
        );
        assert_eq!(
            task.placement
                .as_ref()
                .unwrap()
                .constraints
                .clone()
                .unwrap(),
            ["node.id==node1"]
        );
        let network = &task.networks.as_ref().unwrap()[0];
        assert_eq!(network.aliases.clone().unwrap(), ["mcp-lines"]);
        assert_eq!(
            task.restart_policy.as_ref().unwrap().condition,
            Some(TaskSpecRestartPolicyConditionEnum::ANY)
        );
        assert_eq!(
            spec.endpoint_spec.as_ref().unwrap().mode,
            Some(EndpointSpecModeEnum::DNSRR)
        );
        let l = spec.labels.clone().unwrap();
        assert_eq!(l[COMPONENT], "mcp");
        assert_eq!(l[AGENT], "mcp:lines");
        assert_eq!(secrets[0].0.labels("shop")[AGENT], "mcp:lines");
        let text = serde_json::to_string(&spec).unwrap();
        assert!(!text.contains("tok-secret-value"), "{text}");
    }

    #[test]
    fn swarm_refuses_a_runtime_or_an_egress_allow_list_it_cannot_keep() {
        let plain = agentfile("agents:\n  a:\n    runtime: { provider: scripted, script: [hi] }\n");
        assert_eq!(runtime_refusal(&plain), None);
        assert_eq!(egress_refusal(&plain), None);
        let boxed = agentfile(
            "agents:\n  a:\n    runtime: { provider: scripted, script: [hi], isolation: runsc }\n",
        );
        let why = runtime_refusal(&boxed).unwrap();
        assert!(
            why.contains("agent `a` asks for `runsc`") && why.contains("default-runtime"),
            "{why}"
        );
        let fenced = agentfile(
            "agents:\n  a:\n    runtime: { provider: scripted, script: [hi] }\n    network: { egress: [a.com] }\n",
        );
        let why = egress_refusal(&fenced).unwrap();
        assert!(
            why.contains("network.egress") && why.contains("nothing was deployed"),
            "{why}"
        );
        assert_eq!(jobs_refusal(&plain), None);
        let mut jobs = agentfile(
            "agents:\n  a:\n    runtime: { provider: scripted, script: [hi] }\n  \
             builder:\n    runtime: { provider: scripted, script: [hi] }\n",
        );
        crate::pool::jobs::tests::with_job_tools(&mut jobs.agents[1]);
        let why = jobs_refusal(&jobs).unwrap();
        assert!(
            why.starts_with("agent(s) builder have the background-job tools")
                && why.contains("one Docker host")
                && why.contains("nothing was deployed"),
            "{why}"
        );
    }

    #[test]
    fn an_agent_named_like_a_sidecar_service_is_refused() {
        let file = "name: shop\nmcp_servers:\n  lines:\n    image: srv:1\n    command: [/srv]\n\
                    agents:\n  mcp-lines:\n    runtime: {provider: scripted, script: [hi]}\n    \
                    tools: [\"mcp://lines\"]\n";
        let clash = name_clash(&agentfile(file), "shop").unwrap();
        assert!(
            clash.contains("agent `mcp-lines`") && clash.contains("server `lines`"),
            "{clash}"
        );
        assert!(clash.contains("ninetrix-shop-mcp-lines"), "{clash}");
        assert_eq!(name_clash(&agentfile(FILE), "shop"), None);
    }

    #[test]
    fn a_durable_agent_is_a_replicated_service_with_a_restart_budget_and_its_slot_as_replica() {
        let af = agentfile(FILE);
        let key = naming_key("s", "a");
        let secrets: Vec<(Secret, String)> = agent_secrets(
            &key,
            "shop",
            "writer",
            &[("OPENAI_API_KEY".to_string(), "sk-live-123".to_string())].into(),
            Some("nxs1.agent"),
        )
        .into_iter()
        .map(|s| (s, "id".to_string()))
        .collect();
        let spec = AgentService {
            pool: "shop",
            spec: &af.agents[0],
            image: "ninetrix-runner:abc",
            network: "net",
            secrets: &secrets,
            telemetry_env: &BTreeMap::new(),
        }
        .spec();
        assert_eq!(spec.name.as_deref(), Some("ninetrix-shop-writer"));
        let mode = spec.mode.clone().unwrap();
        assert_eq!(mode.replicated.unwrap().replicas, Some(3));
        let task = spec.task_template.clone().unwrap();
        let restart = task.restart_policy.unwrap();
        assert_eq!(
            (restart.condition, restart.max_attempts),
            (
                Some(TaskSpecRestartPolicyConditionEnum::ON_FAILURE),
                Some(3)
            )
        );
        let env = env_of(&spec);
        assert!(env.contains(&"AGENTFILE_REPLICA={{.Task.Slot}}".to_string()));
        assert!(
            !env.iter().any(|e| e.starts_with("AGENTFILE_THREAD_ID")),
            "the thread comes from the API by slot"
        );
        assert!(env.contains(&"AGENTFILE_API_URL=http://ninetrix-api:8080".to_string()));
        // Secrets: mounted by name, never in env or labels.
        let rendered = serde_json::to_string(&spec).unwrap();
        for value in ["sk-live-123", "nxs1.agent"] {
            assert!(!rendered.contains(value), "{value} leaked into the spec");
        }
        let files: Vec<String> = task
            .container_spec
            .unwrap()
            .secrets
            .unwrap()
            .iter()
            .map(|s| s.file.as_ref().unwrap().name.clone().unwrap())
            .collect();
        assert_eq!(files, ["OPENAI_API_KEY", "AGENTFILE_AGENT_TOKEN"]);
        let update = spec.update_config.unwrap();
        assert_eq!(
            update.order,
            Some(ServiceSpecUpdateConfigOrderEnum::STOP_FIRST)
        );
    }

    #[test]
    fn a_batch_agent_is_a_replicated_job_never_restarted() {
        let af = agentfile(FILE);
        let spec = AgentService {
            pool: "shop",
            spec: &af.agents[1],
            image: "img",
            network: "net",
            secrets: &[],
            telemetry_env: &BTreeMap::new(),
        }
        .spec();
        let env = env_of(&spec);
        assert!(
            !env.iter()
                .any(|e| e.starts_with("AGENTFILE_API_URL") || e.starts_with("AGENTFILE_REPLICA")),
            "a job's tasks have no slot: no replica thread, no API"
        );
        assert!(env.iter().any(|e| e.starts_with("AGENTFILE_THREAD_ID=")));
        let job = spec.mode.unwrap().replicated_job.unwrap();
        assert_eq!(
            (job.max_concurrent, job.total_completions),
            (Some(1), Some(1))
        );
        assert_eq!(
            spec.task_template
                .unwrap()
                .restart_policy
                .unwrap()
                .condition,
            Some(TaskSpecRestartPolicyConditionEnum::NONE)
        );
    }

    #[test]
    fn the_runner_reads_back_what_swarm_launches_it_with() {
        use ninetrix_runner::launch::platform::{Filled, environment};
        let af = agentfile(FILE);
        for (agent, slot) in [(&af.agents[0], Some(2)), (&af.agents[1], None)] {
            let service = AgentService {
                pool: "shop",
                spec: agent,
                image: "img",
                network: "net",
                secrets: &[],
                telemetry_env: &BTreeMap::new(),
            };
            let launch = service.launch();
            assert_eq!(
                env_of(&service.spec())[..launch.to_lines().len()],
                launch.to_lines(),
                "the service's environment starts with the launch contract"
            );
            // Swarm fills in the task's slot; the runner reads the rest back as written.
            let env = environment(
                &launch.to_vars(),
                &Filled {
                    slot,
                    ..Filled::default()
                },
            );
            let read = Launch::from_vars(&env).unwrap();
            assert_eq!(read.replica, slot.map(LaunchReplica::Number));
            assert_eq!(
                Launch {
                    replica: launch.replica.clone().map(|_| LaunchReplica::Number(2)),
                    ..launch
                },
                read
            );
        }
    }

    #[test]
    fn a_secret_is_named_by_a_keyed_digest_of_its_purpose_and_value() {
        let key = naming_key("api-secret-value", "admin-token-value");
        let a = Secret::new(&key, "shop", Some("writer"), "KEY", "v1");
        assert_eq!(a, Secret::new(&key, "shop", Some("writer"), "KEY", "v1"));
        assert!(a.name.starts_with("ninetrix-shop-") && a.name.len() <= 64);
        assert_ne!(
            a.name,
            Secret::new(&key, "shop", Some("writer"), "KEY", "v2").name,
            "a new value is a new secret"
        );
        assert_ne!(
            a.name,
            Secret::new(&key, "shop", Some("reader"), "KEY", "v1").name,
            "another agent's secret is its own"
        );
        let other_home = naming_key("another secret", "admin-token-value");
        assert_ne!(
            a.name,
            Secret::new(&other_home, "shop", Some("writer"), "KEY", "v1").name
        );
        assert!(!format!("{a:?}").contains("v1"), "Debug hides the value");
    }

    #[test]
    fn sqlite_is_one_replica_pinned_to_this_node_postgres_may_have_more() {
        assert_eq!(
            api_store(None, 1, "node-1"),
            Ok(ApiStore::Sqlite {
                node: "node-1".into()
            })
        );
        assert_eq!(
            api_store(None, 2, "node-1"),
            Err(ApiStoreError::SqliteReplicas(2))
        );
        assert_eq!(
            api_store(Some("postgres://u:p@db/x"), 3, "n"),
            Ok(ApiStore::Postgres { replicas: 3 })
        );
        let err = api_store(Some("mysql://u:secretpw@db/x"), 1, "n").unwrap_err();
        assert!(!err.to_string().contains("secretpw"), "{err}");
        assert_eq!(api_store(None, 0, "n"), Err(ApiStoreError::NoReplicas));
    }

    #[test]
    fn the_api_service_keeps_its_secrets_in_files_and_sqlite_on_its_node() {
        let key = naming_key("s", "a");
        let secrets: Vec<(Secret, String)> = api_secrets(
            &key,
            "shop",
            "signing-secret-xyz",
            "admin-token-xyz",
            Some("postgres://u:pw-xyz@db/x"),
        )
        .into_iter()
        .map(|s| (s, "id".to_string()))
        .collect();
        let pg = api_service(
            "shop",
            "img",
            &ApiStore::Postgres { replicas: 2 },
            &secrets,
            "net",
            8788,
            &BTreeMap::new(),
        );
        let rendered = serde_json::to_string(&pg).unwrap();
        for value in ["signing-secret-xyz", "admin-token-xyz", "pw-xyz"] {
            assert!(!rendered.contains(value), "{value} leaked");
        }
        assert!(rendered.contains("/run/secrets/database-url"));
        assert_eq!(pg.mode.unwrap().replicated.unwrap().replicas, Some(2));
        let sqlite = api_service(
            "shop",
            "img",
            &ApiStore::Sqlite { node: "n1".into() },
            &secrets[..2],
            "net",
            8788,
            &BTreeMap::new(),
        );
        let placement = sqlite.task_template.unwrap().placement.unwrap();
        assert_eq!(placement.constraints, Some(vec!["node.id==n1".to_string()]));
        assert_eq!(sqlite.mode.unwrap().replicated.unwrap().replicas, Some(1));
    }
}
