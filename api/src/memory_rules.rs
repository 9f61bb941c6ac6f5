//! The memory tool's commands as pure functions: given one memory's files (path → content) and a
//! command, the answer the model sees (Anthropic's memory tool's wording) and the changes to
//! store — or a refusal, which changes nothing. The limits (a file's size, a memory's bytes and
//! files) are checked on the memory as the changes would leave it. The store runs this inside
//! the transaction that holds the memory's lock (`store/ops/memory.rs`); nothing here does I/O.
//!
//! Directories are not stored: a directory is a path some file is under, and `/memories` always
//! is one. Deleting a directory's last file leaves no empty directory behind.

use std::collections::BTreeMap;

use ninetrix_proto::api::{
    MAX_MEMORY_BYTES, MAX_MEMORY_FILE_BYTES, MAX_MEMORY_FILES, MEMORY_ROOT, MemoryCommand,
    memory_path,
};

/// One memory's files: path → content.
pub type Files = BTreeMap<String, String>;

/// A change to store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The file now has this content (created or overwritten).
    Put {
        /// The file.
        path: String,
        /// Its content.
        content: String,
    },
    /// The file is gone.
    Delete {
        /// The file.
        path: String,
    },
}

/// Why a command changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A path that is not a memory path (or not one this command takes).
    Path,
    /// Nothing at the path.
    NotFound,
    /// The memory's limits.
    Limit,
    /// Anything else: an edit that does not fit the file (`old_str` not once, a line out of
    /// range), a directory where a file is needed, a destination that exists.
    Edit,
}

/// What a command did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The text the model sees.
    pub text: String,
    /// Why it changed nothing, when it failed.
    pub refusal: Option<Refusal>,
    /// What to store (none when it failed, or for `view`).
    pub changes: Vec<Change>,
}

impl Outcome {
    /// Whether the command failed.
    pub fn is_error(&self) -> bool {
        self.refusal.is_some()
    }
}

/// A failure: why, and the text the model sees.
type Refused = (Refusal, String);

/// Lines of a file around an edit that its answer shows.
const SNIPPET_LINES: usize = 4;

/// Runs `command` on `files`.
pub fn apply(files: &Files, command: &MemoryCommand) -> Outcome {
    let done = match command {
        MemoryCommand::View { path, view_range } => {
            view(files, path, *view_range).map(|text| (text, Vec::new()))
        }
        MemoryCommand::Create { path, file_text } => create(files, path, file_text),
        MemoryCommand::StrReplace {
            path,
            old_str,
            new_str,
        } => str_replace(files, path, old_str, new_str),
        MemoryCommand::Insert {
            path,
            insert_line,
            insert_text,
        } => insert(files, path, *insert_line, insert_text),
        MemoryCommand::Delete { path } => delete(files, path),
        MemoryCommand::Rename { old_path, new_path } => rename(files, old_path, new_path),
    };
    match done.and_then(|(text, changes)| within_limits(files, &changes).map(|()| (text, changes)))
    {
        Ok((text, changes)) => Outcome {
            text,
            refusal: None,
            changes,
        },
        Err((refusal, text)) => Outcome {
            text,
            refusal: Some(refusal),
            changes: Vec::new(),
        },
    }
}

/// What is at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Missing,
}

fn kind(files: &Files, path: &str) -> Kind {
    if files.contains_key(path) {
        Kind::File
    } else if path == MEMORY_ROOT || under(files, path).next().is_some() {
        Kind::Dir
    } else {
        Kind::Missing
    }
}

/// The files under directory `dir`, with their contents.
fn under<'a>(files: &'a Files, dir: &str) -> impl Iterator<Item = (&'a String, &'a String)> {
    let prefix = format!("{dir}/");
    files
        .range(prefix.clone()..)
        .take_while(move |(p, _)| p.starts_with(&prefix))
}

/// A path in canonical form, or the refusal naming it.
fn canonical(raw: &str) -> Result<String, Refused> {
    memory_path(raw).map_err(|e| (Refusal::Path, e.0))
}

/// A path that names a file to write: canonical, not `/memories`, not a directory, and with no
/// file among its parents.
fn file_target(files: &Files, raw: &str, what: &str) -> Result<String, Refused> {
    let path = canonical(raw)?;
    if path == MEMORY_ROOT {
        return Err((
            Refusal::Path,
            format!(
                "Error: {MEMORY_ROOT} is the memory directory itself; {what} a file under it, such as {MEMORY_ROOT}/notes.md"
            ),
        ));
    }
    if kind(files, &path) == Kind::Dir {
        return Err((
            Refusal::Edit,
            format!("Error: {path} is a directory; {what} a file"),
        ));
    }
    let mut parent = path.as_str();
    while let Some((up, _)) = parent.rsplit_once('/') {
        if up == MEMORY_ROOT || up.is_empty() {
            break;
        }
        if files.contains_key(up) {
            return Err((
                Refusal::Edit,
                format!("Error: {up} is a file, so {path} cannot be under it"),
            ));
        }
        parent = up;
    }
    Ok(path)
}

/// The content of an existing file, or why not.
fn existing<'a>(files: &'a Files, raw: &str, what: &str) -> Result<(String, &'a str), Refused> {
    let path = canonical(raw)?;
    match (kind(files, &path), files.get(&path)) {
        (Kind::File, Some(content)) => Ok((path, content)),
        (Kind::Dir, _) => Err((
            Refusal::Edit,
            format!("Error: {path} is a directory; {what} edits a file"),
        )),
        _ => Err((
            Refusal::NotFound,
            format!("Error: The path {path} does not exist. Please provide a valid path."),
        )),
    }
}

/// Text a memory file may hold: no U+0000.
fn storable(text: &str, field: &str) -> Result<(), Refused> {
    if text.contains('\0') {
        return Err((
            Refusal::Edit,
            format!("Error: `{field}` contains U+0000 (NUL), which a memory file cannot hold"),
        ));
    }
    Ok(())
}

/// A file's lines: none for an empty file; a final newline ends the last line, it does not
/// start another.
fn lines(content: &str) -> Vec<&str> {
    if content.is_empty() {
        return Vec::new();
    }
    content
        .strip_suffix('\n')
        .unwrap_or(content)
        .split('\n')
        .collect()
}

/// Lines `first..=last` (1-based) numbered as `cat -n` does.
fn numbered(all: &[&str], first: usize, last: usize) -> String {
    let mut out = String::new();
    for (i, line) in all
        .iter()
        .enumerate()
        .take(last)
        .skip(first.saturating_sub(1))
    {
        out.push_str(&format!("{:>6}\t{line}\n", i + 1));
    }
    out
}

/// `du -h`'s way of writing a size: bytes, then K and M with one decimal.
fn human(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => b.to_string(),
        b if b < 1024 * 1024 => format!("{:.1}K", b as f64 / 1024.0),
        b => format!("{:.1}M", b as f64 / (1024.0 * 1024.0)),
    }
}

fn view(files: &Files, raw: &str, range: Option<[i64; 2]>) -> Result<String, Refused> {
    let path = canonical(raw)?;
    match kind(files, &path) {
        Kind::Missing => Err((
            Refusal::NotFound,
            format!("The path {path} does not exist. Please provide a valid path."),
        )),
        Kind::Dir => {
            // Each entry up to two levels below `path`, with the bytes of the files under it.
            let mut sizes: BTreeMap<String, u64> = BTreeMap::new();
            let mut total = 0u64;
            let entries: Box<dyn Iterator<Item = (&String, &String)>> = if path == MEMORY_ROOT {
                Box::new(files.iter())
            } else {
                Box::new(under(files, &path))
            };
            for (file, content) in entries {
                let size = content.len() as u64;
                total += size;
                let rel = &file[path.len() + 1..];
                let names: Vec<&str> = rel.split('/').collect();
                if names
                    .iter()
                    .any(|n| n.starts_with('.') || *n == "node_modules")
                {
                    continue;
                }
                for depth in 1..=names.len().min(2) {
                    let entry = format!("{path}/{}", names[..depth].join("/"));
                    *sizes.entry(entry).or_default() += size;
                }
            }
            let mut text = format!(
                "Here're the files and directories up to 2 levels deep in {path}, excluding hidden items and node_modules:\n{}\t{path}",
                human(total)
            );
            for (entry, size) in sizes {
                text.push_str(&format!("\n{}\t{entry}", human(size)));
            }
            Ok(text)
        }
        Kind::File => {
            let content = &files[&path];
            let all = lines(content);
            let n = all.len();
            let (first, last) = match range {
                None => (1, n),
                Some([first, last]) => {
                    let bad = |why: String| {
                        (
                            Refusal::Edit,
                            format!(
                                "Error: Invalid `view_range` parameter: [{first}, {last}]. {why}"
                            ),
                        )
                    };
                    let first_ok = usize::try_from(first)
                        .ok()
                        .filter(|f| *f >= 1 && *f <= n.max(1));
                    let Some(first) = first_ok else {
                        return Err(bad(format!(
                            "Its first element {first} should be within the range of lines of the file: [1, {n}]"
                        )));
                    };
                    let last = match last {
                        -1 => n,
                        l => match usize::try_from(l).ok().filter(|l| *l >= first && *l <= n) {
                            Some(l) => l,
                            None => {
                                return Err(bad(format!(
                                    "Its second element {l} should be -1 (to the end) or within [{first}, {n}]"
                                )));
                            }
                        },
                    };
                    (first, last)
                }
            };
            Ok(format!(
                "Here's the content of {path} with line numbers:\n{}",
                numbered(&all, first, last)
            ))
        }
    }
}

fn create(files: &Files, raw: &str, text: &str) -> Result<(String, Vec<Change>), Refused> {
    let path = file_target(files, raw, "create")?;
    storable(text, "file_text")?;
    let answer = if files.contains_key(&path) {
        format!("File {path} has been overwritten.")
    } else {
        format!("File created successfully at: {path}")
    };
    Ok((
        answer,
        vec![Change::Put {
            path,
            content: text.to_string(),
        }],
    ))
}

/// The answer of an edit: the file's lines around `first..=last` (1-based).
fn edited(head: &str, path: &str, content: &str, first: usize, last: usize) -> String {
    let all = lines(content);
    let from = first.saturating_sub(SNIPPET_LINES).max(1);
    let to = (last + SNIPPET_LINES).min(all.len());
    format!(
        "{head} Here's the result of running `cat -n` on a snippet of {path}:\n{}",
        numbered(&all, from, to)
    )
}

fn str_replace(
    files: &Files,
    raw: &str,
    old: &str,
    new: &str,
) -> Result<(String, Vec<Change>), Refused> {
    let (path, content) = existing(files, raw, "str_replace")?;
    if old.is_empty() {
        return Err((
            Refusal::Edit,
            format!(
                "Error: `old_str` is empty; give the text to replace, which must occur exactly once in {path}"
            ),
        ));
    }
    storable(new, "new_str")?;
    let at: Vec<usize> = content.match_indices(old).map(|(i, _)| i).collect();
    let line_of = |i: usize| content[..i].matches('\n').count() + 1;
    match at.as_slice() {
        [] => Err((
            Refusal::Edit,
            format!(
                "No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
            ),
        )),
        [i] => {
            let updated = format!("{}{new}{}", &content[..*i], &content[i + old.len()..]);
            let first = line_of(*i);
            let last = first + new.matches('\n').count();
            Ok((
                edited(
                    "The memory file has been edited.",
                    &path,
                    &updated,
                    first,
                    last,
                ),
                vec![Change::Put {
                    path,
                    content: updated,
                }],
            ))
        }
        many => {
            let lines: Vec<String> = many.iter().map(|i| line_of(*i).to_string()).collect();
            Err((
                Refusal::Edit,
                format!(
                    "No replacement was performed. old_str `{old}` occurs {} times in {path}, in lines: {}. Please ensure it is unique",
                    many.len(),
                    lines.join(", ")
                ),
            ))
        }
    }
}

fn insert(
    files: &Files,
    raw: &str,
    after: u64,
    text: &str,
) -> Result<(String, Vec<Change>), Refused> {
    let (path, content) = existing(files, raw, "insert")?;
    storable(text, "insert_text")?;
    let all = lines(content);
    let n = all.len();
    let Some(at) = usize::try_from(after).ok().filter(|a| *a <= n) else {
        return Err((
            Refusal::Edit,
            format!(
                "Error: Invalid `insert_line` parameter: {after}. It should be within the range of lines of the file: [0, {n}]"
            ),
        ));
    };
    let added = lines(text);
    let mut out: Vec<&str> = Vec::with_capacity(n + added.len());
    out.extend_from_slice(&all[..at]);
    out.extend_from_slice(&added);
    out.extend_from_slice(&all[at..]);
    let mut updated = out.join("\n");
    if !updated.is_empty() && (content.ends_with('\n') || content.is_empty()) {
        updated.push('\n');
    }
    let head = format!("The file {path} has been edited.");
    let answer = edited(&head, &path, &updated, at + 1, at + added.len());
    Ok((
        answer,
        vec![Change::Put {
            path,
            content: updated,
        }],
    ))
}

fn delete(files: &Files, raw: &str) -> Result<(String, Vec<Change>), Refused> {
    let path = canonical(raw)?;
    let changes: Vec<Change> = match kind(files, &path) {
        _ if path == MEMORY_ROOT => {
            return Err((
                Refusal::Path,
                format!(
                    "Error: Cannot delete the {MEMORY_ROOT} directory itself; delete the files or directories under it"
                ),
            ));
        }
        Kind::Missing => {
            return Err((
                Refusal::NotFound,
                format!("Error: The path {path} does not exist"),
            ));
        }
        Kind::File => vec![Change::Delete { path: path.clone() }],
        Kind::Dir => under(files, &path)
            .map(|(p, _)| Change::Delete { path: p.clone() })
            .collect(),
    };
    Ok((format!("Successfully deleted {path}"), changes))
}

fn rename(files: &Files, old_raw: &str, new_raw: &str) -> Result<(String, Vec<Change>), Refused> {
    let old = canonical(old_raw)?;
    if old == MEMORY_ROOT {
        return Err((
            Refusal::Path,
            format!("Error: Cannot rename the {MEMORY_ROOT} directory itself"),
        ));
    }
    let old_kind = kind(files, &old);
    if old_kind == Kind::Missing {
        return Err((
            Refusal::NotFound,
            format!("Error: The path {old} does not exist"),
        ));
    }
    let new = canonical(new_raw)?;
    if kind(files, &new) != Kind::Missing {
        return Err((
            Refusal::Edit,
            format!("Error: The destination {new} already exists"),
        ));
    }
    if new.starts_with(&format!("{old}/")) {
        return Err((
            Refusal::Edit,
            format!("Error: Cannot move {old} into itself ({new})"),
        ));
    }
    file_target(files, &new, "rename to")?;
    let moved: Vec<(String, String)> = match old_kind {
        Kind::File => vec![(old.clone(), new.clone())],
        _ => under(files, &old)
            .map(|(p, _)| (p.clone(), format!("{new}{}", &p[old.len()..])))
            .collect(),
    };
    for (_, to) in &moved {
        canonical(to)?;
    }
    let mut changes = Vec::with_capacity(moved.len() * 2);
    for (from, to) in moved {
        changes.push(Change::Put {
            path: to,
            content: files[&from].clone(),
        });
        changes.push(Change::Delete { path: from });
    }
    Ok((format!("Successfully renamed {old} to {new}"), changes))
}

/// Whether the memory, as `changes` would leave it, is within the limits: each file written at
/// most [`MAX_MEMORY_FILE_BYTES`], and at most [`MAX_MEMORY_FILES`] files and
/// [`MAX_MEMORY_BYTES`] in all.
fn within_limits(files: &Files, changes: &[Change]) -> Result<(), Refused> {
    if changes.is_empty() {
        return Ok(());
    }
    let mut sizes: BTreeMap<&str, u64> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.len() as u64))
        .collect();
    for change in changes {
        match change {
            Change::Put { path, content } => {
                let size = content.len() as u64;
                if size > MAX_MEMORY_FILE_BYTES {
                    return Err((
                        Refusal::Limit,
                        format!(
                            "Error: {path} would be {size} bytes; a memory file holds at most {MAX_MEMORY_FILE_BYTES} bytes (100 KiB). Keep it shorter, or split it into several files."
                        ),
                    ));
                }
                sizes.insert(path, size);
            }
            Change::Delete { path } => {
                sizes.remove(path.as_str());
            }
        }
    }
    let count = sizes.len() as u64;
    if count > MAX_MEMORY_FILES {
        return Err((
            Refusal::Limit,
            format!(
                "Error: the memory would hold {count} files; it holds at most {MAX_MEMORY_FILES}. Delete or merge files first."
            ),
        ));
    }
    let total: u64 = sizes.values().sum();
    if total > MAX_MEMORY_BYTES {
        return Err((
            Refusal::Limit,
            format!(
                "Error: the memory would hold {total} bytes; it holds at most {MAX_MEMORY_BYTES} bytes (1 MiB) in all. Delete or shorten files first."
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> Files {
        list.iter()
            .map(|(p, c)| (p.to_string(), c.to_string()))
            .collect()
    }

    /// Applies a command and its changes; returns the answer.
    fn run(files: &mut Files, command: MemoryCommand) -> Outcome {
        let out = apply(files, &command);
        for change in &out.changes {
            match change {
                Change::Put { path, content } => {
                    files.insert(path.clone(), content.clone());
                }
                Change::Delete { path } => {
                    files.remove(path);
                }
            }
        }
        out
    }

    fn view(path: &str) -> MemoryCommand {
        MemoryCommand::View {
            path: path.into(),
            view_range: None,
        }
    }

    #[test]
    fn create_view_and_overwrite_a_file() {
        let mut f = Files::new();
        let out = run(
            &mut f,
            MemoryCommand::Create {
                path: "/memories/notes.md".into(),
                file_text: "one\ntwo\n".into(),
            },
        );
        assert_eq!(out.text, "File created successfully at: /memories/notes.md");
        assert!(!out.is_error());
        let out = run(&mut f, view("/memories/notes.md"));
        assert_eq!(
            out.text,
            "Here's the content of /memories/notes.md with line numbers:\n     1\tone\n     2\ttwo\n"
        );
        assert!(out.changes.is_empty());
        let out = run(
            &mut f,
            MemoryCommand::View {
                path: "/memories/notes.md".into(),
                view_range: Some([2, -1]),
            },
        );
        assert!(out.text.ends_with("     2\ttwo\n"), "{}", out.text);
        assert!(!out.text.contains("one"));
        let out = run(
            &mut f,
            MemoryCommand::View {
                path: "/memories/notes.md".into(),
                view_range: Some([3, 4]),
            },
        );
        assert_eq!(out.refusal, Some(Refusal::Edit));
        assert!(out.text.contains("[1, 2]"), "{}", out.text);
        let out = run(
            &mut f,
            MemoryCommand::Create {
                path: "/memories/notes.md".into(),
                file_text: "new".into(),
            },
        );
        assert_eq!(out.text, "File /memories/notes.md has been overwritten.");
        assert_eq!(f["/memories/notes.md"], "new");
    }

    #[test]
    fn a_directory_lists_two_levels_with_sizes_and_hides_dot_files() {
        let f = files(&[
            ("/memories/a.md", "12345"),
            ("/memories/dir/b.md", &"x".repeat(2048)),
            ("/memories/dir/sub/c.md", "c"),
            ("/memories/.hidden", "h"),
        ]);
        let out = apply(&f, &view("/memories"));
        assert_eq!(
            out.text,
            "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items and node_modules:\n\
             2.0K\t/memories\n5\t/memories/a.md\n2.0K\t/memories/dir\n2.0K\t/memories/dir/b.md\n1\t/memories/dir/sub"
        );
        let out = apply(&f, &view("/memories/dir/"));
        assert!(
            out.text.ends_with("2.0K\t/memories/dir\n2.0K\t/memories/dir/b.md\n1\t/memories/dir/sub\n1\t/memories/dir/sub/c.md"),
            "{}",
            out.text
        );
        let empty = apply(&Files::new(), &view("/memories"));
        assert!(empty.text.ends_with("\n0\t/memories"), "{}", empty.text);
        let missing = apply(&f, &view("/memories/nope"));
        assert_eq!(missing.refusal, Some(Refusal::NotFound));
        assert_eq!(
            missing.text,
            "The path /memories/nope does not exist. Please provide a valid path."
        );
    }

    #[test]
    fn str_replace_needs_exactly_one_occurrence_and_says_how_many() {
        let mut f = files(&[("/memories/a", "cat\ndog\ncat\nbird\n")]);
        let replace = |old: &str, new: &str| MemoryCommand::StrReplace {
            path: "/memories/a".into(),
            old_str: old.into(),
            new_str: new.into(),
        };
        let out = run(&mut f, replace("cat", "lion"));
        assert_eq!(out.refusal, Some(Refusal::Edit));
        assert!(
            out.text.contains("occurs 2 times") && out.text.contains("lines: 1, 3"),
            "{}",
            out.text
        );
        let out = run(&mut f, replace("fish", "x"));
        assert_eq!(
            out.text,
            "No replacement was performed, old_str `fish` did not appear verbatim in /memories/a."
        );
        let out = run(&mut f, replace("dog", "wolf"));
        assert!(!out.is_error(), "{}", out.text);
        assert!(
            out.text
                .starts_with("The memory file has been edited. Here's the result of running `cat -n` on a snippet of /memories/a:\n     1\tcat\n     2\twolf\n"),
            "{}",
            out.text
        );
        assert_eq!(f["/memories/a"], "cat\nwolf\ncat\nbird\n");
        let out = run(&mut f, replace("", "x"));
        assert!(out.text.contains("`old_str` is empty"), "{}", out.text);
        let out = apply(
            &f,
            &MemoryCommand::StrReplace {
                path: "/memories/none".into(),
                old_str: "a".into(),
                new_str: "b".into(),
            },
        );
        assert_eq!(out.refusal, Some(Refusal::NotFound));
    }

    #[test]
    fn insert_goes_after_the_line_and_keeps_the_final_newline() {
        let mut f = files(&[("/memories/a", "one\ntwo\n"), ("/memories/b", "")]);
        let insert = |path: &str, line: u64, text: &str| MemoryCommand::Insert {
            path: path.into(),
            insert_line: line,
            insert_text: text.into(),
        };
        assert!(!run(&mut f, insert("/memories/a", 0, "zero")).is_error());
        assert!(!run(&mut f, insert("/memories/a", 3, "three\n")).is_error());
        assert!(!run(&mut f, insert("/memories/a", 2, "1.5\n1.7")).is_error());
        assert_eq!(f["/memories/a"], "zero\none\n1.5\n1.7\ntwo\nthree\n");
        let out = run(&mut f, insert("/memories/a", 7, "x"));
        assert_eq!(
            out.text,
            "Error: Invalid `insert_line` parameter: 7. It should be within the range of lines of the file: [0, 6]"
        );
        assert!(!run(&mut f, insert("/memories/b", 0, "first")).is_error());
        assert_eq!(f["/memories/b"], "first\n");
    }

    #[test]
    fn delete_and_rename_files_and_directories() {
        let mut f = files(&[
            ("/memories/d/a", "a"),
            ("/memories/d/e/b", "b"),
            ("/memories/x", "x"),
        ]);
        let rename = |old: &str, new: &str| MemoryCommand::Rename {
            old_path: old.into(),
            new_path: new.into(),
        };
        let out = run(&mut f, rename("/memories/d", "/memories/x"));
        assert_eq!(
            out.text,
            "Error: The destination /memories/x already exists"
        );
        let out = run(&mut f, rename("/memories/d", "/memories/d/in"));
        assert!(out.text.contains("into itself"), "{}", out.text);
        let out = run(&mut f, rename("/memories/d", "/memories/x/y"));
        assert!(out.text.contains("/memories/x is a file"), "{}", out.text);
        let out = run(&mut f, rename("/memories/d", "/memories/n/d2"));
        assert_eq!(
            out.text,
            "Successfully renamed /memories/d to /memories/n/d2"
        );
        assert_eq!(
            f.keys().collect::<Vec<_>>(),
            ["/memories/n/d2/a", "/memories/n/d2/e/b", "/memories/x"]
        );
        let out = run(&mut f, rename("/memories/x", "/memories/y"));
        assert!(!out.is_error());
        assert_eq!(f["/memories/y"], "x");
        let out = run(
            &mut f,
            MemoryCommand::Delete {
                path: "/memories/n".into(),
            },
        );
        assert_eq!(out.text, "Successfully deleted /memories/n");
        assert_eq!(f.keys().collect::<Vec<_>>(), ["/memories/y"]);
        let out = run(
            &mut f,
            MemoryCommand::Delete {
                path: "/memories".into(),
            },
        );
        assert_eq!(out.refusal, Some(Refusal::Path));
        let out = run(
            &mut f,
            MemoryCommand::Delete {
                path: "/memories/n".into(),
            },
        );
        assert_eq!(
            (out.refusal, out.text.as_str()),
            (
                Some(Refusal::NotFound),
                "Error: The path /memories/n does not exist"
            )
        );
    }

    #[test]
    fn bad_paths_and_directories_are_refused_without_changes() {
        let f = files(&[("/memories/d/a", "a")]);
        for (command, refusal, says) in [
            (
                MemoryCommand::Create {
                    path: "/etc/passwd".into(),
                    file_text: "x".into(),
                },
                Refusal::Path,
                "not under /memories",
            ),
            (
                MemoryCommand::Create {
                    path: "/memories/../x".into(),
                    file_text: "x".into(),
                },
                Refusal::Path,
                "`..`",
            ),
            (
                MemoryCommand::Create {
                    path: "/memories/d".into(),
                    file_text: "x".into(),
                },
                Refusal::Edit,
                "is a directory",
            ),
            (
                MemoryCommand::Create {
                    path: "/memories".into(),
                    file_text: "x".into(),
                },
                Refusal::Path,
                "memory directory itself",
            ),
            (
                MemoryCommand::Create {
                    path: "/memories/d/a/b".into(),
                    file_text: "x".into(),
                },
                Refusal::Edit,
                "/memories/d/a is a file",
            ),
            (
                MemoryCommand::Create {
                    path: "/memories/n".into(),
                    file_text: "a\0b".into(),
                },
                Refusal::Edit,
                "U+0000",
            ),
            (
                MemoryCommand::Insert {
                    path: "/memories/d".into(),
                    insert_line: 0,
                    insert_text: "x".into(),
                },
                Refusal::Edit,
                "is a directory",
            ),
        ] {
            let out = apply(&f, &command);
            assert_eq!(out.refusal, Some(refusal), "{command:?}: {}", out.text);
            assert!(out.text.contains(says), "{command:?}: {}", out.text);
            assert!(out.changes.is_empty());
        }
    }

    #[test]
    fn limits_are_checked_on_the_memory_as_the_change_leaves_it() {
        let big = "x".repeat(MAX_MEMORY_FILE_BYTES as usize);
        let create = |path: &str, text: &str| MemoryCommand::Create {
            path: path.into(),
            file_text: text.into(),
        };
        let out = apply(&Files::new(), &create("/memories/a", &format!("{big}y")));
        assert_eq!(out.refusal, Some(Refusal::Limit));
        assert!(out.text.contains("102401 bytes"), "{}", out.text);
        assert!(!apply(&Files::new(), &create("/memories/a", &big)).is_error());
        // Ten full files is 1000 KiB; the eleventh passes 1 MiB.
        let mut f: Files = (0..10)
            .map(|i| (format!("/memories/{i}"), big.clone()))
            .collect();
        let out = apply(&f, &create("/memories/more", &"z".repeat(30 * 1024)));
        assert_eq!(out.refusal, Some(Refusal::Limit));
        assert!(out.text.contains("1 MiB"), "{}", out.text);
        // Overwriting a file replaces its bytes: no growth, no refusal.
        assert!(!apply(&f, &create("/memories/3", &big)).is_error());
        f = (0..MAX_MEMORY_FILES)
            .map(|i| (format!("/memories/{i}"), String::new()))
            .collect();
        let out = apply(&f, &create("/memories/one-more", ""));
        assert!(out.text.contains("1001 files"), "{}", out.text);
        // Deleting is always allowed.
        assert!(
            !apply(
                &f,
                &MemoryCommand::Delete {
                    path: "/memories/1".into()
                }
            )
            .is_error()
        );
    }
}
