//! What the diagnostic commands share: which pool, its state, its API, and a replica's thread.

use std::path::Path;

use anyhow::{Context as _, bail};
use ninetrix_proto::ThreadId;

use super::api::Api;
use super::state::PoolState;

/// A pool as the diagnostic commands see it.
pub(crate) struct PoolView {
    pub(crate) name: String,
    pub(crate) state: PoolState,
    pub(crate) api: Api,
}

/// The pool: `-p`, else the agentfile's, else the only pool with state.
pub(crate) fn pool_name(file: &Path, pool: Option<&str>) -> anyhow::Result<String> {
    if let Some(p) = pool {
        return Ok(p.to_string());
    }
    if file.exists() {
        let parsed = super::load(file)?;
        return parsed
            .agentfile
            .pool_name(None, file)
            .context("cannot derive a pool name: pass -p POOL");
    }
    let dir = super::state::pools_dir(&super::home()?);
    let pools: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_suffix(".json")
                    .map(str::to_string)
            })
            .collect()
        })
        .unwrap_or_default();
    match pools.as_slice() {
        [only] => Ok(only.clone()),
        [] => bail!("no pool found: run `ninetrix up` first, or pass -p POOL"),
        many => bail!("several pools exist ({}); pass -p POOL", many.join(", ")),
    }
}

impl PoolView {
    /// Opens the pool's state (read-only) and API.
    pub(crate) fn open(file: &Path, pool: Option<&str>) -> anyhow::Result<PoolView> {
        let name = pool_name(file, pool)?;
        let home = super::home()?;
        let path = super::state::pools_dir(&home).join(format!("{name}.json"));
        let state: PoolState = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not a valid pool state file", path.display()))?,
            Err(_) => bail!(
                "pool `{name}` has no state ({}); run `ninetrix up` first",
                path.display()
            ),
        };
        let api = Api::existing(&home, state.api_url.as_deref())?;
        Ok(PoolView { name, state, api })
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
