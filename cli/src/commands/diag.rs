//! `ninetrix invoke` and `ninetrix trace`: work into a thread's inbox, and a thread's story, both
//! through the checkpoint API (never the database).

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use ninetrix_proto::ThreadId;
use serde_json::{Value, json};

use super::invoke::InvokeArgs;
use super::trace::TraceArgs;
use crate::pool::local_api::Api;
use crate::pool::resolve::PoolView;
use crate::ui::style::Style;

/// Exit code of `invoke --wait` when no reply came in time (like `timeout(1)`).
pub(crate) const EXIT_TIMEOUT: u8 = 124;

/// All events after `after`, paging through the API.
async fn events_after(api: &Api, thread: ThreadId, mut after: u64) -> anyhow::Result<Vec<Value>> {
    let mut all = Vec::new();
    loop {
        let page = api.events(thread, after).await?;
        let n = page.len();
        if let Some(last) = page.last() {
            after = last["seq"].as_u64().unwrap_or(after);
        }
        all.extend(page);
        if n < 1000 {
            return Ok(all);
        }
    }
}

/// Runs `ninetrix invoke`.
pub(crate) async fn invoke(args: &InvokeArgs) -> anyhow::Result<ExitCode> {
    let view = PoolView::open(&args.file, args.pool.as_deref())?;
    let thread = view.thread(&args.agent, args.replica)?;
    let key = args
        .id
        .clone()
        .unwrap_or_else(|| format!("invoke-{}", ThreadId::new_v7()));
    let (status, body) = view
        .api
        .request(
            reqwest::Method::POST,
            &format!("/v1/threads/{thread}/messages"),
            Some(json!({"content": args.message, "dedupe_key": key})),
        )
        .await?;
    if !status.is_success() {
        bail!(
            "the checkpoint API refused the message ({status}): {}",
            body["message"]
        );
    }
    let seq = body["seq"]
        .as_u64()
        .context("the API's answer has no seq")?;
    let duplicate = body["duplicate"].as_bool().unwrap_or(false);
    if args.no_wait {
        if args.json {
            outln!(
                "{}",
                json!({"thread_id": thread, "seq": seq, "duplicate": duplicate, "id": key})
            );
        } else {
            outln!(
                "queued as message {seq} for {}-{}{}",
                args.agent,
                args.replica,
                if duplicate {
                    " (already queued with this --id)"
                } else {
                    ""
                }
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let progress = std::io::stderr().is_terminal() && !args.json;
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut cursor = 0;
    let mut in_turn = false;
    loop {
        for e in events_after(&view.api, thread, cursor).await? {
            cursor = e["seq"].as_u64().unwrap_or(cursor);
            let d = &e["data"];
            match e["type"].as_str().unwrap_or("") {
                "turn_started" | "turn_resumed" => in_turn = d["seq"] == seq,
                "llm_call" if in_turn && progress => eprintln!(
                    "  model {} answered ({} ms)",
                    d["model"].as_str().unwrap_or("?"),
                    d["latency_ms"]
                ),
                "tool_call" | "tool_replayed" if in_turn && progress => eprintln!(
                    "  tool {} {}",
                    d["name"].as_str().unwrap_or("?"),
                    d["mode"].as_str().unwrap_or("")
                ),
                "turn_completed" if d["seq"] == seq => {
                    let ok = d["ok"].as_bool().unwrap_or(false);
                    if args.json {
                        outln!(
                            "{}",
                            json!({"thread_id": thread, "seq": seq, "ok": ok, "reply": d["reply"], "duration_ms": d["duration_ms"]})
                        );
                    } else {
                        outln!("{}", d["reply"].as_str().unwrap_or(""));
                    }
                    return Ok(if ok {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(crate::EXIT_FAILURE)
                    });
                }
                _ => {}
            }
        }
        if Instant::now() >= deadline {
            eprintln!(
                "no reply within {}s; message {seq} stays queued and will still be answered (follow it with `ninetrix trace --agent {} --replica {} -f`)",
                args.timeout, args.agent, args.replica
            );
            return Ok(ExitCode::from(EXIT_TIMEOUT));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// When the event happened: the runner's time if it sent one, else when the API stored it.
fn time(e: &Value) -> Option<DateTime<Utc>> {
    e["data"]["at"]
        .as_str()
        .or_else(|| e["created_at"].as_str())
        .and_then(|t| t.parse().ok())
}

fn text(v: &Value, max: usize) -> String {
    let s = v
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| v.to_string());
    let one_line = s.replace('\n', " ⏎ ");
    let mut out: String = one_line.chars().take(max).collect();
    if one_line.chars().count() > max {
        out.push('…');
    }
    out
}

/// Renders events into trace lines, one call per event (so `--follow` can stream).
struct Renderer {
    style: Style,
    turn_start: Option<DateTime<Utc>>,
    width: usize,
    /// The last checkpoint version seen (shown on the turn's last line).
    version: Option<u64>,
}

impl Renderer {
    fn rel(&self, e: &Value) -> String {
        match (self.turn_start, time(e)) {
            (Some(start), Some(t)) => format!("+{:>5} ms", (t - start).num_milliseconds().max(0)),
            _ => "         ".into(),
        }
    }

    fn line(&mut self, e: &Value) -> Option<String> {
        let d = &e["data"];
        let s = self.style;
        let w = self.width.saturating_sub(40).max(30);
        let out = match e["type"].as_str().unwrap_or("") {
            "boot" => format!(
                "{} boot · epoch {} · restart {}{}",
                s.bold("●"),
                d["epoch"],
                d["restart_count"],
                if d["repaired"] == true {
                    " · history repaired"
                } else {
                    ""
                }
            ),
            "ready" => return None,
            "repair" => {
                let dropped = d["dropped"].as_array().map_or(0, Vec::len);
                let what: Vec<String> = d["dropped"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|x| {
                        format!(
                            "{}{}",
                            x["role"].as_str().unwrap_or("?"),
                            x["call_ids"]
                                .as_array()
                                .filter(|c| !c.is_empty())
                                .map(|c| format!(" {}", text(&Value::from(c.clone()), 40)))
                                .unwrap_or_default()
                        )
                    })
                    .collect();
                format!(
                    "  {} repair ({}): cut to {} messages, dropped {dropped}: {}",
                    s.bold("↺"),
                    d["mode"].as_str().unwrap_or(""),
                    d["truncate_to"],
                    what.join(", ")
                )
            }
            "turn_started" => {
                self.turn_start = time(e);
                format!(
                    "{} turn {} · message {} · {}",
                    s.bold("▶"),
                    d["turn_seq"],
                    d["seq"],
                    text(&d["input"], w)
                )
            }
            "turn_resumed" => {
                self.turn_start = time(e);
                format!(
                    "{} turn {} resumed · message {}",
                    s.bold("▶"),
                    d["turn_seq"],
                    d["seq"]
                )
            }
            "llm_call" => format!(
                "  ├─ {} model {} · {}→{} tokens · {} ms · {}",
                self.rel(e),
                d["model"].as_str().unwrap_or("?"),
                d["input_tokens"],
                d["output_tokens"],
                d["latency_ms"],
                d["stop_reason"].as_str().unwrap_or("")
            ),
            "tool_call" | "tool_replayed" => {
                let ok = d["ok"] == true;
                let mode = d["mode"].as_str().unwrap_or("");
                let mode = if mode == "replayed" {
                    s.bold("replayed")
                } else {
                    mode.to_string()
                };
                format!(
                    "  ├─ {} tool {} {} · {} · {} · {} ms · {} · {}",
                    self.rel(e),
                    d["name"].as_str().unwrap_or("?"),
                    text(&d["args"], 60),
                    d["effect"].as_str().unwrap_or(""),
                    mode,
                    d["duration_ms"],
                    if ok { s.ok("ok") } else { s.error("error") },
                    text(&d["result"], 60)
                )
            }
            "checkpoint" => {
                self.version = d["version"].as_u64();
                return None;
            }
            "turn_completed" => {
                let ok = d["ok"] == true;
                let line = format!(
                    "  └─ {} {} in {} ms · checkpoint v{} · {}",
                    self.rel(e),
                    if ok { s.ok("done") } else { s.error("failed") },
                    d["duration_ms"]
                        .as_f64()
                        .map_or("?".into(), |v| format!("{v:.0}")),
                    self.version.map_or("?".into(), |v| v.to_string()),
                    text(&d["reply"], w)
                );
                self.turn_start = None;
                line
            }
            "budget_exceeded" => format!(
                "  {} budget exceeded: spent ${} of ${}",
                s.error("!"),
                d["spent_usd"],
                d["budget_usd"]
            ),
            "max_turns_reached" => format!(
                "  {} stopped after {} model rounds",
                s.error("!"),
                d["max_turns"]
            ),
            "error" => format!(
                "  {} {}: {}",
                s.error("✘"),
                d["stage"].as_str().unwrap_or(""),
                text(&d["message"], w)
            ),
            other => format!("  · {other} {}", text(d, w)),
        };
        Some(out)
    }
}

/// Runs `ninetrix trace`.
pub(crate) async fn trace(args: &TraceArgs) -> anyhow::Result<ExitCode> {
    let (api, thread) = match (&args.thread_id, &args.agent) {
        (Some(t), _) => {
            let view = PoolView::open(&args.file, args.pool.as_deref())?;
            (view.api, t.parse::<ThreadId>()?)
        }
        (None, Some(agent)) => {
            let view = PoolView::open(&args.file, args.pool.as_deref())?;
            let t = view.thread(agent, args.replica)?;
            (view.api, t)
        }
        (None, None) => bail!("name the thread: --thread-id ID, or --agent A [--replica N]"),
    };
    let (status, info) = api
        .request(reqwest::Method::GET, &format!("/v1/threads/{thread}"), None)
        .await?;
    if status == reqwest::StatusCode::NOT_FOUND {
        bail!("thread {thread} does not exist in the checkpoint API");
    }
    let style = Style::stdout();
    let width = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(120);
    let mut r = Renderer {
        style,
        turn_start: None,
        width,
        version: None,
    };
    if !args.json {
        outln!(
            "{} {} · pool {} · agent {} · replica {} · {} · version {} · {} boot(s)",
            style.bold("thread"),
            thread,
            info["pool"].as_str().unwrap_or("-"),
            info["agent"].as_str().unwrap_or("-"),
            info["replica"],
            info["status"].as_str().unwrap_or("?"),
            info["version"],
            info["boot_count"]
        );
    }
    let mut cursor = 0;
    loop {
        for e in events_after(&api, thread, cursor).await? {
            cursor = e["seq"].as_u64().unwrap_or(cursor);
            if args.json {
                outln!("{e}");
            } else if let Some(line) = r.line(&e) {
                outln!("{line}");
            }
        }
        if !args.follow {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, kind: &str, at_ms: i64, data: Value) -> Value {
        let at = DateTime::<Utc>::from_timestamp_millis(1_767_225_600_000 + at_ms)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut data = data;
        data["at"] = at.into();
        json!({"seq": seq, "type": kind, "data": data, "epoch": 1, "created_at": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn the_tree_of_a_crashed_and_resumed_turn() {
        let events = vec![
            ev(
                1,
                "boot",
                0,
                json!({"epoch": 1, "restart_count": 0, "repaired": false}),
            ),
            ev(2, "ready", 1, json!({})),
            ev(
                3,
                "turn_started",
                10,
                json!({"turn_seq": 1, "seq": 1, "input": "write the story"}),
            ),
            ev(4, "checkpoint", 12, json!({"version": 1})),
            ev(
                5,
                "llm_call",
                20,
                json!({"model": "claude-sonnet-4-6", "input_tokens": 120, "output_tokens": 42, "latency_ms": 830, "stop_reason": "tool_use"}),
            ),
            ev(
                6,
                "tool_call",
                35,
                json!({"name": "file_write", "args": "{\"path\":\"story.txt\"}", "effect": "write", "mode": "executed", "duration_ms": 4, "ok": true, "result": "appended 5 bytes"}),
            ),
            ev(
                7,
                "boot",
                5000,
                json!({"epoch": 2, "restart_count": 1, "repaired": true}),
            ),
            ev(
                8,
                "repair",
                5001,
                json!({"mode": "truncate", "truncate_to": 1, "dropped": [{"index": 1, "role": "assistant", "call_ids": ["toolu_1", "toolu_2"]}, {"index": 2, "role": "tool", "call_ids": ["toolu_1"]}]}),
            ),
            ev(9, "turn_resumed", 5002, json!({"turn_seq": 1, "seq": 1})),
            ev(
                10,
                "llm_call",
                5900,
                json!({"model": "claude-sonnet-4-6", "input_tokens": 120, "output_tokens": 42, "latency_ms": 890, "stop_reason": "tool_use"}),
            ),
            ev(
                11,
                "tool_replayed",
                5910,
                json!({"name": "file_write", "args": "{\"path\":\"story.txt\"}", "effect": "write", "mode": "replayed", "duration_ms": 3, "ok": true, "result": "appended 5 bytes"}),
            ),
            ev(12, "checkpoint", 6000, json!({"version": 7})),
            ev(
                13,
                "turn_completed",
                6100,
                json!({"turn_seq": 1, "seq": 1, "ok": true, "reply": "Done.", "duration_ms": 1098.0}),
            ),
        ];
        let mut r = Renderer {
            style: Style { color: false },
            turn_start: None,
            width: 100,
            version: None,
        };
        let lines: Vec<String> = events.iter().filter_map(|e| r.line(e)).collect();
        insta::assert_snapshot!(lines.join("\n"));
    }
}
