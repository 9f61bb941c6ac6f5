//! The turn engine (DESIGN §6.3) as pure logic: a state machine that takes [`Input`]s (a restored
//! thread, an inbox message, a model response, a tool result) and returns [`Effect`]s (write a
//! checkpoint, call the model, run a tool, emit an event, report a finished turn). It does no I/O:
//! the driver performs the effects and feeds their outcomes back. Everything about *what happens
//! next* — including resuming an interrupted turn — is decided here, from the history alone.

use ninetrix_proto::agentfile::{Effect as EffectClass, ResumeMode, ToolSpec, tools};
use ninetrix_proto::api::{CheckpointState, ThreadStatus, Usage};
use ninetrix_proto::events::{
    BudgetExceeded, LlmCall, MaxTurnsReached, Repair as RepairEvent, Resume, TraceEvent,
    TurnCompleted, TurnResumed, TurnStarted, UnknownTool,
};
use ninetrix_proto::{Block, Message, Role, ThreadId};

use crate::history::{self, Repair};
use crate::ledger;

/// What the engine needs to know about the agent.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The thread (ledger keys include it).
    pub thread: ThreadId,
    /// Most model rounds in one turn.
    pub max_rounds: u32,
    /// Most US dollars one turn may spend.
    pub budget: Option<f64>,
    /// How an interrupted turn resumes.
    pub resume: ResumeMode,
    /// The agent's tools.
    pub tools: Vec<ToolSpec>,
    /// A batch job: the thread ends `done`/`failed` instead of `idle`.
    pub batch: bool,
}

/// Tokens and cost of one model call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallUsage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// US dollars.
    pub cost_usd: f64,
}

/// A completed model response.
#[derive(Clone, Debug, PartialEq)]
pub struct LlmTurn {
    /// The assistant message (complete: the stream's terminal event arrived).
    pub message: Message,
    /// What it cost.
    pub usage: CallUsage,
    /// The model that answered.
    pub model: String,
    /// Why it stopped (`end_turn`, `tool_use`, `stop`, `tool_calls`, …).
    pub stop_reason: String,
    /// How long the call took.
    pub latency_ms: u64,
}

/// Something that happened.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// The thread as stored (`None`: a fresh thread).
    Restored(Option<(Vec<Message>, CheckpointState)>),
    /// The next inbox message (or a batch job's task, with seq 0).
    Message {
        /// Its inbox seq.
        seq: u64,
        /// Its text.
        content: String,
    },
    /// The model answered.
    Llm(LlmTurn),
    /// The model cannot be called for this turn (a non-retryable error).
    LlmFailed(String),
    /// A tool call finished (executed, replayed from the ledger, or refused).
    Tool {
        /// The call it answers.
        call_id: String,
        /// The result text the model sees.
        content: String,
        /// Whether it is an error.
        is_error: bool,
    },
}

/// A tool call to perform through the ledger.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedCall {
    /// The provider's call ID (answered by the result).
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// Its arguments.
    pub args: serde_json::Value,
    /// The ledger key.
    pub key: String,
    /// This call's effect class.
    pub effect: EffectClass,
    /// The turn.
    pub turn_seq: u64,
}

/// A checkpoint to write: cut to `truncate_to`, append, set the state.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointPlan {
    /// History repair.
    pub truncate_to: Option<u64>,
    /// New messages.
    pub append: Vec<Message>,
    /// The state after it.
    pub state: CheckpointState,
}

/// Something the driver must do.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Write a checkpoint (before doing anything that depends on it).
    Checkpoint(CheckpointPlan),
    /// Call the model with the current history.
    CallLlm,
    /// Run (or replay) a tool call.
    RunTool(PlannedCall),
    /// Emit a trace event.
    Event(TraceEvent),
    /// The turn is over.
    TurnFinished {
        /// The inbox seq it answered.
        seq: u64,
        /// The reply.
        reply: String,
        /// Whether it succeeded.
        ok: bool,
    },
}

/// The engine.
#[derive(Clone, Debug)]
pub struct Engine {
    cfg: EngineConfig,
    history: Vec<Message>,
    /// `history[..persisted]` is stored.
    persisted: usize,
    /// A truncation to send with the next checkpoint.
    truncate: Option<usize>,
    state: CheckpointState,
}

fn event(event: TraceEvent) -> Effect {
    Effect::Event(event)
}

/// A short preview of a text for events and logs.
pub fn preview(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

impl Engine {
    /// A fresh engine.
    pub fn new(cfg: EngineConfig) -> Self {
        Self {
            cfg,
            history: Vec::new(),
            persisted: 0,
            truncate: None,
            state: CheckpointState::default(),
        }
    }

    /// The history as the engine sees it (including what is not yet checkpointed).
    pub fn history(&self) -> &[Message] {
        &self.history
    }

    /// The current small state.
    pub fn state(&self) -> &CheckpointState {
        &self.state
    }

    /// Whether the engine is between turns (ready for the next inbox message).
    pub fn idle(&self) -> bool {
        !matches!(self.state.status, ThreadStatus::InTurn)
    }

    /// Takes one input; returns what to do, in order.
    pub fn apply(&mut self, input: Input) -> Vec<Effect> {
        match input {
            Input::Restored(None) => Vec::new(),
            Input::Restored(Some((history, state))) => self.restore(history, state),
            Input::Message { seq, content } => self.start_turn(seq, content),
            Input::Llm(turn) => self.on_llm(turn),
            // The failed turn's reply carries the cause (said once: no separate error event).
            Input::LlmFailed(why) => self.stop_turn(
                &format!("The model could not be called: {why}"),
                false,
                "llm_failed",
            ),
            Input::Tool {
                call_id,
                content,
                is_error,
            } => {
                self.history
                    .push(history::tool_result(&call_id, content, is_error));
                let mut out = vec![self.checkpoint()];
                out.extend(self.advance());
                out
            }
        }
    }

    fn restore(&mut self, history: Vec<Message>, state: CheckpointState) -> Vec<Effect> {
        self.persisted = history.len();
        self.history = history;
        self.state = state;
        let mut out = Vec::new();
        let anchor = self.state.turn_start_history_len as usize;
        let Repair {
            history: repaired,
            truncate_to,
            dropped,
            pending_calls,
        } = history::repair(&self.history, anchor, self.cfg.resume);
        if let Some(cut) = truncate_to {
            self.history = repaired;
            self.truncate = Some(cut);
            self.persisted = cut;
            self.state.turn_start_history_len = self
                .state
                .turn_start_history_len
                .min(self.history.len() as u64);
            out.push(self.checkpoint());
            out.push(event(TraceEvent::Repair(RepairEvent {
                truncate_to: cut as u64,
                dropped,
                mode: self.cfg.resume.as_str().to_string(),
            })));
        }
        if !pending_calls.is_empty() {
            out.push(event(TraceEvent::Resume(Resume { pending_calls })));
        }
        if self.state.status == ThreadStatus::InTurn {
            out.push(event(TraceEvent::TurnResumed(TurnResumed {
                turn_seq: self.state.turn_seq,
                seq: self.state.inbox_cursor,
            })));
            out.extend(self.advance());
        }
        out
    }

    fn start_turn(&mut self, seq: u64, content: String) -> Vec<Effect> {
        self.state.turn_seq += 1;
        self.state.usage = Usage::default();
        self.history
            .push(Message::text(Role::User, content.clone()));
        self.state.turn_start_history_len = self.history.len() as u64;
        self.state.status = ThreadStatus::InTurn;
        self.state.inbox_cursor = self.state.inbox_cursor.max(seq);
        let mut out = vec![
            self.checkpoint(),
            event(TraceEvent::TurnStarted(TurnStarted {
                turn_seq: self.state.turn_seq,
                seq,
                input: preview(&content, 200),
            })),
        ];
        out.extend(self.advance());
        out
    }

    fn on_llm(&mut self, turn: LlmTurn) -> Vec<Effect> {
        self.state.usage.input_tokens += turn.usage.input_tokens;
        self.state.usage.output_tokens += turn.usage.output_tokens;
        self.state.usage.cost_usd += turn.usage.cost_usd;
        let calls = turn.message.tool_call_ids().count();
        self.history.push(turn.message);
        let mut out = vec![
            self.checkpoint(),
            event(TraceEvent::LlmCall(LlmCall {
                model: turn.model,
                input_tokens: turn.usage.input_tokens,
                output_tokens: turn.usage.output_tokens,
                cost_usd: turn.usage.cost_usd,
                latency_ms: turn.latency_ms,
                stop_reason: turn.stop_reason,
                tool_calls: calls as u64,
            })),
        ];
        if let Some(budget) = self.cfg.budget
            && self.state.usage.cost_usd > budget
        {
            out.push(event(TraceEvent::BudgetExceeded(BudgetExceeded {
                budget_usd: budget,
                spent_usd: self.state.usage.cost_usd,
            })));
            let reply = format!(
                "Stopped: this turn spent ${:.4}, over its budget of ${budget:.2} (governance.max_budget_per_run).",
                self.state.usage.cost_usd
            );
            out.extend(self.stop_turn(&reply, false, "budget_exceeded"));
            return out;
        }
        out.extend(self.advance());
        out
    }

    /// Ends the turn early: answers any unanswered call with an error result (never a fake
    /// success), adds the reply as an assistant message, and finishes.
    fn stop_turn(&mut self, reply: &str, ok: bool, why: &str) -> Vec<Effect> {
        if let Some(last) = self.history.iter().rposition(|m| m.role == Role::Assistant) {
            let answered: Vec<String> = self.history[last + 1..]
                .iter()
                .flat_map(|m| m.tool_result_ids().map(str::to_string))
                .collect();
            let unanswered: Vec<String> = self.history[last]
                .tool_call_ids()
                .filter(|id| !answered.iter().any(|a| a == id))
                .map(str::to_string)
                .collect();
            for id in unanswered {
                self.history.push(history::tool_result(
                    &id,
                    format!("Not run: the turn was stopped ({why})."),
                    true,
                ));
            }
        }
        self.history.push(Message::text(Role::Assistant, reply));
        self.finish(reply.to_string(), ok)
    }

    fn finish(&mut self, reply: String, ok: bool) -> Vec<Effect> {
        self.state.status = match (self.cfg.batch, ok) {
            (false, _) => ThreadStatus::Idle,
            (true, true) => ThreadStatus::Done,
            (true, false) => ThreadStatus::Failed,
        };
        let seq = self.state.inbox_cursor;
        vec![
            self.checkpoint(),
            event(TraceEvent::TurnCompleted(TurnCompleted {
                turn_seq: self.state.turn_seq,
                seq,
                ok,
                reply: reply.clone(),
                usage: self.state.usage.clone(),
                duration_ms: 0.0,
            })),
            Effect::TurnFinished { seq, reply, ok },
        ]
    }

    /// The checkpoint of everything not yet stored.
    fn checkpoint(&mut self) -> Effect {
        let cut = self.truncate.take();
        let from = cut.unwrap_or(self.persisted).min(self.persisted);
        let append = self.history[from..].to_vec();
        self.persisted = self.history.len();
        Effect::Checkpoint(CheckpointPlan {
            truncate_to: cut.map(|c| c as u64),
            append,
            state: self.state.clone(),
        })
    }

    fn spec_of(&self, name: &str) -> Option<&ToolSpec> {
        self.cfg.tools.iter().find(|t| t.name == name)
    }

    /// Decides the next step of the current turn from the history.
    fn advance(&mut self) -> Vec<Effect> {
        let mut out = Vec::new();
        loop {
            let anchor = (self.state.turn_start_history_len as usize).min(self.history.len());
            let last_assistant = self.history[anchor..]
                .iter()
                .rposition(|m| m.role == Role::Assistant)
                .map(|i| i + anchor);
            let rounds = self.history[anchor..]
                .iter()
                .filter(|m| m.role == Role::Assistant)
                .count() as u32;
            let Some(a) = last_assistant else {
                out.push(Effect::CallLlm);
                return out;
            };
            let calls: Vec<(String, String, serde_json::Value)> = self.history[a]
                .blocks
                .iter()
                .filter_map(|b| match b {
                    Block::ToolCall { id, name, args } => {
                        Some((id.clone(), name.clone(), args.clone()))
                    }
                    _ => None,
                })
                .collect();
            let answered = self.history[a + 1..]
                .iter()
                .flat_map(|m| m.tool_result_ids())
                .count();
            if calls.is_empty() {
                let reply = self.history[a].text_content();
                out.extend(self.finish(reply, true));
                return out;
            }
            if answered < calls.len() {
                let (call_id, name, args) = calls[answered].clone();
                let Some(spec) = self.spec_of(&name).cloned() else {
                    let available: Vec<String> =
                        self.cfg.tools.iter().map(|t| t.name.clone()).collect();
                    self.history.push(history::tool_result(
                        &call_id,
                        format!(
                            "There is no tool `{name}`. Available tools: {}.",
                            available.join(", ")
                        ),
                        true,
                    ));
                    out.push(self.checkpoint());
                    out.push(event(TraceEvent::UnknownTool(UnknownTool {
                        name,
                        call_id,
                        available,
                    })));
                    continue;
                };
                let occurrence = self.occurrence(anchor, a, answered, &name, &args);
                let key = ledger::key(
                    self.cfg.thread,
                    self.state.turn_seq,
                    &name,
                    &args,
                    occurrence,
                );
                let effect = tools::call_effect(&name, spec.effect, spec.effect_pinned, &args);
                out.push(Effect::RunTool(PlannedCall {
                    call_id,
                    name,
                    args,
                    key,
                    effect,
                    turn_seq: self.state.turn_seq,
                }));
                return out;
            }
            if rounds >= self.cfg.max_rounds {
                out.push(event(TraceEvent::MaxTurnsReached(MaxTurnsReached {
                    max_turns: self.cfg.max_rounds,
                })));
                let reply = format!(
                    "Stopped after {} model rounds without a final answer (execution.max_turns).",
                    self.cfg.max_rounds
                );
                out.extend(self.stop_turn(&reply, false, "max_turns"));
                return out;
            }
            out.push(Effect::CallLlm);
            return out;
        }
    }

    /// How many earlier calls in this turn have the same tool and arguments.
    fn occurrence(
        &self,
        anchor: usize,
        message: usize,
        index: usize,
        name: &str,
        args: &serde_json::Value,
    ) -> usize {
        let canonical = ledger::canonical_json(args);
        let mut n = 0;
        for (i, m) in self
            .history
            .iter()
            .enumerate()
            .take(message + 1)
            .skip(anchor)
        {
            for (j, b) in m
                .blocks
                .iter()
                .filter(|b| matches!(b, Block::ToolCall { .. }))
                .enumerate()
            {
                if i == message && j >= index {
                    break;
                }
                if let Block::ToolCall {
                    name: n2, args: a2, ..
                } = b
                    && n2 == name
                    && ledger::canonical_json(a2) == canonical
                {
                    n += 1;
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::agentfile::Effect as Class;

    fn config() -> EngineConfig {
        EngineConfig {
            thread: ThreadId::new_v7(),
            max_rounds: 5,
            budget: Some(0.10),
            resume: ResumeMode::Truncate,
            tools: vec![ToolSpec {
                name: "file_write".into(),
                effect: Class::Idempotent,
                effect_pinned: false,
            }],
            batch: false,
        }
    }

    fn llm(blocks: Vec<Block>, cost: f64) -> Input {
        Input::Llm(LlmTurn {
            message: Message::new(Role::Assistant, blocks),
            usage: CallUsage {
                input_tokens: 10,
                output_tokens: 5,
                cost_usd: cost,
            },
            model: "m".into(),
            stop_reason: "x".into(),
            latency_ms: 1,
        })
    }

    fn append_call(id: &str) -> Block {
        Block::ToolCall {
            id: id.into(),
            name: "file_write".into(),
            args: serde_json::json!({"path": "log", "content": "x", "mode": "append"}),
        }
    }

    fn kinds(effects: &[Effect]) -> Vec<String> {
        effects
            .iter()
            .map(|e| match e {
                Effect::Checkpoint(_) => "checkpoint".into(),
                Effect::CallLlm => "call_llm".into(),
                Effect::RunTool(c) => format!("run:{}", c.name),
                Effect::Event(e) => format!("event:{}", e.kind()),
                Effect::TurnFinished { .. } => "finished".into(),
            })
            .collect()
    }

    #[test]
    fn a_turn_checkpoints_after_every_step() {
        let mut e = Engine::new(config());
        let out = e.apply(Input::Message {
            seq: 7,
            content: "hi".into(),
        });
        assert_eq!(
            kinds(&out),
            ["checkpoint", "event:turn_started", "call_llm"]
        );
        let Effect::Checkpoint(plan) = &out[0] else {
            panic!()
        };
        assert_eq!(
            (
                plan.state.inbox_cursor,
                plan.state.turn_start_history_len,
                plan.state.status
            ),
            (7, 1, ThreadStatus::InTurn)
        );
        let out = e.apply(llm(vec![append_call("c1")], 0.01));
        assert_eq!(
            kinds(&out),
            ["checkpoint", "event:llm_call", "run:file_write"]
        );
        let Effect::RunTool(call) = &out[2] else {
            panic!()
        };
        assert_eq!(call.effect, Class::Write, "append mode is a write");
        let out = e.apply(Input::Tool {
            call_id: "c1".into(),
            content: "ok".into(),
            is_error: false,
        });
        assert_eq!(kinds(&out), ["checkpoint", "call_llm"]);
        let out = e.apply(llm(
            vec![Block::Text {
                text: "done".into(),
            }],
            0.01,
        ));
        assert_eq!(
            kinds(&out),
            [
                "checkpoint",
                "event:llm_call",
                "checkpoint",
                "event:turn_completed",
                "finished"
            ]
        );
        assert_eq!(
            out[4],
            Effect::TurnFinished {
                seq: 7,
                reply: "done".into(),
                ok: true
            }
        );
        assert!(e.idle());
        assert!(crate::history::validate(e.history()).is_ok());
    }

    #[test]
    fn a_restored_turn_with_an_orphaned_call_is_repaired_and_rerun_with_the_same_keys() {
        let mut first = Engine::new(config());
        first.apply(Input::Message {
            seq: 1,
            content: "go".into(),
        });
        let out = first.apply(llm(vec![append_call("c1")], 0.0));
        let Effect::RunTool(original) = out.last().unwrap().clone() else {
            panic!()
        };
        // Crash: the call is stored, its result is not.
        let stored = (first.history().to_vec(), first.state().clone());
        let mut second = Engine {
            cfg: first.cfg.clone(),
            ..Engine::new(config())
        };
        let out = second.apply(Input::Restored(Some(stored)));
        assert_eq!(
            kinds(&out),
            [
                "checkpoint",
                "event:repair",
                "event:turn_resumed",
                "call_llm"
            ]
        );
        let Effect::Checkpoint(plan) = &out[0] else {
            panic!()
        };
        assert_eq!((plan.truncate_to, plan.append.len()), (Some(1), 0));
        // The model asks again (a new provider ID): the ledger key is the same.
        let out = second.apply(llm(vec![append_call("c9")], 0.0));
        let Effect::RunTool(again) = out.last().unwrap() else {
            panic!()
        };
        assert_eq!(again.key, original.key);
    }

    #[test]
    fn a_restored_turn_whose_answer_was_stored_just_finishes() {
        let mut first = Engine::new(config());
        first.apply(Input::Message {
            seq: 1,
            content: "go".into(),
        });
        first.apply(llm(
            vec![Block::Text {
                text: "answer".into(),
            }],
            0.0,
        ));
        let mut state = first.state().clone();
        state.status = ThreadStatus::InTurn; // crash during the final checkpoint
        let mut second = Engine::new(config());
        let out = second.apply(Input::Restored(Some((first.history().to_vec(), state))));
        assert_eq!(
            kinds(&out),
            [
                "event:turn_resumed",
                "checkpoint",
                "event:turn_completed",
                "finished"
            ]
        );
    }

    #[test]
    fn the_budget_stops_the_turn_without_running_its_calls() {
        let mut e = Engine::new(config());
        e.apply(Input::Message {
            seq: 1,
            content: "go".into(),
        });
        let out = e.apply(llm(vec![append_call("c1")], 0.25));
        assert_eq!(
            kinds(&out),
            [
                "checkpoint",
                "event:llm_call",
                "event:budget_exceeded",
                "checkpoint",
                "event:turn_completed",
                "finished"
            ]
        );
        let Effect::TurnFinished { ok, reply, .. } = out.last().unwrap() else {
            panic!()
        };
        assert!(!ok && reply.contains("budget"), "{reply}");
        assert!(
            crate::history::validate(e.history()).is_ok(),
            "the unrun call is answered with an error"
        );
        assert_eq!(
            e.state().usage.cost_usd,
            0.25,
            "spent budget is in the checkpointed state"
        );
    }

    #[test]
    fn max_rounds_ends_a_turn_that_never_answers() {
        let mut e = Engine::new(EngineConfig {
            max_rounds: 2,
            budget: None,
            ..config()
        });
        e.apply(Input::Message {
            seq: 1,
            content: "go".into(),
        });
        e.apply(llm(vec![append_call("c1")], 0.0));
        e.apply(Input::Tool {
            call_id: "c1".into(),
            content: "ok".into(),
            is_error: false,
        });
        e.apply(llm(vec![append_call("c2")], 0.0));
        let out = e.apply(Input::Tool {
            call_id: "c2".into(),
            content: "ok".into(),
            is_error: false,
        });
        assert!(
            kinds(&out).contains(&"event:max_turns_reached".to_string()),
            "{:?}",
            kinds(&out)
        );
        assert!(matches!(
            out.last(),
            Some(Effect::TurnFinished { ok: false, .. })
        ));
    }

    #[test]
    fn unknown_tools_get_an_error_result_and_the_turn_goes_on() {
        let mut e = Engine::new(config());
        e.apply(Input::Message {
            seq: 1,
            content: "go".into(),
        });
        let out = e.apply(llm(
            vec![Block::ToolCall {
                id: "x".into(),
                name: "rm_rf".into(),
                args: serde_json::json!({}),
            }],
            0.0,
        ));
        assert_eq!(
            kinds(&out),
            [
                "checkpoint",
                "event:llm_call",
                "checkpoint",
                "event:unknown_tool",
                "call_llm"
            ]
        );
        let unknown = out.iter().find_map(|e| match e {
            Effect::Event(TraceEvent::UnknownTool(u)) => Some(u.clone()),
            _ => None,
        });
        let unknown = unknown.expect("the call to a missing tool is traced");
        assert_eq!(
            (unknown.name.as_str(), unknown.call_id.as_str()),
            ("rm_rf", "x")
        );
        assert_eq!(unknown.available, ["file_write"]);
        assert!(crate::history::validate(e.history()).is_ok());
    }

    #[test]
    fn identical_calls_in_one_turn_get_different_keys() {
        let mut e = Engine::new(config());
        e.apply(Input::Message {
            seq: 1,
            content: "go".into(),
        });
        let out = e.apply(llm(vec![append_call("a"), append_call("b")], 0.0));
        let Effect::RunTool(first) = out.last().unwrap().clone() else {
            panic!()
        };
        let out = e.apply(Input::Tool {
            call_id: "a".into(),
            content: "ok".into(),
            is_error: false,
        });
        let Effect::RunTool(second) = out.last().unwrap().clone() else {
            panic!()
        };
        assert_ne!(first.key, second.key);
    }

    #[test]
    fn complete_mode_runs_only_the_calls_that_never_finished() {
        let cfg = EngineConfig {
            resume: ResumeMode::Complete,
            ..config()
        };
        let mut first = Engine::new(cfg.clone());
        first.apply(Input::Message {
            seq: 1,
            content: "go".into(),
        });
        first.apply(llm(vec![append_call("a"), append_call("b")], 0.0));
        first.apply(Input::Tool {
            call_id: "a".into(),
            content: "ok".into(),
            is_error: false,
        });
        // Crash before b's result.
        let stored = (first.history().to_vec(), first.state().clone());
        let mut second = Engine::new(cfg);
        let out = second.apply(Input::Restored(Some(stored)));
        assert_eq!(
            kinds(&out),
            ["event:resume", "event:turn_resumed", "run:file_write"]
        );
        let Effect::RunTool(call) = out.last().unwrap() else {
            panic!()
        };
        assert_eq!(
            call.call_id, "b",
            "no new model call: the pending call is completed"
        );
    }
}
