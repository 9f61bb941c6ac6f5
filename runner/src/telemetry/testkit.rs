//! What the telemetry tests share: a clock, a thread, the span machine, events to feed it and
//! readers of its records.

pub(super) use chrono::TimeZone as _;
pub(super) use ninetrix_proto::api::{HandoffStatus, Usage};
pub(super) use ninetrix_proto::effects::Effect;
pub(super) use ninetrix_proto::events::{self as ev, ToolMode};
pub(super) use ninetrix_proto::message::Role;

use super::*;

pub(super) fn t(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000, 0).unwrap() + chrono::Duration::milliseconds(ms)
}

pub(super) fn thread() -> ThreadId {
    "0190a000-0000-7000-8000-000000000001".parse().unwrap()
}

pub(super) fn machine(epoch: u64) -> Spans {
    Spans::new(
        ThreadInfo {
            thread: thread(),
            agent: "helper".into(),
            session: Some("k1".into()),
            pool: Some("p".into()),
            replica: Some(2),
            provider: "anthropic".into(),
            model: "claude-x".into(),
        },
        epoch,
    )
}

pub(super) fn feed(spans: &mut Spans, at: i64, e: TraceEvent) -> Vec<SpanRecord> {
    spans.observe(t(at), Observed::Event(&e))
}

pub(super) fn boot(epoch: u64, boot_count: u64) -> TraceEvent {
    TraceEvent::Boot(ev::Boot {
        epoch,
        boot_count,
        restart_count: boot_count - 1,
        repaired: false,
        version: 0,
        host: None,
    })
}

pub(super) fn started(turn_seq: u64) -> TraceEvent {
    TraceEvent::TurnStarted(ev::TurnStarted {
        turn_seq,
        seq: turn_seq,
        input: "secret input".into(),
    })
}

pub(super) fn llm(stop: &str, latency_ms: u64) -> TraceEvent {
    TraceEvent::LlmCall(ev::LlmCall {
        model: "claude-x-2026".into(),
        input_tokens: 100,
        output_tokens: 20,
        cost_usd: 0.5,
        latency_ms,
        stop_reason: stop.into(),
        tool_calls: u64::from(stop == "tool_use"),
    })
}

pub(super) fn tool(mode: ToolMode, ok: bool) -> ev::ToolCall {
    ev::ToolCall {
        name: "file_write".into(),
        args: "{\"content\": \"secret\"}".into(),
        effect: Effect::Write,
        mode,
        duration_ms: 30,
        ok,
        key: "k-1".into(),
        result: "secret result".into(),
    }
}

pub(super) fn completed(turn_seq: u64, ok: bool) -> TraceEvent {
    TraceEvent::TurnCompleted(ev::TurnCompleted {
        turn_seq,
        seq: turn_seq,
        ok,
        reply: "secret reply".into(),
        usage: Usage {
            input_tokens: 200,
            output_tokens: 40,
            cost_usd: 1.0,
        },
        duration_ms: 1.0,
        stopped_by: None,
    })
}

pub(super) fn str_attr<'a>(r: &'a SpanRecord, key: &str) -> Option<&'a str> {
    match r.attr(key) {
        Some(Attr::Str(s)) => Some(s),
        _ => None,
    }
}

pub(super) fn int_attr(r: &SpanRecord, key: &str) -> Option<i64> {
    match r.attr(key) {
        Some(Attr::Int(i)) => Some(*i),
        _ => None,
    }
}

pub(super) fn bool_attr(r: &SpanRecord, key: &str) -> Option<bool> {
    match r.attr(key) {
        Some(Attr::Bool(b)) => Some(*b),
        _ => None,
    }
}

/// No attribute carries a message's, an argument's or a result's text.
pub(super) fn no_contents(records: &[SpanRecord]) {
    for r in records {
        for (k, v) in &r.attributes {
            assert!(
                !format!("{v:?}").contains("secret"),
                "{} {k}: {v:?}",
                r.name
            );
        }
    }
}
