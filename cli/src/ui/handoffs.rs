//! Handoffs between agents as people read them: the words of each handoff event, shared by
//! `invoke`'s progress lines, the trace tree and `trace --follow-handoffs`'s tree across agents
//! (`handoff_tree`).

use ninetrix_proto::api::HandoffStatus;
use ninetrix_proto::events::{
    HandoffReceived, HandoffRefused, HandoffReplied, HandoffSent, HandoffSettled,
};
use ninetrix_proto::handoffs::chain_text;

use crate::ui::one_line;
use crate::ui::style::Style;

/// A session key short enough for a line: whole up to 40 characters, else its start and end
/// (`handoff:0193…9f2c1a7b`; the thread ID beside it names the thread exactly).
pub(crate) fn short_session(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() <= 40 {
        return key.to_string();
    }
    let head: String = chars[..12].iter().collect();
    let tail: String = chars[chars.len() - 8..].iter().collect();
    format!("{head}…{tail}")
}

/// How long a caller waited, in the unit that reads best: `850 ms`, `2.3s`, `5m`, `2m 5s`,
/// `1h 5m`.
pub(crate) fn waited(ms: u64) -> String {
    if ms < 1_000 {
        return format!("{ms} ms");
    }
    if ms < 59_950 {
        return format!("{:.1}s", ms as f64 / 1_000.0);
    }
    let secs = (ms + 500) / 1_000;
    if secs < 3_600 {
        return match secs % 60 {
            0 => format!("{}m", secs / 60),
            s => format!("{}m {s}s", secs / 60),
        };
    }
    let mins = (secs + 30) / 60;
    match mins % 60 {
        0 => format!("{}h", mins / 60),
        m => format!("{}h {m}m", mins / 60),
    }
}

/// Dollars as the handoff lines show them: `$0.0012`.
pub(crate) fn dollars(usd: f64) -> String {
    format!("${usd:.4}")
}

/// `→ asked researcher (session handoff:…; thread ID) · TASK`, or `→ re-attached to …` for a
/// restarted caller that found its task already filed; `→ asked crm (A2A task ID at CARD) ·
/// TASK` for a remote A2A agent.
pub(crate) fn sent(s: Style, h: &HandoffSent, width: usize) -> String {
    if let Some(a2a) = &h.a2a {
        return format!(
            "{} asked {} (A2A task {} at {}) · {}",
            s.bold("→"),
            h.agent,
            a2a.task_id.as_deref().unwrap_or("?"),
            a2a.card,
            one_line(&h.task, width)
        );
    }
    let thread = h.thread_id.map(|t| t.to_string()).unwrap_or_default();
    format!(
        "{} {} {} (session {}; thread {}) · {}",
        s.bold("→"),
        if h.reattached {
            "re-attached to"
        } else {
            "asked"
        },
        h.agent,
        short_session(&h.session),
        thread,
        one_line(&h.task, width)
    )
}

/// `← researcher replied after 2.3s ($0.0012): REPLY`, `✗ researcher failed after …: WHY`,
/// `✗ researcher timed out after 5m`.
pub(crate) fn settled(s: Style, h: &HandoffSettled, width: usize) -> String {
    let reply = if h.reply.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", one_line(&h.reply, width))
    };
    // A remote A2A agent's task, and the state it ended in.
    let reply = match &h.a2a {
        Some(a2a) => format!(
            " [A2A task {}{}]{reply}",
            a2a.task_id.as_deref().unwrap_or("?"),
            a2a.state
                .as_deref()
                .map(|st| format!(", {}", st.trim_start_matches("TASK_STATE_")))
                .unwrap_or_default()
        ),
        None => reply,
    };
    let after = waited(h.waited_ms);
    match h.status {
        HandoffStatus::Replied => format!(
            "{} {} replied after {after} ({}){reply}",
            s.ok("←"),
            h.agent,
            dollars(h.cost_usd)
        ),
        HandoffStatus::Failed => format!(
            "{} {} {} after {after} ({}){reply}",
            s.error("✗"),
            h.agent,
            s.error("failed"),
            dollars(h.cost_usd)
        ),
        HandoffStatus::Cancelled => format!(
            "{} {} {} after {after}{reply}",
            s.error("✗"),
            h.agent,
            s.error("cancelled")
        ),
        HandoffStatus::TimedOut => format!(
            "{} {} {} after {after}{reply}",
            s.error("✗"),
            h.agent,
            s.error("timed out")
        ),
        HandoffStatus::Pending => format!(
            "{} {} still working after {after}{reply}",
            s.bold("…"),
            h.agent
        ),
    }
}

/// `✗ not asked researcher: the chain a → b → … is deeper than max_delegation_depth 4`.
pub(crate) fn refused(s: Style, h: &HandoffRefused) -> String {
    format!(
        "{} not asked {}: the chain {} is deeper than max_delegation_depth {}",
        s.error("✗"),
        h.agent,
        chain_text(&h.chain),
        h.max_depth
    )
}

/// `← task from planner (thread ID)`, with the chain when the asker was itself asked
/// (`· chain a → planner`).
pub(crate) fn received(s: Style, h: &HandoffReceived) -> String {
    let chain = if h.chain.len() > 1 {
        format!(" · chain {}", chain_text(&h.chain))
    } else {
        String::new()
    };
    format!(
        "{} task from {} (thread {}){chain}",
        s.bold("←"),
        h.from_agent,
        h.from_thread
    )
}

/// `→ replied to planner (thread ID): done ($0.0012)`, or `not done`.
pub(crate) fn replied(s: Style, h: &HandoffReplied) -> String {
    format!(
        "{} replied to {} (thread {}): {} ({})",
        s.bold("→"),
        h.to_agent,
        h.to_thread,
        if h.ok {
            s.ok("done")
        } else {
            s.error("not done")
        },
        dollars(h.cost_usd)
    )
}

#[cfg(test)]
mod tests {
    use ninetrix_proto::ThreadId;

    use super::*;

    fn id(n: u64) -> ThreadId {
        format!("0193a000-0000-7000-8000-{n:012}").parse().unwrap()
    }

    #[test]
    fn waits_read_in_the_unit_that_fits() {
        let cases = [
            (850, "850 ms"),
            (2_300, "2.3s"),
            (59_940, "59.9s"),
            (59_990, "1m"),
            (300_012, "5m"),
            (125_000, "2m 5s"),
            (3_900_000, "1h 5m"),
            (7_200_000, "2h"),
        ];
        for (ms, want) in cases {
            assert_eq!(waited(ms), want, "{ms} ms");
        }
    }

    #[test]
    fn a_remote_a2a_agent_s_task_is_shown_by_its_card_and_id() {
        let s = Style { color: false };
        let a2a = ninetrix_proto::events::A2aTask {
            card: "https://crm.example.com/card.json".into(),
            task_id: Some("t-1".into()),
            state: None,
        };
        let sent = HandoffSent {
            delivery_key: "ninetrix-k".into(),
            tool: "ask_crm".into(),
            agent: "crm".into(),
            session: String::new(),
            thread_id: None,
            a2a: Some(a2a.clone()),
            task: "find\nAda".into(),
            depth: 1,
            reattached: false,
        };
        assert_eq!(
            super::sent(s, &sent, 80),
            "→ asked crm (A2A task t-1 at https://crm.example.com/card.json) · find ⏎ Ada"
        );
        let settled = HandoffSettled {
            delivery_key: "ninetrix-k".into(),
            agent: "crm".into(),
            thread_id: None,
            a2a: Some(ninetrix_proto::events::A2aTask {
                state: Some("TASK_STATE_FAILED".into()),
                ..a2a
            }),
            status: HandoffStatus::Failed,
            reply: "no such customer".into(),
            cost_usd: 0.0,
            waited_ms: 1200,
        };
        assert_eq!(
            super::settled(s, &settled, 80),
            "✗ crm failed after 1.2s ($0.0000) [A2A task t-1, FAILED]: no such customer"
        );
    }

    #[test]
    fn long_session_keys_keep_their_start_and_end() {
        assert_eq!(short_session("customer-42"), "customer-42");
        let key = format!("handoff:{}:{}", id(1), "ab12".repeat(16));
        assert_eq!(short_session(&key), "handoff:0193…ab12ab12");
    }
}
