//! Every label and annotation ninetrix puts on the objects it creates — one host's containers,
//! volumes and networks, Swarm's services, secrets and volumes, the Kubernetes manifests — in one
//! place (as Compose keeps `pkg/api/labels.go`). How a command finds a pool's objects is by these
//! keys; a key changed here changes which objects an older ninetrix's pool is recognised by, so
//! keys are never renamed.

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

/// Kubernetes' recommended labels and ninetrix's annotations on the rendered manifests.
pub(crate) mod k8s {
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
