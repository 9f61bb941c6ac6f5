//! Rendering: colours, `up`'s live progress, tables, and the trace tree.

pub(crate) mod handoffs;
pub(crate) mod progress;
pub(crate) mod style;
pub(crate) mod table;
pub(crate) mod trace;

/// A number of seconds in the largest unit that divides it: `30d`, `36h`, `90m`, `45s` (for
/// durations a person wrote, such as a timeout or a token's lifetime); days from two on, so a
/// day reads `24h`.
pub(crate) fn exact_duration(secs: u64) -> String {
    match secs {
        s if s >= 2 * 86_400 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s >= 3_600 && s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn exact_durations_use_the_largest_unit_that_divides() {
        let cases = [
            (86_400 * 30, "30d"),
            (36 * 3_600, "36h"),
            (86_400, "24h"),
            (5_400, "90m"),
            (45, "45s"),
            (0, "0s"),
        ];
        for (secs, want) in cases {
            assert_eq!(super::exact_duration(secs), want);
        }
    }
}
