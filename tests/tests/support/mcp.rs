//! The MCP test server written with the official Python SDK (tests/fixtures/mcp_ledger_server.py)
//! as a child process over streamable HTTP, for the MCP process tests and the chaos suite.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The server's script.
pub(crate) const SERVER: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/mcp_ledger_server.py");

/// A free loopback port (bound and released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until something accepts connections on `port`.
pub(crate) fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nothing listens on port {port} after 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// stdout silenced, stderr shown with `NINETRIX_RUNNER_STDERR=1`.
pub(crate) fn quiet(command: &mut std::process::Command) -> &mut std::process::Command {
    let stderr = if std::env::var_os("NINETRIX_RUNNER_STDERR").is_some() {
        std::process::Stdio::inherit()
    } else {
        std::process::Stdio::null()
    };
    command.stdout(std::process::Stdio::null()).stderr(stderr)
}

/// The ledger test server on a loopback port, killed and reaped on drop.
pub(crate) struct McpTestServer {
    child: std::process::Child,
    /// Its port (kept across [`McpTestServer::restart`]).
    pub(crate) port: u16,
    root: PathBuf,
    journal: PathBuf,
}

impl McpTestServer {
    /// Starts the server working in `root`, journalling to `journal`.
    pub(crate) fn start(root: &Path, journal: &Path) -> McpTestServer {
        let port = free_port();
        McpTestServer {
            child: spawn(root, journal, port),
            port,
            root: root.to_path_buf(),
            journal: journal.to_path_buf(),
        }
    }

    /// Its endpoint.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// SIGKILL (a call in flight is lost), then the same server on the same port again.
    pub(crate) fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(&self.root, &self.journal, self.port);
    }

    /// SIGKILL: the server is gone (its port refuses connections) until [`Self::start_again`].
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The same server on the same port again, after [`Self::kill`].
    pub(crate) fn start_again(&mut self) {
        self.child = spawn(&self.root, &self.journal, self.port);
    }

    /// The calls it started, as journalled.
    pub(crate) fn journal(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.journal)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

fn spawn(root: &Path, journal: &Path, port: u16) -> std::process::Child {
    let child = quiet(std::process::Command::new("python3").args([
        SERVER,
        "--root",
        &root.display().to_string(),
        "--journal",
        &journal.display().to_string(),
        "--http",
        &format!("127.0.0.1:{port}"),
    ]))
    .spawn()
    .expect("python3 runs the MCP test server");
    wait_listening(port);
    child
}

impl Drop for McpTestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The resolved spec of the first agent of an agentfile, as the runner gets it.
pub(crate) fn spec_of(yaml: &str) -> Value {
    let parsed = ninetrix_agentfile::parse("agentfile.yaml", yaml)
        .unwrap_or_else(|r| panic!("the test agentfile is valid: {r:?}"));
    serde_json::to_value(&parsed.agentfile.agents[0]).unwrap()
}

/// A durable scripted agent like `appender_spec`, whose write is the MCP server's `append_line`
/// of `line` to `log.txt` in the server's root, verified by `count_lines`.
pub(crate) fn mcp_appender_spec(url: &str) -> Value {
    let yaml = format!(
        r#"
mcp_servers:
  notes:
    url: {url}
    trusted: true
agents:
  appender:
    runtime:
      provider: scripted
      script:
        - text: Appending.
          tool_calls: [{{ name: notes__append_line, args: {{ path: log.txt, text: line }} }}]
        - text: Done.
    tools:
      - name: mcp://notes/append_line
        verify: {{ tool: mcp://notes/count_lines, args: same }}
      - mcp://notes/count_lines
"#
    );
    spec_of(&yaml)
}
