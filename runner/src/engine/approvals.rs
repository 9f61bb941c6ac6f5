//! Requests to people: which calls of a response ask (an `ask_human` question, a call
//! `governance.human_approval` gates), which are still pending, what a decision answers instead
//! of running the call, and the expiries to trace.

use ninetrix_agentfile::tools::ASK_HUMAN;
use ninetrix_proto::api::{Approval, ApprovalKind, ApprovalStatus, ThreadStatus};
use ninetrix_proto::events::{ApprovalExpired, TraceEvent};

use super::{ApprovalAsk, Engine, NextCall, PlannedCall};
use crate::ledger::Decision;

impl Engine {
    /// Takes what a wait brought: the current turn's requests as stored.
    pub(super) fn learn(&mut self, approvals: Vec<Approval>) {
        for a in approvals {
            if a.turn_seq == self.state.turn_seq {
                self.requests.insert(a.key.clone(), Some(a));
            }
        }
    }

    /// Makes a request to a person for each unanswered call of the current response that needs
    /// one and has none yet (an `ask_human` question, or a call `governance.human_approval`
    /// gates), to ride on the next commit; the thread is `waiting` if any request of the
    /// response is pending.
    pub(super) fn ask_people(&mut self) {
        let (anchor, last_assistant, _) = self.position();
        let Some(a) = last_assistant else { return };
        let (calls, answered) = self.calls_of(a);
        for i in answered..calls.len() {
            let NextCall::Known(call) = self.plan(anchor, a, i) else {
                continue;
            };
            let Some(kind) = self.kind_of(&call) else {
                continue;
            };
            if self.requests.contains_key(&call.key) {
                continue;
            }
            self.requests.insert(call.key.clone(), None);
            self.asks.push(ApprovalAsk {
                key: call.key,
                call_id: call.call_id,
                turn_seq: call.turn_seq,
                kind,
                tool: call.name,
                args: call.args,
                timeout_secs: self.cfg.approval_timeout_secs,
                raise: None,
            });
        }
        if !self.pending_of(a).is_empty() {
            self.state.status = ThreadStatus::Waiting;
        }
    }

    /// What a call asks of a person, if anything: a question (`ask_human`), an approval (a call
    /// the agentfile gates and the ledger has no outcome for — a replayed call already ran);
    /// nothing in replay mode.
    pub(super) fn kind_of(&self, call: &PlannedCall) -> Option<ApprovalKind> {
        // A replay asks nobody: its questions are answered from the recording, and a call a
        // gate would hold is not run (see `replay`).
        if self.replaying() {
            return None;
        }
        if call.name == ASK_HUMAN {
            return Some(ApprovalKind::Question);
        }
        let gated = self
            .cfg
            .approval
            .as_ref()
            .is_some_and(|h| h.gates(&call.name, call.effect));
        (gated && matches!(call.decision, Decision::Execute { .. }))
            .then_some(ApprovalKind::Approval)
    }

    /// Whether any call of message `a` has a request to a person.
    pub(super) fn asked(&self, a: usize) -> bool {
        self.history[a]
            .tool_call_ids()
            .any(|id| self.requests.values().flatten().any(|r| r.call_id == id))
            || !self.asks.is_empty()
    }

    /// The ledger keys of the requests of message `a`'s unanswered calls that are still pending.
    pub(super) fn pending_of(&self, a: usize) -> Vec<String> {
        let (calls, answered) = self.calls_of(a);
        let anchor = (self.state.turn_start_history_len as usize).min(self.history.len());
        (answered..calls.len())
            .filter_map(|i| match self.plan(anchor, a, i) {
                NextCall::Known(call) => match self.requests.get(&call.key) {
                    Some(None) => Some(call.key),
                    Some(Some(r)) if r.status == ApprovalStatus::Pending => Some(call.key),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    /// The answer a person's decision gives the call with ledger key `key` instead of running
    /// it — `(content, is_error)` for a rejection, an expiry or a question's answer — or `None`
    /// when the call runs (no request, or approved) or still waits.
    pub(super) fn answer_without_running(&self, key: &str) -> Option<(String, bool)> {
        let Some(Some(request)) = self.requests.get(key) else {
            return None;
        };
        let by = request.decided_by.as_deref().unwrap_or("a person");
        let reason = request
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        let refused = |content: String| Some((content, true));
        match (request.kind, request.status) {
            (_, ApprovalStatus::Pending) | (ApprovalKind::Approval, ApprovalStatus::Approved) => {
                None
            }
            (ApprovalKind::Question, ApprovalStatus::Answered) => {
                Some((request.answer.clone().unwrap_or_default(), false))
            }
            (ApprovalKind::Approval, ApprovalStatus::Rejected) => refused(format!(
                "Not run: {by} rejected this call (approval {}){reason}.",
                request.id
            )),
            (ApprovalKind::Question, ApprovalStatus::Rejected) => refused(format!(
                "No answer: {by} declined to answer (request {}){reason}.",
                request.id
            )),
            (ApprovalKind::Approval, ApprovalStatus::Expired) => refused(format!(
                "Not run: nobody approved this call before its approval request {} expired at {}; an expired request counts as rejected.",
                request.id,
                request
                    .expires_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            )),
            (ApprovalKind::Question, ApprovalStatus::Expired) => refused(format!(
                "No answer: nobody answered before the question {} expired at {}.",
                request.id,
                request
                    .expires_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            )),
            // A decision that does not fit the kind (the API refuses these): never run on it.
            (_, status) => refused(format!(
                "Not run: request {} ended `{}`, which does not allow this call.",
                request.id,
                status.as_str()
            )),
        }
    }

    /// `approval_expired` events for the expired requests of message `a`'s calls.
    pub(super) fn expiries(&self, a: usize) -> Vec<TraceEvent> {
        let ids: Vec<&str> = self.history[a].tool_call_ids().collect();
        let mut expired: Vec<&Approval> = self
            .requests
            .values()
            .flatten()
            .filter(|r| r.status == ApprovalStatus::Expired && ids.contains(&r.call_id.as_str()))
            .collect();
        expired.sort_by_key(|r| r.id);
        expired
            .into_iter()
            .map(|r| {
                TraceEvent::ApprovalExpired(ApprovalExpired {
                    id: r.id,
                    kind: r.kind,
                    tool: r.tool.clone(),
                    expired_at: r.expires_at,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use ninetrix_proto::api::ApprovalStatus;
    use ninetrix_proto::api::ToolCallStatus;

    #[test]
    fn a_gated_call_waits_with_its_whole_response_then_runs_once_approved() {
        let mut e = Engine::new(gated());
        e.apply(message(1));
        let out = e.apply(llm(vec![read_call("r"), append_call("w")], 0.0));
        assert_eq!(kinds(&out), ["commit", "event:llm_call", "await:1"]);
        let plan = commits(&out)[0];
        assert_eq!(plan.state.status, ThreadStatus::Waiting);
        assert!(
            plan.intents.is_empty(),
            "no intent before the decision: a rejected write never ran"
        );
        let asks = ask_of(&out);
        assert_eq!(asks.len(), 1, "the ungated read asks nobody");
        assert_eq!(
            (asks[0].call_id.as_str(), asks[0].kind, asks[0].timeout_secs),
            ("w", ApprovalKind::Approval, 3600)
        );
        assert!(!e.idle(), "a waiting turn is still a turn");
        let out = e.apply(Input::Approvals(vec![settled(
            &asks[0],
            ApprovalStatus::Approved,
        )]));
        assert_eq!(
            kinds(&out),
            ["commit", "run:file_read"],
            "settled is stored, then the calls run in order"
        );
        let plan = commits(&out)[0];
        assert_eq!(plan.state.status, ThreadStatus::InTurn);
        assert_eq!(
            plan.intents.iter().map(|i| &i.key).collect::<Vec<_>>(),
            [&asks[0].key],
            "the approved write's intent rides on it"
        );
        let out = e.apply(result("r"));
        assert_eq!(kinds(&out), ["run:file_write"]);
        assert_eq!(run_of(&out).decision, Decision::Execute { again: false });
        let out = e.apply(result("w"));
        assert_eq!(kinds(&out), ["commit", "call_llm"]);
        let all = drive(&mut e, out, vec![answer("done")]);
        assert!(matches!(
            all.last(),
            Some(Effect::TurnFinished { ok: true, .. })
        ));
    }

    #[test]
    fn a_rejected_call_never_runs_and_the_model_gets_the_reason() {
        let mut e = Engine::new(gated());
        e.apply(message(1));
        let out = e.apply(llm(vec![append_call("w"), read_call("r")], 0.0));
        let asks = ask_of(&out);
        let out = e.apply(Input::Approvals(vec![settled(
            &asks[0],
            ApprovalStatus::Rejected,
        )]));
        assert_eq!(kinds(&out), ["commit", "run:file_read"]);
        assert!(commits(&out)[0].intents.is_empty(), "no intent, ever");
        let (text, is_error) = &results(&e)[0];
        assert!(*is_error);
        assert!(
            text.contains("alice rejected") && text.contains("not today"),
            "{text}"
        );
        let all = drive(&mut e, vec![], vec![]);
        assert!(all.is_empty());
        let out = e.apply(result("r"));
        assert_eq!(kinds(&out), ["call_llm"]);
    }

    #[test]
    fn several_requests_are_decided_independently_and_the_turn_goes_on_when_all_are() {
        let mut e = Engine::new(gated());
        e.apply(message(1));
        let out = e.apply(llm(
            vec![append_of("a", "1"), question("q"), append_of("b", "2")],
            0.0,
        ));
        let asks = ask_of(&out);
        assert_eq!(
            asks.iter().map(|a| a.kind).collect::<Vec<_>>(),
            [
                ApprovalKind::Approval,
                ApprovalKind::Question,
                ApprovalKind::Approval
            ]
        );
        // The last one first: still waiting for the other two, nothing written.
        let out = e.apply(Input::Approvals(vec![settled(
            &asks[2],
            ApprovalStatus::Approved,
        )]));
        assert_eq!(kinds(&out), ["await:2"]);
        let out = e.apply(Input::Approvals(vec![
            settled(&asks[2], ApprovalStatus::Approved),
            settled(&asks[1], ApprovalStatus::Answered),
        ]));
        assert_eq!(kinds(&out), ["await:1"]);
        let out = e.apply(Input::Approvals(vec![settled(
            &asks[0],
            ApprovalStatus::Rejected,
        )]));
        // a: rejected (answered at once), q: answered, b: runs.
        assert_eq!(kinds(&out), ["commit", "run:file_write"]);
        assert_eq!(run_of(&out).call_id, "b");
        let r = results(&e);
        assert!(r[0].1, "a was rejected");
        assert_eq!(
            r[1],
            ("blue".to_string(), false),
            "the answer is the result"
        );
    }

    #[test]
    fn an_expired_request_is_a_rejection_and_is_traced_once_with_the_settling_commit() {
        let mut e = Engine::new(gated());
        e.apply(message(1));
        let out = e.apply(llm(vec![append_call("w")], 0.0));
        let asks = ask_of(&out);
        let out = e.apply(Input::Approvals(vec![settled(
            &asks[0],
            ApprovalStatus::Expired,
        )]));
        assert_eq!(
            kinds(&out),
            ["commit", "event:approval_expired", "call_llm"],
            "the expiry rides on the commit that stores the turn going on"
        );
        let (text, is_error) = &results(&e)[0];
        assert!(*is_error && text.contains("expired"), "{text}");
    }

    #[test]
    fn a_restart_while_waiting_keeps_the_response_and_waits_again_even_in_truncate_mode() {
        let cfg = gated();
        assert_eq!(cfg.resume, ResumeMode::Truncate);
        let mut first = Engine::new(cfg.clone());
        first.apply(message(1));
        let out = first.apply(llm(vec![read_call("r"), append_call("w")], 0.0));
        let asks = ask_of(&out);
        let mut restored = stored(&first);
        restored.approvals = vec![settled(&asks[0], ApprovalStatus::Pending)];
        let mut second = second_boot(cfg.clone());
        let out = second.apply(Input::Restored(Some(restored.clone())));
        assert_eq!(
            kinds(&out),
            ["event:resume", "event:turn_resumed", "await:1"],
            "no cut, no commit, no second request"
        );
        // Decided while no runner held the thread: the next boot runs it.
        restored.approvals = vec![settled(&asks[0], ApprovalStatus::Approved)];
        let mut third = Engine::new(EngineConfig { epoch: 3, ..cfg });
        let out = third.apply(Input::Restored(Some(restored)));
        assert_eq!(
            kinds(&out),
            [
                "event:resume",
                "event:turn_resumed",
                "commit",
                "run:file_read"
            ]
        );
        assert_eq!(commits(&out)[0].intents.len(), 1);
    }

    #[test]
    fn an_approved_write_that_ran_before_a_crash_is_not_asked_again_or_repeated() {
        let cfg = gated();
        let mut first = Engine::new(cfg.clone());
        first.apply(message(1));
        let out = first.apply(llm(vec![append_call("w")], 0.0));
        let asks = ask_of(&out);
        let out = first.apply(Input::Approvals(vec![settled(
            &asks[0],
            ApprovalStatus::Approved,
        )]));
        let write = run_of(&out);
        // Crash after the intent, before the outcome.
        let mut restored = stored(&first);
        restored.approvals = vec![settled(&asks[0], ApprovalStatus::Approved)];
        restored.ledger = vec![record(&write, ToolCallStatus::Intent, 1)];
        let mut second = second_boot(cfg);
        let out = second.apply(Input::Restored(Some(restored)));
        assert!(ask_of(&out).is_empty());
        assert_eq!(run_of(&out).decision, Decision::OutcomeUnknown);
    }

    #[test]
    fn a_turn_resumed_under_a_new_gate_asks_before_the_call_runs() {
        // Stored by a runner whose agentfile gated nothing.
        let cfg = EngineConfig {
            resume: ResumeMode::Complete,
            ..config()
        };
        let mut first = Engine::new(cfg.clone());
        first.apply(message(1));
        first.apply(llm(vec![read_call("r"), append_call("w")], 0.0));
        let mut second = second_boot(EngineConfig {
            approval: gated().approval,
            ..cfg
        });
        let out = second.apply(Input::Restored(Some(stored(&first))));
        assert_eq!(
            kinds(&out),
            ["event:resume", "event:turn_resumed", "commit", "await:1"]
        );
        let plan = commits(&out)[0];
        assert_eq!(plan.state.status, ThreadStatus::Waiting);
        assert_eq!(plan.approvals[0].call_id, "w");
    }

    #[test]
    fn an_agent_without_gates_still_asks_its_questions() {
        let mut e = Engine::new(EngineConfig {
            tools: gated().tools,
            ..config()
        });
        e.apply(message(1));
        let out = e.apply(llm(vec![append_call("w"), question("q")], 0.0));
        let asks = ask_of(&out);
        assert_eq!(asks.len(), 1);
        assert_eq!(asks[0].kind, ApprovalKind::Question);
    }
}
