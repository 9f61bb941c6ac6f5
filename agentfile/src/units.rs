//! Quantities: memory sizes such as `512Mi`, `1Gi`, `2g` parsed to bytes, and durations such as
//! `30s`, `15m`, `24h`, `7d` parsed to seconds: the one duration rule of ninetrix (the agentfile's
//! timeouts, a schedule's `every:`, and the CLI's `approvals token --ttl` and `logs --since`).

use ninetrix_proto::triggers::schedule::{ScheduleError, Spec};

/// Docker refuses memory limits below 6 MiB.
pub const MIN_MEMORY_BYTES: u64 = 6 * 1024 * 1024;

/// Parses a memory size. Units are binary, as Docker's are: `k`/`Ki`/`kb` = 1024, `m`/`Mi`/`mb`
/// = 1024², `g`/`Gi`/`gb` = 1024³, `t`/`Ti`/`tb` = 1024⁴, case-insensitive; a bare number is
/// bytes. Fractions are allowed (`1.5Gi`). Returns `None` for anything else.
pub fn parse_memory(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "ki" | "kb" | "kib" => 1 << 10,
        "m" | "mi" | "mb" | "mib" => 1 << 20,
        "g" | "gi" | "gb" | "gib" => 1 << 30,
        "t" | "ti" | "tb" | "tib" => 1 << 40,
        _ => return None,
    };
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return None;
    }
    Some(bytes.round() as u64)
}

/// Formats a byte count the way users write it: `512Mi`, `1.5Gi`, `100Ki`, or bytes.
pub fn format_memory(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if bytes >= size {
            let value = bytes as f64 / size as f64;
            return if bytes.is_multiple_of(size) {
                format!("{}{unit}", bytes / size)
            } else {
                format!("{:.1}{unit}", value).replace(".0", "")
            };
        }
    }
    format!("{bytes}")
}

/// A number of seconds in the largest unit that divides it: `30d`, `36h`, `90m`, `45s` — the
/// way a person writes a timeout (what [`parse_duration`] reads back); days from two on, so a day
/// reads `24h`.
pub fn format_duration(secs: u64) -> String {
    match secs {
        s if s >= 2 * 86_400 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s >= 3_600 && s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Parses a duration: a whole number and one unit, `s` (seconds), `m` (minutes), `h` (hours) or
/// `d` (days), e.g. `30s`, `15m`, `24h`, `7d`; a bare whole number is seconds. Returns `None`
/// for anything else (fractions, signs, spaces, other units). A duration too long for a `u64`
/// of seconds is `u64::MAX`, so range checks reject it.
pub fn parse_duration(text: &str) -> Option<u64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return None;
    }
    let multiplier: u64 = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    // Only digits: parsing fails only when the number is too large.
    let value: u64 = number.parse().unwrap_or(u64::MAX);
    Some(value.saturating_mul(multiplier))
}

/// Parses a schedule's interval (`every:`): a whole number with `s`, `m`, `h` or `d` (`30s`,
/// `10m`, `2h`, `1d`) or plain seconds (`45`), from 1 second to 366 days. Returns seconds. The
/// same rule as [`parse_duration`] (after trimming), then the schedule's range.
pub fn parse_every(text: &str) -> Result<u64, ScheduleError> {
    let secs = parse_duration(text.trim()).ok_or_else(|| ScheduleError::Every {
        text: text.to_owned(),
    })?;
    Spec::every(secs)?;
    Ok(secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::triggers::schedule::MAX_PERIOD_SECS;

    #[test]
    fn parses_docker_and_kubernetes_spellings() {
        assert_eq!(parse_memory("512Mi"), Some(512 << 20));
        assert_eq!(parse_memory("1Gi"), Some(1 << 30));
        assert_eq!(parse_memory("2g"), Some(2 << 30));
        assert_eq!(parse_memory("256m"), Some(256 << 20));
        assert_eq!(parse_memory("1.5Gi"), Some(3 << 29));
        assert_eq!(parse_memory("64 MB"), Some(64 << 20));
        assert_eq!(parse_memory("1048576"), Some(1 << 20));
    }

    #[test]
    fn rejects_nonsense() {
        for bad in [
            "lots", "", "Gi", "1.5.2Gi", "-1Gi", "1Pb", ".5g", "5.g", "1e3",
        ] {
            assert_eq!(parse_memory(bad), None, "{bad}");
        }
    }

    #[test]
    fn formats_round_trip() {
        assert_eq!(format_memory(512 << 20), "512Mi");
        assert_eq!(format_memory(3 << 29), "1.5Gi");
        assert_eq!(format_memory(100), "100");
        for s in ["512Mi", "1Gi", "1.5Gi", "64Ki"] {
            assert_eq!(format_memory(parse_memory(s).unwrap()), s);
        }
    }

    #[test]
    fn formatted_durations_use_the_largest_unit_that_divides() {
        let cases = [
            (86_400 * 30, "30d"),
            (36 * 3_600, "36h"),
            (86_400, "24h"),
            (5_400, "90m"),
            (300, "5m"),
            (45, "45s"),
            (0, "0s"),
        ];
        for (secs, want) in cases {
            assert_eq!(format_duration(secs), want);
            assert_eq!(parse_duration(want), Some(secs), "reads back");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Some(30));
        assert_eq!(parse_duration("15m"), Some(900));
        assert_eq!(parse_duration("24h"), Some(86_400));
        assert_eq!(parse_duration("7d"), Some(604_800));
        assert_eq!(parse_duration("3600"), Some(3600));
        assert_eq!(parse_duration("0s"), Some(0));
        assert_eq!(parse_duration("99999999999999999999999d"), Some(u64::MAX));
        for bad in [
            "", "h", "1.5h", "-1h", "1 h", "1H", "1w", "1h30m", "soon", " 1h",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn parse_every_units() {
        assert_eq!(parse_every("30s"), Ok(30));
        assert_eq!(parse_every("10m"), Ok(600));
        assert_eq!(parse_every("2h"), Ok(7200));
        assert_eq!(parse_every("1d"), Ok(86_400));
        assert_eq!(parse_every(" 45 "), Ok(45));
        assert_eq!(parse_every("366d"), Ok(MAX_PERIOD_SECS));
        for bad in ["", "m", "10x", "1.5h", "-5s", "10 m", "10M", "1h30m"] {
            assert_eq!(
                parse_every(bad),
                Err(ScheduleError::Every {
                    text: bad.to_owned()
                }),
                "{bad}"
            );
        }
        assert_eq!(parse_every("0s"), Err(ScheduleError::Period { secs: 0 }));
        assert_eq!(
            parse_every("367d"),
            Err(ScheduleError::Period { secs: 367 * 86_400 })
        );
        assert_eq!(
            parse_every("99999999999999999999d"),
            Err(ScheduleError::Period { secs: u64::MAX })
        );
    }
}
