//! Walking a workspace: its regular files (path, mode, size, and the stat that tells whether
//! one changed), what is left out, the limit decision of `execution.snapshots`
//! ([`verdict`], pure), and hashing with a cache of what this process hashed before ([`hash`]).
//!
//! Kept: regular files, and the directories on the way to them (an empty directory is not
//! kept). Left out and counted in `skipped_entries`: symlinks, sockets, FIFOs and devices, and
//! names a snapshot cannot hold (not UTF-8, or refused by [`check_path`]). Never looked at:
//! the top-level `.ninetrix/` and the names the caller excludes.
//!
//! The cache trusts a file whose (size, mtime in nanoseconds, inode) is what it was when this
//! process last hashed it, as `git status` does; a fresh runner hashes everything once.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use ninetrix_proto::snapshots::{FileEntry, MAX_OBJECT_BYTES, ObjectId, RESERVED_DIR, check_path};
use sha2::{Digest, Sha256};

use super::SnapshotError;

/// The bounds of one snapshot (`execution.snapshots`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most files (`max_files`).
    pub max_files: u64,
    /// Most bytes (`max_bytes`).
    pub max_bytes: u64,
}

/// What tells whether a file changed since it was hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    size: u64,
    mtime_ns: i128,
    ino: u64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            size: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ino: meta.ino(),
        }
    }
}

/// A regular file found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Its path relative to the workspace, `/`-separated.
    pub path: String,
    /// Its permission bits.
    pub mode: u32,
    /// Its size.
    pub size: u64,
    /// Its stat.
    pub stamp: Stamp,
}

/// A walk of the workspace.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// The regular files, in walk order.
    pub files: Vec<Found>,
    /// Entries that are neither (symlinks, special files, unrepresentable names), relative to
    /// the workspace: not kept in a snapshot, removed by a restore.
    pub others: Vec<PathBuf>,
}

/// The numbers the limits are judged on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Files.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The largest file and its size.
    pub largest: Option<(String, u64)>,
}

impl Scan {
    /// Its totals.
    pub fn totals(&self) -> Totals {
        let largest = self
            .files
            .iter()
            .max_by_key(|f| f.size)
            .map(|f| (f.path.clone(), f.size));
        Totals {
            files: self.files.len() as u64,
            bytes: self.files.iter().map(|f| f.size).sum(),
            largest,
        }
    }
}

/// Whether a workspace of `totals` may be snapshotted under `limits`; `Err` says why not:
/// the limit passed, the number found, and the key that raises it.
pub fn verdict(totals: &Totals, limits: &Limits) -> Result<(), String> {
    if totals.files > limits.max_files {
        return Err(format!(
            "the workspace has {} files, more than execution.snapshots.max_files: {} (raise it \
             to keep this workspace's files with its turns)",
            totals.files, limits.max_files
        ));
    }
    if totals.bytes > limits.max_bytes {
        return Err(format!(
            "the workspace holds {} bytes, more than execution.snapshots.max_bytes: {} (raise \
             it to keep this workspace's files with its turns)",
            totals.bytes, limits.max_bytes
        ));
    }
    if let Some((path, size)) = &totals.largest
        && *size > MAX_OBJECT_BYTES
    {
        return Err(format!(
            "`{path}` is {size} bytes, more than the {MAX_OBJECT_BYTES} one file of a snapshot \
             may have (a fixed limit: keep such files outside the workspace)"
        ));
    }
    Ok(())
}

/// Walks the workspace under `root`, skipping `.ninetrix/` and the top-level names in
/// `excluded`. A directory that cannot be read fails the walk.
pub fn walk(root: &Path, excluded: &[String]) -> Result<Scan, SnapshotError> {
    let mut scan = Scan::default();
    let mut dirs: Vec<(PathBuf, String)> = vec![(PathBuf::new(), String::new())];
    while let Some((rel, prefix)) = dirs.pop() {
        let dir = root.join(&rel);
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| SnapshotError::io(format!("cannot read `{}`", dir.display()), e))?;
        for entry in entries {
            let entry = entry
                .map_err(|e| SnapshotError::io(format!("cannot read `{}`", dir.display()), e))?;
            let name = entry.file_name();
            let rel_path = rel.join(&name);
            let Some(name) = name.to_str() else {
                scan.others.push(rel_path);
                continue;
            };
            if prefix.is_empty() && (name == RESERVED_DIR || excluded.iter().any(|x| x == name)) {
                continue;
            }
            let path = format!("{prefix}{name}");
            let meta = std::fs::symlink_metadata(entry.path())
                .map_err(|e| SnapshotError::io(format!("cannot stat `{path}`"), e))?;
            let kind = meta.file_type();
            if check_path(&path).is_err() {
                scan.others.push(rel_path);
            } else if kind.is_dir() {
                dirs.push((rel_path, format!("{path}/")));
            } else if kind.is_file() {
                scan.files.push(Found {
                    path,
                    mode: meta.mode() & 0o777,
                    size: meta.len(),
                    stamp: Stamp::of(&meta),
                });
            } else {
                scan.others.push(rel_path);
            }
        }
    }
    Ok(scan)
}

/// What this process hashed: each path's stat then and its blob.
#[derive(Clone, Debug, Default)]
pub struct HashCache(HashMap<String, (Stamp, ObjectId)>);

/// The entries of `files`, hashing those whose stat is not the one cached (and caching the
/// new hashes); also how many were hashed. A file that changes while it is read is hashed as
/// read; its stat is then not cached, so the next snapshot reads it again.
pub fn hash(
    root: &Path,
    files: &[Found],
    cache: &mut HashCache,
) -> Result<(Vec<FileEntry>, u64), SnapshotError> {
    let mut hashed = 0;
    let mut out = Vec::with_capacity(files.len());
    let mut seen = HashMap::with_capacity(files.len());
    for f in files {
        let blob = match cache.0.get(&f.path) {
            Some((stamp, blob)) if *stamp == f.stamp => blob.clone(),
            _ => {
                hashed += 1;
                let (blob, size) = hash_file(&root.join(&f.path))
                    .map_err(|e| SnapshotError::io(format!("cannot read `{}`", f.path), e))?;
                if size == f.size {
                    seen.insert(f.path.clone(), (f.stamp, blob.clone()));
                }
                out.push(FileEntry {
                    path: f.path.clone(),
                    mode: f.mode,
                    size,
                    blob,
                });
                continue;
            }
        };
        seen.insert(f.path.clone(), (f.stamp, blob.clone()));
        out.push(FileEntry {
            path: f.path.clone(),
            mode: f.mode,
            size: f.size,
            blob,
        });
    }
    // Files gone since are forgotten.
    cache.0 = seen;
    Ok((out, hashed))
}

/// The blob ID and length of a file's bytes, read in pieces.
pub fn hash_file(path: &Path) -> std::io::Result<(ObjectId, u64)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut len = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        len += n as u64;
        hasher.update(&buf[..n]);
    }
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let id = hex.parse().map_err(|e: String| std::io::Error::other(e))?;
    Ok((id, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_files: 3,
            max_bytes: 100,
        }
    }

    #[test]
    fn the_verdict_names_the_limit_the_number_and_the_key() {
        let ok = Totals {
            files: 3,
            bytes: 100,
            largest: Some(("a".into(), 50)),
        };
        assert_eq!(verdict(&ok, &limits()), Ok(()));
        let many = Totals {
            files: 4,
            ..ok.clone()
        };
        let why = verdict(&many, &limits()).unwrap_err();
        assert!(
            why.contains("4 files") && why.contains("execution.snapshots.max_files: 3"),
            "{why}"
        );
        let big = Totals {
            bytes: 101,
            ..ok.clone()
        };
        let why = verdict(&big, &limits()).unwrap_err();
        assert!(
            why.contains("101 bytes") && why.contains("execution.snapshots.max_bytes: 100"),
            "{why}"
        );
        let huge = Totals {
            files: 1,
            bytes: MAX_OBJECT_BYTES + 1,
            largest: Some(("big.bin".into(), MAX_OBJECT_BYTES + 1)),
        };
        let roomy = Limits {
            max_files: 10,
            max_bytes: u64::MAX,
        };
        let why = verdict(&huge, &roomy).unwrap_err();
        assert!(why.contains("`big.bin`"), "{why}");
    }

    #[test]
    fn a_walk_keeps_regular_files_and_counts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/deep")).unwrap();
        std::fs::create_dir_all(root.join(".ninetrix/staging")).unwrap();
        std::fs::create_dir_all(root.join("sessions/x")).unwrap();
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        std::fs::write(root.join("src/deep/b.rs"), "bb").unwrap();
        std::fs::write(root.join(".ninetrix/restored"), "x").unwrap();
        std::fs::write(root.join("sessions/x/s"), "s").unwrap();
        std::fs::write(root.join("back\\slash"), "s").unwrap();
        std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
        let scan = walk(root, &["sessions".to_string()]).unwrap();
        let mut paths: Vec<_> = scan.files.iter().map(|f| f.path.as_str()).collect();
        paths.sort();
        assert_eq!(paths, ["a.txt", "src/deep/b.rs"]);
        let mut others = scan.others.clone();
        others.sort();
        assert_eq!(
            others,
            [PathBuf::from("back\\slash"), PathBuf::from("link")]
        );
        assert_eq!(scan.totals().bytes, 3);
    }

    #[test]
    fn only_files_whose_stat_changed_are_hashed_again() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("a"), "one").unwrap();
        std::fs::write(root.join("b"), "two").unwrap();
        let mut cache = HashCache::default();
        let (entries, hashed) = hash(root, &walk(root, &[]).unwrap().files, &mut cache).unwrap();
        assert_eq!((entries.len(), hashed), (2, 2));
        let (_, hashed) = hash(root, &walk(root, &[]).unwrap().files, &mut cache).unwrap();
        assert_eq!(hashed, 0, "nothing changed");
        std::fs::write(root.join("b"), "three").unwrap();
        let (entries, hashed) = hash(root, &walk(root, &[]).unwrap().files, &mut cache).unwrap();
        assert_eq!(hashed, 1);
        let b = entries.iter().find(|e| e.path == "b").unwrap();
        assert_eq!(b.blob, ObjectId::of(b"three"));
        assert_eq!(b.size, 5);
    }
}
