//! A pool as the diagnostic commands see it (`invoke`, `trace`, `sessions`, `reset`): its state,
//! its API (this home's, or the pool's own service on Swarm), and a replica's thread.

use std::path::Path;

use anyhow::{Context as _, bail};
use ninetrix_proto::ThreadId;

use crate::backend::Backend;
use crate::pool::local_api::Api;
use crate::pool::state::PoolState;

/// A pool as the diagnostic commands see it.
pub(crate) struct PoolView {
    pub(crate) name: String,
    pub(crate) state: PoolState,
    pub(crate) api: Api,
}

impl PoolView {
    /// Opens the pool's state (read-only) and API. The local API's address comes from its
    /// container now (see [`Api::existing`]), never from the URL an older pool file recorded; a
    /// pool on Swarm's from the port its API service publishes.
    pub(crate) async fn open(file: &Path, pool: Option<&str>) -> anyhow::Result<PoolView> {
        let name = crate::pool::resolve::pool_name(file, pool)?;
        let home = crate::home::agentfile_home()?;
        let path = crate::pool::state::pools_dir(&home).join(format!("{name}.json"));
        let state: PoolState = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not a valid pool state file", path.display()))?,
            Err(_) => bail!(
                "pool `{name}` has no state ({}); run `ninetrix up` first",
                path.display()
            ),
        };
        // A pool on Swarm has its own API service; every other pool uses this home's API.
        let api = Backend::of(&state).api(&home, &name, &state).await?;
        Ok(PoolView { name, state, api })
    }

    /// The API that a command naming a thread by its ID uses (`trace --thread-id`, `fork
    /// --thread`, …): the ID is enough, so no pool is needed. A pool named with `-p` (or an
    /// agentfile present) decides it, errors included; with neither, the only pool's API if there
    /// is one, else `AGENTFILE_API_URL` (+ `AGENTFILE_ADMIN_TOKEN`) or this home's local API.
    pub(crate) async fn thread_api(file: &Path, pool: Option<&str>) -> anyhow::Result<Api> {
        if pool.is_some() || file.exists() {
            return Ok(PoolView::open(file, pool).await?.api);
        }
        match PoolView::open(file, None).await {
            Ok(view) => Ok(view.api),
            Err(_) => Api::any(&crate::home::agentfile_home()?).await,
        }
    }

    /// Where the pool runs.
    pub(crate) fn backend(&self) -> Backend {
        Backend::of(&self.state)
    }

    /// How many replicas of `agent` the pool runs (as `up` recorded them).
    pub(crate) fn replica_count(&self, agent: &str) -> anyhow::Result<u32> {
        let replicas = self.state.agents.get(agent).with_context(|| {
            let known: Vec<&str> = self.state.agents.keys().map(String::as_str).collect();
            format!(
                "pool `{}` has no agent `{agent}` (it has: {})",
                self.name,
                known.join(", ")
            )
        })?;
        Ok(u32::try_from(replicas.len()).unwrap_or(u32::MAX).max(1))
    }

    /// The thread of an agent replica.
    pub(crate) fn thread(&self, agent: &str, replica: u32) -> anyhow::Result<ThreadId> {
        let replicas = self.state.agents.get(agent).with_context(|| {
            let known: Vec<&str> = self.state.agents.keys().map(String::as_str).collect();
            format!(
                "pool `{}` has no agent `{agent}` (it has: {})",
                self.name,
                known.join(", ")
            )
        })?;
        replicas
            .get(&replica)
            .map(|r| r.thread_id)
            .with_context(|| {
                format!(
                    "agent `{agent}` has no replica {replica} in pool `{}`",
                    self.name
                )
            })
    }
}
