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
        let input = preview(&content, 200);
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
        if let StoppedBy::Cancelled { seq, .. } = &by {
            self.state.take(*seq);
        }
        let (reply, not_run) = stop_texts(&by);
        let (anchor, last_assistant, _) = self.position();
        if let Some(a) = last_assistant {
            let (calls, answered) = self.calls_of(a);
            for index in answered..calls.len() {
                let call_id = calls[index].0.clone();
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
