//! `ninetrix mcp-bridge --listen ADDR -- COMMAND [ARGS…]`: serves a stdio MCP server over
//! streamable HTTP at `http://ADDR/mcp` and restarts it when it dies (the sidecar containers
//! `up` runs for `mcp_servers` entries with `image:`; also handy on a workstation).
//!
//! `--secret NAME` passes the secret as the environment variable `NAME` of the server process
//! only — read from `<secrets-dir>/NAME` (default `/run/secrets`, where `up` mounts them), never
//! set on the container.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ninetrix_mcp::bridge;
use ninetrix_mcp::client::StdioServer;

/// `ninetrix mcp-bridge` arguments.
#[derive(Args, Debug, Clone)]
pub struct McpBridgeArgs {
    /// Where to serve: `http://ADDR/mcp` (and `GET /health`).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8931")]
    pub listen: SocketAddr,
    /// A secret the server process gets as the environment variable of the same name
    /// (repeatable).
    #[arg(long = "secret", value_name = "NAME")]
    pub secrets: Vec<String>,
    /// Where the secrets are.
    #[arg(long, value_name = "DIR", default_value = "/run/secrets")]
    pub secrets_dir: PathBuf,
    /// The stdio server's command line, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Serves until SIGINT/SIGTERM.
pub(crate) fn run(args: &McpBridgeArgs) -> anyhow::Result<ExitCode> {
    // rmcp logs every session's start and end at info: one line per request of the 2026-07-28
    // revision. Its warnings stay.
    super::runner::init_logging("info,rmcp=warn");
    let mut env = Vec::new();
    for name in &args.secrets {
        if !ninetrix_agentfile::names::is_valid_secret_name(name) {
            eprintln!("error: `{name}` is not a secret name (upper-case letters, digits and `_`)");
            return Ok(ExitCode::from(crate::EXIT_USAGE));
        }
        let path = args.secrets_dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(value) => env.push((
                name.clone(),
                value.trim_end_matches(['\n', '\r']).to_string(),
            )),
            Err(e) => {
                eprintln!(
                    "error: secret {name} cannot be read from {}: {e}; provide it on the host \
                     (`ninetrix up` mounts it)",
                    path.display()
                );
                return Ok(ExitCode::from(crate::EXIT_USAGE));
            }
        }
    }
    let server = StdioServer {
        prepare: None,
        command: args.command.clone(),
        env,
        dir: None,
    };
    let result = super::until_signal(|shutdown| bridge::run(args.listen, server, shutdown))?;
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(crate::EXIT_FAILURE))
        }
    }
}
