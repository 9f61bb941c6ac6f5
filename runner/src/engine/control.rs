//! Control of a running turn (docs/runner.md, "Steer, interrupt, cancel"): a steer joins the
//! turn as a user message before its next model round; an interrupt or a cancel stops it — the
//! call in flight (if any) is let finish first, every call not run is answered so the history
//! stays valid for every provider, and the turn ends with `turn_completed` naming what stopped
//! it. A cancel found with no turn running does nothing, and says so.
//!
//! Exactly once, across crashes: a steer is taken (`CheckpointState::take`) in the same commit
//! that stores it in the history; a cancel in the commit that ends the turn; an interrupt is
//! never taken by the turn it stops — it is the next turn's input, taken by that turn's first
//! commit — so a runner that dies before the stopped turn's last commit resumes the turn, sees
//! the same message still waiting, and stops it again; one that dies after finds no turn to
//! stop.

use ninetrix_proto::events::{CancelMissed, Steered, StoppedBy, TraceEvent};
use ninetrix_proto::{Message, Role};

use super::{Effect, Engine, event, in_turn, preview};
use crate::history;
use crate::ledger::Decision;

impl Engine {
    /// A message sent with mode `steer` while this turn runs: it joins the history now, so the
    /// next model round reads it, and is stored (and taken) with that round's commit. `None`
    /// when there is no turn to join (the driver then takes it as the next turn's message).
    pub(super) fn on_steer(&mut self, seq: u64, content: String) -> Vec<Effect> {
        if !in_turn(self.state.status) || self.stopping.is_some() || self.state.taken(seq) {
            return Vec::new();
        }
        // Only at a boundary: while calls of the last response wait for results, a message
        // between them would break the history (the driver steers before a model round).
        if let (_, Some(a), _) = self.position() {
            let (calls, answered) = self.calls_of(a);
            if answered < calls.len() {
                return Vec::new();
            }
        }
        let input = preview(&content, 200);
        self.steered.push((seq, self.history.len()));
        self.history.push(Message::text(Role::User, content));
        self.state.take(seq);
        vec![event(TraceEvent::Steered(Steered {
            turn_seq: self.state.turn_seq,
            seq,
            input,
        }))]
    }

    /// An interrupt or a cancel for the running turn. With a call in flight the turn ends once
    /// its result comes back (the driver gives it `execution.interrupt_grace`); otherwise now.
    /// (The driver says `turn_stopping` when it takes the control: it knows what still runs.)
    pub(super) fn on_stop(&mut self, by: StoppedBy) -> Vec<Effect> {
        if !in_turn(self.state.status) || self.stopping.is_some() {
            return Vec::new();
        }
        self.stopping = Some(by);
        if self.in_flight.is_none() {
            return self.end_stopped();
        }
        Vec::new()
    }

    /// A failed or stopped turn's history was cut back to `keep` before anything after it was
    /// stored: the steers it cut are given back to the inbox, so they start the next turn
    /// instead of being lost.
    pub(super) fn give_back_steers(&mut self, keep: usize) {
        let cut: Vec<u64> = self
            .steered
            .iter()
            .filter(|(_, at)| *at >= keep)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in cut {
            self.state.untake(seq);
        }
        self.steered.retain(|(_, at)| *at < keep);
    }

    /// Whether the turn is being stopped (its call in flight is the last thing it does).
    pub fn stopping(&self) -> Option<&StoppedBy> {
        self.stopping.as_ref()
    }

    /// A cancel taken with no turn running: moved past, with the event that says it stopped
    /// nothing.
    pub(super) fn cancel_missed(&mut self, seq: u64, by: String) -> Vec<Effect> {
        self.state.take(seq);
        vec![
            self.commit(),
            event(TraceEvent::CancelMissed(CancelMissed {
                seq,
                by,
                last_turn: self.state.turn_seq,
            })),
        ]
    }

    /// Ends a stopped turn: each call of the last response that has no result gets one — "not
    /// run" for a call that never started, "outcome unknown" for a `write` an earlier runner
    /// may have started (its outcome recorded, so it is never run again) — and the turn is
    /// finished with what stopped it. A cancel is taken in the same commit.
    pub(super) fn end_stopped(&mut self) -> Vec<Effect> {
        let Some(by) = self.stopping.clone() else {
            return Vec::new();
        };
        match &by {
            StoppedBy::Cancelled { seq, .. } => self.state.take(*seq),
            // The interrupt is the next turn's input, whatever is queued ahead of it.
            StoppedBy::Interrupted { seq } => self.state.next_message = Some(*seq),
        }
        let (reply, not_run) = stop_texts(&by);
        let (anchor, last_assistant, _) = self.position();
        if let Some(a) = last_assistant {
            let (calls, answered) = self.calls_of(a);
            for (index, (call_id, _, _)) in calls.iter().enumerate().skip(answered) {
                let call_id = call_id.clone();
                if let Some((content, is_error)) = self.delegated.remove(&call_id) {
                    // A collaborator's answer that came in: that work was done.
                    self.history
                        .push(history::tool_result(&call_id, content, is_error));
                    continue;
                }
                let (content, unknown) = match self.plan(anchor, a, index) {
                    super::NextCall::Known(call) if call.decision == Decision::OutcomeUnknown => {
                        (UNKNOWN.to_string(), Some(call.key))
                    }
                    super::NextCall::Known(call) if self.ledger.contains_key(&call.key) => {
                        // Its intent is stored (it rode on a commit), but it never ran.
                        (not_run.clone(), Some(call.key))
                    }
                    _ => (not_run.clone(), None),
                };
                if let Some(key) = unknown {
                    self.record_outcome(ninetrix_proto::api::CommitOutcome {
                        key,
                        ok: false,
                        result: content.clone(),
                    });
                }
                self.history
                    .push(history::tool_result(&call_id, content, true));
            }
        }
        self.end_turn(&reply, false, &not_run)
    }
}

/// What a `write` started before a restart and stopped before it was checked is answered.
const UNKNOWN: &str = "Interrupted: this call was started before a restart and its outcome is \
                       unknown (it may or may not have run); check before doing it again.";

/// What a call the stopped turn never started is answered.
pub fn not_run(by: &StoppedBy) -> String {
    stop_texts(by).1
}

/// The reply of a stopped turn, and what each call it did not run is answered.
fn stop_texts(by: &StoppedBy) -> (String, String) {
    match by {
        StoppedBy::Interrupted { seq } => (
            format!("Interrupted by message {seq}."),
            format!("Not run: interrupted before it ran (message {seq} interrupted the turn)."),
        ),
        StoppedBy::Cancelled { by, .. } => (
            format!("Cancelled by {by}."),
            format!("Not run: the turn was cancelled by {by} before it ran."),
        ),
    }
}

/// What a tool call that was still running when its turn was stopped, and did not finish within
/// `execution.interrupt_grace`, is answered: a `write` (whose outcome is then recorded as this,
/// so it never runs again) or any other call.
pub fn stopped_while_running(write: bool, grace_secs: u64) -> String {
    if write {
        format!(
            "Stopped: the turn was interrupted while this call ran and it did not finish within \
             {grace_secs} s (execution.interrupt_grace); its outcome is unknown (it may or may \
             not have taken effect)."
        )
    } else {
        format!(
            "Stopped: the turn was interrupted while this call ran and it did not finish within \
             {grace_secs} s (execution.interrupt_grace)."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use crate::llm::wire_rules;
    use ninetrix_proto::api::ToolCallStatus;

    fn interrupted(seq: u64) -> Input {
        Input::Stop(StoppedBy::Interrupted { seq })
    }

    fn cancelled(seq: u64) -> Input {
        Input::Stop(StoppedBy::Cancelled {
            seq,
            by: "ana".into(),
        })
    }

    fn completed(out: &[Effect]) -> ninetrix_proto::events::TurnCompleted {
        out.iter()
            .find_map(|e| match e {
                Effect::Event(TraceEvent::TurnCompleted(t)) => Some(t.clone()),
                _ => None,
            })
            .expect("turn_completed")
    }

    #[test]
    fn a_steer_joins_the_turn_before_its_next_round_and_is_taken_with_that_rounds_commit() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        let out = e.apply(llm(vec![read_call("r1")], 0.0));
        assert_eq!(kinds(&out), ["commit", "event:llm_call", "run:file_read"]);
        let steer = || Input::Steer {
            seq: 2,
            content: "also check the logs".into(),
        };
        assert!(e.apply(steer()).is_empty(), "not while the read runs");
        assert_eq!(kinds(&e.apply(result("r1"))), ["call_llm"]);
        let out = e.apply(steer());
        assert_eq!(kinds(&out), ["event:steered"]);
        assert!(
            e.state().taken(2),
            "taken in memory, stored with the next commit"
        );
        assert_eq!(
            e.apply(Input::Steer {
                seq: 2,
                content: "again".into()
            }),
            vec![],
            "a steer is applied once"
        );
        let out = e.apply(answer("done, logs too"));
        let plan = commits(&out)[0];
        let roles: Vec<Role> = plan.append.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::Tool, Role::User, Role::Assistant],
            "the read's result, the steer, the answer: one commit"
        );
        assert_eq!(
            (plan.state.inbox_cursor, plan.state.status),
            (2, ThreadStatus::Idle)
        );
        assert_eq!(completed(&out).seq, 1, "the turn still answers its message");
        wire_rules::accepted(e.history()).unwrap();
    }

    #[test]
    fn a_steer_between_turns_is_left_for_the_next_turn() {
        let mut e = Engine::new(config());
        assert!(
            e.apply(Input::Steer {
                seq: 1,
                content: "x".into()
            })
            .is_empty()
        );
        assert!(!e.state().taken(1));
        assert!(e.apply(cancelled(1)).is_empty(), "nothing to stop");
    }

    #[test]
    fn an_interrupt_lets_the_call_in_flight_finish_and_answers_the_rest_not_run() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        let out = e.apply(llm(vec![append_call("c1"), read_call("r2")], 0.0));
        let c1 = run_of(&out);
        assert_eq!(
            e.apply(interrupted(5)),
            vec![],
            "the write in flight finishes first"
        );
        assert!(e.stopping().is_some());
        let out = e.apply(result("c1"));
        assert_eq!(
            kinds(&out),
            ["commit", "commit", "event:turn_completed", "finished"],
            "the write's outcome, then the end"
        );
        assert_eq!(
            commits(&out)[0].outcomes[0].key,
            c1.key,
            "recorded: never run again"
        );
        let done = completed(&out);
        assert_eq!(done.stopped_by, Some(StoppedBy::Interrupted { seq: 5 }));
        assert!(!done.ok);
        let answers = results(&e);
        assert_eq!(answers[0], ("result of c1".into(), false));
        assert!(
            answers[1].0.contains("interrupted before it ran") && answers[1].1,
            "{answers:?}"
        );
        assert!(
            !e.state().taken(5),
            "the interrupt is the next turn's message"
        );
        assert!(e.idle());
        wire_rules::accepted(e.history()).unwrap();
        model_never_reads(&e, "Interrupted by message 5");
    }

    #[test]
    fn a_cancel_during_a_model_call_ends_the_turn_now_and_is_taken_with_its_end() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        let out = e.apply(cancelled(3));
        assert_eq!(kinds(&out), ["commit", "event:turn_completed", "finished"]);
        let plan = commits(&out)[0];
        assert!(plan.state.taken(3) && plan.state.taken(1));
        assert!(
            plan.append.is_empty(),
            "the model never answered: the conversation stays as it was"
        );
        let done = completed(&out);
        assert_eq!(done.reply, "Cancelled by ana.");
        assert_eq!(
            done.stopped_by,
            Some(StoppedBy::Cancelled {
                seq: 3,
                by: "ana".into()
            })
        );
    }

    #[test]
    fn a_write_whose_intent_was_stored_but_never_ran_is_recorded_not_run() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        e.apply(llm(vec![append_call("c1"), append_of("c2", "y")], 0.0));
        e.apply(interrupted(4));
        let out = e.apply(result("c1"));
        // c1's outcome commit carried c2's intent (it would run next); c2 never ran.
        let c2_key = commits(&out)[0].intents[0].key.clone();
        let last = commits(&out).last().copied().unwrap();
        let recorded: Vec<&str> = last.outcomes.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(recorded, [c2_key.as_str()]);
        assert!(
            last.outcomes[0]
                .result
                .contains("interrupted before it ran")
        );
        wire_rules::accepted(e.history()).unwrap();
    }

    #[test]
    fn a_resumed_turn_with_its_cancel_waiting_stops_instead_of_running_again() {
        let mut first = Engine::new(config());
        first.apply(message(1));
        let out = first.apply(llm(vec![append_call("c1"), read_call("r2")], 0.0));
        let c1 = run_of(&out);
        // The runner died while c1 ran; a cancel came meanwhile.
        let mut restored = stored(&first);
        restored.ledger = vec![record(&c1, ToolCallStatus::Intent, 1)];
        restored.stop = Some(StoppedBy::Cancelled {
            seq: 2,
            by: "ana".into(),
        });
        let mut second = second_boot(first.cfg.clone());
        let out = second.apply(Input::Restored(Some(restored)));
        assert!(
            !kinds(&out)
                .iter()
                .any(|k| k.starts_with("run:") || k == "call_llm" || k == "event:turn_resumed"),
            "nothing runs again: {:?}",
            kinds(&out)
        );
        let last = commits(&out).last().copied().unwrap();
        assert_eq!(last.state.status, ThreadStatus::Idle);
        assert!(
            last.state.taken(2),
            "the cancel is taken with the turn's end"
        );
        assert_eq!(
            last.outcomes.iter().map(|o| &o.key).collect::<Vec<_>>(),
            [&c1.key],
            "the write it may have started: outcome unknown, recorded"
        );
        let answers = results(&second);
        assert!(answers[0].0.contains("outcome is unknown"), "{answers:?}");
        assert!(answers[1].0.contains("cancelled by ana before it ran"));
        assert_eq!(
            completed(&out).stopped_by,
            Some(StoppedBy::Cancelled {
                seq: 2,
                by: "ana".into()
            })
        );
        wire_rules::accepted(second.history()).unwrap();
    }

    #[test]
    fn a_cancel_between_turns_is_taken_and_says_it_stopped_nothing() {
        let mut e = Engine::new(config());
        drive(&mut e, vec![], vec![]);
        e.apply(message(1));
        e.apply(answer("hi"));
        let out = e.apply(Input::Control {
            seq: 2,
            control: ninetrix_proto::api::Control::Cancel,
            by: "ana".into(),
            to_turn: None,
        });
        assert_eq!(kinds(&out), ["commit", "event:cancel_missed"]);
        assert_eq!(commits(&out)[0].state.inbox_cursor, 2);
        assert!(commits(&out)[0].append.is_empty());
    }

    /// A runner as the driver runs the engine — taking inbox messages in order, steering before
    /// each model round, stopping at each boundary, a stop that is already there answering a
    /// call it would start as never run — over an inbox that receives queued messages, steers,
    /// interrupts and cancels at random moments, with crashes at random moments (the engine
    /// restored from the last commit and the inbox, as at boot).
    mod simulated {
        use super::super::super::testkit::*;
        use super::super::super::*;
        use crate::inbox::{self, ForTurn};
        use crate::llm::wire_rules;
        use ninetrix_proto::api::{Control, InboxMessage, MessageMode, ToolCallStatus};
        use proptest::prelude::{Strategy as Generate, prop, prop_assert, proptest};
        use std::collections::{HashMap, VecDeque};

        #[derive(Clone, Copy, Debug)]
        enum Act {
            Send(MessageMode),
            Cancel,
            Step,
            Crash,
        }

        fn act() -> impl Generate<Value = Act> {
            prop::sample::select(vec![
                Act::Send(MessageMode::Queue),
                Act::Send(MessageMode::Steer),
                Act::Send(MessageMode::Interrupt),
                Act::Cancel,
                Act::Step,
                Act::Step,
                Act::Step,
                Act::Step,
                Act::Step,
                Act::Crash,
            ])
        }

        struct World {
            inbox: Vec<InboxMessage>,
            history: Vec<Message>,
            state: ninetrix_proto::api::CheckpointState,
            ledger: HashMap<String, ToolCallRecord>,
            engine: Engine,
            queue: VecDeque<Effect>,
            epoch: u64,
            /// Writes executed, by ledger key.
            executed: HashMap<String, u32>,
            /// How each message was last applied: as a steer (`true`) or a turn's input.
            steered: HashMap<u64, bool>,
        }

        impl World {
            fn new() -> World {
                World {
                    inbox: Vec::new(),
                    history: Vec::new(),
                    state: Default::default(),
                    ledger: HashMap::new(),
                    engine: Engine::new(config()),
                    queue: VecDeque::new(),
                    epoch: 1,
                    executed: HashMap::new(),
                    steered: HashMap::new(),
                }
            }

            fn send(&mut self, mode: MessageMode, control: Option<Control>) {
                let seq = self.inbox.len() as u64 + 1;
                self.inbox.push(InboxMessage {
                    seq,
                    content: format!("m{seq}"),
                    dedupe_key: None,
                    created_at: chrono::DateTime::UNIX_EPOCH,
                    handoff: None,
                    control,
                    mode,
                    by: control.map(|_| "ana".to_string()),
                    to_turn: None,
                });
            }

            fn unread(&self) -> Vec<InboxMessage> {
                let cursor = self.engine.state().inbox_cursor;
                self.inbox
                    .iter()
                    .filter(|m| m.seq > cursor)
                    .cloned()
                    .collect()
            }

            fn crash(&mut self) {
                self.epoch += 1;
                self.queue.clear();
                self.engine = Engine::new(EngineConfig {
                    epoch: self.epoch,
                    ..config()
                });
                let in_turn = matches!(
                    self.state.status,
                    ThreadStatus::InTurn | ThreadStatus::Waiting
                );
                let after: Vec<InboxMessage> = self
                    .inbox
                    .iter()
                    .filter(|m| m.seq > self.state.inbox_cursor)
                    .cloned()
                    .collect();
                let restored =
                    (!self.history.is_empty() || self.state.turn_seq > 0).then(|| Restored {
                        history: self.history.clone(),
                        state: self.state.clone(),
                        ledger: self
                            .ledger
                            .values()
                            .filter(|r| r.turn_seq == self.state.turn_seq)
                            .cloned()
                            .collect(),
                        approvals: Vec::new(),
                        give_up: None,
                        stop: in_turn
                            .then(|| inbox::stop_for(&after, &self.state))
                            .flatten(),
                    });
                let effects = self.engine.apply(Input::Restored(restored));
                self.queue.extend(effects);
            }

            fn commit(&mut self, plan: CommitPlan) {
                if let Some(cut) = plan.truncate_to {
                    self.history.truncate(cut as usize);
                }
                self.history.extend(plan.append);
                self.state = plan.state;
                for i in plan.intents {
                    self.ledger.entry(i.key.clone()).or_insert(ToolCallRecord {
                        key: i.key,
                        turn_seq: i.turn_seq,
                        tool: i.tool,
                        args: i.args,
                        effect: i.effect,
                        status: ToolCallStatus::Intent,
                        result: None,
                        intent_epoch: self.epoch,
                        completed_epoch: None,
                        created_at: chrono::Utc::now(),
                        completed_at: None,
                    });
                }
                for o in plan.outcomes {
                    if let Some(r) = self.ledger.get_mut(&o.key) {
                        r.status = if o.ok {
                            ToolCallStatus::Completed
                        } else {
                            ToolCallStatus::Failed
                        };
                        r.result = Some(o.result);
                    }
                }
            }

            /// The first stop for the running turn, if one has arrived.
            fn stop(&self) -> Option<StoppedBy> {
                inbox::stop_for(&self.unread(), self.engine.state())
            }

            /// One step of the driver.
            fn step(&mut self) {
                let Some(effect) = self.queue.pop_front() else {
                    if !self.engine.idle() {
                        return;
                    }
                    let unread = self.unread();
                    let Some(m) = inbox::next(&unread, self.engine.state()).cloned() else {
                        return;
                    };
                    let effects = match m.control {
                        Some(control) => self.engine.apply(Input::Control {
                            seq: m.seq,
                            control,
                            by: "ana".into(),
                            to_turn: None,
                        }),
                        None => {
                            self.steered.insert(m.seq, false);
                            self.engine.apply(Input::Message {
                                seq: m.seq,
                                content: m.content,
                                handoff: None,
                            })
                        }
                    };
                    self.queue.extend(effects);
                    return;
                };
                let input = match effect {
                    Effect::Commit(plan) => return self.commit(*plan),
                    Effect::CallLlm => {
                        for action in inbox::for_turn(&self.unread(), self.engine.state()) {
                            match action {
                                ForTurn::Steer { seq, content } => {
                                    if !self.engine.apply(Input::Steer { seq, content }).is_empty()
                                    {
                                        self.steered.insert(seq, true);
                                    }
                                }
                                ForTurn::Stop(by) => {
                                    self.queue = self.engine.apply(Input::Stop(by)).into();
                                    return;
                                }
                            }
                        }
                        let (_, _, rounds) = self.engine.position();
                        if rounds == 0 {
                            llm(
                                vec![
                                    append_call(&format!("w{}", self.history.len())),
                                    read_call("r"),
                                ],
                                0.0,
                            )
                        } else {
                            answer("done")
                        }
                    }
                    Effect::RunTool(call) => {
                        if let Some(by) = self.stop()
                            && matches!(call.decision, Decision::Execute { .. })
                        {
                            self.queue
                                .extend(self.engine.apply(Input::Stop(by.clone())));
                            self.queue.extend(self.engine.apply(Input::Tool {
                                call_id: call.call_id,
                                content: not_run(&by),
                                is_error: true,
                            }));
                            return;
                        }
                        if call.effect == ninetrix_proto::effects::Effect::Write
                            && matches!(call.decision, Decision::Execute { .. })
                        {
                            *self.executed.entry(call.key.clone()).or_default() += 1;
                        }
                        result(&call.call_id)
                    }
                    Effect::Event(_) | Effect::TurnFinished { .. } => return,
                    other => panic!("not in this simulation: {other:?}"),
                };
                let effects = self.engine.apply(input);
                self.queue.extend(effects);
            }
        }

        proptest! {
            #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
            #[test]
            fn every_control_acts_once_and_every_history_is_valid(
                acts in prop::collection::vec(act(), 1..120)
            ) {
                let mut w = World::new();
                for a in acts {
                    match a {
                        Act::Send(mode) => w.send(mode, None),
                        Act::Cancel => w.send(MessageMode::Queue, Some(Control::Cancel)),
                        Act::Step => w.step(),
                        Act::Crash => w.crash(),
                    }
                }
                // Then the runner works until the inbox is done.
                for _ in 0..5_000 {
                    w.step();
                }
                prop_assert!(w.engine.idle() && w.queue.is_empty(), "the runner settled");
                prop_assert!(w.state.status == ThreadStatus::Idle, "the stored thread is idle");
                for m in &w.inbox {
                    prop_assert!(w.state.taken(m.seq), "message {} taken", m.seq);
                    let n = w
                        .history
                        .iter()
                        .filter(|h| h.role == Role::User && h.text_content() == m.content)
                        .count();
                    prop_assert!(n <= 1, "message {} in the history {n} times", m.seq);
                    if w.steered.get(&m.seq) == Some(&true) {
                        prop_assert!(n == 1, "a steer that joined a turn is never lost: message {}", m.seq);
                    }
                }
                for (key, n) in &w.executed {
                    prop_assert!(*n == 1, "write {key} executed {n} times");
                }
                prop_assert!(crate::history::validate(&w.history).is_ok());
                prop_assert!(wire_rules::accepted(&w.history).is_ok(), "{:?}", wire_rules::accepted(&w.history));
            }
        }
    }
}
