//! History rules and repair (docs/design.md §6.4), as pure functions.
//!
//! A history is valid when every assistant message's tool calls are answered, in order, by the
//! tool-result messages right after it, and no tool result answers a call that is not in the
//! assistant message right before it. Both providers reject anything else. `repair` turns a
//! history left by a crash into a valid one: it never invents a result, it keeps the turn's
//! input, and repairing twice changes nothing.

use ninetrix_agentfile::ResumeMode;
use ninetrix_proto::{Block, Message, Role};

/// A broken rule, with the index of the offending message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// An assistant message's calls are not all answered right after it.
    #[error("message {index}: tool call(s) {missing:?} have no result right after the call")]
    UnansweredCalls {
        /// The assistant message.
        index: usize,
        /// The call IDs without a result.
        missing: Vec<String>,
    },
    /// A result that answers no call of the preceding assistant message (or is out of order).
    #[error(
        "message {index}: tool result for `{call_id}` does not answer the preceding assistant message's next call"
    )]
    OrphanResult {
        /// The tool message.
        index: usize,
        /// The call ID it claims to answer.
        call_id: String,
    },
    /// A tool message with no results, or a result block outside a tool message.
    #[error("message {index}: malformed tool message")]
    Malformed {
        /// The message.
        index: usize,
    },
}

fn calls(m: &Message) -> Vec<&str> {
    if m.role == Role::Assistant {
        m.tool_call_ids().collect()
    } else {
        Vec::new()
    }
}

/// Checks the history against both providers' rules.
pub fn validate(history: &[Message]) -> Result<(), Violation> {
    let mut i = 0;
    while i < history.len() {
        let m = &history[i];
        match m.role {
            Role::Tool => {
                let call_id = m
                    .tool_result_ids()
                    .next()
                    .map(str::to_string)
                    .unwrap_or_default();
                return Err(if call_id.is_empty() {
                    Violation::Malformed { index: i }
                } else {
                    Violation::OrphanResult { index: i, call_id }
                });
            }
            Role::User | Role::System if m.tool_result_ids().next().is_some() => {
                return Err(Violation::Malformed { index: i });
            }
            Role::Assistant => {
                let pending = calls(m);
                let mut j = i + 1;
                let mut answered = 0;
                while answered < pending.len() && j < history.len() && history[j].role == Role::Tool
                {
                    let results: Vec<&str> = history[j].tool_result_ids().collect();
                    if results.is_empty() {
                        return Err(Violation::Malformed { index: j });
                    }
                    for r in results {
                        if pending.get(answered) != Some(&r) {
                            return Err(Violation::OrphanResult {
                                index: j,
                                call_id: r.to_string(),
                            });
                        }
                        answered += 1;
                    }
                    j += 1;
                }
                if answered < pending.len() {
                    return Err(Violation::UnansweredCalls {
                        index: i,
                        missing: pending[answered..].iter().map(|s| s.to_string()).collect(),
                    });
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// What repair did.
#[derive(Clone, Debug, PartialEq)]
pub struct Repair {
    /// The repaired history.
    pub history: Vec<Message>,
    /// The first index where it differs from the original: store it as `truncate_to` and append
    /// `history[truncate_to..]`. `None` when nothing changed.
    pub truncate_to: Option<usize>,
    /// What was dropped, for the `repair` event.
    pub dropped: Vec<Dropped>,
    /// Calls of the last assistant message still to run (`resume: complete` only).
    pub pending_calls: Vec<String>,
}

/// One dropped message: the `repair` event's own type.
pub use ninetrix_proto::events::DroppedMessage as Dropped;

fn dropped(index: usize, m: &Message, reason: &'static str) -> Dropped {
    let mut call_ids: Vec<String> = m.tool_call_ids().map(str::to_string).collect();
    call_ids.extend(m.tool_result_ids().map(str::to_string));
    Dropped {
        index: index as u64,
        role: m.role,
        call_ids,
        reason: reason.to_string(),
    }
}

/// Repairs a history left by a crash. `anchor` is the turn's `turn_start_history_len`.
///
/// First, tool results that answer nothing are removed. Then, if the last assistant message with
/// tool calls is not fully answered: with `truncate`, the history is cut back to the anchor (the
/// turn's input stays) and the turn is re-run; with `complete`, the message and the results it
/// has are kept and the missing calls are returned as pending.
pub fn repair(history: &[Message], anchor: usize, mode: ResumeMode) -> Repair {
    let mut kept: Vec<(usize, Message)> = Vec::with_capacity(history.len());
    let mut out_dropped = Vec::new();
    // Pass 1: keep only results that answer the next unanswered call of the assistant message
    // they follow (in order).
    let mut pending: Vec<String> = Vec::new();
    for (i, m) in history.iter().enumerate() {
        match m.role {
            Role::Assistant => {
                pending = m.tool_call_ids().map(str::to_string).collect();
                pending.reverse();
                kept.push((i, m.clone()));
            }
            Role::Tool => {
                let ids: Vec<&str> = m.tool_result_ids().collect();
                // `pending` is reversed: the next call to answer is last.
                let ok = !ids.is_empty()
                    && ids.len() <= pending.len()
                    && ids
                        .iter()
                        .enumerate()
                        .all(|(k, id)| pending[pending.len() - 1 - k] == *id);
                if ok {
                    pending.truncate(pending.len() - ids.len());
                    kept.push((i, m.clone()));
                } else {
                    out_dropped.push(dropped(i, m, "tool result without a matching call"));
                }
            }
            _ => {
                pending.clear();
                kept.push((i, m.clone()));
            }
        }
    }
    // Pass 2: the last assistant message with calls, if unanswered.
    let mut pending_calls = Vec::new();
    if let Some(pos) = kept.iter().rposition(|(_, m)| !calls(m).is_empty()) {
        let wanted = calls(&kept[pos].1).len();
        let answered: usize = kept[pos + 1..]
            .iter()
            .take_while(|(_, m)| m.role == Role::Tool)
            .map(|(_, m)| m.tool_result_ids().count())
            .sum();
        if answered < wanted {
            match mode {
                ResumeMode::Truncate => {
                    // Cut at the anchor (or at the orphaned call if the anchor is wrongly past
                    // it), but never before the input that started the turn.
                    let input = kept[..pos]
                        .iter()
                        .rposition(|(_, m)| m.role == Role::User)
                        .map_or(0, |k| kept[k].0 + 1);
                    let cut_original = anchor.min(kept[pos].0).max(input);
                    let cut = kept
                        .iter()
                        .position(|(i, _)| *i >= cut_original)
                        .unwrap_or(kept.len());
                    for (i, m) in kept.drain(cut..) {
                        out_dropped.push(dropped(i, &m, "part of the interrupted turn"));
                    }
                }
                ResumeMode::Complete => {
                    // Results must directly follow the call: drop anything after them.
                    let end = pos
                        + 1
                        + kept[pos + 1..]
                            .iter()
                            .take_while(|(_, m)| m.role == Role::Tool)
                            .count();
                    for (i, m) in kept.drain(end..) {
                        out_dropped.push(dropped(i, &m, "after an unanswered tool call"));
                    }
                    pending_calls = calls(&kept[pos].1)[answered..]
                        .iter()
                        .map(|s| s.to_string())
                        .collect();
                }
            }
        }
    }
    out_dropped.sort_by_key(|d| d.index);
    let repaired: Vec<Message> = kept.into_iter().map(|(_, m)| m).collect();
    let truncate_to = first_difference(history, &repaired);
    Repair {
        history: repaired,
        truncate_to,
        dropped: out_dropped,
        pending_calls,
    }
}

fn first_difference(a: &[Message], b: &[Message]) -> Option<usize> {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    (common < a.len() || common < b.len()).then_some(common)
}

/// An error result for a call whose outcome cannot be known (docs/design.md §6.5).
pub fn outcome_unknown_text(tool: &str) -> String {
    format!(
        "The outcome of this `{tool}` call is unknown: the agent crashed after recording that it \
         was about to run and before recording its result. It may or may not have taken effect. \
         Verify the current state before retrying it."
    )
}

/// What the model is told about a `write` call whose answer was lost while this runner waited
/// for it (`why`: the server broke, the stream was cut, the time ran out).
pub fn outcome_lost_text(tool: &str, why: &str) -> String {
    format!(
        "The outcome of this `{tool}` call is unknown: {why}. It may or may not have taken \
         effect. Verify the current state before retrying it."
    )
}

/// A tool-result message.
pub fn tool_result(call_id: &str, content: String, is_error: bool) -> Message {
    Message::new(
        Role::Tool,
        vec![Block::ToolResult {
            call_id: call_id.to_string(),
            content,
            is_error,
        }],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::Block;
    use proptest::prelude::*;

    fn user(t: &str) -> Message {
        Message::text(Role::User, t)
    }

    fn assistant(calls: &[&str], thinking: bool) -> Message {
        let mut blocks = Vec::new();
        if thinking {
            blocks.push(Block::Thinking {
                text: "hmm".into(),
                signature: Some("sig".into()),
            });
        }
        blocks.push(Block::Text {
            text: "working".into(),
        });
        for c in calls {
            blocks.push(Block::ToolCall {
                id: (*c).into(),
                name: "file_write".into(),
                args: serde_json::json!({"path": c}),
            });
        }
        Message::new(Role::Assistant, blocks)
    }

    fn result(id: &str) -> Message {
        tool_result(id, "ok".into(), false)
    }

    #[test]
    fn a_crash_between_call_and_result_is_cut_back_to_the_input() {
        let h = vec![
            user("q1"),
            assistant(&[], false),
            user("q2"),
            assistant(&["a", "b"], true),
            result("a"),
        ];
        assert!(validate(&h).is_err());
        let r = repair(&h, 3, ResumeMode::Truncate);
        assert_eq!(r.history, h[..3].to_vec());
        assert_eq!(r.truncate_to, Some(3));
        assert_eq!(
            r.dropped.iter().map(|d| d.index).collect::<Vec<_>>(),
            [3, 4]
        );
        assert!(validate(&r.history).is_ok());
        let again = repair(&r.history, 3, ResumeMode::Truncate);
        assert_eq!((again.truncate_to, again.history), (None, r.history));
    }

    #[test]
    fn complete_keeps_the_call_and_reports_what_is_pending() {
        let h = vec![
            user("q"),
            assistant(&["a", "b", "c"], true),
            result("a"),
            user("junk"),
        ];
        let r = repair(&h, 1, ResumeMode::Complete);
        assert_eq!(r.history, h[..3].to_vec());
        assert_eq!(r.pending_calls, ["b", "c"]);
        assert_eq!(r.truncate_to, Some(3));
    }

    #[test]
    fn orphan_results_are_removed_everywhere() {
        let h = vec![
            user("q"),
            result("ghost"),
            assistant(&["a"], false),
            result("a"),
            result("a"),
            assistant(&[], false),
        ];
        let r = repair(&h, 1, ResumeMode::Truncate);
        assert_eq!(
            r.history,
            vec![h[0].clone(), h[2].clone(), h[3].clone(), h[5].clone()]
        );
        assert_eq!(r.truncate_to, Some(1));
        assert!(validate(&r.history).is_ok());
    }

    #[test]
    fn a_wrong_anchor_never_loses_the_input() {
        // Ninetrix's bug: an anchor of 0 would empty the history.
        let h = vec![
            user("q1"),
            assistant(&[], false),
            user("q2"),
            assistant(&["a"], false),
        ];
        let r = repair(&h, 0, ResumeMode::Truncate);
        assert_eq!(r.history, h[..3].to_vec());
    }

    /// A transcript as the engine writes it: turns of user input, rounds of calls and results,
    /// a final answer. Returns the messages and, per message, the anchor of its turn.
    fn transcript() -> impl Strategy<Value = (Vec<Message>, Vec<usize>)> {
        proptest::collection::vec(
            proptest::collection::vec((0usize..4, any::<bool>()), 0..4),
            1..5,
        )
        .prop_map(|turns| {
            let mut h = Vec::new();
            let mut anchors = Vec::new();
            let mut n = 0;
            for (t, rounds) in turns.into_iter().enumerate() {
                h.push(user(&format!("input {t}")));
                let anchor = h.len();
                anchors.push(anchor);
                for (calls, thinking) in rounds {
                    let ids: Vec<String> = (0..calls)
                        .map(|_| {
                            n += 1;
                            format!("c{n}")
                        })
                        .collect();
                    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                    h.push(assistant(&refs, thinking));
                    anchors.push(anchor);
                    for id in &ids {
                        h.push(result(id));
                        anchors.push(anchor);
                    }
                }
                h.push(assistant(&[], false));
                anchors.push(anchor);
            }
            (h, anchors)
        })
    }

    proptest! {
        #[test]
        fn repair_of_any_crash_point_is_valid_idempotent_and_keeps_the_input(
            (h, anchors) in transcript(),
            cut in any::<prop::sample::Index>(),
            orphan in proptest::option::of(any::<prop::sample::Index>()),
            complete in any::<bool>(),
        ) {
            prop_assert!(validate(&h).is_ok());
            let k = cut.index(h.len()) + 1; // crash after message k-1 was stored
            let mut crashed = h[..k].to_vec();
            let anchor = anchors[k - 1].min(crashed.len());
            if let Some(at) = orphan {
                let at = at.index(crashed.len()) + 1;
                crashed.insert(at.min(crashed.len()), result("ghost"));
            }
            let mode = if complete { ResumeMode::Complete } else { ResumeMode::Truncate };
            let r = repair(&crashed, anchor, mode);
            // Valid for both providers once pending calls are answered.
            let mut answered = r.history.clone();
            for id in &r.pending_calls {
                answered.push(result(id));
            }
            prop_assert!(validate(&answered).is_ok(), "{:?}", validate(&answered));
            prop_assert!(r.pending_calls.is_empty() || complete);
            // Idempotent.
            let again = repair(&r.history, anchor.min(r.history.len()), mode);
            prop_assert_eq!(again.truncate_to, None);
            prop_assert_eq!(&again.history, &r.history);
            // The truncation is a prefix edit.
            if let Some(t) = r.truncate_to {
                prop_assert_eq!(&r.history[..t.min(r.history.len())], &crashed[..t.min(r.history.len())]);
            }
            // The current turn's input survives.
            let input = crashed.iter().rev().find(|m| m.role == Role::User).unwrap();
            prop_assert!(r.history.iter().any(|m| m.id == input.id));
            // Thinking blocks of kept assistant messages are unchanged.
            for m in r.history.iter().filter(|m| m.role == Role::Assistant) {
                let original = crashed.iter().find(|o| o.id == m.id).unwrap();
                prop_assert_eq!(m, original);
            }
        }
    }
}
