//! Taking a snapshot at a turn's end: scan and hash the workspace (within its limits), build
//! the tree, ask the store which objects it lacks (in batches of
//! [`MAX_IDS_PER_REQUEST`]) and upload those — blobs first, then nodes children before parents,
//! so every object a node names is stored before it.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use ninetrix_proto::snapshots::{
    MAX_IDS_PER_REQUEST, MAX_OBJECT_BYTES, ObjectId, ObjectKind, SnapshotRef, Tree, build,
};

use super::scan::Limits;
use super::{SnapshotError, Snapshotter, blocking};
use crate::checkpoints::Checkpoints;

/// A snapshot taken: its tree, where each blob's bytes are, and the numbers for
/// `snapshot_taken`.
#[derive(Clone, Debug)]
pub struct Taken {
    /// The tree (its snapshot and nodes).
    pub tree: Tree,
    /// A path holding each blob.
    sources: BTreeMap<ObjectId, String>,
    /// Files read because their stat changed.
    pub hashed_files: u64,
    /// Entries left out (symlinks, special files, unrepresentable names).
    pub skipped_entries: u64,
    /// Objects uploaded (every upload of this snapshot).
    pub uploaded_objects: u64,
    /// Their bytes.
    pub uploaded_bytes: u64,
    /// When it began.
    pub started: Instant,
}

impl Taken {
    /// The snapshot.
    pub fn snapshot(&self) -> &SnapshotRef {
        &self.tree.snapshot
    }

    /// Every object of it: its blobs and its nodes.
    pub fn ids(&self) -> impl Iterator<Item = ObjectId> + '_ {
        self.sources
            .keys()
            .cloned()
            .chain(self.tree.nodes.iter().map(|(id, _)| id.clone()))
    }
}

impl Snapshotter {
    /// Takes a snapshot of the workspace within `limits` and uploads what the store lacks.
    pub async fn take<C: Checkpoints>(
        &self,
        store: &C,
        limits: Limits,
    ) -> Result<Taken, SnapshotError> {
        let started = Instant::now();
        let me = self.clone();
        let (tree, sources, hashed_files, skipped_entries) = blocking(move || {
            let (scan, entries, hashed) = me.scan_and_hash(Some(&limits))?;
            let sources: BTreeMap<ObjectId, String> = entries
                .iter()
                .map(|e| (e.blob.clone(), e.path.clone()))
                .collect();
            Ok((build(entries), sources, hashed, scan.others.len() as u64))
        })
        .await?;
        let mut taken = Taken {
            tree,
            sources,
            hashed_files,
            skipped_entries,
            uploaded_objects: 0,
            uploaded_bytes: 0,
            started,
        };
        self.upload(store, &mut taken).await?;
        Ok(taken)
    }

    /// Uploads the objects of `taken` the store lacks (again after a commit found one missing:
    /// only what is missing now goes). The store is asked only about objects the last committed
    /// snapshot did not have ([`Snapshotter::hold`]): a turn that changed one file of ten
    /// thousand asks about a handful, and one that changed nothing asks nothing.
    pub async fn upload<C: Checkpoints>(
        &self,
        store: &C,
        taken: &mut Taken,
    ) -> Result<(), SnapshotError> {
        let ids: Vec<ObjectId> = {
            let held = self.held_set();
            taken.ids().filter(|id| !held.contains(id)).collect()
        };
        let mut missing = HashSet::new();
        for batch in ids.chunks(MAX_IDS_PER_REQUEST) {
            missing.extend(store.missing_objects(batch.to_vec()).await?);
        }
        for (blob, path) in &taken.sources {
            if !missing.contains(blob) {
                continue;
            }
            let (root, path, want) = (self.root.clone(), path.clone(), blob.clone());
            let bytes = blocking(move || read_blob(&root.join(&path), &path, &want)).await?;
            taken.uploaded_objects += 1;
            taken.uploaded_bytes += bytes.len() as u64;
            store.put_object(blob, ObjectKind::Blob, bytes).await?;
        }
        for (id, bytes) in &taken.tree.nodes {
            if missing.contains(id) {
                taken.uploaded_objects += 1;
                taken.uploaded_bytes += bytes.len() as u64;
                store
                    .put_object(id, ObjectKind::Node, bytes.clone())
                    .await?;
            }
        }
        Ok(())
    }
}

/// A file's bytes, which must still be the blob `want` they were hashed as.
fn read_blob(
    file: &std::path::Path,
    path: &str,
    want: &ObjectId,
) -> Result<Vec<u8>, SnapshotError> {
    let bytes =
        std::fs::read(file).map_err(|e| SnapshotError::io(format!("cannot read `{path}`"), e))?;
    if bytes.len() as u64 > MAX_OBJECT_BYTES || ObjectId::of(&bytes) != *want {
        return Err(SnapshotError::Changed(format!(
            "`{path}` changed while the snapshot was taken"
        )));
    }
    Ok(bytes)
}
