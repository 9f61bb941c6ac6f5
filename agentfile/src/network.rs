//! The allow-list of an agent's egress (`network:`, whose type, [`Network`], lives with the
//! other confinement settings in [`crate::security`]). With `network.egress`, an agent's
//! replicas sit on an internal Docker network whose only way out is the pool's egress proxy for
//! that agent (`ninetrix egress-proxy`), which allows the hosts of [`allow_list`]: the agent's
//! own rules plus what it needs to work — its model's and fallbacks' hosts, its HTTP MCP
//! servers, the checkpoint API when that is not a container on the same network, and the
//! OpenTelemetry collector. Pure.

use crate::egress::EgressRule;
use crate::mcp::McpTransport;
use crate::schema::AgentSpec;
pub use crate::security::Network;

/// The agents of `af` whose egress is restricted, by name (what Swarm and `k8s render`, which
/// cannot run egress proxies yet, refuse).
pub fn restricted_agents(af: &crate::Agentfile) -> Vec<&str> {
    af.agents
        .iter()
        .filter(|a| a.network.restricted())
        .map(|a| a.name.as_str())
        .collect()
}

/// One entry of an allow-list and why it is there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowed {
    /// The rule.
    pub rule: EgressRule,
    /// Why: `network.egress`, `the model`, `fallback anthropic/…`, `MCP server docs`, …
    pub why: String,
}

/// What the proxy of `agent` allows: its `network.egress` rules, then the hosts it needs —
/// its model's and fallbacks' (the provider's default URL unless `base_url` names another), its
/// HTTP MCP servers', and each of `also` (the checkpoint API when reached through the proxy, the
/// OpenTelemetry endpoint), each with why. Empty when egress is not restricted.
pub fn allow_list(agent: &AgentSpec, also: &[(&str, &str)]) -> Vec<Allowed> {
    let Some(own) = &agent.network.egress else {
        return Vec::new();
    };
    let mut out: Vec<Allowed> = own
        .iter()
        .map(|rule| Allowed {
            rule: rule.clone(),
            why: "network.egress".into(),
        })
        .collect();
    let r = &agent.runtime;
    let model_url = r
        .base_url
        .as_deref()
        .or_else(|| r.provider.default_base_url());
    let mut needed: Vec<(String, String)> = Vec::new();
    if let Some(url) = model_url {
        needed.push((url.to_string(), format!("the model {}", r.model)));
    }
    for f in &r.fallback {
        if let Some(url) = f
            .base_url
            .as_deref()
            .or_else(|| f.provider.default_base_url())
        {
            needed.push((
                url.to_string(),
                format!("fallback {}/{}", f.provider.as_str(), f.model),
            ));
        }
    }
    for (name, server) in &agent.mcp_servers {
        if let McpTransport::Http { url, .. } = &server.transport {
            needed.push((url.clone(), format!("MCP server {name}")));
        }
    }
    needed.extend(also.iter().map(|(u, w)| (u.to_string(), w.to_string())));
    for (url, why) in needed {
        let Some(rule) = url_rule(&url) else { continue };
        if !out.iter().any(|a| a.rule == rule) {
            out.push(Allowed { rule, why });
        }
    }
    out
}

/// The rule allowing exactly `url`'s host and port (the scheme's port when it names none);
/// `None` for a URL without an http(s) scheme or host.
pub fn url_rule(url: &str) -> Option<EgressRule> {
    let (host, port) = url_host_port(url)?;
    EgressRule::parse(&format!("{host}:{port}")).ok()
}

/// The host (an IPv6 address in brackets) and port an http(s) `url` connects to: the port it
/// names, else its scheme's. `None` for a URL without an http(s) scheme or host.
pub fn url_host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" => 443,
        "http" => 80,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let split = if authority.starts_with('[') {
        authority.find("]:").map(|i| i + 1)
    } else {
        authority.rfind(':')
    };
    let (host, port) = match split {
        Some(i) => (&authority[..i], authority[i + 1..].parse().ok()?),
        None => (authority, default_port),
    };
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// Whether `network` lets an agent reach `url`'s host and port (its `network.egress`
/// allows it); always when its egress is not restricted.
pub fn egress_allows(network: &Network, url: &str) -> bool {
    let Some(rules) = &network.egress else {
        return true;
    };
    url_host_port(url).is_some_and(|(host, port)| crate::egress::allows(rules, &host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(yaml: &str) -> AgentSpec {
        crate::parse("agentfile.yaml", yaml)
            .unwrap()
            .agentfile
            .agents
            .remove(0)
    }

    #[test]
    fn urls_become_rules_for_their_host_and_port() {
        let rule = |u: &str| url_rule(u).map(|r| r.to_string());
        assert_eq!(
            rule("https://api.openai.com/v1").as_deref(),
            Some("api.openai.com:443")
        );
        assert_eq!(
            rule("http://host.docker.internal:8080").as_deref(),
            Some("host.docker.internal:8080")
        );
        assert_eq!(
            rule("http://u:p@10.0.0.5/x").as_deref(),
            Some("10.0.0.5:80")
        );
        assert_eq!(rule("http://[::1]:4318/v1").as_deref(), Some("[::1]:4318"));
        assert_eq!(rule("scripted"), None);
        assert_eq!(
            url_host_port("https://crm.example.com/a2a/.well-known/agent-card.json"),
            Some(("crm.example.com".into(), 443))
        );
        assert_eq!(
            url_host_port("http://[::1]:8080/x"),
            Some(("[::1]".into(), 8080))
        );
        assert_eq!(url_host_port("http://h:notaport/"), None);
        assert_eq!(url_host_port("https:///x"), None);
        assert_eq!(rule("ftp://x"), None);
    }

    #[test]
    fn the_allow_list_is_the_agents_rules_then_what_it_needs_each_once() {
        let a = agent(
            "mcp_servers:\n  docs: { url: \"https://mcp.example.com/mcp\" }\nagents:\n  a:\n    \
             runtime:\n      provider: openai\n      model: gpt-4o\n      fallback: [{ provider: anthropic, model: claude-sonnet-4-6 }]\n    \
             tools: [\"mcp://docs\"]\n    network: { egress: [\"*.github.com\", \"api.openai.com:443\"] }\n",
        );
        let list = allow_list(
            &a,
            &[("http://host.docker.internal:8080", "the checkpoint API")],
        );
        let shown: Vec<(String, &str)> = list
            .iter()
            .map(|a| (a.rule.to_string(), a.why.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                ("*.github.com".to_string(), "network.egress"),
                ("api.openai.com:443".to_string(), "network.egress"),
                (
                    "api.anthropic.com:443".to_string(),
                    "fallback anthropic/claude-sonnet-4-6"
                ),
                ("mcp.example.com:443".to_string(), "MCP server docs"),
                (
                    "host.docker.internal:8080".to_string(),
                    "the checkpoint API"
                ),
            ]
        );
        let open = agent("agents:\n  a:\n    runtime: { provider: scripted, script: [hi] }\n");
        assert!(allow_list(&open, &[]).is_empty(), "unrestricted: no proxy");
    }
}
