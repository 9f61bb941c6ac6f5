//! `security:` (the user, capabilities, read-only root, pids limit and tool sandbox an agent's
//! containers get; every key defaults to the hardened setting) and `runtime.isolation` (the
//! container runtime), with their problems.

use super::*;
use crate::egress::EgressRule;
use crate::security::{self, Network, Security, User};

/// A problem with `security:` or `runtime.isolation`.
#[derive(Debug)]
pub(super) enum SecurityProblem<'a> {
    /// A `user` that is not `root`, `UID` or `UID:GID`.
    User(&'a str),
    /// A capability Linux does not have, and the closest one it has.
    UnknownCapability {
        found: &'a str,
        closest: Option<&'static str>,
    },
    /// `ALL` in `capabilities`.
    AllCapabilities,
    /// A capability listed twice.
    DuplicateCapability(&'static str),
    /// A runtime name Docker and Kubernetes would not accept.
    RuntimeName(&'a str),
    /// `security:` on an MCP server that has no container of its own (no `image:`).
    NotASidecar(&'a str),
    /// A `network.egress` entry that is not a rule, and why.
    Egress(String),
    /// A `network.egress` rule listed twice.
    DuplicateEgress(String),
}

impl SecurityProblem<'_> {
    /// The diagnostic kind (and so the wire code).
    pub(super) fn kind(&self) -> DiagnosticKind {
        use DiagnosticKind as K;
        match self {
            SecurityProblem::User(_)
            | SecurityProblem::UnknownCapability { .. }
            | SecurityProblem::AllCapabilities
            | SecurityProblem::RuntimeName(_) => K::InvalidValue,
            SecurityProblem::NotASidecar(_) => K::InvalidMcpServer,
            SecurityProblem::Egress(_) => K::InvalidValue,
            SecurityProblem::DuplicateEgress(_) => K::DuplicateSetting,
            SecurityProblem::DuplicateCapability(_) => K::DuplicateSetting,
        }
    }

    /// What is wrong.
    pub(super) fn message(&self) -> String {
        match self {
            SecurityProblem::User(u) => {
                format!("`user` must be `root`, a UID or `UID:GID`, found `{u}`")
            }
            SecurityProblem::UnknownCapability { found, .. } => {
                format!("Linux has no capability `{found}`")
            }
            SecurityProblem::AllCapabilities => {
                "`capabilities: [ALL]` would give back every capability the container drops".into()
            }
            SecurityProblem::DuplicateCapability(c) => format!("capability `{c}` is listed twice"),
            SecurityProblem::RuntimeName(n) => format!("`{n}` is not a container runtime name"),
            SecurityProblem::NotASidecar(server) => format!(
                "MCP server `{server}` has no container of its own, so `security` does not apply"
            ),
            SecurityProblem::Egress(why) => why.clone(),
            SecurityProblem::DuplicateEgress(rule) => format!("`{rule}` is listed twice"),
        }
    }

    /// What to do.
    pub(super) fn help(&self) -> String {
        match self {
            SecurityProblem::User(_) => format!(
                "images built FROM scratch have no /etc/passwd, so give numbers: `user: \"{}\"` \
                 (the default) or `user: \"1000:1000\"`; `user: root` runs as root",
                User::NONROOT
            ),
            SecurityProblem::UnknownCapability { closest, .. } => {
                let mut help = "name each capability the tool needs, as Docker names them \
                                (`NET_BIND_SERVICE`, `CHOWN`, …; `man 7 capabilities`)"
                    .to_string();
                if let Some(c) = closest {
                    help.push_str(&format!("; did you mean `{c}`?"));
                }
                help
            }
            SecurityProblem::AllCapabilities => {
                "name only the capabilities a tool needs, e.g. `capabilities: [NET_BIND_SERVICE]`"
                    .into()
            }
            SecurityProblem::DuplicateCapability(_) => "list each capability once".into(),
            SecurityProblem::RuntimeName(_) => "name a runtime the Docker engine has registered \
                 (`docker info --format '{{json .Runtimes}}'`): `runc` (the default), `runsc` \
                 (gVisor), `kata`, …"
                .into(),
            SecurityProblem::NotASidecar(_) => "a server with `image:` runs in a sidecar that \
                 `security` confines; a `url:` server is not ninetrix's to confine, and a \
                 `command:` server runs in the agent's container under the agent's `security`"
                .into(),
            SecurityProblem::Egress(_) => "write a host (`api.github.com`), a wildcard for its \
                 subdomains (`*.github.com`) or an IP (`10.0.0.5`, `[::1]`), each with an optional \
                 `:PORT` or `:*` (without one: 443 and 80); the model's, the MCP servers' and the \
                 API's hosts are allowed already"
                .into(),
            SecurityProblem::DuplicateEgress(_) => "list each rule once".into(),
        }
    }
}

pub(super) const SECURITY: Section<Security> = Section {
    what: "security",
    keys: &[
        ("user", |cx, s, f| {
            let text = match &f.value.kind {
                Kind::Int(i) => i.to_string(),
                _ => cx.string(f.value, &f.path)?,
            };
            match User::parse(&text) {
                Some(u) => s.user = u,
                None => {
                    let problem = Problem::Security(SecurityProblem::User(&text));
                    cx.report(&f.path, f.value.loc, problem);
                    return None;
                }
            }
            Some(())
        }),
        ("capabilities", |cx, s, f| {
            let mut ok = true;
            for (i, (name, loc)) in cx.string_list(f.value, &f.path)?.into_iter().enumerate() {
                let path = format!("{}[{i}]", f.path);
                let problem = match security::capability(&name) {
                    Some(c) if s.capabilities.iter().any(|have| have == c) => {
                        SecurityProblem::DuplicateCapability(c)
                    }
                    Some(c) => {
                        s.capabilities.push(c.to_string());
                        continue;
                    }
                    None if name.trim().eq_ignore_ascii_case("all") => {
                        SecurityProblem::AllCapabilities
                    }
                    None => SecurityProblem::UnknownCapability {
                        found: &name,
                        closest: closest_capability(&name),
                    },
                };
                cx.report(&path, loc, Problem::Security(problem));
                ok = false;
            }
            s.capabilities.sort();
            ok.then_some(())
        }),
        ("read_only_root", |cx, s, f| {
            s.read_only_root = cx.boolean(f.value, &f.path)?;
            Some(())
        }),
        ("pids_limit", |cx, s, f| {
            let (min, max) = security::PIDS_LIMIT_RANGE;
            s.pids_limit = cx.integer(f.value, &f.path, min, max)?;
            Some(())
        }),
        ("tool_sandbox", |cx, s, f| {
            s.tool_sandbox = cx.boolean(f.value, &f.path)?;
            Some(())
        }),
    ],
    unsupported: &[],
};

/// The capability closest to `name` as written, if any is close: one it begins, else the
/// nearest by spelling.
fn closest_capability(name: &str) -> Option<&'static str> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    let mut starting = security::CAPABILITIES
        .iter()
        .filter(|c| c.starts_with(bare));
    if let (Some(only), None) = (starting.next(), starting.next()) {
        return Some(only);
    }
    ninetrix_proto::suggest::closest(bare, security::CAPABILITIES).and_then(security::capability)
}

pub(super) const NETWORK: Section<Network> = Section {
    what: "network",
    keys: &[("egress", |cx, n, f| {
        let mut rules: Vec<EgressRule> = Vec::new();
        let mut ok = true;
        for (i, (text, loc)) in cx.string_list(f.value, &f.path)?.into_iter().enumerate() {
            let path = format!("{}[{i}]", f.path);
            let problem = match EgressRule::parse(&text) {
                Ok(rule) if rules.contains(&rule) => {
                    SecurityProblem::DuplicateEgress(rule.to_string())
                }
                Ok(rule) => {
                    rules.push(rule);
                    continue;
                }
                Err(e) => SecurityProblem::Egress(e.to_string()),
            };
            cx.report(&path, loc, Problem::Security(problem));
            ok = false;
        }
        n.egress = Some(rules);
        ok.then_some(())
    })],
    unsupported: &[],
};

impl Cx {
    /// `network:` at `node` (`path`).
    pub(super) fn network(&mut self, node: &Node, path: &str) -> Option<Network> {
        let mut n = Network::default();
        if matches!(node.kind, Kind::Null) {
            return Some(n);
        }
        self.dispatch(node, path, &NETWORK, &mut n)?.then_some(n)
    }

    /// `security:` at `node` (`path`), over the hardened defaults.
    pub(super) fn security(&mut self, node: &Node, path: &str) -> Option<Security> {
        let mut s = Security::default();
        if matches!(node.kind, Kind::Null) {
            return Some(s);
        }
        self.dispatch(node, path, &SECURITY, &mut s)?.then_some(s)
    }

    /// `runtime.isolation`: a runtime name; `runc` (the engine's default) is `None`.
    pub(super) fn isolation(&mut self, f: &Field<'_>) -> Option<Option<String>> {
        let Some(name) = self.nullable_string(f)? else {
            return Some(None);
        };
        if !security::is_runtime_name(&name) {
            let problem = Problem::Security(SecurityProblem::RuntimeName(&name));
            self.report(&f.path, f.value.loc, problem);
            return None;
        }
        Some((name != security::DEFAULT_RUNTIME).then_some(name))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::schema::AgentSpec;
    use crate::security::{Security, User};

    fn agent_of(body: &str) -> AgentSpec {
        let indented: String = body.lines().map(|l| format!("    {l}\n")).collect();
        valid(&format!("agents:\n  a:\n{indented}"))
            .agentfile
            .agents
            .remove(0)
    }

    fn errors_of(body: &str) -> Vec<crate::Diagnostic> {
        let indented: String = body.lines().map(|l| format!("    {l}\n")).collect();
        errors(&format!("agents:\n  a:\n{indented}"))
    }

    #[test]
    fn security_defaults_to_the_hardened_settings_and_each_key_relaxes_one() {
        let a = agent_of("runtime: { provider: scripted, script: [{text: hi}] }\n");
        assert_eq!(a.security, Security::default());
        assert_eq!(a.runtime.isolation, None);
        let a = agent_of(
            "runtime: { provider: scripted, script: [{text: hi}], isolation: runsc }\n\
             security: { user: root, capabilities: [net_bind_service, CAP_CHOWN], \
             read_only_root: false, pids_limit: 2048, tool_sandbox: false }\n",
        );
        assert_eq!(a.runtime.isolation.as_deref(), Some("runsc"));
        assert_eq!(a.security.user, User { uid: 0, gid: 0 });
        assert_eq!(a.security.capabilities, ["CHOWN", "NET_BIND_SERVICE"]);
        assert!(!a.security.read_only_root && !a.security.tool_sandbox);
        assert_eq!(a.security.pids_limit, 2048);
        let runc =
            agent_of("runtime: { provider: scripted, script: [{text: hi}], isolation: runc }\n");
        assert_eq!(runc.runtime.isolation, None, "runc is the engine's default");
    }

    #[test]
    fn bad_security_settings_are_located_errors_that_say_what_to_write() {
        let d = errors_of(
            "runtime: { provider: scripted, script: [{text: hi}], isolation: \"run sc\" }\n\
             security:\n  user: nobody\n  capabilities: [ALL, NET_BIND, CHOWN, chown]\n  pids_limit: 4\n",
        );
        let text: Vec<String> = d
            .iter()
            .map(|d| {
                format!(
                    "{} | {} | {}",
                    d.path,
                    d.message,
                    d.help.clone().unwrap_or_default()
                )
            })
            .collect();
        let has = |path: &str, needle: &str| {
            assert!(
                text.iter()
                    .any(|t| t.starts_with(path) && t.contains(needle)),
                "{path} / {needle}: {text:#?}"
            );
        };
        has("agents.a.runtime.isolation", "not a container runtime name");
        has("agents.a.security.user", "found `nobody`");
        has("agents.a.security.capabilities[0]", "every capability");
        has(
            "agents.a.security.capabilities[1]",
            "did you mean `NET_BIND_SERVICE`",
        );
        has("agents.a.security.capabilities[3]", "listed twice");
        has("agents.a.security.pids_limit", "32");
        assert_eq!(d.len(), 6, "{text:#?}");
    }

    #[test]
    fn egress_rules_are_read_and_bad_ones_are_located_saying_what_to_write() {
        let a = agent_of(
            "runtime: { provider: scripted, script: [{text: hi}] }\n\
             network: { egress: [\"*.github.com\", \"10.0.0.5:8443\"] }\n",
        );
        let rules: Vec<String> = a
            .network
            .egress
            .unwrap()
            .iter()
            .map(|r| r.to_string())
            .collect();
        assert_eq!(rules, ["*.github.com", "10.0.0.5:8443"]);
        let d = errors_of(
            "runtime: { provider: scripted, script: [{text: hi}] }\n\
             network: { egress: [\"https://api.github.com/x\", a.com, A.com] }\n",
        );
        assert_eq!(d.len(), 2, "{d:#?}");
        assert_eq!(d[0].path, "agents.a.network.egress[0]");
        assert!(d[0].message.contains("api.github.com"), "{}", d[0].message);
        assert_eq!(d[1].path, "agents.a.network.egress[2]");
        assert!(d[1].message.contains("listed twice"), "{}", d[1].message);
    }
}
