//! `shell`: `/bin/sh -c COMMAND` in the workspace, killed at the timeout, output capped.

use serde_json::Value;

use super::{ToolContext, ToolOutput};

const MAX_OUTPUT: usize = 64 * 1024;

pub(crate) async fn run(ctx: &ToolContext, args: &Value) -> ToolOutput {
    let Some(command) = args.get("command").and_then(Value::as_str) else {
        return ToolOutput::error("missing `command`");
    };
    if !std::path::Path::new("/bin/sh").exists() {
        return ToolOutput::error("this image has no /bin/sh; the shell tool cannot run here");
    }
    let child = tokio::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .current_dir(&ctx.workspace)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(ctx.timeout, child).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return ToolOutput::error(format!("cannot start /bin/sh: {e}")),
        Err(_) => {
            return ToolOutput::error(format!(
                "the command did not finish within {}s and was killed",
                ctx.timeout.as_secs()
            ));
        }
    };
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
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
    let code = out
        .status
        .code()
        .map_or_else(|| "killed by a signal".to_string(), |c| c.to_string());
    ToolOutput {
        content: format!("exit code {code}\n{text}"),
        is_error: !out.status.success(),
    }
}
