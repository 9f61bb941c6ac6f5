//! MCP servers in the agentfile (`mcp_servers:` and `mcp://` tool entries), and the pure rules
//! around them: the name a model sees for an MCP tool, a tool's effect class and where it came
//! from, a verifier's arguments, and an HTTP header's value from its secrets.
//!
//! The runner and the CLI share these so that `validate`, `trace` and the runner say the same
//! thing about the same tool.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use ninetrix_proto::effects::{EffectSource, IDEMPOTENCY_META_KEY};

use super::tools::Effect;

/// The separator between a server's name and its tool's name in the name the model sees
/// (`time__get_current_time`).
pub const NAME_SEPARATOR: &str = "__";

/// Longest tool name the providers accept (OpenAI and Anthropic: 64).
pub const MAX_MODEL_NAME: usize = 64;

/// The port `ninetrix mcp-bridge` listens on inside a sidecar container.
pub const SIDECAR_PORT: u16 = 8931;

/// One MCP server the pool's agents may use (`mcp_servers.<name>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// How the runner reaches it.
    pub transport: McpTransport,
    /// Its tool annotations may decide effect classes (`trusted: true`). An untrusted server's
    /// annotations are hints the MCP spec says not to rely on.
    #[serde(default)]
    pub trusted: bool,
    /// The effect class of each of its tools that no tool entry pins itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
}

/// How an MCP server is reached.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum McpTransport {
    /// A remote streamable-HTTP server (`url:`).
    Http {
        /// Its endpoint.
        url: String,
        /// HTTP headers sent with every request: header name → a value template whose
        /// `${NAME}` parts are secrets (the agent mounts them). Never a literal credential.
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
    /// A stdio server in a sidecar container that `up` runs on the pool network, served over
    /// streamable HTTP by `ninetrix mcp-bridge` (`image:` + `command:`).
    Sidecar {
        /// The image holding the server's runtime.
        image: String,
        /// The server's command line.
        command: Vec<String>,
        /// Plain settings for the server process.
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// Secrets the server process gets as environment variables (read by the bridge from
        /// `/run/secrets/<NAME>`, never set on the container).
        #[serde(default)]
        secrets: Vec<String>,
        /// How its container is confined (`security:`, over the hardened defaults).
        #[serde(default)]
        security: crate::security::Security,
    },
    /// A stdio server started inside the agent's own container (`command:` alone).
    Stdio {
        /// The server's command line.
        command: Vec<String>,
        /// Plain settings for the server process.
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// Secrets the server process gets as environment variables (read by the runner from
        /// `/run/secrets/<NAME>`).
        #[serde(default)]
        secrets: Vec<String>,
    },
}

impl McpTransport {
    /// The secrets the agent's container needs for this server (header secrets, and a local
    /// stdio server's secrets). A sidecar's secrets go to the sidecar.
    pub fn agent_secrets(&self) -> Vec<String> {
        match self {
            McpTransport::Http { headers, .. } => {
                let mut out: Vec<String> = Vec::new();
                for value in headers.values() {
                    for name in template_secrets(value) {
                        if !out.contains(&name) {
                            out.push(name);
                        }
                    }
                }
                out
            }
            McpTransport::Stdio { secrets, .. } => secrets.clone(),
            McpTransport::Sidecar { .. } => Vec::new(),
        }
    }
}

/// The hostname of a server's sidecar on the pool network.
pub fn sidecar_host(server: &str) -> String {
    format!("mcp-{server}")
}

/// The URL an agent uses to reach a sidecar server.
pub fn sidecar_url(server: &str) -> String {
    format!("http://{}:{SIDECAR_PORT}/mcp", sidecar_host(server))
}

/// Which MCP tools a tool entry gives the agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSource {
    /// The server (a key of `mcp_servers`).
    pub server: String,
    /// One tool (`mcp://server/tool`), or `None` for all of the server's tools (`mcp://server`).
    pub tool: Option<String>,
    /// With `tool: None`: only these tools (empty: all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
}

impl McpSource {
    /// Whether this entry gives the agent the server's tool `tool`.
    pub fn covers(&self, tool: &str) -> bool {
        match &self.tool {
            Some(t) => t == tool,
            None => self.allow.is_empty() || self.allow.iter().any(|a| a == tool),
        }
    }
}

/// The read tool that checks whether a `write` tool's effect happened, called when the write's
/// outcome is unknown after a crash (`verify:` on a tool entry).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verify {
    /// The verifier, by the name the model sees (a builtin or `server__tool`).
    pub tool: String,
    /// Its arguments.
    pub args: VerifyArgs,
}

/// A verifier's arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifyArgs {
    /// The write call's own arguments.
    Same,
    /// A template: a string that is exactly `{{args.NAME}}` becomes the write's argument NAME
    /// (any type); `{{args.NAME}}` inside a longer string is replaced by its text.
    Template(Value),
}

impl VerifyArgs {
    /// The verifier's arguments for a write called with `args`.
    pub fn apply(&self, args: &Value) -> Value {
        match self {
            VerifyArgs::Same => args.clone(),
            VerifyArgs::Template(template) => fill(template, args),
        }
    }
}

fn fill(template: &Value, args: &Value) -> Value {
    match template {
        Value::String(s) => {
            if let Some(name) = whole_placeholder(s) {
                return args.get(name).cloned().unwrap_or(Value::Null);
            }
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(start) = rest.find("{{args.") {
                let Some(len) = rest[start..].find("}}") else {
                    break;
                };
                let name = &rest[start + 7..start + len];
                out.push_str(&rest[..start]);
                match args.get(name) {
                    Some(Value::String(v)) => out.push_str(v),
                    Some(Value::Null) | None => {}
                    Some(other) => out.push_str(&other.to_string()),
                }
                rest = &rest[start + len + 2..];
            }
            out.push_str(rest);
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| fill(v, args)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill(v, args)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn whole_placeholder(s: &str) -> Option<&str> {
    let name = s.strip_prefix("{{args.")?.strip_suffix("}}")?;
    (!name.is_empty() && !name.contains('}')).then_some(name)
}

/// The name the model sees for `server`'s tool `tool`: `server__tool`, with characters the
/// providers refuse turned into `_`, cut to [`MAX_MODEL_NAME`]. Stable across boots, so ledger
/// keys and histories keep meaning the same tool.
pub fn model_name(server: &str, tool: &str) -> String {
    let raw = format!("{server}{NAME_SEPARATOR}{tool}");
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_MODEL_NAME)
        .collect()
}

/// What a server says about a tool (MCP `ToolAnnotations`), as far as effect classes go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Annotations {
    /// `readOnlyHint`.
    pub read_only: Option<bool>,
    /// `idempotentHint`.
    pub idempotent: Option<bool>,
}

/// An MCP tool's effect class: the tool entry's `effect:` first, then the server's, then — only
/// for a `trusted` server — its annotations (`readOnlyHint` → read, `idempotentHint` →
/// idempotent, otherwise write); otherwise `write`.
pub fn mcp_effect(
    entry: Option<Effect>,
    server: Option<Effect>,
    trusted: bool,
    annotations: Annotations,
) -> (Effect, EffectSource) {
    if let Some(e) = entry {
        return (e, EffectSource::Agentfile);
    }
    if let Some(e) = server {
        return (e, EffectSource::Server);
    }
    if trusted {
        let effect = if annotations.read_only == Some(true) {
            Effect::Read
        } else if annotations.idempotent == Some(true) {
            Effect::Idempotent
        } else {
            Effect::Write
        };
        return (effect, EffectSource::Annotations);
    }
    (Effect::Write, EffectSource::Default)
}

/// How an MCP tool entry's effect class reads before the server is asked (`validate`): pinned by
/// the entry, set by the server's `effect:`, left to a trusted server's annotations, or `write`.
pub fn entry_effect_label(pinned: Option<Effect>, server: &McpServer) -> String {
    match (pinned, server.effect, server.trusted) {
        (Some(e), _, _) => format!("{}, agentfile", e.as_str()),
        (None, Some(e), _) => format!("{}, mcp_servers", e.as_str()),
        (None, None, true) => "annotations (trusted)".into(),
        (None, None, false) => "write, default".into(),
    }
}

impl McpServer {
    /// Where the server is, for summaries: its URL, its sidecar image, or its local command.
    pub fn describe(&self) -> String {
        let trust = if self.trusted { ", trusted" } else { "" };
        match &self.transport {
            McpTransport::Http { url, .. } => format!("{url}{trust}"),
            McpTransport::Sidecar { image, command, .. } => {
                format!("sidecar {image}: {}{trust}", command.join(" "))
            }
            McpTransport::Stdio { command, .. } => {
                format!("in the agent's container: {}{trust}", command.join(" "))
            }
        }
    }
}

/// One piece of a header value template.
enum Part<'a> {
    /// Literal text.
    Text(&'a str),
    /// A secret's name.
    Secret(&'a str),
}

/// A header value template in pieces: `${NAME}` parts are secrets, a bare secret name is one
/// secret, anything else is text.
fn parts(value: &str) -> Vec<Part<'_>> {
    if !value.contains("${") {
        return vec![if super::names::is_valid_secret_name(value) {
            Part::Secret(value)
        } else {
            Part::Text(value)
        }];
    }
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        out.push(Part::Text(&rest[..start]));
        out.push(Part::Secret(&rest[start + 2..start + len]));
        rest = &rest[start + len + 1..];
    }
    out.push(Part::Text(rest));
    out
}

/// The secret names a header value template uses (`Bearer ${GITHUB_TOKEN}` → `GITHUB_TOKEN`),
/// or the whole value when it is a bare secret name.
pub fn template_secrets(value: &str) -> Vec<String> {
    parts(value)
        .into_iter()
        .filter_map(|p| match p {
            Part::Secret(name) => Some(name.to_string()),
            Part::Text(_) => None,
        })
        .collect()
}

/// A header's value with its secrets filled in; `Err(name)` names a secret that has no value.
pub fn fill_header(value: &str, secret: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    for part in parts(value) {
        match part {
            Part::Text(text) => out.push_str(text),
            Part::Secret(name) => out.push_str(&secret(name).ok_or_else(|| name.to_string())?),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn model_names_are_stable_and_acceptable_to_providers() {
        assert_eq!(
            model_name("time", "get_current_time"),
            "time__get_current_time"
        );
        assert_eq!(model_name("git", "git.log/x"), "git__git_log_x");
        assert_eq!(model_name("a", &"x".repeat(100)).len(), MAX_MODEL_NAME);
    }

    #[test]
    fn effect_classes_follow_the_agentfile_then_trusted_annotations_then_write() {
        let ro = Annotations {
            read_only: Some(true),
            idempotent: None,
        };
        let idem = Annotations {
            read_only: Some(false),
            idempotent: Some(true),
        };
        assert_eq!(
            mcp_effect(Some(Effect::Write), Some(Effect::Read), true, ro),
            (Effect::Write, EffectSource::Agentfile)
        );
        assert_eq!(
            mcp_effect(None, Some(Effect::Idempotent), true, ro),
            (Effect::Idempotent, EffectSource::Server)
        );
        assert_eq!(
            mcp_effect(None, None, true, ro),
            (Effect::Read, EffectSource::Annotations)
        );
        assert_eq!(
            mcp_effect(None, None, true, idem),
            (Effect::Idempotent, EffectSource::Annotations)
        );
        assert_eq!(
            mcp_effect(None, None, true, Annotations::default()),
            (Effect::Write, EffectSource::Annotations)
        );
        // An untrusted server's hints decide nothing.
        assert_eq!(
            mcp_effect(None, None, false, ro),
            (Effect::Write, EffectSource::Default)
        );
    }

    #[test]
    fn verifier_templates_take_the_writes_arguments() {
        let args = json!({"path": "a.txt", "n": 3, "tags": ["x"]});
        assert_eq!(VerifyArgs::Same.apply(&args), args);
        let t = VerifyArgs::Template(json!({
            "file": "{{args.path}}",
            "count": "{{args.n}}",
            "query": "path={{args.path}} n={{args.n}}{{args.missing}}",
            "fixed": true,
            "list": ["{{args.tags}}"]
        }));
        assert_eq!(
            t.apply(&args),
            json!({"file": "a.txt", "count": 3, "query": "path=a.txt n=3", "fixed": true, "list": [["x"]]})
        );
    }

    #[test]
    fn header_templates_name_their_secrets_and_fill_them() {
        assert_eq!(template_secrets("Bearer ${GH_TOKEN}"), ["GH_TOKEN"]);
        assert_eq!(template_secrets("API_KEY"), ["API_KEY"]);
        assert!(template_secrets("plain text").is_empty());
        let secret = |n: &str| (n == "GH_TOKEN").then(|| "s3cret".to_string());
        assert_eq!(
            fill_header("Bearer ${GH_TOKEN}", secret).unwrap(),
            "Bearer s3cret"
        );
        assert_eq!(fill_header("GH_TOKEN", secret).unwrap(), "s3cret");
        assert_eq!(fill_header("${NOPE}", secret).unwrap_err(), "NOPE");
    }

    #[test]
    fn sources_cover_their_tools() {
        let one = McpSource {
            server: "s".into(),
            tool: Some("a".into()),
            allow: vec![],
        };
        let all = McpSource {
            server: "s".into(),
            tool: None,
            allow: vec![],
        };
        let some = McpSource {
            server: "s".into(),
            tool: None,
            allow: vec!["b".into()],
        };
        assert!(one.covers("a") && !one.covers("b"));
        assert!(all.covers("anything"));
        assert!(some.covers("b") && !some.covers("a"));
    }
}
