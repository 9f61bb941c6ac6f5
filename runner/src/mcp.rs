//! The agent's MCP servers as the runner sees them (issue 13): which servers it reaches and how
//! (their secrets filled in here and nowhere else), which of their tools the agent may call under
//! which name and effect class, which servers are down, and how a call reaches its server.
//!
//! A server that is down at boot does not stop the runner: its tools answer with an error naming
//! it, and it is tried again with backoff at turn boundaries and when one of its tools is
//! called. Tool lists are re-read at turn boundaries when a server said its list changed or came
//! back. Every decision about what a call's failure means for the turn (re-run, report the
//! outcome unknown, verify) is the ledger's, in the engine and the driver.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ninetrix_agentfile::mcp::{
    self as spec, Annotations, EffectSource, McpServer, McpSource, McpTransport,
};
use ninetrix_agentfile::{AgentSpec, ToolSpec};
use ninetrix_mcp::client::{
    CallError, CallOutput, Connection, Endpoint, Prepare, StdioServer, ToolInfo,
};

use crate::tools::sandbox::{Given, Sandbox};
use ninetrix_proto::events::{McpServerDown, McpServerUp, McpToolClass, McpTools, TraceEvent};

use crate::config::SecretValue;
use crate::llm::ToolDef;

/// How long connecting (and the handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long listing a server's tools may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(15);
/// A tool list older than this is read again at the next turn boundary (a server behind a bridge
/// that restarted it may offer other tools, and says nothing).
const RELIST_AFTER: Duration = Duration::from_secs(60);
/// First and longest wait between attempts to reach a server that is down.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// One MCP tool the agent may call now.
#[derive(Clone, Debug)]
pub struct Offered {
    /// The server.
    pub server: String,
    /// The server's name for it.
    pub tool: String,
    /// What the model is told.
    pub def: ToolDef,
    /// Its resolved spec for the engine (`name` is the model's name; the class is final).
    pub spec: ToolSpec,
    /// Where its class came from.
    pub source: EffectSource,
}

/// The effect class of `tool` of `server` for the agent's entry `entry`, and where it came from.
pub fn classify(
    entry: &ToolSpec,
    server: &McpServer,
    info: Option<&ToolInfo>,
) -> (ninetrix_proto::effects::Effect, EffectSource) {
    let pinned = entry.effect_pinned.then_some(entry.effect);
    let annotations = info.map_or_else(Annotations::default, |i| Annotations {
        read_only: i.read_only,
        idempotent: i.idempotent,
    });
    spec::mcp_effect(pinned, server.effect, server.trusted, annotations)
}

/// What the agent may call of one server, given the tools it offers (`None`: unknown, it is
/// down): each offered tool its entries cover, and the tools the entries name that it does not
/// offer. A pure function of the agentfile and the server's list.
pub fn offered(
    agent: &AgentSpec,
    server_name: &str,
    server: &McpServer,
    tools: Option<&[ToolInfo]>,
) -> (Vec<Offered>, Vec<String>) {
    let entries: Vec<&ToolSpec> = agent
        .tools
        .iter()
        .filter(|t| t.mcp.as_ref().is_some_and(|m| m.server == server_name))
        .collect();
    let mut out: Vec<Offered> = Vec::new();
    let mut missing = Vec::new();
    let push = |out: &mut Vec<Offered>, entry: &ToolSpec, tool: &str, info: Option<&ToolInfo>| {
        let name = spec::model_name(server_name, tool);
        if out.iter().any(|o| o.def.name == name) {
            return;
        }
        let (effect, source) = classify(entry, server, info);
        let def = match info {
            Some(i) => ToolDef {
                name: name.clone(),
                description: if i.description.is_empty() {
                    format!("`{tool}` from the MCP server `{server_name}`")
                } else {
                    i.description.clone()
                },
                parameters: i.input_schema.clone(),
            },
            None => ToolDef {
                name: name.clone(),
                description: format!(
                    "`{tool}` from the MCP server `{server_name}`, which is unreachable right now \
                     (calls fail until it is back)"
                ),
                parameters: serde_json::json!({"type": "object"}),
            },
        };
        out.push(Offered {
            server: server_name.to_string(),
            tool: tool.to_string(),
            def,
            spec: ToolSpec {
                name,
                effect,
                effect_pinned: true,
                // This one tool (an entry for all of a server's tools would offer every name).
                mcp: Some(McpSource {
                    server: server_name.to_string(),
                    tool: Some(tool.to_string()),
                    allow: Vec::new(),
                }),
                handoff: None,
                verify: entry.verify.clone(),
                scope: None,
                secrets: Vec::new(),
            },
            source,
        });
    };
    for entry in entries {
        let Some(source) = &entry.mcp else { continue };
        let named: Vec<&str> = match &source.tool {
            Some(t) => vec![t.as_str()],
            None => source.allow.iter().map(String::as_str).collect(),
        };
        match tools {
            Some(list) => {
                for name in &named {
                    if !list.iter().any(|i| i.name == *name) && !missing.contains(&name.to_string())
                    {
                        missing.push(name.to_string());
                    }
                }
                for info in list.iter().filter(|i| source.covers(&i.name)) {
                    push(&mut out, entry, &info.name, Some(info));
                }
            }
            // Down: only the tools the agentfile names are known to exist.
            None => {
                for name in named {
                    push(&mut out, entry, name, None);
                }
            }
        }
    }
    (out, missing)
}

/// A server's connection state.
struct Server {
    name: String,
    spec: McpServer,
    endpoint: Endpoint,
    conn: Option<Arc<Connection>>,
    /// The tools it offers, as last read (`None`: never read).
    tools: Option<Vec<ToolInfo>>,
    /// Tools the agentfile names that it did not offer at the last read.
    missing: Vec<String>,
    /// When its tools were last read.
    listed_at: Option<Instant>,
    /// Set while it is down: why, since when, and when to try again.
    down: Option<Down>,
}

impl Server {
    /// Whether it has no live connection and its backoff allows an attempt now.
    fn due(&self) -> bool {
        self.conn.as_ref().is_none_or(|c| c.is_closed())
            && self
                .down
                .as_ref()
                .is_none_or(|d| Instant::now() >= d.next_try)
    }

    /// Takes the result of a connection attempt (its error already scrubbed of secrets):
    /// connected, or down with a backoff. Whether it connected.
    fn connected(
        &mut self,
        result: Result<Connection, String>,
        events: &mut Vec<TraceEvent>,
    ) -> bool {
        match result {
            Ok(conn) => {
                self.conn = Some(Arc::new(conn));
                if let Some(down) = self.down.take() {
                    events.push(TraceEvent::McpServerUp(McpServerUp {
                        server: self.name.clone(),
                        down_ms: down.since.elapsed().as_millis() as u64,
                    }));
                }
                true
            }
            Err(reason) => {
                self.conn = None;
                mark_down(self, &reason, events);
                false
            }
        }
    }
}

struct Down {
    /// When it was first marked down (this outage).
    since: Instant,
    reason: String,
    next_try: Instant,
    backoff: Duration,
}

/// The agent's MCP servers. Cloning shares them.
#[derive(Clone)]
pub struct McpServers {
    agent: Arc<AgentSpec>,
    servers: Arc<tokio::sync::Mutex<Vec<Server>>>,
    /// What the model may call now, by model name (rebuilt when a list is read).
    offered: Arc<Mutex<BTreeMap<String, Offered>>>,
    /// Secret values, to scrub from results and messages.
    secrets: Arc<Vec<String>>,
}

/// Why an MCP server's endpoint cannot be made from the configuration.
#[derive(Debug, thiserror::Error)]
#[error("MCP server `{server}`: {why}")]
pub struct EndpointError {
    server: String,
    why: String,
}

impl McpServers {
    /// The agent's servers, not connected yet. Fails only when a secret a server needs is
    /// missing (a configuration error).
    pub fn new(
        agent: &AgentSpec,
        secrets: &HashMap<String, SecretValue>,
        http: &reqwest::Client,
        workspace: &Path,
        sandbox: &Sandbox,
    ) -> Result<McpServers, EndpointError> {
        let mut servers = Vec::new();
        for (name, server) in &agent.mcp_servers {
            let endpoint = endpoint(name, server, secrets, http, workspace, sandbox)?;
            servers.push(Server {
                name: name.clone(),
                spec: server.clone(),
                endpoint,
                conn: None,
                tools: None,
                missing: Vec::new(),
                listed_at: None,
                down: None,
            });
        }
        Ok(McpServers {
            agent: Arc::new(agent.clone()),
            servers: Arc::new(tokio::sync::Mutex::new(servers)),
            offered: Arc::new(Mutex::new(BTreeMap::new())),
            secrets: Arc::new(
                secrets
                    .values()
                    .map(|s| s.expose().to_string())
                    .filter(|s| s.len() >= 4)
                    .collect(),
            ),
        })
    }

    /// Whether the agent uses any MCP server.
    pub fn is_empty(&self) -> bool {
        self.agent.mcp_servers.is_empty()
    }

    /// Connects to every server that is not connected and due, and re-reads the tool lists of
    /// those that came back, said their list changed, or were last read a minute ago or more
    /// (an `mcp_tools` event only when a list differs from the last one). Returns the events to
    /// emit and the health lines of servers that are down or lack tools the agentfile names
    /// (server → line). Called at boot and at turn boundaries; never fails (a server that
    /// cannot be reached is down).
    pub async fn refresh(&self) -> (Vec<TraceEvent>, BTreeMap<String, String>) {
        let mut servers = self.servers.lock().await;
        let mut events = Vec::new();
        let connects = servers
            .iter()
            .enumerate()
            .filter(|(_, s)| s.due())
            .map(|(i, s)| {
                let endpoint = s.endpoint.clone();
                async move { (i, Connection::open(&endpoint, CONNECT_TIMEOUT).await) }
            })
            .collect::<Vec<_>>();
        let results = futures_util::future::join_all(connects).await;
        let mut relist: Vec<usize> = Vec::new();
        for (i, result) in results {
            if servers[i].connected(result.map_err(|e| self.scrub(&e.0)), &mut events) {
                relist.push(i);
            }
        }
        for (i, s) in servers.iter().enumerate() {
            let old = s.listed_at.is_none_or(|at| at.elapsed() >= RELIST_AFTER);
            if let Some(c) = &s.conn
                && (c.take_tools_changed() || old)
                && !relist.contains(&i)
            {
                relist.push(i);
            }
        }
        for i in relist {
            let s = &mut servers[i];
            let Some(conn) = s.conn.clone() else { continue };
            match conn.tools(LIST_TIMEOUT).await {
                Ok(list) => {
                    let changed = s.tools.as_ref() != Some(&list);
                    s.tools = Some(list);
                    s.listed_at = Some(Instant::now());
                    if !changed {
                        continue;
                    }
                    let (offered, missing) =
                        offered(&self.agent, &s.name, &s.spec, s.tools.as_deref());
                    s.missing = missing.clone();
                    events.push(TraceEvent::McpTools(McpTools {
                        server: s.name.clone(),
                        tools: offered
                            .iter()
                            .map(|o| McpToolClass {
                                name: o.def.name.clone(),
                                effect: o.spec.effect,
                                source: o.source,
                            })
                            .collect(),
                        missing,
                    }));
                }
                Err(e) => {
                    let reason = self.scrub(&e.to_string());
                    s.conn = None;
                    mark_down(s, &reason, &mut events);
                }
            }
        }
        let mut all = BTreeMap::new();
        for s in servers.iter() {
            let known = if s.conn.is_some() {
                s.tools.as_deref()
            } else {
                None
            };
            for o in offered(&self.agent, &s.name, &s.spec, known).0 {
                all.insert(o.def.name.clone(), o);
            }
        }
        *self.offered.lock().unwrap_or_else(|p| p.into_inner()) = all;
        (events, problems(&servers))
    }

    /// The health lines of servers that are down or lack tools the agentfile names (server →
    /// line), as they stand now.
    pub async fn problems(&self) -> BTreeMap<String, String> {
        problems(&self.servers.lock().await)
    }

    /// The MCP tools the model may call now.
    pub fn offered(&self) -> Vec<Offered> {
        self.offered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Whether `name` is an MCP tool of this agent (offered now, or covered by an entry).
    pub fn routes(&self, name: &str) -> Option<(String, String)> {
        if let Some(o) = self
            .offered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
        {
            return Some((o.server.clone(), o.tool.clone()));
        }
        self.agent.tools.iter().find_map(|t| {
            let source = t.mcp.as_ref()?;
            let tool = name
                .strip_prefix(source.server.as_str())?
                .strip_prefix(spec::NAME_SEPARATOR)?;
            (t.offers(name)).then(|| (source.server.clone(), tool.to_string()))
        })
    }

    /// Calls `tool` of `server` with its ledger key. A server that is not connected is
    /// connected first (when due); one that cannot be reached answers `NotSent` naming it.
    /// After a call that lost its connection, the server is marked down.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        args: &serde_json::Value,
        key: &str,
        timeout: Duration,
    ) -> (Result<CallOutput, CallError>, Vec<TraceEvent>) {
        let mut events = Vec::new();
        let conn = {
            let mut servers = self.servers.lock().await;
            let Some(s) = servers.iter_mut().find(|s| s.name == server) else {
                return (
                    Err(CallError::NotSent(format!(
                        "the agent has no MCP server `{server}`"
                    ))),
                    events,
                );
            };
            if s.due() {
                let opened = Connection::open(&s.endpoint, CONNECT_TIMEOUT.min(timeout)).await;
                s.connected(opened.map_err(|e| self.scrub(&e.0)), &mut events);
            }
            match s.conn.as_ref().filter(|c| !c.is_closed()) {
                Some(c) => c.clone(),
                None => {
                    let reason = s
                        .down
                        .as_ref()
                        .map_or("not connected", |d| d.reason.as_str());
                    return (
                        Err(CallError::NotSent(format!(
                            "MCP server `{server}` is unreachable ({reason}); the call was not made"
                        ))),
                        events,
                    );
                }
            }
        };
        let result = conn.call(tool, args, key, timeout).await;
        let result = result
            .map(|out| CallOutput {
                text: self.scrub(&out.text),
                is_error: out.is_error,
            })
            .map_err(|e| match e {
                CallError::NotSent(m) => CallError::NotSent(self.scrub(&m)),
                CallError::Refused(m) => CallError::Refused(self.scrub(&m)),
                CallError::Lost(m) => CallError::Lost(self.scrub(&m)),
            });
        if let Some(reason) = down_after(&result, conn.is_closed()) {
            let mut servers = self.servers.lock().await;
            if let Some(s) = servers.iter_mut().find(|s| s.name == server) {
                s.conn = None;
                mark_down(s, &reason, &mut events);
            }
        }
        (result, events)
    }

    /// Closes every connection (stdio servers are asked to exit).
    pub async fn close(&self) {
        let mut servers = self.servers.lock().await;
        for s in servers.iter_mut() {
            if let Some(conn) = s.conn.take()
                && let Ok(conn) = Arc::try_unwrap(conn)
            {
                conn.close().await;
            }
        }
    }

    /// `text` with every secret value of the agent replaced by `***`.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in self.secrets.iter() {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), "***");
            }
        }
        out
    }
}

/// The health lines of `servers` that are down or lack tools the agentfile names.
fn problems(servers: &[Server]) -> BTreeMap<String, String> {
    servers
        .iter()
        .filter_map(|s| {
            let line = match &s.down {
                Some(d) => format!("MCP server `{}` unreachable: {}", s.name, d.reason),
                None if !s.missing.is_empty() => format!(
                    "MCP server `{}` does not offer {} (named in the agentfile)",
                    s.name,
                    s.missing.join(", ")
                ),
                None => return None,
            };
            Some((s.name.clone(), line))
        })
        .collect()
}

/// Why a call's end says its server is down, if it does: the connection closed (a stdio server
/// died, the session ended), or the request could not reach the server (a refused connection —
/// an HTTP server or sidecar that died after boot —, a bridge without its server process). A
/// server's own refusal, a tool's error or a slow answer says nothing about the server.
pub fn down_after(result: &Result<CallOutput, CallError>, closed: bool) -> Option<String> {
    match result {
        Err(CallError::NotSent(why)) => Some(why.clone()),
        Err(e) if closed => Some(e.to_string()),
        Ok(_) if closed => Some("the connection closed".into()),
        _ => None,
    }
}

/// Marks `s` down: the first time (or with a new reason) with an event; the next attempt after
/// a doubling backoff.
fn mark_down(s: &mut Server, reason: &str, events: &mut Vec<TraceEvent>) {
    let backoff = s
        .down
        .as_ref()
        .map_or(RETRY_FIRST, |d| (d.backoff * 2).min(RETRY_MAX));
    let new = s.down.as_ref().is_none_or(|d| d.reason != reason);
    if new {
        events.push(TraceEvent::McpServerDown(McpServerDown {
            server: s.name.clone(),
            reason: reason.to_string(),
        }));
    }
    let since = s.down.as_ref().map_or_else(Instant::now, |d| d.since);
    s.down = Some(Down {
        since,
        reason: reason.to_string(),
        next_try: Instant::now() + backoff,
        backoff,
    });
}

/// How the runner reaches `server`: its URL with header secrets filled in, a sidecar's URL on
/// the pool network, or a stdio command with its secrets as environment variables.
fn endpoint(
    name: &str,
    server: &McpServer,
    secrets: &HashMap<String, SecretValue>,
    http: &reqwest::Client,
    workspace: &Path,
    sandbox: &Sandbox,
) -> Result<Endpoint, EndpointError> {
    let secret = |n: &str| secrets.get(n).map(|v| v.expose().to_string());
    let missing = |n: String| EndpointError {
        server: name.to_string(),
        why: format!(
            "secret {n} was found neither in /run/secrets/{n} nor in the environment; provide \
             it on the host (`ninetrix up` mounts it)"
        ),
    };
    Ok(match &server.transport {
        McpTransport::Http { url, headers } => {
            let mut filled = Vec::new();
            for (header, value) in headers {
                filled.push((
                    header.clone(),
                    spec::fill_header(value, secret).map_err(missing)?,
                ));
            }
            Endpoint::Http {
                url: url.clone(),
                headers: filled,
                http: http.clone(),
            }
        }
        McpTransport::Sidecar { .. } => Endpoint::Http {
            url: std::env::var(format!(
                "AGENTFILE_MCP_URL_{}",
                name.to_ascii_uppercase().replace('-', "_")
            ))
            .unwrap_or_else(|_| spec::sidecar_url(name)),
            headers: Vec::new(),
            http: http.clone(),
        },
        McpTransport::Stdio {
            command,
            env,
            secrets: names,
        } => {
            let mut vars: Vec<(String, String)> =
                env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            for n in names {
                vars.push((n.clone(), secret(n).ok_or_else(|| missing(n.clone()))?));
            }
            // The sandbox clears the environment first; `env` (with the server's own secrets)
            // is set after it.
            let sandbox = sandbox.clone();
            let prepare: Prepare = Arc::new(move |cmd: &mut tokio::process::Command| {
                sandbox
                    .prepare(cmd, &Given::default())
                    .map_err(std::io::Error::other)
            });
            Endpoint::Stdio(StdioServer {
                command: command.clone(),
                env: vars,
                dir: Some(workspace.to_path_buf()),
                prepare: Some(prepare),
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_agentfile::{self as agentfile, Effect};

    fn agent(yaml_tools: &str, servers: &str) -> AgentSpec {
        let text = format!(
            "mcp_servers:\n{servers}agents:\n  a:\n    runtime: {{ provider: scripted, script: [{{ text: hi }}] }}\n    tools:\n{yaml_tools}"
        );
        agentfile::parse("t.yaml", &text)
            .unwrap_or_else(|r| panic!("{r:?}"))
            .agentfile
            .agents
            .remove(0)
    }

    fn info(name: &str, read_only: Option<bool>, idempotent: Option<bool>) -> ToolInfo {
        ToolInfo {
            name: name.into(),
            description: format!("{name} does things"),
            input_schema: serde_json::json!({"type": "object"}),
            read_only,
            idempotent,
        }
    }

    #[test]
    fn a_call_that_cannot_reach_its_server_or_loses_the_connection_marks_it_down() {
        let ok = || {
            Ok(CallOutput {
                text: "fine".into(),
                is_error: false,
            })
        };
        let refused = Err(CallError::NotSent("cannot connect to http://h/mcp".into()));
        assert_eq!(
            down_after(&refused, false).as_deref(),
            Some("cannot connect to http://h/mcp")
        );
        let lost = Err(CallError::Lost("the connection broke".into()));
        assert_eq!(
            down_after(&lost, true).as_deref(),
            Some("the connection broke")
        );
        assert_eq!(
            down_after(&ok(), true).as_deref(),
            Some("the connection closed")
        );
        // The server answered, refused the call itself, or was slow: it is up.
        assert_eq!(down_after(&ok(), false), None);
        assert_eq!(
            down_after(&Err(CallError::Refused("unknown tool".into())), false),
            None
        );
        assert_eq!(
            down_after(&Err(CallError::Lost("no answer within 30s".into())), false),
            None
        );
    }

    #[test]
    fn a_trusted_servers_annotations_decide_unless_the_agentfile_pins() {
        let a = agent(
            "      - mcp://t\n      - name: mcp://u/put\n        effect: idempotent\n",
            "  t: { url: 'http://x/mcp', trusted: true }\n  u: { url: 'http://y/mcp' }\n",
        );
        let list = [
            info("now", Some(true), None),
            info("put", Some(false), Some(true)),
            info("rm", None, None),
        ];
        let (t, missing) = offered(&a, "t", &a.mcp_servers["t"], Some(&list));
        assert!(missing.is_empty());
        let classes: Vec<(&str, Effect, EffectSource)> = t
            .iter()
            .map(|o| (o.def.name.as_str(), o.spec.effect, o.source))
            .collect();
        assert_eq!(
            classes,
            [
                ("t__now", Effect::Read, EffectSource::Annotations),
                ("t__put", Effect::Idempotent, EffectSource::Annotations),
                ("t__rm", Effect::Write, EffectSource::Annotations),
            ]
        );
        // The untrusted server's one named tool, pinned by the entry.
        let (u, _) = offered(&a, "u", &a.mcp_servers["u"], Some(&list));
        assert_eq!(u.len(), 1);
        assert_eq!(
            (u[0].def.name.as_str(), u[0].spec.effect, u[0].source),
            ("u__put", Effect::Idempotent, EffectSource::Agentfile)
        );
    }

    #[test]
    fn each_offered_spec_answers_only_to_its_own_name() {
        let a = agent(
            "      - mcp://t\n",
            "  t: { url: 'http://x/mcp', trusted: true }\n",
        );
        let list = [
            info("add", None, Some(true)),
            info("status", Some(true), None),
        ];
        let (t, _) = offered(&a, "t", &a.mcp_servers["t"], Some(&list));
        let specs: Vec<ToolSpec> = t.into_iter().map(|o| o.spec).collect();
        // The engine takes the first spec that offers a name: it must be the tool's own.
        let found = specs.iter().find(|s| s.offers("t__status")).unwrap();
        assert_eq!(
            (found.name.as_str(), found.effect),
            ("t__status", Effect::Read)
        );
    }

    #[test]
    fn an_untrusted_servers_hints_are_ignored_and_missing_tools_are_named() {
        let a = agent(
            "      - name: mcp://t\n        allow: [now, gone]\n",
            "  t: { url: 'http://x/mcp' }\n",
        );
        let list = [info("now", Some(true), None), info("other", None, None)];
        let (t, missing) = offered(&a, "t", &a.mcp_servers["t"], Some(&list));
        assert_eq!(t.len(), 1, "only the allowed tool");
        assert_eq!(
            (t[0].spec.effect, t[0].source),
            (Effect::Write, EffectSource::Default)
        );
        assert_eq!(missing, ["gone"]);
    }

    #[test]
    fn a_down_server_offers_the_tools_the_agentfile_names() {
        let a = agent(
            "      - mcp://t/now\n      - mcp://v\n",
            "  t: { url: 'http://x/mcp', effect: read }\n  v: { url: 'http://z/mcp' }\n",
        );
        let (t, _) = offered(&a, "t", &a.mcp_servers["t"], None);
        assert_eq!(t.len(), 1);
        assert_eq!(
            (t[0].spec.effect, t[0].source),
            (Effect::Read, EffectSource::Server)
        );
        assert!(t[0].def.description.contains("unreachable"));
        let (v, _) = offered(&a, "v", &a.mcp_servers["v"], None);
        assert!(
            v.is_empty(),
            "an all-tools entry of a down server names no tool"
        );
    }
}
