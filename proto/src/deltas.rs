//! Streamed replies (issue 18): the text a model is producing, published by the runner as it
//! arrives so watchers (`ninetrix invoke`, the event stream) see the reply grow. Deltas are
//! ephemeral — never stored, never in a checkpoint; the reply in the history is the truth — and
//! best effort: a watcher that falls behind, or an API replica that did not receive them, misses
//! some, which `offset` makes visible.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::ThreadId;

/// The most text one delta batch carries, in characters (what the API checks, and the schema's
/// `maxLength`).
pub const MAX_DELTA_CHARS: usize = 64 * 1024;

/// The runner's batch size in bytes: a batch within it is within [`MAX_DELTA_CHARS`] too.
pub const MAX_DELTA_BYTES: usize = MAX_DELTA_CHARS;

/// `POST /v1/runners/threads/{id}/deltas`: text the model streamed since the last batch of this
/// round.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DeltaBatch {
    /// The runner's epoch (a watcher shows only the newest epoch's text).
    #[serde(deserialize_with = "crate::api::int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub epoch: u64,
    /// The turn.
    #[serde(deserialize_with = "crate::api::int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub turn_seq: u64,
    /// The model round of the turn (from 1).
    #[serde(deserialize_with = "crate::api::int::u32_req")]
    #[cfg_attr(feature = "openapi", schema(value_type = u64, maximum = 4294967295_i64))]
    pub round: u32,
    /// The round is being produced again after a restart: a watcher starts the round's text
    /// over rather than appending to what an earlier attempt streamed.
    #[serde(default)]
    pub resumed: bool,
    /// Characters of this round streamed before `text`.
    #[serde(deserialize_with = "crate::api::int::stored")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9223372036854775807_i64))]
    pub offset: u64,
    /// The new text (at most 65,536 characters).
    #[cfg_attr(feature = "openapi", schema(max_length = 65536))]
    pub text: String,
}

/// A delta as watchers receive it: `event: delta` in the event stream (no `id:`, as it is not
/// stored).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Delta {
    /// The thread.
    #[cfg_attr(feature = "openapi", schema(value_type = uuid::Uuid))]
    pub thread_id: ThreadId,
    /// What the runner sent.
    #[serde(flatten)]
    pub batch: DeltaBatch,
    /// When the API received it.
    pub at: DateTime<Utc>,
}

/// What a watcher makes of the deltas of one round: the text so far, restarted when the round
/// is produced again (a resumption or a newer epoch), and whether a gap was seen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundText {
    /// (epoch, turn, round) of the text held.
    key: Option<(u64, u64, u32)>,
    /// The text so far.
    pub text: String,
    /// Characters held (`text.chars().count()`).
    chars: u64,
    /// Some text was missed (a delta's offset was past what is held).
    pub gap: bool,
}

/// What applying a delta did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The text grew by this.
    Appended(String),
    /// The round started over (a restart, or another round or epoch): the new text so far.
    Restarted(String),
    /// An older epoch's or an already-held piece: nothing changed.
    Ignored,
}

impl RoundText {
    /// (epoch, turn, round) of the text held, once a delta was applied.
    pub fn key(&self) -> Option<(u64, u64, u32)> {
        self.key
    }

    /// Applies one delta, in arrival order.
    pub fn apply(&mut self, d: &DeltaBatch) -> Applied {
        let key = (d.epoch, d.turn_seq, d.round);
        let fresh = match self.key {
            None => true,
            Some(held) if key < held => return Applied::Ignored,
            Some(held) => key != held || (d.resumed && d.offset == 0 && self.chars > 0),
        };
        if fresh {
            self.key = Some(key);
            self.text.clear();
            self.chars = 0;
            self.gap = d.offset > 0;
            self.push(&d.text);
            return Applied::Restarted(self.text.clone());
        }
        if d.offset + (d.text.chars().count() as u64) <= self.chars {
            return Applied::Ignored;
        }
        if d.offset > self.chars {
            self.gap = true;
        }
        let skip = usize::try_from(self.chars.saturating_sub(d.offset)).unwrap_or(usize::MAX);
        let new: String = d.text.chars().skip(skip).collect();
        self.push(&new);
        Applied::Appended(new)
    }

    fn push(&mut self, s: &str) {
        self.text.push_str(s);
        self.chars += s.chars().count() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(epoch: u64, round: u32, resumed: bool, offset: u64, text: &str) -> DeltaBatch {
        DeltaBatch {
            epoch,
            turn_seq: 1,
            round,
            resumed,
            offset,
            text: text.into(),
        }
    }

    #[test]
    fn a_round_grows_and_repeats_are_ignored() {
        let mut r = RoundText::default();
        assert_eq!(
            r.apply(&d(1, 1, false, 0, "Hel")),
            Applied::Restarted("Hel".into())
        );
        assert_eq!(
            r.apply(&d(1, 1, false, 3, "lo")),
            Applied::Appended("lo".into())
        );
        assert_eq!(r.apply(&d(1, 1, false, 3, "lo")), Applied::Ignored);
        assert_eq!(
            r.apply(&d(1, 1, false, 4, "o!")),
            Applied::Appended("!".into())
        );
        assert_eq!(r.text, "Hello!");
        assert!(!r.gap);
    }

    #[test]
    fn a_resumed_round_starts_over_and_an_old_epoch_is_ignored() {
        let mut r = RoundText::default();
        r.apply(&d(1, 1, false, 0, "The ans"));
        // The runner died; epoch 2 produces the round again from its start.
        assert_eq!(
            r.apply(&d(2, 1, true, 0, "The")),
            Applied::Restarted("The".into())
        );
        assert_eq!(r.apply(&d(1, 1, false, 7, "wer")), Applied::Ignored);
        assert_eq!(
            r.apply(&d(2, 1, true, 3, " answer")),
            Applied::Appended(" answer".into())
        );
        assert_eq!(r.text, "The answer");
        // The next round replaces the text.
        assert_eq!(
            r.apply(&d(2, 2, false, 0, "Next")),
            Applied::Restarted("Next".into())
        );
    }

    #[test]
    fn a_missed_piece_is_marked_as_a_gap() {
        let mut r = RoundText::default();
        r.apply(&d(1, 1, false, 0, "ab"));
        r.apply(&d(1, 1, false, 5, "fg"));
        assert!(r.gap);
        assert_eq!(r.text, "abfg");
        let mut late = RoundText::default();
        late.apply(&d(1, 1, false, 10, "xyz"));
        assert!(late.gap, "joined mid-round");
    }
}
