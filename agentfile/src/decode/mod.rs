//! Validation: the located node tree → the resolved [`Agentfile`], collecting every problem.
//!
//! The walk checks keys (unknown keys get a "did you mean", Ninetrix keys that are not supported
//! yet say so), types, ranges and cross-field rules, and applies defaults, Ninetrix aliases and
//! provider resolution. It never stops at the first error: each section is checked on its own,
//! and a broken value only drops the checks that depend on it.

use std::collections::{BTreeMap, BTreeSet};

mod a2a;
mod agent;
mod approval;
mod collaborators;
mod context;
mod endpoint;
mod jobs;
mod limits;
mod mcp;
mod problem;
mod runtime;
mod security;
mod settings;
mod snapshots;
#[cfg(test)]
mod testing;
mod tool_list;
mod triggers;

use super::defaults;
use super::diagnostic::{Diagnostic, DiagnosticKind, Severity};
use super::mcp::McpServer;
use super::names;
use super::providers::{self, Provider, Resolution};
use super::schema::{
    AgentSpec, Agentfile, Execution, FallbackModel, Governance, Metadata, ModelLimits,
    OnBudgetExceeded, Resources, ResumeMode, Runtime, ScriptStep, ScriptedToolCall, ToolSpec,
};
use super::tools::{self, Effect};
use super::units;
use super::yaml::{Key, Kind, Loc, Node};
use approval::ApprovalIn;
use problem::{KeyHint, Problem, ToolGap};

/// Decodes one key's value into its section's state `S`. `None` marks the section invalid; the
/// handler has already reported why.
type Handler<S> = fn(&mut Cx, &mut S, Field<'_>) -> Option<()>;

/// One entry of a mapping, as handed to its key's [`Handler`].
struct Field<'n> {
    /// The key as written.
    key: &'n Key,
    /// Its value.
    value: &'n Node,
    /// The dotted path of the value, e.g. `agents.a.runtime.model`.
    path: String,
}

/// The keys a mapping may hold, each known key with the handler that decodes it. A key is known
/// exactly when it has a handler, so a key cannot be accepted and then silently ignored.
struct Section<S: 'static> {
    /// How messages name the mapping, e.g. "runtime".
    what: &'static str,
    /// Keys ninetrix understands, with their handlers.
    keys: &'static [(&'static str, Handler<S>)],
    /// Keys of the public Ninetrix that ninetrix does not support yet.
    unsupported: &'static [&'static str],
}

impl<S> Section<S> {
    /// The names of the keys ninetrix understands, in table order.
    fn known(&self) -> Vec<&'static str> {
        self.keys.iter().map(|(name, _)| *name).collect()
    }

    fn handler(&self, key: &str) -> Option<Handler<S>> {
        self.keys
            .iter()
            .find(|(name, _)| *name == key)
            .map(|(_, handler)| *handler)
    }
}

/// A section's name and key lists without its state type, so every section can be listed in
/// one place (see [`SECTIONS`]).
#[cfg(test)]
trait SectionKeys: Sync {
    /// How messages name the mapping.
    fn what(&self) -> &'static str;
    /// Keys ninetrix understands.
    fn known(&self) -> Vec<&'static str>;
    /// Keys of the public Ninetrix that ninetrix does not support yet.
    fn unsupported(&self) -> &'static [&'static str];
}

#[cfg(test)]
impl<S> SectionKeys for Section<S> {
    fn what(&self) -> &'static str {
        self.what
    }
    fn known(&self) -> Vec<&'static str> {
        Section::known(self)
    }
    fn unsupported(&self) -> &'static [&'static str] {
        self.unsupported
    }
}

/// Every section of the agentfile; the coverage tests walk this list.
#[cfg(test)]
static SECTIONS: &[&dyn SectionKeys] = &[
    &agent::TOP,
    &agent::AGENT,
    &agent::METADATA,
    &runtime::RUNTIME,
    &runtime::RESOURCES,
    &jobs::JOBS,
    &limits::LIMITS,
    &limits::POOL_LIMIT,
    &limits::FALLBACK,
    &context::CONTEXT,
    &context::KEEP,
    &runtime::SCRIPT_STEP,
    &runtime::TOOL_CALL,
    &settings::EXECUTION,
    &snapshots::SNAPSHOTS,
    &settings::GOVERNANCE,
    &approval::HUMAN_APPROVAL,
    &tool_list::TOOL,
    &mcp::MCP_SERVER,
    &mcp::VERIFY,
    &triggers::TRIGGER,
    &a2a::REMOTE,
    &a2a::SKILL,
];

/// Where keys that are misplaced usually belong.
const KEY_HOMES: &[(&str, &str)] = &[
    ("provider", "runtime"),
    ("model", "runtime"),
    ("temperature", "runtime"),
    ("max_tokens", "runtime"),
    ("base_url", "runtime"),
    ("image", "runtime"),
    ("resources", "runtime"),
    ("script", "runtime"),
    ("limits", "runtime"),
    ("fallback", "runtime"),
    ("fallback_after", "runtime"),
    ("jobs", "runtime"),
    ("max_concurrent", "runtime.jobs"),
    ("default_timeout", "runtime.jobs"),
    ("max_in_flight", "runtime.limits"),
    ("requests_per_minute", "runtime.limits"),
    ("tokens_per_minute", "runtime.limits"),
    ("cpu", "runtime.resources"),
    ("memory", "runtime.resources"),
    ("durability", "execution"),
    ("replicas", "execution"),
    ("max_delegation_depth", "execution"),
    ("task", "execution"),
    ("resume", "execution"),
    ("on_message_while_busy", "execution"),
    ("interrupt_grace", "execution"),
    ("snapshots", "execution"),
    ("max_files", "execution.snapshots"),
    ("keep_turns", "execution.snapshots"),
    ("max_budget_per_run", "governance"),
    ("max_budget_per_session", "governance"),
    ("max_budget_per_day", "governance"),
    ("max_pool_budget_per_day", "governance"),
    ("on_budget_exceeded", "governance"),
    ("human_approval", "governance"),
    ("role", "metadata"),
    ("goal", "metadata"),
    ("instructions", "metadata"),
    ("constraints", "metadata"),
    ("description", "metadata"),
    ("tools", "the agent"),
    ("env", "the agent"),
    ("secrets", "the agent"),
    ("collaborators", "the agent"),
    ("transfer_timeout", "the agent"),
    ("skills", "the agent"),
    ("cron", "triggers"),
    ("every", "triggers"),
    ("timezone", "triggers"),
    ("target_agent", "triggers"),
];

/// Decodes and validates a parsed agentfile. Returns the agentfile when there are no errors,
/// and every diagnostic (errors and warnings) either way.
pub(crate) fn decode(root: &Node) -> (Option<Agentfile>, Vec<Diagnostic>) {
    let mut cx = Cx::default();
    let agentfile = cx.agentfile(root);
    let ok = !cx.diags.iter().any(|d| d.severity == Severity::Error);
    (agentfile.filter(|_| ok), cx.diags)
}

/// Settings given at the top level, applied to every agent that does not set them itself.
#[derive(Default)]
struct Shared {
    execution: ExecutionIn,
    governance: GovernanceIn,
}

/// `execution:` as written, before defaults.
#[derive(Default, Clone)]
struct ExecutionIn {
    durability: Option<(bool, Loc)>,
    replicas: Option<(u32, Loc)>,
    max_turns: Option<(u32, Loc)>,
    task: Option<String>,
    resume: Option<ResumeMode>,
    max_concurrent_sessions: Option<u32>,
    max_delegation_depth: Option<u32>,
    on_message_while_busy: Option<ninetrix_proto::api::MessageMode>,
    interrupt_grace: Option<u64>,
    snapshots: Option<snapshots::SnapshotsIn>,
}

impl ExecutionIn {
    /// Whether the agent is durable (`durability` defaults to `true`).
    fn durable(&self) -> bool {
        self.durability.is_none_or(|(b, _)| b)
    }
}

/// `governance:` as written, before the shared settings fill its gaps.
#[derive(Default, Clone)]
struct GovernanceIn {
    /// Whether it is the top-level (shared) one.
    shared: bool,
    /// The budget per run, when given and valid.
    budget: Option<f64>,
    /// The budgets the checkpoint API keeps, when given and valid.
    per_session: Option<f64>,
    per_day: Option<f64>,
    /// The pool's budget per day: only the top-level `governance` has one.
    pool_per_day: Option<f64>,
    /// `timezone` (a known IANA name) and where its key is.
    timezone: Option<(String, Loc)>,
    /// `on_budget_exceeded` and where its key is.
    on_exceeded: Option<(OnBudgetExceeded, Loc)>,
    /// `human_approval:`, when given (possibly with errors, reported).
    human_approval: Option<ApprovalIn>,
}

#[derive(Default)]
struct Cx {
    diags: Vec<Diagnostic>,
    /// The valid `mcp_servers` entries (decoded before the agents that use them).
    mcp: BTreeMap<String, McpServer>,
    /// `mcp_servers` entries with errors: tools using them are not reported a second time.
    mcp_invalid: BTreeSet<String>,
    /// Where each agent that sets its own `runtime.limits` has them, by the agent's path
    /// (`agents.a`): the top-level `limits:` leave its primary model alone.
    own_limits: BTreeMap<String, Loc>,
}

impl Cx {
    /// Records `problem` at `path` and `loc`.
    fn report(&mut self, path: &str, loc: Loc, problem: Problem<'_>) {
        self.diags.push(problem.at(path, loc));
    }

    fn type_error(&mut self, path: &str, node: &Node, expected: &str) {
        let problem = Problem::WrongType {
            leaf: leaf(path),
            expected,
            found: node.kind.describe(),
        };
        self.report(path, node.loc, problem);
    }

    /// Checks that `node` is a mapping and hands each of its known keys to the key's handler
    /// in `section`, reporting unknown and unsupported keys. Returns `None` when `node` is not
    /// a mapping, else whether every handler succeeded.
    fn dispatch<S>(
        &mut self,
        node: &Node,
        path: &str,
        section: &Section<S>,
        state: &mut S,
    ) -> Option<bool> {
        let Kind::Map(entries) = &node.kind else {
            self.type_error(path, node, "a mapping");
            return None;
        };
        let mut ok = true;
        for (key, value) in entries {
            let key_path = join(path, &key.name);
            if let Some(handle) = section.handler(&key.name) {
                let field = Field {
                    key,
                    value,
                    path: key_path,
                };
                ok &= handle(self, state, field).is_some();
            } else if section.unsupported.contains(&key.name.as_str()) {
                self.report(&key_path, key.loc, Problem::UnsupportedKey(&key.name));
            } else {
                let problem = Problem::UnknownKey {
                    key: &key.name,
                    section: section.what,
                    hint: suggest_key(&key.name, section),
                };
                self.report(&key_path, key.loc, problem);
            }
        }
        Some(ok)
    }

    fn string(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.kind {
            Kind::Str(s) => Some(s.clone()),
            _ => {
                self.type_error(path, node, "a string");
                None
            }
        }
    }

    /// A string, or `null` for none; `None` when it is neither (reported).
    fn nullable_string(&mut self, f: &Field<'_>) -> Option<Option<String>> {
        match &f.value.kind {
            Kind::Null => Some(None),
            _ => self.string(f.value, &f.path).map(Some),
        }
    }

    fn number(&mut self, node: &Node, path: &str) -> Option<f64> {
        match node.kind {
            Kind::Int(i) => Some(i as f64),
            Kind::Float(f) if f.is_finite() => Some(f),
            _ => {
                self.type_error(path, node, "a number");
                None
            }
        }
    }

    fn integer(&mut self, node: &Node, path: &str, min: u32, max: u32) -> Option<u32> {
        let n = self.integer_u64(node, path, u64::from(min), u64::from(max))?;
        u32::try_from(n).ok()
    }

    /// A whole number from `min` to `max` (both at most `i64::MAX`); `None` when it is not
    /// (reported).
    fn integer_u64(&mut self, node: &Node, path: &str, min: u64, max: u64) -> Option<u64> {
        let Kind::Int(i) = node.kind else {
            self.type_error(path, node, "a whole number");
            return None;
        };
        match u64::try_from(i) {
            Ok(n) if (min..=max).contains(&n) => Some(n),
            _ => {
                let problem = Problem::IntOutOfRange {
                    leaf: leaf(path),
                    min,
                    max,
                    found: i,
                };
                self.report(path, node.loc, problem);
                None
            }
        }
    }

    fn boolean(&mut self, node: &Node, path: &str) -> Option<bool> {
        match &node.kind {
            Kind::Bool(b) => Some(*b),
            Kind::Str(s)
                if ["yes", "no", "on", "off", "y", "n"]
                    .contains(&s.to_ascii_lowercase().as_str()) =>
            {
                let problem = Problem::LooseBoolean {
                    leaf: leaf(path),
                    written: s,
                    meant: matches!(s.to_ascii_lowercase().as_str(), "yes" | "on" | "y"),
                };
                self.report(path, node.loc, problem);
                None
            }
            _ => {
                self.type_error(path, node, "true or false");
                None
            }
        }
    }

    fn string_list(&mut self, node: &Node, path: &str) -> Option<Vec<(String, Loc)>> {
        let Kind::Seq(items) = &node.kind else {
            self.type_error(path, node, "a list of strings");
            return None;
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            if let Some(s) = self.string(item, &format!("{path}[{i}]")) {
                out.push((s, item.loc));
            }
        }
        Some(out)
    }

    /// A duration in seconds: a whole number and a unit (`30s`, `15m`, `24h`, `7d`) or whole
    /// seconds, within `field`'s range. `None` when it is not (reported).
    fn duration(&mut self, node: &Node, path: &str, field: DurationField) -> Option<u64> {
        let (secs, found) = match &node.kind {
            Kind::Int(i) => (u64::try_from(*i).unwrap_or(0), i.to_string()),
            Kind::Str(s) => match units::parse_duration(s) {
                Some(secs) => (secs, format!("\"{s}\"")),
                None => {
                    let problem = Problem::DurationFormat {
                        leaf: leaf(path),
                        text: s,
                    };
                    self.report(path, node.loc, problem);
                    return None;
                }
            },
            _ => {
                let expected =
                    format!("a duration such as `{}`, or whole seconds", field.example());
                self.type_error(path, node, &expected);
                return None;
            }
        };
        if !field.range().contains(&secs) {
            let problem = Problem::DurationRange {
                leaf: leaf(path),
                found,
                field,
            };
            self.report(path, node.loc, problem);
            return None;
        }
        Some(secs)
    }
}

/// A setting that holds a duration: its range, and how its messages read.
#[derive(Clone, Copy, Debug, PartialEq)]
enum DurationField {
    /// `governance.human_approval.timeout`.
    ApprovalTimeout,
    /// An agent's `transfer_timeout`.
    TransferTimeout,
    /// A schedule trigger's `catch_up_window`.
    CatchUpWindow,
    /// A webhook trigger's `tolerance`.
    Tolerance,
    /// `execution.interrupt_grace`.
    InterruptGrace,
    /// `runtime.fallback_after`.
    FallbackAfter,
    /// `runtime.jobs.default_timeout`.
    JobTimeout,
}

impl DurationField {
    /// The seconds it may hold.
    fn range(self) -> std::ops::RangeInclusive<u64> {
        use super::schema::HumanApproval;
        match self {
            DurationField::ApprovalTimeout => {
                HumanApproval::MIN_TIMEOUT_SECS..=HumanApproval::MAX_TIMEOUT_SECS
            }
            DurationField::TransferTimeout => 1..=defaults::MAX_TRANSFER_TIMEOUT_SECS,
            DurationField::CatchUpWindow => {
                1..=ninetrix_proto::triggers::spec::MAX_CATCH_UP_WINDOW_SECS
            }
            DurationField::Tolerance => 1..=ninetrix_proto::triggers::spec::MAX_TOLERANCE_SECS,
            DurationField::InterruptGrace => 1..=defaults::MAX_INTERRUPT_GRACE_SECS,
            DurationField::FallbackAfter => {
                defaults::MIN_FALLBACK_AFTER_SECS..=defaults::MAX_FALLBACK_AFTER_SECS
            }
            DurationField::JobTimeout => 1..=defaults::MAX_JOB_TIMEOUT_SECS,
        }
    }

    /// Its longest value in words, e.g. "365 days".
    fn max_text(self) -> String {
        let max = *self.range().end();
        match max % 86_400 {
            0 if max == 86_400 => "1 day".into(),
            0 => format!("{} days", max / 86_400),
            _ if max == 3600 => "1 hour".into(),
            _ => format!("{max} seconds"),
        }
    }

    /// A typical value, for messages.
    fn example(self) -> &'static str {
        match self {
            DurationField::ApprovalTimeout => "24h",
            DurationField::TransferTimeout => "5m",
            DurationField::CatchUpWindow => "1h",
            DurationField::Tolerance => "5m",
            DurationField::InterruptGrace => "10s",
            DurationField::FallbackAfter => "30s",
            DurationField::JobTimeout => "1h",
        }
    }
}

fn merge_execution(own: ExecutionIn, shared: &ExecutionIn) -> ExecutionIn {
    ExecutionIn {
        durability: own.durability.or(shared.durability),
        replicas: own.replicas.or(shared.replicas),
        max_turns: own.max_turns.or(shared.max_turns),
        task: own.task.or_else(|| shared.task.clone()),
        resume: own.resume.or(shared.resume),
        max_concurrent_sessions: own
            .max_concurrent_sessions
            .or(shared.max_concurrent_sessions),
        max_delegation_depth: own.max_delegation_depth.or(shared.max_delegation_depth),
        on_message_while_busy: own.on_message_while_busy.or(shared.on_message_while_busy),
        interrupt_grace: own.interrupt_grace.or(shared.interrupt_grace),
        snapshots: own.snapshots.or_else(|| {
            shared
                .snapshots
                .as_ref()
                .map(snapshots::SnapshotsIn::inherited)
        }),
    }
}

fn find_call_name(step: &Node, index: usize) -> Option<Loc> {
    let Kind::Map(entries) = &step.kind else {
        return None;
    };
    let (_, calls) = entries.iter().find(|(k, _)| k.name == "tool_calls")?;
    let Kind::Seq(calls) = &calls.kind else {
        return None;
    };
    let Kind::Map(call) = &calls.get(index)?.kind else {
        return None;
    };
    call.iter()
        .find(|(k, _)| k.name == "name")
        .map(|(_, v)| v.loc)
}

fn builtin_names() -> String {
    tools::BUILTINS
        .iter()
        .map(|b| b.name)
        .collect::<Vec<_>>()
        .join(", ")
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn leaf(path: &str) -> &str {
    let last = path.rsplit('.').next().unwrap_or(path);
    if last.is_empty() {
        "the agentfile"
    } else {
        last
    }
}

/// The candidate closest to `word`, if one is close enough to be a likely typo (the candidate
/// itself, with its own lifetime: keys and tool names are `'static`).
fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let best = ninetrix_proto::suggest::closest(word, candidates)?;
    candidates.iter().copied().find(|c| *c == best)
}

fn suggest_key<'a, S>(key: &'a str, section: &Section<S>) -> KeyHint<'a> {
    let known = section.known();
    if let Some(s) = closest(key, &known) {
        return KeyHint::Typo(s);
    }
    if let Some((_, home)) = KEY_HOMES.iter().find(|(k, _)| *k == key) {
        return KeyHint::Home { key, home };
    }
    KeyHint::Takes {
        section: section.what,
        known,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        assert_eq!(
            suggest_key("temprature", &runtime::RUNTIME).to_string(),
            "did you mean `temperature`?"
        );
        assert_eq!(
            suggest_key("replicas", &agent::AGENT).to_string(),
            "`replicas` belongs under `execution`"
        );
        assert!(
            suggest_key("zzz", &settings::GOVERNANCE)
                .to_string()
                .starts_with("governance takes: max_budget_per_run")
        );
        assert_eq!(
            closest("anthropc", &providers::known_names()),
            Some("anthropic")
        );
    }

    /// Where a section sits in a document: a template whose `KEY: VALUE` line sets one key of
    /// the section, and the section's dotted path.
    fn placement(what: &str) -> Option<(&'static str, &'static str)> {
        Some(match what {
            "the top level" => ("KEY: VALUE\n", ""),
            "an agent" => ("agents:\n  a:\n    KEY: VALUE\n", "agents.a"),
            "metadata" => (
                "agents:\n  a:\n    metadata:\n      KEY: VALUE\n",
                "agents.a.metadata",
            ),
            "runtime" => (
                "agents:\n  a:\n    runtime:\n      KEY: VALUE\n",
                "agents.a.runtime",
            ),
            "resources" => (
                "agents:\n  a:\n    runtime:\n      resources:\n        KEY: VALUE\n",
                "agents.a.runtime.resources",
            ),
            "jobs" => (
                "agents:\n  a:\n    runtime:\n      jobs:\n        KEY: VALUE\n",
                "agents.a.runtime.jobs",
            ),
            "context" => (
                "agents:\n  a:\n    runtime:\n      context:\n        KEY: VALUE\n",
                "agents.a.runtime.context",
            ),
            "limits" => (
                "agents:\n  a:\n    runtime:\n      limits:\n        KEY: VALUE\n",
                "agents.a.runtime.limits",
            ),
            "a fallback" => (
                "agents:\n  a:\n    runtime:\n      fallback:\n        - KEY: VALUE\n",
                "agents.a.runtime.fallback[0]",
            ),
            "a limits entry" => ("limits:\n  - KEY: VALUE\nagents:\n  a: {}\n", "limits[0]"),
            "keep_recent" => (
                "agents:\n  a:\n    runtime:\n      context:\n        keep_recent:\n          KEY: VALUE\n",
                "agents.a.runtime.context.keep_recent",
            ),
            "a script step" => (
                "agents:\n  a:\n    runtime:\n      provider: scripted\n      script:\n        - KEY: VALUE\n",
                "agents.a.runtime.script[0]",
            ),
            "a scripted tool call" => (
                "agents:\n  a:\n    runtime:\n      provider: scripted\n      script:\n        - tool_calls:\n            - KEY: VALUE\n",
                "agents.a.runtime.script[0].tool_calls[0]",
            ),
            "execution" => (
                "agents:\n  a:\n    execution:\n      KEY: VALUE\n",
                "agents.a.execution",
            ),
            "snapshots" => (
                "agents:\n  a:\n    execution:\n      snapshots:\n        KEY: VALUE\n",
                "agents.a.execution.snapshots",
            ),
            "governance" => (
                "agents:\n  a:\n    governance:\n      KEY: VALUE\n",
                "agents.a.governance",
            ),
            "human_approval" => (
                "agents:\n  a:\n    governance:\n      human_approval:\n        KEY: VALUE\n",
                "agents.a.governance.human_approval",
            ),
            "a tool" => (
                "agents:\n  a:\n    tools:\n      - KEY: VALUE\n",
                "agents.a.tools[0]",
            ),
            "an MCP server" => (
                "mcp_servers:\n  s:\n    KEY: VALUE\nagents:\n  a: {}\n",
                "mcp_servers.s",
            ),
            "a verifier" => (
                "agents:\n  a:\n    tools:\n      - name: file_write\n        verify:\n          KEY: VALUE\n",
                "agents.a.tools[0].verify",
            ),
            "a trigger" => (
                "triggers:\n  - KEY: VALUE\nagents:\n  a: {}\n",
                "triggers[0]",
            ),
            "a remote collaborator" => (
                "agents:\n  a:\n    collaborators:\n      - KEY: VALUE\n",
                "agents.a.collaborators[0]",
            ),
            "a skill" => (
                "agents:\n  a:\n    skills:\n      - KEY: VALUE\n",
                "agents.a.skills[0]",
            ),
            _ => return None,
        })
    }

    /// Whether setting `key` of the section described by `what` to a value of no valid type
    /// gets a diagnostic from the key's handler (not `unknown_key`/`unsupported_key`), at the
    /// key or inside its value.
    fn reaches_a_handler(what: &str, key: &str) -> bool {
        let (template, section_path) = placement(what).expect("placed");
        // A list holding a list is no key's valid value.
        let text = template.replace("KEY", key).replace("VALUE", "[[1]]");
        let root = crate::yaml::parse(&text).expect("the sample is YAML");
        let (_, diags) = decode(&root);
        let key_path = join(section_path, key);
        diags.iter().any(|d| {
            let under = d.path == key_path
                || d.path.starts_with(&format!("{key_path}."))
                || d.path.starts_with(&format!("{key_path}["));
            under
                && !matches!(
                    d.kind,
                    DiagnosticKind::UnknownKey | DiagnosticKind::UnsupportedKey
                )
        })
    }

    #[test]
    fn every_known_key_reaches_a_handler_that_reads_its_value() {
        let mut unhandled = Vec::new();
        for section in SECTIONS {
            assert!(
                placement(section.what()).is_some(),
                "section `{}` has no sample placement in this test",
                section.what()
            );
            for key in section.known() {
                if !reaches_a_handler(section.what(), key) {
                    unhandled.push(format!("{}: {key}", section.what()));
                }
            }
            // The check can fail: a key with no handler gets only `unknown_key`.
            assert!(!reaches_a_handler(section.what(), "zz_no_such_key"));
        }
        assert!(
            unhandled.is_empty(),
            "known keys whose value no handler reads: {unhandled:?}"
        );
    }

    #[test]
    fn every_declared_section_is_listed_in_sections() {
        let sources = [
            include_str!("mod.rs"),
            include_str!("a2a.rs"),
            include_str!("agent.rs"),
            include_str!("approval.rs"),
            include_str!("collaborators.rs"),
            include_str!("context.rs"),
            include_str!("endpoint.rs"),
            include_str!("jobs.rs"),
            include_str!("limits.rs"),
            include_str!("runtime.rs"),
            include_str!("settings.rs"),
            include_str!("snapshots.rs"),
            include_str!("tool_list.rs"),
            include_str!("mcp.rs"),
            include_str!("triggers.rs"),
        ];
        let declared = sources
            .iter()
            .flat_map(|s| s.lines())
            .map(|l| l.trim_start().trim_start_matches("pub(super) "))
            .filter(|l| l.starts_with("const ") && l.contains(": Section<"))
            .count();
        assert_eq!(
            declared,
            SECTIONS.len(),
            "a `const …: Section<…>` is missing from SECTIONS, so no test checks its keys"
        );
    }

    #[test]
    fn each_key_is_known_once_or_unsupported_never_both() {
        for section in SECTIONS {
            let known = section.known();
            for (i, key) in known.iter().enumerate() {
                assert!(
                    !known[..i].contains(key),
                    "`{key}` is listed twice in {} (the second handler never runs)",
                    section.what()
                );
                assert!(
                    !section.unsupported().contains(key),
                    "`{key}` is both known and unsupported in {}",
                    section.what()
                );
            }
        }
    }

    #[test]
    fn misplaced_key_hints_point_at_a_section_that_knows_the_key() {
        for (key, home) in KEY_HOMES {
            let what = match *home {
                "the agent" => "an agent",
                "triggers" => "a trigger",
                "runtime.resources" => "resources",
                "runtime.limits" => "limits",
                "runtime.jobs" => "jobs",
                "execution.snapshots" => "snapshots",
                other => other,
            };
            let section = SECTIONS
                .iter()
                .find(|s| s.what() == what)
                .unwrap_or_else(|| panic!("`{key}` points at `{home}`, which is no section"));
            assert!(
                section.known().contains(key),
                "`{key}` points at `{home}`, which does not know it"
            );
        }
    }
}
