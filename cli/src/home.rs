//! Where ninetrix keeps its files on the host: `$AGENTFILE_HOME` (pool state, the local API's
//! secrets and database), used by the API server command and by every pool command.

use std::path::PathBuf;

use anyhow::Context as _;

/// `$AGENTFILE_HOME`, else `~/.agentfile`.
pub(crate) fn agentfile_home() -> anyhow::Result<PathBuf> {
    if let Some(home) = std::env::var_os("AGENTFILE_HOME") {
        return Ok(PathBuf::from(home));
    }
    let home = std::env::var_os("HOME")
        .context("neither AGENTFILE_HOME nor HOME is set; set AGENTFILE_HOME")?;
    Ok(PathBuf::from(home).join(".agentfile"))
}
