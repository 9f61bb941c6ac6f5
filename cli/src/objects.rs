//! What ninetrix calls the objects it creates — one host's containers, volumes and networks,
//! Swarm's services, volumes and network, the Kubernetes objects — and every label and annotation
//! it puts on them, in one place (as Compose keeps `pkg/api/labels.go`). Commands find a pool's
//! objects by these names and keys; one changed here changes which objects an older ninetrix's
//! pool is recognised by, so they are never renamed. (Swarm's secrets are named by a keyed
//! digest of their value, `swarm/spec.rs`.)

use ninetrix_proto::ThreadId;
use sha2::Digest as _;

/// The version written into [`VERSION`] (the crate's, so every binary of a release agrees).
pub(crate) const VERSION_VALUE: &str = env!("CARGO_PKG_VERSION");

/// One host: the pool a container, volume or network belongs to (how every command finds a
/// pool's objects).
pub(crate) const POOL: &str = "dev.ninetrix.pool";
/// The agent a container (or a Swarm service) runs.
pub(crate) const AGENT: &str = "dev.ninetrix.agent";
/// The replica number, or `run` for a `ninetrix run` container.
pub(crate) const REPLICA: &str = "dev.ninetrix.replica";
/// The thread the container's runner works on.
pub(crate) const THREAD: &str = "dev.ninetrix.thread-id";
/// The whole configuration digest (`pool::spec::Config::hash`).
pub(crate) const HASH: &str = "dev.ninetrix.config-hash";
/// The configuration digest by part, as JSON, so `up` can say *what* changed.
pub(crate) const PARTS: &str = "dev.ninetrix.config-parts";
/// Whether the agent is durable (restarted on failure) or a batch job.
pub(crate) const DURABLE: &str = "dev.ninetrix.durable";
/// The ninetrix version that created the object ([`VERSION_VALUE`]).
pub(crate) const VERSION: &str = "dev.ninetrix.version";
/// Set on `ninetrix run`'s one-shot containers.
pub(crate) const RUN: &str = "dev.ninetrix.run";
/// What a network or the API container is for (`network`, `api`).
pub(crate) const ROLE: &str = "dev.ninetrix.role";
/// [`ROLE`] of a background job's container (labelled with its pool, agent and the
/// `ninetrix_proto::jobs::labels`).
pub(crate) const JOB_ROLE: &str = "job";
/// [`ROLE`] of a pool's job broker (`ninetrix-<pool>-jobs`).
pub(crate) const JOB_BROKER_ROLE: &str = "job-broker";
/// The agent an egress proxy (or its internal network) serves (set only on those).
pub(crate) const EGRESS: &str = "dev.ninetrix.egress";
/// The MCP server a sidecar serves (set only on sidecars).
pub(crate) const MCP_SERVER: &str = "dev.ninetrix.mcp-server";
/// The absolute `$AGENTFILE_HOME` a local API container belongs to.
pub(crate) const HOME: &str = "dev.ninetrix.home";
/// The digest of the `OTEL_*` settings the local API was created with (empty: none).
pub(crate) const TELEMETRY: &str = "dev.ninetrix.telemetry";

/// Swarm: the pool of every Swarm object (services, their tasks' containers, secrets, volumes,
/// the network). Not [`POOL`], so the one-host commands never mistake a task's container for one
/// of theirs.
pub(crate) const SWARM_POOL: &str = "dev.ninetrix.swarm.pool";
/// Swarm: which part of the pool an object is (`api`, `runner`, `mcp` (a sidecar MCP server),
/// `secret`, `network`).
pub(crate) const COMPONENT: &str = "dev.ninetrix.component";
/// Swarm: on a secret, the name the runner reads it by (`/run/secrets/<NAME>`).
pub(crate) const SECRET: &str = "dev.ninetrix.secret";

/// The [`HASH`] label of a pool container made from `image_id` and `parts` (its arguments,
/// environment, mounts…): 16 hex digits of SHA-256 over them, each part after a NUL. A change to
/// any part changes it, so `up` recreates the container.
pub(crate) fn config_digest<'a>(
    image_id: &str,
    parts: impl IntoIterator<Item = &'a str>,
) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(image_id.as_bytes());
    for part in parts {
        h.update([0]);
        h.update(part.as_bytes());
    }
    h.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

// Names: one host.

/// `ninetrix-<pool>-<agent>-<n>`.
pub(crate) fn container_name(pool: &str, agent: &str, replica: u32) -> String {
    format!("ninetrix-{pool}-{agent}-{replica}")
}

/// `ninetrix-<pool>-<agent>-<n>-workspace`: a replica's workspace volume.
pub(crate) fn volume_name(pool: &str, agent: &str, replica: u32) -> String {
    format!("{}-workspace", container_name(pool, agent, replica))
}

/// `ninetrix-<pool>-<agent>-run-<6 hex of the thread>`: a `ninetrix run` container.
pub(crate) fn run_container_name(pool: &str, agent: &str, thread: ThreadId) -> String {
    let suffix: String = thread
        .as_uuid()
        .simple()
        .to_string()
        .chars()
        .rev()
        .take(6)
        .collect();
    format!("ninetrix-{pool}-{agent}-run-{suffix}")
}

/// `ninetrix-<pool>`.
pub(crate) fn network_name(pool: &str) -> String {
    format!("ninetrix-{pool}")
}

/// `ninetrix-<pool>-mcp-<server>`: an MCP server's sidecar container.
pub(crate) fn sidecar_container_name(pool: &str, server: &str) -> String {
    format!("ninetrix-{pool}-mcp-{server}")
}

/// `ninetrix-<pool>-status`: the pool's health volume. (Pools of ninetrix before hardened
/// containers had a root-owned `ninetrix-<pool>-health`, which a non-root runner cannot write;
/// `down --purge` removes it with the pool's other volumes, found by label.)
pub(crate) fn health_volume_name(pool: &str) -> String {
    format!("ninetrix-{pool}-status")
}

/// The local API container's name for a home, without the override: `ninetrix-api` for the
/// default home, `ninetrix-api-<8 hex of sha256(absolute home)>` for any other.
pub(crate) fn api_container_name(home_key: &str, default_home: bool) -> String {
    if default_home {
        return "ninetrix-api".into();
    }
    let digest = sha2::Sha256::digest(home_key.as_bytes());
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("ninetrix-api-{hex}")
}

/// Names on Docker Swarm.
pub(crate) mod swarm {
    /// `ninetrix-<pool>-<agent>`: an agent's service.
    pub(crate) fn service_name(pool: &str, agent: &str) -> String {
        format!("ninetrix-{pool}-{agent}")
    }

    /// `ninetrix-<pool>-api`: the pool's checkpoint API service.
    pub(crate) fn api_service_name(pool: &str) -> String {
        format!("ninetrix-{pool}-api")
    }

    /// `ninetrix-<pool>-api-data`: the SQLite API's volume (on the node it is pinned to).
    pub(crate) fn api_volume_name(pool: &str) -> String {
        format!("ninetrix-{pool}-api-data")
    }

    /// `ninetrix-<pool>-swarm`: the pool's overlay network (attachable).
    pub(crate) fn network_name(pool: &str) -> String {
        format!("ninetrix-{pool}-swarm")
    }

    /// The workspace volume of each task: `ninetrix-<pool>-<agent>-<slot>-workspace`, the slot
    /// filled in by Swarm, so a task replaced on the same node finds its files (as on one host:
    /// [`super::volume_name`]).
    pub(crate) fn workspace_template(pool: &str, agent: &str) -> String {
        format!("ninetrix-{pool}-{agent}-{{{{.Task.Slot}}}}-workspace")
    }

    /// `ninetrix-<pool>-mcp-<server>`, as the sidecar's container is named on one host.
    pub(crate) fn sidecar_service_name(pool: &str, server: &str) -> String {
        super::sidecar_container_name(pool, server)
    }
}

/// Kubernetes: the objects' names, the recommended labels and ninetrix's annotations on the
/// rendered manifests.
pub(crate) mod k8s {
    /// A Kubernetes object name from a ninetrix name (`_` is not allowed in DNS-1123 names).
    pub(crate) fn dns(name: &str) -> String {
        name.replace('_', "-")
    }

    /// The per-agent Secret of model keys and other `secrets:`: `<pool>-<agent>-secrets`.
    pub(crate) fn agent_secret(pool: &str, agent: &str) -> String {
        dns(&format!("{pool}-{agent}-secrets"))
    }

    /// The per-agent Secret of the agent token (key `AGENTFILE_AGENT_TOKEN`):
    /// `<pool>-<agent>-agent`. With it each replica asks the API for its thread and serves the
    /// agent's sessions.
    pub(crate) fn agent_token_secret(pool: &str, agent: &str) -> String {
        dns(&format!("{pool}-{agent}-agent"))
    }

    /// The pool's Secret of the host's OpenTelemetry header variables (keys: their names):
    /// `<pool>-telemetry`, projected into every runner's `/run/secrets` when the host sets any.
    pub(crate) fn telemetry_secret(pool: &str) -> String {
        dns(&format!("{pool}-telemetry"))
    }

    /// The API's Secret: `<pool>-api` (keys `api-secret`, `admin-token`, `database-url`).
    pub(crate) fn api_secret(pool: &str) -> String {
        dns(&format!("{pool}-api"))
    }

    /// `app.kubernetes.io/name`.
    pub(crate) const NAME: &str = "app.kubernetes.io/name";
    /// `app.kubernetes.io/part-of`: the pool.
    pub(crate) const PART_OF: &str = "app.kubernetes.io/part-of";
    /// `app.kubernetes.io/component`: `api` or `runner`.
    pub(crate) const COMPONENT: &str = "app.kubernetes.io/component";
    /// The annotation that documents the restart behaviour on every runner pod.
    pub(crate) const RESTARTS: &str = "ninetrix.dev/restarts";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_distinct_and_in_ninetrixs_namespaces() {
        let keys = [
            POOL,
            AGENT,
            REPLICA,
            THREAD,
            HASH,
            PARTS,
            DURABLE,
            VERSION,
            RUN,
            ROLE,
            MCP_SERVER,
            HOME,
            TELEMETRY,
            SWARM_POOL,
            COMPONENT,
            SECRET,
            k8s::NAME,
            k8s::PART_OF,
            k8s::COMPONENT,
            k8s::RESTARTS,
        ];
        let mut seen = std::collections::BTreeSet::new();
        for key in keys {
            assert!(seen.insert(key), "{key} twice");
            assert!(
                key.starts_with("dev.ninetrix.")
                    || key.starts_with("app.kubernetes.io/")
                    || key.starts_with("ninetrix.dev/"),
                "{key}"
            );
        }
    }
}
