//! `governance.human_approval`: which calls wait for a person's decision, how long a request
//! stands, and where each new request is announced.
//!
//! Decoding happens in three steps, because a shared (top-level) `human_approval` is written
//! once but applies to every agent that has none of its own:
//! 1. [`Cx::human_approval`] reads the mapping: keys, types, ranges, `ask_human` and duplicates
//!    in `actions`, the URL and its secret. Builtin names and Ninetrix aliases resolve here.
//! 2. [`Cx::approval_servers`] checks the `mcp://` servers `actions` names against
//!    `mcp_servers` (known only once the top level is read), once per written `human_approval`.
//! 3. [`Cx::resolve_approval`] checks, per agent, that each action is one of the agent's tools.

use super::mcp::split_mcp;
use super::*;
use crate::mcp;
use crate::schema::{ApprovalAction, HumanApproval};

/// `human_approval:` as written, decoded as far as it can be without the agent's tools.
#[derive(Clone, Debug)]
pub(super) struct ApprovalIn {
    /// Whether it sits at the top level (shared by every agent without its own).
    shared: bool,
    /// Whether it has no errors. An invalid one keeps its valid `actions`, so they are still
    /// checked against the agent's tools (every problem is reported in one pass).
    pub(super) valid: bool,
    enabled: bool,
    actions: Vec<ActionIn>,
    effects: Vec<Effect>,
    timeout_secs: u64,
    /// The URL and where its key is.
    notify_url: Option<(String, Loc)>,
    /// The secret's name and where its key is.
    notify_secret: Option<(String, Loc)>,
}

impl ApprovalIn {
    fn new(shared: bool) -> Self {
        Self {
            shared,
            valid: true,
            enabled: true,
            actions: Vec::new(),
            effects: Vec::new(),
            timeout_secs: HumanApproval::DEFAULT_TIMEOUT_SECS,
            notify_url: None,
            notify_secret: None,
        }
    }
}

/// One `actions` entry.
#[derive(Clone, Debug)]
struct ActionIn {
    /// As written.
    written: String,
    loc: Loc,
    path: String,
    target: Target,
}

/// What an `actions` entry names.
#[derive(Clone, Debug)]
enum Target {
    /// Builtins by our names (a Ninetrix alias may stand for several).
    Builtins(Vec<&'static str>),
    /// `mcp://server/tool`.
    McpTool { server: String, tool: String },
    /// `mcp://server`: every tool of the server.
    McpServer(String),
    /// Anything else: one of the agent's tools by the name the model sees
    /// (`server__tool`), or an error once the agent's tools are known.
    Other(String),
}

impl Target {
    fn of(written: &str) -> Target {
        if let Some(rest) = written.strip_prefix("mcp://") {
            return match split_mcp(rest) {
                (server, Some(tool)) => Target::McpTool {
                    server: server.to_string(),
                    tool: tool.to_string(),
                },
                (server, None) => Target::McpServer(server.to_string()),
            };
        }
        let bare = written.strip_prefix("builtin://").unwrap_or(written);
        if let Some(b) = tools::builtin(bare) {
            return Target::Builtins(vec![b.name]);
        }
        if let Some(ours) = tools::group(bare) {
            return Target::Builtins(ours.to_vec());
        }
        Target::Other(written.to_string())
    }

    /// The names the model sees that this entry gates (`mcp://server` as written), to find
    /// two entries that gate the same tool.
    fn keys(&self) -> Vec<String> {
        match self {
            Target::Builtins(names) => names.iter().map(|n| n.to_string()).collect(),
            Target::McpTool { server, tool } => vec![mcp::model_name(server, tool)],
            Target::McpServer(server) => vec![format!("mcp://{server}")],
            Target::Other(name) => vec![name.clone()],
        }
    }
}

pub(super) const HUMAN_APPROVAL: Section<ApprovalIn> = Section {
    what: "human_approval",
    keys: &[
        ("enabled", |cx, a, f| {
            a.enabled = cx.boolean(f.value, &f.path)?;
            Some(())
        }),
        ("actions", |cx, a, f| {
            let (actions, ok) = cx.approval_actions(f.value, &f.path)?;
            a.actions = actions;
            ok.then_some(())
        }),
        ("effects", |cx, a, f| {
            let Kind::Seq(items) = &f.value.kind else {
                cx.type_error(
                    &f.path,
                    f.value,
                    "a list of effects (`read`, `idempotent`, `write`)",
                );
                return None;
            };
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                let p = format!("{}[{i}]", f.path);
                let Some(effect) = cx.effect(item, &p) else {
                    ok = false;
                    continue;
                };
                if a.effects.contains(&effect) {
                    cx.report(
                        &p,
                        item.loc,
                        Problem::DuplicateApprovalEffect(effect.as_str()),
                    );
                    ok = false;
                    continue;
                }
                a.effects.push(effect);
            }
            ok.then_some(())
        }),
        ("timeout", |cx, a, f| {
            a.timeout_secs = cx.duration(f.value, &f.path, DurationField::ApprovalTimeout)?;
            Some(())
        }),
        ("notify_url", |cx, a, f| {
            let url = cx.string(f.value, &f.path)?;
            match check_http_url(&url) {
                UrlCheck::Ok => {}
                UrlCheck::Credentials => {
                    cx.report(&f.path, f.value.loc, Problem::ApprovalUrlCredentials);
                    return None;
                }
                UrlCheck::Invalid => {
                    cx.report(&f.path, f.value.loc, Problem::ApprovalUrl(&url));
                    return None;
                }
            }
            a.notify_url = Some((url, f.key.loc));
            Some(())
        }),
        ("notify_secret", |cx, a, f| {
            let name = cx.string(f.value, &f.path)?;
            if !names::is_valid_secret_name(&name) {
                cx.secret_name_error(&f.path, f.value.loc, &name);
                return None;
            }
            a.notify_secret = Some((name, f.key.loc));
            Some(())
        }),
    ],
    unsupported: &[],
};

impl Cx {
    /// Step 1: `human_approval:` at `path` (its key at `at`). Its errors are reported and
    /// leave it invalid.
    pub(super) fn human_approval(
        &mut self,
        node: &Node,
        path: &str,
        at: Loc,
        shared: bool,
    ) -> ApprovalIn {
        let mut a = ApprovalIn::new(shared);
        a.valid = self
            .dispatch(node, path, &HUMAN_APPROVAL, &mut a)
            .unwrap_or(false);
        if !a.valid {
            return a;
        }
        match (&a.notify_url, &a.notify_secret) {
            (Some((_, loc)), None) => {
                self.report(
                    &join(path, "notify_secret"),
                    *loc,
                    Problem::NotifyUrlWithoutSecret,
                );
                a.valid = false;
            }
            (None, Some((_, loc))) => {
                self.report(
                    &join(path, "notify_url"),
                    *loc,
                    Problem::NotifySecretWithoutUrl,
                );
                a.valid = false;
            }
            _ => {
                if a.enabled && a.actions.is_empty() && a.effects.is_empty() {
                    self.report(path, at, Problem::ApprovalGatesNothing);
                }
            }
        }
        a
    }

    /// `actions:`: tool names resolved as far as they can be before the agent's tools are
    /// known; `ask_human` and entries gating a tool twice are errors. The valid entries, and
    /// whether all were; `None` when it is not a list.
    fn approval_actions(&mut self, node: &Node, path: &str) -> Option<(Vec<ActionIn>, bool)> {
        let Kind::Seq(items) = &node.kind else {
            self.type_error(path, node, "a list of tool names");
            return None;
        };
        let mut out: Vec<ActionIn> = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let Some(written) = self.string(item, &p) else {
                ok = false;
                continue;
            };
            let target = Target::of(&written);
            if matches!(&target, Target::Builtins(names) if names.contains(&tools::ASK_HUMAN)) {
                self.report(&p, item.loc, Problem::ApprovalGatesAskHuman(&written));
                ok = false;
                continue;
            }
            let keys = target.keys();
            if let Some(earlier) = out
                .iter()
                .find(|a| a.target.keys().iter().any(|k| keys.contains(k)))
            {
                let same_as = (earlier.written != written).then(|| earlier.written.clone());
                self.report(
                    &p,
                    item.loc,
                    Problem::DuplicateApprovalAction {
                        name: &written,
                        same_as,
                    },
                );
                ok = false;
                continue;
            }
            out.push(ActionIn {
                written,
                loc: item.loc,
                path: p,
                target,
            });
        }
        Some((out, ok))
    }

    /// Step 2: every `mcp://` server `actions` names must be a declared `mcp_servers` entry.
    /// Unknown ones are reported (as in `tools:`), and their entries dropped so step 3 does
    /// not report them again.
    pub(super) fn approval_servers(&mut self, a: &mut ApprovalIn) {
        let mut known = Vec::with_capacity(a.actions.len());
        for action in std::mem::take(&mut a.actions) {
            if let Target::McpTool { server, .. } | Target::McpServer(server) = &action.target
                && !self.known_mcp_server(server, action.loc, &action.path)
            {
                a.valid = false;
                continue;
            }
            known.push(action);
        }
        a.actions = known;
    }

    /// Step 3: the approval settings of agent `agent`, whose tools are `tools`; each action
    /// must be one of them. `None` when one is not, or `a` is invalid.
    pub(super) fn resolve_approval(
        &mut self,
        a: &ApprovalIn,
        agent: &str,
        tools: &[ToolSpec],
    ) -> Option<HumanApproval> {
        let mut actions = Vec::new();
        let mut ok = true;
        for action in &a.actions {
            let resolved: Option<Vec<ApprovalAction>> = match &action.target {
                Target::Builtins(names) => names
                    .iter()
                    .map(|name| {
                        tools
                            .iter()
                            .any(|t| t.mcp.is_none() && t.name == *name)
                            .then(|| ApprovalAction::Tool(name.to_string()))
                    })
                    .collect(),
                Target::McpTool { server, tool } => {
                    let model = mcp::model_name(server, tool);
                    tools
                        .iter()
                        .any(|t| t.offers(&model))
                        .then(|| vec![ApprovalAction::Tool(model)])
                }
                Target::McpServer(server) => tools
                    .iter()
                    .any(|t| t.mcp.as_ref().is_some_and(|m| &m.server == server))
                    .then(|| vec![ApprovalAction::Server(server.clone())]),
                Target::Other(name) => tools
                    .iter()
                    .any(|t| t.offers(name))
                    .then(|| vec![ApprovalAction::Tool(name.clone())]),
            };
            match resolved {
                Some(list) => actions.extend(list),
                None => {
                    self.not_a_tool(a.shared, action, agent, tools);
                    ok = false;
                }
            }
        }
        (ok && a.valid).then(|| HumanApproval {
            enabled: a.enabled,
            actions,
            effects: a.effects.clone(),
            timeout_secs: a.timeout_secs,
            notify_url: a.notify_url.as_ref().map(|(u, _)| u.clone()),
            notify_secret: a.notify_secret.as_ref().map(|(s, _)| s.clone()),
        })
    }

    fn not_a_tool(&mut self, shared: bool, action: &ActionIn, agent: &str, tools: &[ToolSpec]) {
        // The agent's tools as an agentfile names them; `ask_human` is left out, as it cannot
        // be gated.
        let mut has: Vec<String> = Vec::new();
        let mut candidates: Vec<String> = Vec::new();
        for t in tools {
            match &t.mcp {
                None if t.name == tools::ASK_HUMAN => {}
                None => has.push(t.name.clone()),
                Some(source) => match &source.tool {
                    Some(tool) => has.push(format!("mcp://{}/{tool}", source.server)),
                    None => {
                        has.push(format!("mcp://{}", source.server));
                        candidates.extend(
                            source
                                .allow
                                .iter()
                                .map(|tool| format!("mcp://{}/{tool}", source.server)),
                        );
                    }
                },
            }
        }
        candidates.extend(has.iter().cloned());
        let candidates: Vec<&str> = candidates.iter().map(String::as_str).collect();
        let closest = closest(&action.written, &candidates).map(str::to_string);
        self.report(
            &action.path,
            action.loc,
            Problem::ApprovalNotATool {
                name: &action.written,
                agent,
                closest,
                has,
                shared,
            },
        );
    }
}

/// What [`check_http_url`] found.
#[derive(Debug, PartialEq)]
pub(super) enum UrlCheck {
    Ok,
    /// `user:password@` (or `token@`) before the host.
    Credentials,
    /// Not an http(s) URL with a host (and a valid port, if any).
    Invalid,
}

/// A strict check of a URL ninetrix connects to (a notification's, a remote A2A agent's card): scheme `http` or `https`, a non-empty host (a name,
/// an IPv4 address or a bracketed IPv6 address), an optional port from 1 to 65535, no
/// credentials, no spaces or control characters.
pub(super) fn check_http_url(url: &str) -> UrlCheck {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    // Checked first, so a credential is never repeated in a message.
    if authority.contains('@') {
        return UrlCheck::Credentials;
    }
    let Some(scheme) = scheme else {
        return UrlCheck::Invalid;
    };
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        || url.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return UrlCheck::Invalid;
    }
    let (host_ok, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((host, after)) = v6.split_once(']') else {
            return UrlCheck::Invalid;
        };
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return UrlCheck::Invalid,
            },
        };
        let ok = host.contains(':')
            && host
                .chars()
                .all(|c| c.is_ascii_hexdigit() || ":.".contains(c));
        (ok, port)
    } else {
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        };
        let ok = !host.is_empty()
            && !host.starts_with(['.', '-'])
            && host
                .chars()
                .all(|c| c.is_alphanumeric() || "-._".contains(c));
        (ok, port)
    };
    let port_ok = port.is_none_or(|p| {
        !p.is_empty()
            && p.chars().all(|c| c.is_ascii_digit())
            && p.parse::<u16>().is_ok_and(|n| n > 0)
    });
    if host_ok && port_ok {
        UrlCheck::Ok
    } else {
        UrlCheck::Invalid
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Diagnostic, Parsed, Report};

    #[test]
    fn notify_urls() {
        for ok in [
            "https://hooks.example.com/ninetrix",
            "http://localhost:8080/approvals?team=ops",
            "HTTPS://example.com",
            "http://10.0.0.5:9000",
            "http://[::1]:8080/x",
            "https://host.docker.internal/hook#frag",
        ] {
            assert_eq!(check_http_url(ok), UrlCheck::Ok, "{ok}");
        }
        for creds in [
            "https://user:pass@hooks.example.com/x",
            "https://token@hooks.example.com",
            "user:pass@hooks.example.com",
            "ftp://user:pass@example.com",
        ] {
            assert_eq!(check_http_url(creds), UrlCheck::Credentials, "{creds}");
        }
        for bad in [
            "hooks.example.com/x",
            "ftp://example.com",
            "https://",
            "https:///path",
            "https://:8080",
            "https://example.com:",
            "https://example.com:0",
            "https://example.com:70000",
            "https://example.com:http",
            "https://exa mple.com",
            "https://example.com/a b",
            "https://[::1",
            "https://[::1]x",
            "https://-example.com",
            "mailto:ops@example.com",
        ] {
            assert_ne!(check_http_url(bad), UrlCheck::Ok, "{bad}");
        }
        // The path may hold an `@`: only the part before the host is checked for credentials.
        assert_eq!(
            check_http_url("https://example.com/users/@ops"),
            UrlCheck::Ok
        );
    }

    fn parse(text: &str) -> Result<Parsed, Report> {
        crate::parse("agentfile.yaml", text)
    }

    fn valid(text: &str) -> Parsed {
        parse(text).unwrap_or_else(|r| panic!("{}", r.render(false)))
    }

    /// The lines of an agent's `governance.human_approval` (each indented under it) in a file
    /// whose line 9 is the first of them, at column 9:
    ///
    /// ```text
    /// 6     tools: [shell, file_read, mcp://tickets/create_ticket]
    /// 8       human_approval:
    /// 9         <first line>
    /// ```
    fn approval(lines: &str) -> String {
        let body: String = lines.lines().map(|l| format!("        {l}\n")).collect();
        format!(
            "mcp_servers:\n  tickets: {{ url: \"https://tickets.example.com/mcp\" }}\n\
             agents:\n  a:\n    runtime: {{ provider: scripted, script: [hi], image: debian }}\n    \
             tools: [shell, file_read, mcp://tickets/create_ticket]\n    governance:\n      \
             human_approval:\n{body}"
        )
    }

    /// The one error of `text`, which must not validate.
    fn the_error(text: &str) -> Diagnostic {
        let report = parse(text).expect_err("the file must not validate");
        let errors: Vec<&Diagnostic> = report
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .collect();
        assert_eq!(errors.len(), 1, "{}", report.render(false));
        errors[0].clone()
    }

    /// Asserts `text`'s one error: its code, `line:column`, message, and that it has help.
    fn assert_error(text: &str, code: &str, at: (u32, u32), message: &str) -> Diagnostic {
        let d = the_error(text);
        assert_eq!(
            (d.kind.code(), d.line, d.column, d.message.as_str()),
            (code, at.0, at.1, message),
            "{d:?}"
        );
        assert!(d.help.is_some(), "no help in {d:?}");
        d
    }

    #[test]
    fn a_full_human_approval_decodes() {
        let text = r#"
mcp_servers:
  tickets: { url: "https://tickets.example.com/mcp" }
  time: { image: mcp/time, command: [mcp-server-time] }
agents:
  ops:
    runtime: { provider: scripted, script: [hi], image: debian }
    tools: [bash, write_file, mcp://tickets/create_ticket, mcp://time, ask_user, file_read]
    secrets: [OPS_TOKEN]
    governance:
      human_approval:
        enabled: true
        actions:
          - bash
          - write_file
          - mcp://tickets/create_ticket
          - mcp://time
          - builtin://file_read
        effects: [write, idempotent]
        timeout: 15m
        notify_url: https://hooks.example.com/ninetrix
        notify_secret: APPROVAL_WEBHOOK_SECRET
"#;
        let parsed = valid(text);
        assert!(parsed.warnings.diagnostics.is_empty());
        let ops = parsed.agentfile.agent("ops").unwrap();
        let expected = HumanApproval {
            enabled: true,
            actions: vec![
                ApprovalAction::Tool("shell".into()),
                ApprovalAction::Tool("file_write".into()),
                ApprovalAction::Tool("tickets__create_ticket".into()),
                ApprovalAction::Server("time".into()),
                ApprovalAction::Tool("file_read".into()),
            ],
            effects: vec![Effect::Write, Effect::Idempotent],
            timeout_secs: 900,
            notify_url: Some("https://hooks.example.com/ninetrix".into()),
            notify_secret: Some("APPROVAL_WEBHOOK_SECRET".into()),
        };
        assert_eq!(ops.governance.human_approval.as_ref(), Some(&expected));
        // `up` must pass the signing secret's value to the runner.
        assert_eq!(ops.secrets, ["OPS_TOKEN", "APPROVAL_WEBHOOK_SECRET"]);
        assert!(ops.governance.gates("shell", Effect::Write));
        assert!(ops.governance.gates("time__get_current_time", Effect::Read));
        assert!(!ops.governance.gates("ask_human", Effect::Read));
        assert_eq!(ops.governance.approval_timeout_secs(), 900);
        // The spec round-trips through the JSON the runner gets.
        let json = serde_json::to_string(ops).unwrap();
        let back: AgentSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(&back, ops);
    }

    #[test]
    fn defaults_and_timeout_units() {
        let text = approval("effects: [write]");
        let a = valid(&text).agentfile.agents.remove(0);
        let h = a.governance.human_approval.unwrap();
        assert!(h.enabled);
        assert!(h.actions.is_empty());
        assert_eq!(h.timeout_secs, HumanApproval::DEFAULT_TIMEOUT_SECS);
        assert_eq!((h.notify_url, h.notify_secret), (None, None));
        // Without `human_approval`, nothing is gated.
        let none = valid("agents:\n  a:\n    tools: [shell]\n    runtime: { image: debian }\n")
            .agentfile
            .agents
            .remove(0);
        assert_eq!(none.governance.human_approval, None);
        for (written, secs) in [
            ("30s", 30),
            ("15m", 900),
            ("24h", 86_400),
            ("7d", 604_800),
            ("3600", 3600),
            ("\"3600\"", 3600),
            ("1", 1),
            ("365d", 365 * 86_400),
        ] {
            let text = approval(&format!("effects: [write]\ntimeout: {written}"));
            let a = valid(&text).agentfile.agents.remove(0);
            assert_eq!(
                a.governance.human_approval.unwrap().timeout_secs,
                secs,
                "{written}"
            );
        }
    }

    #[test]
    fn an_agents_own_human_approval_replaces_the_shared_one() {
        let text = r#"
governance:
  max_budget_per_run: 2
  human_approval: { actions: [shell], timeout: 1h }
agents:
  shared:
    tools: [shell]
    runtime: { image: debian }
  own:
    tools: [shell, file_write]
    runtime: { image: debian }
    governance:
      human_approval: { effects: [write] }
  budget_only:
    tools: [shell]
    runtime: { image: debian }
    governance: { max_budget_per_run: 1 }
"#;
        let af = valid(text).agentfile;
        let shared = &af.agent("shared").unwrap().governance;
        assert_eq!(shared.max_budget_per_run, Some(2.0));
        let h = shared.human_approval.as_ref().unwrap();
        assert_eq!(h.actions, [ApprovalAction::Tool("shell".into())]);
        assert_eq!(h.timeout_secs, 3600);

        // Replaced entirely: none of the shared actions, and the default timeout.
        let own = &af.agent("own").unwrap().governance;
        assert_eq!(own.max_budget_per_run, Some(2.0));
        let h = own.human_approval.as_ref().unwrap();
        assert!(h.actions.is_empty());
        assert_eq!(h.effects, [Effect::Write]);
        assert_eq!(h.timeout_secs, HumanApproval::DEFAULT_TIMEOUT_SECS);

        let budget_only = &af.agent("budget_only").unwrap().governance;
        assert_eq!(budget_only.max_budget_per_run, Some(1.0));
        assert_eq!(
            budget_only.human_approval.as_ref().unwrap().timeout_secs,
            3600
        );
    }

    #[test]
    fn a_shared_action_must_be_a_tool_of_every_agent_that_uses_it() {
        let text = "governance:\n  human_approval: { actions: [shell] }\nagents:\n  a:\n    \
                    tools: [shell]\n    runtime: { image: debian }\n  b:\n    tools: [file_read]\n";
        let d = assert_error(
            text,
            "undeclared_tool",
            (2, 31),
            "`shell` in `human_approval.actions` is not one of agent `b`'s tools",
        );
        assert_eq!(d.path, "governance.human_approval.actions[0]");
        let help = d.help.unwrap();
        assert!(help.contains("has these tools: file_read"), "{help}");
        assert!(
            help.contains("give `b` its own `governance.human_approval`"),
            "{help}"
        );
    }

    #[test]
    fn the_shared_human_approval_is_checked_once() {
        // `mcp_servers` after `governance`; an unknown server is reported once, not per agent.
        let text = "governance:\n  human_approval: { actions: [mcp://tickts] }\nagents:\n  a: {}\n  \
                    b: {}\nmcp_servers:\n  tickets: { url: \"https://t.example.com/mcp\" }\n";
        let d = assert_error(
            text,
            "unknown_mcp_server",
            (2, 31),
            "unknown MCP server `tickts`",
        );
        assert!(d.help.unwrap().starts_with("did you mean `tickets`?"));
        // A warning at the top level is reported once too.
        let text = "governance:\n  human_approval: { timeout: 1h }\nagents:\n  a: {}\n  b: {}\n";
        let parsed = valid(text);
        let codes: Vec<_> = parsed
            .warnings
            .diagnostics
            .iter()
            .map(|d| d.kind.code())
            .collect();
        assert_eq!(codes, ["approval_gates_nothing"]);
    }

    #[test]
    fn unknown_actions_name_the_agents_tools() {
        let d = assert_error(
            &approval("actions: [shel]"),
            "undeclared_tool",
            (9, 19),
            "`shel` in `human_approval.actions` is not one of agent `a`'s tools",
        );
        assert_eq!(d.path, "agents.a.governance.human_approval.actions[0]");
        assert_eq!(
            d.help.unwrap(),
            "did you mean `shell`? Agent `a` has these tools: shell, file_read, \
             mcp://tickets/create_ticket; add the tool to the agent's `tools:`, or remove it \
             from `actions`"
        );
        // A builtin the agent does not have, with no close name.
        let d = assert_error(
            &approval("actions: [http_request]"),
            "undeclared_tool",
            (9, 19),
            "`http_request` in `human_approval.actions` is not one of agent `a`'s tools",
        );
        assert!(
            d.help
                .unwrap()
                .starts_with("agent `a` has these tools: shell")
        );
        // An alias whose builtin the agent does not have.
        assert_error(
            &approval("actions: [write_file]"),
            "undeclared_tool",
            (9, 19),
            "`write_file` in `human_approval.actions` is not one of agent `a`'s tools",
        );
        // MCP: another tool of a declared server, and a server the agent does not use.
        let d = assert_error(
            &approval("actions: [mcp://tickets/create_tiket]"),
            "undeclared_tool",
            (9, 19),
            "`mcp://tickets/create_tiket` in `human_approval.actions` is not one of agent \
             `a`'s tools",
        );
        assert!(
            d.help
                .unwrap()
                .starts_with("did you mean `mcp://tickets/create_ticket`?")
        );
        let text = approval("actions: [mcp://time]").replace(
            "agents:",
            "  time: { image: mcp/time, command: [mcp-server-time] }\nagents:",
        );
        assert_error(
            &text,
            "undeclared_tool",
            (10, 19),
            "`mcp://time` in `human_approval.actions` is not one of agent `a`'s tools",
        );
        // A server `mcp_servers` does not declare: reported as in `tools:`.
        let d = assert_error(
            &approval("actions: [mcp://tickts/create_ticket]"),
            "unknown_mcp_server",
            (9, 19),
            "unknown MCP server `tickts`",
        );
        assert!(d.help.unwrap().starts_with("did you mean `tickets`?"));
    }

    #[test]
    fn actions_may_name_mcp_tools_as_the_model_sees_them() {
        let text = approval("actions: [tickets__create_ticket]");
        let a = valid(&text).agentfile.agents.remove(0);
        assert_eq!(
            a.governance.human_approval.unwrap().actions,
            [ApprovalAction::Tool("tickets__create_ticket".into())]
        );
        // … and then the same tool twice is a duplicate.
        assert_error(
            &approval("actions: [mcp://tickets/create_ticket, tickets__create_ticket]"),
            "duplicate_tool",
            (9, 48),
            "`tickets__create_ticket` gates a tool that `mcp://tickets/create_ticket` already \
             gates in `human_approval.actions`",
        );
    }

    #[test]
    fn every_problem_is_reported_in_one_pass() {
        let text = approval("actions: [shel, ask_user, mcp://tickts, shell]\ntimeout: 0");
        let report = parse(&text).unwrap_err();
        let found: Vec<(&str, u32, u32)> = report
            .diagnostics
            .iter()
            .map(|d| (d.kind.code(), d.line, d.column))
            .collect();
        assert_eq!(
            found,
            [
                ("undeclared_tool", 9, 19),
                ("invalid_value", 9, 25),
                ("unknown_mcp_server", 9, 35),
                ("out_of_range", 10, 18),
            ],
            "{}",
            report.render(false)
        );
    }

    #[test]
    fn ask_human_cannot_be_gated() {
        let d = assert_error(
            &approval("actions: [shell, ask_human]"),
            "invalid_value",
            (9, 26),
            "`ask_human` cannot be gated: it always asks a person",
        );
        assert!(d.help.unwrap().contains("ninetrix answer ID TEXT"));
        assert_error(
            &approval("actions: [ask_user]"),
            "invalid_value",
            (9, 19),
            "`ask_user` is `ask_human`, which cannot be gated: it always asks a person",
        );
    }

    #[test]
    fn duplicate_actions_and_effects() {
        assert_error(
            &approval("actions: [shell, shell]"),
            "duplicate_tool",
            (9, 26),
            "`shell` is listed twice in `human_approval.actions`",
        );
        assert_error(
            &approval("actions:\n  - shell\n  - bash"),
            "duplicate_tool",
            (11, 13),
            "`bash` gates a tool that `shell` already gates in `human_approval.actions`",
        );
        assert_error(
            &approval("effects: [write, read, write]"),
            "duplicate_setting",
            (9, 32),
            "effect `write` is listed twice in `human_approval.effects`",
        );
    }

    #[test]
    fn unknown_effects_list_the_three() {
        let d = assert_error(
            &approval("effects: [read, writes]"),
            "invalid_value",
            (9, 25),
            "unknown effect `writes`",
        );
        let help = d.help.unwrap();
        for effect in ["`read`", "`idempotent`", "`write`"] {
            assert!(help.contains(effect), "{help}");
        }
        assert_error(
            &approval("effects: write"),
            "wrong_type",
            (9, 18),
            "`effects` must be a list of effects (`read`, `idempotent`, `write`), found the \
             string \"write\"",
        );
    }

    #[test]
    fn bad_timeouts() {
        let timeout = |value: &str| approval(&format!("effects: [write]\ntimeout: {value}"));
        assert_error(
            &timeout("soon"),
            "invalid_value",
            (10, 18),
            "`timeout` must be a duration such as `30s`, `15m`, `24h` or `7d`, found \"soon\"",
        );
        assert_error(
            &timeout("1.5h"),
            "invalid_value",
            (10, 18),
            "`timeout` must be a duration such as `30s`, `15m`, `24h` or `7d`, found \"1.5h\"",
        );
        assert_error(
            &timeout("0"),
            "out_of_range",
            (10, 18),
            "`timeout` must be from 1 second to 365 days, found 0",
        );
        assert_error(
            &timeout("0s"),
            "out_of_range",
            (10, 18),
            "`timeout` must be from 1 second to 365 days, found \"0s\"",
        );
        assert_error(
            &timeout("-5"),
            "out_of_range",
            (10, 18),
            "`timeout` must be from 1 second to 365 days, found -5",
        );
        assert_error(
            &timeout("366d"),
            "out_of_range",
            (10, 18),
            "`timeout` must be from 1 second to 365 days, found \"366d\"",
        );
        assert_error(
            &timeout("31536001"),
            "out_of_range",
            (10, 18),
            "`timeout` must be from 1 second to 365 days, found 31536001",
        );
        assert_error(
            &timeout("99999999999999999999999d"),
            "out_of_range",
            (10, 18),
            "`timeout` must be from 1 second to 365 days, found \"99999999999999999999999d\"",
        );
        assert_error(
            &timeout("1.5"),
            "wrong_type",
            (10, 18),
            "`timeout` must be a duration such as `24h`, or whole seconds, found the number 1.5",
        );
    }

    #[test]
    fn notify_url_and_secret() {
        let d = assert_error(
            &approval("effects: [write]\nnotify_url: ftp://hooks.example.com/x\nnotify_secret: S"),
            "invalid_url",
            (10, 21),
            "`notify_url` must be an http:// or https:// URL with a host, found \
             \"ftp://hooks.example.com/x\"",
        );
        assert!(
            d.help
                .unwrap()
                .contains("https://hooks.example.com/ninetrix")
        );
        assert_error(
            &approval("effects: [write]\nnotify_url: hooks.example.com\nnotify_secret: S"),
            "invalid_url",
            (10, 21),
            "`notify_url` must be an http:// or https:// URL with a host, found \
             \"hooks.example.com\"",
        );

        // Credentials: an error that never repeats them.
        let text = approval(
            "effects: [write]\nnotify_url: https://ops:hunter2@hooks.example.com/x\n\
             notify_secret: S",
        );
        let d = assert_error(
            &text,
            "secret_value",
            (10, 21),
            "`notify_url` holds credentials (`user:password@` before the host)",
        );
        assert!(d.help.unwrap().contains("X-Ninetrix-Signature"));
        let report = parse(&text).unwrap_err();
        let rendered = report.render(false);
        assert!(!rendered.contains("hunter2"), "{rendered}");
        let json = serde_json::to_string(&report.diagnostics).unwrap();
        assert!(!json.contains("hunter2"), "{json}");

        assert_error(
            &approval("effects: [write]\nnotify_url: https://hooks.example.com/x"),
            "missing_key",
            (10, 9),
            "notify_url needs notify_secret: the name of the secret whose value signs each \
             notification (HMAC-SHA256)",
        );
        assert_error(
            &approval("effects: [write]\nnotify_secret: APPROVAL_WEBHOOK_SECRET"),
            "missing_key",
            (10, 9),
            "`notify_secret` signs notifications, but `human_approval` has no `notify_url` to \
             send them to",
        );
        let d = assert_error(
            &approval(
                "effects: [write]\nnotify_url: https://hooks.example.com/x\n\
                 notify_secret: approval-secret",
            ),
            "invalid_name",
            (11, 24),
            "`approval-secret` is not a valid secret name",
        );
        assert!(d.help.unwrap().contains("`APPROVAL_SECRET`"));
        // A secret value where its name belongs: masked.
        let text = approval(
            "effects: [write]\nnotify_url: https://hooks.example.com/x\n\
             notify_secret: sk_live_abcdefghijklmnop",
        );
        assert_error(
            &text,
            "secret_value",
            (11, 24),
            "this looks like a secret value, not a secret name",
        );
        assert!(
            !parse(&text)
                .unwrap_err()
                .render(false)
                .contains("abcdefghijklmnop")
        );

        // The secret is not listed twice when the agent lists it too.
        let text = approval(
            "effects: [write]\nnotify_url: https://hooks.example.com/x\nnotify_secret: HOOK",
        )
        .replace("    governance:", "    secrets: [HOOK]\n    governance:");
        let a = valid(&text).agentfile.agents.remove(0);
        assert_eq!(a.secrets, ["HOOK"]);
    }

    #[test]
    fn unknown_keys_and_wrong_types() {
        let d = assert_error(
            &approval("effects: [write]\nnotifyurl: https://hooks.example.com/x"),
            "unknown_key",
            (10, 9),
            "unknown key `notifyurl` in human_approval",
        );
        assert_eq!(d.help.unwrap(), "did you mean `notify_url`?");
        let d = assert_error(
            &approval("approvers: [ops]"),
            "unknown_key",
            (9, 9),
            "unknown key `approvers` in human_approval",
        );
        assert_eq!(
            d.help.unwrap(),
            "human_approval takes: enabled, actions, effects, timeout, notify_url, notify_secret"
        );
        assert_error(
            &approval("enabled: yes\neffects: [write]"),
            "wrong_type",
            (9, 18),
            "`enabled` must be true or false, found \"yes\"",
        );
        assert_error(
            "agents:\n  a:\n    governance:\n      human_approval: true\n",
            "wrong_type",
            (4, 23),
            "`human_approval` must be a mapping, found the boolean true",
        );
        // Misplaced under the agent: pointed at `governance`.
        let d = assert_error(
            "agents:\n  a:\n    human_approval: { effects: [write] }\n",
            "unknown_key",
            (3, 5),
            "unknown key `human_approval` in an agent",
        );
        assert_eq!(
            d.help.unwrap(),
            "`human_approval` belongs under `governance`"
        );
    }

    #[test]
    fn gating_nothing_is_a_warning() {
        for lines in ["timeout: 1h", "actions: []\neffects: []"] {
            let parsed = valid(&approval(lines));
            let w = &parsed.warnings.diagnostics;
            assert_eq!(w.len(), 1, "{w:?}");
            assert_eq!(
                (
                    w[0].severity,
                    w[0].kind.code(),
                    w[0].line,
                    w[0].column,
                    w[0].message.as_str()
                ),
                (
                    Severity::Warning,
                    "approval_gates_nothing",
                    8,
                    7,
                    "`human_approval` gates nothing; only `ask_human` asks people"
                )
            );
            assert!(w[0].help.as_deref().unwrap().contains("enabled: false"));
        }
        // Turned off on purpose: no warning, and nothing is gated.
        let parsed = valid(&approval("enabled: false\ntimeout: 1h"));
        assert!(parsed.warnings.diagnostics.is_empty());
        let a = &parsed.agentfile.agents[0];
        assert!(!a.governance.gates("shell", Effect::Write));
        assert_eq!(a.governance.approval_timeout_secs(), 3600);
    }

    #[test]
    fn ask_user_is_ask_human() {
        let af = valid(
            "agents:\n  a:\n    tools: [ask_user, builtin://file_read]\n  b:\n    tools: all\n    runtime: { image: debian }\n",
        )
        .agentfile;
        let a = af.agent("a").unwrap();
        assert_eq!(
            (a.tools[0].name.as_str(), a.tools[0].effect),
            ("ask_human", Effect::Read)
        );
        assert!(af.agent("b").unwrap().offers("ask_human"));
        // Listed both ways: the same tool twice.
        assert_error(
            "agents:\n  a:\n    tools: [ask_human, ask_user]\n",
            "duplicate_tool",
            (3, 24),
            "tool `ask_human` is listed twice (`ask_human` and `ask_user` both give it)",
        );
    }
}
