//! Making the workspace equal a stored snapshot, in two steps so that a crash anywhere leaves
//! something the next runner can finish:
//!
//! 1. [`Snapshotter::stage`] reads the tree (each node's SHA-256 checked, every path through
//!    [`check_path`] — one bad path refuses the whole restore), compares it with the workspace
//!    ([`plan`], pure) and puts every blob a file to write needs under
//!    `.ninetrix/staging/<root>/`: copied from the workspace when a file there already has
//!    those bytes, else downloaded and checked against its ID. Nothing outside `.ninetrix/`
//!    changes.
//! 2. [`Snapshotter::apply`] removes the files the snapshot does not have (and the directories
//!    that leaves empty; never `.ninetrix/`), moves the staged bytes into place (a rename; a blob
//!    used by several files is copied first), sets each mode, fsyncs, then writes the marker
//!    `.ninetrix/restored` (temp + fsync + rename) and removes the staging directory. A parent
//!    component that is a symlink or a file is removed first: nothing is written through a link.
//!
//! A restore interrupted after step 1 is simply staged again: the plan is made from what the
//! workspace holds then.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use ninetrix_proto::snapshots::{FileEntry, Node, ObjectId, SnapshotRef, check_path};

use super::{MARKER, STAGING, SnapshotError, Snapshotter, blocking, faults, scan};
use crate::checkpoints::Checkpoints;

/// What a restore does to the workspace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Files whose bytes are put in place (absent, other bytes, or not a regular file now).
    pub write: Vec<FileEntry>,
    /// Files with the right bytes and another mode.
    pub chmod: Vec<FileEntry>,
    /// Entries the snapshot does not have, relative to the workspace.
    pub remove: Vec<PathBuf>,
}

impl Plan {
    /// Files written (bytes or mode).
    pub fn written(&self) -> u64 {
        (self.write.len() + self.chmod.len()) as u64
    }

    /// Entries removed.
    pub fn removed(&self) -> u64 {
        self.remove.len() as u64
    }
}

/// What makes a workspace holding `current` regular files (and `others`: symlinks, special
/// files) equal `snapshot`.
pub fn plan(snapshot: &[FileEntry], current: &[FileEntry], others: &[PathBuf]) -> Plan {
    let now: HashMap<&str, &FileEntry> = current.iter().map(|f| (f.path.as_str(), f)).collect();
    let wanted: HashSet<&str> = snapshot.iter().map(|f| f.path.as_str()).collect();
    let mut out = Plan::default();
    for f in snapshot {
        match now.get(f.path.as_str()) {
            Some(c) if c.blob == f.blob && c.mode == f.mode => {}
            Some(c) if c.blob == f.blob => out.chmod.push(f.clone()),
            _ => out.write.push(f.clone()),
        }
    }
    out.remove = current
        .iter()
        .filter(|c| !wanted.contains(c.path.as_str()))
        .map(|c| PathBuf::from(&c.path))
        .chain(
            others
                .iter()
                .filter(|o| o.to_str().is_none_or(|p| !wanted.contains(p)))
                .cloned(),
        )
        .collect();
    out.write.sort_by(|a, b| a.path.cmp(&b.path));
    out.chmod.sort_by(|a, b| a.path.cmp(&b.path));
    out.remove.sort();
    out
}

/// Checks a snapshot's files before anything is written: every path allowed, none twice, none
/// inside another file's path (`a` and `a/b`).
pub fn check_files(files: &[FileEntry]) -> Result<(), String> {
    let mut paths = HashSet::with_capacity(files.len());
    for f in files {
        check_path(&f.path).map_err(|e| e.to_string())?;
        if !paths.insert(f.path.as_str()) {
            return Err(format!("`{}` is in it twice", f.path));
        }
    }
    for f in files {
        let mut at = 0;
        while let Some(i) = f.path[at..].find('/') {
            let parent = &f.path[..at + i];
            if paths.contains(parent) {
                return Err(format!(
                    "`{parent}` is a file and a directory (`{}`)",
                    f.path
                ));
            }
            at += i + 1;
        }
    }
    Ok(())
}

/// A snapshot staged: applying it needs nothing from the store.
#[derive(Clone, Debug)]
pub struct Staged {
    /// The snapshot.
    pub snapshot: SnapshotRef,
    /// What applying it does.
    pub plan: Plan,
    dir: PathBuf,
}

impl Snapshotter {
    /// Stages `snapshot` (step 1).
    pub async fn stage<C: Checkpoints>(
        &self,
        store: &C,
        snapshot: &SnapshotRef,
    ) -> Result<Staged, SnapshotError> {
        let files = read_tree(store, &snapshot.root).await?;
        let me = self.clone();
        let dir = self.staging(&snapshot.root);
        let staging = dir.clone();
        let (plan, needed) = blocking(move || {
            let (found, current, _) = me.scan_and_hash(None)?;
            let plan = plan(&files, &current, &found.others);
            // A staging left by an interrupted restore is started over.
            let all = staging.parent().map(Path::to_path_buf).unwrap_or_default();
            match std::fs::remove_dir_all(&all) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(SnapshotError::io("cannot clear the staging directory", e)),
            }
            std::fs::create_dir_all(&staging)
                .map_err(|e| SnapshotError::io("cannot create the staging directory", e))?;
            let held: HashMap<&ObjectId, &str> =
                current.iter().map(|c| (&c.blob, c.path.as_str())).collect();
            let mut needed = Vec::new();
            let blobs: BTreeSet<&ObjectId> = plan.write.iter().map(|f| &f.blob).collect();
            for blob in blobs {
                let copied = held
                    .get(blob)
                    .is_some_and(|path| copy_local(&me.root.join(path), &staging, blob));
                if !copied {
                    needed.push(blob.clone());
                }
            }
            Ok((plan, needed))
        })
        .await?;
        for blob in needed {
            let bytes = store.get_object(&blob).await?;
            if ObjectId::of(&bytes) != blob {
                return Err(SnapshotError::Corrupt(format!(
                    "blob {blob} is not the SHA-256 of the bytes the store gave"
                )));
            }
            let to = dir.join(blob.as_str());
            blocking(move || {
                write_synced(&to, &bytes).map_err(|e| SnapshotError::io("cannot stage a file", e))
            })
            .await?;
        }
        Ok(Staged {
            snapshot: snapshot.clone(),
            plan,
            dir,
        })
    }

    /// Applies a staged snapshot (step 2): the workspace equals it and is marked with its root.
    pub async fn apply(&self, staged: Staged) -> Result<(), SnapshotError> {
        let staged = std::sync::Arc::new(staged);
        let half = staged.plan.write.len() / 2;
        let (root, s) = (self.root.clone(), staged.clone());
        blocking(move || {
            remove_all(&root, &s.plan.remove)?;
            write_files(&root, &s, 0..half)
        })
        .await?;
        faults::reached(faults::RESTORE_MIDWAY, &self.root).await;
        let (root, reserved) = (self.root.clone(), self.reserved());
        blocking(move || {
            write_files(&root, &staged, half..staged.plan.write.len())?;
            for f in &staged.plan.chmod {
                let path = root.join(&f.path);
                let meta = std::fs::symlink_metadata(&path)
                    .map_err(|e| SnapshotError::io(format!("cannot stat `{}`", f.path), e))?;
                if !meta.is_file() {
                    return Err(SnapshotError::Changed(format!(
                        "`{}` changed during the restore",
                        f.path
                    )));
                }
                set_mode(&path, f.mode)
                    .map_err(|e| SnapshotError::io(format!("cannot set `{}`'s mode", f.path), e))?;
            }
            sync_dirs(&root, &staged.plan)?;
            let tmp = reserved.join(format!("{MARKER}.tmp"));
            write_synced(&tmp, staged.snapshot.root.as_str().as_bytes())
                .and_then(|()| std::fs::rename(&tmp, reserved.join(MARKER)))
                .and_then(|()| sync_dir(&reserved))
                .map_err(|e| SnapshotError::io("cannot write the restore marker", e))?;
            let _ = std::fs::remove_dir_all(&staged.dir);
            let _ = std::fs::remove_dir(reserved.join(STAGING));
            Ok(())
        })
        .await
    }
}

/// Every file of the tree under `root`, read from the store, checked.
async fn read_tree<C: Checkpoints>(
    store: &C,
    root: &ObjectId,
) -> Result<Vec<FileEntry>, SnapshotError> {
    let mut files = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(id) = stack.pop() {
        let bytes = store.get_object(&id).await?;
        if ObjectId::of(&bytes) != id {
            return Err(SnapshotError::Corrupt(format!(
                "node {id} is not the SHA-256 of the bytes the store gave"
            )));
        }
        match Node::decode(&bytes).map_err(SnapshotError::Corrupt)? {
            Node::Leaf(f) => files.extend(f),
            Node::Branch(children) => stack.extend(children.into_iter().rev().map(|c| c.id)),
        }
    }
    check_files(&files).map_err(|why| {
        SnapshotError::Corrupt(format!("snapshot {root} cannot be restored: {why}"))
    })?;
    Ok(files)
}

/// Copies a workspace file into staging as `blob` if it still has those bytes.
fn copy_local(from: &Path, staging: &Path, blob: &ObjectId) -> bool {
    let to = staging.join(blob.as_str());
    let ok = std::fs::copy(from, &to).is_ok()
        && scan::hash_file(&to).is_ok_and(|(id, _)| id == *blob)
        && std::fs::File::open(&to).and_then(|f| f.sync_all()).is_ok();
    if !ok {
        let _ = std::fs::remove_file(&to);
    }
    ok
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o777))?;
    std::fs::File::open(path)?.sync_all()
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Removes `paths` (a directory among them with what it holds), then the directories that
/// leaves empty, deepest first.
fn remove_all(root: &Path, paths: &[PathBuf]) -> Result<(), SnapshotError> {
    let mut parents = BTreeSet::new();
    for rel in paths {
        let path = root.join(rel);
        let removed = match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        removed.map_err(|e| SnapshotError::io(format!("cannot remove `{}`", rel.display()), e))?;
        parents.extend(
            rel.ancestors()
                .skip(1)
                .filter(|a| !a.as_os_str().is_empty()),
        );
    }
    // A descendant sorts after its ancestors: in reverse, children go first.
    for dir in parents.iter().rev() {
        let _ = std::fs::remove_dir(root.join(dir));
    }
    Ok(())
}

/// Puts the staged bytes of `plan.write[range]` in place.
fn write_files(
    root: &Path,
    staged: &Staged,
    range: std::ops::Range<usize>,
) -> Result<(), SnapshotError> {
    let files = &staged.plan.write;
    for i in range {
        let f = &files[i];
        let io = |e| SnapshotError::io(format!("cannot write `{}`", f.path), e);
        make_parents(root, &f.path).map_err(io)?;
        let target = root.join(&f.path);
        if let Ok(meta) = std::fs::symlink_metadata(&target)
            && meta.is_dir()
        {
            std::fs::remove_dir_all(&target).map_err(io)?;
        }
        let source = staged.dir.join(f.blob.as_str());
        let used_later = files[i + 1..].iter().any(|g| g.blob == f.blob);
        let from = if used_later {
            let tmp = staged.dir.join(format!("tmp-{i}"));
            std::fs::copy(&source, &tmp).map_err(io)?;
            tmp
        } else {
            source
        };
        set_mode(&from, f.mode).map_err(io)?;
        std::fs::rename(&from, &target).map_err(io)?;
    }
    Ok(())
}

/// Creates the directories above `path`, replacing a component that is a file or a symlink.
fn make_parents(root: &Path, path: &str) -> std::io::Result<()> {
    let mut dir = root.to_path_buf();
    let parts: Vec<&str> = path.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => continue,
            Ok(_) => std::fs::remove_file(&dir)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        std::fs::create_dir(&dir)?;
    }
    Ok(())
}

/// Fsyncs the directories whose entries a restore changed.
fn sync_dirs(root: &Path, plan: &Plan) -> Result<(), SnapshotError> {
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
    dirs.insert(PathBuf::new());
    let paths = plan
        .write
        .iter()
        .map(|f| PathBuf::from(&f.path))
        .chain(plan.remove.iter().cloned());
    for p in paths {
        dirs.extend(p.ancestors().skip(1).map(Path::to_path_buf));
    }
    for d in dirs {
        match sync_dir(&root.join(&d)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(SnapshotError::io(
                    format!("cannot sync `{}`", d.display()),
                    e,
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, content: &str, mode: u32) -> FileEntry {
        FileEntry {
            path: path.into(),
            mode,
            size: content.len() as u64,
            blob: ObjectId::of(content.as_bytes()),
        }
    }

    #[test]
    fn the_plan_writes_what_differs_and_removes_what_the_snapshot_lacks() {
        let snapshot = [
            file("same", "1", 0o644),
            file("moded", "2", 0o755),
            file("changed", "new", 0o644),
            file("added", "4", 0o644),
            file("link", "5", 0o644),
        ];
        let current = [
            file("same", "1", 0o644),
            file("moded", "2", 0o644),
            file("changed", "old", 0o644),
            file("extra", "6", 0o644),
        ];
        let others = [PathBuf::from("link"), PathBuf::from("dangling")];
        let p = plan(&snapshot, &current, &others);
        let paths = |v: &[FileEntry]| v.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
        assert_eq!(paths(&p.write), ["added", "changed", "link"]);
        assert_eq!(paths(&p.chmod), ["moded"]);
        assert_eq!(
            p.remove,
            [PathBuf::from("dangling"), PathBuf::from("extra")]
        );
        assert_eq!((p.written(), p.removed()), (4, 2));
        assert_eq!(plan(&snapshot[..1], &current[..1], &[]), Plan::default());
    }

    #[test]
    fn a_snapshot_with_a_bad_path_or_a_file_over_a_directory_is_refused() {
        assert_eq!(check_files(&[file("a/b", "x", 0o644)]), Ok(()));
        for bad in [
            vec![file("../x", "x", 0o644)],
            vec![file(".ninetrix/restored", "x", 0o644)],
            vec![file("a", "x", 0o644), file("a", "y", 0o644)],
            vec![file("a", "x", 0o644), file("a/b", "y", 0o644)],
            vec![file("a/b/c", "y", 0o644), file("a/b", "x", 0o644)],
        ] {
            assert!(check_files(&bad).is_err(), "{bad:?}");
        }
    }
}
