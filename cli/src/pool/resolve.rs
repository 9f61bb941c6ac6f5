//! Which pool a command means (one rule for every command).

use std::path::Path;

use anyhow::{Context as _, bail};
use ninetrix_agentfile::Agentfile;

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
