//! Which pool a command means (one rule for every command), and what the diagnostic commands
//! share: the pool's state, its API, and a replica's thread.

use std::path::Path;

use anyhow::{Context as _, bail};
use ninetrix_agentfile::Agentfile;
use ninetrix_proto::ThreadId;

use crate::pool::local_api::Api;
use crate::pool::state::PoolState;

/// A pool as the diagnostic commands see it.
pub(crate) struct PoolView {
    pub(crate) name: String,
    pub(crate) state: PoolState,
    pub(crate) api: Api,
}

/// The pool of a loaded agentfile: `-p`, else its `name:`, else its directory's name.
pub(crate) fn pool_of(af: &Agentfile, flag: Option<&str>, file: &Path) -> anyhow::Result<String> {
    af.pool_name(flag, file)
        .context("cannot derive a pool name: set `name:` in the agentfile or pass -p POOL")
}

/// What a command without a loaded agentfile falls back to when `-p` is not given and the
/// agentfile does not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fallback {
    /// The only pool that has state (`logs`, `trace`, `invoke`).
    OnlyPool,
    /// No pool (`down --api` with nothing else to do).
    Nothing,
}

/// The one rule for which pool a command means: `-p`, else the agentfile's (see [`pool_of`]) if
/// the file exists, else the fallback; an error says what to pass.
pub(crate) fn resolve(
    file: &Path,
    flag: Option<&str>,
    fallback: Fallback,
) -> anyhow::Result<Option<String>> {
    if let Some(p) = flag {
        return Ok(Some(p.to_string()));
    }
    if file.exists() {
        let parsed = crate::pool::load(file)?;
        return pool_of(&parsed.agentfile, None, file).map(Some);
    }
    match fallback {
        Fallback::Nothing => Ok(None),
        Fallback::OnlyPool => only_pool().map(Some),
    }
}

/// The only pool with a state file.
fn only_pool() -> anyhow::Result<String> {
    let pools = crate::pool::state::pools(&crate::home::agentfile_home()?);
    match pools.as_slice() {
        [only] => Ok(only.clone()),
        [] => {
            bail!("no agentfile here and no pool found: run `ninetrix up` first, or pass -p POOL")
        }
        many => bail!("several pools exist ({}); pass -p POOL", many.join(", ")),
    }
}

/// [`resolve`] with the only-pool fallback, for the diagnostic commands.
pub(crate) fn pool_name(file: &Path, pool: Option<&str>) -> anyhow::Result<String> {
    resolve(file, pool, Fallback::OnlyPool)?
        .context("no pool found: run `ninetrix up` first, or pass -p POOL")
}

impl PoolView {
    /// Opens the pool's state (read-only) and API. The local API's address comes from its
    /// container now (see [`Api::existing`]), never from the URL an older pool file recorded; a
    /// pool on Swarm's from the port its API service publishes.
    pub(crate) async fn open(file: &Path, pool: Option<&str>) -> anyhow::Result<PoolView> {
        let name = pool_name(file, pool)?;
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
        let api = match &state.swarm {
            Some(swarm) => crate::swarm::api_of(&home, &name, swarm)?,
            None => Api::existing(&home).await?,
        };
        Ok(PoolView { name, state, api })
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
