//! `ninetrix trace`: a thread's story, from its events (with `--follow-handoffs`, the stories of
//! the collaborator threads it handed work to, nested under it).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use ninetrix_proto::ThreadId;

use crate::backend::view::PoolView;
use crate::cli::pool_name;
use crate::ui::handoff_tree;
use crate::ui::style::Style;
use crate::ui::trace::{JsonEvent, Renderer};

/// Arguments of `ninetrix trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The agentfile (for the pool name); `-f` follows here, so name it with --file or
    /// `ninetrix -f FILE trace`.
    #[arg(long = "file", default_value = "agentfile.yaml", value_name = "FILE")]
    pub file: PathBuf,
    /// The pool.
    #[arg(short, long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,
    /// The thread.
    #[arg(long, value_name = "ID", conflicts_with = "agent")]
    pub thread_id: Option<String>,
    /// The agent (with --replica).
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// The replica.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub replica: u32,
    /// A session of the agent (with --agent), instead of a replica's own thread.
    #[arg(
        long,
        value_name = "KEY",
        requires = "agent",
        conflicts_with = "replica"
    )]
    pub session: Option<String>,
    /// Keep printing new events.
    #[arg(short, long)]
    pub follow: bool,
    /// Also show the work handed to collaborators: under each `handoff_sent` line, the
    /// collaborator's session thread (its events, its own handoffs too, up to 16 deep),
    /// indented. With --json: every thread's events, each with its `thread_id`, a collaborator's
    /// right after the `handoff_sent` that names it. Not with --follow.
    #[arg(long, conflicts_with = "follow")]
    pub follow_handoffs: bool,
    /// A stray argument, kept only to explain `trace -f FILE`.
    #[arg(hide = true, value_name = "STRAY")]
    pub stray: Option<String>,
    /// The events as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Also print each compaction's summary: what the model sees instead of the turns it
    /// covers (the original messages stay in the store).
    #[arg(long, conflicts_with_all = ["follow", "json"])]
    pub summaries: bool,
}

/// Runs `ninetrix trace`. With `--thread-id` only the API is needed: the pool's if one can be
/// resolved, else `AGENTFILE_API_URL` or the local API.
pub(crate) async fn run(args: &TraceArgs) -> anyhow::Result<ExitCode> {
    let (api, thread) = match (&args.thread_id, &args.agent) {
        (Some(t), _) => {
            let thread: ThreadId = t
                .parse()
                .with_context(|| format!("--thread-id `{t}` is not a thread ID (a UUID)"))?;
            let api = PoolView::thread_api(&args.file, args.pool.as_deref()).await?;
            (api, thread)
        }
        (None, Some(agent)) => {
            let view = PoolView::open(&args.file, args.pool.as_deref()).await?;
            let t = match &args.session {
                Some(key) => match view.api.find_session(&view.name, agent, key).await? {
                    Some(t) => t.thread_id,
                    None => bail!(
                        "agent `{agent}` of pool {} has no session `{key}` (`ninetrix sessions -p {}` lists them)",
                        view.name,
                        view.name
                    ),
                },
                None => view.thread(agent, args.replica)?,
            };
            (view.api, t)
        }
        (None, None) => bail!("name the thread: --thread-id ID, or --agent A [--replica N]"),
    };
    let Some(info) = api.thread(thread).await? else {
        bail!(
            "thread {thread} does not exist in the checkpoint API at {}",
            api.url
        );
    };
    let style = Style::stdout();
    let width = line_width(
        std::io::IsTerminal::is_terminal(&std::io::stdout()),
        std::env::var("COLUMNS").ok(),
        terminal_size::terminal_size().map(|(w, _)| usize::from(w.0)),
    );
    let mut renderer = Renderer::new(style, width);
    if !args.json {
        let whose = match &info.labels.session {
            Some(key) => format!("session {key}"),
            None => format!(
                "replica {}",
                info.labels.replica.map_or("-".into(), |r| r.to_string())
            ),
        };
        outln!(
            "{} {} · pool {} · agent {} · {whose} · {} · version {} · {} boot(s)",
            style.bold("thread"),
            thread,
            info.labels.pool.as_deref().unwrap_or("-"),
            info.labels.agent.as_deref().unwrap_or("-"),
            info.status.as_str(),
            info.version,
            info.boot_count
        );
        if let Some(origin) = &info.forked_from {
            outln!("{}", fork_origin_line(origin));
        }
    }
    if args.follow_handoffs {
        let root_events = api.events(thread, 0).await?;
        let threads = handoff_tree::collect(thread, root_events, |t| api.events(t, 0)).await;
        let lines = if args.json {
            handoff_tree::json_lines(&threads, thread)?
        } else {
            handoff_tree::tree_lines(&threads, thread, style, width)
        };
        for line in lines {
            outln!("{line}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut cursor = 0;
    let mut boots = ninetrix_proto::boots::BootKinds::default();
    loop {
        for e in api.events(thread, cursor).await? {
            cursor = e.seq;
            if args.json {
                outln!("{}", serde_json::to_string(&JsonEvent::of(&e, &mut boots))?);
            } else if let Some(line) = renderer.line(&e) {
                outln!("{line}");
            }
        }
        if !args.follow {
            if !args.json {
                let latest = match args.summaries && info.version > 0 {
                    true => Some(api.client().version(thread, info.version).await.map_err(
                        |e| anyhow::anyhow!("reading thread {thread}'s latest version: {e}"),
                    )?),
                    false => None,
                };
                for line in context_lines(info.context.as_ref(), latest.as_ref()) {
                    outln!("{line}");
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The thread's context use at its latest version (the last round's input against the window,
/// and its compactions) and, given the latest version (`--summaries`), each compaction's summary.
fn context_lines(
    context: Option<&ninetrix_proto::context::ContextUse>,
    latest: Option<&ninetrix_proto::api::VersionDetail>,
) -> Vec<String> {
    use ninetrix_proto::context::tokens_short;
    let mut out = Vec::new();
    if let Some(c) = context {
        let window = match (c.window, c.fraction()) {
            (Some(w), Some(f)) => format!(" of {} ({:.0}%)", tokens_short(w), f * 100.0),
            _ => " (window unknown)".to_string(),
        };
        out.push(format!(
            "context: {} tokens{window} · {} compaction(s)",
            tokens_short(c.input_tokens),
            c.compactions
        ));
    }
    for c in latest
        .into_iter()
        .flat_map(|l| l.history.iter().filter_map(|m| m.compaction()))
    {
        out.push(format!(
            "⇣ turns {}–{} ({}, {}):",
            c.turns[0],
            c.turns[1],
            c.strategy.as_str(),
            c.reason.as_str()
        ));
        match &c.summary {
            Some(text) => out.extend(text.lines().map(|l| format!("    {l}"))),
            None => out.push(format!("    {} tool results cleared", c.cleared)),
        }
    }
    out
}

/// Where a fork came from, the line under a fork's header.
fn fork_origin_line(origin: &ninetrix_proto::api::ForkOrigin) -> String {
    format!(
        "forked from thread {} at the end of its turn {} (`ninetrix trace --thread-id {}` shows \
         the turns before)",
        origin.parent, origin.at_turn, origin.parent
    )
}

/// How wide trace lines may be: on a terminal, `COLUMNS`, else the terminal's width, else 120;
/// piped or redirected to a file, unlimited — nothing is cut where no screen wraps it.
fn line_width(tty: bool, columns: Option<String>, terminal: Option<usize>) -> usize {
    if !tty {
        return usize::MAX;
    }
    columns
        .and_then(|c| c.trim().parse().ok())
        .or(terminal)
        .unwrap_or(120)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forks_trace_says_where_it_came_from() {
        let parent = ThreadId::from(uuid::Uuid::from_u128(7));
        let line = fork_origin_line(&ninetrix_proto::api::ForkOrigin { parent, at_turn: 3 });
        assert_eq!(
            line,
            format!(
                "forked from thread {parent} at the end of its turn 3 (`ninetrix trace \
                 --thread-id {parent}` shows the turns before)"
            )
        );
    }

    #[test]
    fn lines_are_cut_to_the_terminal_only_on_a_terminal() {
        assert_eq!(line_width(false, Some("80".into()), Some(100)), usize::MAX);
        assert_eq!(line_width(true, Some("80".into()), Some(100)), 80);
        assert_eq!(line_width(true, None, Some(100)), 100);
        assert_eq!(line_width(true, Some("wide".into()), None), 120);
    }

    #[test]
    fn the_context_line_and_the_summaries_come_from_the_latest_version() {
        use ninetrix_proto::api::{CheckpointState, VersionDetail, VersionSummary};
        use ninetrix_proto::context::{Compaction, CompactionReason, ContextUse, Strategy};
        use ninetrix_proto::{Block, Message, Role};
        let record = Compaction {
            strategy: Strategy::Summarize,
            reason: CompactionReason::Threshold,
            from: 0,
            to: 8,
            turns: [1, 2],
            summary: Some("They asked twice.\nBoth answered.".into()),
            native: None,
            model: Some("m".into()),
            tokens_before: 5_000,
            tokens_after: 900,
            cleared: 0,
            at_version: 3,
        };
        let latest = VersionDetail {
            summary: VersionSummary {
                version: 4,
                parent_version: 3,
                epoch: 1,
                truncate_to: None,
                appended: 1,
                history_len: 9,
                state: CheckpointState {
                    context: Some(ContextUse {
                        input_tokens: 4_300,
                        history_len: 9,
                        window: Some(6_000),
                        compactions: 1,
                    }),
                    ..CheckpointState::default()
                },
                created_at: chrono::Utc::now(),
            },
            history: vec![Message::new(Role::System, vec![Block::Compaction(record)])],
        };
        let context = latest.summary.state.context.clone();
        assert_eq!(
            context_lines(context.as_ref(), None),
            ["context: 4k tokens of 6k (72%) · 1 compaction(s)"]
        );
        assert_eq!(
            context_lines(context.as_ref(), Some(&latest))[1..],
            [
                "⇣ turns 1–2 (summarize, threshold):",
                "    They asked twice.",
                "    Both answered."
            ]
        );
    }
}
