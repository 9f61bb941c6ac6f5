//! A turn: its inputs (the inbox message that starts it, each model response, each tool result,
//! the collaborators' answers), the decision of its next step from the history (`advance`), and
//! its end (a final answer, or a stop with every unanswered call answered).

use ninetrix_proto::api::{CommitOutcome, HandoffOrigin, HandoffReply, ThreadStatus, Usage};
use ninetrix_proto::effects::Effect as EffectClass;
use ninetrix_proto::events::{
    BudgetExceeded, HandoffReceived, HandoffReplied, LlmCall, MaxTurnsReached, TraceEvent,
    TurnCompleted, TurnStarted, UnknownTool,
};
use ninetrix_proto::{Message, Role};

use super::{
    Delegated, Effect, Engine, LlmTurn, NextCall, event, failed_turn_cut, intent_of, preview,
};
use crate::history;
use crate::ledger::{Decision, Entry};

impl Engine {
    /// Takes an inbox message. Nothing is written: until the first model response is committed
    /// (with the message and the advanced cursor), the message is still in the inbox after the
    /// stored cursor, and a restarted runner takes it again.
    pub(super) fn start_turn(
        &mut self,
        seq: u64,
        content: String,
        handoff: Option<HandoffOrigin>,
    ) -> Vec<Effect> {
        self.state.turn_seq += 1;
        self.state.usage = Usage::default();
        self.overflowed = false;
        self.stopping = None;
        self.forget_input = false;
        self.steered.clear();
        self.ledger.clear();
        self.requests.clear();
        self.delegated.clear();
        self.from_recording.clear();
        let received = handoff.as_ref().map(|h| {
            event(TraceEvent::HandoffReceived(HandoffReceived {
                delivery_key: h.delivery_key.clone(),
                from_agent: h.from_agent.clone(),
                from_thread: h.from_thread,
                chain: h.chain.clone(),
            }))
        });
        self.state.handoff = handoff;
        self.history
            .push(Message::text(Role::User, content.clone()));
        self.state.turn_start_history_len = self.history.len() as u64;
        self.state.status = ThreadStatus::InTurn;
        self.state.take(seq);
        self.state.turn_message = Some(seq);
        self.state.next_message = None;
        // A restored workspace is the turn's to change now.
        self.state.workspace = None;
        let mut out = vec![event(TraceEvent::TurnStarted(TurnStarted {
            turn_seq: self.state.turn_seq,
            seq,
            input: preview(&content, 200),
        }))];
        out.extend(received);
        out.extend(self.advance());
        out
    }

    pub(super) fn on_llm(&mut self, turn: LlmTurn) -> Vec<Effect> {
        self.record_use(turn.usage.input_tokens);
        self.state.usage.input_tokens += turn.usage.input_tokens;
        self.state.usage.output_tokens += turn.usage.output_tokens;
        self.state.usage.cost_usd += turn.usage.cost_usd;
        let calls = turn.message.tool_call_ids().count();
        self.history.push(turn.message);
        let mut out = vec![event(TraceEvent::LlmCall(LlmCall {
            model: turn.model,
            input_tokens: turn.usage.input_tokens,
            output_tokens: turn.usage.output_tokens,
            cost_usd: turn.usage.cost_usd,
            latency_ms: turn.latency_ms,
            stop_reason: turn.stop_reason,
            tool_calls: calls as u64,
        }))];
        if let Some(stop) = self.over_budget() {
            out.extend(stop);
            return out;
        }
        // A final answer is committed by `finish` (one write with the thread back to idle);
        // a response with calls is committed before any of them runs, with its requests to
        // people (the thread then `waiting`).
        if calls > 0 {
            self.ask_people();
            out.insert(0, self.commit());
        }
        out.extend(self.advance());
        out
    }

    /// A tool call answered: its result joins the history; a `write` that ran commits its
    /// outcome now, everything else rides on the next commit.
    pub(super) fn on_tool(
        &mut self,
        call_id: String,
        content: String,
        is_error: bool,
    ) -> Vec<Effect> {
        let call = self.in_flight.take_if(|c| c.call_id == call_id);
        self.history
            .push(history::tool_result(&call_id, content.clone(), is_error));
        let mut out = Vec::new();
        if let Some(call) = call {
            let outcome = CommitOutcome {
                key: call.key.clone(),
                ok: !is_error,
                result: content.clone(),
            };
            match call.decision {
                Decision::Replay { .. } => {}
                Decision::OutcomeUnknown => {
                    self.record_outcome(outcome);
                }
                Decision::Execute { .. } => {
                    if !self.ledger.contains_key(&call.key) {
                        self.intents.push(intent_of(&call));
                        self.ledger
                            .insert(call.key.clone(), Entry::intent(self.cfg.epoch));
                    }
                    self.record_outcome(outcome);
                    if call.effect == EffectClass::Write {
                        out.push(self.commit());
                    }
                }
            }
        }
        if self.stopping.is_some() {
            // The call in flight when the turn was stopped has its answer: the turn ends.
            out.extend(self.end_stopped());
            return out;
        }
        out.extend(self.advance());
        out
    }

    /// Stops the turn if it has spent more than its budget (its collaborators' spending
    /// included).
    pub(super) fn over_budget(&mut self) -> Option<Vec<Effect>> {
        let budget = self.budget()?;
        if self.state.usage.cost_usd <= budget {
            return None;
        }
        let mut out = vec![event(TraceEvent::BudgetExceeded(BudgetExceeded {
            scope: None,
            budget_usd: budget,
            spent_usd: self.state.usage.cost_usd,
        }))];
        let reply = format!(
            "Stopped: this turn spent ${:.4}, over its budget of ${budget:.2} (governance.max_budget_per_run{}).",
            self.state.usage.cost_usd,
            if self.state.handoff.is_some() {
                ", or what the calling agent's turn had left"
            } else {
                ""
            }
        );
        out.extend(self.stop_turn(&reply, false, "budget_exceeded"));
        Some(out)
    }

    /// The answers to delegated calls: each one's outcome recorded (its result is the reply),
    /// the collaborators' spending counted, and the thread back `in_turn` in one commit; the
    /// answers join the history in the response's order as the turn goes on.
    pub(super) fn on_delegated(&mut self, answers: Vec<Delegated>) -> Vec<Effect> {
        self.take_answers(answers);
        self.state.status = ThreadStatus::InTurn;
        let mut out = vec![self.commit()];
        if let Some(stop) = self.over_budget() {
            out.extend(stop);
            return out;
        }
        out.extend(self.advance());
        out
    }

    /// Ends the turn early: answers any unanswered call with an error result (never a fake
    /// success), adds the reply as an assistant message, and finishes.
    pub(super) fn stop_turn(&mut self, reply: &str, ok: bool, why: &str) -> Vec<Effect> {
        self.end_turn(
            reply,
            ok,
            &format!("Not run: the turn was stopped ({why})."),
        )
    }

    /// Ends a turn that failed for good: as [`Self::stop_turn`], each unanswered call answered
    /// with `unanswered`.
    pub(super) fn stop_turn_with(&mut self, reply: &str, unanswered: &str) -> Vec<Effect> {
        self.end_turn(reply, false, unanswered)
    }

    /// Ends a turn that failed. The reply goes to the caller (`turn_completed`, a handoff's
    /// answer) and the trace, never into the history: the model must not read a failure as its
    /// own words ([`failed_turn_cut`]). Each unanswered call gets `unanswered_text` as its
    /// result, which keeps the history valid.
    pub(super) fn end_turn(&mut self, reply: &str, ok: bool, unanswered_text: &str) -> Vec<Effect> {
        let forget_input = std::mem::take(&mut self.forget_input);
        let (anchor, last_assistant, _) = self.position();
        if let Some(keep) = failed_turn_cut(anchor, last_assistant.is_some(), self.persisted) {
            // The model never answered and the input was never stored: the conversation stays
            // as it was (the message is in the trace and the inbox).
            self.history.truncate(keep);
            self.state.turn_start_history_len = keep as u64;
            self.give_back_steers(keep);
        } else if last_assistant.is_none()
            && anchor >= 1
            && self.persisted >= anchor
            && (forget_input || (anchor >= 2 && self.history[anchor - 2].compaction().is_some()))
        {
            // The input rode on the commit of a compaction made before it (or of a request to
            // raise a spent budget), and the model never answered it: cut it again (the
            // compaction stays), so an input the provider refuses is not sent with every later
            // turn either.
            let keep = anchor - 1;
            self.history.truncate(keep);
            self.truncate = Some(self.truncate.map_or(keep, |t| t.min(keep)));
            self.state.turn_start_history_len = keep as u64;
            self.give_back_steers(keep);
        }
        if let Some(last) = self.history.iter().rposition(|m| m.role == Role::Assistant) {
            let answered: Vec<String> = self.history[last + 1..]
                .iter()
                .flat_map(|m| m.tool_result_ids().map(str::to_string))
                .collect();
            let unanswered: Vec<String> = self.history[last]
                .tool_call_ids()
                .filter(|id| !answered.iter().any(|a| a == id))
                .map(str::to_string)
                .collect();
            for id in unanswered {
                // A call a collaborator answered did run: its answer stands.
                let (content, is_error) = self
                    .delegated
                    .remove(&id)
                    .unwrap_or_else(|| (unanswered_text.to_string(), true));
                self.history
                    .push(history::tool_result(&id, content, is_error));
            }
        }
        self.finish(reply.to_string(), ok)
    }

    pub(super) fn finish(&mut self, reply: String, ok: bool) -> Vec<Effect> {
        self.state.status = match (self.cfg.batch, ok) {
            (false, _) => ThreadStatus::Idle,
            (true, true) => ThreadStatus::Done,
            (true, false) => ThreadStatus::Failed,
        };
        let seq = self.state.turn_input();
        let stopped_by = self.stopping.take();
        // A handed-over task's reply goes back with the step that ends the turn.
        let origin = self.state.handoff.take();
        let mut commit = self.commit();
        if let Effect::Commit(plan) = &mut commit {
            plan.ends_turn = Some(self.state.turn_seq);
        }
        let mut out = Vec::new();
        let mut replied = None;
        if let (Some(origin), Effect::Commit(plan)) = (origin, &mut commit) {
            plan.handoff_reply = Some(HandoffReply {
                delivery_key: origin.delivery_key.clone(),
                ok,
                text: reply.clone(),
                cost_usd: self.state.usage.cost_usd,
            });
            replied = Some(event(TraceEvent::HandoffReplied(HandoffReplied {
                delivery_key: origin.delivery_key,
                to_agent: origin.from_agent,
                to_thread: origin.from_thread,
                ok,
                cost_usd: self.state.usage.cost_usd,
            })));
        }
        out.push(commit);
        out.extend(replied);
        out.push(event(TraceEvent::TurnCompleted(TurnCompleted {
            turn_seq: self.state.turn_seq,
            seq,
            ok,
            reply: reply.clone(),
            usage: self.state.usage.clone(),
            duration_ms: 0.0,
            stopped_by,
        })));
        out.push(Effect::TurnFinished { seq, reply, ok });
        out
    }

    /// Decides the next step of the current turn from the history.
    pub(super) fn advance(&mut self) -> Vec<Effect> {
        let mut out = Vec::new();
        loop {
            let (anchor, last_assistant, rounds) = self.position();
            let Some(a) = last_assistant else {
                out.extend(self.round());
                return out;
            };
            let (calls, answered) = self.calls_of(a);
            if calls.is_empty() {
                let reply = self.history[a].text_content();
                out.extend(self.finish(reply, true));
                return out;
            }
            if answered < calls.len() {
                // No call of a response runs while a request of it waits for a person. (A
                // resumed turn whose agentfile now gates a call asks here, before it runs.)
                let was = self.state.status;
                self.ask_people();
                let pending = self.pending_of(a);
                if !pending.is_empty() {
                    if !self.asks.is_empty() || was != ThreadStatus::Waiting {
                        self.state.status = ThreadStatus::Waiting;
                        out.push(self.commit());
                    }
                    out.push(Effect::AwaitApprovals {
                        turn_seq: self.state.turn_seq,
                        keys: pending,
                    });
                    return out;
                }
                if self.state.status == ThreadStatus::Waiting {
                    self.state.status = ThreadStatus::InTurn;
                    // Every request is settled: stored as such (with the next write's intent),
                    // and the expiries with it. (A turn stored waiting for collaborators hands
                    // its calls over again below, which stores it waiting again.)
                    if self.asked(a) {
                        out.push(self.commit());
                        out.extend(self.expiries(a).into_iter().map(event));
                    }
                }
                match self.plan(anchor, a, answered) {
                    NextCall::Settled {
                        call_id,
                        content,
                        is_error,
                    } => {
                        self.history
                            .push(history::tool_result(&call_id, content, is_error));
                        continue;
                    }
                    NextCall::Replayed {
                        call_id,
                        content,
                        is_error,
                        answered,
                    } => {
                        out.push(self.take_replayed(&call_id, content, is_error, answered));
                        continue;
                    }
                    NextCall::Unknown { call_id, name } => {
                        let available: Vec<String> =
                            self.cfg.tools.iter().map(|t| t.name.clone()).collect();
                        self.history.push(history::tool_result(
                            &call_id,
                            format!(
                                "There is no tool `{name}`. Available tools: {}.",
                                available.join(", ")
                            ),
                            true,
                        ));
                        out.push(event(TraceEvent::UnknownTool(UnknownTool {
                            name,
                            call_id,
                            available,
                        })));
                        continue;
                    }
                    // A call to a collaborator: its answer from the batch it ran in, or — unless
                    // the ledger has it to replay — a batch of its own now.
                    NextCall::Known(call)
                        if self.handoff_target(&call.name).is_some()
                            && (self.delegated.contains_key(&call.call_id)
                                || !matches!(call.decision, Decision::Replay { .. })) =>
                    {
                        if let Some((content, is_error)) = self.delegated.remove(&call.call_id) {
                            self.history.push(history::tool_result(
                                &call.call_id,
                                content,
                                is_error,
                            ));
                            continue;
                        }
                        let target = self.handoff_target(&call.name).cloned();
                        let refused = target.map(|t| self.delegation(&call, &t));
                        if let Some(Err((content, refused))) = refused {
                            self.history
                                .push(history::tool_result(&call.call_id, content, true));
                            out.extend(refused.map(|r| event(TraceEvent::HandoffRefused(*r))));
                            continue;
                        }
                        out.extend(self.delegate(anchor, a, answered));
                        return out;
                    }
                    NextCall::Known(call) => {
                        out.extend(self.live_event(&call));
                        // A write runs only once its intent is stored: when no commit carried
                        // it yet, this one does.
                        if call.effect == EffectClass::Write && !self.ledger.contains_key(&call.key)
                        {
                            self.intents.push(intent_of(&call));
                            self.ledger
                                .insert(call.key.clone(), Entry::intent(self.cfg.epoch));
                            self.in_flight = Some(call.clone());
                            out.push(self.commit());
                        } else {
                            self.in_flight = Some(call.clone());
                        }
                        out.push(Effect::RunTool(call));
                        return out;
                    }
                }
            }
            if rounds >= self.cfg.max_rounds {
                out.push(event(TraceEvent::MaxTurnsReached(MaxTurnsReached {
                    max_turns: self.cfg.max_rounds,
                })));
                let reply = format!(
                    "Stopped after {} model rounds without a final answer (execution.max_turns).",
                    self.cfg.max_rounds
                );
                out.extend(self.stop_turn(&reply, false, "max_turns"));
                return out;
            }
            out.extend(self.round());
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use ninetrix_proto::effects::Effect as Class;
    use serde_json::json;

    #[test]
    fn a_question_and_its_answer_are_one_commit() {
        let mut e = Engine::new(config());
        let out = e.apply(message(7));
        assert_eq!(
            kinds(&out),
            ["event:turn_started", "call_llm"],
            "the input waits"
        );
        assert!(e.state().taken(7), "the message is taken in memory");
        assert_eq!(e.state().turn_input(), 7);
        let out = e.apply(answer("hello"));
        assert_eq!(
            kinds(&out),
            [
                "event:llm_call",
                "commit",
                "event:turn_completed",
                "finished"
            ]
        );
        let plan = commits(&out)[0];
        assert_eq!(plan.append.len(), 2, "the input and the answer");
        assert_eq!(plan.append[0].role, Role::User);
        assert_eq!(
            (plan.state.taken(7), plan.state.status),
            (true, ThreadStatus::Idle)
        );
        assert!(plan.intents.is_empty() && plan.outcomes.is_empty());
        assert!(e.idle());
    }

    #[test]
    fn a_write_turn_commits_each_response_and_the_writes_outcome() {
        let mut e = Engine::new(config());
        e.apply(message(7));
        let out = e.apply(llm(vec![append_call("c1")], 0.01));
        assert_eq!(kinds(&out), ["commit", "event:llm_call", "run:file_write"]);
        let plan = commits(&out)[0];
        assert_eq!(
            plan.append.len(),
            2,
            "the input rides on the first response"
        );
        assert_eq!(
            (
                plan.state.taken(7),
                plan.state.turn_start_history_len,
                plan.state.status
            ),
            (true, 1, ThreadStatus::InTurn)
        );
        let call = run_of(&out);
        assert_eq!(call.effect, Class::Write, "append mode is a write");
        assert_eq!(call.decision, Decision::Execute { again: false });
        assert_eq!(
            plan.intents.iter().map(|i| &i.key).collect::<Vec<_>>(),
            [&call.key],
            "the write's intent is stored before it runs, with the response"
        );
        let out = e.apply(result("c1"));
        assert_eq!(kinds(&out), ["commit", "call_llm"]);
        let plan = commits(&out)[0];
        assert_eq!(plan.append.len(), 1);
        assert!(plan.intents.is_empty());
        assert_eq!(plan.outcomes.len(), 1);
        assert_eq!(
            (plan.outcomes[0].key.as_str(), plan.outcomes[0].ok),
            (call.key.as_str(), true)
        );
        let out = e.apply(answer("done"));
        assert_eq!(
            kinds(&out),
            [
                "event:llm_call",
                "commit",
                "event:turn_completed",
                "finished"
            ]
        );
        assert_eq!(
            out[3],
            Effect::TurnFinished {
                seq: 7,
                reply: "done".into(),
                ok: true
            }
        );
        assert!(e.idle());
        assert!(crate::history::validate(e.history()).is_ok());
    }

    #[test]
    fn reads_ride_on_the_next_commit_with_their_ledger_records() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        let out = e.apply(llm(vec![read_call("r1")], 0.0));
        assert_eq!(kinds(&out), ["commit", "event:llm_call", "run:file_read"]);
        assert!(
            commits(&out)[0].intents.is_empty(),
            "a read needs no intent first"
        );
        let read = run_of(&out);
        let out = e.apply(result("r1"));
        assert_eq!(kinds(&out), ["call_llm"], "a read's result is not a write");
        let out = e.apply(answer("done"));
        let plan = commits(&out)[0];
        assert_eq!(plan.append.len(), 2, "the read's result and the answer");
        assert_eq!(plan.intents.len(), 1);
        assert_eq!(plan.intents[0].key, read.key);
        assert_eq!(
            plan.outcomes.len(),
            1,
            "recorded for the ledger, in the same write"
        );
        assert_eq!(plan.outcomes[0].result, "result of r1");
    }

    /// R model rounds and W write calls cost R + W commits, whatever the mix.
    #[test]
    fn a_turn_costs_one_commit_per_response_and_per_write() {
        let cases: Vec<(Vec<Input>, usize)> = vec![
            (vec![answer("hi")], 1),
            (vec![llm(vec![read_call("a")], 0.0), answer("ok")], 2),
            (vec![llm(vec![append_call("a")], 0.0), answer("ok")], 3),
            // The researcher: list, write, read, answer: 4 rounds + 1 write.
            (
                vec![
                    llm(vec![read_call("a")], 0.0),
                    llm(vec![append_of("b", "report")], 0.0),
                    llm(vec![read_call("c")], 0.0),
                    answer("ok"),
                ],
                5,
            ),
            (
                vec![
                    llm(
                        vec![
                            read_call("a"),
                            append_of("b", "1"),
                            read_call("c"),
                            append_of("d", "2"),
                        ],
                        0.0,
                    ),
                    answer("ok"),
                ],
                4,
            ),
        ];
        for (responses, want) in cases {
            let mut e = Engine::new(config());
            let first = e.apply(message(1));
            let all = drive(&mut e, first, responses);
            assert_eq!(commits(&all).len(), want, "{:?}", kinds(&all));
            assert!(e.idle());
            // Every write's intent is committed before it runs.
            let mut committed = Vec::new();
            for effect in &all {
                match effect {
                    Effect::Commit(p) => committed.extend(p.intents.iter().map(|i| i.key.clone())),
                    Effect::RunTool(c) if c.effect == Class::Write => {
                        assert!(
                            committed.contains(&c.key),
                            "{} ran before its intent",
                            c.name
                        )
                    }
                    _ => {}
                }
            }
        }
    }

    #[test]
    fn the_next_writes_intent_rides_on_the_previous_writes_outcome() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        let out = e.apply(llm(vec![append_of("a", "1"), append_of("b", "2")], 0.0));
        let first = run_of(&out);
        assert_eq!(
            commits(&out)[0].intents.len(),
            1,
            "only the first write's intent"
        );
        let out = e.apply(result("a"));
        assert_eq!(kinds(&out), ["commit", "run:file_write"]);
        let second = run_of(&out);
        let plan = commits(&out)[0];
        assert_eq!(plan.outcomes[0].key, first.key);
        assert_eq!(plan.intents[0].key, second.key);
        assert_ne!(first.key, second.key);
    }

    #[test]
    fn the_budget_stops_the_turn_without_running_its_calls() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        let out = e.apply(llm(vec![append_call("c1")], 0.25));
        assert_eq!(
            kinds(&out),
            [
                "event:llm_call",
                "event:budget_exceeded",
                "commit",
                "event:turn_completed",
                "finished"
            ]
        );
        assert!(commits(&out)[0].intents.is_empty(), "no call will run");
        let Effect::TurnFinished { ok, reply, .. } = out.last().unwrap() else {
            panic!()
        };
        assert!(!ok && reply.contains("budget"), "{reply}");
        assert!(
            crate::history::validate(e.history()).is_ok(),
            "the unrun call is answered with an error"
        );
        assert_eq!(
            e.state().usage.cost_usd,
            0.25,
            "spent budget is in the checkpointed state"
        );
    }

    #[test]
    fn a_turn_whose_model_call_fails_at_once_leaves_the_conversation_as_it_was() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        e.apply(answer("hello"));
        let before = e.history().to_vec();
        for seq in 2..=4 {
            let out = e.apply(message(seq));
            assert_eq!(kinds(&out), ["event:turn_started", "call_llm"]);
            let out = e.apply(Input::LlmFailed("HTTP 400: bad request".into()));
            assert_eq!(kinds(&out), ["commit", "event:turn_completed", "finished"]);
            let plan = commits(&out)[0];
            assert!(
                plan.append.is_empty(),
                "nothing joins the history: {plan:?}"
            );
            assert_eq!(
                (plan.state.taken(seq), plan.state.status),
                (true, ThreadStatus::Idle),
                "the message is applied once: it is taken"
            );
            let Effect::TurnFinished { ok, reply, .. } = out.last().unwrap() else {
                panic!()
            };
            assert!(
                !ok && reply.contains("HTTP 400"),
                "the caller hears why: {reply}"
            );
        }
        assert_eq!(e.history(), before.as_slice(), "three failures, no growth");
        // The next turn sends a valid history with only the new input added.
        e.apply(message(5));
        assert_eq!(e.history().len(), before.len() + 1);
        assert!(crate::history::validate(e.history()).is_ok());
        model_never_reads(&e, "could not be called");
    }

    #[test]
    fn a_turn_that_fails_after_its_calls_ran_keeps_them_without_a_failure_reply() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        e.apply(llm(vec![read_call("r")], 0.0));
        let out = e.apply(result("r"));
        assert_eq!(kinds(&out).last().map(String::as_str), Some("call_llm"));
        let out = e.apply(Input::LlmFailed("HTTP 400: bad request".into()));
        let plan = commits(&out)[0];
        assert!(
            plan.append.iter().all(|m| m.role == Role::Tool),
            "the read's result is stored, no reply: {plan:?}"
        );
        assert_eq!(e.history().last().unwrap().role, Role::Tool);
        model_never_reads(&e, "could not be called");
        e.apply(message(2));
        assert!(crate::history::validate(e.history()).is_ok());
    }

    #[test]
    fn the_cut_of_a_failed_turn_is_only_an_unanswered_unstored_input() {
        // Input at 4 (anchor 5), nothing stored since: cut back to 4.
        assert_eq!(failed_turn_cut(5, false, 4), Some(4));
        // The input rode on a commit (a repair, an earlier response): kept.
        assert_eq!(failed_turn_cut(5, false, 5), None);
        // The model answered: its response and the calls' results stay.
        assert_eq!(failed_turn_cut(5, true, 4), None);
        assert_eq!(failed_turn_cut(0, false, 0), None);
    }

    #[test]
    fn max_rounds_ends_a_turn_that_never_answers() {
        let mut e = Engine::new(EngineConfig {
            max_rounds: 2,
            budget: None,
            ..config()
        });
        e.apply(message(1));
        e.apply(llm(vec![append_call("c1")], 0.0));
        e.apply(result("c1"));
        e.apply(llm(vec![append_of("c2", "y")], 0.0));
        let out = e.apply(result("c2"));
        assert!(
            kinds(&out).contains(&"event:max_turns_reached".to_string()),
            "{:?}",
            kinds(&out)
        );
        assert!(matches!(
            out.last(),
            Some(Effect::TurnFinished { ok: false, .. })
        ));
        model_never_reads(&e, "Stopped after");
    }

    #[test]
    fn unknown_tools_get_an_error_result_and_the_turn_goes_on() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        let out = e.apply(llm(
            vec![Block::ToolCall {
                id: "x".into(),
                name: "rm_rf".into(),
                args: json!({}),
            }],
            0.0,
        ));
        assert_eq!(
            kinds(&out),
            ["commit", "event:llm_call", "event:unknown_tool", "call_llm"]
        );
        let unknown = out.iter().find_map(|e| match e {
            Effect::Event(TraceEvent::UnknownTool(u)) => Some(u.clone()),
            _ => None,
        });
        let unknown = unknown.expect("the call to a missing tool is traced");
        assert_eq!(
            (unknown.name.as_str(), unknown.call_id.as_str()),
            ("rm_rf", "x")
        );
        assert_eq!(unknown.available, ["file_write", "file_read"]);
        assert!(crate::history::validate(e.history()).is_ok());
    }

    #[test]
    fn identical_calls_in_one_turn_get_different_keys() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        let first = run_of(&e.apply(llm(vec![append_call("a"), append_call("b")], 0.0)));
        let second = run_of(&e.apply(result("a")));
        assert_ne!(first.key, second.key);
    }
}
