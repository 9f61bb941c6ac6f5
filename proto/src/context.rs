//! A thread's context window on the wire: the compaction record that stands for older messages
//! in the model's view ([`Compaction`], stored as a [`crate::Block::Compaction`] in a `system`
//! message of the history, so it is one commit like any other step), its strategy, and the
//! context use a thread reports ([`ContextUse`]).
//!
//! The stored history never shrinks: a compaction only changes what the model is sent — the
//! system prompt, the latest summary, and the messages from its `to` on (docs/runner.md,
//! "Long conversations").

use serde::{Deserialize, Serialize};

/// How older turns are made smaller (`runtime.context.strategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// A model writes a summary of them, which replaces them in the model's view.
    Summarize,
    /// Their tool results are replaced by a stub naming the tool and the result's size: no
    /// model call.
    ClearToolResults,
    /// The provider compacts (its opaque block is stored verbatim).
    Native,
}

impl Strategy {
    /// Every strategy as written in an agentfile.
    pub const ALL: [(&'static str, Strategy); 3] = [
        ("summarize", Strategy::Summarize),
        ("clear_tool_results", Strategy::ClearToolResults),
        ("native", Strategy::Native),
    ];

    /// How the agentfile writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Summarize => "summarize",
            Strategy::ClearToolResults => "clear_tool_results",
            Strategy::Native => "native",
        }
    }
}

/// Why a thread compacted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CompactionReason {
    /// The next round's input would pass `compact_at` of the window.
    Threshold,
    /// The provider answered that the input is too long: compacted, and the round retried.
    Overflow,
    /// Someone asked (`ninetrix compact`).
    Requested,
}

impl CompactionReason {
    /// How the trace says it.
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionReason::Threshold => "threshold",
            CompactionReason::Overflow => "overflow",
            CompactionReason::Requested => "requested",
        }
    }
}

/// One compaction: what the model sees instead of the history's messages before `to`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Compaction {
    /// How.
    pub strategy: Strategy,
    /// Why.
    pub reason: CompactionReason,
    /// The first history position it covers: the previous compaction's `to` (0 for the first).
    /// A summary covers `from..to` and the previous summary.
    pub from: u64,
    /// The history position it covers up to (exclusive): always the start of a turn (its input
    /// message), never inside the turn in progress.
    pub to: u64,
    /// The first and last stored turn it covers, counted as the history's input messages from 1.
    pub turns: [u64; 2],
    /// The summary the model sees (`summarize`); `None` for `clear_tool_results`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The provider's opaque compaction block, verbatim (`native`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub native: Option<serde_json::Value>,
    /// The model that wrote the summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The estimated input of the next round before it, in tokens.
    pub tokens_before: u64,
    /// The estimated input of the next round after it, in tokens.
    pub tokens_after: u64,
    /// Tool results the model no longer sees (`clear_tool_results`: replaced by a stub).
    #[serde(default)]
    pub cleared: u64,
    /// The thread's version when it was made (it is stored in the next one).
    pub at_version: u64,
}

/// How full a thread's context is: the input the last model round sent, against the window.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ContextUse {
    /// Input tokens of the last model round (as the provider reported them), or the estimate
    /// after a compaction.
    #[serde(deserialize_with = "crate::api::int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub input_tokens: u64,
    /// The history length that input covered: messages after it are counted by estimate.
    #[serde(deserialize_with = "crate::api::int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub history_len: u64,
    /// The model's context window, when known.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::api::int::stored_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub window: Option<u64>,
    /// Compactions so far.
    #[serde(default, deserialize_with = "crate::api::int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub compactions: u64,
}

impl ContextUse {
    /// The share of the window in use, when the window is known.
    pub fn fraction(&self) -> Option<f64> {
        self.window
            .filter(|w| *w > 0)
            .map(|w| self.input_tokens as f64 / w as f64)
    }
}

/// A token count as people read it: `950`, `9k`, `182k`, `1.2M`.
pub fn tokens_short(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{}k", (n + 500) / 1000),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts_read_short() {
        assert_eq!(tokens_short(950), "950");
        assert_eq!(tokens_short(9_200), "9k");
        assert_eq!(tokens_short(182_400), "182k");
        assert_eq!(tokens_short(1_200_000), "1.2M");
    }

    #[test]
    fn a_compaction_round_trips_and_refuses_unknown_fields() {
        let c = Compaction {
            strategy: Strategy::Summarize,
            reason: CompactionReason::Threshold,
            from: 0,
            to: 160,
            turns: [1, 40],
            summary: Some("the user wants a report".into()),
            native: None,
            model: Some("gpt-4o-mini".into()),
            tokens_before: 182_000,
            tokens_after: 9_000,
            cleared: 0,
            at_version: 321,
        };
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["strategy"], "summarize");
        assert_eq!(
            serde_json::from_value::<Compaction>(json.clone()).unwrap(),
            c
        );
        let mut bad = json;
        bad["extra"] = 1.into();
        assert!(serde_json::from_value::<Compaction>(bad).is_err());
    }
}
