//! A rewind (`Control::Rewind`, taken between turns like a requested compaction): the thread
//! goes back to the end of an earlier turn — its conversation, and its files when that turn
//! has a snapshot.
//!
//! The engine asks the driver for the turn point ([`Effect::FetchTurnPoint`]); the driver
//! fetches it and stages the files, and answers [`Input::Rewind`]. The rewind is then one
//! commit: the history cut to the longest prefix it shares with the turn's ([`common_prefix`],
//! by message ID) and the rest of the turn's appended (with a `system` note naming the effects
//! going back does not undo), the state with `workspace` naming the snapshot the files must
//! hold, the inbox cursor past the control, and the `rewound` event. Turn numbers keep growing:
//! the next turn is the current `turn_seq` + 1, never a number a left turn used (ledger keys
//! include it). After the commit the driver applies the staged files
//! ([`Effect::RestoreWorkspace`]). A rewind that cannot be done changes nothing but the cursor
//! (`rewind_failed`): fail-closed.

use ninetrix_proto::api::{GoneBack, TurnPoint, undone_note};
use ninetrix_proto::events::{RewindFailed, Rewound, TraceEvent};
use ninetrix_proto::{Message, Role};

use super::{Effect, Engine, event};

/// What a rewind goes back to, as the driver found and staged it.
#[derive(Clone, Debug, PartialEq)]
pub struct RewindTo {
    /// The turn's end.
    pub point: TurnPoint,
    /// Files the restore writes (0 without a snapshot).
    pub files_written: u64,
    /// Files it removes.
    pub files_removed: u64,
}

/// How many messages `a` and `b` share from their start, compared by message ID.
pub fn common_prefix(a: &[Message], b: &[Message]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x.id == y.id).count()
}

impl Engine {
    /// A rewind taken from the inbox: the driver is asked for its turn point.
    pub(super) fn ask_rewind(&mut self, to_turn: Option<u64>) -> Vec<Effect> {
        match to_turn {
            Some(to_turn) => {
                self.rewinding = Some(to_turn);
                vec![Effect::FetchTurnPoint { to_turn }]
            }
            None => self.rewind_failed(0, "the rewind names no turn to go back to".into()),
        }
    }

    /// The driver's answer to [`Effect::FetchTurnPoint`].
    pub(super) fn on_rewind(&mut self, found: Result<RewindTo, String>) -> Vec<Effect> {
        let Some(to_turn) = self.rewinding.take() else {
            return Vec::new();
        };
        match found {
            Err(why) => self.rewind_failed(to_turn, why),
            Ok(to) => self.rewind(to_turn, to),
        }
    }

    /// Nothing changes but the cursor, which moves past the control.
    fn rewind_failed(&mut self, to_turn: u64, why: String) -> Vec<Effect> {
        vec![
            self.commit(),
            event(TraceEvent::RewindFailed(RewindFailed { to_turn, why })),
        ]
    }

    fn rewind(&mut self, to_turn: u64, to: RewindTo) -> Vec<Effect> {
        let RewindTo {
            point,
            files_written,
            files_removed,
        } = to;
        let restored = point.snapshot.is_some();
        let mut history = point.history;
        if let Some(note) = undone_note(GoneBack::Rewind { to_turn }, restored, &point.undone) {
            history.push(Message::text(Role::System, note));
        }
        let old_len = self.history.len();
        let keep = common_prefix(&self.history, &history);
        self.history = history;
        self.persisted = keep;
        self.truncate = Some(keep);
        self.state.context = point.state.context;
        self.state.turn_start_history_len = self.history.len() as u64;
        self.state.workspace = point.snapshot.clone();
        let rewound = Rewound {
            from_turn: self.state.turn_seq,
            to_turn,
            left_messages: (old_len - keep) as u64,
            snapshot: point.snapshot.clone(),
            files_written,
            files_removed,
            undone: point.undone.len() as u64,
        };
        let mut out = vec![self.commit(), event(TraceEvent::Rewound(rewound))];
        out.extend(point.snapshot.map(Effect::RestoreWorkspace));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use ninetrix_proto::api::{Control, ToolCallStatus, TurnPoint, UndoneEffect};
    use ninetrix_proto::snapshots::{ObjectId, SnapshotRef};

    fn rewind_control(e: &mut Engine, seq: u64, to_turn: u64) -> Vec<Effect> {
        e.apply(Input::Control {
            seq,
            control: Control::Rewind,
            by: "ana".into(),
            to_turn: Some(to_turn),
        })
    }

    fn snapshot() -> SnapshotRef {
        SnapshotRef {
            root: ObjectId::of(b"root"),
            files: 1,
            bytes: 4,
        }
    }

    #[test]
    fn the_common_prefix_is_counted_by_message_id() {
        let a = vec![
            Message::text(Role::User, "1"),
            Message::text(Role::Assistant, "2"),
            Message::text(Role::User, "3"),
        ];
        let mut b = a[..2].to_vec();
        b.push(Message::text(Role::User, "3"));
        assert_eq!(common_prefix(&a, &b), 2, "same text, another message");
        assert_eq!(common_prefix(&a, &a[..1]), 1);
        assert_eq!(common_prefix(&a, &[]), 0);
        assert_eq!(common_prefix(&a, &a), 3);
    }

    /// An engine after two turns.
    fn two_turns() -> (Engine, Vec<Message>, CheckpointState) {
        let mut e = Engine::new(config());
        e.apply(Input::Restored(None));
        for n in 1..=2u64 {
            e.apply(Input::Message {
                seq: n,
                content: format!("q{n}"),
                handoff: None,
            });
            e.apply(answer(&format!("a{n}")));
        }
        let history = e.history()[..2].to_vec();
        let mut state = e.state().clone();
        state.turn_seq = 1;
        (e, history, state)
    }

    #[test]
    fn a_rewind_cuts_to_the_shared_prefix_keeps_the_turn_number_and_names_the_snapshot() {
        let (mut e, history, state) = two_turns();
        let out = rewind_control(&mut e, 3, 1);
        assert_eq!(out, [Effect::FetchTurnPoint { to_turn: 1 }]);
        let shell = UndoneEffect {
            turn_seq: 2,
            tool: "shell".into(),
            effect: ninetrix_proto::effects::Effect::Write,
            status: ToolCallStatus::Completed,
            args: "{}".into(),
        };
        let out = e.apply(Input::Rewind(Ok(RewindTo {
            point: TurnPoint {
                turn_seq: 1,
                history: history.clone(),
                state,
                snapshot: Some(snapshot()),
                snapshot_dropped: false,
                snapshot_skipped: None,
                undone: vec![shell],
            },
            files_written: 2,
            files_removed: 1,
        })));
        let Effect::Commit(plan) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(plan.truncate_to, Some(2));
        assert_eq!(plan.append.len(), 1, "the note");
        assert_eq!(plan.append[0].role, Role::System);
        assert!(plan.append[0].text_content().contains("turn 2: shell"));
        assert_eq!(plan.state.turn_seq, 2, "turn numbers only grow");
        assert_eq!(plan.state.inbox_cursor, 3);
        assert_eq!(plan.state.turn_start_history_len, 3);
        assert_eq!(plan.state.workspace, Some(snapshot()));
        assert_eq!(plan.ends_turn, None);
        let Effect::Event(TraceEvent::Rewound(r)) = &out[1] else {
            panic!("{out:?}")
        };
        assert_eq!(
            (r.from_turn, r.to_turn, r.left_messages, r.undone),
            (2, 1, 2, 1)
        );
        assert_eq!((r.files_written, r.files_removed), (2, 1));
        assert_eq!(out[2], Effect::RestoreWorkspace(snapshot()));
        // The next turn is turn 3.
        let out = e.apply(Input::Message {
            seq: 4,
            content: "q3".into(),
            handoff: None,
        });
        assert!(out.iter().any(|o| matches!(o,
            Effect::Event(TraceEvent::TurnStarted(t)) if t.turn_seq == 3)));
        assert_eq!(e.state().workspace, None, "a turn clears it");
    }

    #[test]
    fn a_failed_rewind_only_moves_the_cursor() {
        let (mut e, _, _) = two_turns();
        let before = e.history().to_vec();
        rewind_control(&mut e, 3, 1);
        let out = e.apply(Input::Rewind(Err("the snapshot was dropped".into())));
        assert_eq!(kinds(&out), ["commit", "event:rewind_failed"]);
        let plan = &commits(&out)[0];
        assert_eq!((plan.truncate_to, plan.append.len()), (None, 0));
        assert_eq!(plan.state.inbox_cursor, 3);
        assert_eq!(plan.state.workspace, None);
        assert_eq!(e.history(), before);
    }
}
