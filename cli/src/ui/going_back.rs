//! How fork, rewind and diff put going back into words: a snapshot, a size, and the effects going
//! back does not undo. Pure text, shared by `commands/{fork,rewind,diff}.rs`.

use ninetrix_proto::api::{ToolCallStatus, UndoneEffect};
use ninetrix_proto::snapshots::SnapshotRef;

/// The most effects listed by name; the rest are counted.
const MAX_LISTED: usize = 20;

/// A size as people read it: `120 B`, `1.5 KiB`, `4 MiB`, `2.3 GiB`.
pub(crate) fn size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, step) in UNITS {
        if bytes >= step {
            let value = bytes as f64 / step as f64;
            let text = format!("{value:.1}");
            let text = text.strip_suffix(".0").unwrap_or(&text);
            return format!("{text} {unit}");
        }
    }
    format!("{bytes} B")
}

/// `snapshot 1a2b3c4d5e6f (120 files, 4.1 MiB)`.
pub(crate) fn snapshot(s: &SnapshotRef) -> String {
    format!(
        "snapshot {} ({} file{}, {})",
        s.root.short(),
        s.files,
        if s.files == 1 { "" } else { "s" },
        size(s.bytes)
    )
}

/// Where a recorded call stands, in words.
fn status(s: ToolCallStatus) -> &'static str {
    match s {
        ToolCallStatus::Completed => "done",
        ToolCallStatus::Failed => "failed",
        ToolCallStatus::Intent => "started, outcome unknown",
    }
}

/// One line per effect not undone, `turn 5: shell {"command":"git push"} (done)`, the first
/// [`MAX_LISTED`] by name and the rest counted, each after `indent`.
pub(crate) fn undone_lines(undone: &[UndoneEffect], indent: &str) -> Vec<String> {
    let mut lines: Vec<String> = undone
        .iter()
        .take(MAX_LISTED)
        .map(|u| {
            format!(
                "{indent}turn {}: {} {} ({}; {})",
                u.turn_seq,
                u.tool,
                crate::ui::one_line(&u.args, 80),
                u.effect.as_str(),
                status(u.status)
            )
        })
        .collect();
    if undone.len() > MAX_LISTED {
        lines.push(format!("{indent}… and {} more", undone.len() - MAX_LISTED));
    }
    lines
}

/// The turns from `first` to `last` as words: `turn 4`, or `turns 4–7`.
pub(crate) fn turns(first: u64, last: u64) -> String {
    if first == last {
        format!("turn {first}")
    } else {
        format!("turns {first}–{last}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_turn_is_not_a_range() {
        assert_eq!(turns(2, 2), "turn 2");
        assert_eq!(turns(3, 5), "turns 3–5");
    }
    use ninetrix_proto::effects::Effect;
    use ninetrix_proto::snapshots::ObjectId;

    #[test]
    fn sizes_snapshots_and_effects_read_as_people_write_them() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(512 << 20), "512 MiB");
        assert_eq!(size(3 << 29), "1.5 GiB");
        let s = SnapshotRef {
            root: ObjectId::of(b"x"),
            files: 1,
            bytes: 2048,
        };
        assert_eq!(
            snapshot(&s),
            format!("snapshot {} (1 file, 2 KiB)", s.root.short())
        );
        let effect = |turn_seq, status| UndoneEffect {
            turn_seq,
            tool: "shell".into(),
            effect: Effect::Write,
            status,
            args: "{\"command\":\"git push\"}".into(),
        };
        let lines = undone_lines(
            &[
                effect(4, ToolCallStatus::Completed),
                effect(5, ToolCallStatus::Intent),
            ],
            "",
        );
        assert_eq!(
            lines,
            [
                "turn 4: shell {\"command\":\"git push\"} (write; done)",
                "turn 5: shell {\"command\":\"git push\"} (write; started, outcome unknown)",
            ]
        );
        let many: Vec<_> = (0..25).map(|_| effect(4, ToolCallStatus::Failed)).collect();
        let lines = undone_lines(&many, "  ");
        assert_eq!(lines.len(), 21);
        assert_eq!(lines[20], "  … and 5 more", "indented like the rest");
    }
}
