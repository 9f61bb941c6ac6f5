//! A restored thread: the history repaired against the turn's anchor (unless a response is pinned
//! by its requests to people or its handoffs), a crash-looping turn given up, and an interrupted
//! turn resumed on the same code path as a fresh one.

use ninetrix_agentfile::ResumeMode;
use ninetrix_proto::Role;
use ninetrix_proto::api::ThreadStatus;
use ninetrix_proto::events::{Repair as RepairEvent, Resume, TraceEvent, TurnResumed};

use super::{Effect, Engine, Restored, event, in_turn};
use crate::history::{self, Repair};
use crate::ledger::Entry;

impl Engine {
    pub(super) fn restore(&mut self, restored: Restored) -> Vec<Effect> {
        let Restored {
            history,
            state,
            ledger,
            approvals,
            give_up,
            stop,
        } = restored;
        self.persisted = history.len();
        self.history = history;
        self.state = state;
        self.ledger = ledger
            .iter()
            .filter(|r| r.turn_seq == self.state.turn_seq)
            .map(|r| (r.key.clone(), Entry::from(r)))
            .collect();
        self.requests.clear();
        self.learn(approvals);
        let mut out = Vec::new();
        let anchor = self.state.turn_start_history_len as usize;
        // A response that asked people, or handed a task to a collaborator, is kept whatever the
        // resume mode: its requests and handoffs pin it (a new response would ask again, or
        // delegate a second time).
        let last = self.history.iter().rposition(|m| m.role == Role::Assistant);
        let pinned =
            last.is_some_and(|l| self.asked(l) || (l >= anchor && self.handed_over(anchor, l)));
        // A turn that is stopped, not resumed, keeps its last response too: each of its calls is
        // then answered for what it is (not run, or outcome unknown) instead of vanishing.
        let mode = if pinned || stop.is_some() {
            ResumeMode::Complete
        } else {
            self.cfg.resume
        };
        let Repair {
            history: repaired,
            truncate_to,
            dropped,
            pending_calls,
        } = history::repair(&self.history, anchor, mode);
        if let Some(cut) = truncate_to {
            self.history = repaired;
            self.truncate = Some(cut);
            self.persisted = cut;
            self.state.turn_start_history_len = self
                .state
                .turn_start_history_len
                .min(self.history.len() as u64);
            // The repair is a version of its own: stored before the turn goes on.
            out.push(self.commit());
            out.push(event(TraceEvent::Repair(RepairEvent {
                truncate_to: cut as u64,
                dropped,
                mode: mode.as_str().to_string(),
            })));
        }
        if !pending_calls.is_empty() {
            out.push(event(TraceEvent::Resume(Resume { pending_calls })));
        }
        if let Some(restarts) = give_up.filter(|_| self.state.status == ThreadStatus::InTurn) {
            let reply = format!(
                "I gave up on this message: my runner was restarted {restarts} times while working \
                 on it (a crash each time, or a stop), more than a turn gets. \
                 A tool call it had started may or may not have run; `ninetrix trace` shows what \
                 did. Send the message again to try again."
            );
            out.extend(self.stop_turn_with(
                &reply,
                "Not finished: the turn was given up after repeated restarts (this call may or may not have run).",
            ));
            return out;
        }
        if let Some(by) = stop.filter(|_| in_turn(self.state.status)) {
            // The control that stops the turn is still in the inbox: the turn ends here, it is
            // not run again.
            out.extend(self.on_stop(by));
            return out;
        }
        if in_turn(self.state.status) {
            out.push(event(TraceEvent::TurnResumed(TurnResumed {
                turn_seq: self.state.turn_seq,
                seq: self.state.inbox_cursor,
            })));
            out.extend(self.advance());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use crate::history;
    use ninetrix_proto::api::ToolCallStatus;

    #[test]
    fn a_turn_through_more_restarts_than_its_budget_is_given_up() {
        use ThreadStatus::{Idle, InTurn, Waiting};
        let budget = TURN_RESTARTS;
        assert_eq!(crash_looping(InTurn, 1, 4, budget), None, "3 restarts");
        assert_eq!(crash_looping(InTurn, 1, 5, budget), Some(4));
        assert_eq!(crash_looping(InTurn, 1, 5, 10), None, "a larger budget");
        assert_eq!(crash_looping(Waiting, 1, 50, budget), None, "a person");
        assert_eq!(crash_looping(Idle, 1, 50, budget), None);
        assert_eq!(crash_looping(InTurn, 0, 50, budget), None, "older runner");

        let mut first = Engine::new(config());
        first.apply(message(1));
        let out = first.apply(llm(vec![append_call("c1")], 0.0));
        let original = run_of(&out);
        let mut restored = stored(&first);
        restored.ledger = vec![record(&original, ToolCallStatus::Intent, 1)];
        restored.give_up = Some(4);
        let mut second = second_boot(first.cfg.clone());
        let out = second.apply(Input::Restored(Some(restored)));
        assert!(
            !kinds(&out)
                .iter()
                .any(|k| k == "event:turn_resumed" || k == "call_llm"),
            "not resumed: {:?}",
            kinds(&out)
        );
        let plan = commits(&out).last().copied().unwrap();
        assert_eq!(plan.state.status, ThreadStatus::Idle, "the turn is over");
        let Some(Effect::TurnFinished { reply, ok, .. }) = out.last() else {
            panic!("{:?}", kinds(&out))
        };
        assert!(!ok && reply.contains("restarted 4 times"), "{reply}");
        // The reply is for the caller, not the model.
        model_never_reads(&second, "restarted 4 times");
        assert!(
            history::validate(second.history()).is_ok(),
            "every call answered: {:?}",
            second.history()
        );
    }

    #[test]
    fn a_restored_turn_with_an_orphaned_call_is_repaired_and_rerun_with_the_same_keys() {
        let mut first = Engine::new(config());
        first.apply(message(1));
        let out = first.apply(llm(vec![append_call("c1")], 0.0));
        let original = run_of(&out);
        // Crash while the write runs: the response and the intent are stored, the result not.
        let mut restored = stored(&first);
        restored.ledger = vec![record(&original, ToolCallStatus::Intent, 1)];
        let mut second = second_boot(first.cfg.clone());
        let out = second.apply(Input::Restored(Some(restored)));
        assert_eq!(
            kinds(&out),
            ["commit", "event:repair", "event:turn_resumed", "call_llm"]
        );
        let plan = commits(&out)[0];
        assert_eq!((plan.truncate_to, plan.append.len()), (Some(1), 0));
        // The model asks again (a new provider ID): same key, and the write is not run again.
        let out = second.apply(llm(vec![append_call("c9")], 0.0));
        let again = run_of(&out);
        assert_eq!(again.key, original.key);
        assert_eq!(again.decision, Decision::OutcomeUnknown);
        assert!(
            commits(&out)[0].intents.is_empty(),
            "a key the ledger holds is not recorded again"
        );
        let out = second.apply(Input::Tool {
            call_id: "c9".into(),
            content: "unknown".into(),
            is_error: true,
        });
        assert_eq!(
            kinds(&out),
            ["call_llm"],
            "the same answer on every boot: no write"
        );
        let out = second.apply(answer("checked"));
        let plan = commits(&out)[0];
        assert_eq!(plan.outcomes.len(), 1, "the unknown outcome is recorded");
        assert_eq!(
            (plan.outcomes[0].key.as_str(), plan.outcomes[0].ok),
            (original.key.as_str(), false)
        );
    }

    #[test]
    fn a_completed_call_is_replayed_and_writes_nothing() {
        let mut first = Engine::new(config());
        first.apply(message(1));
        let original = run_of(&first.apply(llm(vec![append_call("c1")], 0.0)));
        let mut restored = stored(&first);
        restored.ledger = vec![record(&original, ToolCallStatus::Completed, 1)];
        let mut second = second_boot(first.cfg.clone());
        second.apply(Input::Restored(Some(restored)));
        let out = second.apply(llm(vec![append_call("c2")], 0.0));
        let replay = run_of(&out);
        assert!(matches!(replay.decision, Decision::Replay { .. }));
        let out = second.apply(result("c2"));
        assert_eq!(kinds(&out), ["call_llm"]);
        let out = second.apply(answer("done"));
        let plan = commits(&out)[0];
        assert!(plan.intents.is_empty() && plan.outcomes.is_empty());
    }

    #[test]
    fn a_restored_turn_whose_answer_was_stored_just_finishes() {
        let mut first = Engine::new(config());
        first.apply(message(1));
        first.apply(answer("answer"));
        let mut restored = stored(&first);
        restored.state.status = ThreadStatus::InTurn; // stored by an older runner, mid-turn
        let mut second = second_boot(config());
        let out = second.apply(Input::Restored(Some(restored)));
        assert_eq!(
            kinds(&out),
            [
                "event:turn_resumed",
                "commit",
                "event:turn_completed",
                "finished"
            ]
        );
    }

    #[test]
    fn complete_mode_runs_only_the_calls_that_never_finished() {
        let cfg = EngineConfig {
            resume: ResumeMode::Complete,
            ..config()
        };
        let mut first = Engine::new(cfg.clone());
        first.apply(message(1));
        let a = run_of(&first.apply(llm(vec![append_of("a", "1"), append_of("b", "2")], 0.0)));
        let b = run_of(&first.apply(result("a")));
        // Crash before b ran: a's outcome and b's intent are stored.
        let mut restored = stored(&first);
        restored.ledger = vec![
            record(&a, ToolCallStatus::Completed, 1),
            record(&b, ToolCallStatus::Intent, 1),
        ];
        let mut second = second_boot(cfg);
        let out = second.apply(Input::Restored(Some(restored)));
        assert_eq!(
            kinds(&out),
            ["event:resume", "event:turn_resumed", "run:file_write"]
        );
        let call = run_of(&out);
        assert_eq!(
            (call.call_id.as_str(), call.decision),
            ("b", Decision::OutcomeUnknown),
            "no new model call; the pending write is reported, not repeated"
        );
    }

    #[test]
    fn a_resumed_write_without_a_stored_intent_gets_a_commit_before_it_runs() {
        let cfg = EngineConfig {
            resume: ResumeMode::Complete,
            ..config()
        };
        let mut first = Engine::new(cfg.clone());
        first.apply(message(1));
        let out = first.apply(llm(vec![read_call("r"), append_call("w")], 0.0));
        let write_key = commits(&out)[0].intents[0].key.clone();
        // Crash during the read: the response and the write's intent were stored... but say an
        // older runner stored the response alone (no intent): the write must not run unrecorded.
        let restored = stored(&first);
        let mut second = second_boot(cfg);
        let out = second.apply(Input::Restored(Some(restored)));
        let read = run_of(&out);
        assert_eq!(read.name, "file_read");
        assert_eq!(read.decision, Decision::Execute { again: false });
        let out = second.apply(result("r"));
        assert_eq!(kinds(&out), ["commit", "run:file_write"]);
        let plan = commits(&out)[0];
        assert_eq!(
            plan.intents
                .iter()
                .map(|i| i.key.as_str())
                .collect::<Vec<_>>(),
            [read.key.as_str(), write_key.as_str()]
        );
        assert_eq!(plan.outcomes.len(), 1, "the read's outcome rides along");
    }
}
