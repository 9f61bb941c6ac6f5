//! `trace --follow-handoffs`'s tree across agents — each `handoff_sent` line followed by the
//! collaborator's session thread, indented (the words of each handoff are `handoffs`').
//!
//! The tree is built in two steps so the rendering is pure: [`collect`] reads the threads
//! breadth-first (the caller's, then each collaborator's that a `handoff_sent` names, to
//! [`MAX_FOLLOW_DEPTH`] handoffs), then [`tree_lines`] or [`json_lines`] walk that map.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;

use ninetrix_proto::ThreadId;
use ninetrix_proto::api::Event;
use ninetrix_proto::events::{Decoded, HandoffSent, TraceEvent};
use serde::Serialize;

use crate::ui::handoffs::short_session;
use crate::ui::style::Style;
use crate::ui::trace::{JsonEvent, Renderer};
use ninetrix_proto::boots::BootKinds;

/// How many handoffs deep `trace --follow-handoffs` follows.
pub(crate) const MAX_FOLLOW_DEPTH: usize = 16;

/// What one nested block is indented by, per handoff.
const INDENT: &str = "  │   ";

/// The label of a collaborator's block in the tree: `┌ researcher · session … · thread ID`.
fn label(s: Style, h: &HandoffSent) -> String {
    let thread = h.thread_id.map(|t| t.to_string()).unwrap_or_default();
    format!(
        "┌ {} · session {} · thread {thread}",
        s.bold(&h.agent),
        short_session(&h.session),
    )
}

/// Each thread's events as read: `Err` says why a thread could not be read.
pub(crate) type Threads = HashMap<ThreadId, Result<Vec<Event>, String>>;

/// The handoffs to the pool's collaborators that a thread's `handoff_sent` events name, in
/// order, with their threads (a task sent to a remote A2A agent has no thread here to follow).
fn handed_to(events: &[Event]) -> impl Iterator<Item = (ThreadId, HandoffSent)> + '_ {
    events.iter().filter_map(|e| match e.decode() {
        Decoded::Known(TraceEvent::HandoffSent(h)) => Some((h.thread_id?, h)),
        _ => None,
    })
}

/// Reads the tree of threads under `root` (whose events are `root_events`) breadth-first: each
/// thread a `handoff_sent` names, once, up to [`MAX_FOLLOW_DEPTH`] handoffs below the root. A
/// thread that cannot be read is kept as its error (the tree says so), not a failure.
pub(crate) async fn collect<F, Fut>(
    root: ThreadId,
    root_events: Vec<Event>,
    mut fetch: F,
) -> Threads
where
    F: FnMut(ThreadId) -> Fut,
    Fut: Future<Output = anyhow::Result<Vec<Event>>>,
{
    let mut threads = Threads::new();
    let mut queue: VecDeque<(ThreadId, usize)> =
        handed_to(&root_events).map(|(t, _)| (t, 1)).collect();
    threads.insert(root, Ok(root_events));
    while let Some((thread, depth)) = queue.pop_front() {
        if depth > MAX_FOLLOW_DEPTH || threads.contains_key(&thread) {
            continue;
        }
        let events = fetch(thread).await.map_err(|e| format!("{e:#}"));
        if let Ok(events) = &events {
            queue.extend(handed_to(events).map(|(t, _)| (t, depth + 1)));
        }
        threads.insert(thread, events);
    }
    threads
}

/// One step of the walk down the tree.
enum Step<'a> {
    /// An event of `thread`, `depth` handoffs below the root.
    Event {
        depth: usize,
        thread: ThreadId,
        event: &'a Event,
    },
    /// The thread a `handoff_sent` names follows, at `depth`, until the matching `Leave`.
    Enter { depth: usize, sent: HandoffSent },
    /// The end of the thread last entered.
    Leave,
    /// A thread that is not shown here, and why.
    Skip { depth: usize, why: String },
}

/// Walks the tree depth first: a thread's events, each `handoff_sent` followed at once by the
/// collaborator's thread. A thread is shown once (a re-attached handoff, or a cycle, points
/// back to it) and no deeper than [`MAX_FOLLOW_DEPTH`].
fn walk(threads: &Threads, root: ThreadId, visit: &mut dyn FnMut(Step<'_>)) {
    let mut seen = HashSet::from([root]);
    walk_thread(threads, root, 0, &mut seen, visit);
}

fn walk_thread(
    threads: &Threads,
    thread: ThreadId,
    depth: usize,
    seen: &mut HashSet<ThreadId>,
    visit: &mut dyn FnMut(Step<'_>),
) {
    let events = match threads.get(&thread) {
        Some(Ok(events)) => events,
        Some(Err(why)) => {
            visit(Step::Skip {
                depth,
                why: format!("cannot read its events: {why}"),
            });
            return;
        }
        None => {
            visit(Step::Skip {
                depth,
                why: "its events were not read".into(),
            });
            return;
        }
    };
    if events.is_empty() {
        visit(Step::Skip {
            depth,
            why: "no events yet".into(),
        });
    }
    for event in events {
        visit(Step::Event {
            depth,
            thread,
            event,
        });
        let Decoded::Known(TraceEvent::HandoffSent(sent)) = event.decode() else {
            continue;
        };
        let Some(child) = sent.thread_id else {
            continue;
        };
        let why = if depth + 1 > MAX_FOLLOW_DEPTH {
            format!("thread {child} not followed: deeper than {MAX_FOLLOW_DEPTH} handoffs")
        } else if !seen.insert(child) {
            format!("thread {child} is shown above")
        } else {
            visit(Step::Enter {
                depth: depth + 1,
                sent,
            });
            walk_thread(threads, child, depth + 1, seen, visit);
            visit(Step::Leave);
            continue;
        };
        visit(Step::Skip {
            depth: depth + 1,
            why,
        });
    }
}

/// The trace tree across agents: the root thread's lines, each `handoff_sent` line followed by
/// the collaborator's thread (labelled with its agent, session and thread) indented one level.
pub(crate) fn tree_lines(
    threads: &Threads,
    root: ThreadId,
    style: Style,
    width: usize,
) -> Vec<String> {
    let indent = |depth: usize| INDENT.repeat(depth);
    let narrower = |depth: usize| width.saturating_sub(INDENT.len() * depth);
    let mut renderers = vec![Renderer::new(style, width)];
    let mut out = Vec::new();
    walk(threads, root, &mut |step| match step {
        Step::Event { depth, event, .. } => {
            if let Some(line) = renderers.last_mut().and_then(|r| r.line(event)) {
                out.push(format!("{}{line}", indent(depth)));
            }
        }
        Step::Enter { depth, sent } => {
            out.push(format!("{}{}", indent(depth), label(style, &sent)));
            renderers.push(Renderer::new(style, narrower(depth)));
        }
        Step::Leave => {
            renderers.pop();
        }
        Step::Skip { depth, why } => {
            out.push(format!(
                "{}{}",
                indent(depth),
                style.dim(&format!("({why})"))
            ));
        }
    });
    out
}

/// An event with the thread it belongs to: `trace --json --follow-handoffs`'s lines.
#[derive(Serialize)]
struct ThreadEvent<'a> {
    thread_id: ThreadId,
    #[serde(flatten)]
    event: JsonEvent<'a>,
}

/// The events of every thread of the tree as JSON lines (each event's JSON with its
/// `thread_id`), in the tree's order: each collaborator thread's events right after the
/// `handoff_sent` that names it.
pub(crate) fn json_lines(threads: &Threads, root: ThreadId) -> serde_json::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut failed = None;
    let mut boots: std::collections::HashMap<ThreadId, BootKinds> = Default::default();
    walk(threads, root, &mut |step| {
        if let Step::Event { thread, event, .. } = step {
            match serde_json::to_string(&ThreadEvent {
                thread_id: thread,
                event: JsonEvent::of(event, boots.entry(thread).or_default()),
            }) {
                Ok(line) => out.push(line),
                Err(e) => failed = Some(e),
            }
        }
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use chrono::{DateTime, Utc};
    use serde_json::{Value, json};

    use super::*;

    fn id(n: u64) -> ThreadId {
        format!("0193a000-0000-7000-8000-{n:012}").parse().unwrap()
    }

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

    fn sent(seq: u64, at: i64, agent: &str, to: ThreadId, reattached: bool) -> Event {
        ev(
            seq,
            "handoff_sent",
            at,
            json!({"delivery_key": format!("handoff:k{seq}"), "tool": format!("ask_{agent}"),
                   "agent": agent, "session": format!("handoff:k{seq}"), "thread_id": to,
                   "task": "find flights", "depth": 1, "reattached": reattached}),
        )
    }

    fn turn(seq: u64, at: i64, input: &str) -> Event {
        ev(
            seq,
            "turn_started",
            at,
            json!({"turn_seq": 1, "seq": 1, "input": input}),
        )
    }

    fn done(seq: u64, at: i64, took_ms: f64, reply: &str) -> Event {
        ev(
            seq,
            "turn_completed",
            at,
            json!({"turn_seq": 1, "seq": 1, "ok": true, "reply": reply, "duration_ms": took_ms}),
        )
    }

    /// Reads `threads` through [`collect`] as `trace` does, recording which threads it read.
    fn collected(root: ThreadId, threads: &Threads) -> (Threads, Vec<ThreadId>) {
        let read = RefCell::new(Vec::new());
        let root_events = threads[&root].clone().unwrap();
        let fetch = |t: ThreadId| {
            read.borrow_mut().push(t);
            let found = threads.get(&t).cloned();
            async move {
                match found {
                    Some(Ok(events)) => Ok(events),
                    Some(Err(why)) => Err(anyhow::anyhow!(why)),
                    None => Err(anyhow::anyhow!("no thread {t}")),
                }
            }
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let got = runtime.block_on(collect(root, root_events, fetch));
        (got, read.into_inner())
    }

    /// planner hands to researcher (and re-attaches to it), researcher to writer (unreadable)
    /// and back to planner (a cycle).
    fn planner_tree() -> Threads {
        let (planner, researcher, writer) = (id(1), id(2), id(3));
        Threads::from([
            (
                planner,
                Ok(vec![
                    turn(1, 0, "plan the trip"),
                    sent(2, 10, "researcher", researcher, false),
                    sent(3, 20, "researcher", researcher, true),
                    ev(
                        4,
                        "handoff_settled",
                        2_310,
                        json!({"delivery_key": "handoff:k2", "agent": "researcher",
                               "thread_id": researcher, "status": "replied",
                               "reply": "Found 3 flights.", "cost_usd": 0.0012,
                               "waited_ms": 2_300}),
                    ),
                    done(5, 2_400, 2_400.0, "Booked."),
                ]),
            ),
            (
                researcher,
                Ok(vec![
                    ev(1, "ready", 0, json!({"epoch": 1})),
                    turn(2, 100, "Task from agent `planner`:\nfind flights"),
                    ev(
                        3,
                        "handoff_received",
                        101,
                        json!({"delivery_key": "handoff:k2", "from_agent": "planner",
                               "from_thread": planner, "chain": ["planner"]}),
                    ),
                    sent(4, 110, "writer", writer, false),
                    sent(5, 120, "planner", planner, false),
                    ev(
                        6,
                        "handoff_replied",
                        900,
                        json!({"delivery_key": "handoff:k2", "to_agent": "planner",
                               "to_thread": planner, "ok": true, "cost_usd": 0.0012}),
                    ),
                    done(7, 900, 800.0, "Found 3 flights."),
                ]),
            ),
            (writer, Err("HTTP 404: no such thread".into())),
        ])
    }

    #[test]
    fn the_tree_reads_each_collaborator_thread_once() {
        let threads = planner_tree();
        let (got, read) = collected(id(1), &threads);
        assert_eq!(read, vec![id(2), id(3)]);
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[&id(3)].as_ref().unwrap_err(),
            "HTTP 404: no such thread"
        );
    }

    #[test]
    fn the_tree_nests_each_collaborator_under_its_handoff() {
        let (threads, _) = collected(id(1), &planner_tree());
        let text = tree_lines(&threads, id(1), Style { color: false }, 200).join("\n");
        let (p, r, w) = (id(1), id(2), id(3));
        let want = format!(
            "\
▶ turn 1 · message 1 · plan the trip
  ├─ +   10 ms → asked researcher (session handoff:k2; thread {r}) · find flights
  │   ┌ researcher · session handoff:k2 · thread {r}
  │   ▶ turn 1 · message 1 · Task from agent `planner`: ⏎ find flights
  │     ├─ +    1 ms ← task from planner (thread {p})
  │     ├─ +   10 ms → asked writer (session handoff:k4; thread {w}) · find flights
  │     │   ┌ writer · session handoff:k4 · thread {w}
  │     │   (cannot read its events: HTTP 404: no such thread)
  │     ├─ +   20 ms → asked planner (session handoff:k5; thread {p}) · find flights
  │     │   (thread {p} is shown above)
  │     ├─ +  800 ms → replied to planner (thread {p}): done ($0.0012)
  │     └─ +  800 ms done in 800 ms · checkpoint v? · Found 3 flights.
  ├─ +   20 ms → re-attached to researcher (session handoff:k3; thread {r}) · find flights
  │   (thread {r} is shown above)
  ├─ + 2310 ms ← researcher replied after 2.3s ($0.0012): Found 3 flights.
  └─ + 2400 ms done in 2400 ms · checkpoint v? · Booked."
        );
        assert_eq!(text, want, "got:\n{text}");
    }

    #[test]
    fn the_tree_stops_sixteen_handoffs_deep() {
        // Thread n hands work to thread n + 1, twenty times.
        let threads: Threads = (0..=20)
            .map(|n| {
                let events = vec![sent(1, 0, &format!("agent{}", n + 1), id(n + 1), false)];
                (id(n), Ok(events))
            })
            .collect();
        let (got, read) = collected(id(0), &threads);
        assert_eq!(read, (1..=16).map(id).collect::<Vec<_>>());
        let lines = tree_lines(&got, id(0), Style { color: false }, 200);
        let labels = lines.iter().filter(|l| l.contains('┌')).count();
        assert_eq!(labels, 16, "{lines:#?}");
        let last = lines.last().unwrap();
        assert_eq!(
            last.trim_start_matches([' ', '│']),
            format!("(thread {} not followed: deeper than 16 handoffs)", id(17))
        );
        assert!(last.starts_with(&INDENT.repeat(17)), "{last}");
    }

    #[test]
    fn json_lines_carry_each_event_s_thread_in_the_tree_s_order() {
        let (threads, _) = collected(id(1), &planner_tree());
        let lines = json_lines(&threads, id(1)).unwrap();
        let order: Vec<(String, String)> = lines
            .iter()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                assert!(v["data"]["at"].is_string(), "{l}");
                let thread = v["thread_id"].as_str().unwrap();
                let who = if thread == id(1).to_string() {
                    "planner"
                } else {
                    "researcher"
                };
                (who.to_string(), v["type"].as_str().unwrap().to_string())
            })
            .collect();
        let want = [
            ("planner", "turn_started"),
            ("planner", "handoff_sent"),
            ("researcher", "ready"),
            ("researcher", "turn_started"),
            ("researcher", "handoff_received"),
            ("researcher", "handoff_sent"),
            ("researcher", "handoff_sent"),
            ("researcher", "handoff_replied"),
            ("researcher", "turn_completed"),
            ("planner", "handoff_sent"),
            ("planner", "handoff_settled"),
            ("planner", "turn_completed"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(order, want);
        // The event's own fields are unchanged beside the thread.
        let first: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(first["seq"], 1);
        assert_eq!(first["epoch"], 1);
    }
}
