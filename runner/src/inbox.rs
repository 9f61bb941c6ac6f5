//! Which inbox message a runner takes next, and what a message that arrives while a turn runs
//! means for that turn — pure functions of the inbox (as read after the cursor) and the
//! thread's state (docs/runner.md, "Steer, interrupt, cancel").
//!
//! Messages are taken in inbox order: the turn running when a message arrives is the turn of
//! the earliest message not yet answered, whether its runner is alive or died before storing
//! anything of it — so a steer, an interrupt or a cancel (an *urgent* message) acts on the same
//! turn after a crash as before it: a steer joins it, an interrupt or a cancel stops it (at its
//! first boundary, before the model is asked, if it had not started). An interrupt that stopped
//! a turn is the next turn's input (`CheckpointState::next_message`), before messages queued
//! ahead of it. A cancel aimed at a handed-over task (it carries the task's handoff) waits until
//! the turn answering that task has started, so it stops that turn and no other.

use ninetrix_proto::api::{CheckpointState, Control, InboxMessage, MessageMode};
use ninetrix_proto::events::StoppedBy;

/// Who a cancel names when its sender gave no name.
pub const ANONYMOUS: &str = "an operator";

/// The message a runner between turns takes next from `inbox` (messages after its cursor):
/// the interrupt that stopped the last turn, else the first in order (a cancel of a task whose
/// turn has not started waits for it). `None` when every message is taken.
pub fn next<'a>(inbox: &'a [InboxMessage], state: &CheckpointState) -> Option<&'a InboxMessage> {
    let untaken = || inbox.iter().filter(|m| !state.taken(m.seq));
    untaken()
        .find(|m| Some(m.seq) == state.next_message)
        .or_else(|| untaken().find(|m| !waits_for_its_task(m, inbox, state)))
}

/// Whether `m` is a cancel of a handed-over task whose message is still in the inbox untaken:
/// it acts once that task's turn has started.
fn waits_for_its_task(m: &InboxMessage, inbox: &[InboxMessage], state: &CheckpointState) -> bool {
    let Some(target) = cancel_target(m) else {
        return false;
    };
    inbox.iter().any(|t| {
        t.control.is_none()
            && !state.taken(t.seq)
            && t.handoff.as_ref().map(|h| h.delivery_key.as_str()) == Some(target)
    })
}

/// The delivery key of the handed-over task a cancel is aimed at (`None`: it is aimed at
/// whatever turn runs).
fn cancel_target(m: &InboxMessage) -> Option<&str> {
    (m.control == Some(Control::Cancel))
        .then(|| m.handoff.as_ref().map(|h| h.delivery_key.as_str()))
        .flatten()
}

/// What an urgent message does to the running turn (whose state is `state`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForTurn {
    /// Joins it before its next model round.
    Steer {
        /// Its inbox seq.
        seq: u64,
        /// Its text.
        content: String,
    },
    /// Stops it.
    Stop(StoppedBy),
}

/// What the messages that arrived while a turn runs do to it, in inbox order: the steers it
/// has not taken, and the first interrupt or cancel aimed at it (what follows a stop is for
/// later turns). A cancel aimed at another handed-over task than this turn's is not for it.
pub fn for_turn(inbox: &[InboxMessage], state: &CheckpointState) -> Vec<ForTurn> {
    let mine = state.handoff.as_ref().map(|h| h.delivery_key.as_str());
    let mut out = Vec::new();
    for m in inbox.iter().filter(|m| !state.taken(m.seq)) {
        let action = match (m.control, m.mode) {
            (Some(Control::Cancel), _) => match cancel_target(m) {
                Some(target) if Some(target) != mine => continue,
                _ => ForTurn::Stop(StoppedBy::Cancelled {
                    seq: m.seq,
                    by: m.by.clone().unwrap_or_else(|| ANONYMOUS.to_string()),
                }),
            },
            (Some(_), _) => continue,
            (None, MessageMode::Steer) => ForTurn::Steer {
                seq: m.seq,
                content: m.content.clone(),
            },
            (None, MessageMode::Interrupt) => ForTurn::Stop(StoppedBy::Interrupted { seq: m.seq }),
            (None, MessageMode::Queue | MessageMode::Reject) => continue,
        };
        let stop = matches!(action, ForTurn::Stop(_));
        out.push(action);
        if stop {
            break;
        }
    }
    out
}

/// The interrupt or cancel aimed at the running turn, if one has arrived.
pub fn stop_for(inbox: &[InboxMessage], state: &CheckpointState) -> Option<StoppedBy> {
    for_turn(inbox, state).into_iter().find_map(|a| match a {
        ForTurn::Stop(by) => Some(by),
        ForTurn::Steer { .. } => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::ThreadId;
    use ninetrix_proto::api::HandoffOrigin;

    fn msg(seq: u64, mode: MessageMode) -> InboxMessage {
        InboxMessage {
            seq,
            content: format!("m{seq}"),
            dedupe_key: None,
            created_at: chrono::DateTime::UNIX_EPOCH,
            handoff: None,
            control: None,
            mode,
            by: None,
            to_turn: None,
        }
    }

    fn cancel(seq: u64, target: Option<&str>) -> InboxMessage {
        InboxMessage {
            control: Some(Control::Cancel),
            by: Some("ana".into()),
            handoff: target.map(origin),
            ..msg(seq, MessageMode::Queue)
        }
    }

    fn origin(key: &str) -> HandoffOrigin {
        HandoffOrigin {
            delivery_key: key.into(),
            from_agent: "lead".into(),
            from_thread: ThreadId::new_v7(),
            chain: vec!["lead".into()],
            budget_usd: None,
        }
    }

    fn state(cursor: u64) -> CheckpointState {
        CheckpointState {
            inbox_cursor: cursor,
            ..Default::default()
        }
    }

    #[test]
    fn messages_are_taken_in_order_and_an_interrupt_that_stopped_a_turn_goes_first() {
        use MessageMode::*;
        let inbox = [msg(5, Queue), msg(6, Queue), msg(7, Interrupt)];
        let mut s = state(4);
        assert_eq!(
            next(&inbox, &s).map(|m| m.seq),
            Some(5),
            "in order: the interrupt stops 5's turn once it starts"
        );
        s.take(5);
        assert_eq!(
            stop_for(&inbox, &s),
            Some(StoppedBy::Interrupted { seq: 7 })
        );
        s.next_message = Some(7);
        assert_eq!(
            next(&inbox, &s).map(|m| m.seq),
            Some(7),
            "then the interrupt"
        );
        s.take(7);
        s.next_message = None;
        assert_eq!(next(&inbox, &s).map(|m| m.seq), Some(6), "then the queue");
        s.take(6);
        assert_eq!(next(&inbox, &s), None);
        assert_eq!(s.inbox_cursor, 7);
        let inbox = [msg(5, Queue), msg(6, Steer)];
        assert_eq!(
            next(&inbox, &state(4)).map(|m| m.seq),
            Some(5),
            "the steer joins 5's turn"
        );
    }

    #[test]
    fn a_cancel_of_a_task_waits_for_that_tasks_turn() {
        let task = InboxMessage {
            handoff: Some(origin("d1")),
            ..msg(5, MessageMode::Queue)
        };
        let inbox = [task.clone(), cancel(6, Some("d1"))];
        assert_eq!(
            next(&inbox, &state(4)).map(|m| m.seq),
            Some(5),
            "the task first"
        );
        let mut s = state(4);
        s.take(5);
        s.handoff = Some(origin("d1"));
        assert_eq!(
            stop_for(&inbox, &s),
            Some(StoppedBy::Cancelled {
                seq: 6,
                by: "ana".into()
            }),
            "then the cancel stops its turn"
        );
        s.handoff = Some(origin("d2"));
        assert_eq!(stop_for(&inbox, &s), None, "and no other task's turn");
        assert_eq!(
            next(&inbox, &s).map(|m| m.seq),
            Some(6),
            "between turns, with its task taken, it is taken (and misses)"
        );
    }

    #[test]
    fn a_turn_sees_its_steers_in_order_up_to_the_first_stop() {
        use MessageMode::*;
        let inbox = [
            msg(5, Queue),
            msg(6, Steer),
            msg(7, Steer),
            msg(8, Interrupt),
            msg(9, Steer),
        ];
        let mut s = state(4);
        s.take(5);
        let seen = for_turn(&inbox, &s);
        assert_eq!(
            seen,
            vec![
                ForTurn::Steer {
                    seq: 6,
                    content: "m6".into()
                },
                ForTurn::Steer {
                    seq: 7,
                    content: "m7".into()
                },
                ForTurn::Stop(StoppedBy::Interrupted { seq: 8 }),
            ]
        );
        s.take(6);
        assert_eq!(
            for_turn(&inbox, &s).len(),
            2,
            "a taken steer is not seen again"
        );
        assert_eq!(
            stop_for(&inbox, &s),
            Some(StoppedBy::Interrupted { seq: 8 })
        );
        assert_eq!(
            stop_for(&[cancel(3, None)], &s),
            None,
            "taken messages never act"
        );
        let unnamed = InboxMessage {
            by: None,
            ..cancel(10, None)
        };
        assert_eq!(
            stop_for(&[unnamed], &state(9)),
            Some(StoppedBy::Cancelled {
                seq: 10,
                by: ANONYMOUS.into()
            })
        );
    }
}
