//! `ninetrix fork`: a new conversation of the same agent whose history is another's up to the
//! end of turn N — a replica's (`--replica N`), a session's (`--session KEY`) or a thread named by
//! its ID (`--thread ID`). The API's `POST /v1/threads/{id}/fork` makes it a session of the agent
//! (`--as-session NEW`, else `fork-` and the last 8 hex characters of its thread ID) that shares the parent's
//! messages in the store rather than copying them; its runner restores turn N's workspace
//! snapshot before its first turn. The parent is untouched.
//!
//! What the fork says is a pure function of the API's answer ([`forked_lines`]), and so is what a
//! refusal says ([`refusal`]); the effects are at the edge ([`run`]). A fork carries no dedupe key,
//! so it is not retried: an unanswered request says how to see whether it was made.

use std::process::ExitCode;

use clap::Args;
use ninetrix_client::{ClientError, ErrorCode};
use ninetrix_proto::api::{ForkRequest, ForkResponse};

use crate::commands::invoke::shell_quote;
use crate::commands::reset::{ConversationArgs, Located};
use crate::ui::going_back;

/// Arguments of `ninetrix fork`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The conversation forked.
    #[command(flatten)]
    pub conversation: ConversationArgs,
    /// The turn whose end the fork starts from (a turn that ended).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub at_turn: u64,
    /// The fork's session key [default: `fork-` and the last 8 hex characters of its thread ID]
    #[arg(long, value_name = "NEW", value_parser = session_key)]
    pub as_session: Option<String>,
    /// Print the API's answer as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// A `--as-session` value: a session key by the API's rules.
fn session_key(s: &str) -> Result<String, String> {
    ninetrix_proto::sessions::check_key(s)
        .map(|()| s.to_string())
        .map_err(|e| format!("{e}; e.g. --as-session try-postgres"))
}

/// What `fork` says about the fork made: its thread and session, what it shares, the files it
/// starts with, the effects it does not undo, and the command that talks to it.
pub(crate) fn forked_lines(pool: &str, agent: &str, whose: &str, f: &ForkResponse) -> Vec<String> {
    let n = f.forked_from.at_turn;
    let note = usize::from(!f.undone.is_empty());
    let shared = f.history_len.saturating_sub(note as u64);
    let mut lines = vec![
        format!(
            "⑂ forked {whose} at the end of turn {n}: thread {}, session `{}`",
            f.thread_id, f.session
        ),
        format!(
            "  history: {shared} message(s) shared with thread {} (stored once, not copied){}",
            f.forked_from.parent,
            if note == 1 {
                ", and a note to the model naming the effects below"
            } else {
                ""
            }
        ),
        match &f.snapshot {
            Some(s) => format!(
                "  files: its runner restores {} before its first turn",
                going_back::snapshot(s)
            ),
            None => format!(
                "  files: turn {n} has no snapshot, so the fork starts with an empty workspace"
            ),
        },
    ];
    if f.undone.is_empty() {
        lines.push(format!(
            "  not undone: nothing (the parent did nothing outside its workspace after turn {n})"
        ));
    } else {
        lines.push(format!(
            "  not undone — {} effect(s) of the parent after turn {n} that still hold:",
            f.undone.len()
        ));
        lines.extend(going_back::undone_lines(&f.undone, "    "));
    }
    lines.push(format!(
        "next: ninetrix invoke -p {pool} --agent {agent} --session {} -m \"…\"",
        shell_quote(&f.session)
    ));
    lines
}

/// What `fork` says when the API refuses it (nothing was made); `None` for an error that is not
/// a refusal of the fork.
pub(crate) fn refusal(e: &ClientError, at_turn: u64) -> Option<String> {
    let ClientError::Api { code, message, .. } = e else {
        return None;
    };
    let what = match code {
        ErrorCode::NotFound => format!("turn {at_turn} did not end, so it cannot be forked"),
        ErrorCode::SnapshotDropped => format!(
            "turn {at_turn}'s files cannot be restored (its snapshot was dropped by \
             execution.snapshots.keep_turns, or never taken)"
        ),
        ErrorCode::KeyReused | ErrorCode::Busy => {
            "the session key is in use by another thread of the agent: choose another with \
             --as-session"
                .to_string()
        }
        ErrorCode::UnlabelledThread => {
            "the thread belongs to no pool's agent, so a fork would have no runner".to_string()
        }
        _ => return None,
    };
    Some(format!(
        "refused: {what} (the API: {message}); nothing was forked"
    ))
}

/// Runs `ninetrix fork`.
pub(crate) async fn run(args: &ForkArgs) -> anyhow::Result<ExitCode> {
    let Located {
        api,
        pool,
        target,
        thread,
    } = args.conversation.locate().await?;
    let agent = &args.conversation.agent;
    let whose = target.whose(agent);
    let request = ForkRequest {
        at_turn: args.at_turn,
        session: args.as_session.clone(),
    };
    let forked = match api.client().fork(thread, &request).await {
        Ok(f) => f,
        Err(e) => {
            if let Some(text) = refusal(&e, args.at_turn) {
                eprintln!("{text}");
                return Ok(ExitCode::from(crate::EXIT_FAILURE));
            }
            let unsure = e.is_transient();
            let err = api.explain(e, &format!("forking thread {thread}"));
            if unsure {
                return Err(err.context(format!(
                    "the fork may or may not have been made; `ninetrix sessions -p {pool} --agent \
                     {agent}` lists the agent's sessions (a fork's origin included)"
                )));
            }
            return Err(err);
        }
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&forked)?);
    } else {
        for line in forked_lines(&pool, agent, &whose, &forked) {
            outln!("{line}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::ThreadId;
    use ninetrix_proto::api::{ForkOrigin, ToolCallStatus, UndoneEffect};
    use ninetrix_proto::effects::Effect;
    use ninetrix_proto::snapshots::{ObjectId, SnapshotRef};

    fn response(snapshot: Option<SnapshotRef>, undone: Vec<UndoneEffect>) -> ForkResponse {
        ForkResponse {
            thread_id: ThreadId::from(uuid::Uuid::from_u128(2)),
            session: "try postgres".into(),
            forked_from: ForkOrigin {
                parent: ThreadId::from(uuid::Uuid::from_u128(1)),
                at_turn: 3,
            },
            history_len: 13,
            snapshot,
            undone,
        }
    }

    #[test]
    fn the_fork_says_what_it_shares_restores_and_does_not_undo_and_how_to_talk_to_it() {
        let snap = SnapshotRef {
            root: ObjectId::of(b"t3"),
            files: 12,
            bytes: 3 << 20,
        };
        let push = UndoneEffect {
            turn_seq: 4,
            tool: "shell".into(),
            effect: Effect::Write,
            status: ToolCallStatus::Intent,
            args: "{\"command\":\"make deploy\"}".into(),
        };
        let lines = forked_lines(
            "shop",
            "writer",
            "writer-1",
            &response(Some(snap.clone()), vec![push]),
        );
        assert_eq!(
            lines[0],
            "⑂ forked writer-1 at the end of turn 3: thread 00000000-0000-0000-0000-000000000002, \
             session `try postgres`"
        );
        assert!(
            lines[1].starts_with(
                "  history: 12 message(s) shared with thread 00000000-0000-0000-0000-000000000001"
            ),
            "{}",
            lines[1]
        );
        assert!(lines[1].ends_with("naming the effects below"));
        assert_eq!(
            lines[2],
            format!(
                "  files: its runner restores snapshot {} (12 files, 3 MiB) before its first turn",
                snap.root.short()
            )
        );
        assert!(lines[3].contains("1 effect(s) of the parent after turn 3"));
        assert_eq!(
            lines[4],
            "    turn 4: shell {\"command\":\"make deploy\"} (write; started, outcome unknown)"
        );
        assert_eq!(
            lines[5],
            "next: ninetrix invoke -p shop --agent writer --session 'try postgres' -m \"…\""
        );
        let lines = forked_lines("shop", "writer", "writer-1", &response(None, vec![]));
        assert!(lines[1].contains("13 message(s)"));
        assert!(lines[2].contains("empty workspace"), "{}", lines[2]);
        assert!(lines[3].contains("not undone: nothing"));
    }

    #[test]
    fn refusals_name_the_cause() {
        let api = |code, message: &str| ClientError::Api {
            status: 409,
            code,
            message: message.into(),
            running: None,
        };
        let text = refusal(&api(ErrorCode::NotFound, "ended turns: 1–2"), 5).unwrap();
        assert_eq!(
            text,
            "refused: turn 5 did not end, so it cannot be forked (the API: ended turns: 1–2); \
             nothing was forked"
        );
        let text = refusal(&api(ErrorCode::KeyReused, "in use by thread x"), 5).unwrap();
        assert!(text.contains("--as-session"), "{text}");
        let text = refusal(&api(ErrorCode::SnapshotDropped, "dropped"), 5).unwrap();
        assert!(text.contains("keep_turns"), "{text}");
        assert_eq!(refusal(&api(ErrorCode::Internal, "x"), 5), None);
        assert!(session_key("").is_err());
        assert_eq!(session_key("a b").as_deref(), Ok("a b"));
    }
}
