//! Boot: claim the thread, build the runner (events, telemetry, MCP servers, the engine), fetch
//! and restore the latest checkpoint with the interrupted turn's ledger and requests, store any
//! repair, and say `boot` and `ready`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ninetrix_proto::api::{Approval, ClaimRequest, ThreadStatus, ToolCallRecord, TurnAttempt};
use ninetrix_proto::events::{self as ev, TraceEvent};
use tokio_util::sync::CancellationToken;

use crate::checkpoints::{CheckpointError, Checkpoints};
use crate::config::Config;
use crate::engine::{Effect, Engine, EngineConfig, Input, Restored, crash_looping};
use crate::events::Events;
use crate::health::{Activity, Health};
use crate::limits::Permits;
use crate::llm::Llm;
use crate::mcp::McpServers;
use crate::notify::Notifier;
use crate::telemetry::{Observed, ThreadInfo, ThreadSpans};
use crate::tools::sandbox::{Given, Sandbox};
use crate::tools::{self, ToolContext};

use super::{Exit, Runner, Stop, failure_event, purged};

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

/// Where a thread's model calls lease their permits of the pool's limits and budgets.
pub(super) struct Leases {
    /// The permits (`None`: nothing is enforced — a runner without the checkpoint API).
    pub(super) permits: Option<Arc<dyn Permits>>,
    /// For a session: its replica's health, where its waits for a slot show.
    pub(super) replica: Option<Health>,
}

/// Runs the runner on `store`'s thread, its model calls leasing from `permits` (`None`: a
/// runner without a checkpoint API, which enforces no pool-wide limit or budget); `until_idle`
/// (a session): stop once the inbox is empty and no turn is left, instead of waiting for more.
pub(super) async fn run_with<C: Checkpoints>(
    store: C,
    leases: Leases,
    config: Config,
    http: reqwest::Client,
    health: Health,
    shutdown: CancellationToken,
    until_idle: bool,
) -> Exit {
    let labels = ClaimRequest {
        pool: config.pool.clone(),
        agent: Some(config.spec.name.clone()),
        // A session's owner is computed from its key, not stored.
        replica: config.replica.filter(|_| config.session.is_none()),
        session: config.session.clone(),
        // The API gives a message sent without a mode this one (and refuses it, for `reject`).
        on_message_while_busy: Some(config.spec.execution.on_message_while_busy),
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
    if let Err(why) = crate::tools::sandbox::check_writable(&config.workspace) {
        events.emit(failure_event(&why));
        events.flush(Duration::from_secs(2)).await;
        return Exit::Config(why);
    }
    let sandbox = Sandbox::new(spec, &config.workspace, std::env::vars());
    let mcp = match McpServers::new(spec, &config.secrets, &http, &config.workspace, &sandbox) {
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
        context: spec.runtime.context.clone(),
        budgets: spec.governance.budgets(),
        on_budget_exceeded: spec.governance.on_budget_exceeded,
        replay: config.replay.clone(),
    });
    let notifier = spec.governance.human_approval.as_ref().and_then(|h| {
        let url = h.notify_url.clone()?;
        let secret = config.secrets.get(h.notify_secret.as_deref()?)?.clone();
        Some(Notifier::new(url, secret, http.clone(), events.clone()))
    });
    let Leases { permits, replica } = leases;
    let (llm, summarizer) = models(&config, &http, &health, permits, epoch);
    let llm = llm.showing_waits_on(replica.clone());
    let summarizer = summarizer.map(|s| s.showing_waits_on(replica));
    let http_for_jobs = http.clone();
    let mut runner = Runner {
        llm,
        summarizer,
        health,
        tool_defs: tools::definitions(&spec.tools),
        mcp,
        tool_ctx: ToolContext {
            workspace: config.workspace.clone(),
            timeout: Duration::from_secs(u64::from(spec.runtime.tool_timeout_secs)),
            http,
            sandbox,
            shell_secrets: shell_secrets(spec, &config),
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
        controls: None,
        read_ahead: Vec::new(),
        jobs: job_broker(&config, &http_for_jobs),
        a2a: crate::a2a::Client::new(http_for_jobs.clone()),
        snapshots: crate::snapshots::Snapshotter::new(
            &config.workspace,
            super::snapshots::excluded(&config),
        ),
        staged: None,
        config,
    };
    runner.measure_overhead();
    let exit = runner.main(boot_count).await;
    runner.mcp.close().await;
    runner.events.flush(Duration::from_secs(2)).await;
    exit
}

/// The job broker of this thread: the backend's (`AGENTFILE_JOBS_URL`), called with the thread's
/// own token; `None` without one or without the checkpoint API (a batch job that records
/// nothing has no ledger to name its jobs by).
fn job_broker(config: &Config, http: &reqwest::Client) -> Option<super::jobs::Jobs> {
    let url = config.jobs_url.as_deref()?;
    let api = config.api.as_ref()?;
    Some(super::jobs::Jobs::new(crate::jobs::Broker::new(
        http.clone(),
        url,
        api.token.clone(),
        config.thread_id,
        config.replica,
    )))
}

impl<C: Checkpoints> Runner<C> {
    /// Fetches and restores the thread (repair, and the give-up of a crash-looping turn), says
    /// `boot`, stores the repair, says `ready`: the effects that resume an interrupted turn are
    /// left to run (`Err`: how the runner ends instead).
    pub(super) async fn boot(&mut self, boot_count: u64) -> Result<Vec<Effect>, Exit> {
        // The MCP servers' tools decide the effect classes an interrupted turn resumes with.
        self.refresh_tools().await;
        // Fetch and restore (repair, resume).
        let restored = match self.store.latest().await {
            Ok(state) => state,
            Err(CheckpointError::Purged(why)) => return Err(purged(self.config.thread_id, &why)),
            Err(e) => {
                return Err(self.stopped(Stop::Failure(format!(
                    "cannot fetch the latest checkpoint: {e}"
                ))));
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
                    self.turn_records(s.state.turn_seq)
                        .await
                        .map_err(|stop| self.stopped(stop))?
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
                // An interrupt or a cancel the runner before this one took, and died before it
                // ended the turn: the turn stops here instead of running again.
                let stop = if in_turn {
                    match self.store.inbox(s.state.inbox_cursor, Duration::ZERO).await {
                        Ok(messages) => crate::inbox::stop_for(&messages, &s.state),
                        Err(e) => {
                            return Err(self.stopped(Stop::Failure(format!(
                                "cannot read the inbox of turn {}: {e}",
                                s.state.turn_seq
                            ))));
                        }
                    }
                } else {
                    None
                };
                if let Some(by) = &stop {
                    self.health.set(Activity::Stopping {
                        turn: s.state.turn_seq,
                        by: super::controls::stopped_words(by),
                    });
                    self.events.emit(TraceEvent::TurnStopping(ev::TurnStopping {
                        turn_seq: s.state.turn_seq,
                        by: by.clone(),
                        running: Vec::new(),
                    }));
                }
                Some(Restored {
                    history: s.history,
                    state: s.state,
                    ledger,
                    approvals,
                    give_up,
                    stop,
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
            return Err(self.stopped(stop));
        }
        // The files the checkpoint says the workspace holds (a fork's first boot, a rewind's
        // restore a crash interrupted), before anything runs on them.
        if let Err(stop) = self.restore_at_boot().await {
            return Err(self.stopped(stop));
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
        Ok(resume)
    }

    /// The ledger records and the requests to people of the interrupted turn `turn`.
    async fn turn_records(&self, turn: u64) -> Result<(Vec<ToolCallRecord>, Vec<Approval>), Stop> {
        let ledger =
            self.store.turn_ledger(turn).await.map_err(|e| {
                Stop::Failure(format!("cannot fetch the ledger of turn {turn}: {e}"))
            })?;
        let approvals = self
            .store
            .approvals(turn, 0, Duration::ZERO)
            .await
            .map_err(|e| {
                Stop::Failure(format!(
                    "cannot fetch the requests to people of turn {turn}: {e}"
                ))
            })?;
        Ok((ledger, approvals))
    }

    /// This runner's attempt at a turn it takes up now.
    pub(super) fn new_attempt(&self) -> TurnAttempt {
        TurnAttempt {
            epoch: self.epoch,
            started_at: chrono::Utc::now(),
            turn_boot: self.boot_count,
        }
    }
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

/// The agent's model (with its fallbacks) and the one that writes compactions' summaries, when
/// `runtime.context.model` names another than the agent's (same provider, endpoint and key):
/// each call leasing from `permits` as the runner of `epoch` — or, without them, saying once
/// that nothing is enforced.
fn models(
    config: &Config,
    http: &reqwest::Client,
    health: &Health,
    permits: Option<Arc<dyn Permits>>,
    epoch: u64,
) -> (Llm, Option<Llm>) {
    let budgets = config.spec.governance.budgets();
    let leased = |llm: Llm| match &permits {
        Some(permits) => llm.with_permits(permits.clone(), epoch, budgets.clone()),
        None => llm,
    };
    let llm = Llm::new(config, http.clone(), health.clone());
    if permits.is_none() && (llm.limited() || budgets.is_some()) {
        tracing::warn!(
            "this runner has no checkpoint API (a batch job run without AGENTFILE_API_URL): \
             runtime.limits and the budgets beyond one run (governance.max_budget_per_session, \
             max_budget_per_day, max_pool_budget_per_day) are not enforced"
        );
    }
    let summarizer = config
        .spec
        .runtime
        .context
        .model
        .as_ref()
        .filter(|model| **model != config.spec.runtime.model)
        .map(|model| {
            let mut config = config.clone();
            config.spec.runtime.model = model.clone();
            leased(Llm::new(&config, http.clone(), health.clone()))
        });
    (leased(llm), summarizer)
}

/// The secrets `shell` was given by name, with their values (a name the runner lacks is left
/// out: `config` already refused to start without a declared secret).
fn shell_secrets(spec: &ninetrix_agentfile::AgentSpec, config: &Config) -> Given {
    Given(
        spec.tools
            .iter()
            .filter(|t| t.name == "shell" && t.mcp.is_none())
            .flat_map(|t| &t.secrets)
            .filter_map(|n| Some((n.clone(), config.secrets.get(n)?.expose().to_string())))
            .collect(),
    )
}
