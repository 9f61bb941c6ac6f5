//! The trace tree: one line per stored event (so `trace --follow` can stream), every event kind
//! matched by name with no catch-all; a kind this build does not know is one plain line. Each
//! boot says what that claim of the thread was ([`BootKind`], from the boot before it): the
//! first, a crash restart, a recreate, resumed after `down`, a session moved or taken up again.

use chrono::{DateTime, Utc};
use ninetrix_proto::api::{ApprovalKind, ApprovalStatus, Event};
use ninetrix_proto::boots::{BootKind, BootKinds};
use ninetrix_proto::context::{Strategy, tokens_short};
use ninetrix_proto::events::{Compacted, Decoded, ToolCall, ToolMode, TraceEvent};
use serde::Serialize;

use crate::ui::handoffs;
use crate::ui::one_line;
use crate::ui::style::Style;

/// Renders events into trace lines.
pub(crate) struct Renderer {
    pub(crate) style: Style,
    /// When the current turn started (times on its lines are relative to it).
    pub(crate) turn_start: Option<DateTime<Utc>>,
    /// The terminal's width.
    pub(crate) width: usize,
    /// The last checkpoint version seen (shown on the turn's last line).
    pub(crate) version: Option<u64>,
    /// The thread's boots so far (each boot is named from the one before).
    boots: BootKinds,
}

/// An event as `trace --json` prints it: its stored JSON and, for a boot, what it was.
#[derive(Serialize)]
pub(crate) struct JsonEvent<'a> {
    #[serde(flatten)]
    pub(crate) event: &'a Event,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) boot_kind: Option<BootKind>,
}

impl<'a> JsonEvent<'a> {
    /// `event` of the thread whose boots so far `boots` has seen.
    pub(crate) fn of(event: &'a Event, boots: &mut BootKinds) -> JsonEvent<'a> {
        let boot_kind = match event.decode() {
            Decoded::Known(TraceEvent::Boot(b)) => Some(boots.next(&b)),
            _ => None,
        };
        JsonEvent { event, boot_kind }
    }
}

impl Renderer {
    /// A renderer for a terminal of `width` columns.
    pub(crate) fn new(style: Style, width: usize) -> Renderer {
        Renderer {
            style,
            turn_start: None,
            width,
            version: None,
            boots: BootKinds::default(),
        }
    }

    fn rel(&self, at: DateTime<Utc>) -> String {
        match self.turn_start {
            Some(start) => format!("+{:>5} ms", (at - start).num_milliseconds().max(0)),
            None => "         ".into(),
        }
    }

    fn tool(&self, at: DateTime<Utc>, t: &ToolCall) -> String {
        let s = self.style;
        let mode = match t.mode {
            ToolMode::Replayed => s.bold("replayed"),
            ToolMode::OutcomeUnknown => s.error("outcome unknown"),
            ToolMode::Verification => s.bold("verification"),
            ToolMode::Executed | ToolMode::ReExecuted => t.mode.as_str().to_string(),
        };
        format!(
            "  ├─ {} tool {} {} · {} · {} · {} ms · {} · {}",
            self.rel(at),
            t.name,
            one_line(&t.args, 60),
            t.effect.as_str(),
            mode,
            t.duration_ms,
            if t.ok { s.ok("ok") } else { s.error("error") },
            one_line(&t.result, 60)
        )
    }

    /// The line of a fork, a rewind or a snapshot event (`None` for any other event).
    fn going_back(&self, event: &TraceEvent, at: DateTime<Utc>) -> Option<String> {
        let s = self.style;
        Some(match event {
            TraceEvent::Forked(f) => format!(
                "  · {} forked from thread {} at turn {} ({} messages{}{})",
                self.rel(at),
                f.parent,
                f.at_turn,
                f.history_len,
                f.snapshot
                    .as_ref()
                    .map(|s| format!(", files of snapshot {}", s.root.short()))
                    .unwrap_or_default(),
                if f.undone > 0 {
                    format!("; {} effects of the parent after it not undone", f.undone)
                } else {
                    String::new()
                }
            ),
            TraceEvent::ForkCreated(f) => format!(
                "  · {} forked at turn {}: thread {} (session {})",
                self.rel(at),
                f.at_turn,
                f.thread_id,
                f.session
            ),
            TraceEvent::Rewound(r) => format!(
                "  ⟲ {} rewound to turn {}{}{}{}",
                self.rel(at),
                r.to_turn,
                if r.from_turn > r.to_turn {
                    format!(
                        ": {} left on a branch ({} messages kept in the store)",
                        crate::ui::going_back::turns(r.to_turn + 1, r.from_turn),
                        r.left_messages
                    )
                } else {
                    String::new()
                },
                match &r.snapshot {
                    Some(s) => format!(
                        "; files of snapshot {} ({} written, {} removed)",
                        s.root.short(),
                        r.files_written,
                        r.files_removed
                    ),
                    None => "; files untouched (no snapshot)".to_string(),
                },
                if r.undone > 0 {
                    format!("; {} effects not undone", r.undone)
                } else {
                    String::new()
                }
            ),
            TraceEvent::RewindFailed(r) => format!(
                "  · {} rewind to turn {} {}: {}",
                self.rel(at),
                r.to_turn,
                s.error("not done"),
                r.why
            ),
            TraceEvent::SnapshotTaken(t) => format!(
                "  ├─ {} snapshot {} · {} files, {} · {} new objects ({}) · {} ms",
                self.rel(at),
                t.snapshot.root.short(),
                t.snapshot.files,
                crate::ui::going_back::size(t.snapshot.bytes),
                t.uploaded_objects,
                crate::ui::going_back::size(t.uploaded_bytes),
                t.ms
            ),
            TraceEvent::SnapshotSkipped(k) => format!(
                "  ├─ {} {}: {}",
                self.rel(at),
                s.error("no snapshot"),
                k.why
            ),
            TraceEvent::WorkspaceRestored(w) => format!(
                "  · {} workspace restored to snapshot {} ({} written, {} removed)",
                self.rel(at),
                w.snapshot.root.short(),
                w.files_written,
                w.files_removed
            ),
            TraceEvent::ReplayStarted(r) => format!(
                "  · {} replay of turns {}..{} of thread {} ({} turn(s)) against {}",
                self.rel(at),
                r.from_turn,
                r.to_turn,
                r.source,
                r.turns,
                r.candidate
            ),
            TraceEvent::ReplayAnswered(r) => format!(
                "  · {} {}({}) {}",
                self.rel(at),
                r.name,
                r.args,
                match r.verdict {
                    ninetrix_proto::replay::ReplayVerdict::Recorded =>
                        s.ok("answered from the recording").to_string(),
                    ninetrix_proto::replay::ReplayVerdict::RecordedAnswer => s
                        .ok("answered with the recorded person's answer")
                        .to_string(),
                    ninetrix_proto::replay::ReplayVerdict::Live => "ran live (a read)".to_string(),
                    ninetrix_proto::replay::ReplayVerdict::NotRun =>
                        s.error("not run: not in the recording").to_string(),
                }
            ),
            _ => return None,
        })
    }

    /// The line for one event, or `None` for events that only update the renderer's state.
    pub(crate) fn line(&mut self, e: &Event) -> Option<String> {
        let s = self.style;
        let w = self.width.saturating_sub(40).max(30);
        let at = e.at();
        let event = match e.decode() {
            Decoded::Known(event) => event,
            Decoded::Unknown { kind, .. } => {
                return Some(format!(
                    "  · {kind} (an event this version of ninetrix does not know)"
                ));
            }
        };
        let out = match event {
            TraceEvent::Boot(b) => {
                let kind = self.boots.next(&b);
                let label = match kind {
                    BootKind::CrashRestart => s.error(&kind.label()),
                    _ => kind.label(),
                };
                format!(
                    "{} boot · epoch {} · {label}{}",
                    s.bold("●"),
                    b.epoch,
                    if b.repaired {
                        " · history repaired"
                    } else {
                        ""
                    }
                )
            }
            TraceEvent::Ready(_) => return None,
            TraceEvent::Repair(r) => {
                let what: Vec<String> = r
                    .dropped
                    .iter()
                    .map(|d| {
                        let role = d.role.as_str();
                        if d.call_ids.is_empty() {
                            role.to_string()
                        } else {
                            format!("{role} ({})", one_line(&d.call_ids.join(", "), 40))
                        }
                    })
                    .collect();
                format!(
                    "  {} repair ({}): cut to {} messages, dropped {}: {}",
                    s.bold("↺"),
                    r.mode,
                    r.truncate_to,
                    r.dropped.len(),
                    what.join(", ")
                )
            }
            TraceEvent::Resume(r) => format!(
                "  {} resume: the interrupted message keeps its answered calls; {} still to run: {}",
                s.bold("↻"),
                r.pending_calls.len(),
                one_line(&r.pending_calls.join(", "), w)
            ),
            TraceEvent::TurnStarted(t) => {
                self.turn_start = Some(at);
                format!(
                    "{} turn {} · message {} · {}",
                    s.bold("▶"),
                    t.turn_seq,
                    t.seq,
                    one_line(&t.input, w)
                )
            }
            TraceEvent::TurnResumed(t) => {
                self.turn_start = Some(at);
                format!(
                    "{} turn {} resumed · message {}",
                    s.bold("▶"),
                    t.turn_seq,
                    t.seq
                )
            }
            TraceEvent::LlmCall(c) => format!(
                "  ├─ {} model {} · {}→{} tokens · {} ms · {}",
                self.rel(at),
                c.model,
                c.input_tokens,
                c.output_tokens,
                c.latency_ms,
                c.stop_reason
            ),
            TraceEvent::LlmRetry(r) => format!(
                "  ├─ {} model call failed ({}): {} · retrying in {} ms",
                self.rel(at),
                r.attempt_text(),
                s.error(&one_line(&r.reason, w)),
                r.retry_in_ms
            ),
            TraceEvent::ToolCall(t) | TraceEvent::ToolReplayed(t) => self.tool(at, &t),
            TraceEvent::UnknownTool(u) => format!(
                "  ├─ {} tool {} · {} · the agent has: {}",
                self.rel(at),
                u.name,
                s.error("no such tool"),
                one_line(&u.available.join(", "), w)
            ),
            TraceEvent::McpTools(m) => {
                let missing = if m.missing.is_empty() {
                    String::new()
                } else {
                    format!(" · {} {}", s.error("not offered:"), m.missing.join(", "))
                };
                format!(
                    "  mcp server {} · {}{}",
                    m.server,
                    one_line(&m.tool_list(), w),
                    missing
                )
            }
            TraceEvent::McpServerDown(d) => format!(
                "  {} {} mcp server {} · {}",
                s.bold("⚡"),
                self.rel(at),
                d.server,
                s.error(&one_line(&d.reason, w))
            ),
            TraceEvent::McpServerUp(u) => format!(
                "  {} {} mcp server {} · back after {:.1} s",
                s.bold("⚡"),
                self.rel(at),
                u.server,
                u.down_ms as f64 / 1000.0
            ),
            TraceEvent::Outage(o) => format!(
                "  {} {} · {}",
                s.bold("⚡"),
                self.rel(at),
                one_line(&o.text(), w)
            ),
            TraceEvent::Checkpoint(c) => {
                self.version = Some(c.version);
                return None;
            }
            TraceEvent::Compacted(c) => format!(
                "  {} {} compacted turns {}–{} ({} → {} tokens) · {}{}",
                s.bold("⇣"),
                self.rel(at),
                c.turns[0],
                c.turns[1],
                tokens_short(c.tokens_before),
                tokens_short(c.tokens_after),
                compaction_how(&c),
                self.version
                    .map_or(String::new(), |v| format!(" · checkpoint v{v}"))
            ),
            TraceEvent::CompactionSkipped(c) => format!(
                "  {} {} compaction due ({}) not made: {}",
                s.bold("⇣"),
                self.rel(at),
                c.reason.as_str(),
                one_line(&c.why, w)
            ),
            TraceEvent::Steered(t) => format!(
                "  ├─ {} {} message {} joined the turn: {}",
                self.rel(at),
                s.bold("↪ steered"),
                t.seq,
                one_line(&t.input, w)
            ),
            TraceEvent::TurnStopping(t) => format!(
                "  ├─ {} {} {}{}",
                self.rel(at),
                s.error("⏹"),
                crate::commands::invoke::stopped_words(&t.by),
                if t.running.is_empty() {
                    String::new()
                } else {
                    format!(" · letting {} finish", t.running.join(", "))
                }
            ),
            TraceEvent::CancelMissed(c) => format!(
                "  · {} cancel {} by {} found no turn running (turn {} had ended)",
                self.rel(at),
                c.seq,
                c.by,
                c.last_turn
            ),
            TraceEvent::JobStarted(j) => format!(
                "  ├─ {} job {} ({}) started: {}",
                self.rel(at),
                j.name,
                j.job,
                j.command
            ),
            TraceEvent::JobFinished(j) => format!(
                "  ├─ {} job {} ({}) {}",
                self.rel(at),
                j.name,
                j.job,
                match (j.exit_code, j.timed_out) {
                    (_, true) => s.error("timed out"),
                    (Some(0), _) => s.ok("exited 0"),
                    (Some(c), _) => s.error(&format!("exited {c}")),
                    (None, _) => "ended".to_string(),
                }
            ),
            TraceEvent::JobReattached(j) => format!(
                "  · {} re-attached to job {} ({}): {}{}",
                self.rel(at),
                j.name,
                j.job,
                j.state,
                j.exit_code
                    .map(|c| format!(" (code {c})"))
                    .unwrap_or_default()
            ),
            ev @ (TraceEvent::Forked(_)
            | TraceEvent::ForkCreated(_)
            | TraceEvent::Rewound(_)
            | TraceEvent::RewindFailed(_)
            | TraceEvent::SnapshotTaken(_)
            | TraceEvent::SnapshotSkipped(_)
            | TraceEvent::WorkspaceRestored(_)
            | TraceEvent::ReplayStarted(_)
            | TraceEvent::ReplayAnswered(_)) => self.going_back(&ev, at)?,
            TraceEvent::TurnCompleted(t) => {
                let line = format!(
                    "  └─ {} {} in {:.0} ms · checkpoint v{} · {}",
                    self.rel(at),
                    match (&t.stopped_by, t.ok) {
                        (Some(by), _) => s.error(by.word()),
                        (None, true) => s.ok("done"),
                        (None, false) => s.error("failed"),
                    },
                    t.duration_ms,
                    self.version.map_or("?".into(), |v| v.to_string()),
                    one_line(&t.reply, w)
                );
                self.turn_start = None;
                line
            }
            TraceEvent::BudgetExceeded(b) => format!(
                "  {} budget exceeded: spent ${} of ${} ({})",
                s.error("!"),
                b.spent_usd,
                b.budget_usd,
                ninetrix_runner::events::budget_words(b.scope.as_ref())
            ),
            TraceEvent::ModelFallback(f) => format!(
                "  {} model call answered by the fallback {} ({} failed: {})",
                s.error("↪"),
                f.to,
                f.from,
                one_line(&f.reason, w)
            ),
            TraceEvent::ModelWaited(m) => format!(
                "  {} waited {:.1} s: {}",
                s.dim("…"),
                m.waited_ms as f64 / 1000.0,
                m.wait.text(&m.provider)
            ),
            TraceEvent::MaxTurnsReached(m) => format!(
                "  {} stopped after {} model rounds",
                s.error("!"),
                m.max_turns
            ),
            TraceEvent::ApprovalRequested(a) => format!(
                "  ├─ {} {} {} {} · {} · {} · expires in {}",
                self.rel(at),
                s.bold("?"),
                match a.kind {
                    ApprovalKind::Question => "question",
                    ApprovalKind::Budget => "budget raise requested",
                    ApprovalKind::Approval => "approval requested",
                },
                a.id,
                a.tool,
                one_line(&a.args, w.saturating_sub(30).max(20)),
                super::exact_duration(a.timeout_secs)
            ),
            TraceEvent::ApprovalDecided(a) => {
                let status = match a.status {
                    ApprovalStatus::Approved | ApprovalStatus::Answered => s.ok(a.status.as_str()),
                    _ => s.error(a.status.as_str()),
                };
                let detail = match (&a.answer, &a.reason) {
                    (Some(answer), _) => format!(" · {}", one_line(answer, w)),
                    (None, Some(reason)) => format!(" · {}", one_line(reason, w)),
                    (None, None) => String::new(),
                };
                format!(
                    "  ├─ {} {} {} {} by {}{}",
                    self.rel(at),
                    s.bold("✎"),
                    a.id,
                    status,
                    a.by,
                    detail
                )
            }
            TraceEvent::ApprovalExpired(a) => format!(
                "  ├─ {} {} {} {} · {} did not run",
                self.rel(at),
                s.bold("✎"),
                a.id,
                s.error("expired"),
                a.tool
            ),
            TraceEvent::ApprovalNotified(n) => {
                if n.ok {
                    format!(
                        "  │  {} notified {} (attempt {})",
                        self.rel(at),
                        n.id,
                        n.attempt
                    )
                } else {
                    format!(
                        "  │  {} notifying {} failed (attempt {}): {}",
                        self.rel(at),
                        n.id,
                        n.attempt,
                        s.error(&one_line(n.error.as_deref().unwrap_or("unknown error"), w))
                    )
                }
            }
            TraceEvent::HandoffSent(h) => format!(
                "  ├─ {} {}",
                self.rel(at),
                handoffs::sent(s, &h, w.saturating_sub(40).max(20))
            ),
            TraceEvent::HandoffSettled(h) => {
                format!("  ├─ {} {}", self.rel(at), handoffs::settled(s, &h, w))
            }
            TraceEvent::HandoffRefused(h) => {
                format!("  ├─ {} {}", self.rel(at), handoffs::refused(s, &h))
            }
            TraceEvent::HandoffReceived(h) => {
                format!("  ├─ {} {}", self.rel(at), handoffs::received(s, &h))
            }
            TraceEvent::HandoffReplied(h) => {
                format!("  ├─ {} {}", self.rel(at), handoffs::replied(s, &h))
            }
            TraceEvent::Error(err) => format!(
                "  {} {}: {}",
                s.error("✘"),
                err.stage.as_str(),
                one_line(&err.message, w)
            ),
        };
        Some(out)
    }
}

/// How a compaction was made, for its trace line: `summarized by MODEL` or `N tool results
/// cleared`, and why when it was not the threshold.
fn compaction_how(c: &Compacted) -> String {
    let how = match c.strategy {
        Strategy::ClearToolResults => format!("{} tool results cleared", c.cleared),
        _ => format!(
            "summarized by {} ({} chars)",
            c.model.as_deref().unwrap_or("the model"),
            c.summary_chars
        ),
    };
    match c.reason {
        ninetrix_proto::context::CompactionReason::Threshold => how,
        other => format!("{how} · {}", other.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn ev(seq: u64, kind: &str, at_ms: i64, data: Value) -> Event {
        let at = DateTime::<Utc>::from_timestamp_millis(1_767_225_600_000 + at_ms)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut data = data;
        data["at"] = at.into();
        serde_json::from_value(
            json!({"seq": seq, "type": kind, "data": data, "epoch": 1, "created_at": "2026-01-01T00:00:00Z"}),
        )
        .unwrap()
    }

    fn tool(name: &str, mode: &str, ok: bool) -> Value {
        json!({"name": name, "args": "{\"path\":\"story.txt\"}", "effect": "write", "mode": mode,
               "duration_ms": 4, "ok": ok, "key": "k", "result": "appended 5 bytes"})
    }

    /// A boot of the thread's `n`th claim, by `process` in `container` of `replica`, which `up`
    /// created for `created`.
    fn boot(
        seq: u64,
        n: u64,
        process: &str,
        container: &str,
        created: &str,
        replica: u32,
    ) -> Event {
        ev(
            seq,
            "boot",
            i64::try_from(seq).unwrap() * 1000,
            json!({"epoch": n, "boot_count": n, "restart_count": n - 1, "repaired": false,
                   "host": {"process": process, "container": container, "created": created,
                            "replica": replica}}),
        )
    }

    #[test]
    fn going_back_reads_as_a_branch_left_and_files_restored() {
        let root = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        let snapshot = json!({"root": root, "files": 3, "bytes": 4096});
        let events = [
            ev(
                1,
                "forked",
                0,
                json!({"parent": "00000000-0000-0000-0000-000000000001",
                "at_turn": 3, "history_len": 12, "snapshot": snapshot, "undone": 1}),
            ),
            ev(
                2,
                "snapshot_taken",
                10,
                json!({"turn_seq": 4, "snapshot": snapshot,
                "uploaded_objects": 2, "uploaded_bytes": 1536, "hashed_files": 1, "ms": 4}),
            ),
            ev(
                3,
                "rewound",
                20,
                json!({"from_turn": 6, "to_turn": 2, "left_messages": 12,
                "snapshot": snapshot, "files_written": 2, "files_removed": 1, "undone": 1}),
            ),
            ev(
                4,
                "rewound",
                30,
                json!({"from_turn": 2, "to_turn": 2, "left_messages": 0}),
            ),
        ];
        let mut r = Renderer::new(Style { color: false }, 200);
        let lines: Vec<String> = events.iter().filter_map(|e| r.line(e)).collect();
        assert!(
            lines[0].contains("forked from thread 00000000-0000-0000-0000-000000000001 at turn 3"),
            "{lines:?}"
        );
        assert!(
            lines[1].contains("3 files, 4 KiB · 2 new objects (1.5 KiB)"),
            "{lines:?}"
        );
        assert!(
            lines[2].contains("rewound to turn 2: turns 3–6 left on a branch (12 messages kept in the store); files of snapshot aaaaaaaaaaaa (2 written, 1 removed); 1 effects not undone"),
            "{lines:?}"
        );
        assert!(
            lines[3].ends_with("rewound to turn 2; files untouched (no snapshot)"),
            "{lines:?}"
        );
    }

    #[test]
    fn each_boot_says_what_it_was() {
        let events = [
            boot(1, 1, "p1", "c1", "new", 1),
            // Docker restarted the same container.
            boot(2, 2, "p2", "c1", "new", 1),
            // `up` after a config change.
            boot(3, 3, "p3", "c2", "recreate", 1),
            // `down`, then `up`.
            boot(4, 4, "p4", "c3", "new", 1),
            // A session: taken up again by the same runner, then by replica 2.
            boot(5, 5, "p4", "c3", "new", 1),
            boot(6, 6, "p9", "c9", "new", 2),
            // An older runner's boot says only its count.
            ev(
                7,
                "boot",
                7000,
                json!({"epoch": 7, "boot_count": 7, "restart_count": 6, "repaired": true}),
            ),
        ];
        let mut r = Renderer::new(Style { color: false }, 100);
        let text = events
            .iter()
            .filter_map(|e| r.line(e))
            .collect::<Vec<_>>()
            .join("\n");
        insta::assert_snapshot!(text);
        // `--json` carries the same kinds.
        let mut boots = BootKinds::default();
        let kinds: Vec<Value> = events
            .iter()
            .map(|e| {
                let line = serde_json::to_value(JsonEvent::of(e, &mut boots)).unwrap();
                assert_eq!(line["data"], e.data, "the stored event is unchanged");
                line["boot_kind"].clone()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                json!({"kind": "first"}),
                json!({"kind": "crash_restart"}),
                json!({"kind": "recreated"}),
                json!({"kind": "resumed_after_down"}),
                json!({"kind": "taken_up"}),
                json!({"kind": "moved", "from": 1, "to": 2}),
                json!({"kind": "restart", "restarts": 6}),
            ]
        );
    }

    #[test]
    fn the_tree_of_a_crashed_and_resumed_turn() {
        let events = vec![
            ev(
                1,
                "boot",
                0,
                json!({"epoch": 1, "boot_count": 1, "restart_count": 0, "repaired": false}),
            ),
            ev(2, "ready", 1, json!({"epoch": 1})),
            ev(
                3,
                "turn_started",
                10,
                json!({"turn_seq": 1, "seq": 1, "input": "write the story"}),
            ),
            ev(4, "checkpoint", 12, json!({"version": 1, "history_len": 1})),
            ev(
                5,
                "llm_retry",
                15,
                json!({"attempt": 1, "max_attempts": 6, "reason": "HTTP 529: Overloaded", "retry_in_ms": 500}),
            ),
            ev(
                6,
                "llm_call",
                520,
                json!({"model": "claude-sonnet-4-6", "input_tokens": 120, "output_tokens": 42, "latency_ms": 830, "stop_reason": "tool_use"}),
            ),
            ev(7, "tool_call", 535, tool("file_write", "executed", true)),
            ev(
                8,
                "unknown_tool",
                536,
                json!({"name": "rm_rf", "call_id": "toolu_3", "available": ["file_write", "sleep"]}),
            ),
            ev(
                9,
                "boot",
                5000,
                json!({"epoch": 2, "boot_count": 2, "restart_count": 1, "repaired": true}),
            ),
            ev(
                10,
                "repair",
                5001,
                json!({"mode": "truncate", "truncate_to": 1, "dropped": [{"index": 1, "role": "assistant", "call_ids": ["toolu_1", "toolu_2"]}, {"index": 2, "role": "tool", "call_ids": ["toolu_1"]}]}),
            ),
            ev(11, "turn_resumed", 5002, json!({"turn_seq": 1, "seq": 1})),
            ev(
                12,
                "llm_call",
                5900,
                json!({"model": "claude-sonnet-4-6", "input_tokens": 120, "output_tokens": 42, "latency_ms": 890, "stop_reason": "tool_use"}),
            ),
            ev(
                13,
                "tool_replayed",
                5910,
                tool("file_write", "replayed", true),
            ),
            ev(
                14,
                "tool_call",
                5920,
                tool("file_write", "outcome_unknown", false),
            ),
            ev(
                15,
                "checkpoint",
                6000,
                json!({"version": 7, "history_len": 6}),
            ),
            ev(
                16,
                "turn_completed",
                6100,
                json!({"turn_seq": 1, "seq": 1, "ok": true, "reply": "Done.", "duration_ms": 1098.0}),
            ),
            ev(
                17,
                "boot",
                9000,
                json!({"epoch": 3, "boot_count": 3, "restart_count": 2, "repaired": false}),
            ),
            ev(
                18,
                "resume",
                9001,
                json!({"pending_calls": ["toolu_7", "toolu_8"]}),
            ),
            ev(19, "approval_requested", 9002, json!({"id": 1})),
            ev(
                20,
                "mcp_server_down",
                9003,
                json!({"server": "time", "reason": "cannot connect to http://mcp-time:8931/mcp"}),
            ),
            ev(
                21,
                "mcp_server_up",
                9500,
                json!({"server": "time", "down_ms": 12345}),
            ),
        ];
        let mut r = Renderer::new(Style { color: false }, 100);
        let lines: Vec<String> = events.iter().filter_map(|e| r.line(e)).collect();
        let text = lines.join("\n");
        // Tool arguments are shown as the call's JSON; nothing else is: no event printed raw.
        for raw in [
            "\"at\"",
            "\"pending_calls\"",
            "\"dropped\"",
            "\"call_ids\"",
            "\"reason\"",
        ] {
            assert!(!text.contains(raw), "raw event JSON ({raw}):\n{text}");
        }
        insta::assert_snapshot!(text);
    }

    #[test]
    fn the_mcp_tool_class_line_is_cut_only_to_a_known_width() {
        let tools: Vec<Value> = (0..12)
            .map(|i| json!({"name": format!("git__tool_number_{i}"), "effect": "read", "source": "annotations"}))
            .collect();
        let event = ev(
            1,
            "mcp_tools",
            0,
            json!({"server": "git", "tools": tools, "missing": []}),
        );
        let on_terminal = Renderer::new(Style { color: false }, 100)
            .line(&event)
            .unwrap();
        assert!(on_terminal.ends_with('…'), "{on_terminal}");
        let piped = Renderer::new(Style { color: false }, usize::MAX)
            .line(&event)
            .unwrap();
        assert!(
            piped.contains("git__tool_number_11") && !piped.contains('…'),
            "{piped}"
        );
    }

    const CALLER: &str = "0193a000-0000-7000-8000-000000000001";
    const HELPER: &str = "0193a000-0000-7000-8000-000000000002";
    const LEDGER: &str = "9f2c1a7b9f2c1a7b9f2c1a7b9f2c1a7b9f2c1a7b9f2c1a7b9f2c1a7b9f2c1a7b";

    fn sent(reattached: bool) -> Value {
        json!({"delivery_key": format!("handoff:{LEDGER}"), "tool": "ask_researcher",
               "agent": "researcher", "session": format!("handoff:{CALLER}:{LEDGER}"),
               "thread_id": HELPER, "task": "find three\nflights to Lisbon", "depth": 1,
               "reattached": reattached})
    }

    fn settled(status: &str, reply: &str, waited_ms: u64) -> Value {
        json!({"delivery_key": format!("handoff:{LEDGER}"), "agent": "researcher",
               "thread_id": HELPER, "status": status, "reply": reply, "cost_usd": 0.0012,
               "waited_ms": waited_ms})
    }

    /// The lines of events rendered one by one, in a turn that started at 0 ms.
    fn lines(events: &[(&str, i64, Value)]) -> Vec<String> {
        let mut r = Renderer::new(Style { color: false }, 120);
        let mut all = vec![ev(
            1,
            "turn_started",
            0,
            json!({"turn_seq": 1, "seq": 1, "input": "plan the trip"}),
        )];
        all.extend(
            events
                .iter()
                .enumerate()
                .map(|(i, (kind, at, data))| ev(i as u64 + 2, kind, *at, data.clone())),
        );
        all.iter().filter_map(|e| r.line(e)).skip(1).collect()
    }

    #[test]
    fn each_handoff_event_of_the_caller_is_a_line_of_the_tree() {
        let got = lines(&[
            ("handoff_sent", 12, sent(false)),
            ("handoff_sent", 15, sent(true)),
            (
                "handoff_settled",
                2312,
                settled("replied", "Found 3 flights.", 2300),
            ),
            (
                "handoff_settled",
                2400,
                settled("failed", "budget exceeded", 850),
            ),
            (
                "handoff_settled",
                300_100,
                settled("timed_out", "", 300_012),
            ),
            (
                "handoff_refused",
                300_200,
                json!({"tool": "ask_booker", "agent": "booker",
                       "chain": ["planner", "researcher", "booker"], "max_depth": 1}),
            ),
        ]);
        let session = "handoff:0193…9f2c1a7b";
        assert_eq!(
            got,
            vec![
                format!(
                    "  ├─ +   12 ms → asked researcher (session {session}; thread {HELPER}) · find three ⏎ flights to Lisbon"
                ),
                format!(
                    "  ├─ +   15 ms → re-attached to researcher (session {session}; thread {HELPER}) · find three ⏎ flights to Lisbon"
                ),
                "  ├─ + 2312 ms ← researcher replied after 2.3s ($0.0012): Found 3 flights.".into(),
                "  ├─ + 2400 ms ✗ researcher failed after 850 ms ($0.0012): budget exceeded".into(),
                "  ├─ +300100 ms ✗ researcher timed out after 5m".into(),
                "  ├─ +300200 ms ✗ not asked booker: the chain planner → researcher → booker is deeper than max_delegation_depth 1".into(),
            ]
        );
    }

    #[test]
    fn each_handoff_event_of_the_collaborator_is_a_line_of_the_tree() {
        let got = lines(&[
            (
                "handoff_received",
                1,
                json!({"delivery_key": "handoff:k", "from_agent": "planner",
                       "from_thread": CALLER, "chain": ["planner"]}),
            ),
            (
                "handoff_received",
                2,
                json!({"delivery_key": "handoff:k", "from_agent": "researcher",
                       "from_thread": CALLER, "chain": ["planner", "researcher"]}),
            ),
            (
                "handoff_replied",
                900,
                json!({"delivery_key": "handoff:k", "to_agent": "planner",
                       "to_thread": CALLER, "ok": true, "cost_usd": 0.0012}),
            ),
            (
                "handoff_replied",
                901,
                json!({"delivery_key": "handoff:k", "to_agent": "planner",
                       "to_thread": CALLER, "ok": false, "cost_usd": 0.5}),
            ),
        ]);
        assert_eq!(
            got,
            vec![
                format!("  ├─ +    1 ms ← task from planner (thread {CALLER})"),
                format!(
                    "  ├─ +    2 ms ← task from researcher (thread {CALLER}) · chain planner → researcher"
                ),
                format!("  ├─ +  900 ms → replied to planner (thread {CALLER}): done ($0.0012)"),
                format!(
                    "  ├─ +  901 ms → replied to planner (thread {CALLER}): not done ($0.5000)"
                ),
            ]
        );
    }
}
