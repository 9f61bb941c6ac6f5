//! The runner's I/O around the engine: boot (claim, fetch, repair, resume), the inbox loop,
//! model calls, tools through the ledger, checkpoints, and shutdown (docs/design.md §6.2–6.9).
//!
//! This file holds the loop (a durable runner's inbox, a batch job's one task, a session's
//! inbox until idle) and the effects' dispatch; each kind of I/O has a file of its own:
//! `boot` (claim, restore, resume), `commit` (durable steps), `waits` (people and
//! collaborators) and `tools` (tool execution).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ninetrix_client::{Client, Token};
use ninetrix_proto::ApprovalId;
use ninetrix_proto::api::TurnAttempt;
use ninetrix_proto::events::{ErrorEvent, ErrorStage, TraceEvent};
use tokio_util::sync::CancellationToken;

use crate::checkpoints::{CheckpointError, Checkpoints, HttpCheckpoints, MemoryCheckpoints};
use crate::config::{ApiAccess, Config};
use crate::context;
use crate::deltas;
use crate::engine::{Effect, Engine, Input};
use crate::events::Events;
use crate::health::{Activity, Health};
use crate::history;
use crate::inbox;
use crate::limits::Permits;
use crate::llm::{Llm, LlmError, LlmRequest, Purpose, ToolDef};
use crate::mcp::McpServers;
use crate::notify::Notifier;
use crate::telemetry::Observed;
use crate::tools::{self, ToolContext};

mod a2a;
mod boot;
mod commit;
mod controls;
#[cfg(test)]
mod harness;
mod jobs;
mod snapshots;
mod tool_calls;
mod waits;

use boot::run_with;
use controls::Controls;

/// How the runner ended, as an exit code (docs/design.md §6.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// Done, stopped, or fenced: 0.
    Ok,
    /// A runtime failure Docker should restart: 1.
    Failure(String),
    /// A batch turn that failed: 1, without a restart.
    TurnFailed,
    /// The thread was purged (its conversation deleted; its ID is never used again): 0, so
    /// Docker does not restart a runner that has nothing to serve. A runner that took its thread
    /// from the API's replica mapping asks it for the replica's new thread instead.
    Purged(String),
    /// A configuration error (a variable, a secret, the spec), naming it: 2, which Docker
    /// restarts but no restart fixes.
    Config(String),
}

impl Exit {
    /// The process exit code.
    pub fn code(&self) -> u8 {
        match self {
            Exit::Ok | Exit::Purged(_) => 0,
            Exit::Failure(_) | Exit::TurnFailed => 1,
            Exit::Config(_) => 2,
        }
    }
}

/// The `error` event of a runner failure: its log line (`ERROR runner: …`) is what `ps` shows
/// as the container's last error, and `trace` shows it.
fn failure_event(why: &str) -> TraceEvent {
    TraceEvent::Error(ErrorEvent {
        stage: ErrorStage::Runner,
        message: why.to_string(),
    })
}

/// A runner whose thread was purged stops: there is nothing left to serve, and no restart
/// would change that (the thread's ID is never used again).
fn purged(thread: ninetrix_proto::ThreadId, why: &str) -> Exit {
    tracing::warn!("thread {thread} was purged ({why}); this runner stops serving it (exit 0)");
    Exit::Purged(format!("thread {thread} was purged"))
}

/// What a model call that could not have its permit comes to: a fenced or purged thread stops
/// the runner, an API unreachable for longer than its patience is a runner failure, a refusal
/// ends the turn naming it.
fn lease_failed(e: crate::limits::PermitError) -> Result<Input, Stop> {
    use crate::limits::PermitError;
    match e {
        PermitError::Fenced(m) => Err(Stop::Fenced(m)),
        PermitError::Purged(m) => Err(Stop::Purged(m)),
        e @ PermitError::Unreachable(_) => Err(Stop::Failure(e.to_string())),
        e @ (PermitError::Refused(_)
        | PermitError::UnknownLease(_)
        | PermitError::Unsupported(_)) => Ok(Input::LlmFailed(e.to_string())),
    }
}

/// Why the effect loop stopped early.
enum Stop {
    Fenced(String),
    Purged(String),
    Shutdown,
    Failure(String),
}

impl From<CheckpointError> for Stop {
    fn from(e: CheckpointError) -> Self {
        match e {
            CheckpointError::Fenced(m) => Stop::Fenced(m),
            CheckpointError::Purged(m) => Stop::Purged(m),
            other => Stop::Failure(other.to_string()),
        }
    }
}

/// A finished turn.
struct Finished {
    reply: String,
    ok: bool,
}

/// How long one inbox poll waits.
const POLL: Duration = Duration::from_secs(30);

struct Runner<C: Checkpoints> {
    config: Config,
    store: C,
    engine: Engine,
    llm: Llm,
    /// The model that writes compactions' summaries when `runtime.context.model` names another
    /// than the agent's.
    summarizer: Option<Llm>,
    /// What the model is told it may call: the builtins, then the MCP tools offered now.
    tool_defs: Vec<ToolDef>,
    tool_ctx: ToolContext,
    /// The agent's MCP servers.
    mcp: McpServers,
    events: Events,
    health: Health,
    system: Option<String>,
    epoch: u64,
    /// The latest stored version, and the history length as of it.
    version: u64,
    history_len: u64,
    shutdown: CancellationToken,
    /// When the current turn's input was taken (for `turn_completed.duration_ms`).
    turn_started: Instant,
    /// Posts requests to people to `human_approval.notify_url`, if the agentfile sets one.
    notifier: Option<Notifier>,
    /// Requests this runner has notified, each with the token that stops its retries once it is
    /// settled.
    notified: HashMap<ApprovalId, CancellationToken>,
    /// A session's runner: stop once the inbox is empty and no turn is left.
    until_idle: bool,
    /// This runner's attempt at the turn in progress (stored with the turn's commits, so a
    /// runner that resumes the turn after a crash can report this attempt's span).
    attempt: Option<TurnAttempt>,
    /// The turn this runner resumed at boot (its first round is produced again: watchers of the
    /// streamed text start it over).
    resumed_turn: Option<u64>,
    /// This runner's boot count (the API's count of claims of the thread).
    boot_count: u64,
    /// The inbox as seen while the current turn runs (its steers, interrupts and cancels).
    controls: Option<Controls>,
    /// What the runner read of the inbox when it took the current turn's message: the start
    /// of that turn's [`Controls`].
    read_ahead: Vec<ninetrix_proto::api::InboxMessage>,
    /// The thread's background jobs, when the backend runs a job broker for the agent.
    jobs: Option<jobs::Jobs>,
    /// The client of remote A2A collaborators (their cards cached for the runner's life).
    a2a: crate::a2a::Client,
    /// The thread's workspace as snapshots see it (with the hashes this runner knows).
    snapshots: crate::snapshots::Snapshotter,
    /// The files a rewind staged, applied once its commit is stored.
    staged: Option<crate::snapshots::Staged>,
}

/// Serves this runner's own thread until shutdown, fencing, a batch job's end, or a failure:
/// against the checkpoint API when one is configured, else (a batch job) against a thread kept
/// in memory. (The sessions a replica serves beside it are started above the driver, by
/// [`crate::process::run`].)
pub async fn run_thread(
    config: Config,
    http: reqwest::Client,
    health: Health,
    shutdown: CancellationToken,
) -> Exit {
    match config.api.clone() {
        Some(access) => {
            let store = api_store(&access, &config, &http, &health);
            let permits: Arc<dyn Permits> = Arc::new(store.clone());
            let leases = boot::Leases {
                permits: Some(permits),
                replica: None,
            };
            run_with(store, leases, config, http, health, shutdown, false).await
        }
        None => {
            let store = MemoryCheckpoints::new(config.thread_id);
            let leases = boot::Leases {
                permits: None,
                replica: None,
            };
            run_with(store, leases, config, http, health, shutdown, false).await
        }
    }
}

/// Serves one session's thread (`config` is the replica's, with the session's thread, token,
/// key and workspace) until its inbox is empty and no turn is left: claim, restore, resume,
/// answer its messages — with every guarantee the replica's own thread has. Its health is not
/// the container's: it writes no status file.
pub async fn run_session(
    config: Config,
    http: reqwest::Client,
    replica: Health,
    shutdown: CancellationToken,
) -> Exit {
    let Some(access) = config.api.clone() else {
        return Exit::Failure("a session needs the checkpoint API".into());
    };
    let health = Health::new(None);
    let store = api_store(&access, &config, &http, &health);
    let permits: Arc<dyn Permits> = Arc::new(store.clone());
    let leases = boot::Leases {
        permits: Some(permits),
        replica: Some(replica),
    };
    run_with(store, leases, config, http, health, shutdown, true).await
}

/// The thread's store in the checkpoint API, with the runner's token, patience and tracing.
fn api_store(
    access: &ApiAccess,
    config: &Config,
    http: &reqwest::Client,
    health: &Health,
) -> HttpCheckpoints {
    let client = Client::new(
        http.clone(),
        &access.url,
        Some(Token::new(access.token.expose())),
    );
    HttpCheckpoints::new(
        client,
        &access.url,
        config.thread_id,
        config.api_patience,
        health.clone(),
    )
    .with_tracing(config.telemetry.as_ref().map(|t| t.sampler()))
}

impl<C: Checkpoints> Runner<C> {
    /// The model round of the current turn about to be asked, from 1: the model's answers in
    /// the turn's history so far, plus one. The same after a restart (the history is repaired
    /// back to the round's start), so a resumed round streams under its own number.
    fn round(&self) -> u32 {
        let start = usize::try_from(self.engine.state().turn_start_history_len).unwrap_or(0);
        let answers = self
            .engine
            .history()
            .iter()
            .skip(start)
            .filter(|m| m.role == ninetrix_proto::Role::Assistant)
            .count();
        u32::try_from(answers + 1).unwrap_or(u32::MAX)
    }

    async fn main(&mut self, boot_count: u64) -> Exit {
        let resume = match self.boot(boot_count).await {
            Ok(resume) => resume,
            Err(exit) => return exit,
        };
        // The thread's jobs went on while no runner served it: the trace says what was found.
        self.reattach_jobs().await;
        let resumed = match self.execute(resume).await {
            Ok(f) => f,
            Err(stop) => return self.stopped(stop),
        };

        if !self.config.spec.execution.durability {
            return self.batch(resumed).await;
        }
        if self.config.api.is_none() {
            return self.stopped(Stop::Failure(
                "a durable agent needs the checkpoint API".into(),
            ));
        }
        self.health.set(Activity::Serving);
        let wait = if self.until_idle {
            Duration::ZERO
        } else {
            POLL
        };
        // Past every message read that could not be taken (never expected: the cursor moves
        // over taken ones), so an inbox of those is waited on, not re-read in a loop.
        let mut floor = 0;
        loop {
            let after = self.engine.state().inbox_cursor.max(floor);
            let next = tokio::select! {
                r = self.store.inbox(after, wait) => r,
                () = self.shutdown.cancelled() => return self.stopped(Stop::Shutdown),
            };
            let messages = match next {
                Ok(m) => m,
                Err(e) => return self.stopped(e.into()),
            };
            let Some(message) = inbox::next(&messages, self.engine.state()).cloned() else {
                if self.until_idle {
                    // Idle: out of memory until the next message.
                    return Exit::Ok;
                }
                floor = messages.last().map_or(floor, |m| m.seq);
                continue;
            };
            if self.shutdown.is_cancelled() {
                return self.stopped(Stop::Shutdown);
            }
            self.health.set(Activity::Working { seq: message.seq });
            let effects = match message.control {
                // An instruction, not a turn: carried out between turns.
                Some(control) => self.engine.apply(Input::Control {
                    seq: message.seq,
                    control,
                    by: message.by.unwrap_or_else(|| inbox::ANONYMOUS.to_string()),
                    to_turn: message.to_turn,
                }),
                None => {
                    self.read_ahead = messages;
                    self.turn_started = Instant::now();
                    self.attempt = Some(self.new_attempt());
                    self.refresh_tools().await;
                    self.engine.apply(Input::Message {
                        seq: message.seq,
                        content: message.content,
                        handoff: message.handoff,
                    })
                }
            };
            if let Err(stop) = self.execute(effects).await {
                return self.stopped(stop);
            }
            self.health.set(Activity::Serving);
        }
    }

    async fn batch(&mut self, resumed: Option<Finished>) -> Exit {
        let finished = match resumed {
            Some(f) => f,
            None => {
                let Some(task) = self
                    .config
                    .task
                    .clone()
                    .or_else(|| self.config.spec.execution.task.clone())
                else {
                    return self.stopped(Stop::Failure("a batch agent needs a task: set execution.task in the agentfile or pass a message".into()));
                };
                self.turn_started = Instant::now();
                self.attempt = Some(self.new_attempt());
                self.health.set(Activity::Batch);
                self.refresh_tools().await;
                let effects = self.engine.apply(Input::Message {
                    seq: 0,
                    content: task,
                    handoff: None,
                });
                match self.execute(effects).await {
                    Ok(Some(f)) => f,
                    Ok(None) => {
                        return self
                            .stopped(Stop::Failure("the batch turn ended without a reply".into()));
                    }
                    Err(stop) => return self.stopped(stop),
                }
            }
        };
        println!("{}", finished.reply);
        if finished.ok {
            Exit::Ok
        } else {
            Exit::TurnFailed
        }
    }

    fn stopped(&self, stop: Stop) -> Exit {
        match stop {
            Stop::Fenced(why) => {
                self.events.observe(Observed::Fenced);
                tracing::warn!("fenced: {why}; stopping (exit 0)");
                Exit::Ok
            }
            Stop::Shutdown => {
                tracing::info!("shutting down: the last checkpoint is consistent (exit 0)");
                Exit::Ok
            }
            Stop::Purged(why) => purged(self.config.thread_id, &why),
            Stop::Failure(why) => {
                // The event's log line is the one report of it.
                self.events.emit(failure_event(&why));
                Exit::Failure(why)
            }
        }
    }

    /// Performs effects in order, feeding outcomes back to the engine.
    async fn execute(&mut self, effects: Vec<Effect>) -> Result<Option<Finished>, Stop> {
        let mut queue: VecDeque<Effect> = effects.into();
        let mut finished = None;
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Commit(plan) => {
                    // The events the engine puts right after a commit are facts about it (the
                    // response's `llm_call`, the turn's `turn_completed`): they are stored with it.
                    let mut riding = Vec::new();
                    while let Some(Effect::Event(_)) = queue.front() {
                        if let Some(Effect::Event(e)) = queue.pop_front() {
                            riding.push(self.stamped(e));
                        }
                    }
                    let point = self.replay_kill_point(&plan);
                    self.commit(*plan, riding).await?;
                    self.health.set_context(self.engine.state().context.clone());
                    if let Some(point) = point {
                        crate::snapshots::faults::reached(point, self.snapshots.root()).await;
                    }
                }
                Effect::CallLlm => {
                    if self.shutdown.is_cancelled() {
                        return Err(Stop::Shutdown);
                    }
                    // The safe boundary: steers join the turn, a stop ends it.
                    if let Some(stopped) = self.at_boundary(true) {
                        queue = stopped.into();
                        continue;
                    }
                    let (seen, state) = self.watching();
                    let input = tokio::select! {
                        r = self.call_llm() => r?,
                        by = controls::stop_arrives(seen, state) => self.stop_input(by, &[]),
                    };
                    queue.extend(self.engine.apply(input));
                }
                Effect::Compact { plan, input } => {
                    if self.shutdown.is_cancelled() {
                        return Err(Stop::Shutdown);
                    }
                    if let Some(stopped) = self.at_boundary(false) {
                        queue = stopped.into();
                        continue;
                    }
                    let (seen, state) = self.watching();
                    let input = tokio::select! {
                        r = self.compact(plan, input) => r?,
                        by = controls::stop_arrives(seen, state) => self.stop_input(by, &[]),
                    };
                    queue.extend(self.engine.apply(input));
                }
                Effect::RunTool(call) => {
                    // The engine counts the call as in flight: a stop that is already here
                    // answers it as never run (it is not started); a replay or an outcome
                    // already known is given as it is.
                    if let Some(by) = self.stop_waiting()
                        && matches!(call.decision, crate::ledger::Decision::Execute { .. })
                    {
                        let stop = self.stop_input(by.clone(), &[]);
                        queue.extend(self.engine.apply(stop));
                        queue.extend(self.engine.apply(Input::Tool {
                            call_id: call.call_id,
                            content: crate::engine::not_run(&by),
                            is_error: true,
                        }));
                        continue;
                    }
                    for input in self.run_tool_stoppable(call).await? {
                        queue.extend(self.engine.apply(input));
                    }
                }
                Effect::AwaitApprovals { turn_seq, keys } => {
                    if let Some(stopped) = self.at_boundary(false) {
                        queue = stopped.into();
                        continue;
                    }
                    let (seen, state) = self.watching();
                    let input = tokio::select! {
                        r = self.await_approvals(turn_seq, &keys) => r?,
                        by = controls::stop_arrives(seen, state) => self.stop_input(by, &[]),
                    };
                    queue.extend(self.engine.apply(input));
                }
                Effect::Delegate { turn_seq, calls } => {
                    if let Some(stopped) = self.at_boundary(false) {
                        queue = stopped.into();
                        continue;
                    }
                    let (seen, state) = self.watching();
                    let input = tokio::select! {
                        r = self.delegate(turn_seq, calls) => r?,
                        by = controls::stop_arrives(seen, state) => self.stop_input(by, &[]),
                    };
                    queue.extend(self.engine.apply(input));
                }
                Effect::FetchTurnPoint { to_turn } => {
                    let input = self.fetch_turn_point(to_turn).await?;
                    queue.extend(self.engine.apply(input));
                }
                Effect::RestoreWorkspace(snapshot) => self.restore_workspace(snapshot).await?,
                Effect::Event(e) => {
                    let e = self.stamped(e);
                    self.events.emit(e)
                }
                Effect::TurnFinished { reply, ok, .. } => {
                    // `turn_completed` rode on the final commit; anything emitted since is sent
                    // before more work is taken.
                    self.controls = None;
                    self.events.flush(Duration::from_secs(2)).await;
                    self.health.turn_ended(ok, &reply);
                    finished = Some(Finished { reply, ok });
                }
            }
        }
        Ok(finished)
    }

    /// One model round of the current turn: the model's view of the history (the latest
    /// compaction's summary and what follows it) sent, its answer streamed to watchers.
    async fn call_llm(&mut self) -> Result<Input, Stop> {
        let history = self.engine.history();
        let folded = context::fold(history);
        let view = context::view(history, &folded);
        if let Err(v) = history::validate(&view) {
            return Err(Stop::Failure(format!(
                "refusing to send an invalid history to the model: {v}"
            )));
        }
        // The answer's text goes to the thread's watchers as it streams.
        let (text, pieces) = tokio::sync::mpsc::unbounded_channel();
        let turn_seq = self.engine.state().turn_seq;
        let round = deltas::Round {
            epoch: self.epoch,
            turn_seq,
            round: self.round(),
            resumed: self.resumed_turn == Some(turn_seq),
        };
        let publisher = tokio::spawn(deltas::publish(self.store.clone(), round, pieces));
        let req = LlmRequest {
            system: self.system.as_deref(),
            history: &view,
            tools: &self.tool_defs,
            stream: Some(&text),
            purpose: Purpose::Round {
                hidden_rounds: folded.hidden_rounds,
            },
        };
        let events = &self.events;
        let answer = self
            .llm
            .complete(&req, &self.shutdown, |e| events.emit(e))
            .await;
        // The call is over: the publisher sends what is left and ends (not awaited: watchers
        // never hold up a turn).
        drop(text);
        drop(publisher);
        Ok(match answer {
            Ok(turn) => Input::Llm(turn),
            Err(LlmError::Cancelled) => return Err(Stop::Shutdown),
            Err(LlmError::Lease(e)) => lease_failed(e)?,
            Err(LlmError::OverBudget(spent)) => Input::OverBudget(spent),
            Err(LlmError::Fatal(why)) => Input::LlmFailed(why),
            Err(LlmError::ContextTooLong(why)) => Input::ContextTooLong(why),
            // Only with an attempt limit (none by default): a restart would not help, so the
            // turn ends with the reason.
            Err(e @ LlmError::Transient { .. }) => {
                Input::LlmFailed(format!("the model kept failing: {e}"))
            }
        })
    }

    /// Carries out a compaction the engine planned: writes the summary (a model call with
    /// `input`, by `runtime.context.model` or the agent's model) when it asks for one. Nothing
    /// is stored here: the engine's commit after it is the compaction.
    async fn compact(
        &mut self,
        plan: context::Plan,
        input: Option<Vec<ninetrix_proto::Message>>,
    ) -> Result<Input, Stop> {
        let summary = match input {
            None => None,
            Some(input) => {
                tracing::info!(
                    "compacting turns {}–{} ({} tokens): writing the summary",
                    plan.turns[0],
                    plan.turns[1],
                    plan.tokens_before
                );
                let req = LlmRequest {
                    system: Some(context::SUMMARY_SYSTEM),
                    history: &input,
                    tools: &[],
                    stream: None,
                    purpose: Purpose::Summary,
                };
                let events = &self.events;
                let llm = self.summarizer.as_ref().unwrap_or(&self.llm);
                Some(
                    match llm.complete(&req, &self.shutdown, |e| events.emit(e)).await {
                        Ok(turn) => {
                            let text = turn.message.text_content();
                            if text.trim().is_empty() {
                                Err("the model answered with no text".to_string())
                            } else {
                                Ok(crate::engine::Summary {
                                    text,
                                    model: turn.model,
                                    usage: turn.usage,
                                })
                            }
                        }
                        Err(LlmError::Cancelled) => return Err(Stop::Shutdown),
                        Err(LlmError::Lease(e)) => Err(match lease_failed(e)? {
                            Input::LlmFailed(why) => why,
                            _ => "no permit for the model call".to_string(),
                        }),
                        // The round after it meets the same budget and says so.
                        Err(e) => Err(e.to_string()),
                    },
                )
            }
        };
        Ok(Input::Compacted(crate::engine::Compacted {
            at_version: self.version,
            summary,
        }))
    }

    /// A tool call's arguments as traced: secret-looking keys and the agent's secret values
    /// masked.
    fn args_preview(&self, args: &serde_json::Value) -> String {
        let secrets: Vec<&str> = self.config.secrets.values().map(|s| s.expose()).collect();
        tools::preview_args(args, &secrets)
    }

    /// The start of a tool result as traced, the agent's secret values masked.
    fn result_preview(&self, content: &str) -> String {
        self.mcp.scrub(&crate::engine::preview(content, 200))
    }
}
