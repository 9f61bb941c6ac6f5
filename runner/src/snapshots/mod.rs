//! Workspace snapshots (issue 41), the runner's side: what the thread's workspace holds at a
//! turn's end, uploaded as content-addressed objects ([`ninetrix_proto::snapshots`]), and a
//! workspace made equal to a stored snapshot again (a rewind, a fork's first boot, a restore a
//! crash interrupted).
//!
//! - `scan` walks the workspace (regular files and directories only; symlinks and special
//!   files are counted, not kept; `.ninetrix/` is never looked at), decides the limits of
//!   `execution.snapshots`, and hashes only files whose (size, mtime, inode) changed since this
//!   process last hashed them;
//! - `take` builds the tree and uploads what the store lacks;
//! - `restore` stages a snapshot's bytes under `.ninetrix/staging/<root>/` (each blob's
//!   SHA-256 checked, every path through [`check_path`]), then applies it and writes the marker
//!   `.ninetrix/restored`;
//! - `faults` holds the kill points of a rewind and a restore (`NINETRIX_RUNNER_CRASH_AT`).
//!
//! Blocking file I/O runs on tokio's blocking pool. Nothing here knows the engine: the driver
//! decides when to take, stage and apply.
//!
//! [`check_path`]: ninetrix_proto::snapshots::check_path

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ninetrix_proto::snapshots::{ObjectId, RESERVED_DIR};

use crate::checkpoints::CheckpointError;

pub mod faults;
pub mod restore;
pub mod scan;
pub mod take;

pub use restore::{Plan, Staged};
pub use take::Taken;

/// The marker naming the snapshot the workspace was last restored to (its root ID).
pub const MARKER: &str = "restored";

/// Where a restore stages its blobs, under the reserved directory.
const STAGING: &str = "staging";

/// Why a snapshot could not be taken, staged or applied.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The store refused or could not be reached.
    #[error("{0}")]
    Store(#[from] CheckpointError),
    /// A file of the workspace could not be read or written.
    #[error("{0}")]
    Io(String),
    /// The workspace is past a limit of `execution.snapshots` (the text names it).
    #[error("{0}")]
    Limit(String),
    /// A stored object is not what its ID says, or a node names a path outside the workspace.
    #[error("{0}")]
    Corrupt(String),
    /// A file changed between its hashing and its upload.
    #[error("{0}")]
    Changed(String),
}

impl SnapshotError {
    /// Whether the runner must stop (fenced, purged, or the API gone past its patience) rather
    /// than go on without the snapshot.
    pub fn stops(&self) -> bool {
        matches!(
            self,
            SnapshotError::Store(
                CheckpointError::Fenced(_)
                    | CheckpointError::Purged(_)
                    | CheckpointError::Unreachable(_)
            )
        )
    }

    fn io(what: impl std::fmt::Display, e: std::io::Error) -> SnapshotError {
        SnapshotError::Io(format!("{what}: {e}"))
    }
}

/// One thread's workspace as snapshots see it, with the hashes this process already knows.
#[derive(Clone, Debug)]
pub struct Snapshotter {
    root: PathBuf,
    /// Top-level names left out besides `.ninetrix` (a replica's `sessions/`, which holds its
    /// sessions' own workspaces).
    excluded: Arc<Vec<String>>,
    cache: Arc<Mutex<scan::HashCache>>,
    /// The objects of the last snapshot this process committed with a turn's end: the store
    /// holds them while that turn's row does, and nothing but a later turn's end of this thread
    /// (this runner's own commit) drops it. The next upload asks the store about the others only.
    held: Arc<Mutex<HashSet<ObjectId>>>,
}

impl Snapshotter {
    /// The workspace at `root`, leaving out the top-level names in `excluded`.
    pub fn new(root: &Path, excluded: Vec<String>) -> Snapshotter {
        Snapshotter {
            root: root.to_path_buf(),
            excluded: Arc::new(excluded),
            cache: Arc::new(Mutex::new(scan::HashCache::default())),
            held: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// Records that the turn's end carrying `taken` was committed: the store holds its objects.
    pub fn hold(&self, taken: &Taken) {
        *self.held_set() = taken.ids().collect();
    }

    /// Forgets what the store was thought to hold (it answered that an object is missing): the
    /// next upload asks about every object.
    pub fn forget(&self) {
        self.held_set().clear();
    }

    fn held_set(&self) -> std::sync::MutexGuard<'_, HashSet<ObjectId>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The workspace.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether the marker says the workspace was restored to `root` (a missing or unreadable
    /// marker says no).
    pub fn marked(&self, root: &ObjectId) -> bool {
        std::fs::read_to_string(self.reserved().join(MARKER))
            .map(|m| m.trim() == root.as_str())
            .unwrap_or(false)
    }

    /// Removes what a restore staged (after a stage that failed: nothing will apply it).
    pub fn discard_staging(&self) {
        let _ = std::fs::remove_dir_all(self.reserved().join(STAGING));
    }

    fn reserved(&self) -> PathBuf {
        self.root.join(RESERVED_DIR)
    }

    fn staging(&self, root: &ObjectId) -> PathBuf {
        self.reserved().join(STAGING).join(root.as_str())
    }

    fn scan_and_hash(
        &self,
        limits: Option<&scan::Limits>,
    ) -> Result<(scan::Scan, Vec<ninetrix_proto::snapshots::FileEntry>, u64), SnapshotError> {
        let found = scan::walk(&self.root, &self.excluded)?;
        if let Some(limits) = limits {
            scan::verdict(&found.totals(), limits).map_err(SnapshotError::Limit)?;
        }
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (entries, hashed) = scan::hash(&self.root, &found.files, &mut cache)?;
        Ok((found, entries, hashed))
    }
}

/// Runs blocking file work on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SnapshotError> + Send + 'static,
) -> Result<T, SnapshotError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(SnapshotError::Io(format!("file work failed: {e}"))))
}
