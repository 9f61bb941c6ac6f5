//! Validation: the located node tree → the resolved [`Agentfile`], collecting every problem.
//!
//! The walk checks keys (unknown keys get a "did you mean", Ninetrix keys that are not supported
//! yet say so), types, ranges and cross-field rules, and applies defaults, Ninetrix aliases and
//! provider resolution. It never stops at the first error: each section is checked on its own,
//! and a broken value only drops the checks that depend on it.

use std::collections::BTreeMap;

mod agent;
mod runtime;
mod settings;
mod tool_list;

use super::diagnostic::{Diagnostic, Severity};
use super::names;
use super::providers::{self, Provider, Resolution};
use super::schema::{
    AgentSpec, Agentfile, Execution, Governance, Metadata, Resources, ResumeMode, Runtime,
    ScriptStep, ScriptedToolCall, ToolSpec,
};
use super::tools::{self, Effect};
use super::units;
use super::yaml::{Key, Kind, Loc, Node};

/// Defaults shared with the public Ninetrix where the concept is the same.
pub mod defaults {
    /// `runtime.provider` when absent (as in Ninetrix).
    pub const PROVIDER: &str = "anthropic";
    /// `runtime.model` for Anthropic when absent (as in Ninetrix).
    pub const ANTHROPIC_MODEL: &str = "claude-sonnet-4-6";
    /// `runtime.temperature`.
    pub const TEMPERATURE: f64 = 0.2;
    /// `runtime.max_tokens`.
    pub const MAX_TOKENS: u32 = 8192;
    /// `runtime.tool_timeout` in seconds.
    pub const TOOL_TIMEOUT_SECS: u32 = 30;
    /// `execution.max_turns`.
    pub const MAX_TURNS: u32 = 20;
    /// Most replicas of one agent.
    pub const MAX_REPLICAS: u32 = 100;
}

/// The keys a mapping may hold.
struct Section {
    /// How messages name the mapping, e.g. "runtime".
    what: &'static str,
    /// Keys ninetrix understands.
    known: &'static [&'static str],
    /// Keys of the public Ninetrix that ninetrix does not support yet.
    unsupported: &'static [&'static str],
}

const TOP: Section = Section {
    what: "the top level",
    known: &[
        "name",
        "agents",
        "schema_version",
        "version",
        "execution",
        "governance",
    ],
    unsupported: &[
        "triggers",
        "volumes",
        "environments",
        "mcp_gateway",
        "persistence",
    ],
};
const AGENT: Section = Section {
    what: "an agent",
    known: &[
        "metadata",
        "runtime",
        "tools",
        "execution",
        "governance",
        "env",
        "secrets",
    ],
    unsupported: &[
        "triggers",
        "collaborators",
        "routing",
        "skills",
        "volumes",
        "packages",
        "output_type",
        "transfer_timeout",
        "serve",
        "persistence",
    ],
};
const METADATA: Section = Section {
    what: "metadata",
    known: &[
        "name",
        "description",
        "role",
        "goal",
        "instructions",
        "constraints",
    ],
    unsupported: &[],
};
const RUNTIME: Section = Section {
    what: "runtime",
    known: &[
        "provider",
        "model",
        "base_url",
        "api_key_secret",
        "temperature",
        "max_tokens",
        "tool_timeout",
        "image",
        "resources",
        "script",
        "max_turns",
    ],
    unsupported: &["history_window_tokens"],
};
const RESOURCES: Section = Section {
    what: "resources",
    known: &["cpu", "memory", "base_image"],
    unsupported: &["storage", "warm_pool"],
};
const EXECUTION: Section = Section {
    what: "execution",
    known: &["durability", "replicas", "max_turns", "task", "resume"],
    unsupported: &[
        "mode",
        "verify_steps",
        "max_steps",
        "on_step_failure",
        "verifier",
        "thinking",
    ],
};
const GOVERNANCE: Section = Section {
    what: "governance",
    known: &["max_budget_per_run"],
    unsupported: &["budget_warning_usd", "human_approval", "rate_limit"],
};
const TOOL: Section = Section {
    what: "a tool",
    known: &["name", "effect"],
    unsupported: &["source", "actions", "auth", "dependencies", "base_url"],
};
const SCRIPT_STEP: Section = Section {
    what: "a script step",
    known: &["text", "tool_calls"],
    unsupported: &[],
};
const TOOL_CALL: Section = Section {
    what: "a scripted tool call",
    known: &["name", "args"],
    unsupported: &[],
};

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
    ("cpu", "runtime.resources"),
    ("memory", "runtime.resources"),
    ("durability", "execution"),
    ("replicas", "execution"),
    ("task", "execution"),
    ("resume", "execution"),
    ("max_budget_per_run", "governance"),
    ("role", "metadata"),
    ("goal", "metadata"),
    ("instructions", "metadata"),
    ("constraints", "metadata"),
    ("description", "metadata"),
    ("tools", "the agent"),
    ("env", "the agent"),
    ("secrets", "the agent"),
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
    governance: Option<f64>,
}

/// `execution:` as written, before defaults.
#[derive(Default, Clone)]
struct ExecutionIn {
    durability: Option<(bool, Loc)>,
    replicas: Option<(u32, Loc)>,
    max_turns: Option<(u32, Loc)>,
    task: Option<String>,
    resume: Option<ResumeMode>,
}

#[derive(Default)]
struct Cx {
    diags: Vec<Diagnostic>,
}

impl Cx {
    fn error(
        &mut self,
        code: &'static str,
        path: &str,
        loc: Loc,
        message: impl Into<String>,
    ) -> &mut Diagnostic {
        self.diags
            .push(Diagnostic::new(Severity::Error, code, path, loc, message));
        self.diags.last_mut().expect("just pushed")
    }

    fn warning(
        &mut self,
        code: &'static str,
        path: &str,
        loc: Loc,
        message: impl Into<String>,
    ) -> &mut Diagnostic {
        self.diags
            .push(Diagnostic::new(Severity::Warning, code, path, loc, message));
        self.diags.last_mut().expect("just pushed")
    }

    fn type_error(&mut self, path: &str, node: &Node, expected: &str) {
        let found = node.kind.describe();
        self.error(
            "wrong_type",
            path,
            node.loc,
            format!("`{}` must be {expected}, found {found}", leaf(path)),
        )
        .help = Some(format!("write {expected} here"));
    }

    /// Checks that `node` is a mapping and that its keys belong to `section`; returns the
    /// entries with known keys.
    fn fields<'n>(
        &mut self,
        node: &'n Node,
        path: &str,
        section: &Section,
    ) -> Option<Vec<(&'n Key, &'n Node)>> {
        let Kind::Map(entries) = &node.kind else {
            self.type_error(path, node, "a mapping");
            return None;
        };
        let mut known = Vec::new();
        for (key, value) in entries {
            let key_path = join(path, &key.name);
            if section.known.contains(&key.name.as_str()) {
                known.push((key, value));
            } else if section.unsupported.contains(&key.name.as_str()) {
                self.error(
                    "unsupported_key",
                    &key_path,
                    key.loc,
                    format!("`{}` is not supported yet", key.name),
                )
                .help = Some(format!(
                    "`{}` is a key of the public Ninetrix agentfile that ninetrix does not \
                     implement yet; remove it (docs/agentfile.md lists what is supported)",
                    key.name
                ));
            } else {
                let help = suggest_key(&key.name, section);
                self.error(
                    "unknown_key",
                    &key_path,
                    key.loc,
                    format!("unknown key `{}` in {}", key.name, section.what),
                )
                .help = Some(help);
            }
        }
        Some(known)
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

    /// A string that may be absent (`null`).
    fn opt_string(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.kind {
            Kind::Null => None,
            _ => self.string(node, path),
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
        let Kind::Int(i) = node.kind else {
            self.type_error(path, node, "a whole number");
            return None;
        };
        if i < i64::from(min) || i > i64::from(max) {
            self.error(
                "out_of_range",
                path,
                node.loc,
                format!(
                    "`{}` must be between {min} and {max}, found {i}",
                    leaf(path)
                ),
            )
            .help = Some(format!("give a whole number from {min} to {max}"));
            return None;
        }
        u32::try_from(i).ok()
    }

    fn boolean(&mut self, node: &Node, path: &str) -> Option<bool> {
        match &node.kind {
            Kind::Bool(b) => Some(*b),
            Kind::Str(s)
                if ["yes", "no", "on", "off", "y", "n"]
                    .contains(&s.to_ascii_lowercase().as_str()) =>
            {
                let meant = matches!(s.to_ascii_lowercase().as_str(), "yes" | "on" | "y");
                self.error(
                    "wrong_type",
                    path,
                    node.loc,
                    format!("`{}` must be true or false, found \"{s}\"", leaf(path)),
                )
                .help = Some(format!(
                    "agentfiles use strict booleans (YAML 1.2): write `{meant}` instead of `{s}`"
                ));
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
}

fn merge_execution(own: ExecutionIn, shared: &ExecutionIn) -> ExecutionIn {
    ExecutionIn {
        durability: own.durability.or(shared.durability),
        replicas: own.replicas.or(shared.replicas),
        max_turns: own.max_turns.or(shared.max_turns),
        task: own.task.or_else(|| shared.task.clone()),
        resume: own.resume.or(shared.resume),
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

/// The closest candidate to `word`, if one is close enough to be a likely typo.
fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (strsim::jaro_winkler(word, c), *c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

fn suggest_key(key: &str, section: &Section) -> String {
    if let Some(s) = closest(key, section.known) {
        return format!("did you mean `{s}`?");
    }
    if let Some((_, home)) = KEY_HOMES.iter().find(|(k, _)| *k == key) {
        return format!("`{key}` belongs under `{home}`");
    }
    format!("{} takes: {}", section.what, section.known.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        assert_eq!(
            suggest_key("temprature", &RUNTIME),
            "did you mean `temperature`?"
        );
        assert_eq!(
            suggest_key("replicas", &AGENT),
            "`replicas` belongs under `execution`"
        );
        assert!(
            suggest_key("zzz", &GOVERNANCE).starts_with("governance takes: max_budget_per_run")
        );
        assert_eq!(
            closest("anthropc", &providers::known_names()),
            Some("anthropic")
        );
    }
}
