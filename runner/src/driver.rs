//! The runner's I/O around the engine: boot (claim, fetch, repair, resume), the inbox loop,
//! model calls, tools through the ledger, checkpoints, and shutdown (docs/design.md §6.2–6.9).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use ninetrix_client::{Client, Token, http_client};
use ninetrix_proto::ApprovalId;
use ninetrix_proto::api::{
    Approval, ApprovalKind, ApprovalStatus, CommitRequest, Handoff, HandoffRequest, HandoffStatus,
    NewApproval, ThreadLabels, ThreadStatus, ToolCallStatus, TurnAttempt,
};
use ninetrix_proto::events::{self as ev, ErrorEvent, ErrorStage, TraceEvent};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::checkpoints::{CheckpointError, Checkpoints, HttpCheckpoints, MemoryCheckpoints};
use crate::config::Config;
use crate::deltas;
use crate::engine::{
    ApprovalAsk, CommitPlan, Delegated, Delegation, Effect, Engine, EngineConfig, Input,
    PlannedCall, Restored, crash_looping,
};
use crate::events::Events;
use crate::health::{Activity, Health};
use crate::history;
use crate::ledger::Decision;
use crate::llm::{Llm, LlmError, LlmRequest, ToolDef};
use crate::mcp::McpServers;
use crate::notify::{Commands, Notification, Notifier};
use crate::telemetry::{Observed, ThreadInfo, ThreadSpans};
use crate::tools::{self, ToolContext, ToolOutput};
use ninetrix_mcp::client::CallError;
use ninetrix_proto::effects::Effect as EffectClass;

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

/// This runner process: a random ID drawn once, when the process first boots a thread. A
/// restarted container is a new process, so a new ID; a replica taking up one of its sessions
/// again keeps it.
fn process_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| uuid::Uuid::now_v7().to_string())
}

/// Where this runner boots, for its `boot` event ([`ninetrix_proto::boots::BootKind`] compares
/// it with the thread's previous boot).
fn boot_host(config: &Config) -> ninetrix_proto::boots::BootHost {
    ninetrix_proto::boots::BootHost {
        process: process_id().to_string(),
        container: config.instance.clone(),
        created: config.created,
        replica: config.replica,
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

/// How long a running tool may go on after SIGTERM before the runner stops without it.
const TOOL_GRACE: Duration = Duration::from_secs(10);
/// How long one inbox poll waits.
const POLL: Duration = Duration::from_secs(30);
/// How long a verifier whose server is unreachable is retried (at most the tool timeout).
const VERIFY_PATIENCE: Duration = Duration::from_secs(30);

struct Runner<C: Checkpoints> {
    config: Config,
    store: C,
    engine: Engine,
    llm: Llm,
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
}

/// Runs the runner until shutdown, fencing, a batch job's end, or a failure: against the
/// checkpoint API when one is configured, else (a batch job) against a thread kept in memory.
pub async fn run(config: Config, shutdown: CancellationToken) -> Exit {
    let http = http_client();
    let health = Health::new(Some(config.health_file.clone()));
    health.heartbeat();
    match config.api.clone() {
        Some(access) => {
            // With the agent token, the replica also serves the sessions it owns; they stop
            // when it does.
            let sessions_stop = shutdown.child_token();
            let sessions = crate::sessions::Service::new(&config, &http)
                .map(|service| tokio::spawn(service.serve(sessions_stop.clone())));
            let client = Client::new(
                http.clone(),
                &access.url,
                Some(Token::new(access.token.expose())),
            );
            let store = HttpCheckpoints::new(
                client,
                &access.url,
                config.thread_id,
                config.api_patience,
                health.clone(),
            )
            .with_tracing(config.telemetry.as_ref().map(|t| t.sampler()));
            let exit = run_with(store, config, http, health, shutdown, false).await;
            sessions_stop.cancel();
            if let Some(sessions) = sessions {
                let _ = sessions.await;
            }
            exit
        }
        None => {
            let store = MemoryCheckpoints::new(config.thread_id);
            run_with(store, config, http, health, shutdown, false).await
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
    shutdown: CancellationToken,
) -> Exit {
    let Some(access) = config.api.clone() else {
        return Exit::Failure("a session needs the checkpoint API".into());
    };
    let health = Health::new(None);
    let client = Client::new(
        http.clone(),
        &access.url,
        Some(Token::new(access.token.expose())),
    );
    let store = HttpCheckpoints::new(
        client,
        &access.url,
        config.thread_id,
        config.api_patience,
        health.clone(),
    )
    .with_tracing(config.telemetry.as_ref().map(|t| t.sampler()));
    run_with(store, config, http, health, shutdown, true).await
}

/// Runs the runner on `store`'s thread; `until_idle` (a session): stop once the inbox is empty
/// and no turn is left, instead of waiting for more.
async fn run_with<C: Checkpoints>(
    store: C,
    config: Config,
    http: reqwest::Client,
    health: Health,
    shutdown: CancellationToken,
    until_idle: bool,
) -> Exit {
    let labels = ThreadLabels {
        pool: config.pool.clone(),
        agent: Some(config.spec.name.clone()),
        // A session's owner is computed from its key, not stored.
        replica: config.replica.filter(|_| config.session.is_none()),
        session: config.session.clone(),
    };
    // A runner told to stop before it claimed never claims: a stale copy (an orchestrator's old
    // task, stopped while it was still booting) must not fence the copy that replaced it.
    if shutdown.is_cancelled() {
        return Exit::Ok;
    }
    // Claim (the HTTP store retries while the API is unreachable).
    let (epoch, boot_count) = match store.claim(&labels).await {
        Ok(c) => (c.epoch, c.boot_count),
        Err(CheckpointError::Purged(why)) => return purged(config.thread_id, &why),
        Err(e) => {
            // Nothing is claimed, so no event can say it: the log line is the one report (`ps`
            // shows it as the container's last error).
            let why = format!("cannot claim thread {}: {e}", config.thread_id);
            tracing::error!("{why}");
            return Exit::Failure(why);
        }
    };
    let mut events = Events::start(store.clone(), epoch);
    let spec = &config.spec;
    if let Some(exporter) = &config.telemetry {
        let info = ThreadInfo {
            thread: config.thread_id,
            agent: spec.name.clone(),
            session: config.session.clone(),
            pool: config.pool.clone(),
            replica: config.replica,
            provider: spec
                .runtime
                .via
                .clone()
                .unwrap_or_else(|| spec.runtime.provider.as_str().to_string()),
            model: spec.runtime.model.clone(),
        };
        events = events.with_spans(ThreadSpans::new(info, epoch, exporter.clone()));
    }
    health.attach(events.clone());
    if let Some(warning) = crate::llm::unpriced_budget(spec) {
        tracing::warn!("{warning}");
    }
    let mcp = match McpServers::new(spec, &config.secrets, &http, &config.workspace) {
        Ok(mcp) => mcp,
        Err(e) => {
            let why = e.to_string();
            events.emit(failure_event(&why));
            events.flush(Duration::from_secs(2)).await;
            return Exit::Failure(why);
        }
    };
    let engine = Engine::new(EngineConfig {
        thread: config.thread_id,
        epoch,
        max_rounds: spec.execution.max_turns,
        budget: spec.governance.max_budget_per_run,
        resume: spec.execution.resume,
        tools: spec.tools.clone(),
        batch: !spec.execution.durability,
        approval: spec.governance.human_approval.clone(),
        approval_timeout_secs: spec.governance.approval_timeout_secs(),
        agent: spec.name.clone(),
        max_delegation_depth: spec.execution.max_delegation_depth,
        transfer_timeout_secs: spec.execution.transfer_timeout_secs,
    });
    let notifier = spec.governance.human_approval.as_ref().and_then(|h| {
        let url = h.notify_url.clone()?;
        let secret = config.secrets.get(h.notify_secret.as_deref()?)?.clone();
        Some(Notifier::new(url, secret, http.clone(), events.clone()))
    });
    let mut runner = Runner {
        llm: Llm::new(&config, http.clone(), health.clone()),
        health,
        tool_defs: tools::definitions(&spec.tools),
        mcp,
        tool_ctx: ToolContext {
            workspace: config.workspace.clone(),
            timeout: Duration::from_secs(u64::from(spec.runtime.tool_timeout_secs)),
            http,
        },
        system: spec.metadata.system_prompt(),
        store,
        engine,
        events,
        epoch,
        version: 0,
        history_len: 0,
        shutdown,
        turn_started: Instant::now(),
        notifier,
        notified: HashMap::new(),
        until_idle,
        attempt: None,
        resumed_turn: None,
        boot_count,
        config,
    };
    let exit = runner.main(boot_count).await;
    runner.mcp.close().await;
    runner.events.flush(Duration::from_secs(2)).await;
    exit
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
        // The MCP servers' tools decide the effect classes an interrupted turn resumes with.
        self.refresh_tools().await;
        // Fetch and restore (repair, resume).
        let restored = match self.store.latest().await {
            Ok(state) => state,
            Err(CheckpointError::Purged(why)) => return purged(self.config.thread_id, &why),
            Err(e) => {
                return self.stopped(Stop::Failure(format!(
                    "cannot fetch the latest checkpoint: {e}"
                )));
            }
        };
        if let Some(state) = &restored {
            self.version = state.version;
            self.history_len = state.history.len() as u64;
            if matches!(
                state.state.status,
                ThreadStatus::InTurn | ThreadStatus::Waiting
            ) {
                // This runner takes the turn up; the attempt it interrupts gets its span. The
                // turn keeps the boot it started at, so its restarts are counted.
                let mut attempt = self.new_attempt();
                if let Some(prev) = &state.state.attempt {
                    self.events.observe(Observed::Interrupted(prev.clone()));
                    attempt.turn_boot = prev.turn_boot;
                }
                self.attempt = Some(attempt);
            }
            tracing::info!(
                "resumed thread {} at version {} (epoch {})",
                self.config.thread_id,
                state.version,
                self.epoch
            );
        }
        let restored = match restored {
            None => None,
            Some(s) => {
                // An interrupted turn's calls are decided by its ledger records and by what
                // people decided on its requests.
                let in_turn =
                    matches!(s.state.status, ThreadStatus::InTurn | ThreadStatus::Waiting);
                let (ledger, approvals) = if in_turn {
                    let turn = s.state.turn_seq;
                    let ledger = match self.store.turn_ledger(turn).await {
                        Ok(records) => records,
                        Err(e) => {
                            return self.stopped(Stop::Failure(format!(
                                "cannot fetch the ledger of turn {turn}: {e}"
                            )));
                        }
                    };
                    let approvals = match self.store.approvals(turn, 0, Duration::ZERO).await {
                        Ok(a) => a,
                        Err(e) => {
                            return self.stopped(Stop::Failure(format!(
                                "cannot fetch the requests to people of turn {turn}: {e}"
                            )));
                        }
                    };
                    (ledger, approvals)
                } else {
                    (Vec::new(), Vec::new())
                };
                let budget = self.config.turn_restarts;
                let give_up = crash_looping(
                    s.state.status,
                    s.state.attempt.as_ref().map_or(0, |a| a.turn_boot),
                    boot_count,
                    budget,
                );
                if let Some(restarts) = give_up {
                    tracing::warn!(
                        "turn {} was interrupted by {restarts} restarts (more than {budget}, AGENTFILE_TURN_RESTARTS): giving it up",
                        s.state.turn_seq
                    );
                }
                Some(Restored {
                    history: s.history,
                    state: s.state,
                    ledger,
                    approvals,
                    give_up,
                })
            }
        };
        let effects = self.engine.apply(Input::Restored(restored));
        let repaired = effects
            .iter()
            .any(|e| matches!(e, Effect::Event(TraceEvent::Repair(_))));
        self.events.emit(TraceEvent::Boot(ev::Boot {
            epoch: self.epoch,
            boot_count,
            restart_count: boot_count.saturating_sub(1),
            repaired,
            version: self.version,
            host: Some(boot_host(&self.config)),
        }));
        // Ready means claimed, restored, any repair stored: before an interrupted turn's
        // remaining steps, which may take long.
        let (restore, resume) = split_at_resume(effects);
        if let Err(stop) = self.execute(restore).await {
            return self.stopped(stop);
        }
        let resuming = resume.first().and_then(|e| match e {
            Effect::Event(TraceEvent::TurnResumed(t)) => Some(t.turn_seq),
            _ => None,
        });
        self.resumed_turn = resuming;
        self.events.emit(TraceEvent::Ready(ev::Ready {
            epoch: self.epoch,
            resuming: resuming.is_some(),
        }));
        self.events.flush(Duration::from_secs(2)).await;
        if let Some(turn) = resuming {
            self.health.set(Activity::Resuming { turn });
        }
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
        loop {
            let after = self.engine.state().inbox_cursor;
            let next = tokio::select! {
                r = self.store.inbox(after, wait) => r,
                () = self.shutdown.cancelled() => return self.stopped(Stop::Shutdown),
            };
            let messages = match next {
                Ok(m) => m,
                Err(e) => return self.stopped(e.into()),
            };
            let Some(message) = messages.into_iter().next() else {
                if self.until_idle {
                    // Idle: out of memory until the next message.
                    return Exit::Ok;
                }
                continue;
            };
            if self.shutdown.is_cancelled() {
                return self.stopped(Stop::Shutdown);
            }
            self.turn_started = Instant::now();
            self.attempt = Some(self.new_attempt());
            self.health.set(Activity::Working { seq: message.seq });
            self.refresh_tools().await;
            let effects = self.engine.apply(Input::Message {
                seq: message.seq,
                content: message.content,
                handoff: message.handoff,
            });
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

    /// This runner's attempt at a turn it takes up now.
    fn new_attempt(&self) -> TurnAttempt {
        TurnAttempt {
            epoch: self.epoch,
            started_at: chrono::Utc::now(),
            turn_boot: self.boot_count,
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
                    self.commit(plan, riding).await?
                }
                Effect::CallLlm => {
                    if self.shutdown.is_cancelled() {
                        return Err(Stop::Shutdown);
                    }
                    if let Err(v) = history::validate(self.engine.history()) {
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
                    let publisher =
                        tokio::spawn(deltas::publish(self.store.clone(), round, pieces));
                    let req = LlmRequest {
                        system: self.system.as_deref(),
                        history: self.engine.history(),
                        tools: &self.tool_defs,
                        stream: Some(&text),
                    };
                    let events = &self.events;
                    let on_retry = |r| events.emit(TraceEvent::LlmRetry(r));
                    let answer = self.llm.complete(&req, &self.shutdown, on_retry).await;
                    // The call is over: the publisher sends what is left and ends (not awaited:
                    // watchers never hold up a turn).
                    drop(text);
                    drop(publisher);
                    let input = match answer {
                        Ok(turn) => Input::Llm(turn),
                        Err(LlmError::Cancelled) => return Err(Stop::Shutdown),
                        Err(LlmError::Fatal(why)) => Input::LlmFailed(why),
                        // Only with an attempt limit (none by default): a restart would not help,
                        // so the turn ends with the reason.
                        Err(e @ LlmError::Transient { .. }) => {
                            Input::LlmFailed(format!("the model kept failing: {e}"))
                        }
                    };
                    queue.extend(self.engine.apply(input));
                }
                Effect::RunTool(call) => {
                    let input = self.run_tool(call).await?;
                    queue.extend(self.engine.apply(input));
                }
                Effect::AwaitApprovals { turn_seq, keys } => {
                    let input = self.await_approvals(turn_seq, &keys).await?;
                    queue.extend(self.engine.apply(input));
                }
                Effect::Delegate { turn_seq, calls } => {
                    let input = self.delegate(turn_seq, calls).await?;
                    queue.extend(self.engine.apply(input));
                }
                Effect::Event(e) => {
                    let e = self.stamped(e);
                    self.events.emit(e)
                }
                Effect::TurnFinished { reply, ok, .. } => {
                    // `turn_completed` rode on the final commit; anything emitted since is sent
                    // before more work is taken.
                    self.events.flush(Duration::from_secs(2)).await;
                    self.health.turn_ended(ok, &reply);
                    finished = Some(Finished { reply, ok });
                }
            }
        }
        Ok(finished)
    }

    /// Commits one durable step, and checks that the ledger recorded each intent as this
    /// runner's: the engine sends only intents for keys it believes new, so any other record
    /// means its view of the ledger is stale — a restart reloads it.
    ///
    /// The trace events queued so far, a `checkpoint` event for the version this commit makes
    /// (versions are chained, so it is the parent's + 1), and `riding` (events true once the commit
    /// is stored) are stored in the same transaction. If the commit fails, they are queued again
    /// (all but the `checkpoint`, which did not happen).
    async fn commit(&mut self, plan: CommitPlan, riding: Vec<TraceEvent>) -> Result<(), Stop> {
        let queued = self.events.take().await;
        let checkpoint = TraceEvent::Checkpoint(ev::Checkpoint {
            version: self.version + 1,
            history_len: plan.truncate_to.unwrap_or(self.history_len) + plan.append.len() as u64,
        });
        let now = chrono::Utc::now();
        let approvals: Vec<NewApproval> = plan.approvals.iter().map(|a| self.request(a)).collect();
        let requested: Vec<TraceEvent> = approvals
            .iter()
            .map(|a| {
                TraceEvent::ApprovalRequested(ev::ApprovalRequested {
                    id: a.id,
                    kind: a.kind,
                    tool: a.tool.clone(),
                    args: match a.kind {
                        ApprovalKind::Question => {
                            crate::engine::preview(&question_of(&a.args), 200)
                        }
                        ApprovalKind::Approval => self.args_preview(&a.args),
                    },
                    timeout_secs: a.timeout_secs,
                })
            })
            .collect();
        let riding: Vec<TraceEvent> = requested.into_iter().chain(riding).collect();
        let mut events = queued.clone();
        events.extend(
            std::iter::once(&checkpoint)
                .chain(&riding)
                .map(|e| e.to_new_event(now)),
        );
        let mut state = plan.state;
        state.attempt = if matches!(state.status, ThreadStatus::InTurn | ThreadStatus::Waiting) {
            self.attempt.clone()
        } else {
            None
        };
        let req = CommitRequest {
            epoch: self.epoch,
            parent_version: self.version,
            truncate_to: plan.truncate_to,
            append: plan.append,
            state,
            intents: plan.intents,
            outcomes: plan.outcomes,
            events,
            approvals,
            handoff_reply: plan.handoff_reply,
        };
        let done = match self.store.commit(&req).await {
            Ok(done) => {
                self.events.settle(Vec::new()).await;
                for e in std::iter::once(&checkpoint).chain(&riding) {
                    self.events.log_only(e);
                }
                done
            }
            Err(e) => {
                self.events.settle(queued).await;
                for e in riding {
                    self.events.emit(e);
                }
                return Err(e.into());
            }
        };
        self.version = done.version;
        self.history_len = done.history_len;
        if let Some(stale) = done.records.iter().find(|r| {
            r.intent_epoch != self.epoch
                || (r.status != ToolCallStatus::Intent && r.completed_epoch != Some(self.epoch))
        }) {
            return Err(Stop::Failure(format!(
                "the ledger already held call {} ({}, recorded by epoch {}): this runner's view \
                 of the turn is stale",
                stale.key, stale.tool, stale.intent_epoch
            )));
        }
        Ok(())
    }

    /// The stored form of a request to a person: a new ID, the arguments masked for people, and
    /// the hash of the arguments as the model gave them.
    fn request(&self, ask: &ApprovalAsk) -> NewApproval {
        let secrets: Vec<&str> = self.config.secrets.values().map(|s| s.expose()).collect();
        let digest = Sha256::digest(crate::ledger::canonical_json(&ask.args).as_bytes());
        NewApproval {
            id: ApprovalId::new_v7(),
            key: ask.key.clone(),
            call_id: ask.call_id.clone(),
            turn_seq: ask.turn_seq,
            kind: ask.kind,
            tool: ask.tool.clone(),
            args: tools::masked_args(&ask.args, &secrets),
            args_hash: digest.iter().map(|b| format!("{b:02x}")).collect(),
            timeout_secs: ask.timeout_secs,
        }
    }

    /// Waits, at no CPU cost (the API's long-poll), until one more of the turn's requests is
    /// settled or none of `keys` is pending; notifies each pending request this runner has not
    /// notified yet, and says in its health what it waits for.
    async fn await_approvals(&mut self, turn_seq: u64, keys: &[String]) -> Result<Input, Stop> {
        let before = self.health.activity();
        let mut settled = None;
        let approvals = loop {
            let known = settled.unwrap_or(0);
            let wait = if settled.is_some() {
                POLL
            } else {
                Duration::ZERO
            };
            let next = tokio::select! {
                r = self.store.approvals(turn_seq, known, wait) => r,
                () = self.shutdown.cancelled() => return Err(Stop::Shutdown),
            };
            let approvals = next.map_err(|e| match e {
                CheckpointError::NoApi(why) => Stop::Failure(why),
                e => e.into(),
            })?;
            let ours: Vec<&Approval> = approvals.iter().filter(|a| keys.contains(&a.key)).collect();
            if let Some(missing) = keys.iter().find(|k| !ours.iter().any(|a| &a.key == *k)) {
                return Err(Stop::Failure(format!(
                    "the request to a person for call {missing} is not stored; restarting to reload the turn"
                )));
            }
            for a in &approvals {
                if a.status.is_settled()
                    && let Some(stop) = self.notified.remove(&a.id)
                {
                    stop.cancel();
                }
            }
            for a in ours.iter().filter(|a| a.status.is_settled()) {
                self.events.observe(Observed::ApprovalSettled {
                    id: a.id.to_string(),
                    kind: a.kind,
                    tool: a.tool.clone(),
                    status: a.status,
                    requested_at: a.requested_at,
                });
            }
            let pending: Vec<&Approval> = ours
                .iter()
                .copied()
                .filter(|a| a.status == ApprovalStatus::Pending)
                .collect();
            for a in &pending {
                self.notify(a);
            }
            let count = approvals.iter().filter(|a| a.status.is_settled()).count() as u64;
            if pending.is_empty() || settled.is_some_and(|s| count > s) {
                break approvals;
            }
            if settled.is_none() {
                self.health.set(Activity::Waiting {
                    approvals: pending.iter().map(|a| a.id).collect(),
                });
                self.events.flush(Duration::from_secs(2)).await;
            }
            settled = Some(count);
        };
        self.health.set(before);
        Ok(Input::Approvals(approvals))
    }

    /// Hands each call's task to its collaborator through the API (a call that already did —
    /// before a restart — gets the handoff it made: it re-attaches) and waits, at no CPU cost,
    /// until every one has its answer: the reply, the collaborator's failure, or the end of the
    /// wait. All the calls' handoffs are filed before the wait, so the collaborators work at
    /// the same time.
    async fn delegate(&mut self, turn_seq: u64, calls: Vec<Delegation>) -> Result<Input, Stop> {
        let before = self.health.activity();
        let started = Instant::now();
        let mut answers: Vec<Delegated> = Vec::new();
        let mut waiting: Vec<(Delegation, String)> = Vec::new();
        for d in calls {
            let request = HandoffRequest {
                epoch: self.epoch,
                turn_seq,
                key: d.call.key.clone(),
                call_id: d.call.call_id.clone(),
                agent: d.agent.clone(),
                task: d.task.clone(),
                context: d.context.clone(),
                via: d.chain[..d.chain.len().saturating_sub(1)].to_vec(),
                timeout_secs: d.timeout_secs,
                budget_usd: d.budget_usd,
            };
            let filed = tokio::select! {
                r = self.store.open_handoff(&request) => r,
                () = self.shutdown.cancelled() => return Err(Stop::Shutdown),
            };
            match filed {
                Ok(h) => {
                    self.events.emit(TraceEvent::HandoffSent(ev::HandoffSent {
                        delivery_key: h.delivery_key.clone(),
                        tool: d.call.name.clone(),
                        agent: h.agent.clone(),
                        session: h.session.clone(),
                        thread_id: h.target_thread_id,
                        task: crate::engine::preview(&d.task, 200),
                        depth: d.chain.len() as u32,
                        reattached: h.epoch != self.epoch,
                    }));
                    waiting.push((d, h.delivery_key));
                }
                // Not a collaborator (as `up` recorded it), or no API: the call fails, naming why.
                Err(CheckpointError::Refused(e)) => {
                    answers.push(Delegated {
                        call_id: d.call.call_id.clone(),
                        content: format!(
                            "Not done: the task could not be handed to `{}`: {}",
                            d.agent,
                            crate::checkpoints::api_failure_text(&e)
                        ),
                        is_error: true,
                        cost_usd: 0.0,
                    });
                }
                Err(CheckpointError::NoApi(why)) => answers.push(Delegated {
                    call_id: d.call.call_id.clone(),
                    content: format!("Not done: {why}."),
                    is_error: true,
                    cost_usd: 0.0,
                }),
                Err(e) => return Err(e.into()),
            }
        }
        if !waiting.is_empty() {
            self.health.set(Activity::Delegating {
                agents: waiting.iter().map(|(d, _)| d.agent.clone()).collect(),
            });
            self.events.flush(Duration::from_secs(2)).await;
        }
        let mut settled = 0;
        while !waiting.is_empty() {
            let next = tokio::select! {
                r = self.store.handoffs(turn_seq, settled, POLL) => r,
                () = self.shutdown.cancelled() => return Err(Stop::Shutdown),
            };
            let handoffs = next?;
            settled = handoffs.iter().filter(|h| h.status.is_settled()).count() as u64;
            let mut still = Vec::new();
            for (d, key) in waiting {
                let Some(h) = handoffs.iter().find(|h| h.delivery_key == key) else {
                    return Err(Stop::Failure(format!(
                        "the handoff of call {} to `{}` is not stored; restarting to reload the turn",
                        d.call.key, d.agent
                    )));
                };
                if h.status == HandoffStatus::Pending {
                    still.push((d, key));
                    continue;
                }
                let answer = handoff_answer(h);
                self.events
                    .emit(TraceEvent::HandoffSettled(ev::HandoffSettled {
                        delivery_key: key,
                        agent: h.agent.clone(),
                        thread_id: h.target_thread_id,
                        status: h.status,
                        reply: self.result_preview(&answer.0),
                        cost_usd: h.cost_usd,
                        waited_ms: started.elapsed().as_millis() as u64,
                    }));
                answers.push(Delegated {
                    call_id: d.call.call_id.clone(),
                    content: answer.0,
                    is_error: answer.1,
                    cost_usd: h.cost_usd,
                });
            }
            waiting = still;
        }
        self.health.set(before);
        Ok(Input::Delegated(answers))
    }

    /// Sends the notification of a pending request once per runner life (a restarted runner
    /// sends it again: delivery is at least once, deduped by the request's ID).
    fn notify(&mut self, a: &Approval) {
        let Some(notifier) = &self.notifier else {
            return;
        };
        if self.notified.contains_key(&a.id) {
            return;
        }
        let stop = CancellationToken::new();
        self.notified.insert(a.id, stop.clone());
        notifier.send(
            Notification {
                event: "approval_requested",
                id: a.id,
                kind: a.kind.as_str(),
                thread_id: a.thread_id.to_string(),
                pool: a.labels.pool.clone(),
                agent: self.config.spec.name.clone(),
                replica: a.labels.replica,
                turn_seq: a.turn_seq,
                tool: a.tool.clone(),
                args: a.args.clone(),
                args_hash: a.args_hash.clone(),
                requested_at: a
                    .requested_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                timeout_secs: (a.expires_at - a.requested_at).num_seconds().max(0) as u64,
                decide: Commands::for_request(a.id, a.kind == ApprovalKind::Question),
            },
            stop,
        );
    }

    /// The event with what only the driver knows filled in (a finished turn's duration).
    fn stamped(&self, mut e: TraceEvent) -> TraceEvent {
        if let TraceEvent::TurnCompleted(done) = &mut e {
            done.duration_ms = self.turn_started.elapsed().as_secs_f64() * 1000.0;
        }
        e
    }

    /// Reads the MCP servers' tools (connecting to those that are down and due, re-listing those
    /// that changed), and hands the result to the model's tool list and the engine. A turn
    /// boundary; a no-op for an agent without MCP servers.
    async fn refresh_tools(&mut self) {
        if self.mcp.is_empty() {
            return;
        }
        let (events, down) = self.mcp.refresh().await;
        for e in events {
            self.events.emit(e);
        }
        self.health.set_mcp(down);
        let offered = self.mcp.offered();
        let spec = &self.config.spec;
        self.tool_defs = tools::definitions(&spec.tools);
        self.tool_defs.extend(offered.iter().map(|o| o.def.clone()));
        // Offered MCP tools first (final classes), then the agentfile's entries: a tool of a
        // server that is down still resolves, to its entry's class (`write` unless pinned).
        let mut specs: Vec<_> = offered.into_iter().map(|o| o.spec).collect();
        specs.extend(spec.tools.iter().cloned());
        self.engine.set_tools(specs);
    }

    /// Performs one tool call as the engine decided it through the ledger — replay a recorded
    /// outcome, answer a `write` whose outcome is unknown (with its verifier's answer, if it has
    /// one), or execute (a `write`'s intent is already stored) — and traces it. The outcome is
    /// recorded by a later commit.
    async fn run_tool(&mut self, call: PlannedCall) -> Result<Input, Stop> {
        let started = Instant::now();
        let preview = self.args_preview(&call.args);
        let mut mode = call.decision.mode();
        let output = match &call.decision {
            Decision::Replay { content, is_error } => ToolOutput {
                content: content.clone(),
                is_error: *is_error,
            },
            Decision::OutcomeUnknown => {
                let text = history::outcome_unknown_text(&call.name);
                self.verified(&call, text).await
            }
            Decision::Execute { .. } => match self.execute_tool(&call).await? {
                Executed::Answered(out) => out,
                Executed::Lost(why) if call.effect == EffectClass::Write => {
                    mode = ev::ToolMode::OutcomeUnknown;
                    let text = history::outcome_lost_text(&call.name, &why);
                    self.verified(&call, text).await
                }
                Executed::Lost(why) => ToolOutput::error(format!(
                    "{why}. No answer came, so it may or may not have run; this tool is safe to \
                     call again."
                )),
                Executed::NotSent(why) => ToolOutput::error(why),
            },
        };
        let result = self.result_preview(&output.content);
        let event = ev::ToolCall {
            name: call.name,
            args: preview,
            effect: call.effect,
            mode,
            duration_ms: started.elapsed().as_millis() as u64,
            ok: !output.is_error,
            key: call.key,
            result,
        };
        self.events.emit(if mode == ev::ToolMode::Replayed {
            TraceEvent::ToolReplayed(event)
        } else {
            TraceEvent::ToolCall(event)
        });
        Ok(Input::Tool {
            call_id: call.call_id,
            content: output.content,
            is_error: output.is_error,
        })
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

    /// The answer to a `write` whose outcome is unknown: `notice`, and — when the agentfile
    /// names a verifier — what the verifier (a read, run now) says about the write's effect, so
    /// the model decides on evidence. The whole answer becomes the call's recorded outcome, so a
    /// later boot replays it rather than verifying again.
    async fn verified(&self, call: &PlannedCall, notice: String) -> ToolOutput {
        let Some((tool, args)) = &call.verify else {
            return ToolOutput::error(notice);
        };
        let started = Instant::now();
        let key = format!("{}:verify", call.key);
        // A server that broke mid-write is often on its way back (a restarted sidecar or
        // bridged process): a verifier that could not be sent is tried again for a while.
        let mut wait = Duration::from_millis(500);
        let answer = loop {
            match self.call_tool(tool, args, &key).await {
                Executed::Answered(out) => break out,
                Executed::Lost(why) => break ToolOutput::error(why),
                Executed::NotSent(why) => {
                    if started.elapsed() + wait > self.tool_ctx.timeout.min(VERIFY_PATIENCE)
                        || self.shutdown.is_cancelled()
                    {
                        break ToolOutput::error(why);
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(4));
                }
            }
        };
        self.events.emit(TraceEvent::ToolCall(ev::ToolCall {
            name: tool.clone(),
            args: self.args_preview(args),
            effect: EffectClass::Read,
            mode: ev::ToolMode::Verification,
            duration_ms: started.elapsed().as_millis() as u64,
            ok: !answer.is_error,
            key,
            result: self.result_preview(&answer.content),
        }));
        let status = if answer.is_error {
            "failed"
        } else {
            "answered"
        };
        ToolOutput::error(format!(
            "{notice}\n\nTo check, ninetrix called `{tool}` with {}; it {status}:\n{}",
            serde_json::to_string(args).unwrap_or_default(),
            answer.content
        ))
    }

    /// Runs the tool; on SIGTERM it may finish within a grace period, else the runner stops
    /// (the intent stays without an outcome; the next boot applies the ambiguity rule).
    async fn execute_tool(&self, call: &PlannedCall) -> Result<Executed, Stop> {
        let work = self.call_tool(&call.name, &call.args, &call.key);
        tokio::pin!(work);
        tokio::select! {
            out = &mut work => Ok(out),
            () = self.shutdown.cancelled() => {
                match tokio::time::timeout(TOOL_GRACE, &mut work).await {
                    Ok(out) => Ok(out),
                    Err(_) => Err(Stop::Shutdown),
                }
            }
        }
    }

    /// Calls a tool by the model's name: an MCP tool on its server (with its ledger key), else a
    /// builtin.
    async fn call_tool(&self, name: &str, args: &serde_json::Value, key: &str) -> Executed {
        let Some((server, tool)) = self.mcp.routes(name) else {
            return Executed::Answered(tools::run(name, args, &self.tool_ctx).await);
        };
        if args.get("_raw").is_some() {
            return Executed::Answered(ToolOutput::error(
                "the arguments were not valid JSON; call the tool again with a JSON object",
            ));
        }
        let (result, events) = self
            .mcp
            .call(&server, &tool, args, key, self.tool_ctx.timeout)
            .await;
        if !events.is_empty() {
            // The server went down or came back: the health says so now, not at the next turn.
            self.health.set_mcp(self.mcp.problems().await);
        }
        for e in events {
            self.events.emit(e);
        }
        match result {
            Ok(out) => Executed::Answered(ToolOutput {
                content: tools::storable(tools::cap(out.text, tools::MAX_RESULT)),
                is_error: out.is_error,
            }),
            Err(CallError::NotSent(why)) => Executed::NotSent(why),
            Err(CallError::Refused(why)) => Executed::Answered(ToolOutput::error(why)),
            Err(CallError::Lost(why)) => Executed::Lost(why),
        }
    }
}

/// What a settled handoff answers its call with: the reply, or why there is none (naming the
/// collaborator, its session and thread, so the model — and whoever reads the trace — knows where
/// to look).
fn handoff_answer(h: &Handoff) -> (String, bool) {
    let waited = (h.expires_at - h.created_at).num_seconds().max(0) as u64;
    match h.status {
        HandoffStatus::Replied => (h.reply.clone().unwrap_or_default(), false),
        HandoffStatus::Failed => (
            format!(
                "Not done: `{}` stopped without finishing the task (session {}, thread {}): {}",
                h.agent,
                h.session,
                h.target_thread_id,
                h.reply.as_deref().unwrap_or("no reason given")
            ),
            true,
        ),
        HandoffStatus::TimedOut | HandoffStatus::Pending => (
            format!(
                "Not done: `{}` did not reply within {} (transfer_timeout; session {}, thread {}). It may be down, crash-looping or still working: its later reply will not reach this call. Try again later, or do the work another way.",
                h.agent,
                ninetrix_agentfile::units::format_duration(waited),
                h.session,
                h.target_thread_id
            ),
            true,
        ),
    }
}

/// The question of an `ask_human` call.
fn question_of(args: &serde_json::Value) -> String {
    args.get("question")
        .and_then(serde_json::Value::as_str)
        .map_or_else(|| args.to_string(), str::to_string)
}

/// What became of a tool call this runner made.
enum Executed {
    /// The tool answered (or certainly did not run, and the answer says why).
    Answered(ToolOutput),
    /// No answer came after the request may have reached the tool: why.
    Lost(String),
    /// The request never reached the tool (its server is down): why. It did not run.
    NotSent(String),
}

/// Splits a restore's effects where an interrupted turn resumes (its `turn_resumed` event):
/// what restores the thread (repair checkpoint, repair events) and what continues the turn.
fn split_at_resume(mut effects: Vec<Effect>) -> (Vec<Effect>, Vec<Effect>) {
    let at = effects
        .iter()
        .position(|e| matches!(e, Effect::Event(TraceEvent::TurnResumed(_))))
        .unwrap_or(effects.len());
    let resume = effects.split_off(at);
    (effects, resume)
}
