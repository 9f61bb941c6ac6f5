//! Workspace snapshots (issue 41): what a thread's files were at the end of a turn, stored as
//! content-addressed objects so that a file is stored once across every snapshot of a pool.
//!
//! A snapshot is a small tree of objects, each named by the SHA-256 of its bytes ([`ObjectId`]):
//! - a **blob** is one file's bytes;
//! - a **node** is JSON ([`Node`]): a *leaf* lists files (path, mode, size, blob), a *branch*
//!   lists the nodes below it with the first path each covers.
//!
//! The tree's shape depends only on the paths ([`build`]): a leaf ends after a path whose hash
//! falls on a boundary (one path in [`FANOUT`] on average), a branch likewise after a child whose
//! first path does. So a change to one file's content rewrites its blob, its leaf and the nodes
//! above it — a few kilobytes for a workspace of ten thousand files — and every other node of the
//! previous snapshot is reused as it is. [`diff`] walks two trees and skips every subtree the two
//! share. Both sides use these functions: the runner builds, uploads and restores; the API stores,
//! counts references and diffs. Nothing here does I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// Entries per leaf, and children per branch, on average.
pub const FANOUT: u32 = 32;

/// The largest object (one file) a snapshot stores: 32 MiB. A larger file makes the snapshot of
/// its turn skip, saying which file.
pub const MAX_OBJECT_BYTES: u64 = 32 * 1024 * 1024;

/// The most object IDs one `objects/missing` request may ask about.
pub const MAX_IDS_PER_REQUEST: usize = 10_000;

/// The longest path kept (bytes).
pub const MAX_PATH: usize = 4096;

/// The directory of a workspace that ninetrix keeps for itself (staging, the restore marker):
/// never snapshotted, never restored over.
pub const RESERVED_DIR: &str = ".ninetrix";

/// An object's name: the lowercase hex SHA-256 of its bytes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(try_from = "String", into = "String")]
#[cfg_attr(
    feature = "openapi",
    schema(value_type = String, pattern = "^[0-9a-f]{64}$")
)]
pub struct ObjectId(String);

impl ObjectId {
    /// The ID of `bytes`.
    pub fn of(bytes: &[u8]) -> ObjectId {
        ObjectId(hex(&Sha256::digest(bytes)))
    }

    /// The hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 characters, for people.
    pub fn short(&self) -> &str {
        &self.0[..12]
    }
}

impl std::fmt::Display for ObjectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for ObjectId {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        if s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(ObjectId(s))
        } else {
            Err(format!(
                "`{}` is not an object ID (64 lowercase hex characters, a SHA-256)",
                crate::text::preview(&s, 80)
            ))
        }
    }
}

impl std::str::FromStr for ObjectId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ObjectId::try_from(s.to_string())
    }
}

impl From<ObjectId> for String {
    fn from(id: ObjectId) -> String {
        id.0
    }
}

/// What an object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ObjectKind {
    /// A file's bytes.
    Blob,
    /// A tree node ([`Node`], JSON).
    Node,
}

impl ObjectKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Blob => "blob",
            ObjectKind::Node => "node",
        }
    }

    /// The kind of a wire name.
    pub fn parse(s: &str) -> Option<ObjectKind> {
        match s {
            "blob" => Some(ObjectKind::Blob),
            "node" => Some(ObjectKind::Node),
            _ => None,
        }
    }
}

/// One file of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct FileEntry {
    /// Its path relative to the workspace, `/`-separated ([`check_path`]).
    pub path: String,
    /// Its permission bits (`0o644`, `0o755`, …).
    pub mode: u32,
    /// Its size in bytes.
    pub size: u64,
    /// Its bytes.
    pub blob: ObjectId,
}

/// A node below a branch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Child {
    /// The node.
    pub id: ObjectId,
    /// The first path it covers.
    pub first: String,
    /// Files below it.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A tree node, stored as its JSON ([`Node::encode`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Node {
    /// Files, in path order.
    Leaf(Vec<FileEntry>),
    /// Nodes, in path order.
    Branch(Vec<Child>),
}

impl Node {
    /// The stored bytes (deterministic: the same node always encodes the same).
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a node always encodes")
    }

    /// A node read back from its bytes.
    pub fn decode(bytes: &[u8]) -> Result<Node, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("not a snapshot node: {e}"))
    }

    /// The objects this node refers to: its files' blobs, or its children.
    pub fn refs(&self) -> Vec<&ObjectId> {
        match self {
            Node::Leaf(files) => files.iter().map(|f| &f.blob).collect(),
            Node::Branch(children) => children.iter().map(|c| &c.id).collect(),
        }
    }

    fn totals(&self) -> (u64, u64) {
        match self {
            Node::Leaf(files) => (files.len() as u64, files.iter().map(|f| f.size).sum()),
            Node::Branch(children) => (
                children.iter().map(|c| c.files).sum(),
                children.iter().map(|c| c.bytes).sum(),
            ),
        }
    }
}

/// A snapshot: its root node and what it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SnapshotRef {
    /// The root node.
    pub root: ObjectId,
    /// Files in it.
    #[serde(deserialize_with = "crate::api::int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub files: u64,
    /// Their bytes.
    #[serde(deserialize_with = "crate::api::int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub bytes: u64,
}

/// A tree built by [`build`]: its root and every node, each with its bytes, leaves first (the
/// order an upload needs: a node's children exist before it does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    /// The snapshot.
    pub snapshot: SnapshotRef,
    /// Every node (deduplicated), children before parents.
    pub nodes: Vec<(ObjectId, Vec<u8>)>,
}

/// Why a path cannot be in a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Empty, absolute, with an empty, `.` or `..` component, a backslash or a NUL.
    #[error("`{0}` is not a relative path inside the workspace")]
    NotRelative(String),
    /// Inside [`RESERVED_DIR`].
    #[error("`{0}` is inside `.ninetrix/`, which ninetrix keeps for itself")]
    Reserved(String),
    /// Longer than [`MAX_PATH`].
    #[error("a path of {0} bytes is longer than {MAX_PATH}")]
    TooLong(usize),
}

/// Checks that `path` may be a snapshot's file: relative, `/`-separated, no `.`/`..`/empty
/// component, no backslash or NUL, not under [`RESERVED_DIR`], at most [`MAX_PATH`] bytes. The
/// restorer relies on this: a node naming `../x` is refused, never written outside.
pub fn check_path(path: &str) -> Result<(), PathError> {
    if path.len() > MAX_PATH {
        return Err(PathError::TooLong(path.len()));
    }
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.contains('\\')
        || path.contains('\0')
        || path
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        return Err(PathError::NotRelative(crate::text::preview(path, 200)));
    }
    if path == RESERVED_DIR || path.starts_with(&format!("{RESERVED_DIR}/")) {
        return Err(PathError::Reserved(crate::text::preview(path, 200)));
    }
    Ok(())
}

/// Whether `key` ends a node: its hash falls on one value in [`FANOUT`].
fn boundary(key: &str) -> bool {
    let h = Sha256::digest(key.as_bytes());
    u32::from_le_bytes([h[0], h[1], h[2], h[3]]) % FANOUT == 0
}

/// Builds the tree of `files` (any order; a path given twice keeps the last). The empty
/// workspace is one empty leaf.
pub fn build(files: Vec<FileEntry>) -> Tree {
    let files: BTreeMap<String, FileEntry> =
        files.into_iter().map(|f| (f.path.clone(), f)).collect();
    let mut nodes: Vec<(ObjectId, Vec<u8>)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut push = |node: &Node| -> Child {
        let bytes = node.encode();
        let id = ObjectId::of(&bytes);
        let (files, size) = node.totals();
        let first = match node {
            Node::Leaf(f) => f.first().map(|f| f.path.clone()),
            Node::Branch(c) => c.first().map(|c| c.first.clone()),
        }
        .unwrap_or_default();
        if seen.insert(id.clone()) {
            nodes.push((id.clone(), bytes));
        }
        Child {
            id,
            first,
            files,
            bytes: size,
        }
    };
    // Leaves.
    let mut level: Vec<Child> = Vec::new();
    let mut leaf: Vec<FileEntry> = Vec::new();
    for (path, entry) in files {
        let end = boundary(&path);
        leaf.push(entry);
        if end {
            level.push(push(&Node::Leaf(std::mem::take(&mut leaf))));
        }
    }
    if !leaf.is_empty() || level.is_empty() {
        level.push(push(&Node::Leaf(leaf)));
    }
    // Branches, until one node is left.
    while level.len() > 1 {
        let mut next = Vec::new();
        let mut branch: Vec<Child> = Vec::new();
        for child in level {
            let end = boundary(&format!("branch:{}", child.first));
            branch.push(child);
            if end && branch.len() > 1 {
                next.push(push(&Node::Branch(std::mem::take(&mut branch))));
            }
        }
        if !branch.is_empty() {
            next.push(push(&Node::Branch(branch)));
        }
        // Every branch but the last has two children or more, so each level is at most half
        // the one below (rounded up) and the loop ends.
        level = next;
    }
    let root = level.pop().expect("one node is left");
    Tree {
        snapshot: SnapshotRef {
            root: root.id,
            files: root.files,
            bytes: root.bytes,
        },
        nodes,
    }
}

/// How a file differs between two snapshots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// Only in the second.
    Added,
    /// In both, with other bytes or another mode.
    Modified,
    /// Only in the first.
    Removed,
}

/// One file that differs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct FileChange {
    /// The file.
    pub path: String,
    /// How.
    pub kind: ChangeKind,
    /// Its size before (`None` when added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_before: Option<u64>,
    /// Its size after (`None` when removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_after: Option<u64>,
}

/// Every file of the tree under `root`, in path order, reading nodes with `load`.
pub fn files<E>(
    root: &ObjectId,
    load: &mut impl FnMut(&ObjectId) -> Result<Node, E>,
) -> Result<Vec<FileEntry>, E> {
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(id) = stack.pop() {
        match load(&id)? {
            Node::Leaf(files) => out.extend(files),
            Node::Branch(children) => stack.extend(children.into_iter().rev().map(|c| c.id)),
        }
    }
    Ok(out)
}

/// The files that differ from `before` (none: the empty workspace) to `after`, in path order.
/// Subtrees the two trees share are skipped without being read.
pub fn diff<E>(
    before: Option<&ObjectId>,
    after: &ObjectId,
    load: &mut impl FnMut(&ObjectId) -> Result<Node, E>,
) -> Result<Vec<FileChange>, E> {
    if before == Some(after) {
        return Ok(Vec::new());
    }
    // The leaves of each side that the other does not share, expanded; shared subtrees (equal
    // IDs at any level) drop out.
    let mut a: Vec<FileEntry> = Vec::new();
    let mut b: Vec<FileEntry> = Vec::new();
    let mut pending_a: Vec<ObjectId> = before.into_iter().cloned().collect();
    let mut pending_b: Vec<ObjectId> = vec![after.clone()];
    while !pending_a.is_empty() || !pending_b.is_empty() {
        let ids_a: std::collections::HashSet<ObjectId> = pending_a.iter().cloned().collect();
        let ids_b: std::collections::HashSet<ObjectId> = pending_b.iter().cloned().collect();
        let mut next_a = Vec::new();
        let mut next_b = Vec::new();
        for id in pending_a.drain(..) {
            if ids_b.contains(&id) {
                continue;
            }
            match load(&id)? {
                Node::Leaf(files) => a.extend(files),
                Node::Branch(children) => next_a.extend(children.into_iter().map(|c| c.id)),
            }
        }
        for id in pending_b.drain(..) {
            if ids_a.contains(&id) {
                continue;
            }
            match load(&id)? {
                Node::Leaf(files) => b.extend(files),
                Node::Branch(children) => next_b.extend(children.into_iter().map(|c| c.id)),
            }
        }
        pending_a = next_a;
        pending_b = next_b;
    }
    let a: BTreeMap<String, FileEntry> = a.into_iter().map(|f| (f.path.clone(), f)).collect();
    let mut b: BTreeMap<String, FileEntry> = b.into_iter().map(|f| (f.path.clone(), f)).collect();
    let mut out = Vec::new();
    for (path, old) in a {
        match b.remove(&path) {
            Some(new) if new.blob == old.blob && new.mode == old.mode => {}
            Some(new) => out.push(FileChange {
                path,
                kind: ChangeKind::Modified,
                size_before: Some(old.size),
                size_after: Some(new.size),
            }),
            None => out.push(FileChange {
                path,
                kind: ChangeKind::Removed,
                size_before: Some(old.size),
                size_after: None,
            }),
        }
    }
    out.extend(b.into_values().map(|new| FileChange {
        path: new.path,
        kind: ChangeKind::Added,
        size_before: None,
        size_after: Some(new.size),
    }));
    out.sort_by(|x, y| x.path.cmp(&y.path));
    Ok(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn file(path: &str, content: &str) -> FileEntry {
        FileEntry {
            path: path.into(),
            mode: 0o644,
            size: content.len() as u64,
            blob: ObjectId::of(content.as_bytes()),
        }
    }

    fn store(trees: &[&Tree]) -> HashMap<ObjectId, Node> {
        trees
            .iter()
            .flat_map(|t| t.nodes.iter())
            .map(|(id, b)| (id.clone(), Node::decode(b).unwrap()))
            .collect()
    }

    fn workspace(n: usize) -> Vec<FileEntry> {
        (0..n)
            .map(|i| file(&format!("dir{}/f{i}.txt", i % 7), &format!("content {i}")))
            .collect()
    }

    #[test]
    fn ids_are_the_sha256_of_the_bytes_and_parse_only_hex() {
        let id = ObjectId::of(b"abc");
        assert_eq!(
            id.as_str(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!("ABC".parse::<ObjectId>().is_err());
        assert!(id.as_str().to_uppercase().parse::<ObjectId>().is_err());
        assert_eq!(id.as_str().parse::<ObjectId>().unwrap(), id);
    }

    #[test]
    fn a_tree_holds_every_file_and_its_totals() {
        let tree = build(workspace(1000));
        assert_eq!(tree.snapshot.files, 1000);
        let nodes = store(&[&tree]);
        let mut load = |id: &ObjectId| nodes.get(id).cloned().ok_or(());
        let files = files(&tree.snapshot.root, &mut load).unwrap();
        assert_eq!(files.len(), 1000);
        assert!(files.windows(2).all(|w| w[0].path < w[1].path));
        // Children before parents: the root is last.
        assert_eq!(tree.nodes.last().unwrap().0, tree.snapshot.root);
        assert!(tree.nodes.len() > 1000 / FANOUT as usize / 2);
    }

    #[test]
    fn the_empty_workspace_is_one_empty_leaf() {
        let tree = build(Vec::new());
        assert_eq!(tree.nodes.len(), 1);
        assert_eq!(tree.snapshot.files, 0);
    }

    #[test]
    fn one_changed_file_rewrites_only_the_nodes_above_it() {
        let mut files = workspace(10_000);
        let before = build(files.clone());
        files[4321] = file(&files[4321].path.clone(), "changed");
        let after = build(files);
        let old: std::collections::HashSet<_> = before.nodes.iter().map(|n| &n.0).collect();
        let new: Vec<_> = after.nodes.iter().filter(|n| !old.contains(&n.0)).collect();
        let bytes: usize = new.iter().map(|n| n.1.len()).sum();
        assert!(new.len() <= 4, "{} new nodes", new.len());
        assert!(bytes < 16 * 1024, "{bytes} new bytes");
        let nodes = store(&[&before, &after]);
        let mut load = |id: &ObjectId| nodes.get(id).cloned().ok_or(());
        let changes = diff(Some(&before.snapshot.root), &after.snapshot.root, &mut load).unwrap();
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].kind, ChangeKind::Modified);
        assert_eq!(changes[0].path, "dir2/f4321.txt");
    }

    #[test]
    fn diff_names_added_removed_and_modified_files() {
        let before = build(vec![file("a", "1"), file("b", "2"), file("c", "3")]);
        let mut moded = file("c", "3");
        moded.mode = 0o755;
        let after = build(vec![file("b", "22"), moded, file("d", "4")]);
        let nodes = store(&[&before, &after]);
        let mut load = |id: &ObjectId| nodes.get(id).cloned().ok_or(());
        let changes = diff(Some(&before.snapshot.root), &after.snapshot.root, &mut load).unwrap();
        let kinds: Vec<_> = changes.iter().map(|c| (c.path.as_str(), c.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("a", ChangeKind::Removed),
                ("b", ChangeKind::Modified),
                ("c", ChangeKind::Modified),
                ("d", ChangeKind::Added)
            ]
        );
        let all = diff(None, &after.snapshot.root, &mut load).unwrap();
        assert!(all.iter().all(|c| c.kind == ChangeKind::Added));
        assert_eq!(all.len(), 3);
    }

    #[test]
    fn paths_outside_the_workspace_or_in_the_reserved_dir_are_refused() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "a//b",
            "./a",
            "a\\b",
            "a\0b",
            ".ninetrix",
            ".ninetrix/marker",
        ] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
        for good in ["a", "a/b.txt", ".git/config", ".ninetrixx", "dir/.ninetrix"] {
            assert_eq!(check_path(good), Ok(()), "{good:?}");
        }
        assert!(check_path(&"a".repeat(MAX_PATH + 1)).is_err());
    }
}
