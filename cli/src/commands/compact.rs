//! `ninetrix compact`: compact one conversation now — a replica's (`--replica N`) or a
//! session's (`--session KEY`) — as its agent's `runtime.context` says. The request is an
//! instruction queued in the thread's inbox (`control: compact`): the runner carries it out at
//! its next boundary (between turns), once, and moves its inbox cursor past it in the same
//! commit as the compaction. By default the command then waits for the runner's answer and says
//! what it did; a thread whose runner is not running keeps the request queued, and says so.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use ninetrix_proto::api::{Control, EnqueueRequest};
use ninetrix_proto::context::{CompactionReason, tokens_short};
use ninetrix_proto::events::{Decoded, TraceEvent};

use crate::commands::reset::{Conversation, ConversationArgs};

/// Arguments of `ninetrix compact`.
#[derive(Debug, Args)]
pub struct CompactArgs {
    /// The conversation to compact.
    #[command(flatten)]
    pub conversation: ConversationArgs,
    /// Queue the request and return at once.
    #[arg(long)]
    pub no_wait: bool,
    /// Seconds to wait for the runner to carry it out.
    #[arg(long, default_value_t = 120, value_name = "S")]
    pub wait_timeout: u64,
}

/// What the runner did with a request, from the thread's events after it was queued.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outcome {
    /// It compacted.
    Compacted(String),
    /// It had nothing to compact, and why.
    Skipped(String),
}

/// The outcome of the requested compaction among `events` (those after the request was
/// queued), if it is there.
pub(crate) fn outcome(events: &[ninetrix_proto::api::Event]) -> Option<Outcome> {
    events.iter().find_map(|e| match e.decode() {
        Decoded::Known(TraceEvent::Compacted(c)) if c.reason == CompactionReason::Requested => {
            Some(Outcome::Compacted(format!(
                "compacted turns {}–{} ({} → {} tokens, {})",
                c.turns[0],
                c.turns[1],
                tokens_short(c.tokens_before),
                tokens_short(c.tokens_after),
                match c.model {
                    Some(m) => format!("summarized by {m}"),
                    None => format!("{} tool results cleared", c.cleared),
                }
            )))
        }
        Decoded::Known(TraceEvent::CompactionSkipped(s))
            if s.reason == CompactionReason::Requested =>
        {
            Some(Outcome::Skipped(s.why))
        }
        _ => None,
    })
}

/// Runs `ninetrix compact`.
pub(crate) async fn run(args: &CompactArgs) -> anyhow::Result<ExitCode> {
    let Conversation {
        view,
        target,
        thread,
        ..
    } = args.conversation.find().await?;
    let pool = view.name.clone();
    let whose = target.whose(&args.conversation.agent);
    let events_before = view.api.event_seq(thread).await?;
    let request = EnqueueRequest {
        content: "ninetrix compact".into(),
        dedupe_key: None,
        control: Some(Control::Compact),
        mode: None,
    };
    let queued = view.api.enqueue(thread, &request).await?;
    if args.no_wait {
        outln!(
            "queued: {whose} (thread {thread}) compacts at its next boundary (inbox message {})",
            queued.seq
        );
        return Ok(ExitCode::SUCCESS);
    }
    let deadline = Instant::now() + Duration::from_secs(args.wait_timeout);
    loop {
        let events = view.api.events(thread, events_before).await?;
        match outcome(&events) {
            Some(Outcome::Compacted(what)) => {
                outln!("{whose}: {what}");
                return Ok(ExitCode::SUCCESS);
            }
            Some(Outcome::Skipped(why)) => {
                outln!("{whose}: nothing compacted: {why}");
                return Ok(ExitCode::SUCCESS);
            }
            None => {}
        }
        if Instant::now() >= deadline {
            outln!(
                "queued: {whose} (thread {thread}) has not taken the request within {} s; it \
                 compacts when its runner takes inbox message {} (`ninetrix ps -p {pool}` shows \
                 whether it runs)",
                args.wait_timeout,
                queued.seq
            );
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::context::Strategy;
    use ninetrix_proto::events::{Compacted, CompactionSkipped};

    fn stored(e: TraceEvent, seq: u64) -> ninetrix_proto::api::Event {
        let new = e.to_new_event(chrono::Utc::now());
        ninetrix_proto::api::Event {
            seq,
            kind: new.kind,
            data: new.data,
            created_at: chrono::Utc::now(),
            epoch: 1,
        }
    }

    #[test]
    fn the_requested_compaction_is_found_and_others_are_not() {
        let compacted = |reason| {
            TraceEvent::Compacted(Compacted {
                strategy: Strategy::Summarize,
                reason,
                from: 0,
                to: 40,
                turns: [1, 10],
                tokens_before: 182_000,
                tokens_after: 9_000,
                cleared: 0,
                model: Some("m".into()),
                cost_usd: 0.0,
                summary_chars: 100,
            })
        };
        let threshold = stored(compacted(CompactionReason::Threshold), 1);
        assert_eq!(outcome(std::slice::from_ref(&threshold)), None);
        let requested = stored(compacted(CompactionReason::Requested), 2);
        assert_eq!(
            outcome(&[threshold, requested]),
            Some(Outcome::Compacted(
                "compacted turns 1–10 (182k → 9k tokens, summarized by m)".into()
            ))
        );
        let skipped = stored(
            TraceEvent::CompactionSkipped(CompactionSkipped {
                reason: CompactionReason::Requested,
                why: "nothing to compact".into(),
            }),
            3,
        );
        assert_eq!(
            outcome(&[skipped]),
            Some(Outcome::Skipped("nothing to compact".into()))
        );
    }
}
