//! What `up` tells the job broker about its pool (`AGENTFILE_JOBS_CONFIG`, JSON): for each agent
//! with the job tools, the image its jobs run in, the network they join, their limits and the
//! hardened settings of its containers. The broker trusts nothing else about an agent: a
//! runner's request names only its thread, and the checkpoint API says which agent that is.

use std::collections::BTreeMap;

use ninetrix_agentfile::security::Security;
use serde::{Deserialize, Serialize};

/// The environment variable holding the broker's [`BrokerConfig`] as JSON.
pub(crate) const CONFIG_VAR: &str = "AGENTFILE_JOBS_CONFIG";

/// The port the broker listens on inside the pool's networks.
pub(crate) const PORT: u16 = 7480;

/// The broker's container (and host name on the pool's networks).
pub(crate) fn container_name(pool: &str) -> String {
    format!("ninetrix-{pool}-jobs")
}

/// The URL runners of `pool` reach the broker at (`AGENTFILE_JOBS_URL`).
pub(crate) fn url(pool: &str) -> String {
    format!("http://{}:{PORT}", container_name(pool))
}

/// The broker's whole configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BrokerConfig {
    /// The pool.
    pub pool: String,
    /// The agents with the job tools, by name.
    pub agents: BTreeMap<String, AgentJobs>,
}

/// How one agent's jobs run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentJobs {
    /// The image (`runtime.jobs.image`, else the agent's runner image).
    pub image: String,
    /// The network jobs join: the pool's, or the agent's internal egress network.
    pub network: String,
    /// Environment every job gets (the egress proxy's `HTTP(S)_PROXY`/`NO_PROXY` for a
    /// restricted agent; never a secret).
    pub env: Vec<String>,
    /// Most of the agent's jobs running at once.
    pub max_concurrent: u32,
    /// Seconds a job may run when its start names no timeout.
    pub default_timeout_secs: u64,
    /// CPUs of each job.
    pub cpus: Option<f64>,
    /// Memory limit of each job, in bytes.
    pub memory_bytes: Option<u64>,
    /// The agent's replicas: replica `n`'s workspace volume is `workspace_volume(n)`.
    pub replicas: u32,
    /// The agent's `security:` (jobs are hardened like its runners).
    pub security: Security,
    /// The container runtime (`runtime.isolation`).
    pub isolation: Option<String>,
}

/// The workspace volume of replica `replica` of `agent` in `pool` (as `up` names it).
pub(crate) fn workspace_volume(pool: &str, agent: &str, replica: u32) -> String {
    crate::objects::volume_name(pool, agent, replica)
}
