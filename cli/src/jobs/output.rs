//! A piece of a job's output by line, pure: which lines an `output` request gets (`since` skips
//! the first N, `tail` keeps the last N), capped at [`MAX_OUTPUT`] bytes keeping the end.

use ninetrix_proto::jobs::MAX_OUTPUT;

/// The lines an answer carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Slice {
    /// The lines, each ended by `\n` but a last one the job has not ended.
    pub text: String,
    /// The number of the first line in `text` (0-based).
    pub from: u64,
    /// The number of lines so far: `since` of the next read.
    pub next: u64,
    /// Whether lines (or the start of the one line) were left out to fit `MAX_OUTPUT`.
    pub cut: bool,
}

/// Slices `log` (stdout and stderr as Docker keeps them, without timestamps). While the job
/// runs (`ended` false) a last line without its `\n` yet is left for a later read, so a reader
/// that goes on from `next` never gets half a line; once it ended, that line counts.
pub(crate) fn slice(log: &[u8], since: Option<u64>, tail: Option<u64>, ended: bool) -> Slice {
    slice_at(log, since, tail, ended, MAX_OUTPUT)
}

fn slice_at(log: &[u8], since: Option<u64>, tail: Option<u64>, ended: bool, max: usize) -> Slice {
    let text = String::from_utf8_lossy(log);
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    if !ended && lines.last().is_some_and(|l| !l.ends_with('\n')) {
        lines.pop();
    }
    let total = lines.len() as u64;
    let mut from = since.unwrap_or(0).min(total);
    if let Some(tail) = tail {
        from = from.max(total.saturating_sub(tail));
    }
    let mut kept = &lines[usize::try_from(from).unwrap_or(usize::MAX).min(lines.len())..];
    let mut bytes: usize = kept.iter().map(|l| l.len()).sum();
    let mut cut = false;
    while bytes > max && kept.len() > 1 {
        bytes -= kept[0].len();
        kept = &kept[1..];
        from += 1;
        cut = true;
    }
    let mut text: String = kept.concat();
    if text.len() > max {
        // One line longer than the cap: its end.
        let mut start = text.len() - max;
        while !text.is_char_boundary(start) {
            start += 1;
        }
        text = text[start..].to_string();
        cut = true;
    }
    Slice {
        text,
        from,
        next: total,
        cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_skips_and_tail_keeps_the_last_lines() {
        let log = b"a\nb\nc\nd\n";
        let all = slice(log, None, None, true);
        assert_eq!(
            (all.text.as_str(), all.from, all.next, all.cut),
            ("a\nb\nc\nd\n", 0, 4, false)
        );
        let later = slice(log, Some(2), None, true);
        assert_eq!(
            (later.text.as_str(), later.from, later.next),
            ("c\nd\n", 2, 4)
        );
        let last = slice(log, None, Some(1), true);
        assert_eq!((last.text.as_str(), last.from), ("d\n", 3));
        // Both: the later start wins.
        let both = slice(log, Some(1), Some(3), true);
        assert_eq!((both.text.as_str(), both.from), ("b\nc\nd\n", 1));
        let both = slice(log, Some(3), Some(3), true);
        assert_eq!(both.text, "d\n");
        // Past the end: nothing, and next stays.
        let past = slice(log, Some(10), None, true);
        assert_eq!((past.text.as_str(), past.from, past.next), ("", 4, 4));
        assert_eq!(slice(b"", None, None, false).next, 0);
        assert_eq!(slice(log, None, Some(0), true).text, "");
    }

    #[test]
    fn a_line_still_being_written_waits_for_its_end_unless_the_job_ended() {
        let running = slice(b"one\ntw", None, None, false);
        assert_eq!((running.text.as_str(), running.next), ("one\n", 1));
        let next = slice(b"one\ntwo\n", Some(running.next), None, false);
        assert_eq!((next.text.as_str(), next.from), ("two\n", 1));
        let ended = slice(b"one\ntw", Some(1), None, true);
        assert_eq!((ended.text.as_str(), ended.next), ("tw", 2));
    }

    #[test]
    fn the_cap_keeps_the_end() {
        let log = b"aaaa\nbbbb\ncccc\n";
        let s = slice_at(log, None, None, true, 12);
        assert_eq!(
            (s.text.as_str(), s.from, s.next, s.cut),
            ("bbbb\ncccc\n", 1, 3, true)
        );
        // One line over the cap: its last bytes, on a character boundary.
        let s = slice_at("xxé\n".as_bytes(), None, None, true, 3);
        assert_eq!((s.text.as_str(), s.from, s.cut), ("é\n", 0, true));
        let big = "y".repeat(MAX_OUTPUT + 10) + "\nlast\n";
        let s = slice(big.as_bytes(), None, None, true);
        assert_eq!(
            (s.text.as_str(), s.from, s.next, s.cut),
            ("last\n", 1, 2, true)
        );
    }
}
