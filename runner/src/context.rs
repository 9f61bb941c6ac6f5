//! The model's view of a long history, and when and where to compact it — pure functions over
//! the stored history (docs/runner.md, "Long conversations").
//!
//! The stored history never shrinks. A compaction is one more message in it (a `system` message
//! holding a [`Compaction`]), committed like any step; the model's view is then the system
//! prompt, the latest summary, and the messages from the summary's `to` on — with the tool
//! results of cleared ranges replaced by a stub, and the compaction messages themselves left
//! out ([`fold`], [`view`]). A compaction never covers the turn in progress: its `to` is the
//! start of a turn (an input message) no later than the current turn's input, so a tool call is
//! never split from its result, and a pending approval, a handoff in flight and the current
//! user message always stay in view ([`plan`]). Only when the provider has refused the input
//! as too long and nothing is left before the current turn are the current turn's older tool
//! results cleared ([`plan_overflow`]).

use std::collections::HashMap;

use ninetrix_agentfile::context::{ContextPolicy, KeepRecent};
use ninetrix_proto::context::{Compaction, CompactionReason, ContextUse, Strategy};
use ninetrix_proto::{Block, Message, Role};

/// The system prompt of a summarising call.
pub const SUMMARY_SYSTEM: &str = "You compact the conversation of an AI agent so that it can \
go on with less context. Write a summary of the conversation so far that the agent can work \
from instead of the messages themselves: the user's goals and standing instructions, what was \
decided and why, what was done (tool calls that changed something, with their outcomes), facts \
learned that are still needed (names, paths, IDs, numbers), and what is still open. Keep any \
earlier summary's content that still matters. Write only the summary, in plain prose or short \
lists, without a preamble.";

/// The instruction that ends a summarising call's input.
pub const SUMMARY_ASK: &str = "Summarize the conversation above as instructed. It will \
replace those messages in your context.";

/// What the compactions in a history add up to.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Folded<'a> {
    /// The latest summary, if any.
    pub summary: Option<&'a Compaction>,
    /// The first message the model sees whole (the latest summary's `to`; 0 without one).
    pub start: usize,
    /// Tool results before this position (and from `start`) are seen as a stub.
    pub cleared_before: usize,
    /// Assistant messages before `start` (for providers that count rounds, as `scripted`).
    pub hidden_rounds: usize,
    /// Compactions in the history.
    pub count: u64,
}

/// Reads the compactions of `history`, in order.
pub fn fold(history: &[Message]) -> Folded<'_> {
    let mut f = Folded::default();
    for m in history {
        let Some(c) = m.compaction() else { continue };
        f.count += 1;
        let to = usize::try_from(c.to)
            .unwrap_or(usize::MAX)
            .min(history.len());
        match c.strategy {
            Strategy::Summarize | Strategy::Native => {
                f.summary = Some(c);
                f.start = f.start.max(to);
            }
            Strategy::ClearToolResults => f.cleared_before = f.cleared_before.max(to),
        }
    }
    f.hidden_rounds = history[..f.start]
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .count();
    f
}

/// The text that stands for the summarised turns at the top of the model's view.
pub fn summary_text(c: &Compaction) -> String {
    format!(
        "[Summary of the conversation before this point (turns {}–{}), written when it was \
         compacted; the original messages are kept in the thread's store]\n{}\n[End of summary]",
        c.turns[0],
        c.turns[1],
        c.summary.as_deref().unwrap_or("")
    )
}

/// The stub a cleared tool result of stored turn `turn` is seen as.
pub fn stub(tool: &str, bytes: usize, turn: u64) -> String {
    format!(
        "[The result of this `{tool}` call ({bytes} bytes) was cleared from the context to save \
         space; it is kept in the thread's store (`ninetrix trace`, turn {turn}). Call the tool \
         again if you need it.]"
    )
}

/// The names of the tools called in `history`, by call ID.
fn tool_names(history: &[Message]) -> HashMap<&str, &str> {
    history
        .iter()
        .flat_map(|m| &m.blocks)
        .filter_map(|b| match b {
            Block::ToolCall { id, name, .. } => Some((id.as_str(), name.as_str())),
            _ => None,
        })
        .collect()
}

/// `history[from..to]` as the model sees it: compaction messages left out, tool results before
/// `cleared_before` stubbed, and — when `from` is the summary's start — the summary at the top
/// of the first message.
fn render(history: &[Message], f: &Folded<'_>, from: usize, to: usize) -> Vec<Message> {
    let names = tool_names(&history[from..to]);
    let mut out: Vec<Message> = Vec::with_capacity(to - from + 1);
    // The stored turn of each message, counted only where a stub needs it.
    let mut turn = (f.cleared_before > from).then(|| {
        history[..from]
            .iter()
            .filter(|m| m.role == Role::User)
            .count() as u64
    });
    for (i, m) in history.iter().enumerate().take(to).skip(from) {
        if m.role == Role::User
            && let Some(t) = &mut turn
        {
            *t += 1;
        }
        if m.compaction().is_some() {
            continue;
        }
        if i < f.cleared_before && m.role == Role::Tool {
            let mut m = m.clone();
            for b in &mut m.blocks {
                if let Block::ToolResult {
                    call_id, content, ..
                } = b
                {
                    let tool = names.get(call_id.as_str()).copied().unwrap_or("tool");
                    *content = stub(tool, content.len(), turn.unwrap_or(0));
                }
            }
            out.push(m);
        } else {
            out.push(m.clone());
        }
    }
    if let (Some(c), true) = (f.summary, from == f.start) {
        let text = Block::Text {
            text: summary_text(c),
        };
        match out.first_mut() {
            Some(first) if first.role == Role::User => first.blocks.insert(0, text),
            _ => out.insert(0, Message::new(Role::User, vec![text])),
        }
    }
    out
}

/// What the model is sent: the latest summary and what follows it.
pub fn view(history: &[Message], f: &Folded<'_>) -> Vec<Message> {
    render(history, f, f.start, history.len())
}

/// The length of `value`'s JSON, counted as it is written (nothing is kept).
pub(crate) fn json_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_or(0, |()| count.0)
}

/// Estimated tokens of messages as sent: a token per four characters of their content's JSON
/// (what every provider's tokenizer is near for English and JSON; the provider's own count of
/// the previous round corrects it, [`input_estimate`]).
pub fn estimate(messages: &[Message]) -> u64 {
    messages
        .iter()
        .filter(|m| m.compaction().is_none())
        .map(|m| json_len(&m.blocks) as u64 / 4 + 4)
        .sum()
}

/// The next round's input in tokens: the last round's as the provider counted it, plus the
/// estimate of what was added since; before any round, `overhead` (the system prompt and tool
/// definitions) plus the estimate of the view.
pub fn input_estimate(
    history: &[Message],
    f: &Folded<'_>,
    used: Option<&ContextUse>,
    overhead: u64,
) -> u64 {
    match used {
        Some(u)
            if (u.history_len as usize) <= history.len() && u.history_len as usize >= f.start =>
        {
            u.input_tokens + estimate(&history[u.history_len as usize..])
        }
        _ => overhead + estimate(&view(history, f)),
    }
}

/// Whether the next round's input (`input`) passes the policy's threshold.
pub fn due(policy: &ContextPolicy, input: u64) -> bool {
    policy.threshold().is_some_and(|t| input > t)
}

/// A compaction to make.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// How.
    pub strategy: Strategy,
    /// Why.
    pub reason: CompactionReason,
    /// The first position covered (the current summary's start).
    pub from: usize,
    /// The position covered up to.
    pub to: usize,
    /// The first and last stored turn covered.
    pub turns: [u64; 2],
    /// The estimated input before it.
    pub tokens_before: u64,
}

/// Why no compaction could be planned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Skip {
    /// Every turn before the current one is already compacted or kept.
    #[error(
        "nothing to compact: the turns before the current one are already compacted or among the kept ones ({keep})"
    )]
    NothingBefore {
        /// The `keep_recent` setting, as people read it.
        keep: String,
    },
    /// The current turn alone is too big, and its tool results are already cleared.
    #[error(
        "nothing left to compact: the current turn alone does not fit and its older tool results are already cleared"
    )]
    CurrentTurnTooBig,
}

/// The history positions of turn inputs (user messages) in `from..to`.
fn turn_starts(history: &[Message], from: usize, to: usize) -> Vec<usize> {
    (from..to.min(history.len()))
        .filter(|&i| history[i].role == Role::User)
        .collect()
}

/// The stored turn number (from 1) of the turn starting at input `i`.
fn turn_number(history: &[Message], i: usize) -> u64 {
    history[..=i.min(history.len().saturating_sub(1))]
        .iter()
        .filter(|m| m.role == Role::User)
        .count() as u64
}

/// Where a compaction of `history` ends: the start of a turn after `f.start`, no later than
/// `limit` (the current turn's input, or the history's end between turns), keeping `keep`.
pub fn cut(history: &[Message], f: &Folded<'_>, limit: usize, keep: KeepRecent) -> Option<usize> {
    let limit = limit.min(history.len());
    let starts = turn_starts(history, f.start, limit);
    let to = match keep {
        KeepRecent::Turns(n) => {
            let n = n as usize;
            if n == 0 {
                Some(limit)
            } else {
                starts.len().checked_sub(n).map(|k| starts[k])
            }
        }
        KeepRecent::Tokens(n) => std::iter::once(limit)
            .chain(starts.iter().rev().copied())
            .find(|&s| estimate(&history[s..limit]) >= u64::from(n)),
    }?;
    // A summary covers whole turns: past the start, and starting a turn (or the current one).
    (to > f.start && (to == limit || history[to].role == Role::User)).then_some(to)
}

/// The compaction the policy asks for now, with `limit` the current turn's input position (or
/// the history's end between turns).
pub fn plan(
    history: &[Message],
    policy: &ContextPolicy,
    limit: usize,
    reason: CompactionReason,
    tokens_before: u64,
    keep: KeepRecent,
) -> Result<Plan, Skip> {
    let f = fold(history);
    let strategy = match policy.strategy {
        Strategy::Native => Strategy::Summarize,
        s => s,
    };
    let to = cut(history, &f, limit, keep).ok_or_else(|| Skip::NothingBefore {
        keep: keep.to_string(),
    })?;
    if strategy == Strategy::ClearToolResults && clearable(history, &f, to) == 0 {
        return Err(Skip::NothingBefore {
            keep: keep.to_string(),
        });
    }
    let first = turn_starts(history, f.start, to)
        .first()
        .map_or(1, |&i| turn_number(history, i));
    let last = turn_starts(history, f.start, to)
        .last()
        .map_or(first, |&i| turn_number(history, i));
    Ok(Plan {
        strategy,
        reason,
        from: f.start,
        to,
        turns: [first, last],
        tokens_before,
    })
}

/// The compaction that answers a provider's "input too long": everything before the current
/// turn summarised (or cleared); failing that, the current turn's tool results before its last
/// round cleared.
pub fn plan_overflow(
    history: &[Message],
    policy: &ContextPolicy,
    limit: usize,
    tokens_before: u64,
) -> Result<Plan, Skip> {
    let reason = CompactionReason::Overflow;
    if let Ok(p) = plan(
        history,
        policy,
        limit,
        reason,
        tokens_before,
        KeepRecent::Turns(0),
    ) {
        return Ok(p);
    }
    let f = fold(history);
    let last_round = history
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .filter(|&a| a >= limit)
        .ok_or(Skip::CurrentTurnTooBig)?;
    if clearable(history, &f, last_round) == 0 {
        return Err(Skip::CurrentTurnTooBig);
    }
    let turn = turn_number(history, limit.min(history.len().saturating_sub(1)));
    Ok(Plan {
        strategy: Strategy::ClearToolResults,
        reason,
        from: f.start,
        to: last_round,
        turns: [turn, turn],
        tokens_before,
    })
}

/// Tool results in view before `to` that are not stubs yet.
pub fn clearable(history: &[Message], f: &Folded<'_>, to: usize) -> u64 {
    let from = f.start.max(f.cleared_before);
    if to <= from {
        return 0;
    }
    history[from..to.min(history.len())]
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.tool_result_ids().count() as u64)
        .sum()
}

/// The input of the summarising call for `plan`: the view of what it covers (with the previous
/// summary at its top), and the instruction.
pub fn summary_input(history: &[Message], plan: &Plan) -> Vec<Message> {
    let f = fold(history);
    let mut input = render(history, &f, plan.from, plan.to);
    input.push(Message::text(Role::User, SUMMARY_ASK));
    input
}

/// The stored record of `plan`, once made: `summary` is the summary's text (`summarize`).
pub fn record(
    history: &[Message],
    plan: &Plan,
    summary: Option<(String, String)>,
    overhead: u64,
    at_version: u64,
) -> Compaction {
    let f = fold(history);
    let cleared = match plan.strategy {
        Strategy::ClearToolResults => clearable(history, &f, plan.to),
        _ => 0,
    };
    let (summary, model) = summary.unzip();
    let mut c = Compaction {
        strategy: plan.strategy,
        reason: plan.reason,
        from: plan.from as u64,
        to: plan.to as u64,
        turns: plan.turns,
        summary,
        native: None,
        model,
        tokens_before: plan.tokens_before,
        tokens_after: 0,
        cleared,
        at_version,
    };
    // The view once `c` is stored: from its `to` (a summary) or with its results stubbed.
    let mut after = f;
    match c.strategy {
        Strategy::ClearToolResults => after.cleared_before = after.cleared_before.max(plan.to),
        _ => {
            after.summary = Some(&c);
            after.start = plan.to;
        }
    }
    let tokens_after = overhead + estimate(&render(history, &after, after.start, history.len()));
    c.tokens_after = tokens_after;
    c
}

/// The history message that records `c`.
pub fn message(c: Compaction) -> Message {
    Message::new(Role::System, vec![Block::Compaction(c)])
}

#[cfg(test)]
mod tests;
