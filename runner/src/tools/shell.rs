//! `shell`: `/bin/sh -c COMMAND` in the workspace, started in the tool sandbox (a fresh
//! environment with only the secrets given to `shell` by name, Landlock, its own process group),
//! killed at the timeout, output capped. When the command ends — or is killed — its whole
//! process group is killed too: nothing it put in the background outlives the call (a fork bomb
//! dies with it; long work belongs to jobs).

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt as _};

use super::sandbox::kill_group;
use super::{ToolContext, ToolOutput};

const MAX_OUTPUT: usize = 64 * 1024;

/// The most rounds of SIGKILL sent to a finished command's process group.
const KILL_ROUNDS: u32 = 10_000;

pub(crate) async fn run(ctx: &ToolContext, args: &Value) -> ToolOutput {
    let Some(command) = args.get("command").and_then(Value::as_str) else {
        return ToolOutput::error("missing `command`");
    };
    if !std::path::Path::new("/bin/sh").exists() {
        return ToolOutput::error("this image has no /bin/sh; the shell tool cannot run here");
    }
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(&ctx.workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Err(e) = ctx.sandbox.prepare(&mut cmd, &ctx.shell_secrets) {
        return ToolOutput::error(e.to_string());
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return ToolOutput::error(format!("cannot start /bin/sh: {e}")),
    };
    let pgid = child.id();
    let stdout = tokio::spawn(read_capped(child.stdout.take()));
    let stderr = tokio::spawn(read_capped(child.stderr.take()));
    let waited = tokio::time::timeout(ctx.timeout, child.wait()).await;
    // Whatever happened, nothing of the command stays: its group dies (off the async threads:
    // a fork bomb may take many rounds).
    if let Some(pgid) = pgid {
        let _ = tokio::task::spawn_blocking(move || kill_group(pgid, KILL_ROUNDS)).await;
    }
    let status = match waited {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => return ToolOutput::error(format!("cannot wait for /bin/sh: {e}")),
        Err(_) => {
            // The group kill above took `sh` with it.
            return ToolOutput::error(format!(
                "the command did not finish within {}s and was killed",
                ctx.timeout.as_secs()
            ));
        }
    };
    // The pipes close once the group is gone.
    let stdout = stdout.await.unwrap_or_default();
    let stderr = stderr.await.unwrap_or_default();
    let mut text = String::from_utf8_lossy(&stdout).into_owned();
    let stderr = String::from_utf8_lossy(&stderr);
    if !stderr.is_empty() {
        text.push_str("\n[stderr]\n");
        text.push_str(&stderr);
    }
    if text.len() > MAX_OUTPUT {
        let mut cut = MAX_OUTPUT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(&format!("\n[output cut at {MAX_OUTPUT} bytes]"));
    }
    let code = status
        .code()
        .map_or_else(|| "killed by a signal".to_string(), |c| c.to_string());
    ToolOutput {
        content: format!("exit code {code}\n{text}"),
        is_error: !status.success(),
    }
}

/// Reads `pipe` to its end, keeping at most [`MAX_OUTPUT`] + 1 bytes (the rest is drained, so
/// the writer never blocks on a full pipe).
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>) -> Vec<u8> {
    let Some(mut pipe) = pipe else {
        return Vec::new();
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = (MAX_OUTPUT + 1).saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}
