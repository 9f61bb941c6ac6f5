//! `mcp_servers:` (the pool's MCP servers) and the `mcp://` tool entries that use them.

use super::problem::Shape;
use super::*;
use crate::mcp::{self, McpServer, McpSource, McpTransport, Verify, VerifyArgs};

/// One `mcp_servers.<name>` entry as written.
#[derive(Default)]
pub(super) struct ServerIn {
    url: Option<String>,
    headers: BTreeMap<String, String>,
    image: Option<String>,
    command: Option<Vec<String>>,
    env: BTreeMap<String, String>,
    secrets: Vec<String>,
    trusted: bool,
    effect: Option<Effect>,
    /// `security:` (sidecars only) and where its key is.
    security: Option<(crate::security::Security, Loc)>,
}

pub(super) const MCP_SERVER: Section<ServerIn> = Section {
    what: "an MCP server",
    keys: &[
        ("url", |cx, s, f| {
            let url = cx.string(f.value, &f.path)?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                cx.report(&f.path, f.value.loc, Problem::McpUrl(&url));
                return None;
            }
            s.url = Some(url);
            Some(())
        }),
        ("headers", |cx, s, f| {
            s.headers = cx.mcp_headers(f.value, &f.path)?;
            Some(())
        }),
        ("image", |cx, s, f| {
            let image = cx.string(f.value, &f.path)?;
            if image.trim().is_empty() {
                cx.type_error(&f.path, f.value, "an image name");
                return None;
            }
            s.image = Some(image);
            Some(())
        }),
        ("command", |cx, s, f| {
            s.command = Some(cx.command(f.value, &f.path)?);
            Some(())
        }),
        ("env", |cx, s, f| {
            s.env = cx.env(f.value, &f.path)?;
            Some(())
        }),
        ("secrets", |cx, s, f| {
            s.secrets = cx
                .secrets(f.value, &f.path)?
                .into_iter()
                .map(|(n, _)| n)
                .collect();
            Some(())
        }),
        ("trusted", |cx, s, f| {
            s.trusted = cx.boolean(f.value, &f.path)?;
            Some(())
        }),
        ("effect", |cx, s, f| {
            s.effect = Some(cx.effect(f.value, &f.path)?);
            Some(())
        }),
        ("security", |cx, s, f| {
            s.security = Some((cx.security(f.value, &f.path)?, f.key.loc));
            Some(())
        }),
    ],
    unsupported: &["transport", "auth", "oauth"],
};

/// `verify:` on a tool entry, as written (the tool is resolved once the agent's list is known).
pub(super) struct VerifyIn {
    tool: Option<(String, Loc)>,
    args: VerifyArgs,
}

impl Default for VerifyIn {
    fn default() -> Self {
        Self {
            tool: None,
            args: VerifyArgs::Same,
        }
    }
}

pub(super) const VERIFY: Section<VerifyIn> = Section {
    what: "a verifier",
    keys: &[
        ("tool", |cx, v, f| {
            v.tool = Some((cx.string(f.value, &f.path)?, f.value.loc));
            Some(())
        }),
        ("args", |cx, v, f| {
            v.args = match &f.value.kind {
                Kind::Str(s) if s == "same" => VerifyArgs::Same,
                Kind::Map(_) => VerifyArgs::Template(cx.json(f.value, &f.path)?),
                _ => {
                    cx.type_error(&f.path, f.value, "`same` or a mapping of arguments");
                    return None;
                }
            };
            Some(())
        }),
    ],
    unsupported: &[],
};

/// `server/tool` → (server, Some(tool)); `server` or `server/` → (server, None).
pub(super) fn split_mcp(rest: &str) -> (&str, Option<&str>) {
    match rest.split_once('/') {
        Some((server, "")) => (server, None),
        Some((server, tool)) => (server, Some(tool)),
        None => (rest, None),
    }
}

impl Cx {
    /// Decodes `mcp_servers:` into [`Cx::mcp`]; a server with errors is remembered in
    /// [`Cx::mcp_invalid`] so the tools that use it are not reported again. `None` when any
    /// server is invalid.
    pub(super) fn mcp_servers(&mut self, node: &Node, path: &str) -> Option<()> {
        let Kind::Map(entries) = &node.kind else {
            self.type_error(path, node, "a mapping of server names to servers");
            return None;
        };
        let mut ok = true;
        for (key, value) in entries {
            let p = join(path, &key.name);
            if !names::is_valid_name(&key.name) {
                self.invalid_name(&p, key.loc, &key.name, "MCP server name");
                self.mcp_invalid.insert(key.name.clone());
                ok = false;
                continue;
            }
            match self.mcp_server(key, value, &p) {
                Some(server) => {
                    self.mcp.insert(key.name.clone(), server);
                }
                None => {
                    self.mcp_invalid.insert(key.name.clone());
                    ok = false;
                }
            }
        }
        ok.then_some(())
    }

    fn mcp_server(&mut self, key: &Key, node: &Node, path: &str) -> Option<McpServer> {
        let mut s = ServerIn::default();
        if !self.dispatch(node, path, &MCP_SERVER, &mut s)? {
            return None;
        }
        if s.url.is_none() && !s.headers.is_empty() && (s.image.is_some() || s.command.is_some()) {
            self.report(
                path,
                key.loc,
                Problem::McpShape(&key.name, Shape::HeadersWithoutUrl),
            );
            return None;
        }
        if let Some((_, at)) = &s.security
            && s.image.is_none()
        {
            let problem =
                Problem::Security(super::security::SecurityProblem::NotASidecar(&key.name));
            self.report(&join(path, "security"), *at, problem);
            return None;
        }
        let transport = match (s.url, s.image, s.command) {
            (Some(url), None, None) => {
                if !s.env.is_empty() || !s.secrets.is_empty() {
                    self.report(path, key.loc, Problem::McpShape(&key.name, Shape::EnvOnUrl));
                    return None;
                }
                McpTransport::Http {
                    url,
                    headers: s.headers,
                }
            }
            (None, Some(image), Some(command)) => McpTransport::Sidecar {
                image,
                command,
                env: s.env,
                secrets: s.secrets,
                security: s.security.map(|(sec, _)| sec).unwrap_or_default(),
            },
            (None, None, Some(command)) => McpTransport::Stdio {
                command,
                env: s.env,
                secrets: s.secrets,
            },
            (None, Some(_), None) => {
                self.report(
                    path,
                    key.loc,
                    Problem::McpShape(&key.name, Shape::ImageWithoutCommand),
                );
                return None;
            }
            (None, None, None) => {
                self.report(path, key.loc, Problem::McpShape(&key.name, Shape::Nothing));
                return None;
            }
            (Some(_), _, _) => {
                self.report(
                    path,
                    key.loc,
                    Problem::McpShape(&key.name, Shape::UrlAndCommand),
                );
                return None;
            }
        };
        Some(McpServer {
            transport,
            trusted: s.trusted,
            effect: s.effect,
        })
    }

    /// `headers:`: header name → a value naming secrets (`GH_TOKEN`, `Bearer ${GH_TOKEN}`).
    fn mcp_headers(&mut self, node: &Node, path: &str) -> Option<BTreeMap<String, String>> {
        let Kind::Map(entries) = &node.kind else {
            self.type_error(path, node, "a mapping of header names to secret names");
            return None;
        };
        let mut out = BTreeMap::new();
        let mut ok = true;
        for (k, v) in entries {
            let p = join(path, &k.name);
            let Some(value) = self.string(v, &p) else {
                ok = false;
                continue;
            };
            let secrets = mcp::template_secrets(&value);
            if secrets.is_empty() || names::looks_like_secret_value(&value) {
                self.report(&p, v.loc, Problem::HeaderNotASecret(&k.name));
                ok = false;
                continue;
            }
            if let Some(bad) = secrets.iter().find(|s| !names::is_valid_secret_name(s)) {
                self.secret_name_error(&p, v.loc, bad);
                ok = false;
                continue;
            }
            out.insert(k.name.clone(), value);
        }
        ok.then_some(out)
    }

    /// A command line: a list of strings, or one string of words without quotes.
    fn command(&mut self, node: &Node, path: &str) -> Option<Vec<String>> {
        let words: Vec<String> = match &node.kind {
            Kind::Str(s) => {
                if s.contains(['"', '\'', '\\', '$', '|', '&', ';', '>', '<']) {
                    self.report(path, node.loc, Problem::CommandNeedsList(s));
                    return None;
                }
                s.split_whitespace().map(str::to_string).collect()
            }
            Kind::Seq(_) => self
                .string_list(node, path)?
                .into_iter()
                .map(|(s, _)| s)
                .collect(),
            _ => {
                self.type_error(path, node, "a command as a list of strings");
                return None;
            }
        };
        if words.is_empty() || words[0].is_empty() {
            self.report(path, node.loc, Problem::EmptyCommand);
            return None;
        }
        Some(words)
    }

    pub(super) fn effect(&mut self, node: &Node, path: &str) -> Option<Effect> {
        let text = self.string(node, path)?;
        let Some(effect) = Effect::parse(&text) else {
            self.report(path, node.loc, Problem::UnknownEffect(&text));
            return None;
        };
        Some(effect)
    }

    /// Whether `server` is a valid `mcp_servers` entry. An unknown one is reported at `path`
    /// and `loc` with the closest declared name; one with its own errors is not reported again.
    pub(super) fn known_mcp_server(&mut self, server: &str, loc: Loc, path: &str) -> bool {
        if self.mcp.contains_key(server) {
            return true;
        }
        if self.mcp_invalid.contains(server) {
            return false;
        }
        let known: Vec<&str> = self.mcp.keys().map(String::as_str).collect();
        let closest = closest(server, &known).map(str::to_string);
        let known = known.join(", ");
        self.report(
            path,
            loc,
            Problem::UnknownMcpServer {
                server,
                closest,
                known,
            },
        );
        false
    }

    /// A tool entry `mcp://server[/tool]` with its `effect`/`allow`/`verify`.
    pub(super) fn mcp_tool(
        &mut self,
        name: &str,
        loc: Loc,
        path: &str,
        effect: Option<Effect>,
        allow: Vec<String>,
    ) -> Option<ToolSpec> {
        let (server, tool) = split_mcp(name.strip_prefix("mcp://").unwrap_or(name));
        if !self.known_mcp_server(server, loc, path) {
            return None;
        }
        let server_effect = self.mcp[server].effect;
        if tool.is_some() && !allow.is_empty() {
            self.report(path, loc, Problem::AllowOnOneTool(name));
            return None;
        }
        // Pinned only by the entry's own `effect:`; the server's `effect:` (or, for a trusted
        // server, its annotations) is applied by the runner once it knows the tools.
        let (effect_value, pinned) = match effect {
            Some(e) => (e, true),
            None => (server_effect.unwrap_or(Effect::Write), false),
        };
        let model = match tool {
            Some(t) => mcp::model_name(server, t),
            None => format!("{server}{}*", mcp::NAME_SEPARATOR),
        };
        Some(ToolSpec {
            name: model,
            effect: effect_value,
            effect_pinned: pinned,
            mcp: Some(McpSource {
                server: server.to_string(),
                tool: tool.map(str::to_string),
                allow,
            }),
            verify: None,
            handoff: None,
            scope: None,
            secrets: Vec::new(),
        })
    }

    /// Resolves a `verify:` once the agent's tool list is known: the verifier must be one of
    /// the agent's tools.
    pub(super) fn verify(
        &mut self,
        v: VerifyIn,
        tools: &[ToolSpec],
        at: Loc,
        path: &str,
    ) -> Option<Verify> {
        let Some((written, loc)) = v.tool else {
            self.report(&join(path, "tool"), at, Problem::MissingVerifyTool);
            return None;
        };
        let name = match written.strip_prefix("mcp://") {
            Some(rest) => match split_mcp(rest) {
                (server, Some(tool)) => mcp::model_name(server, tool),
                (_, None) => {
                    self.report(
                        &join(path, "tool"),
                        loc,
                        Problem::VerifierNotATool(&written),
                    );
                    return None;
                }
            },
            None => written
                .strip_prefix("builtin://")
                .unwrap_or(&written)
                .to_string(),
        };
        if !tools.iter().any(|t| t.offers(&name)) {
            let declared: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
            self.report(
                &join(path, "tool"),
                loc,
                Problem::UndeclaredVerifier {
                    name: &written,
                    declared,
                },
            );
            return None;
        }
        Some(Verify {
            tool: name,
            args: v.args,
        })
    }
}
