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
//!
//! ## Where the code is
//!
//! This file holds the engine's types, its public API ([`Engine::apply`]) and what every concern
//! shares: the position of the current turn, the plan of each call with its ledger decision, and
//! the commit. Each concern has a file of its own, an `impl Engine` block with its tests beside
//! it, layered so that no two of them refer to each other:
//! - `restore` — a restored thread: history repair, the give-up of a crash-looping turn, resume;
//! - `turn` — a turn's inputs (message, model response, tool result, collaborators' answers),
//!   the decision of its next step (`advance`), and its end;
//! - `approvals` — requests to people: which calls ask, what a decision answers;
//! - `delegation` — handoffs to collaborators: the chain, the batch, the answers;
//! - `compaction` — the context window: when a round compacts first, the compaction's commit,
//!   and a round the provider refused as too long;
//! - `control` — control of a running turn: a steer joins it, an interrupt or a cancel stops it;
//! - `rewind` — a rewind between turns: the history of the turn gone back to, its commit;
//! - `replay` — replay mode: each call answered from the recorded turn (or run live, a read),
//!   never by people or collaborators.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ninetrix_agentfile::{
    Effect as EffectClass, HandoffTarget, HumanApproval, ResumeMode, ToolSpec, tools,
};
use ninetrix_proto::api::{
    Approval, ApprovalKind, BudgetPolicy, BudgetRaise, BudgetSpent, CheckpointState, CommitIntent,
    CommitOutcome, HandoffOrigin, HandoffReply, OnBudgetExceeded, ThreadStatus, ToolCallRecord,
};
use ninetrix_proto::events::{ReplayAnswered, StoppedBy, TraceEvent};
use ninetrix_proto::snapshots::SnapshotRef;
use ninetrix_proto::{Block, Message, Role, ThreadId};

pub use budget::BUDGET_TOOL;
pub use control::{not_run, stopped_while_running};
pub use rewind::{RewindTo, common_prefix};

use crate::context;
use crate::ledger::{self, Decision, Entry};
use crate::recording::Replay;
use ninetrix_agentfile::context::ContextPolicy;

mod approvals;
mod budget;
mod compaction;
mod control;
mod delegation;
mod replay;
mod restore;
mod rewind;
#[cfg(test)]
mod testkit;
mod turn;

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
    /// How the history is kept inside the model's context window (`runtime.context`).
    pub context: ContextPolicy,
    /// The budgets beyond one run that the checkpoint API keeps (`governance.
    /// max_budget_per_session`, `max_budget_per_day`, `max_pool_budget_per_day`): each one's
    /// amount is what a person is asked to raise it by.
    pub budgets: Option<BudgetPolicy>,
    /// What a spent budget beyond the run does (`governance.on_budget_exceeded`).
    pub on_budget_exceeded: OnBudgetExceeded,
    /// Replay mode (`Config.replay`): the recorded turns every call of a known tool is answered
    /// from, by `ninetrix_proto::replay::answer` (see `replay`). `None`: an ordinary thread.
    pub replay: Option<Arc<Replay>>,
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
    /// An interrupt or a cancel waiting in the inbox for the interrupted turn: it is stopped
    /// instead of resumed (the runner that took the control died before the turn ended).
    pub stop: Option<StoppedBy>,
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
// An input is built and applied at once, never stored or queued; the large one (a restored
// thread) comes once per boot, so boxing it would buy nothing.
#[allow(clippy::large_enum_variant)]
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
    /// The provider refused the round's input as longer than the model's context window.
    ContextTooLong(String),
    /// The checkpoint API refused the round's model call: a budget beyond the run is spent
    /// (the call was not made).
    OverBudget(BudgetSpent),
    /// An instruction from the inbox, taken between turns.
    Control {
        /// Its inbox seq.
        seq: u64,
        /// What to do.
        control: ninetrix_proto::api::Control,
        /// Who sent it (for a cancel).
        by: String,
        /// The turn a rewind goes back to.
        to_turn: Option<u64>,
    },
    /// What an [`Effect::FetchTurnPoint`] found: the turn gone back to with its staged files,
    /// or why the rewind cannot be done (then nothing changes).
    Rewind(Result<RewindTo, String>),
    /// A message sent with mode `steer` while the turn runs: it joins the turn before its next
    /// model round (nothing, between turns: it is then the next turn's message).
    Steer {
        /// Its inbox seq.
        seq: u64,
        /// Its text.
        content: String,
    },
    /// An interrupt or a cancel for the running turn: it stops once the call in flight (if
    /// any) is answered.
    Stop(StoppedBy),
    /// An [`Effect::Compact`] was carried out.
    Compacted(Compacted),
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

/// What an [`Effect::Compact`] came to.
#[derive(Clone, Debug, PartialEq)]
pub struct Compacted {
    /// The thread's version when it was carried out.
    pub at_version: u64,
    /// The summary, or why it could not be written (`None`: none was asked for).
    pub summary: Option<Result<Summary, String>>,
}

/// A summary the summarising model wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Its text.
    pub text: String,
    /// The model that wrote it.
    pub model: String,
    /// What it cost (counted in the turn's spending).
    pub usage: CallUsage,
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
/// and waits for the reply — or, for a remote A2A agent, sends it the task and follows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Delegation {
    /// The call (`ask_<agent>`), its ledger key and decision.
    pub call: PlannedCall,
    /// The collaborator.
    pub agent: String,
    /// For a remote A2A agent: where it is (`None`: an agent of the pool).
    pub remote: Option<ninetrix_agentfile::A2aRemote>,
    /// When the call's intent was stored, if an earlier runner stored it (`None`: it is this
    /// runner's own, stored just now): the wait for a remote agent runs from it.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
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
    /// For a request to raise a spent budget (kind `budget`): the raise asked for.
    pub raise: Option<BudgetRaise>,
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
    /// On the commit that ends a turn: that turn (the driver adds the workspace's snapshot and
    /// sends the turn's end with it).
    pub ends_turn: Option<u64>,
}

/// Something the driver must do.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Commit a durable step (before doing anything that depends on it). The events that
    /// directly follow it in the same list are true once it is stored (a response's `llm_call`,
    /// a turn's `turn_completed`): the driver stores them in the same transaction.
    Commit(Box<CommitPlan>),
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
    /// Compact the history before the next round: write the summary (when the plan is
    /// `summarize`: call the summarising model with `input`), then answer with
    /// [`Input::Compacted`]. Nothing is stored until the engine's commit after it.
    Compact {
        /// What to compact.
        plan: context::Plan,
        /// The summarising call's input (`None`: no model call, as for `clear_tool_results`).
        input: Option<Vec<Message>>,
    },
    /// Fetch what a rewind goes back to (the end of `to_turn`) and stage its files, then
    /// answer with [`Input::Rewind`].
    FetchTurnPoint {
        /// The turn.
        to_turn: u64,
    },
    /// Make the workspace equal the snapshot staged for the rewind just committed (and mark
    /// it so).
    RestoreWorkspace(SnapshotRef),
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
    /// Estimated tokens of what every round sends besides the history: the system prompt and
    /// the tool definitions (the driver's estimate).
    overhead: u64,
    /// The current round was refused as too long and compacted: a second refusal ends the turn.
    overflowed: bool,
    /// The compaction the driver is carrying out.
    compacting: Option<context::Plan>,
    /// The turn in which a due compaction that could not be made was last reported.
    skip_said: u64,
    /// What is stopping the current turn (an interrupt or a cancel taken while a call ran).
    stopping: Option<StoppedBy>,
    /// The current turn's steers: each one's inbox seq and position in the history.
    steered: Vec<(u64, usize)>,
    /// The turn ends without its input, stored or not (a budget stopped it before the model
    /// answered it): see [`Engine::end_turn`].
    forget_input: bool,
    /// The turn a rewind taken from the inbox goes back to, while the driver fetches it.
    rewinding: Option<u64>,
    /// Replay mode: the current turn's calls (by call ID) answered with a result taken from the
    /// recording (`recorded` or `recorded_answer`), for the driver's kill point.
    from_recording: HashSet<String>,
}

fn event(event: TraceEvent) -> Effect {
    Effect::Event(event)
}

/// A short preview of a text for events and logs.
pub fn preview(text: &str, max: usize) -> String {
    ninetrix_proto::text::preview(text, max)
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
    /// Replay mode: a call answered by the oracle without running (from the recording, or not
    /// run), with the `replay_answered` event that says so.
    Replayed {
        call_id: String,
        content: String,
        is_error: bool,
        answered: ReplayAnswered,
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
            overhead: 0,
            overflowed: false,
            compacting: None,
            skip_said: 0,
            stopping: None,
            steered: Vec::new(),
            forget_input: false,
            rewinding: None,
            from_recording: HashSet::new(),
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
            Input::ContextTooLong(why) => self.on_overflow(&why),
            Input::OverBudget(spent) => self.on_over_budget(spent),
            Input::Control {
                seq,
                control,
                by,
                to_turn,
            } => self.on_control(seq, control, by, to_turn),
            Input::Rewind(found) => self.on_rewind(found),
            Input::Steer { seq, content } => self.on_steer(seq, content),
            Input::Stop(by) => self.on_stop(by),
            Input::Compacted(done) => self.on_compacted(done),
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
        Effect::Commit(Box::new(CommitPlan {
            truncate_to: cut.map(|c| c as u64),
            append,
            state: self.state.clone(),
            intents: std::mem::take(&mut self.intents),
            outcomes: std::mem::take(&mut self.outcomes),
            approvals: std::mem::take(&mut self.asks),
            handoff_reply: None,
            ends_turn: None,
        }))
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
        if let Some(replay) = &self.cfg.replay {
            let asked = replay::Asked {
                anchor,
                message: a,
                index,
                occurrence,
                effect,
                handoff: spec.handoff.is_some(),
            };
            if let Some(answered) = self.replay_answer(replay, &asked, &call_id, &name, &args) {
                return answered;
            }
        }
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

    /// The budget of the current turn: the agent's, or what the caller's turn had left when
    /// the task was handed over, whichever is less.
    fn budget(&self) -> Option<f64> {
        let left = self.state.handoff.as_ref().and_then(|h| h.budget_usd);
        match (self.cfg.budget, left) {
            (Some(own), Some(left)) => Some(own.min(left)),
            (own, left) => own.or(left),
        }
    }

    /// The collaborator behind a tool the model calls, if it is an `ask_<agent>`.
    fn handoff_target(&self, name: &str) -> Option<&HandoffTarget> {
        self.spec_of(name).and_then(|s| s.handoff.as_ref())
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
        self.earlier_calls(anchor, message, index, |n2, a2| {
            n2 == name && ledger::canonical_json(a2) == canonical
        })
    }

    /// How many calls of this turn before call `index` of message `message` (the turn starts
    /// at `anchor`) `pick` picks (by tool and arguments).
    fn earlier_calls(
        &self,
        anchor: usize,
        message: usize,
        index: usize,
        pick: impl Fn(&str, &serde_json::Value) -> bool,
    ) -> usize {
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
                    && pick(n2, a2)
                {
                    n += 1;
                }
            }
        }
        n
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
