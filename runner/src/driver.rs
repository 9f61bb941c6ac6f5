//! The runner's I/O around the engine: boot (claim, fetch, repair, resume), the inbox loop,
//! model calls, tools through the ledger, checkpoints, and shutdown (DESIGN §6.2–6.9).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ninetrix_proto::agentfile::Effect as EffectClass;
use ninetrix_proto::api::{
    CheckpointRequest, NewEvent, ThreadLabels, ToolCallCompletion, ToolCallIntent, ToolCallStatus,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::client::{ApiClient, ApiError, http_client};
use crate::config::Config;
use crate::engine::{Effect, Engine, EngineConfig, Input, PlannedCall};
use crate::events::Events;
use crate::history;
use crate::llm::{Llm, LlmError, LlmRequest, ToolDef};
use crate::tools::{self, ToolContext};

/// How the runner ended, as an exit code (DESIGN §6.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// Done, stopped, or fenced: 0.
    Ok,
    /// A runtime failure Docker should restart: 1.
    Failure(String),
    /// A batch turn that failed: 1, without a restart.
    TurnFailed,
}

impl Exit {
    /// The process exit code.
    pub fn code(&self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Failure(_) | Exit::TurnFailed => 1,
        }
    }
}

/// Why the effect loop stopped early.
enum Stop {
    Fenced(String),
    Shutdown,
    Failure(String),
}

impl From<ApiError> for Stop {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Fenced(m) => Stop::Fenced(m),
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

struct Runner {
    config: Config,
    api: Option<ApiClient>,
    engine: Engine,
    llm: Llm,
    tool_defs: Vec<ToolDef>,
    tool_ctx: ToolContext,
    events: Events,
    system: Option<String>,
    epoch: u64,
    version: u64,
    shutdown: CancellationToken,
    /// When the current turn's input was taken (for `turn_completed.duration_ms`).
    turn_started: Instant,
}

/// Runs the runner until shutdown, fencing, a batch job's end, or a failure.
pub async fn run(config: Config, shutdown: CancellationToken) -> Exit {
    let http = http_client();
    let api = config
        .api
        .clone()
        .map(|a| ApiClient::new(http.clone(), a, config.thread_id, config.api_patience));
    let labels = ThreadLabels {
        pool: config.pool.clone(),
        agent: Some(config.spec.name.clone()),
        replica: config.replica,
    };

    // Claim (the client retries while the API is unreachable, up to its patience).
    let (epoch, boot_count) = match &api {
        None => (0, 1),
        Some(api) => match api.claim(&labels).await {
            Ok(c) => (c.epoch, c.boot_count),
            Err(e) => {
                return Exit::Failure(format!("cannot claim thread {}: {e}", config.thread_id));
            }
        },
    };
    let events = Events::start(api.clone(), epoch);
    let spec = &config.spec;
    let engine = Engine::new(EngineConfig {
        thread: config.thread_id,
        max_rounds: spec.execution.max_turns,
        budget: spec.governance.max_budget_per_run,
        resume: spec.execution.resume,
        tools: spec.tools.clone(),
        batch: !spec.execution.durability,
    });
    let mut runner = Runner {
        llm: Llm::new(&config, http.clone()),
        tool_defs: tools::definitions(&spec.tools),
        tool_ctx: ToolContext {
            workspace: config.workspace.clone(),
            timeout: Duration::from_secs(u64::from(spec.runtime.tool_timeout_secs)),
            http,
        },
        system: spec.metadata.system_prompt(),
        api,
        engine,
        events,
        epoch,
        version: 0,
        shutdown,
        turn_started: Instant::now(),
        config,
    };
    let exit = runner.main(boot_count).await;
    runner.events.flush(Duration::from_secs(2)).await;
    exit
}

impl Runner {
    async fn main(&mut self, boot_count: u64) -> Exit {
        // Fetch and restore (repair, resume).
        let restored = match &self.api {
            None => None,
            Some(api) => match api.latest().await {
                Ok(state) => state,
                Err(e) => return Exit::Failure(format!("cannot fetch the latest checkpoint: {e}")),
            },
        };
        if let Some(state) = &restored {
            self.version = state.version;
            tracing::info!(
                "resumed thread {} at version {} (epoch {})",
                self.config.thread_id,
                state.version,
                self.epoch
            );
        }
        let effects = self
            .engine
            .apply(Input::Restored(restored.map(|s| (s.history, s.state))));
        let repaired = effects
            .iter()
            .any(|e| matches!(e, Effect::Event(ev) if ev.kind == "repair"));
        self.emit("boot", json!({"epoch": self.epoch, "boot_count": boot_count, "restart_count": boot_count.saturating_sub(1), "repaired": repaired, "version": self.version}));
        let resumed = match self.execute(effects).await {
            Ok(f) => f,
            Err(stop) => return self.stopped(stop),
        };
        self.emit("ready", json!({"epoch": self.epoch}));

        if !self.config.spec.execution.durability {
            return self.batch(resumed).await;
        }
        loop {
            let next = match &self.api {
                Some(api) => {
                    let after = self.engine.state().inbox_cursor;
                    tokio::select! {
                        r = api.inbox(after, POLL) => r,
                        () = self.shutdown.cancelled() => return self.stopped(Stop::Shutdown),
                    }
                }
                None => return Exit::Failure("a durable agent needs the checkpoint API".into()),
            };
            let messages = match next {
                Ok(m) => m,
                Err(e) => return self.stopped(e.into()),
            };
            let Some(message) = messages.into_iter().next() else {
                continue;
            };
            if self.shutdown.is_cancelled() {
                return self.stopped(Stop::Shutdown);
            }
            self.turn_started = Instant::now();
            let effects = self.engine.apply(Input::Message {
                seq: message.seq,
                content: message.content,
            });
            if let Err(stop) = self.execute(effects).await {
                return self.stopped(stop);
            }
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
                    return Exit::Failure("a batch agent needs a task: set execution.task in the agentfile or pass a message".into());
                };
                self.turn_started = Instant::now();
                let effects = self.engine.apply(Input::Message {
                    seq: 0,
                    content: task,
                });
                match self.execute(effects).await {
                    Ok(Some(f)) => f,
                    Ok(None) => {
                        return Exit::Failure("the batch turn ended without a reply".into());
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
                tracing::warn!("fenced: {why}; stopping (exit 0)");
                Exit::Ok
            }
            Stop::Shutdown => {
                tracing::info!("shutting down: the last checkpoint is consistent (exit 0)");
                Exit::Ok
            }
            Stop::Failure(why) => {
                self.emit("error", json!({"stage": "runner", "message": why}));
                tracing::error!("{why}");
                Exit::Failure(why)
            }
        }
    }

    fn emit(&self, kind: &str, data: serde_json::Value) {
        self.events.emit(NewEvent {
            kind: kind.to_string(),
            data,
        });
    }

    /// Performs effects in order, feeding outcomes back to the engine.
    async fn execute(&mut self, effects: Vec<Effect>) -> Result<Option<Finished>, Stop> {
        let mut queue: VecDeque<Effect> = effects.into();
        let mut finished = None;
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Checkpoint(plan) => {
                    let Some(api) = &self.api else { continue };
                    let req = CheckpointRequest {
                        epoch: self.epoch,
                        parent_version: self.version,
                        truncate_to: plan.truncate_to,
                        append: plan.append,
                        state: plan.state,
                    };
                    let created = api.checkpoint(&req).await?;
                    self.version = created.version;
                    self.emit(
                        "checkpoint",
                        json!({"version": created.version, "history_len": created.history_len}),
                    );
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
                    let req = LlmRequest {
                        system: self.system.as_deref(),
                        history: self.engine.history(),
                        tools: &self.tool_defs,
                    };
                    let input = match self.llm.complete(&req, &self.shutdown).await {
                        Ok(turn) => Input::Llm(turn),
                        Err(LlmError::Cancelled) => return Err(Stop::Shutdown),
                        Err(LlmError::Fatal(why)) => Input::LlmFailed(why),
                        Err(e @ LlmError::Transient { .. }) => {
                            return Err(Stop::Failure(format!("the model kept failing: {e}")));
                        }
                    };
                    queue.extend(self.engine.apply(input));
                }
                Effect::RunTool(call) => {
                    let input = self.run_tool(call).await?;
                    queue.extend(self.engine.apply(input));
                }
                Effect::Event(mut e) => {
                    if e.kind == "turn_completed" {
                        e.data["duration_ms"] =
                            json!(self.turn_started.elapsed().as_secs_f64() * 1000.0);
                    }
                    self.events.emit(e)
                }
                Effect::TurnFinished { reply, ok, .. } => {
                    // Callers wait for `turn_completed`: send it before taking more work.
                    self.events.flush(Duration::from_secs(2)).await;
                    finished = Some(Finished { reply, ok });
                }
            }
        }
        Ok(finished)
    }

    /// One tool call through the ledger: replay a recorded outcome, refuse to re-run a `write`
    /// whose outcome is unknown, or execute and record.
    async fn run_tool(&mut self, call: PlannedCall) -> Result<Input, Stop> {
        let started = Instant::now();
        let secrets: Vec<&str> = self.config.secrets.values().map(|s| s.expose()).collect();
        let preview = tools::preview_args(&call.args, &secrets);
        let mut mode = "executed";
        let output = match &self.api {
            None => self.execute_tool(&call).await?,
            Some(api) => {
                let intent = ToolCallIntent {
                    epoch: self.epoch,
                    key: call.key.clone(),
                    turn_seq: call.turn_seq,
                    tool: call.name.clone(),
                    args: call.args.clone(),
                    effect: call.effect,
                };
                let record = api.intent(&intent).await?;
                match record.status {
                    ToolCallStatus::Completed | ToolCallStatus::Failed => {
                        mode = "replayed";
                        tools::ToolOutput {
                            content: record.result.unwrap_or_default(),
                            is_error: record.status == ToolCallStatus::Failed,
                        }
                    }
                    ToolCallStatus::Intent
                        if record.intent_epoch != self.epoch
                            && call.effect == EffectClass::Write =>
                    {
                        // Started by a runner that crashed before recording the outcome.
                        mode = "outcome_unknown";
                        let out =
                            tools::ToolOutput::error(history::outcome_unknown_text(&call.name));
                        self.record(&call.key, &out).await?;
                        out
                    }
                    ToolCallStatus::Intent => {
                        if record.intent_epoch != self.epoch {
                            mode = "re-executed";
                        }
                        let out = self.execute_tool(&call).await?;
                        self.record(&call.key, &out).await?;
                        out
                    }
                }
            }
        };
        self.emit(
            if mode == "replayed" { "tool_replayed" } else { "tool_call" },
            json!({"name": call.name, "args": preview, "effect": call.effect.as_str(), "mode": mode,
                   "duration_ms": started.elapsed().as_millis() as u64, "ok": !output.is_error, "key": call.key,
                   "result": crate::engine::preview(&output.content, 200)}),
        );
        Ok(Input::Tool {
            call_id: call.call_id,
            content: output.content,
            is_error: output.is_error,
        })
    }

    async fn record(&self, key: &str, out: &tools::ToolOutput) -> Result<(), Stop> {
        if let Some(api) = &self.api {
            let done = ToolCallCompletion {
                epoch: self.epoch,
                ok: !out.is_error,
                result: out.content.clone(),
            };
            match api.complete(key, &done).await {
                Ok(_) => {}
                Err(ApiError::Refused { code, .. }) if code == "already_completed" => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Runs the tool; on SIGTERM it may finish within a grace period, else the runner stops
    /// (the intent stays without an outcome; the next boot applies the ambiguity rule).
    async fn execute_tool(&self, call: &PlannedCall) -> Result<tools::ToolOutput, Stop> {
        let work = tools::run(&call.name, &call.args, &self.tool_ctx);
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
}
