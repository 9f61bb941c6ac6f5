//! What the container of an agent with `network.egress` is told (pool/egress.rs keeps the
//! network and the proxy): its internal network instead of the pool's ([`Link`]), the proxy for
//! HTTP and HTTPS, and what it reaches directly. Pure.

use ninetrix_agentfile::AgentSpec;
use ninetrix_agentfile::mcp::{self, McpTransport};

/// How a restricted agent's runner reaches out: its internal network, and whether the API is
/// a container on it (reached directly) or not (through the proxy).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Link<'a> {
    /// The internal network's ID.
    pub(crate) network: &'a str,
    /// Whether the API is the local container.
    pub(crate) api_local: bool,
}

/// The proxy's name on the agent's internal network.
pub(crate) const ALIAS: &str = "egress-proxy";

/// The port it listens on.
pub(crate) const PORT: u16 = 3128;

/// The environment of a restricted agent's runner: the proxy for HTTP and HTTPS, and what is
/// reached directly (`direct`: the local API, the agent's sidecars).
pub(crate) fn runner_env(direct: &[String]) -> Vec<String> {
    let proxy = format!("http://{ALIAS}:{PORT}");
    let mut no_proxy = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    no_proxy.extend(direct.iter().cloned());
    let no_proxy = no_proxy.join(",");
    vec![
        format!("HTTP_PROXY={proxy}"),
        format!("HTTPS_PROXY={proxy}"),
        format!("http_proxy={proxy}"),
        format!("https_proxy={proxy}"),
        format!("NO_PROXY={no_proxy}"),
        format!("no_proxy={no_proxy}"),
    ]
}

/// What `spec`'s runners reach directly on its internal network: the local API (`api_url`'s
/// host, when `api_local`) and its MCP sidecars.
pub(crate) fn direct_hosts(spec: &AgentSpec, api_url: &str, api_local: bool) -> Vec<String> {
    let mut hosts = Vec::new();
    if api_local && let Some(host) = url_host(api_url) {
        hosts.push(host);
    }
    for (name, server) in &spec.mcp_servers {
        if matches!(server.transport, McpTransport::Sidecar { .. }) {
            hosts.push(mcp::sidecar_host(name));
        }
    }
    hosts
}

/// The host of `url` (no port, brackets kept for IPv6).
fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let host = if authority.starts_with('[') {
        authority.split_inclusive(']').next()?
    } else {
        authority.split(':').next()?
    };
    (!host.is_empty()).then(|| host.to_string())
}
