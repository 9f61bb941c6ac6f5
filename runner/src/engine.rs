//! The turn engine (docs/design.md §6.3) as pure logic: a state machine that takes [`Input`]s (a restored
//! thread, an inbox message, a model response, a tool result) and returns [`Effect`]s (commit a
//! durable step, call the model, run a tool, emit an event, report a finished turn). It does no
//! I/O: the driver performs the effects and feeds their outcomes back. Everything about *what
//! happens next* — resuming an interrupted turn, and which ledger decision each tool call gets —
//! is decided here, from the history and the turn's ledger alone.
//!
//! ## Where a turn writes (docs/durability.md, "Where a turn writes")
//!
//! A turn of R model rounds and W executed `write` calls makes R + W durable writes, each one
//! [`Effect::Commit`] (checkpoint + ledger records + inbox cursor in one transaction):
//! - **each model response**, with everything not yet stored before it (the turn's input message
//!   on the first round; the results of `read`/`idempotent` calls on later ones) and the ledger
//!   intent of the next `write` call that will run. The response that ends the turn is stored
//!   with the thread back to `idle`;
//! - **each executed `write` call's outcome**, with its result (and any results before it), and
//!   the intent of the next `write` call.
//!
//! Nothing else waits for the disk: a crash before the first commit leaves the input in the inbox
//! after the stored cursor (it is taken again); a crash before a read's result is stored re-runs
//! the read, which its effect class allows; a replayed or outcome-unknown result is the same on
//! every boot, because the ledger entry it comes from is already stored. A `write` never runs
//! before its intent is stored; when no earlier commit carried it (a resumed turn), it gets a
//! commit of its own.
//!
//! ## Requests to people (docs/durability.md, "Approvals and questions")
//!
//! A response with gated calls (`governance.human_approval`) or `ask_human` questions stores one
//! request per such call in its own commit, with the thread `waiting`; the engine then asks the
//! driver to wait ([`Effect::AwaitApprovals`]) and no call of that response runs — ungated ones
//! included — until every request of it is settled. Settling is one more commit (the thread back
//! `in_turn`, carrying the first approved write's intent); then the calls run in order: an
//! approved one through the ledger as usual, a rejected or expired one answered with an error
//! naming why, a question with the person's answer. A response with requests is never cut by a
//! repair: the requests pin it, so a resumed turn waits for (or applies) the same decisions.

use std::collections::HashMap;

use ninetrix_agentfile::tools::ASK_HUMAN;
use ninetrix_agentfile::{
    Effect as EffectClass, HandoffTarget, HumanApproval, ResumeMode, ToolSpec, tools,
};
use ninetrix_proto::api::{
    Approval, ApprovalKind, ApprovalStatus, CheckpointState, CommitIntent, CommitOutcome,
    HandoffOrigin, HandoffReply, ThreadStatus, ToolCallRecord, ToolCallStatus, Usage,
};
use ninetrix_proto::events::{
    ApprovalExpired, BudgetExceeded, HandoffReceived, HandoffRefused, HandoffReplied, LlmCall,
    MaxTurnsReached, Repair as RepairEvent, Resume, TraceEvent, TurnCompleted, TurnResumed,
    TurnStarted, UnknownTool,
};
use ninetrix_proto::handoffs;
use ninetrix_proto::{Block, Message, Role, ThreadId};

use crate::history::{self, Repair};
use crate::ledger::{self, Decision, Entry};

/// What the engine needs to know about the agent and its runner.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The thread (ledger keys include it).
    pub thread: ThreadId,
    /// The runner's epoch (from its claim): an intent of this epoch is this runner's own.
    pub epoch: u64,
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
    /// Which calls wait for a person's approval (`governance.human_approval`).
    pub approval: Option<HumanApproval>,
    /// Seconds a request to a person stands before it expires.
    pub approval_timeout_secs: u64,
    /// The agent's name (the last link of the delegation chains its turns start).
    pub agent: String,
    /// Most handoffs in a chain (`execution.max_delegation_depth`).
    pub max_delegation_depth: u32,
    /// Seconds a call to a collaborator waits for the reply (`transfer_timeout`).
    pub transfer_timeout_secs: u64,
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

/// The thread as stored, for [`Input::Restored`].
#[derive(Clone, Debug, PartialEq)]
pub struct Restored {
    /// The history at the latest version.
    pub history: Vec<Message>,
    /// The small state at the latest version.
    pub state: CheckpointState,
    /// The ledger records of the turn in `state.turn_seq` (empty when the thread is between
    /// turns: a finished turn's calls are never looked up again).
    pub ledger: Vec<ToolCallRecord>,
    /// The requests to people of that turn, as they stand.
    pub approvals: Vec<Approval>,
    /// The interrupted turn has been through this many restarts, more than the budget
    /// ([`crash_looping`]): it is ended with an error reply instead of resumed.
    pub give_up: Option<u64>,
}

/// The default restart budget of one turn (`AGENTFILE_TURN_RESTARTS`): a turn interrupted this
/// many times is resumed; once more and it is given up (as Docker's `on-failure:3` gives up a
/// container), so one message that crashes its runner every time cannot hold the thread in a
/// crash loop — on Kubernetes, whose pods restart forever, this is the only budget there is.
pub const TURN_RESTARTS: u64 = 3;

/// How many restarts an interrupted turn has been through when more than `budget`: the thread
/// is in a turn (not waiting for a person, which may take any number of restarts), the turn was
/// started by the runner of boot `turn_boot` (0: an older runner's, not counted) and this
/// runner is boot `boot`.
pub fn crash_looping(status: ThreadStatus, turn_boot: u64, boot: u64, budget: u64) -> Option<u64> {
    let restarts = boot.saturating_sub(turn_boot);
    (status == ThreadStatus::InTurn && turn_boot > 0 && restarts > budget).then_some(restarts)
}

/// Where a failed turn cuts the history (`None`: it keeps it all), given the turn's anchor (the
/// history length after its input), whether the model answered in it, and how much of the
/// history is stored. It keeps everything but an input the model never answered and that was
/// never stored — a
/// turn that failed before its first response leaves the conversation as it was, so a message
/// the provider refuses (too long, a 400) cannot poison every later request. What the turn did
/// store (its responses, the results of its calls) stays: those calls ran.
pub fn failed_turn_cut(anchor: usize, model_answered: bool, persisted: usize) -> Option<usize> {
    (!model_answered && anchor > 0 && persisted < anchor).then(|| anchor - 1)
}

/// Something that happened.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// The thread as stored (`None`: a fresh thread).
    Restored(Option<Restored>),
    /// The next inbox message (or a batch job's task, with seq 0).
    Message {
        /// Its inbox seq.
        seq: u64,
        /// Its text.
        content: String,
        /// Who handed it over, for a task from another agent.
        handoff: Option<HandoffOrigin>,
    },
    /// The model answered.
    Llm(LlmTurn),
    /// The model cannot be called for this turn (a non-retryable error).
    LlmFailed(String),
    /// The current turn's requests to people as they stand now (after a wait).
    Approvals(Vec<Approval>),
    /// The answers to the calls of an [`Effect::Delegate`] (every one of them).
    Delegated(Vec<Delegated>),
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

/// A tool call to perform, with the ledger's decision for it.
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
    /// What to do: execute it, replay its recorded outcome, or report its outcome unknown.
    pub decision: Decision,
    /// The read tool (by the model's name) and arguments that check this write's effect when
    /// its outcome is unknown (`verify:` in the agentfile).
    pub verify: Option<(String, serde_json::Value)>,
}

/// A call to a collaborator to hand over: the driver files it through the API (once per call)
/// and waits for the reply.
#[derive(Clone, Debug, PartialEq)]
pub struct Delegation {
    /// The call (`ask_<agent>`), its ledger key and decision.
    pub call: PlannedCall,
    /// The collaborator.
    pub agent: String,
    /// The task.
    pub task: String,
    /// Its context, if the model gave one.
    pub context: Option<String>,
    /// The agents from the first caller to this one, inclusive.
    pub chain: Vec<String>,
    /// Seconds to wait for the reply.
    pub timeout_secs: u64,
    /// What this turn may still spend, if it has a budget.
    pub budget_usd: Option<f64>,
}

/// The answer to one delegated call.
#[derive(Clone, Debug, PartialEq)]
pub struct Delegated {
    /// The call it answers.
    pub call_id: String,
    /// The result the model sees (the reply, or why there is none).
    pub content: String,
    /// Whether it is an error.
    pub is_error: bool,
    /// What the collaborator spent (US dollars), counted in this turn's spending.
    pub cost_usd: f64,
}

/// A request to a person to store with a commit (the driver gives it its ID, masks its arguments
/// and hashes them).
#[derive(Clone, Debug, PartialEq)]
pub struct ApprovalAsk {
    /// The gated call's ledger key.
    pub key: String,
    /// The provider's call ID.
    pub call_id: String,
    /// The turn.
    pub turn_seq: u64,
    /// An approval or a question.
    pub kind: ApprovalKind,
    /// The tool, by the model's name.
    pub tool: String,
    /// Its arguments, as the model gave them.
    pub args: serde_json::Value,
    /// Seconds it stands.
    pub timeout_secs: u64,
}

/// One durable step to commit: cut to `truncate_to`, append, set the state, record the ledger
/// intents and outcomes and the requests to people — all or nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct CommitPlan {
    /// History repair.
    pub truncate_to: Option<u64>,
    /// New messages.
    pub append: Vec<Message>,
    /// The state after it.
    pub state: CheckpointState,
    /// Ledger intents, each for a key the ledger does not hold yet.
    pub intents: Vec<CommitIntent>,
    /// Ledger outcomes (after the intents).
    pub outcomes: Vec<CommitOutcome>,
    /// Requests to people made by the response this commit stores.
    pub approvals: Vec<ApprovalAsk>,
    /// The reply to the handoff the turn did, on the commit that ends it.
    pub handoff_reply: Option<HandoffReply>,
}

/// Something the driver must do.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Commit a durable step (before doing anything that depends on it). The events that
    /// directly follow it in the same list are true once it is stored (a response's `llm_call`,
    /// a turn's `turn_completed`): the driver stores them in the same transaction.
    Commit(CommitPlan),
    /// Call the model with the current history.
    CallLlm,
    /// Run (or replay) a tool call, then answer with [`Input::Tool`].
    RunTool(PlannedCall),
    /// Wait (at no cost) until more of these requests (by ledger key) are settled, then answer
    /// with [`Input::Approvals`]. The thread is stored `waiting`.
    AwaitApprovals {
        /// The turn.
        turn_seq: u64,
        /// The requests still pending.
        keys: Vec<String>,
    },
    /// Hand these calls' tasks to their collaborators (all at once; their intents are stored,
    /// the thread `waiting`) and wait (at no cost) for every reply or timeout, then answer with
    /// [`Input::Delegated`].
    Delegate {
        /// The turn.
        turn_seq: u64,
        /// The calls, in the response's order.
        calls: Vec<Delegation>,
    },
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
    /// A truncation to send with the next commit.
    truncate: Option<usize>,
    state: CheckpointState,
    /// The current turn's ledger as this runner knows it (stored, or riding on the next commit).
    ledger: HashMap<String, Entry>,
    /// Ledger intents for the next commit.
    intents: Vec<CommitIntent>,
    /// Ledger outcomes for the next commit.
    outcomes: Vec<CommitOutcome>,
    /// The call the driver is performing.
    in_flight: Option<PlannedCall>,
    /// The current turn's requests to people by ledger key, as this runner knows them: stored
    /// (with what was decided), or riding on the next commit (`None`: pending, no record yet).
    requests: HashMap<String, Option<Approval>>,
    /// Requests for the next commit.
    asks: Vec<ApprovalAsk>,
    /// The calls handed to collaborators, waiting for their answers.
    delegating: Vec<PlannedCall>,
    /// Answers of delegated calls not yet in the history (by call ID): a batch runs at its
    /// first call, the others take their answers when their turn in the response comes.
    delegated: HashMap<String, (String, bool)>,
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

/// What the next unanswered call of the current response is.
enum NextCall {
    /// A call to a tool the agent does not have.
    Unknown { call_id: String, name: String },
    /// A call to perform.
    Known(PlannedCall),
    /// A call settled by a person without running (rejected, expired, or a question answered).
    Settled {
        call_id: String,
        content: String,
        is_error: bool,
    },
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
            ledger: HashMap::new(),
            intents: Vec::new(),
            outcomes: Vec::new(),
            in_flight: None,
            requests: HashMap::new(),
            asks: Vec::new(),
            delegating: Vec::new(),
            delegated: HashMap::new(),
        }
    }

    /// The history as the engine sees it (including what is not yet committed).
    pub fn history(&self) -> &[Message] {
        &self.history
    }

    /// The current small state (including what is not yet committed: the cursor of a turn
    /// whose first response is still to come).
    pub fn state(&self) -> &CheckpointState {
        &self.state
    }

    /// Whether the engine is between turns (ready for the next inbox message).
    pub fn idle(&self) -> bool {
        !in_turn(self.state.status)
    }

    /// Takes one input; returns what to do, in order.
    pub fn apply(&mut self, input: Input) -> Vec<Effect> {
        match input {
            Input::Restored(None) => Vec::new(),
            Input::Restored(Some(restored)) => self.restore(restored),
            Input::Message {
                seq,
                content,
                handoff,
            } => self.start_turn(seq, content, handoff),
            Input::Delegated(answers) => self.on_delegated(answers),
            Input::Llm(turn) => self.on_llm(turn),
            Input::Approvals(approvals) => {
                self.learn(approvals);
                self.advance()
            }
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
            } => self.on_tool(call_id, content, is_error),
        }
    }

    fn restore(&mut self, restored: Restored) -> Vec<Effect> {
        let Restored {
            history,
            state,
            ledger,
            approvals,
            give_up,
        } = restored;
        self.persisted = history.len();
        self.history = history;
        self.state = state;
        self.ledger = ledger
            .iter()
            .filter(|r| r.turn_seq == self.state.turn_seq)
            .map(|r| (r.key.clone(), Entry::from(r)))
            .collect();
        self.requests.clear();
        self.learn(approvals);
        let mut out = Vec::new();
        let anchor = self.state.turn_start_history_len as usize;
        // A response that asked people, or handed a task to a collaborator, is kept whatever the
        // resume mode: its requests and handoffs pin it (a new response would ask again, or
        // delegate a second time).
        let last = self.history.iter().rposition(|m| m.role == Role::Assistant);
        let pinned =
            last.is_some_and(|l| self.asked(l) || (l >= anchor && self.handed_over(anchor, l)));
        let mode = if pinned {
            ResumeMode::Complete
        } else {
            self.cfg.resume
        };
        let Repair {
            history: repaired,
            truncate_to,
            dropped,
            pending_calls,
        } = history::repair(&self.history, anchor, mode);
        if let Some(cut) = truncate_to {
            self.history = repaired;
            self.truncate = Some(cut);
            self.persisted = cut;
            self.state.turn_start_history_len = self
                .state
                .turn_start_history_len
                .min(self.history.len() as u64);
            // The repair is a version of its own: stored before the turn goes on.
            out.push(self.commit());
            out.push(event(TraceEvent::Repair(RepairEvent {
                truncate_to: cut as u64,
                dropped,
                mode: mode.as_str().to_string(),
            })));
        }
        if !pending_calls.is_empty() {
            out.push(event(TraceEvent::Resume(Resume { pending_calls })));
        }
        if let Some(restarts) = give_up.filter(|_| self.state.status == ThreadStatus::InTurn) {
            let reply = format!(
                "I gave up on this message: my runner was restarted {restarts} times while working \
                 on it (a crash each time, or a stop), more than a turn gets. \
                 A tool call it had started may or may not have run; `ninetrix trace` shows what \
                 did. Send the message again to try again."
            );
            out.extend(self.stop_turn_with(
                &reply,
                "Not finished: the turn was given up after repeated restarts (this call may or may not have run).",
            ));
            return out;
        }
        if in_turn(self.state.status) {
            out.push(event(TraceEvent::TurnResumed(TurnResumed {
                turn_seq: self.state.turn_seq,
                seq: self.state.inbox_cursor,
            })));
            out.extend(self.advance());
        }
        out
    }

    /// Takes an inbox message. Nothing is written: until the first model response is committed
    /// (with the message and the advanced cursor), the message is still in the inbox after the
    /// stored cursor, and a restarted runner takes it again.
    fn start_turn(
        &mut self,
        seq: u64,
        content: String,
        handoff: Option<HandoffOrigin>,
    ) -> Vec<Effect> {
        self.state.turn_seq += 1;
        self.state.usage = Usage::default();
        self.ledger.clear();
        self.requests.clear();
        self.delegated.clear();
        let received = handoff.as_ref().map(|h| {
            event(TraceEvent::HandoffReceived(HandoffReceived {
                delivery_key: h.delivery_key.clone(),
                from_agent: h.from_agent.clone(),
                from_thread: h.from_thread,
                chain: h.chain.clone(),
            }))
        });
        self.state.handoff = handoff;
        self.history
            .push(Message::text(Role::User, content.clone()));
        self.state.turn_start_history_len = self.history.len() as u64;
        self.state.status = ThreadStatus::InTurn;
        self.state.inbox_cursor = self.state.inbox_cursor.max(seq);
        let mut out = vec![event(TraceEvent::TurnStarted(TurnStarted {
            turn_seq: self.state.turn_seq,
            seq,
            input: preview(&content, 200),
        }))];
        out.extend(received);
        out.extend(self.advance());
        out
    }

    fn on_llm(&mut self, turn: LlmTurn) -> Vec<Effect> {
        self.state.usage.input_tokens += turn.usage.input_tokens;
        self.state.usage.output_tokens += turn.usage.output_tokens;
        self.state.usage.cost_usd += turn.usage.cost_usd;
        let calls = turn.message.tool_call_ids().count();
        self.history.push(turn.message);
        let mut out = vec![event(TraceEvent::LlmCall(LlmCall {
            model: turn.model,
            input_tokens: turn.usage.input_tokens,
            output_tokens: turn.usage.output_tokens,
            cost_usd: turn.usage.cost_usd,
            latency_ms: turn.latency_ms,
            stop_reason: turn.stop_reason,
            tool_calls: calls as u64,
        }))];
        if let Some(stop) = self.over_budget() {
            out.extend(stop);
            return out;
        }
        // A final answer is committed by `finish` (one write with the thread back to idle);
        // a response with calls is committed before any of them runs, with its requests to
        // people (the thread then `waiting`).
        if calls > 0 {
            self.ask_people();
            out.insert(0, self.commit());
        }
        out.extend(self.advance());
        out
    }

    /// A tool call answered: its result joins the history; a `write` that ran commits its
    /// outcome now, everything else rides on the next commit.
    fn on_tool(&mut self, call_id: String, content: String, is_error: bool) -> Vec<Effect> {
        let call = self.in_flight.take_if(|c| c.call_id == call_id);
        self.history
            .push(history::tool_result(&call_id, content.clone(), is_error));
        let mut out = Vec::new();
        if let Some(call) = call {
            let outcome = CommitOutcome {
                key: call.key.clone(),
                ok: !is_error,
                result: content.clone(),
            };
            match call.decision {
                Decision::Replay { .. } => {}
                Decision::OutcomeUnknown => {
                    self.record_outcome(outcome);
                }
                Decision::Execute { .. } => {
                    if !self.ledger.contains_key(&call.key) {
                        self.intents.push(intent_of(&call));
                        self.ledger
                            .insert(call.key.clone(), Entry::intent(self.cfg.epoch));
                    }
                    self.record_outcome(outcome);
                    if call.effect == EffectClass::Write {
                        out.push(self.commit());
                    }
                }
            }
        }
        out.extend(self.advance());
        out
    }

    /// The budget of the current turn: the agent's, or what the caller's turn had left when
    /// the task was handed over, whichever is less.
    fn budget(&self) -> Option<f64> {
        let left = self.state.handoff.as_ref().and_then(|h| h.budget_usd);
        match (self.cfg.budget, left) {
            (Some(own), Some(left)) => Some(own.min(left)),
            (own, left) => own.or(left),
        }
    }

    /// Stops the turn if it has spent more than its budget (its collaborators' spending
    /// included).
    fn over_budget(&mut self) -> Option<Vec<Effect>> {
        let budget = self.budget()?;
        if self.state.usage.cost_usd <= budget {
            return None;
        }
        let mut out = vec![event(TraceEvent::BudgetExceeded(BudgetExceeded {
            budget_usd: budget,
            spent_usd: self.state.usage.cost_usd,
        }))];
        let reply = format!(
            "Stopped: this turn spent ${:.4}, over its budget of ${budget:.2} (governance.max_budget_per_run{}).",
            self.state.usage.cost_usd,
            if self.state.handoff.is_some() {
                ", or what the calling agent's turn had left"
            } else {
                ""
            }
        );
        out.extend(self.stop_turn(&reply, false, "budget_exceeded"));
        Some(out)
    }

    /// The answers to delegated calls: each one's outcome recorded (its result is the reply),
    /// the collaborators' spending counted, and the thread back `in_turn` in one commit; the
    /// answers join the history in the response's order as the turn goes on.
    fn on_delegated(&mut self, answers: Vec<Delegated>) -> Vec<Effect> {
        let calls = std::mem::take(&mut self.delegating);
        for answer in answers {
            let Some(call) = calls.iter().find(|c| c.call_id == answer.call_id) else {
                continue;
            };
            let recorded = self
                .ledger
                .get(&call.key)
                .is_some_and(|e| e.status != ToolCallStatus::Intent);
            if !recorded {
                self.record_outcome(CommitOutcome {
                    key: call.key.clone(),
                    ok: !answer.is_error,
                    result: answer.content.clone(),
                });
            }
            if answer.cost_usd.is_finite() && answer.cost_usd > 0.0 {
                self.state.usage.cost_usd += answer.cost_usd;
            }
            self.delegated
                .insert(answer.call_id, (answer.content, answer.is_error));
        }
        self.state.status = ThreadStatus::InTurn;
        let mut out = vec![self.commit()];
        if let Some(stop) = self.over_budget() {
            out.extend(stop);
            return out;
        }
        out.extend(self.advance());
        out
    }

    /// The collaborator behind a tool the model calls, if it is an `ask_<agent>`.
    fn handoff_target(&self, name: &str) -> Option<&HandoffTarget> {
        self.spec_of(name).and_then(|s| s.handoff.as_ref())
    }

    /// The delegation chain of the current turn's own calls: the agents from the first caller to
    /// this one, inclusive.
    fn chain(&self) -> Vec<String> {
        let mut chain = self
            .state
            .handoff
            .as_ref()
            .map(|h| h.chain.clone())
            .unwrap_or_default();
        chain.push(self.cfg.agent.clone());
        chain
    }

    /// Whether any call of message `a` is a handoff the ledger knows (its intent is stored).
    fn handed_over(&self, anchor: usize, a: usize) -> bool {
        let (calls, _) = self.calls_of(a);
        (0..calls.len()).any(|i| match self.plan(anchor, a, i) {
            NextCall::Known(call) => {
                self.handoff_target(&call.name).is_some() && self.ledger.contains_key(&call.key)
            }
            _ => false,
        })
    }

    /// The delegation of `call` to `agent`, or — when it must not be made — the error result it
    /// gets instead (and the event saying why, for the depth limit).
    fn delegation(
        &self,
        call: &PlannedCall,
        agent: &str,
    ) -> Result<Delegation, (String, Option<Box<HandoffRefused>>)> {
        let chain = self.chain();
        if let Err(why) = handoffs::check_depth(&chain, agent, self.cfg.max_delegation_depth) {
            let mut would = chain.clone();
            would.push(agent.to_string());
            return Err((
                why,
                Some(Box::new(HandoffRefused {
                    tool: call.name.clone(),
                    agent: agent.to_string(),
                    chain: would,
                    max_depth: self.cfg.max_delegation_depth,
                })),
            ));
        }
        let text = |k: &str| {
            call.args
                .get(k)
                .and_then(serde_json::Value::as_str)
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
        };
        let Some(task) = text("task") else {
            return Err((
                format!(
                    "Not run: `{}` needs a `task` (a non-empty string) saying what `{agent}` should do.",
                    call.name
                ),
                None,
            ));
        };
        Ok(Delegation {
            call: call.clone(),
            agent: agent.to_string(),
            task,
            context: text("context"),
            chain,
            timeout_secs: self.cfg.transfer_timeout_secs,
            budget_usd: self
                .budget()
                .map(|b| (b - self.state.usage.cost_usd).max(0.0)),
        })
    }

    /// Hands over every call of message `a` from call `from` on that goes to a collaborator and
    /// is not answered yet (calls to several collaborators in one response run together): their
    /// intents stored with the thread `waiting`, in one commit, then [`Effect::Delegate`].
    fn delegate(&mut self, anchor: usize, a: usize, from: usize) -> Vec<Effect> {
        let (calls, _) = self.calls_of(a);
        let mut batch = Vec::new();
        for i in from..calls.len() {
            let NextCall::Known(call) = self.plan(anchor, a, i) else {
                continue;
            };
            if matches!(call.decision, Decision::Replay { .. })
                || self.delegated.contains_key(&call.call_id)
            {
                continue;
            }
            let Some(agent) = self.handoff_target(&call.name).map(|t| t.agent.clone()) else {
                continue;
            };
            if let Ok(d) = self.delegation(&call, &agent) {
                batch.push(d);
            }
        }
        for d in &batch {
            if !self.ledger.contains_key(&d.call.key) {
                self.intents.push(intent_of(&d.call));
                self.ledger
                    .insert(d.call.key.clone(), Entry::intent(self.cfg.epoch));
            }
        }
        self.delegating = batch.iter().map(|d| d.call.clone()).collect();
        self.state.status = ThreadStatus::Waiting;
        vec![
            self.commit(),
            Effect::Delegate {
                turn_seq: self.state.turn_seq,
                calls: batch,
            },
        ]
    }

    fn record_outcome(&mut self, outcome: CommitOutcome) {
        if let Some(entry) = self.ledger.remove(&outcome.key) {
            self.ledger.insert(
                outcome.key.clone(),
                entry.completed(outcome.ok, outcome.result.clone()),
            );
        }
        self.outcomes.push(outcome);
    }

    /// Ends the turn early: answers any unanswered call with an error result (never a fake
    /// success), adds the reply as an assistant message, and finishes.
    fn stop_turn(&mut self, reply: &str, ok: bool, why: &str) -> Vec<Effect> {
        self.end_turn(
            reply,
            ok,
            &format!("Not run: the turn was stopped ({why})."),
        )
    }

    /// Ends a turn that failed for good: as [`Self::stop_turn`], each unanswered call answered
    /// with `unanswered`.
    fn stop_turn_with(&mut self, reply: &str, unanswered: &str) -> Vec<Effect> {
        self.end_turn(reply, false, unanswered)
    }

    /// Ends a turn that failed. The reply goes to the caller (`turn_completed`, a handoff's
    /// answer) and the trace, never into the history: the model must not read a failure as its
    /// own words ([`failed_turn_cut`]). Each unanswered call gets `unanswered_text` as its
    /// result, which keeps the history valid.
    fn end_turn(&mut self, reply: &str, ok: bool, unanswered_text: &str) -> Vec<Effect> {
        let (anchor, last_assistant, _) = self.position();
        if let Some(keep) = failed_turn_cut(anchor, last_assistant.is_some(), self.persisted) {
            // The model never answered and the input was never stored: the conversation stays
            // as it was (the message is in the trace and the inbox).
            self.history.truncate(keep);
            self.state.turn_start_history_len = keep as u64;
        }
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
                // A call a collaborator answered did run: its answer stands.
                let (content, is_error) = self
                    .delegated
                    .remove(&id)
                    .unwrap_or_else(|| (unanswered_text.to_string(), true));
                self.history
                    .push(history::tool_result(&id, content, is_error));
            }
        }
        self.finish(reply.to_string(), ok)
    }

    fn finish(&mut self, reply: String, ok: bool) -> Vec<Effect> {
        self.state.status = match (self.cfg.batch, ok) {
            (false, _) => ThreadStatus::Idle,
            (true, true) => ThreadStatus::Done,
            (true, false) => ThreadStatus::Failed,
        };
        let seq = self.state.inbox_cursor;
        // A handed-over task's reply goes back with the step that ends the turn.
        let origin = self.state.handoff.take();
        let mut commit = self.commit();
        let mut out = Vec::new();
        let mut replied = None;
        if let (Some(origin), Effect::Commit(plan)) = (origin, &mut commit) {
            plan.handoff_reply = Some(HandoffReply {
                delivery_key: origin.delivery_key.clone(),
                ok,
                text: reply.clone(),
                cost_usd: self.state.usage.cost_usd,
            });
            replied = Some(event(TraceEvent::HandoffReplied(HandoffReplied {
                delivery_key: origin.delivery_key,
                to_agent: origin.from_agent,
                to_thread: origin.from_thread,
                ok,
                cost_usd: self.state.usage.cost_usd,
            })));
        }
        out.push(commit);
        out.extend(replied);
        out.push(event(TraceEvent::TurnCompleted(TurnCompleted {
            turn_seq: self.state.turn_seq,
            seq,
            ok,
            reply: reply.clone(),
            usage: self.state.usage.clone(),
            duration_ms: 0.0,
        })));
        out.push(Effect::TurnFinished { seq, reply, ok });
        out
    }

    /// Takes what a wait brought: the current turn's requests as stored.
    fn learn(&mut self, approvals: Vec<Approval>) {
        for a in approvals {
            if a.turn_seq == self.state.turn_seq {
                self.requests.insert(a.key.clone(), Some(a));
            }
        }
    }

    /// Makes a request to a person for each unanswered call of the current response that needs
    /// one and has none yet (an `ask_human` question, or a call `governance.human_approval`
    /// gates), to ride on the next commit; the thread is `waiting` if any request of the
    /// response is pending.
    fn ask_people(&mut self) {
        let (anchor, last_assistant, _) = self.position();
        let Some(a) = last_assistant else { return };
        let (calls, answered) = self.calls_of(a);
        for i in answered..calls.len() {
            let NextCall::Known(call) = self.plan(anchor, a, i) else {
                continue;
            };
            let Some(kind) = self.kind_of(&call) else {
                continue;
            };
            if self.requests.contains_key(&call.key) {
                continue;
            }
            self.requests.insert(call.key.clone(), None);
            self.asks.push(ApprovalAsk {
                key: call.key,
                call_id: call.call_id,
                turn_seq: call.turn_seq,
                kind,
                tool: call.name,
                args: call.args,
                timeout_secs: self.cfg.approval_timeout_secs,
            });
        }
        if !self.pending_of(a).is_empty() {
            self.state.status = ThreadStatus::Waiting;
        }
    }

    /// What a call asks of a person, if anything: a question (`ask_human`), an approval (a call
    /// the agentfile gates and the ledger has no outcome for — a replayed call already ran).
    fn kind_of(&self, call: &PlannedCall) -> Option<ApprovalKind> {
        if call.name == ASK_HUMAN {
            return Some(ApprovalKind::Question);
        }
        let gated = self
            .cfg
            .approval
            .as_ref()
            .is_some_and(|h| h.gates(&call.name, call.effect));
        (gated && matches!(call.decision, Decision::Execute { .. }))
            .then_some(ApprovalKind::Approval)
    }

    /// Whether any call of message `a` has a request to a person.
    fn asked(&self, a: usize) -> bool {
        self.history[a]
            .tool_call_ids()
            .any(|id| self.requests.values().flatten().any(|r| r.call_id == id))
            || !self.asks.is_empty()
    }

    /// The ledger keys of the requests of message `a`'s unanswered calls that are still pending.
    fn pending_of(&self, a: usize) -> Vec<String> {
        let (calls, answered) = self.calls_of(a);
        let anchor = (self.state.turn_start_history_len as usize).min(self.history.len());
        (answered..calls.len())
            .filter_map(|i| match self.plan(anchor, a, i) {
                NextCall::Known(call) => match self.requests.get(&call.key) {
                    Some(None) => Some(call.key),
                    Some(Some(r)) if r.status == ApprovalStatus::Pending => Some(call.key),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    /// The answer a person's decision gives the call with ledger key `key` instead of running
    /// it — `(content, is_error)` for a rejection, an expiry or a question's answer — or `None`
    /// when the call runs (no request, or approved) or still waits.
    fn answer_without_running(&self, key: &str) -> Option<(String, bool)> {
        let Some(Some(request)) = self.requests.get(key) else {
            return None;
        };
        let by = request.decided_by.as_deref().unwrap_or("a person");
        let reason = request
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        let refused = |content: String| Some((content, true));
        match (request.kind, request.status) {
            (_, ApprovalStatus::Pending) | (ApprovalKind::Approval, ApprovalStatus::Approved) => {
                None
            }
            (ApprovalKind::Question, ApprovalStatus::Answered) => {
                Some((request.answer.clone().unwrap_or_default(), false))
            }
            (ApprovalKind::Approval, ApprovalStatus::Rejected) => refused(format!(
                "Not run: {by} rejected this call (approval {}){reason}.",
                request.id
            )),
            (ApprovalKind::Question, ApprovalStatus::Rejected) => refused(format!(
                "No answer: {by} declined to answer (request {}){reason}.",
                request.id
            )),
            (ApprovalKind::Approval, ApprovalStatus::Expired) => refused(format!(
                "Not run: nobody approved this call before its approval request {} expired at {}; an expired request counts as rejected.",
                request.id,
                request
                    .expires_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            )),
            (ApprovalKind::Question, ApprovalStatus::Expired) => refused(format!(
                "No answer: nobody answered before the question {} expired at {}.",
                request.id,
                request
                    .expires_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            )),
            // A decision that does not fit the kind (the API refuses these): never run on it.
            (_, status) => refused(format!(
                "Not run: request {} ended `{}`, which does not allow this call.",
                request.id,
                status.as_str()
            )),
        }
    }

    /// The commit of everything not yet stored, plus the intent of the next `write` call of the
    /// current response that will run (so it need not wait for a commit of its own).
    fn commit(&mut self) -> Effect {
        let cut = self.truncate.take();
        let from = cut.unwrap_or(self.persisted).min(self.persisted);
        let append = self.history[from..].to_vec();
        self.persisted = self.history.len();
        if let Some(next) = self.next_write_to_run() {
            self.intents.push(intent_of(&next));
            self.ledger
                .insert(next.key.clone(), Entry::intent(self.cfg.epoch));
        }
        Effect::Commit(CommitPlan {
            truncate_to: cut.map(|c| c as u64),
            append,
            state: self.state.clone(),
            intents: std::mem::take(&mut self.intents),
            outcomes: std::mem::take(&mut self.outcomes),
            approvals: std::mem::take(&mut self.asks),
            handoff_reply: None,
        })
    }

    fn spec_of(&self, name: &str) -> Option<&ToolSpec> {
        self.cfg.tools.iter().find(|t| t.offers(name))
    }

    /// Replaces the agent's tools (the driver's list after reading its MCP servers' tools: each
    /// MCP tool by the name the model sees, with its final effect class, before the agentfile's
    /// entries). Takes effect for calls planned from now on.
    pub fn set_tools(&mut self, tools: Vec<ToolSpec>) {
        self.cfg.tools = tools;
    }

    /// The current turn's anchor, its last assistant message, and how many model rounds it has.
    fn position(&self) -> (usize, Option<usize>, u32) {
        let anchor = (self.state.turn_start_history_len as usize).min(self.history.len());
        let last_assistant = self.history[anchor..]
            .iter()
            .rposition(|m| m.role == Role::Assistant)
            .map(|i| i + anchor);
        let rounds = self.history[anchor..]
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count() as u32;
        (anchor, last_assistant, rounds)
    }

    /// The tool calls of message `a`, and how many of them have results after it.
    fn calls_of(&self, a: usize) -> (Vec<(String, String, serde_json::Value)>, usize) {
        let calls = self.history[a]
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
        (calls, answered)
    }

    /// Call `index` of message `a` (the turn starts at `anchor`), with its ledger decision.
    fn plan(&self, anchor: usize, a: usize, index: usize) -> NextCall {
        let (calls, _) = self.calls_of(a);
        let (call_id, name, args) = calls[index].clone();
        let Some(spec) = self.spec_of(&name) else {
            return NextCall::Unknown { call_id, name };
        };
        let occurrence = self.occurrence(anchor, a, index, &name, &args);
        let key = ledger::key(
            self.cfg.thread,
            self.state.turn_seq,
            &name,
            &args,
            occurrence,
        );
        let effect = tools::call_effect(&name, spec.effect, spec.effect_pinned, &args);
        let decision = ledger::decide(self.ledger.get(&key), self.cfg.epoch, effect);
        let verify = spec
            .verify
            .as_ref()
            .map(|v| (v.tool.clone(), v.args.apply(&args)));
        if let Some((content, is_error)) = self.answer_without_running(&key) {
            return NextCall::Settled {
                call_id,
                content,
                is_error,
            };
        }
        NextCall::Known(PlannedCall {
            call_id,
            name,
            args,
            key,
            effect,
            turn_seq: self.state.turn_seq,
            decision,
            verify,
        })
    }

    /// The next `write` of the current response that will execute, if its intent is not stored
    /// or riding yet: so the commit being built can carry it. Reads, replays and outcome-unknown
    /// writes before it do not stop the search; a write whose intent is already this runner's
    /// does (it is the next to run, and the one after it waits for its outcome's commit).
    fn next_write_to_run(&self) -> Option<PlannedCall> {
        if self.state.status != ThreadStatus::InTurn {
            return None;
        }
        let (anchor, last_assistant, _) = self.position();
        let a = last_assistant?;
        let (calls, answered) = self.calls_of(a);
        (answered..calls.len())
            .find_map(|i| match self.plan(anchor, a, i) {
                // A call to a collaborator gets its intent on its batch's own commit.
                NextCall::Known(call)
                    if call.effect == EffectClass::Write
                        && matches!(call.decision, Decision::Execute { .. })
                        && self.handoff_target(&call.name).is_none() =>
                {
                    Some(call)
                }
                _ => None,
            })
            .filter(|call| !self.ledger.contains_key(&call.key))
    }

    /// Decides the next step of the current turn from the history.
    fn advance(&mut self) -> Vec<Effect> {
        let mut out = Vec::new();
        loop {
            let (anchor, last_assistant, rounds) = self.position();
            let Some(a) = last_assistant else {
                out.push(Effect::CallLlm);
                return out;
            };
            let (calls, answered) = self.calls_of(a);
            if calls.is_empty() {
                let reply = self.history[a].text_content();
                out.extend(self.finish(reply, true));
                return out;
            }
            if answered < calls.len() {
                // No call of a response runs while a request of it waits for a person. (A
                // resumed turn whose agentfile now gates a call asks here, before it runs.)
                let was = self.state.status;
                self.ask_people();
                let pending = self.pending_of(a);
                if !pending.is_empty() {
                    if !self.asks.is_empty() || was != ThreadStatus::Waiting {
                        self.state.status = ThreadStatus::Waiting;
                        out.push(self.commit());
                    }
                    out.push(Effect::AwaitApprovals {
                        turn_seq: self.state.turn_seq,
                        keys: pending,
                    });
                    return out;
                }
                if self.state.status == ThreadStatus::Waiting {
                    self.state.status = ThreadStatus::InTurn;
                    // Every request is settled: stored as such (with the next write's intent),
                    // and the expiries with it. (A turn stored waiting for collaborators hands
                    // its calls over again below, which stores it waiting again.)
                    if self.asked(a) {
                        out.push(self.commit());
                        out.extend(self.expiries(a).into_iter().map(event));
                    }
                }
                match self.plan(anchor, a, answered) {
                    NextCall::Settled {
                        call_id,
                        content,
                        is_error,
                    } => {
                        self.history
                            .push(history::tool_result(&call_id, content, is_error));
                        continue;
                    }
                    NextCall::Unknown { call_id, name } => {
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
                        out.push(event(TraceEvent::UnknownTool(UnknownTool {
                            name,
                            call_id,
                            available,
                        })));
                        continue;
                    }
                    // A call to a collaborator: its answer from the batch it ran in, or — unless
                    // the ledger has it to replay — a batch of its own now.
                    NextCall::Known(call)
                        if self.handoff_target(&call.name).is_some()
                            && (self.delegated.contains_key(&call.call_id)
                                || !matches!(call.decision, Decision::Replay { .. })) =>
                    {
                        if let Some((content, is_error)) = self.delegated.remove(&call.call_id) {
                            self.history.push(history::tool_result(
                                &call.call_id,
                                content,
                                is_error,
                            ));
                            continue;
                        }
                        let agent = self
                            .handoff_target(&call.name)
                            .map(|t| t.agent.clone())
                            .unwrap_or_default();
                        if let Err((content, refused)) = self.delegation(&call, &agent) {
                            self.history
                                .push(history::tool_result(&call.call_id, content, true));
                            out.extend(refused.map(|r| event(TraceEvent::HandoffRefused(*r))));
                            continue;
                        }
                        out.extend(self.delegate(anchor, a, answered));
                        return out;
                    }
                    NextCall::Known(call) => {
                        // A write runs only once its intent is stored: when no commit carried
                        // it yet, this one does.
                        if call.effect == EffectClass::Write && !self.ledger.contains_key(&call.key)
                        {
                            self.intents.push(intent_of(&call));
                            self.ledger
                                .insert(call.key.clone(), Entry::intent(self.cfg.epoch));
                            self.in_flight = Some(call.clone());
                            out.push(self.commit());
                        } else {
                            self.in_flight = Some(call.clone());
                        }
                        out.push(Effect::RunTool(call));
                        return out;
                    }
                }
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

impl Engine {
    /// `approval_expired` events for the expired requests of message `a`'s calls.
    fn expiries(&self, a: usize) -> Vec<TraceEvent> {
        let ids: Vec<&str> = self.history[a].tool_call_ids().collect();
        let mut expired: Vec<&Approval> = self
            .requests
            .values()
            .flatten()
            .filter(|r| r.status == ApprovalStatus::Expired && ids.contains(&r.call_id.as_str()))
            .collect();
        expired.sort_by_key(|r| r.id);
        expired
            .into_iter()
            .map(|r| {
                TraceEvent::ApprovalExpired(ApprovalExpired {
                    id: r.id,
                    kind: r.kind,
                    tool: r.tool.clone(),
                    expired_at: r.expires_at,
                })
            })
            .collect()
    }
}

/// Whether a thread in this status is inside a turn (running, or waiting for people).
fn in_turn(status: ThreadStatus) -> bool {
    matches!(status, ThreadStatus::InTurn | ThreadStatus::Waiting)
}

/// The ledger intent of `call`.
fn intent_of(call: &PlannedCall) -> CommitIntent {
    CommitIntent {
        key: call.key.clone(),
        turn_seq: call.turn_seq,
        tool: call.name.clone(),
        args: call.args.clone(),
        effect: call.effect,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninetrix_proto::api::ToolCallStatus;
    use ninetrix_proto::effects::Effect as Class;
    use serde_json::json;

    fn config() -> EngineConfig {
        EngineConfig {
            thread: ThreadId::new_v7(),
            epoch: 1,
            max_rounds: 5,
            budget: Some(0.10),
            resume: ResumeMode::Truncate,
            tools: vec![
                ToolSpec::builtin(tools::builtin("file_write").unwrap()),
                ToolSpec::builtin(tools::builtin("file_read").unwrap()),
            ],
            batch: false,
            approval: None,
            approval_timeout_secs: 3600,
            agent: "a".into(),
            max_delegation_depth: 4,
            transfer_timeout_secs: 300,
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

    fn answer(text: &str) -> Input {
        llm(vec![Block::Text { text: text.into() }], 0.0)
    }

    /// A `write` call: `file_write` in append mode.
    fn append_call(id: &str) -> Block {
        append_of(id, "x")
    }

    fn append_of(id: &str, content: &str) -> Block {
        Block::ToolCall {
            id: id.into(),
            name: "file_write".into(),
            args: json!({"path": "log", "content": content, "mode": "append"}),
        }
    }

    /// A `read` call.
    fn read_call(id: &str) -> Block {
        Block::ToolCall {
            id: id.into(),
            name: "file_read".into(),
            args: json!({"path": "notes"}),
        }
    }

    fn result(id: &str) -> Input {
        Input::Tool {
            call_id: id.into(),
            content: format!("result of {id}"),
            is_error: false,
        }
    }

    fn message(seq: u64) -> Input {
        Input::Message {
            seq,
            content: "go".into(),
            handoff: None,
        }
    }

    fn kinds(effects: &[Effect]) -> Vec<String> {
        effects
            .iter()
            .map(|e| match e {
                Effect::Commit(_) => "commit".into(),
                Effect::CallLlm => "call_llm".into(),
                Effect::RunTool(c) => format!("run:{}", c.name),
                Effect::Event(e) => format!("event:{}", e.kind()),
                Effect::TurnFinished { .. } => "finished".into(),
                Effect::AwaitApprovals { keys, .. } => format!("await:{}", keys.len()),
                Effect::Delegate { calls, .. } => format!("delegate:{}", calls.len()),
            })
            .collect()
    }

    fn commits(effects: &[Effect]) -> Vec<&CommitPlan> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Commit(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    fn run_of(effects: &[Effect]) -> PlannedCall {
        match effects.last() {
            Some(Effect::RunTool(call)) => call.clone(),
            other => panic!("expected a tool run last, got {other:?}"),
        }
    }

    /// Drives a turn to its end, answering every call with its result and every model round
    /// from `responses`; returns every effect.
    fn drive(e: &mut Engine, first: Vec<Effect>, responses: Vec<Input>) -> Vec<Effect> {
        let mut all = first.clone();
        let mut next = first;
        let mut responses = responses.into_iter();
        loop {
            let input = match next.last() {
                Some(Effect::CallLlm) => responses.next().expect("a response for every round"),
                Some(Effect::RunTool(call)) => result(&call.call_id),
                _ => return all,
            };
            next = e.apply(input);
            all.extend(next.clone());
        }
    }

    #[test]
    fn a_question_and_its_answer_are_one_commit() {
        let mut e = Engine::new(config());
        let out = e.apply(message(7));
        assert_eq!(
            kinds(&out),
            ["event:turn_started", "call_llm"],
            "the input waits"
        );
        assert_eq!(e.state().inbox_cursor, 7, "the cursor moves in memory");
        let out = e.apply(answer("hello"));
        assert_eq!(
            kinds(&out),
            [
                "event:llm_call",
                "commit",
                "event:turn_completed",
                "finished"
            ]
        );
        let plan = commits(&out)[0];
        assert_eq!(plan.append.len(), 2, "the input and the answer");
        assert_eq!(plan.append[0].role, Role::User);
        assert_eq!(
            (plan.state.inbox_cursor, plan.state.status),
            (7, ThreadStatus::Idle)
        );
        assert!(plan.intents.is_empty() && plan.outcomes.is_empty());
        assert!(e.idle());
    }

    #[test]
    fn a_write_turn_commits_each_response_and_the_writes_outcome() {
        let mut e = Engine::new(config());
        e.apply(message(7));
        let out = e.apply(llm(vec![append_call("c1")], 0.01));
        assert_eq!(kinds(&out), ["commit", "event:llm_call", "run:file_write"]);
        let plan = commits(&out)[0];
        assert_eq!(
            plan.append.len(),
            2,
            "the input rides on the first response"
        );
        assert_eq!(
            (
                plan.state.inbox_cursor,
                plan.state.turn_start_history_len,
                plan.state.status
            ),
            (7, 1, ThreadStatus::InTurn)
        );
        let call = run_of(&out);
        assert_eq!(call.effect, Class::Write, "append mode is a write");
        assert_eq!(call.decision, Decision::Execute { again: false });
        assert_eq!(
            plan.intents.iter().map(|i| &i.key).collect::<Vec<_>>(),
            [&call.key],
            "the write's intent is stored before it runs, with the response"
        );
        let out = e.apply(result("c1"));
        assert_eq!(kinds(&out), ["commit", "call_llm"]);
        let plan = commits(&out)[0];
        assert_eq!(plan.append.len(), 1);
        assert!(plan.intents.is_empty());
        assert_eq!(plan.outcomes.len(), 1);
        assert_eq!(
            (plan.outcomes[0].key.as_str(), plan.outcomes[0].ok),
            (call.key.as_str(), true)
        );
        let out = e.apply(answer("done"));
        assert_eq!(
            kinds(&out),
            [
                "event:llm_call",
                "commit",
                "event:turn_completed",
                "finished"
            ]
        );
        assert_eq!(
            out[3],
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
    fn reads_ride_on_the_next_commit_with_their_ledger_records() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        let out = e.apply(llm(vec![read_call("r1")], 0.0));
        assert_eq!(kinds(&out), ["commit", "event:llm_call", "run:file_read"]);
        assert!(
            commits(&out)[0].intents.is_empty(),
            "a read needs no intent first"
        );
        let read = run_of(&out);
        let out = e.apply(result("r1"));
        assert_eq!(kinds(&out), ["call_llm"], "a read's result is not a write");
        let out = e.apply(answer("done"));
        let plan = commits(&out)[0];
        assert_eq!(plan.append.len(), 2, "the read's result and the answer");
        assert_eq!(plan.intents.len(), 1);
        assert_eq!(plan.intents[0].key, read.key);
        assert_eq!(
            plan.outcomes.len(),
            1,
            "recorded for the ledger, in the same write"
        );
        assert_eq!(plan.outcomes[0].result, "result of r1");
    }

    /// R model rounds and W write calls cost R + W commits, whatever the mix.
    #[test]
    fn a_turn_costs_one_commit_per_response_and_per_write() {
        let cases: Vec<(Vec<Input>, usize)> = vec![
            (vec![answer("hi")], 1),
            (vec![llm(vec![read_call("a")], 0.0), answer("ok")], 2),
            (vec![llm(vec![append_call("a")], 0.0), answer("ok")], 3),
            // The researcher: list, write, read, answer: 4 rounds + 1 write.
            (
                vec![
                    llm(vec![read_call("a")], 0.0),
                    llm(vec![append_of("b", "report")], 0.0),
                    llm(vec![read_call("c")], 0.0),
                    answer("ok"),
                ],
                5,
            ),
            (
                vec![
                    llm(
                        vec![
                            read_call("a"),
                            append_of("b", "1"),
                            read_call("c"),
                            append_of("d", "2"),
                        ],
                        0.0,
                    ),
                    answer("ok"),
                ],
                4,
            ),
        ];
        for (responses, want) in cases {
            let mut e = Engine::new(config());
            let first = e.apply(message(1));
            let all = drive(&mut e, first, responses);
            assert_eq!(commits(&all).len(), want, "{:?}", kinds(&all));
            assert!(e.idle());
            // Every write's intent is committed before it runs.
            let mut committed = Vec::new();
            for effect in &all {
                match effect {
                    Effect::Commit(p) => committed.extend(p.intents.iter().map(|i| i.key.clone())),
                    Effect::RunTool(c) if c.effect == Class::Write => {
                        assert!(
                            committed.contains(&c.key),
                            "{} ran before its intent",
                            c.name
                        )
                    }
                    _ => {}
                }
            }
        }
    }

    #[test]
    fn the_next_writes_intent_rides_on_the_previous_writes_outcome() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        let out = e.apply(llm(vec![append_of("a", "1"), append_of("b", "2")], 0.0));
        let first = run_of(&out);
        assert_eq!(
            commits(&out)[0].intents.len(),
            1,
            "only the first write's intent"
        );
        let out = e.apply(result("a"));
        assert_eq!(kinds(&out), ["commit", "run:file_write"]);
        let second = run_of(&out);
        let plan = commits(&out)[0];
        assert_eq!(plan.outcomes[0].key, first.key);
        assert_eq!(plan.intents[0].key, second.key);
        assert_ne!(first.key, second.key);
    }

    fn stored(e: &Engine) -> Restored {
        Restored {
            history: e.history().to_vec(),
            state: e.state().clone(),
            ledger: Vec::new(),
            approvals: Vec::new(),
            give_up: None,
        }
    }

    fn record(call: &PlannedCall, status: ToolCallStatus, epoch: u64) -> ToolCallRecord {
        ToolCallRecord {
            key: call.key.clone(),
            turn_seq: call.turn_seq,
            tool: call.name.clone(),
            args: call.args.clone(),
            effect: call.effect,
            status,
            result: (status != ToolCallStatus::Intent).then(|| "recorded".to_string()),
            intent_epoch: epoch,
            completed_epoch: (status != ToolCallStatus::Intent).then_some(epoch),
            created_at: chrono::Utc::now(),
            completed_at: None,
        }
    }

    fn second_boot(cfg: EngineConfig) -> Engine {
        Engine::new(EngineConfig { epoch: 2, ..cfg })
    }

    #[test]
    fn a_turn_through_more_restarts_than_its_budget_is_given_up() {
        use ThreadStatus::{Idle, InTurn, Waiting};
        let budget = TURN_RESTARTS;
        assert_eq!(crash_looping(InTurn, 1, 4, budget), None, "3 restarts");
        assert_eq!(crash_looping(InTurn, 1, 5, budget), Some(4));
        assert_eq!(crash_looping(InTurn, 1, 5, 10), None, "a larger budget");
        assert_eq!(crash_looping(Waiting, 1, 50, budget), None, "a person");
        assert_eq!(crash_looping(Idle, 1, 50, budget), None);
        assert_eq!(crash_looping(InTurn, 0, 50, budget), None, "older runner");

        let mut first = Engine::new(config());
        first.apply(message(1));
        let out = first.apply(llm(vec![append_call("c1")], 0.0));
        let original = run_of(&out);
        let mut restored = stored(&first);
        restored.ledger = vec![record(&original, ToolCallStatus::Intent, 1)];
        restored.give_up = Some(4);
        let mut second = second_boot(first.cfg.clone());
        let out = second.apply(Input::Restored(Some(restored)));
        assert!(
            !kinds(&out)
                .iter()
                .any(|k| k == "event:turn_resumed" || k == "call_llm"),
            "not resumed: {:?}",
            kinds(&out)
        );
        let plan = commits(&out).last().copied().unwrap();
        assert_eq!(plan.state.status, ThreadStatus::Idle, "the turn is over");
        let Some(Effect::TurnFinished { reply, ok, .. }) = out.last() else {
            panic!("{:?}", kinds(&out))
        };
        assert!(!ok && reply.contains("restarted 4 times"), "{reply}");
        // The reply is for the caller, not the model.
        model_never_reads(&second, "restarted 4 times");
        assert!(
            history::validate(second.history()).is_ok(),
            "every call answered: {:?}",
            second.history()
        );
    }

    #[test]
    fn a_restored_turn_with_an_orphaned_call_is_repaired_and_rerun_with_the_same_keys() {
        let mut first = Engine::new(config());
        first.apply(message(1));
        let out = first.apply(llm(vec![append_call("c1")], 0.0));
        let original = run_of(&out);
        // Crash while the write runs: the response and the intent are stored, the result not.
        let mut restored = stored(&first);
        restored.ledger = vec![record(&original, ToolCallStatus::Intent, 1)];
        let mut second = second_boot(first.cfg.clone());
        let out = second.apply(Input::Restored(Some(restored)));
        assert_eq!(
            kinds(&out),
            ["commit", "event:repair", "event:turn_resumed", "call_llm"]
        );
        let plan = commits(&out)[0];
        assert_eq!((plan.truncate_to, plan.append.len()), (Some(1), 0));
        // The model asks again (a new provider ID): same key, and the write is not run again.
        let out = second.apply(llm(vec![append_call("c9")], 0.0));
        let again = run_of(&out);
        assert_eq!(again.key, original.key);
        assert_eq!(again.decision, Decision::OutcomeUnknown);
        assert!(
            commits(&out)[0].intents.is_empty(),
            "a key the ledger holds is not recorded again"
        );
        let out = second.apply(Input::Tool {
            call_id: "c9".into(),
            content: "unknown".into(),
            is_error: true,
        });
        assert_eq!(
            kinds(&out),
            ["call_llm"],
            "the same answer on every boot: no write"
        );
        let out = second.apply(answer("checked"));
        let plan = commits(&out)[0];
        assert_eq!(plan.outcomes.len(), 1, "the unknown outcome is recorded");
        assert_eq!(
            (plan.outcomes[0].key.as_str(), plan.outcomes[0].ok),
            (original.key.as_str(), false)
        );
    }

    #[test]
    fn a_completed_call_is_replayed_and_writes_nothing() {
        let mut first = Engine::new(config());
        first.apply(message(1));
        let original = run_of(&first.apply(llm(vec![append_call("c1")], 0.0)));
        let mut restored = stored(&first);
        restored.ledger = vec![record(&original, ToolCallStatus::Completed, 1)];
        let mut second = second_boot(first.cfg.clone());
        second.apply(Input::Restored(Some(restored)));
        let out = second.apply(llm(vec![append_call("c2")], 0.0));
        let replay = run_of(&out);
        assert!(matches!(replay.decision, Decision::Replay { .. }));
        let out = second.apply(result("c2"));
        assert_eq!(kinds(&out), ["call_llm"]);
        let out = second.apply(answer("done"));
        let plan = commits(&out)[0];
        assert!(plan.intents.is_empty() && plan.outcomes.is_empty());
    }

    #[test]
    fn a_restored_turn_whose_answer_was_stored_just_finishes() {
        let mut first = Engine::new(config());
        first.apply(message(1));
        first.apply(answer("answer"));
        let mut restored = stored(&first);
        restored.state.status = ThreadStatus::InTurn; // stored by an older runner, mid-turn
        let mut second = second_boot(config());
        let out = second.apply(Input::Restored(Some(restored)));
        assert_eq!(
            kinds(&out),
            [
                "event:turn_resumed",
                "commit",
                "event:turn_completed",
                "finished"
            ]
        );
    }

    #[test]
    fn the_budget_stops_the_turn_without_running_its_calls() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        let out = e.apply(llm(vec![append_call("c1")], 0.25));
        assert_eq!(
            kinds(&out),
            [
                "event:llm_call",
                "event:budget_exceeded",
                "commit",
                "event:turn_completed",
                "finished"
            ]
        );
        assert!(commits(&out)[0].intents.is_empty(), "no call will run");
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

    /// No assistant message of `e`'s history says `what`.
    fn model_never_reads(e: &Engine, what: &str) {
        for m in e.history() {
            assert!(
                !(m.role == Role::Assistant && m.text_content().contains(what)),
                "the failure is in the history as the model's words: {m:?}"
            );
        }
    }

    #[test]
    fn a_turn_whose_model_call_fails_at_once_leaves_the_conversation_as_it_was() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        e.apply(answer("hello"));
        let before = e.history().to_vec();
        for seq in 2..=4 {
            let out = e.apply(message(seq));
            assert_eq!(kinds(&out), ["event:turn_started", "call_llm"]);
            let out = e.apply(Input::LlmFailed("HTTP 400: bad request".into()));
            assert_eq!(kinds(&out), ["commit", "event:turn_completed", "finished"]);
            let plan = commits(&out)[0];
            assert!(
                plan.append.is_empty(),
                "nothing joins the history: {plan:?}"
            );
            assert_eq!(
                (plan.state.inbox_cursor, plan.state.status),
                (seq, ThreadStatus::Idle),
                "the message is applied once: the cursor moves"
            );
            let Effect::TurnFinished { ok, reply, .. } = out.last().unwrap() else {
                panic!()
            };
            assert!(
                !ok && reply.contains("HTTP 400"),
                "the caller hears why: {reply}"
            );
        }
        assert_eq!(e.history(), before.as_slice(), "three failures, no growth");
        // The next turn sends a valid history with only the new input added.
        e.apply(message(5));
        assert_eq!(e.history().len(), before.len() + 1);
        assert!(crate::history::validate(e.history()).is_ok());
        model_never_reads(&e, "could not be called");
    }

    #[test]
    fn a_turn_that_fails_after_its_calls_ran_keeps_them_without_a_failure_reply() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        e.apply(llm(vec![read_call("r")], 0.0));
        let out = e.apply(result("r"));
        assert_eq!(kinds(&out).last().map(String::as_str), Some("call_llm"));
        let out = e.apply(Input::LlmFailed("HTTP 400: bad request".into()));
        let plan = commits(&out)[0];
        assert!(
            plan.append.iter().all(|m| m.role == Role::Tool),
            "the read's result is stored, no reply: {plan:?}"
        );
        assert_eq!(e.history().last().unwrap().role, Role::Tool);
        model_never_reads(&e, "could not be called");
        e.apply(message(2));
        assert!(crate::history::validate(e.history()).is_ok());
    }

    #[test]
    fn the_cut_of_a_failed_turn_is_only_an_unanswered_unstored_input() {
        // Input at 4 (anchor 5), nothing stored since: cut back to 4.
        assert_eq!(failed_turn_cut(5, false, 4), Some(4));
        // The input rode on a commit (a repair, an earlier response): kept.
        assert_eq!(failed_turn_cut(5, false, 5), None);
        // The model answered: its response and the calls' results stay.
        assert_eq!(failed_turn_cut(5, true, 4), None);
        assert_eq!(failed_turn_cut(0, false, 0), None);
    }

    #[test]
    fn max_rounds_ends_a_turn_that_never_answers() {
        let mut e = Engine::new(EngineConfig {
            max_rounds: 2,
            budget: None,
            ..config()
        });
        e.apply(message(1));
        e.apply(llm(vec![append_call("c1")], 0.0));
        e.apply(result("c1"));
        e.apply(llm(vec![append_of("c2", "y")], 0.0));
        let out = e.apply(result("c2"));
        assert!(
            kinds(&out).contains(&"event:max_turns_reached".to_string()),
            "{:?}",
            kinds(&out)
        );
        assert!(matches!(
            out.last(),
            Some(Effect::TurnFinished { ok: false, .. })
        ));
        model_never_reads(&e, "Stopped after");
    }

    #[test]
    fn unknown_tools_get_an_error_result_and_the_turn_goes_on() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        let out = e.apply(llm(
            vec![Block::ToolCall {
                id: "x".into(),
                name: "rm_rf".into(),
                args: json!({}),
            }],
            0.0,
        ));
        assert_eq!(
            kinds(&out),
            ["commit", "event:llm_call", "event:unknown_tool", "call_llm"]
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
        assert_eq!(unknown.available, ["file_write", "file_read"]);
        assert!(crate::history::validate(e.history()).is_ok());
    }

    #[test]
    fn identical_calls_in_one_turn_get_different_keys() {
        let mut e = Engine::new(config());
        e.apply(message(1));
        let first = run_of(&e.apply(llm(vec![append_call("a"), append_call("b")], 0.0)));
        let second = run_of(&e.apply(result("a")));
        assert_ne!(first.key, second.key);
    }

    #[test]
    fn complete_mode_runs_only_the_calls_that_never_finished() {
        let cfg = EngineConfig {
            resume: ResumeMode::Complete,
            ..config()
        };
        let mut first = Engine::new(cfg.clone());
        first.apply(message(1));
        let a = run_of(&first.apply(llm(vec![append_of("a", "1"), append_of("b", "2")], 0.0)));
        let b = run_of(&first.apply(result("a")));
        // Crash before b ran: a's outcome and b's intent are stored.
        let mut restored = stored(&first);
        restored.ledger = vec![
            record(&a, ToolCallStatus::Completed, 1),
            record(&b, ToolCallStatus::Intent, 1),
        ];
        let mut second = second_boot(cfg);
        let out = second.apply(Input::Restored(Some(restored)));
        assert_eq!(
            kinds(&out),
            ["event:resume", "event:turn_resumed", "run:file_write"]
        );
        let call = run_of(&out);
        assert_eq!(
            (call.call_id.as_str(), call.decision),
            ("b", Decision::OutcomeUnknown),
            "no new model call; the pending write is reported, not repeated"
        );
    }

    #[test]
    fn a_resumed_write_without_a_stored_intent_gets_a_commit_before_it_runs() {
        let cfg = EngineConfig {
            resume: ResumeMode::Complete,
            ..config()
        };
        let mut first = Engine::new(cfg.clone());
        first.apply(message(1));
        let out = first.apply(llm(vec![read_call("r"), append_call("w")], 0.0));
        let write_key = commits(&out)[0].intents[0].key.clone();
        // Crash during the read: the response and the write's intent were stored... but say an
        // older runner stored the response alone (no intent): the write must not run unrecorded.
        let restored = stored(&first);
        let mut second = second_boot(cfg);
        let out = second.apply(Input::Restored(Some(restored)));
        let read = run_of(&out);
        assert_eq!(read.name, "file_read");
        assert_eq!(read.decision, Decision::Execute { again: false });
        let out = second.apply(result("r"));
        assert_eq!(kinds(&out), ["commit", "run:file_write"]);
        let plan = commits(&out)[0];
        assert_eq!(
            plan.intents
                .iter()
                .map(|i| i.key.as_str())
                .collect::<Vec<_>>(),
            [read.key.as_str(), write_key.as_str()]
        );
        assert_eq!(plan.outcomes.len(), 1, "the read's outcome rides along");
    }

    // Requests to people.

    /// The config with every `write` gated.
    fn gated() -> EngineConfig {
        EngineConfig {
            approval: Some(HumanApproval {
                enabled: true,
                actions: Vec::new(),
                effects: vec![Class::Write],
                timeout_secs: 3600,
                notify_url: None,
                notify_secret: None,
            }),
            tools: vec![
                ToolSpec::builtin(tools::builtin("file_write").unwrap()),
                ToolSpec::builtin(tools::builtin("file_read").unwrap()),
                ToolSpec::builtin(tools::builtin("ask_human").unwrap()),
            ],
            ..config()
        }
    }

    /// The stored record of `ask`, settled as `status`.
    fn settled(ask: &ApprovalAsk, status: ApprovalStatus) -> Approval {
        let now = chrono::Utc::now();
        Approval {
            id: ninetrix_proto::ApprovalId::new_v7(),
            thread_id: ThreadId::new_v7(),
            labels: Default::default(),
            epoch: 1,
            turn_seq: ask.turn_seq,
            key: ask.key.clone(),
            call_id: ask.call_id.clone(),
            kind: ask.kind,
            tool: ask.tool.clone(),
            args: ask.args.clone(),
            args_hash: "h".into(),
            status,
            requested_at: now,
            expires_at: now + chrono::Duration::seconds(60),
            decided_at: status.is_settled().then_some(now),
            decided_by: status.is_settled().then(|| "alice".to_string()),
            reason: (status == ApprovalStatus::Rejected).then(|| "not today".to_string()),
            answer: (status == ApprovalStatus::Answered).then(|| "blue".to_string()),
        }
    }

    fn ask_of(effects: &[Effect]) -> Vec<ApprovalAsk> {
        commits(effects)
            .iter()
            .flat_map(|p| p.approvals.clone())
            .collect()
    }

    fn question(id: &str) -> Block {
        Block::ToolCall {
            id: id.into(),
            name: "ask_human".into(),
            args: json!({"question": "which colour?"}),
        }
    }

    fn results(e: &Engine) -> Vec<(String, bool)> {
        e.history()
            .iter()
            .flat_map(|m| m.blocks.iter())
            .filter_map(|b| match b {
                Block::ToolResult {
                    content, is_error, ..
                } => Some((content.clone(), *is_error)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_gated_call_waits_with_its_whole_response_then_runs_once_approved() {
        let mut e = Engine::new(gated());
        e.apply(message(1));
        let out = e.apply(llm(vec![read_call("r"), append_call("w")], 0.0));
        assert_eq!(kinds(&out), ["commit", "event:llm_call", "await:1"]);
        let plan = commits(&out)[0];
        assert_eq!(plan.state.status, ThreadStatus::Waiting);
        assert!(
            plan.intents.is_empty(),
            "no intent before the decision: a rejected write never ran"
        );
        let asks = ask_of(&out);
        assert_eq!(asks.len(), 1, "the ungated read asks nobody");
        assert_eq!(
            (asks[0].call_id.as_str(), asks[0].kind, asks[0].timeout_secs),
            ("w", ApprovalKind::Approval, 3600)
        );
        assert!(!e.idle(), "a waiting turn is still a turn");
        let out = e.apply(Input::Approvals(vec![settled(
            &asks[0],
            ApprovalStatus::Approved,
        )]));
        assert_eq!(
            kinds(&out),
            ["commit", "run:file_read"],
            "settled is stored, then the calls run in order"
        );
        let plan = commits(&out)[0];
        assert_eq!(plan.state.status, ThreadStatus::InTurn);
        assert_eq!(
            plan.intents.iter().map(|i| &i.key).collect::<Vec<_>>(),
            [&asks[0].key],
            "the approved write's intent rides on it"
        );
        let out = e.apply(result("r"));
        assert_eq!(kinds(&out), ["run:file_write"]);
        assert_eq!(run_of(&out).decision, Decision::Execute { again: false });
        let out = e.apply(result("w"));
        assert_eq!(kinds(&out), ["commit", "call_llm"]);
        let all = drive(&mut e, out, vec![answer("done")]);
        assert!(matches!(
            all.last(),
            Some(Effect::TurnFinished { ok: true, .. })
        ));
    }

    #[test]
    fn a_rejected_call_never_runs_and_the_model_gets_the_reason() {
        let mut e = Engine::new(gated());
        e.apply(message(1));
        let out = e.apply(llm(vec![append_call("w"), read_call("r")], 0.0));
        let asks = ask_of(&out);
        let out = e.apply(Input::Approvals(vec![settled(
            &asks[0],
            ApprovalStatus::Rejected,
        )]));
        assert_eq!(kinds(&out), ["commit", "run:file_read"]);
        assert!(commits(&out)[0].intents.is_empty(), "no intent, ever");
        let (text, is_error) = &results(&e)[0];
        assert!(*is_error);
        assert!(
            text.contains("alice rejected") && text.contains("not today"),
            "{text}"
        );
        let all = drive(&mut e, vec![], vec![]);
        assert!(all.is_empty());
        let out = e.apply(result("r"));
        assert_eq!(kinds(&out), ["call_llm"]);
    }

    #[test]
    fn several_requests_are_decided_independently_and_the_turn_goes_on_when_all_are() {
        let mut e = Engine::new(gated());
        e.apply(message(1));
        let out = e.apply(llm(
            vec![append_of("a", "1"), question("q"), append_of("b", "2")],
            0.0,
        ));
        let asks = ask_of(&out);
        assert_eq!(
            asks.iter().map(|a| a.kind).collect::<Vec<_>>(),
            [
                ApprovalKind::Approval,
                ApprovalKind::Question,
                ApprovalKind::Approval
            ]
        );
        // The last one first: still waiting for the other two, nothing written.
        let out = e.apply(Input::Approvals(vec![settled(
            &asks[2],
            ApprovalStatus::Approved,
        )]));
        assert_eq!(kinds(&out), ["await:2"]);
        let out = e.apply(Input::Approvals(vec![
            settled(&asks[2], ApprovalStatus::Approved),
            settled(&asks[1], ApprovalStatus::Answered),
        ]));
        assert_eq!(kinds(&out), ["await:1"]);
        let out = e.apply(Input::Approvals(vec![settled(
            &asks[0],
            ApprovalStatus::Rejected,
        )]));
        // a: rejected (answered at once), q: answered, b: runs.
        assert_eq!(kinds(&out), ["commit", "run:file_write"]);
        assert_eq!(run_of(&out).call_id, "b");
        let r = results(&e);
        assert!(r[0].1, "a was rejected");
        assert_eq!(
            r[1],
            ("blue".to_string(), false),
            "the answer is the result"
        );
    }

    #[test]
    fn an_expired_request_is_a_rejection_and_is_traced_once_with_the_settling_commit() {
        let mut e = Engine::new(gated());
        e.apply(message(1));
        let out = e.apply(llm(vec![append_call("w")], 0.0));
        let asks = ask_of(&out);
        let out = e.apply(Input::Approvals(vec![settled(
            &asks[0],
            ApprovalStatus::Expired,
        )]));
        assert_eq!(
            kinds(&out),
            ["commit", "event:approval_expired", "call_llm"],
            "the expiry rides on the commit that stores the turn going on"
        );
        let (text, is_error) = &results(&e)[0];
        assert!(*is_error && text.contains("expired"), "{text}");
    }

    #[test]
    fn a_restart_while_waiting_keeps_the_response_and_waits_again_even_in_truncate_mode() {
        let cfg = gated();
        assert_eq!(cfg.resume, ResumeMode::Truncate);
        let mut first = Engine::new(cfg.clone());
        first.apply(message(1));
        let out = first.apply(llm(vec![read_call("r"), append_call("w")], 0.0));
        let asks = ask_of(&out);
        let mut restored = stored(&first);
        restored.approvals = vec![settled(&asks[0], ApprovalStatus::Pending)];
        let mut second = second_boot(cfg.clone());
        let out = second.apply(Input::Restored(Some(restored.clone())));
        assert_eq!(
            kinds(&out),
            ["event:resume", "event:turn_resumed", "await:1"],
            "no cut, no commit, no second request"
        );
        // Decided while no runner held the thread: the next boot runs it.
        restored.approvals = vec![settled(&asks[0], ApprovalStatus::Approved)];
        let mut third = Engine::new(EngineConfig { epoch: 3, ..cfg });
        let out = third.apply(Input::Restored(Some(restored)));
        assert_eq!(
            kinds(&out),
            [
                "event:resume",
                "event:turn_resumed",
                "commit",
                "run:file_read"
            ]
        );
        assert_eq!(commits(&out)[0].intents.len(), 1);
    }

    #[test]
    fn an_approved_write_that_ran_before_a_crash_is_not_asked_again_or_repeated() {
        let cfg = gated();
        let mut first = Engine::new(cfg.clone());
        first.apply(message(1));
        let out = first.apply(llm(vec![append_call("w")], 0.0));
        let asks = ask_of(&out);
        let out = first.apply(Input::Approvals(vec![settled(
            &asks[0],
            ApprovalStatus::Approved,
        )]));
        let write = run_of(&out);
        // Crash after the intent, before the outcome.
        let mut restored = stored(&first);
        restored.approvals = vec![settled(&asks[0], ApprovalStatus::Approved)];
        restored.ledger = vec![record(&write, ToolCallStatus::Intent, 1)];
        let mut second = second_boot(cfg);
        let out = second.apply(Input::Restored(Some(restored)));
        assert!(ask_of(&out).is_empty());
        assert_eq!(run_of(&out).decision, Decision::OutcomeUnknown);
    }

    #[test]
    fn a_turn_resumed_under_a_new_gate_asks_before_the_call_runs() {
        // Stored by a runner whose agentfile gated nothing.
        let cfg = EngineConfig {
            resume: ResumeMode::Complete,
            ..config()
        };
        let mut first = Engine::new(cfg.clone());
        first.apply(message(1));
        first.apply(llm(vec![read_call("r"), append_call("w")], 0.0));
        let mut second = second_boot(EngineConfig {
            approval: gated().approval,
            ..cfg
        });
        let out = second.apply(Input::Restored(Some(stored(&first))));
        assert_eq!(
            kinds(&out),
            ["event:resume", "event:turn_resumed", "commit", "await:1"]
        );
        let plan = commits(&out)[0];
        assert_eq!(plan.state.status, ThreadStatus::Waiting);
        assert_eq!(plan.approvals[0].call_id, "w");
    }

    #[test]
    fn an_agent_without_gates_still_asks_its_questions() {
        let mut e = Engine::new(EngineConfig {
            tools: gated().tools,
            ..config()
        });
        e.apply(message(1));
        let out = e.apply(llm(vec![append_call("w"), question("q")], 0.0));
        let asks = ask_of(&out);
        assert_eq!(asks.len(), 1);
        assert_eq!(asks[0].kind, ApprovalKind::Question);
    }

    // --- Handoffs (issue 16) ---

    fn collaborating() -> EngineConfig {
        EngineConfig {
            tools: vec![
                ToolSpec::builtin(tools::builtin("file_read").unwrap()),
                ToolSpec::handoff("b", None),
                ToolSpec::handoff("c", None),
            ],
            ..config()
        }
    }

    fn ask(id: &str, agent: &str, task: &str) -> Block {
        Block::ToolCall {
            id: id.into(),
            name: format!("ask_{agent}"),
            args: json!({"task": task}),
        }
    }

    fn delegations(effects: &[Effect]) -> Vec<Delegation> {
        match effects.last() {
            Some(Effect::Delegate { calls, .. }) => calls.clone(),
            other => panic!("expected a delegation last, got {other:?}"),
        }
    }

    fn reply(d: &Delegation, text: &str, cost: f64) -> Delegated {
        Delegated {
            call_id: d.call.call_id.clone(),
            content: text.into(),
            is_error: false,
            cost_usd: cost,
        }
    }

    fn origin(chain: &[&str], budget: Option<f64>) -> HandoffOrigin {
        HandoffOrigin {
            delivery_key: "handoff:k".into(),
            from_agent: chain.last().unwrap().to_string(),
            from_thread: ThreadId::new_v7(),
            chain: chain.iter().map(|c| c.to_string()).collect(),
            budget_usd: budget,
        }
    }

    #[test]
    fn calls_to_two_collaborators_are_handed_over_together_and_answered_in_order() {
        let mut e = Engine::new(collaborating());
        e.apply(message(1));
        let out = e.apply(llm(
            vec![
                ask("1", "b", "find x"),
                read_call("2"),
                ask("3", "c", "find y"),
            ],
            0.01,
        ));
        assert_eq!(
            kinds(&out),
            ["commit", "event:llm_call", "commit", "delegate:2"],
            "the response, then one commit for the batch"
        );
        let [response, batch] = commits(&out)[..] else {
            panic!()
        };
        assert!(
            response.intents.is_empty(),
            "a handoff's intent rides on its batch"
        );
        assert_eq!(batch.intents.len(), 2);
        assert!(batch.intents.iter().all(|i| i.effect == Class::Write));
        assert_eq!(batch.state.status, ThreadStatus::Waiting);
        let calls = delegations(&out);
        assert_eq!(
            calls
                .iter()
                .map(|d| (d.agent.as_str(), d.task.as_str()))
                .collect::<Vec<_>>(),
            [("b", "find x"), ("c", "find y")]
        );
        assert_eq!(calls[0].chain, ["a"]);
        assert_eq!(calls[0].timeout_secs, 300);
        let left = calls[0].budget_usd.unwrap();
        assert!((left - 0.09).abs() < 1e-9, "the budget left: {left}");
        // The answers: outcomes stored in one commit, the turn going on with the read.
        let out = e.apply(Input::Delegated(vec![
            reply(&calls[1], "y is 2", 0.02),
            reply(&calls[0], "x is 1", 0.01),
        ]));
        assert_eq!(kinds(&out), ["commit", "run:file_read"]);
        let plan = commits(&out)[0];
        assert_eq!(plan.outcomes.len(), 2);
        assert_eq!(plan.state.status, ThreadStatus::InTurn);
        assert!(
            (plan.state.usage.cost_usd - 0.04).abs() < 1e-9,
            "the collaborators' spend counts"
        );
        let out = e.apply(result("2"));
        assert_eq!(kinds(&out), ["call_llm"]);
        let r = results(&e);
        assert_eq!(
            r.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
            ["x is 1", "result of 2", "y is 2"],
            "answers in the response's order"
        );
    }

    #[test]
    fn a_chain_past_the_depth_limit_is_refused_with_an_error_naming_it() {
        let mut e = Engine::new(EngineConfig {
            max_delegation_depth: 1,
            ..collaborating()
        });
        e.apply(Input::Message {
            seq: 1,
            content: "task".into(),
            handoff: Some(origin(&["b"], None)),
        });
        let out = e.apply(llm(vec![ask("1", "b", "again")], 0.0));
        assert_eq!(
            kinds(&out),
            [
                "commit",
                "event:llm_call",
                "event:handoff_refused",
                "call_llm"
            ]
        );
        let (text, is_error) = &results(&e)[0];
        assert!(*is_error);
        assert!(text.contains("b → a → b (2 handoffs)"), "{text}");
        assert!(text.contains("max_delegation_depth (1)"), "{text}");
    }

    #[test]
    fn a_call_without_a_task_is_answered_with_an_error_and_not_handed_over() {
        let mut e = Engine::new(collaborating());
        e.apply(message(1));
        let out = e.apply(llm(
            vec![Block::ToolCall {
                id: "1".into(),
                name: "ask_b".into(),
                args: json!({"context": "x"}),
            }],
            0.0,
        ));
        assert_eq!(kinds(&out), ["commit", "event:llm_call", "call_llm"]);
        assert!(results(&e)[0].0.contains("needs a `task`"));
    }

    #[test]
    fn a_delegated_turn_replies_with_its_final_commit() {
        let mut e = Engine::new(config());
        let out = e.apply(Input::Message {
            seq: 1,
            content: "Task from agent `x`:\nsum".into(),
            handoff: Some(origin(&["x"], Some(1.0))),
        });
        assert_eq!(
            kinds(&out),
            ["event:turn_started", "event:handoff_received", "call_llm"]
        );
        let out = e.apply(answer("4"));
        assert_eq!(
            kinds(&out),
            [
                "event:llm_call",
                "commit",
                "event:handoff_replied",
                "event:turn_completed",
                "finished"
            ]
        );
        let plan = commits(&out)[0];
        let reply = plan
            .handoff_reply
            .as_ref()
            .expect("the reply rides on the final commit");
        assert_eq!((reply.ok, reply.text.as_str()), (true, "4"));
        assert_eq!(
            plan.state.handoff, None,
            "the turn is over: no origin stays"
        );
        // A failed one says so.
        let mut e = Engine::new(EngineConfig {
            max_rounds: 1,
            ..collaborating()
        });
        e.apply(Input::Message {
            seq: 1,
            content: "t".into(),
            handoff: Some(origin(&["x"], None)),
        });
        e.apply(llm(vec![read_call("r")], 0.0));
        let out = e.apply(result("r"));
        let reply = commits(&out)[0].handoff_reply.clone().unwrap();
        assert!(!reply.ok && reply.text.contains("max_turns"), "{reply:?}");
    }

    #[test]
    fn a_delegated_turn_spends_at_most_what_its_caller_had_left() {
        let mut e = Engine::new(config());
        e.apply(Input::Message {
            seq: 1,
            content: "t".into(),
            handoff: Some(origin(&["x"], Some(0.01))),
        });
        let out = e.apply(llm(vec![read_call("r")], 0.02));
        assert!(kinds(&out).contains(&"event:budget_exceeded".to_string()));
        let reply = commits(&out).last().unwrap().handoff_reply.clone().unwrap();
        assert!(
            !reply.ok && reply.text.contains("calling agent"),
            "{reply:?}"
        );
    }

    #[test]
    fn collaborators_spending_over_the_budget_stops_the_turn_keeping_their_answers() {
        let mut e = Engine::new(collaborating());
        e.apply(message(1));
        let out = e.apply(llm(vec![ask("1", "b", "x"), ask("2", "c", "y")], 0.0));
        let calls = delegations(&out);
        let out = e.apply(Input::Delegated(vec![
            reply(&calls[0], "done b", 0.08),
            reply(&calls[1], "done c", 0.08),
        ]));
        assert!(kinds(&out).contains(&"event:budget_exceeded".to_string()));
        let r = results(&e);
        assert_eq!(
            r[0],
            ("done b".to_string(), false),
            "what ran keeps its answer"
        );
        assert_eq!(r[1], ("done c".to_string(), false));
    }

    #[test]
    fn a_restarted_caller_re_attaches_to_the_same_handoffs_even_in_truncate_mode() {
        let cfg = collaborating();
        assert_eq!(cfg.resume, ResumeMode::Truncate);
        let mut first = Engine::new(cfg.clone());
        first.apply(message(1));
        let out = first.apply(llm(vec![ask("1", "b", "x"), ask("2", "c", "y")], 0.0));
        let calls = delegations(&out);
        // Crash while waiting: the batch's intents are stored.
        let mut restored = stored(&first);
        restored.ledger = calls
            .iter()
            .map(|d| record(&d.call, ToolCallStatus::Intent, 1))
            .collect();
        let mut second = second_boot(cfg.clone());
        let out = second.apply(Input::Restored(Some(restored.clone())));
        assert_eq!(
            kinds(&out),
            ["event:resume", "event:turn_resumed", "commit", "delegate:2"],
            "no cut: the same calls are handed over again (the API finds them filed)"
        );
        let again = delegations(&out);
        assert_eq!(
            again.iter().map(|d| d.call.key.clone()).collect::<Vec<_>>(),
            calls.iter().map(|d| d.call.key.clone()).collect::<Vec<_>>()
        );
        assert!(
            again
                .iter()
                .all(|d| d.call.decision == Decision::OutcomeUnknown)
        );
        assert!(
            commits(&out)[0].intents.is_empty(),
            "their intents are stored already"
        );
        // One answered and recorded before the crash: replayed, the other re-attached.
        restored.ledger[0] = record(&calls[0].call, ToolCallStatus::Completed, 1);
        let mut third = Engine::new(EngineConfig { epoch: 3, ..cfg });
        let out = third.apply(Input::Restored(Some(restored)));
        assert_eq!(
            kinds(&out),
            ["event:resume", "event:turn_resumed", "run:ask_b"],
            "the recorded answer is replayed first"
        );
        let out = third.apply(Input::Tool {
            call_id: "1".into(),
            content: "recorded".into(),
            is_error: false,
        });
        assert_eq!(kinds(&out), ["commit", "delegate:1"]);
        assert_eq!(delegations(&out)[0].agent, "c");
    }

    #[test]
    fn a_gated_handoff_waits_for_a_person_and_a_rejected_one_is_never_handed_over() {
        let cfg = EngineConfig {
            approval: Some(HumanApproval {
                enabled: true,
                actions: vec![ninetrix_agentfile::ApprovalAction::Tool("ask_b".into())],
                effects: Vec::new(),
                timeout_secs: 3600,
                notify_url: None,
                notify_secret: None,
            }),
            ..collaborating()
        };
        let mut e = Engine::new(cfg);
        e.apply(message(1));
        let out = e.apply(llm(vec![ask("1", "b", "x"), ask("2", "c", "y")], 0.0));
        assert_eq!(kinds(&out), ["commit", "event:llm_call", "await:1"]);
        let asks = ask_of(&out);
        assert_eq!(asks[0].tool, "ask_b");
        // Rejected: only the ungated call is handed over.
        let out = e.apply(Input::Approvals(vec![settled(
            &asks[0],
            ApprovalStatus::Rejected,
        )]));
        assert_eq!(kinds(&out), ["commit", "commit", "delegate:1"]);
        assert_eq!(delegations(&out)[0].agent, "c");
        assert!(results(&e)[0].1, "the rejected call's answer is an error");
    }
}
