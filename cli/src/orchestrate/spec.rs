//! Container specs for agent replicas (DESIGN §3): names, labels, env, restart policy, limits,
//! the workspace volume, and the config hash that decides whether `up` keeps or recreates a
//! container. Secrets never enter any of these; the hash sees only a digest of their values.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountType, NetworkingConfig, RestartPolicy,
    RestartPolicyNameEnum,
};
use ninetrix_proto::ThreadId;
use ninetrix_proto::agentfile::AgentSpec;
use sha2::{Digest, Sha256};

/// Label keys.
pub(crate) const POOL: &str = "dev.ninetrix.pool";
pub(crate) const AGENT: &str = "dev.ninetrix.agent";
pub(crate) const REPLICA: &str = "dev.ninetrix.replica";
pub(crate) const THREAD: &str = "dev.ninetrix.thread-id";
pub(crate) const HASH: &str = "dev.ninetrix.config-hash";
pub(crate) const DURABLE: &str = "dev.ninetrix.durable";
pub(crate) const VERSION: &str = "dev.ninetrix.version";

/// How many policy restarts a durable agent gets before it "gave up".
pub(crate) const MAX_RESTARTS: i64 = 3;
/// Seconds `docker stop` waits for the runner's checkpoint before SIGKILL.
pub(crate) const STOP_TIMEOUT: i64 = 30;

/// `ninetrix-<pool>-<agent>-<n>`.
pub(crate) fn container_name(pool: &str, agent: &str, replica: u32) -> String {
    format!("ninetrix-{pool}-{agent}-{replica}")
}

/// `ninetrix-<pool>`.
pub(crate) fn network_name(pool: &str) -> String {
    format!("ninetrix-{pool}")
}

/// The config hash: the resolved spec (replicas excluded), the image ID, the API URL and a digest
/// of the secret values. Any change recreates the container; the values themselves never appear.
pub(crate) fn config_hash(
    spec: &AgentSpec,
    image_id: &str,
    api_url: &str,
    secrets: &BTreeMap<String, String>,
) -> String {
    let mut spec = spec.clone();
    spec.execution.replicas = 1;
    let mut secret_digest = Sha256::new();
    for (k, v) in secrets {
        secret_digest.update(k.as_bytes());
        secret_digest.update([0]);
        secret_digest.update(Sha256::digest(v.as_bytes()));
    }
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(&spec).unwrap_or_default());
    h.update(image_id.as_bytes());
    h.update(api_url.as_bytes());
    h.update(secret_digest.finalize());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Everything a replica container needs.
pub(crate) struct Replica<'a> {
    pub(crate) pool: &'a str,
    pub(crate) spec: &'a AgentSpec,
    pub(crate) replica: u32,
    pub(crate) thread: ThreadId,
    pub(crate) image: &'a str,
    pub(crate) api_url: &'a str,
    pub(crate) hash: &'a str,
}

impl Replica<'_> {
    /// The create body.
    pub(crate) fn body(&self) -> ContainerCreateBody {
        let s = self.spec;
        let labels: HashMap<String, String> = [
            (POOL, self.pool.to_string()),
            (AGENT, s.name.clone()),
            (REPLICA, self.replica.to_string()),
            (THREAD, self.thread.to_string()),
            (HASH, self.hash.to_string()),
            (DURABLE, s.execution.durability.to_string()),
            (VERSION, env!("CARGO_PKG_VERSION").to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut env = vec![
            format!("AGENTFILE_API_URL={}", self.api_url),
            format!("AGENTFILE_THREAD_ID={}", self.thread),
            format!("AGENTFILE_POOL={}", self.pool),
            format!("AGENTFILE_AGENT={}", s.name),
            format!("AGENTFILE_REPLICA={}", self.replica),
            format!(
                "AGENTFILE_AGENT_SPEC={}",
                serde_json::to_string(s).unwrap_or_default()
            ),
            "AGENTFILE_WORKSPACE=/workspace".to_string(),
        ];
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
        let name = container_name(self.pool, &s.name, self.replica);
        ContainerCreateBody {
            image: Some(self.image.to_string()),
            cmd: Some(vec!["runner".into()]),
            hostname: Some(format!("{}-{}", s.name, self.replica)),
            env: Some(env),
            labels: Some(labels),
            stop_timeout: Some(STOP_TIMEOUT),
            host_config: Some(HostConfig {
                init: Some(true),
                restart_policy: Some(restart),
                nano_cpus: s.runtime.resources.cpu.map(|c| (c * 1e9) as i64),
                memory: s
                    .runtime
                    .resources
                    .memory_bytes
                    .and_then(|m| i64::try_from(m).ok()),
                network_mode: Some(network_name(self.pool)),
                extra_hosts: Some(vec!["host.docker.internal:host-gateway".into()]),
                mounts: Some(vec![Mount {
                    target: Some("/workspace".into()),
                    source: Some(format!("{name}-workspace")),
                    typ: Some(MountType::VOLUME),
                    ..Mount::default()
                }]),
                ..HostConfig::default()
            }),
            networking_config: Some(NetworkingConfig::default()),
            ..ContainerCreateBody::default()
        }
    }
}
