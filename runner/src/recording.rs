//! What a replay's runner answers from (issue 42): the recorded turns of the source thread
//! ([`Replay`], set by `ninetrix replay` on the runner it runs in process) and the replay's kill
//! points. It sits below the engine, the driver and the configuration, which all read it;
//! `replay` (above the driver) runs a replay and re-exports [`Replay`]. The decisions are
//! `ninetrix_proto::replay`'s pure functions; the engine applies them in place of the ledger,
//! people and collaborators.

use ninetrix_proto::api::RecordedTurn;

/// Kill point (`NINETRIX_RUNNER_CRASH_AT`): after the first commit of a replayed turn that
/// stored at least one answer taken from the recording, before the turn ends.
pub const REPLAY_MID_TURN: &str = "replay_mid_turn";
/// Kill point: after the commit that ends a replayed turn (the first one, as every kill point
/// fires once per workspace).
pub const REPLAY_AFTER_TURN: &str = "replay_after_turn";

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
