//! `ninetrix invoke`: a message into an agent's inbox, and (by default) its reply.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use ninetrix_proto::ThreadId;
use ninetrix_proto::api::EnqueueRequest;
use ninetrix_proto::events::{Decoded, TraceEvent};
use serde_json::json;

use crate::cli::pool_name;
use crate::pool::resolve::PoolView;

/// Arguments of `ninetrix invoke`.
#[derive(Debug, Args)]
pub struct InvokeArgs {
    /// The agentfile (for the pool name).
    #[arg(short, long, default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// The agent.
    #[arg(long, value_name = "AGENT")]
    pub agent: String,
    /// The replica.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub replica: u32,
    /// The message.
    #[arg(short, long, value_name = "MSG")]
    pub message: String,
    /// A dedupe key: sending again with the same key adds no second message.
    #[arg(long, value_name = "KEY")]
    pub id: Option<String>,
    /// Return once the message is queued (default: wait for the reply).
    #[arg(long, conflicts_with = "wait")]
    pub no_wait: bool,
    /// Wait for the reply (the default).
    #[arg(long)]
    pub wait: bool,
    /// Seconds to wait for the reply (then exit 124; the message stays queued).
    #[arg(long, default_value_t = 300, value_name = "S")]
    pub timeout: u64,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Exit code of `invoke --wait` when no reply came in time (like `timeout(1)`).
pub(crate) const EXIT_TIMEOUT: u8 = 124;

/// Runs `ninetrix invoke`: queue the message (with a dedupe key, so a retry adds nothing), then
/// follow the thread's events until the turn that answers it completes.
pub(crate) async fn run(args: &InvokeArgs) -> anyhow::Result<ExitCode> {
    let view = PoolView::open(&args.file, args.pool.as_deref()).await?;
    let thread = view.thread(&args.agent, args.replica)?;
    let key = args
        .id
        .clone()
        .unwrap_or_else(|| format!("invoke-{}", ThreadId::new_v7()));
    let request = EnqueueRequest {
        content: args.message.clone(),
        dedupe_key: Some(key.clone()),
    };
    let queued = view.api.enqueue(thread, &request).await?;
    let (seq, duplicate) = (queued.seq, queued.duplicate);
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
        for e in view.api.events(thread, cursor).await? {
            cursor = e.seq;
            let Decoded::Known(event) = e.decode() else {
                continue;
            };
            match event {
                TraceEvent::TurnStarted(t) => in_turn = t.seq == seq,
                TraceEvent::TurnResumed(t) => in_turn = t.seq == seq,
                TraceEvent::LlmCall(c) if in_turn && progress => {
                    eprintln!("  model {} answered ({} ms)", c.model, c.latency_ms)
                }
                TraceEvent::LlmRetry(r) if in_turn && progress => eprintln!(
                    "  model call failed ({}); retrying in {} ms",
                    r.attempt_text(),
                    r.retry_in_ms
                ),
                TraceEvent::ToolCall(t) | TraceEvent::ToolReplayed(t) if in_turn && progress => {
                    eprintln!("  tool {} {}", t.name, t.mode.as_str())
                }
                TraceEvent::UnknownTool(u) if in_turn && progress => {
                    eprintln!("  tool {}: no such tool", u.name)
                }
                TraceEvent::TurnCompleted(done) if done.seq == seq => {
                    if args.json {
                        outln!(
                            "{}",
                            json!({"thread_id": thread, "seq": seq, "ok": done.ok, "reply": done.reply, "duration_ms": done.duration_ms})
                        );
                    } else {
                        outln!("{}", done.reply);
                    }
                    return Ok(if done.ok {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(crate::EXIT_FAILURE)
                    });
                }
                // Events that only show progress, other turns' events, and those not shown
                // without a terminal.
                TraceEvent::LlmCall(_)
                | TraceEvent::LlmRetry(_)
                | TraceEvent::Outage(_)
                | TraceEvent::ToolCall(_)
                | TraceEvent::ToolReplayed(_)
                | TraceEvent::UnknownTool(_)
                | TraceEvent::TurnCompleted(_)
                | TraceEvent::Boot(_)
                | TraceEvent::Ready(_)
                | TraceEvent::Repair(_)
                | TraceEvent::Resume(_)
                | TraceEvent::Checkpoint(_)
                | TraceEvent::BudgetExceeded(_)
                | TraceEvent::MaxTurnsReached(_)
                | TraceEvent::Error(_) => {}
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
