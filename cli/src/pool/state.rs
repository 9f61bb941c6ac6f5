//! Pool state (`$AGENTFILE_HOME/pools/<pool>.json`): the thread ID of every agent replica, created
//! once and reused across `up`, `down` and recreates. Written atomically (temp file, fsync,
//! rename), mode 0600, under an exclusive lock (`<pool>.lock`) that `up` and `down` take before
//! they create or remove anything, so two of them never race; `down --purge` deletes both files. `api_url` matters only for an
//! external API (a local API's address is read from its container). A pool on Swarm records so
//! (`swarm`). Never holds secrets.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use ninetrix_proto::ThreadId;
use serde::{Deserialize, Serialize};

/// One replica's record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ReplicaState {
    pub(crate) thread_id: ThreadId,
    pub(crate) container_id: Option<String>,
    pub(crate) config_hash: Option<String>,
}

/// The pool's record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct PoolState {
    pub(crate) pool: String,
    pub(crate) agentfile: Option<PathBuf>,
    pub(crate) agentfile_hash: Option<String>,
    pub(crate) api_url: Option<String>,
    pub(crate) created_at: Option<DateTime<Utc>>,
    pub(crate) updated_at: Option<DateTime<Utc>>,
    /// agent → replica number → record.
    pub(crate) agents: BTreeMap<String, BTreeMap<u32, ReplicaState>>,
    /// Set when the pool runs on Docker Swarm (`up --swarm`): then its replicas are services'
    /// tasks, its threads are kept by its own API (by replica number), and the commands read
    /// Swarm instead of containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) swarm: Option<SwarmPool>,
}

/// A pool on Swarm, as `up --swarm` left it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SwarmPool {
    /// The port the pool's API service publishes (host mode) on the node(s) running it.
    pub(crate) api_port: u16,
    /// Where the API keeps its data: `sqlite` (one replica, pinned) or `postgres`.
    pub(crate) database: String,
}

/// The pool state file, locked for as long as this value lives.
pub(crate) struct LockedState {
    path: PathBuf,
    _lock: std::fs::File,
    pub(crate) state: PoolState,
}

/// `$AGENTFILE_HOME/pools`.
pub(crate) fn pools_dir(home: &Path) -> PathBuf {
    home.join("pools")
}

/// A pool's state as it is on disk (empty if it has none), read without the lock and without
/// writing anything (`up --dry-run`).
pub(crate) fn read(home: &Path, pool: &str) -> anyhow::Result<PoolState> {
    let path = pools_dir(home).join(format!("{pool}.json"));
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a valid pool state file", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(PoolState {
            pool: pool.to_string(),
            ..PoolState::default()
        }),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Whether a pool has a state file in this home.
pub(crate) fn exists(home: &Path, pool: &str) -> bool {
    pools_dir(home).join(format!("{pool}.json")).exists()
}

/// The pools with a state file in this home, sorted.
pub(crate) fn pools(home: &Path) -> Vec<String> {
    let mut pools: Vec<String> = std::fs::read_dir(pools_dir(home))
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
    pools.sort();
    pools
}

/// Opens (or starts) a pool's state, taking its lock: every command that changes a pool (`up`,
/// `down`, `run`'s network) takes it before it creates or removes anything, and waits (saying
/// so) while another holds it.
pub(crate) fn lock(home: &Path, pool: &str) -> anyhow::Result<LockedState> {
    let dir = pools_dir(home);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let lock_path = dir.join(format!("{pool}.lock"));
    let lock = loop {
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .with_context(|| format!("cannot open {}", lock_path.display()))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                eprintln!(
                    "waiting for another ninetrix command on pool {pool} to finish ({} is locked)",
                    lock_path.display()
                );
                lock.lock()
                    .with_context(|| format!("cannot lock {}", lock_path.display()))?;
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", lock_path.display()));
            }
        }
        // `down --purge` deletes the lock file with the pool: a lock taken on a file that is no
        // longer at its path locks nothing, so open the path again.
        if still_at(&lock, &lock_path) {
            break lock;
        }
    };
    let path = dir.join(format!("{pool}.json"));
    let state = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "{} is not a valid pool state file; move it away to start over",
                path.display()
            )
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => PoolState {
            pool: pool.to_string(),
            created_at: Some(Utc::now()),
            ..PoolState::default()
        },
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    Ok(LockedState {
        path,
        _lock: lock,
        state,
    })
}

/// Whether the open file `f` is still the one at `path` (same device and inode).
fn still_at(f: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (f.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

impl LockedState {
    /// Writes the state atomically: temp file, fsync, rename, fsync of the directory.
    pub(crate) fn save(&mut self) -> anyhow::Result<()> {
        self.state.updated_at = Some(Utc::now());
        let tmp = self.path.with_extension("json.tmp");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(&serde_json::to_vec_pretty(&self.state)?)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        if let Some(dir) = self.path.parent()
            && let Ok(d) = std::fs::File::open(dir)
        {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Deletes the state file, then its lock file (a command waiting on the lock meanwhile
    /// notices and opens the path again; see [`lock`]).
    pub(crate) fn delete(self) -> anyhow::Result<()> {
        for path in [&self.path, &self.path.with_extension("lock")] {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot delete {}", path.display()));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deleting_a_pool_leaves_neither_its_state_nor_its_lock_file() {
        let home = tempfile::tempdir().unwrap();
        let mut locked = lock(home.path(), "shop").unwrap();
        locked.save().unwrap();
        let dir = pools_dir(home.path());
        assert!(dir.join("shop.json").exists() && dir.join("shop.lock").exists());
        locked.delete().unwrap();
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{left:?}");
        // The pool can be locked again afterwards (a new lock file).
        let again = lock(home.path(), "shop").unwrap();
        assert!(dir.join("shop.lock").exists());
        drop(again);
    }
}
