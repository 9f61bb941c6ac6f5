//! Top level and agents: `name`, `agents`, the shared `execution`/`governance`/`limits`,
//! `metadata`, and how an agent's sections come together into an [`AgentSpec`].

use super::collaborators::{CollaboratorsIn, Roster};
use super::limits::PoolLimit;
use super::runtime::RuntimeIn;
use super::triggers::{Target, TriggersIn};
use super::*;
use crate::mcp::McpTransport;

impl Cx {
    pub(super) fn agentfile(&mut self, root: &Node) -> Option<Agentfile> {
        if matches!(root.kind, Kind::Null) {
            self.report("", Loc::START, Problem::EmptyFile);
            return None;
        }
        if !matches!(root.kind, Kind::Map(_)) {
            self.report("", root.loc, Problem::NotAMapping(root.kind.type_name()));
            return None;
        }
        let mut top = TopIn::default();
        self.dispatch(root, "", &TOP, &mut top)?;
        let TopIn {
            name,
            mut shared,
            agents,
            triggers,
            limits,
        } = top;
        // The shared `human_approval`'s MCP servers are checked once here, not once per agent
        // (`mcp_servers:` may come after `governance:`).
        if let Some(approval) = &mut shared.governance.human_approval {
            self.approval_servers(approval);
        }
        let Some((agents_loc, agents_node)) = agents else {
            self.report("agents", root.loc, Problem::NoAgentsKey);
            return None;
        };
        let Kind::Map(entries) = &agents_node.kind else {
            if matches!(agents_node.kind, Kind::Null) {
                self.empty_agents(agents_loc);
            } else {
                self.type_error("agents", &agents_node, "a mapping of agent names to agents");
            }
            return None;
        };
        if entries.is_empty() {
            self.empty_agents(agents_loc);
            return None;
        }
        // Every agent's keys first: an agent's collaborators are checked against the others
        // (their durability and metadata), wherever they are declared.
        let mut written: Vec<(&Key, &Node, Option<AgentIn>)> = entries
            .iter()
            .map(|(key, value)| (key, value, self.agent_in(key, value)))
            .collect();
        let mut roster = Roster::default();
        // Triggers are checked against every agent too (its name, whether it is durable).
        let mut targets: Vec<Target> = Vec::new();
        for (key, _, own) in &written {
            let durable = own
                .as_ref()
                .and_then(|a| a.execution.as_ref())
                .map(|e| merge_execution(e.clone(), &shared.execution).durable());
            let metadata = own.as_ref().and_then(|a| a.metadata.as_ref());
            roster.add(&key.name, durable, metadata);
            targets.push((key.name.clone(), durable));
        }
        let agent_triggers: Vec<TriggersIn> = written
            .iter_mut()
            .filter_map(|(_, _, own)| own.as_mut().map(|a| std::mem::take(&mut a.triggers)))
            .collect();
        let declared = written.len();
        let mut agents = Vec::new();
        for (key, value, own) in written {
            if let Some(own) = own
                && let Some(agent) = self.agent(key, value, own, &shared, &roster)
            {
                agents.push(agent);
            }
        }
        let complete = agents.len() == declared;
        self.apply_limits(&limits, &mut agents, complete);
        if complete && !agents.iter().any(|a| a.governance.budgets().is_some()) {
            self.unused_budget_settings(&shared.governance, "governance");
        }
        if complete && !agents.iter().any(|a| a.execution.durability) {
            self.unused_shared_snapshots(shared.execution.snapshots.as_ref());
        }
        let triggers = self.resolve_triggers(triggers, agent_triggers, &targets);
        Some(Agentfile {
            name,
            agents,
            mcp_servers: self.mcp.clone(),
            triggers,
        })
    }

    pub(super) fn empty_agents(&mut self, loc: Loc) {
        self.report("agents", loc, Problem::EmptyAgents);
    }

    pub(super) fn invalid_name(&mut self, path: &str, loc: Loc, name: &str, what: &str) {
        let example = names::normalize_name(name).filter(|fixed| fixed != name);
        self.report(
            path,
            loc,
            Problem::InvalidName {
                name,
                what,
                example,
            },
        );
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
            self.report(path, node.loc, Problem::UnsupportedVersion(&text));
        }
    }

    /// Agent `key`'s keys, as written; `None` when it is not a mapping (reported).
    pub(super) fn agent_in(&mut self, key: &Key, node: &Node) -> Option<AgentIn> {
        let path = format!("agents.{}", key.name);
        let mut own = AgentIn::new(key.loc, &path);
        if !matches!(node.kind, Kind::Null) {
            self.dispatch(node, &path, &AGENT, &mut own)?;
        }
        Some(own)
    }

    /// Agent `key` (written at `node`, its keys read into `own`), resolved with the shared
    /// settings and checked against the other agents (`roster`).
    pub(super) fn agent(
        &mut self,
        key: &Key,
        node: &Node,
        own: AgentIn,
        shared: &Shared,
        roster: &Roster,
    ) -> Option<AgentSpec> {
        let path = format!("agents.{}", key.name);
        let mut ok = true;
        if !names::is_valid_name(&key.name) {
            self.invalid_name(&path, key.loc, &key.name, "agent name");
            ok = false;
        }
        let AgentIn {
            metadata,
            runtime,
            mut tools,
            execution,
            governance,
            env,
            secrets,
            collaborators,
            transfer_timeout,
            triggers: _,
            skills,
            security,
            network,
        } = own;
        // The `ask_<agent>` tools join the agent's tools before anything checks calls against
        // them (the script, `human_approval.actions`).
        let (handoffs, handoffs_ok) =
            self.handoffs(&key.name, &collaborators, roster, network.as_ref());
        ok &= handoffs_ok;
        // `collaborators` is the agents of the pool (what `up` records); remote ones are tools.
        let collaborator_names: Vec<String> = handoffs
            .iter()
            .filter(|h| h.local())
            .map(|h| h.agent().to_string())
            .collect();
        if let Some(tools) = &mut tools {
            ok &= self.attach_handoffs(tools, handoffs);
        }
        if let Some(Some((_, at))) = transfer_timeout
            && !collaborators.listed()
        {
            let problem = Problem::TransferTimeoutUnused(&key.name);
            self.report(&join(&path, "transfer_timeout"), at, problem);
        }
        let jobs_at = runtime.as_ref().and_then(RuntimeIn::jobs_at);
        let runtime = runtime.and_then(|r| self.runtime(r, &path, tools.as_deref()));
        let (runtime, runtime_max_turns) = match runtime {
            Some(r) => (Some(r.0), r.1),
            None => (None, None),
        };
        let execution = execution
            .map(|own| merge_execution(own, &shared.execution))
            .and_then(|e| self.execution(e, runtime_max_turns, &path, key.loc));
        let governance =
            governance.map(|own| self.agent_governance(own, &shared.governance, &path));

        if let (Some(env), Some(secrets)) = (&env, &secrets) {
            for (name, loc) in secrets {
                if env.contains_key(name) {
                    self.report(
                        &join(&path, "secrets"),
                        *loc,
                        Problem::SecretAlsoInEnv(name),
                    );
                    ok = false;
                }
            }
        }
        let tools = tools?;
        let declared = secrets?.into_iter().map(|(n, _)| n).collect();
        let mut secret_names = mounted_secrets(declared, runtime.as_ref(), &tools);
        let mut shell_reported = false;
        if runtime.as_ref().is_some_and(|r| r.image.is_none())
            && let Some(i) = tools
                .iter()
                .position(|t| t.name == "shell" && t.mcp.is_none())
        {
            let loc = tool_loc(node, i).unwrap_or(key.loc);
            self.report(&format!("{path}.tools[{i}]"), loc, Problem::ShellNeedsImage);
            ok = false;
            shell_reported = true;
        }
        ok &= self.agent_jobs(
            &path,
            key,
            node,
            &tools,
            runtime.as_ref(),
            jobs_at,
            shell_reported,
        );
        let no_image = runtime.as_ref().is_some_and(|r| r.image.is_none());
        let (mcp_servers, mcp_ok) =
            self.agent_mcp_servers(&path, key, node, &tools, no_image, &mut secret_names);
        ok &= mcp_ok;
        let mut human_approval = None;
        if let Some((_, Some(approval))) = &governance {
            human_approval = self.resolve_approval(approval, &key.name, &tools);
            ok &= human_approval.is_some();
        }
        // `up` gives the signing secret's value to the runner, and refuses to start without it.
        if let Some(secret) = human_approval
            .as_ref()
            .and_then(|h| h.notify_secret.as_ref())
            && !secret_names.contains(secret)
        {
            secret_names.push(secret.clone());
        }
        if !ok {
            return None;
        }
        let (governance, _) = governance?;
        let mut execution = execution?;
        if let Some((secs, _)) = transfer_timeout? {
            execution.transfer_timeout_secs = secs;
        }
        Some(AgentSpec {
            name: key.name.clone(),
            metadata: metadata?,
            runtime: runtime?,
            tools,
            execution,
            governance: Governance {
                human_approval,
                ..governance
            },
            env: env?,
            secrets: secret_names,
            mcp_servers,
            collaborators: collaborator_names,
            skills: skills?,
            security: security?,
            network: network?,
        })
    }

    /// The MCP servers agent `key`'s tools use (at `path`, written at `node`), with the secrets
    /// their transports need added to `secret_names`; `false` when a stdio server has no image to
    /// run in (`no_image`: the agent's runtime sets none).
    fn agent_mcp_servers(
        &mut self,
        path: &str,
        key: &Key,
        node: &Node,
        tools: &[ToolSpec],
        no_image: bool,
        secret_names: &mut Vec<String>,
    ) -> (BTreeMap<String, McpServer>, bool) {
        let mut ok = true;
        let mut mcp_servers = BTreeMap::new();
        for (i, tool) in tools.iter().enumerate() {
            let Some(source) = &tool.mcp else { continue };
            let Some(server) = self.mcp.get(&source.server).cloned() else {
                continue;
            };
            if matches!(server.transport, McpTransport::Stdio { .. }) && no_image {
                let loc = tool_loc(node, i).unwrap_or(key.loc);
                self.report(
                    &format!("{path}.tools[{i}]"),
                    loc,
                    Problem::McpNeedsImage(&source.server),
                );
                ok = false;
            }
            for secret in server.transport.agent_secrets() {
                if !secret_names.contains(&secret) {
                    secret_names.push(secret);
                }
            }
            mcp_servers.insert(source.server.clone(), server);
        }
        (mcp_servers, ok)
    }

    pub(super) fn metadata(&mut self, node: &Node, path: &str) -> Option<Metadata> {
        let mut m = Metadata::default();
        self.dispatch(node, path, &METADATA, &mut m)?.then_some(m)
    }
}

/// Where an agent's `tools[i]` entry is.
fn tool_loc(agent: &Node, i: usize) -> Option<Loc> {
    let Kind::Map(entries) = &agent.kind else {
        return None;
    };
    let (_, tools) = entries.iter().find(|(k, _)| k.name == "tools")?;
    let Kind::Seq(items) = &tools.kind else {
        return None;
    };
    items.get(i).map(|n| n.loc)
}

/// The top level as written: the pool name, the settings shared by every agent, and `agents:`.
#[derive(Default)]
pub(super) struct TopIn {
    name: Option<String>,
    shared: Shared,
    /// Where `agents:` is and its value, decoded after the loop because the shared settings
    /// may come after it.
    agents: Option<(Loc, Node)>,
    /// The top-level `triggers:`, checked against the agents once they are read.
    triggers: TriggersIn,
    /// The top-level `limits:` (its valid entries), applied to the agents once they are read.
    limits: Vec<PoolLimit>,
}

pub(super) const TOP: Section<TopIn> = Section {
    what: "the top level",
    keys: &[
        ("name", |cx, top, f| {
            let name = cx.string(f.value, &f.path)?;
            if names::is_valid_name(&name) {
                top.name = Some(name);
            } else {
                cx.invalid_name(&f.path, f.value.loc, &name, "pool name");
            }
            Some(())
        }),
        ("agents", |_, top, f| {
            top.agents = Some((f.key.loc, f.value.clone()));
            Some(())
        }),
        ("mcp_servers", |cx, _, f| cx.mcp_servers(f.value, &f.path)),
        ("schema_version", |cx, _, f| {
            cx.schema_version(f.value, &f.path);
            Some(())
        }),
        ("version", |cx, _, f| {
            cx.schema_version(f.value, &f.path);
            Some(())
        }),
        ("execution", |cx, top, f| {
            top.shared.execution = cx.execution_in(f.value, &f.path).unwrap_or_default();
            Some(())
        }),
        ("governance", |cx, top, f| {
            top.shared.governance = cx.governance(f.value, &f.path, true).unwrap_or_default();
            Some(())
        }),
        ("triggers", |cx, top, f| {
            top.triggers = cx.triggers_in(f.value, &f.path, None);
            Some(())
        }),
        ("limits", |cx, top, f| {
            top.limits = cx.pool_limits(f.value, &f.path);
            Some(())
        }),
    ],
    unsupported: &["volumes", "environments", "mcp_gateway", "persistence"],
};
/// The secrets `up` mounts for an agent, each once, in this order: those it lists
/// (`secrets:`), its model's and fallbacks' API keys, those its `shell` entries give their
/// processes, and the bearer secrets of its remote A2A collaborators.
fn mounted_secrets(
    declared: Vec<String>,
    runtime: Option<&crate::schema::Runtime>,
    tools: &[crate::schema::ToolSpec],
) -> Vec<String> {
    let model_keys = runtime.into_iter().flat_map(|r| {
        std::iter::once(&r.api_key_secret)
            .chain(r.fallback.iter().map(|f| &f.api_key_secret))
            .flatten()
    });
    let tool_secrets = tools.iter().flat_map(|t| &t.secrets);
    let a2a_secrets = tools
        .iter()
        .filter_map(|t| t.handoff.as_ref()?.a2a.as_ref()?.secret.as_ref());
    let mut names = declared;
    for name in model_keys.chain(tool_secrets).chain(a2a_secrets) {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

/// One agent as written. Each part is `None` when it is invalid (its errors are reported), so
/// only the checks that depend on it are skipped.
pub(super) struct AgentIn {
    metadata: Option<Metadata>,
    /// `runtime:`'s fields, not yet resolved (resolution needs the agent's tools).
    runtime: Option<RuntimeIn>,
    tools: Option<Vec<ToolSpec>>,
    /// The agent's own `execution:`, before the shared settings fill its gaps.
    execution: Option<ExecutionIn>,
    /// The agent's own `governance:`, before the shared one fills its gaps.
    governance: Option<GovernanceIn>,
    env: Option<BTreeMap<String, String>>,
    secrets: Option<Vec<(String, Loc)>>,
    /// `collaborators:` (its invalid entries reported and left out).
    collaborators: CollaboratorsIn,
    /// `transfer_timeout:` in seconds and where its key is; `Some(None)` when absent.
    transfer_timeout: Option<Option<(u64, Loc)>>,
    /// `triggers:` (checked against the other agents once all are read).
    triggers: TriggersIn,
    /// `skills:` (what its A2A card lists).
    skills: Option<Vec<crate::schema::SkillInfo>>,
    /// `security:`, over the hardened defaults.
    security: Option<crate::security::Security>,
    /// `network:`.
    network: Option<crate::security::Network>,
}

impl AgentIn {
    /// An agent with every part absent; `at` is where a missing runtime key is reported,
    /// `path` the agent's path.
    fn new(at: Loc, path: &str) -> Self {
        Self {
            metadata: Some(Metadata::default()),
            runtime: Some(RuntimeIn::new(at)),
            tools: Some(Vec::new()),
            execution: Some(ExecutionIn::default()),
            governance: Some(GovernanceIn::default()),
            env: Some(BTreeMap::new()),
            secrets: Some(Vec::new()),
            collaborators: CollaboratorsIn::none(at, path),
            transfer_timeout: Some(None),
            triggers: TriggersIn::default(),
            skills: Some(Vec::new()),
            security: Some(crate::security::Security::default()),
            network: Some(crate::security::Network::default()),
        }
    }
}

pub(super) const AGENT: Section<AgentIn> = Section {
    what: "an agent",
    keys: &[
        ("metadata", |cx, a, f| {
            a.metadata = cx.metadata(f.value, &f.path);
            Some(())
        }),
        ("runtime", |cx, a, f| {
            a.runtime = cx.runtime_in(f.value, &f.path, f.key.loc);
            Some(())
        }),
        ("tools", |cx, a, f| {
            a.tools = cx.tools(f.value, &f.path);
            Some(())
        }),
        ("execution", |cx, a, f| {
            a.execution = cx.execution_in(f.value, &f.path);
            Some(())
        }),
        ("governance", |cx, a, f| {
            a.governance = cx.governance(f.value, &f.path, false);
            Some(())
        }),
        ("env", |cx, a, f| {
            a.env = cx.env(f.value, &f.path);
            Some(())
        }),
        ("secrets", |cx, a, f| {
            a.secrets = cx.secrets(f.value, &f.path);
            Some(())
        }),
        ("collaborators", |cx, a, f| {
            a.collaborators = cx.collaborators_in(f.value, &f.path, f.key.loc);
            Some(())
        }),
        ("transfer_timeout", |cx, a, f| {
            a.transfer_timeout = cx
                .transfer_timeout(f.value, &f.path)
                .map(|secs| Some((secs, f.key.loc)));
            Some(())
        }),
        ("skills", |cx, a, f| {
            a.skills = cx.skills(f.value, &f.path);
            Some(())
        }),
        ("security", |cx, a, f| {
            a.security = cx.security(f.value, &f.path);
            Some(())
        }),
        ("network", |cx, a, f| {
            a.network = cx.network(f.value, &f.path);
            Some(())
        }),
        ("triggers", |cx, a, f| {
            let agent = f.path.strip_prefix("agents.").unwrap_or(&f.path);
            let agent = agent.strip_suffix(".triggers").unwrap_or(agent).to_string();
            a.triggers = cx.triggers_in(f.value, &f.path, Some(&agent));
            Some(())
        }),
    ],
    unsupported: &[
        "routing",
        "volumes",
        "packages",
        "output_type",
        "serve",
        "persistence",
    ],
};

pub(super) const METADATA: Section<Metadata> = Section {
    what: "metadata",
    keys: &[
        ("name", |cx, m, f| {
            m.name = cx.nullable_string(&f)?;
            Some(())
        }),
        ("description", |cx, m, f| {
            m.description = cx.nullable_string(&f)?;
            Some(())
        }),
        ("role", |cx, m, f| {
            m.role = cx.nullable_string(&f)?;
            Some(())
        }),
        ("goal", |cx, m, f| {
            m.goal = cx.nullable_string(&f)?;
            Some(())
        }),
        ("instructions", |cx, m, f| {
            m.instructions = cx.nullable_string(&f)?;
            Some(())
        }),
        ("constraints", |cx, m, f| {
            let list = cx.string_list(f.value, &f.path)?;
            m.constraints = list.into_iter().map(|(s, _)| s).collect();
            Some(())
        }),
    ],
    unsupported: &[],
};
