//! A reply as it streams (`ninetrix invoke` on a terminal): the text of each model round as the
//! deltas bring it, a note when a round starts over (the runner restarted, or a newer runner took
//! the thread), and at the end only what the stream did not already show. Pure: it returns what
//! to print; the command prints it.

use ninetrix_proto::deltas::{Applied, DeltaBatch, RoundText};

/// What to print for one delta or at the end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Print {
    /// Reply text for stdout (no newline added).
    pub(crate) out: String,
    /// A note for stderr (a line), if any.
    pub(crate) note: Option<String>,
}

/// The streamed text of one turn.
#[derive(Debug, Default)]
pub(crate) struct Streamed {
    round: RoundText,
    /// Something of the current round is on screen.
    open: bool,
    /// The screen's line is the streamed text's (a newline ends it before anything else).
    line_open: bool,
}

impl Streamed {
    /// Shows one delta of the turn.
    pub(crate) fn delta(&mut self, d: &DeltaBatch) -> Print {
        let before = self.round.clone();
        match self.round.apply(d) {
            Applied::Ignored => Print::default(),
            Applied::Appended(text) => {
                self.open |= !text.is_empty();
                self.line_open |= !text.is_empty();
                Print {
                    out: text,
                    note: None,
                }
            }
            Applied::Restarted(text) => {
                let mut out = String::new();
                if self.line_open {
                    out.push('\n');
                }
                // The same round produced again (by a restarted or newer runner) over text
                // already shown: say so, or the screen would read as one garbled answer.
                let again = !before.text.is_empty()
                    && before.key().is_some_and(|(epoch, turn, round)| {
                        turn == d.turn_seq && round == d.round && (epoch != d.epoch || d.resumed)
                    });
                let note = again.then(|| {
                    "  (the runner restarted mid-reply; the model's answer starts over)".to_string()
                });
                self.open = !text.is_empty();
                self.line_open = self.open;
                out.push_str(&text);
                Print { out, note }
            }
        }
    }

    /// What to print on stdout before a progress line on stderr: a newline if the streamed text
    /// is mid-line (else the two would share it), so the next text starts on a line of its own.
    pub(crate) fn end_line(&mut self) -> &'static str {
        if std::mem::take(&mut self.line_open) {
            "\n"
        } else {
            ""
        }
    }

    /// What to print when the turn's reply is stored: a newline if the stream showed exactly the
    /// reply; else the reply in full (after a newline and a note if a different text was shown),
    /// so what stays on screen is the stored reply.
    pub(crate) fn finish(&mut self, reply: &str) -> Print {
        let shown = &self.round.text;
        if self.open && shown == reply && !self.round.gap {
            self.open = false;
            return Print {
                out: self.end_line().into(),
                note: None,
            };
        }
        let mut out = self.end_line().to_string();
        let mut note = None;
        if self.open {
            note = Some("  (the stream missed part of the reply; here it is as stored)".into());
        }
        self.open = false;
        out.push_str(reply);
        out.push('\n');
        Print { out, note }
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
    fn a_streamed_reply_ends_with_a_newline_only() {
        let mut s = Streamed::default();
        assert_eq!(s.delta(&d(1, 1, false, 0, "Hel")).out, "Hel");
        assert_eq!(s.delta(&d(1, 1, false, 3, "lo.")).out, "lo.");
        assert_eq!(s.finish("Hello.").out, "\n");
    }

    #[test]
    fn each_round_on_its_own_line_and_the_last_is_the_reply() {
        let mut s = Streamed::default();
        s.delta(&d(1, 1, false, 0, "Let me look."));
        assert_eq!(s.delta(&d(1, 2, false, 0, "Found")).out, "\nFound");
        s.delta(&d(1, 2, false, 5, " it."));
        assert_eq!(s.finish("Found it.").out, "\n");
    }

    #[test]
    fn a_progress_line_between_rounds_gets_a_line_of_its_own() {
        let mut s = Streamed::default();
        s.delta(&d(1, 1, false, 0, "Let me look."));
        // `model answered`, `tool file_read executed` go to stderr: the round's line ends first.
        assert_eq!(s.end_line(), "\n");
        assert_eq!(s.end_line(), "", "once");
        assert_eq!(s.delta(&d(1, 2, false, 0, "Found")).out, "Found");
        s.delta(&d(1, 2, false, 5, " it."));
        assert_eq!(s.end_line(), "\n");
        // The reply was shown whole and its line is ended: nothing more.
        assert_eq!(s.finish("Found it.").out, "");
    }

    #[test]
    fn a_restart_mid_reply_starts_over_with_a_note() {
        let mut s = Streamed::default();
        s.delta(&d(1, 1, false, 0, "The ans"));
        let p = s.delta(&d(2, 1, true, 0, "The"));
        assert_eq!(p.out, "\nThe");
        assert!(p.note.unwrap().contains("restarted"));
        s.delta(&d(2, 1, true, 3, " answer"));
        assert_eq!(s.finish("The answer").out, "\n");
    }

    #[test]
    fn a_gap_or_no_stream_prints_the_stored_reply() {
        let mut s = Streamed::default();
        s.delta(&d(1, 1, false, 0, "ab"));
        s.delta(&d(1, 1, false, 9, "z"));
        let p = s.finish("abcdefghiz");
        assert_eq!(p.out, "\nabcdefghiz\n");
        assert!(p.note.is_some());
        let mut none = Streamed::default();
        assert_eq!(none.finish("Hi.").out, "Hi.\n");
    }
}
