//! The resolved agentfile: what validation produces and every other part consumes.
//!
//! These types hold values after defaults, Ninetrix aliases and provider resolution have been
//! applied, so consumers never re-interpret YAML. They serialise to JSON: the CLI hands an agent's
//! [`AgentSpec`] to its container as `AGENTFILE_AGENT_SPEC`. They never hold secret values, only
//! secret names.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::security::{Network, Security};

use super::context::ContextPolicy;
use super::mcp::{McpServer, McpSource, Verify};
use super::names;
pub use super::providers::Provider;
pub use super::tools::Effect;
pub use ninetrix_proto::api::{
    AgentCardInfo, BudgetPolicy, ModelLimits, OnBudgetExceeded, SkillInfo,
};

/// A validated agentfile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Agentfile {
    /// The pool name from `name:`, if given.
    pub name: Option<String>,
    /// The agents, in the order the file declares them.
    pub agents: Vec<AgentSpec>,
    /// The MCP servers the agents may use (`mcp_servers:`), by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// Every trigger of the pool: the top-level `triggers:` and each agent's, in file order
    /// (top level first), names unique.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<ninetrix_proto::triggers::TriggerSpec>,
}

impl Agentfile {
    /// The agent with this name.
    pub fn agent(&self, name: &str) -> Option<&AgentSpec> {
        self.agents.iter().find(|a| a.name == name)
    }

    /// The pool name: `override_name` (`-p/--pool`) if given, else `name:`, else derived from
    /// the agentfile's directory as Compose derives a project name. `None` when none of these
    /// yields a valid name.
    pub fn pool_name(&self, override_name: Option<&str>, agentfile_path: &Path) -> Option<String> {
        if let Some(name) = override_name {
            return names::is_valid_name(name).then(|| name.to_string());
        }
        if let Some(name) = &self.name {
            return Some(name.clone());
        }
        let dir = std::path::absolute(agentfile_path).ok()?;
        let dir_name = dir.parent()?.file_name()?.to_str()?;
        names::normalize_name(dir_name)
    }
}

/// One agent, fully resolved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// The agent's name (its key under `agents:`).
    pub name: String,
    /// Who the agent is: turned into its system prompt.
    pub metadata: Metadata,
    /// Its model and container.
    pub runtime: Runtime,
    /// The tools it may call.
    pub tools: Vec<ToolSpec>,
    /// How it runs.
    pub execution: Execution,
    /// Its limits.
    pub governance: Governance,
    /// Plain settings for its container.
    pub env: BTreeMap<String, String>,
    /// Names of the secrets it needs, mounted at `/run/secrets/<NAME>`; includes the provider's
    /// API key secret and those its MCP servers' headers and local commands use.
    pub secrets: Vec<String>,
    /// The MCP servers its tools come from (a subset of the pool's `mcp_servers`), so the
    /// runner knows how to reach them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// The agents of the same pool it may hand work to (`collaborators:`), in the order given;
    /// each is also one of its `tools` (`ask_<agent>`, see [`ToolSpec::handoff`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collaborators: Vec<String>,
    /// What its A2A card lists it can do (`skills:`), in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<SkillInfo>,
    /// How its containers are confined (`security:`, over the hardened defaults).
    #[serde(default)]
    pub security: Security,
    /// Where its containers may connect (`network:`).
    #[serde(default, skip_serializing_if = "is_open")]
    pub network: Network,
}

use ninetrix_proto::api::{CARD_NAME_CHARS, CARD_TEXT_CHARS};

fn is_open(n: &Network) -> bool {
    !n.restricted()
}

impl AgentSpec {
    /// Whether the agent may call the tool the model knows as `name`: a builtin it lists, or an
    /// MCP tool one of its `mcp://` entries covers.
    pub fn offers(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.offers(name))
    }

    /// Whether it has any of the background-job tools (`tools: [jobs]`, one of them by name,
    /// or `all`): its jobs then run as [`Runtime::jobs`] says.
    pub fn has_job_tools(&self) -> bool {
        self.tools
            .iter()
            .any(|t| t.mcp.is_none() && t.handoff.is_none() && super::tools::is_job_tool(&t.name))
    }

    /// How its background jobs run, in words (`ninetrix validate`), when it has job tools:
    /// `image python:3.12-slim · at most 4 at once · default timeout 1h · 2 cpu, 1Gi each ·
    /// the workspace, no secrets`.
    pub fn jobs_summary(&self) -> Option<String> {
        if !self.has_job_tools() {
            return None;
        }
        let jobs = &self.runtime.jobs;
        let image = match (&jobs.image, &self.runtime.image) {
            (Some(image), _) => image.clone(),
            (None, Some(image)) => format!("{image} (the agent's)"),
            (None, None) => "none".into(),
        };
        let mut limits = Vec::new();
        if let Some(cpu) = jobs.resources.cpu {
            limits.push(format!("{cpu} cpu"));
        }
        if let Some(bytes) = jobs.resources.memory_bytes {
            limits.push(super::units::format_memory(bytes));
        }
        let limits = if limits.is_empty() {
            "no cpu or memory limit".to_string()
        } else {
            format!("{} each", limits.join(", "))
        };
        Some(format!(
            "image {image} · at most {} at once · default timeout {} · {limits} · the \
             workspace, no secrets",
            jobs.max_concurrent,
            super::units::format_duration(jobs.default_timeout_secs),
        ))
    }

    /// Its remote A2A collaborators, in the order listed: each one's name (its tool is
    /// `ask_<name>`) and where it is.
    pub fn a2a_collaborators(&self) -> impl Iterator<Item = (&str, &A2aRemote)> {
        self.tools.iter().filter_map(|t| {
            let target = t.handoff.as_ref()?;
            Some((target.agent.as_str(), target.a2a.as_ref()?))
        })
    }

    /// What its A2A card says (`up` records it with its replicas): its display name
    /// (`metadata.name`), description (`metadata.description`, else its goal) and skills — its
    /// `skills:`, or one named after the agent. Texts are cut to what the API takes.
    pub fn card_info(&self) -> AgentCardInfo {
        let m = &self.metadata;
        let text = |t: &Option<String>, max: usize| {
            t.as_deref()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| ninetrix_proto::text::preview(t, max))
        };
        let display_name = text(&m.name, CARD_NAME_CHARS - 1);
        let description = text(&m.description, CARD_TEXT_CHARS - 1)
            .or_else(|| text(&m.goal, CARD_TEXT_CHARS - 1));
        let skills = if self.skills.is_empty() {
            vec![SkillInfo {
                id: self.name.clone(),
                name: display_name.clone().unwrap_or_else(|| self.name.clone()),
                description: description.clone().unwrap_or_default(),
                tags: Vec::new(),
                examples: Vec::new(),
            }]
        } else {
            self.skills.clone()
        };
        AgentCardInfo {
            display_name,
            description,
            skills,
        }
    }

    /// How its workspace is snapshotted, in words (`ninetrix validate`), for a durable agent:
    /// `each turn, ≤ 20000 files / 512 MiB, last 100 turns kept`, or `off`.
    pub fn snapshots_summary(&self) -> Option<String> {
        if !self.execution.durability {
            return None;
        }
        Some(match &self.execution.snapshots {
            None => "off".into(),
            Some(s) => s.describe(),
        })
    }
}

/// Who an agent is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    /// A display name.
    pub name: Option<String>,
    /// A description for people.
    pub description: Option<String>,
    /// "You are a {role}."
    pub role: Option<String>,
    /// What it is for.
    pub goal: Option<String>,
    /// How it should work.
    pub instructions: Option<String>,
    /// What it must not do.
    pub constraints: Vec<String>,
}

impl Metadata {
    /// The system prompt these fields make, in the public Ninetrix's layout; `None` if empty.
    pub fn system_prompt(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(role) = &self.role {
            parts.push(format!("You are a {role}."));
        }
        if let Some(goal) = &self.goal {
            parts.push(format!("Goal: {goal}"));
        }
        if let Some(instructions) = &self.instructions {
            parts.push(format!("Instructions: {instructions}"));
        }
        if !self.constraints.is_empty() {
            let list: Vec<String> = self.constraints.iter().map(|c| format!("- {c}")).collect();
            parts.push(format!("Constraints:\n{}", list.join("\n")));
        }
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }
}

/// An agent's model and container settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Runtime {
    /// The protocol its model speaks.
    pub provider: Provider,
    /// The name of the OpenAI-compatible service `provider:` named (e.g. `groq`), if any.
    pub via: Option<String>,
    /// The model name.
    pub model: String,
    /// The API base URL (OpenAI-compatible servers, proxies).
    pub base_url: Option<String>,
    /// The secret holding the API key, if the provider needs one.
    pub api_key_secret: Option<String>,
    /// Sampling temperature, 0–2.
    pub temperature: f64,
    /// Most tokens per model response.
    pub max_tokens: u32,
    /// Seconds a tool call may take.
    pub tool_timeout_secs: u32,
    /// A base image to inject the runner into; `None` means `scratch`.
    pub image: Option<String>,
    /// CPU and memory limits.
    pub resources: Resources,
    /// The responses of the `scripted` provider, in order.
    pub script: Vec<ScriptStep>,
    /// How a long history is kept inside the model's context window (`runtime.context`).
    #[serde(default)]
    pub context: ContextPolicy,
    /// The pool-wide limits of this model's provider key (`runtime.limits`, else the top-level
    /// `limits:` entry for its provider, URL and key), enforced by the checkpoint API for every
    /// replica, session and job of the pool. Empty: no limit.
    #[serde(default, skip_serializing_if = "is_unlimited")]
    pub limits: ModelLimits,
    /// The models tried, in order, when this one keeps failing (`runtime.fallback`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback: Vec<FallbackModel>,
    /// Seconds a model may keep failing (connection errors, 5xx, 429s) before the next of
    /// `fallback` is tried (`runtime.fallback_after`); only used with a fallback.
    #[serde(default = "default_fallback_after_secs")]
    pub fallback_after_secs: u64,
    /// The container runtime its containers run under (`runtime.isolation`: `runsc`, `kata`,
    /// …); `None` is the engine's default (`runc`). Never falls back: a backend whose engine
    /// lacks it refuses to start the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
    /// How its background jobs run (`runtime.jobs`); used when it has the job tools.
    #[serde(default)]
    pub jobs: Jobs,
}

/// How an agent's background jobs run (`runtime.jobs`): each job is a container of its own,
/// started by the pool's job broker, that outlives the runner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Jobs {
    /// The image jobs run in; `None`: the agent's own image (which needs a `/bin/sh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Most jobs of the agent running at once (all its replicas and sessions together).
    pub max_concurrent: u32,
    /// Seconds a job may run when `job_start` names no `timeout`.
    pub default_timeout_secs: u64,
    /// CPU and memory limits of each job.
    #[serde(default)]
    pub resources: Resources,
}

impl Default for Jobs {
    fn default() -> Self {
        Self {
            image: None,
            max_concurrent: super::defaults::JOBS_MAX_CONCURRENT,
            default_timeout_secs: super::defaults::JOBS_DEFAULT_TIMEOUT_SECS,
            resources: Resources::default(),
        }
    }
}

impl Runtime {
    /// The image its background jobs run in: `runtime.jobs.image`, else the agent's own
    /// (`runtime.image`, which the runner is put into). An agent with job tools always has one
    /// (validation refuses it otherwise).
    pub fn job_image(&self) -> Option<&str> {
        self.jobs.image.as_deref().or(self.image.as_deref())
    }
}

fn is_unlimited(limits: &ModelLimits) -> bool {
    !limits.any()
}

fn default_fallback_after_secs() -> u64 {
    super::defaults::FALLBACK_AFTER_SECS
}

/// One entry of `runtime.fallback`: another model to try when the ones before it keep failing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackModel {
    /// The protocol it speaks.
    pub provider: Provider,
    /// The name of the OpenAI-compatible service `provider:` named, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// The model name.
    pub model: String,
    /// The API base URL, if not the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The secret holding its API key (also in the agent's `secrets`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_secret: Option<String>,
    /// The pool-wide limits of its provider key (the top-level `limits:` entry for it, if any).
    #[serde(default, skip_serializing_if = "is_unlimited")]
    pub limits: ModelLimits,
}

/// Container limits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// CPUs (fractions allowed).
    pub cpu: Option<f64>,
    /// Memory limit in bytes.
    pub memory_bytes: Option<u64>,
}

/// One canned response of the `scripted` provider. The scripted model answers a model call with
/// step `k mod len`, where `k` is the number of assistant messages already in the thread's
/// history: a script that ends with a text-only step answers any number of turns the same way,
/// and a turn re-run after a crash gets the same responses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptStep {
    /// The assistant's text.
    pub text: Option<String>,
    /// The tool calls it makes; an empty list ends the turn.
    pub tool_calls: Vec<ScriptedToolCall>,
}

/// A tool call made by the `scripted` provider.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedToolCall {
    /// The tool's name (one of the agent's tools).
    pub name: String,
    /// Its arguments.
    pub args: serde_json::Value,
}

/// A tool an agent may call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// Its effect class (the builtin's default unless the agentfile overrides it).
    pub effect: Effect,
    /// The agentfile set `effect` itself: it applies to every call. Otherwise the builtin's
    /// per-call rule applies (see [`super::tools::call_effect`]); for an MCP tool, its trusted
    /// server's annotations or `write` (see [`super::mcp::mcp_effect`]).
    #[serde(default)]
    pub effect_pinned: bool,
    /// For an `mcp://` entry: the server and which of its tools. `name` is then the name the
    /// model sees (`server__tool`), or `server__*` for all (or the allowed) tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpSource>,
    /// The read tool that checks this write's effect when its outcome is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verify>,
    /// For `ask_<agent>`: the collaborator a call hands its task to (a durable handoff, effect
    /// `write`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffTarget>,
    /// For `memory`: whose memory its calls use — the agent's (shared by every session and
    /// replica; the default) or the session's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ninetrix_proto::api::MemoryScope>,
    /// For `shell`: the secrets its processes get as environment variables of the same name
    /// (`secrets:` on the entry; also mounted for the agent). No other secret reaches a tool
    /// process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
}

/// The collaborator behind an `ask_<agent>` tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandoffTarget {
    /// The collaborator's name: an agent of the same pool, or (with `a2a`) the name the
    /// agentfile gives a remote A2A agent.
    pub agent: String,
    /// What the model is told about it (its description, role and goal, or a remote's
    /// `about`), if the agentfile says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub about: Option<String>,
    /// For a remote A2A agent (`collaborators: [{name, a2a, …}]`): where its card is, and the
    /// secret its calls carry. `None`: an agent of the same pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a: Option<A2aRemote>,
}

/// A remote A2A agent a collaborator entry names (docs/a2a.md, "Calling remote A2A agents").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct A2aRemote {
    /// The URL of its agent card (`a2a:`): an absolute `http://` or `https://` URL.
    pub card: String,
    /// The secret (by name; also in the agent's `secrets`) whose value is sent as
    /// `Authorization: Bearer`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl ToolSpec {
    /// A builtin with its default effect class.
    pub fn builtin(b: &super::tools::Builtin) -> Self {
        Self {
            name: b.name.to_string(),
            effect: b.effect,
            effect_pinned: false,
            mcp: None,
            verify: None,
            handoff: None,
            scope: None,
            secrets: Vec::new(),
        }
    }

    /// The `ask_<agent>` tool that hands a task to collaborator `agent` (effect `write`,
    /// pinned: a handoff is never silently repeated).
    pub fn handoff(agent: &str, about: Option<String>) -> Self {
        Self {
            name: ninetrix_proto::handoffs::tool_name(agent),
            effect: Effect::Write,
            effect_pinned: true,
            mcp: None,
            verify: None,
            handoff: Some(HandoffTarget {
                agent: agent.to_string(),
                about,
                a2a: None,
            }),
            scope: None,
            secrets: Vec::new(),
        }
    }

    /// The `ask_<name>` tool that sends a task to the remote A2A agent `remote` (effect
    /// `write`, pinned, like a handoff to an agent of the pool).
    pub fn a2a(name: &str, about: Option<String>, remote: A2aRemote) -> Self {
        let mut tool = Self::handoff(name, about);
        if let Some(target) = &mut tool.handoff {
            target.a2a = Some(remote);
        }
        tool
    }

    /// Whether this entry gives the tool the model knows as `name`.
    pub fn offers(&self, name: &str) -> bool {
        use super::mcp::{NAME_SEPARATOR, model_name};
        match &self.mcp {
            Some(source) if source.tool.is_none() => {
                if source.allow.is_empty() {
                    name.strip_prefix(source.server.as_str())
                        .and_then(|rest| rest.strip_prefix(NAME_SEPARATOR))
                        .is_some_and(|tool| !tool.is_empty())
                } else {
                    source
                        .allow
                        .iter()
                        .any(|tool| model_name(&source.server, tool) == name)
                }
            }
            _ => self.name == name,
        }
    }
}

/// How an agent runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Execution {
    /// `true`: a warm, crash-surviving agent (restart `on-failure:3`); `false`: a one-shot batch
    /// job (restart `no`).
    pub durability: bool,
    /// Warm pool size.
    pub replicas: u32,
    /// Most model rounds in one turn.
    pub max_turns: u32,
    /// The input a batch job runs once.
    pub task: Option<String>,
    /// What resume does with a turn interrupted mid-tool-call.
    pub resume: ResumeMode,
    /// Most sessions one replica serves at once; the rest wait for a free slot.
    #[serde(default = "default_max_concurrent_sessions")]
    pub max_concurrent_sessions: u32,
    /// Most handoffs in a chain that starts at a turn of this agent's (`a → b → c` is 2): a
    /// call that would go deeper is answered with an error naming the chain.
    #[serde(default = "default_max_delegation_depth")]
    pub max_delegation_depth: u32,
    /// Seconds a call to a collaborator waits for its reply (`transfer_timeout`); then it fails
    /// with an error naming the collaborator.
    #[serde(default = "default_transfer_timeout_secs")]
    pub transfer_timeout_secs: u64,
    /// What a message sent while a turn runs does when its sender names no mode
    /// (`on_message_while_busy`: queue, steer, interrupt or reject).
    #[serde(default)]
    pub on_message_while_busy: ninetrix_proto::api::MessageMode,
    /// Seconds a tool call that is running when its turn is interrupted or cancelled may take
    /// to finish (`interrupt_grace`); then it is stopped, and a `write` so stopped is recorded
    /// with its outcome unknown.
    #[serde(default = "default_interrupt_grace_secs")]
    pub interrupt_grace_secs: u64,
    /// Snapshots of the workspace at each turn's end (`execution.snapshots`), for fork, rewind
    /// and diff; `None`: off (`snapshots: false`, and always for a batch job).
    #[serde(default = "default_snapshots")]
    pub snapshots: Option<Snapshots>,
}

fn default_snapshots() -> Option<Snapshots> {
    Some(Snapshots::default())
}

/// `execution.snapshots`: the bounds of the workspace snapshot taken at each turn's end. A
/// workspace past `max_bytes` or `max_files` gets no snapshot for that turn (a
/// `snapshot_skipped` event names the limit), and a fork or a rewind to that turn is refused:
/// its files cannot be restored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshots {
    /// Most bytes of files in one snapshot (`max_bytes`, a size like `512Mi`).
    pub max_bytes: u64,
    /// Most files in one snapshot (`max_files`).
    pub max_files: u64,
    /// The snapshots of this many most recent turns are kept; older ones are dropped (their
    /// conversation can still be gone back to, their files cannot) (`keep_turns`).
    pub keep_turns: u32,
}

impl Snapshots {
    /// In words: `each turn, ≤ 20000 files / 512 MiB, last 100 turns kept`.
    pub fn describe(&self) -> String {
        let size = super::units::format_memory(self.max_bytes);
        let split = size
            .find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(size.len());
        let (number, unit) = size.split_at(split);
        format!(
            "each turn, ≤ {} files / {number} {unit}B, last {} turns kept",
            self.max_files, self.keep_turns
        )
    }
}

impl Default for Snapshots {
    fn default() -> Self {
        Snapshots {
            max_bytes: super::defaults::SNAPSHOT_MAX_BYTES,
            max_files: super::defaults::SNAPSHOT_MAX_FILES,
            keep_turns: super::defaults::SNAPSHOT_KEEP_TURNS,
        }
    }
}

fn default_interrupt_grace_secs() -> u64 {
    super::defaults::INTERRUPT_GRACE_SECS
}

fn default_max_concurrent_sessions() -> u32 {
    super::defaults::MAX_CONCURRENT_SESSIONS
}

fn default_max_delegation_depth() -> u32 {
    super::defaults::MAX_DELEGATION_DEPTH
}

fn default_transfer_timeout_secs() -> u64 {
    super::defaults::TRANSFER_TIMEOUT_SECS
}

/// What resume does with a turn interrupted mid-tool-call (docs/design.md §6.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResumeMode {
    /// Cut the history back to the turn's input and re-run the turn (completed tool calls are
    /// answered from the ledger).
    Truncate,
    /// Keep the model's tool calls and complete them.
    Complete,
}

impl ResumeMode {
    /// The name used in agentfiles.
    pub fn as_str(self) -> &'static str {
        match self {
            ResumeMode::Truncate => "truncate",
            ResumeMode::Complete => "complete",
        }
    }
}

/// An agent's limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Governance {
    /// Most US dollars one run (turn) may spend on the model; `None` means no limit.
    pub max_budget_per_run: Option<f64>,
    /// Most US dollars one thread — a replica's conversation or a session — may spend, all its
    /// turns together, kept by the checkpoint API (`governance.max_budget_per_session`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_budget_per_session: Option<f64>,
    /// Most US dollars the agent may spend in one calendar day of `timezone`, all its replicas,
    /// sessions and jobs together (`governance.max_budget_per_day`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_budget_per_day: Option<f64>,
    /// Most US dollars the whole pool may spend in one calendar day of `timezone` (the
    /// top-level `governance.max_pool_budget_per_day`; every agent carries it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pool_budget_per_day: Option<f64>,
    /// The IANA time zone whose calendar days the day budgets count (`governance.timezone`,
    /// default `UTC`).
    #[serde(default = "default_budget_timezone")]
    pub timezone: String,
    /// What a spent budget beyond the run does (`governance.on_budget_exceeded`).
    #[serde(default)]
    pub on_budget_exceeded: OnBudgetExceeded,
    /// Which calls wait for a person's decision, and how long (`governance.human_approval`).
    /// `None`: no call is gated; `ask_human` still asks with the default timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human_approval: Option<HumanApproval>,
}

fn default_budget_timezone() -> String {
    "UTC".into()
}

impl Default for Governance {
    fn default() -> Self {
        Self {
            max_budget_per_run: None,
            max_budget_per_session: None,
            max_budget_per_day: None,
            max_pool_budget_per_day: None,
            timezone: default_budget_timezone(),
            on_budget_exceeded: OnBudgetExceeded::Stop,
            human_approval: None,
        }
    }
}

impl Governance {
    /// The budgets the checkpoint API keeps for this agent's threads; `None` when none is set.
    pub fn budgets(&self) -> Option<BudgetPolicy> {
        let policy = BudgetPolicy {
            per_session_usd: self.max_budget_per_session,
            per_day_usd: self.max_budget_per_day,
            pool_per_day_usd: self.max_pool_budget_per_day,
            timezone: self.timezone.clone(),
        };
        policy.any().then_some(policy)
    }

    /// How long a request to a person stands before it expires (and counts as a rejection).
    pub fn approval_timeout_secs(&self) -> u64 {
        self.human_approval
            .as_ref()
            .map_or(HumanApproval::DEFAULT_TIMEOUT_SECS, |h| h.timeout_secs)
    }

    /// Whether a call of the tool the model knows as `tool`, with final effect class `effect`,
    /// must be approved by a person before it runs.
    pub fn gates(&self, tool: &str, effect: Effect) -> bool {
        self.human_approval
            .as_ref()
            .is_some_and(|h| h.gates(tool, effect))
    }
}

/// `governance.human_approval`: approval gates in front of chosen calls (the public Ninetrix's
/// keys where they mean the same).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HumanApproval {
    /// Whether gates apply (`false` keeps the settings but gates nothing; `ask_human` still
    /// asks).
    pub enabled: bool,
    /// The calls gated by name.
    #[serde(default)]
    pub actions: Vec<ApprovalAction>,
    /// The calls gated by their final effect class (e.g. every `write`).
    #[serde(default)]
    pub effects: Vec<Effect>,
    /// Seconds a request stands; then it expires, which counts as a rejection.
    pub timeout_secs: u64,
    /// Where each new request is POSTed as signed JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify_url: Option<String>,
    /// The secret (by name) whose value signs the notifications (HMAC-SHA256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify_secret: Option<String>,
}

impl HumanApproval {
    /// 24 hours.
    pub const DEFAULT_TIMEOUT_SECS: u64 = 24 * 3600;
    /// The shortest timeout: 1 second.
    pub const MIN_TIMEOUT_SECS: u64 = 1;
    /// The longest timeout: 365 days.
    pub const MAX_TIMEOUT_SECS: u64 = 365 * 24 * 3600;

    /// Whether a call of `tool` (the model's name) with final class `effect` is gated.
    /// `ask_human` never is: it always asks (so `effects: [read]` does not gate it).
    pub fn gates(&self, tool: &str, effect: Effect) -> bool {
        self.enabled
            && tool != super::tools::ASK_HUMAN
            && (self.effects.contains(&effect) || self.actions.iter().any(|a| a.matches(tool)))
    }
}

/// One entry of `human_approval.actions`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalAction {
    /// A tool by the name the model calls it (a builtin, or `server__tool` for
    /// `mcp://server/tool`).
    Tool(String),
    /// Every tool of an MCP server (`mcp://server`).
    Server(String),
}

impl ApprovalAction {
    /// Whether the tool the model knows as `tool` is this entry's.
    pub fn matches(&self, tool: &str) -> bool {
        match self {
            ApprovalAction::Tool(name) => name == tool,
            ApprovalAction::Server(server) => tool
                .strip_prefix(server.as_str())
                .is_some_and(|rest| rest.starts_with(crate::mcp::NAME_SEPARATOR)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_prompt_follows_ninetrix_layout() {
        let m = Metadata {
            role: Some("web researcher".into()),
            goal: Some("find facts".into()),
            constraints: vec!["cite sources".into(), "be brief".into()],
            ..Metadata::default()
        };
        assert_eq!(
            m.system_prompt().unwrap(),
            "You are a web researcher.\n\nGoal: find facts\n\nConstraints:\n- cite sources\n- be brief"
        );
        assert_eq!(Metadata::default().system_prompt(), None);
    }

    #[test]
    fn gates_match_names_servers_and_effects_but_never_ask_human() {
        let h = HumanApproval {
            enabled: true,
            actions: vec![
                ApprovalAction::Tool("shell".into()),
                ApprovalAction::Server("tickets".into()),
            ],
            effects: vec![Effect::Read],
            timeout_secs: HumanApproval::DEFAULT_TIMEOUT_SECS,
            notify_url: None,
            notify_secret: None,
        };
        assert!(h.gates("shell", Effect::Write));
        assert!(h.gates("tickets__create", Effect::Write));
        assert!(!h.gates("ticketsx__create", Effect::Write));
        assert!(h.gates("file_read", Effect::Read));
        assert!(!h.gates("file_write", Effect::Idempotent));
        assert!(!h.gates("ask_human", Effect::Read), "ask_human always asks");
        let off = HumanApproval {
            enabled: false,
            ..h.clone()
        };
        assert!(!off.gates("shell", Effect::Write));
        let g = Governance {
            human_approval: Some(h),
            ..Governance::default()
        };
        assert!(g.gates("shell", Effect::Write));
        assert!(!Governance::default().gates("shell", Effect::Write));
        assert_eq!(
            Governance::default().approval_timeout_secs(),
            HumanApproval::DEFAULT_TIMEOUT_SECS
        );
    }

    #[test]
    fn snapshots_read_as_validate_shows_them() {
        assert_eq!(
            Snapshots::default().describe(),
            "each turn, ≤ 20000 files / 512 MiB, last 100 turns kept"
        );
        let s = Snapshots {
            max_bytes: 3 << 29,
            max_files: 10,
            keep_turns: 1,
        };
        assert_eq!(
            s.describe(),
            "each turn, ≤ 10 files / 1.5 GiB, last 1 turns kept"
        );
    }

    #[test]
    fn pool_name_precedence() {
        let af = Agentfile {
            name: None,
            agents: vec![],
            mcp_servers: BTreeMap::new(),
            triggers: Vec::new(),
        };
        let path = Path::new("/srv/My Agents/agentfile.yaml");
        assert_eq!(af.pool_name(None, path).as_deref(), Some("my-agents"));
        assert_eq!(af.pool_name(Some("cli"), path).as_deref(), Some("cli"));
        assert_eq!(af.pool_name(Some("Bad Name"), path), None);
        let named = Agentfile {
            name: Some("research".into()),
            agents: vec![],
            mcp_servers: BTreeMap::new(),
            triggers: Vec::new(),
        };
        assert_eq!(named.pool_name(None, path).as_deref(), Some("research"));
    }
}
