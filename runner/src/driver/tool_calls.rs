//! Tool execution: the MCP servers' tools read at a turn boundary, and each call as the ledger
//! decided it — replayed, answered as outcome unknown (with its verifier's evidence), or run
//! (builtin, MCP, or `memory` through the checkpoint API; with a grace period on SIGTERM).

use std::time::{Duration, Instant};

use ninetrix_proto::events::{self as ev, TraceEvent};

use ninetrix_agentfile::tools::{JOB_START, MEMORY, is_job_tool};
use ninetrix_proto::api::MemoryOpRequest;

use crate::checkpoints::{CheckpointError, Checkpoints};
use crate::engine::{Input, PlannedCall};
use crate::history;
use crate::ledger::Decision;
use crate::tools::{self, ToolOutput};
use ninetrix_mcp::client::CallError;
use ninetrix_proto::effects::Effect as EffectClass;

use super::{Runner, Stop};

/// How long a running tool may go on after SIGTERM before the runner stops without it.
const TOOL_GRACE: Duration = Duration::from_secs(10);
/// How long a verifier whose server is unreachable is retried (at most the tool timeout).
const VERIFY_PATIENCE: Duration = Duration::from_secs(30);

impl<C: Checkpoints> Runner<C> {
    /// that changed), and hands the result to the model's tool list and the engine. A turn
    /// boundary; a no-op for an agent without MCP servers.
    pub(super) async fn refresh_tools(&mut self) {
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
        self.measure_overhead();
    }

    /// Tells the engine what every round sends besides the history — the system prompt and
    /// the tool definitions — in estimated tokens (a token per four characters).
    pub(super) fn measure_overhead(&mut self) {
        let tools: usize = self
            .tool_defs
            .iter()
            .map(|t| t.name.len() + t.description.len() + crate::context::json_len(&t.parameters))
            .sum();
        let system = self.system.as_ref().map_or(0, String::len);
        self.engine.set_overhead(((tools + system) / 4) as u64);
    }

    /// Performs one tool call as the engine decided it through the ledger — replay a recorded
    /// outcome, answer a `write` whose outcome is unknown (with its verifier's answer, if it has
    /// one), or execute (a `write`'s intent is already stored) — and traces it. The outcome is
    /// recorded by a later commit.
    pub(super) async fn run_tool(&mut self, call: PlannedCall) -> Result<Input, Stop> {
        let started = Instant::now();
        let preview = self.args_preview(&call.args);
        let mut mode = call.decision.mode();
        let output = match &call.decision {
            Decision::Replay { content, is_error } => ToolOutput {
                content: content.clone(),
                is_error: *is_error,
            },
            Decision::OutcomeUnknown => match self.recovered_job(&call).await {
                Some(out) => out,
                None => {
                    let text = history::outcome_unknown_text(&call.name);
                    self.verified(&call, text).await
                }
            },
            Decision::Execute { .. } => match self.execute_tool(&call).await? {
                Executed::Answered(out) => out,
                Executed::Lost(why) if call.effect == EffectClass::Write => {
                    mode = ev::ToolMode::OutcomeUnknown;
                    match self.recovered_job(&call).await {
                        Some(out) => out,
                        None => {
                            let text = history::outcome_lost_text(&call.name, &why);
                            self.verified(&call, text).await
                        }
                    }
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

    /// A `job_start` whose outcome is unknown, resolved by asking the job broker what became of
    /// the job its key names; `None` for any other call, or when the broker cannot say.
    async fn recovered_job(&self, call: &PlannedCall) -> Option<ToolOutput> {
        if call.name != JOB_START {
            return None;
        }
        self.recover_job_start(call).await
    }

    /// The answer to a `write` whose outcome is unknown: `notice`, and — when the agentfile
    /// names a verifier — what the verifier (a read, run now) says about the write's effect, so
    /// the model decides on evidence. The whole answer becomes the call's recorded outcome, so a
    /// later boot replays it rather than verifying again.
    pub(super) async fn verified(&self, call: &PlannedCall, notice: String) -> ToolOutput {
        let Some((tool, args)) = &call.verify else {
            return ToolOutput::error(notice);
        };
        let started = Instant::now();
        let key = format!("{}:verify", call.key);
        // A server that broke mid-write is often on its way back (a restarted sidecar or
        // bridged process): a verifier that could not be sent is tried again for a while.
        let mut wait = Duration::from_millis(500);
        let answer = loop {
            match self.call_tool(tool, args, &key, call.turn_seq).await {
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
    pub(super) async fn execute_tool(&self, call: &PlannedCall) -> Result<Executed, Stop> {
        let work = self.call_tool(&call.name, &call.args, &call.key, call.turn_seq);
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

    /// Calls a tool by the model's name: an MCP tool on its server (with its ledger key), `memory`
    /// through the checkpoint API (with its ledger key), a job tool through the job broker (with
    /// its ledger key and turn `turn`), else a builtin.
    pub(super) async fn call_tool(
        &self,
        name: &str,
        args: &serde_json::Value,
        key: &str,
        turn: u64,
    ) -> Executed {
        if name == MEMORY && self.mcp.routes(name).is_none() {
            return self.memory(args, key).await;
        }
        if is_job_tool(name) && self.mcp.routes(name).is_none() {
            return self.job_tool(name, args, key, turn).await;
        }
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

impl<C: Checkpoints> Runner<C> {
    /// Runs a `memory` call in the checkpoint API: on the memory of the scope the agentfile gave
    /// the tool, fenced by this runner's epoch, applied once per ledger key `key` — so the same
    /// call run again after a crash (its outcome not stored) answers what it did the first time.
    async fn memory(&self, args: &serde_json::Value, key: &str) -> Executed {
        let op = match tools::memory::command(args) {
            Ok(op) => op,
            Err(out) => return Executed::Answered(out),
        };
        let scope = self
            .config
            .spec
            .tools
            .iter()
            .find(|t| t.name == MEMORY)
            .and_then(|t| t.scope)
            .unwrap_or_default();
        let request = MemoryOpRequest {
            epoch: self.epoch,
            scope,
            op_key: key.to_string(),
            op,
        };
        match self.store.memory(&request).await {
            Ok(result) => Executed::Answered(tools::memory::answer(result)),
            Err(CheckpointError::Unreachable(why)) => {
                Executed::Lost(format!("the checkpoint API did not answer: {why}"))
            }
            Err(e) => Executed::Answered(ToolOutput::error(format!("Error: memory: {e}"))),
        }
    }
}

/// What became of a tool call this runner made.
pub(super) enum Executed {
    /// The tool answered (or certainly did not run, and the answer says why).
    Answered(ToolOutput),
    /// No answer came after the request may have reached the tool: why.
    Lost(String),
    /// The request never reached the tool (its server is down): why. It did not run.
    NotSent(String),
}
