//! `ninetrix invoke`: a message into an agent's inbox, and (by default) its reply. It never
//! misleads: a target that cannot answer (gave up, exited, unhealthy, a batch job) is refused
//! before anything is queued and reported at once while waiting; API blips are retried with the
//! same dedupe key; "queued as message N" is printed as soon as the message is stored.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use futures_util::StreamExt as _;
use ninetrix_client::{ClientError, Watched};
use ninetrix_proto::api::{
    ApprovalKind, EnqueueRequest, EnqueueResponse, Event, MessageMode, RunningTurn,
};
use ninetrix_proto::deltas::Delta;
use ninetrix_proto::events::{Decoded, TraceEvent};
use ninetrix_proto::{ThreadId, sessions};
use serde_json::json;

use crate::backend::Backend;
use crate::backend::view::PoolView;
use crate::cli::pool_name;
use crate::pool::condition::{self, Condition, Facts, Who};
use crate::ui::handoffs;
use crate::ui::streamed::Streamed;
use crate::ui::style::Style;

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
    /// A conversation of the agent (any string up to 200 characters): its thread is created on
    /// first use and reused ever after, served by the replica that owns the key.
    #[arg(long, value_name = "KEY", conflicts_with = "replica", value_parser = session_key)]
    pub session: Option<String>,
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
    /// If the agent is in a turn, join it: the message reaches the model before its next round
    /// (after the tool calls running now), and the reply is that turn's.
    #[arg(long, conflicts_with_all = ["interrupt", "mode"])]
    pub steer: bool,
    /// If the agent is in a turn, stop it (the model call in flight is abandoned; running tools
    /// finish) and answer this message instead.
    #[arg(long, conflicts_with = "mode")]
    pub interrupt: bool,
    /// What the message does if the agent is busy: queue, steer, interrupt or reject (refused
    /// with the running turn named, exit 75). Default: the agent's
    /// `execution.on_message_while_busy`.
    #[arg(long, value_name = "MODE", value_parser = message_mode)]
    pub mode: Option<MessageMode>,
}

impl InvokeArgs {
    /// Who the message is for, as people read it: `bot-2`, or `session k of bot (served by
    /// bot-2)`.
    fn whom(&self, replica: u32) -> String {
        match &self.session {
            Some(session) => format!(
                "session {} of {} (served by {}-{replica})",
                shell_quote(session),
                self.agent,
                self.agent
            ),
            None => format!("{}-{}", self.agent, self.replica),
        }
    }

    /// Said when `invoke` stops before the reply: the conversation's flag (`--replica N`,
    /// `--session K`), and the command that waits again without a second message.
    fn rerun(&self, pool: &str, key: &str) -> (String, String) {
        let addressed = match &self.session {
            Some(session) => format!("--session {}", shell_quote(session)),
            None => format!("--replica {}", self.replica),
        };
        let rerun = format!(
            "`ninetrix invoke -p {pool} --agent {} {addressed} --id {key} -m {}` waits for it \
             without queueing it again",
            self.agent,
            shell_quote(&self.message)
        );
        (addressed, rerun)
    }

    /// The mode to send: `--steer`, `--interrupt`, `--mode`, or none (the agent's default).
    fn message_mode(&self) -> Option<MessageMode> {
        if self.steer {
            Some(MessageMode::Steer)
        } else if self.interrupt {
            Some(MessageMode::Interrupt)
        } else {
            self.mode
        }
    }
}

/// A `--mode` value.
fn message_mode(s: &str) -> Result<MessageMode, String> {
    MessageMode::parse(s)
        .ok_or_else(|| format!("`{s}` is not a mode: use queue, steer, interrupt or reject"))
}

/// What `invoke` writes to: a replica's own thread, or a session of the agent.
enum Conversation<'a> {
    Replica(ThreadId),
    Session(&'a str),
}

/// A session key as `--session` takes it: 1 to 200 characters, no control characters.
fn session_key(key: &str) -> Result<String, String> {
    sessions::check_key(key)
        .map(|()| key.to_string())
        .map_err(|e| e.to_string())
}

/// Exit code of `invoke --wait` when no reply came in time (like `timeout(1)`).
pub(crate) const EXIT_TIMEOUT: u8 = 124;
/// Exit code when the target cannot answer: gave up, exited, unhealthy, missing, or a batch job
/// (`EX_UNAVAILABLE` of sysexits.h).
pub(crate) const EXIT_UNAVAILABLE: u8 = 69;
/// Exit code when the message was refused because the agent is busy (mode `reject`): nothing was
/// queued; sending again later, or with another mode, may succeed (`EX_TEMPFAIL` of sysexits.h).
pub(crate) const EXIT_BUSY: u8 = 75;

/// How long API blips are retried (queueing, reading events) before `invoke` gives up on the API.
const API_PATIENCE: Duration = Duration::from_secs(60);
/// How often the target container's condition is re-read while waiting (Docker's state)…
const RECHECK: Duration = Duration::from_secs(1);
/// …and how often its runner's health report (an archive request, which costs Docker a process).
const HEALTH_RECHECK: Duration = Duration::from_secs(5);

/// Runs `ninetrix invoke`: check that the target can answer, queue the message (with a dedupe
/// key, so a retry adds nothing), then follow the thread's events until the turn that answers it
/// completes, re-checking the target meanwhile.
pub(crate) async fn run(args: &InvokeArgs) -> anyhow::Result<ExitCode> {
    let view = PoolView::open(&args.file, args.pool.as_deref()).await?;
    // A session is served by the replica that owns its key; its thread is the session's own.
    let (replica, conversation) = match &args.session {
        Some(key) => (
            sessions::owner(key, view.replica_count(&args.agent)?),
            Conversation::Session(key),
        ),
        None => (
            args.replica,
            Conversation::Replica(view.thread(&args.agent, args.replica)?),
        ),
    };
    let docker = crate::docker::connect().await?;
    let backend = view.backend();
    let target = Target {
        container: backend.replica_name(&view.name, &args.agent, replica),
        pool: view.name.clone(),
        agent: args.agent.clone(),
        replica,
        backend,
        up: backend.up_command(&view.name, view.state.agentfile.as_deref()),
    };
    // Before queueing: a message to an agent that cannot answer is refused, not silently parked.
    let facts = match target.facts(&docker, true).await? {
        Some(facts) if facts.durable => match facts.why_no_answer_to_invoke(&target.who()) {
            Some(why) => return Ok(unavailable(&format!("{why}; nothing was queued"))),
            None => facts,
        },
        Some(_) => {
            return Ok(unavailable(&format!(
                "agent `{}` is a batch job (execution.durability: false): it takes no messages, so \
             nothing was queued. Run it with its input instead:\n  ninetrix run -p {} --agent {} -m {}",
                args.agent,
                target.pool,
                args.agent,
                shell_quote(&args.message)
            )));
        }
        None => {
            return Ok(unavailable(&format!(
                "{} does not exist, so nothing would answer; nothing was queued. `{}` creates it",
                target.container, target.up
            )));
        }
    };

    // A session's thread is opened (created on first use) only once the owner can answer.
    let thread = match conversation {
        Conversation::Replica(thread) => thread,
        Conversation::Session(key) => view.api.open_session(&view.name, &args.agent, key).await?,
    };
    let key = args
        .id
        .clone()
        .unwrap_or_else(|| format!("invoke-{}", ThreadId::new_v7()));
    let whom = args.whom(replica);
    let request = EnqueueRequest {
        content: args.message.clone(),
        dedupe_key: Some(key.clone()),
        control: None,
        mode: args.message_mode(),
    };
    let queued = match retry_blips(|| view.api.enqueue(thread, &request)).await {
        Ok(q) => q,
        Err(e) if is_busy(&e) => {
            // The refusal names the running turn (`ErrorBody.running`).
            let running = e
                .downcast_ref::<ClientError>()
                .and_then(ClientError::running);
            eprintln!("{}", busy_words(&whom, running, args.mode));
            return Ok(ExitCode::from(EXIT_BUSY));
        }
        Err(e) => {
            return Err(e.context(format!(
                "the message may or may not have been queued; re-run with `--id {key}`, which \
                 queues it at most once"
            )));
        }
    };
    let (seq, duplicate) = (queued.seq, queued.duplicate);
    let already = if duplicate {
        " (already queued with this --id)"
    } else {
        ""
    };
    let already = format!("{}{already}", with_running(&queued));
    let (addressed, rerun) = args.rerun(&target.pool, &key);
    if args.no_wait {
        if args.json {
            outln!(
                "{}",
                json!({"thread_id": thread, "seq": seq, "duplicate": duplicate, "id": key, "mode": queued.mode, "running": queued.running})
            );
        } else {
            outln!("queued as message {seq} for {whom} (id {key}){already}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.json {
        eprintln!("queued as message {seq} for {whom} (id {key}){already}");
        if let Some(api) = &facts.api_complaint {
            eprintln!(
                "  {} last reported: {api}; it takes the message once it reconnects",
                target.container
            );
        }
    }
    let progress = std::io::stderr().is_terminal() && !args.json;
    // The reply grows on screen as the model writes it when stdout is a terminal; a pipe gets
    // the stored reply only, `--json` a line per delta before the result.
    let streaming = std::io::stdout().is_terminal() && !args.json;
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut reply = Reply {
        thread,
        seq,
        key: &key,
        json: args.json,
        progress,
        in_turn: false,
        turn_seq: None,
        steered: None,
        streaming,
        streamed: Streamed::default(),
        style: Style::stderr(),
    };
    let waiting = Waiting {
        view: &view,
        docker: &docker,
        target: &target,
        seq,
        deadline,
        timeout: args.timeout,
        addressed: &addressed,
        rerun: &rerun,
    };
    waiting.follow(&mut reply, facts.liveness.restarts).await
}

/// Says why nothing was queued (the target cannot answer): exit 69.
fn unavailable(why: &str) -> ExitCode {
    eprintln!("{why}");
    ExitCode::from(EXIT_UNAVAILABLE)
}

/// What `invoke` needs while it follows the thread for the reply: the pool, the target it
/// re-checks, and what to tell the user when it stops before the reply.
struct Waiting<'a> {
    view: &'a PoolView,
    docker: &'a bollard::Docker,
    target: &'a Target,
    /// The queued message.
    seq: u64,
    deadline: Instant,
    /// `--timeout`, in seconds.
    timeout: u64,
    /// `--session K` or `--replica N`, as the user would write it.
    addressed: &'a str,
    /// How to wait again without queueing the message twice.
    rerun: &'a str,
}

impl Waiting<'_> {
    /// Follows the thread's events until the reply to the message (its exit code), re-checking
    /// the target meanwhile: the reply arrives on the thread's event stream (SSE) as soon as it
    /// is stored; a dropped stream is opened again after the last event seen (no gap, no
    /// repeat). A target that can no longer answer, or the deadline, ends the wait with the
    /// message left queued.
    async fn follow(
        &self,
        reply: &mut Reply<'_>,
        mut restarts_seen: i64,
    ) -> anyhow::Result<ExitCode> {
        let mut cursor = 0;
        let mut checked = Instant::now();
        let mut health_checked = Instant::now();
        // The reply arrives on the thread's event stream (SSE) as soon as it is stored; a dropped
        // stream is opened again after the last event seen (no gap, no repeat).
        let mut stream = None;
        loop {
            if stream.is_none() {
                stream = Some(Box::pin(
                    retry_blips(|| self.view.api.watch(reply.thread, cursor)).await?,
                ));
            }
            let Some(events) = stream.as_mut() else {
                continue;
            };
            let wake = tokio::time::Instant::from_std((checked + RECHECK).min(self.deadline));
            tokio::select! {
                next = events.next() => match next {
                    Some(Ok(Watched::Event(e))) => {
                        cursor = e.seq;
                        if let Some(code) = reply.see(&e) {
                            return Ok(code);
                        }
                        continue;
                    }
                    Some(Ok(Watched::Delta(d))) => {
                        reply.delta(&d);
                        continue;
                    }
                    Some(Err(e)) if e.is_transient() => stream = None,
                    Some(Err(e)) => {
                        return Err(anyhow::Error::new(e)
                            .context(format!("reading the events of thread {}", reply.thread)));
                    }
                    // The server ended the stream (a restart): open it again.
                    None => stream = None,
                },
                () = tokio::time::sleep_until(wake) => {}
            }
            // While waiting: a target that can no longer answer is reported at once.
            if checked.elapsed() >= RECHECK || Instant::now() >= self.deadline {
                checked = Instant::now();
                let with_health = health_checked.elapsed() >= HEALTH_RECHECK;
                if with_health {
                    health_checked = Instant::now();
                }
                let facts = self.target.facts(self.docker, with_health).await?;
                let cond = facts.as_ref().map(Condition::of);
                let why = match &facts {
                    None => Some(format!(
                        "{} was removed; `{}` creates it again",
                        self.target.container, self.target.up
                    )),
                    Some(f) => f.why_no_answer_to_invoke(&self.target.who()),
                };
                if let Some(why) = why {
                    eprintln!("message {} stays queued: {why}; {}", self.seq, self.rerun);
                    return Ok(ExitCode::from(EXIT_UNAVAILABLE));
                }
                if let Some(Condition::Restarting { restarts }) = cond
                    && restarts > restarts_seen
                {
                    restarts_seen = restarts;
                    if reply.progress {
                        eprintln!(
                            "  {} crashed and is restarting ({} restart(s) left); the turn resumes",
                            self.target.container,
                            condition::restarts_left(restarts)
                        );
                    }
                }
            }
            if Instant::now() >= self.deadline {
                eprintln!(
                    "no reply within {}s; message {} stays queued and will still be answered (follow it with `ninetrix trace -p {} --agent {} {} -f`; {})",
                    self.timeout,
                    self.seq,
                    self.target.pool,
                    self.target.agent,
                    self.addressed,
                    self.rerun
                );
                return Ok(ExitCode::from(EXIT_TIMEOUT));
            }
            if stream.is_none() {
                // A dropped stream: a breath before opening it again.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// What `invoke` shows of the thread's events while it waits for the reply to message `seq`.
struct Reply<'a> {
    thread: ThreadId,
    seq: u64,
    key: &'a str,
    json: bool,
    /// Progress lines on stderr (a terminal, not `--json`).
    progress: bool,
    /// The events are of message `seq`'s turn.
    in_turn: bool,
    /// That turn's number, once its start is seen (its deltas carry it).
    turn_seq: Option<u64>,
    /// The message joined this running turn (`--steer`): that turn's end is the reply.
    steered: Option<u64>,
    /// The reply is shown as it streams (stdout is a terminal).
    streaming: bool,
    /// What of it is on screen.
    streamed: Streamed,
    /// Styling of the progress lines (stderr).
    style: Style,
}

/// Characters of a handoff's task or reply on its progress line.
const PREVIEW: usize = 80;

impl Reply<'_> {
    /// Shows one delta of the reply's turn: on the terminal as it grows, or as a JSON line.
    fn delta(&mut self, d: &Delta) {
        if self.turn_seq != Some(d.batch.turn_seq) {
            return;
        }
        if self.json {
            outln!("{}", json!({"delta": d}));
        } else if self.streaming {
            let shown = self.streamed.delta(&d.batch);
            self.show(shown);
        }
    }

    /// A progress line on stderr, on a line of its own: a streamed line on stdout is ended first.
    fn say(&mut self, line: String) {
        if self.streaming {
            crate::output::text(self.streamed.end_line());
        }
        eprintln!("{line}");
    }

    /// Prints what the streamed reply says to print: a note (stderr) after the newline that ends
    /// the streamed line, so the two never share one.
    fn show(&mut self, shown: crate::ui::streamed::Print) {
        let mut out = shown.out.as_str();
        if let Some(note) = shown.note {
            if let Some(rest) = out.strip_prefix('\n') {
                crate::output::text("\n");
                out = rest;
            }
            eprintln!("{note}");
        }
        crate::output::text(out);
    }

    /// Shows the end of the message's turn: its reply, or what stopped it (`⏹ interrupted by
    /// message N`, `⏹ cancelled by NAME`); the exit code.
    fn reply(&mut self, done: &ninetrix_proto::events::TurnCompleted) -> ExitCode {
        let seq = self.seq;
        if let Some(by) = &done.stopped_by {
            if self.json {
                outln!(
                    "{}",
                    json!({"thread_id": self.thread, "seq": seq, "id": self.key, "ok": false, "stopped_by": by, "reply": done.reply, "duration_ms": done.duration_ms})
                );
            } else {
                if self.streaming {
                    crate::output::text(self.streamed.end_line());
                }
                eprintln!("⏹ {}", stopped_words(by));
            }
            return ExitCode::from(crate::EXIT_FAILURE);
        }
        if self.json {
            outln!(
                "{}",
                json!({"thread_id": self.thread, "seq": seq, "id": self.key, "ok": done.ok, "reply": done.reply, "duration_ms": done.duration_ms})
            );
        } else if self.streaming {
            let shown = self.streamed.finish(&done.reply);
            self.show(shown);
        } else {
            outln!("{}", done.reply);
        }
        if done.ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(crate::EXIT_FAILURE)
        }
    }

    /// Shows one event; the exit code once it is the reply.
    fn see(&mut self, e: &Event) -> Option<ExitCode> {
        let Decoded::Known(event) = e.decode() else {
            return None;
        };
        let (seq, in_turn, progress) = (self.seq, self.in_turn, self.progress);
        match event {
            TraceEvent::TurnStarted(t) => {
                self.in_turn = t.seq == seq;
                self.turn_seq = self.in_turn.then_some(t.turn_seq);
            }
            TraceEvent::TurnResumed(t) => {
                self.in_turn = t.seq == seq;
                self.turn_seq = self.in_turn.then_some(t.turn_seq);
            }
            TraceEvent::LlmCall(c) if in_turn && progress => self.say(format!(
                "  model {} answered ({} ms)",
                c.model, c.latency_ms
            )),
            TraceEvent::LlmRetry(r) if in_turn && progress => self.say(format!(
                "  model call failed ({}): {}; retrying in {} ms",
                r.attempt_text(),
                r.reason,
                r.retry_in_ms
            )),
            TraceEvent::Outage(o) if progress => {
                self.say(format!("  {}; it answers again", o.text()))
            }
            TraceEvent::Compacted(c) if in_turn && progress => self.say(format!(
                "  compacted turns {}–{} first ({} → {} tokens)",
                c.turns[0],
                c.turns[1],
                ninetrix_proto::context::tokens_short(c.tokens_before),
                ninetrix_proto::context::tokens_short(c.tokens_after)
            )),
            TraceEvent::ToolCall(t) | TraceEvent::ToolReplayed(t) if in_turn && progress => {
                self.say(format!("  tool {} {}", t.name, t.mode.as_str()))
            }
            TraceEvent::UnknownTool(u) if in_turn && progress => {
                self.say(format!("  tool {}: no such tool", u.name))
            }
            // Said even without a terminal (on stderr): someone must act for the reply to come.
            TraceEvent::ApprovalRequested(a) if in_turn && !self.json => {
                let (what, how) = if a.kind == ApprovalKind::Question {
                    (
                        "waiting for an answer",
                        format!("ninetrix answer {} TEXT", a.id),
                    )
                } else {
                    ("waiting for approval", format!("ninetrix approve {}", a.id))
                };
                self.say(format!("  {what} {} ({how}) · {} {}", a.id, a.tool, a.args));
            }
            TraceEvent::ApprovalDecided(a) if in_turn && !self.json => {
                self.say(format!("  {} {}", a.id, a.text()))
            }
            TraceEvent::ApprovalExpired(a) if in_turn && !self.json => self.say(format!(
                "  {} expired undecided; {} did not run",
                a.id, a.tool
            )),
            // A handoff can keep the turn waiting long: who was asked, and what came back.
            TraceEvent::HandoffSent(h) if in_turn && progress => {
                self.say(format!("  {}", handoffs::sent(self.style, &h, PREVIEW)))
            }
            TraceEvent::HandoffSettled(h) if in_turn && progress => {
                self.say(format!("  {}", handoffs::settled(self.style, &h, PREVIEW)))
            }
            TraceEvent::HandoffRefused(h) if in_turn && progress => {
                self.say(format!("  {}", handoffs::refused(self.style, &h)))
            }
            TraceEvent::HandoffReceived(h) if in_turn && progress => {
                self.say(format!("  {}", handoffs::received(self.style, &h)))
            }
            TraceEvent::HandoffReplied(h) if in_turn && progress => {
                self.say(format!("  {}", handoffs::replied(self.style, &h)))
            }
            TraceEvent::Steered(s) if s.seq == seq => {
                self.in_turn = true;
                self.turn_seq = Some(s.turn_seq);
                self.steered = Some(s.turn_seq);
                if !self.json {
                    self.say(format!("↪ steered into turn {}", s.turn_seq));
                }
            }
            TraceEvent::TurnStopping(t) if in_turn && !self.json => {
                self.say(format!("  stopping: {}", stopped_words(&t.by)));
            }
            TraceEvent::TurnCompleted(done)
                if done.seq == seq || Some(done.turn_seq) == self.steered =>
            {
                return Some(self.reply(&done));
            }
            // Events that only show progress, other turns' events, and those not shown
            // without a terminal.
            TraceEvent::LlmCall(_)
            | TraceEvent::LlmRetry(_)
            | TraceEvent::Compacted(_)
            | TraceEvent::CompactionSkipped(_)
            | TraceEvent::Outage(_)
            | TraceEvent::ToolCall(_)
            | TraceEvent::ToolReplayed(_)
            | TraceEvent::UnknownTool(_)
            | TraceEvent::McpTools(_)
            | TraceEvent::McpServerDown(_)
            | TraceEvent::McpServerUp(_)
            | TraceEvent::TurnCompleted(_)
            | TraceEvent::Steered(_)
            | TraceEvent::TurnStopping(_)
            | TraceEvent::CancelMissed(_)
            | TraceEvent::JobStarted(_)
            | TraceEvent::JobFinished(_)
            | TraceEvent::JobReattached(_)
            | TraceEvent::Forked(_)
            | TraceEvent::ForkCreated(_)
            | TraceEvent::Rewound(_)
            | TraceEvent::RewindFailed(_)
            | TraceEvent::SnapshotTaken(_)
            | TraceEvent::SnapshotSkipped(_)
            | TraceEvent::WorkspaceRestored(_)
            | TraceEvent::ReplayStarted(_)
            | TraceEvent::ReplayAnswered(_)
            | TraceEvent::Boot(_)
            | TraceEvent::Ready(_)
            | TraceEvent::Repair(_)
            | TraceEvent::Resume(_)
            | TraceEvent::Checkpoint(_)
            | TraceEvent::BudgetExceeded(_)
            | TraceEvent::ModelFallback(_)
            | TraceEvent::ModelWaited(_)
            | TraceEvent::MaxTurnsReached(_)
            | TraceEvent::ApprovalRequested(_)
            | TraceEvent::ApprovalDecided(_)
            | TraceEvent::ApprovalExpired(_)
            | TraceEvent::ApprovalNotified(_)
            | TraceEvent::HandoffSent(_)
            | TraceEvent::HandoffSettled(_)
            | TraceEvent::HandoffRefused(_)
            | TraceEvent::HandoffReceived(_)
            | TraceEvent::HandoffReplied(_)
            | TraceEvent::Error(_) => {}
        }
        None
    }
}

/// The container `invoke` addresses (on Swarm: the task in the replica's slot).
struct Target {
    container: String,
    pool: String,
    agent: String,
    /// The replica (on Swarm: the slot).
    replica: u32,
    /// Where the pool runs.
    backend: Backend,
    /// The command that starts the pool again, from anywhere.
    up: String,
}

impl Target {
    fn who(&self) -> Who<'_> {
        Who {
            pool: &self.pool,
            agent: &self.agent,
            container: &self.container,
            up: &self.up,
        }
    }

    /// Its facts (with its runner's health report when `with_health`); `None` if it does not
    /// exist.
    async fn facts(
        &self,
        docker: &bollard::Docker,
        with_health: bool,
    ) -> anyhow::Result<Option<Facts>> {
        self.backend
            .replica_facts(docker, &self.pool, &self.agent, self.replica, with_health)
            .await
    }
}

/// Runs an API call, retrying while the API is unreachable or answers 5xx (a restart, a blip)
/// for up to [`API_PATIENCE`]; other errors return at once. Safe for `enqueue` because its dedupe
/// key makes a repeat add nothing.
pub(crate) async fn retry_blips<T, F, Fut>(call: F) -> anyhow::Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let started = Instant::now();
    let mut delay = Duration::from_millis(200);
    let mut told = false;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if is_blip(&e) && started.elapsed() + delay < API_PATIENCE => {
                if !told {
                    eprintln!("{e:#}; retrying for up to {}s", API_PATIENCE.as_secs());
                    told = true;
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether an error is the API refusing a message because the thread is in a turn (mode
/// `reject`).
fn is_busy(e: &anyhow::Error) -> bool {
    e.downcast_ref::<ClientError>()
        .and_then(ClientError::code)
        .is_some_and(|c| *c == ninetrix_client::ErrorCode::Busy)
}

/// What `invoke` says when the message is refused as `busy`: the running turn (when known) and
/// the three ways to send it anyway. `mode` is the `--mode` given (absent: the agent's
/// `execution.on_message_while_busy` is `reject`).
fn busy_words(whom: &str, running: Option<RunningTurn>, mode: Option<MessageMode>) -> String {
    let turn = match running {
        Some(r) => format!("turn {} (message {})", r.turn_seq, r.seq),
        None => "a turn".to_string(),
    };
    let queue = if mode == Some(MessageMode::Reject) {
        "without --mode reject"
    } else {
        "with --mode queue"
    };
    format!(
        "refused: {whom} is busy with {turn}; send with --steer to join it, --interrupt to stop \
         it, or {queue} to queue; nothing was queued"
    )
}

/// What the "queued as message" line adds about the turn the thread was in: what the message
/// does to it.
fn with_running(queued: &EnqueueResponse) -> String {
    let Some(r) = queued.running else {
        return String::new();
    };
    match queued.mode {
        MessageMode::Steer => format!(" (joins turn {} if it is still running)", r.turn_seq),
        MessageMode::Interrupt => format!(" (interrupts turn {})", r.turn_seq),
        MessageMode::Queue | MessageMode::Reject => format!(" (waits for turn {})", r.turn_seq),
    }
}

/// Whether an error is the API being briefly away (not a refusal).
fn is_blip(e: &anyhow::Error) -> bool {
    e.downcast_ref::<ClientError>()
        .is_some_and(ClientError::is_transient)
}

/// A message as one shell word, for the `ninetrix run` line.
pub(crate) fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// What stopped a turn, as `invoke` and `trace` say it: `interrupted by message N`,
/// `cancelled by NAME`.
pub(crate) fn stopped_words(by: &ninetrix_proto::events::StoppedBy) -> String {
    match by {
        ninetrix_proto::events::StoppedBy::Interrupted { seq } => {
            format!("interrupted by message {seq}")
        }
        ninetrix_proto::events::StoppedBy::Cancelled { by, .. } => format!("cancelled by {by}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_quoted_for_the_shell_only_when_needed() {
        assert_eq!(shell_quote("summarise"), "summarise");
        assert_eq!(shell_quote("it's done"), "'it'\\''s done'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn a_busy_refusal_names_the_running_turn_and_the_ways_to_send_anyway() {
        let running = Some(RunningTurn {
            turn_seq: 2,
            seq: 3,
        });
        assert_eq!(
            busy_words("writer-1", running, Some(MessageMode::Reject)),
            "refused: writer-1 is busy with turn 2 (message 3); send with --steer to join it, \
             --interrupt to stop it, or without --mode reject to queue; nothing was queued"
        );
        assert_eq!(
            busy_words("writer-1", None, None),
            "refused: writer-1 is busy with a turn; send with --steer to join it, --interrupt to \
             stop it, or with --mode queue to queue; nothing was queued"
        );
        assert!(!is_busy(&anyhow::anyhow!("no such pool")));
    }

    #[test]
    fn the_queued_line_says_what_the_message_does_to_the_running_turn() {
        let running = Some(RunningTurn {
            turn_seq: 4,
            seq: 7,
        });
        let queued = |mode, running| EnqueueResponse {
            seq: 8,
            duplicate: false,
            mode,
            running,
        };
        assert_eq!(with_running(&queued(MessageMode::Queue, None)), "");
        assert_eq!(
            with_running(&queued(MessageMode::Queue, running)),
            " (waits for turn 4)"
        );
        assert_eq!(
            with_running(&queued(MessageMode::Steer, running)),
            " (joins turn 4 if it is still running)"
        );
        assert_eq!(
            with_running(&queued(MessageMode::Interrupt, running)),
            " (interrupts turn 4)"
        );
    }

    #[test]
    fn only_an_unreachable_or_failing_api_is_a_blip() {
        let down = anyhow::Error::new(ClientError::Unreachable {
            url: "http://127.0.0.1:1".into(),
            reason: "connection refused".into(),
        })
        .context("while queueing a message");
        assert!(is_blip(&down));
        let refused = anyhow::Error::new(ClientError::Api {
            status: 401,
            code: ninetrix_client::ErrorCode::Unauthorized,
            message: "bad token".into(),
            running: None,
        });
        assert!(!is_blip(&refused));
        assert!(!is_blip(&anyhow::anyhow!("no such pool")));
    }
}
