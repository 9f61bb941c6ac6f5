//! The context window in a turn: before each model round, whether the input would pass the
//! policy's threshold and what to compact first ([`Engine::next_round`]); the compaction's
//! commit once the summary is written ([`Engine::on_compacted`]); and a round the provider
//! refused as too long — compacted and retried once ([`Engine::on_overflow`]).
//!
//! A compaction is one commit: the record (a `system` message holding the
//! [`ninetrix_proto::context::Compaction`]) appended with whatever the turn had not stored yet,
//! and the `compacted` event riding on it. A crash before that commit leaves the history as it
//! was — the restarted runner decides again from it, and writes the summary again; a crash
//! after it finds the record and never summarises those turns twice (docs/durability.md, "Where
//! a turn writes").

use ninetrix_proto::api::Control;
use ninetrix_proto::context::{CompactionReason, ContextUse, Strategy};
use ninetrix_proto::events::{Compacted as CompactedEvent, CompactionSkipped, TraceEvent};

use super::{Compacted, Effect, Engine, event, in_turn};
use crate::context::{self, Plan};

impl Engine {
    /// Sets the estimate of what every round sends besides the history (the system prompt and
    /// the tool definitions), in tokens.
    pub fn set_overhead(&mut self, tokens: u64) {
        self.overhead = tokens;
    }

    /// Where a compaction may reach: the current turn's input, or the end between turns.
    fn limit(&self) -> usize {
        if in_turn(self.state.status) {
            (self.state.turn_start_history_len as usize)
                .saturating_sub(1)
                .min(self.history.len())
        } else {
            self.history.len()
        }
    }

    /// The estimated input of the next round, in tokens.
    fn input_estimate(&self) -> u64 {
        let f = context::fold(&self.history);
        context::input_estimate(
            &self.history,
            &f,
            self.state.context.as_ref(),
            self.overhead,
        )
    }

    /// The next model round: a compaction first when the input would pass the threshold and
    /// something can be compacted, else the call.
    pub(super) fn next_round(&mut self) -> Vec<Effect> {
        let input = self.input_estimate();
        let policy = &self.cfg.context;
        if !context::due(policy, input) {
            return vec![Effect::CallLlm];
        }
        let reason = CompactionReason::Threshold;
        match context::plan(
            &self.history,
            policy,
            self.limit(),
            reason,
            input,
            policy.keep_recent,
        ) {
            Ok(plan) => self.compact(plan),
            Err(skip) => {
                // Said once per turn: the rounds after it go on (a refusal compacts harder).
                let mut out = Vec::new();
                if self.skip_said != self.state.turn_seq {
                    self.skip_said = self.state.turn_seq;
                    out.push(event(TraceEvent::CompactionSkipped(CompactionSkipped {
                        reason,
                        why: skip.to_string(),
                    })));
                }
                out.push(Effect::CallLlm);
                out
            }
        }
    }

    /// Asks the driver to carry out `plan`.
    fn compact(&mut self, plan: Plan) -> Vec<Effect> {
        let input = (plan.strategy == Strategy::Summarize)
            .then(|| context::summary_input(&self.history, &plan));
        self.compacting = Some(plan.clone());
        vec![Effect::Compact { plan, input }]
    }

    /// The record of a carried-out compaction joins the history in one commit (with the
    /// `compacted` event); then, in a turn, the round is called.
    pub(super) fn on_compacted(&mut self, done: Compacted) -> Vec<Effect> {
        let Some(mut plan) = self.compacting.take() else {
            return self.compacted_then(Vec::new(), false);
        };
        let mut out = Vec::new();
        let mut summary = None;
        let mut cost = 0.0;
        match done.summary {
            Some(Ok(s)) => {
                self.state.usage.input_tokens += s.usage.input_tokens;
                self.state.usage.output_tokens += s.usage.output_tokens;
                self.state.usage.cost_usd += s.usage.cost_usd;
                cost = s.usage.cost_usd;
                summary = Some((s.text, s.model));
            }
            Some(Err(why)) => {
                // No summary: clear the same turns' tool results instead, if any are left.
                let f = context::fold(&self.history);
                let fallback = context::clearable(&self.history, &f, plan.to) > 0;
                out.push(event(TraceEvent::CompactionSkipped(CompactionSkipped {
                    reason: plan.reason,
                    why: format!(
                        "the summary could not be written ({why}){}",
                        if fallback {
                            "; their tool results were cleared instead"
                        } else {
                            ""
                        }
                    ),
                })));
                if !fallback {
                    return self.compacted_then(out, false);
                }
                plan.strategy = Strategy::ClearToolResults;
            }
            None if plan.strategy == Strategy::Summarize => {
                return self.compacted_then(out, false);
            }
            None => {}
        }
        let record = context::record(
            &self.history,
            &plan,
            summary,
            self.overhead,
            done.at_version,
        );
        // A compaction that would not make the input smaller (a summary longer than the few
        // turns it covers) is not stored: said, and the round goes on as it was.
        let now = self.overhead
            + context::estimate(&context::view(&self.history, &context::fold(&self.history)));
        if record.tokens_after >= now {
            out.push(event(TraceEvent::CompactionSkipped(CompactionSkipped {
                reason: record.reason,
                why: format!(
                    "it would not make the input smaller ({} tokens now, {} after)",
                    now, record.tokens_after
                ),
            })));
            return self.compacted_then(out, false);
        }
        let compacted = CompactedEvent {
            strategy: record.strategy,
            reason: record.reason,
            from: record.from,
            to: record.to,
            turns: record.turns,
            tokens_before: record.tokens_before,
            tokens_after: record.tokens_after,
            cleared: record.cleared,
            model: record.model.clone(),
            cost_usd: cost,
            summary_chars: record
                .summary
                .as_ref()
                .map_or(0, |s| s.chars().count() as u64),
        };
        let tokens_after = record.tokens_after;
        // At a turn's start, before its input is stored, the record goes before the input:
        // outside the turn, so a repair that cuts the turn back to its input keeps it.
        let anchor = self.state.turn_start_history_len as usize;
        let input_unstored = in_turn(self.state.status)
            && anchor >= 1
            && self.persisted < anchor
            && anchor == self.history.len()
            && self.history[anchor - 1].role == ninetrix_proto::Role::User;
        if input_unstored {
            let mut record = record;
            if record.to as usize >= anchor - 1 {
                record.to += 1;
            }
            self.history.insert(anchor - 1, context::message(record));
            self.state.turn_start_history_len += 1;
        } else {
            self.history.push(context::message(record));
        }
        let compactions = context::fold(&self.history).count;
        self.state.context = Some(ContextUse {
            input_tokens: tokens_after,
            history_len: self.history.len() as u64,
            window: self.cfg.context.window.map(u64::from),
            compactions,
        });
        out.push(self.commit());
        out.push(event(TraceEvent::Compacted(compacted)));
        if in_turn(self.state.status)
            && let Some(stop) = self.over_budget()
        {
            out.extend(stop);
            return out;
        }
        self.compacted_then(out, true)
    }

    /// What follows a compaction (made or not, `committed` or not): in a turn, its round;
    /// between turns (`ninetrix compact`), the commit that moves the inbox cursor past the
    /// request, if the compaction's did not.
    fn compacted_then(&mut self, mut out: Vec<Effect>, committed: bool) -> Vec<Effect> {
        if in_turn(self.state.status) {
            out.push(Effect::CallLlm);
        } else if !committed {
            out.insert(0, self.commit());
        }
        out
    }

    /// An instruction taken from the inbox between turns (`seq`): carried out, and the cursor
    /// moved past it in the same commit.
    pub(super) fn on_control(
        &mut self,
        seq: u64,
        control: Control,
        by: String,
        to_turn: Option<u64>,
    ) -> Vec<Effect> {
        if control == Control::Cancel {
            // Taken between turns: the turn it was sent for had ended.
            return self.cancel_missed(seq, by);
        }
        self.state.take(seq);
        match control {
            Control::Cancel => Vec::new(),
            Control::Rewind => self.ask_rewind(to_turn),
            Control::Compact => {
                let input = self.input_estimate();
                let policy = &self.cfg.context;
                let reason = CompactionReason::Requested;
                let keep = policy.keep_recent;
                match context::plan(&self.history, policy, self.limit(), reason, input, keep) {
                    Ok(plan) => self.compact(plan),
                    Err(skip) => vec![
                        self.commit(),
                        event(TraceEvent::CompactionSkipped(CompactionSkipped {
                            reason,
                            why: skip.to_string(),
                        })),
                    ],
                }
            }
        }
    }

    /// The provider refused the round's input as too long: compact as far as the current turn
    /// and call again — once; a second refusal ends the turn saying what to set.
    pub(super) fn on_overflow(&mut self, why: &str) -> Vec<Effect> {
        let help = "set runtime.context.window to the model's real window so ninetrix compacts \
                    earlier, keep fewer recent turns (runtime.context.keep_recent), or use a \
                    model with a larger window";
        if self.overflowed {
            let reply = format!(
                "The conversation does not fit the model's context window even after \
                 compacting it ({why}): {help}."
            );
            return self.stop_turn(&reply, false, "context_too_long");
        }
        self.overflowed = true;
        let input = self.input_estimate();
        match context::plan_overflow(&self.history, &self.cfg.context, self.limit(), input) {
            Ok(plan) => self.compact(plan),
            Err(skip) => {
                let reply = format!(
                    "The model refused the input as longer than its context window ({why}), \
                     and it cannot be compacted further ({skip}): {help}."
                );
                self.stop_turn(&reply, false, "context_too_long")
            }
        }
    }

    /// A round's input as the provider counted it: the context use for the next estimate.
    pub(super) fn record_use(&mut self, input_tokens: u64) {
        self.overflowed = false;
        let compactions = self.state.context.as_ref().map_or(0, |c| c.compactions);
        self.state.context = Some(ContextUse {
            input_tokens,
            history_len: self.history.len() as u64,
            window: self.cfg.context.window.map(u64::from),
            compactions,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use ninetrix_agentfile::context::{ContextPolicy, KeepRecent};
    use ninetrix_proto::api::{ApprovalStatus, ToolCallStatus};
    use ninetrix_proto::context::{CompactionReason, Strategy};

    /// A window of 2,000 tokens, compacting at half, keeping the last turn.
    fn small_window(strategy: Strategy) -> EngineConfig {
        EngineConfig {
            context: ContextPolicy {
                window: Some(2_000),
                window_source: None,
                compact_at: 0.5,
                keep_recent: KeepRecent::Turns(1),
                strategy,
                model: None,
            },
            budget: None,
            ..config()
        }
    }

    /// An answer whose round sent `input` tokens.
    fn answer_after(input: u64) -> Input {
        Input::Llm(LlmTurn {
            message: Message::text(Role::Assistant, "a".repeat(400)),
            usage: CallUsage {
                input_tokens: input,
                output_tokens: 100,
                cost_usd: 0.0,
            },
            model: "m".into(),
            stop_reason: "end_turn".into(),
            latency_ms: 1,
        })
    }

    fn summary(text: &str) -> Input {
        Input::Compacted(Compacted {
            at_version: 9,
            summary: Some(Ok(Summary {
                text: text.into(),
                model: "m".into(),
                usage: CallUsage {
                    input_tokens: 700,
                    output_tokens: 50,
                    cost_usd: 0.001,
                },
            })),
        })
    }

    /// Turns until one compacts first; the effects of the message that started it.
    fn until_due(e: &mut Engine) -> Vec<Effect> {
        for seq in 1..20 {
            let out = e.apply(message(seq));
            if matches!(out.last(), Some(Effect::Compact { .. })) {
                return out;
            }
            assert_eq!(kinds(&out).last().unwrap(), "call_llm");
            e.apply(answer_after(300 * seq));
        }
        panic!("never compacted");
    }

    #[test]
    fn a_round_past_the_threshold_is_summarized_first_in_one_commit() {
        let mut e = Engine::new(small_window(Strategy::Summarize));
        let out = until_due(&mut e);
        let Some(Effect::Compact { plan, input }) = out.last() else {
            unreachable!()
        };
        assert_eq!(plan.reason, CompactionReason::Threshold);
        let input = input.as_ref().expect("a summary is asked for");
        assert!(input.iter().all(|m| m.compaction().is_none()));
        let stored = e.history().len();
        let out = e.apply(summary("they said go"));
        assert_eq!(kinds(&out), ["commit", "event:compacted", "call_llm"]);
        let plan = commits(&out)[0];
        let record = plan.append.iter().find_map(Message::compaction).unwrap();
        assert_eq!(
            (record.summary.as_deref(), record.at_version),
            (Some("they said go"), 9)
        );
        assert!(record.tokens_after < record.tokens_before);
        let roles: Vec<Role> = plan.append.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::System, Role::User],
            "the record goes before the turn's input, which rides on its commit"
        );
        assert_eq!(
            e.state().turn_start_history_len as usize,
            e.history().len(),
            "the turn starts after its input, the record before it"
        );
        assert_eq!(e.history().len(), stored + 1, "nothing is removed");
        assert!(e.state().usage.cost_usd > 0.0, "the summary is spent");
        // The next round sees the summary and the kept turns only.
        let f = crate::context::fold(e.history());
        let view = crate::context::view(e.history(), &f);
        assert!(view[0].text_content().contains("they said go"));
        assert!(view.len() < e.history().len() / 2, "{}", view.len());
        let out = e.apply(answer_after(500));
        assert!(kinds(&out).contains(&"finished".to_string()));
        assert_eq!(
            e.state().context.as_ref().map(|c| c.compactions),
            Some(1),
            "the count survives the round"
        );
    }

    #[test]
    fn a_crash_before_the_commit_plans_the_same_compaction_and_after_it_none() {
        let mut e = Engine::new(small_window(Strategy::Summarize));
        let out = until_due(&mut e);
        let Some(Effect::Compact { plan, .. }) = out.last().cloned() else {
            unreachable!()
        };
        // Before: what was stored is the last finished turn; the input is in the inbox again.
        let before = stored(&e);
        let seq = before.state.inbox_cursor + 1;
        let mut second = second_boot(small_window(Strategy::Summarize));
        let restored_history: Vec<Message> = before.history[..before.history.len() - 1].to_vec();
        second.apply(Input::Restored(Some(Restored {
            history: restored_history,
            state: CheckpointState {
                status: ThreadStatus::Idle,
                inbox_cursor: seq - 1,
                ..before.state.clone()
            },
            ..before
        })));
        let again = second.apply(message(seq));
        let Some(Effect::Compact {
            plan: replanned, ..
        }) = again.last()
        else {
            panic!("{:?}", kinds(&again))
        };
        assert_eq!(
            (replanned.from, replanned.to, replanned.turns),
            (plan.from, plan.to, plan.turns)
        );
        // After: the record is stored; a restarted runner goes straight to the round.
        let out = e.apply(summary("s"));
        assert!(kinds(&out).contains(&"commit".to_string()));
        let mut third = Engine::new(EngineConfig {
            epoch: 3,
            ..small_window(Strategy::Summarize)
        });
        let out = third.apply(Input::Restored(Some(stored(&e))));
        assert_eq!(kinds(&out).last().map(String::as_str), Some("call_llm"));
    }

    #[test]
    fn a_context_too_long_answer_compacts_and_retries_once() {
        let mut e = Engine::new(EngineConfig {
            context: ContextPolicy::default(),
            ..small_window(Strategy::Summarize)
        });
        for seq in 1..4 {
            e.apply(message(seq));
            e.apply(answer_after(100));
        }
        let out = e.apply(message(4));
        assert_eq!(
            kinds(&out).last().unwrap(),
            "call_llm",
            "no window: no threshold"
        );
        let out = e.apply(Input::ContextTooLong("prompt is too long".into()));
        let Some(Effect::Compact { plan, .. }) = out.last() else {
            panic!("{:?}", kinds(&out))
        };
        assert_eq!(
            (plan.reason, plan.to),
            (CompactionReason::Overflow, 6),
            "every turn before the current one"
        );
        let out = e.apply(summary("short"));
        assert_eq!(kinds(&out).last().unwrap(), "call_llm");
        let out = e.apply(Input::ContextTooLong("prompt is too long".into()));
        let Some(Effect::TurnFinished { ok, reply, .. }) = out.last() else {
            panic!("{:?}", kinds(&out))
        };
        assert!(!ok && reply.contains("runtime.context.window"), "{reply}");
        assert!(crate::history::validate(e.history()).is_ok());
        model_never_reads(&e, "context window");
    }

    #[test]
    fn a_summary_that_cannot_be_written_clears_tool_results_instead() {
        let mut e = Engine::new(small_window(Strategy::Summarize));
        e.apply(message(1));
        e.apply(llm(vec![read_call("r1")], 0.0));
        e.apply(Input::Tool {
            call_id: "r1".into(),
            content: "a long file\n".repeat(200),
            is_error: false,
        });
        e.apply(answer_after(600));
        e.apply(message(2));
        e.apply(answer_after(900));
        let out = e.apply(message(3));
        assert!(
            matches!(out.last(), Some(Effect::Compact { .. })),
            "{:?}",
            kinds(&out)
        );
        let out = e.apply(Input::Compacted(Compacted {
            at_version: 4,
            summary: Some(Err("HTTP 500".into())),
        }));
        assert_eq!(
            kinds(&out),
            [
                "event:compaction_skipped",
                "commit",
                "event:compacted",
                "call_llm"
            ]
        );
        let record = commits(&out)[0]
            .append
            .iter()
            .find_map(Message::compaction)
            .unwrap();
        assert_eq!(
            (record.strategy, record.cleared),
            (Strategy::ClearToolResults, 1)
        );
    }

    /// A compacted thread (one summary stored) whose next turn is in progress after it.
    fn compacted(cfg: EngineConfig) -> Engine {
        let mut e = Engine::new(cfg);
        until_due(&mut e);
        let out = e.apply(summary("earlier turns"));
        assert_eq!(kinds(&out).last().map(String::as_str), Some("call_llm"));
        assert_eq!(crate::context::fold(e.history()).count, 1);
        e
    }

    #[test]
    fn approvals_wait_and_resume_on_a_compacted_thread() {
        let cfg = EngineConfig {
            approval: gated().approval,
            tools: gated().tools,
            ..small_window(Strategy::Summarize)
        };
        let mut first = compacted(cfg.clone());
        let out = first.apply(llm(vec![append_call("w")], 0.0));
        let asks = ask_of(&out);
        assert_eq!(asks.len(), 1, "{:?}", kinds(&out));
        let mut restored = stored(&first);
        restored.approvals = vec![settled(&asks[0], ApprovalStatus::Pending)];
        let mut second = second_boot(cfg.clone());
        let out = second.apply(Input::Restored(Some(restored.clone())));
        assert_eq!(
            kinds(&out),
            ["event:resume", "event:turn_resumed", "await:1"],
            "the request survives: the compaction never covers the turn in progress"
        );
        restored.approvals = vec![settled(&asks[0], ApprovalStatus::Approved)];
        let mut third = Engine::new(EngineConfig { epoch: 3, ..cfg });
        let out = third.apply(Input::Restored(Some(restored)));
        let write = run_of(&out);
        assert_eq!(write.name, "file_write");
        third.apply(result(&write.call_id));
        assert!(crate::history::validate(third.history()).is_ok());
    }

    #[test]
    fn a_crash_mid_turn_on_a_compacted_thread_is_repaired_back_to_its_input() {
        let cfg = small_window(Strategy::Summarize);
        let mut first = compacted(cfg.clone());
        let out = first.apply(llm(vec![append_call("w")], 0.0));
        let write = run_of(&out);
        // Crash after the write's intent, before its outcome: the turn is cut back to its input
        // and re-run; the summary before it stays.
        let mut restored = stored(&first);
        restored.ledger = vec![record(&write, ToolCallStatus::Intent, 1)];
        let mut second = second_boot(cfg);
        let out = second.apply(Input::Restored(Some(restored)));
        assert!(
            kinds(&out).contains(&"event:repair".to_string()),
            "{:?}",
            kinds(&out)
        );
        assert_eq!(
            crate::context::fold(second.history()).count,
            1,
            "the compaction is before the turn's input: kept"
        );
        let view = crate::context::view(second.history(), &crate::context::fold(second.history()));
        assert!(crate::history::validate(&view).is_ok());
        assert!(view[0].text_content().contains("earlier turns"));
    }

    #[test]
    fn a_compaction_mid_turn_that_a_repair_cuts_is_planned_again() {
        let cfg = small_window(Strategy::Summarize);
        let mut e = Engine::new(cfg.clone());
        // Turns that each add a read's result; the compaction comes due between two rounds of
        // a turn.
        let mut seq = 0;
        let plan = loop {
            seq += 1;
            let out = e.apply(message(seq));
            if let Some(Effect::Compact { plan, .. }) = out.last() {
                break plan.clone();
            }
            let out = e.apply(Input::Llm(LlmTurn {
                usage: CallUsage {
                    input_tokens: 250 * seq,
                    ..Default::default()
                },
                ..match llm(vec![append_call(&format!("w{seq}"))], 0.0) {
                    Input::Llm(t) => t,
                    _ => unreachable!(),
                }
            }));
            let write = run_of(&out);
            let out = e.apply(result(&write.call_id));
            if let Some(Effect::Compact { plan, .. }) = out.last() {
                // Mid-turn: stored with the write's outcome; a crash after it cuts nothing.
                assert!(plan.to < e.state().turn_start_history_len as usize);
                break plan.clone();
            }
            e.apply(answer_after(250 * seq));
        };
        assert!(plan.to > plan.from);
        let out = e.apply(summary("s"));
        assert!(kinds(&out).contains(&"commit".to_string()));
        assert!(
            crate::history::validate(&crate::context::view(
                e.history(),
                &crate::context::fold(e.history())
            ))
            .is_ok()
        );
    }

    #[test]
    fn a_requested_compaction_between_turns_moves_the_cursor_in_its_commit() {
        let mut e = Engine::new(EngineConfig {
            context: ContextPolicy {
                window: None,
                ..small_window(Strategy::Summarize).context
            },
            ..small_window(Strategy::Summarize)
        });
        for seq in 1..=4 {
            e.apply(message(seq));
            e.apply(answer_after(100));
        }
        let out = e.apply(Input::Control {
            seq: 5,
            control: ninetrix_proto::api::Control::Compact,
            by: "ana".into(),
            to_turn: None,
        });
        let Some(Effect::Compact { plan, .. }) = out.last() else {
            panic!("{:?}", kinds(&out))
        };
        assert_eq!(
            (plan.reason, plan.turns),
            (CompactionReason::Requested, [1, 3])
        );
        let out = e.apply(summary("s"));
        assert_eq!(
            kinds(&out),
            ["commit", "event:compacted"],
            "no round between turns"
        );
        assert_eq!(commits(&out)[0].state.inbox_cursor, 5);
        assert!(e.idle());
        let out = e.apply(Input::Control {
            seq: 6,
            control: ninetrix_proto::api::Control::Compact,
            by: "ana".into(),
            to_turn: None,
        });
        assert_eq!(kinds(&out), ["commit", "event:compaction_skipped"]);
        assert_eq!(commits(&out)[0].state.inbox_cursor, 6);
    }

    #[test]
    fn a_handoff_on_a_compacted_thread_is_made_and_answered_once() {
        let cfg = EngineConfig {
            tools: vec![
                ToolSpec::builtin(tools::builtin("file_read").unwrap()),
                ToolSpec::handoff("b", None),
            ],
            ..small_window(Strategy::Summarize)
        };
        let mut e = compacted(cfg.clone());
        let ask = Block::ToolCall {
            id: "h1".into(),
            name: "ask_b".into(),
            args: serde_json::json!({"task": "look it up"}),
        };
        let out = e.apply(llm(vec![ask], 0.0));
        let Some(Effect::Delegate { calls, .. }) = out.last() else {
            panic!("{:?}", kinds(&out))
        };
        assert_eq!(calls.len(), 1);
        // A restart while it waits hands the same call over again (the ledger keeps it once).
        let mut restored = stored(&e);
        restored.ledger = vec![record(&calls[0].call, ToolCallStatus::Intent, 1)];
        let mut second = second_boot(cfg);
        let again = second.apply(Input::Restored(Some(restored)));
        let Some(Effect::Delegate { calls: again, .. }) = again.last() else {
            panic!("{:?}", kinds(&again))
        };
        assert_eq!(again[0].call.key, calls[0].call.key, "the same handoff");
        let out = second.apply(Input::Delegated(vec![Delegated {
            call_id: again[0].call.call_id.clone(),
            content: "found it".into(),
            is_error: false,
            cost_usd: 0.0,
        }]));
        assert_eq!(kinds(&out).last().map(String::as_str), Some("call_llm"));
        let view = crate::context::view(second.history(), &crate::context::fold(second.history()));
        assert!(crate::history::validate(&view).is_ok());
        assert!(view[0].text_content().contains("earlier turns"));
    }

    #[test]
    fn a_summary_longer_than_what_it_covers_is_not_stored() {
        let mut e = Engine::new(small_window(Strategy::Summarize));
        for seq in 1..=3 {
            e.apply(message(seq));
            e.apply(answer("hi"));
        }
        e.apply(Input::Control {
            seq: 4,
            control: ninetrix_proto::api::Control::Compact,
            by: "ana".into(),
            to_turn: None,
        });
        let out = e.apply(summary(
            &"a summary far longer than one short turn ".repeat(20),
        ));
        assert_eq!(kinds(&out), ["commit", "event:compaction_skipped"]);
        assert!(commits(&out)[0].append.is_empty(), "no record stored");
        assert_eq!(
            commits(&out)[0].state.inbox_cursor,
            4,
            "the request is done"
        );
        assert_eq!(crate::context::fold(e.history()).count, 0);
    }

    #[test]
    fn an_input_refused_after_its_turns_compaction_is_not_kept_for_later_turns() {
        let mut e = Engine::new(small_window(Strategy::Summarize));
        until_due(&mut e);
        let out = e.apply(summary("earlier turns"));
        let stored = commits(&out)[0].append.len();
        assert_eq!(stored, 2, "the record and the input");
        let out = e.apply(Input::LlmFailed("HTTP 400: bad request".into()));
        let plan = commits(&out)[0];
        let kept = e.history().len();
        assert_eq!(
            plan.truncate_to,
            Some(kept as u64),
            "the stored input is cut again"
        );
        assert!(
            e.history()[kept - 1].compaction().is_some(),
            "the record stays"
        );
        let view = crate::context::view(e.history(), &crate::context::fold(e.history()));
        assert!(crate::history::validate(&view).is_ok());
        assert_eq!(
            view.last().map(|m| m.role),
            Some(Role::Assistant),
            "the refused input is not sent again: the view ends with the last answer"
        );
        e.apply(message(99));
        assert!(crate::history::validate(e.history()).is_ok());
    }
}
