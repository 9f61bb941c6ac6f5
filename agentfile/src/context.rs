//! `runtime.context`: how a long-lived thread's history is kept inside its model's context
//! window — the resolved policy ([`ContextPolicy`]), its defaults, and the table of context
//! windows of the models ninetrix knows. The runner applies the policy (runner/src/context.rs);
//! this module only says what the agentfile asked for.
//!
//! A thread compacts before a model round whose input would pass `compact_at` of `window`:
//! with `summarize`, the turns before the most recent `keep_recent` are replaced, in what the
//! model sees, by a summary a model writes; with `clear_tool_results`, their tool results are
//! replaced by a stub (no model call). The stored history never shrinks (docs/runner.md,
//! "Long conversations").

use std::fmt;

use serde::{Deserialize, Serialize};

/// The share of the window at which a thread compacts, unless the agentfile says otherwise.
pub const DEFAULT_COMPACT_AT: f64 = 0.8;

/// The turns kept whole after a compaction, unless the agentfile says otherwise.
pub const DEFAULT_KEEP_TURNS: u32 = 2;

/// The smallest window an agentfile may give (a smaller one could not hold a system prompt and
/// one turn).
pub const MIN_WINDOW: u32 = 1_000;

/// The largest window an agentfile may give.
pub const MAX_WINDOW: u32 = 100_000_000;

pub use ninetrix_proto::context::Strategy;

/// What a compaction keeps whole at the end of the history.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeepRecent {
    /// The last N finished turns (the current turn is always kept).
    Turns(u32),
    /// At least N tokens of the most recent turns (the current turn is always kept).
    Tokens(u32),
}

impl Default for KeepRecent {
    fn default() -> Self {
        KeepRecent::Turns(DEFAULT_KEEP_TURNS)
    }
}

impl fmt::Display for KeepRecent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeepRecent::Turns(1) => write!(f, "the last turn"),
            KeepRecent::Turns(n) => write!(f, "the last {n} turns"),
            KeepRecent::Tokens(n) => write!(f, "the last {n} tokens of turns"),
        }
    }
}

/// Where the window came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowSource {
    /// `runtime.context.window`.
    Agentfile,
    /// The public Ninetrix's `runtime.history_window_tokens`.
    Shorthand,
    /// The table of known models ([`known_window`]).
    ModelTable,
}

/// The resolved `runtime.context` of an agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextPolicy {
    /// The model's context window in tokens; `None`: unknown (a model outside the table, no
    /// `window` given) — the thread then compacts only when the provider answers that the
    /// input is too long.
    pub window: Option<u32>,
    /// Where `window` came from.
    pub window_source: Option<WindowSource>,
    /// The share of the window at which to compact, in (0, 1).
    pub compact_at: f64,
    /// What is kept whole.
    pub keep_recent: KeepRecent,
    /// How the rest is made smaller.
    pub strategy: Strategy,
    /// The model that writes summaries (`None`: the agent's own).
    pub model: Option<String>,
}

impl Default for ContextPolicy {
    /// No known window: what a spec written before `runtime.context` existed means.
    fn default() -> Self {
        Self::default_for("")
    }
}

impl ContextPolicy {
    /// The policy of an agent whose agentfile says nothing: the model's known window, or none.
    pub fn default_for(model: &str) -> Self {
        let window = known_window(model);
        Self {
            window,
            window_source: window.map(|_| WindowSource::ModelTable),
            compact_at: DEFAULT_COMPACT_AT,
            keep_recent: KeepRecent::default(),
            strategy: Strategy::Summarize,
            model: None,
        }
    }

    /// The input size, in tokens, past which a round compacts first (`None`: no window).
    pub fn threshold(&self) -> Option<u64> {
        self.window
            .map(|w| (f64::from(w) * self.compact_at).floor() as u64)
    }

    /// One line for `ninetrix validate`: what the runner will do.
    pub fn describe(&self) -> String {
        let how = match self.strategy {
            Strategy::Summarize => format!(
                "summarize by {}",
                self.model.as_deref().unwrap_or("the agent's model")
            ),
            other => other.as_str().to_string(),
        };
        let when = match (self.window, self.threshold()) {
            (Some(window), Some(at)) => {
                let source = match self.window_source {
                    Some(WindowSource::ModelTable) => ", the model's",
                    Some(WindowSource::Shorthand) => ", history_window_tokens",
                    _ => "",
                };
                format!(
                    "compacts past {:.0}% of {window} tokens ({at}{source})",
                    self.compact_at * 100.0
                )
            }
            _ => "window unknown (set runtime.context.window): compacts when the model refuses \
                  the input as too long"
                .to_string(),
        };
        format!("{when} · {how} · keeps {}", self.keep_recent)
    }
}

/// Context windows, in tokens, by model-name prefix (the first that matches): the models
/// ninetrix prices, as their providers publish them.
const WINDOWS: &[(&str, u32)] = &[
    ("claude-opus-4", 200_000),
    ("claude-sonnet-4", 200_000),
    ("claude-3-7-sonnet", 200_000),
    ("claude-haiku-4", 200_000),
    ("claude-3-5-haiku", 200_000),
    ("gpt-4o-mini", 128_000),
    ("gpt-4o", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-5", 400_000),
    ("o4-mini", 200_000),
    ("o3", 200_000),
];

/// The context window of a known model, by name (a dated name such as
/// `claude-sonnet-4-5-20250929` matches its family).
pub fn known_window(model: &str) -> Option<u32> {
    WINDOWS
        .iter()
        .find(|(prefix, _)| model.starts_with(prefix))
        .map(|(_, w)| *w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_models_have_their_window_and_others_none() {
        assert_eq!(known_window("claude-sonnet-4-6"), Some(200_000));
        assert_eq!(known_window("gpt-4o-mini-2024-07-18"), Some(128_000));
        assert_eq!(known_window("gpt-4.1-nano"), Some(1_047_576));
        assert_eq!(known_window("llama3.1:8b"), None);
        assert_eq!(known_window("scripted"), None);
    }

    #[test]
    fn the_threshold_is_the_share_of_the_window() {
        let p = ContextPolicy::default_for("gpt-4o");
        assert_eq!(p.threshold(), Some(102_400));
        assert_eq!(
            p.describe(),
            "compacts past 80% of 128000 tokens (102400, the model's) · summarize by the agent's model · keeps the last 2 turns"
        );
        let unknown = ContextPolicy::default_for("llama3");
        assert_eq!(unknown.threshold(), None);
        assert!(unknown.describe().contains("set runtime.context.window"));
    }
}
