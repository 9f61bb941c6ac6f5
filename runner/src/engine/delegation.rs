//! Handoffs to collaborators: the delegation chain, whether a response handed calls over, the
//! delegation of one call (or why it is refused), and the batch of a response's calls handed over
//! together.

use ninetrix_proto::api::{CommitOutcome, ThreadStatus, ToolCallStatus};
use ninetrix_proto::events::HandoffRefused;
use ninetrix_proto::handoffs;

use super::{
    Delegated, Delegation, Effect, Engine, HandoffTarget, NextCall, PlannedCall, intent_of,
};
use crate::ledger::{Decision, Entry};

impl Engine {
    /// The delegation chain of the current turn's own calls: the agents from the first caller to
    /// this one, inclusive.
    pub(super) fn chain(&self) -> Vec<String> {
        let mut chain = self
            .state
            .handoff
            .as_ref()
            .map(|h| h.chain.clone())
            .unwrap_or_default();
        chain.push(self.cfg.agent.clone());
        chain
    }

    /// Whether any call of message `a` is a handoff the ledger knows (its intent is stored).
    pub(super) fn handed_over(&self, anchor: usize, a: usize) -> bool {
        let (calls, _) = self.calls_of(a);
        (0..calls.len()).any(|i| match self.plan(anchor, a, i) {
            NextCall::Known(call) => {
                self.handoff_target(&call.name).is_some() && self.ledger.contains_key(&call.key)
            }
            _ => false,
        })
    }

    /// The delegation of `call` to collaborator `target`, or — when it must not be made — the
    /// error result it gets instead (and the event saying why, for the depth limit). A remote
    /// A2A agent counts as one more handoff in the chain, like an agent of the pool.
    pub(super) fn delegation(
        &self,
        call: &PlannedCall,
        target: &HandoffTarget,
    ) -> Result<Delegation, (String, Option<Box<HandoffRefused>>)> {
        let agent = target.agent.as_str();
        let chain = self.chain();
        if let Err(why) = handoffs::check_depth(&chain, agent, self.cfg.max_delegation_depth) {
            let mut would = chain.clone();
            would.push(agent.to_string());
            return Err((
                why,
                Some(Box::new(HandoffRefused {
                    tool: call.name.clone(),
                    agent: agent.to_string(),
                    chain: would,
                    max_depth: self.cfg.max_delegation_depth,
                })),
            ));
        }
        let text = |k: &str| {
            call.args
                .get(k)
                .and_then(serde_json::Value::as_str)
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
        };
        let Some(task) = text("task") else {
            return Err((
                format!(
                    "Not run: `{}` needs a `task` (a non-empty string) saying what `{agent}` should do.",
                    call.name
                ),
                None,
            ));
        };
        Ok(Delegation {
            call: call.clone(),
            agent: agent.to_string(),
            remote: target.a2a.clone(),
            since: self.ledger.get(&call.key).and_then(|e| e.intent_at),
            task,
            context: text("context"),
            chain,
            timeout_secs: self.cfg.transfer_timeout_secs,
            budget_usd: self
                .budget()
                .map(|b| (b - self.state.usage.cost_usd).max(0.0)),
        })
    }

    /// Hands over every call of message `a` from call `from` on that goes to a collaborator and
    /// is not answered yet (calls to several collaborators in one response run together): their
    /// intents stored with the thread `waiting`, in one commit, then [`Effect::Delegate`].
    pub(super) fn delegate(&mut self, anchor: usize, a: usize, from: usize) -> Vec<Effect> {
        let (calls, _) = self.calls_of(a);
        let mut batch = Vec::new();
        for i in from..calls.len() {
            let NextCall::Known(call) = self.plan(anchor, a, i) else {
                continue;
            };
            if matches!(call.decision, Decision::Replay { .. })
                || self.delegated.contains_key(&call.call_id)
            {
                continue;
            }
            let Some(target) = self.handoff_target(&call.name).cloned() else {
                continue;
            };
            if let Ok(d) = self.delegation(&call, &target) {
                batch.push(d);
            }
        }
        for d in &batch {
            if !self.ledger.contains_key(&d.call.key) {
                self.intents.push(intent_of(&d.call));
                self.ledger
                    .insert(d.call.key.clone(), Entry::intent(self.cfg.epoch));
            }
        }
        self.delegating = batch.iter().map(|d| d.call.clone()).collect();
        self.state.status = ThreadStatus::Waiting;
        vec![
            self.commit(),
            Effect::Delegate {
                turn_seq: self.state.turn_seq,
                calls: batch,
            },
        ]
    }

    /// Takes the answers to the delegated calls: each one's outcome recorded (unless the ledger
    /// already has it), the collaborator's spending counted, and the answer kept until its call
    /// comes up in the response.
    pub(super) fn take_answers(&mut self, answers: Vec<Delegated>) {
        let calls = std::mem::take(&mut self.delegating);
        for answer in answers {
            let Some(call) = calls.iter().find(|c| c.call_id == answer.call_id) else {
                continue;
            };
            let recorded = self
                .ledger
                .get(&call.key)
                .is_some_and(|e| e.status != ToolCallStatus::Intent);
            if !recorded {
                self.record_outcome(CommitOutcome {
                    key: call.key.clone(),
                    ok: !answer.is_error,
                    result: answer.content.clone(),
                });
            }
            if answer.cost_usd.is_finite() && answer.cost_usd > 0.0 {
                self.state.usage.cost_usd += answer.cost_usd;
            }
            self.delegated
                .insert(answer.call_id, (answer.content, answer.is_error));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use ninetrix_proto::api::ApprovalStatus;
    use ninetrix_proto::api::ToolCallStatus;
    use ninetrix_proto::effects::Effect as Class;
    use serde_json::json;

    // --- Handoffs (issue 16) ---

    fn collaborating() -> EngineConfig {
        EngineConfig {
            tools: vec![
                ToolSpec::builtin(tools::builtin("file_read").unwrap()),
                ToolSpec::handoff("b", None),
                ToolSpec::handoff("c", None),
            ],
            ..config()
        }
    }

    fn ask(id: &str, agent: &str, task: &str) -> Block {
        Block::ToolCall {
            id: id.into(),
            name: format!("ask_{agent}"),
            args: json!({"task": task}),
        }
    }

    fn delegations(effects: &[Effect]) -> Vec<Delegation> {
        match effects.last() {
            Some(Effect::Delegate { calls, .. }) => calls.clone(),
            other => panic!("expected a delegation last, got {other:?}"),
        }
    }

    fn reply(d: &Delegation, text: &str, cost: f64) -> Delegated {
        Delegated {
            call_id: d.call.call_id.clone(),
            content: text.into(),
            is_error: false,
            cost_usd: cost,
        }
    }

    fn origin(chain: &[&str], budget: Option<f64>) -> HandoffOrigin {
        HandoffOrigin {
            delivery_key: "handoff:k".into(),
            from_agent: chain.last().unwrap().to_string(),
            from_thread: ThreadId::new_v7(),
            chain: chain.iter().map(|c| c.to_string()).collect(),
            budget_usd: budget,
        }
    }

    #[test]
    fn calls_to_two_collaborators_are_handed_over_together_and_answered_in_order() {
        let mut e = Engine::new(collaborating());
        e.apply(message(1));
        let out = e.apply(llm(
            vec![
                ask("1", "b", "find x"),
                read_call("2"),
                ask("3", "c", "find y"),
            ],
            0.01,
        ));
        assert_eq!(
            kinds(&out),
            ["commit", "event:llm_call", "commit", "delegate:2"],
            "the response, then one commit for the batch"
        );
        let [response, batch] = commits(&out)[..] else {
            panic!()
        };
        assert!(
            response.intents.is_empty(),
            "a handoff's intent rides on its batch"
        );
        assert_eq!(batch.intents.len(), 2);
        assert!(batch.intents.iter().all(|i| i.effect == Class::Write));
        assert_eq!(batch.state.status, ThreadStatus::Waiting);
        let calls = delegations(&out);
        assert_eq!(
            calls
                .iter()
                .map(|d| (d.agent.as_str(), d.task.as_str()))
                .collect::<Vec<_>>(),
            [("b", "find x"), ("c", "find y")]
        );
        assert_eq!(calls[0].chain, ["a"]);
        assert_eq!(calls[0].timeout_secs, 300);
        let left = calls[0].budget_usd.unwrap();
        assert!((left - 0.09).abs() < 1e-9, "the budget left: {left}");
        // The answers: outcomes stored in one commit, the turn going on with the read.
        let out = e.apply(Input::Delegated(vec![
            reply(&calls[1], "y is 2", 0.02),
            reply(&calls[0], "x is 1", 0.01),
        ]));
        assert_eq!(kinds(&out), ["commit", "run:file_read"]);
        let plan = commits(&out)[0];
        assert_eq!(plan.outcomes.len(), 2);
        assert_eq!(plan.state.status, ThreadStatus::InTurn);
        assert!(
            (plan.state.usage.cost_usd - 0.04).abs() < 1e-9,
            "the collaborators' spend counts"
        );
        let out = e.apply(result("2"));
        assert_eq!(kinds(&out), ["call_llm"]);
        let r = results(&e);
        assert_eq!(
            r.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
            ["x is 1", "result of 2", "y is 2"],
            "answers in the response's order"
        );
    }

    #[test]
    fn a_chain_past_the_depth_limit_is_refused_with_an_error_naming_it() {
        let mut e = Engine::new(EngineConfig {
            max_delegation_depth: 1,
            ..collaborating()
        });
        e.apply(Input::Message {
            seq: 1,
            content: "task".into(),
            handoff: Some(origin(&["b"], None)),
        });
        let out = e.apply(llm(vec![ask("1", "b", "again")], 0.0));
        assert_eq!(
            kinds(&out),
            [
                "commit",
                "event:llm_call",
                "event:handoff_refused",
                "call_llm"
            ]
        );
        let (text, is_error) = &results(&e)[0];
        assert!(*is_error);
        assert!(text.contains("b → a → b (2 handoffs)"), "{text}");
        assert!(text.contains("max_delegation_depth (1)"), "{text}");
    }

    #[test]
    fn a_call_without_a_task_is_answered_with_an_error_and_not_handed_over() {
        let mut e = Engine::new(collaborating());
        e.apply(message(1));
        let out = e.apply(llm(
            vec![Block::ToolCall {
                id: "1".into(),
                name: "ask_b".into(),
                args: json!({"context": "x"}),
            }],
            0.0,
        ));
        assert_eq!(kinds(&out), ["commit", "event:llm_call", "call_llm"]);
        assert!(results(&e)[0].0.contains("needs a `task`"));
    }

    #[test]
    fn a_delegated_turn_replies_with_its_final_commit() {
        let mut e = Engine::new(config());
        let out = e.apply(Input::Message {
            seq: 1,
            content: "Task from agent `x`:\nsum".into(),
            handoff: Some(origin(&["x"], Some(1.0))),
        });
        assert_eq!(
            kinds(&out),
            ["event:turn_started", "event:handoff_received", "call_llm"]
        );
        let out = e.apply(answer("4"));
        assert_eq!(
            kinds(&out),
            [
                "event:llm_call",
                "commit",
                "event:handoff_replied",
                "event:turn_completed",
                "finished"
            ]
        );
        let plan = commits(&out)[0];
        let reply = plan
            .handoff_reply
            .as_ref()
            .expect("the reply rides on the final commit");
        assert_eq!((reply.ok, reply.text.as_str()), (true, "4"));
        assert_eq!(
            plan.state.handoff, None,
            "the turn is over: no origin stays"
        );
        // A failed one says so.
        let mut e = Engine::new(EngineConfig {
            max_rounds: 1,
            ..collaborating()
        });
        e.apply(Input::Message {
            seq: 1,
            content: "t".into(),
            handoff: Some(origin(&["x"], None)),
        });
        e.apply(llm(vec![read_call("r")], 0.0));
        let out = e.apply(result("r"));
        let reply = commits(&out)[0].handoff_reply.clone().unwrap();
        assert!(!reply.ok && reply.text.contains("max_turns"), "{reply:?}");
    }

    #[test]
    fn a_delegated_turn_spends_at_most_what_its_caller_had_left() {
        let mut e = Engine::new(config());
        e.apply(Input::Message {
            seq: 1,
            content: "t".into(),
            handoff: Some(origin(&["x"], Some(0.01))),
        });
        let out = e.apply(llm(vec![read_call("r")], 0.02));
        assert!(kinds(&out).contains(&"event:budget_exceeded".to_string()));
        let reply = commits(&out).last().unwrap().handoff_reply.clone().unwrap();
        assert!(
            !reply.ok && reply.text.contains("calling agent"),
            "{reply:?}"
        );
    }

    #[test]
    fn collaborators_spending_over_the_budget_stops_the_turn_keeping_their_answers() {
        let mut e = Engine::new(collaborating());
        e.apply(message(1));
        let out = e.apply(llm(vec![ask("1", "b", "x"), ask("2", "c", "y")], 0.0));
        let calls = delegations(&out);
        let out = e.apply(Input::Delegated(vec![
            reply(&calls[0], "done b", 0.08),
            reply(&calls[1], "done c", 0.08),
        ]));
        assert!(kinds(&out).contains(&"event:budget_exceeded".to_string()));
        let r = results(&e);
        assert_eq!(
            r[0],
            ("done b".to_string(), false),
            "what ran keeps its answer"
        );
        assert_eq!(r[1], ("done c".to_string(), false));
    }

    #[test]
    fn a_restarted_caller_re_attaches_to_the_same_handoffs_even_in_truncate_mode() {
        let cfg = collaborating();
        assert_eq!(cfg.resume, ResumeMode::Truncate);
        let mut first = Engine::new(cfg.clone());
        first.apply(message(1));
        let out = first.apply(llm(vec![ask("1", "b", "x"), ask("2", "c", "y")], 0.0));
        let calls = delegations(&out);
        // Crash while waiting: the batch's intents are stored.
        let mut restored = stored(&first);
        restored.ledger = calls
            .iter()
            .map(|d| record(&d.call, ToolCallStatus::Intent, 1))
            .collect();
        let mut second = second_boot(cfg.clone());
        let out = second.apply(Input::Restored(Some(restored.clone())));
        assert_eq!(
            kinds(&out),
            ["event:resume", "event:turn_resumed", "commit", "delegate:2"],
            "no cut: the same calls are handed over again (the API finds them filed)"
        );
        let again = delegations(&out);
        assert_eq!(
            again.iter().map(|d| d.call.key.clone()).collect::<Vec<_>>(),
            calls.iter().map(|d| d.call.key.clone()).collect::<Vec<_>>()
        );
        assert!(
            again
                .iter()
                .all(|d| d.call.decision == Decision::OutcomeUnknown)
        );
        assert!(
            commits(&out)[0].intents.is_empty(),
            "their intents are stored already"
        );
        // One answered and recorded before the crash: replayed, the other re-attached.
        restored.ledger[0] = record(&calls[0].call, ToolCallStatus::Completed, 1);
        let mut third = Engine::new(EngineConfig { epoch: 3, ..cfg });
        let out = third.apply(Input::Restored(Some(restored)));
        assert_eq!(
            kinds(&out),
            ["event:resume", "event:turn_resumed", "run:ask_b"],
            "the recorded answer is replayed first"
        );
        let out = third.apply(Input::Tool {
            call_id: "1".into(),
            content: "recorded".into(),
            is_error: false,
        });
        assert_eq!(kinds(&out), ["commit", "delegate:1"]);
        assert_eq!(delegations(&out)[0].agent, "c");
    }

    #[test]
    fn a_gated_handoff_waits_for_a_person_and_a_rejected_one_is_never_handed_over() {
        let cfg = EngineConfig {
            approval: Some(HumanApproval {
                enabled: true,
                actions: vec![ninetrix_agentfile::ApprovalAction::Tool("ask_b".into())],
                effects: Vec::new(),
                timeout_secs: 3600,
                notify_url: None,
                notify_secret: None,
            }),
            ..collaborating()
        };
        let mut e = Engine::new(cfg);
        e.apply(message(1));
        let out = e.apply(llm(vec![ask("1", "b", "x"), ask("2", "c", "y")], 0.0));
        assert_eq!(kinds(&out), ["commit", "event:llm_call", "await:1"]);
        let asks = ask_of(&out);
        assert_eq!(asks[0].tool, "ask_b");
        // Rejected: only the ungated call is handed over.
        let out = e.apply(Input::Approvals(vec![settled(
            &asks[0],
            ApprovalStatus::Rejected,
        )]));
        assert_eq!(kinds(&out), ["commit", "commit", "delegate:1"]);
        assert_eq!(delegations(&out)[0].agent, "c");
        assert!(results(&e)[0].1, "the rejected call's answer is an error");
    }
}
