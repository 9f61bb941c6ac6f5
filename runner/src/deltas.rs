//! Streamed replies (issue 18): the text of each model round, published to the thread's watchers
//! (`ninetrix invoke`, the event stream) as the model streams it. One [`publish`] task per model
//! call reads the call's [`TextPiece`]s and sends them in batches (every [`LINGER`], or at the
//! end) through [`Checkpoints::deltas`]. Deltas are ephemeral and best effort: a batch the API
//! does not take is dropped, never retried, and nothing waits on them — the reply in the history
//! is the truth.

use std::time::Duration;

use ninetrix_proto::deltas::{DeltaBatch, MAX_DELTA_BYTES};
use tokio::sync::mpsc;

use crate::checkpoints::Checkpoints;
use crate::llm::TextPiece;

/// How long text waits to be sent with what follows it.
pub const LINGER: Duration = Duration::from_millis(50);

/// Which round of which turn a call's text belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Round {
    /// The runner's epoch.
    pub epoch: u64,
    /// The turn.
    pub turn_seq: u64,
    /// The model round of the turn, from 1 (the same after a restart: the history is repaired
    /// back to the round's start).
    pub round: u32,
    /// The turn is being resumed after a restart: its first round is produced again.
    pub resumed: bool,
}

/// The batches a call's text becomes: pure, so the batching is tested without I/O.
#[derive(Debug)]
pub struct Batcher {
    round: Round,
    /// Characters of the current attempt sent (or queued) before `pending`.
    offset: u64,
    pending: String,
    /// An attempt after the first restarts the round's text.
    attempts: u32,
}

impl Batcher {
    /// A call's batcher.
    pub fn new(round: Round) -> Batcher {
        Batcher {
            round,
            offset: 0,
            pending: String::new(),
            attempts: 0,
        }
    }

    /// Takes one piece; returns a batch to send now if the piece ends one (a new attempt flushes
    /// what the last one left, then starts over).
    pub fn push(&mut self, piece: TextPiece) -> Option<DeltaBatch> {
        match piece {
            TextPiece::Start => {
                let flushed = self.flush();
                self.attempts += 1;
                self.offset = 0;
                flushed
            }
            TextPiece::Text(t) => {
                self.pending.push_str(&t);
                (self.pending.len() >= MAX_DELTA_BYTES / 2)
                    .then(|| self.flush())
                    .flatten()
            }
        }
    }

    /// The text not sent yet, as a batch (`None` when there is none).
    pub fn flush(&mut self) -> Option<DeltaBatch> {
        if self.pending.is_empty() {
            return None;
        }
        let text = std::mem::take(&mut self.pending);
        let batch = DeltaBatch {
            epoch: self.round.epoch,
            turn_seq: self.round.turn_seq,
            round: self.round.round,
            resumed: self.round.resumed || self.attempts > 1,
            offset: self.offset,
            text,
        };
        self.offset += batch.text.chars().count() as u64;
        Some(batch)
    }
}

/// Publishes one call's text until its sender is dropped (the call is over).
pub async fn publish<C: Checkpoints>(
    store: C,
    round: Round,
    mut pieces: mpsc::UnboundedReceiver<TextPiece>,
) {
    let mut batcher = Batcher::new(round);
    loop {
        let piece = match tokio::time::timeout(LINGER, pieces.recv()).await {
            Ok(Some(piece)) => Some(piece),
            Ok(None) => break,
            Err(_) => None,
        };
        let ready = match piece {
            Some(p) => batcher.push(p),
            None => batcher.flush(),
        };
        if let Some(batch) = ready {
            send(&store, &batch).await;
        }
    }
    if let Some(batch) = batcher.flush() {
        send(&store, &batch).await;
    }
}

async fn send<C: Checkpoints>(store: &C, batch: &DeltaBatch) {
    if let Err(e) = store.deltas(batch).await {
        tracing::debug!("a delta batch was not taken ({e}); dropped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(resumed: bool) -> Round {
        Round {
            epoch: 3,
            turn_seq: 7,
            round: 2,
            resumed,
        }
    }

    fn text(t: &str) -> TextPiece {
        TextPiece::Text(t.into())
    }

    #[test]
    fn text_is_batched_with_running_offsets() {
        let mut b = Batcher::new(round(false));
        assert_eq!(b.push(TextPiece::Start), None);
        assert_eq!(b.push(text("Hel")), None);
        assert_eq!(b.push(text("lo ")), None);
        let first = b.flush().unwrap();
        assert_eq!(
            (first.offset, first.text.as_str(), first.resumed),
            (0, "Hello ", false)
        );
        b.push(text("wörld"));
        let second = b.flush().unwrap();
        assert_eq!((second.offset, second.text.as_str()), (6, "wörld"));
        assert_eq!(b.flush(), None);
    }

    #[test]
    fn a_retry_flushes_and_starts_the_round_over_marked_resumed() {
        let mut b = Batcher::new(round(false));
        b.push(TextPiece::Start);
        b.push(text("The ans"));
        let flushed = b.push(TextPiece::Start).unwrap();
        assert_eq!(flushed.text, "The ans");
        b.push(text("The answer"));
        let again = b.flush().unwrap();
        assert_eq!((again.offset, again.resumed), (0, true));
    }

    #[test]
    fn a_resumed_turns_round_says_so_and_big_text_goes_at_once() {
        let mut b = Batcher::new(round(true));
        b.push(TextPiece::Start);
        let big = "x".repeat(MAX_DELTA_BYTES / 2);
        let sent = b.push(TextPiece::Text(big)).unwrap();
        assert!(sent.resumed);
        assert_eq!(sent.text.len(), MAX_DELTA_BYTES / 2);
    }
}
