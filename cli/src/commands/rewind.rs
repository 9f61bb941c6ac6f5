//! `ninetrix rewind`: the same conversation — a replica's (`--replica N`), a session's
//! (`--session KEY`) or a thread named by its ID (`--thread ID`) — continues from the end of turn
//! N. The turns after it stay in the store on the branch the rewind leaves (a later rewind can
//! come back to one of them), the workspace's files are restored to turn N's snapshot when it has
//! one, and what the turns left did outside the workspace is not undone.
//!
//! Going back is a decision a person takes knowingly, so `rewind` first says what is left behind
//! and asks on a terminal; without one it refuses unless `--yes` (as `reset` does). The request
//! goes through the API's `POST /v1/threads/{id}/rewind`, which queues it in the thread's inbox
//! (refused while a turn runs or messages wait); the runner carries it out between turns. By
//! default the command then waits for the runner's `rewound` or `rewind_failed` event after the
//! queued seq and says what happened. The decisions — what the question says ([`leaving_lines`]),
//! what a refusal says ([`refusal`]) and which event settles the request ([`outcome`]) — are pure
//! functions; the effects are at the edge ([`run`]).

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use ninetrix_client::{ClientError, ErrorCode};
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::{Event, RewindRequest, TurnList, UndoneEffect, undone_after};
use ninetrix_proto::events::{Decoded, RewindFailed, Rewound, TraceEvent};
use ninetrix_proto::snapshots::SnapshotRef;

use crate::commands::invoke::{EXIT_BUSY, retry_blips};
use crate::commands::reset::{Ask, ConversationArgs, Located, Target, ask, is_yes};
use crate::ui::going_back;

/// How often the thread's events are read while waiting.
const POLL: Duration = Duration::from_millis(300);

/// Arguments of `ninetrix rewind`.
#[derive(Debug, Args)]
pub struct RewindArgs {
    /// The conversation that goes back.
    #[command(flatten)]
    pub conversation: ConversationArgs,
    /// The turn whose end the conversation continues from (a turn that ended, on the current
    /// branch or on one an earlier rewind left).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub to_turn: u64,
    /// Rewind without asking (needed when stdin is not a terminal).
    #[arg(short, long)]
    pub yes: bool,
    /// Queue the rewind and return at once.
    #[arg(long)]
    pub no_wait: bool,
    /// Seconds to wait for the runner to carry it out (then it stays queued).
    #[arg(long, default_value_t = 120, value_name = "S")]
    pub wait_timeout: u64,
}

/// What a rewind to a turn leaves behind, as the question (and `--yes`) says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Leaving {
    /// The turn gone back to.
    pub(crate) to_turn: u64,
    /// The last turn that ended on the current branch (0: none).
    pub(crate) last_turn: u64,
    /// The files restored (`None`: the turn has none; the files are left as they are).
    pub(crate) snapshot: Option<SnapshotRef>,
    /// What the turns left did that the rewind does not undo.
    pub(crate) undone: Vec<UndoneEffect>,
}

impl Leaving {
    /// What a rewind to `to_turn` leaves, from the thread's turn list and the API's account of
    /// the effects after it (`undone`).
    pub(crate) fn of(turns: &TurnList, to_turn: u64, undone: Vec<UndoneEffect>) -> Leaving {
        let last_turn = turns
            .turns
            .iter()
            .filter(|t| t.live)
            .map(|t| t.turn_seq)
            .max()
            .unwrap_or(0);
        let snapshot = turns
            .turns
            .iter()
            .find(|t| t.turn_seq == to_turn)
            .and_then(|t| t.snapshot.clone());
        Leaving {
            to_turn,
            last_turn,
            snapshot,
            undone,
        }
    }
}

/// What a rewind does, line by line: the turns it leaves on a branch, the files, and the effects
/// it does not undo.
pub(crate) fn leaving_lines(whose: &str, l: &Leaving) -> Vec<String> {
    let n = l.to_turn;
    let mut lines = vec![if l.last_turn > n {
        format!(
            "{whose} goes back to the end of turn {n}: {} {} left on a branch (kept in the \
             store; a rewind to turn {} comes back to {})",
            going_back::turns(n + 1, l.last_turn),
            if l.last_turn == n + 1 { "is" } else { "are" },
            l.last_turn,
            if l.last_turn == n + 1 { "it" } else { "them" }
        )
    } else {
        format!(
            "{whose} goes back to the end of turn {n}, where its current branch ends: no turn is \
             left behind"
        )
    }];
    lines.push(match &l.snapshot {
        Some(s) => format!(
            "its workspace files are restored to turn {n}'s {}: files made or changed since are \
             put back or removed",
            going_back::snapshot(s)
        ),
        None => format!("turn {n} has no snapshot: the workspace files are left as they are"),
    });
    if l.undone.is_empty() {
        lines.push(format!(
            "nothing the turns after turn {n} did reached outside the workspace: nothing is left \
             that the rewind cannot undo"
        ));
    } else {
        lines.push(format!(
            "NOT undone — {} effect(s) of the turns left that still hold (the model is told):",
            l.undone.len()
        ));
        lines.extend(going_back::undone_lines(&l.undone, "  "));
    }
    lines
}

/// How the runner settled a queued rewind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It went back.
    Rewound(Rewound),
    /// It did not, and nothing changed.
    Failed(RewindFailed),
}

/// The outcome of the rewind to `to_turn` among `events` (those after it was queued), if it is
/// there.
pub(crate) fn outcome(to_turn: u64, events: &[Event]) -> Option<Outcome> {
    events.iter().find_map(|e| match e.decode() {
        Decoded::Known(TraceEvent::Rewound(r)) if r.to_turn == to_turn => Some(Outcome::Rewound(r)),
        Decoded::Known(TraceEvent::RewindFailed(f)) if f.to_turn == to_turn => {
            Some(Outcome::Failed(f))
        }
        _ => None,
    })
}

/// What `rewind` says once it went back.
pub(crate) fn rewound_lines(whose: &str, r: &Rewound) -> Vec<String> {
    let mut lines = vec![if r.from_turn > r.to_turn {
        format!(
            "⟲ {whose} rewound to the end of turn {}: {} left on a branch ({} messages kept in \
             the store)",
            r.to_turn,
            going_back::turns(r.to_turn + 1, r.from_turn),
            r.left_messages
        )
    } else {
        format!("⟲ {whose} rewound to the end of turn {}", r.to_turn)
    }];
    lines.push(match &r.snapshot {
        Some(s) => format!(
            "  files: restored to {} ({} written, {} removed)",
            going_back::snapshot(s),
            r.files_written,
            r.files_removed
        ),
        None => "  files: untouched (the turn has no snapshot)".to_string(),
    });
    if r.undone > 0 {
        lines.push(format!(
            "  {} effect(s) of the turns left are not undone; the model reads a note naming them",
            r.undone
        ));
    }
    lines.push(format!(
        "  its next turn is turn {} (turn numbers are never reused)",
        r.from_turn + 1
    ));
    lines
}

/// What `rewind` says when the API refuses it (nothing was queued), and its exit code: `busy`
/// names the running turn and `ninetrix cancel` (exit 75); an unknown turn or a dropped snapshot
/// says so (exit 1). `None` for an error that is not a refusal of the rewind.
pub(crate) fn refusal(
    e: &ClientError,
    whose: &str,
    to_turn: u64,
    cancel: &str,
) -> Option<(String, u8)> {
    let ClientError::Api { code, message, .. } = e else {
        return None;
    };
    Some(match code {
        ErrorCode::Busy => {
            let why = match e.running() {
                Some(r) => format!(
                    "turn {} (message {}) is running on {whose}, and a rewind goes back only \
                     between turns; stop it with `{cancel}` or let it end, then rewind again",
                    r.turn_seq, r.seq
                ),
                None => format!(
                    "messages wait in {whose}'s inbox ({message}), and a rewind goes back only \
                     when none does; let them be answered, then rewind again"
                ),
            };
            (format!("refused: {why}; nothing was queued"), EXIT_BUSY)
        }
        ErrorCode::NotFound => (
            format!("refused: {message}; nothing was queued (turn {to_turn} did not end)"),
            crate::EXIT_FAILURE,
        ),
        ErrorCode::SnapshotDropped => (
            format!(
                "refused: {message}. Turn {to_turn}'s files cannot be restored, so nothing was \
                 queued; `ninetrix fork --at-turn {to_turn}` is refused for the same reason"
            ),
            crate::EXIT_FAILURE,
        ),
        _ => return None,
    })
}

/// Runs `ninetrix rewind`.
pub(crate) async fn run(args: &RewindArgs) -> anyhow::Result<ExitCode> {
    let Located {
        api,
        pool,
        target,
        thread,
    } = args.conversation.locate().await?;
    let agent = &args.conversation.agent;
    let whose = target.whose(agent);
    let n = args.to_turn;
    let client = api.client().clone();
    let turns = client
        .turns(thread)
        .await
        .map_err(|e| api.explain(e, &format!("reading the turns of thread {thread}")))?;
    let Some(target_turn) = turns.turns.iter().find(|t| t.turn_seq == n) else {
        eprintln!(
            "refused: turn {n} did not end in {whose}'s conversation ({}); nothing was queued",
            match turns.turns.last() {
                Some(last) => format!("its last ended turn is {}", last.turn_seq),
                None => "it has ended no turn yet".to_string(),
            }
        );
        return Ok(ExitCode::from(crate::EXIT_FAILURE));
    };
    let unrestorable = match (&target_turn.snapshot_skipped, target_turn.snapshot_dropped) {
        (_, true) => Some("was dropped (execution.snapshots.keep_turns)".to_string()),
        (Some(skipped), _) => Some(format!("was not taken ({skipped})")),
        (None, false) => None,
    };
    if let Some(why) = unrestorable {
        eprintln!(
            "refused: turn {n}'s snapshot {why}, so its files cannot be restored; nothing was \
             queued"
        );
        return Ok(ExitCode::from(crate::EXIT_FAILURE));
    }
    // The effects after the turn, by the rule the API gives the runner (from the ledger, not
    // the turn's whole history).
    let mut records = client
        .tool_calls(thread)
        .await
        .map_err(|e| api.explain(e, &format!("reading the ledger of thread {thread}")))?;
    records.sort_by_key(|r| (r.turn_seq, r.created_at));
    let undone = undone_after(&records, n, target_turn.snapshot.is_some());
    let leaving = Leaving::of(&turns, n, undone);
    let lines = leaving_lines(&whose, &leaving);
    match ask(args.yes, std::io::stdin().is_terminal()) {
        Ask::Go => {
            for line in &lines {
                eprintln!("{line}");
            }
        }
        Ask::Refuse => {
            for line in &lines {
                eprintln!("{line}");
            }
            anyhow::bail!(
                "`ninetrix rewind` leaves this behind, and stdin is not a terminal to ask on: \
                 pass --yes to rewind"
            );
        }
        Ask::Prompt => {
            for line in &lines {
                eprintln!("{line}");
            }
            eprint!("Rewind {whose} to the end of turn {n}? [y/N] ");
            let _ = std::io::stderr().flush();
            let mut answer = String::new();
            std::io::stdin().lock().read_line(&mut answer)?;
            if !is_yes(&answer) {
                eprintln!("nothing was rewound");
                return Ok(ExitCode::from(crate::EXIT_FAILURE));
            }
        }
    }
    // Read before the rewind is queued, so no event of its outcome is missed.
    let events_before = retry_blips(|| api.event_seq(thread)).await?;
    let request = RewindRequest {
        to_turn: n,
        dedupe_key: Some(format!("rewind-{}", ThreadId::new_v7())),
    };
    let address = match (&args.conversation.thread, &target) {
        (Some(id), _) => format!("--thread {id}"),
        (None, Target::Replica(r)) => format!("--replica {r}"),
        (None, Target::Session(k)) => {
            format!("--session {}", crate::commands::invoke::shell_quote(k))
        }
    };
    let cancel = format!("ninetrix cancel -p {pool} --agent {agent} {address}");
    let queued = match retry_blips(|| async {
        client
            .rewind(thread, &request)
            .await
            .map_err(anyhow::Error::new)
    })
    .await
    {
        Ok(q) => q,
        Err(e) => {
            if let Some(ce) = e.downcast_ref::<ClientError>() {
                if let Some((text, code)) = refusal(ce, &whose, n, &cancel) {
                    eprintln!("{text}");
                    return Ok(ExitCode::from(code));
                }
                return Err(api.explain(ce.clone(), &format!("rewinding thread {thread}")));
            }
            return Err(e);
        }
    };
    if args.no_wait {
        outln!(
            "queued: {whose} (thread {thread}) goes back to the end of turn {n} when its runner \
             takes inbox message {} (before any message sent after it)",
            queued.seq
        );
        return Ok(ExitCode::SUCCESS);
    }
    let deadline = Instant::now() + Duration::from_secs(args.wait_timeout);
    loop {
        let events = retry_blips(|| api.events(thread, events_before)).await?;
        match outcome(n, &events) {
            Some(Outcome::Rewound(r)) => {
                for line in rewound_lines(&whose, &r) {
                    outln!("{line}");
                }
                return Ok(ExitCode::SUCCESS);
            }
            Some(Outcome::Failed(f)) => {
                eprintln!(
                    "rewind of {whose} to turn {n} not done: {}; nothing changed (its \
                     conversation and files are as they were)",
                    f.why
                );
                return Ok(ExitCode::from(crate::EXIT_FAILURE));
            }
            None => {}
        }
        if Instant::now() >= deadline {
            outln!(
                "queued: {whose} (thread {thread}) has not taken the rewind within {} s; it goes \
                 back to the end of turn {n} when its runner takes inbox message {} (`ninetrix \
                 ps -p {pool}` shows whether it runs; messages sent meanwhile wait behind it)",
                args.wait_timeout,
                queued.seq
            );
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::api::{RunningTurn, ToolCallStatus, TurnSummary};
    use ninetrix_proto::effects::Effect;
    use ninetrix_proto::snapshots::ObjectId;

    fn stored(e: TraceEvent, seq: u64) -> Event {
        let new = e.to_new_event(chrono::Utc::now());
        Event {
            seq,
            kind: new.kind,
            data: new.data,
            created_at: chrono::Utc::now(),
            epoch: 1,
        }
    }

    fn snap() -> SnapshotRef {
        SnapshotRef {
            root: ObjectId::of(b"turn 2"),
            files: 3,
            bytes: 4096,
        }
    }

    fn turn(turn_seq: u64, live: bool, snapshot: Option<SnapshotRef>) -> TurnSummary {
        TurnSummary {
            turn_seq,
            thread_id: ThreadId::from(uuid::Uuid::from_u128(1)),
            version: turn_seq * 2,
            history_len: turn_seq * 4,
            live,
            snapshot,
            snapshot_dropped: false,
            snapshot_skipped: None,
            ended_at: chrono::Utc::now(),
        }
    }

    fn list() -> TurnList {
        TurnList {
            turns: vec![
                turn(1, true, None),
                turn(2, true, Some(snap())),
                turn(3, true, None),
                turn(4, true, None),
                // A turn an earlier rewind left: not the current branch.
                turn(5, false, None),
            ],
            forked_from: None,
            forks: vec![],
        }
    }

    #[test]
    fn the_question_names_the_turns_left_the_files_and_what_is_not_undone() {
        let push = UndoneEffect {
            turn_seq: 3,
            tool: "shell".into(),
            effect: Effect::Write,
            status: ToolCallStatus::Completed,
            args: "{\"command\":\"git push\"}".into(),
        };
        let l = Leaving::of(&list(), 2, vec![push]);
        assert_eq!((l.last_turn, l.snapshot.clone()), (4, Some(snap())));
        let lines = leaving_lines("writer-1", &l);
        assert_eq!(
            lines[0],
            "writer-1 goes back to the end of turn 2: turns 3–4 are left on a branch (kept in the \
             store; a rewind to turn 4 comes back to them)"
        );
        assert!(lines[1].starts_with("its workspace files are restored to turn 2's snapshot"));
        assert!(
            lines[2].starts_with("NOT undone — 1 effect(s)"),
            "{}",
            lines[2]
        );
        assert_eq!(
            lines[3],
            "  turn 3: shell {\"command\":\"git push\"} (write; done)"
        );
        let l = Leaving::of(&list(), 4, vec![]);
        let lines = leaving_lines("writer-1", &l);
        assert!(lines[0].contains("no turn is left behind"), "{}", lines[0]);
        assert_eq!(
            lines[1],
            "turn 4 has no snapshot: the workspace files are left as they are"
        );
        assert!(
            lines[2].starts_with("nothing the turns after turn"),
            "{}",
            lines[2]
        );
    }

    #[test]
    fn the_rewind_to_this_turn_settles_it_and_others_do_not() {
        let rewound = |to_turn| {
            TraceEvent::Rewound(Rewound {
                from_turn: 6,
                to_turn,
                left_messages: 12,
                snapshot: Some(snap()),
                files_written: 2,
                files_removed: 1,
                undone: 1,
            })
        };
        assert_eq!(outcome(2, &[stored(rewound(3), 1)]), None);
        let Some(Outcome::Rewound(r)) = outcome(2, &[stored(rewound(3), 1), stored(rewound(2), 2)])
        else {
            panic!("the rewind to turn 2 settles it");
        };
        let lines = rewound_lines("writer-1", &r);
        assert_eq!(
            lines[0],
            "⟲ writer-1 rewound to the end of turn 2: turns 3–6 left on a branch (12 messages \
             kept in the store)"
        );
        assert!(lines[1].contains("(2 written, 1 removed)"), "{}", lines[1]);
        assert!(lines[2].contains("1 effect(s)"));
        assert_eq!(
            lines[3],
            "  its next turn is turn 7 (turn numbers are never reused)"
        );
        let failed = TraceEvent::RewindFailed(RewindFailed {
            to_turn: 2,
            why: "object abc is missing".into(),
        });
        assert_eq!(
            outcome(2, &[stored(failed, 4)]),
            Some(Outcome::Failed(RewindFailed {
                to_turn: 2,
                why: "object abc is missing".into()
            }))
        );
    }

    #[test]
    fn refusals_say_why_and_what_to_do() {
        let api = |code, message: &str, running| ClientError::Api {
            status: 409,
            code,
            message: message.into(),
            running,
        };
        let cancel = "ninetrix cancel -p shop --agent writer --replica 1";
        let busy = api(
            ErrorCode::Busy,
            "thread is in turn 7",
            Some(RunningTurn {
                turn_seq: 7,
                seq: 9,
            }),
        );
        let (text, code) = refusal(&busy, "writer-1", 2, cancel).unwrap();
        assert_eq!(code, EXIT_BUSY);
        assert_eq!(
            text,
            format!(
                "refused: turn 7 (message 9) is running on writer-1, and a rewind goes back only \
                 between turns; stop it with `{cancel}` or let it end, then rewind again; nothing \
                 was queued"
            )
        );
        let waiting = api(ErrorCode::Busy, "2 messages wait", None);
        let (text, _) = refusal(&waiting, "writer-1", 2, cancel).unwrap();
        assert!(text.contains("messages wait in writer-1's inbox (2 messages wait)"));
        let missing = api(ErrorCode::NotFound, "turn 9 did not end (ended: 1–4)", None);
        let (text, code) = refusal(&missing, "writer-1", 9, cancel).unwrap();
        assert_eq!(code, crate::EXIT_FAILURE);
        assert!(text.contains("ended: 1–4"));
        let dropped = api(
            ErrorCode::SnapshotDropped,
            "the workspace snapshot of turn 2 was dropped (`execution.snapshots.keep_turns`)",
            None,
        );
        let (text, _) = refusal(&dropped, "writer-1", 2, cancel).unwrap();
        assert!(
            text.contains("keep_turns") && text.contains("cannot be restored"),
            "{text}"
        );
        assert_eq!(
            refusal(&api(ErrorCode::Internal, "x", None), "w", 1, cancel),
            None
        );
    }
}
