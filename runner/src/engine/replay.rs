//! Replay mode (issue 42): every call of a known tool is answered by the tool oracle
//! (`ninetrix_proto::replay::answer`) from the recorded turn the current turn replays — the
//! recorded result for an identical call, the recorded answer for a question worded otherwise,
//! an error result starting with `NOT_RUN` for anything the recording does not have — without a
//! ledger intent, a request to a person or a handoff. The one call that runs is a differing read
//! with live reads on (and no approval gate in front of it: nobody is asked in a replay), through
//! the replay thread's own ledger as usual.

use ninetrix_agentfile::tools::ASK_HUMAN;
use ninetrix_proto::effects::Effect as EffectClass;
use ninetrix_proto::events::{ReplayAnswered, TraceEvent};
use ninetrix_proto::replay::{self as oracle, NOT_RUN, OracleAnswer, ReplayVerdict, ReplayedCall};

use super::{Effect, Engine, NextCall, PlannedCall};
use crate::ledger;
use crate::recording::Replay;

/// Where a call is in the turn and what the engine computed for it, for the oracle.
pub(super) struct Asked {
    /// The turn's anchor.
    pub(super) anchor: usize,
    /// The response the call is in.
    pub(super) message: usize,
    /// Its index among the response's calls.
    pub(super) index: usize,
    /// Earlier identical calls in the turn.
    pub(super) occurrence: usize,
    /// Its effect class, as the engine computes it.
    pub(super) effect: EffectClass,
    /// Whether it hands a task to a collaborator.
    pub(super) handoff: bool,
}

impl Engine {
    /// How replay mode answers the call `call_id` (`name` with `args`): `Some` — answered
    /// without running, with its `replay_answered` event — or `None`: run it live (a differing
    /// read with live reads on that no approval gate catches).
    pub(super) fn replay_answer(
        &self,
        replay: &Replay,
        asked: &Asked,
        call_id: &str,
        name: &str,
        args: &serde_json::Value,
    ) -> Option<NextCall> {
        let question = (name == ASK_HUMAN).then(|| {
            self.earlier_calls(asked.anchor, asked.message, asked.index, |n, _| {
                n == ASK_HUMAN
            })
        });
        let call = ReplayedCall {
            name,
            args,
            occurrence: asked.occurrence,
            question,
            effect: asked.effect,
            handoff: asked.handoff,
        };
        let answer = match replay.turn_for(self.state.turn_input()) {
            Some(turn) => oracle::answer(&turn.calls, &call, replay.live_reads),
            None => OracleAnswer::Answer {
                verdict: ReplayVerdict::NotRun,
                content: format!(
                    "{NOT_RUN}, and this turn (inbox message {}) has no recorded turn to answer \
                     `{name}` from. Go on without it.",
                    self.state.turn_input()
                ),
                is_error: true,
            },
        };
        let gated = self
            .cfg
            .approval
            .as_ref()
            .is_some_and(|h| h.gates(name, asked.effect));
        let (verdict, content, is_error) = match answer {
            OracleAnswer::Answer {
                verdict,
                content,
                is_error,
            } => (verdict, content, is_error),
            OracleAnswer::RunLive if !gated => return None,
            OracleAnswer::RunLive => (
                ReplayVerdict::NotRun,
                format!(
                    "{NOT_RUN}: `{name}` with these arguments is not in the recorded turn, and \
                     governance.human_approval gates it, so it would need a person's approval, \
                     which a replay never asks for. Go on without it."
                ),
                true,
            ),
        };
        Some(NextCall::Replayed {
            call_id: call_id.to_string(),
            content,
            is_error,
            answered: self.replay_event(name, args, verdict, asked.effect),
        })
    }

    /// The `replay_answered` event of a call. Its `args` are the call's arguments as JSON, in
    /// full: the driver previews them with the agent's secrets masked before the event goes
    /// anywhere (the engine never sees secret values).
    pub(super) fn replay_event(
        &self,
        name: &str,
        args: &serde_json::Value,
        verdict: ReplayVerdict,
        effect: EffectClass,
    ) -> ReplayAnswered {
        ReplayAnswered {
            name: name.to_string(),
            args: ledger::canonical_json(args),
            verdict,
            effect,
            turn_seq: self.state.turn_seq,
        }
    }

    /// Whether the current turn's call `call_id` was answered with a result taken from the
    /// recording (in replay mode).
    pub fn answered_from_recording(&self, call_id: &str) -> bool {
        self.from_recording.contains(call_id)
    }

    /// A replay answer joins the history; its `replay_answered` event is returned.
    pub(super) fn take_replayed(
        &mut self,
        call_id: &str,
        content: String,
        is_error: bool,
        answered: ReplayAnswered,
    ) -> Effect {
        if matches!(
            answered.verdict,
            ReplayVerdict::Recorded | ReplayVerdict::RecordedAnswer
        ) {
            self.from_recording.insert(call_id.to_string());
        }
        self.history
            .push(crate::history::tool_result(call_id, content, is_error));
        Effect::Event(TraceEvent::ReplayAnswered(answered))
    }

    /// In replay mode, the `replay_answered` event of a call about to run: the one kind a
    /// replay runs, a read the recording does not have (`live`).
    pub(super) fn live_event(&self, call: &PlannedCall) -> Option<Effect> {
        self.replaying().then(|| {
            Effect::Event(TraceEvent::ReplayAnswered(self.replay_event(
                &call.name,
                &call.args,
                ReplayVerdict::Live,
                call.effect,
            )))
        })
    }

    /// Whether the engine is in replay mode.
    pub(super) fn replaying(&self) -> bool {
        self.cfg.replay.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use ninetrix_proto::api::{
        BudgetPolicy, BudgetScope, BudgetSpent, RecordedCall, RecordedTurn, Usage,
    };
    use ninetrix_proto::effects::Effect as Class;
    use ninetrix_proto::replay::{NOT_RUN, ReplayVerdict};
    use serde_json::json;

    fn recorded(name: &str, args: serde_json::Value, result: &str) -> RecordedCall {
        RecordedCall {
            name: name.into(),
            args,
            result: result.into(),
            is_error: false,
            effect: Some(Class::Read),
            person: None,
        }
    }

    /// A recorded turn (for inbox message 1) with `calls`.
    fn turn(calls: Vec<RecordedCall>) -> RecordedTurn {
        RecordedTurn {
            turn_seq: 4,
            live: true,
            input: "go".into(),
            messages: Vec::new(),
            calls,
            answer: "done".into(),
            ok: true,
            usage: Usage::default(),
            latency_ms: None,
            model: None,
        }
    }

    /// `cfg` in replay mode, answering inbox message 1 from `calls`.
    fn replaying(cfg: EngineConfig, calls: Vec<RecordedCall>, live_reads: bool) -> EngineConfig {
        EngineConfig {
            replay: Some(Arc::new(Replay {
                recorded: vec![turn(calls)],
                live_reads,
            })),
            ..cfg
        }
    }

    fn write_args(content: &str) -> serde_json::Value {
        json!({"path": "log", "content": content, "mode": "append"})
    }

    fn answered(effects: &[Effect]) -> Vec<ReplayAnswered> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Event(TraceEvent::ReplayAnswered(a)) => Some(a.clone()),
                _ => None,
            })
            .collect()
    }

    fn no_intents_or_requests(effects: &[Effect]) {
        for plan in commits(effects) {
            assert!(plan.intents.is_empty(), "an intent: {:?}", plan.intents);
            assert!(plan.outcomes.is_empty(), "an outcome: {:?}", plan.outcomes);
            assert!(plan.approvals.is_empty(), "a request: {:?}", plan.approvals);
        }
    }

    #[test]
    fn identical_calls_get_the_recorded_results_without_running_or_a_ledger_record() {
        let calls = vec![
            recorded("file_read", json!({"path": "notes"}), "the notes"),
            recorded("file_write", write_args("x"), "appended 1 byte"),
        ];
        let mut e = Engine::new(replaying(config(), calls, false));
        let mut all = e.apply(message(1));
        let out = e.apply(llm(vec![read_call("r"), append_call("w")], 0.0));
        assert_eq!(
            kinds(&out),
            [
                "commit",
                "event:llm_call",
                "event:replay_answered",
                "event:replay_answered",
                "call_llm"
            ],
            "nothing runs"
        );
        all.extend(out);
        all.extend(e.apply(answer("done")));
        no_intents_or_requests(&all);
        let got = results(&e);
        assert_eq!(
            got,
            [
                ("the notes".to_string(), false),
                ("appended 1 byte".to_string(), false)
            ]
        );
        let events = answered(&all);
        assert_eq!(
            events
                .iter()
                .map(|a| (a.name.as_str(), a.verdict, a.effect, a.turn_seq))
                .collect::<Vec<_>>(),
            [
                ("file_read", ReplayVerdict::Recorded, Class::Read, 1),
                ("file_write", ReplayVerdict::Recorded, Class::Write, 1)
            ]
        );
        assert_eq!(
            events[0].args, r#"{"path":"notes"}"#,
            "whole, for the driver to mask"
        );
        assert!(e.answered_from_recording("r") && e.answered_from_recording("w"));
        assert!(matches!(
            all.last(),
            Some(Effect::TurnFinished { ok: true, .. })
        ));
        assert!(crate::history::validate(e.history()).is_ok());
    }

    #[test]
    fn a_write_the_recording_does_not_have_is_not_run_and_the_turn_goes_on() {
        let calls = vec![recorded("file_write", write_args("x"), "appended")];
        let mut e = Engine::new(replaying(config(), calls, true));
        let mut all = e.apply(message(1));
        // Other content: another write, even with live reads on.
        let out = e.apply(llm(vec![append_of("w", "y")], 0.0));
        assert_eq!(
            kinds(&out),
            [
                "commit",
                "event:llm_call",
                "event:replay_answered",
                "call_llm"
            ]
        );
        all.extend(out);
        all.extend(e.apply(answer("done")));
        no_intents_or_requests(&all);
        let (text, is_error) = &results(&e)[0];
        assert!(*is_error && text.starts_with(NOT_RUN), "{text}");
        assert_eq!(answered(&all)[0].verdict, ReplayVerdict::NotRun);
        assert!(!e.answered_from_recording("w"));
    }

    #[test]
    fn a_differing_read_runs_live_only_with_live_reads() {
        let calls = vec![recorded("file_read", json!({"path": "other"}), "x")];
        let mut e = Engine::new(replaying(config(), calls.clone(), true));
        e.apply(message(1));
        let out = e.apply(llm(vec![read_call("r")], 0.0));
        assert_eq!(
            kinds(&out),
            [
                "commit",
                "event:llm_call",
                "event:replay_answered",
                "run:file_read"
            ]
        );
        assert_eq!(answered(&out)[0].verdict, ReplayVerdict::Live);
        let run = run_of(&out);
        assert_eq!(run.decision, Decision::Execute { again: false });
        e.apply(result("r"));
        let out = e.apply(answer("done"));
        let plan = commits(&out)[0];
        assert_eq!(
            (plan.intents.len(), plan.outcomes.len()),
            (1, 1),
            "the live read is in the replay's own ledger"
        );

        let mut e = Engine::new(replaying(config(), calls, false));
        e.apply(message(1));
        let out = e.apply(llm(vec![read_call("r")], 0.0));
        assert_eq!(kinds(&out).last().map(String::as_str), Some("call_llm"));
        assert_eq!(answered(&out)[0].verdict, ReplayVerdict::NotRun);
        let (text, is_error) = &results(&e)[0];
        assert!(*is_error && text.starts_with(NOT_RUN) && text.contains("live reads"));
    }

    #[test]
    fn questions_and_gated_calls_ask_nobody() {
        let mut asked = recorded("ask_human", json!({"question": "which colour?"}), "blue");
        asked.effect = None;
        let calls = vec![asked, recorded("file_write", write_args("x"), "appended")];
        // Every write gated, live reads on: the gate never asks.
        let mut e = Engine::new(replaying(gated(), calls, true));
        let mut all = e.apply(message(1));
        let out = e.apply(llm(
            vec![
                Block::ToolCall {
                    id: "q".into(),
                    name: "ask_human".into(),
                    args: json!({"question": "what colour, please?"}),
                },
                append_call("w"),
                read_call("r"),
            ],
            0.0,
        ));
        assert!(
            !kinds(&out).iter().any(|k| k.starts_with("await")),
            "{:?}",
            kinds(&out)
        );
        all.extend(out);
        all.extend(e.apply(answer("done")));
        no_intents_or_requests(&all);
        assert_eq!(
            answered(&all).iter().map(|a| a.verdict).collect::<Vec<_>>(),
            [
                ReplayVerdict::RecordedAnswer,
                ReplayVerdict::Recorded,
                ReplayVerdict::Live
            ]
        );
        let got = results(&e);
        assert_eq!(got[0], ("blue".to_string(), false));
        assert_eq!(got[1], ("appended".to_string(), false));

        // A read a gate holds would need a person: not run, even with live reads.
        let mut cfg = replaying(gated(), Vec::new(), true);
        cfg.approval.as_mut().unwrap().effects = vec![Class::Read];
        let mut e = Engine::new(cfg);
        e.apply(message(1));
        let out = e.apply(llm(vec![read_call("r")], 0.0));
        no_intents_or_requests(&out);
        assert_eq!(answered(&out)[0].verdict, ReplayVerdict::NotRun);
        assert!(results(&e)[0].0.contains("human_approval"));
    }

    #[test]
    fn a_call_to_a_collaborator_is_answered_from_the_recording_never_handed_over() {
        let cfg = EngineConfig {
            tools: vec![ToolSpec::handoff("b", None)],
            ..config()
        };
        let task = json!({"task": "sum it"});
        let calls = vec![recorded("ask_b", task.clone(), "42")];
        let mut e = Engine::new(replaying(cfg, calls, true));
        let mut all = e.apply(message(1));
        let ask = |id: &str, args: serde_json::Value| Block::ToolCall {
            id: id.into(),
            name: "ask_b".into(),
            args,
        };
        let out = e.apply(llm(
            vec![ask("same", task), ask("other", json!({"task": "do more"}))],
            0.0,
        ));
        assert!(
            !kinds(&out).iter().any(|k| k.starts_with("delegate")),
            "{:?}",
            kinds(&out)
        );
        all.extend(out);
        all.extend(e.apply(answer("done")));
        no_intents_or_requests(&all);
        let got = results(&e);
        assert_eq!(got[0], ("42".to_string(), false));
        assert!(got[1].1 && got[1].0.starts_with(NOT_RUN));
    }

    #[test]
    fn a_turn_without_a_recorded_turn_runs_nothing() {
        let calls = vec![recorded("file_read", json!({"path": "notes"}), "the notes")];
        let mut e = Engine::new(replaying(config(), calls, true));
        e.apply(message(2));
        let out = e.apply(llm(vec![read_call("r")], 0.0));
        assert_eq!(kinds(&out).last().map(String::as_str), Some("call_llm"));
        let (text, is_error) = &results(&e)[0];
        assert!(*is_error && text.contains("no recorded turn"), "{text}");
    }

    #[test]
    fn a_spent_budget_stops_a_replayed_turn_without_asking_for_a_raise() {
        let cfg = EngineConfig {
            budgets: Some(BudgetPolicy {
                per_session_usd: Some(2.0),
                per_day_usd: Some(5.0),
                pool_per_day_usd: None,
                timezone: "UTC".into(),
            }),
            on_budget_exceeded: OnBudgetExceeded::AskHuman,
            ..replaying(config(), Vec::new(), false)
        };
        let mut e = Engine::new(cfg);
        e.apply(message(1));
        let out = e.apply(Input::OverBudget(BudgetSpent {
            scope: BudgetScope::Session,
            limit_usd: 2.0,
            spent_usd: 2.01,
            raised_usd: 0.0,
        }));
        no_intents_or_requests(&out);
        assert!(
            matches!(out.last(), Some(Effect::TurnFinished { ok: false, .. })),
            "{:?}",
            kinds(&out)
        );
    }

    #[test]
    fn a_resumed_replayed_turn_answers_its_unstored_calls_from_the_recording_again() {
        let calls = vec![
            recorded("file_read", json!({"path": "notes"}), "the notes"),
            recorded("file_write", write_args("x"), "appended"),
        ];
        // `complete`: the response whose calls were not all answered is kept and its calls go on.
        let cfg = EngineConfig {
            resume: ResumeMode::Complete,
            ..replaying(config(), calls, false)
        };
        let mut e = Engine::new(cfg.clone());
        e.apply(message(1));
        e.apply(llm(vec![read_call("r")], 0.0));
        // Crash: the read's answer was not stored.
        let mut stored = stored(&e);
        stored.history.truncate(2);
        let mut again = second_boot(cfg);
        let mut all = again.apply(Input::Restored(Some(stored)));
        assert_eq!(
            answered(&all).iter().map(|a| a.verdict).collect::<Vec<_>>(),
            [ReplayVerdict::Recorded]
        );
        all.extend(again.apply(llm(vec![append_call("w")], 0.0)));
        all.extend(again.apply(answer("done")));
        no_intents_or_requests(&all);
        assert!(
            !kinds(&all).iter().any(|k| k.starts_with("run:")),
            "{:?}",
            kinds(&all)
        );
        assert_eq!(results(&again)[1], ("appended".to_string(), false));
    }
}
