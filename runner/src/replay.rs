//! A replay's runner (issue 42): the recorded turns a replay's scratch thread answers its tool
//! calls from, set by `ninetrix replay` on the runner it runs in process ([`Replay`]). The
//! decisions are `ninetrix_proto::replay`'s pure functions; the engine applies them in place of
//! the ledger, people and collaborators.

use ninetrix_proto::api::RecordedTurn;

/// What a replay's runner answers from.
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// The recorded turns, in the order the replay's inbox holds their inputs: the message with
    /// inbox seq `k` (from 1) is `recorded[k - 1]`'s input.
    pub recorded: Vec<RecordedTurn>,
    /// Whether a read the recording does not have runs for real (`--live-reads`).
    pub live_reads: bool,
}

impl Replay {
    /// The recorded turn the replay's turn answering inbox message `seq` replays.
    pub fn turn_for(&self, seq: u64) -> Option<&RecordedTurn> {
        usize::try_from(seq)
            .ok()
            .and_then(|s| s.checked_sub(1))
            .and_then(|i| self.recorded.get(i))
    }
}
