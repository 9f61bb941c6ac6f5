//! Top level and agents: `name`, `agents`, the shared `execution`/`governance`, `metadata`, and
//! how an agent's sections come together into an [`AgentSpec`].

use super::*;

impl Cx {
    pub(super) fn agentfile(&mut self, root: &Node) -> Option<Agentfile> {
        if matches!(root.kind, Kind::Null) {
            self.error("empty_file", "", Loc::START, "the agentfile is empty")
                .help = Some("an agentfile needs at least `agents:` with one agent; `ninetrix init` writes a starter".into());
            return None;
        }
        if !matches!(root.kind, Kind::Map(_)) {
            self.error(
                "not_a_mapping",
                "",
                root.loc,
                format!(
                    "the agentfile must be a mapping of keys, found {}",
                    root.kind.type_name()
                ),
            )
            .help =
                Some("start with `name:` and `agents:`; `ninetrix init` writes a starter".into());
            return None;
        }
        let fields = self.fields(root, "", &TOP)?;
        let mut name = None;
        let mut shared = Shared::default();
        let mut agents_node = None;
        for (key, value) in &fields {
            match key.name.as_str() {
                "name" => {
                    if let Some(n) = self.string(value, "name") {
                        if names::is_valid_name(&n) {
                            name = Some(n);
                        } else {
                            self.invalid_name("name", value.loc, &n, "pool name");
                        }
                    }
                }
                "schema_version" | "version" => self.schema_version(value, &key.name),
                "execution" => {
                    shared.execution = self.execution_in(value, "execution").unwrap_or_default();
                }
                "governance" => shared.governance = self.governance(value, "governance"),
                "agents" => agents_node = Some((*key, *value)),
                _ => {}
            }
        }
        let Some((agents_key, agents_node)) = agents_node else {
            self.error(
                "missing_key",
                "agents",
                root.loc,
                "the agentfile has no `agents:`",
            )
            .help = Some(
                "add `agents:` with at least one agent; `ninetrix init` writes a starter".into(),
            );
            return None;
        };
        let Kind::Map(entries) = &agents_node.kind else {
            if matches!(agents_node.kind, Kind::Null) {
                self.empty_agents(agents_key.loc);
            } else {
                self.type_error("agents", agents_node, "a mapping of agent names to agents");
            }
            return None;
        };
        if entries.is_empty() {
            self.empty_agents(agents_key.loc);
            return None;
        }
        let mut agents = Vec::new();
        for (key, value) in entries {
            if let Some(agent) = self.agent(key, value, &shared) {
                agents.push(agent);
            }
        }
        Some(Agentfile { name, agents })
    }

    pub(super) fn empty_agents(&mut self, loc: Loc) {
        self.error("no_agents", "agents", loc, "`agents` is empty")
            .help = Some("declare at least one agent, e.g. `agents: { assistant: { runtime: { provider: scripted, script: [{ text: hi }] } } }`".into());
    }

    pub(super) fn invalid_name(&mut self, path: &str, loc: Loc, name: &str, what: &str) {
        let hint = match names::normalize_name(name) {
            Some(fixed) if fixed != name => format!("; for example `{fixed}`"),
            _ => String::new(),
        };
        self.error(
            "invalid_name",
            path,
            loc,
            format!("`{name}` is not a valid {what}"),
        )
        .help = Some(format!(
            "{what}s use lower-case letters, digits, `-` and `_`, start with a letter or digit, \
             and have at most {} characters{hint}",
            names::MAX_NAME_LEN
        ));
    }

    pub(super) fn schema_version(&mut self, node: &Node, path: &str) {
        let text = match &node.kind {
            Kind::Str(s) => s.clone(),
            Kind::Int(i) => i.to_string(),
            Kind::Float(f) => f.to_string(),
            _ => {
                self.type_error(path, node, "a version such as \"1.1\"");
                return;
            }
        };
        if !["1", "1.0", "1.1"].contains(&text.as_str()) {
            self.error(
                "unsupported_version",
                path,
                node.loc,
                format!("schema version `{text}` is not supported"),
            )
            .help = Some(
                "ninetrix reads agentfile schema 1.x (1.0, 1.1); remove the key or set \"1.1\""
                    .into(),
            );
        }
    }

    pub(super) fn agent(&mut self, key: &Key, node: &Node, shared: &Shared) -> Option<AgentSpec> {
        let path = format!("agents.{}", key.name);
        let mut ok = true;
        if !names::is_valid_name(&key.name) {
            self.invalid_name(&path, key.loc, &key.name, "agent name");
            ok = false;
        }
        let fields = if matches!(node.kind, Kind::Null) {
            Vec::new()
        } else {
            self.fields(node, &path, &AGENT)?
        };
        let mut metadata = Some(Metadata::default());
        let mut runtime_node = None;
        let mut tools_node = None;
        let mut execution = Some(shared.execution.clone());
        let mut governance = Some(Governance {
            max_budget_per_run: shared.governance,
        });
        let mut env = Some(BTreeMap::new());
        let mut secrets = Some(Vec::new());
        for (k, v) in &fields {
            let p = join(&path, &k.name);
            match k.name.as_str() {
                "metadata" => metadata = self.metadata(v, &p),
                "runtime" => runtime_node = Some((*k, *v)),
                "tools" => tools_node = Some(*v),
                "execution" => {
                    execution = self
                        .execution_in(v, &p)
                        .map(|own| merge_execution(own, &shared.execution));
                }
                "governance" => {
                    if let Kind::Map(_) = v.kind {
                        let own = self.governance(v, &p);
                        governance = Some(Governance {
                            max_budget_per_run: own.or(shared.governance),
                        });
                    } else {
                        self.type_error(&p, v, "a mapping");
                        governance = None;
                    }
                }
                "env" => env = self.env(v, &p),
                "secrets" => secrets = self.secrets(v, &p),
                _ => {}
            }
        }
        let tools = match tools_node {
            Some(v) => self.tools(v, &join(&path, "tools")),
            None => Some(Vec::new()),
        };
        let runtime = self.runtime(runtime_node, &path, key.loc, tools.as_deref());
        let (mut runtime, runtime_max_turns) = match runtime {
            Some(r) => (Some(r.0), r.1),
            None => (None, None),
        };
        let execution =
            execution.and_then(|e| self.execution(e, runtime_max_turns, &path, key.loc));

        if let (Some(env), Some(secrets)) = (&env, &secrets) {
            for (name, loc) in secrets {
                if env.contains_key(name) {
                    self.error(
                        "secret_in_env",
                        &join(&path, "secrets"),
                        *loc,
                        format!("`{name}` is both a secret and a plain `env:` setting"),
                    )
                    .help = Some(format!(
                        "remove `{name}` from `env:`; the secret is mounted at /run/secrets/{name}"
                    ));
                    ok = false;
                }
            }
        }
        let mut secret_names: Vec<String> = secrets?.into_iter().map(|(n, _)| n).collect();
        if let Some(r) = &mut runtime
            && let Some(key_secret) = &r.api_key_secret
            && !secret_names.contains(key_secret)
        {
            secret_names.push(key_secret.clone());
        }
        if !ok {
            return None;
        }
        Some(AgentSpec {
            name: key.name.clone(),
            metadata: metadata?,
            runtime: runtime?,
            tools: tools?,
            execution: execution?,
            governance: governance?,
            env: env?,
            secrets: secret_names,
        })
    }

    pub(super) fn metadata(&mut self, node: &Node, path: &str) -> Option<Metadata> {
        let fields = self.fields(node, path, &METADATA)?;
        let mut m = Metadata::default();
        let mut ok = true;
        for (k, v) in fields {
            let p = join(path, &k.name);
            match k.name.as_str() {
                "constraints" => match self.string_list(v, &p) {
                    Some(list) => m.constraints = list.into_iter().map(|(s, _)| s).collect(),
                    None => ok = false,
                },
                field => {
                    let value = match &v.kind {
                        Kind::Null => None,
                        _ => match self.string(v, &p) {
                            Some(s) => Some(s),
                            None => {
                                ok = false;
                                None
                            }
                        },
                    };
                    match field {
                        "name" => m.name = value,
                        "description" => m.description = value,
                        "role" => m.role = value,
                        "goal" => m.goal = value,
                        _ => m.instructions = value,
                    }
                }
            }
        }
        ok.then_some(m)
    }
}
