//! File tools, confined to the workspace: paths are relative, `..` and absolute paths are
//! refused, and symlinks that lead outside the workspace are refused after resolution.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::{ToolContext, ToolOutput};

const MAX_READ: u64 = 1024 * 1024;

/// Resolves `rel` inside the workspace, or says why not.
pub(crate) fn confine(workspace: &Path, rel: &str) -> Result<PathBuf, String> {
    let rel_path = Path::new(rel);
    if rel_path.is_absolute() {
        return Err(format!(
            "`{rel}` is absolute; paths are relative to the workspace"
        ));
    }
    for c in rel_path.components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            _ => {
                return Err(format!(
                    "`{rel}` leaves the workspace (`..` is not allowed)"
                ));
            }
        }
    }
    let root = workspace
        .canonicalize()
        .map_err(|e| format!("the workspace {} is not usable: {e}", workspace.display()))?;
    let joined = root.join(rel_path);
    // The deepest existing ancestor (or the path itself) must resolve inside the workspace.
    let mut probe = joined.as_path();
    loop {
        if probe.exists() || probe.symlink_metadata().is_ok() {
            let real = probe
                .canonicalize()
                .map_err(|_| format!("`{rel}` points to something that does not exist"))?;
            if !real.starts_with(&root) {
                return Err(format!(
                    "`{rel}` resolves outside the workspace (through a symlink)"
                ));
            }
            break;
        }
        match probe.parent() {
            Some(parent) => probe = parent,
            None => break,
        }
    }
    Ok(joined)
}

fn path_arg(args: &Value, default: Option<&str>) -> Result<String, ToolOutput> {
    match args.get("path").and_then(Value::as_str).or(default) {
        Some(p) if !p.is_empty() => Ok(p.to_string()),
        _ => Err(ToolOutput::error(
            "missing `path` (a path relative to the workspace)",
        )),
    }
}

pub(crate) async fn read(ctx: &ToolContext, args: &Value) -> ToolOutput {
    let rel = match path_arg(args, None) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let path = match confine(&ctx.workspace, &rel) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    match tokio::fs::metadata(&path).await {
        Ok(m) if m.is_dir() => {
            return ToolOutput::error(format!("`{rel}` is a directory; use list_dir"));
        }
        Ok(m) if m.len() > MAX_READ => {
            return ToolOutput::error(format!(
                "`{rel}` is {} bytes; file_read reads at most {MAX_READ}",
                m.len()
            ));
        }
        Ok(_) => {}
        Err(e) => return ToolOutput::error(format!("cannot read `{rel}`: {e}")),
    }
    match tokio::fs::read(&path).await {
        Ok(bytes) => ToolOutput::ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) => ToolOutput::error(format!("cannot read `{rel}`: {e}")),
    }
}

pub(crate) async fn write(ctx: &ToolContext, args: &Value) -> ToolOutput {
    let rel = match path_arg(args, None) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let Some(content) = args.get("content").and_then(Value::as_str) else {
        return ToolOutput::error("missing `content` (a string)");
    };
    let append = match args
        .get("mode")
        .and_then(Value::as_str)
        .unwrap_or("overwrite")
    {
        "overwrite" => false,
        "append" => true,
        other => {
            return ToolOutput::error(format!("unknown mode `{other}`; use overwrite or append"));
        }
    };
    let path = match confine(&ctx.workspace, &rel) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    // One blocking task for the whole write (directories, re-check, open, write, fsync): each
    // `tokio::fs` call would be a thread hand-off of its own.
    let workspace = ctx.workspace.clone();
    let bytes = content.as_bytes().to_vec();
    let done =
        tokio::task::spawn_blocking(move || write_file(&workspace, &rel, &path, &bytes, append))
            .await
            .unwrap_or_else(|e| Err(format!("the write did not finish: {e}")));
    match done {
        Ok(message) => ToolOutput::ok(message),
        Err(e) => ToolOutput::error(e),
    }
}

/// `file_write`'s blocking part: the file at `path` (`rel` inside `workspace`) gets `bytes`,
/// appended and fsynced, or written over it. Returns what the tool answers.
fn write_file(
    workspace: &Path,
    rel: &str,
    path: &Path,
    bytes: &[u8],
    append: bool,
) -> Result<String, String> {
    use std::io::Write as _;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create the directory of `{rel}`: {e}"))?;
    }
    // Re-check after creating directories (a racing symlink).
    confine(workspace, rel)?;
    let result = if append {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
    } else {
        std::fs::write(path, bytes)
    };
    result.map_err(|e| format!("cannot write `{rel}`: {e}"))?;
    Ok(format!(
        "{} {} bytes to {rel}",
        if append { "appended" } else { "wrote" },
        bytes.len()
    ))
}

pub(crate) async fn list(ctx: &ToolContext, args: &Value) -> ToolOutput {
    let rel = match path_arg(args, Some(".")) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let path = match confine(&ctx.workspace, &rel) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    let mut dir = match tokio::fs::read_dir(&path).await {
        Ok(d) => d,
        Err(e) => return ToolOutput::error(format!("cannot list `{rel}`: {e}")),
    };
    let mut names = Vec::new();
    while let Ok(Some(entry)) = dir.next_entry().await {
        let mut name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().await.is_ok_and(|t| t.is_dir()) {
            name.push('/');
        }
        names.push(name);
    }
    names.sort();
    if names.is_empty() {
        ToolOutput::ok(format!("`{rel}` is empty"))
    } else {
        ToolOutput::ok(names.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join("sub")).unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("escape")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", ws.path().join("passwd")).unwrap();
        std::os::unix::fs::symlink(ws.path().join("sub"), ws.path().join("inner")).unwrap();
        assert!(confine(ws.path(), "notes.md").is_ok());
        assert!(confine(ws.path(), "sub/new/deeper.txt").is_ok());
        assert!(confine(ws.path(), "./sub").is_ok());
        assert!(
            confine(ws.path(), "inner/x.txt").is_ok(),
            "a symlink that stays inside is fine"
        );
        for bad in [
            "../x",
            "sub/../../x",
            "/etc/passwd",
            "escape/x.txt",
            "escape",
            "passwd",
        ] {
            assert!(confine(ws.path(), bad).is_err(), "{bad} must be refused");
        }
    }
}
