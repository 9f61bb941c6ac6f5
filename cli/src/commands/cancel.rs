//! `ninetrix cancel`: stop the turn a conversation is in — a replica's (`--replica N`) or a
//! session's (`--session KEY`). The cancel goes through the API's `POST /v1/threads/{id}/cancel`
//! with a generated dedupe key (API blips are retried with the same key, so it is stored once):
//! the API stores it in the thread's inbox, settles the turn's pending requests to people and
//! handoffs `cancelled`, and says which turn was running. The runner acts on it during that
//! turn: the model call in flight is abandoned, running tools get
//! `execution.interrupt_grace` to finish, and the turn ends `cancelled`.
//!
//! By default the command then follows the thread's events (`events?after=`) until it knows how
//! the cancel ended: the turn stopped by it, no turn found (the turn had ended first), or the
//! running turn ending on its own before the runner took the cancel. Which event settles it is
//! a pure function ([`outcome`]); the effects are at the edge ([`run`]).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{CancelRequest, CancelResponse, RunningTurn};
use ninetrix_proto::events::{Decoded, StoppedBy, TraceEvent};
use serde_json::json;

use crate::commands::invoke::{EXIT_TIMEOUT, EXIT_UNAVAILABLE, retry_blips, stopped_words};
use crate::commands::reset::{Conversation, ConversationArgs, ResetError, Target};

/// Longest `--by` the API takes.
const MAX_BY: usize = 64;
/// Longest `--reason` the API takes.
const MAX_REASON: usize = 2000;
/// How often the thread's events are read while waiting.
const POLL: Duration = Duration::from_millis(300);

/// Arguments of `ninetrix cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The conversation whose turn is cancelled.
    #[command(flatten)]
    pub conversation: ConversationArgs,
    /// Who cancels, as the trace and the console show it (`cancelled by NAME`) [default: $USER,
    /// else admin]
    #[arg(long, value_name = "NAME", value_parser = by_name)]
    pub by: Option<String>,
    /// Why, for people (kept with the cancel; up to 2,000 characters).
    #[arg(long, value_name = "TEXT", value_parser = reason_text)]
    pub reason: Option<String>,
    /// Send the cancel and return at once (default: wait until the turn has stopped).
    #[arg(long)]
    pub no_wait: bool,
    /// Seconds to wait for the turn to stop (then exit 124; the cancel stays stored).
    #[arg(long, default_value_t = 120, value_name = "S")]
    pub timeout: u64,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// A `--by` value: 1 to 64 characters, none of them control characters.
fn by_name(s: &str) -> Result<String, String> {
    let n = s.chars().count();
    if n == 0 || n > MAX_BY || s.chars().any(char::is_control) {
        return Err(format!(
            "`--by` takes a name of 1 to {MAX_BY} characters without control characters, e.g. \
             --by ana"
        ));
    }
    Ok(s.to_string())
}

/// A `--reason` value: at most 2,000 characters.
fn reason_text(s: &str) -> Result<String, String> {
    if s.chars().count() > MAX_REASON || s.contains('\0') {
        return Err(format!(
            "`--reason` takes at most {MAX_REASON} characters (and no NUL); say it shorter"
        ));
    }
    Ok(s.to_string())
}

/// Who cancels when `--by` is not given: the login name (`$USER`, cut to what the API takes),
/// else `admin`.
pub(crate) fn default_by(user: Option<&str>) -> String {
    let user = user.map(str::trim).unwrap_or_default();
    if user.is_empty() || user.chars().any(char::is_control) {
        "admin".to_string()
    } else {
        user.chars().take(MAX_BY).collect()
    }
}

/// How a cancel ended, from the thread's events after it was stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The turn ended `cancelled` by this cancel.
    Cancelled {
        /// The turn.
        turn: u64,
        /// Who cancelled.
        by: String,
    },
    /// The runner took the cancel with no turn running: nothing was stopped.
    Missed {
        /// The last turn, which had ended before.
        last_turn: u64,
    },
    /// The turn running when the cancel was stored ended before the runner took it.
    EndedFirst {
        /// The turn.
        turn: u64,
        /// How it ended: `finished`, `failed`, `interrupted by message N`, …
        how: String,
    },
}

impl Outcome {
    /// The one line that says it (stdout).
    pub(crate) fn line(&self, seq: u64) -> String {
        match self {
            Outcome::Cancelled { turn, by } => format!("⏹ turn {turn} cancelled by {by}"),
            Outcome::Missed { last_turn } => format!(
                "the cancel (message {seq}) found no turn running: turn {last_turn} had ended \
                 first, so nothing was stopped"
            ),
            Outcome::EndedFirst { turn, how } => format!(
                "turn {turn} {how} before the cancel reached it, so nothing was stopped (the \
                 cancel, message {seq}, does nothing)"
            ),
        }
    }

    /// Its name in `--json`.
    fn name(&self) -> &'static str {
        match self {
            Outcome::Cancelled { .. } => "cancelled",
            Outcome::Missed { .. } => "no_turn",
            Outcome::EndedFirst { .. } => "ended_first",
        }
    }

    /// The turn it is about.
    fn turn(&self) -> u64 {
        match self {
            Outcome::Cancelled { turn, .. } | Outcome::EndedFirst { turn, .. } => *turn,
            Outcome::Missed { last_turn } => *last_turn,
        }
    }
}

/// Whether `event` settles the cancel stored as inbox message `seq` while `running` was the
/// thread's turn: the turn ending stopped by it, the runner finding no turn for it, or the
/// running turn ending otherwise first (done, failed, or stopped by something else).
pub(crate) fn outcome(
    seq: u64,
    running: Option<RunningTurn>,
    event: &TraceEvent,
) -> Option<Outcome> {
    match event {
        TraceEvent::TurnCompleted(t) => match &t.stopped_by {
            Some(StoppedBy::Cancelled { seq: s, by }) if *s == seq => Some(Outcome::Cancelled {
                turn: t.turn_seq,
                by: by.clone(),
            }),
            _ if running.is_some_and(|r| r.turn_seq == t.turn_seq) => {
                let how = match &t.stopped_by {
                    Some(by) => stopped_words(by),
                    None if t.ok => "finished".to_string(),
                    None => "failed".to_string(),
                };
                Some(Outcome::EndedFirst {
                    turn: t.turn_seq,
                    how,
                })
            }
            _ => None,
        },
        TraceEvent::CancelMissed(c) if c.seq == seq => Some(Outcome::Missed {
            last_turn: c.last_turn,
        }),
        _ => None,
    }
}

/// What `cancel` says once the cancel is stored: which turn it stops (or that none runs), and
/// what else it settled.
pub(crate) fn stored_lines(whose: &str, stored: &CancelResponse, waiting: bool) -> Vec<String> {
    let seq = stored.seq;
    let mut lines = vec![match stored.running {
        // A retry whose first attempt was stored: the API answers the stored cancel without the
        // turn it found.
        None if stored.duplicate => format!(
            "cancel stored as message {seq} for {whose} (an earlier attempt stored it; the turn it \
             found is not known){}",
            if waiting {
                "; waiting for it to take effect"
            } else {
                ""
            }
        ),
        Some(r) if waiting => format!(
            "cancel stored as message {seq} for {whose}: turn {} is running; waiting for it to stop",
            r.turn_seq
        ),
        Some(r) => format!(
            "cancel stored as message {seq} for {whose}: turn {} is running; it stops once its \
             runner takes the cancel",
            r.turn_seq
        ),
        None => format!(
            "no turn is running on {whose}; the cancel (message {seq}) will stop nothing unless a \
             turn starts first"
        ),
    }];
    if stored.approvals_cancelled > 0 {
        lines.push(format!(
            "cancelled {}'s {} pending approval(s)",
            whose, stored.approvals_cancelled
        ));
    }
    if stored.handoffs_cancelled > 0 {
        lines.push(format!(
            "cancelled {}'s {} pending handoff(s) (each collaborator's turn gets a cancel of its own)",
            whose, stored.handoffs_cancelled
        ));
    }
    lines
}

/// Runs `ninetrix cancel`.
pub(crate) async fn run(args: &CancelArgs) -> anyhow::Result<ExitCode> {
    let agent = &args.conversation.agent;
    let Conversation {
        view,
        target,
        thread,
        ..
    } = match args.conversation.find().await {
        Ok(c) => c,
        Err(e) if matches!(e.downcast_ref(), Some(ResetError::Batch { .. })) => {
            eprintln!(
                "agent `{agent}` is a batch job (execution.durability: false): it takes no \
                 messages, so there is no turn to cancel and nothing was sent. A run ends with its \
                 task; Ctrl-C stops `ninetrix run`"
            );
            return Ok(ExitCode::from(EXIT_UNAVAILABLE));
        }
        Err(e) => return Err(e),
    };
    let pool = view.name.clone();
    let whose = target.whose(agent);
    let by = args
        .by
        .clone()
        .unwrap_or_else(|| default_by(std::env::var("USER").ok().as_deref()));
    // Read before the cancel is stored, so no event of its outcome is missed.
    let events_before = retry_blips(|| view.api.event_seq(thread)).await?;
    let key = format!("cancel-{}", ThreadId::new_v7());
    let request = CancelRequest {
        by: Some(by.clone()),
        reason: args.reason.clone(),
        dedupe_key: Some(key),
    };
    let addressed = match &target {
        Target::Replica(n) => format!("--replica {n}"),
        Target::Session(k) => format!("--session {}", crate::commands::invoke::shell_quote(k)),
    };
    let trace = format!("ninetrix trace -p {pool} --agent {agent} {addressed}");
    let stored = retry_blips(|| view.api.cancel(thread, &request))
        .await
        .map_err(|e| {
            e.context(format!(
                "the cancel may or may not have been stored; `{trace}` shows whether the turn \
                 is stopping before you send another"
            ))
        })?;
    let seq = stored.seq;
    let result = |outcome: &str, turn: Option<u64>, ended: Option<&str>| {
        json!({
            "thread_id": thread,
            "seq": seq,
            "duplicate": stored.duplicate,
            "by": by,
            "running": stored.running,
            "approvals_cancelled": stored.approvals_cancelled,
            "handoffs_cancelled": stored.handoffs_cancelled,
            "outcome": outcome,
            "turn": turn,
            "ended": ended,
        })
    };
    if args.no_wait {
        if args.json {
            outln!("{}", result("stored", None, None));
        } else {
            for line in stored_lines(&whose, &stored, false) {
                outln!("{line}");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.json {
        for line in stored_lines(&whose, &stored, true) {
            eprintln!("{line}");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut cursor = events_before;
    loop {
        let events = retry_blips(|| view.api.events(thread, cursor)).await?;
        for e in &events {
            cursor = cursor.max(e.seq);
            let Decoded::Known(event) = e.decode() else {
                continue;
            };
            if let TraceEvent::TurnStopping(t) = &event
                && t.by.seq() == seq
                && !args.json
            {
                eprintln!("  {}", stopping_line(t));
            }
            if let Some(o) = outcome(seq, stored.running, &event) {
                if args.json {
                    let ended = match &o {
                        Outcome::EndedFirst { how, .. } => Some(how.as_str()),
                        _ => None,
                    };
                    outln!("{}", result(o.name(), Some(o.turn()), ended));
                } else {
                    outln!("{}", o.line(seq));
                }
                return Ok(ExitCode::SUCCESS);
            }
        }
        if Instant::now() >= deadline {
            let what = match stored.running {
                Some(r) => format!("turn {} has not stopped", r.turn_seq),
                None => "the runner has not taken the cancel".to_string(),
            };
            if args.json {
                outln!(
                    "{}",
                    result("timeout", stored.running.map(|r| r.turn_seq), None)
                );
            }
            eprintln!(
                "{what} within {}s; the cancel (message {seq}) stays stored and is carried out \
                 when {whose}'s runner takes it (`ninetrix ps -p {pool}` shows whether it runs; \
                 `{trace} -f` follows the thread)",
                args.timeout
            );
            return Ok(ExitCode::from(EXIT_TIMEOUT));
        }
        tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

/// The progress line of a turn being stopped by the cancel.
fn stopping_line(t: &ninetrix_proto::events::TurnStopping) -> String {
    if t.running.is_empty() {
        format!("stopping turn {}", t.turn_seq)
    } else {
        format!(
            "stopping turn {}: letting {} finish (execution.interrupt_grace)",
            t.turn_seq,
            t.running.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::events::{CancelMissed, TurnCompleted, TurnStopping};

    fn completed(turn_seq: u64, ok: bool, stopped_by: Option<StoppedBy>) -> TraceEvent {
        TraceEvent::TurnCompleted(TurnCompleted {
            turn_seq,
            seq: 3,
            ok,
            reply: "r".into(),
            usage: Default::default(),
            duration_ms: 1.0,
            stopped_by,
        })
    }

    const RUNNING: Option<RunningTurn> = Some(RunningTurn {
        turn_seq: 4,
        seq: 3,
    });

    #[test]
    fn the_turn_stopped_by_this_cancel_settles_it() {
        let ours = StoppedBy::Cancelled {
            seq: 9,
            by: "ana".into(),
        };
        assert_eq!(
            outcome(9, RUNNING, &completed(4, false, Some(ours.clone()))),
            Some(Outcome::Cancelled {
                turn: 4,
                by: "ana".into()
            })
        );
        // With no turn running when it was stored, a turn that started first is still its.
        assert_eq!(
            outcome(9, None, &completed(5, false, Some(ours))),
            Some(Outcome::Cancelled {
                turn: 5,
                by: "ana".into()
            })
        );
        // Another cancel's stop of another turn is not this one's.
        let theirs = StoppedBy::Cancelled {
            seq: 8,
            by: "bo".into(),
        };
        assert_eq!(
            outcome(9, RUNNING, &completed(2, false, Some(theirs))),
            None
        );
        assert_eq!(outcome(9, None, &completed(4, true, None)), None);
    }

    #[test]
    fn a_turn_that_ended_first_or_no_turn_at_all_settles_it_too() {
        assert_eq!(
            outcome(
                9,
                RUNNING,
                &TraceEvent::CancelMissed(CancelMissed {
                    seq: 9,
                    by: "ana".into(),
                    last_turn: 4
                })
            ),
            Some(Outcome::Missed { last_turn: 4 })
        );
        let other_cancel = TraceEvent::CancelMissed(CancelMissed {
            seq: 7,
            by: "bo".into(),
            last_turn: 4,
        });
        assert_eq!(outcome(9, RUNNING, &other_cancel), None);
        let finished = outcome(9, RUNNING, &completed(4, true, None)).unwrap();
        assert_eq!(
            finished,
            Outcome::EndedFirst {
                turn: 4,
                how: "finished".into()
            }
        );
        assert_eq!(
            finished.line(9),
            "turn 4 finished before the cancel reached it, so nothing was stopped (the cancel, \
             message 9, does nothing)"
        );
        assert_eq!(
            outcome(9, RUNNING, &completed(4, false, None)),
            Some(Outcome::EndedFirst {
                turn: 4,
                how: "failed".into()
            })
        );
        assert_eq!(
            outcome(
                9,
                RUNNING,
                &completed(4, false, Some(StoppedBy::Interrupted { seq: 8 }))
            ),
            Some(Outcome::EndedFirst {
                turn: 4,
                how: "interrupted by message 8".into()
            })
        );
        // A stop on its way is progress, not the end.
        let stopping = TraceEvent::TurnStopping(TurnStopping {
            turn_seq: 4,
            by: StoppedBy::Cancelled {
                seq: 9,
                by: "ana".into(),
            },
            running: vec!["shell".into()],
        });
        assert_eq!(outcome(9, RUNNING, &stopping), None);
        let TraceEvent::TurnStopping(t) = &stopping else {
            unreachable!()
        };
        assert_eq!(
            stopping_line(t),
            "stopping turn 4: letting shell finish (execution.interrupt_grace)"
        );
        assert_eq!(
            Outcome::Cancelled {
                turn: 4,
                by: "ana".into()
            }
            .line(9),
            "⏹ turn 4 cancelled by ana"
        );
    }

    #[test]
    fn the_stored_cancel_names_the_running_turn_and_what_else_it_settled() {
        let mut stored = CancelResponse {
            seq: 9,
            duplicate: false,
            running: RUNNING,
            approvals_cancelled: 0,
            handoffs_cancelled: 0,
        };
        assert_eq!(
            stored_lines("writer-1", &stored, true),
            vec![
                "cancel stored as message 9 for writer-1: turn 4 is running; waiting for it to stop"
            ]
        );
        stored.approvals_cancelled = 2;
        stored.handoffs_cancelled = 1;
        let lines = stored_lines("writer-1", &stored, false);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[1], "cancelled writer-1's 2 pending approval(s)");
        assert!(lines[2].starts_with("cancelled writer-1's 1 pending handoff(s)"));
        stored.running = None;
        stored.duplicate = true;
        assert_eq!(
            stored_lines("writer-1", &stored, false)[0],
            "cancel stored as message 9 for writer-1 (an earlier attempt stored it; the turn it \
             found is not known)"
        );
        stored.duplicate = false;
        stored.approvals_cancelled = 0;
        stored.handoffs_cancelled = 0;
        assert_eq!(
            stored_lines("session `k` of writer", &stored, true),
            vec![
                "no turn is running on session `k` of writer; the cancel (message 9) will stop \
                 nothing unless a turn starts first"
            ]
        );
    }

    #[test]
    fn the_canceller_is_the_login_name_else_admin() {
        assert_eq!(default_by(Some("ana")), "ana");
        assert_eq!(default_by(Some("")), "admin");
        assert_eq!(default_by(Some("  ")), "admin");
        assert_eq!(default_by(None), "admin");
        assert_eq!(default_by(Some(&"x".repeat(100))).len(), MAX_BY);
        assert!(by_name("").is_err());
        assert!(by_name(&"x".repeat(65)).is_err());
        assert!(by_name("a\nb").is_err());
        assert_eq!(by_name("ana"), Ok("ana".into()));
        assert!(reason_text(&"x".repeat(2001)).is_err());
        assert!(reason_text("the wrong file").is_ok());
    }
}
