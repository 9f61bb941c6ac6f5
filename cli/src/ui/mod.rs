//! Rendering: colours, `up`'s live progress, tables, the trace tree, triggers, and a reply as it
//! streams.

pub(crate) mod going_back;
pub(crate) mod handoff_tree;
pub(crate) mod handoffs;
pub(crate) mod progress;
pub(crate) mod replay;
pub(crate) mod streamed;
pub(crate) mod style;
pub(crate) mod table;
pub(crate) mod trace;
pub(crate) mod triggers;

pub(crate) use ninetrix_agentfile::units::format_duration as exact_duration;

/// Text on one line, cut to `max` characters.
pub(crate) fn one_line(s: &str, max: usize) -> String {
    let flat = s.replace('\n', " ⏎ ");
    let mut out: String = flat.chars().take(max).collect();
    if flat.chars().count() > max {
        out.push('…');
    }
    out
}
